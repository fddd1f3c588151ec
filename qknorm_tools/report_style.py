"""Colours, marker modes and figure helpers shared by the report's figures.

A system has one colour in every figure of every page (:data:`SYSTEM_COLORS`, :func:`_color`);
a series of up to :data:`MARKERS_UP_TO` points gets markers (:func:`_mode`, :func:`_style`);
:func:`_padded_range` makes an axis span the data (BLEU axes do not start at 0); :func:`_fig`
wraps a plotly spec with its id, title and caption; :func:`_slug` turns a source's path into
figure and table ids and :func:`_fmt` formats a number ("–" where there is none).
"""

from __future__ import annotations

from collections.abc import Mapping

from .report_sources import _finite

__all__ = ["MARKERS_UP_TO", "OTHER_COLOR", "REFERENCE_COLOR", "SYSTEM_COLORS"]

#: one colour per system in every figure of every page: a fixed entry for every system of
#: configs/systems/*.toml (plotly's qualitative palette first, then darker tones), all distinct
SYSTEM_COLORS = {
    "twt": "#1f77b4",
    "qknorm_paper": "#ff7f0e",
    "prenorm_fixnorm_layernorm": "#2ca02c",
    "scalenorm_qknorm": "#d62728",
    "qk_layernorm": "#9467bd",
    "prenorm_layernorm": "#8c564b",
    "postnorm_layernorm": "#e377c2",
    "twt_zloss": "#bcbd22",
    "twt_softcap": "#17becf",
    "prenorm_fixnorm_rmsnorm": "#7f7f7f",
    "qk_rmsnorm_full": "#393b79",
    "qk_rmsnorm_zc": "#8c6d31",
}
#: a system outside :data:`SYSTEM_COLORS` (none of configs/systems): one neutral colour
OTHER_COLOR = "#444444"
#: reference lines (g0, zero effect): black, dashed
REFERENCE_COLOR = "#000000"
#: a series longer than this is drawn as a line without markers (markers below it, and always
#: for a single point, which a line cannot show)
MARKERS_UP_TO = 40


def _color(system) -> str:
    """The colour of ``system`` (:data:`SYSTEM_COLORS`; the same in every figure and page)."""
    return SYSTEM_COLORS.get(str(system), OTHER_COLOR)


def _mode(n_points: int) -> str:
    """Scatter mode of a series of ``n_points``: markers wherever a line could not be seen."""
    if n_points < 2:
        return "markers"
    return "lines+markers" if n_points <= MARKERS_UP_TO else "lines"


def _style(system, **marker) -> dict:
    """``line`` and ``marker`` of a trace of ``system`` (its colour; ``marker`` adds to it)."""
    c = _color(system)
    return {"line": {"color": c}, "marker": {"color": c, "size": 6, **marker}}


def _padded_range(values, ci_low=(), ci_high=(), pad=0.15, min_span=0.5) -> list | None:
    """An axis range around ``values`` and their intervals (not from 0): differences show.

    ``pad`` of the span on each side, at least ``min_span`` wide in all; None without data.
    """
    pts = [v for v in (*values, *ci_low, *ci_high) if _finite(v) is not None]
    if not pts:
        return None
    lo, hi = min(pts), max(pts)
    extra = max((hi - lo) * pad, (min_span - (hi - lo)) / 2, 0.0)
    return [lo - extra, hi + extra]


def _fig(fid: str, title: str, data: list, layout: Mapping, caption: str = "") -> dict:
    lay = {
        "title": {"text": title},
        "hovermode": "closest",
        "margin": {"t": 50, "r": 20},
        "legend": {"groupclick": "togglegroup"},
        **layout,
    }
    return {"id": fid, "title": title, "caption": caption, "spec": {"data": data, "layout": lay}}


def _slug(rel: str) -> str:
    return rel.replace("/", "-").replace(".json", "").replace("_", "-")


def _fmt(x, spec=".2f", none="–") -> str:
    return format(x, spec) if _finite(x) is not None else none
