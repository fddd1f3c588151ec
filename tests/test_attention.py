"""QKNormMultiheadAttention and each member of the QK-norm family against independent
float64 references and stock fairseq.

Variants (``VARIANTS``, tests/conftest.py, with the float64 reference): QK-norm off, l2 QKNorm
with one g per module, one g per head, a frozen g, and per-head LayerNorm / RMSNorm of q and k.
"""

import math

import pytest
import torch
from fairseq.modules import MultiheadAttention

from fairseq_qknorm.modules import QKNormMultiheadAttention
from fairseq_qknorm.modules.qknorm_attention import qk_scaled_queries

from conftest import (
    L2_EPS,
    QK_VARIANTS,
    VARIANTS,
    D,
    E,
    H,
    head_norm_reference,
    make,
    reference_attention,
)


def inputs(T=5, S=7, B=3, seed=1):
    g = torch.Generator().manual_seed(seed)
    query = torch.randn(T, B, E, generator=g)
    key = torch.randn(S, B, E, generator=g)
    pad = torch.zeros(B, S, dtype=torch.bool)
    pad[1, :2] = True  # left padding, as fairseq pads sources
    pad[2, :4] = True
    return query, key, pad


def causal_mask(T):
    return torch.triu(torch.full((T, T), float("-inf")), 1)


# --------------------------------------------------------- against the formulas
@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("training", [False, True])
def test_encoder_attention_matches_reference(variant, fused, padded, training):
    mha = make(variant, encoder_decoder_attention=True, kdim=E, vdim=E)
    mha.use_fused = fused
    mha.train(training)  # dropout is 0: training and eval must agree with the formula
    query, key, pad = inputs()
    pad = pad if padded else None
    out, _ = mha(query, key, key, key_padding_mask=pad, need_weights=False)
    ref = reference_attention(mha, query, key, key_padding_mask=pad)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", list(VARIANTS))
@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_matches_reference(variant, fused, padded, causal):
    mha = make(variant, self_attention=True)
    mha.use_fused = fused
    x, _, pad = inputs(T=7, S=7)
    pad = pad if padded else None
    mask = causal_mask(7) if causal else None
    out, _ = mha(x, x, x, key_padding_mask=pad, attn_mask=mask, need_weights=False)
    ref = reference_attention(mha, x, x, key_padding_mask=pad, attn_mask=mask)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("variant", QK_VARIANTS)
def test_logits_are_the_formula(variant):
    """before_softmax returns exactly the reference logits (masked entries -inf)."""
    mha = make(variant, encoder_decoder_attention=True, kdim=E, vdim=E)
    query, key, pad = inputs()
    logits, _ = mha(query, key, key, key_padding_mask=pad, before_softmax=True)
    ref = []
    reference_attention(mha, query, key, key_padding_mask=pad, logits_out=ref)
    torch.testing.assert_close(logits.view(3, H, 5, 7).double(), ref[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("training", [False, True])
@pytest.mark.parametrize("self_attention", [True, False])
def test_qknorm_off_equals_stock_fairseq(training, self_attention):
    """With --qk-norm off our owned forward equals fairseq's MultiheadAttention,
    which in training goes through F.multi_head_attention_forward."""
    kw = dict(self_attention=True) if self_attention else dict(encoder_decoder_attention=True)
    torch.manual_seed(0)
    stock = MultiheadAttention(E, H, **kw)
    ours = QKNormMultiheadAttention(E, H, qk_norm=False, **kw)
    ours.load_state_dict(stock.state_dict())
    stock.train(training)
    ours.train(training)
    x, key, pad = inputs(T=7, S=7)
    if self_attention:
        # decoder self-attention: causal, right-padded targets (stock fairseq gives
        # NaN for fully masked rows, which fairseq's own batches never contain)
        key, pad = x, pad.flip(-1)
    mask = causal_mask(7) if self_attention else None
    out_s, w_s = stock(x, key, key, key_padding_mask=pad, attn_mask=mask, need_weights=True)
    out_o, w_o = ours(x, key, key, key_padding_mask=pad, attn_mask=mask, need_weights=True)
    torch.testing.assert_close(out_o, out_s, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(w_o, w_s, atol=1e-6, rtol=1e-5)
    # fused path (no weights) too
    out_f, none = ours(x, key, key, key_padding_mask=pad, attn_mask=mask, need_weights=False)
    assert none is None
    torch.testing.assert_close(out_f, out_s, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_head_weights_shape_and_rows_sum_to_one(variant):
    mha = make(variant, encoder_decoder_attention=True, kdim=E, vdim=E)
    query, key, pad = inputs()
    _, w = mha(query, key, key, key_padding_mask=pad, need_head_weights=True)
    assert w.shape == (H, 3, 5, 7)
    if mha.attn_normalization == "nap":  # standardized scores sum to 0: rows sum to n beta_h
        n_keys = (~pad).sum(-1).float()  # (B,)
        expected = mha.nap_bias.detach()[:, None, None] * n_keys[None, :, None]
        torch.testing.assert_close(w.sum(-1), expected.expand(H, 3, 5))
    else:
        torch.testing.assert_close(w.sum(-1), torch.ones(H, 3, 5))
    assert float(w[:, 2, :, :4].abs().max()) == 0.0  # padded keys get no weight


# ------------------------------------------------------------- parameters, training
@pytest.mark.parametrize("variant", QK_VARIANTS)
def test_qk_norm_parameters_train_unless_frozen(variant):
    """In training (fused path, dropout on): g gets a gradient (one per head with
    --qk-norm-scale-per-head; none when frozen), LayerNorm/RMSNorm weights of q and k
    get theirs; l2 logits lie in [-max|g|, max|g|] even for huge activations."""
    mha = make(variant, self_attention=True, g0=5.0, dropout=0.1)
    mha.train()
    x, _, pad = inputs(T=7, S=7)
    x = x * 100.0  # large activations: dot-product logits would be huge
    logits, _ = mha(x, x, x, key_padding_mask=pad, before_softmax=True)
    finite = logits[torch.isfinite(logits)]
    kind = mha.qk_norm_type
    if kind == "l2":
        bound = float(mha.qk_norm_g.detach().abs().max())
        assert 1.0 < float(finite.abs().max()) <= bound + 1e-4
    elif kind == "lp":  # ||x||_2 <= D^(1/2 - 1/p) ||x||_p: |g q.k| <= g D^(1 - 2/p)
        bound = float(mha.qk_norm_g.detach().abs().max()) * D ** (1 - 2 / mha.qk_norm_p)
        assert 1.0 < float(finite.abs().max()) <= bound + 1e-4
    else:  # |N(q).N(k)| / sqrt(D) <= ||N(q)|| ||N(k)|| / sqrt(D) <= sqrt(D) max|w|^2
        w_max = 2.5 if kind == "rmsnorm_zc" else 1.5  # zc: 1 + w, w in [0.5, 1.5]
        # full width: one head may hold all of the RMS: ||N(q)_h||^2 <= E max|w|^2
        width = E if kind == "rmsnorm_full" else D
        d_scale = 1.0 if mha.attn_normalization == "nap" else math.sqrt(D)
        assert float(finite.abs().max()) <= width * w_max**2 / d_scale + 1e-4
    out, _ = mha(x, x, x, key_padding_mask=pad, need_weights=False)  # fused training path
    out.pow(2).sum().backward()
    if mha.qk_norm_g is not None:
        assert mha.qk_norm_g.dtype == torch.float32
        assert mha.qk_norm_g.shape == ((H,) if variant == "l2_per_head" else ())
        if variant == "l2_frozen":
            assert not mha.qk_norm_g.requires_grad and mha.qk_norm_g.grad is None
            assert float(mha.qk_norm_g) == 5.0
        else:
            assert mha.qk_norm_g.grad is not None and bool((mha.qk_norm_g.grad != 0).all())
    else:
        for norm in (mha.q_norm, mha.k_norm):
            # one weight of size head_dim shared by heads; OLMo 2's full width: embed_dim
            assert norm.weight.shape == ((E,) if kind == "rmsnorm_full" else (D,))
            assert norm.weight.grad is not None and float(norm.weight.grad.abs().max()) > 0
            assert not any("bias" in n for n, _ in norm.named_parameters())  # no bias


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_fused_and_explicit_paths_agree_with_gradients(variant):
    a = make(variant, self_attention=True)
    b = make(variant, self_attention=True)
    b.load_state_dict(a.state_dict())
    b.use_fused = False
    x, _, pad = inputs(T=7, S=7)
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    oa, _ = a(xa, xa, xa, key_padding_mask=pad, attn_mask=causal_mask(7), need_weights=False)
    ob, _ = b(xb, xb, xb, key_padding_mask=pad, attn_mask=causal_mask(7), need_weights=False)
    torch.testing.assert_close(oa, ob, atol=1e-5, rtol=1e-5)
    grad = torch.randn_like(oa)
    oa.backward(grad)
    ob.backward(grad)
    torch.testing.assert_close(xa.grad, xb.grad, atol=1e-5, rtol=1e-5)
    for (na, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        if not pa.requires_grad:
            assert pa.grad is None and pb.grad is None, na
            continue
        torch.testing.assert_close(pa.grad, pb.grad, atol=1e-5, rtol=1e-5, msg=na)


# ------------------------------------------------------------- incremental decoding
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_incremental_self_attention_equals_full(variant):
    mha = make(variant, self_attention=True).eval()
    x, _, _ = inputs(T=6, S=6)
    full, _ = mha(x, x, x, attn_mask=causal_mask(6), need_weights=False)
    state = {}
    steps = []
    for t in range(6):
        xt = x[t : t + 1]
        o, _ = mha(xt, xt, xt, incremental_state=state, need_weights=False)
        steps.append(o)
    torch.testing.assert_close(torch.cat(steps), full, atol=1e-5, rtol=1e-5)
    # keys are cached as they enter the logits (normalized once)
    cached = mha._get_input_buffer(state)["prev_key"]
    with torch.no_grad():
        keys = mha._project(x, mha.k_proj, mha.k_norm, x.size(1))  # full-width norm there
        torch.testing.assert_close(cached, mha.normalize_keys(keys))
    if mha.qk_norm_type == "l2":
        torch.testing.assert_close(cached.norm(dim=-1), torch.ones(cached.shape[:-1]))


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_beam_shared_encoder_attention_and_reorder(variant):
    """Beam-shared keys (set_beam_size) give the same result as expanded keys,
    and reorder_incremental_state keeps the cache consistent."""
    mha = make(variant, encoder_decoder_attention=True, kdim=E, vdim=E).eval()
    beam, B, S = 2, 3, 7
    _, key, pad = inputs(S=S, B=B)
    key_exp = key.repeat_interleave(beam, dim=1)  # (S, B*beam, E)
    pad_exp = pad.repeat_interleave(beam, dim=0)
    q = torch.randn(1, B * beam, E)
    expected, w_exp = mha(q, key_exp, key_exp, key_padding_mask=pad_exp, need_weights=True)
    torch.testing.assert_close(
        expected, reference_attention(mha, q, key_exp, pad_exp), atol=1e-5, rtol=1e-5
    )
    mha.set_beam_size(beam)
    state = {}
    got, w = mha(
        q,
        key_exp,
        key_exp,
        key_padding_mask=pad_exp,
        incremental_state=state,
        static_kv=True,
        need_weights=True,
    )
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(w, w_exp, atol=1e-6, rtol=1e-5)
    assert mha._get_input_buffer(state)["prev_key"].shape[0] == B  # stored once per sentence
    got_fused, _ = mha(q, None, None, incremental_state=state, static_kv=True, need_weights=False)
    torch.testing.assert_close(got_fused, expected, atol=1e-5, rtol=1e-5)
    new_order = torch.tensor([1, 0, 3, 2, 5, 4])  # beams swap within sentences
    mha.reorder_incremental_state(state, new_order)
    again, _ = mha(q, None, None, incremental_state=state, static_kv=True, need_weights=False)
    torch.testing.assert_close(again, expected, atol=1e-5, rtol=1e-5)


def test_beam_size_left_set_does_not_touch_full_forwards():
    """A beam size left over from decoding (fairseq never resets it) must not make a
    training or validation forward share keys between neighbouring sentences."""
    mha = make("l2", encoder_decoder_attention=True, kdim=E, vdim=E)
    _, key, pad = inputs(S=7, B=4)  # 4 different sentences, bsz divisible by the beam
    q = torch.randn(5, 4, E)
    for training in (True, False):
        mha.train(training)
        mha.dropout_module.p = 0.0
        mha.set_beam_size(1)
        expected, _ = mha(q, key, key, key_padding_mask=pad, need_weights=False)
        mha.set_beam_size(2)
        got, _ = mha(q, key, key, key_padding_mask=pad, need_weights=False)
        torch.testing.assert_close(got, expected)
        torch.testing.assert_close(
            got, reference_attention(mha, q, key, key_padding_mask=pad), atol=1e-5, rtol=1e-5
        )


# ---------------------------------------------------------------- invariances
def _logits_after_rescaling(mha, query, key, a_q, a_k, shift=None):
    """Logits with every projected query/key vector of every head multiplied by a
    per-token factor (``a_q`` (T, B), ``a_k`` (S, B), > 0) and, with ``shift``,
    moved along the all-ones direction by a per-token amount: the projections'
    biases are zero, so scaling a token's input scales its q and k; adding
    ``1 u^T`` to a head's rows of W adds ``(u . x) 1`` to its vectors."""
    m = make(mha._variant, encoder_decoder_attention=True, kdim=E, vdim=E)
    m.load_state_dict(mha.state_dict())
    for norm in (m.q_norm, m.k_norm):
        if norm is not None:
            norm.eps = 0.0  # exact invariance; eps = 1e-6 breaks it by O(eps / var(q))
    with torch.no_grad():
        if shift is not None:
            for proj in (m.q_proj, m.k_proj):
                proj.weight += torch.ones(E, 1) * shift[None, :]
    logits, _ = m(query * a_q[..., None], key * a_k[..., None], key, before_softmax=True)
    return logits


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_logit_invariance_to_rescaling_q_and_k(variant):
    """Exactly what each type is invariant to, per vector (a > 0, c real): l2 and rmsnorm
    a q (but not a shift), layernorm a q + c 1; dot product neither."""
    mha = make(variant, encoder_decoder_attention=True, kdim=E, vdim=E)
    mha._variant = variant
    with torch.no_grad():
        mha.q_proj.bias.zero_()
        mha.k_proj.bias.zero_()
    query, key, _ = inputs()
    g = torch.Generator().manual_seed(5)
    ones_q, ones_k = torch.ones(5, 3), torch.ones(7, 3)
    a_q = torch.empty(5, 3).uniform_(0.25, 4.0, generator=g)
    a_k = torch.empty(7, 3).uniform_(0.25, 4.0, generator=g)
    shift = torch.randn(E, generator=g)
    base = _logits_after_rescaling(mha, query, key, ones_q, ones_k)
    scaled = _logits_after_rescaling(mha, query, key, a_q, a_k)
    shifted = _logits_after_rescaling(mha, query, key, ones_q, ones_k, shift=shift)
    scale_invariant = mha.qk_norm  # every QK-norm type; soft cap and NAP alone are not
    shift_invariant = mha.qk_norm_type == "layernorm"
    assert torch.allclose(scaled, base, atol=1e-5, rtol=1e-5) == scale_invariant
    assert torch.allclose(shifted, base, atol=1e-5, rtol=1e-5) == shift_invariant
    # layernorm: scale and shift at once
    if shift_invariant:
        both = _logits_after_rescaling(mha, query, key, a_q, a_k, shift=shift)
        torch.testing.assert_close(both, base, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------- low precision
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_low_precision_masking_has_no_nan(variant, dtype):
    mha = make(variant, self_attention=True, g0=12.59).to(dtype)
    x, _, pad = inputs(T=7, S=7)
    x = (x * 50).to(dtype)  # large activations: q.k would overflow fp16 without QK-norm
    pad[0, :] = True  # a fully padded row: output must be 0, not NaN
    for fused in (True, False):
        mha.use_fused = fused
        out, _ = mha(x, x, x, key_padding_mask=pad, attn_mask=causal_mask(7), need_weights=False)
        assert out.dtype == dtype
        assert torch.isfinite(out.float()).all()


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_low_precision_tiny_and_zero_queries_and_keys(variant, dtype, fused):
    """fp16/bf16 with tiny (|q|, |k| ~ 1e-5: g/||q|| overflows fp16) and exactly zero query
    and key vectors: finite, and the float64 formula of the same (rounded) weights."""
    mha = make(variant, self_attention=True, g0=13.03)
    with torch.no_grad():
        for proj in (mha.q_proj, mha.k_proj):
            proj.bias.zero_()
            proj.weight.mul_(1e-4)  # tiny q and k, ordinary values
    mha = mha.to(dtype)
    mha.use_fused = fused
    x, _, pad = inputs(T=7, S=7)
    x[2] = 0.0  # position 2: zero query and zero key vectors in every sentence and head
    x = x.to(dtype)
    out, _ = mha(x, x, x, key_padding_mask=pad, attn_mask=causal_mask(7), need_weights=False)
    assert out.dtype == dtype and torch.isfinite(out.float()).all()
    ref = reference_attention(mha, x, x, key_padding_mask=pad, attn_mask=causal_mask(7))
    ref = torch.nan_to_num(ref)  # rows whose every key is masked
    tol = 2e-2 if dtype == torch.float16 else 6e-2
    torch.testing.assert_close(out.float(), ref, atol=tol, rtol=tol)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_scaled_queries_tiny_and_zero_vectors(dtype):
    """Issue 10 item 5: g q/||q|| of a tiny query overflowed fp16 (inf), a zero one gave NaN."""
    q = torch.full((1, 64), 2e-5).to(dtype)
    out = qk_scaled_queries(q, torch.tensor(13.03))
    expected = 13.03 / 8.0  # every component q/||q|| = 1/sqrt(64)
    assert out.dtype == dtype
    torch.testing.assert_close(out.float(), torch.full((1, 64), expected), rtol=1e-2, atol=0)
    zero = qk_scaled_queries(torch.zeros(2, 64, dtype=dtype), torch.tensor(13.03))
    assert torch.equal(zero, torch.zeros(2, 64, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("variant", QK_VARIANTS)
def test_every_qk_norm_type_handles_tiny_and_zero_vectors(variant, dtype):
    """normalize_queries / normalize_keys of each type in fp16/bf16: tiny vectors (whose
    sums of squares underflow in fp16) and zero vectors give the float64 formula."""
    mha = make(variant, self_attention=True, g0=13.03)
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, H, 5, D, generator=g) * 3e-5  # (B, H, T, D): tiny
    x[0, :, 1] = 0.0  # zero vectors
    x[1, :, 2] = torch.randn(H, D, generator=g) * 30.0  # and large ones
    low = mha.to(dtype)
    xl = x.to(dtype)
    with torch.no_grad():
        got_q, got_k = low.normalize_queries(xl), low.normalize_keys(xl)
    assert got_q.dtype == dtype and torch.isfinite(got_q.float()).all()
    assert torch.isfinite(got_k.float()).all()
    x64 = xl.double()  # the same rounded inputs, in float64
    kind = low.qk_norm_type
    if kind in ("l2", "lp"):
        gain = low.qk_norm_g.detach().double()
        gain = gain.view(-1, 1, 1) if gain.dim() else gain
        p = 2.0 if kind == "l2" else low.qk_norm_p
        norm = (x64.abs() ** p).sum(-1, keepdim=True) ** (1 / p)
        unit = x64 / norm.clamp_min(L2_EPS)
        ref_q, ref_k = gain * unit, unit
    elif kind == "rmsnorm_full":  # before the head split: (B, T, E) rows, weight (E,)
        xl, x64 = (t.transpose(1, 2).reshape(2, 5, E) for t in (xl, x64))
        with torch.no_grad():
            got_q, got_k = low.q_norm(xl), low.k_norm(xl)
        ref_q = head_norm_reference("rmsnorm", x64, low.q_norm.weight.detach().double())
        ref_k = head_norm_reference("rmsnorm", x64, low.k_norm.weight.detach().double())
    else:
        wq, wk = low.q_norm.weight.detach().double(), low.k_norm.weight.detach().double()
        if kind == "rmsnorm_zc":
            kind, wq, wk = "rmsnorm", 1.0 + wq, 1.0 + wk
        ref_q = head_norm_reference(kind, x64, wq)
        ref_k = head_norm_reference(kind, x64, wk)
    tol = 1e-2 if dtype == torch.float16 else 3e-2
    scale = float(ref_q.abs().max())
    torch.testing.assert_close(got_q.double(), ref_q, atol=tol * scale, rtol=tol)
    torch.testing.assert_close(got_k.double(), ref_k, atol=tol * float(ref_k.abs().max()), rtol=tol)


# ------------------------------------------------------------------ statistics
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_attention_stats_are_computed_on_the_actual_logits(variant):
    mha = make(variant, encoder_decoder_attention=True, kdim=E, vdim=E, g0=4.0)
    mha.record_stats = True
    query, key, pad = inputs()
    _, weights = mha(query, key, key, key_padding_mask=pad, need_head_weights=True)
    stats = mha.last_stats
    ref = []
    reference_attention(mha, query, key, key_padding_mask=pad, logits_out=ref)
    finite = ref[0][torch.isfinite(ref[0])]
    assert float(stats["max_logit"]) == pytest.approx(float(finite.abs().max()), rel=1e-5)
    if mha.attn_normalization == "nap":  # no distribution, so no entropy
        assert set(stats) == {"max_logit"}
        return
    w = weights.double()  # (H, B, T, S)
    entropy = -(w * torch.log(w.clamp_min(1e-30))).sum(-1).mean()
    assert float(stats["entropy"]) == pytest.approx(float(entropy), rel=1e-5)
    assert 0.0 < float(stats["entropy"]) <= math.log(7) + 1e-5  # nats, at most log(#keys)
    if mha.qk_norm_type == "l2":  # |g cos| <= max |g|
        assert float(stats["max_logit"]) <= float(mha.qk_norm_g.detach().abs().max()) + 1e-5


# ---------------------------------------------------------------------- errors
def test_unsupported_parent_features_and_bad_options_raise():
    with pytest.raises(ValueError, match="add_bias_kv"):
        QKNormMultiheadAttention(E, H, self_attention=True, add_bias_kv=True)
    with pytest.raises(ValueError, match="qk_norm_scale"):
        QKNormMultiheadAttention(E, H, self_attention=True, qk_norm=True)
    for bad in (-1.0, 0.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite and > 0"):
            QKNormMultiheadAttention(E, H, self_attention=True, qk_norm=True, qk_norm_scale=bad)
    with pytest.raises(ValueError, match="qk_norm_type must be one of"):
        QKNormMultiheadAttention(E, H, qk_norm=True, qk_norm_type="cosine")
    for kind in ("layernorm", "rmsnorm"):
        for option in (
            dict(qk_norm_scale=3.0),
            dict(qk_norm_scale_per_head=True),
            dict(qk_norm_freeze_scale=True),
        ):
            with pytest.raises(ValueError, match="apply only to qk_norm_type='l2'"):
                QKNormMultiheadAttention(E, H, qk_norm=True, qk_norm_type=kind, **option)
    for option in (
        dict(qk_norm_scale=3.0),
        dict(qk_norm_type="rmsnorm"),
        dict(qk_norm_scale_per_head=True),
    ):
        with pytest.raises(ValueError, match="qk_norm=False"):
            QKNormMultiheadAttention(E, H, **option)


@pytest.mark.parametrize(
    "call, error, match",
    [
        (lambda m, q, k, p: m(q[0], k, k), ValueError, r"query must be \(tgt_len, bsz, 16\)"),
        (lambda m, q, k, p: m(q[..., :8], k, k), ValueError, "query must be"),
        (lambda m, q, k, p: m(q.double(), k.double(), k.double()), TypeError, "query dtype"),
        (
            lambda m, q, k, p: m(q, k[:, :2], k[:, :2]),
            ValueError,
            r"key must be \(src_len, bsz, 16\)",
        ),
        (lambda m, q, k, p: m(q, k[..., :8], k), ValueError, "key must be"),
        (lambda m, q, k, p: m(q, k.half(), k.half()), TypeError, "key dtype"),
        (
            lambda m, q, k, p: m(q, k, k, key_padding_mask=p[:, :5]),
            ValueError,
            "key_padding_mask must be",
        ),
        (lambda m, q, k, p: m(q, k, k, key_padding_mask=p.float()), TypeError, "bool or uint8"),
        (
            lambda m, q, k, p: m(q, k, k, attn_mask=torch.zeros(5, 6)),
            ValueError,
            r"attn_mask must be \(tgt_len",
        ),
        (
            lambda m, q, k, p: m(q, k, k, attn_mask=torch.zeros(5, 7, dtype=torch.long)),
            TypeError,
            "attn_mask must be float",
        ),
    ],
)
def test_forward_rejects_bad_shapes_and_dtypes_with_our_errors(call, error, match):
    mha = make("l2", encoder_decoder_attention=True, kdim=E, vdim=E)
    query, key, pad = inputs()
    with pytest.raises(error, match=match):
        call(mha, query, key, pad)


def test_forward_checks_value_for_plain_cross_attention():
    mha = QKNormMultiheadAttention(E, H, kdim=E, vdim=8)  # neither self nor enc-dec
    query, key, _ = inputs()
    value = torch.randn(7, 3, 8)
    out, _ = mha(query, key, value)
    assert out.shape == (5, 3, E)
    with pytest.raises(ValueError, match=r"value must be \(src_len, bsz, 8\)"):
        mha(query, key, value[:6])
    with pytest.raises(ValueError, match="value is None"):
        mha(query, key, None)
