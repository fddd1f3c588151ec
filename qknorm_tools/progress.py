"""Time estimates for the pipeline's long steps (standard library only).

``python -m qknorm_tools.progress <command>``:

``train --max-update N [--max-epoch E]``
    A filter for a ``fairseq-train`` log (``--log-format simple``): copies stdin to stdout line
    by line and appends ``| ETA h:mm (U/T updates)`` to each ``train_inner`` progress line.
    ``scripts/train.sh`` puts it after ``tee train.log``, so the log file stays fairseq's own.
``decode --output FILE --total N [--interval S] [--pid PID]``
    While ``fairseq-generate`` writes FILE, prints every S seconds (stderr) how many of the N
    sentences are done (``H-`` lines) and an estimate of the time left; stops when PID exits.

Estimates are linear: the time left is the work left divided by the rate measured so far in
this process (training: updates per second of fairseq's ``wall`` clock between progress lines,
validation included; before two lines exist, fairseq's own ``ups``). Nothing here may stop the
work it watches: a line it cannot read passes through unchanged.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time
from collections.abc import Iterable, Sequence
from typing import BinaryIO

from .trainlog import _INNER_RE, parse_log_line

__all__ = [
    "TrainEta",
    "decode_progress_line",
    "format_duration",
    "main",
]


def format_duration(seconds: float) -> str:
    """``h:mm`` of a duration in seconds, rounded up to the minute (``0:01`` for 20 s).

    Raises:
        ValueError: a negative or non-finite duration.
    """
    if not math.isfinite(seconds) or seconds < 0:
        raise ValueError(f"duration must be finite and >= 0, got {seconds!r}")
    minutes = math.ceil(seconds / 60)
    return f"{minutes // 60}:{minutes % 60:02d}"


class TrainEta:
    """The ETA of a training from its ``train_inner`` log lines.

    Args:
        max_update: fairseq's ``--max-update`` (0 = none).
        max_epoch: fairseq's ``--max-epoch`` (0 = none). With both, the earlier limit counts;
            with the epoch limit, early stopping (``--patience``) may end the run sooner.

    Raises:
        ValueError: neither limit set, or a negative one.
    """

    def __init__(self, max_update: int, max_epoch: int = 0):
        if max_update < 0 or max_epoch < 0 or (max_update == 0 and max_epoch == 0):
            raise ValueError(
                f"need --max-update or --max-epoch > 0 (got {max_update}, {max_epoch})"
            )
        self.max_update = max_update
        self.max_epoch = max_epoch
        self._first: tuple[float, float] | None = None  # (num_updates, wall) of the first line

    def total_updates(self, epoch: int, i: int, n: int, num_updates: float) -> float:
        """Updates at which training stops, as far as the limits and the epoch size tell.

        ``i / n`` is fairseq's position in the epoch (batches); updates per batch are
        inferred from ``num_updates`` (1 without ``--update-freq``).
        """
        totals = []
        if self.max_update > 0:
            totals.append(float(self.max_update))
        if self.max_epoch > 0:
            batches = (epoch - 1) * n + i
            per_batch = num_updates / batches if batches > 0 else 1.0
            totals.append(num_updates + ((self.max_epoch - epoch) * n + (n - i)) * per_batch)
        return min(totals)

    def suffix(self, line: str) -> str | None:
        """`` | ETA h:mm (U/T updates)`` for a ``train_inner`` line, else None."""
        rec = parse_log_line(line)
        if rec is None or rec["kind"] != "train_inner":
            return None
        m = rec["metrics"]
        pos = _INNER_RE.match(line.split("| train_inner |", 1)[-1].strip())
        if "num_updates" not in m or pos is None:
            return None
        u = m["num_updates"]
        total = self.total_updates(int(pos["epoch"]), int(pos["i"]), int(pos["n"]), u)
        rate = None
        wall = m.get("wall")
        if wall is not None:
            if self._first is None:
                self._first = (u, wall)
            elif wall > self._first[1] and u > self._first[0]:
                rate = (u - self._first[0]) / (wall - self._first[1])
        if rate is None and m.get("ups", 0) > 0:
            rate = m["ups"]
        left = max(total - u, 0.0)
        eta = format_duration(left / rate) if rate else "?"
        limit = "" if self.max_update > 0 else f", at most: max-epoch {self.max_epoch}"
        return f" | ETA {eta} ({int(u)}/{int(round(total))} updates{limit})"

    def filter(self, lines: Iterable[bytes], out: BinaryIO) -> None:
        """Copy ``lines`` to ``out`` (flushed per line), with :meth:`suffix` on progress lines."""
        for raw in lines:
            try:
                text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                extra = self.suffix(text)
            except Exception:  # noqa: BLE001 - a line we cannot read passes through unchanged
                extra = None
            if extra:
                raw = raw.rstrip(b"\r\n") + extra.encode("utf-8") + b"\n"
            out.write(raw)
            out.flush()


def decode_progress_line(done: int, total: int, elapsed: float) -> str:
    """``decoded D/N sentences (P%), ETA h:mm`` after ``elapsed`` seconds of decoding.

    Raises:
        ValueError: ``total`` < 1.
    """
    if total < 1:
        raise ValueError(f"total must be >= 1, got {total}")
    done = min(max(done, 0), total)
    eta = format_duration(elapsed * (total - done) / done) if done else "?"
    return f"decoded {done}/{total} sentences ({100 * done // total}%), ETA {eta}"


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def watch_decoding(path: str, total: int, interval: float, pid: int | None, label: str) -> None:
    """Print :func:`decode_progress_line` to stderr every ``interval`` seconds.

    Runs while ``pid`` lives (or until all ``total`` are done without one), counting ``H-``
    lines in ``path`` as it grows.
    """
    start = time.monotonic()
    done, offset, tail = 0, 0, b""
    while pid is None or _alive(pid):
        time.sleep(interval)
        try:
            with open(path, "rb") as f:
                f.seek(offset)
                chunk = f.read()
        except OSError:
            continue
        offset += len(chunk)
        lines = (tail + chunk).split(b"\n")
        tail = lines.pop()
        done += sum(1 for x in lines if x.startswith(b"H-"))
        line = decode_progress_line(done, total, time.monotonic() - start)
        print(f"{label}{line}", file=sys.stderr, flush=True)
        if done >= total:
            return


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m qknorm_tools.progress`` argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m qknorm_tools.progress", description="Time estimates of long steps."
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    t = sub.add_parser("train", help="stdin -> stdout: ETA appended to train_inner lines")
    t.add_argument("--max-update", type=int, default=0, help="fairseq --max-update (0: none)")
    t.add_argument("--max-epoch", type=int, default=0, help="fairseq --max-epoch (0: none)")
    d = sub.add_parser("decode", help="periodic decoding progress of a fairseq-generate output")
    d.add_argument("--output", required=True, help="the fairseq-generate output being written")
    d.add_argument("--total", type=int, required=True, help="sentences to decode")
    d.add_argument("--interval", type=float, default=30.0, help="seconds between lines")
    d.add_argument("--pid", type=int, help="stop when this process exits")
    d.add_argument("--label", default="", help="prefix of each line")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status (2 on bad arguments)."""
    a = build_parser().parse_args(argv)
    try:
        if a.cmd == "train":
            TrainEta(a.max_update, a.max_epoch).filter(sys.stdin.buffer, sys.stdout.buffer)
        else:
            watch_decoding(a.output, a.total, a.interval, a.pid, a.label)
    except ValueError as exc:
        if a.cmd == "train":  # never block the log: pass it through without estimates
            print(f"warning: no ETA ({exc})", file=sys.stderr)
            for raw in sys.stdin.buffer:
                sys.stdout.buffer.write(raw)
                sys.stdout.buffer.flush()
            return 0
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (BrokenPipeError, KeyboardInterrupt):
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
