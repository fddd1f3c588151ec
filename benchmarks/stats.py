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
