"""The report's BLEU figures of ``aggregate.json`` and ``demo_compare.json``.

Per system: BLEU with its 95% paired-bootstrap CI, the mean ± sd over seeds and the p-values
against the baseline (paired bootstrap, Koehn 2004; approximate randomization, Riezler &
Maxwell 2005) in the hover and caption.
"""

from __future__ import annotations

import html
from collections.abc import Mapping

from .report_sources import _finite
from .report_style import _color, _fig, _fmt, _padded_range, _slug


def _score_trace(name, rel, s: Mapping, what: str, hover: str, **meta) -> dict:
    """One system's score as a wide tick with its 95% CI as error bars (in its colour)."""
    c = _color(name)
    return {
        "type": "scatter",
        "mode": "markers",
        "name": f"{name} ({what.split(',')[0]})",
        "legendgroup": str(name),
        "x": [name],
        "y": [s.get("score")],
        "error_y": {
            "type": "data",
            "symmetric": False,
            "array": [_sub(s.get("ci_high"), s.get("score"))],
            "arrayminus": [_sub(s.get("score"), s.get("ci_low"))],
            "color": c,
            "thickness": 2,
            "width": 10,
        },
        "marker": {"symbol": "line-ew", "size": 30, "color": c, "line": {"width": 3, "color": c}},
        "hovertext": [hover],
        "hoverinfo": "text",
        "meta": {"source": rel, "system": name, "what": what, **meta},
    }


def _bleu_ci_figures(sources) -> list[dict]:
    figs = []
    for rel, d in sources.items():
        if rel.endswith("demo_compare.json"):
            systems = d.get("systems") or []
            metric = d.get("metric", "bleu_tok")
            traces = [
                _score_trace(s["name"], rel, s, "score, 95% CI", _compare_hover(s)) for s in systems
            ]
            rng = _padded_range(
                [s.get("score") for s in systems],
                [s.get("ci_low") for s in systems],
                [s.get("ci_high") for s in systems],
            )
            figs.append(
                _fig(
                    f"bleu-{_slug(rel)}",
                    f"BLEU with 95% CI ({rel})",
                    traces,
                    {"yaxis": {"title": {"text": metric}, "range": rng}},
                    _pnote(
                        d.get("baseline"),
                        d.get("n_bootstrap"),
                        d.get("n_ar"),
                        "One run per system; the axis does not start at 0",
                    ),
                )
            )
        elif rel.endswith("aggregate.json"):
            metric = d.get("metric", "bleu_tok")
            for pair, p in (d.get("pairs") or {}).items():
                systems = p.get("systems") or {}
                traces, values, lows, highs = [], [], [], []
                for n, sy in systems.items():
                    c = sy.get("concat") or {}
                    m = sy.get(metric) or {}
                    seeds, vals = sy.get("seeds") or [], m.get("values") or []
                    values += [c.get("score"), *vals]
                    lows.append(c.get("ci_low"))
                    highs.append(c.get("ci_high"))
                    traces.append(
                        _score_trace(
                            n,
                            rel,
                            c,
                            "concat score, 95% CI",
                            _compare_hover({"name": n, **c}),
                            pair=pair,
                        )
                    )
                    traces.append(
                        {
                            "type": "scatter",
                            "mode": "markers",
                            "name": f"{n} (each seed)",
                            "legendgroup": str(n),
                            "x": [n] * len(vals),
                            "y": vals,
                            "marker": {
                                "size": 9,
                                "symbol": "diamond",
                                "opacity": 0.8,
                                "line": {"width": 1, "color": "#ffffff"},
                                "color": _color(n),
                            },
                            "hovertext": [f"{n} seed {s}: {v:.2f}" for s, v in zip(seeds, vals)],
                            "hoverinfo": "text",
                            "meta": {
                                "source": rel,
                                "pair": pair,
                                "system": n,
                                "what": "per-seed values",
                            },
                        }
                    )
                figs.append(
                    _fig(
                        f"bleu-{_slug(rel)}-{pair}",
                        f"{pair}: {metric} per system ({rel})",
                        traces,
                        {
                            "yaxis": {
                                "title": {"text": metric},
                                "range": _padded_range(values, lows, highs),
                            }
                        },
                        _pnote(
                            d.get("baseline"),
                            (d.get("significance") or {}).get("n_bootstrap"),
                            (d.get("significance") or {}).get("n_ar"),
                            "Ticks: the outputs concatenated over seeds; diamonds: each seed; "
                            "the axis does not start at 0",
                        ),
                    )
                )
    return figs


def _sub(a, b):
    return a - b if _finite(a) is not None and _finite(b) is not None else None


def _compare_hover(s: Mapping) -> str:
    bits = [f"<b>{html.escape(str(s.get('name')))}</b>", f"score {_fmt(s.get('score'))}"]
    if _finite(s.get("ci_low")) is not None:
        bits.append(f"95% CI [{_fmt(s.get('ci_low'))}, {_fmt(s.get('ci_high'))}]")
    if _finite(s.get("delta")) is not None:
        bits.append(f"Δ {s['delta']:+.2f}")
    bits.append(f"p(bs) {_fmt(s.get('p_bs'), '.4f')}, p(ar) {_fmt(s.get('p_ar'), '.4f')}")
    if s.get("path"):
        bits.append(html.escape(str(s["path"])))
    return "<br>".join(bits)


def _pnote(baseline, n_bs, n_ar, what) -> str:
    return (
        f"{what}. Error bars: 95% paired-bootstrap CI ({n_bs} resamples, Koehn 2004); hover: "
        f"p-values against {baseline!r} (paired bootstrap; approximate randomization, {n_ar} "
        f"trials, Riezler & Maxwell 2005)."
    )
