"""BLEU bar charts with 95% bootstrap CIs.

From ``evaluate compare`` / ``evaluate aggregate`` JSON.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from pathlib import Path

from .plots_common import PlotInputError, _pyplot, _save

__all__ = ["bleu_bars_figure", "plot_bleu_bars"]


def _bars_from_json(d: Mapping[str, object], value: str = "auto"):
    """-> (groups, systems, heights[g][s], err_lo, err_hi, ylabel, pvals, notes)."""
    nan = float("nan")
    baseline = d.get("baseline")
    if "systems" in d and isinstance(d["systems"], list):  # evaluate compare
        systems = [s["name"] for s in d["systems"]]
        h = [[s["score"] for s in d["systems"]]]
        lo = [
            [
                (s["score"] - s["ci_low"]) if s.get("ci_low") is not None else 0.0
                for s in d["systems"]
            ]
        ]
        hi = [
            [
                (s["ci_high"] - s["score"]) if s.get("ci_high") is not None else 0.0
                for s in d["systems"]
            ]
        ]
        pv = [[s.get("p_ar") for s in d["systems"]]]
        ylabel = f"{d.get('metric', 'BLEU')} (BLEU points)"
        notes = _bar_notes(
            "95% bootstrap CI", d.get("n_bootstrap"), d.get("n_ar"), baseline, "", pv
        )
        return [""], systems, h, lo, hi, ylabel, pv, notes
    if "pairs" in d:  # evaluate aggregate
        metric = d.get("metric", "bleu_tok")
        groups = list(d["pairs"])
        systems = list(d.get("avg_delta") or [])
        for p in d["pairs"].values():
            for s in p["systems"]:
                if s not in systems:
                    systems.append(s)
        has_concat = all(
            e.get("concat") for p in d["pairs"].values() for e in p["systems"].values()
        )
        use_concat = value == "concat" or (value == "auto" and has_concat)
        if use_concat and not has_concat:
            raise PlotInputError(
                "aggregate JSON has no concatenated-output scores (run without --no-significance)"
            )
        H, LO, HI, PV = [], [], [], []
        for p in d["pairs"].values():
            h, lo, hi, pv = [], [], [], []
            for s in systems:
                e = p["systems"].get(s)
                if e is None:
                    h.append(nan), lo.append(0.0), hi.append(0.0), pv.append(None)
                    continue
                if use_concat:
                    c = e["concat"]
                    h.append(c["score"])
                    lo.append(c["score"] - c["ci_low"] if c.get("ci_low") is not None else 0.0)
                    hi.append(c["ci_high"] - c["score"] if c.get("ci_high") is not None else 0.0)
                    pv.append(c.get("p_ar"))
                else:
                    m = e[metric]
                    sd = m.get("sd") or 0.0
                    h.append(m["mean"]), lo.append(sd), hi.append(sd)
                    pv.append((e.get("concat") or {}).get("p_ar"))
            H.append(h), LO.append(lo), HI.append(hi), PV.append(pv)
        sig = d.get("significance") or {}
        ylabel = (
            f"{metric}, seeds concatenated (BLEU points)"
            if use_concat
            else f"{metric}, mean over seeds (BLEU points)"
        )
        notes = _bar_notes(
            "95% bootstrap CI" if use_concat else "± sd over seeds",
            sig.get("n_bootstrap") if use_concat else None,
            sig.get("n_ar"),
            baseline,
            " on the seed-concatenated outputs",
            PV,
        )
        return groups, systems, H, LO, HI, ylabel, PV, notes
    raise PlotInputError(
        "JSON is neither 'evaluate compare' (systems) nor 'evaluate aggregate' (pairs) output"
    )


def _seed_scores(d: Mapping[str, object], groups: Sequence[str], systems: Sequence[str]):
    """Per-seed scores of an aggregate JSON, ``[group][system] -> list``.

    Empty where the JSON has none (a compare JSON, a single seed).
    """
    metric = d.get("metric", "bleu_tok")
    pairs = d.get("pairs") or {}
    out = []
    for g in groups:
        row = []
        for s in systems:
            e = (pairs.get(g) or {}).get("systems", {}).get(s) or {}
            vals = (e.get(metric) or {}).get("values") or []
            row.append([float(v) for v in vals] if len(vals) > 1 else [])
        out.append(row)
    return out


def _bar_notes(errors: str, n_bootstrap, n_ar, baseline, on: str, pvals) -> list[str]:
    """The caption lines of a BLEU bar chart: what the error bars and the p-values are."""
    boot = f" ({n_bootstrap:,} resamples)" if n_bootstrap else ""
    notes = [f"error bars: {errors}{boot}"]
    if any(p is not None for row in pvals for p in row):
        trials = f", {n_ar:,} trials" if n_ar else ""
        notes.append(
            f"p: paired approximate randomization test (sacreBLEU{trials}) of each system "
            f"against the baseline {baseline}{on}"
        )
    return notes


def bleu_bars_figure(results_json, value: str = "auto", title: str = ""):
    """The figure of :func:`plot_bleu_bars` (the caller saves and closes it).

    Bars start at 0 (BLEU points). One language pair: one bar per system, system names on the
    x axis; several pairs: groups of bars per pair (x labels), systems in the legend. Above
    each bar its ``p=`` (paired approximate randomization against the baseline, whose bar
    says ``baseline``); the caption under the axes names the test, the baseline and the error
    bars.

    Raises:
        PlotInputError: unknown JSON layout or unreadable file.
    """
    import numpy as np

    plt = _pyplot()
    try:
        d = json.loads(Path(results_json).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PlotInputError(f"cannot read results JSON {str(results_json)!r}: {exc}") from None
    groups, systems, H, LO, HI, ylabel, PV, notes = _bars_from_json(d, value)
    seeds = _seed_scores(d, groups, systems)
    if any(v for row in seeds for v in row):
        notes = notes + ["dots: each seed's own score (the spread of training runs)"]
    baseline = d.get("baseline")
    n_s, n_g = len(systems), len(groups)
    one_group = n_g == 1
    width = 0.8 if one_group else 0.8 / max(n_s, 1)
    fig, ax = plt.subplots(figsize=(max(5.0, 1.2 * n_s * n_g + 2), 4.6))
    x = np.arange(n_s if one_group else n_g, dtype=float)
    for j, s in enumerate(systems):
        hs = np.array([H[g][j] for g in range(n_g)], dtype=float)
        err = np.array([[LO[g][j] for g in range(n_g)], [HI[g][j] for g in range(n_g)]])
        pos = np.array([x[j]]) if one_group else x + (j - (n_s - 1) / 2) * width
        ax.bar(pos, hs, width * 0.92, yerr=err, capsize=3, color=f"C{j % 10}", label=s, alpha=0.85)
        for g in range(n_g):
            if math.isnan(hs[g]):
                continue
            vals = seeds[g][j]
            if vals:  # spread across the bar's width so that equal scores stay visible
                xs = pos[g] + np.linspace(-0.25, 0.25, len(vals)) * width
                ax.plot(xs, vals, "o", color="black", markersize=3.5, zorder=3)
            p = PV[g][j]
            text = "baseline" if s == baseline else (f"p={p:.3g}" if p is not None else "")
            if text:
                ax.text(pos[g], hs[g] + err[1][g], text, ha="center", va="bottom", fontsize=7)
    ax.set_xticks(x)
    if one_group:
        ax.set_xticklabels(
            systems, rotation=15 if n_s > 3 else 0, ha="right" if n_s > 3 else "center"
        )
        ax.set_xlabel(f"system{f' ({groups[0]})' if groups[0] else ''}")
    else:
        ax.set_xticklabels(groups)
        ax.set_xlabel("language pair")
        ax.legend(fontsize=8)
    ax.set_ylabel(ylabel, fontsize=9)
    finite = [h + hi for row, his in zip(H, HI) for h, hi in zip(row, his) if not math.isnan(h)]
    finite += [v for row in seeds for vals in row for v in vals]
    ax.set_ylim(0.0, (max(finite) if finite else 1.0) * 1.15 + 0.5)
    ax.grid(axis="y", alpha=0.3)
    if title:
        ax.set_title(title, fontsize=10)
    fig.tight_layout()
    fig.subplots_adjust(bottom=fig.subplotpars.bottom + 0.05 * len(notes))
    for k, note in enumerate(notes):
        fig.text(0.01, 0.01 + 0.045 * (len(notes) - 1 - k), note, fontsize=7, ha="left")
    return fig


def plot_bleu_bars(results_json, out, value: str = "auto", title: str = "") -> str:
    """Bar chart of BLEU with error bars from ``evaluate compare`` / ``aggregate`` JSON.

    * compare JSON: one bar per system, height = corpus score, error bar = sacreBLEU bootstrap
      95% CI (``ci_low``..``ci_high``), AR p-value vs the baseline written above each bar.
    * aggregate JSON: bars per language pair; with ``value='concat'`` (default when
      available) the score on seed-concatenated outputs with its bootstrap 95% CI, with
      ``value='mean'`` the mean ± sd over seeds.

    The layout is :func:`bleu_bars_figure`'s.

    Args:
        results_json: the compare or aggregate JSON.
        out: PNG to write.
        value: ``auto``, ``concat`` or ``mean`` (aggregate JSON only).
        title: figure title.

    Returns:
        The path of the PNG written.

    Raises:
        PlotInputError: unknown JSON layout or unreadable file.
    """
    return _save(bleu_bars_figure(results_json, value, title), out)
