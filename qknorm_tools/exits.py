"""The exit statuses of every Python command line of the project: one meaning each.

``python -m qknorm_tools.*`` and ``python -m benchmarks.*`` exit with

* :data:`OK` (0): done;
* :data:`FAILURE` (1): a failure of the data or the environment: a file the user named that
  is missing, unreadable or wrong, data that are not consistent, an output that cannot be
  written, a result that cannot be computed;
* :data:`USAGE` (2): a usage error only: an unknown option or name, a malformed or
  contradictory argument (argparse's own status for its errors);
* :data:`NO` (3): only the commands that answer a question (``config known``,
  ``freshness check``, ``corpus sha256`` without an entry) use it for the answer "no", which
  is not an error.

A command's ``main`` maps what it raises with :func:`status_of` (:class:`UsageError` -> 2,
everything else it catches -> 1) and prints the message with :func:`fail`; argument checks
that argparse cannot express call :func:`die_usage`, data checks :func:`die_data`. An integer
option that must be at least 1 takes ``type=``:func:`positive_int` (argparse: exit 2).
"""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

__all__ = [
    "FAILURE",
    "NO",
    "OK",
    "USAGE",
    "UsageError",
    "die_data",
    "die_usage",
    "fail",
    "positive_int",
    "status_of",
]

OK = 0
FAILURE = 1
USAGE = 2
NO = 3


class UsageError(Exception):
    """A command line that cannot be run as given (exit status :data:`USAGE`)."""


def status_of(exc: BaseException) -> int:
    """:data:`USAGE` for a :class:`UsageError`, else :data:`FAILURE`: the status of ``exc``."""
    return USAGE if isinstance(exc, UsageError) else FAILURE


def fail(message: object, status: int = FAILURE) -> int:
    """Print ``error: MESSAGE`` on stderr; return ``status`` (:data:`FAILURE` by default)."""
    print(f"error: {message}", file=sys.stderr)
    return status


def die_data(message: object) -> NoReturn:
    """Exit with :data:`FAILURE` after ``error: MESSAGE`` (a data or environment failure)."""
    raise SystemExit(fail(message))


def die_usage(parser: argparse.ArgumentParser | None, message: str) -> NoReturn:
    """Exit with :data:`USAGE`: argparse's usage line and ``PROG: error: MESSAGE``."""
    if parser is not None:
        parser.error(message)  # argparse exits with 2 == USAGE
    raise SystemExit(fail(message, USAGE))


def positive_int(s: str) -> int:
    """An argparse ``type=``: an integer >= 1 (lengths, counts, sizes, repetitions, threads).

    Raises:
        argparse.ArgumentTypeError: not an integer, or below 1 (argparse: exit :data:`USAGE`).
    """
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}")
    return v
