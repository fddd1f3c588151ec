"""The report's figures of ``lr_sweep.json``, the LR sweep.

Final dev loss and max attention logit against the peak learning rate per system and seed, the
max attention logit over training per run, and LR sensitivity (Wortsman et al. 2023,
arXiv:2309.14322, Sec. 2.2 and Fig. 1).
"""

from __future__ import annotations

from .report_sources import _finite, _hover
from .report_style import _color, _fig, _fmt, _mode, _slug, _style


def _lr_figures(sources) -> list[dict]:
    figs = []
    for rel, d in sources.items():
        if not rel.endswith("lr_sweep.json"):
            continue
        loss, logit, series_traces = [], [], []
        runs = d.get("runs") or []
        for s in d.get("systems") or []:
            name = s.get("system")
            pts = s.get("points") or []
            loss.append(
                {
                    "type": "scatter",
                    "mode": _mode(len(pts)),
                    "name": name,
                    "legendgroup": name,
                    **_style(name),
                    "x": [p.get("lr") for p in pts],
                    "y": [p.get("capped_loss_mean") for p in pts],
                    "hovertext": [
                        f"<b>{name}</b> lr {p.get('lr')}<br>mean capped loss "
                        f"{_fmt(p.get('capped_loss_mean'), '.3f')}<br>per seed {p.get('dev_loss')}"
                        for p in pts
                    ],
                    "hoverinfo": "text",
                    "meta": {"source": rel, "system": name, "what": "capped_loss_mean"},
                }
            )
            mine = [r for r in runs if r.get("system") == name]
            loss.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": f"{name} runs",
                    "legendgroup": name,
                    "showlegend": False,
                    "x": [r.get("lr") for r in mine],
                    "y": [r.get("capped_loss") for r in mine],
                    "marker": {"size": 6, "opacity": 0.6, "color": _color(name)},
                    "hovertext": [_hover(r) for r in mine],
                    "hoverinfo": "text",
                    "meta": {"source": rel, "system": name, "what": "capped_loss per run"},
                }
            )
            logit.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": name,
                    "legendgroup": name,
                    "x": [r.get("lr") for r in mine],
                    "y": [_finite(r.get("max_attn_logit")) for r in mine],
                    "hovertext": [
                        _hover(r) + f"<br>max logit {r.get('max_attn_logit')}" for r in mine
                    ],
                    "hoverinfo": "text",
                    "marker": {"size": 8, "color": _color(name)},
                    "meta": {"source": rel, "system": name, "what": "max_attn_logit per run"},
                }
            )
            for r in mine:
                pts2 = r.get("max_attn_logit_series") or []
                if pts2:
                    series_traces.append(
                        {
                            "type": "scatter",
                            "mode": _mode(len(pts2)),
                            "name": f"{name} lr {r.get('lr')} seed {r.get('seed')}",
                            "legendgroup": f"{name}",
                            "legendgrouptitle": {"text": name},
                            **_style(name, size=5),
                            "x": [p[0] for p in pts2],
                            "y": [_finite(p[1]) for p in pts2],
                            "hovertext": [
                                _hover(r) + f"<br>update {p[0]:g}: max logit {p[1]}" for p in pts2
                            ],
                            "hoverinfo": "text",
                            "visible": True if r.get("seed") == 1 else "legendonly",
                            "meta": {
                                "source": rel,
                                "system": name,
                                "lr": r.get("lr"),
                                "seed": r.get("seed"),
                                "what": "max_attn_logit_series",
                            },
                        }
                    )
        sens = ", ".join(
            f"{s.get('system')} {_fmt(s.get('lr_sensitivity'), '.3f')}"
            for s in d.get("systems") or []
        )
        figs.append(
            _fig(
                f"lr-loss-{_slug(rel)}",
                f"LR sweep: final dev loss vs peak LR ({d.get('profile')})",
                loss,
                {
                    "xaxis": {"type": "log", "title": {"text": "peak learning rate"}},
                    "yaxis": {"title": {"text": "dev loss (capped at the initial loss)"}},
                },
                "Line: mean over seeds; dots: each run. LR sensitivity "
                f"({d.get('definition')}): {sens}.",
            )
        )
        figs.append(
            _fig(
                f"lr-maxlogit-{_slug(rel)}",
                "LR sweep: max attention logit over training vs peak LR",
                logit,
                {
                    "xaxis": {"type": "log", "title": {"text": "peak learning rate"}},
                    "yaxis": {"type": "log", "title": {"text": "max |attention logit|"}},
                },
                "Largest logged pre-softmax logit of any attention module over the run "
                "(Wortsman et al. 2023, Sec. 3.1: attention-logit growth).",
            )
        )
        if series_traces:
            figs.append(
                _fig(
                    f"lr-maxlogit-series-{_slug(rel)}",
                    "LR sweep: max attention logit over training",
                    series_traces,
                    {
                        "xaxis": {"title": {"text": "update"}},
                        "yaxis": {"type": "log", "title": {"text": "max |attention logit|"}},
                    },
                    "One line per run (seed 1 shown; the others in the legend).",
                )
            )
    return figs
