"""Multi-head attention with optional query-key normalization (the QK-norm family).

``qk_norm_type="l2"`` (the default of ``--qk-norm``) is QKNorm (Henry, Dachapally,
Pawar & Chen, "Query-Key Normalization for Transformers", Findings of EMNLP 2020,
Sec. 3, Eq. 2-3). It replaces scaled dot-product attention

    softmax(q k^T / sqrt(d_head))

by

    softmax(g * q_hat k_hat^T),   q_hat = q / ||q||_2,  k_hat = k / ||k||_2,

where the l2 norms run over the head dimension (each query and key vector of
each head is normalized; values are untouched) and ``g`` is one learnable
scalar per attention module, initialised as ``g0 = log2(L^2 - L)`` with ``L``
the 97.5th percentile of training sentence lengths (Eq. 4 of the paper).
Every logit therefore lies in ``[-|g|, |g|]``. Options of this type only:

* ``qk_norm_scale_per_head``: one learnable ``g`` per head instead of per
  module, the per-head learnable temperature of the scaled cosine attention of
  Swin Transformer V2 (Liu et al., CVPR 2022, Sec. 3.2: ``cos(q, k) / tau + B``,
  ``tau`` learned per head and layer). Unlike Swin V2, ``g = 1 / tau`` is learned
  directly (not its log), starts at QKNorm's ``g0`` (Swin V2: 10), is not
  clamped (Swin V2: ``1 / tau <= 100``) and there is no position bias ``B``;
* ``qk_norm_freeze_scale``: ``g`` stays at ``g0`` (no gradient, not trained).

``"layernorm"`` and ``"rmsnorm"`` keep ``softmax(N_q(q) N_k(k)^T / sqrt(d_head))``
and put a norm ``N`` on q and k instead (separate weights for q and k):

* ``layernorm``: LayerNorm over the head dimension of each query/key vector of
  each head, ``(x - mean(x)) / sqrt(var(x) + eps) * w``, learnable per-channel
  weight ``w`` of size ``d_head`` shared by all heads, no bias. This is the
  QK normalization of ViT-22B (Dehghani et al., "Scaling Vision Transformers to
  22 Billion Parameters", ICML 2023, Sec. 2) as its reference implementation
  has it (flax ``MultiHeadDotProductAttention(normalize_qk=True)``: LayerNorm over
  the head dimension, scale of size ``d_head``, ``use_bias=False``), and the
  "qk-layernorm" of Wortsman et al., "Small-scale proxies for large-scale
  Transformer training instabilities", ICLR 2024.
* ``rmsnorm``: the same with RMSNorm (Zhang & Sennrich, NeurIPS 2019),
  ``x / sqrt(mean(x^2) + eps) * w``, per head: Gemma 3's QK-norm (Gemma Team,
  "Gemma 3 Technical Report", 2025; ``q_norm``/``k_norm`` of size ``d_head``,
  stored there as ``1 + w`` with ``w`` initialised 0 -- the same function, but
  weight decay pulls theirs to 1 and ours to 0). OLMo 2 (Team OLMo, "2 OLMo 2
  Furious", 2024) applies RMSNorm to q and k over the whole projection width
  instead (one RMS over all heads, weight of size ``num_heads * d_head``, before
  the head split), so there one head's logits change when another head's q is
  rescaled; that variant is the ``rmsnorm_full`` type below.

These two have no ``g`` and no ``g0``. Both use ``eps = 1e-6`` (flax's LayerNorm
default; Gemma 3's and OLMo 2's ``rms_norm_eps``), torch's own ``F.layer_norm`` /
``F.rms_norm`` (``nn.LayerNorm`` / ``nn.RMSNorm``), which compute in float32 for
fp16/bf16 inputs.

Members added for the stability work (Wortsman et al. 2023 and the large models since):

* ``lp``: Lp-normalized QKNorm (arXiv 2602.05006): ``g * (q / ||q||_p) . (k / ||k||_p)``
  with ``||x||_p = (sum_i |x_i|^p)^(1/p)`` over the head dimension, ``p >= 1``
  (``qk_norm_p``), ``g`` exactly as l2 (``qk_norm_scale``, per head, frozen). p = 2 is
  QKNorm. For p > 2 a unit-Lp vector can have an l2 norm up to ``d^(1/2 - 1/p)``, so the
  logits are bounded by ``g * d^(1 - 2/p)`` instead of ``g``.
* ``rmsnorm_full``: OLMo 2's QK-norm (Team OLMo, "2 OLMo 2 Furious", 2024, Sec. 3.1):
  RMSNorm of the whole q projection and the whole k projection (width ``embed_dim``,
  all heads at once, learnable weight of size ``embed_dim``) *before* the head split,
  then ``q.k / sqrt(d_head)`` per head.
* ``rmsnorm_zc``: Gemma 3's per-head RMSNorm as Gemma stores it: weight ``w`` of size
  ``d_head`` initialised at **0** and applied as ``(1 + w)`` (zero-centred), so that
  weight decay pulls the gain to 1 instead of 0 (Gemma Team 2025; the ``rmsnorm`` type
  is the same function with ``w`` initialised at 1).

Independent of the QK-norm type:

* ``attn_logit_softcap=C``: soft capping of the attention logits,
  ``C * tanh(logits / C)`` before the softmax (Gemma 2, Gemma Team 2024, Sec. 2;
  Rybakov et al. 2024, arXiv 2410.16682, "softmax capping"); every logit then lies in
  ``(-C, C)``. Composable with every QK-norm type and with none.
* ``attn_normalization="nap"``: normalized attention pooling without the softmax
  (Richter & Wattenhofer 2020, "Normalized Attention Without Probability Cage",
  arXiv 2005.09561, Sec. 5, and the authors' ``NormalizeAttention``): for each query
  the raw scores ``s_j = q . k_j`` (no ``1/sqrt(d_head)``: the normalization makes the
  scale irrelevant) over its unmasked keys are standardized and scaled,
  ``a_j = gamma_h (s_j - mean(s)) / (std(s) + 1e-3) + beta_h``, ``a_j = 0`` at masked
  keys, with the population std, one learnable gain ``gamma_h`` (init 1) and bias
  ``beta_h`` (init 0) per head (``self.nap_gain``, ``self.nap_bias``); the output is
  ``sum_j a_j v_j``. The weights are not probabilities (they sum to ``n beta_h``, may be
  negative). Not combinable with l2/lp QKNorm (``g`` would cancel in the
  standardization) or with soft capping (there is no softmax to cap).
* ``qk_clip=TAU``: QK-clip (Kimi K2's MuonClip, Kimi Team 2025, Sec. 2.1; Megatron-LM
  ``qk_clip``): training forwards record each head's largest logit ``S_h`` (before any
  capping), and :meth:`QKNormMultiheadAttention.qk_clip_` (called by the task after the
  optimizer step) rescales the q and k projection rows of each head with
  ``S_h > TAU`` by ``sqrt(TAU / S_h)`` each, so that head's logits shrink by
  ``TAU / S_h``. Only without QK-norm (every QK-norm type is invariant to that
  rescaling, so the clip would do nothing) and without NAP.

Which rescaling of the projected q and k leaves the logits unchanged (per vector,
``a > 0``, ``c`` any real; exact up to ``eps``): l2 and lp ``a q``;
layernorm ``a q + c 1``; rmsnorm and rmsnorm_zc ``a q``; rmsnorm_full ``a q`` of the whole
projection (all heads by the same ``a``); dot product (QK-norm off) none.
"""

import math
from typing import Optional

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor, nn

from .l2_norm import scaled_l2_normalize

#: Clamp for the l2 norm of q and k (paper gives none). 1e-6 is representable in
#: fp16/bf16, unlike F.normalize's default 1e-12 which underflows to 0 in fp16.
QK_NORM_EPS = 1e-6
#: eps of the per-head LayerNorm/RMSNorm of q and k (flax LayerNorm default; Gemma 3, OLMo 2)
QK_HEAD_NORM_EPS = 1e-6
#: ``--qk-norm-type`` choices; the first is the default
QK_NORM_TYPES = ("l2", "layernorm", "rmsnorm", "lp", "rmsnorm_full", "rmsnorm_zc")
#: the QK-norm types with QKNorm's learnable logit scale ``g`` (and no 1/sqrt(d_head))
QK_G_TYPES = ("l2", "lp")
#: ``--attn-normalization`` choices; the first is the default
ATTN_NORMALIZATIONS = ("softmax", "nap")
#: eps added to the std of NAP's standardization (Richter & Wattenhofer's code: 0.001)
NAP_EPS = 1e-3


def qk_norm_initial_scale(length: Optional[float] = None, scale: Optional[float] = None) -> float:
    """Initial value ``g0`` of the QKNorm scale.

    ``g0 = log2(L^2 - L)`` (Henry et al., 2020, Eq. 4), where ``L`` is the
    97.5th-percentile training sentence length in (BPE) tokens; or ``scale``
    itself when given. Exactly one of the two must be set. The only place g0 is
    computed: the model logs the value it returns.

    Args:
        length: ``L`` in tokens, finite and >= 2 (so that ``g0 >= 1``).
        scale: ``g0`` directly (finite, > 0).

    Returns:
        ``g0`` as a Python float.

    Raises:
        ValueError: both or neither given, ``length`` not finite or < 2 (or so large
            that ``L^2`` overflows), or ``scale`` not finite or <= 0.
    """
    if (length is None) == (scale is None):
        raise ValueError(
            "QKNorm needs exactly one of --qk-norm-length L (g0 = log2(L^2 - L)) "
            f"or --qk-norm-scale G (g0 = G); got length={length!r}, scale={scale!r}"
        )
    if scale is not None:
        scale = float(scale)
        if not math.isfinite(scale) or scale <= 0.0:
            raise ValueError(f"--qk-norm-scale must be finite and > 0, got {scale!r}")
        return scale
    length = float(length)
    # L >= 2 gives g0 >= 1; a huge L would overflow L^2
    if not math.isfinite(length) or length < 2.0 or not math.isfinite(length * length):
        raise ValueError(
            f"--qk-norm-length must be finite and >= 2 (g0 = log2(L^2 - L) > 0), got {length!r}"
        )
    return math.log2(length * length - length)


def qk_scaled_queries(q: Tensor, g: Tensor, eps: float = QK_NORM_EPS) -> Tensor:
    """QKNorm's queries with the logit scale folded in: ``g * q / max(||q||_2, eps)``.

    Henry et al. (2020), Eq. 2-3: with unit keys ``k_hat``, ``(g q_hat) . k_hat = g cos(q, k)``.
    ``g`` multiplies the float32 ``(..., 1)`` reciprocal norm, so the full-size tensor is
    touched once (1.55x faster than ``F.normalize`` then ``* g``, benchmarks/README.md), and
    fp16/bf16 queries neither overflow nor give NaN (:func:`scaled_l2_normalize`).

    Args:
        q: queries ``(..., head_dim)``, any float dtype.
        g: the scale, broadcastable to ``(..., 1)``: a 0-dim tensor (one per module) or
            ``(num_heads, 1, 1)`` for ``q`` of shape ``(B, num_heads, T, head_dim)``.
        eps: lower clamp of ``||q||``.

    Returns: a tensor of ``q``'s shape and dtype.
    """
    return scaled_l2_normalize(q, eps, g)


def lp_normalize(x: Tensor, p: float, scale: Optional[Tensor] = None, eps: float = QK_NORM_EPS):
    """``scale * x / max(||x||_p, eps)`` over the last dimension (Lp QKNorm, arXiv 2602.05006).

    ``||x||_p = (sum_i |x_i|^p)^(1/p)``. fp16/bf16 inputs are computed in float32 and cast
    back (as :func:`scaled_l2_normalize`); autograd gives the backward.

    Args:
        x: ``(..., d)``, any float dtype.
        p: the norm's order, finite and >= 1.
        scale: None or a tensor broadcastable to ``(..., 1)`` (QKNorm's ``g``).
        eps: lower clamp of ``||x||_p``.

    Returns: a tensor of ``x``'s shape and dtype.
    """
    compute = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
    xc = x.to(compute)
    norm = torch.linalg.vector_norm(xc, ord=p, dim=-1, keepdim=True)  # (..., 1)
    factor = norm.clamp_min(eps).reciprocal()
    if scale is not None:
        factor = scale.to(compute) * factor
    return (xc * factor).to(x.dtype)


class ZeroCenteredRMSNorm(nn.Module):
    """Zero-centred RMSNorm: ``x / sqrt(mean(x^2) + eps) * (1 + w)``, ``w = 0`` at init.

    Gemma 3's q/k norm as Gemma stores it (Gemma Team, "Gemma 3 Technical Report", 2025;
    RMSNorm: Zhang & Sennrich, NeurIPS 2019): the same function as :class:`torch.nn.RMSNorm`
    with weight ``1 + w``, but weight decay pulls the gain towards 1 instead of 0. Computed in
    float32 for fp16/bf16 inputs (float64 stays float64), result in the input's dtype.

    Args:
        dim: size of the normalized last dimension (``d_head``).
        eps: added to ``mean(x^2)``.

    Shapes: ``(..., dim)`` in, same out.
    """

    def __init__(self, dim: int, eps: float = QK_HEAD_NORM_EPS):
        super().__init__()
        self.eps = eps
        # zero init: the norm starts as a plain RMS normalization (gain 1 + 0)
        self.weight = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        """``x / sqrt(mean(x^2) + eps) * (1 + w)`` over the last dimension."""
        compute = x.dtype if x.dtype in (torch.float32, torch.float64) else torch.float32
        xc = x.to(compute)
        out = xc * torch.rsqrt(xc.pow(2).mean(-1, keepdim=True) + self.eps)
        return (out * (1.0 + self.weight.to(compute))).to(x.dtype)

    def extra_repr(self) -> str:
        """Size and eps for ``repr(module)``."""
        return f"{self.weight.numel()}, eps={self.eps}, weight applied as 1 + w"


def _head_norm(qk_norm_type: str, head_dim: int, embed_dim: int) -> nn.Module:
    # norm of q or k: per head (statistics over head_dim, weight (head_dim,) shared by heads),
    # or over the full projection width for OLMo 2's rmsnorm_full
    if qk_norm_type == "layernorm":
        return nn.LayerNorm(head_dim, eps=QK_HEAD_NORM_EPS, bias=False)
    if qk_norm_type == "rmsnorm_zc":
        return ZeroCenteredRMSNorm(head_dim, eps=QK_HEAD_NORM_EPS)
    if qk_norm_type == "rmsnorm_full":
        return nn.RMSNorm(embed_dim, eps=QK_HEAD_NORM_EPS)
    return nn.RMSNorm(head_dim, eps=QK_HEAD_NORM_EPS)


class QKNormMultiheadAttention(MultiheadAttention):
    """fairseq ``MultiheadAttention`` with an owned forward and optional QK-norm.

    Identical to :class:`fairseq.modules.MultiheadAttention` (same parameters,
    state-dict keys, incremental-state layout and beam reordering) except:

    * ``forward`` never dispatches to ``F.multi_head_attention_forward``: the
      same code runs in training, validation and incremental decoding, through
      ``torch.nn.functional.scaled_dot_product_attention`` (the *fused* path)
      unless attention weights are requested or, on CPU, a row has a single query
      (an incremental decoding step; ``fused_min_queries``) (the *explicit* path,
      plain matmul + softmax);
    * with ``qk_norm=True`` each query and key vector of each head is
      normalized after projection and head split (module docstring):
      ``qk_norm_type="l2"`` gives logits ``g * cos(q, k)`` with a learnable
      float32 ``g`` (``self.qk_norm_g``: 0-dim, or ``(num_heads,)`` with
      ``qk_norm_scale_per_head``) instead of ``q.k / sqrt(d_head)`` (Henry et
      al., 2020), ``g`` folded into the normalized queries so that the fused
      kernel runs with ``scale=1``; ``"layernorm"``/``"rmsnorm"`` give
      ``N_q(q).N_k(k) / sqrt(d_head)`` (``self.q_norm``, ``self.k_norm``).
      Keys are cached *after* normalization, so decoding normalizes each key once;
    * inputs are checked (shapes, dtypes) with errors that name the argument.

    With ``qk_norm=False`` the output equals the parent's for the same weights.

    Shapes (fairseq convention): ``query`` ``(tgt_len, bsz, embed_dim)``,
    ``key``/``value`` ``(src_len, bsz, kdim/vdim)``, ``key_padding_mask``
    ``(bsz, src_len)`` bool/uint8, True/1 at pads, ``attn_mask`` ``(tgt_len, src_len)``
    additive float (``-inf`` = masked) or bool/uint8 (True = masked).
    Returns ``(attn, attn_weights)``: ``attn`` ``(tgt_len, bsz, embed_dim)``;
    ``attn_weights`` ``None`` unless ``need_weights``, then ``(bsz, tgt_len,
    src_len)`` averaged over heads, or ``(num_heads, bsz, tgt_len, src_len)``
    with ``need_head_weights``.

    Args (besides the parent's):
        qk_norm: normalize q and k (off: plain scaled dot product).
        qk_norm_scale: ``g0`` for ``qk_norm_type="l2"`` (required there, finite and > 0);
            must be None for the other types.
        qk_norm_type: one of :data:`QK_NORM_TYPES`.
        qk_norm_scale_per_head: l2 only: one ``g`` per head.
        qk_norm_freeze_scale: l2 only: ``g`` is not trained (``requires_grad=False``).
            (The three ``g`` options apply to lp as to l2.)
        qk_norm_p: lp only (required there): the order ``p`` of the norm, finite, >= 1.
        attn_logit_softcap: ``C`` of ``C * tanh(logits / C)`` (finite, > 0), or None.
        attn_normalization: ``"softmax"`` or ``"nap"`` (module docstring).
        qk_clip: QK-clip threshold ``TAU`` (finite, > 0), or None.

    Raises:
        ValueError: at construction for an unknown ``qk_norm_type`` or
            ``attn_normalization``, l2/lp without a scale, lp without p, a cap or threshold
            not finite and > 0, NAP with l2/lp or a cap, QK-clip with QK-norm or NAP,
            options that do not apply to the chosen type (or any QK-norm option with
            ``qk_norm=False``), or parent features this forward does not implement
            (``add_bias_kv``, ``add_zero_attn``, xFormers).
            In ``forward``, wrong shapes (ValueError) or dtypes (TypeError).
    """

    def __init__(
        self,
        embed_dim,
        num_heads,
        *args,
        qk_norm: bool = False,
        qk_norm_scale: Optional[float] = None,
        qk_norm_type: str = "l2",
        qk_norm_scale_per_head: bool = False,
        qk_norm_freeze_scale: bool = False,
        qk_norm_p: Optional[float] = None,
        attn_logit_softcap: Optional[float] = None,
        attn_normalization: str = "softmax",
        qk_clip: Optional[float] = None,
        **kwargs,
    ):
        super().__init__(embed_dim, num_heads, *args, **kwargs)
        if self.bias_k is not None or self.add_zero_attn or self.use_xformers:
            raise ValueError(
                "QKNormMultiheadAttention does not implement add_bias_kv, "
                "add_zero_attn or xformers attention"
            )
        if qk_norm_type not in QK_NORM_TYPES:
            raise ValueError(f"qk_norm_type must be one of {QK_NORM_TYPES}, got {qk_norm_type!r}")
        self.qk_norm = bool(qk_norm)
        #: None when QK-norm is off
        self.qk_norm_type: Optional[str] = qk_norm_type if self.qk_norm else None
        l2_only = [
            name
            for name, given in (
                ("qk_norm_scale", qk_norm_scale is not None),
                ("qk_norm_scale_per_head", qk_norm_scale_per_head),
                ("qk_norm_freeze_scale", qk_norm_freeze_scale),
            )
            if given
        ]
        if not self.qk_norm and (l2_only or qk_norm_type != "l2"):
            raise ValueError(f"{', '.join(l2_only) or 'qk_norm_type'} given with qk_norm=False")
        if self.qk_norm_type not in (None,) + QK_G_TYPES and l2_only:
            raise ValueError(
                f"{', '.join(l2_only)} apply only to qk_norm_type='l2' or 'lp' "
                f"(qk_norm_type={qk_norm_type!r} has no scale g)"
            )
        if (qk_norm_p is not None) != (self.qk_norm_type == "lp"):
            raise ValueError(
                "qk_norm_type='lp' needs qk_norm_p (and qk_norm_p applies only to it), "
                f"got qk_norm_type={self.qk_norm_type!r}, qk_norm_p={qk_norm_p!r}"
            )
        if qk_norm_p is not None and not (math.isfinite(qk_norm_p) and qk_norm_p >= 1.0):
            raise ValueError(f"qk_norm_p must be finite and >= 1, got {qk_norm_p!r}")
        #: p of Lp QKNorm, None for the other types
        self.qk_norm_p: Optional[float] = None if qk_norm_p is None else float(qk_norm_p)
        for name, value in (("attn_logit_softcap", attn_logit_softcap), ("qk_clip", qk_clip)):
            if value is not None and not (math.isfinite(value) and value > 0.0):
                raise ValueError(f"{name} must be finite and > 0, got {value!r}")
        if attn_normalization not in ATTN_NORMALIZATIONS:
            raise ValueError(
                f"attn_normalization must be one of {ATTN_NORMALIZATIONS}, "
                f"got {attn_normalization!r}"
            )
        if attn_normalization == "nap" and (
            self.qk_norm_type in QK_G_TYPES or attn_logit_softcap is not None
        ):
            raise ValueError(
                "attn_normalization='nap' standardizes each query's scores: QKNorm's g "
                "(qk_norm_type l2/lp) would cancel and there is no softmax to soft-cap; "
                f"got qk_norm_type={self.qk_norm_type!r}, "
                f"attn_logit_softcap={attn_logit_softcap!r}"
            )
        if qk_clip is not None and (self.qk_norm or attn_normalization == "nap"):
            raise ValueError(
                "qk_clip rescales W_q and W_k, which changes no logit under QK-norm "
                f"(qk_norm_type={self.qk_norm_type!r}) and nothing that NAP keeps "
                f"(attn_normalization={attn_normalization!r}): use it with dot-product attention"
            )
        #: ``C`` of the attention-logit soft cap, or None
        self.attn_logit_softcap: Optional[float] = (
            None if attn_logit_softcap is None else float(attn_logit_softcap)
        )
        self.attn_normalization = attn_normalization
        #: QK-clip threshold, or None
        self.qk_clip: Optional[float] = None if qk_clip is None else float(qk_clip)
        #: (num_heads,) float32 running max of each head's logit over the training forwards
        #: since the last :meth:`qk_clip_` (QK-clip only), or None
        self.qk_clip_max_logit: Optional[Tensor] = None
        if attn_normalization == "nap":
            # one gain and one bias per head, as the authors' NormalizeAttention (init 1 and 0:
            # plain standardized scores at the start); float32 like QKNorm's g
            self.nap_gain: Optional[nn.Parameter] = nn.Parameter(torch.ones(num_heads))
            self.nap_bias: Optional[nn.Parameter] = nn.Parameter(torch.zeros(num_heads))
        else:
            self.register_parameter("nap_gain", None)
            self.register_parameter("nap_bias", None)
        if self.qk_norm_type in QK_G_TYPES:
            if qk_norm_scale is None:
                raise ValueError("qk_norm=True needs qk_norm_scale (g0)")
            g0 = qk_norm_initial_scale(scale=qk_norm_scale)  # finite and > 0
            # One scalar per module, shared by all heads (authors' code), or one per head;
            # float32 on purpose (the authors' code made it float64 by accident).
            shape = (num_heads,) if qk_norm_scale_per_head else ()
            self.qk_norm_g = nn.Parameter(
                torch.full(shape, g0, dtype=torch.float32), requires_grad=not qk_norm_freeze_scale
            )
        else:
            self.register_parameter("qk_norm_g", None)
        if self.qk_norm_type not in (None,) + QK_G_TYPES:
            self.q_norm: Optional[nn.Module] = _head_norm(
                self.qk_norm_type, self.head_dim, embed_dim
            )
            self.k_norm: Optional[nn.Module] = _head_norm(
                self.qk_norm_type, self.head_dim, embed_dim
            )
        else:
            self.q_norm = self.k_norm = None
        #: False selects the explicit matmul/softmax path even when weights are not
        #: needed (reference path for tests and benchmarks).
        self.use_fused = True
        #: On CPU, ``scaled_dot_product_attention`` runs only for at least this many
        #: queries per row; fewer (one per incremental decoding step) take the explicit
        #: path, which the fused CPU kernel's per-call setup makes faster there
        #: (benchmarks/README.md). 1 sends every query length to the fused kernel.
        self.fused_min_queries = 2
        #: When True, the next forwards take the explicit path and store attention
        #: health statistics (entropy, max |logit|) in ``self.last_stats``.
        self.record_stats = False
        self.last_stats: dict[str, Tensor] = {}

    def extra_repr(self) -> str:
        """QKNorm settings and head layout for ``repr(module)``."""
        text = f"qk_norm={self.qk_norm}"
        if self.qk_norm:
            text += f", qk_norm_type={self.qk_norm_type}"
            if self.qk_norm_p is not None:
                text += f", p={self.qk_norm_p:g}"
        if self.attn_logit_softcap is not None:
            text += f", attn_logit_softcap={self.attn_logit_softcap:g}"
        if self.attn_normalization != "softmax":
            text += f", attn_normalization={self.attn_normalization}"
        if self.qk_clip is not None:
            text += f", qk_clip={self.qk_clip:g}"
        g = getattr(self, "qk_norm_g", None)
        if g is not None:
            text += (
                f", scale={'per head' if g.dim() else 'per module'}"
                f"{'' if g.requires_grad else ' (frozen)'}"
            )
        return f"{text}, num_heads={self.num_heads}, head_dim={self.head_dim}"

    # --------------------------------------------------------- normalization
    def normalize_queries(self, q: Tensor) -> Tensor:
        """Queries as they enter the logits: ``(B, H, T, head_dim)``, same shape and dtype.

        l2: ``g q / ||q||`` (``g`` folded in); lp: ``g q / ||q||_p``; layernorm/rmsnorm/
        rmsnorm_zc: ``N_q(q)``; off and rmsnorm_full (normalized before the head split,
        :meth:`forward`): ``q``.
        """
        if self.qk_norm_type in QK_G_TYPES:
            g = self.qk_norm_g
            g = g.view(-1, 1, 1) if g.dim() else g  # per head: (H, 1, 1)
            if self.qk_norm_type == "lp":
                return lp_normalize(q, self.qk_norm_p, g)
            return qk_scaled_queries(q, g)
        if self.q_norm is not None and self.qk_norm_type != "rmsnorm_full":
            return self.q_norm(q)
        return q

    def normalize_keys(self, k: Tensor) -> Tensor:
        """Keys as they are cached and enter the logits: ``(B, H, S, head_dim)``.

        l2: ``k / ||k||``; lp: ``k / ||k||_p``; layernorm/rmsnorm/rmsnorm_zc: ``N_k(k)``;
        off and rmsnorm_full: ``k``.
        """
        if self.qk_norm_type == "l2":
            return scaled_l2_normalize(k, QK_NORM_EPS)
        if self.qk_norm_type == "lp":
            return lp_normalize(k, self.qk_norm_p)
        if self.k_norm is not None and self.qk_norm_type != "rmsnorm_full":
            return self.k_norm(k)
        return k

    @property
    def fused_capable(self) -> bool:
        """Whether ``scaled_dot_product_attention`` computes this attention at all.

        False with a soft cap or NAP (the kernel has neither): every call takes the explicit
        path then.
        """
        return self.attn_logit_softcap is None and self.attn_normalization == "softmax"

    @property
    def logit_scale(self) -> float:
        """Factor applied to ``normalize_queries(q) . normalize_keys(k)``.

        1 for l2/lp (``g`` is in the queries) and NAP (scale-free), ``1 / sqrt(head_dim)``
        otherwise.
        """
        if self.qk_norm_type in QK_G_TYPES or self.attn_normalization == "nap":
            return 1.0
        return self.scaling

    def _project(self, x: Tensor, proj: nn.Module, norm: Optional[nn.Module], bsz: int) -> Tensor:
        # (len, bsz, kdim) -> (bsz, num_heads, len, head_dim); OLMo 2's full-width RMSNorm
        # of q or k runs on the (len, bsz, embed_dim) projection, before the head split
        y = proj(x)
        if norm is not None and self.qk_norm_type == "rmsnorm_full":
            y = norm(y)
        return self._split_heads(y, bsz)

    def _check_inputs(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor],
    ) -> None:
        """Our errors for what torch would reject later with an unrelated message (or accept)."""
        if query.dim() != 3 or query.size(2) != self.embed_dim:
            raise ValueError(
                f"query must be (tgt_len, bsz, {self.embed_dim}), got shape {tuple(query.shape)}"
            )
        weight_dtype = self.q_proj.weight.dtype
        if not query.is_floating_point() or (
            query.dtype != weight_dtype and not torch.is_autocast_enabled(query.device.type)
        ):
            raise TypeError(
                f"query dtype {query.dtype} does not match the attention weights' "
                f"{weight_dtype} (convert the model or the input, or use autocast)"
            )
        tgt_len, bsz = query.shape[:2]
        src_len: Optional[int] = tgt_len  # length of the new keys; None: cached keys only
        if not self.self_attention:
            src_len = None if key is None else key.size(0)
            # encoder-decoder attention projects its values from `key` (as the parent)
            checks = [("key", key, self.kdim)]
            if not self.encoder_decoder_attention:
                checks.append(("value", value, self.vdim))
            for name, x, dim in checks if key is not None else ():
                if x is None:
                    raise ValueError(f"{name} is None but key is given")
                if x.dim() != 3 or x.size(2) != dim or x.size(1) != bsz or x.size(0) != src_len:
                    raise ValueError(
                        f"{name} must be (src_len, bsz, {dim}) with bsz = {bsz} "
                        f"(query) and src_len = {src_len} (key), "
                        f"got shape {tuple(x.shape)}"
                    )
                if x.dtype != query.dtype:
                    raise TypeError(
                        f"{name} dtype {x.dtype} differs from query dtype {query.dtype}"
                    )
        if key_padding_mask is not None and key_padding_mask.dim() != 0:
            if key_padding_mask.dtype not in (torch.bool, torch.uint8):
                raise TypeError(
                    f"key_padding_mask must be bool or uint8 (True/1 = pad), "
                    f"got {key_padding_mask.dtype}"
                )
            if (
                key_padding_mask.dim() != 2
                or key_padding_mask.size(0) != bsz
                or (src_len is not None and key_padding_mask.size(1) != src_len)
            ):
                raise ValueError(
                    f"key_padding_mask must be (bsz, src_len) = ({bsz}, "
                    f"{'src_len' if src_len is None else src_len}), "
                    f"got shape {tuple(key_padding_mask.shape)}"
                )

    # ------------------------------------------------------------------ helpers
    def _split_heads(self, x: Tensor, bsz: int) -> Tensor:
        # (len, bsz, num_heads * head_dim) -> (bsz, num_heads, len, head_dim)
        return x.view(x.size(0), bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

    def _attention_mask(
        self, attn_mask: Optional[Tensor], key_padding_mask: Optional[Tensor], dtype: torch.dtype
    ) -> Optional[Tensor]:
        """One mask for ``scaled_dot_product_attention``, broadcastable to ``(B, H, T, S)``.

        Bool masks come out with True = *attend* (SDPA's convention, the inverse of
        fairseq's); an additive float ``attn_mask`` stays additive with pads set to
        ``-inf``. On CPU a ``key_padding_mask`` without any pad counts as none (fairseq's
        encoder always returns one): no mask is read or applied then (on other devices
        the check would cost a host synchronization per call, so the mask is kept). A
        fully masked row gives zeros, never NaN (both paths).
        """
        pad = None
        if key_padding_mask is not None and (
            not key_padding_mask.is_cpu or bool(key_padding_mask.any())
        ):
            pad = key_padding_mask.to(torch.bool)[:, None, None, :]  # (B, 1, 1, S)
        if attn_mask is None:
            return None if pad is None else ~pad
        if attn_mask.dtype in (torch.bool, torch.uint8):
            keep = ~attn_mask.to(torch.bool)[None, None]  # (1, 1, T, S)
            return keep if pad is None else keep & ~pad
        additive = attn_mask.to(dtype)[None, None]
        if pad is None:
            return additive
        return additive.masked_fill(pad, float("-inf"))

    @staticmethod
    def _dead_rows(mask: Tensor) -> Optional[Tensor]:
        """Queries that ``mask`` (from :meth:`_attention_mask`) lets see no key.

        A bool tensor broadcastable to ``(B, H, T, 1)``; on CPU None when there is none (elsewhere
        that check would synchronize with the host). Read from the mask, which is at most
        ``(B, 1, T, S)``, instead of from the ``(B, H, T, S)`` logits.
        """
        if mask.dtype == torch.bool:
            dead = ~mask.any(dim=-1, keepdim=True)
        else:
            dead = torch.isneginf(mask).all(dim=-1, keepdim=True)
        return None if dead.is_cpu and not bool(dead.any()) else dead

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[dict[str, dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> tuple[Tensor, Optional[Tensor]]:
        """See the class docstring for shapes and errors; arguments as in fairseq's parent."""
        if need_head_weights:
            need_weights = True
        self._check_inputs(query, key, value, key_padding_mask)
        tgt_len, bsz, _ = query.size()

        saved_state: Optional[dict[str, Optional[Tensor]]] = None
        if incremental_state is not None:
            saved_state = self._get_input_buffer(incremental_state)
            if "prev_key" in saved_state and static_kv:
                # encoder keys/values are cached: no need to project them again
                assert self.encoder_decoder_attention and not self.self_attention
                key = value = None

        q = self._project(query, self.q_proj, self.q_norm, bsz)  # (B, H, T, hd)
        k: Optional[Tensor] = None
        v: Optional[Tensor] = None
        if self.self_attention:
            k = self._project(query, self.k_proj, self.k_norm, bsz)
            v = self._split_heads(self.v_proj(query), bsz)
        elif key is not None:
            if (
                self.encoder_decoder_attention
                and self.beam_size > 1
                and saved_state is not None
                and bsz == key.size(1)
            ):
                # beam-shared encoder states, as in the parent, but only while decoding
                # incrementally (never in a training/validation forward):
                # (S, B*beam, C) -> (S, B, C)
                key = key.view(key.size(0), -1, self.beam_size, key.size(2))[:, :, 0, :]
                if key_padding_mask is not None:
                    key_padding_mask = key_padding_mask.view(
                        -1, self.beam_size, key_padding_mask.size(1)
                    )[:, 0, :]
            kv_in = key if self.encoder_decoder_attention else value
            assert kv_in is not None
            k = self._project(key, self.k_proj, self.k_norm, key.size(1))  # (B', H, S, hd)
            v = self._split_heads(self.v_proj(kv_in), key.size(1))
        if self.qk_norm:
            q = self.normalize_queries(q)
            if k is not None:  # new keys only: cached keys are already normalized
                k = self.normalize_keys(k)

        if saved_state is not None:
            # cache layout (B', H, S, hd) is the parent's, so its
            # reorder_incremental_state applies unchanged
            if "prev_key" in saved_state:
                prev_key = saved_state["prev_key"]
                assert prev_key is not None
                k = prev_key if static_kv else torch.cat([prev_key, k], dim=2)
            if "prev_value" in saved_state:
                prev_value = saved_state["prev_value"]
                assert prev_value is not None
                v = prev_value if static_kv else torch.cat([prev_value, v], dim=2)
            assert k is not None and v is not None
            key_padding_mask = MultiheadAttention._append_prev_key_padding_mask(
                key_padding_mask=key_padding_mask,
                prev_key_padding_mask=saved_state.get("prev_key_padding_mask"),
                batch_size=k.size(0),
                src_len=k.size(2),
                static_kv=static_kv,
            )
            # stored as they are, like the parent: the encoder keys/values stay views of the
            # (S, B, H, hd) projection (no copy), which the decoding bmm reads faster on CPU
            # than a contiguous (B, H, S, hd) copy (benchmarks/README.md)
            saved_state["prev_key"] = k
            saved_state["prev_value"] = v
            saved_state["prev_key_padding_mask"] = key_padding_mask
            self._set_input_buffer(incremental_state, saved_state)
        assert k is not None and v is not None
        if key_padding_mask is not None and key_padding_mask.dim() == 0:
            key_padding_mask = None
        kv_bsz, src_len = k.size(0), k.size(2)
        if attn_mask is not None:
            if tuple(attn_mask.shape) != (tgt_len, src_len):
                raise ValueError(
                    f"attn_mask must be (tgt_len, src_len) = ({tgt_len}, {src_len}), "
                    f"got shape {tuple(attn_mask.shape)}"
                )
            if not (attn_mask.is_floating_point() or attn_mask.dtype in (torch.bool, torch.uint8)):
                raise TypeError(
                    f"attn_mask must be float (additive) or bool/uint8 "
                    f"(True = masked), got {attn_mask.dtype}"
                )

        # Beam-shared encoder-attention: fold the beam into the query length so
        # that queries of one sentence's beams share its keys without a copy.
        grouped = self.encoder_decoder_attention and kv_bsz != bsz
        if grouped:
            beam = bsz // kv_bsz
            # (B*beam, H, T, hd) -> (B, H, beam*T, hd)
            q = q.reshape(kv_bsz, beam, self.num_heads, tgt_len, self.head_dim)
            q = q.transpose(1, 2).reshape(kv_bsz, self.num_heads, beam * tgt_len, self.head_dim)

        scale = self.logit_scale  # l2 QKNorm: 1, g is already in q
        mask = self._attention_mask(attn_mask, key_padding_mask, q.dtype)
        dropout_p = (
            self.dropout_module.p
            if (self.training or self.dropout_module.apply_during_inference)
            else 0.0
        )

        weights: Optional[Tensor] = None
        clip_record = self.qk_clip is not None and self.training
        if (
            self.use_fused
            and not need_weights
            and not before_softmax
            and not self.record_stats
            and not clip_record  # QK-clip needs each head's max logit
            and self.fused_capable
            and (q.size(2) >= self.fused_min_queries or not q.is_cpu)
        ):
            out = F.scaled_dot_product_attention(
                q, k, v, attn_mask=mask, dropout_p=dropout_p, scale=scale
            )
        else:
            # 3-D bmm over B' * H rows: torch.matmul's 4-D handling costs more per call
            # than the work of a decoding step (same reshapes and copies otherwise)
            rows, q_len = q.size(0) * self.num_heads, q.size(2)
            logits = torch.bmm(
                q.reshape(rows, q_len, self.head_dim),
                k.reshape(rows, src_len, self.head_dim).transpose(1, 2),
            )
            logits = logits.view(kv_bsz, self.num_heads, q_len, src_len)  # (B', H, T', S)
            if scale != 1.0:
                logits = logits * scale
            if clip_record:
                self._record_head_max_logit(logits, mask)
            probs_float: Optional[Tensor] = None
            if self.attn_normalization == "nap" and not before_softmax:
                # (before_softmax: NAP returns its raw scores q.k, masked as the logits)
                probs_float = self._nap_weights(logits, mask)  # (B', H, T', S)
            if self.attn_logit_softcap is not None:
                # before the mask: tanh(-inf) would unmask; float32 for fp16/bf16
                cap = self.attn_logit_softcap
                capped = cap * torch.tanh(
                    (logits.float() if logits.element_size() < 4 else logits) / cap
                )
                logits = capped.type_as(logits)
            dead: Optional[Tensor] = None
            if mask is not None and probs_float is None:
                if mask.dtype == torch.bool:
                    logits = logits.masked_fill(~mask, float("-inf"))
                else:
                    logits = logits + mask
                # queries with every key masked attend to nothing: zero output and
                # zero gradient instead of NaN (as the fused kernel does)
                dead = self._dead_rows(mask)
                if dead is not None:
                    logits = logits.masked_fill(dead, 0.0)
            if before_softmax:
                if grouped:
                    raise NotImplementedError("before_softmax with beam-shared encoder states")
                return logits.reshape(bsz * self.num_heads, tgt_len, src_len), v.reshape(
                    bsz * self.num_heads, src_len, self.head_dim
                )
            if probs_float is None:
                # softmax in float32 for fp16/bf16 (as fairseq), in the input's precision otherwise
                probs_float = torch.softmax(
                    logits.float() if logits.element_size() < 4 else logits, dim=-1
                )
                if dead is not None:
                    probs_float = probs_float.masked_fill(dead, 0.0)
                if self.record_stats:
                    self._store_stats(logits, probs_float, dead)
            elif self.record_stats:
                self._store_stats(self._masked(logits, mask), None, None)
            probs = probs_float.type_as(logits)
            if dropout_p > 0:
                probs = F.dropout(probs, p=dropout_p, training=True)
            out = torch.bmm(
                probs.view(rows, q_len, src_len), v.reshape(rows, src_len, self.head_dim)
            )
            out = out.view(kv_bsz, self.num_heads, q_len, self.head_dim)
            if need_weights:
                weights = probs_float
        if grouped:
            # (B, H, beam*T, hd) -> (B*beam, H, T, hd)
            out = out.reshape(kv_bsz, self.num_heads, beam, tgt_len, self.head_dim)
            out = out.transpose(1, 2).reshape(bsz, self.num_heads, tgt_len, self.head_dim)
            if weights is not None:
                weights = weights.reshape(kv_bsz, self.num_heads, beam, tgt_len, src_len)
                weights = weights.transpose(1, 2).reshape(bsz, self.num_heads, tgt_len, src_len)

        # (B, H, T, hd) -> (T, B, H * hd)
        out = out.permute(2, 0, 1, 3).reshape(tgt_len, bsz, self.embed_dim)
        out = self.out_proj(out)
        if weights is not None:
            weights = weights.transpose(0, 1)  # (H, B, T, S)
            if not need_head_weights:
                weights = weights.mean(dim=0)
        return out, weights

    @staticmethod
    def _masked(logits: Tensor, mask: Optional[Tensor]) -> Tensor:
        # logits with masked entries at -inf (additive float masks added)
        if mask is None:
            return logits
        if mask.dtype == torch.bool:
            return logits.masked_fill(~mask, float("-inf"))
        return logits + mask

    def _nap_weights(self, scores: Tensor, mask: Optional[Tensor]) -> Tensor:
        """NAP's attention weights (Richter & Wattenhofer 2020, Sec. 5; module docstring).

        ``scores``: raw ``q.k`` ``(B', H, T', S)``; ``mask`` from :meth:`_attention_mask`.
        Returns float32 (float64 for float64 input) weights of the same shape:
        ``gamma_h (s - mean) / (std + NAP_EPS) + beta_h`` over each query's unmasked keys
        (population std), 0 at masked keys and for queries that see no key.
        """
        s = scores if scores.element_size() >= 4 else scores.float()
        valid: Optional[Tensor] = None
        if mask is not None:
            if mask.dtype == torch.bool:
                valid = mask
            else:
                valid = ~torch.isneginf(mask)
                s = s + mask.to(s.dtype).masked_fill(~valid, 0.0)  # finite biases are scores
            valid = valid.expand_as(s).to(s.dtype)
            count = valid.sum(-1, keepdim=True).clamp_min(1.0)  # (B', H, T', 1)
            mean = (s * valid).sum(-1, keepdim=True) / count
            centered = (s - mean) * valid
            var = (centered * centered).sum(-1, keepdim=True) / count
        else:
            mean = s.mean(-1, keepdim=True)
            centered = s - mean
            var = (centered * centered).mean(-1, keepdim=True)
        # sqrt(0) has an infinite derivative (NaN gradients for a query seeing one key, as
        # the first decoder position does): exact std, gradient 0 where var == 0
        live = var > 0
        std = torch.where(live, torch.sqrt(torch.where(live, var, 1.0)), 0.0)
        gain = self.nap_gain.to(s.dtype).view(-1, 1, 1)  # (H, 1, 1)
        bias = self.nap_bias.to(s.dtype).view(-1, 1, 1)
        weights = gain * centered / (std + NAP_EPS) + bias
        if valid is not None:
            weights = weights * valid  # masked keys and fully masked queries: 0
        return weights

    @torch.no_grad()
    def _record_head_max_logit(self, logits: Tensor, mask: Optional[Tensor]) -> None:
        # QK-clip: running max over training forwards of each head's largest logit
        # (unmasked entries, before any cap), (num_heads,) float32
        head_max = self._masked(logits, mask).float().amax(dim=(0, 2, 3))
        head_max = torch.nan_to_num(head_max, neginf=float("-inf"))
        prev = self.qk_clip_max_logit
        self.qk_clip_max_logit = head_max if prev is None else torch.maximum(prev, head_max)

    @torch.no_grad()
    def qk_clip_(self) -> int:
        """Apply QK-clip after an optimizer step; returns the number of heads rescaled.

        Kimi K2's QK-clip (Kimi Team, "Kimi K2: Open Agentic Intelligence", 2025, Sec. 2.1,
        per-head variant for multi-head attention; Megatron-LM ``qk_clip``): with ``S_h``
        the largest logit of head ``h`` over the training forwards since the last call and
        ``gamma_h = TAU / S_h``, the rows of ``W_q`` and ``W_k`` (and of their biases) that
        make head ``h`` are multiplied by ``sqrt(gamma_h)`` each for every head with
        ``S_h > TAU``: the head's logits (``q.k / sqrt(d_head)``) then shrink by exactly
        ``gamma_h``, so the same input would give max logit ``TAU``. The recorded maxima are
        reset. Does nothing (returns 0) without ``qk_clip`` or before any training forward.
        """
        head_max, self.qk_clip_max_logit = self.qk_clip_max_logit, None
        if self.qk_clip is None or head_max is None:
            return 0
        over = head_max > self.qk_clip
        n = int(over.sum())
        if n == 0:
            return 0
        gamma = torch.where(over, self.qk_clip / head_max.clamp_min(self.qk_clip), 1.0)
        factor = gamma.sqrt().repeat_interleave(self.head_dim)  # (embed_dim,)
        for proj in (self.q_proj, self.k_proj):
            f = factor.to(proj.weight.dtype)
            proj.weight.mul_(f[:, None])  # rows h * head_dim ... (h + 1) * head_dim - 1
            if proj.bias is not None:
                proj.bias.mul_(f)
        return n

    @torch.no_grad()
    def _store_stats(self, logits: Tensor, probs: Optional[Tensor], dead: Optional[Tensor]) -> None:
        """Attention health (Zhai et al. 2023; Wortsman et al. 2023), detached scalars.

        ``entropy``: mean over heads and queries that see at least one key of
        ``-sum_j A_ij log A_ij`` (nats); ``max_logit``: max |logit| over unmasked
        entries. ``logits`` are the ones that enter the softmax, so the statistics hold
        for each QK-norm type as it computes them (``g cos`` for l2, ``N_q(q).N_k(k) /
        sqrt(d_head)`` for layernorm/rmsnorm, ``q.k / sqrt(d_head)`` without QK-norm).
        ``logits``/``probs``: ``(B', H, T', S)``; ``dead``: broadcastable to
        ``(B', H, T', 1)``, True for fully masked queries, or None. With soft capping the
        logits are the capped ones. For NAP ``probs`` is None (its weights are no
        distribution): only ``max_logit``, of the raw scores ``q.k``, is stored.
        """
        finite = torch.isfinite(logits)
        max_logit = logits.float().abs().masked_fill(~finite, 0.0).max()
        if probs is None:
            self.last_stats = {"max_logit": max_logit}
            return
        entropy = -(probs * torch.log(probs.clamp_min(1e-30))).sum(-1)  # (B', H, T')
        if dead is not None:
            entropy = entropy[~dead.squeeze(-1).expand_as(entropy)]
        self.last_stats = {
            "entropy": entropy.mean() if entropy.numel() else logits.new_zeros(()),
            "max_logit": max_logit,
        }
