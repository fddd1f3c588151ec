r"""``label_smoothed_cross_entropy_zloss``: fairseq's label-smoothed cross entropy plus z-loss.

Identical to fairseq's ``label_smoothed_cross_entropy`` (registered subclass, same options)
except that ``--z-loss W`` adds the output z-loss of PaLM (Chowdhery et al. 2022, Sec. 5,
"z_loss = 1e-4 * log^2 Z") and Wortsman et al. 2023 ("Small-scale proxies for large-scale
Transformer training instabilities", ICLR 2024, Sec. 3.2, Eq. 2):

    loss += W * sum_t (log Z_t)^2,     log Z_t = logsumexp_v(logits_t,v)

over the non-pad target tokens ``t`` (``Z_t`` the softmax normalizer of the decoder's output
logits at position ``t``). fairseq divides the summed loss by the sample size (target tokens),
so the gradient is that of ``W * mean_t (log Z_t)^2``. It pulls ``log Z`` towards 0, so that
the output logits cannot drift upwards together (the divergence of Wortsman et al. Sec. 3.2).
``W = 0`` (the default) is the parent criterion exactly.

Logged besides the parent's keys: ``z_loss`` (the added term, in the units of ``loss``: bits per
sample-size unit) and ``log_z`` (mean ``log Z`` over target tokens, nats).
"""

import math
from dataclasses import dataclass, field

import torch
from fairseq import metrics
from fairseq.criterions import register_criterion
from fairseq.criterions.label_smoothed_cross_entropy import (
    LabelSmoothedCrossEntropyCriterion,
    LabelSmoothedCrossEntropyCriterionConfig,
)


@dataclass
class LabelSmoothedCrossEntropyZLossConfig(LabelSmoothedCrossEntropyCriterionConfig):
    """fairseq's label-smoothed cross entropy options plus ``--z-loss``."""

    z_loss: float = field(
        default=0.0,
        metadata={
            "help": "weight W of the output z-loss W * log(Z)^2 per target token, Z the "
            "softmax normalizer of the output logits (PaLM; Wortsman et al. 2023 Sec. 3.2: "
            "1e-4); 0 = off"
        },
    )


@register_criterion(
    "label_smoothed_cross_entropy_zloss", dataclass=LabelSmoothedCrossEntropyZLossConfig
)
class LabelSmoothedCrossEntropyZLossCriterion(LabelSmoothedCrossEntropyCriterion):
    """fairseq's ``LabelSmoothedCrossEntropyCriterion`` plus ``z_loss * sum_t log^2 Z_t``.

    Args (besides the parent's):
        z_loss: the weight ``W`` (finite, >= 0).

    Raises:
        ValueError: ``z_loss`` negative or not finite; in ``forward``, a model with an
            adaptive softmax (its ``net_output[0]`` are no full-vocabulary logits).
    """

    def __init__(
        self,
        task,
        sentence_avg,
        label_smoothing,
        ignore_prefix_size=0,
        report_accuracy=False,
        z_loss=0.0,
    ):
        super().__init__(task, sentence_avg, label_smoothing, ignore_prefix_size, report_accuracy)
        z_loss = float(z_loss)
        if not math.isfinite(z_loss) or z_loss < 0.0:
            raise ValueError(f"--z-loss must be finite and >= 0, got {z_loss!r}")
        self.z_loss = z_loss
        self._z_terms: tuple = (None, None)

    def log_z(self, model, net_output, sample) -> tuple[torch.Tensor, torch.Tensor]:
        """``log Z`` per target token and its non-pad mask, both ``(B * T',)``.

        ``log Z = logsumexp`` of the float32 output logits ``net_output[0]`` ``(B, T, V)``;
        ``T' = T - ignore_prefix_size`` (the positions the loss sees).
        """
        if getattr(getattr(model, "decoder", None), "adaptive_softmax", None) is not None:
            raise ValueError("--z-loss needs full output logits: no adaptive softmax")
        logits = net_output[0]
        target = model.get_targets(sample, net_output)
        if self.ignore_prefix_size > 0:
            logits = logits[:, self.ignore_prefix_size :, :]
            target = target[:, self.ignore_prefix_size :]
        log_z = torch.logsumexp(logits.float(), dim=-1).reshape(-1)
        return log_z, target.reshape(-1).ne(self.padding_idx)

    def compute_loss(self, model, net_output, sample, reduce=True):
        """The parent's ``(loss, nll_loss)`` with ``W * log^2 Z`` added to ``loss``.

        Reduced: sums over non-pad target tokens; not reduced: per token, shaped as the
        parent's loss.
        """
        loss, nll_loss = super().compute_loss(model, net_output, sample, reduce=reduce)
        log_z, live = self.log_z(model, net_output, sample)
        log_z = log_z.masked_fill(~live, 0.0)
        z_tok = self.z_loss * log_z.pow(2)  # (B * T',), 0 at pads
        if reduce:
            z = z_tok.sum()
            self._z_terms = (z.detach(), log_z.detach().sum())
            if self.z_loss > 0:
                loss = loss + z.to(loss.dtype)
        else:
            self._z_terms = (z_tok.detach().sum(), log_z.detach().sum())
            if self.z_loss > 0:
                loss = loss + z_tok.view(loss.shape).to(loss.dtype)
        return loss, nll_loss

    def forward(self, model, sample, reduce=True):
        """The parent's forward; the logging output adds ``z_loss`` and ``log_z`` sums."""
        loss, sample_size, logging_output = super().forward(model, sample, reduce=reduce)
        z, log_z = self._z_terms
        logging_output["z_loss"] = z.data
        logging_output["log_z"] = log_z.data
        return loss, sample_size, logging_output

    @classmethod
    def reduce_metrics(cls, logging_outputs) -> None:
        """The parent's metrics plus ``z_loss`` and ``log_z``.

        ``z_loss``: bits per sample-size unit, as ``loss``; ``log_z``: mean over target
        tokens, nats.
        """
        super().reduce_metrics(logging_outputs)
        z_sum = sum(float(log.get("z_loss", 0)) for log in logging_outputs)
        log_z_sum = sum(float(log.get("log_z", 0)) for log in logging_outputs)
        ntokens = sum(log.get("ntokens", 0) for log in logging_outputs)
        sample_size = sum(log.get("sample_size", 0) for log in logging_outputs)
        if sample_size:
            metrics.log_scalar("z_loss", z_sum / sample_size / math.log(2), sample_size, round=5)
        if ntokens:
            metrics.log_scalar("log_z", log_z_sum / ntokens, ntokens, round=3)
