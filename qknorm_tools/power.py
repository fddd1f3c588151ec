"""Seed-level inference for a contrast of cell means: CI, power, MDE, seeds needed, TOST.

Every effect of the 2x2 ablation (:mod:`.ablation`) is a contrast ``L = sum_i w_i mu_i`` of
cell means, each cell one system trained with several seeds. Two designs, declared in the
profile before the runs (``[design] test``, docs/decisive-2x2.md):

* ``welch``: the seeds of different cells are independent draws. ``L`` is estimated by the
  contrast of the cell means; its standard error and degrees of freedom are Welch's
  (Satterthwaite 1946). Power and the MDE are those of the factorial design's t-test with the
  sd ``s`` pooled over all ``k`` cells of the grid (the 2x2's error term) and ``n`` seeds per
  cell: noncentral t with noncentrality ``(delta / s) * sqrt(n / sum_i w_i^2)`` and
  ``k (n - 1)`` degrees of freedom (for a two-cell grid exactly
  :class:`statsmodels.stats.power.TTestIndPower`).
* ``paired``: seed ``s`` is shared by every system (the same batch order), so the effect is
  estimated per seed, ``c_s = sum_i w_i y_is``, over the seeds every used cell has, and
  tested with a one-sample t over the ``c_s`` (:class:`statsmodels.stats.power.TTestPower`,
  ``n - 1`` degrees of freedom).

Power is always that of the two-sided test at ``alpha`` (0.05) computed by statsmodels'
noncentral-t power functions; the minimum detectable effect (MDE) is the difference that test
detects with probability ``power`` (0.8) with the seeds at hand, and "seeds needed" the
smallest number of seeds per cell with which it detects a target difference. Equivalence is
the two one-sided tests (TOST, Schuirmann 1987) against +-margin: statsmodels'
``DescrStatsW.ttost_mean`` (paired) and ``ttost_ind`` (Welch, two cells); for a Welch contrast
of four cells the two one-sided t-tests with Welch's se and df.

No torch, no fairseq. References: Cohen (1988), *Statistical Power Analysis for the Behavioral
Sciences*, Table 2.4.1 (n = 64 per group for d = 0.5; 26 for d = 0.8); statsmodels.stats.power.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

__all__ = ["DESIGNS", "contrast_inference", "seeds_needed", "mde"]

DESIGNS = ("welch", "paired")
ALPHA = 0.05
POWER = 0.8
MAX_SEEDS = 1000


def _power(effect_size: float, nobs: float, df: float, alpha: float) -> float:
    """Power of the two-sided t-test with noncentrality ``effect_size * sqrt(nobs)``, ``df``."""
    from statsmodels.stats.power import TTestPower

    value = float(TTestPower().power(effect_size, nobs, alpha, df=df, alternative="two-sided"))
    if math.isnan(value):
        # scipy's noncentral t cdf gives nan now and then far in its lower tail, whose term in
        # the two-sided power is then negligible (< 1e-8 where seen): the upper tail alone,
        # statsmodels' one-sided power at alpha / 2
        value = float(TTestPower().power(effect_size, nobs, alpha / 2, df=df, alternative="larger"))
    return value


def _scale(design: str, weights: Sequence[float], n: int) -> tuple[float, float]:
    """(nobs, df) of :func:`_power` for ``n`` seeds per cell: see the module docstring.

    ``weights`` holds one weight per cell of the grid (zeros included: welch's error term has
    ``len(weights) * (n - 1)`` degrees of freedom).
    """
    if design == "paired":
        return float(n), float(n - 1)
    return n / sum(w * w for w in weights), float(len(weights) * (n - 1))


def mde(sd: float, n: int, weights: Sequence[float], design: str = "welch",
        alpha: float = ALPHA, power: float = POWER) -> float:  # fmt: skip
    """The minimum detectable effect of a contrast, in the units of ``sd`` (BLEU points).

    Args:
        sd: welch: the pooled per-cell sd over seeds; paired: the sd of the per-seed contrast.
        n: seeds per cell (paired: complete seeds), >= 2.
        weights: the contrast's weights, one per cell of the grid (zeros for cells it does not
            use: welch pools the sd of every cell).
        design: ``welch`` or ``paired``.
        alpha: the two-sided test's level.
        power: the probability of detecting the MDE.

    Returns:
        The smallest ``delta > 0`` whose two-sided test has power ``power`` (``nan`` for a
        non-finite sd, 0 for sd 0).

    Raises:
        ValueError: ``n < 2`` or an unknown design.
    """
    from scipy.optimize import brentq

    _check(design, n)
    if not math.isfinite(sd):
        return math.nan
    if sd == 0.0:
        return 0.0
    nobs, df = _scale(design, weights, n)

    def short(x: float) -> float:  # power grows with the effect: < 0 below the MDE
        return _power(x, nobs, df, alpha) - power

    # the smallest doubling of 1 sd above the MDE brackets it: far above it scipy's noncentral
    # t gives nan in both tails (an effect of 19.7 sd with 7 seeds per cell of the 2x2, where
    # brentq probed a bracket up to 100 sd)
    hi = 1.0
    while short(hi) < 0 and hi < 100.0:
        hi *= 2.0
    d = brentq(short, 1e-6, hi, xtol=1e-12)
    return float(d * sd)


def seeds_needed(sd: float, target: float, weights: Sequence[float], design: str = "welch",
                 alpha: float = ALPHA, power: float = POWER) -> int | None:  # fmt: skip
    """The fewest seeds per cell whose test detects ``target`` with probability ``power``.

    Same model as :func:`mde`. Returns None when ``sd`` is not finite or more than
    :data:`MAX_SEEDS` would be needed; 2 when ``sd`` is 0.
    """
    _check(design, 2)
    if not math.isfinite(sd) or target <= 0:
        return None
    if sd == 0.0:
        return 2
    for n in range(2, MAX_SEEDS + 1):
        nobs, df = _scale(design, weights, n)
        if _power(target / sd, nobs, df, alpha) >= power:
            return n
    return None


def _check(design: str, n: int) -> None:
    if design not in DESIGNS:
        raise ValueError(f"unknown design '{design}' (one of {', '.join(DESIGNS)})")
    if n < 2:
        raise ValueError(f"power needs at least 2 seeds per cell, got {n}")


def contrast_inference(
    values: Mapping[str, Mapping[int, float]],
    weights: Mapping[str, float],
    design: str = "welch",
    targets: Sequence[float] = (0.5, 0.93),
    tost_margin: float | None = None,
    alpha: float = ALPHA,
    power: float = POWER,
) -> dict | None:
    """Estimate, 95% CI, p, MDE, seeds needed and TOST of one contrast, from seed-level scores.

    Args:
        values: cell -> {seed: score} (BLEU points).
        weights: cell -> weight of the contrast (cells with weight 0 may be absent).
        design: ``welch`` (independent seeds) or ``paired`` (seeds shared by the cells: only
            seeds every used cell has count).
        targets: differences (BLEU) for which the seeds needed per cell are computed.
        tost_margin: equivalence margin m (BLEU): TOST of ``|L| < m``; None: no TOST.
        alpha: the tests' level (the CI is ``1 - alpha``; TOST at ``alpha`` per side).
        power: as :func:`mde`.

    Returns:
        ``{"test", "estimate", "se", "df", "t", "p", "ci95", "n", "sd", "mde", "n_needed",
        "tost"}`` (``n``: seeds per cell used, the smallest cell's for welch; ``sd``: the
        per-cell sd pooled over every cell of ``values`` for welch, the per-seed contrast's sd
        for paired; ``n_needed``:
        ``{str(target): seeds or None}``; ``tost``: ``{"margin", "p", "equivalent"}`` or None);
        None when a used cell has fewer than 2 seeds (paired: fewer than 2 complete seeds) or
        the spread is zero.

    Raises:
        ValueError: an unknown design.
    """
    import numpy as np
    from scipy import stats

    _check(design, 2)
    used = {c: w for c, w in weights.items() if w != 0.0}
    if any(c not in values for c in used):
        return None
    w_list = [weights.get(c, 0.0) for c in values]
    if design == "paired":
        seeds = sorted(set.intersection(*(set(values[c]) for c in used)))
        if len(seeds) < 2:
            return None
        per_seed = np.array([sum(w * values[c][s] for c, w in used.items()) for s in seeds])
        sd = float(np.std(per_seed, ddof=1))
        if sd == 0.0:
            return None
        res = stats.ttest_1samp(per_seed, 0.0)
        ci = res.confidence_interval(1 - alpha)
        n, df = len(seeds), float(len(seeds) - 1)
        est, se = float(per_seed.mean()), sd / math.sqrt(len(seeds))
        tost = None
        if tost_margin is not None:
            from statsmodels.stats.weightstats import DescrStatsW

            p_tost = float(DescrStatsW(per_seed).ttost_mean(-tost_margin, tost_margin)[0])
            tost = {"margin": tost_margin, "p": p_tost, "equivalent": p_tost < alpha}
        t_stat, p = float(res.statistic), float(res.pvalue)
        ci95 = [float(ci.low), float(ci.high)]
    else:
        cells = {c: np.array(list(values[c].values()), dtype=float) for c in used}
        if any(len(v) < 2 for v in cells.values()):
            return None
        terms = {c: used[c] ** 2 * v.var(ddof=1) / len(v) for c, v in cells.items()}
        var = sum(terms.values())
        if var <= 0.0:
            return None
        est = float(sum(used[c] * v.mean() for c, v in cells.items()))
        se = math.sqrt(var)
        df = var * var / sum(t * t / (len(cells[c]) - 1) for c, t in terms.items())
        t_stat = est / se
        p = float(2.0 * stats.t.sf(abs(t_stat), df))
        half = float(stats.t.ppf(1 - alpha / 2, df)) * se
        ci95 = [est - half, est + half]
        # the error term of the design: the sd pooled over every cell of the grid with >= 2
        # seeds (each cell's variance weighted by its degrees of freedom); n: the fewest seeds
        grid = [np.array(list(v.values()), dtype=float) for v in values.values()]
        grid = [v for v in grid if len(v) >= 2]
        n = min(len(v) for v in grid)
        sd = math.sqrt(
            sum((len(v) - 1) * v.var(ddof=1) for v in grid) / sum(len(v) - 1 for v in grid)
        )
        tost = None
        if tost_margin is not None:
            if len(used) == 2:
                from statsmodels.stats.weightstats import ttost_ind

                (hi_cell, lo_cell) = sorted(used, key=lambda c: -used[c])
                p_tost = float(
                    ttost_ind(
                        cells[hi_cell], cells[lo_cell], -tost_margin, tost_margin, usevar="unequal"
                    )[0]  # fmt: skip
                )
            else:  # two one-sided Welch t-tests of the contrast
                p_tost = float(max(stats.t.sf((est + tost_margin) / se, df),
                                   stats.t.cdf((est - tost_margin) / se, df)))  # fmt: skip
            tost = {"margin": tost_margin, "p": p_tost, "equivalent": p_tost < alpha}
    return {
        "test": "paired t over shared seeds" if design == "paired" else "Welch t over seeds",
        "estimate": est,
        "se": se,
        "df": df,
        "t": t_stat,
        "p": p,
        "ci95": ci95,
        "n": n,
        "sd": sd,
        "mde": mde(sd, n, w_list, design, alpha, power),
        "n_needed": {
            _target_key(t): seeds_needed(sd, t, w_list, design, alpha, power) for t in targets
        },
        "tost": tost,
    }


def _target_key(target: float) -> str:
    """A target difference as a JSON key: 0.5 -> "0.5", 1.0 -> "1"."""
    return f"{target:g}"
