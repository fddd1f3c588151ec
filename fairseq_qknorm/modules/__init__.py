"""Building blocks: QKNorm and the QK-norm family of attention, ScaleNorm, FixNorm."""

from .fix_norm import FixNormEmbedding, FixNormLinear
from .l2_norm import scaled_l2_normalize
from .qknorm_attention import (
    ATTN_NORMALIZATIONS,
    QK_G_TYPES,
    QK_NORM_TYPES,
    QKNormMultiheadAttention,
    ZeroCenteredRMSNorm,
    lp_normalize,
    qk_norm_initial_scale,
)
from .scale_norm import ScaleNorm

__all__ = [
    "ATTN_NORMALIZATIONS",
    "QK_G_TYPES",
    "QK_NORM_TYPES",
    "ZeroCenteredRMSNorm",
    "lp_normalize",
    "FixNormEmbedding",
    "FixNormLinear",
    "QKNormMultiheadAttention",
    "ScaleNorm",
    "qk_norm_initial_scale",
    "scaled_l2_normalize",
]
