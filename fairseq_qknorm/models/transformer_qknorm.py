"""``transformer_qknorm``: fairseq's Transformer with QKNorm, ScaleNorm and FixNorm.

Extends fairseq's legacy ``TransformerModel`` through its build hooks
(``build_embedding``, ``build_encoder``/``build_decoder``,
``build_encoder_layer``/``build_decoder_layer``, ``build_self_attention``,
``build_encoder_attention``, ``build_output_projection``). New flags:

* ``--qk-norm`` (+ ``--qk-norm-length L`` | ``--qk-norm-scale G``): QKNorm in
  every attention module (Henry et al., 2020).
* ``--norm-type {layernorm,scalenorm}``: ScaleNorm replaces every LayerNorm of
  the encoder and decoder, layers and final norms (Nguyen & Salazar, 2019).
* ``--fix-norm``: FixNorm word embeddings and output projection (TWT Sec. 2.3).
* ``--attn-stats-interval N``: log attention entropy / max |logit| / g.

PreNorm is fairseq's own ``--encoder-normalize-before --decoder-normalize-before``.
"""

import logging

from fairseq import metrics
from fairseq.distributed import fsdp_wrap
from fairseq.models import register_model, register_model_architecture
from fairseq.models.transformer import (
    TransformerDecoder,
    TransformerEncoder,
    TransformerModel,
)
from fairseq.models.transformer.transformer_legacy import base_architecture
from fairseq.modules import LayerNorm
from fairseq.modules.checkpoint_activations import checkpoint_wrapper
from fairseq.modules.transformer_layer import (
    TransformerDecoderLayerBase,
    TransformerEncoderLayerBase,
)
from fairseq.utils import safe_getattr

from ..modules import (
    FixNormEmbedding,
    FixNormLinear,
    QKNormMultiheadAttention,
    ScaleNorm,
    qk_norm_initial_scale,
)

logger = logging.getLogger(__name__)

NORM_TYPES = ("layernorm", "scalenorm")


# --------------------------------------------------------------------- helpers
def build_norm(cfg, dim: int):
    """The normalization layer selected by ``cfg.norm_type`` for width ``dim``.

    ``layernorm``: fairseq's ``LayerNorm``; ``scalenorm``: :class:`ScaleNorm`
    (g initialised to sqrt(dim), TWT Eq. 7).

    Raises:
        ValueError: unknown ``norm_type``.
    """
    norm_type = safe_getattr(cfg, "norm_type", "layernorm")
    if norm_type == "scalenorm":
        return ScaleNorm(dim)
    if norm_type == "layernorm":
        return LayerNorm(dim, export=safe_getattr(cfg, "export", False))
    raise ValueError(f"--norm-type must be one of {NORM_TYPES}, got {norm_type!r}")


def _rebuild_norms(module, cfg, names) -> None:
    """Replace the LayerNorms fairseq builds inline in ``module.__init__``.

    fairseq constructs its norms directly (no hook), so they are swapped after
    construction; attributes that are ``None`` (norm disabled) stay ``None``.
    """
    if safe_getattr(cfg, "norm_type", "layernorm") == "layernorm":
        return
    for name in names:
        old = getattr(module, name, None)
        if old is not None:
            setattr(module, name, build_norm(cfg, old.normalized_shape[0]))


def build_attention(cfg, embed_dim: int, num_heads: int, **kwargs) -> QKNormMultiheadAttention:
    """A :class:`QKNormMultiheadAttention` configured from ``cfg``.

    ``cfg.qk_norm_init`` (set by :meth:`TransformerQKNormModel.build_model`)
    holds ``g0``. ``kwargs`` are fairseq's ``MultiheadAttention`` arguments.
    """
    qk_norm = bool(safe_getattr(cfg, "qk_norm", False))
    return QKNormMultiheadAttention(
        embed_dim,
        num_heads,
        dropout=cfg.attention_dropout,
        qk_norm=qk_norm,
        qk_norm_scale=safe_getattr(cfg, "qk_norm_init", None) if qk_norm else None,
        **kwargs,
    )


def _wrap_layer(layer, cfg):
    # Mirrors the end of TransformerEncoderBase.build_encoder_layer /
    # TransformerDecoderBase.build_decoder_layer (fairseq/models/transformer/
    # transformer_{encoder,decoder}.py): activation checkpointing + FSDP wrap.
    checkpoint = cfg.checkpoint_activations
    if checkpoint:
        layer = checkpoint_wrapper(layer, offload_to_cpu=cfg.offload_activations)
    min_params_to_wrap = cfg.min_params_to_wrap if not checkpoint else 0
    return fsdp_wrap(layer, min_num_params=min_params_to_wrap)


# ---------------------------------------------------------------------- layers
class TransformerQKNormEncoderLayer(TransformerEncoderLayerBase):
    """fairseq encoder layer whose self-attention is :class:`QKNormMultiheadAttention`
    and whose two norms follow ``--norm-type``; otherwise identical."""

    def __init__(self, cfg, return_fc=False):
        super().__init__(cfg, return_fc=return_fc)
        _rebuild_norms(self, cfg, ("self_attn_layer_norm", "final_layer_norm"))

    def build_self_attention(self, embed_dim, cfg):
        return build_attention(
            cfg, embed_dim, cfg.encoder.attention_heads, self_attention=True,
            q_noise=self.quant_noise, qn_block_size=self.quant_noise_block_size,
        )


class TransformerQKNormDecoderLayer(TransformerDecoderLayerBase):
    """fairseq decoder layer whose self- and encoder-attention are
    :class:`QKNormMultiheadAttention` and whose norms follow ``--norm-type``."""

    def __init__(self, cfg, no_encoder_attn=False, add_bias_kv=False, add_zero_attn=False):
        super().__init__(cfg, no_encoder_attn=no_encoder_attn, add_bias_kv=add_bias_kv,
                         add_zero_attn=add_zero_attn)
        _rebuild_norms(self, cfg, ("self_attn_layer_norm", "encoder_attn_layer_norm",
                                   "final_layer_norm", "attn_ln", "ffn_layernorm"))

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        return build_attention(
            cfg, embed_dim, cfg.decoder.attention_heads,
            add_bias_kv=add_bias_kv, add_zero_attn=add_zero_attn,
            self_attention=not cfg.cross_self_attention,
            q_noise=self.quant_noise, qn_block_size=self.quant_noise_block_size,
        )

    def build_encoder_attention(self, embed_dim, cfg):
        return build_attention(
            cfg, embed_dim, cfg.decoder.attention_heads,
            kdim=cfg.encoder.embed_dim, vdim=cfg.encoder.embed_dim,
            encoder_decoder_attention=True,
            q_noise=self.quant_noise, qn_block_size=self.quant_noise_block_size,
        )


# ------------------------------------------------------------ encoder/decoder
class TransformerQKNormEncoder(TransformerEncoder):
    """fairseq ``TransformerEncoder`` built from :class:`TransformerQKNormEncoderLayer`,
    with its final/embedding norms following ``--norm-type``."""

    def __init__(self, args, dictionary, embed_tokens, return_fc=False):
        super().__init__(args, dictionary, embed_tokens, return_fc=return_fc)
        _rebuild_norms(self, self.cfg, ("layer_norm", "layernorm_embedding"))

    def build_encoder_layer(self, args):
        return _wrap_layer(TransformerQKNormEncoderLayer(args, return_fc=self.return_fc), args)


class TransformerQKNormDecoder(TransformerDecoder):
    """fairseq ``TransformerDecoder`` built from :class:`TransformerQKNormDecoderLayer`,
    norms following ``--norm-type`` and, with ``--fix-norm``, a
    :class:`FixNormLinear` output projection (tied to the embeddings when shared)."""

    def __init__(self, args, dictionary, embed_tokens, no_encoder_attn=False,
                 output_projection=None):
        super().__init__(args, dictionary, embed_tokens, no_encoder_attn=no_encoder_attn,
                         output_projection=output_projection)
        _rebuild_norms(self, self.cfg, ("layer_norm", "layernorm_embedding"))

    def build_decoder_layer(self, args, no_encoder_attn=False):
        return _wrap_layer(TransformerQKNormDecoderLayer(args, no_encoder_attn), args)

    def build_output_projection(self, args, dictionary, embed_tokens):
        super().build_output_projection(args, dictionary, embed_tokens)
        if not safe_getattr(args, "fix_norm", False):
            return
        if self.adaptive_softmax is not None:
            raise ValueError("--fix-norm is not compatible with adaptive softmax")
        old = self.output_projection
        self.output_projection = FixNormLinear(old.in_features, old.out_features)
        self.output_projection.weight = old.weight  # tied to embed_tokens when shared


# ----------------------------------------------------------------------- model
@register_model("transformer_qknorm")
class TransformerQKNormModel(TransformerModel):
    """fairseq's Transformer (Vaswani et al., 2017) with QKNorm (Henry et al., 2020),
    ScaleNorm and FixNorm (Nguyen & Salazar, 2019) as flags and named archs.

    With all new flags off it is fairseq's ``transformer`` except that attention
    runs through :class:`QKNormMultiheadAttention` (same math, owned forward).
    """

    @classmethod
    def hub_models(cls):
        return {}

    @classmethod
    def add_args(cls, parser):
        """Add the plugin's flags. No argparse defaults: the arch functions set them."""
        super().add_args(parser)
        parser.add_argument(
            "--qk-norm", action="store_true",
            help="QKNorm (Henry et al. 2020): l2-normalize q and k per head; logits = "
                 "g*cos(q,k) with one learnable scalar g per attention module, no 1/sqrt(d)")
        parser.add_argument(
            "--qk-norm-length", type=float, metavar="L",
            help="QKNorm g0 = log2(L^2 - L), L = 97.5th-percentile training length "
                 "in BPE tokens (paper Eq. 4); exclusive with --qk-norm-scale")
        parser.add_argument(
            "--qk-norm-scale", type=float, metavar="G",
            help="QKNorm g0 set directly; exclusive with --qk-norm-length")
        parser.add_argument(
            "--norm-type", choices=NORM_TYPES,
            help="normalization of every encoder/decoder norm: layernorm (default) or "
                 "scalenorm = g*x/||x||, g0 = sqrt(d) (Nguyen & Salazar 2019)")
        parser.add_argument(
            "--fix-norm", action="store_true",
            help="FixNorm: l2-normalized word embeddings and output projection rows, "
                 "embeddings initialised U(-0.01, 0.01) (Nguyen & Salazar 2019)")
        parser.add_argument(
            "--attn-stats-interval", type=int, metavar="N",
            help="every N training updates (and on every validation batch) log "
                 "attention entropy, max |logit| and QKNorm g per module; 0 = off")

    @classmethod
    def build_model(cls, args, task):
        """Resolve the QKNorm g0, then build as fairseq's TransformerModel does.

        Raises:
            ValueError: ``--qk-norm`` without exactly one of ``--qk-norm-length`` /
                ``--qk-norm-scale``; unknown ``--norm-type``.
        """
        base_qknorm_architecture(args)  # fills flags missing from older checkpoints
        if args.norm_type not in NORM_TYPES:
            raise ValueError(f"--norm-type must be one of {NORM_TYPES}, got {args.norm_type!r}")
        if args.qk_norm:
            args.qk_norm_init = qk_norm_initial_scale(args.qk_norm_length, args.qk_norm_scale)
            logger.info("QKNorm: g0 = %.4f (%s)", args.qk_norm_init,
                        f"L = {args.qk_norm_length:g}" if args.qk_norm_length is not None
                        else "--qk-norm-scale")
        else:
            args.qk_norm_init = None
        model = super().build_model(args, task)
        model._stats_interval = int(args.attn_stats_interval or 0)
        return model

    @classmethod
    def build_embedding(cls, args, dictionary, embed_dim, path=None):
        if not safe_getattr(args, "fix_norm", False):
            return super().build_embedding(args, dictionary, embed_dim, path)
        if path:
            raise ValueError("--fix-norm with pretrained embeddings (--*-embed-path) "
                             "is not supported")
        return FixNormEmbedding(len(dictionary), embed_dim, dictionary.pad())

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        return TransformerQKNormEncoder(args, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        return TransformerQKNormDecoder(args, tgt_dict, embed_tokens,
                                        no_encoder_attn=args.no_cross_attention)

    # ------------------------------------------------------ attention health
    def attention_modules(self):
        """``{name: QKNormMultiheadAttention}`` named ``enc{i}_self``,
        ``dec{i}_self``, ``dec{i}_cross`` (i = layer index)."""
        named = {}
        for i, layer in enumerate(self.encoder.layers):
            named[f"enc{i}_self"] = layer.self_attn
        for i, layer in enumerate(self.decoder.layers):
            named[f"dec{i}_self"] = layer.self_attn
            if layer.encoder_attn is not None:
                named[f"dec{i}_cross"] = layer.encoder_attn
        return named

    def forward(self, src_tokens, src_lengths, prev_output_tokens,
                return_all_hiddens: bool = True, features_only: bool = False,
                alignment_layer=None, alignment_heads=None):
        """As fairseq's; every ``--attn-stats-interval`` training forwards (and every
        validation forward) also logs attention health through fairseq metrics."""
        interval = getattr(self, "_stats_interval", 0)
        record = False
        if interval > 0:
            self._stats_step = getattr(self, "_stats_step", -1) + 1
            record = (not self.training) or self._stats_step % interval == 0
        modules = self.attention_modules() if record else {}
        for m in modules.values():
            m.record_stats = True
        try:
            out = super().forward(src_tokens, src_lengths, prev_output_tokens,
                                  return_all_hiddens=return_all_hiddens,
                                  features_only=features_only,
                                  alignment_layer=alignment_layer,
                                  alignment_heads=alignment_heads)
        finally:
            for m in modules.values():
                m.record_stats = False
        for name, m in modules.items():
            stats = m.last_stats
            if stats:
                # averaged over the recorded batches of the logging interval
                metrics.log_scalar(f"attn_entropy_{name}", float(stats["entropy"]), round=3)
                metrics.log_scalar(f"attn_maxlogit_{name}", float(stats["max_logit"]), round=3)
            if m.qk_norm:
                # weight 0: the logged value is the latest g, not an average
                metrics.log_scalar(f"qknorm_g_{name}", m.qk_norm_g.item(), weight=0, round=3)
        return out


# ---------------------------------------------------------------------- archs
@register_model_architecture("transformer_qknorm", "transformer_qknorm")
def base_qknorm_architecture(args):
    """Defaults of the new flags (all off), then fairseq's ``transformer`` base."""
    args.qk_norm = safe_getattr(args, "qk_norm", False)
    args.qk_norm_length = safe_getattr(args, "qk_norm_length", None)
    args.qk_norm_scale = safe_getattr(args, "qk_norm_scale", None)
    args.norm_type = safe_getattr(args, "norm_type", "layernorm")
    args.fix_norm = safe_getattr(args, "fix_norm", False)
    args.attn_stats_interval = safe_getattr(args, "attn_stats_interval", 0)
    base_architecture(args)


# Every model size of the pipeline is set here, once: a system (configs/systems) names an arch
# family, a profile (configs/profiles) one of its sizes, and scripts/train.sh passes no size flag.
def _base_size(args):
    # the papers' size (TWT Table 1: sk-en, en-vi, en-he, ar-en): 6+6 layers, 8 heads, d 512,
    # FFN 2048, dropout 0.3; all embeddings shared (joint vocabulary, TWT Sec. 3)
    args.encoder_layers = safe_getattr(args, "encoder_layers", 6)
    args.decoder_layers = safe_getattr(args, "decoder_layers", 6)
    args.encoder_attention_heads = safe_getattr(args, "encoder_attention_heads", 8)
    args.decoder_attention_heads = safe_getattr(args, "decoder_attention_heads", 8)
    args.encoder_embed_dim = safe_getattr(args, "encoder_embed_dim", 512)
    args.decoder_embed_dim = safe_getattr(args, "decoder_embed_dim", 512)
    args.encoder_ffn_embed_dim = safe_getattr(args, "encoder_ffn_embed_dim", 2048)
    args.decoder_ffn_embed_dim = safe_getattr(args, "decoder_ffn_embed_dim", 2048)
    args.dropout = safe_getattr(args, "dropout", 0.3)
    args.share_all_embeddings = safe_getattr(args, "share_all_embeddings", True)


def _small(args):
    # the papers' gl->en size (TWT Table 1 / QKNorm configs): 4+4 layers, 4 heads, dropout 0.4
    args.encoder_layers = safe_getattr(args, "encoder_layers", 4)
    args.decoder_layers = safe_getattr(args, "decoder_layers", 4)
    args.encoder_attention_heads = safe_getattr(args, "encoder_attention_heads", 4)
    args.decoder_attention_heads = safe_getattr(args, "decoder_attention_heads", 4)
    args.dropout = safe_getattr(args, "dropout", 0.4)


def _proxy(args):
    # CPU-sized: 3+3 layers, d 256, FFN 1024, 4 heads, dropout 0.3 (calibrated on 2 cores)
    args.encoder_layers = safe_getattr(args, "encoder_layers", 3)
    args.decoder_layers = safe_getattr(args, "decoder_layers", 3)
    args.encoder_embed_dim = safe_getattr(args, "encoder_embed_dim", 256)
    args.decoder_embed_dim = safe_getattr(args, "decoder_embed_dim", 256)
    args.encoder_ffn_embed_dim = safe_getattr(args, "encoder_ffn_embed_dim", 1024)
    args.decoder_ffn_embed_dim = safe_getattr(args, "decoder_ffn_embed_dim", 1024)
    args.encoder_attention_heads = safe_getattr(args, "encoder_attention_heads", 4)
    args.decoder_attention_heads = safe_getattr(args, "decoder_attention_heads", 4)


def _register_family(name, system):
    """Register the archs ``name`` (base size), ``name_small`` and ``name_proxy``.

    ``system(args)`` sets the system's own flags (norms, FixNorm, QKNorm) with
    ``safe_getattr`` defaults; each arch sets its size first, then the system, then the base
    size for what is left, then :func:`base_qknorm_architecture`. Returns the base arch.
    """
    def make(size):
        def arch(args):
            if size is not None:
                size(args)
            system(args)
            _base_size(args)
            base_qknorm_architecture(args)
        arch.__doc__ = system.__doc__
        return arch

    archs = {suffix: make(size) for suffix, size in (("", None), ("_small", _small),
                                                     ("_proxy", _proxy))}
    for suffix, arch in archs.items():
        register_model_architecture("transformer_qknorm", name + suffix)(arch)
    return archs[""]


def _norms(args, prenorm: bool, norm_type: str, fix_norm: bool, qk_norm: bool):
    args.encoder_normalize_before = safe_getattr(args, "encoder_normalize_before", prenorm)
    args.decoder_normalize_before = safe_getattr(args, "decoder_normalize_before", prenorm)
    args.norm_type = safe_getattr(args, "norm_type", norm_type)
    args.fix_norm = safe_getattr(args, "fix_norm", fix_norm)
    args.qk_norm = safe_getattr(args, "qk_norm", qk_norm)


def _postnorm_layernorm(args):
    """TWT Table 3 row (1): PostNorm + LayerNorm, dot-product attention."""
    _norms(args, prenorm=False, norm_type="layernorm", fix_norm=False, qk_norm=False)


def _prenorm_layernorm(args):
    """TWT Table 3 row (2): PreNorm + LayerNorm, dot-product attention."""
    _norms(args, prenorm=True, norm_type="layernorm", fix_norm=False, qk_norm=False)


def _prenorm_fixnorm_layernorm(args):
    """TWT Table 3 row (3): PreNorm + FixNorm + LayerNorm, dot-product attention."""
    _norms(args, prenorm=True, norm_type="layernorm", fix_norm=True, qk_norm=False)


def _twt(args):
    """TWT Table 3 row (4): PreNorm + FixNorm + ScaleNorm, dot-product attention."""
    _norms(args, prenorm=True, norm_type="scalenorm", fix_norm=True, qk_norm=False)


def _qknorm_paper(args):
    """QKNorm paper model: PreNorm + FixNorm + **LayerNorm** + QKNorm."""
    _norms(args, prenorm=True, norm_type="layernorm", fix_norm=True, qk_norm=True)


def _scalenorm_qknorm(args):
    """Ablation cell in neither paper: PreNorm + FixNorm + ScaleNorm + QKNorm."""
    _norms(args, prenorm=True, norm_type="scalenorm", fix_norm=True, qk_norm=True)


transformer_postnorm_layernorm = _register_family("transformer_postnorm_layernorm", _postnorm_layernorm)
transformer_prenorm_layernorm = _register_family("transformer_prenorm_layernorm", _prenorm_layernorm)
transformer_prenorm_fixnorm_layernorm = _register_family(
    "transformer_prenorm_fixnorm_layernorm", _prenorm_fixnorm_layernorm)
transformer_twt = _register_family("transformer_twt", _twt)
transformer_qknorm_paper = _register_family("transformer_qknorm_paper", _qknorm_paper)
transformer_scalenorm_qknorm = _register_family("transformer_scalenorm_qknorm", _scalenorm_qknorm)
