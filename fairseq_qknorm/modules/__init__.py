"""Building blocks: QKNorm attention, ScaleNorm, FixNorm."""

from .fix_norm import FixNormEmbedding, FixNormLinear
from .qknorm_attention import QKNormMultiheadAttention, qk_norm_initial_scale
from .scale_norm import ScaleNorm

__all__ = [
    "FixNormEmbedding",
    "FixNormLinear",
    "QKNormMultiheadAttention",
    "ScaleNorm",
    "qk_norm_initial_scale",
]
