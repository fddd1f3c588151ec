"""ScaleNorm (Nguyen & Salazar, "Transformers without Tears", IWSLT 2019, Sec. 2.2, Eq. 7)."""

import math
from typing import Optional

import torch
from torch import Tensor, nn

from .l2_norm import scaled_l2_normalize


class ScaleNorm(nn.Module):
    """``ScaleNorm(x) = g * x / max(||x||_2, eps)`` over the last dimension.

    One learnable scalar ``g`` per norm, initialised to ``sqrt(dim)`` (TWT
    Sec. 2.2), so that a unit-variance input keeps its scale. Computed by
    :func:`scaled_l2_normalize` (hand-written backward, 2x faster on CPU than
    autograd's): float32/float64 in their own precision, fp16/bf16 with norm,
    ``g / ||x||`` and product in float32 (a sum of 512 squares overflows fp16
    quickly, and ``g / ||x||`` reaches 1e6 at fairseq's zeroed pad positions),
    output in the input's dtype.

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
        """``g * x / max(||x||, eps)`` over the last dimension; shape ``(*, dim)`` kept.

        Raises:
            ValueError: ``x`` is 0-dimensional or its last dimension is not ``dim``.
        """
        if x.dim() == 0 or x.size(-1) != self.dim:
            raise ValueError(
                f"ScaleNorm({self.dim}) got an input of shape {tuple(x.shape)}: "
                f"its last dimension must be {self.dim}"
            )
        return scaled_l2_normalize(x, self.eps, self.scale)

    def extra_repr(self) -> str:
        """``dim`` and ``eps`` for ``repr(module)``."""
        return f"{self.dim}, eps={self.eps}"
