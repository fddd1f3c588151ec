"""Figures of the experiments (matplotlib with the Agg backend).

numpy and matplotlib are imported when a figure is drawn; torch and fairseq never are.

``python -m qknorm_tools.plots <command> --help``:

``curves``
    train and valid loss vs ``num_updates`` for several runs.
``g``
    trajectories of the learned QKNorm scales (log keys ``qknorm_g_<module>``).
``health``
    attention health statistics (``attn_entropy_<module>``, ``attn_maxlogit_<module>``).
``heatmap``
    attention matrix (tgt_len x src_len) of one sentence.
``bleu-bars``
    BLEU bar chart with 95% bootstrap CIs from ``evaluate compare`` / ``evaluate aggregate``
    JSON.
``lr-loss``, ``lr-maxlogit``, ``lr-bleu``
    the LR sweep (``evaluate lr-sensitivity`` JSON): final dev loss vs peak learning rate, max
    attention logit over training at each learning rate, test BLEU vs learning rate.

Training logs are ``fairseq-train`` logs, parsed by :mod:`qknorm_tools.trainlog`. Errors are
raised as :class:`PlotInputError` (a ``ValueError``) naming the file; the command line prints
``error: ...`` and exits with status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import sys
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

from .exits import fail
from .textio import OutputError, atomic_output, output_error_message
from .trainlog import LogInputError, dev_curve, metric_keys, parse_log, series

__all__ = [
    "PlotInputError",
    "build_parser",
    "load_attention",
    "main",
    "bleu_bars_figure",
    "plot_bleu_bars",
    "plot_curves",
    "plot_g",
    "plot_health",
    "plot_heatmap",
    "prefixed_figure",
    "plot_lr_bleu",
    "plot_lr_loss",
    "plot_lr_max_logit",
]


class PlotInputError(LogInputError):
    """Unusable input (no records in a log, bad attention matrix, ...)."""


def _pyplot():
    logging.getLogger("matplotlib").setLevel(logging.WARNING)
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def _named_logs(named: Mapping[str, str]) -> dict[str, list]:
    return {name: parse_log(path) for name, path in named.items()}


def _save(fig, out) -> str:
    out = Path(out)
    try:
        with atomic_output(out) as tmp:  # the format from the output's own name
            fig.savefig(tmp, dpi=130, bbox_inches="tight", format=out.suffix[1:] or "png")
    finally:
        _pyplot().close(fig)
    return str(out)


# ---------------------------------------------------------------------------
# figures from logs
# ---------------------------------------------------------------------------


def plot_curves(
    named_logs: Mapping[str, str], out, key: str = "loss", valid_subset: str = "valid"
) -> str:
    """Train (``train_inner``, else end-of-epoch ``train``) and valid ``key`` vs num_updates.

    Args:
        named_logs: run name -> log path (several runs on one figure).
        out: PNG to write.
        key: metric, default ``loss`` (fairseq's label-smoothed loss in base 2); ``nll_loss``
            is another useful choice.
        valid_subset: the validation subset shown (falls back to any validation record).

    Returns:
        The path of the PNG written.

    Raises:
        PlotInputError: a log without the metric.
    """
    plt = _pyplot()
    logs = _named_logs(named_logs)
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2))
    for idx, (name, recs) in enumerate(logs.items()):
        color = f"C{idx % 10}"
        x, y = series(recs, "train_inner", key)
        if len(x) == 0:
            x, y = series(recs, "train", key)
        vrecs = [r for r in recs if r["kind"] == "valid" and r["subset"] == valid_subset] or [
            r for r in recs if r["kind"] == "valid"
        ]
        vx, vy = series(vrecs, "valid", key)
        if len(x) == 0 and len(vx) == 0:
            raise PlotInputError(
                f"log {str(named_logs[name])!r} ({name}) has no {key!r} with num_updates"
            )
        # a line needs two points: a run with one train_inner point is shown as a marker
        axes[0].plot(x, y, color=color, label=name, lw=1.4, marker="o" if len(x) < 2 else "", ms=4)
        axes[1].plot(vx, vy, color=color, label=name, marker="o", ms=3, lw=1.4)
    for ax, title in zip(axes, ("train", f"valid ({valid_subset})")):
        ax.set_xlabel("num_updates")
        ax.set_ylabel(key)
        ax.set_title(f"{title} {key}")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return _save(fig, out)


def plot_calibration(named_logs: Mapping[str, str], out) -> str:
    """Dev loss against updates and against wall-clock minutes, one line per run.

    For choosing a profile's size (docs/convergence.md): the best validation of each run is
    starred, its last one (where the stopping rule, or the run, ended) crossed.

    Args:
        named_logs: run name -> fairseq-train log path.
        out: PNG to write.

    Returns:
        The path of the PNG written.

    Raises:
        PlotInputError: a log without dev-loss validations.
    """
    plt = _pyplot()
    fig, axes = plt.subplots(1, 2, figsize=(11, 4.2), sharey=True)
    for idx, (name, recs) in enumerate(_named_logs(named_logs).items()):
        pts = [p for p in dev_curve(recs) if p["loss"] is not None]
        if not pts:
            raise PlotInputError(f"log {str(named_logs[name])!r} ({name}) has no dev loss")
        color = f"C{idx % 10}"
        best = min(range(len(pts)), key=lambda i: pts[i]["loss"])
        minutes = [None if p["wall"] is None else p["wall"] / 60 for p in pts]
        xs = {"updates": [p["updates"] for p in pts], "minutes": minutes}
        ys = [p["loss"] for p in pts]
        for ax, key in zip(axes, ("updates", "minutes")):
            ax.plot(xs[key], ys, color=color, marker="o", ms=2.5, lw=1.3, label=name)
            ax.plot([xs[key][best]], [ys[best]], color=color, marker="*", ms=12, ls="")
            ax.plot([xs[key][-1]], [ys[-1]], color=color, marker="x", ms=9, ls="")
    for ax, label in zip(axes, ("num_updates", "wall-clock minutes")):
        ax.set_xlabel(label)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    axes[0].set_ylabel("dev loss (label-smoothed, base 2)")
    axes[0].set_title("dev loss per validation (* best, x last)")
    fig.tight_layout()
    return _save(fig, out)


#: the log records each ``--split`` reads, in order of preference
SPLIT_KINDS = {
    "auto": ("train_inner", "train", "valid"),
    "train": ("train_inner", "train"),
    "valid": ("valid",),
}
#: how a panel title names the records it shows
KIND_TITLES = {
    "train_inner": "training (train_inner lines)",
    "train": "training (end-of-epoch averages)",
    "valid": "validation on dev (valid lines)",
}


def _common_kind(logs: Mapping[str, list], prefixes: Sequence[str], split: str) -> str | None:
    """The one record kind all panels show.

    The first of ``SPLIT_KINDS[split]`` that every log with any ``prefixes`` key has, else the
    first that any log has; None when no log has any.
    """
    order = SPLIT_KINDS[split]
    having = [
        recs
        for recs in logs.values()
        if any(metric_keys(recs, p, k) for p in prefixes for k in order)
    ]
    for need_all in (True, False):
        for kind in order:
            found = [any(metric_keys(recs, p, kind) for p in prefixes) for recs in having]
            if found and (all(found) if need_all else any(found)):
                return kind
    return None


def _no_offset(ax) -> None:
    """Plain tick labels (``13.02``), never matplotlib's offset notation (``+1.3e1``)."""
    ax.ticklabel_format(axis="y", useOffset=False, style="plain")


def prefixed_figure(
    named_logs: Mapping[str, str],
    prefixes: Sequence[tuple[str, str]],
    split: str = "auto",
    what: str = "",
):
    """The figure of :func:`plot_g` / :func:`plot_health` (rows: prefixes, columns: runs).

    Every panel shows the same record kind (:func:`_common_kind`), named in its title; the
    y axes have no offset label.

    Returns:
        The matplotlib ``Figure`` (the caller saves and closes it).

    Raises:
        PlotInputError: no such keys with ``num_updates`` in any log.
    """
    plt = _pyplot()
    logs = _named_logs(named_logs)
    kind = _common_kind(logs, [p for p, _ in prefixes], split)
    if kind is None:
        raise PlotInputError(
            f"no {what or ', '.join(p for p, _ in prefixes)} keys with num_updates in "
            f"logs {list(named_logs.values())}"
        )
    n_rows, n_cols = len(prefixes), len(logs)
    fig, axes = plt.subplots(n_rows, n_cols, figsize=(5.2 * n_cols, 3.6 * n_rows), squeeze=False)
    for j, (name, recs) in enumerate(logs.items()):
        for i, (prefix, ylabel) in enumerate(prefixes):
            ax = axes[i][j]
            ax.set_title(f"{name}: {KIND_TITLES[kind]}", fontsize=9)
            keys = metric_keys(recs, prefix, kind)
            if not keys:
                ax.text(
                    0.5,
                    0.5,
                    f"no {prefix}* keys in {kind} lines",
                    ha="center",
                    va="center",
                    transform=ax.transAxes,
                )
                continue
            cmap = plt.get_cmap("viridis", max(len(keys), 2))
            for k_i, k in enumerate(keys):
                x, y = series(recs, kind, k)
                ax.plot(
                    x,
                    y,
                    color=cmap(k_i),
                    lw=1.3,
                    label=k[len(prefix) :],
                    marker="o" if len(x) < 30 else None,
                    ms=2.5,
                )
            ax.set_xlabel("num_updates")
            ax.set_ylabel(ylabel)
            _no_offset(ax)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=6, ncol=2 if len(keys) > 8 else 1)
    fig.tight_layout()
    return fig


def _plot_prefixed(
    named_logs: Mapping[str, str],
    prefixes: Sequence[tuple[str, str]],
    out,
    split: str = "auto",
    what: str = "",
) -> str:
    return _save(prefixed_figure(named_logs, prefixes, split, what), out)


def plot_g(named_logs: Mapping[str, str], out, split: str = "auto") -> str:
    """Learned QKNorm scale ``g`` per attention module vs num_updates.

    Keys ``qknorm_g_<module>`` (e.g. ``qknorm_g_enc0_self``, ``qknorm_g_dec2_cross``), one
    line per module, one panel per run.

    Args:
        named_logs: run name -> log path.
        out: PNG to write.
        split: ``auto`` (train_inner, else train, else valid), ``train`` or ``valid``.

    Returns:
        The path of the PNG written.

    Raises:
        PlotInputError: no such keys in any log.
    """
    return _plot_prefixed(named_logs, [("qknorm_g_", "QKNorm scale g")], out, split, "qknorm_g_*")


def plot_health(named_logs: Mapping[str, str], out, split: str = "auto") -> str:
    """Attention health vs num_updates: entropy and max logit per module.

    ``attn_entropy_<module>`` (nats) and ``attn_maxlogit_<module>`` (largest pre-softmax
    logit); two rows (entropy, max logit), one column per run, one line per module.

    Args:
        named_logs: run name -> log path.
        out: PNG to write.
        split: ``auto`` (train_inner, else train, else valid), ``train`` or ``valid``.

    Returns:
        The path of the PNG written.

    Raises:
        PlotInputError: no such keys in any log.
    """
    return _plot_prefixed(
        named_logs,
        [("attn_entropy_", "attention entropy"), ("attn_maxlogit_", "max attention logit")],
        out,
        split,
        "attn_entropy_* / attn_maxlogit_*",
    )


# ---------------------------------------------------------------------------
# attention heatmap
# ---------------------------------------------------------------------------


def load_attention(path) -> tuple[object, list[str] | None, list[str] | None]:
    """Load an attention matrix (tgt_len x src_len) from ``.npy`` or ``.json``.

    JSON: a list of rows, or an object with ``attn`` (or ``attention``) and optional ``src`` /
    ``tgt`` token lists (or space-separated strings).

    Returns:
        ``(matrix as a numpy array of shape (tgt_len, src_len), src_tokens or None,
        tgt_tokens or None)``.

    Raises:
        PlotInputError: unreadable file or not a 2-D numeric matrix.
    """
    import numpy as np

    path = Path(path)
    src = tgt = None
    try:
        if path.suffix == ".npy":
            mat = np.load(path, allow_pickle=False)
        else:
            d = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(d, dict):
                mat = d.get("attn", d.get("attention"))
                src, tgt = d.get("src"), d.get("tgt")
                src = src.split() if isinstance(src, str) else src
                tgt = tgt.split() if isinstance(tgt, str) else tgt
            else:
                mat = d
            mat = np.asarray(mat, dtype=float)
    except (OSError, ValueError) as exc:
        raise PlotInputError(f"cannot read attention matrix {str(path)!r}: {exc}") from None
    if mat is None or np.ndim(mat) != 2:
        raise PlotInputError(
            f"attention in {str(path)!r} must be a 2-D (tgt_len x src_len) matrix, "
            f"got shape {np.shape(mat)}"
        )
    return np.asarray(mat, dtype=float), src, tgt


def plot_heatmap(
    attn, src_tokens: Sequence[str] | None, tgt_tokens: Sequence[str] | None, out, title: str = ""
) -> str:
    """Heatmap of one sentence's attention (rows: target tokens, columns: source tokens).

    Args:
        attn: array of shape (tgt_len, src_len).
        src_tokens: column labels (default: indices).
        tgt_tokens: row labels (default: indices).
        out: PNG to write.
        title: figure title.

    Returns:
        The path of the PNG written.

    Raises:
        PlotInputError: token counts do not match the matrix shape.
    """
    import numpy as np

    plt = _pyplot()
    attn = np.asarray(attn, dtype=float)
    t_len, s_len = attn.shape
    if src_tokens is not None and len(src_tokens) != s_len:
        raise PlotInputError(
            f"{len(src_tokens)} source tokens but the matrix has {s_len} columns "
            f"(shape {attn.shape} = tgt_len x src_len)"
        )
    if tgt_tokens is not None and len(tgt_tokens) != t_len:
        raise PlotInputError(
            f"{len(tgt_tokens)} target tokens but the matrix has {t_len} rows "
            f"(shape {attn.shape} = tgt_len x src_len)"
        )
    fig, ax = plt.subplots(figsize=(max(4.0, 0.45 * s_len + 2), max(3.0, 0.4 * t_len + 1.5)))
    im = ax.imshow(
        attn, cmap="Blues", aspect="auto", vmin=0.0, vmax=max(1e-9, float(np.nanmax(attn)))
    )
    ax.set_xticks(range(s_len))
    ax.set_yticks(range(t_len))
    ax.set_xticklabels(
        src_tokens if src_tokens is not None else range(s_len), rotation=60, ha="right", fontsize=8
    )
    ax.set_yticklabels(tgt_tokens if tgt_tokens is not None else range(t_len), fontsize=8)
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    if title:
        ax.set_title(title)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    return _save(fig, out)


# ---------------------------------------------------------------------------
# BLEU bars
# ---------------------------------------------------------------------------


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


# ---------------------------------------------------------------------------
# LR sweep (qknorm_tools.lr_sweep JSON)
# ---------------------------------------------------------------------------


def _load_sweep(sweep) -> Mapping[str, object]:
    if isinstance(sweep, Mapping):
        return sweep
    try:
        d = json.loads(Path(sweep).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise PlotInputError(f"cannot read LR sweep JSON {str(sweep)!r}: {exc}") from None
    if not isinstance(d, dict) or not isinstance(d.get("systems"), list) or "runs" not in d:
        raise PlotInputError(
            f"{str(sweep)!r} is not 'evaluate lr-sensitivity' output (systems, runs)"
        )
    return d


def _sweep_title(d: Mapping[str, object], what: str, title: str) -> str:
    return title or f"{d.get('pair')} ({d.get('profile')}): {what}"


def _lr_axis(ax, lrs: Sequence[float]) -> None:
    ax.set_xscale("log")
    ax.set_xticks(lrs)
    ax.set_xticklabels([f"{lr:.0e}".replace("e-0", "e-") for lr in lrs], fontsize=8)
    ax.minorticks_off()
    ax.set_xlabel("peak learning rate (log scale)")
    ax.grid(alpha=0.3)


def lr_loss_figure(sweep, title: str = ""):
    """The figure of :func:`plot_lr_loss` (a matplotlib ``Figure``, not saved)."""
    plt = _pyplot()
    d = _load_sweep(sweep)
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for j, s in enumerate(d["systems"]):
        color = f"C{j % 10}"
        runs = [r for r in d["runs"] if r["system"] == s["system"]]
        ok = [r for r in runs if r["diverged"] is None]
        div = [r for r in runs if r["diverged"] is not None and r["init_loss"] is not None]
        means = [(p["lr"], p["capped_loss_mean"]) for p in s["points"]]
        means = [(x, y) for x, y in means if y is not None]
        ax.plot(*zip(*means), color=color, lw=1.5, label=s["system"]) if means else None
        ax.scatter([r["lr"] for r in ok], [r["dev_loss"] for r in ok], color=color, s=18, zorder=3)
        ax.scatter(
            [r["lr"] for r in div],
            [r["init_loss"] for r in div],
            color=color,
            marker="x",
            s=40,
            zorder=3,
        )
        init = list(s["init_loss"].values())
        if init:
            ax.axhline(sum(init) / len(init), color=color, lw=0.8, ls=":")
    ax.scatter([], [], color="gray", s=18, label="one seed")
    ax.scatter([], [], color="gray", marker="x", s=40, label="diverged (shown at init loss)")
    ax.plot([], [], color="gray", lw=0.8, ls=":", label="loss at initialization")
    _lr_axis(ax, d["lrs"])
    ax.set_ylabel("final dev loss (bits/token, label-smoothed)")
    ax.set_title(_sweep_title(d, "final dev loss vs learning rate", title), fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_lr_loss(sweep, out, title: str = "") -> str:
    """Final dev loss vs peak learning rate (log x axis).

    One line per system through the mean over seeds of ``min(final loss, loss at
    initialization)``, each seed as a point, diverged runs as crosses at the loss at
    initialization, dotted lines at the loss at initialization.

    Args:
        sweep: ``evaluate lr-sensitivity`` JSON (path or loaded dict).
        out: PNG to write.
        title: figure title (default: pair, profile and what is shown).

    Returns:
        The path of the PNG written.

    Raises:
        PlotInputError: not LR-sweep JSON.
    """
    return _save(lr_loss_figure(sweep, title), out)


def lr_max_logit_figure(sweep, title: str = ""):
    """The figure of :func:`plot_lr_max_logit` (a matplotlib ``Figure``, not saved)."""
    plt = _pyplot()
    d = _load_sweep(sweep)
    lrs = d["lrs"]
    n_cols = min(3, len(lrs))
    n_rows = math.ceil(len(lrs) / n_cols)
    fig, axes = plt.subplots(
        n_rows, n_cols, figsize=(4.2 * n_cols, 3.3 * n_rows), squeeze=False, sharey=True
    )
    names = [s["system"] for s in d["systems"]]
    seeds = sorted({r["seed"] for r in d["runs"]}, key=str)
    any_found = False
    for i, lr in enumerate(lrs):
        ax = axes[i // n_cols][i % n_cols]
        for r in d["runs"]:
            if r["lr"] != lr:
                continue
            pts = [(x, y) for x, y in r["max_attn_logit_series"] if y is not None]
            if not pts:
                continue
            any_found = True
            color = f"C{names.index(r['system']) % 10}"
            ls = "-" if r["seed"] == seeds[0] else "--"
            ax.plot(*zip(*pts), color=color, ls=ls, lw=1.2, marker="o", ms=2.5)
            if r["diverged"] is not None:
                ax.plot(*pts[-1], color=color, marker="x", ms=7)
        ax.set_title(f"lr {lr:g}", fontsize=9)
        ax.set_xlabel("num_updates")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
        if i % n_cols == 0:
            ax.set_ylabel("max attention logit")
    for i in range(len(lrs), n_rows * n_cols):
        axes[i // n_cols][i % n_cols].set_visible(False)
    if not any_found:
        plt.close(fig)
        raise PlotInputError("no attention statistics (attn_maxlogit_*) in the sweep's runs")
    for j, name in enumerate(names):
        axes[0][0].plot([], [], color=f"C{j % 10}", label=name)
    axes[0][0].plot([], [], color="gray", ls="-", label=f"seed {seeds[0]}")
    if len(seeds) > 1:
        axes[0][0].plot([], [], color="gray", ls="--", label="other seeds")
    axes[0][0].plot([], [], color="gray", ls="", marker="x", label="diverged")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(_sweep_title(d, "max attention logit over training", title), fontsize=10)
    fig.tight_layout()
    return fig


def plot_lr_max_logit(sweep, out, title: str = "") -> str:
    """Max attention logit over training, one panel per peak learning rate.

    One line per system and seed: the largest logged ``attn_maxlogit_<module>`` over all
    attention modules (the model's health statistics, ``--attn-stats-interval``), log y axis;
    a cross marks the last logged value of a diverged run.

    Args:
        sweep: ``evaluate lr-sensitivity`` JSON (path or loaded dict).
        out: PNG to write.
        title: figure title.

    Returns:
        The path of the PNG written.

    Raises:
        PlotInputError: not LR-sweep JSON, or no run logged attention statistics.
    """
    return _save(lr_max_logit_figure(sweep, title), out)


def lr_bleu_figure(sweep, metric: str = "bleu_tok", title: str = ""):
    """The figure of :func:`plot_lr_bleu` (a matplotlib ``Figure``, not saved)."""
    plt = _pyplot()
    d = _load_sweep(sweep)
    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for j, s in enumerate(d["systems"]):
        color = f"C{j % 10}"
        ok = [
            r
            for r in d["runs"]
            if r["system"] == s["system"] and r["diverged"] is None and r[metric] is not None
        ]
        by_lr: dict[float, list[float]] = {}
        for r in ok:
            by_lr.setdefault(r["lr"], []).append(r[metric])
        xs = sorted(by_lr)
        ys = [sum(by_lr[x]) / len(by_lr[x]) for x in xs]
        if xs:
            ax.plot(xs, ys, color=color, lw=1.5, label=s["system"])
        ax.scatter([r["lr"] for r in ok], [r[metric] for r in ok], color=color, s=18, zorder=3)
    ax.scatter([], [], color="gray", s=18, label="one seed (diverged runs left out)")
    _lr_axis(ax, d["lrs"])
    ax.set_ylabel(
        {
            "bleu_tok": "test BLEU (tokenized)",
            "bleu": "test sacreBLEU (detokenized)",
            "chrf": "test chrF",
        }.get(metric, metric)
    )
    ax.set_title(_sweep_title(d, "test BLEU vs learning rate", title), fontsize=10)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def plot_lr_sizes(res, out, title: str = "") -> str:
    """LR sensitivity against non-embedding parameters, one line per system (log x axis).

    Wortsman et al. 2023 (arXiv:2309.14322), Fig. 1. ``res``: :func:`.lr_sweep_sizes.size_axis`
    (a dict, or the path of ``lr_sweep_sizes.json``). Returns the path of the PNG written.

    Raises:
        PlotInputError: no system has a point.
    """
    if not isinstance(res, Mapping):
        res = json.loads(Path(res).read_text(encoding="utf-8"))
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(6.0, 4.0))
    drawn = 0
    for s in res.get("systems", []):
        pts = [p for p in s["points"] if p.get("lr_sensitivity") is not None]
        if not pts:
            continue
        x = [p["non_embedding_params"] for p in pts]
        ax.plot(x, [p["lr_sensitivity"] for p in pts], marker="o", label=s["system"])
        drawn += 1
    if not drawn:
        plt.close(fig)
        raise PlotInputError("size axis: no system has an LR sensitivity")
    ax.set_xscale("log")
    ax.set_xlabel("non-embedding parameters")
    ax.set_ylabel("LR sensitivity (dev loss, bits)")
    # the sweep's title names pair, label and axis: wrapped to the axes' width, not clipped
    title = title or f"{res.get('pair') or ''}: LR sensitivity vs model size"
    ax.set_title(textwrap.fill(title, 60), fontsize=10)
    ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _save(fig, out)


def plot_lr_bleu(sweep, out, metric: str = "bleu_tok", title: str = "") -> str:
    """Test BLEU vs peak learning rate (log x axis).

    One line per system through the mean over the seeds that did not diverge, each seed as a
    point.

    Args:
        sweep: ``evaluate lr-sensitivity`` JSON (path or loaded dict).
        out: PNG to write.
        metric: ``bleu_tok`` (default), ``bleu`` or ``chrf``.
        title: figure title.

    Returns:
        The path of the PNG written.

    Raises:
        PlotInputError: not LR-sweep JSON.
    """
    return _save(lr_bleu_figure(sweep, metric, title), out)


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


def _parse_named(items: Sequence[str]) -> dict[str, str]:
    out: dict[str, str] = {}
    for it in items:
        if "=" in it and not Path(it).exists():
            name, path = it.split("=", 1)
        else:
            name, path = Path(it).stem, it
        if not name or not path:
            raise PlotInputError(f"--log expects NAME=PATH, got {it!r}")
        if name in out:
            raise PlotInputError(f"duplicate run name {name!r} in --log")
        out[name] = path
    return out


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m qknorm_tools.plots`` argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m qknorm_tools.plots",
        description="Figures from fairseq logs, attention matrices and BLEU results.",
    )
    sub = p.add_subparsers(dest="cmd", required=True)

    c = sub.add_parser("curves", help="train/valid loss vs num_updates")
    c.add_argument(
        "--log",
        nargs="+",
        action="extend",
        required=True,
        metavar="NAME=PATH",
        help="NAME=PATH of a fairseq train log; repeatable",
    )
    c.add_argument("--out", required=True)
    c.add_argument(
        "--key", default="loss", help="metric to plot (default loss; e.g. nll_loss, ppl)"
    )
    c.add_argument("--valid-subset", default="valid")

    k = sub.add_parser("calibration", help="dev loss vs updates and wall minutes per run")
    k.add_argument("--log", nargs="+", action="extend", required=True, metavar="NAME=PATH",
                   help="NAME=PATH of a fairseq train log; repeatable")  # fmt: skip
    k.add_argument("--out", required=True)

    for name, hlp in (
        ("g", "QKNorm scales qknorm_g_<module> vs num_updates"),
        ("health", "attn_entropy_<module> / attn_maxlogit_<module> vs num_updates"),
    ):
        g = sub.add_parser(name, help=hlp)
        g.add_argument(
            "--log",
            nargs="+",
            action="extend",
            required=True,
            metavar="NAME=PATH",
            help="NAME=PATH of a fairseq train log; repeatable",
        )
        g.add_argument("--out", required=True)
        g.add_argument("--split", choices=("auto", "train", "valid"), default="auto")

    h = sub.add_parser("heatmap", help="attention heatmap of one sentence (tgt_len x src_len)")
    h.add_argument("--attn", required=True, help=".npy or .json matrix (tgt_len x src_len)")
    h.add_argument("--src", default=None, help="source tokens, space-separated")
    h.add_argument("--tgt", default=None, help="target tokens, space-separated")
    h.add_argument("--out", required=True)
    h.add_argument("--title", default="")

    b = sub.add_parser(
        "bleu-bars", help="BLEU bars with 95%% CI from evaluate compare/aggregate JSON"
    )
    b.add_argument("--json", required=True)
    b.add_argument("--out", required=True)
    b.add_argument(
        "--value",
        choices=("auto", "concat", "mean"),
        default="auto",
        help="aggregate JSON: concatenated-output score with bootstrap CI, or mean ± sd",
    )
    b.add_argument("--title", default="")

    for name, hlp in (
        ("lr-loss", "LR sweep: final dev loss vs peak learning rate"),
        ("lr-maxlogit", "LR sweep: max attention logit over training at each learning rate"),
        ("lr-bleu", "LR sweep: test BLEU vs peak learning rate"),
    ):
        w = sub.add_parser(name, help=hlp)
        w.add_argument("--json", required=True, help="evaluate lr-sensitivity JSON (lr_sweep.json)")
        w.add_argument("--out", required=True)
        w.add_argument("--title", default="")
        if name == "lr-bleu":
            w.add_argument("--metric", choices=("bleu_tok", "bleu", "chrf"), default="bleu_tok")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status (:mod:`~.exits`: 1 data, 2 usage)."""
    a = build_parser().parse_args(argv)
    try:
        if a.cmd == "curves":
            path = plot_curves(_parse_named(a.log), a.out, key=a.key, valid_subset=a.valid_subset)
        elif a.cmd == "calibration":
            path = plot_calibration(_parse_named(a.log), a.out)
        elif a.cmd == "g":
            path = plot_g(_parse_named(a.log), a.out, split=a.split)
        elif a.cmd == "health":
            path = plot_health(_parse_named(a.log), a.out, split=a.split)
        elif a.cmd == "heatmap":
            mat, src, tgt = load_attention(a.attn)
            src = a.src.split() if a.src is not None else src
            tgt = a.tgt.split() if a.tgt is not None else tgt
            path = plot_heatmap(mat, src, tgt, a.out, title=a.title)
        elif a.cmd == "lr-loss":
            path = plot_lr_loss(a.json, a.out, title=a.title)
        elif a.cmd == "lr-maxlogit":
            path = plot_lr_max_logit(a.json, a.out, title=a.title)
        elif a.cmd == "lr-bleu":
            path = plot_lr_bleu(a.json, a.out, metric=a.metric, title=a.title)
        else:
            path = plot_bleu_bars(a.json, a.out, value=a.value, title=a.title)
    except OutputError as exc:
        return fail(output_error_message(exc))
    except (LogInputError, OSError) as exc:
        return fail(exc)
    print(f"wrote {path}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
