"""Model-level tests: norms, named archs, the QK-norm flags, incremental decoding,
g0 logging, old checkpoints, registration."""

import importlib
import logging
import math
from pathlib import Path

import pytest
import torch
from torch.nn import LayerNorm  # what fairseq's LayerNorm() builds on CPU

from fairseq_qknorm.models.transformer_qknorm import TransformerQKNormModel
from fairseq_qknorm.modules import (
    FixNormEmbedding,
    FixNormLinear,
    QKNormMultiheadAttention,
    ScaleNorm,
    qk_norm_initial_scale,
    scaled_l2_normalize,
)

from conftest import (
    PLUGIN_DIR,
    TINY,
    assert_beam_scores_equal_full_forward,
    assert_incremental_equals_full_with_reorders,
    build_model,
    run_cli,
)

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
    for bad in (
        dict(),
        dict(length=79, scale=3.0),
        dict(length=1),
        dict(length=1.5),
        dict(length=1.7),
        dict(length=-5),
        dict(length=1e200),
        dict(length=float("nan")),
        dict(scale=0.0),
        dict(scale=-2.0),
    ):
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
    torch.testing.assert_close(
        norm.double()(x64).norm(dim=-1), torch.full((4,), 2.5, dtype=torch.float64)
    )
    norm.float()
    # fp16: fairseq zeroes pad positions; g/||x|| (~1e6) must not overflow to inf (0*inf=NaN)
    assert torch.equal(
        norm.half()(torch.zeros(2, 64, dtype=torch.float16)),
        torch.zeros(2, 64, dtype=torch.float16),
    )
    small = torch.randn(3, 64) * 1e-3
    torch.testing.assert_close(
        norm.half()(small.half()).float().norm(dim=-1), torch.full((3,), 2.5), rtol=2e-3, atol=0
    )
    norm.float()
    # bf16: norm computed in float32, no overflow
    big = (torch.randn(4, 64) * 1e3).to(torch.bfloat16)
    torch.testing.assert_close(
        norm(big).float().norm(dim=-1), torch.full((4,), 2.5), rtol=2e-2, atol=0
    )


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
    assert torch.autograd.gradcheck(
        lambda t, g: ScaleNorm.forward(_with_scale(norm, g), t),
        (x, norm.scale.detach().clone().requires_grad_()),
    )
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
    ref = (
        x3.double() @ (w64 / w64.norm(dim=-1, keepdim=True).clamp_min(1e-30)).T
    ).float()  # pad row: 0
    for grad in (True, False):
        with torch.set_grad_enabled(grad):
            out = proj(x3)
        assert out.shape == (2, 4, 50)
        torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("scale_shape", [None, (), (3, 1, 1)])
@pytest.mark.slow
def test_scaled_l2_normalize_backward_matches_autograd_composite(dtype, scale_shape):
    """The hand-written backward (and the no-grad forward) against autograd through the
    composite formula in float64, for unit norm, a scalar g and a per-head g, with a
    zero vector and a vector below eps, on a head-split (non-contiguous) input as in
    attention; gradients of g keep g's shape and dtype."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4, 2, 3, 8, generator=g).permute(1, 2, 0, 3)  # (B, H, T, hd) view
    x[0, 0, 0] = 0.0
    x[0, 1, 1] = 1e-9  # ||x|| < eps
    x = x.to(dtype)
    scale = None if scale_shape is None else torch.rand(scale_shape, generator=g) + 1.0
    dy = torch.randn(x.shape, generator=g).to(dtype)

    ref_x = x.detach().double().requires_grad_()
    ref_s = None if scale is None else scale.double().requires_grad_()
    norm = torch.linalg.vector_norm(ref_x, dim=-1, keepdim=True).clamp_min(1e-6)
    ref = ref_x * ((1.0 if ref_s is None else ref_s) / norm)
    ref.backward(dy.double())

    xa = x.detach().clone().requires_grad_()
    sa = None if scale is None else scale.clone().requires_grad_()
    out = scaled_l2_normalize(xa, 1e-6, sa)
    out.backward(dy)
    with torch.no_grad():
        no_grad_out = scaled_l2_normalize(x, 1e-6, scale)
    tol = {
        torch.float64: dict(atol=1e-12, rtol=1e-12),
        torch.float32: dict(atol=1e-5, rtol=1e-5),
        torch.float16: dict(atol=1e-2, rtol=1e-2),
        torch.bfloat16: dict(atol=5e-2, rtol=2e-2),
    }[dtype]
    assert out.dtype == no_grad_out.dtype == xa.grad.dtype == dtype
    assert torch.equal(out, no_grad_out)
    torch.testing.assert_close(out.double(), ref.detach(), **tol)
    live = ~torch.isclose(ref_x.grad, torch.zeros((), dtype=torch.float64)).all(-1)  # not huge/zero
    big = (
        ref_x.grad.abs().amax(-1) > 1e4
    )  # rows at the clamp: gradient scale / eps, not comparable in fp16
    keep = live & ~big if dtype in (torch.float16, torch.bfloat16) else torch.ones_like(live)
    torch.testing.assert_close(xa.grad.double()[keep], ref_x.grad[keep], **tol)
    if scale is not None:
        assert sa.grad.shape == scale.shape and sa.grad.dtype == torch.float32
        torch.testing.assert_close(
            sa.grad.double(),
            ref_s.grad,
            atol=5e-2 if dtype.itemsize == 2 else 1e-5,
            rtol=1e-2 if dtype.itemsize == 2 else 1e-5,
        )
    # float64: against finite differences too (eps 1e-3: the steps of 1e-6 stay on one side
    # of the clamp), and second derivatives raise
    if dtype == torch.float64:
        args = (x.detach().clone().requires_grad_(),) + (
            () if scale is None else (scale.double().requires_grad_(),)
        )
        assert torch.autograd.gradcheck(lambda t, *s: scaled_l2_normalize(t, 1e-3, *s), args)
        (gx,) = torch.autograd.grad(
            scaled_l2_normalize(args[0], 1e-6).pow(3).sum(), args[0], create_graph=True
        )
        with pytest.raises(RuntimeError, match="once_differentiable|does not require grad|twice"):
            gx.sum().backward()


def test_scaled_l2_normalize_gradient_keeps_the_input_layout():
    """The gradient of a head-split view comes back in the view's own memory layout (not
    the incoming gradient's), so it flows back through the split without a copy."""
    proj = torch.randn(5, 3, 16, requires_grad=True)  # (T, B, C)
    q = proj.view(5, 3, 2, 8).permute(1, 2, 0, 3)  # (B, H, T, hd) view
    seen = []
    q.register_hook(seen.append)
    dy = torch.randn(3, 5, 2, 8).transpose(1, 2)  # another layout, as SDPA's gradient
    scaled_l2_normalize(q, 1e-6, torch.tensor(3.0, requires_grad=True)).backward(dy)
    assert seen[0].stride() == q.stride()
    ref = proj.detach().clone().requires_grad_()
    qr = ref.view(5, 3, 2, 8).permute(1, 2, 0, 3)
    (qr * (3.0 / qr.norm(dim=-1, keepdim=True))).backward(dy)
    torch.testing.assert_close(proj.grad, ref.grad)


def test_fixnorm_output_projection_reuses_its_matrix_only_while_weights_are_unchanged():
    """In eval mode without autograd the normalized output matrix is computed once; any
    in-place change to the parameter, a new parameter, train()/eval(), training mode or
    autograd gives the current weights' matrix."""
    torch.manual_seed(0)
    proj = FixNormLinear(16, 50).eval()

    def expected():
        w = proj.weight.detach().double()
        return (w / w.norm(dim=-1, keepdim=True).clamp_min(1e-6)).float()

    with torch.no_grad():
        first = proj.normalized_weight()
        assert proj.normalized_weight() is first  # reused
        torch.testing.assert_close(first, expected())
        proj.weight.mul_(2.0).add_(0.5)  # in place on the parameter: version counter bumped
        second = proj.normalized_weight()
        assert second is not first
        torch.testing.assert_close(second, expected())
        proj.weight = torch.nn.Parameter(torch.randn(50, 16))  # a new (e.g. re-tied) parameter
        torch.testing.assert_close(proj.normalized_weight(), expected())
        # a change through .data does not bump the version counter: eval() drops the cache
        proj.weight.data.mul_(-1.0)
        proj.eval()
        torch.testing.assert_close(proj.normalized_weight(), expected())
        x = torch.randn(3, 16)
        torch.testing.assert_close(proj(x), x @ expected().T)
    # with autograd (even in eval mode) and in training mode: recomputed, differentiable
    out = proj(torch.randn(2, 16))
    out.sum().backward()
    assert proj.weight.grad is not None and proj._normalized_cache[3] is not out
    proj.train()
    with torch.no_grad():
        proj(torch.randn(2, 16))
    assert proj._normalized_cache is None


@pytest.mark.slow
def test_fixnorm_cache_is_never_stale_after_fairseq_updates_with_eval_bleu(toy_data):
    """fairseq's Trainer with its own Adam (which updates ``p.data`` in place, so the
    parameter's version counter does not move) and ``--eval-bleu``: the validation after
    an update decodes with the updated output matrix, not the one cached by the
    validation before it."""
    from fairseq import options, tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf
    from fairseq.trainer import Trainer

    _, bin_dir = toy_data
    args = options.parse_args_and_arch(
        options.get_training_parser(),
        [
            str(bin_dir),
            "--arch",
            "transformer_twt",
            *TINY,
            "--cpu",
            "--seed",
            "1",
            "--optimizer",
            "adam",
            "--lr",
            "0.01",
            "--criterion",
            "label_smoothed_cross_entropy",
            "--max-tokens",
            "500",
            "--eval-bleu",
            "--eval-bleu-args",
            '{"beam": 2, "max_len_b": 5}',
        ],
    )
    cfg = convert_namespace_to_omegaconf(args)
    task = tasks.setup_task(cfg.task)
    for split in ("train", "valid"):
        task.load_dataset(split)
    model = task.build_model(cfg.model)
    trainer = Trainer(cfg, task, model, task.build_criterion(cfg.criterion))
    proj = model.decoder.output_projection
    assert isinstance(proj, FixNormLinear)

    def first_batch(split):
        itr = task.get_batch_iterator(task.dataset(split), max_tokens=500)
        return next(iter(itr.next_epoch_itr(shuffle=False)))

    valid, train = first_batch("valid"), first_batch("train")
    assert "bleu" in trainer.valid_step(valid)  # beam search ran (eval-bleu)
    cached = proj._normalized_cache[3].clone()
    version = proj.weight._version
    trainer.train_step([train])
    assert proj.weight._version == version  # fairseq's Adam: p.data, version unchanged
    trainer.valid_step(valid)
    with torch.no_grad():
        current = scaled_l2_normalize(proj.weight, 1e-6)
    assert not torch.equal(current, cached)  # the update changed the matrix ...
    assert torch.equal(proj._normalized_cache[3], current)  # ... and decoding used the new one


def test_scalenorm_validates_its_arguments_and_input():
    for bad in (
        dict(dim=0),
        dict(dim=8.0),
        dict(dim=True),
        dict(dim=8, eps=0.0),
        dict(dim=8, eps=float("nan")),
        dict(dim=8, eps=-1e-5),
        dict(dim=8, scale=0.0),
        dict(dim=8, scale=float("inf")),
    ):
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
    torch.testing.assert_close(
        logits.double(), h.double() @ unit.T, **{k: v * 8 for k, v in tol.items()}
    )  # |logit| <= ||h|| ~ 8


# ------------------------------------------------------------------ archs
@pytest.mark.parametrize("arch", sorted(NAMED_ARCHS))
@pytest.mark.slow
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
        assert all(float(m.qk_norm_g) == pytest.approx(math.log2(79**2 - 79)) for m in attns)
    other = LayerNorm if norm_type == "scalenorm" else ScaleNorm
    norms = [m for m in model.modules() if isinstance(m, (ScaleNorm, LayerNorm))]
    assert len(norms) == 5 * layers + 2  # 2 per enc layer, 3 per dec layer, 2 final (PreNorm)
    assert not any(isinstance(m, other) for m in model.modules())
    assert isinstance(model.encoder.embed_tokens, FixNormEmbedding)
    assert isinstance(model.decoder.output_projection, FixNormLinear)
    assert model.decoder.output_projection.weight is model.encoder.embed_tokens.weight


def test_flags_override_arch_defaults(toy_task):
    """Command-line flags win over arch defaults (arch functions use getattr)."""
    _, args = build_model(
        toy_task,
        "transformer_twt_proxy",
        ["--norm-type", "layernorm", "--dropout", "0.1", "--qk-norm", "--qk-norm-scale", "5"],
    )
    assert args.norm_type == "layernorm" and args.dropout == 0.1 and args.qk_norm
    assert args.encoder_layers == 3


def test_base_arch_is_stock_postnorm(toy_task):
    model, args = build_model(toy_task, "transformer_qknorm", TINY)
    assert not args.encoder_normalize_before and not args.qk_norm and not args.fix_norm
    assert args.norm_type == "layernorm"
    assert model.encoder.layer_norm is None


def test_prenorm_residual_stream_is_contiguous_after_the_first_sublayer(toy_task):
    """``residual_connection`` returns fairseq's ``residual + x`` exactly, but in the layer
    output's contiguous (T, B, C) layout: in a PreNorm model every norm but each stack's
    first reads a contiguous input (fairseq's order keeps the embeddings' transposed
    batch-major view through all layers)."""
    from fairseq.modules.transformer_layer import TransformerEncoderLayerBase

    model, _ = build_model(toy_task, "transformer_qknorm_paper", TINY + ["--qk-norm-scale", "5"])
    layer = model.encoder.layers[0]
    residual = torch.randn(3, 5, 16).transpose(0, 1)  # (T, B, C) view of (B, T, C)
    x = torch.randn(5, 3, 16)
    out = layer.residual_connection(x, residual)
    assert torch.equal(out, TransformerEncoderLayerBase.residual_connection(layer, x, residual))
    assert out.is_contiguous() and not (residual + x).is_contiguous()

    seen = []
    norms = [m for m in model.modules() if isinstance(m, LayerNorm)]
    hooks = [
        m.register_forward_pre_hook(lambda m, args: seen.append(args[0].is_contiguous()))
        for m in norms
    ]
    tokens = torch.randint(4, len(toy_task.source_dictionary), (3, 6))
    model(tokens, torch.full((3,), 6), tokens)
    for h in hooks:
        h.remove()
    # per stack: layers x sublayers norms + the final norm; only each stack's first is strided
    assert len(seen) == 2 * 2 + 1 + 2 * 3 + 1
    assert seen.count(False) == 2, seen


BAD_QK_FLAGS = [
    # (arch, flags, message on stderr)
    ("transformer_qknorm_paper_proxy", [], "QKNorm needs exactly one of --qk-norm-length"),
    (
        "transformer_qknorm_paper_proxy",
        ["--qk-norm-length", "79", "--qk-norm-scale", "3"],
        "argument --qk-norm-scale: not allowed with argument --qk-norm-length",
    ),
    (
        "transformer_qknorm",
        ["--qk-norm", "--qk-norm-length", "1"],
        "argument --qk-norm-length: --qk-norm-length must be finite and >= 2",
    ),
    (
        "transformer_qknorm",
        ["--qk-norm", "--qk-norm-scale", "-3"],
        "argument --qk-norm-scale: --qk-norm-scale must be finite and > 0",
    ),
    (
        "transformer_qknorm",
        ["--qk-norm", "--qk-norm-type", "cosine"],
        "argument --qk-norm-type: invalid choice: 'cosine'",
    ),
    (
        "transformer_twt_proxy",
        ["--qk-norm-length", "79"],
        "--qk-norm-length would be ignored: it needs --qk-norm "
        "(off for --arch transformer_twt_proxy)",
    ),
    (
        "transformer_qknorm",
        ["--qk-norm-scale", "5", "--qk-norm-scale-per-head"],
        "--qk-norm-scale and --qk-norm-scale-per-head would be ignored: they need --qk-norm",
    ),
    (
        "transformer_qknorm",
        ["--qk-norm-type", "layernorm"],
        "--qk-norm-type layernorm would be ignored: it needs --qk-norm",
    ),
    (
        "transformer_qknorm",
        ["--qk-norm", "--qk-norm-type", "layernorm", "--qk-norm-length", "79"],
        "--qk-norm-length only applies to --qk-norm-type l2 (QKNorm's scale g); "
        "--qk-norm-type layernorm has no g",
    ),
    (
        "transformer_qknorm_paper_proxy",
        ["--qk-norm-type", "rmsnorm", "--qk-norm-freeze-scale"],
        "--qk-norm-freeze-scale only applies to --qk-norm-type l2",
    ),
    (
        "transformer_qknorm",
        ["--qk-norm", "--qk-norm-type", "rmsnorm", "--qk-norm-scale-per-head"],
        "--qk-norm-scale-per-head only applies to --qk-norm-type l2",
    ),
]


@pytest.mark.parametrize("arch, flags, message", BAD_QK_FLAGS)
def test_bad_qk_norm_flags_are_usage_errors(toy_task, capsys, arch, flags, message):
    """fairseq's parser (parse_args_and_arch) rejects them as argparse does: exit status 2,
    "PROG: error: MESSAGE" on stderr, before any model is built."""
    with pytest.raises(SystemExit) as exc:
        build_model(toy_task, arch, TINY + flags)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert ": error: " + message in err
    assert "Traceback" not in err


@pytest.mark.parametrize("case", [0, 5, 8])
@pytest.mark.slow
def test_bad_qk_norm_flags_through_fairseq_train(toy_data, case):
    """The real fairseq-train: one error line, exit status 2, no traceback, no training."""
    arch, flags, message = BAD_QK_FLAGS[case]
    _, bin_dir = toy_data
    proc = run_cli(
        [
            "fairseq-train",
            bin_dir,
            "--user-dir",
            PLUGIN_DIR,
            "--arch",
            arch,
            *TINY,
            *flags,
            "--max-update",
            "1",
            "--save-dir",
            "/nonexistent/never-written",
        ],
        check=False,
    )
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert proc.stderr.rstrip().splitlines()[-1].startswith(f"fairseq-train: error: {message}")
    assert "Traceback" not in proc.stderr and "num_updates" not in proc.stdout


def test_build_model_rejects_bad_qk_norm_args_programmatically(toy_task):
    """Args that bypass the command line (edited after parsing) raise ValueError at build."""
    _, args = build_model(
        toy_task, "transformer_qknorm", TINY + ["--qk-norm", "--qk-norm-type", "layernorm"]
    )
    args.qk_norm_scale_per_head = True
    with pytest.raises(ValueError, match="--qk-norm-scale-per-head only applies to --qk-norm-type"):
        TransformerQKNormModel.build_model(args, toy_task)
    args.qk_norm_scale_per_head, args.qk_norm = False, False
    with pytest.raises(ValueError, match="would be ignored"):
        TransformerQKNormModel.build_model(args, toy_task)


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
@pytest.mark.slow
def test_low_precision_padded_batch_is_finite(toy_task, arch, dtype):
    """fairseq zeroes pad positions before the first norm: ScaleNorm must not turn them into
    NaN under fp16 (which attention would spread over the whole sentence)."""
    qk = ["--qk-norm-length", "12"] if "qknorm" in arch else []
    model, _ = build_model(toy_task, arch, TINY + qk)
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


# ------------------------------------------------------------- the QK-norm family
QK_FLAGS = {
    "l2": ["--qk-norm", "--qk-norm-scale", "5"],
    "l2_per_head": ["--qk-norm", "--qk-norm-scale", "5", "--qk-norm-scale-per-head"],
    "l2_frozen": ["--qk-norm", "--qk-norm-scale", "5", "--qk-norm-freeze-scale"],
    "layernorm": ["--qk-norm", "--qk-norm-type", "layernorm"],
    "rmsnorm": ["--qk-norm", "--qk-norm-type", "rmsnorm"],
}


def _tiny_model(toy_task, variant):
    # PreNorm + FixNorm + LayerNorm (the QKNorm paper's model) at test size, 2 heads of 8
    return build_model(toy_task, "transformer_qknorm_paper_proxy", TINY + QK_FLAGS[variant])[0]


@pytest.mark.parametrize("variant", sorted(QK_FLAGS))
def test_qk_norm_flags_build_the_documented_modules(toy_task, variant):
    model = _tiny_model(toy_task, variant)
    attns = model.attention_modules()
    assert len(attns) == 6
    for m in attns.values():
        assert m.qk_norm and m.qk_norm_type == ("l2" if variant.startswith("l2") else variant)
        if variant.startswith("l2"):
            assert m.qk_norm_g.shape == ((2,) if variant == "l2_per_head" else ())
            assert torch.equal(m.qk_norm_g.detach(), torch.full(m.qk_norm_g.shape, 5.0))
            assert m.qk_norm_g.requires_grad == (variant != "l2_frozen")
            assert m.q_norm is None and m.k_norm is None
        else:
            assert m.qk_norm_g is None
            norm_cls = torch.nn.LayerNorm if variant == "layernorm" else torch.nn.RMSNorm
            for norm in (m.q_norm, m.k_norm):
                assert type(norm) is norm_cls and norm.weight.shape == (8,)  # head_dim
                assert torch.equal(norm.weight.detach(), torch.ones(8))
    # frozen g is left out of what fairseq's trainer optimizes (it filters requires_grad)
    trained = {id(p) for p in model.parameters() if p.requires_grad}
    assert all(
        (id(m.qk_norm_g) in trained) == (variant != "l2_frozen")
        for m in attns.values()
        if m.qk_norm_g is not None
    )


@pytest.mark.parametrize("variant", sorted(QK_FLAGS))
@pytest.mark.slow
def test_training_step_updates_g_and_norm_weights_unless_frozen(toy_task, variant):
    model = _tiny_model(toy_task, variant)
    model.train()
    d = toy_task.target_dictionary
    src = torch.randint(d.nspecial, len(d), (4, 7))
    prev = torch.randint(d.nspecial, len(d), (4, 6))
    out, _ = model(src, torch.full((4,), 7), prev)
    out.logsumexp(-1).mean().backward()
    for name, m in model.attention_modules().items():
        if m.qk_norm_g is not None and variant != "l2_frozen":
            assert m.qk_norm_g.grad is not None and bool((m.qk_norm_g.grad != 0).all()), name
        elif m.qk_norm_g is not None:
            assert m.qk_norm_g.grad is None, name
        else:
            for norm in (m.q_norm, m.k_norm):
                assert norm.weight.grad is not None and float(norm.weight.grad.abs().max()) > 0


@pytest.mark.parametrize("variant", sorted(QK_FLAGS) + ["off"])
def test_incremental_decoding_with_beam_reorders_equals_full(toy_task, variant):
    """Beam-search-like decoding: encoder states expanded per beam and shared by the
    encoder-decoder attention (set_beam_size, keys cached once per sentence), the cache
    reordered after every step (beams swapped, and copied over others); each step equals
    the full forward of the reordered prefixes."""
    if variant == "off":
        model = build_model(toy_task, "transformer_twt_proxy", TINY)[0]
    else:
        model = _tiny_model(toy_task, variant)
    model.eval()
    orders = [torch.tensor([1, 0, 3, 2]), torch.tensor([0, 0, 3, 3]), torch.tensor([1, 1, 2, 3])]
    state = assert_incremental_equals_full_with_reorders(model, toy_task.target_dictionary, orders)
    cross = model.decoder.layers[0].encoder_attn
    assert cross._get_input_buffer(state)["prev_key"].shape[0] == 2  # once per sentence (B = 2)


@pytest.mark.parametrize("variant", sorted(QK_FLAGS))
def test_beam_search_scores_equal_full_forward(toy_task, variant):
    """fairseq's SequenceGenerator (beam 3: incremental decoding, beam-shared encoder keys,
    reordering): every hypothesis' positional scores equal the full forward's."""
    model = _tiny_model(toy_task, variant).eval()
    assert_beam_scores_equal_full_forward(model, toy_task.target_dictionary, 3)


@pytest.mark.parametrize("variant", ["l2_per_head", "layernorm"])
@pytest.mark.slow
def test_attention_health_and_g_are_logged_per_module(toy_task, variant):
    from fairseq import metrics

    model = _tiny_model(toy_task, variant)
    model._stats_interval = 1
    d = toy_task.target_dictionary
    src = torch.randint(d.nspecial, len(d), (2, 5))
    with metrics.aggregate(new_root=True) as agg:
        model.train()
        model(src, torch.full((2,), 5), torch.randint(d.nspecial, len(d), (2, 4)))
    logged = agg.get_smoothed_values()
    for name, m in model.attention_modules().items():
        assert logged[f"attn_maxlogit_{name}"] == pytest.approx(
            float(m.last_stats["max_logit"]), abs=1e-3
        )
        assert logged[f"attn_entropy_{name}"] > 0
        if variant == "l2_per_head":
            g = m.qk_norm_g.detach()
            assert logged[f"qknorm_g_{name}"] == pytest.approx(float(g.mean()), abs=1e-3)
            assert [logged[f"qknorm_head_g_{name}_h{h}"] for h in range(2)] == pytest.approx(
                g.tolist(), abs=1e-3
            )
        else:
            assert not any(k.startswith("qknorm_") for k in logged)


@pytest.mark.parametrize(
    "flags, expected",
    [
        (
            ["--qk-norm", "--qk-norm-length", "92"],
            ["QKNorm g0 = 13.031357 (qk_norm_length L = 92)"],
        ),
        (
            ["--qk-norm", "--qk-norm-length", "79.5"],
            [f"QKNorm g0 = {math.log2(79.5**2 - 79.5):.6f} (qk_norm_length L = 79.5)"],
        ),
        (["--qk-norm", "--qk-norm-scale", "12.5"], ["QKNorm g0 = 12.500000 (qk_norm_scale)"]),
        (
            ["--qk-norm", "--qk-norm-scale", "12.5", "--qk-norm-scale-per-head"],
            ["QKNorm g0 = 12.500000 (qk_norm_scale)"],
        ),
        ([], []),
        (["--qk-norm", "--qk-norm-type", "layernorm"], []),
        (["--qk-norm", "--qk-norm-type", "rmsnorm"], []),
    ],
)
def test_g0_is_logged_once_per_model_build(toy_task, caplog, flags, expected):
    """One line per build, through the fairseq_qknorm logger, in the format the pipeline's
    tools parse; nothing without l2 QKNorm. The value is qk_norm_initial_scale's."""
    caplog.set_level(logging.INFO, logger="fairseq_qknorm")
    model, args = build_model(toy_task, "transformer_qknorm", TINY + flags)
    records = [r for r in caplog.records if "g0" in r.getMessage()]
    assert [r.getMessage() for r in records] == expected
    assert all(r.name.startswith("fairseq_qknorm") for r in records)
    if expected:
        g = model.encoder.layers[0].self_attn.qk_norm_g.detach()
        g0 = qk_norm_initial_scale(args.qk_norm_length, args.qk_norm_scale)
        assert torch.equal(g, torch.full(g.shape, g0))


def test_existing_l2_checkpoint_loads_and_gives_same_output():
    """A checkpoint saved before the QK-norm family (tests/data/legacy_l2_checkpoint/README.md)
    loads strictly through fairseq's loader and computes what it computed then."""
    from fairseq import checkpoint_utils

    import fairseq_qknorm  # noqa: F401  (registers the model, patches checkpoint loading)

    fixture = Path(__file__).parent / "data" / "legacy_l2_checkpoint"
    models, cfg, _ = checkpoint_utils.load_model_ensemble_and_task(
        [str(fixture / "checkpoint.pt")], arg_overrides={"data": str(fixture)}
    )
    model = models[0].eval()
    assert not hasattr(cfg.model, "qk_norm_type") or cfg.model.qk_norm_type == "l2"
    for m in model.attention_modules().values():
        assert m.qk_norm_type == "l2" and m.qk_norm_g.shape == () and m.qk_norm_g.requires_grad
        assert float(m.qk_norm_g) != pytest.approx(math.log2(12**2 - 12))  # trained, loaded
    expected = torch.load(fixture / "expected.pt")
    src = expected["src_tokens"]
    with torch.no_grad():
        out, _ = model(src, (src != 1).sum(1), expected["prev_output_tokens"])
    torch.testing.assert_close(out, expected["logits"], atol=1e-5, rtol=1e-5)
