"""``--sigma-reparam``: σReparam (Zhai et al. 2023, Eq. 3), ``W_hat = gamma / sigma(W) * W``."""

import pytest
import torch
from torch import nn
from torch.nn.utils import parametrize

from fairseq_qknorm.modules import SigmaReparam, apply_sigma_reparam

from conftest import PLUGIN_DIR, TINY, build_model, run_cli, tiny_model, tiny_training

ARCH = "transformer_qknorm_paper_proxy"
QK = ["--qk-norm", "--qk-norm-scale", "5"]


def reparam_linear(out_f=5, in_f=7, seed=0, dtype=torch.float64):
    torch.manual_seed(seed)
    lin = nn.Linear(in_f, out_f).to(dtype)
    w0 = lin.weight.detach().clone()
    apply_sigma_reparam(nn.Sequential(lin))
    return lin, w0


def reparam_of(lin):
    return lin.parametrizations.weight[0]


def test_identity_at_init_and_exact_sigma_after_power_iteration():
    """At init gamma = sigma(W) and W_hat = W (the paper's init); each training forward makes
    one power-iteration step, after which sigma converges to torch.linalg.svdvals' largest
    value and W_hat to gamma / sigma_max * W, both computed here in float64."""
    lin, w0 = reparam_linear()
    p = reparam_of(lin)
    s_max = torch.linalg.svdvals(w0)[0]
    assert float(p.gamma.detach()) == pytest.approx(float(s_max), rel=1e-6)
    torch.testing.assert_close(lin.weight, w0, atol=1e-6, rtol=1e-6)
    q1, _ = torch.linalg.qr(torch.randn(5, 5, dtype=torch.float64))
    q2, _ = torch.linalg.qr(torch.randn(7, 5, dtype=torch.float64))
    with torch.no_grad():  # W moves to one with singular values 4, 2, 1, 0.5, 0.25
        lin.parametrizations.weight.original.copy_(
            q1 @ torch.diag(4.0 / 2.0 ** torch.arange(5.0)).double() @ q2.T
        )
        p.gamma.fill_(3.0)
    w = lin.parametrizations.weight.original.detach().clone()
    x = torch.randn(4, 7, dtype=torch.float64)
    lin.train()
    u_before = p.u.clone()
    lin(x)  # one step: u <- normalize(W^T normalize(W u))
    step = w.T @ torch.nn.functional.normalize(w @ u_before, dim=0)
    torch.testing.assert_close(p.u, step / step.norm())
    for _ in range(60):  # error (2 / 4)^(2 n)
        lin(x)
    sigma = torch.linalg.svdvals(w)[0]
    assert float(sigma) == pytest.approx(4.0)
    torch.testing.assert_close(p.sigma(w), sigma, atol=1e-10, rtol=1e-10)
    out = lin(x)
    ref = x @ (3.0 / sigma * w).T + lin.bias.detach()
    torch.testing.assert_close(out, ref, atol=1e-10, rtol=1e-10)
    # eval: u is read, never updated
    lin.eval()
    u = p.u.clone()
    with torch.no_grad():
        lin.parametrizations.weight.original.mul_(1.5)
    lin(x)
    assert torch.equal(p.u, u)


def test_gradients_flow_through_w_and_gamma_not_u():
    """d/dW and d/dgamma of gamma * W / ||W u|| (u a constant), float64 autograd reference."""
    lin, _ = reparam_linear(seed=1)
    p = reparam_of(lin)
    with torch.no_grad():
        p.gamma.fill_(2.5)
    lin.eval()  # no step: u is the constant of the formula
    u = p.u.clone()
    x = torch.randn(3, 7, dtype=torch.float64)
    (lin(x) ** 2).sum().backward()
    w = lin.parametrizations.weight.original.detach().clone().requires_grad_()
    gamma = torch.tensor(2.5, dtype=torch.float64, requires_grad=True)
    w_hat = gamma * w / torch.sqrt(((w @ u) ** 2).sum())
    ((x @ w_hat.T + lin.bias.detach()) ** 2).sum().backward()
    torch.testing.assert_close(lin.parametrizations.weight.original.grad, w.grad)
    torch.testing.assert_close(p.gamma.grad.double(), gamma.grad)
    assert not p.u.requires_grad and p.gamma.dtype == torch.float32
    with pytest.raises(ValueError, match="2-D weight"):
        SigmaReparam(torch.zeros(3))


def _batch(task, seed=0):
    d = task.target_dictionary
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(d.nspecial, len(d), (3, 6), generator=g)
    src[1, :2] = d.pad()
    src[:, -1] = d.eos()
    prev = torch.randint(d.nspecial, len(d), (3, 5), generator=g)
    prev[:, 0] = d.eos()
    return src, (src != d.pad()).sum(1), prev


def _sigma_model(task, extra=()):
    model, args = build_model(task, ARCH, TINY + QK + ["--sigma-reparam", *extra])
    with torch.no_grad():  # gamma away from sigma(W): W_hat != W, so that it matters
        for i, m in enumerate(m for m in model.modules() if isinstance(m, SigmaReparam)):
            m.gamma.mul_(0.6 + 0.05 * (i % 9))
    return model, args


@pytest.mark.slow
def test_every_linear_of_the_layers_is_reparametrized_and_used_on_every_path(toy_task):
    """Training mode (fused SDPA attention), eval mode and a plain model whose weights are the
    float64-computed gamma / ||W u|| * W give the same output (dropout 0)."""
    model, args = _sigma_model(toy_task)
    assert args.sigma_reparam
    linears = [n for n, m in model.named_modules() if isinstance(m, nn.Linear)]
    reparam = [n for n in linears if parametrize.is_parametrized(model.get_submodule(n))]
    # 2 layers: encoder 4 attention projections + 2 FFN, decoder 8 + 2; not the output layer
    assert len(reparam) == 2 * 6 + 2 * 10 and "decoder.output_projection" not in reparam
    assert all(n.startswith(("encoder.layers.", "decoder.layers.")) for n in reparam)
    src, lengths, prev = _batch(toy_task)
    model.train()
    out_train, _ = model(src, lengths, prev)  # one power step per layer, then W_hat
    model.eval()
    with torch.no_grad():
        out_eval, _ = model(src, lengths, prev)
    torch.testing.assert_close(out_train.detach(), out_eval, atol=1e-5, rtol=1e-5)
    plain, _ = build_model(toy_task, ARCH, TINY + QK)
    state = {}
    for k, v in model.state_dict().items():
        if ".parametrizations.weight." in k:
            if k.endswith(".original"):
                prefix = k[: -len(".parametrizations.weight.original")]
                u = model.state_dict()[prefix + ".parametrizations.weight.0.u"].double()
                gamma = model.state_dict()[prefix + ".parametrizations.weight.0.gamma"].double()
                w = v.double()
                state[prefix + ".weight"] = (gamma * w / (w @ u).norm()).float()
            continue
        state[k] = v
    plain.load_state_dict(state)
    with torch.no_grad():
        out_plain, _ = plain.eval()(src, lengths, prev)
    torch.testing.assert_close(out_eval, out_plain, atol=1e-5, rtol=1e-5)


def test_sigma_reparam_incremental_decoding_equals_full(toy_task):
    from test_model import _decode_full_and_incremental

    model, _ = _sigma_model(toy_task)
    full, incremental = _decode_full_and_incremental(model, toy_task)
    torch.testing.assert_close(incremental, full, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.slow
def test_sigma_reparam_low_precision(toy_task, dtype):
    """A model cast to fp16/bf16 (u and gamma too) and a bf16-autocast training step: finite,
    close to float32, gradients finite; sigma computed in float32."""
    model, _ = _sigma_model(toy_task)
    src, lengths, prev = _batch(toy_task, seed=3)
    with torch.no_grad():
        ref, _ = model.eval()(src, lengths, prev)
    low = build_model(toy_task, ARCH, TINY + QK + ["--sigma-reparam"])[0]
    low.load_state_dict(model.state_dict())
    low = low.eval().to(dtype)
    with torch.no_grad():
        out, _ = low(src, lengths, prev)
    assert torch.isfinite(out.float()).all()
    torch.testing.assert_close(out.float().log_softmax(-1), ref.log_softmax(-1), atol=0.3, rtol=0)
    model.train()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out, _ = model(src, lengths, prev)
    out.float().logsumexp(-1).sum().backward()
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    assert grads and all(torch.isfinite(g).all() for g in grads)
    assert all(m.u.dtype == torch.float32 for m in model.modules() if isinstance(m, SigmaReparam))


@pytest.mark.slow
def test_sigma_reparam_trains_validates_and_loads_through_the_hub(toy_data, tmp_path):
    """fairseq-train (training + validation) with --sigma-reparam, then the hub interface:
    the loaded model holds the checkpoint's trained gamma and u and translates."""
    from fairseq_qknorm.models.transformer_qknorm import TransformerQKNormModel

    _, bin_dir = toy_data
    run_cli(
        ["fairseq-train", bin_dir, "--user-dir", PLUGIN_DIR, "--arch", ARCH, *QK,
         "--sigma-reparam", *tiny_model(layers=1, dim=16), *tiny_training("3e-3", "800"),
         "--max-update", "6", "--required-batch-size-multiple", "1", "--save-dir", tmp_path,
         "--no-epoch-checkpoints", "--log-format", "simple"]
    )  # fmt: skip
    state = torch.load(tmp_path / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    key = "encoder.layers.0.fc1.parametrizations.weight.0"
    gamma, u = state["model"][key + ".gamma"], state["model"][key + ".u"]
    w = state["model"]["encoder.layers.0.fc1.parametrizations.weight.original"]
    assert u.shape == (16,) and float(u.norm()) == pytest.approx(1.0, abs=1e-5)
    # a few steps of power iteration track sigma(W) of the trained W closely
    assert float((w @ u).norm()) == pytest.approx(float(torch.linalg.svdvals(w)[0]), rel=0.05)
    hub = TransformerQKNormModel.from_pretrained(
        str(tmp_path), checkpoint_file="checkpoint_last.pt", data_name_or_path=str(bin_dir)
    )
    hub.eval()
    fc1 = hub.models[0].encoder.layers[0].fc1
    assert torch.equal(fc1.parametrizations.weight[0].gamma.detach(), gamma)
    assert torch.equal(fc1.parametrizations.weight[0].u, u)
    out = hub.translate(["w1 w2 w3", "w7 w8"], beam=2)
    assert len(out) == 2 and all(isinstance(o, str) for o in out)
