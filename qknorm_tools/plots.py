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
raised as :class:`~qknorm_tools.plots_common.PlotInputError` (a ``ValueError``) naming the file;
the command line prints ``error: ...`` and exits with status 2.

The figures are drawn by :mod:`~qknorm_tools.plots_training` (from logs),
:mod:`~qknorm_tools.plots_attention`, :mod:`~qknorm_tools.plots_bleu` and
:mod:`~qknorm_tools.plots_lr`, with the shared pieces in :mod:`~qknorm_tools.plots_common`;
this module is the command line.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from .exits import fail
from .plots_attention import load_attention, plot_heatmap
from .plots_bleu import plot_bleu_bars
from .plots_common import PlotInputError
from .plots_lr import plot_lr_bleu, plot_lr_loss, plot_lr_max_logit
from .plots_training import plot_calibration, plot_curves, plot_g, plot_health
from .textio import OutputError, output_error_message
from .trainlog import LogInputError

__all__ = ["build_parser", "main"]


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
