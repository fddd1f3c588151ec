"""The one l2 normalization behind QKNorm, ScaleNorm and FixNorm."""

from typing import Optional

import torch
from torch import Tensor
from torch.autograd.function import once_differentiable


def _compute_dtype(dtype: torch.dtype) -> torch.dtype:
    # float32/float64 in their own precision, fp16/bf16 in float32 (a Python-level
    # check: torch.promote_types is a dispatched op, measurable per decoding step)
    return dtype if dtype in (torch.float32, torch.float64) else torch.float32


class _ScaledL2Normalize(torch.autograd.Function):
    """``scale * x / max(||x||, eps)`` with a hand-written backward.

    Autograd's backward of the composite (norm, clamp, divide, multiply) makes about
    eight full-size passes over ``x`` (the multiply's two gradients, the norm's
    gradient and its zero-norm ``masked_fill``, the accumulation of the two); this
    one makes four and allocates one full-size buffer. With ``n = ||x||`` and
    ``s = scale / max(n, eps)`` (shape ``(..., 1)``):
    ``dx = s * dy - [n > eps] * s / n^2 * <dy, x> * x`` and
    ``dscale = sum <dy, x> / max(n, eps)`` over the dimensions ``scale`` was broadcast
    along. fp16/bf16 compute in float32 (forward and backward), float32/float64 in
    their own precision.
    """

    @staticmethod
    def forward(ctx, x: Tensor, scale: Optional[Tensor], eps: float) -> Tensor:
        compute = _compute_dtype(x.dtype)
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=compute)  # (..., 1)
        inv = norm.clamp_min(eps).reciprocal_()
        s = inv if scale is None else scale.to(compute) * inv
        ctx.save_for_backward(x, inv, s, norm > eps, scale)
        out = x * s  # computed in `compute` (type promotion), one pass over x
        return out if out.dtype == x.dtype else out.to(x.dtype)

    @staticmethod
    @once_differentiable  # second derivatives would be wrong: raise instead
    def backward(ctx, dy: Tensor):
        x, inv, s, live, scale = ctx.saved_tensors
        compute = inv.dtype
        xc, dyc = x.to(compute), dy.to(compute)  # no copy for float32/float64
        # One full-size buffer for the whole backward (allocating is not free on CPU:
        # a fresh multi-MB tensor costs a page fault per 4 KiB): <dy, x> first, then dx.
        # It has x's memory layout, so dx does too: for a head-split view of a projection
        # (attention's q and k) the gradient then flows back through the split without
        # the copy that dy's layout (SDPA's) would need.
        buf = torch.mul(dyc, xc, out=torch.empty_like(xc))
        dot = buf.sum(-1, keepdim=True)  # <dy, x> per vector, (..., 1)
        grad_scale = None
        if scale is not None and ctx.needs_input_grad[1]:
            grad_scale = (dot * inv).sum_to_size(scale.shape).to(scale.dtype)
        grad_x = None
        if ctx.needs_input_grad[0]:
            coef = (dot * (s * inv * inv)).neg_().masked_fill_(~live, 0.0)  # clamped: no norm term
            # in place: an out-of-place addcmul (or add) of dy and x, whose memory
            # layouts differ in attention (x a head-split view, dy from SDPA's backward),
            # measured 15x slower on CPU than this
            grad_x = torch.mul(dyc, s, out=buf).addcmul_(xc, coef)
            grad_x = grad_x if grad_x.dtype == x.dtype else grad_x.to(x.dtype)
        return grad_x, grad_scale, None


def scaled_l2_normalize(x: Tensor, eps: float, scale: Optional[Tensor] = None) -> Tensor:
    """``scale * x / max(||x||_2, eps)`` over the last dimension, safe in fp16 and bf16.

    The norm, its reciprocal and the product are computed in float32 (float64 for
    float64 input) and only the result is cast back to ``x``'s dtype. In fp16, a
    sum of squares underflows to 0 for vectors with components below ~2e-4 and
    overflows above ~2e2 (sqrt of 65504 / d per component), and ``g / ||x||``
    overflows (``inf``, then ``0 * inf = NaN`` for a zero vector) whenever
    ``||x|| < g / 65504``; none of these can happen in float32 for normalized
    outputs, whose norm is ``|scale|``. ``scale`` multiplies the ``(..., 1)``
    reciprocal norm, so the full-size tensor is read twice and written once in the
    forward; the backward is hand-written (four full-size passes instead of
    autograd's eight; :class:`_ScaledL2Normalize`). Second derivatives raise.

    Used by QKNorm (Henry et al., 2020, Eq. 2-3: ``g q / ||q||`` and ``k / ||k||``),
    ScaleNorm (Nguyen & Salazar, 2019, Eq. 7: ``g x / ||x||``) and FixNorm
    (Nguyen & Chiang, 2018: unit-norm embedding rows).

    Args:
        x: ``(..., d)``, any float dtype.
        eps: lower clamp of ``||x||`` (a zero vector stays zero, with zero gradient
            through the norm).
        scale: ``None`` (unit norm) or a tensor broadcastable to ``(..., 1)`` (the
            learnable ``g``: a 0-dim tensor, or e.g. ``(num_heads, 1, 1)``); its
            gradient has its own shape and dtype.

    Returns:
        a tensor of ``x``'s shape and dtype.
    """
    if torch.is_grad_enabled() and (x.requires_grad or (scale is not None and scale.requires_grad)):
        return _ScaledL2Normalize.apply(x, scale, eps)
    # no gradient needed (decoding): the same forward in place on the small (..., 1)
    # factor, without the autograd Function's per-call cost (measurable per beam step)
    factor = torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=_compute_dtype(x.dtype))
    factor = factor.clamp_min_(eps).reciprocal_()
    if scale is not None:
        factor = factor.mul_(scale)
    out = x * factor
    return out if out.dtype == x.dtype else out.to(x.dtype)
