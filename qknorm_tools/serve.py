"""One Python process per script run: ``scripts/train.sh`` and ``scripts/evaluate.sh`` ask it.

Each of the two scripts starts this module once, as bash's coprocess
(``scripts/lib/proc.sh:qk_spine_start``), and sends it every question it used to start a
Python process for: the plan before the lock, the checks under it, the freshness of earlier
outputs, the run's ``train.json``, the scores. The rules stay in their modules
(:mod:`qknorm_tools.run`, :mod:`~.collect`, :mod:`~.evaluate`, :mod:`~.freshness`); this module
only calls their ``main`` as ``python -m qknorm_tools.MODULE ARGS`` would, so a request answers
exactly what that command line prints and returns (issue 36: a script starts Python at most
twice, this process and the progress display; the model tools it runs, fairseq-train,
fairseq-generate and checkpoint averaging, are processes of their own).

Protocol (the script's side: ``scripts/lib/config.sh:qk_py``), over the coprocess's stdin and
stdout:

* a request: a line with the number of arguments N, then N arguments, each ended by a NUL byte;
  the first is the module (one of :data:`MODULES`), the rest its command line;
* the answer: what the command printed on stdout, a NUL byte, then its exit status and a
  newline. What it writes on stderr goes to the script's stderr, as before.

Standard output (file descriptor 1) points at stderr while a command runs, so that nothing a
command or a process it starts writes there can corrupt an answer; the answers go to the
pipe's own descriptor. SIGINT does not stop it: Ctrl-C is the script's to handle (its exit
hooks stop this process and wait for it); it also ends when the script closes the pipe (end of
file).
"""

import argparse
import contextlib
import importlib
import io
import os
import signal
import sys

from qknorm_tools.exits import FAILURE, OK, fail

#: the modules a request may name (their ``main(argv) -> int``)
MODULES = ("run", "collect", "evaluate", "freshness")


class RequestError(ValueError):
    """A request that does not follow the protocol (the module docstring)."""


def _read_request(stream) -> list[str] | None:
    """One request's arguments from ``stream`` (binary), or None at end of file.

    Raises:
        RequestError: the count line is not a number, or the stream ends inside a request.
    """
    count = stream.readline()
    if not count:
        return None
    try:
        n = int(count)
    except ValueError:
        line = count.decode(errors="replace")
        raise RequestError(f"the count line {line!r} is not a number") from None
    args = []
    for _ in range(n):
        arg = bytearray()
        while (byte := stream.read(1)) != b"\0":
            if not byte:
                raise RequestError(f"the request ended after {len(args)} of its {n} arguments")
            arg += byte
        args.append(arg.decode())
    return args


def answer(args: list[str]) -> tuple[str, int]:
    """Runs one request: ``(stdout, exit status)`` of ``python -m qknorm_tools.ARGS[0] ARGS[1:]``.

    An exception the command does not handle is reported on stderr (its traceback) as status
    1, as an interpreter would end; a ``SystemExit`` (argparse's usage errors: status 2) gives
    its status.
    """
    if not args or args[0] not in MODULES:
        return "", fail(f"a request names one of {', '.join(MODULES)}, not {args[:1]}", 2)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            status = importlib.import_module(f"qknorm_tools.{args[0]}").main(args[1:])
        except SystemExit as e:
            status = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
            if isinstance(e.code, str):
                print(e.code, file=sys.stderr)
        except Exception:  # a bug: shown as the interpreter would show it
            import traceback

            traceback.print_exc()
            status = 1
    return out.getvalue(), int(status or 0)


def _reply_stream():
    """The pipe the answers go to (stdout as started), stdout itself pointed at stderr."""
    reply = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # stray writes to stdout land on stderr, never in an answer
    sys.stdout = io.TextIOWrapper(os.fdopen(1, "wb", closefd=False), line_buffering=True)
    return reply


def serve(requests, name: str = "stdin", reply=None) -> int:
    """Answers the requests of ``requests`` (binary) until it ends: 0, or 1 at a malformed one.

    ``name`` names the stream in the error message; ``reply`` (binary) takes the answers,
    by default the process's stdout as started (:func:`_reply_stream`, from the first answer).
    """
    number = 0
    while True:
        number += 1
        try:
            args = _read_request(requests)
        except RequestError as e:
            return fail(f"{name}: request {number}: {e}")
        if args is None:
            return OK
        reply = reply or _reply_stream()
        out, status = answer(args)
        sys.stderr.flush()
        reply.write(out.encode() + b"\0" + f"{status}\n".encode())
        reply.flush()


def main(argv: list | None = None) -> int:
    """``python -m qknorm_tools.serve [--requests FILE]``; returns the exit status (0, 1, 2)."""
    parser = argparse.ArgumentParser(prog="python -m qknorm_tools.serve",
                                     description=__doc__.split("\n")[0])  # fmt: skip
    parser.add_argument("--requests", help="read the requests from FILE (default: stdin)")
    a = parser.parse_args(argv)
    if a.requests is None:  # the script's coprocess: Ctrl-C is the script's to handle
        # (a handler, not SIG_IGN: the processes a command starts keep the default action)
        signal.signal(signal.SIGINT, lambda signum, frame: None)
        return serve(sys.stdin.buffer)
    try:
        with open(a.requests, "rb") as f:
            return serve(f, a.requests)
    except OSError as e:
        return fail(f"cannot read the requests: {e}", FAILURE)


if __name__ == "__main__":
    sys.exit(main())
