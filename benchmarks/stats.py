"""Statistics of the benchmark harness.

Paired per-repetition ratios, their spread, a seeded percentile-bootstrap interval of their
median, and target verdicts.

Every section times its entries in interleaved order, so repetition ``i`` of entry A and
repetition ``i`` of entry B ran next to each other; ``paired_ratios`` turns them into one
ratio per repetition, and ``ratio_summary`` reports the median of those ratios with its
min-max and the bootstrap interval. A target is ``met`` only when the interval's lower
end reaches the threshold, ``missed`` only when its upper end stays below it, and
``cannot tell`` otherwise.

With ``n`` repetitions the percentile bootstrap of the median can only return sample
values; for ``n <= 5`` its 95% interval is exactly ``[min, max]`` (the chance that a
resample's median is the smallest value is 5.8% for ``n = 5``, above the 2.5% tail), from
``n = 7`` on it drops the extremes.

The ratios, the interval, the summary and the verdict are the model tools'
(:mod:`qknorm_model_tools.bf16_timing`: the CPU profiles' bf16 decision uses them), imported here.
"""

from collections.abc import Sequence
from typing import Optional

import numpy as np

from qknorm_model_tools.bf16_timing import (  # noqa: F401  (the harness's names for them)
    BOOTSTRAP_RESAMPLES,
    BOOTSTRAP_SEED,
    CANNOT_TELL,
    CONFIDENCE,
    MET,
    MISSED,
    bootstrap_median_interval,
    paired_ratios,
    ratio_summary,
    verdict,
)

#: fewest repetitions a verdict is given for (the issue: ratios from >= 5 repetitions)
MIN_REPETITIONS = 5


def target_entry(
    name: str, summary: Optional[dict], threshold: float, min_n: int = MIN_REPETITIONS
) -> dict:
    """One target of the report.

    ``summary`` (from :func:`ratio_summary`, per-repetition figures), the threshold, the verdict
    from the bootstrap interval and the gap of the median to the threshold (``median - threshold``).
    Without a summary the verdict is ``not measured``; with fewer than ``min_n`` repetitions it is
    ``too few repetitions`` (the figures are still reported).
    """
    entry = {"target": name, "threshold": threshold}
    if not summary:
        entry["verdict"] = "not measured"
        return entry
    entry.update(summary)
    entry["gap"] = summary["median"] - threshold
    if summary["n"] < min_n:
        entry["verdict"] = f"too few repetitions (n = {summary['n']} < {min_n})"
    else:
        entry["verdict"] = verdict(summary["ci_low"], summary["ci_high"], threshold)
    return entry


def block_minima(
    reference: Sequence[float], candidate: Sequence[float], block: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per-block minima of two paired series of times: ``block`` repetitions -> one value each.

    Repetitions ``[k*block, (k+1)*block)`` of each series give their minimum (a last,
    incomplete block is dropped). On a shared machine interference only ever *adds* time, so
    the minimum of a few adjacent repetitions is the least disturbed estimate of each entry
    (the rule of Python's ``timeit``: "the min() of the result vector ... gives a lower bound
    for how fast your machine can run the given code snippet"), and pairing the blocks keeps
    the interleaving's protection against drift. Pass times, not throughputs.

    Returns:
        ``(ref_minima, cand_minima)``, float64 arrays of ``len(reference) // block`` values.

    Raises:
        ValueError: different lengths, ``block < 1`` or fewer than ``block`` repetitions.
    """
    ref = np.asarray(reference, dtype=np.float64)
    cand = np.asarray(candidate, dtype=np.float64)
    if ref.shape != cand.shape or ref.ndim != 1:
        raise ValueError(
            f"block minima need two equally long series, got {ref.shape}, {cand.shape}"
        )
    if block < 1 or ref.size < block:
        raise ValueError(
            f"block minima need block >= 1 and >= block values, got {block}, {ref.size}"
        )
    n = (ref.size // block) * block
    return ref[:n].reshape(-1, block).min(axis=1), cand[:n].reshape(-1, block).min(axis=1)


#: Pocock's nominal two-sided level per look for an overall level of 0.05 with K equally
#: spaced looks at the data (Pocock 1977, Biometrika 64(2), Table 1; Jennison & Turnbull 2000,
#: Table 2.1): K -> the alpha of each look's interval
POCOCK_ALPHA = {1: 0.05, 2: 0.0294, 3: 0.0221, 4: 0.0182, 5: 0.0158}


def pocock_looks(first: int, last: int, k: int = 4) -> tuple[list[int], float]:
    """Group-sequential looks for :func:`sequential_verdict` and each look's confidence.

    ``k`` equally spaced looks at ``last * j / k`` repetitions (``j = 1..k``), none before
    ``first`` (earlier ones move to ``first``; duplicates merge, so fewer looks may remain),
    and the confidence ``1 - POCOCK_ALPHA[K]`` of the interval at each of the ``K`` looks, so
    that stopping at the first decisive look keeps the overall error near 5% (Pocock 1977).
    Looking after every repetition with 95% intervals would not: with many looks a difference
    of zero is declared far more often than 5% of the time.

    Returns:
        ``(looks, confidence)``, looks increasing and ending at ``last``.

    Raises:
        ValueError: ``first < 1``, ``last < first`` or ``k`` not in ``POCOCK_ALPHA``.
    """
    if first < 1 or last < first or k not in POCOCK_ALPHA:
        raise ValueError(f"need 1 <= first <= last and k in 1..5, got {first}, {last}, {k}")
    looks = sorted({max(first, round(last * j / k)) for j in range(1, k + 1)})
    return looks, 1.0 - POCOCK_ALPHA[len(looks)]


def sequential_verdict(
    next_ratio,
    threshold: float,
    min_n: int = MIN_REPETITIONS,
    max_n: int = 25,
    budget_s: Optional[float] = None,
    clock=None,
    looks: Optional[Sequence[int]] = None,
    confidence: Optional[float] = None,
) -> dict:
    """Add paired repetitions until the verdict is decided, ``max_n`` or the time budget.

    ``next_ratio()`` runs one more interleaved repetition and returns its paired ratio. After
    ``min_n`` of them, and after each further one, the bootstrap interval of the median
    (:func:`ratio_summary`) is checked against ``threshold`` (:func:`verdict`); the loop stops
    at the first ``met``/``missed``, at ``max_n`` repetitions, or when ``clock()`` (default
    ``time.monotonic``) passes ``budget_s`` seconds from the start. Stopping at the first
    decisive look makes the interval's nominal 95% an upper bound on the confidence (repeated
    looks); the report states the number of repetitions and why it stopped. With ``looks``
    (e.g. from :func:`pocock_looks`) the interval is checked only at those numbers of
    repetitions (and at ``max_n`` or when the budget ends), at ``confidence`` (default 95%).

    Returns:
        :func:`ratio_summary`'s dict plus ``verdict`` and ``stopped`` (``decided``,
        ``max repetitions`` or ``time budget``).

    Raises:
        ValueError: ``min_n < 1`` or ``max_n < min_n``.
    """
    import time

    if min_n < 1 or max_n < min_n:
        raise ValueError(f"need 1 <= min_n <= max_n, got {min_n}, {max_n}")
    clock = clock or time.monotonic
    start = clock()
    values: list[float] = []
    while True:
        values.append(float(next_ratio()))
        n = len(values)
        if n < min_n:
            continue
        over = budget_s is not None and clock() - start >= budget_s
        if looks is not None and n not in looks and n < max_n and not over:
            continue
        s = ratio_summary(values, **({} if confidence is None else {"confidence": confidence}))
        s["verdict"] = verdict(s["ci_low"], s["ci_high"], threshold)
        if s["verdict"] != CANNOT_TELL:
            s["stopped"] = "decided"
            return s
        if len(values) >= max_n:
            s["stopped"] = "max repetitions"
            return s
        if over:
            s["stopped"] = "time budget"
            return s
