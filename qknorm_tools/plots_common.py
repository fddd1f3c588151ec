"""Shared pieces of the matplotlib figures of :mod:`qknorm_tools.plots`.

:class:`PlotInputError` (unusable input, a ``ValueError`` naming the file), pyplot with the Agg
backend (imported when a figure is drawn; torch and fairseq never are), the logs read by name,
and writing a figure atomically.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from pathlib import Path

from .textio import atomic_output
from .trainlog import LogInputError, parse_log

__all__ = ["PlotInputError"]


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
