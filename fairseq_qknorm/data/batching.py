r"""Padding-aware batching for translation: similar source *and* target lengths in a batch.

fairseq's ``--max-tokens`` batching (``LanguagePairDataset.ordered_indices`` + ``data_utils.
batch_by_size``) sorts a random permutation of the training pairs by target length, then
(stable) by source length, and cuts that order into consecutive batches whose *padded* size
``n * max(max(src), max(tgt))`` fits the budget. Within a batch the source lengths are close,
but the target lengths are whatever the pairs of those few source lengths have: on gl-en about
a quarter of the computed positions are padding (``benchmarks/README.md``).

:func:`bucketed_batches` orders the same pairs by (source-length bucket of width ``w``, target
length), the target order alternating direction from one bucket to the next (a "serpentine":
a batch that straddles two buckets joins their long-target or their short-target ends), with
ties broken by a seeded random permutation, then cuts that order with fairseq's own
``batch_by_size_vec`` (the Cython batcher of ``--max-tokens``: same budget on the padded size,
same ``--max-sentences`` and ``--required-batch-size-multiple``). The bucket width is chosen
per call as the one of :data:`BUCKET_WIDTHS` with the least padded positions (``w = 1``:
exact source-length groups; larger ``w`` lets the target lengths group better).

Used by the task option ``--batching bucketed``
(:class:`fairseq_qknorm.tasks.translation_word_dropout.TranslationWordDropoutTask`).

There is no published source for this exact rule; length-bucketed batching with a token
budget on the padded size is what tensor2tensor's ``bucket_by_sequence_length`` and
Marian's ``--maxi-batch`` sorting do (Vaswani et al. 2017, Sec. 5.1: "Sentence pairs were
batched together by approximate sequence length").
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

import numpy as np

#: candidate source-bucket widths (in tokens) tried by :func:`bucketed_batches`
BUCKET_WIDTHS = (1, 2, 3, 4, 6, 8, 12, 16)


@dataclass(frozen=True)
class PaddingStats:
    """Real and computed (padded) positions of a set of batches.

    ``src_*`` count source positions (``n * max(src)`` computed per batch), ``tgt_*`` target
    positions (``n * max(tgt)``); lengths in tokens as fairseq stores them (EOS included).
    """

    batches: int
    sentences: int
    src_real: int
    src_padded: int
    tgt_real: int
    tgt_padded: int

    @property
    def src_fraction(self) -> float:
        """Fraction of computed source positions that are padding, in [0, 1)."""
        return 1.0 - self.src_real / self.src_padded if self.src_padded else 0.0

    @property
    def tgt_fraction(self) -> float:
        """Fraction of computed target positions that are padding, in [0, 1)."""
        return 1.0 - self.tgt_real / self.tgt_padded if self.tgt_padded else 0.0

    @property
    def fraction(self) -> float:
        """Fraction of all computed (source + target) positions that are padding."""
        padded = self.src_padded + self.tgt_padded
        return 1.0 - (self.src_real + self.tgt_real) / padded if padded else 0.0

    def describe(self) -> str:
        """One line: total, source and target padding in percent."""
        return (
            f"padding {100 * self.fraction:.1f}% of computed positions (source "
            f"{100 * self.src_fraction:.1f}%, target {100 * self.tgt_fraction:.1f}%; "
            f"{self.batches} batches, {self.sentences} sentences)"
        )


def padding_stats(
    batches: Sequence[Sequence[int]], src_sizes: np.ndarray, tgt_sizes: np.ndarray
) -> PaddingStats:
    """Count real and padded positions of ``batches`` (lists of dataset indices).

    :param batches: batches of indices into ``src_sizes`` / ``tgt_sizes``.
    :param src_sizes: (N,) source lengths in tokens; ``tgt_sizes`` likewise for targets.
    """
    src_real = src_padded = tgt_real = tgt_padded = sentences = 0
    for b in batches:
        idx = np.asarray(b, dtype=np.int64)
        if idx.size == 0:
            continue
        s, t = src_sizes[idx], tgt_sizes[idx]
        n = idx.size
        sentences += n
        src_real += int(s.sum())
        tgt_real += int(t.sum())
        src_padded += n * int(s.max())
        tgt_padded += n * int(t.max())
    return PaddingStats(len(batches), sentences, src_real, src_padded, tgt_real, tgt_padded)


def serpentine_order(
    indices: np.ndarray,
    src_sizes: np.ndarray,
    tgt_sizes: np.ndarray,
    width: int,
    rng: np.random.Generator,
) -> np.ndarray:
    """``indices`` sorted by (source bucket, target length up/down alternately, random tie).

    :param indices: (M,) int64 dataset indices.
    :param width: source-bucket width in tokens (>= 1): bucket = ``src_len // width``.
    :param rng: draws the tie-breaking permutation.
    :returns: (M,) the same indices, reordered.
    :raises ValueError: ``width < 1``.
    """
    if width < 1:
        raise ValueError(f"bucket width must be >= 1, got {width}")
    idx = np.asarray(indices, dtype=np.int64)[rng.permutation(len(indices))]
    bucket = src_sizes[idx].astype(np.int64) // width
    tgt = tgt_sizes[idx].astype(np.int64)
    # odd buckets: target length descending (serpentine)
    tgt_key = np.where(bucket % 2 == 1, -tgt, tgt)
    # np.lexsort: last key primary; stable, so the random permutation breaks ties
    return idx[np.lexsort((tgt_key, bucket))]


def _batch_by_size(
    order: np.ndarray,
    num_tokens: np.ndarray,
    max_tokens: Optional[int],
    max_sentences: Optional[int],
    bsz_mult: int,
) -> list[np.ndarray]:
    # fairseq's Cython batcher of --max-tokens, without data_utils.batch_by_size's dropping of
    # a last batch that is not a multiple of bsz_mult (the sentences must stay those of fairseq)
    from fairseq.data.data_utils_fast import batch_by_size_vec

    return batch_by_size_vec(
        order,
        num_tokens[order].astype(np.int64),
        int(max_tokens) if max_tokens is not None else -1,
        int(max_sentences) if max_sentences is not None else -1,
        int(bsz_mult),
    )


def bucketed_batches(
    indices: np.ndarray,
    src_sizes: np.ndarray,
    tgt_sizes: np.ndarray,
    max_tokens: Optional[int],
    max_sentences: Optional[int] = None,
    required_batch_size_multiple: int = 1,
    seed: int = 1,
    widths: Sequence[int] = BUCKET_WIDTHS,
) -> tuple[list[np.ndarray], int]:
    """Batches of exactly ``indices`` with similar source and target lengths.

    Each candidate width of ``widths`` orders ``indices`` by :func:`serpentine_order` and cuts
    the order with fairseq's ``batch_by_size_vec`` (budget: ``n * max(max(src), max(tgt)) <=
    max_tokens``, at most ``max_sentences`` sentences, sizes a multiple of
    ``required_batch_size_multiple`` where the budget allows); the width with the fewest padded
    positions wins (ties: the smaller width).

    :param indices: (M,) dataset indices to batch (already filtered by size).
    :param src_sizes: (N,) source lengths in tokens; ``tgt_sizes`` likewise.
    :param seed: seeds the tie-breaking permutation (the same for every width).
    :returns: (batches, width): every index of ``indices`` exactly once, and the chosen width.
    :raises ValueError: ``max_tokens`` and ``max_sentences`` both None, or a sentence longer
        than ``max_tokens`` (from fairseq's batcher).
    """
    if max_tokens is None and max_sentences is None:
        raise ValueError("bucketed batching needs --max-tokens or --batch-size")
    indices = np.asarray(indices, dtype=np.int64)
    num_tokens = np.maximum(src_sizes, tgt_sizes).astype(np.int64)
    best = None
    for w in widths:
        order = serpentine_order(indices, src_sizes, tgt_sizes, w, np.random.default_rng(seed))
        batches = _batch_by_size(
            order, num_tokens, max_tokens, max_sentences, required_batch_size_multiple
        )
        st = padding_stats(batches, src_sizes, tgt_sizes)
        padded = st.src_padded + st.tgt_padded
        if best is None or padded < best[0]:
            best = (padded, batches, w)
    return best[1], best[2]
