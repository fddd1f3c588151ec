"""Candidate faster implementations, benchmarked (``norms`` section) next to the plugin's.

Nothing here is used by the plugin. Each candidate computes exactly the plugin's function
(tests/test_benchmarks.py checks values and gradients); the benchmark says whether it is
faster. The exact change to apply, if it is, is in benchmarks/README.md.
"""

import torch
import torch.nn.functional as F
from torch import Tensor


class _ScaleNormFn(torch.autograd.Function):
    """``g * x / max(||x||, eps)`` with a hand-written backward (3 full-size passes
    instead of autograd's 5: ``dx = s * dy - s * <dy, x> / n^2 * x``, ``s = g / n``)."""

    @staticmethod
    def forward(ctx, x: Tensor, g: Tensor, eps: float) -> Tensor:
        acc = torch.float32 if x.element_size() < 4 else x.dtype  # fp16/bf16: float32
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=acc)
        inv = 1.0 / norm.clamp_min(eps)  # (..., 1)
        s = g.to(acc) * inv
        ctx.save_for_backward(x, inv, s, norm > eps)
        return x * s.to(x.dtype)

    @staticmethod
    def backward(ctx, dy: Tensor):
        x, inv, s, live = ctx.saved_tensors
        dot = (dy * x).sum(-1, keepdim=True, dtype=inv.dtype)  # <dy, x> per row
        grad_g = (dot * inv).sum().reshape(()) if ctx.needs_input_grad[1] else None
        coef = (-s * dot * inv * inv).masked_fill(~live, 0.0)  # 0 where the norm is clamped
        dx = torch.addcmul(dy * s.to(dy.dtype), x, coef.to(dy.dtype))
        return dx, grad_g, None


def scale_norm_custom_backward(x: Tensor, g: Tensor, eps: float = 1e-5) -> Tensor:
    """Same function as :class:`fairseq_qknorm.modules.ScaleNorm` (``g`` its ``scale``)."""
    return _ScaleNormFn.apply(x, g, eps)


def qk_normalize_then_scale(q: Tensor, g: Tensor, eps: float = 1e-6) -> Tensor:
    """What QKNormMultiheadAttention does today: ``F.normalize`` then ``q * g``."""
    return F.normalize(q, dim=-1, eps=eps) * g.to(q.dtype)


def qk_scale_folded(q: Tensor, g: Tensor, eps: float = 1e-6) -> Tensor:
    """Same value, ``g`` folded into the (..., 1) reciprocal norm: one full-size multiply."""
    norm = torch.linalg.vector_norm(q, dim=-1, keepdim=True).clamp_min(eps)
    return q * (g.to(q.dtype) / norm)
