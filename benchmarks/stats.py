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
"""

from collections.abc import Sequence
from typing import Optional

import numpy as np

#: bootstrap resamples and seed (fixed: the same samples always give the same interval)
BOOTSTRAP_RESAMPLES = 10000
BOOTSTRAP_SEED = 0
#: two-sided confidence of the bootstrap interval
CONFIDENCE = 0.95

MET, MISSED, CANNOT_TELL = "met", "missed", "cannot tell"


def paired_ratios(reference: Sequence[float], candidate: Sequence[float]) -> np.ndarray:
    """Per-repetition ratios ``reference[i] / candidate[i]``.

    With times, ``paired_ratios(t_stock, t_qknorm)`` is the QKNorm model's speed relative
    to stock in each repetition (> 1: faster); with throughputs pass them the other way.

    Args:
        reference: positive, finite numbers, one per repetition.
        candidate: as ``reference`` and as long (the ``i``-th of each from the same
            interleaved repetition).

    Returns:
        float64 array of ``len(reference)`` ratios.

    Raises:
        ValueError: different lengths, no values, or a value that is not positive and finite.
    """
    ref = np.asarray(reference, dtype=np.float64)
    cand = np.asarray(candidate, dtype=np.float64)
    if ref.shape != cand.shape or ref.ndim != 1 or ref.size == 0:
        raise ValueError(
            f"paired ratios need two equally long, non-empty sequences; got "
            f"{ref.shape} and {cand.shape}"
        )
    if not (
        np.isfinite(ref).all() and np.isfinite(cand).all() and (ref > 0).all() and (cand > 0).all()
    ):
        raise ValueError("paired ratios need positive, finite values")
    return ref / cand


def bootstrap_median_interval(
    values: Sequence[float],
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, float]:
    """Percentile-bootstrap interval of the median (Efron & Tibshirani 1993, Ch. 13).

    ``resamples`` samples of ``len(values)`` values drawn with replacement (numpy
    ``default_rng(seed)``); the interval is the ``(1 - confidence) / 2`` and
    ``(1 + confidence) / 2`` quantiles of their medians (numpy's ``lower`` / ``higher``
    quantile methods, so the ends are sample values).

    Args:
        values: one value per repetition (at least one, finite).
        confidence: two-sided confidence in (0, 1).
        resamples: number of bootstrap samples (> 0).
        seed: seed of the resampling.

    Returns:
        ``{"low": ..., "high": ...}``.

    Raises:
        ValueError: no values, a non-finite value, or a bad ``confidence``/``resamples``.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0 or not np.isfinite(x).all():
        raise ValueError(
            f"bootstrap needs a non-empty 1-D sequence of finite values, got {values!r}"
        )
    if not 0.0 < confidence < 1.0 or resamples < 1:
        raise ValueError(
            f"confidence must be in (0, 1) and resamples > 0, got {confidence}, {resamples}"
        )
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    medians = np.median(x[idx], axis=1)
    alpha = (1.0 - confidence) / 2.0
    return {
        "low": float(np.quantile(medians, alpha, method="lower")),
        "high": float(np.quantile(medians, 1.0 - alpha, method="higher")),
    }


def ratio_summary(values: Sequence[float], **bootstrap_kwargs) -> dict:
    """Median, min, max, bootstrap interval of the median and the values themselves.

    Returns:
        ``{"median", "min", "max", "ci_low", "ci_high", "confidence", "n", "values"}``.
    """
    x = np.asarray(values, dtype=np.float64)
    ci = bootstrap_median_interval(x, **bootstrap_kwargs)
    return {
        "median": float(np.median(x)),
        "min": float(x.min()),
        "max": float(x.max()),
        "ci_low": ci["low"],
        "ci_high": ci["high"],
        "confidence": bootstrap_kwargs.get("confidence", CONFIDENCE),
        "n": int(x.size),
        "values": [round(float(v), 5) for v in x],
    }


def verdict(low: float, high: float, threshold: float) -> str:
    """``met`` if ``low >= threshold``, ``missed`` if ``high < threshold``, else ``cannot tell``.

    Raises:
        ValueError: ``low > high`` or a non-finite bound.
    """
    if not (np.isfinite(low) and np.isfinite(high)) or low > high:
        raise ValueError(f"an interval needs finite low <= high, got [{low}, {high}]")
    if low >= threshold:
        return MET
    if high < threshold:
        return MISSED
    return CANNOT_TELL


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


def sequential_verdict(
    next_ratio,
    threshold: float,
    min_n: int = MIN_REPETITIONS,
    max_n: int = 25,
    budget_s: Optional[float] = None,
    clock=None,
) -> dict:
    """Add paired repetitions until the verdict is decided, ``max_n`` or the time budget.

    ``next_ratio()`` runs one more interleaved repetition and returns its paired ratio. After
    ``min_n`` of them, and after each further one, the bootstrap interval of the median
    (:func:`ratio_summary`) is checked against ``threshold`` (:func:`verdict`); the loop stops
    at the first ``met``/``missed``, at ``max_n`` repetitions, or when ``clock()`` (default
    ``time.monotonic``) passes ``budget_s`` seconds from the start. Stopping at the first
    decisive look makes the interval's nominal 95% an upper bound on the confidence (repeated
    looks); the report states the number of repetitions and why it stopped.

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
        if len(values) < min_n:
            continue
        s = ratio_summary(values)
        s["verdict"] = verdict(s["ci_low"], s["ci_high"], threshold)
        if s["verdict"] != CANNOT_TELL:
            s["stopped"] = "decided"
            return s
        if len(values) >= max_n:
            s["stopped"] = "max repetitions"
            return s
        if budget_s is not None and clock() - start >= budget_s:
            s["stopped"] = "time budget"
            return s
