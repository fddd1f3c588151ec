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
  effects (:mod:`qknorm_tools.ablation`) as a forest plot: each estimate with its 95% CI over
  seeds (:func:`seed_interval`), the minimum detectable effect where the file has it, and two
  p-values named by what they test (seeds; approximate randomization over sentences);
* ``lr_sweep.json``: final dev loss and max attention logit against the peak learning rate
  per system and seed, the max attention logit over training per run, LR sensitivity
  (Wortsman et al. 2023, arXiv:2309.14322, Sec. 2.2 and Fig. 1);
* ``attention.json`` (``python -m qknorm_model_tools.attention_dump``, checked against its schema
  by :func:`validate_attention`): a heatmap viewer of the logits / probabilities of every layer
  and head, models side by side, entropy in the hover.

A system has one colour in every figure of every page (:data:`SYSTEM_COLORS`); a series of one
point is a marker; BLEU axes span the data, not 0 to the data; a directory with several records
files (an LR sweep per model size) gets its run charts once per file.

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

from .exits import die_usage, fail
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
    "ATTENTION_FORMAT",
    "SYSTEM_COLORS",
    "ReportInputError",
    "build_report",
    "collect_sources",
    "main",
    "render_html",
    "seed_interval",
    "seed_tests",
    "validate_attention",
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
_NUM = re.compile(r"^[-+\[]{0,2}[0-9.–][0-9.,eE+\-± \[\]–]*$")
#: the 2x2 cells in the ablation's order: a=(LN,dot), b=(LN,QK), c=(SN,dot), d=(SN,QK)
CELLS = ("layernorm_dot", "layernorm_qknorm", "scalenorm_dot", "scalenorm_qknorm")


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


#: the format tag of ``qknorm_model_tools.attention_dump`` (its ``FORMAT``; that module imports
#: torch, so the tag is repeated here and a test keeps the two equal)
ATTENTION_FORMAT = "qknorm-attention/1"


def _shape(x, depth: int) -> list[int] | None:
    """The sizes of a ``depth``-deep rectangular nested list, None when it is not one."""
    if depth == 0:
        return [] if x is None or _finite(x) is not None else None
    if not isinstance(x, list) or not x:
        return None
    inner = [_shape(v, depth - 1) for v in x]
    if any(i is None or i != inner[0] for i in inner):
        return None
    return [len(x), *inner[0]]


def validate_attention(att, path) -> None:
    """Check an attention dump against the schema ``qknorm_model_tools.attention_dump`` writes.

    ``{"format": "qknorm-attention/1", "models": [{"name", "sentences": [{"index",
    "src_tokens", "tgt_tokens", "modules": {name: {"kind", "qk_norm_type", "g", "logits",
    "probs", "entropy"}}}]}]}``: every model with the same sentences, ``logits`` and ``probs``
    ``[head][query][key]`` and ``entropy`` ``[head][query]`` sized by the tokens (queries and
    keys: source tokens in the encoder, target tokens in decoder self-attention, target x
    source in encoder-decoder attention); masked logits may be null.

    Raises:
        ReportInputError: naming ``path`` and the first thing missing or malformed.
    """

    def bad(where: str, what: str):
        raise ReportInputError(
            f"attention file {str(path)!r} is not an attention dump of "
            f"qknorm_model_tools.attention_dump ({ATTENTION_FORMAT}): {where}: {what}"
        )

    if not isinstance(att, Mapping):
        bad("top level", f"expected an object, got {type(att).__name__}")
    if att.get("format") != ATTENTION_FORMAT:
        bad("format", f"expected {ATTENTION_FORMAT!r}, got {att.get('format')!r}")
    models = att.get("models")
    if not isinstance(models, list) or not models:
        bad("models", "missing or empty (a list of models)")
    first_index = None
    for i, m in enumerate(models):
        where = f"models[{i}]"
        if not isinstance(m, Mapping) or not isinstance(m.get("name"), str):
            bad(where, "missing name")
        sents = m.get("sentences")
        if not isinstance(sents, list) or not sents:
            bad(f"{where}.sentences", "missing or empty")
        index = [s.get("index") if isinstance(s, Mapping) else None for s in sents]
        first_index = index if first_index is None else first_index
        if index != first_index:
            bad(f"{where}.sentences", f"indices {index} differ from models[0]'s {first_index}")
        for j, s in enumerate(sents):
            sw = f"{where}.sentences[{j}]"
            if not isinstance(s.get("index"), int):
                bad(sw, "missing index")
            toks = {}
            for key in ("src_tokens", "tgt_tokens"):
                t = s.get(key)
                if not isinstance(t, list) or not t or not all(isinstance(x, str) for x in t):
                    bad(f"{sw}.{key}", "missing or not a list of tokens")
                toks[key] = len(t)
            mods = s.get("modules")
            if not isinstance(mods, Mapping) or not mods:
                bad(f"{sw}.modules", "missing or empty")
            for name, mod in mods.items():
                mw = f"{sw}.modules.{name}"
                if not isinstance(mod, Mapping):
                    bad(mw, "not an object")
                for key in ("kind", "qk_norm_type"):
                    if not isinstance(mod.get(key), str):
                        bad(f"{mw}.{key}", "missing")
                g = mod.get("g")
                if not (g is None or _finite(g) is not None or _shape(g, 1) is not None):
                    bad(f"{mw}.g", "not null, a number or a list of numbers")
                q = toks["src_tokens"] if name.startswith("enc") else toks["tgt_tokens"]
                k = toks["src_tokens"] if name.startswith("enc") or "cross" in name else q
                heads = None
                for key, depth in (("probs", 3), ("logits", 3), ("entropy", 2)):
                    shape = _shape(mod.get(key), depth)
                    if shape is None:
                        dims = "[head][query][key]" if depth == 3 else "[head][query]"
                        bad(f"{mw}.{key}", f"missing or not a rectangular {dims} list of numbers")
                    heads = shape[0] if heads is None else heads
                    want = [heads, q, k][:depth]
                    if shape != want:
                        bad(
                            f"{mw}.{key}",
                            f"shape {shape}, expected {want} (heads, queries"
                            f"{', keys' if depth == 3 else ''})",
                        )


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


def _series_trace(r: Mapping, name: str, xs, ys, source, what: str, **extra) -> dict:
    """One run's series in its system's colour; markers where a line could not be seen."""
    return {
        "type": "scatter",
        "mode": _mode(len(xs)),
        "name": name,
        "legendgroup": _run_label(r),
        "x": list(xs),
        "y": [_finite(y) for y in ys],
        "hovertext": [_hover(r)] * len(xs),
        "hoverinfo": "text+x+y",
        **_style(r.get("system"), size=5),
        "meta": {"source": str(source), "system": r.get("system"), "what": what},
        **extra,
    }


def _layers(records: Sequence[Mapping]) -> str:
    """``"2+2 layers"`` from the attention modules a group's runs name (``qk_norm_g_final``)."""
    sizes = set()
    for r in records:
        mods = list(r.get("qk_norm_g_final") or {})
        enc = {m.split("_")[0] for m in mods if m.startswith("enc")}
        dec = {m.split("_")[0] for m in mods if m.startswith("dec")}
        if enc or dec:
            sizes.add(f"{len(enc)}+{len(dec)}")
    return f", {'/'.join(sorted(sizes))} layers" if sizes else ""


def _run_group_figures(
    results_dir: Path, rel: str, group: list, suffix: str, title: str
) -> tuple[list[dict], list[str], list[str]]:
    """The curves, g and max-logit figures of the runs of one records file (one model size).

    Returns:
        ``(figures, notes, train.log paths not found)``.
    """
    figs, notes, missing = [], [], []
    loss, g_traces, logit, g_final = [], [], [], []
    for d, r in group:
        label = _run_label(r)
        log = _train_log(results_dir, rel, d, r)
        records = None
        if log is not None and log.is_file():
            try:
                records = parse_log(log)
            except LogInputError as exc:
                notes.append(f"{label}: {exc}")
        if records is None:
            missing.append(str(r.get("train_log") or "(no train_log)"))
        else:
            for kind, dash in (("train_inner", "solid"), ("valid", "dot")):
                xs, ys = series(records, kind, "loss")
                if xs:
                    t = _series_trace(r, f"{label} {kind}", xs, ys, log, f"{kind} loss")
                    t["line"]["dash"] = dash
                    loss.append(t)
            g_kind = "valid" if metric_keys(records, G_PREFIX, "valid") else "train_inner"
            for key in metric_keys(records, G_PREFIX, g_kind):
                xs, ys = series(records, g_kind, key)
                g_traces.append(
                    _series_trace(
                        r,
                        f"{label} {key[len(G_PREFIX) :]}",
                        xs,
                        ys,
                        log,
                        key,
                        legendgrouptitle={"text": label},
                    )
                )
            xs, ys = max_attention_logit_series(records)
            if xs:
                logit.append(_series_trace(r, label, xs, ys, log, "max attention logit"))
        gf = r.get("qk_norm_g_final") or {}
        if gf:
            mods = list(gf)
            g_final.append(
                {
                    "type": "scatter",
                    "mode": _mode(len(mods)),
                    "name": label,
                    "legendgroup": str(r.get("system")),
                    "x": mods,
                    "y": [gf[m] for m in mods],
                    "hovertext": [_hover(r) + f"<br>{m}: g {gf[m]}" for m in mods],
                    "hoverinfo": "text",
                    **_style(r.get("system"), size=7),
                    "meta": {
                        "source": rel,
                        "what": "qk_norm_g_final",
                        "run": label,
                        "system": r.get("system"),
                    },
                }
            )
            if _finite(r.get("qk_norm_g0")) is not None and not any(
                t.get("name") == "g0" for t in g_final
            ):
                g_final.append(
                    {
                        "type": "scatter",
                        "mode": _mode(len(mods)),
                        "name": "g0",
                        "x": mods,
                        "y": [r["qk_norm_g0"]] * len(mods),
                        "line": {"dash": "dash", "color": REFERENCE_COLOR},
                        "marker": {"color": REFERENCE_COLOR, "size": 4},
                        "hoverinfo": "y+name",
                        "meta": {"what": "g0"},
                    }
                )
    update = {"xaxis": {"title": {"text": "update"}}}
    if loss:
        figs.append(
            _fig(
                f"curves{suffix}",
                f"training (solid) and dev (dotted) loss{title}",
                loss,
                {**update, "yaxis": {"title": {"text": "loss"}}},
                "Markers where a run has few points (a single dev loss cannot be a line).",
            )
        )
    if g_traces:
        figs.append(
            _fig(
                f"g-curves{suffix}",
                f"QKNorm g per module over training{title}",
                g_traces,
                {**update, "yaxis": {"title": {"text": "g"}}},
                "One trace per run and attention module, in its system's colour.",
            )
        )
    if logit:
        figs.append(
            _fig(
                f"maxlogit-curves{suffix}",
                f"max attention logit over training{title}",
                logit,
                {**update, "yaxis": {"type": "log", "title": {"text": "max |logit|"}}},
            )
        )
    if g_final:
        figs.append(
            _fig(
                f"g-final{suffix}",
                f"QKNorm g per module at checkpoint_best (records){title}",
                g_final,
                {
                    "xaxis": {"title": {"text": "attention module"}},
                    "yaxis": {"title": {"text": "g"}},
                },
                "From the run records (qk_norm_g_final); dashed: g0 = log2(L^2 - L), "
                "Henry et al. 2020 Eq. 4.",
            )
        )
    return figs, notes, missing


def _run_figures(results_dir: Path, sources) -> tuple[list[dict], list[str]]:
    """Curves from train logs where present, final g per module from the records; notes.

    One set of figures per records file (``runs.json``, else ``demo.json``): a directory with
    several (an LR sweep per model size) gets one chart per size, never models of different
    sizes on one axis.
    """
    groups: dict[str, list] = {}
    for rel, d, r in _records(sources):
        groups.setdefault(rel, []).append((d, r))
    figs, notes = [], []
    for rel, group in groups.items():
        if len(groups) == 1:
            suffix, title = "", ""
        else:
            suffix = "-" + _slug(rel)
            title = f" ({rel}{_layers([r for _, r in group])})"
        f, n, missing = _run_group_figures(results_dir, rel, group, suffix, title)
        figs += f
        notes += n
        if missing:
            notes.append(
                f"{len(missing)} run(s) of {rel}: train.log not found (e.g. {missing[0]}): the "
                "run directories are not in this checkout, so their training / dev curves, g "
                "over training and max attention logit over training are not shown; the final "
                "values of the records are."
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
            effects = _effect_rows(d)
            with_mde = any(r["mde"] is not None for r in effects)
            rows = [
                [
                    r["effect"],
                    _fmt(r["estimate"], "+.3f"),
                    r["description"],
                    f"[{r['ci'][0]:+.2f}, {r['ci'][1]:+.2f}]" if r["ci"] else "–",
                    _fmt(r["p_seeds"], ".3f", "not tested"),
                    _fmt(r["p_ar"], ".4f", "not tested"),
                    *([_fmt(r["mde"], ".2f")] if with_mde else []),
                ]
                for r in effects
            ]
            label = _seed_label(next((r["test"] for r in effects if r["test"]), None))
            out.append(
                (
                    f"2x2 effects ({rel})",
                    _table(
                        [
                            "effect",
                            "BLEU",
                            "comparison",
                            "95% CI over seeds",
                            f"p, seed-level ({label})",
                            "p, sentences (approximate randomization)",
                            *(["MDE (80% power)"] if with_mde else []),
                        ],
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
        validate_attention(att, attention)
    else:
        found = [(k, v) for k, v in sources.items() if k.endswith("attention.json")]
        for k, v in found:
            validate_attention(v, root / k)
        att = found[0][1] if found else None
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

    if report.get("figures_only"):  # write_report(figure=...): the figures, nothing else
        return _document(
            report,
            plotlyjs,
            [f"<h1>{esc(report['title'])}</h1>"] + [figure_block(f) for f in figs.values()],
        )
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
    return _document(report, plotlyjs, sections)


def _document(report: Mapping, plotlyjs: str, sections: Sequence[str]) -> str:
    """The HTML document: style, scripts, ``sections`` and the page's data as JSON."""
    esc = html.escape
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


def write_report(results_dir, out=None, attention=None, figure=None) -> Path:
    """Build and write the page of ``results_dir`` (default ``results_dir/report.html``).

    Written to a temporary name first, then renamed: a failure leaves the previous page.
    ``figure``: a figure id prefix (e.g. ``ablation-effects``): the page then holds only those
    figures under its title (no tables, notes or attention viewer), for a screenshot.

    Raises:
        ReportInputError: see :func:`build_report` and :func:`render_html`; no figure id starts
            with ``figure``.
    """
    report = build_report(results_dir, attention)
    if figure is not None:
        picked = [f for f in report["figures"] if f["id"].startswith(figure)]
        if not picked:
            raise ReportInputError(
                f"no figure of the page of {str(results_dir)!r} has an id starting with "
                f"{figure!r}; its figures: {', '.join(f['id'] for f in report['figures'])}"
            )
        report = {
            **report,
            "figures": picked,
            "tables": [],
            "notes": [],
            "attention": None,
            "figures_only": True,
        }
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
    p.add_argument(
        "--figure",
        metavar="ID_PREFIX",
        help="only the figures whose id starts with ID_PREFIX (e.g. ablation-effects), without "
        "tables, notes or attention viewer: a page for a screenshot",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (:mod:`~.exits`): 0 done, 1 bad input (a missing results dir too), 2 usage."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.output and len(args.results_dirs) > 1:
        die_usage(
            parser,
            "-o/--output takes one RESULTS_DIR; without it each page goes to DIR/report.html",
        )
    status = 0
    for d in args.results_dirs:
        try:
            out = write_report(d, args.output, args.attention, args.figure)
        except ReportInputError as exc:
            status = fail(exc)
            continue
        size = out.stat().st_size / 2**20
        print(f"wrote {out} ({size:.1f} MiB)", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
