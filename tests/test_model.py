"""Model-level tests: norms, named archs, incremental decoding, registration."""

import importlib
import math

import pytest
import torch
from torch.nn import LayerNorm  # what fairseq's LayerNorm() builds on CPU

from conftest import PLUGIN_DIR, build_model
from fairseq_qknorm.models.transformer_qknorm import TransformerQKNormModel
from fairseq_qknorm.modules import (
    FixNormEmbedding,
    FixNormLinear,
    QKNormMultiheadAttention,
    ScaleNorm,
    qk_norm_initial_scale,
)

TINY = ["--encoder-embed-dim", "16", "--decoder-embed-dim", "16",
        "--encoder-ffn-embed-dim", "32", "--decoder-ffn-embed-dim", "32",
        "--encoder-layers", "2", "--decoder-layers", "2",
        "--encoder-attention-heads", "2", "--decoder-attention-heads", "2",
        "--dropout", "0"]

NAMED_ARCHS = {
    # arch: (layers, heads, dim, ffn, dropout, norm_type, qk_norm)
    "transformer_twt": (6, 8, 512, 2048, 0.3, "scalenorm", False),
    "transformer_qknorm_paper": (6, 8, 512, 2048, 0.3, "layernorm", True),
    "transformer_twt_small": (4, 4, 512, 2048, 0.4, "scalenorm", False),
    "transformer_qknorm_paper_small": (4, 4, 512, 2048, 0.4, "layernorm", True),
    "transformer_twt_proxy": (3, 4, 256, 1024, 0.3, "scalenorm", False),
    "transformer_qknorm_paper_proxy": (3, 4, 256, 1024, 0.3, "layernorm", True),
}


# ---------------------------------------------------------------- formulas
def test_g0_formula():
    assert qk_norm_initial_scale(length=79) == pytest.approx(math.log2(6162))
    assert qk_norm_initial_scale(length=79) == pytest.approx(12.589, abs=1e-3)  # paper's gl->en
    assert qk_norm_initial_scale(scale=7.5) == 7.5
    for bad in (dict(), dict(length=79, scale=3.0), dict(length=1), dict(length=1.5), dict(length=1.7), dict(length=-5), dict(length=1e200),
                dict(length=float("nan")), dict(scale=0.0), dict(scale=-2.0)):
        with pytest.raises(ValueError):
            qk_norm_initial_scale(**bad)


def test_scalenorm_output_norm_equals_g():
    torch.manual_seed(0)
    norm = ScaleNorm(64)
    assert float(norm.scale) == pytest.approx(8.0)  # sqrt(d)
    x = torch.randn(5, 3, 64) * 7
    torch.testing.assert_close(norm(x).norm(dim=-1), torch.full((5, 3), 8.0))
    with torch.no_grad():
        norm.scale.fill_(2.5)
    torch.testing.assert_close(norm(x).norm(dim=-1), torch.full((5, 3), 2.5))
    # eps clamp: a zero vector stays zero (no NaN)
    assert torch.equal(norm(torch.zeros(1, 64)), torch.zeros(1, 64))
    # float64 keeps its precision
    x64 = torch.randn(4, 64, dtype=torch.float64)
    torch.testing.assert_close(norm.double()(x64).norm(dim=-1), torch.full((4,), 2.5, dtype=torch.float64))
    norm.float()
    # fp16: fairseq zeroes pad positions; g/||x|| (~1e6) must not overflow to inf (0*inf=NaN)
    assert torch.equal(norm.half()(torch.zeros(2, 64, dtype=torch.float16)),
                       torch.zeros(2, 64, dtype=torch.float16))
    small = torch.randn(3, 64) * 1e-3
    torch.testing.assert_close(norm.half()(small.half()).float().norm(dim=-1),
                               torch.full((3,), 2.5), rtol=2e-3, atol=0)
    norm.float()
    # bf16: norm computed in float32, no overflow
    big = (torch.randn(4, 64) * 1e3).to(torch.bfloat16)
    torch.testing.assert_close(norm(big).float().norm(dim=-1), torch.full((4,), 2.5), rtol=2e-2, atol=0)


@pytest.mark.parametrize("clamped", [False, True])
def test_scalenorm_gradients_match_finite_differences(clamped):
    """ScaleNorm's hand-written backward against float64 finite differences (gradcheck),
    for x and g, including a row whose norm is below eps (clamped: no norm gradient)."""
    torch.manual_seed(0)
    norm = ScaleNorm(8).double()
    x = torch.randn(3, 4, 8, dtype=torch.float64)
    if clamped:
        x[0, 1] = 1e-7  # ||x|| < eps = 1e-5
    x.requires_grad_()
    assert torch.autograd.gradcheck(lambda t, g: ScaleNorm.forward(_with_scale(norm, g), t),
                                    (x, norm.scale.detach().clone().requires_grad_()))
    # and against the composite formula by autograd, in float32
    x32 = x.detach().float().requires_grad_()
    ref = x32.detach().clone().requires_grad_()
    g = torch.tensor(2.0, requires_grad=True)
    norm32 = ScaleNorm(8, scale=2.0)
    dy = torch.randn(3, 4, 8)
    norm32(x32).backward(dy)
    (ref * (g / torch.linalg.vector_norm(ref, dim=-1, keepdim=True).clamp_min(1e-5))).backward(dy)
    torch.testing.assert_close(x32.grad, ref.grad)
    torch.testing.assert_close(norm32.scale.grad, g.grad)
    # second derivatives are not implemented: a clear error, never a wrong number
    x2 = torch.randn(2, 8, requires_grad=True)
    (gx,) = torch.autograd.grad(norm32(x2).pow(2).sum() + norm32(x2)[0, 0], x2, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable|does not require grad|twice"):
        gx.sum().backward()


def _with_scale(norm, g):
    """A view of ``norm`` whose scale is the tensor ``g`` (for gradcheck over g)."""
    clone = ScaleNorm(norm.dim, eps=norm.eps)
    del clone.scale
    clone.scale = g
    return clone


def test_fixnorm_embeddings_unit_norm():
    torch.manual_seed(0)
    emb = FixNormEmbedding(50, 16, padding_idx=1)
    assert float(emb.weight.abs().max()) <= 0.01  # U(-0.01, 0.01) init
    tokens = torch.tensor([[0, 5, 7], [1, 2, 49]])
    out = emb(tokens)
    norms = out.norm(dim=-1)
    torch.testing.assert_close(norms[tokens != 1], torch.ones(5))
    assert float(norms[1, 0]) == 0.0  # padding stays zero
    proj = FixNormLinear(16, 50)
    proj.weight = emb.weight
    x = torch.randn(3, 16)
    expected = x @ torch.nn.functional.normalize(emb.weight, dim=-1).T
    torch.testing.assert_close(proj(x), expected)
    # 3-D, non-contiguous input (decoder output transposed from (T, B, C)), with and
    # without autograd: rows divided by their norm, in float64
    x3 = torch.randn(4, 2, 16).transpose(0, 1)  # (2, 4, 16), strides of a transpose
    w64 = emb.weight.detach().double()
    ref = (x3.double() @ (w64 / w64.norm(dim=-1, keepdim=True).clamp_min(1e-30)).T).float()  # pad row: 0
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            out = proj(x3)
        assert out.shape == (2, 4, 50)
        torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)


def test_scalenorm_validates_its_arguments_and_input():
    for bad in (dict(dim=0), dict(dim=8.0), dict(dim=True), dict(dim=8, eps=0.0),
                dict(dim=8, eps=float("nan")), dict(dim=8, eps=-1e-5), dict(dim=8, scale=0.0),
                dict(dim=8, scale=float("inf"))):
        with pytest.raises(ValueError, match="ScaleNorm"):
            ScaleNorm(**bad)
    norm = ScaleNorm(8)
    for shape in ((3, 7), (3, 16), ()):
        with pytest.raises(ValueError, match=r"ScaleNorm\(8\) got an input of shape"):
            norm(torch.randn(shape))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_scalenorm_and_fixnorm_tiny_and_zero_vectors_in_low_precision(dtype):
    """Every norm in fp16/bf16 on tiny rows (sums of squares underflow fp16), zero rows and
    large rows (sums of squares overflow fp16): finite, and the float64 formula."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(5, 64, generator=g) * 3e-5
    x[1] = 0.0
    x[2] *= 1e7  # components ~300: sum of squares ~6e6 > 65504
    xl = x.to(dtype)
    x64 = xl.double()  # the same rounded values
    unit = x64 / x64.norm(dim=-1, keepdim=True).clamp_min(1e-5)
    tol = dict(atol=1e-2, rtol=1e-2) if dtype == torch.float16 else dict(atol=3e-2, rtol=3e-2)

    norm = ScaleNorm(64, scale=13.0).to(dtype)
    out = norm(xl)
    assert out.dtype == dtype and torch.isfinite(out.float()).all()
    torch.testing.assert_close(out.double(), 13.0 * unit, **{k: v * 13 for k, v in tol.items()})

    emb = FixNormEmbedding(5, 64, padding_idx=1).to(dtype)
    with torch.no_grad():
        emb.weight.copy_(xl)  # row 1 (padding) is the zero row
    rows = emb(torch.arange(5))
    assert rows.dtype == dtype and torch.isfinite(rows.float()).all()
    torch.testing.assert_close(rows.double(), unit, **tol)

    proj = FixNormLinear(64, 5).to(dtype)
    proj.weight = emb.weight
    h = torch.randn(3, 64, generator=g).to(dtype)
    logits = proj(h)
    assert torch.isfinite(logits.float()).all()
    torch.testing.assert_close(logits.double(), h.double() @ unit.T,
                               **{k: v * 8 for k, v in tol.items()})  # |logit| <= ||h|| ~ 8


# ------------------------------------------------------------------ archs
@pytest.mark.parametrize("arch", sorted(NAMED_ARCHS))
def test_named_arch_resolves_to_documented_values(toy_task, arch):
    layers, heads, dim, ffn, dropout, norm_type, qk_norm = NAMED_ARCHS[arch]
    extra = ["--qk-norm-length", "79"] if qk_norm else []
    model, args = build_model(toy_task, arch, extra)
    assert (args.encoder_layers, args.decoder_layers) == (layers, layers)
    assert (args.encoder_attention_heads, args.decoder_attention_heads) == (heads, heads)
    assert (args.encoder_embed_dim, args.decoder_embed_dim) == (dim, dim)
    assert (args.encoder_ffn_embed_dim, args.decoder_ffn_embed_dim) == (ffn, ffn)
    assert args.dropout == dropout
    assert args.encoder_normalize_before and args.decoder_normalize_before  # PreNorm
    assert args.fix_norm and args.share_all_embeddings
    assert args.norm_type == norm_type and args.qk_norm == qk_norm
    # the built model matches the resolved args
    attns = list(model.attention_modules().values())
    assert len(attns) == 3 * layers
    assert all(isinstance(m, QKNormMultiheadAttention) and m.qk_norm == qk_norm for m in attns)
    if qk_norm:
        assert all(float(m.qk_norm_g) == pytest.approx(math.log2(79 ** 2 - 79)) for m in attns)
    norm_cls = ScaleNorm if norm_type == "scalenorm" else LayerNorm
    other = LayerNorm if norm_type == "scalenorm" else ScaleNorm
    norms = [m for m in model.modules() if isinstance(m, (ScaleNorm, LayerNorm))]
    assert len(norms) == 5 * layers + 2  # 2 per enc layer, 3 per dec layer, 2 final (PreNorm)
    assert not any(isinstance(m, other) for m in model.modules())
    assert isinstance(model.encoder.embed_tokens, FixNormEmbedding)
    assert isinstance(model.decoder.output_projection, FixNormLinear)
    assert model.decoder.output_projection.weight is model.encoder.embed_tokens.weight


def test_flags_override_arch_defaults(toy_task):
    """Command-line flags win over arch defaults (arch functions use getattr)."""
    _, args = build_model(toy_task, "transformer_twt_proxy",
                          ["--norm-type", "layernorm", "--dropout", "0.1", "--qk-norm",
                           "--qk-norm-scale", "5"])
    assert args.norm_type == "layernorm" and args.dropout == 0.1 and args.qk_norm
    assert args.encoder_layers == 3


def test_base_arch_is_stock_postnorm(toy_task):
    model, args = build_model(toy_task, "transformer_qknorm", TINY)
    assert not args.encoder_normalize_before and not args.qk_norm and not args.fix_norm
    assert args.norm_type == "layernorm"
    assert model.encoder.layer_norm is None


def test_qknorm_needs_exactly_one_scale(toy_task):
    with pytest.raises(ValueError, match="exactly one"):
        build_model(toy_task, "transformer_qknorm_paper_proxy", TINY)
    with pytest.raises(ValueError, match="exactly one"):
        build_model(toy_task, "transformer_qknorm_paper_proxy",
                    TINY + ["--qk-norm-length", "79", "--qk-norm-scale", "3"])


# ------------------------------------------------------- incremental decoding
def _decode_full_and_incremental(model, task):
    model.eval()
    torch.manual_seed(0)
    d = task.target_dictionary
    B, S, T = 3, 6, 5
    src = torch.randint(d.nspecial, len(d), (B, S))
    src[1, :2] = d.pad()  # left-padded source
    src[:, -1] = d.eos()
    src_lengths = (src != d.pad()).sum(1)
    prev = torch.randint(d.nspecial, len(d), (B, T))
    prev[:, 0] = d.eos()
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=src_lengths)
        full, _ = model.decoder(prev, encoder_out=enc)
        state = {}
        steps = []
        for t in range(T):
            out, _ = model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)
            steps.append(out)
    return full, torch.cat(steps, dim=1)


@pytest.mark.parametrize("arch", ["transformer_qknorm"] + sorted(NAMED_ARCHS))
def test_incremental_decoding_equals_full(toy_task, arch):
    extra = list(TINY)
    if NAMED_ARCHS.get(arch, (None,) * 7)[6]:
        extra += ["--qk-norm-length", "12"]
    model, _ = build_model(toy_task, arch, extra)
    full, incremental = _decode_full_and_incremental(model, toy_task)
    torch.testing.assert_close(incremental, full, atol=1e-5, rtol=1e-4)


def test_full_model_training_step_updates_every_g(toy_task):
    model, _ = build_model(toy_task, "transformer_qknorm_paper_proxy",
                           TINY + ["--qk-norm-length", "12"])
    model.train()
    d = toy_task.target_dictionary
    src = torch.randint(d.nspecial, len(d), (4, 7))
    prev = torch.randint(d.nspecial, len(d), (4, 6))
    out, _ = model(src, torch.full((4,), 7), prev)
    out.logsumexp(-1).mean().backward()
    for name, m in model.attention_modules().items():
        assert m.qk_norm_g.grad is not None and float(m.qk_norm_g.grad.abs()) > 0, name


# ------------------------------------------------------------ registration
def test_importing_plugin_twice_does_not_reregister():
    from fairseq import utils

    import fairseq_qknorm

    importlib.import_module("fairseq_qknorm.models.transformer_qknorm")
    # fairseq's --user-dir loader on the same package after a normal import
    utils.import_user_module(type("A", (), {"user_dir": str(PLUGIN_DIR)})())
    utils.import_user_module(type("A", (), {"user_dir": str(PLUGIN_DIR)})())
    from fairseq.models import MODEL_REGISTRY

    assert MODEL_REGISTRY["transformer_qknorm"] is TransformerQKNormModel
    assert fairseq_qknorm.checkpoint_compat.install() is True


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("arch", ["transformer_twt_proxy", "transformer_qknorm_paper_proxy"])
def test_low_precision_padded_batch_is_finite(toy_task, arch, dtype):
    """fairseq zeroes pad positions before the first norm: ScaleNorm must not turn them into
    NaN under fp16 (which attention would spread over the whole sentence)."""
    model, _ = build_model(toy_task, arch, TINY + ["--qk-norm-length", "12"])
    model = model.eval().to(dtype)
    d = toy_task.target_dictionary
    src = torch.randint(d.nspecial, len(d), (2, 6))
    src[1, :3] = d.pad()
    src[:, -1] = d.eos()
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=(src != d.pad()).sum(1))
        out, _ = model.decoder(torch.full((2, 3), d.eos()), encoder_out=enc)
    assert torch.isfinite(enc["encoder_out"][0].float()).all()
    assert torch.isfinite(out.float()).all()
