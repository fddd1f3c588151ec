"""``--norm-type rmsnorm``: RMSNorm (Zhang & Sennrich 2019, Eq. 4) in every layer norm."""

import pytest
import torch
from torch import nn

from fairseq_qknorm.modules import RMSNorm, ScaleNorm
from fairseq_qknorm.modules.rms_norm import RMS_NORM_EPS

from conftest import TINY, build_model

RMS_ARCH = "transformer_prenorm_fixnorm_rmsnorm_proxy"


def rms_reference(x, g, eps=RMS_NORM_EPS):
    """Eq. 4 of Zhang & Sennrich as a float64 loop: a_i / RMS(a) * g_i, RMS = sqrt(mean a^2)."""
    x, g = x.detach().double().reshape(-1, x.size(-1)), g.detach().double()
    out = torch.empty_like(x)
    for r in range(x.size(0)):
        ms = sum(float(v) ** 2 for v in x[r]) / x.size(1)
        for i in range(x.size(1)):
            out[r, i] = float(x[r, i]) / (ms + eps) ** 0.5 * float(g[i])
    return out


def test_rmsnorm_equals_the_float64_formula_and_its_gradient():
    gen = torch.Generator().manual_seed(0)
    norm = RMSNorm(12)
    assert norm.weight.shape == (12,) and torch.equal(norm.weight, torch.ones(12))  # g0 = 1
    assert not hasattr(norm, "bias") or norm.bias is None  # no bias (Eq. 4)
    with torch.no_grad():
        norm.weight.copy_(torch.rand(12, generator=gen) + 0.5)
    x = torch.randn(2, 3, 12, generator=gen) * 3 + 1  # a mean: not subtracted
    out = norm(x)
    assert out.shape == x.shape and out.dtype == torch.float32
    torch.testing.assert_close(out.double().reshape(6, 12), rms_reference(x, norm.weight))
    # float64 module: gradients equal finite differences
    n64 = RMSNorm(5).double()
    with torch.no_grad():
        n64.weight.copy_(torch.tensor([0.5, 1.0, 1.5, 2.0, -1.0]))
    x64 = torch.randn(4, 5, generator=gen, dtype=torch.float64, requires_grad=True)
    w64 = n64.weight.detach().clone().requires_grad_()
    call = torch.func.functional_call
    assert torch.autograd.gradcheck(lambda t, w: call(n64, {"weight": w}, (t,)), (x64, w64))
    torch.testing.assert_close(n64(x64), rms_reference(x64.detach(), n64.weight).to(x64))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_rmsnorm_in_low_precision_computes_in_float32(dtype):
    """Tiny rows (a mean of squares that underflows fp16), zero rows and large rows (one that
    overflows fp16): finite and equal to the float64 formula of the same rounded inputs."""
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(5, 64, generator=gen) * 3e-3
    x[1] = 0.0
    x[2] *= 1e5  # components ~300: mean of squares ~9e4 > 65504
    xl = x.to(dtype)
    tol = dict(atol=1e-2, rtol=1e-2) if dtype == torch.float16 else dict(atol=3e-2, rtol=3e-2)
    for norm in (RMSNorm(64).to(dtype), RMSNorm(64)):  # the model cast, or autocast's fp32 g
        out = norm(xl)
        assert out.dtype == dtype and torch.isfinite(out.float()).all()
        ref = rms_reference(xl, norm.weight)
        torch.testing.assert_close(out.double(), ref, **tol)
    assert float(out[1].abs().max()) == 0.0  # a zero row stays zero (eps)
    # the unit rows really have RMS 1
    assert float(out[2].double().pow(2).mean().sqrt()) == pytest.approx(1.0, rel=2e-2)


def test_rmsnorm_arch_has_rmsnorm_in_every_norm(toy_task):
    model, args = build_model(toy_task, RMS_ARCH, TINY)
    assert args.norm_type == "rmsnorm" and args.fix_norm and not args.qk_norm
    assert args.encoder_normalize_before and args.decoder_normalize_before
    norms = [m for m in model.modules() if isinstance(m, (RMSNorm, ScaleNorm, nn.LayerNorm))]
    assert len(norms) == 5 * 2 + 2  # 2 per encoder layer, 3 per decoder layer, 2 final
    assert all(type(m) is RMSNorm for m in norms)
    assert model.encoder.layer_norm.normalized_shape == (16,)
    # the flag on another arch, and the hub-style state-dict round trip
    model2, _ = build_model(toy_task, "transformer_twt_proxy", TINY + ["--norm-type", "rmsnorm"])
    assert not any(isinstance(m, (ScaleNorm, nn.LayerNorm)) for m in model2.modules())
    keys = [k for k in model2.state_dict() if "layer_norm" in k]
    assert keys and all(k.endswith(".weight") for k in keys)  # no bias, g per channel
    model2.load_state_dict(model.state_dict())


def test_rmsnorm_model_incremental_decoding_equals_full(toy_task):
    from test_model import _decode_full_and_incremental

    model, _ = build_model(toy_task, RMS_ARCH, TINY)
    with torch.no_grad():  # gains away from 1, so that they matter
        for m in model.modules():
            if isinstance(m, RMSNorm):
                m.weight.uniform_(0.5, 1.5)
    full, incremental = _decode_full_and_incremental(model, toy_task)
    torch.testing.assert_close(incremental, full, atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.slow
def test_rmsnorm_model_padded_batch_is_finite_in_low_precision(toy_task, dtype):
    model, _ = build_model(toy_task, RMS_ARCH, TINY)
    ref_model = build_model(toy_task, RMS_ARCH, TINY)[0]
    ref_model.load_state_dict(model.state_dict())
    model = model.eval().to(dtype)
    d = toy_task.target_dictionary
    src = torch.randint(d.nspecial, len(d), (2, 6), generator=torch.Generator().manual_seed(2))
    src[1, :3] = d.pad()
    src[:, -1] = d.eos()
    prev = torch.full((2, 3), d.eos())
    with torch.no_grad():
        out, _ = model(src, (src != d.pad()).sum(1), prev)
        ref, _ = ref_model.eval()(src, (src != d.pad()).sum(1), prev)
    assert torch.isfinite(out.float()).all()
    torch.testing.assert_close(out.float().log_softmax(-1), ref.log_softmax(-1), atol=0.2, rtol=0)
