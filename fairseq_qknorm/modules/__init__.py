"""Building blocks: QKNorm attention, ScaleNorm, FixNorm."""

from .fix_norm import FixNormEmbedding, FixNormLinear
from .l2_norm import scaled_l2_normalize
from .qknorm_attention import QKNormMultiheadAttention, qk_norm_initial_scale
from .scale_norm import ScaleNorm

__all__ = [
    "FixNormEmbedding",
    "FixNormLinear",
    "QKNormMultiheadAttention",
    "ScaleNorm",
    "qk_norm_initial_scale",
    "scaled_l2_normalize",
]
