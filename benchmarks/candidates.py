"""The plugin's previous implementations, benchmarked (``norms`` section) next to today's.

Both optimizations below were adopted after this harness measured them (see
benchmarks/README.md): ScaleNorm's hand-written backward
(``fairseq_qknorm/modules/scale_norm.py``) and QKNorm's ``g`` folded into the reciprocal
query norm (``fairseq_qknorm/modules/qknorm_attention.py``). The plain-autograd versions stay
here as the reference the speed-ups are measured against; tests/test_benchmarks.py checks
that they compute the same values and gradients as the plugin.
"""

import torch
import torch.nn.functional as F
from torch import Tensor


def scale_norm_autograd(x: Tensor, g: Tensor, eps: float = 1e-5) -> Tensor:
    """ScaleNorm ``g * x / max(||x||, eps)`` (TWT Eq. 7) by plain autograd.

    The plugin's implementation before the hand-written backward; float32/float64 ``x`` of
    shape ``(*, d)``.
    """
    norm = torch.linalg.vector_norm(x, dim=-1, keepdim=True)
    return x * (g / norm.clamp_min(eps))


def qk_normalize_then_scale(q: Tensor, g: Tensor, eps: float = 1e-6) -> Tensor:
    """QKNorm's scaled queries ``g * q / ||q||`` (Henry et al. 2020, Eq. 2), as before.

    As the plugin computed them before: ``F.normalize`` then ``* g`` (two full-size passes).
    """
    return F.normalize(q, dim=-1, eps=eps) * g.to(q.dtype)
