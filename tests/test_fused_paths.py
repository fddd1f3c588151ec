"""Fused (scaled_dot_product_attention) vs explicit (matmul + softmax) attention paths.

Complements tests/test_attention.py (which checks each path against a float64 reference and
fused vs explicit gradients for causal self-attention): here outputs *and gradients* of the
two paths must agree within 1e-5 in fp32 for self- and encoder-attention, for every member
of the QK-norm family and with it off (``VARIANTS`` of tests/conftest.py), with padding,
in training and eval mode, in incremental decoding (self-attention cache and beam-shared static
encoder keys), and for a whole model's training step.
"""

import pytest
import torch

from fairseq_qknorm.modules import QKNormMultiheadAttention

from conftest import VARIANTS, E, build_model, make, reference_attention, tiny_model

TOL = dict(atol=1e-5, rtol=1e-5)
ALL = list(VARIANTS)


def pair(variant, **kw):
    """Two identical modules of ``variant``, the second forced onto the explicit path, the
    first on the fused kernel wherever weights are not needed (single queries included)."""
    a = make(variant, g0=5.0, **kw)
    b = make(variant, g0=5.0, **kw)
    b.load_state_dict(a.state_dict())
    a.fused_min_queries = 1
    b.use_fused = False
    return a, b


def causal(T):
    return torch.triu(torch.full((T, T), float("-inf")), 1)


def assert_grads_close(a, b):
    for (name, pa), (_, pb) in zip(a.named_parameters(), b.named_parameters()):
        if not pa.requires_grad:  # frozen QKNorm g
            assert pa.grad is None and pb.grad is None, name
            continue
        assert pa.grad is not None, name
        # 1e-5 relative to the tensor's scale: FixNorm makes embedding gradients O(100)
        scale = max(1.0, float(pa.grad.abs().max()))
        torch.testing.assert_close(
            pa.grad, pb.grad, atol=1e-5 * scale, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}"
        )


@pytest.mark.parametrize("variant", ALL)
@pytest.mark.parametrize("training", [True, False])
def test_encoder_attention_outputs_and_grads_agree(variant, training):
    a, b = pair(variant, encoder_decoder_attention=True, kdim=E, vdim=E)
    a.train(training)
    b.train(training)
    g = torch.Generator().manual_seed(3)
    T, S, B = 5, 9, 3
    q0, k0 = torch.randn(T, B, E, generator=g), torch.randn(S, B, E, generator=g)
    pad = torch.zeros(B, S, dtype=torch.bool)
    pad[1, :3] = True  # left-padded sources
    pad[2, :7] = True
    qa, ka = q0.clone().requires_grad_(), k0.clone().requires_grad_()
    qb, kb = q0.clone().requires_grad_(), k0.clone().requires_grad_()
    oa, _ = a(qa, ka, ka, key_padding_mask=pad, need_weights=False)
    ob, _ = b(qb, kb, kb, key_padding_mask=pad, need_weights=False)
    torch.testing.assert_close(oa, ob, **TOL)
    grad = torch.randn(oa.shape, generator=g)
    oa.backward(grad)
    ob.backward(grad)
    torch.testing.assert_close(qa.grad, qb.grad, **TOL)
    torch.testing.assert_close(ka.grad, kb.grad, **TOL)
    assert_grads_close(a, b)


@pytest.mark.parametrize("variant", ALL)
@pytest.mark.parametrize("training", [True, False])
def test_decoder_self_attention_outputs_and_grads_agree(variant, training):
    a, b = pair(variant, self_attention=True)
    a.train(training)
    b.train(training)
    g = torch.Generator().manual_seed(4)
    T, B = 8, 3
    x0 = torch.randn(T, B, E, generator=g)
    pad = torch.zeros(B, T, dtype=torch.bool)
    pad[1, -2:] = True  # right-padded targets
    pad[2, -5:] = True
    xa, xb = x0.clone().requires_grad_(), x0.clone().requires_grad_()
    oa, _ = a(xa, xa, xa, key_padding_mask=pad, attn_mask=causal(T), need_weights=False)
    ob, _ = b(xb, xb, xb, key_padding_mask=pad, attn_mask=causal(T), need_weights=False)
    torch.testing.assert_close(oa, ob, **TOL)
    grad = torch.randn(oa.shape, generator=g)
    oa.backward(grad)
    ob.backward(grad)
    torch.testing.assert_close(xa.grad, xb.grad, **TOL)
    assert_grads_close(a, b)


@pytest.mark.parametrize("variant", ALL)
def test_need_weights_path_output_equals_fused(variant):
    """need_weights=True forces the explicit path even with use_fused: same output."""
    a, _ = pair(variant, self_attention=True)
    x = torch.randn(6, 2, E)
    o_fused, w_none = a(x, x, x, attn_mask=causal(6), need_weights=False)
    o_expl, w = a(x, x, x, attn_mask=causal(6), need_weights=True)
    assert w_none is None and w is not None
    torch.testing.assert_close(o_fused, o_expl, **TOL)


@pytest.mark.parametrize("variant", ALL)
def test_incremental_self_attention_paths_agree(variant):
    a, b = pair(variant, self_attention=True)
    a.eval()
    b.eval()
    x = torch.randn(7, 4, E, generator=torch.Generator().manual_seed(5))
    sa, sb = {}, {}
    order = torch.tensor([1, 0, 3, 2])  # beam reorder between steps
    for t in range(7):
        xt = x[t : t + 1]
        oa, _ = a(xt, xt, xt, incremental_state=sa, need_weights=False)
        ob, _ = b(xt, xt, xt, incremental_state=sb, need_weights=False)
        torch.testing.assert_close(oa, ob, **TOL)
        a.reorder_incremental_state(sa, order)
        b.reorder_incremental_state(sb, order)


@pytest.mark.parametrize("variant", ALL)
@pytest.mark.parametrize("beam_shared", [True, False])
def test_incremental_encoder_attention_paths_agree(variant, beam_shared):
    a, b = pair(variant, encoder_decoder_attention=True, kdim=E, vdim=E)
    a.eval()
    b.eval()
    beam, B, S = 2, 3, 6
    g = torch.Generator().manual_seed(6)
    key = torch.randn(S, B, E, generator=g).repeat_interleave(beam, dim=1)
    pad = torch.zeros(B, S, dtype=torch.bool)
    pad[1, :2] = True
    pad = pad.repeat_interleave(beam, dim=0)
    if beam_shared:
        a.set_beam_size(beam)
        b.set_beam_size(beam)
    sa, sb = {}, {}
    for t in range(3):
        q = torch.randn(1, B * beam, E, generator=g)
        k = key if t == 0 else None
        kpm = pad if t == 0 else None
        oa, _ = a(
            q, k, k, key_padding_mask=kpm, incremental_state=sa, static_kv=True, need_weights=False
        )
        ob, _ = b(
            q, k, k, key_padding_mask=kpm, incremental_state=sb, static_kv=True, need_weights=False
        )
        torch.testing.assert_close(oa, ob, **TOL)
        order = torch.tensor([1, 0, 3, 2, 5, 4])
        a.reorder_incremental_state(sa, order)
        b.reorder_incremental_state(sb, order)


@pytest.mark.parametrize(
    "arch, qk_flags",
    [
        ("transformer_qknorm_paper", ["--qk-norm-scale", "6"]),
        ("transformer_qknorm_paper", ["--qk-norm-scale", "6", "--qk-norm-scale-per-head"]),
        ("transformer_qknorm_paper", ["--qk-norm-type", "layernorm"]),
        ("transformer_qknorm_paper", ["--qk-norm-type", "rmsnorm"]),
        ("transformer_twt", []),
    ],
)
def test_model_training_step_paths_agree(toy_task, arch, qk_flags):
    """A whole model (padded toy batch, dropout 0): loss and every gradient agree."""
    flags = [*tiny_model(layers=2, dim=32, heads=4), *qk_flags]
    torch.manual_seed(0)
    ma, _ = build_model(toy_task, arch, flags)
    mb, _ = build_model(toy_task, arch, flags)
    mb.load_state_dict(ma.state_dict())
    for m in mb.modules():
        if isinstance(m, QKNormMultiheadAttention):
            m.use_fused = False
    d = toy_task.source_dictionary
    g = torch.Generator().manual_seed(7)
    src = torch.randint(d.nspecial, len(d), (3, 7), generator=g)
    src[0, :3] = d.pad()  # left-padded source
    src[:, -1] = d.eos()
    prev = torch.randint(d.nspecial, len(d), (3, 6), generator=g)
    prev[:, 0] = d.eos()
    prev[2, -2:] = d.pad()  # right-padded target
    lengths = (src != d.pad()).sum(1)
    losses = []
    for m in (ma, mb):
        m.train()
        out, _ = m(src, lengths, prev)
        keep = prev != d.pad()
        loss = out.float().logsumexp(-1).masked_fill(~keep, 0).sum() / keep.sum()
        loss.backward()
        losses.append(loss)
    torch.testing.assert_close(losses[0], losses[1], **TOL)
    for (name, pa), (_, pb) in zip(ma.named_parameters(), mb.named_parameters()):
        if pa.grad is None:
            assert pb.grad is None, name
            continue
        # 1e-5 relative to the tensor's scale: FixNorm makes embedding gradients O(100)
        scale = max(1.0, float(pa.grad.abs().max()))
        torch.testing.assert_close(
            pa.grad, pb.grad, atol=1e-5 * scale, rtol=1e-5, msg=lambda m, name=name: f"{name}: {m}"
        )


@pytest.fixture
def sdpa_masks(monkeypatch):
    """The ``attn_mask`` of every ``scaled_dot_product_attention`` call (None included)."""
    calls = []
    real = torch.nn.functional.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs.get("attn_mask"))
        return real(*args, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    return calls


@pytest.mark.parametrize("variant", ALL)
def test_padding_mask_without_pads_is_not_applied(variant, sdpa_masks):
    """fairseq's encoder always returns a padding mask: without any pad the fused kernel
    gets no mask, and both paths give exactly the output of no mask."""
    a, b = pair(variant, encoder_decoder_attention=True, kdim=E, vdim=E)
    q, k = torch.randn(5, 3, E), torch.randn(7, 3, E)
    no_pads = torch.zeros(3, 7, dtype=torch.bool)
    for m in (a, b):
        with_mask, _ = m(q, k, k, key_padding_mask=no_pads, need_weights=False)
        without, _ = m(q, k, k, key_padding_mask=None, need_weights=False)
        assert torch.equal(with_mask, without)
    # module a only; soft cap and NAP never reach the kernel
    assert sdpa_masks == ([None, None] if a.fused_capable else [])


@pytest.mark.parametrize("variant", ALL)
@pytest.mark.parametrize("training", [True, False])
def test_fully_padded_sentence_attends_to_nothing_on_both_paths(variant, training):
    """A sentence whose keys are all pads, with a causal mask (dead rows found from the
    mask, not from the logits): the float64 reference (zeros before the output
    projection), finite gradients, on the fused and the explicit path."""
    a, b = pair(variant, self_attention=True)
    x = torch.randn(6, 3, E, generator=torch.Generator().manual_seed(8))
    pad = torch.zeros(3, 6, dtype=torch.bool)
    pad[0] = True
    pad[2, :2] = True
    ref = reference_attention(a, x, x, attn_mask=causal(6), key_padding_mask=pad)
    for m in (a, b):
        m.train(training)
        xm = x.clone().requires_grad_()
        out, _ = m(xm, xm, xm, key_padding_mask=pad, attn_mask=causal(6), need_weights=False)
        torch.testing.assert_close(out, ref, **TOL)
        out.sum().backward()
        assert torch.isfinite(xm.grad).all()


@pytest.mark.parametrize("variant", ALL)
def test_single_query_steps_take_the_explicit_path_on_cpu(variant, sdpa_masks):
    """Incremental decoding (one query per row) skips the fused kernel on CPU by default
    (``fused_min_queries = 2``); a full forward uses it; the outputs are those of the fused
    kernel forced onto single queries."""
    a, b = pair(variant, self_attention=True)  # a: fused_min_queries 1
    b.use_fused = True
    assert b.fused_min_queries == 2
    a.eval()
    b.eval()
    x = torch.randn(4, 2, E, generator=torch.Generator().manual_seed(9))
    sa, sb = {}, {}
    for t in range(4):
        xt = x[t : t + 1]
        oa, _ = a(xt, xt, xt, incremental_state=sa, need_weights=False)
        ob, _ = b(xt, xt, xt, incremental_state=sb, need_weights=False)
        torch.testing.assert_close(oa, ob, **TOL)
    fused = 1 if a.fused_capable else 0  # soft cap and NAP never reach the kernel
    assert len(sdpa_masks) == 4 * fused  # module a's steps only
    b(x, x, x, attn_mask=causal(4), need_weights=False)
    assert len(sdpa_masks) == 5 * fused


def test_mask_shortcuts_never_synchronize_off_cpu():
    """The no-pad and no-dead-row shortcuts read a value on the host, which on a GPU costs a
    synchronization per call: off the CPU (here the meta device, where reading a value
    raises) the masks are built and applied as they are."""
    a, _ = pair("off", self_attention=True)
    no_pads = torch.zeros(2, 3, dtype=torch.bool, device="meta")
    mask = a._attention_mask(None, no_pads, torch.float32)
    assert mask is not None and mask.shape == (2, 1, 1, 3) and mask.device.type == "meta"
    dead = QKNormMultiheadAttention._dead_rows(mask)
    assert dead is not None and dead.shape == (2, 1, 1, 1)
    # on CPU the same inputs take the shortcuts
    assert a._attention_mask(None, torch.zeros(2, 3, dtype=torch.bool), torch.float32) is None
    assert QKNormMultiheadAttention._dead_rows(torch.ones(2, 1, 1, 3, dtype=torch.bool)) is None


@pytest.mark.parametrize("variant", ["off", "l2"])
def test_attention_stats_leave_out_fully_padded_sentences(variant):
    """Entropy statistics average over queries that see a key: with dead rows found from the
    (B, 1, 1, S) mask, a fully padded sentence's queries are left out, as before."""
    a, _ = pair(variant, encoder_decoder_attention=True, kdim=E, vdim=E)
    a.record_stats = True
    q, k = torch.randn(4, 3, E), torch.randn(6, 3, E)
    pad = torch.zeros(3, 6, dtype=torch.bool)
    pad[1] = True
    pad[2, :3] = True
    _, w = a(q, k, k, key_padding_mask=pad, need_head_weights=True)  # (H, B, T, S)
    assert torch.equal(w[:, 1], torch.zeros_like(w[:, 1]))
    live = w[:, [0, 2]].double()
    entropy = -(live * torch.log(live.clamp_min(1e-30))).sum(-1).mean()
    assert float(a.last_stats["entropy"]) == pytest.approx(float(entropy), rel=1e-5)
