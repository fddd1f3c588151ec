r"""An interactive, self-contained HTML report of one results directory.

::

    python -m qknorm_tools.report results/cpu-proxy-fast/gl-en [MORE_DIRS...] [-o OUT.html]
        [--attention attention.json]
    make report     # one page per results/<profile>/<pair>/ directory

Each page (``DIR/report.html`` by default) opens offline: plotly.js (from the ``plotly``
package, ``pip install -e .[report]``) and every style and script are inlined, nothing is
fetched at view time. The page is built from the JSON the results directory holds (up to two
levels below it, e.g. ``lr-sweep/``):

* ``runs.json`` / ``demo.json`` (run records, :mod:`qknorm_tools.records`): the runs table;
  the training and dev curves, ``g`` per module over training and the max attention logit over
  training are read from each run's ``train.log`` (:mod:`qknorm_tools.trainlog`) *when the run
  directory exists*; a fresh clone has no ``runs/``, and the page then says which curves are
  missing and shows what the records hold (final ``g`` per module against ``g0``);
* ``aggregate.json``: mean ± sd over seeds, BLEU of the concatenated outputs with its 95%
  paired-bootstrap CI and the p-values against the baseline (paired bootstrap, Koehn 2004;
  approximate randomization, Riezler & Maxwell 2005);
* ``demo_compare.json``: BLEU with 95% CI and p-values of ``evaluate compare``;
* ``ablation.json``: the 2x2 cells {LayerNorm, ScaleNorm} x {dot product, QKNorm} and their
  effects with p-values (:mod:`qknorm_tools.ablation`);
* ``lr_sweep.json``: final dev loss and max attention logit against the peak learning rate
  per system and seed, the max attention logit over training per run, LR sensitivity
  (Wortsman et al. 2023, arXiv:2309.14322, Sec. 2.2 and Fig. 1);
* ``attention.json`` (``python -m qknorm_model_tools.attention_dump``): a heatmap viewer of the
  logits / probabilities of every layer and head, models side by side, entropy in the hover.

Systems and seeds are toggled in each figure's legend (double-click: only that one); hovering a
point shows its run. Every number the figures and tables show is also embedded in the page as
JSON (``<script type="application/json" id="qknorm-report-data">``: the source files as read,
under ``sources``, and each figure's plotly spec under ``figures``), so that a test or a reader
can check the page against the results.

plotly is imported only when a page is written; torch and fairseq never are.
"""

from __future__ import annotations

import argparse
import html
import json
import math
import re
import sys
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

from .textio import OutputError, write_text_atomic
from .trainlog import (
    G_PREFIX,
    LogInputError,
    max_attention_logit_series,
    metric_keys,
    parse_log,
    series,
)

__all__ = [
    "ReportInputError",
    "build_report",
    "collect_sources",
    "main",
    "render_html",
    "write_report",
]

#: the result files a page is built from (searched in the directory and two levels below)
KNOWN = (
    "runs.json",
    "demo.json",
    "aggregate.json",
    "demo_compare.json",
    "ablation.json",
    "lr_sweep.json",
    "attention.json",
)
DATA_ID = "qknorm-report-data"
#: table cells right-aligned as numbers ("6.31 ± 0.32", "+0.16", "[5.86, 6.52]", "–")
_NUM = re.compile(r"^[-+\[]?[0-9.–][0-9.,eE+\-± \[\]–]*$")
#: the 2x2 cells in the ablation's order: a=(LN,dot), b=(LN,QK), c=(SN,dot), d=(SN,QK)
CELLS = ("layernorm_dot", "layernorm_qknorm", "scalenorm_dot", "scalenorm_qknorm")


#: one colour per system in every figure of a page (plotly's default qualitative palette)
_PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2",
            "#7f7f7f", "#bcbd22", "#17becf")  # fmt: skip
_SYSTEM_ORDER = ("twt", "qknorm_paper", "prenorm_fixnorm_layernorm", "scalenorm_qknorm",
                 "qk_layernorm", "prenorm_layernorm", "postnorm_layernorm")  # fmt: skip


def _color(system) -> str:
    """The colour of ``system`` (stable across figures and pages)."""
    name = str(system)
    if name in _SYSTEM_ORDER:
        return _PALETTE[_SYSTEM_ORDER.index(name)]
    return _PALETTE[(len(_SYSTEM_ORDER) + sum(map(ord, name))) % len(_PALETTE)]


class ReportInputError(ValueError):
    """Unusable input; the message names the file.

    A results directory that does not exist or holds none of :data:`KNOWN`, a file that is
    not JSON, an output that cannot be written, plotly missing.
    """


# ----------------------------------------------------------------------------- reading
def collect_sources(results_dir) -> dict[str, object]:
    """``{path relative to results_dir: parsed JSON}`` of the :data:`KNOWN` files.

    Raises:
        ReportInputError: no such directory, none of the files, or a file that is not JSON.
    """
    root = Path(results_dir)
    if not root.is_dir():
        raise ReportInputError(f"results directory {str(root)!r} not found")
    found: dict[str, object] = {}
    for pattern in ("", "*/", "*/*/"):
        for name in KNOWN:
            for path in sorted(root.glob(pattern + name)):
                rel = path.relative_to(root).as_posix()
                try:
                    found[rel] = json.loads(path.read_text(encoding="utf-8"))
                except (OSError, json.JSONDecodeError) as exc:
                    raise ReportInputError(f"cannot read {str(path)!r}: {exc}") from None
    if not found:
        raise ReportInputError(
            f"{str(root)!r} holds none of {', '.join(KNOWN)} (up to two levels below it)"
        )
    return dict(sorted(found.items()))


def _finite(x):
    return (
        x if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None
    )


def _clean(obj):
    """JSON-safe copy: non-finite floats become ``None`` (JSON has no NaN)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def _run_label(r: Mapping) -> str:
    variant = r.get("variant") or {}
    extra = "".join(f" {k}={v}" for k, v in sorted(variant.items()))
    return f"{r.get('system')} seed{r.get('seed')}{extra}"


def _hover(r: Mapping) -> str:
    bits = [f"<b>{html.escape(_run_label(r))}</b>", f"profile {r.get('profile')}"]
    for key, fmt in (("updates", "{}"), ("bleu_tok", "{:.2f}"), ("dev_loss", "{:.3f}")):
        if _finite(r.get(key)) is not None:
            bits.append(f"{key} " + fmt.format(r[key]))
    if r.get("run_dir"):
        bits.append(html.escape(str(r["run_dir"])))
    return "<br>".join(bits)


def _records(sources: Mapping[str, object]) -> list[tuple[str, Mapping, dict]]:
    """``(source, records file content, record)`` of every run of runs.json (else demo.json)."""
    out = []
    dirs = {}
    for rel, d in sources.items():
        name = rel.rsplit("/", 1)[-1]
        if name in ("runs.json", "demo.json") and isinstance(d, Mapping):
            folder = rel.rsplit("/", 1)[0] if "/" in rel else ""
            # demo.json repeats runs.json's records: read it only without a runs.json
            if name == "demo.json" and dirs.get(folder) == "runs.json":
                continue
            if name == "runs.json":
                out = [o for o in out if o[0] != f"{folder}/demo.json".lstrip("/")]
            dirs[folder] = name
            for r in d.get("runs") or []:
                if isinstance(r, Mapping):
                    out.append((rel, d, dict(r)))
    return out


def _train_log(results_dir: Path, rel: str, d: Mapping, r: Mapping) -> Path | None:
    if not r.get("train_log"):
        return None
    log = Path(str(r["train_log"]))
    if not log.is_absolute():
        base = (results_dir / rel).parent / str(d.get("work_dir") or ".")
        log = base / log
    return log


# ----------------------------------------------------------------------------- figures
def _fig(fid: str, title: str, data: list, layout: Mapping, caption: str = "") -> dict:
    lay = {
        "title": {"text": title},
        "hovermode": "closest",
        "margin": {"t": 50, "r": 20},
        "legend": {"groupclick": "togglegroup"},
        **layout,
    }
    return {"id": fid, "title": title, "caption": caption, "spec": {"data": data, "layout": lay}}


def _bleu_ci_figures(sources) -> list[dict]:
    figs = []
    for rel, d in sources.items():
        if rel.endswith("demo_compare.json"):
            systems = d.get("systems") or []
            names = [s["name"] for s in systems]
            score = [s.get("score") for s in systems]
            trace = {
                "type": "bar",
                "name": d.get("metric", "bleu_tok"),
                "x": names,
                "y": score,
                "error_y": {
                    "type": "data",
                    "symmetric": False,
                    "array": [_sub(s.get("ci_high"), s.get("score")) for s in systems],
                    "arrayminus": [_sub(s.get("score"), s.get("ci_low")) for s in systems],
                },
                "hovertext": [_compare_hover(s) for s in systems],
                "hoverinfo": "text",
                "meta": {"source": rel, "what": "score, 95% CI"},
            }
            figs.append(
                _fig(
                    f"bleu-{_slug(rel)}",
                    f"BLEU with 95% CI ({rel})",
                    [trace],
                    {"yaxis": {"title": {"text": d.get("metric", "bleu_tok")}}},
                    _pnote(
                        d.get("baseline"), d.get("n_bootstrap"), d.get("n_ar"), "one run per system"
                    ),
                )
            )
        elif rel.endswith("aggregate.json"):
            metric = d.get("metric", "bleu_tok")
            for pair, p in (d.get("pairs") or {}).items():
                systems = p.get("systems") or {}
                names = list(systems)
                conc = [systems[n].get("concat") or {} for n in names]
                bars = {
                    "type": "bar",
                    "name": "concatenated over seeds",
                    "x": names,
                    "y": [c.get("score") for c in conc],
                    "error_y": {
                        "type": "data",
                        "symmetric": False,
                        "array": [_sub(c.get("ci_high"), c.get("score")) for c in conc],
                        "arrayminus": [_sub(c.get("score"), c.get("ci_low")) for c in conc],
                    },
                    "hovertext": [_compare_hover({"name": n, **c}) for n, c in zip(names, conc)],
                    "hoverinfo": "text",
                    "meta": {"source": rel, "pair": pair, "what": "concat score, 95% CI"},
                }
                traces = [bars]
                for n in names:
                    m = systems[n].get(metric) or {}
                    seeds = systems[n].get("seeds") or []
                    traces.append(
                        {
                            "type": "scatter",
                            "mode": "markers",
                            "name": f"{n} per seed",
                            "x": [n] * len(m.get("values") or []),
                            "y": m.get("values") or [],
                            "marker": {
                                "size": 9,
                                "symbol": "diamond",
                                "line": {"width": 1},
                                "color": _color(n),
                            },
                            "hovertext": [
                                f"{n} seed {s}: {v:.2f}"
                                for s, v in zip(seeds, m.get("values") or [])
                            ],
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
                        {"yaxis": {"title": {"text": metric}}, "barmode": "overlay"},
                        _pnote(
                            d.get("baseline"),
                            (d.get("significance") or {}).get("n_bootstrap"),
                            (d.get("significance") or {}).get("n_ar"),
                            "bars: the outputs concatenated over seeds; diamonds: each seed",
                        ),
                    )
                )
    return figs


def _sub(a, b):
    return a - b if _finite(a) is not None and _finite(b) is not None else None


def _slug(rel: str) -> str:
    return rel.replace("/", "-").replace(".json", "").replace("_", "-")


def _fmt(x, spec=".2f", none="–") -> str:
    return format(x, spec) if _finite(x) is not None else none


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


def _ablation_figures(sources) -> list[dict]:
    figs = []
    for rel, d in sources.items():
        if not rel.endswith("ablation.json"):
            continue
        cells = d.get("cells") or {}
        names = [c for c in CELLS if c in cells] + [c for c in cells if c not in CELLS]
        traces = [
            {
                "type": "bar",
                "name": "mean ± sd",
                "x": names,
                "y": [cells[c].get("mean") for c in names],
                "error_y": {"type": "data", "array": [cells[c].get("sd") for c in names]},
                "hovertext": [
                    f"<b>{c}</b> ({cells[c].get('system')})<br>mean {_fmt(cells[c].get('mean'))}"
                    f" ± {_fmt(cells[c].get('sd'))} over seeds {cells[c].get('seeds')}"
                    for c in names
                ],
                "hoverinfo": "text",
                "meta": {"source": rel, "what": "cell means"},
            }
        ]
        seeds = sorted({s for c in names for s in cells[c].get("seeds") or []})
        for seed in seeds:
            xs, ys, text = [], [], []
            for c in names:
                for s, v in zip(cells[c].get("seeds") or [], cells[c].get("values") or []):
                    if s == seed:
                        xs.append(c)
                        ys.append(v)
                        text.append(f"{cells[c].get('system')} seed {s}: {_fmt(v)}")
            traces.append(
                {
                    "type": "scatter",
                    "mode": "markers",
                    "name": f"seed {seed}",
                    "x": xs,
                    "y": ys,
                    "hovertext": text,
                    "hoverinfo": "text",
                    "marker": {"size": 9, "symbol": "diamond"},
                    "meta": {"source": rel, "what": "seed values", "seed": seed},
                }
            )
        figs.append(
            _fig(
                f"ablation-cells-{_slug(rel)}",
                f"2x2 cells ({d.get('metric')}, {rel})",
                traces,
                {"yaxis": {"title": {"text": str(d.get("metric"))}}},
                "All cells PreNorm + FixNorm; a=(LN,dot), b=(LN,QK), c=(SN,dot), d=(SN,QK).",
            )
        )
        effects = {k: v for k, v in (d.get("effects") or {}).items() if _finite(v) is not None}
        sig = d.get("significance") or {}
        names = list(effects)
        trace = {
            "type": "bar",
            "name": "effect",
            "x": names,
            "y": [effects[k] for k in names],
            "hovertext": [
                f"<b>{k}</b><br>{html.escape(str((sig.get(k) or {}).get('description', '')))}"
                f"<br>effect {effects[k]:+.3f}<br>p(ar) "
                f"{_fmt((sig.get(k) or {}).get('p_ar'), '.4f', 'not tested')}"
                for k in names
            ],
            "text": [f"p={_fmt((sig.get(k) or {}).get('p_ar'), '.3f', 'n/a')}" for k in names],
            "textposition": "outside",
            "hoverinfo": "text",
            "meta": {"source": rel, "what": "effects"},
        }
        figs.append(
            _fig(
                f"ablation-effects-{_slug(rel)}",
                f"2x2 effects (BLEU points, {rel})",
                [trace],
                {"yaxis": {"title": {"text": "effect"}}},
                "Differences of mean scores over seeds; p: paired approximate randomization on the "
                "outputs concatenated over seeds (the interaction is not tested).",
            )
        )
    return figs


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
                    "mode": "lines+markers",
                    "name": name,
                    "legendgroup": name,
                    "line": {"color": _color(name)},
                    "marker": {"color": _color(name)},
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
                            "mode": "lines+markers",
                            "name": f"{name} lr {r.get('lr')} seed {r.get('seed')}",
                            "legendgroup": f"{name}",
                            "legendgrouptitle": {"text": name},
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


def _run_figures(results_dir: Path, sources) -> tuple[list[dict], list[str]]:
    """Curves from train logs where present, final g per module from the records; notes."""
    figs, notes = [], []
    loss, g_traces, logit, g_final = [], [], [], []
    by_source: dict[str, list[str]] = {}
    for rel, d, r in _records(sources):
        label = _run_label(r)
        log = _train_log(results_dir, rel, d, r)
        records = None
        if log is not None and log.is_file():
            try:
                records = parse_log(log)
            except LogInputError as exc:
                notes.append(f"{label}: {exc}")
        if records is None:
            by_source.setdefault(rel, []).append(str(r.get("train_log") or "(no train_log)"))
        else:
            for kind, dash in (("train_inner", "solid"), ("valid", "dot")):
                xs, ys = series(records, kind, "loss")
                if xs:
                    loss.append(
                        {
                            "type": "scatter",
                            "mode": "lines",
                            "name": f"{label} {kind}",
                            "legendgroup": label,
                            "x": xs,
                            "y": ys,
                            "line": {"dash": dash},
                            "hovertext": [_hover(r)] * len(xs),
                            "hoverinfo": "text+x+y",
                            "meta": {"source": str(log), "what": f"{kind} loss"},
                        }
                    )
            for key in metric_keys(records, G_PREFIX, "valid") or metric_keys(records, G_PREFIX):
                kind = "valid" if metric_keys(records, G_PREFIX, "valid") else "train_inner"
                xs, ys = series(records, kind, key)
                g_traces.append(
                    {
                        "type": "scatter",
                        "mode": "lines",
                        "name": f"{label} {key[len(G_PREFIX) :]}",
                        "legendgroup": label,
                        "legendgrouptitle": {"text": label},
                        "x": xs,
                        "y": ys,
                        "hovertext": [_hover(r)] * len(xs),
                        "hoverinfo": "text+x+y",
                        "meta": {"source": str(log), "what": key},
                    }
                )
            xs, ys = max_attention_logit_series(records)
            if xs:
                logit.append(
                    {
                        "type": "scatter",
                        "mode": "lines",
                        "name": label,
                        "x": xs,
                        "y": [_finite(y) for y in ys],
                        "hovertext": [_hover(r)] * len(xs),
                        "hoverinfo": "text+x+y",
                        "meta": {"source": str(log), "what": "max attention logit"},
                    }
                )
        gf = r.get("qk_norm_g_final") or {}
        if gf:
            mods = list(gf)
            g_final.append(
                {
                    "type": "scatter",
                    "mode": "markers+lines",
                    "name": label,
                    "x": mods,
                    "y": [gf[m] for m in mods],
                    "hovertext": [_hover(r) + f"<br>{m}: g {gf[m]}" for m in mods],
                    "hoverinfo": "text",
                    "meta": {"source": rel, "what": "qk_norm_g_final", "run": label},
                }
            )
            if _finite(r.get("qk_norm_g0")) is not None and not any(
                t.get("name") == "g0" for t in g_final
            ):
                g_final.append(
                    {
                        "type": "scatter",
                        "mode": "lines",
                        "name": "g0",
                        "x": mods,
                        "y": [r["qk_norm_g0"]] * len(mods),
                        "line": {"dash": "dash"},
                        "hoverinfo": "y+name",
                        "meta": {"what": "g0"},
                    }
                )
    for rel, logs in by_source.items():
        notes.append(
            f"{len(logs)} run(s) of {rel}: train.log not found (e.g. {logs[0]}): the run "
            "directories are not in this checkout, so their training / dev curves, g over "
            "training and max attention logit over training are not shown; the final values "
            "of the records are."
        )
    if loss:
        figs.append(
            _fig(
                "curves",
                "training (solid) and dev (dotted) loss",
                loss,
                {"xaxis": {"title": {"text": "update"}}, "yaxis": {"title": {"text": "loss"}}},
            )
        )
    if g_traces:
        figs.append(
            _fig(
                "g-curves",
                "QKNorm g per module over training",
                g_traces,
                {"xaxis": {"title": {"text": "update"}}, "yaxis": {"title": {"text": "g"}}},
            )
        )
    if logit:
        figs.append(
            _fig(
                "maxlogit-curves",
                "max attention logit over training",
                logit,
                {
                    "xaxis": {"title": {"text": "update"}},
                    "yaxis": {"type": "log", "title": {"text": "max |logit|"}},
                },
            )
        )
    if g_final:
        figs.append(
            _fig(
                "g-final",
                "QKNorm g per module at checkpoint_best (records)",
                g_final,
                {
                    "xaxis": {"title": {"text": "attention module"}},
                    "yaxis": {"title": {"text": "g"}},
                },
                "From the run records (qk_norm_g_final); dashed: g0 = log2(L^2 - L), "
                "Henry et al. 2020 Eq. 4.",
            )
        )
    return figs, notes


# ----------------------------------------------------------------------------- tables
def _table(head: Sequence[str], rows: Sequence[Sequence[object]], tid: str) -> str:
    th = "".join(f"<th>{html.escape(str(h))}</th>" for h in head)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{html.escape(str(c))}</td>'
            if _NUM.match(str(c))
            else f"<td>{html.escape(str(c))}</td>"
            for c in row
        )
        + "</tr>"
        for row in rows
    )
    return f'<table id="{tid}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def _tables(sources) -> list[tuple[str, str]]:
    out, runs_table = [], None
    recs = _records(sources)
    if recs:
        head = [
            "source",
            "system",
            "seed",
            "variant",
            "profile",
            "updates",
            "wall (min)",
            "dev loss",
            "BLEU tok",
            "sacreBLEU",
            "chrF",
            "max attn logit",
            "g0",
            "final mean g",
        ]
        rows = []
        for rel, _d, r in recs:
            rows.append(
                [
                    rel,
                    r.get("system"),
                    r.get("seed"),
                    " ".join(f"{k}={v}" for k, v in sorted((r.get("variant") or {}).items()))
                    or "–",
                    r.get("profile"),
                    r.get("updates"),
                    _fmt(r["wall_seconds"] / 60, ".1f") if _finite(r.get("wall_seconds")) else "–",
                    _fmt(r.get("dev_loss"), ".3f"),
                    _fmt(r.get("bleu_tok")),
                    _fmt(r.get("bleu")),
                    _fmt(r.get("chrf")),
                    _fmt(r.get("max_attn_logit"), ".1f"),
                    _fmt(r.get("qk_norm_g0")),
                    _fmt(r.get("qk_norm_g_final_mean")),
                ]
            )
        runs_table = ("Runs (the records)", _table(head, rows, "table-runs"))
    for rel, d in sources.items():
        if rel.endswith("aggregate.json"):
            metric = d.get("metric", "bleu_tok")
            for pair, p in (d.get("pairs") or {}).items():
                rows = []
                for n, s in (p.get("systems") or {}).items():
                    m, c = s.get(metric) or {}, s.get("concat") or {}
                    rows.append(
                        [
                            n,
                            s.get("n_seeds"),
                            f"{_fmt(m.get('mean'))} ± {_fmt(m.get('sd'))}",
                            _fmt((s.get("delta") or {}).get(metric), "+.2f"),
                            f"{_fmt(c.get('score'))} "
                            f"[{_fmt(c.get('ci_low'))}, {_fmt(c.get('ci_high'))}]",
                            _fmt(c.get("p_bs"), ".4f"),
                            _fmt(c.get("p_ar"), ".4f"),
                        ]
                    )
                out.append(
                    (
                        f"{pair}: mean ± sd over seeds and paired tests ({rel})",
                        _table(
                            [
                                "system",
                                "seeds",
                                f"{metric} mean ± sd",
                                "Δ vs baseline",
                                "concat [95% CI]",
                                "p(bs)",
                                "p(ar)",
                            ],
                            rows,
                            f"table-{_slug(rel)}-{pair}",
                        ),
                    )
                )
        elif rel.endswith("demo_compare.json"):
            rows = [
                [
                    s.get("name"),
                    _fmt(s.get("score")),
                    _fmt(s.get("delta"), "+.2f"),
                    f"[{_fmt(s.get('ci_low'))}, {_fmt(s.get('ci_high'))}]",
                    _fmt(s.get("p_bs"), ".4f"),
                    _fmt(s.get("p_ar"), ".4f"),
                ]
                for s in d.get("systems") or []
            ]
            out.append(
                (
                    f"BLEU and paired tests ({rel})",
                    _table(
                        ["system", d.get("metric", "score"), "Δ", "95% CI", "p(bs)", "p(ar)"],
                        rows,
                        f"table-{_slug(rel)}",
                    ),
                )
            )
        elif rel.endswith("ablation.json"):
            cells = d.get("cells") or {}
            rows = [
                [
                    c,
                    cells[c].get("system"),
                    cells[c].get("n_seeds"),
                    f"{_fmt(cells[c].get('mean'))} ± {_fmt(cells[c].get('sd'))}",
                    ", ".join(_fmt(v) for v in cells[c].get("values") or []),
                ]
                for c in cells
            ]
            out.append(
                (
                    f"2x2 cells ({rel})",
                    _table(
                        ["cell", "system", "seeds", "mean ± sd", "per seed"],
                        rows,
                        f"table-{_slug(rel)}-cells",
                    ),
                )
            )
            sig = d.get("significance") or {}
            rows = [
                [
                    k,
                    _fmt(v, "+.3f"),
                    (sig.get(k) or {}).get("description", ""),
                    _fmt((sig.get(k) or {}).get("p_ar"), ".4f", "not tested"),
                ]
                for k, v in (d.get("effects") or {}).items()
                if not isinstance(v, Mapping)
            ]
            out.append(
                (
                    f"2x2 effects ({rel})",
                    _table(
                        ["effect", "BLEU", "comparison", "p(ar)"],
                        rows,
                        f"table-{_slug(rel)}-effects",
                    ),
                )
            )
        elif rel.endswith("lr_sweep.json"):
            rows = [
                [
                    s.get("system"),
                    _fmt(s.get("lr_sensitivity"), ".3f"),
                    s.get("best_lr"),
                    _fmt(s.get("best_loss"), ".3f"),
                    s.get("n_runs"),
                    s.get("n_diverged"),
                ]
                for s in d.get("systems") or []
            ]
            out.append(
                (
                    f"LR sensitivity ({rel})",
                    _table(
                        ["system", "LR sensitivity", "best lr", "best loss", "runs", "diverged"],
                        rows,
                        f"table-{_slug(rel)}",
                    ),
                )
            )
    return out + ([runs_table] if runs_table else [])


# ----------------------------------------------------------------------------- the page
def build_report(results_dir, attention=None) -> dict:
    """Everything a page shows, as JSON-safe data.

    Args:
        results_dir: a results directory (e.g. ``results/cpu-proxy-fast/gl-en``).
        attention: an ``attention.json`` of ``qknorm_model_tools.attention_dump`` to show (default:
            the one in the directory, if any).

    Returns:
        ``{"title", "results_dir", "sources": {rel: JSON}, "figures": [{"id", "title",
        "caption", "spec": plotly figure}], "tables": [(title, html)], "notes": [str],
        "attention": JSON or None}``.

    Raises:
        ReportInputError: see :func:`collect_sources`; an unreadable ``attention`` file.
    """
    root = Path(results_dir)
    sources = collect_sources(root)
    att = None
    if attention is not None:
        try:
            att = json.loads(Path(attention).read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ReportInputError(
                f"cannot read attention file {str(attention)!r}: {exc}"
            ) from None
    else:
        att = next((v for k, v in sources.items() if k.endswith("attention.json")), None)
    sources = {k: v for k, v in sources.items() if not k.endswith("attention.json")}
    run_figs, notes = _run_figures(root, sources)
    figures = (
        _bleu_ci_figures(sources) + _ablation_figures(sources) + run_figs + _lr_figures(sources)
    )
    present = {k.rsplit("/", 1)[-1] for k in sources}
    if not present & {"aggregate.json", "demo_compare.json", "ablation.json"}:
        notes.append(
            "no aggregate.json / demo_compare.json / ablation.json here: no BLEU CIs or p-values."
        )
    if att is None:
        notes.append(
            "no attention.json here: the attention viewer is empty. Make one from two checkpoints "
            "with: python -m qknorm_model_tools.attention_dump QKNORM.pt BASELINE.pt "
            f"--data BIN_DIR --sentences 0,1,2 -o {root.as_posix()}/attention.json "
            "(docs/report.md)."
        )
    title = f"fairseq_qknorm results: {root.as_posix().rstrip('/')}"
    return _clean(
        {
            "title": title,
            "results_dir": root.as_posix(),
            "sources": sources,
            "figures": figures,
            "tables": _tables(sources),
            "notes": notes,
            "attention": att,
        }
    )


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0 auto;
max-width:1250px;padding:0 16px 40px;color:#222}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:2em}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}
td,th{border:1px solid #ddd;padding:3px 7px;text-align:left}th{background:#f3f3f3}
td.num{text-align:right;font-variant-numeric:tabular-nums}.fig{min-height:420px}
.caption{color:#555;font-size:13px;margin:6px 0 22px}.notes li{color:#8a4b00}
.att-controls{margin:8px 0;font-size:14px}.att-controls label{margin-right:12px}
.att-row{display:flex;gap:8px;flex-wrap:wrap}.att-row>div{flex:1 1 560px;min-height:460px}
nav a{margin-right:12px}
"""


def _page_js() -> str:
    """The page's own script (``qknorm_tools/report.js``, shipped as package data)."""
    return resources.files("qknorm_tools").joinpath("report.js").read_text(encoding="utf-8")


def _json_for_script(obj) -> str:
    """JSON to place inside ``<script>``: ``</`` escaped so no string can close the tag."""
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")


def render_html(report: Mapping, plotlyjs: str | None = None) -> str:
    """The page (a complete HTML document) of :func:`build_report`'s data.

    Args:
        report: the data of :func:`build_report`.
        plotlyjs: the plotly.js source to inline (default: the ``plotly`` package's bundle).

    Raises:
        ReportInputError: plotly is not installed (``pip install -e .[report]``).
    """
    if plotlyjs is None:
        try:
            from plotly.offline import get_plotlyjs
        except ImportError:
            raise ReportInputError(
                "the report needs the plotly package: pip install -e '.[report]' (or make install)"
            ) from None
        plotlyjs = get_plotlyjs()
    esc = html.escape
    figs = {f["id"]: f for f in report["figures"]}
    sections = []

    def figure_block(f):
        cap = f'<p class="caption">{esc(f["caption"])}</p>' if f.get("caption") else ""
        return f'<div class="fig" id="fig-{esc(f["id"])}"></div>{cap}'

    groups = [
        ("results", "Results tables", None),
        ("bleu", "BLEU with confidence intervals and p-values", ("bleu-",)),
        ("ablation", "The 2x2 ablation", ("ablation-",)),
        (
            "curves",
            "Training and dev curves, g per module, max attention logit",
            ("curves", "g-", "maxlogit-"),
        ),
        ("lr", "LR sweep", ("lr-",)),
        ("attention", "Attention viewer", None),
    ]
    shown = [(g, t, p) for g, t, p in groups if p is None or any(fid.startswith(p) for fid in figs)]
    nav = " ".join(f'<a href="#{g}">{esc(t)}</a>' for g, t, _ in shown)
    notes = "".join(f"<li>{esc(n)}</li>" for n in report["notes"])
    sections.append(f"<h1>{esc(report['title'])}</h1><nav>{nav}</nav>")
    sections.append(
        "<p>Sources: " + ", ".join(f"<code>{esc(k)}</code>" for k in report["sources"]) + ". "
        "Click a legend entry to hide or show a system, seed or run (double-click: only it); "
        "hover a point for its run.</p>"
    )
    if notes:
        sections.append(
            f'<h2 id="missing">What this page cannot show</h2><ul class="notes">{notes}</ul>'
        )
    summary = [(t, h) for t, h in report["tables"] if not t.startswith("Runs")]
    runs = [(t, h) for t, h in report["tables"] if t.startswith("Runs")]
    tables = "".join(f"<h3>{esc(t)}</h3>{h}" for t, h in summary)
    sections.append(
        f'<h2 id="results">Results tables</h2>{tables or "<p>No summary tables.</p>"}'
        + ('<p>Every run: <a href="#runs">the records</a>.</p>' if runs else "")
    )
    for gid, title, prefixes in shown:
        if prefixes is not None:  # sections without figures are left out (notes say why)
            blocks = [figure_block(f) for fid, f in figs.items() if fid.startswith(prefixes)]
            sections.append(f'<h2 id="{gid}">{esc(title)}</h2>' + "".join(blocks))
    att = report.get("attention")
    if att:
        sections.append(
            '<h2 id="attention">Attention viewer</h2>'
            f"<p>{esc(str(att.get('target', '')))} of "
            f"<code>{esc(str(att.get('subset', '')))}</code> "
            "sentences; logits are the pre-softmax values each model's attention computed (QKNorm: "
            "g cos(q, k), bounded by g; dot product: q.k/sqrt(d)).</p>"
            '<div class="att-controls"><label>sentence <select id="att-sentence"></select></label>'
            '<label>module <select id="att-module"></select></label>'
            '<label>head <select id="att-head"></select></label>'
            '<label>show <select id="att-value"></select></label>'
            '<label>left <select id="att-model-a"></select></label>'
            '<label>right <select id="att-model-b"></select></label></div>'
            '<div class="att-row"><div id="att-a"></div><div id="att-b"></div></div>'
        )
    else:
        sections.append(
            '<h2 id="attention">Attention viewer</h2><p>No attention.json (see above).</p>'
        )
    for t, h in runs:
        sections.append(f'<h2 id="runs">{esc(t)}</h2>{h}')
    page_data = {
        k: report[k] for k in ("title", "results_dir", "sources", "figures", "notes", "attention")
    }
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(report['title'])}</title><style>{_CSS}</style>"
        f"<script>{_page_js()}</script>"
        f'<script type="text/javascript">{plotlyjs}</script></head><body>'
        + "\n".join(sections)
        + f'<script type="application/json" id="{DATA_ID}">{_json_for_script(page_data)}</script>'
        "</body></html>\n"
    )


def write_report(results_dir, out=None, attention=None) -> Path:
    """Build and write the page of ``results_dir`` (default ``results_dir/report.html``).

    Written to a temporary name first, then renamed: a failure leaves the previous page.

    Raises:
        ReportInputError: see :func:`build_report` and :func:`render_html`.
    """
    report = build_report(results_dir, attention)
    try:
        import plotly.graph_objects as go
    except ImportError:
        go = None
    if go is not None:
        for f in report["figures"]:
            go.Figure(f["spec"])  # plotly validates every property (ValueError on a typo)
    page = render_html(report)
    out = Path(out) if out is not None else Path(results_dir) / "report.html"
    try:
        write_text_atomic(out, page)
    except OutputError as exc:
        raise ReportInputError(str(exc)) from None
    return out


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser (``--help`` lists every option)."""
    p = argparse.ArgumentParser(
        prog="python -m qknorm_tools.report",
        description="Write a self-contained interactive HTML report per results directory.",
    )
    p.add_argument("results_dirs", nargs="+", metavar="RESULTS_DIR")
    p.add_argument(
        "-o", "--output", help="the page to write (one RESULTS_DIR only; default DIR/report.html)"
    )
    p.add_argument(
        "--attention", help="an attention_dump JSON to show (default DIR/attention.json)"
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: 0 on success, 1 on bad input (message names the file), 2 on usage errors."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.output and len(args.results_dirs) > 1:
        parser.error(
            "-o/--output takes one RESULTS_DIR; without it each page goes to DIR/report.html"
        )
    status = 0
    for d in args.results_dirs:
        try:
            out = write_report(d, args.output, args.attention)
        except ReportInputError as exc:
            print(f"error: {exc}", file=sys.stderr)
            status = 1
            continue
        size = out.stat().st_size / 2**20
        print(f"wrote {out} ({size:.1f} MiB)", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
