"""The one l2 normalization behind QKNorm, ScaleNorm (fp16/bf16) and FixNorm."""

from typing import Optional

import torch
from torch import Tensor


def scaled_l2_normalize(x: Tensor, eps: float, scale: Optional[Tensor] = None) -> Tensor:
    """``scale * x / max(||x||_2, eps)`` over the last dimension, safe in fp16 and bf16.

    The norm, its reciprocal and the product are computed in float32 (float64 for
    float64 input) and only the result is cast back to ``x``'s dtype. In fp16, a
    sum of squares underflows to 0 for vectors with components below ~2e-4 and
    overflows above ~2e2 (sqrt of 65504 / d per component), and ``g / ||x||``
    overflows (``inf``, then ``0 * inf = NaN`` for a zero vector) whenever
    ``||x|| < g / 65504``; none of these can happen in float32 for normalized
    outputs, whose norm is ``|scale|``. ``scale`` multiplies the ``(..., 1)``
    reciprocal norm, so for float32 input the full-size tensor is read and written
    once (the float32 fast path; fp16/bf16 add one cast of the result).

    Used by QKNorm (Henry et al., 2020, Eq. 2-3: ``g q / ||q||`` and ``k / ||k||``),
    ScaleNorm (Nguyen & Salazar, 2019, Eq. 7: ``g x / ||x||``) in half precision,
    and FixNorm (Nguyen & Chiang, 2018: unit-norm embedding rows).

    Args:
        x: ``(..., d)``, any float dtype.
        eps: lower clamp of ``||x||`` (a zero vector stays zero).
        scale: ``None`` (unit norm) or a tensor broadcastable to ``(..., 1)`` (the
            learnable ``g``: a 0-dim tensor, or e.g. ``(num_heads, 1, 1)``).

    Returns:
        a tensor of ``x``'s shape and dtype.
    """
    compute = torch.promote_types(x.dtype, torch.float32)
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True, dtype=compute)  # (..., 1)
    if scale is None:
        factor = norm.clamp_min(eps).reciprocal()
    else:
        factor = scale.to(compute) / norm.clamp_min(eps)
    out = x * factor  # computed in `compute` (type promotion), one pass over x
    return out if out.dtype == x.dtype else out.to(x.dtype)
