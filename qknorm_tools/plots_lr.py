"""Figures of the LR sweep (:mod:`qknorm_tools.lr_sweep` / ``evaluate lr-sensitivity`` JSON).

Final dev loss vs peak learning rate, max attention logit over training at each learning rate,
test BLEU vs learning rate, and the sweep per model size (:mod:`qknorm_tools.lr_sweep_sizes`).
"""

from __future__ import annotations

import json
import math
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

from .plots_common import PlotInputError, _pyplot, _save

__all__ = [
    "lr_bleu_figure",
    "lr_loss_figure",
    "lr_max_logit_figure",
    "plot_lr_bleu",
    "plot_lr_loss",
    "plot_lr_max_logit",
    "plot_lr_sizes",
]


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
