"""Figures from ``fairseq-train`` logs (parsed by :mod:`qknorm_tools.trainlog`).

Train and valid loss vs ``num_updates`` (``curves``), dev loss calibration (``calibration``),
the learned QKNorm scales ``qknorm_g_<module>`` (``g``) and attention health statistics
``attn_entropy_<module>`` / ``attn_maxlogit_<module>`` (``health``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .plots_common import PlotInputError, _named_logs, _pyplot, _save
from .trainlog import dev_curve, metric_keys, series

__all__ = ["plot_calibration", "plot_curves", "plot_g", "plot_health", "prefixed_figure"]


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
