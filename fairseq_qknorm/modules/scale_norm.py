"""ScaleNorm (Nguyen & Salazar, "Transformers without Tears", IWSLT 2019, Sec. 2.2, Eq. 7)."""

import math
from typing import Optional

import torch
from torch import Tensor, nn
from torch.autograd.function import once_differentiable

from .l2_norm import scaled_l2_normalize


class _ScaleNormFunction(torch.autograd.Function):
    """``g * x / max(||x||, eps)`` for float32/float64 with a hand-written backward.

    Autograd's backward of the composite (norm, clamp, div, mul) makes about five
    full-size passes; this one makes three (measured 2x faster on CPU, see
    ``benchmarks/README.md``). With ``n = ||x||``, ``s = g / max(n, eps)``:
    ``dx = s * dy - [n > eps] * s / n^2 * <dy, x> * x`` and ``dg = sum <dy, x> / max(n, eps)``.
    """

    @staticmethod
    def forward(ctx, x: Tensor, g: Tensor, eps: float) -> Tensor:
        norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)  # (*, 1)
        inv = 1.0 / norm.clamp_min(eps)
        s = g.to(x.dtype) * inv
        ctx.save_for_backward(x, inv, s, norm > eps)
        return x * s

    @staticmethod
    @once_differentiable  # second derivatives would be wrong: raise instead
    def backward(ctx, dy: Tensor):
        x, inv, s, live = ctx.saved_tensors
        dot = (dy * x).sum(-1, keepdim=True)  # <dy, x> per row, (*, 1)
        grad_g = (dot * inv).sum().reshape(()) if ctx.needs_input_grad[1] else None
        coef = (-s * dot * inv * inv).masked_fill(~live, 0.0)  # no norm gradient where clamped
        return torch.addcmul(dy * s, x, coef), grad_g, None


class ScaleNorm(nn.Module):
    """``ScaleNorm(x) = g * x / max(||x||_2, eps)`` over the last dimension.

    One learnable scalar ``g`` per norm, initialised to ``sqrt(dim)`` (TWT
    Sec. 2.2), so that a unit-variance input keeps its scale. float32/float64
    inputs use a hand-written backward (``_ScaleNormFunction``), 2x faster on
    CPU than autograd's. fp16/bf16 inputs go through :func:`scaled_l2_normalize`:
    norm, ``g / ||x||`` and product in float32 (a sum of 512 squares overflows
    fp16 quickly, and ``g / ||x||`` reaches 1e6 at fairseq's zeroed pad
    positions), plain autograd, output in the input's dtype.

    Args:
        dim: size ``d`` of the normalized (last) dimension, a positive int.
        eps: lower clamp of ``||x||`` (TWT's code uses 1e-5), finite and > 0.
        scale: initial ``g``, finite and > 0; default ``sqrt(dim)``.

    Shape: input ``(*, dim)``, output the same; ``||output||_2 == g`` wherever
    ``||x|| >= eps``.

    Raises:
        ValueError: at construction for a bad ``dim``, ``eps`` or ``scale``; in
            ``forward`` for an input whose last dimension is not ``dim``.
    """

    def __init__(self, dim: int, eps: float = 1e-5, scale: Optional[float] = None):
        super().__init__()
        if isinstance(dim, bool) or not isinstance(dim, int) or dim < 1:
            raise ValueError(f"ScaleNorm dim must be a positive int, got {dim!r}")
        for name, value in (("eps", eps), ("scale", scale)):
            if value is not None and not (math.isfinite(float(value)) and float(value) > 0.0):
                raise ValueError(f"ScaleNorm {name} must be finite and > 0, got {value!r}")
        self.dim = dim
        self.eps = float(eps)
        self.scale = nn.Parameter(torch.tensor(math.sqrt(dim) if scale is None else float(scale)))

    def forward(self, x: Tensor) -> Tensor:
        if x.dim() == 0 or x.size(-1) != self.dim:
            raise ValueError(f"ScaleNorm({self.dim}) got an input of shape {tuple(x.shape)}: "
                             f"its last dimension must be {self.dim}")
        if x.element_size() >= 4:  # float32/float64: in the input's own precision
            return _ScaleNormFunction.apply(x, self.scale, self.eps)
        return scaled_l2_normalize(x, self.eps, self.scale)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"
