"""Building blocks: the QK-norm family of attention, ScaleNorm, RMSNorm, FixNorm, σReparam."""

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
from .rms_norm import RMSNorm
from .scale_norm import ScaleNorm
from .sigma_reparam import SigmaReparam, apply_sigma_reparam

__all__ = [
    "ATTN_NORMALIZATIONS",
    "QK_G_TYPES",
    "QK_NORM_TYPES",
    "ZeroCenteredRMSNorm",
    "lp_normalize",
    "FixNormEmbedding",
    "FixNormLinear",
    "QKNormMultiheadAttention",
    "RMSNorm",
    "ScaleNorm",
    "SigmaReparam",
    "apply_sigma_reparam",
    "qk_norm_initial_scale",
    "scaled_l2_normalize",
]
