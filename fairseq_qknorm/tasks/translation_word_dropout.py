"""``translation_word_dropout``: fairseq's ``translation`` task plus word dropout in training.

Identical to fairseq's :class:`~fairseq.tasks.translation.TranslationTask` except that
:meth:`TranslationWordDropoutTask.train_step` replaces each non-special token of the model
*inputs* ``net_input.src_tokens`` and ``net_input.prev_output_tokens`` by ``<unk>`` with
probability ``--word-dropout P`` before the forward pass. Special symbols (``<s>``, ``<pad>``,
``</s>``, ``<unk>``: indices below ``Dictionary.nspecial``) are never replaced; the target
(``sample["target"]``, what the loss is computed on) is never changed; validation
(``valid_step``, including ``--eval-bleu``), ``fairseq-generate`` and ``fairseq-interactive``
see the data unchanged.

Sources
-------
* Nguyen & Salazar (2019), *Transformers without Tears: Improving the Normalization of
  Self-Attention*, IWSLT 2019 (arXiv:1910.05895), Sec. 4: "word dropout 0.1" in every
  low-resource experiment, implemented in the authors' code by replacing source and target
  input tokens with UNK.
* Sennrich, Haddow & Birch (2016), *Edinburgh Neural Machine Translation Systems for WMT 16*:
  dropout of entire words (their embeddings set to zero) in NMT, following
* Gal & Ghahramani (2016), *A Theoretically Grounded Application of Dropout in Recurrent Neural
  Networks* (word-level dropout). Replacing by ``<unk>`` (as TWT does) instead of zeroing the
  embedding keeps the input distribution of the model's UNK embedding meaningful.

Reproducibility: the mask of a batch is drawn from a ``torch.Generator`` seeded from
(``--seed``, update number, micro-batch index within the update, data-parallel rank), so a
resumed run (fairseq restarts at an update boundary) draws the same masks as an uninterrupted
one, independently of the global torch RNG (which dropout layers consume).

Use::

    fairseq-train DATA --user-dir /abs/path/fairseq_qknorm \\
        --task translation_word_dropout --word-dropout 0.1 ...

Decoding a checkpoint trained with this task works with ``--task translation`` (the model is
unchanged); fairseq's hub interface restores the checkpoint's task, so it needs the plugin
imported (``import fairseq_qknorm``).
"""

import logging
from dataclasses import dataclass, field
from typing import Optional

import numpy as np
import torch
from omegaconf import II

from fairseq.tasks import register_task
from fairseq.tasks.translation import TranslationConfig, TranslationTask

logger = logging.getLogger(__name__)


@dataclass
class TranslationWordDropoutConfig(TranslationConfig):
    """fairseq's ``TranslationConfig`` plus ``--word-dropout``."""

    word_dropout: float = field(
        default=0.0,
        metadata={
            "help": "word dropout probability P: in training only, each non-special token of "
            "the source and of the decoder input (prev_output_tokens) is replaced by <unk> "
            "with probability P; targets untouched (Nguyen & Salazar 2019, Sec. 4: 0.1)"
        },
    )
    # the run's --seed (fairseq's common.seed), for the word-dropout masks
    seed: int = II("common.seed")


def word_dropout(tokens: torch.Tensor, p: float, unk: int, nspecial: int,
                 generator: Optional[torch.Generator] = None) -> torch.Tensor:
    """Return a copy of ``tokens`` with each token ``>= nspecial`` replaced by ``unk`` with
    probability ``p`` (special symbols, including padding and EOS, are never replaced).

    :param tokens: integer tensor of token indices, any shape (e.g. ``(batch, length)``).
    :param p: replacement probability in ``[0, 1]``; ``p == 1`` replaces every regular token.
    :param unk: index of ``<unk>`` in the dictionary.
    :param nspecial: number of special symbols (``Dictionary.nspecial``: indices ``0 ..
        nspecial-1`` are ``<s>``, ``<pad>``, ``</s>``, ``<unk>`` and any extra specials).
    :param generator: CPU ``torch.Generator`` for the mask (the mask is drawn on the CPU and
        moved to ``tokens.device``, so the result does not depend on the device).
    """
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"word dropout probability must be in [0, 1], got {p}")
    if p == 0.0 or tokens.numel() == 0:
        return tokens.clone()
    # (same shape as tokens) uniform [0, 1) draws: < p with probability p, always for p == 1
    drop = torch.rand(tokens.shape, generator=generator) < p
    drop = drop.to(tokens.device) & (tokens >= nspecial)
    return tokens.masked_fill(drop, unk)


def _mask_seed(*parts: int) -> int:
    """Well-mixed 63-bit seed from non-negative integers (numpy SeedSequence hashing)."""
    state = np.random.SeedSequence([int(x) for x in parts]).generate_state(2, dtype=np.uint32)
    return (int(state[0]) << 31) ^ int(state[1])


@register_task("translation_word_dropout", dataclass=TranslationWordDropoutConfig)
class TranslationWordDropoutTask(TranslationTask):
    """fairseq's ``translation`` task with word dropout on the model inputs in ``train_step``
    only (see the module docstring for sources and what is and is not changed)."""

    cfg: TranslationWordDropoutConfig

    def __init__(self, cfg, src_dict, tgt_dict):
        super().__init__(cfg, src_dict, tgt_dict)
        self.word_dropout_p = float(getattr(cfg, "word_dropout", 0.0) or 0.0)
        if not 0.0 <= self.word_dropout_p <= 1.0:
            raise ValueError(f"--word-dropout must be in [0, 1], got {self.word_dropout_p}")
        try:
            self._wd_seed = int(getattr(cfg, "seed", 1))
        except (TypeError, ValueError):  # unresolved interpolation outside fairseq-train
            self._wd_seed = 1
        self._wd_update = None  # update number of the previous train_step call
        self._wd_micro = 0      # micro-batch index within that update (--update-freq > 1)
        if self.word_dropout_p > 0:
            logger.info("word dropout: p = %g on src_tokens and prev_output_tokens (training "
                        "only), replacement <unk>, seed %d", self.word_dropout_p, self._wd_seed)

    def _generator(self, update_num: int) -> torch.Generator:
        if update_num != self._wd_update:
            self._wd_update, self._wd_micro = update_num, 0
        else:
            self._wd_micro += 1
        rank = torch.distributed.get_rank() if (torch.distributed.is_available()
                                                and torch.distributed.is_initialized()) else 0
        g = torch.Generator()
        g.manual_seed(_mask_seed(self._wd_seed, update_num, self._wd_micro, rank))
        return g

    def apply_word_dropout(self, sample, update_num: int):
        """A shallow copy of ``sample`` whose ``net_input.src_tokens`` and
        ``net_input.prev_output_tokens`` went through :func:`word_dropout`; ``sample`` itself
        and ``sample["target"]`` are not modified. Returns ``sample`` when P = 0 or the batch
        is empty (fairseq's dummy batches)."""
        p = self.word_dropout_p
        if p <= 0 or not sample or "net_input" not in sample:
            return sample
        g = self._generator(update_num)
        net_input = dict(sample["net_input"])
        net_input["src_tokens"] = word_dropout(net_input["src_tokens"], p, self.src_dict.unk(),
                                               self.src_dict.nspecial, g)
        if net_input.get("prev_output_tokens") is not None:
            net_input["prev_output_tokens"] = word_dropout(
                net_input["prev_output_tokens"], p, self.tgt_dict.unk(), self.tgt_dict.nspecial, g)
        out = dict(sample)
        out["net_input"] = net_input
        return out

    def train_step(self, sample, model, criterion, optimizer, update_num, ignore_grad=False):
        """fairseq's ``train_step`` on :meth:`apply_word_dropout` of the batch."""
        return super().train_step(self.apply_word_dropout(sample, update_num), model, criterion,
                                  optimizer, update_num, ignore_grad=ignore_grad)
