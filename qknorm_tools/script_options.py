"""The scripts' integer options and comma-separated lists, checked in one place.

The rules a script's values follow, written once: seeds and update budgets are non-negative
integers without leading zeros (:func:`qknorm_tools.config_schema.check_uint`), threads, jobs and
processes positive integers (:func:`~qknorm_tools.config_schema.check_posint`); a list is
comma-separated, white space around an item is dropped, an empty item, white space inside one and
an item given twice are refused (``1,1`` is a typo of ``1,2`` more often than a wish; "1 2" is
neither seed 12 nor seeds 1 and 2). The scripts (``scripts/lib/config.sh``: ``qk_check_options``)
pass every such value of a command line in one call, a subcommand of the run's spine
(:mod:`qknorm_tools.run`, which owns the exit protocol)::

    python -m qknorm_tools.run options [--repo DIR] [--work-dir DIR] SPEC...

    uint:OPTION=VALUE      a seed, an update budget, an index
    posint:OPTION=VALUE    threads, jobs, processes, nodes
    seeds:VAR=LIST         --seeds LIST: VAR=(seeds)
    list:KIND:VAR=LIST     --KIND LIST (lrs, sizes: repeats refused; gpus: repeats dropped):
                           VAR=(items), each checked by its script
    names:KIND:VAR=LIST    --KIND LIST of configs/KIND names (pairs, systems), or ``all`` (the
                           papers' pairs and systems: config.names in_all): VAR=(names)

Each SPEC is checked in the order given; the first bad one is a usage error: its message on
stdout, exit 2 (``scripts/lib/config.sh`` shows it with the script's usage). Else the lists
are printed as bash array assignments, exit 0. A SPEC that is not of these forms: exit 1.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from qknorm_tools import config
from qknorm_tools.config_schema import UINT_RE, check_posint, check_uint
from qknorm_tools.exits import UsageError

#: the message after ``bad --KIND list 'LIST'`` for an empty item, by KIND
_EMPTY = {
    "seeds": "(comma-separated non-negative integers, e.g. 1,2,3)",
    "gpus": "(comma-separated GPU ids, e.g. 0,1)",
}
#: lists whose repeats are dropped, not refused (a GPU id given twice is still that GPU)
_REPEATS_DROPPED = ("gpus",)


def split_list(kind: str, text: str) -> list[str]:
    """The items of ``--KIND TEXT``, a comma-separated list, in order.

    Args:
        kind: the option's name without dashes (``seeds``, ``lrs``, ``systems``, ...): messages.
        text: the list as given.

    Returns:
        The items, white space around each dropped; an item given twice appears once.

    Raises:
        UsageError: an empty item (``1,,2``, ``1,``), white space inside an item, or (but for
            ``gpus``) an item given twice; naming the list.
    """
    out, repeat = _split(kind, text)
    if kind == "seeds":  # each seed a uint, before a repeat is named
        for s in out:
            if not UINT_RE.match(s):
                raise UsageError(
                    f"bad --seeds list '{text}': '{s}' is not a non-negative integer (no "
                    "leading zeros, below 10^9; e.g. --seeds 1,2,3)"
                )
    _refuse_repeat(kind, text, repeat)
    return out


def _split(kind: str, text: str) -> tuple[list[str], str]:
    """:func:`split_list` but for the repeat: (the distinct items, the first repeat or "")."""
    out: list[str] = []
    repeat = ""
    for item in text.split(","):
        item = item.strip(" \t\n\r\f\v")
        if not item:
            raise UsageError(f"bad --{kind} list '{text}' {_EMPTY.get(kind, '(empty item)')}")
        if any(c.isspace() for c in item):
            raise UsageError(
                f"bad list '{text}': item '{item}' holds white space; the items are separated "
                "by commas (e.g. 1,2)"
            )
        if item not in out:
            out.append(item)
        elif not repeat:
            repeat = item
    return out, repeat


def _refuse_repeat(kind: str, text: str, repeat: str) -> None:
    if repeat and kind not in _REPEATS_DROPPED:
        raise UsageError(f"bad --{kind} list '{text}': {repeat} is given twice")


def parse_names(kind: str, text: str, work_dir: Path | None = None) -> list[str]:
    """``--KIND TEXT``: configs/KIND names (pairs, systems), comma-separated, or ``all``.

    ``all`` is :func:`qknorm_tools.config.names` with ``in_all``: the papers' systems (not one
    whose config sets ``in_all = false``, e.g. qk_layernorm) and pairs (not an own pair).

    Raises:
        UsageError: as :func:`split_list`, or an unknown name (the known ones listed, a
            did-you-mean when one is close).
    """
    if text == "all":
        return config.names(kind, work_dir, in_all=True)
    out, repeat = _split(kind, text)
    for name in out:
        ok, more = config.known(kind, name, work_dir)
        if not ok:
            listed = " ".join(config.names(kind, work_dir))
            raise UsageError(
                f"unknown {kind[:-1]} '{name}' (known {kind}: {listed}; or 'all'{more})"
            )
    _refuse_repeat(kind, text, repeat)
    return out


def check(specs: Sequence[str], work_dir: Path | None = None) -> list[tuple[str, tuple]]:
    """Each SPEC of the module's command line checked, in order.

    Returns:
        ``[(VAR, items)]`` for the lists, in order.

    Raises:
        UsageError: the first bad value (its message as the scripts show it).
        ValueError: a SPEC that is not of the module's forms.
    """
    out = []
    for spec in specs:
        kind, _, rest = spec.partition(":")
        if kind in ("list", "names"):
            sub, _, rest = rest.partition(":")
        name, eq, value = rest.partition("=")
        if not eq or not name or kind not in ("uint", "posint", "seeds", "list", "names"):
            raise ValueError(f"bad SPEC '{spec}' (see qknorm_tools/script_options.py)")
        if kind == "uint":
            check_uint(name, value)
        elif kind == "posint":
            check_posint(name, value)
        elif kind == "seeds":
            out.append((name, tuple(split_list("seeds", value))))
        elif kind == "list":
            out.append((name, tuple(split_list(sub, value))))
        else:
            out.append((name, tuple(parse_names(sub, value, work_dir))))
    return out
