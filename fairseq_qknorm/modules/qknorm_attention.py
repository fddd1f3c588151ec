"""Multi-head attention with optional Query-Key Normalization (QKNorm).

QKNorm (Henry, Dachapally, Pawar & Chen, "Query-Key Normalization for
Transformers", Findings of EMNLP 2020, Sec. 3, Eq. 2-3) replaces scaled
dot-product attention

    softmax(q k^T / sqrt(d_head))

by

    softmax(g * q_hat k_hat^T),   q_hat = q / ||q||_2,  k_hat = k / ||k||_2,

where the l2 norms run over the head dimension (each query and key vector of
each head is normalized; values are untouched) and ``g`` is one learnable
scalar per attention module, initialised as ``g0 = log2(L^2 - L)`` with ``L``
the 97.5th percentile of training sentence lengths (Eq. 4 of the paper).
Every logit therefore lies in ``[-|g|, |g|]``.
"""

import math
from typing import Dict, Optional, Tuple

import torch
import torch.nn.functional as F
from fairseq.modules import MultiheadAttention
from torch import Tensor, nn

from .l2_norm import scaled_l2_normalize

#: Clamp for the l2 norm of q and k (paper gives none). 1e-6 is representable in
#: fp16/bf16, unlike F.normalize's default 1e-12 which underflows to 0 in fp16.
QK_NORM_EPS = 1e-6


def qk_norm_initial_scale(length: Optional[float] = None, scale: Optional[float] = None) -> float:
    """Initial value ``g0`` of the QKNorm scale.

    ``g0 = log2(L^2 - L)`` (Henry et al., 2020, Eq. 4), where ``L`` is the
    97.5th-percentile training sentence length in (BPE) tokens; or ``scale``
    itself when given. Exactly one of the two must be set.

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
        raise ValueError(f"--qk-norm-length must be finite and >= 2 (g0 = log2(L^2 - L) > 0), "
                         f"got {length!r}")
    return math.log2(length * length - length)


def qk_scaled_queries(q: Tensor, g: Tensor, eps: float = QK_NORM_EPS) -> Tensor:
    """QKNorm's queries with the logit scale folded in: ``g * q / max(||q||_2, eps)``.

    Henry et al. (2020), Eq. 2-3: with unit keys ``k_hat``, ``(g q_hat) . k_hat = g cos(q, k)``.
    ``g`` multiplies the float32 ``(..., 1)`` reciprocal norm, so the full-size tensor is
    touched once (1.55x faster than ``F.normalize`` then ``* g``, benchmarks/README.md), and
    fp16/bf16 queries neither overflow nor give NaN (:func:`scaled_l2_normalize`).

    Args:
        q: queries ``(..., head_dim)``, any float dtype.
        g: the scalar scale (a 0-dim tensor).
        eps: lower clamp of ``||q||``.

    Returns: a tensor of ``q``'s shape and dtype.
    """
    return scaled_l2_normalize(q, eps, g)


class QKNormMultiheadAttention(MultiheadAttention):
    """fairseq ``MultiheadAttention`` with an owned forward and optional QKNorm.

    Identical to :class:`fairseq.modules.MultiheadAttention` (same parameters,
    state-dict keys, incremental-state layout and beam reordering) except:

    * ``forward`` never dispatches to ``F.multi_head_attention_forward``: the
      same code runs in training, validation and incremental decoding, through
      ``torch.nn.functional.scaled_dot_product_attention`` (the *fused* path)
      unless attention weights are requested (the *explicit* path, plain
      matmul + softmax);
    * with ``qk_norm=True`` each query and key vector of each head is
      l2-normalized after projection and head split, and the logits are
      ``g * cos(q, k)`` with one learnable float32 scalar ``g`` per module
      (``self.qk_norm_g``) instead of ``q.k / sqrt(d_head)`` (Henry et al., 2020).
      Keys are cached *after* normalization, so decoding normalizes each key once.
      ``g`` is folded into the normalized queries, so the fused kernel runs with
      ``scale=1``.

    With ``qk_norm=False`` the output equals the parent's for the same weights.

    Shapes (fairseq convention): ``query`` ``(tgt_len, bsz, embed_dim)``,
    ``key``/``value`` ``(src_len, bsz, kdim/vdim)``, ``key_padding_mask``
    ``(bsz, src_len)`` non-zero at pads, ``attn_mask`` ``(tgt_len, src_len)``
    additive float (``-inf`` = masked) or bool/uint8 (True = masked).
    Returns ``(attn, attn_weights)``: ``attn`` ``(tgt_len, bsz, embed_dim)``;
    ``attn_weights`` ``None`` unless ``need_weights``, then ``(bsz, tgt_len,
    src_len)`` averaged over heads, or ``(num_heads, bsz, tgt_len, src_len)``
    with ``need_head_weights``.

    Raises:
        ValueError: at construction for ``qk_norm`` without a scale, or for
            parent features this forward does not implement (``add_bias_kv``,
            ``add_zero_attn``, xFormers).
    """

    def __init__(self, embed_dim, num_heads, *args, qk_norm: bool = False,
                 qk_norm_scale: Optional[float] = None, **kwargs):
        super().__init__(embed_dim, num_heads, *args, **kwargs)
        if self.bias_k is not None or self.add_zero_attn or self.use_xformers:
            raise ValueError(
                "QKNormMultiheadAttention does not implement add_bias_kv, "
                "add_zero_attn or xformers attention"
            )
        self.qk_norm = bool(qk_norm)
        if self.qk_norm:
            if qk_norm_scale is None:
                raise ValueError("qk_norm=True needs qk_norm_scale (g0)")
            qk_norm_scale = qk_norm_initial_scale(scale=qk_norm_scale)  # finite and > 0
            # One scalar per module, shared by all heads (authors' code); float32 on
            # purpose (the authors' code made it float64 by accident).
            self.qk_norm_g = nn.Parameter(torch.tensor(float(qk_norm_scale), dtype=torch.float32))
        else:
            self.register_parameter("qk_norm_g", None)
        #: False selects the explicit matmul/softmax path even when weights are not
        #: needed (reference path for tests and benchmarks).
        self.use_fused = True
        #: When True, the next forwards take the explicit path and store attention
        #: health statistics (entropy, max |logit|) in ``self.last_stats``.
        self.record_stats = False
        self.last_stats: Dict[str, Tensor] = {}

    def extra_repr(self) -> str:
        return f"qk_norm={self.qk_norm}, num_heads={self.num_heads}, head_dim={self.head_dim}"

    # ------------------------------------------------------------------ helpers
    def _split_heads(self, x: Tensor, bsz: int) -> Tensor:
        # (len, bsz, num_heads * head_dim) -> (bsz, num_heads, len, head_dim)
        return x.view(x.size(0), bsz, self.num_heads, self.head_dim).permute(1, 2, 0, 3)

    def _attention_mask(self, attn_mask: Optional[Tensor], key_padding_mask: Optional[Tensor],
                        dtype: torch.dtype) -> Optional[Tensor]:
        """One mask for ``scaled_dot_product_attention``, broadcastable to ``(B, H, T, S)``.

        Bool masks come out with True = *attend* (SDPA's convention, the inverse of
        fairseq's); an additive float ``attn_mask`` stays additive with pads set to
        ``-inf``. A fully masked row gives zeros, never NaN (both paths).
        """
        pad = None
        if key_padding_mask is not None:
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

    # ------------------------------------------------------------------ forward
    def forward(
        self,
        query: Tensor,
        key: Optional[Tensor],
        value: Optional[Tensor],
        key_padding_mask: Optional[Tensor] = None,
        incremental_state: Optional[Dict[str, Dict[str, Optional[Tensor]]]] = None,
        need_weights: bool = True,
        static_kv: bool = False,
        attn_mask: Optional[Tensor] = None,
        before_softmax: bool = False,
        need_head_weights: bool = False,
    ) -> Tuple[Tensor, Optional[Tensor]]:
        """See the class docstring for shapes; arguments as in fairseq's parent."""
        if need_head_weights:
            need_weights = True
        tgt_len, bsz, embed_dim = query.size()
        assert embed_dim == self.embed_dim, f"query dim {embed_dim} != {self.embed_dim}"

        saved_state: Optional[Dict[str, Optional[Tensor]]] = None
        if incremental_state is not None:
            saved_state = self._get_input_buffer(incremental_state)
            if "prev_key" in saved_state and static_kv:
                # encoder keys/values are cached: no need to project them again
                assert self.encoder_decoder_attention and not self.self_attention
                key = value = None

        q = self._split_heads(self.q_proj(query), bsz)  # (B, H, T, hd)
        k: Optional[Tensor] = None
        v: Optional[Tensor] = None
        if self.self_attention:
            k = self._split_heads(self.k_proj(query), bsz)
            v = self._split_heads(self.v_proj(query), bsz)
        elif key is not None:
            if (self.encoder_decoder_attention and self.beam_size > 1 and saved_state is not None
                    and bsz == key.size(1)):
                # beam-shared encoder states, as in the parent, but only while decoding
                # incrementally (never in a training/validation forward): (S, B*beam, C) -> (S, B, C)
                key = key.view(key.size(0), -1, self.beam_size, key.size(2))[:, :, 0, :]
                if key_padding_mask is not None:
                    key_padding_mask = key_padding_mask.view(
                        -1, self.beam_size, key_padding_mask.size(1))[:, 0, :]
            kv_in = key if self.encoder_decoder_attention else value
            assert kv_in is not None
            k = self._split_heads(self.k_proj(key), key.size(1))  # (B', H, S, hd)
            v = self._split_heads(self.v_proj(kv_in), key.size(1))
        if self.qk_norm:
            q = qk_scaled_queries(q, self.qk_norm_g)
            if k is not None:  # new keys only: cached keys are already normalized
                k = scaled_l2_normalize(k, QK_NORM_EPS)

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
            saved_state["prev_key"] = k.contiguous()
            saved_state["prev_value"] = v.contiguous()
            saved_state["prev_key_padding_mask"] = key_padding_mask
            self._set_input_buffer(incremental_state, saved_state)
        assert k is not None and v is not None
        if key_padding_mask is not None and key_padding_mask.dim() == 0:
            key_padding_mask = None
        kv_bsz, src_len = k.size(0), k.size(2)

        # Beam-shared encoder-attention: fold the beam into the query length so
        # that queries of one sentence's beams share its keys without a copy.
        grouped = self.encoder_decoder_attention and kv_bsz != bsz
        if grouped:
            beam = bsz // kv_bsz
            # (B*beam, H, T, hd) -> (B, H, beam*T, hd)
            q = q.reshape(kv_bsz, beam, self.num_heads, tgt_len, self.head_dim)
            q = q.transpose(1, 2).reshape(kv_bsz, self.num_heads, beam * tgt_len, self.head_dim)

        scale = 1.0 if self.qk_norm else self.scaling  # QKNorm: g is already in q
        mask = self._attention_mask(attn_mask, key_padding_mask, q.dtype)
        dropout_p = self.dropout_module.p if (
            self.training or self.dropout_module.apply_during_inference) else 0.0

        weights: Optional[Tensor] = None
        if (self.use_fused and not need_weights and not before_softmax
                and not self.record_stats):
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p,
                                                 scale=scale)
        else:
            logits = torch.matmul(q, k.transpose(-1, -2))  # (B', H, T', S)
            if scale != 1.0:
                logits = logits * scale
            dead: Optional[Tensor] = None
            if mask is not None:
                if mask.dtype == torch.bool:
                    logits = logits.masked_fill(~mask, float("-inf"))
                else:
                    logits = logits + mask
                # queries with every key masked attend to nothing: zero output and
                # zero gradient instead of NaN (as the fused kernel does)
                dead = torch.isneginf(logits).all(dim=-1, keepdim=True)
                logits = logits.masked_fill(dead, 0.0)
            if before_softmax:
                if grouped:
                    raise NotImplementedError("before_softmax with beam-shared encoder states")
                return logits.reshape(bsz * self.num_heads, tgt_len, src_len), \
                    v.reshape(bsz * self.num_heads, src_len, self.head_dim)
            # softmax in float32 for fp16/bf16 (as fairseq), in the input's precision otherwise
            probs_float = torch.softmax(logits.float() if logits.element_size() < 4 else logits,
                                        dim=-1)
            if dead is not None:
                probs_float = probs_float.masked_fill(dead, 0.0)
            if self.record_stats:
                self._store_stats(logits, probs_float, dead)
            probs = probs_float.type_as(logits)
            out = torch.matmul(F.dropout(probs, p=dropout_p, training=dropout_p > 0), v)
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

    @torch.no_grad()
    def _store_stats(self, logits: Tensor, probs: Tensor, dead: Optional[Tensor]) -> None:
        """Attention health (Zhai et al. 2023; Wortsman et al. 2023), detached scalars.

        ``entropy``: mean over heads and queries that see at least one key of
        ``-sum_j A_ij log A_ij`` (nats); ``max_logit``: max |logit| over unmasked
        entries. ``logits``/``probs``: ``(B', H, T', S)``; ``dead``: ``(B', H, T', 1)``
        True for fully masked queries, or None.
        """
        entropy = -(probs * torch.log(probs.clamp_min(1e-30))).sum(-1)  # (B', H, T')
        if dead is not None:
            entropy = entropy[~dead.squeeze(-1).expand_as(entropy)]
        finite = torch.isfinite(logits)
        self.last_stats = {
            "entropy": entropy.mean() if entropy.numel() else logits.new_zeros(()),
            "max_logit": logits.float().abs().masked_fill(~finite, 0.0).max(),
        }
