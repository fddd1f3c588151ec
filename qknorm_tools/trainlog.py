"""Statistics from ``fairseq-train`` logs (``--log-format simple`` or ``json``).

Lines look like::

    21:00:00 | INFO | train_inner | epoch 001:     10 / 50 loss=12.1, ..., num_updates=10
    21:01:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 11.5 | ... | num_updates 50
    21:01:00 | INFO | train | epoch 001 | loss 12 | ... | num_updates 50

or, with ``--log-format json``, ``| INFO | train_inner | {"epoch": 1, "loss": "12.1", ...}``
(end-of-epoch records carry keys prefixed with the tag, e.g. ``valid_loss``, stripped here).

The plugin logs per attention module ``qknorm_g_<module>`` (the QKNorm scale g),
``attn_entropy_<module>`` and ``attn_maxlogit_<module>``, and, once per model build, its
initial scale as ``QKNorm g0 = <value> (...)`` (read by :func:`qk_norm_g0`).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Mapping, Sequence
from pathlib import Path

__all__ = [
    "LogInputError",
    "STOP_REASONS",
    "best_valid_record",
    "dev_curve",
    "epochs_trained",
    "final_qk_norm_g",
    "last_num_updates",
    "max_attention_logit",
    "max_attention_logit_series",
    "metric_keys",
    "parse_log",
    "parse_log_line",
    "parse_log_text",
    "qk_norm_g0",
    "series",
    "stop_reason",
]


class LogInputError(ValueError):
    """An unreadable log or one without training statistics (the message names the file)."""


_LOG_RE = re.compile(
    r"\|\s*(?:INFO|WARNING|DEBUG)\s*\|\s*(?P<tag>[\w.\-]+)\s*\|\s*(?P<msg>.*?)\s*$"
)
_INNER_RE = re.compile(r"^epoch\s+(?P<epoch>\d+):\s+(?P<i>\d+)\s*/\s*(?P<n>\d+)\s*(?P<kv>.*)$")
_EPOCH_RE = re.compile(r"^epoch\s+(?P<epoch>\d+)$")
#: the model's one line per build (``QKNorm g0 = 13.028489 (qk_norm_length L = 92)``); the
#: optional colon also reads the earlier wording ``QKNorm: g0 = 13.0285 (L = 92)``
_G0_RE = re.compile(r"QKNorm:? g0 = (?P<g0>[-+0-9.eE]+)")
_UPDATES_RE = re.compile(r"num_updates[ =](\d+)")
G_PREFIX = "qknorm_g_"
MAXLOGIT_PREFIX = "attn_maxlogit_"
#: key prefixes of every attention statistic the model logs (``--attn-stats-interval``; the
#: plugin's ``STAT_PREFIXES``, which the tools cannot import: tests/test_train_log.py checks
#: they are equal). train.log and TensorBoard keep them; the terminal's progress lines do not.
ATTENTION_STAT_PREFIXES = ("attn_entropy_", MAXLOGIT_PREFIX, G_PREFIX, "qknorm_head_g_")


def _to_float(v) -> float | None:
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def _kind(tag: str, msg: str) -> str | None:
    if tag in ("train_inner", "train"):
        return tag
    if (
        tag.startswith("valid")
        or re.search(r"\bon '[^']+' subset", msg)
        or (msg.startswith("{") and f'"{tag}_loss"' in msg)
    ):
        return "valid"
    return None


def _json_metrics(tag: str, msg: str) -> tuple[int | None, dict[str, float]] | None:
    try:
        d = json.loads(msg)
    except json.JSONDecodeError:
        return None
    if not isinstance(d, dict):
        return None
    epoch, metrics, prefix = None, {}, tag + "_"
    for k, v in d.items():
        key = k[len(prefix) :] if k.startswith(prefix) else k
        if key == "epoch":
            epoch = int(v)
            continue
        f = _to_float(v)
        if f is not None:
            metrics[key] = f
    return epoch, metrics


def _inner_metrics(msg: str) -> tuple[int | None, dict[str, float]] | None:
    mi = _INNER_RE.match(msg)
    if not mi:
        return None
    metrics = {}
    for part in mi.group("kv").split(","):
        if "=" in part:
            k, v = part.split("=", 1)
            f = _to_float(v.strip())
            if f is not None:
                metrics[k.strip()] = f
    return int(mi.group("epoch")), metrics


def _summary_metrics(msg: str) -> tuple[int | None, dict[str, float]]:
    epoch, metrics = None, {}
    for part in msg.split(" | "):
        part = part.strip()
        me = _EPOCH_RE.match(part)
        if me:
            epoch = int(me.group("epoch"))
            continue
        if "subset" in part:
            continue
        bits = part.split()
        if len(bits) == 2:
            f = _to_float(bits[1])
            if f is not None:
                metrics[bits[0]] = f
    return epoch, metrics


def parse_log_line(line: str) -> dict[str, object] | None:
    """Parse one fairseq-train log line.

    Returns:
        ``{"kind": "train_inner"|"train"|"valid", "subset": str, "epoch": int|None,
        "metrics": {key: float}}`` or ``None`` for lines that are not training/validation
        statistics. ``metrics`` always uses un-prefixed keys (``loss``, ``nll_loss``,
        ``num_updates``, ...); non-numeric values are dropped.
    """
    m = _LOG_RE.search(line)
    if not m:
        return None
    tag, msg = m.group("tag"), m.group("msg")
    kind = _kind(tag, msg)
    if kind is None:
        return None
    if msg.startswith("{"):
        parsed = _json_metrics(tag, msg)
    elif kind == "train_inner":
        parsed = _inner_metrics(msg)
    else:
        parsed = _summary_metrics(msg)
    if parsed is None or not parsed[1]:
        return None
    return {"kind": kind, "subset": tag, "epoch": parsed[0], "metrics": parsed[1]}


def parse_log_text(text: str) -> list[dict[str, object]]:
    """Every statistics record (see :func:`parse_log_line`) of a log's text, in order."""
    return [r for r in (parse_log_line(line) for line in text.splitlines()) if r is not None]


def parse_log(path) -> list[dict[str, object]]:
    """Parse every statistics line of a fairseq-train log (simple or json format).

    Raises:
        LogInputError: unreadable file or no statistics lines (file named).
    """
    try:
        text = Path(path).read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise LogInputError(f"cannot read log {str(path)!r}: {exc.strerror or exc}") from None
    recs = parse_log_text(text)
    if not recs:
        raise LogInputError(f"no fairseq train/valid statistics found in log {str(path)!r}")
    return recs


def series(records: Sequence[Mapping[str, object]], kind: str, key: str) -> tuple[list, list]:
    """``(num_updates, values)`` of ``key`` in records of ``kind``, sorted by update.

    Records without ``num_updates`` or without ``key`` are skipped; for repeated
    ``num_updates`` (e.g. a resumed run) the last value wins.
    """
    pts: dict[float, float] = {}
    for r in records:
        mt = r["metrics"]
        if r["kind"] == kind and key in mt and "num_updates" in mt:
            pts[mt["num_updates"]] = mt[key]
    xs = sorted(pts)
    return xs, [pts[x] for x in xs]


def metric_keys(
    records: Sequence[Mapping[str, object]], prefix: str, kind: str | None = None
) -> list[str]:
    """All metric keys starting with ``prefix``, encoder modules first, in natural order."""
    keys = set()
    for r in records:
        if kind is None or r["kind"] == kind:
            keys.update(k for k in r["metrics"] if k.startswith(prefix))

    def natural(k):
        return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", k)]

    return sorted(keys, key=lambda k: (0 if "_enc" in "_" + k[len(prefix) :] else 1, natural(k)))


def qk_norm_g0(text: str) -> float | None:
    """The QKNorm initial scale ``g0`` the model logged (last model build), else ``None``."""
    found = _G0_RE.findall(text)
    return float(found[-1]) if found else None


def last_num_updates(text: str) -> int:
    """The largest ``num_updates`` in a log's text (0 if none)."""
    return max((int(m) for m in _UPDATES_RE.findall(text)), default=0)


def best_valid_record(records: Sequence[Mapping[str, object]]) -> Mapping[str, object] | None:
    """The validation record of ``checkpoint_best.pt``.

    fairseq logs ``best_<metric>`` in every validation record and saves checkpoint_best
    whenever ``<metric>`` equals it (ties go to the later record: ``is_better`` is ``<=`` /
    ``>=``), so the best record is the last one whose metric equals its ``best_`` value.
    Without any ``best_*`` key, the last validation record.
    """
    valid = [r for r in records if r["kind"] == "valid"]
    best = None
    for r in valid:
        mt = r["metrics"]
        for key, value in mt.items():
            if key.startswith("best_") and mt.get(key[len("best_") :]) == value:
                best = r
    if (
        best is None
        and valid
        and not any(k.startswith("best_") for r in valid for k in r["metrics"])
    ):
        best = valid[-1]
    return best


def final_qk_norm_g(records: Sequence[Mapping[str, object]]) -> dict[str, float]:
    """``{module: g}`` of the QKNorm scales at ``checkpoint_best.pt`` (empty without QKNorm).

    Read from the best validation record (:func:`best_valid_record`), where the model logs
    ``qknorm_g_<module>`` on every validation; modules are named ``enc{i}_self``,
    ``dec{i}_self``, ``dec{i}_cross``.
    """
    best = best_valid_record(records)
    if best is None:
        return {}
    mt = best["metrics"]
    return {k[len(G_PREFIX) :]: mt[k] for k in metric_keys([best], G_PREFIX)}


def max_attention_logit_series(
    records: Sequence[Mapping[str, object]], kinds: Sequence[str] = ("train_inner", "valid")
) -> tuple[list, list]:
    """``(num_updates, max attention logit)`` per logged record of the ``kinds``.

    The value is the largest logged ``attn_maxlogit_<module>`` over all attention modules
    (training and validation records at one update: the larger).

    The model (``--attn-stats-interval N``) logs each module's largest ``|logit|`` of a batch,
    of the actual pre-softmax logits (QKNorm: ``g cos``; dot product and QK-LayerNorm:
    ``q.k / sqrt(d_head)``), averaged over the batches recorded in a logging interval
    (training: one batch every N updates; validation: every batch); a ``train_inner`` record
    without a recorded batch carries no value and is skipped. The attention-logit growth of
    Wortsman et al. 2023 (Sec. 3.1) is read from this curve. Non-finite values are kept (a
    diverging run logs ``nan``/``inf``).
    """
    pts: dict[float, float] = {}
    for kind in kinds:
        for key in metric_keys(records, MAXLOGIT_PREFIX, kind):
            for x, y in zip(*series(records, kind, key)):
                prev = pts.get(x)
                if prev is None or math.isnan(y) or (not math.isnan(prev) and y > prev):
                    pts[x] = y  # the largest; a nan, once logged, stays
    xs = sorted(pts)
    return xs, [pts[x] for x in xs]


def max_attention_logit(records: Sequence[Mapping[str, object]]) -> float | None:
    """The largest attention logit logged during a run.

    Over training and validation records (see :func:`max_attention_logit_series`); ``nan`` if
    a non-finite one was logged, ``None`` when the run logged no attention statistics.
    """
    values = max_attention_logit_series(records)[1]
    if not values:
        return None
    if any(math.isnan(v) for v in values):
        return math.nan
    return max(values)


#: why a training ended, as :func:`stop_reason` names it from fairseq-train's own lines
#: (``fairseq_cli/train.py``): ``early_stop`` (``--patience``: "early stop since valid performance
#: hasn't improved for last N runs"), ``min_lr`` (the learning rate fell to ``--stop-min-lr``),
#: ``max_update`` (``--max-update`` reached), ``stop_time`` (``--stop-time-hours``),
#: ``max_epoch`` ("done training" without any of these: the epoch loop ran to ``--max-epoch``),
#: ``interrupted`` (no "done training" after the last training line: stopped, killed or crashed)
STOP_REASONS = ("early_stop", "min_lr", "max_update", "stop_time", "max_epoch", "interrupted")

_STOP_LINES = (
    (
        "early_stop",
        re.compile(r"early stop since valid performance hasn't improved for last \d+ runs"),
    ),
    ("min_lr", re.compile(r"stopping training because current learning rate .*")),
    ("max_update", re.compile(r"Stopping training due to num_updates: .*")),
    ("stop_time", re.compile(r"Stopping training due to cumulative_training_time: .*")),
)
_DONE_RE = re.compile(r"done training in [0-9.]+ seconds")


def stop_reason(text: str) -> tuple[str, str] | None:
    """Why the (last attempt of a) training ended, from fairseq-train's log text.

    fairseq logs the reason of a stop by ``--patience``, ``--stop-min-lr``, ``--max-update`` or
    ``--stop-time-hours`` (``fairseq_cli/train.py``: ``should_stop_early``, ``main``,
    ``validate_and_save``), then "done training in S seconds"; an epoch loop that ran to
    ``--max-epoch`` logs only the latter.

    Returns:
        ``(reason, message)``: ``reason`` one of :data:`STOP_REASONS`, ``message`` fairseq's
        line (without its timestamp and logger), or for ``interrupted`` the last training line;
        ``None`` for a log without any training statistics or stop line.
    """
    reason, message, finished, last_stat = None, None, False, None
    for line in text.splitlines():
        done = _DONE_RE.search(line)
        if done:
            if reason is None:
                reason, message = "max_epoch", done.group(0)
            finished = True
            continue
        for name, rx in _STOP_LINES:
            m = rx.search(line)
            if m:
                reason, message = name, m.group(0)
                break
        else:
            if parse_log_line(line) is not None:
                if finished:  # a resumed attempt trains on: its own end counts
                    reason, message, finished = None, None, False
                last_stat = line
    if reason is not None:
        return reason, message
    if last_stat is not None:
        m = _LOG_RE.search(last_stat)
        return "interrupted", (m.group("tag") + " | " + m.group("msg")) if m else last_stat.strip()
    return None


def epochs_trained(records: Sequence[Mapping[str, object]]) -> int | None:
    """The last epoch the log shows (``train`` / ``train_inner`` / ``valid`` records).

    ``None`` for records without any epoch.
    """
    epochs = [r["epoch"] for r in records if r["epoch"] is not None]
    return max(epochs) if epochs else None


def dev_curve(records: Sequence[Mapping[str, object]]) -> list[dict[str, float | int | None]]:
    """One point per validation: ``{"epoch", "updates", "loss", "lr", "wall"}``.

    ``loss`` is the dev loss (fairseq's ``loss``: label-smoothed cross-entropy in bits per target
    token); ``lr`` the learning rate the updates before the validation trained with: the
    end-of-epoch ``train`` record's ``lr`` at the same update (an epoch-end validation), else the
    last ``train_inner`` record's at or before it; ``wall`` fairseq's wall-clock meter in
    seconds (time since the training started, carried over resumes in the checkpoint) of the
    same record. A value the log lacks is ``None``. For a validation repeated at one update (a
    resumed run), the last one.
    """
    at_epoch_end = {}  # num_updates -> train record metrics
    inner = []  # (num_updates, metrics) in order
    for r in records:
        mt = r["metrics"]
        if "num_updates" not in mt:
            continue
        if r["kind"] == "train":
            at_epoch_end[int(mt["num_updates"])] = mt
        elif r["kind"] == "train_inner":
            inner.append((int(mt["num_updates"]), mt))
    points: dict[int, dict] = {}
    for r in records:
        mt = r["metrics"]
        if r["kind"] != "valid" or "num_updates" not in mt:
            continue
        u = int(mt["num_updates"])
        src = at_epoch_end.get(u)
        if src is None:
            before = [m for n, m in inner if n <= u]
            src = before[-1] if before else {}
        points[u] = {
            "epoch": r["epoch"],
            "updates": u,
            "loss": mt.get("loss"),
            "lr": src.get("lr"),
            "wall": src.get("wall"),
        }
    return [points[u] for u in sorted(points)]
