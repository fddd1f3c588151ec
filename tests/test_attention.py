"""QKNormMultiheadAttention against independent references and stock fairseq."""

import math

import pytest
import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention

from fairseq_qknorm.modules import QKNormMultiheadAttention
from fairseq_qknorm.modules.qknorm_attention import qk_scaled_queries

E, H = 16, 4
D = E // H


def reference_attention(mha, query, key, key_padding_mask=None, attn_mask=None, qk_norm=True):
    """Straightforward per-head attention written from the paper's formula.

    logits_h = g * cos(q_h, k_h) (QKNorm) or q_h.k_h / sqrt(d) (dot product);
    loops over batch and heads, bmm-free, float64.
    """
    W = {n: getattr(mha, f"{n}_proj") for n in ("q", "k", "v", "out")}
    q = F.linear(query.double(), W["q"].weight.double(), W["q"].bias.double())
    k = F.linear(key.double(), W["k"].weight.double(), W["k"].bias.double())
    v = F.linear(key.double(), W["v"].weight.double(), W["v"].bias.double())
    T, B, _ = q.shape
    S = k.shape[0]
    out = torch.zeros(T, B, E, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            sl = slice(h * D, (h + 1) * D)
            qh, kh, vh = q[:, b, sl], k[:, b, sl], v[:, b, sl]  # (T, D), (S, D)
            if qk_norm:
                cos = (qh / qh.norm(dim=-1, keepdim=True)) @ (kh / kh.norm(dim=-1, keepdim=True)).T
                logits = mha.qk_norm_g.double() * cos
            else:
                logits = qh @ kh.T / math.sqrt(D)
            if attn_mask is not None:
                logits = logits + attn_mask.double()
            if key_padding_mask is not None:
                logits = logits.masked_fill(key_padding_mask[b][None, :], float("-inf"))
            # a query whose keys are all masked attends to nothing (zeros, not NaN)
            out[:, b, sl] = torch.nan_to_num(torch.softmax(logits, dim=-1), nan=0.0) @ vh
    return F.linear(out, W["out"].weight.double(), W["out"].bias.double()).float()


def make(qk_norm=True, g0=3.0, **kw):
    torch.manual_seed(0)
    return QKNormMultiheadAttention(E, H, qk_norm=qk_norm, qk_norm_scale=g0 if qk_norm else None,
                                    **kw)


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


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("training", [False, True])
def test_encoder_attention_matches_reference(fused, padded, training):
    mha = make(encoder_decoder_attention=True, kdim=E, vdim=E)
    mha.use_fused = fused
    mha.train(training)  # dropout is 0: training and eval must agree with the formula
    query, key, pad = inputs()
    pad = pad if padded else None
    out, _ = mha(query, key, key, key_padding_mask=pad, need_weights=False)
    ref = reference_attention(mha, query, key, key_padding_mask=pad)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("fused", [True, False])
@pytest.mark.parametrize("padded", [False, True])
@pytest.mark.parametrize("causal", [False, True])
def test_self_attention_matches_reference(fused, padded, causal):
    mha = make(self_attention=True)
    mha.use_fused = fused
    x, _, pad = inputs(T=7, S=7)
    pad = pad if padded else None
    mask = causal_mask(7) if causal else None
    out, _ = mha(x, x, x, key_padding_mask=pad, attn_mask=mask, need_weights=False)
    ref = reference_attention(mha, x, x, key_padding_mask=pad, attn_mask=mask)
    torch.testing.assert_close(out, ref, atol=1e-5, rtol=1e-5)


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


def test_head_weights_shape_and_rows_sum_to_one():
    mha = make(encoder_decoder_attention=True, kdim=E, vdim=E)
    query, key, pad = inputs()
    _, w = mha(query, key, key, key_padding_mask=pad, need_head_weights=True)
    assert w.shape == (H, 3, 5, 7)
    torch.testing.assert_close(w.sum(-1), torch.ones(H, 3, 5))
    assert float(w[:, 2, :, :4].abs().max()) == 0.0  # padded keys get no weight


def test_training_mode_qknorm_is_active():
    """In training: g gets a gradient and every logit lies in [-|g|, |g|]."""
    mha = make(self_attention=True, g0=5.0, dropout=0.1)
    mha.train()
    x, _, pad = inputs(T=7, S=7)
    x = x * 100.0  # large activations: dot-product logits would be huge
    logits, _ = mha(x, x, x, key_padding_mask=pad, before_softmax=True)
    finite = logits[torch.isfinite(logits)]
    assert float(finite.abs().max()) <= 5.0 + 1e-4
    assert float(finite.abs().max()) > 1.0  # not trivially small
    out, _ = mha(x, x, x, key_padding_mask=pad, need_weights=False)  # fused training path
    out.pow(2).sum().backward()
    assert mha.qk_norm_g.grad is not None and float(mha.qk_norm_g.grad.abs()) > 0
    assert mha.qk_norm_g.dtype == torch.float32


def test_fused_and_explicit_paths_agree_with_gradients():
    torch.manual_seed(0)
    a = make(self_attention=True)
    b = make(self_attention=True)
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
        torch.testing.assert_close(pa.grad, pb.grad, atol=1e-5, rtol=1e-5, msg=na)


@pytest.mark.parametrize("qk_norm", [True, False])
def test_incremental_self_attention_equals_full(qk_norm):
    mha = make(qk_norm=qk_norm, self_attention=True).eval()
    x, _, _ = inputs(T=6, S=6)
    full, _ = mha(x, x, x, attn_mask=causal_mask(6), need_weights=False)
    state = {}
    steps = []
    for t in range(6):
        xt = x[t:t + 1]
        o, _ = mha(xt, xt, xt, incremental_state=state, need_weights=False)
        steps.append(o)
    torch.testing.assert_close(torch.cat(steps), full, atol=1e-5, rtol=1e-5)
    if qk_norm:  # cached keys are stored normalized
        cached = mha._get_input_buffer(state)["prev_key"]
        torch.testing.assert_close(cached.norm(dim=-1), torch.ones(cached.shape[:-1]))


def test_beam_shared_encoder_attention_and_reorder():
    """Beam-shared keys (set_beam_size) give the same result as expanded keys,
    and reorder_incremental_state keeps the cache consistent."""
    mha = make(encoder_decoder_attention=True, kdim=E, vdim=E).eval()
    beam, B, S = 2, 3, 7
    _, key, pad = inputs(S=S, B=B)
    key_exp = key.repeat_interleave(beam, dim=1)  # (S, B*beam, E)
    pad_exp = pad.repeat_interleave(beam, dim=0)
    q = torch.randn(1, B * beam, E)
    expected, w_exp = mha(q, key_exp, key_exp, key_padding_mask=pad_exp, need_weights=True)
    mha.set_beam_size(beam)
    state = {}
    got, w = mha(q, key_exp, key_exp, key_padding_mask=pad_exp, incremental_state=state,
                 static_kv=True, need_weights=True)
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
    mha = make(encoder_decoder_attention=True, kdim=E, vdim=E)
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
        torch.testing.assert_close(got, reference_attention(mha, q, key, key_padding_mask=pad),
                                   atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision_masking_has_no_nan(dtype):
    mha = make(self_attention=True, g0=12.59).to(dtype)
    x, _, pad = inputs(T=7, S=7)
    x = (x * 50).to(dtype)  # large activations: q.k would overflow fp16 without QKNorm
    pad[0, :] = True  # a fully padded row: output must be 0, not NaN
    for fused in (True, False):
        mha.use_fused = fused
        out, _ = mha(x, x, x, key_padding_mask=pad, attn_mask=causal_mask(7), need_weights=False)
        assert out.dtype == dtype
        assert torch.isfinite(out.float()).all()


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


def test_attention_stats_are_recorded():
    mha = make(self_attention=True, g0=4.0)
    mha.record_stats = True
    x, _, pad = inputs(T=7, S=7)
    mha(x, x, x, key_padding_mask=pad, need_weights=False)
    stats = mha.last_stats
    assert 0.0 < float(stats["entropy"]) <= math.log(7) + 1e-5  # nats, at most log(#keys)
    assert 0.0 < float(stats["max_logit"]) <= 4.0 + 1e-5


def test_unsupported_parent_features_raise():
    with pytest.raises(ValueError, match="add_bias_kv"):
        QKNormMultiheadAttention(E, H, self_attention=True, add_bias_kv=True)
    with pytest.raises(ValueError, match="qk_norm_scale"):
        QKNormMultiheadAttention(E, H, self_attention=True, qk_norm=True)
    for bad in (-1.0, 0.0, float("nan"), float("inf")):
        with pytest.raises(ValueError, match="finite and > 0"):
            QKNormMultiheadAttention(E, H, self_attention=True, qk_norm=True, qk_norm_scale=bad)
