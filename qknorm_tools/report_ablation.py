"""The report's figures of ``ablation.json``: the 2x2 cells and their effects.

The cells {LayerNorm, ScaleNorm} x {dot product, QKNorm} (:mod:`qknorm_tools.ablation`) and
their effects as a forest plot: each estimate with its 95% CI over seeds
(:func:`seed_interval`), the minimum detectable effect where the file has it, and two p-values
named by what they test (seeds; approximate randomization over sentences).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence

from .report_sources import _finite
from .report_style import REFERENCE_COLOR, _color, _fig, _fmt, _padded_range, _slug

__all__ = ["CELLS", "seed_interval", "seed_tests"]

#: the 2x2 cells in the ablation's order: a=(LN,dot), b=(LN,QK), c=(SN,dot), d=(SN,QK)
CELLS = ("layernorm_dot", "layernorm_qknorm", "scalenorm_dot", "scalenorm_qknorm")


def seed_tests(ablation: Mapping) -> tuple[dict, str]:
    """The seed-level tests of an ``ablation.json`` and where they come from.

    ``seed_tests`` of the file when it has them; else (a file written before they existed)
    :func:`qknorm_tools.ablation.ablation_seed_tests` of the cells' per-seed values.

    Returns:
        ``({effect: test or None}, source)``: ``source`` names the file's key or says the page
        computed them; ``({}, "")`` when neither is possible.
    """
    tests = ablation.get("seed_tests")
    if isinstance(tests, Mapping) and tests:
        return dict(tests), "seed_tests of ablation.json"
    cells = ablation.get("cells") or {}
    values = {c: (cells.get(c) or {}).get("values") or [] for c in CELLS}
    if not all(values.values()):
        return {}, ""
    from .ablation import ablation_seed_tests

    return (
        ablation_seed_tests(values),
        "computed by this page from the cells' per-seed values (this ablation.json predates "
        "seed_tests; qknorm_tools.ablation.ablation_seed_tests)",
    )


def seed_interval(test: Mapping | None) -> tuple[float, float] | None:
    """The 95% CI of a seed-level test: its ``ci95`` when present, else from estimate, se, df.

    ``estimate ± t_{0.975, df} * se`` (Student's t quantile with the test's degrees of
    freedom); None when the test or one of these is missing.
    """
    if not isinstance(test, Mapping):
        return None
    ci = test.get("ci95")
    if isinstance(ci, Sequence) and len(ci) == 2 and all(_finite(v) is not None for v in ci):
        return float(ci[0]), float(ci[1])
    est, se, df = (_finite(test.get(k)) for k in ("estimate", "se", "df"))
    if est is None or se is None or df is None or df <= 0:
        return None
    from scipy import stats

    q = float(stats.t.ppf(0.975, df))
    return est - q * se, est + q * se


def _seed_label(test: Mapping | None) -> str:
    """What a seed-level test is (its ``test`` key; the ablation's Welch t before it existed)."""
    return str((test or {}).get("test") or "Welch t over seeds")


def _effect_rows(d: Mapping) -> list[dict]:
    """Per effect of an ablation.json: estimate, seed test, its CI, MDE, TOST and AR."""
    tests, _ = seed_tests(d)
    sig = d.get("significance") or {}
    rows = []
    for k, v in (d.get("effects") or {}).items():
        if _finite(v) is None:
            continue
        test = tests.get(k) if isinstance(tests.get(k), Mapping) else None
        ar = sig.get(k) or {}
        rows.append(
            {
                "effect": k,
                "estimate": v,
                "description": ar.get("description", ""),
                "test": test,
                "ci": seed_interval(test),
                "p_seeds": _finite((test or {}).get("p")),
                "mde": _finite((test or {}).get("mde")),
                "tost": (test or {}).get("tost")
                if isinstance((test or {}).get("tost"), Mapping)
                else None,
                "p_ar": _finite(ar.get("p_ar")),
                "n_ar": ar.get("n_ar"),
                "delta_concat": _finite(ar.get("delta_concat")),
            }
        )
    return rows


def _p_labels(row: Mapping) -> str:
    """Both p-values of an effect, each named by what it tests."""
    seeds = (
        f"seed-level ({_seed_label(row['test'])}): p={_fmt(row['p_seeds'], '.3f')}"
        if row["test"]
        else "seed-level: not tested"
    )
    ar = (
        f"sentences (approximate randomization): p={_fmt(row['p_ar'], '.4f')}"
        if row["p_ar"] is not None
        else "sentences (approximate randomization): not tested"
    )
    return f"{seeds}; {ar}"


def _effect_hover(row: Mapping) -> str:
    bits = [f"<b>{html.escape(row['effect'])}</b>"]
    if row["description"]:
        bits.append(html.escape(str(row["description"])))
    bits.append(f"estimate {row['estimate']:+.3f} BLEU (difference of cell means over seeds)")
    if row["ci"]:
        t = row["test"]
        bits.append(
            f"95% CI over seeds [{row['ci'][0]:+.3f}, {row['ci'][1]:+.3f}] "
            f"(se {_fmt(t.get('se'), '.3f')}, df {_fmt(t.get('df'), '.1f')})"
        )
    if row["mde"] is not None:
        bits.append(f"minimum detectable effect (80% power): {row['mde']:.3f} BLEU")
    needed = (row["test"] or {}).get("n_needed")
    if isinstance(needed, Mapping) and needed:
        bits.append(
            "seeds per cell for 80% power: "
            + ", ".join(f"{k} BLEU: {'–' if v is None else v}" for k, v in needed.items())
        )
    tost = row["tost"]
    if tost:
        bits.append(
            f"equivalence (TOST, margin ±{_fmt(tost.get('margin'), '.2f')}): "
            f"p={_fmt(tost.get('p'), '.3f')}, "
            f"{'equivalent' if tost.get('equivalent') else 'not shown equivalent'}"
        )
    if row["delta_concat"] is not None:
        bits.append(f"Δ of the outputs concatenated over seeds {row['delta_concat']:+.3f}")
    bits.append(_p_labels(row).replace("; ", "<br>"))
    return "<br>".join(bits)


def _effect_marks(rel: str, name: str, what: str, symbol: str, points: list) -> dict:
    """A grey marker trace of the forest plot at ``points`` (``[(x, effect row)]``)."""
    grey = "#888888"
    return {
        "type": "scatter",
        "mode": "markers",
        "name": name,
        "x": [x for x, _ in points],
        "y": [r["effect"] for _, r in points],
        "marker": {
            "symbol": symbol,
            "size": 11,
            "color": grey,
            "line": {"width": 2, "color": grey},
        },
        "hovertext": [_effect_hover(r) for _, r in points],
        "hoverinfo": "text",
        "meta": {"source": rel, "what": what},
    }


def _effects_figure(rel: str, d: Mapping) -> dict:
    """The forest plot of the ablation's effects: estimate, seed-level CI, MDE, both p-values."""
    rows = _effect_rows(d)
    names = [r["effect"] for r in rows]
    _, source = seed_tests(d)
    ink = REFERENCE_COLOR
    traces = [
        {
            "type": "scatter",
            "mode": "markers",
            "name": "estimate, 95% CI over seeds",
            "x": [r["estimate"] for r in rows],
            "y": names,
            "error_x": {
                "type": "data",
                "symmetric": False,
                "array": [r["ci"][1] - r["estimate"] if r["ci"] else None for r in rows],
                "arrayminus": [r["estimate"] - r["ci"][0] if r["ci"] else None for r in rows],
                "color": ink,
                "thickness": 2,
                "width": 6,
            },
            "marker": {"symbol": "diamond", "size": 11, "color": ink},
            "hovertext": [_effect_hover(r) for r in rows],
            "hoverinfo": "text",
            "meta": {
                "source": rel,
                "what": "effects",
                "ci95": [list(r["ci"]) if r["ci"] else None for r in rows],
                "seed_tests": source,
            },
        }
    ]
    concat = [(r["delta_concat"], r) for r in rows if r["delta_concat"] is not None]
    if concat:
        traces.append(
            _effect_marks(
                rel,
                "Δ concatenated outputs (what the sentence-level test tests)",
                "delta_concat",
                "circle-open",
                concat,
            )
        )
    mde = [(s * r["mde"], r) for r in rows if r["mde"] is not None for s in (-1, 1)]
    if mde:
        traces.append(
            _effect_marks(
                rel, "± minimum detectable effect (80% power, seeds)", "mde", "line-ns", mde
            )
        )
    notes = [
        {
            "xref": "paper",
            "x": 1.01,
            "xanchor": "left",
            "yref": "y",
            "y": r["effect"],
            "text": html.escape(_p_labels(r)).replace("; ", "<br>"),
            "showarrow": False,
            "align": "left",
            "font": {"size": 11},
        }
        for r in rows
    ]
    layout = {
        "height": 140 + 52 * len(rows),
        "margin": {"t": 50, "r": 330, "l": 190},
        "xaxis": {
            "title": {"text": f"effect ({d.get('metric', 'BLEU')} points)"},
            "zeroline": False,
        },
        "yaxis": {"autorange": "reversed", "type": "category"},
        "shapes": [
            {
                "type": "line",
                "xref": "x",
                "x0": 0,
                "x1": 0,
                "yref": "paper",
                "y0": 0,
                "y1": 1,
                "line": {"color": ink, "width": 1, "dash": "dash"},
            }
        ],
        "annotations": notes,
        "legend": {"orientation": "h", "y": -0.25 if len(rows) > 4 else -0.4},
    }
    caption = (
        "Diamond: the effect (difference of cell means over seeds); bar: its 95% CI over seeds "
        "(t quantile with the test's df: the noise of training another seed included). Right: "
        "two p-values, each named by what it tests: 'seed-level' asks whether the effect "
        "exceeds the spread between training runs (seeds); 'sentences' (paired approximate "
        "randomization on the outputs concatenated over seeds, Riezler & Maxwell 2005) asks "
        "only whether these fixed outputs differ beyond the sampling of test sentences, and "
        "leaves training noise out: it can be tiny where the seed-level p is not. Open "
        "circles: the concatenated outputs' difference, the statistic of that test."
        + (" Grey ticks: ± the minimum detectable effect at 80% power over seeds." if mde else "")
        + f" Seed-level tests: {source or 'none (fewer than 2 seeds per cell)'}."
    )
    return _fig(
        f"ablation-effects-{_slug(rel)}",
        f"2x2 effects with 95% CIs over seeds ({rel})",
        traces,
        layout,
        caption,
    )


def _ablation_figures(sources) -> list[dict]:
    figs = []
    for rel, d in sources.items():
        if not rel.endswith("ablation.json"):
            continue
        cells = d.get("cells") or {}
        names = [c for c in CELLS if c in cells] + [c for c in cells if c not in CELLS]
        traces, values = [], []
        for c in names:
            cell = cells[c]
            system = cell.get("system")
            seeds, vals = cell.get("seeds") or [], cell.get("values") or []
            mean, sd = cell.get("mean"), cell.get("sd")
            values += [*vals, mean]
            if _finite(mean) is not None and _finite(sd) is not None:
                values += [mean - sd, mean + sd]
            col = _color(system)
            traces.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": f"{c} mean ± sd",
                    "legendgroup": c,
                    "x": [c],
                    "y": [mean],
                    "error_y": {"type": "data", "array": [sd], "color": col, "thickness": 2},
                    "marker": {
                        "symbol": "line-ew",
                        "size": 30,
                        "color": col,
                        "line": {"width": 3, "color": col},
                    },
                    "hovertext": [
                        f"<b>{c}</b> ({system})<br>mean {_fmt(mean)} ± {_fmt(sd)} over seeds "
                        f"{seeds}"
                    ],
                    "hoverinfo": "text",
                    "meta": {"source": rel, "what": "cell mean", "cell": c, "system": system},
                }
            )
            traces.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": f"{c} each seed",
                    "legendgroup": c,
                    "x": [c] * len(vals),
                    "y": vals,
                    "hovertext": [f"{system} seed {s}: {_fmt(v)}" for s, v in zip(seeds, vals)],
                    "hoverinfo": "text",
                    "marker": {
                        "size": 9,
                        "symbol": "diamond",
                        "color": col,
                        "opacity": 0.8,
                        "line": {"width": 1, "color": "#ffffff"},
                    },
                    "meta": {
                        "source": rel,
                        "what": "seed values",
                        "cell": c,
                        "system": system,
                        "seeds": seeds,
                    },
                }
            )
        figs.append(
            _fig(
                f"ablation-cells-{_slug(rel)}",
                f"2x2 cells ({d.get('metric')}, {rel})",
                traces,
                {
                    "yaxis": {
                        "title": {"text": str(d.get("metric"))},
                        "range": _padded_range(values),
                    }
                },
                "All cells PreNorm + FixNorm; a=(LN,dot), b=(LN,QK), c=(SN,dot), d=(SN,QK). "
                "Ticks: mean ± sd over seeds; diamonds: each seed; the axis does not start at 0.",
            )
        )
        figs.append(_effects_figure(rel, d))
    return figs
