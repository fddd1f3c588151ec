"""Time estimates for the pipeline's long steps (standard library only).

``python -m qknorm_tools.progress <command>``:

``train --max-update N [--max-epoch E] [--heartbeat S]``
    A filter for a ``fairseq-train`` log (``--log-format simple``): copies stdin to stdout line
    by line and shows each ``train_inner`` progress line as a person reads it, the update count
    and the ETA first: ``DATE TIME | U/T updates, ETA h:mm | epoch E: i / n | loss=...`` (the
    model's attention statistics left out: train.log and TensorBoard keep them).
    With ``--quiet`` it leaves out the noise a terminal does not need (:class:`TerminalNoise`).
    During a validation (fairseq prints nothing from ``begin validation`` to its result; dev
    BLEU decodes the whole dev set) it prints ``| validating on 'valid' for N s ...`` every S
    seconds (default 30), and so, before the first progress line, ``| training for N s, ...``
    with the last update count fairseq logged (a resumed run's checkpoint line) if any.
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
import logging
import math
import os
import re
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from typing import BinaryIO

from .exits import USAGE, fail
from .trainlog import _INNER_RE, ATTENTION_STAT_PREFIXES, parse_log_line

__all__ = [
    "FAIRSEQ_LOG_FORMAT",
    "VALIDATION_START",
    "TerminalLogHandler",
    "TerminalNoise",
    "TrainEta",
    "decode_progress_line",
    "format_duration",
    "main",
    "quiet_fairseq_logging",
]


#: fairseq_cli/train.py validate(): ``begin validation on "valid" subset`` (INFO); it prints
#: nothing else until the subset's result line (``| valid | ...``)
VALIDATION_START = 'begin validation on "'
#: a fairseq log record's first line (``--log-format simple``); other lines continue a record
_RECORD = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2} \| ")
#: the first line of a Python warning (``path:LINE: CategoryWarning: ...``, ``sys:1: ...``)
_PY_WARNING = re.compile(r"^\S+:\d+: \w*Warning:( |$)")
#: fairseq_cli.train prints the model as a multi-line repr: ``| fairseq_cli.train | Name(``
_MODEL_PRINT = re.compile(r"\| fairseq_cli\.train \| \w+\($")
#: fairseq_cli.train prints its whole configuration as one dict line (about 9,000 characters)
_CONFIG_PRINT = re.compile(r"\| fairseq_cli\.train \| \{'_name': ")
#: fairseq's one INFO line about a package the pipeline does not use
_NOISE_LINES = ("| fairseq.tasks.text_to_speech | Please install tensorboardX",)


class TerminalNoise:
    """Which lines of a ``fairseq-train`` log the terminal does not need (train.log keeps all).

    Dropped: Python warnings of fairseq's dependencies (each with its continuation lines, up to
    the next log record; a traceback is never dropped), the model's multi-line repr and the
    one-line dump of the whole configuration (one line says so for each), fairseq's "Please
    install tensorboardX" INFO line. :meth:`keep` returns the text
    to show instead of a line: the line itself, a replacement, or None.

    Args:
        where: where the dropped lines can be seen, for the one line that replaces the
            warnings (``see train.log`` for the training log).
    """

    def __init__(self, where: str = "see train.log") -> None:
        self._in: str | None = None  # "warning" or "model" while inside a dropped record
        self._warned = False
        self._where = where

    def keep(self, text: str) -> str | None:
        """The terminal's version of one log line (without its newline), or None."""
        if _RECORD.match(text):
            self._in = None
            if any(n in text for n in _NOISE_LINES):
                return None
            if _MODEL_PRINT.search(text):
                self._in = "model"
                return text[: text.rindex("|") + 1] + " (the model's structure: see train.log)"
            m = _CONFIG_PRINT.search(text)
            if m:
                return text[: m.start() + len("| fairseq_cli.train |")] + (
                    " (the full configuration: see train.log)"
                )
            return text
        if text.startswith("Traceback") or re.match(r"^\w+(Error|Exception)\b", text):
            self._in = None
            return text
        if _PY_WARNING.match(text):
            self._in = "warning"
            if not self._warned:
                self._warned = True
                return f"(Python warnings of fairseq's dependencies: not shown, {self._where})"
            return None
        return None if self._in else text


#: fairseq's log line (fairseq_cli's ``--log-format simple``), the form :class:`TerminalNoise` reads
FAIRSEQ_LOG_FORMAT = "%(asctime)s | %(levelname)s | %(name)s | %(message)s"
FAIRSEQ_LOG_DATEFMT = "%Y-%m-%d %H:%M:%S"


class TerminalLogHandler(logging.StreamHandler):
    """fairseq's log of a command that runs fairseq in its own process, for a terminal.

    What ``scripts/train.sh`` does to ``fairseq-train``'s output (:class:`TerminalNoise`), for
    the translate helper and the bf16 measurement: records in fairseq's own format, what
    :class:`TerminalNoise` drops left out (Python warnings of fairseq's dependencies, through
    :func:`logging.captureWarnings`, become one line saying so), and records below ``level``
    too: INFO records of loading a model or a dictionary are not what such a command reports.

    Args:
        where: how to see what is left out (the text of :class:`TerminalNoise`'s line).
        stream: where to write (default: ``sys.stderr`` at each record, so that
            ``contextlib.redirect_stderr`` applies to it as to Python's own warnings).
        level: the least level shown (default WARNING).
    """

    def __init__(self, where: str, stream=None, level: int = logging.WARNING) -> None:
        super().__init__(stream)
        self._follow_stderr = stream is None
        self.setLevel(level)
        self.setFormatter(logging.Formatter(FAIRSEQ_LOG_FORMAT, FAIRSEQ_LOG_DATEFMT))
        self._noise = TerminalNoise(where)

    def terminal_text(self, record: logging.LogRecord) -> str:
        """The record's terminal lines (``""`` when :class:`TerminalNoise` drops them all)."""
        # a captured Python warning is shown as Python prints it (path:LINE: Category: ...)
        text = record.getMessage() if record.name == "py.warnings" else self.format(record)
        lines = [self._noise.keep(x) for x in text.rstrip("\n").split("\n")]
        return "\n".join(x for x in lines if x is not None)

    def emit(self, record: logging.LogRecord) -> None:
        """Write the record's terminal lines, if any are left."""
        try:
            text = self.terminal_text(record)
            if self._follow_stderr:
                self.stream = sys.stderr
            if text:
                self.stream.write(text + self.terminator)
                self.flush()
        except Exception:  # as logging.StreamHandler: a log record never stops the command
            self.handleError(record)


def quiet_fairseq_logging(where: str, level: int = logging.WARNING) -> TerminalLogHandler:
    """Log through a :class:`TerminalLogHandler` on stderr (call before importing fairseq).

    Puts the handler on the root logger at ``level`` and captures Python warnings, so that
    fairseq's own ``logging.basicConfig`` calls (made when its modules are imported) change
    nothing. Called again, it keeps the handler it put there (what was dropped stays dropped).
    Returns the handler.
    """
    root = logging.getLogger()
    mine = [h for h in root.handlers if isinstance(h, TerminalLogHandler)]
    handler = mine[0] if mine else TerminalLogHandler(where, level=level)
    for h in list(root.handlers):
        if h is not handler:
            root.removeHandler(h)
    if not mine:
        root.addHandler(handler)
    root.setLevel(level)
    logging.captureWarnings(True)
    return handler


#: lines that say training goes on (a validation ended without its result line)
_TRAINING = ("| train_inner | ", "begin training epoch", "done training", "| train | ")
#: an update count in any fairseq line: ``num_updates=N`` / ``num_updates N`` (progress,
#: epoch and validation lines), ``(epoch E @ N updates`` (fairseq's checkpoint lines: saved,
#: loaded when a run resumes)
_UPDATE_COUNT = re.compile(r"num_updates[ =](\d+)|@ (\d+) updates")
#: an attention statistic among a progress line's metrics
_STATS_KEY = re.compile(r"(?:^|[\s,])(?:" + "|".join(ATTENTION_STAT_PREFIXES) + r")\w*=")
#: the line said once, at the first progress line that had attention statistics
STATS_LEFT_OUT = (
    "(attention statistics of the progress lines: not shown, see train.log and TensorBoard)"
)


def without_attention_stats(line: str) -> str | None:
    """``line`` without its `` | KEY VALUE`` attention statistics, or None if it has none.

    fairseq's epoch and validation lines (``| train |``, ``| valid |``) write each metric as
    a `` | KEY VALUE`` segment; those whose KEY is an attention statistic
    (:data:`.trainlog.ATTENTION_STAT_PREFIXES`, about 18 of them before the loss) are left out
    of the terminal (train.log and TensorBoard keep them). Other segments stay, in order.
    """
    parts = line.split(" | ")
    kept = [p for p in parts if not _is_attention_stat(p.split())]
    return " | ".join(kept) if len(kept) < len(parts) else None


def _is_attention_stat(words: list[str]) -> bool:
    """Whether the words of a `` | KEY VALUE`` segment are an attention statistic."""
    return len(words) == 2 and words[0].startswith(ATTENTION_STAT_PREFIXES)


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

    def progress(self, line: str) -> str | None:
        """The line a person reads for a ``train_inner`` line, else None.

        ``DATE TIME | U/T updates, ETA h:mm | epoch E: i / n | METRICS``: the update count and
        the ETA (:meth:`eta`) first, then fairseq's position in the epoch and its metrics but
        ``num_updates`` (shown first) and the attention statistics
        (:data:`.trainlog.ATTENTION_STAT_PREFIXES`).
        """
        eta = self.eta(line)
        if eta is None:
            return None
        head, _, body = line.partition("| train_inner |")
        pos = _INNER_RE.match(body.strip())
        stamp = head.split(" | ", 1)[0].strip()
        metrics = [
            part.strip()
            for part in pos["kv"].split(",")
            if part.strip()
            and not part.strip().startswith(("num_updates=", *ATTENTION_STAT_PREFIXES))
        ]
        epoch = f"epoch {pos['epoch']}: {pos['i']} / {pos['n']}"
        return " | ".join(x for x in (stamp, eta, epoch, ", ".join(metrics)) if x)

    def eta(self, line: str) -> str | None:
        """``U/T updates, ETA h:mm`` for a ``train_inner`` line, else None.

        With the epoch limit only: ``U/T updates, ETA h:mm (at most: max-epoch E)``.
        """
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
        limit = "" if self.max_update > 0 else f" (at most: max-epoch {self.max_epoch})"
        return f"{int(u)}/{int(round(total))} updates, ETA {eta}{limit}"

    def total_text(self) -> str:
        """The update budget for a line without an epoch position: ``/T`` or ``""``."""
        return f"/{self.max_update}" if self.max_update > 0 else ""

    def filter(
        self, lines: Iterable[bytes], out: BinaryIO, heartbeat: float = 30.0, quiet: bool = False
    ) -> None:
        """Copy ``lines`` to ``out`` (flushed per line), progress lines as :meth:`progress`.

        From a ``begin validation on "SUBSET"`` line to the subset's result line (``| SUBSET |``)
        or a training line, a line ``| validating on 'SUBSET' for N s ...`` is written every
        ``heartbeat`` seconds (by a thread; ``heartbeat`` <= 0: none); so is ``| training for
        N s, ...`` from fairseq's ``Start iterating over samples`` to the first ``train_inner``
        line (fairseq prints none before ``--log-interval`` updates), with the last update count
        any fairseq line gave (:data:`_UPDATE_COUNT`: a resumed run's checkpoint line).
        ``quiet``: lines :class:`TerminalNoise` drops are not copied.
        """
        lock = threading.Lock()
        # subset: the validation running; first: since when training runs without a progress
        # line yet (from fairseq's "Start iterating over samples" to the first train_inner);
        # updates: the last update count fairseq logged
        state: dict[str, object] = {
            "subset": None, "since": 0.0, "shown": 0.0, "first": None, "updates": None,
        }  # fmt: skip
        seen_inner = stats_said = False
        stop = threading.Event()

        def beat() -> None:
            while not stop.wait(min(heartbeat, 1.0)):
                with lock:
                    now = time.monotonic()
                    waiting = state["subset"] is not None or state["first"] is not None
                    if not waiting or now - state["shown"] < heartbeat:
                        continue
                    state["shown"] = now
                    if state["subset"] is not None:
                        text = (
                            f"| validating on {state['subset']!r} for "
                            f"{int(now - state['since'])} s (fairseq prints the result when the "
                            "whole subset is done; dev BLEU decodes it with beam search)\n"
                        )
                    elif state["updates"] is not None:
                        text = (
                            f"| training for {int(now - state['first'])} s, at "
                            f"{state['updates']}{self.total_text()} updates by fairseq's last "
                            "count; the ETA comes with its next progress line (every "
                            "--log-interval updates)\n"
                        )
                    else:
                        text = (
                            f"| training for {int(now - state['first'])} s, no progress line "
                            "yet: fairseq prints one every --log-interval updates, the ETA "
                            "comes with the first\n"
                        )
                    out.write(text.encode("utf-8"))
                    out.flush()

        watcher = threading.Thread(target=beat, daemon=True) if heartbeat > 0 else None
        if watcher is not None:
            watcher.start()
        noise = TerminalNoise() if quiet else None
        try:
            for raw in lines:
                try:
                    text = raw.decode("utf-8", errors="replace").rstrip("\r\n")
                    readable = self.progress(text)
                    shown = noise.keep(text) if noise is not None else text
                    count = _UPDATE_COUNT.search(text)
                except Exception:  # noqa: BLE001 - a line we cannot read passes through unchanged
                    text, readable, shown, count = "", None, None, None
                    noise = None
                if noise is not None and shown is None:
                    continue
                if noise is not None and shown != text:
                    raw = shown.encode("utf-8") + b"\n"
                # a progress line, or an epoch or validation line without its statistics
                lean = None if readable else without_attention_stats(shown or text)
                if readable or lean is not None:
                    raw = (readable or lean).encode("utf-8") + b"\n"
                    if not stats_said and (lean is not None or _STATS_KEY.search(text)):
                        stats_said = True  # said once, at the first line that had them
                        raw = STATS_LEFT_OUT.encode("utf-8") + b"\n" + raw
                with lock:
                    if count:
                        state["updates"] = int(count.group(1) or count.group(2))
                    sub = state["subset"]
                    if sub is not None and any(x in text for x in (f"| {sub} | ", *_TRAINING)):
                        state["subset"] = None  # the validation's result, or training again
                    if "| train_inner | " in text:
                        seen_inner, state["first"] = True, None
                    elif not seen_inner and "Start iterating over samples" in text:
                        state["first"] = state["shown"] = time.monotonic()
                    if VALIDATION_START in text:
                        state["first"] = None
                        state["subset"] = text.split(VALIDATION_START, 1)[1].split('"', 1)[0]
                        state["since"] = state["shown"] = time.monotonic()
                    out.write(raw)
                    out.flush()
        finally:
            stop.set()
            if watcher is not None:
                watcher.join()


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
    t.add_argument(
        "--heartbeat",
        type=float,
        default=30.0,
        help="seconds between the lines shown during a validation (0: none)",
    )
    t.add_argument(
        "--quiet",
        action="store_true",
        help="leave out dependency warnings and the model's repr (for a terminal; the log "
        "file keeps them)",
    )
    d = sub.add_parser("decode", help="periodic decoding progress of a fairseq-generate output")
    d.add_argument("--output", required=True, help="the fairseq-generate output being written")
    d.add_argument("--total", type=int, required=True, help="sentences to decode")
    d.add_argument("--interval", type=float, default=30.0, help="seconds between lines")
    d.add_argument("--pid", type=int, help="stop when this process exits")
    d.add_argument("--label", default="", help="prefix of each line")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status (:mod:`~.exits`: 2 on bad arguments)."""
    a = build_parser().parse_args(argv)
    try:
        if a.cmd == "train":
            TrainEta(a.max_update, a.max_epoch).filter(
                sys.stdin.buffer, sys.stdout.buffer, heartbeat=a.heartbeat, quiet=a.quiet
            )
        else:
            watch_decoding(a.output, a.total, a.interval, a.pid, a.label)
    except ValueError as exc:
        if a.cmd == "train":  # never block the log: pass it through without estimates
            print(f"warning: no ETA ({exc})", file=sys.stderr)
            for raw in sys.stdin.buffer:
                sys.stdout.buffer.write(raw)
                sys.stdout.buffer.flush()
            return 0
        return fail(exc, USAGE)
    except (BrokenPipeError, KeyboardInterrupt):
        return 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
