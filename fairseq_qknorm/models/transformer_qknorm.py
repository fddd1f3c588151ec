"""``transformer_qknorm``: fairseq's Transformer with QKNorm, ScaleNorm and FixNorm.

Extends fairseq's legacy ``TransformerModel`` through its build hooks
(``build_embedding``, ``build_encoder``/``build_decoder``,
``build_encoder_layer``/``build_decoder_layer``, ``build_self_attention``,
``build_encoder_attention``, ``build_output_projection``). New flags:

* ``--qk-norm`` (+ ``--qk-norm-length L`` | ``--qk-norm-scale G``): QKNorm in
  every attention module (Henry et al., 2020); ``--qk-norm-type
  {l2,layernorm,rmsnorm}`` picks the member of the QK-norm family (l2 = QKNorm;
  per-head LayerNorm / RMSNorm of q and k with 1/sqrt(d_head), ViT-22B / Gemma 3),
  ``--qk-norm-scale-per-head`` and ``--qk-norm-freeze-scale`` shape QKNorm's g.
* ``--norm-type {layernorm,scalenorm,rmsnorm}``: ScaleNorm (Nguyen & Salazar, 2019) or
  RMSNorm (Zhang & Sennrich, 2019) replaces every LayerNorm of the encoder and decoder,
  layers and final norms.
* ``--fix-norm``: FixNorm word embeddings and output projection (TWT Sec. 2.3).
* ``--sigma-reparam``: σReparam of every linear layer of the encoder and decoder layers,
  ``W -> gamma / sigma(W) * W`` (Zhai et al., 2023, Eq. 3).
* ``--attn-stats-interval N``: log attention entropy / max |logit| / g.
* stability methods (:mod:`..modules.qknorm_attention`, docs/stability.md):
  ``--qk-norm-type {lp,rmsnorm_full,rmsnorm_zc}`` (+ ``--qk-norm-p P``),
  ``--attn-logit-softcap C``, ``--attn-normalization nap``, ``--qk-clip TAU`` (applied by
  the ``translation_word_dropout`` task after each optimizer step).

PreNorm is fairseq's own ``--encoder-normalize-before --decoder-normalize-before``.
"""

import argparse
import json
import logging
import math
import os
from typing import Optional

import torch
import torch.distributed as dist
from fairseq import metrics
from fairseq.distributed import fsdp_wrap
from fairseq.logging.meters import AverageMeter
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
    ATTN_NORMALIZATIONS,
    QK_G_TYPES,
    QK_NORM_TYPES,
    FixNormEmbedding,
    FixNormLinear,
    QKNormMultiheadAttention,
    RMSNorm,
    ScaleNorm,
    apply_sigma_reparam,
    qk_norm_initial_scale,
)

logger = logging.getLogger(__name__)

NORM_TYPES = ("layernorm", "scalenorm", "rmsnorm")
#: key prefixes of the attention statistics the model logs (``--attn-stats-interval``)
STAT_PREFIXES = ("attn_entropy_", "attn_maxlogit_", "qknorm_g_", "qknorm_head_g_")
#: their fairseq metrics priority: before fairseq's own keys (priority 10 and up), so that the
#: order of a log line stays the same when they are dropped and added again
STAT_PRIORITY = 5


# --------------------------------------------------------------------- helpers
def build_norm(cfg, dim: int):
    """The normalization layer selected by ``cfg.norm_type`` for width ``dim``.

    ``layernorm``: fairseq's ``LayerNorm``; ``scalenorm``: :class:`ScaleNorm`
    (g initialised to sqrt(dim), TWT Eq. 7); ``rmsnorm``: :class:`RMSNorm` (gain of size
    ``dim`` initialised to 1, no bias; Zhang & Sennrich 2019, Eq. 4).

    Raises:
        ValueError: unknown ``norm_type``.
    """
    norm_type = safe_getattr(cfg, "norm_type", "layernorm")
    if norm_type == "scalenorm":
        return ScaleNorm(dim)
    if norm_type == "rmsnorm":
        return RMSNorm(dim)
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

    ``cfg.qk_norm_g0`` (set by :meth:`TransformerQKNormModel.build_model`)
    holds ``g0`` of l2 QKNorm. ``kwargs`` are fairseq's ``MultiheadAttention`` arguments.
    """
    qk_norm = bool(safe_getattr(cfg, "qk_norm", False))
    qk_kwargs = dict(
        attn_logit_softcap=safe_getattr(cfg, "attn_logit_softcap", None),
        attn_normalization=safe_getattr(cfg, "attn_normalization", None) or "softmax",
        qk_clip=safe_getattr(cfg, "qk_clip", None),
    )
    if qk_norm:
        qk_norm_type = safe_getattr(cfg, "qk_norm_type", "l2")
        qk_kwargs.update(qk_norm_type=qk_norm_type)
        if qk_norm_type in QK_G_TYPES:
            qk_kwargs.update(
                qk_norm_scale=safe_getattr(cfg, "qk_norm_g0", None),
                qk_norm_scale_per_head=bool(safe_getattr(cfg, "qk_norm_scale_per_head", False)),
                qk_norm_freeze_scale=bool(safe_getattr(cfg, "qk_norm_freeze_scale", False)),
            )
        if qk_norm_type == "lp":
            qk_kwargs.update(qk_norm_p=safe_getattr(cfg, "qk_norm_p", None))
    return QKNormMultiheadAttention(
        embed_dim,
        num_heads,
        dropout=cfg.attention_dropout,
        qk_norm=qk_norm,
        **qk_kwargs,
        **kwargs,
    )


def resolve_qk_norm_args(args) -> Optional[float]:
    """Check the QK-norm flags of ``args`` (arch defaults filled in) and return ``g0``.

    Returns:
        ``g0`` of l2 QKNorm (:func:`qk_norm_initial_scale`), or None without
        ``--qk-norm`` or for ``--qk-norm-type layernorm/rmsnorm``.

    Raises:
        ValueError: naming the flags: an unknown ``--qk-norm-type``; l2 QKNorm without
            exactly one valid ``--qk-norm-length`` / ``--qk-norm-scale``; any of
            ``--qk-norm-length``, ``--qk-norm-scale``, ``--qk-norm-scale-per-head``,
            ``--qk-norm-freeze-scale``, ``--qk-norm-type`` given while QK-norm is off
            (they would be ignored); the four g options with layernorm/rmsnorm (no g).
    """
    qk_norm_type = args.qk_norm_type
    if qk_norm_type not in QK_NORM_TYPES:
        raise ValueError(f"--qk-norm-type must be one of {QK_NORM_TYPES}, got {qk_norm_type!r}")
    g_flags = [
        flag
        for flag, given in (
            ("--qk-norm-length", args.qk_norm_length is not None),
            ("--qk-norm-scale", args.qk_norm_scale is not None),
            ("--qk-norm-scale-per-head", bool(args.qk_norm_scale_per_head)),
            ("--qk-norm-freeze-scale", bool(args.qk_norm_freeze_scale)),
        )
        if given
    ]
    if not args.qk_norm:
        ignored = g_flags + ([f"--qk-norm-type {qk_norm_type}"] if qk_norm_type != "l2" else [])
        if ignored:
            raise ValueError(
                f"{' and '.join(ignored)} would be ignored: "
                f"{'it needs' if len(ignored) == 1 else 'they need'} --qk-norm "
                f"(off for --arch {safe_getattr(args, 'arch', '?')})"
            )
        return None
    if qk_norm_type not in QK_G_TYPES:
        if g_flags:
            raise ValueError(
                f"{' and '.join(g_flags)} only "
                f"{'applies' if len(g_flags) == 1 else 'apply'} to --qk-norm-type "
                f"l2 (QKNorm's scale g); --qk-norm-type {qk_norm_type} has no g "
                "and scales logits by 1/sqrt(d_head) (lp has g as l2)"
            )
        return None
    return qk_norm_initial_scale(args.qk_norm_length, args.qk_norm_scale)


#: the file the model writes into ``--save-dir`` (:func:`write_qknorm_record`)
QKNORM_RECORD = "qknorm.json"


def qknorm_record(model, args) -> Optional[dict]:
    """What a QK-norm model was built with (``None`` without ``--qk-norm``).

    ``{"qk_norm_type", "qk_norm_length" (L or None), "qk_norm_g0" (l2 QKNorm's g0 = log2(L^2 -
    L), Henry et al. 2020 Eq. 4, or --qk-norm-scale; None for the other types, which have no
    g), "g0_source" ("qk_norm_length", "qk_norm_scale" or None), "qk_norm_scale_per_head",
    "qk_norm_freeze_scale", "modules" (the attention modules' names, :meth:`attention_modules`,
    as the logs name their g)}``.
    """
    if not safe_getattr(args, "qk_norm", False):
        return None
    g0 = safe_getattr(args, "qk_norm_g0", None)
    source = None
    if g0 is not None:
        source = "qk_norm_scale" if args.qk_norm_length is None else "qk_norm_length"
    return {
        "qk_norm_type": args.qk_norm_type,
        "qk_norm_length": args.qk_norm_length,
        "qk_norm_g0": g0,
        "g0_source": source,
        "qk_norm_scale_per_head": bool(safe_getattr(args, "qk_norm_scale_per_head", False)),
        "qk_norm_freeze_scale": bool(safe_getattr(args, "qk_norm_freeze_scale", False)),
        "modules": list(model.attention_modules()),
    }


def write_qknorm_record(model, args) -> Optional[str]:
    """Write :func:`qknorm_record` as ``SAVE_DIR/qknorm.json`` (g0 and L as the model has them).

    Written when the model is built with a ``--save-dir`` that exists (fairseq-train creates
    it before building the model), on the first process only, so that g0 and L are read from
    a file, not parsed from a log line (``qknorm_tools.records``). A file that already holds
    the same record is left alone (a model built again from its checkpoint, e.g. by
    fairseq-generate, writes nothing); a failure to write is a warning, never an error of the
    training.

    Returns:
        The path written, else ``None``.
    """
    record = qknorm_record(model, args)
    save_dir = safe_getattr(args, "save_dir", None)
    if record is None or not save_dir or not os.path.isdir(save_dir):
        return None
    if int(safe_getattr(args, "distributed_rank", 0) or 0) != 0:
        return None
    path = os.path.join(save_dir, QKNORM_RECORD)
    text = json.dumps(record, indent=1) + "\n"
    try:
        with open(path, encoding="utf-8") as f:
            if f.read() == text:
                return None
    except OSError:
        pass
    try:
        tmp = f"{path}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except OSError as e:
        logger.warning(f"cannot write {path} (QKNorm g0 and L of this model): {e}")
        return None
    return path


def check_stability_args(args) -> None:
    """Check the stability flags of ``args`` (arch defaults filled in) against each other.

    Raises:
        ValueError: naming the flags: ``--qk-norm-p`` without ``--qk-norm --qk-norm-type lp``
            or lp without it, p not finite or < 1; ``--attn-logit-softcap`` / ``--qk-clip``
            not finite and > 0; an unknown ``--attn-normalization``; NAP with l2/lp QKNorm
            (g cancels in NAP's standardization) or with a soft cap (no softmax); QK-clip
            with any QK-norm (the rescaling of W_q, W_k changes no logit there) or NAP.
    """
    lp = bool(args.qk_norm) and args.qk_norm_type == "lp"
    p = args.qk_norm_p
    if lp != (p is not None):
        raise ValueError(
            "--qk-norm-type lp needs --qk-norm-p P (and --qk-norm-p applies only to it)"
            if lp
            else f"--qk-norm-p {p:g} would be ignored: it needs --qk-norm --qk-norm-type lp"
        )
    if p is not None and not (math.isfinite(p) and p >= 1.0):
        raise ValueError(f"--qk-norm-p must be finite and >= 1, got {p!r}")
    for flag, value in (
        ("--attn-logit-softcap", args.attn_logit_softcap),
        ("--qk-clip", args.qk_clip),
    ):
        if value is not None and not (math.isfinite(value) and value > 0.0):
            raise ValueError(f"{flag} must be finite and > 0, got {value!r}")
    nap = args.attn_normalization == "nap"
    if args.attn_normalization not in ATTN_NORMALIZATIONS:
        raise ValueError(
            f"--attn-normalization must be one of {ATTN_NORMALIZATIONS}, "
            f"got {args.attn_normalization!r}"
        )
    qk = f"--qk-norm-type {args.qk_norm_type}" if args.qk_norm else None
    if nap and args.qk_norm and args.qk_norm_type in QK_G_TYPES:
        raise ValueError(
            f"--attn-normalization nap with {qk}: NAP standardizes each query's scores, so "
            "QKNorm's g would cancel; use --qk-norm-type layernorm/rmsnorm/... or no QK-norm"
        )
    if nap and args.attn_logit_softcap is not None:
        raise ValueError(
            "--attn-logit-softcap with --attn-normalization nap: NAP has no softmax to cap"
        )
    if args.qk_clip is not None and (args.qk_norm or nap):
        raise ValueError(
            f"--qk-clip with {qk or '--attn-normalization nap'}: QK-clip rescales W_q and W_k, "
            "which changes no logit under QK-norm and nothing NAP keeps; use it with "
            "dot-product attention"
        )


def qk_norm_g0_log_line(g0: float, length: Optional[float]) -> str:
    """The line the model logs for l2 QKNorm's ``g0`` (parsed by the pipeline's tools).

    ``QKNorm g0 = 13.031357 (qk_norm_length L = 92)`` or
    ``QKNorm g0 = 12.500000 (qk_norm_scale)``.
    """
    if length is None:
        return f"QKNorm g0 = {g0:.6f} (qk_norm_scale)"
    length = float(length)
    shown = int(length) if length.is_integer() else length  # 92, not 92.0
    return f"QKNorm g0 = {g0:.6f} (qk_norm_length L = {shown!r})"


def _cli_float(check):
    """An argparse ``type=`` for a float checked by ``check(value)``.

    A ValueError becomes argparse's own error (usage, ``PROG: error: argument --flag: ...``, exit
    status 2).
    """

    def parse(text: str) -> float:
        try:
            value = float(text)
            check(value)
        except ValueError as err:
            raise argparse.ArgumentTypeError(str(err)) from None
        return value

    return parse


#: set as a parser default by ``add_args``: marks a namespace fresh from fairseq's argument
#: parser, which then calls the arch function on it (fairseq/options.py, parse_args_and_arch)
_FROM_CLI = "_qk_norm_args_from_cli"


def _exit_with_usage_error(message: str) -> None:
    # What argparse.ArgumentParser.error prints after its usage line (Lib/argparse.py):
    # "PROG: error: MESSAGE", exit status 2. The arch function has no access to fairseq's
    # parser, so its usage line cannot be printed.
    parser = argparse.ArgumentParser()
    parser.exit(2, f"{parser.prog}: error: {message}\n")


def _check_qk_clip_setup(args) -> None:
    # fairseq's --fp16/--bf16 optimizers keep an fp32 master copy that would overwrite the
    # clipped weights at the next step. (The task is checked at the first training forward:
    # decoding a QK-clip checkpoint with any task is fine.)
    if (safe_getattr(args, "fp16", False) or safe_getattr(args, "bf16", False)) and not (
        safe_getattr(args, "memory_efficient_fp16", False)
        or safe_getattr(args, "memory_efficient_bf16", False)
    ):
        raise ValueError(
            "--qk-clip with --fp16/--bf16: fairseq's fp32 master weights would undo the clip; "
            "use --memory-efficient-fp16/--memory-efficient-bf16, or --bf16-autocast on CPU"
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


def drop_none_parameters(model) -> None:
    """Turn the ``None`` entries of every submodule's ``_parameters`` into plain attributes.

    ``qk_norm_g`` without l2 QKNorm, ``bias=False`` biases (fairseq's output projection, the
    per-head LayerNorm of ``--qk-norm-type layernorm``) are registered as ``None`` parameters.
    fairseq's trainer catalogs shared parameters by identity over ``module._parameters``,
    ``None`` included (fairseq/trainer.py, ``_catalog_shared_params``, and the "detected shared
    parameter" loop of ``Trainer.__init__``), so all of them look like one shared parameter and
    it logs a line for each (nine for the TWT proxy: ``...qk_norm_g <- ...qk_norm_g``, ``<-
    decoder.output_projection.bias``). A ``None`` parameter holds nothing (``parameters()``,
    ``state_dict()`` and ``.to()`` skip it); as an attribute it reads the same.
    """
    for module in model.modules():
        for name in [n for n, p in module._parameters.items() if p is None]:
            del module._parameters[name]
            setattr(module, name, None)


def drop_unrecorded_stat_meters() -> None:
    """Remove the attention-statistic meters holding no value from the active aggregators.

    fairseq empties its ``train_inner`` meters after each log line but keeps their keys
    (fairseq_cli/train.py, ``metrics.reset_meters("train_inner")``), and an empty
    ``AverageMeter`` is logged as ``None``: statistics recorded every ``--attn-stats-interval``
    updates would show as ``None`` in every log interval without a recording. Removing a meter
    takes its key and its entry of ``MetersDict.priorities`` (fairseq/logging/meters.py, kept
    in step by ``MetersDict.__setitem__``); the next recording adds it again, after fairseq's
    keys of its priority: the statistics have their own (:data:`STAT_PRIORITY`).
    """
    for agg in metrics.get_active_aggregators():
        empty = {
            k
            for k, m in agg.items()
            if k.startswith(STAT_PREFIXES)
            and isinstance(m, AverageMeter)
            and m.count == 0
            and m.val is None
        }
        if empty:
            for key in empty:
                del agg[key]
            agg.priorities = [p for p in agg.priorities if p[2] not in empty]


# ---------------------------------------------------------------------- layers
class _LayerOutputLayoutResidual:
    """``residual_connection`` as ``x + residual`` instead of fairseq's ``residual + x``.

    The same value (IEEE addition commutes), but the sum takes the memory layout of its
    first operand. fairseq's residual stream starts as a transposed view of the
    batch-major ``(B, T, C)`` embeddings; with PreNorm, ``residual + x`` keeps that
    layout through every layer, so every LayerNorm/ScaleNorm reads a strided input
    (torch's LayerNorm copies it first, forward and backward). ``x + residual`` takes the
    layer output's contiguous ``(T, B, C)`` layout from the first sublayer on, as
    PostNorm's norm does. Overrides the hook of fairseq's
    ``TransformerEncoderLayerBase``/``TransformerDecoderLayerBase``
    (``fairseq/modules/transformer_layer.py``).
    """

    def residual_connection(self, x, residual):
        return x + residual


class TransformerQKNormEncoderLayer(_LayerOutputLayoutResidual, TransformerEncoderLayerBase):
    """Fairseq encoder layer with QKNorm self-attention and ``--norm-type`` norms.

    Its self-attention is :class:`QKNormMultiheadAttention` and its two norms follow
    ``--norm-type``; otherwise identical.
    """

    def __init__(self, cfg, return_fc=False):
        super().__init__(cfg, return_fc=return_fc)
        _rebuild_norms(self, cfg, ("self_attn_layer_norm", "final_layer_norm"))

    def build_self_attention(self, embed_dim, cfg):
        """Fairseq's hook: the encoder self-attention as a :func:`build_attention` module."""
        return build_attention(
            cfg,
            embed_dim,
            cfg.encoder.attention_heads,
            self_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
        )


class TransformerQKNormDecoderLayer(_LayerOutputLayoutResidual, TransformerDecoderLayerBase):
    """Fairseq decoder layer with QKNorm attention and ``--norm-type`` norms.

    Its self- and encoder-attention are :class:`QKNormMultiheadAttention` and its norms
    follow ``--norm-type``.
    """

    def __init__(self, cfg, no_encoder_attn=False, add_bias_kv=False, add_zero_attn=False):
        super().__init__(
            cfg,
            no_encoder_attn=no_encoder_attn,
            add_bias_kv=add_bias_kv,
            add_zero_attn=add_zero_attn,
        )
        _rebuild_norms(
            self,
            cfg,
            (
                "self_attn_layer_norm",
                "encoder_attn_layer_norm",
                "final_layer_norm",
                "attn_ln",
                "ffn_layernorm",
            ),
        )

    def build_self_attention(self, embed_dim, cfg, add_bias_kv=False, add_zero_attn=False):
        """Fairseq's hook: the decoder self-attention as a :func:`build_attention` module."""
        return build_attention(
            cfg,
            embed_dim,
            cfg.decoder.attention_heads,
            add_bias_kv=add_bias_kv,
            add_zero_attn=add_zero_attn,
            self_attention=not cfg.cross_self_attention,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
        )

    def build_encoder_attention(self, embed_dim, cfg):
        """Fairseq's hook: the encoder-decoder attention as a :func:`build_attention` module."""
        return build_attention(
            cfg,
            embed_dim,
            cfg.decoder.attention_heads,
            kdim=cfg.encoder.embed_dim,
            vdim=cfg.encoder.embed_dim,
            encoder_decoder_attention=True,
            q_noise=self.quant_noise,
            qn_block_size=self.quant_noise_block_size,
        )


# ------------------------------------------------------------ encoder/decoder
class TransformerQKNormEncoder(TransformerEncoder):
    """Fairseq ``TransformerEncoder`` built from :class:`TransformerQKNormEncoderLayer`.

    Its final/embedding norms follow ``--norm-type``.
    """

    def __init__(self, args, dictionary, embed_tokens, return_fc=False):
        super().__init__(args, dictionary, embed_tokens, return_fc=return_fc)
        _rebuild_norms(self, self.cfg, ("layer_norm", "layernorm_embedding"))

    def build_encoder_layer(self, args):
        """Fairseq's hook: a :class:`TransformerQKNormEncoderLayer`, wrapped as fairseq's are."""
        return _wrap_layer(TransformerQKNormEncoderLayer(args, return_fc=self.return_fc), args)


class TransformerQKNormDecoder(TransformerDecoder):
    """Fairseq ``TransformerDecoder`` built from :class:`TransformerQKNormDecoderLayer`.

    Its norms follow ``--norm-type``; with ``--fix-norm`` its output projection is a
    :class:`FixNormLinear` (tied to the embeddings when shared).
    """

    def __init__(
        self, args, dictionary, embed_tokens, no_encoder_attn=False, output_projection=None
    ):
        super().__init__(
            args,
            dictionary,
            embed_tokens,
            no_encoder_attn=no_encoder_attn,
            output_projection=output_projection,
        )
        _rebuild_norms(self, self.cfg, ("layer_norm", "layernorm_embedding"))

    def build_decoder_layer(self, args, no_encoder_attn=False):
        """Fairseq's hook: a :class:`TransformerQKNormDecoderLayer`, wrapped as fairseq's are."""
        return _wrap_layer(TransformerQKNormDecoderLayer(args, no_encoder_attn), args)

    def build_output_projection(self, args, dictionary, embed_tokens):
        """Fairseq's output projection, replaced by a :class:`FixNormLinear` with ``--fix-norm``.

        The FixNorm projection keeps fairseq's weight (tied to the embeddings when shared).

        Raises:
            ValueError: ``--fix-norm`` with an adaptive softmax.
        """
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
    """Fairseq's Transformer (Vaswani et al., 2017) with QKNorm, ScaleNorm and FixNorm.

    QKNorm (Henry et al., 2020), ScaleNorm and FixNorm (Nguyen & Salazar, 2019) as flags and
    named archs.

    With all new flags off it is fairseq's ``transformer`` except that attention
    runs through :class:`QKNormMultiheadAttention` (same math, owned forward).
    """

    @classmethod
    def hub_models(cls):
        """No pretrained models are published for this architecture: an empty dict."""
        return {}

    @classmethod
    def add_args(cls, parser):
        """Add the plugin's flags. No argparse defaults: the arch functions set them."""
        super().add_args(parser)
        parser.add_argument(
            "--qk-norm",
            action="store_true",
            help="normalize q and k per head in every attention module; by default QKNorm "
            "(Henry et al. 2020): l2-normalized q and k, logits = g*cos(q,k) with one "
            "learnable scalar g per attention module, no 1/sqrt(d)",
        )
        parser.add_argument(
            "--qk-norm-type",
            choices=QK_NORM_TYPES,
            help="with --qk-norm: l2 (default) = QKNorm (Henry et al. 2020); layernorm = "
            "per-head LayerNorm of q and k (learnable weight of size d_head shared by "
            "heads, no bias), then q.k/sqrt(d_head) (ViT-22B, Dehghani et al. 2023; "
            "qk-layernorm of Wortsman et al. 2023); rmsnorm = the same with RMSNorm "
            "(Gemma 3, 2025; OLMo 2 normalizes the full width instead). layernorm and "
            "rmsnorm have no g: no --qk-norm-length/--qk-norm-scale",
        )
        g0 = parser.add_mutually_exclusive_group()
        g0.add_argument(
            "--qk-norm-length",
            type=_cli_float(lambda L: qk_norm_initial_scale(length=L)),
            metavar="L",
            help="QKNorm g0 = log2(L^2 - L), L = 97.5th-percentile training length "
            "in BPE tokens (paper Eq. 4), L >= 2; exclusive with --qk-norm-scale",
        )
        g0.add_argument(
            "--qk-norm-scale",
            type=_cli_float(lambda G: qk_norm_initial_scale(scale=G)),
            metavar="G",
            help="QKNorm g0 set directly (> 0); exclusive with --qk-norm-length",
        )
        parser.add_argument(
            "--qk-norm-scale-per-head",
            action="store_true",
            help="QKNorm (l2): one learnable g per head instead of one per attention module, "
            "as the per-head temperature of Swin V2's scaled cosine attention "
            "(Liu et al. 2022); all start at g0",
        )
        parser.add_argument(
            "--qk-norm-freeze-scale",
            action="store_true",
            help="QKNorm (l2): keep g fixed at g0 (not trained)",
        )
        parser.add_argument(
            "--qk-norm-p",
            type=float,
            metavar="P",
            help="--qk-norm-type lp: Lp-normalized QKNorm, logits g * (q/||q||_p).(k/||k||_p) "
            "with g as l2 (arXiv 2602.05006); P >= 1 (2 = QKNorm)",
        )
        parser.add_argument(
            "--attn-logit-softcap",
            type=float,
            metavar="C",
            help="soft-cap every attention logit as C*tanh(logit/C) before the softmax "
            "(Gemma 2; Rybakov et al. 2024, arXiv 2410.16682); with any --qk-norm-type",
        )
        parser.add_argument(
            "--attn-normalization",
            choices=ATTN_NORMALIZATIONS,
            help="softmax (default) or nap: normalized attention without softmax, each "
            "query's scores standardized over its keys, times a learned gain plus a bias "
            "per head (Richter & Wattenhofer 2020, arXiv 2005.09561)",
        )
        parser.add_argument(
            "--qk-clip",
            type=float,
            metavar="TAU",
            help="QK-clip (Kimi K2's MuonClip; Megatron-LM qk_clip): after each optimizer step "
            "rescale W_q and W_k of every head whose max logit passed TAU by sqrt(TAU/max) "
            "each; dot-product attention only; needs --task translation_word_dropout",
        )
        parser.add_argument(
            "--norm-type",
            choices=NORM_TYPES,
            help="normalization of every encoder/decoder norm: layernorm (default), "
            "scalenorm = g*x/||x||, g0 = sqrt(d) (Nguyen & Salazar 2019), or rmsnorm = "
            "x/RMS(x)*g, g of size d, no bias (Zhang & Sennrich 2019, Eq. 4)",
        )
        parser.add_argument(
            "--fix-norm",
            action="store_true",
            help="FixNorm: l2-normalized word embeddings and output projection rows, "
            "embeddings initialised U(-0.01, 0.01) (Nguyen & Salazar 2019)",
        )
        parser.add_argument(
            "--sigma-reparam",
            action="store_true",
            help="sigma-Reparam: every linear layer of the encoder and decoder layers "
            "(attention q/k/v/out, FFN) uses W_hat = gamma/sigma(W)*W, sigma by one "
            "power-iteration step per training forward, gamma learned from sigma(W) at init "
            "(Zhai et al. 2023, Eq. 3); embeddings and output projection unchanged",
        )
        parser.add_argument(
            "--attn-stats-interval",
            type=int,
            metavar="N",
            help="every N training updates (and on every validation batch) log "
            "attention entropy, max |logit| and QKNorm g per module; 0 = off",
        )
        # not a flag: tells the arch function that fairseq's parser made this namespace
        parser.set_defaults(**{_FROM_CLI: True})

    @classmethod
    def build_model(cls, args, task):
        """Resolve the QKNorm g0 (logged once), then build as fairseq's TransformerModel does.

        Logs ``QKNorm g0 = 13.031357 (qk_norm_length L = 92)`` or ``QKNorm g0 =
        12.500000 (qk_norm_scale)`` (:func:`qk_norm_g0_log_line`) for l2 QKNorm, nothing
        otherwise.

        Raises:
            ValueError: invalid QK-norm flags (:func:`resolve_qk_norm_args`); unknown
                ``--norm-type``.
        """
        base_qknorm_architecture(args)  # fills flags missing from older checkpoints
        if args.norm_type not in NORM_TYPES:
            raise ValueError(f"--norm-type must be one of {NORM_TYPES}, got {args.norm_type!r}")
        check_stability_args(args)
        if args.qk_clip is not None:
            _check_qk_clip_setup(args)
        args.qk_norm_g0 = resolve_qk_norm_args(args)
        if args.qk_norm_g0 is not None:
            logger.info(qk_norm_g0_log_line(args.qk_norm_g0, args.qk_norm_length))
        model = super().build_model(args, task)
        if args.sigma_reparam:  # after fairseq's initialisation: gamma = sigma(W) of the init
            for stack in (model.encoder, model.decoder):
                apply_sigma_reparam(stack.layers)
        drop_none_parameters(model)  # no "detected shared parameter" lines for None
        model._stats_interval = int(args.attn_stats_interval or 0)
        write_qknorm_record(model, args)
        model._qk_clip = args.qk_clip is not None
        return model

    @classmethod
    def build_embedding(cls, args, dictionary, embed_dim, path=None):
        """Fairseq's token embedding, or a :class:`FixNormEmbedding` with ``--fix-norm``.

        Raises:
            ValueError: ``--fix-norm`` with pretrained embeddings (``path``).
        """
        if not safe_getattr(args, "fix_norm", False):
            return super().build_embedding(args, dictionary, embed_dim, path)
        if path:
            raise ValueError(
                "--fix-norm with pretrained embeddings (--*-embed-path) is not supported"
            )
        return FixNormEmbedding(len(dictionary), embed_dim, dictionary.pad())

    @classmethod
    def build_encoder(cls, args, src_dict, embed_tokens):
        """A :class:`TransformerQKNormEncoder`."""
        return TransformerQKNormEncoder(args, src_dict, embed_tokens)

    @classmethod
    def build_decoder(cls, args, tgt_dict, embed_tokens):
        """A :class:`TransformerQKNormDecoder` (no encoder attention: ``--no-cross-attention``)."""
        return TransformerQKNormDecoder(
            args, tgt_dict, embed_tokens, no_encoder_attn=args.no_cross_attention
        )

    # ------------------------------------------------------------- QK-clip
    def apply_qk_clip(self) -> int:
        """QK-clip every attention module after an optimizer step (``--qk-clip TAU``).

        Calls :meth:`QKNormMultiheadAttention.qk_clip_` of each module and returns the number
        of heads rescaled (0 without ``--qk-clip``). The task calls it after
        ``optimizer.step()`` (``TranslationWordDropoutTask.optimizer_step``). Under
        torch.distributed the recorded per-head maxima are first all-reduced (max) over the
        ranks, so that every replica rescales the same heads by the same factors.
        """
        modules = list(self.attention_modules().values())
        if modules and modules[0].qk_clip is not None:
            if dist.is_available() and dist.is_initialized():
                ref = self.encoder.embed_tokens.weight
                heads = max(m.num_heads for m in modules)
                stacked = torch.full(
                    (len(modules), heads), float("-inf"), dtype=torch.float32, device=ref.device
                )
                for i, m in enumerate(modules):
                    if m.qk_clip_max_logit is not None:
                        stacked[i, : m.num_heads] = m.qk_clip_max_logit
                dist.all_reduce(stacked, op=dist.ReduceOp.MAX)
                for i, m in enumerate(modules):
                    row = stacked[i, : m.num_heads]
                    m.qk_clip_max_logit = row if bool(torch.isfinite(row).any()) else None
        return sum(m.qk_clip_() for m in modules)

    # ------------------------------------------------------ attention health
    def attention_modules(self):
        """The attention modules as ``{name: QKNormMultiheadAttention}``.

        Named ``enc{i}_self``, ``dec{i}_self``, ``dec{i}_cross`` (i = layer index).
        """
        named = {}
        for i, layer in enumerate(self.encoder.layers):
            named[f"enc{i}_self"] = layer.self_attn
        for i, layer in enumerate(self.decoder.layers):
            named[f"dec{i}_self"] = layer.self_attn
            if layer.encoder_attn is not None:
                named[f"dec{i}_cross"] = layer.encoder_attn
        return named

    def forward(
        self,
        src_tokens,
        src_lengths,
        prev_output_tokens,
        return_all_hiddens: bool = True,
        features_only: bool = False,
        alignment_layer=None,
        alignment_heads=None,
    ):
        """As fairseq's, plus attention health logged through fairseq metrics.

        Logged every ``--attn-stats-interval`` training forwards and every validation
        forward.
        """
        if self.training and getattr(self, "_qk_clip", False):
            if not getattr(self, "qk_clip_hooked", False):
                raise RuntimeError(
                    "--qk-clip needs --task translation_word_dropout: that task applies the "
                    "clip after each optimizer step (this training runs without it)"
                )
        interval = getattr(self, "_stats_interval", 0)
        record = False
        if interval > 0:
            self._stats_step = getattr(self, "_stats_step", -1) + 1
            record = (not self.training) or self._stats_step % interval == 0
            if self.training:
                drop_unrecorded_stat_meters()  # log statistics only where recorded
        modules = self.attention_modules() if record else {}
        for m in modules.values():
            m.record_stats = True
        try:
            out = super().forward(
                src_tokens,
                src_lengths,
                prev_output_tokens,
                return_all_hiddens=return_all_hiddens,
                features_only=features_only,
                alignment_layer=alignment_layer,
                alignment_heads=alignment_heads,
            )
        finally:
            for m in modules.values():
                m.record_stats = False
        for name, m in modules.items():
            stats = m.last_stats
            if stats:
                # averaged over the recorded batches of the logging interval (NAP: no entropy)
                if "entropy" in stats:
                    metrics.log_scalar(
                        f"attn_entropy_{name}",
                        float(stats["entropy"]),
                        round=3,
                        priority=STAT_PRIORITY,
                    )
                metrics.log_scalar(
                    f"attn_maxlogit_{name}",
                    float(stats["max_logit"]),
                    round=3,
                    priority=STAT_PRIORITY,
                )
            if m.qk_norm_g is not None:
                # weight 0: the logged value is the latest g, not an average; per-head g:
                # their mean under the same key, each head under its own
                g = m.qk_norm_g.detach().float()
                metrics.log_scalar(
                    f"qknorm_g_{name}", g.mean().item(), weight=0, round=3, priority=STAT_PRIORITY
                )
                for h, g_h in enumerate(g.tolist() if g.dim() else []):
                    metrics.log_scalar(
                        f"qknorm_head_g_{name}_h{h}", g_h, weight=0, round=3, priority=STAT_PRIORITY
                    )
        return out


# ---------------------------------------------------------------------- archs
@register_model_architecture("transformer_qknorm", "transformer_qknorm")
def base_qknorm_architecture(args):
    """Defaults of the new flags (all off), then fairseq's ``transformer`` base.

    Called by fairseq's argument parser, it then checks the QK-norm flags
    (:func:`resolve_qk_norm_args`) and reports a bad combination as argparse does:
    ``fairseq-train: error: ...``, exit status 2 (before any data is read).
    """
    args.qk_norm = safe_getattr(args, "qk_norm", False)
    args.qk_norm_type = safe_getattr(args, "qk_norm_type", "l2")
    args.qk_norm_length = safe_getattr(args, "qk_norm_length", None)
    args.qk_norm_scale = safe_getattr(args, "qk_norm_scale", None)
    args.qk_norm_scale_per_head = safe_getattr(args, "qk_norm_scale_per_head", False)
    args.qk_norm_freeze_scale = safe_getattr(args, "qk_norm_freeze_scale", False)
    args.norm_type = safe_getattr(args, "norm_type", "layernorm")
    args.fix_norm = safe_getattr(args, "fix_norm", False)
    args.sigma_reparam = safe_getattr(args, "sigma_reparam", False)
    args.attn_stats_interval = safe_getattr(args, "attn_stats_interval", 0)
    args.qk_norm_p = safe_getattr(args, "qk_norm_p", None)
    args.attn_logit_softcap = safe_getattr(args, "attn_logit_softcap", None)
    args.attn_normalization = safe_getattr(args, "attn_normalization", "softmax")
    args.qk_clip = safe_getattr(args, "qk_clip", None)
    base_architecture(args)
    if safe_getattr(args, _FROM_CLI, False):
        delattr(args, _FROM_CLI)  # checked once; the model config does not carry the mark
        try:
            check_stability_args(args)
            resolve_qk_norm_args(args)
        except ValueError as err:
            _exit_with_usage_error(str(err))


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


def _sweep_size(layers: int, dim: int):
    # the size axis of the LR sweep (scripts/lr_sweep.sh --sizes; Wortsman et al. 2023 Fig. 1):
    # layers scaled with the width, FFN 4 d, heads of 64 (the proxy, d 256, is the middle size)
    def size(args):
        args.encoder_layers = safe_getattr(args, "encoder_layers", layers)
        args.decoder_layers = safe_getattr(args, "decoder_layers", layers)
        args.encoder_embed_dim = safe_getattr(args, "encoder_embed_dim", dim)
        args.decoder_embed_dim = safe_getattr(args, "decoder_embed_dim", dim)
        args.encoder_ffn_embed_dim = safe_getattr(args, "encoder_ffn_embed_dim", 4 * dim)
        args.decoder_ffn_embed_dim = safe_getattr(args, "decoder_ffn_embed_dim", 4 * dim)
        args.encoder_attention_heads = safe_getattr(args, "encoder_attention_heads", dim // 64)
        args.decoder_attention_heads = safe_getattr(args, "decoder_attention_heads", dim // 64)

    return size


#: the LR sweep's extra sizes (arch suffix: (layers, d)); the proxy (3+3, d 256) is the third
SWEEP_SIZES = {"_d128": (2, 128), "_d384": (4, 384)}


def _register_family(name, system):
    """Register the archs ``name``, ``name_small``, ``name_proxy``, ``name_d128``, ``name_d384``.

    ``name_d128`` (2+2 layers, d 128, 2 heads) and ``name_d384`` (4+4, d 384, 6 heads) are the
    LR sweep's size axis around the proxy (3+3, d 256, 4 heads).

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

    sizes = [("", None), ("_small", _small), ("_proxy", _proxy)]
    sizes += [(suffix, _sweep_size(*dims)) for suffix, dims in SWEEP_SIZES.items()]
    archs = {suffix: make(size) for suffix, size in sizes}
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


def _prenorm_fixnorm_rmsnorm(args):
    """TWT Table 3 row (3) with RMSNorm: PreNorm + FixNorm + RMSNorm, dot-product attention.

    RMSNorm (Zhang & Sennrich 2019) in every place of row (3)'s LayerNorm; in neither paper.
    """
    _norms(args, prenorm=True, norm_type="rmsnorm", fix_norm=True, qk_norm=False)


def _qknorm_paper(args):
    """QKNorm paper model: PreNorm + FixNorm + **LayerNorm** + QKNorm."""
    _norms(args, prenorm=True, norm_type="layernorm", fix_norm=True, qk_norm=True)


def _scalenorm_qknorm(args):
    """Ablation cell in neither paper: PreNorm + FixNorm + ScaleNorm + QKNorm."""
    _norms(args, prenorm=True, norm_type="scalenorm", fix_norm=True, qk_norm=True)


def _qk_layernorm(args):
    """QK-LayerNorm: PreNorm + FixNorm + LayerNorm, per-head LayerNorm of q and k.

    Then ``q.k / sqrt(d_head)`` (ViT-22B, Dehghani et al. 2023; Wortsman et al. 2023); no ``g``.
    """
    _norms(args, prenorm=True, norm_type="layernorm", fix_norm=True, qk_norm=True)
    args.qk_norm_type = safe_getattr(args, "qk_norm_type", "layernorm")


#: Gemma 2's attention-logit soft cap (Gemma Team 2024, Sec. 2: 50.0 on attention logits)
GEMMA2_ATTN_SOFTCAP = 50.0


def _twt_softcap(args):
    """TWT Table 3 row (4) with soft-capped attention logits: 50 tanh(x / 50) (Gemma 2).

    PreNorm + FixNorm + ScaleNorm, dot-product attention, every logit capped before the
    softmax (Rybakov et al. 2024, arXiv 2410.16682, "softmax capping").
    """
    _twt(args)
    args.attn_logit_softcap = safe_getattr(args, "attn_logit_softcap", GEMMA2_ATTN_SOFTCAP)


def _qk_rmsnorm_full(args):
    """OLMo 2's QK-norm on the QKNorm paper's model: PreNorm + FixNorm + LayerNorm.

    q and k RMS-normalized over the full width before the head split (Team OLMo 2024), then
    ``q.k / sqrt(d_head)``.
    """
    _norms(args, prenorm=True, norm_type="layernorm", fix_norm=True, qk_norm=True)
    args.qk_norm_type = safe_getattr(args, "qk_norm_type", "rmsnorm_full")


def _qk_rmsnorm_zc(args):
    """Gemma 3's QK-norm on the QKNorm paper's model: PreNorm + FixNorm + LayerNorm.

    Per-head RMSNorm of q and k with the weight initialised at 0 and applied as 1 + w (Gemma
    Team 2025), then ``q.k / sqrt(d_head)``.
    """
    _norms(args, prenorm=True, norm_type="layernorm", fix_norm=True, qk_norm=True)
    args.qk_norm_type = safe_getattr(args, "qk_norm_type", "rmsnorm_zc")


transformer_postnorm_layernorm = _register_family(
    "transformer_postnorm_layernorm", _postnorm_layernorm
)
transformer_prenorm_layernorm = _register_family(
    "transformer_prenorm_layernorm", _prenorm_layernorm
)
transformer_prenorm_fixnorm_layernorm = _register_family(
    "transformer_prenorm_fixnorm_layernorm", _prenorm_fixnorm_layernorm
)
transformer_prenorm_fixnorm_rmsnorm = _register_family(
    "transformer_prenorm_fixnorm_rmsnorm", _prenorm_fixnorm_rmsnorm
)
transformer_twt = _register_family("transformer_twt", _twt)
transformer_qknorm_paper = _register_family("transformer_qknorm_paper", _qknorm_paper)
transformer_scalenorm_qknorm = _register_family("transformer_scalenorm_qknorm", _scalenorm_qknorm)
transformer_qk_layernorm = _register_family("transformer_qk_layernorm", _qk_layernorm)
transformer_twt_softcap = _register_family("transformer_twt_softcap", _twt_softcap)
transformer_qk_rmsnorm_full = _register_family("transformer_qk_rmsnorm_full", _qk_rmsnorm_full)
transformer_qk_rmsnorm_zc = _register_family("transformer_qk_rmsnorm_zc", _qk_rmsnorm_zc)
