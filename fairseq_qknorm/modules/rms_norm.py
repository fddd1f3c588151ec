"""RMSNorm (Zhang & Sennrich, "Root Mean Square Layer Normalization", NeurIPS 2019, Eq. 4)."""

import torch
import torch.nn.functional as F
from torch import Tensor, nn

#: added to the mean of squares under the square root: the eps of fairseq's LayerNorm, which
#: this norm replaces (Zhang & Sennrich's Eq. 4 has none; their code adds 1e-8 to RMS(x))
RMS_NORM_EPS = 1e-5


class RMSNorm(nn.RMSNorm):
    """``RMSNorm(x) = x / sqrt(mean(x^2) + eps) * g`` over the last dimension.

    Zhang & Sennrich (2019), Eq. 4: LayerNorm without the mean subtraction (re-scaling
    invariance only) and, by default as there, without a bias; ``g`` a learnable gain of size
    ``dim`` initialised to 1. Identical to :class:`torch.nn.RMSNorm` except for the precision:
    fp16/bf16 inputs (and a weight in another dtype than the input, as under autocast) are
    normalized in float32 with a float32 copy of ``g`` and the output is cast back to the
    input's dtype, as :class:`~fairseq_qknorm.modules.ScaleNorm` does (a mean of squares of
    512 components overflows fp16 for components above ~11 and underflows for tiny ones).

    Args:
        dim: size ``d`` of the normalized (last) dimension.
        eps: added to ``mean(x^2)`` (default :data:`RMS_NORM_EPS`).

    Shape: input ``(*, dim)``, output the same and of the input's dtype.

    Raises:
        RuntimeError: (torch's) an input whose last dimension is not ``dim``.
    """

    def __init__(self, dim: int, eps: float = RMS_NORM_EPS):
        super().__init__(dim, eps=eps, elementwise_affine=True)

    def forward(self, x: Tensor) -> Tensor:
        """``x / RMS(x) * g``: ``(*, dim)`` -> ``(*, dim)``, in float32 for fp16/bf16."""
        if x.dtype in (torch.float32, torch.float64) and self.weight.dtype == x.dtype:
            return super().forward(x)
        out = F.rms_norm(x.float(), self.normalized_shape, self.weight.float(), self.eps)
        return out.to(x.dtype)
