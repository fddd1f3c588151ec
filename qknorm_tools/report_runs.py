"""The report's run charts of ``runs.json`` / ``demo.json`` (run records).

The training and dev curves, ``g`` per module and the max attention logit over training are
read from each run's ``train.log`` (:mod:`qknorm_tools.trainlog`) when the run directory
exists; otherwise the page says which curves are missing and shows what the records hold
(final ``g`` per module against ``g0``). A directory with several records files gets its run
charts once per file.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from .report_sources import _finite, _hover, _records, _run_label, _train_log
from .report_style import REFERENCE_COLOR, _fig, _mode, _slug, _style
from .trainlog import (
    G_PREFIX,
    LogInputError,
    max_attention_logit_series,
    metric_keys,
    parse_log,
    series,
)


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
