"""Committed records: what a finished grid cell leaves under ``results/`` (no torch, no fairseq).

A grid (``scripts/ablation.sh``, ``scripts/reproduce.sh``, ``scripts/lr_sweep.sh``) whose runs
outlive no sitting (a laptop, a preemptible VM, a CI runner: ``runs/`` is scratch) keeps one
small directory per finished cell, meant to be committed::

    results/LABEL/PAIR/records/SYSTEM/seedN[-variant]/    (the run directory's own name)
        record.json        the run record (RunRecord: identity, data_id, stop reason, updates,
                           epochs, wall + CPU time, dev curve, g per module, max attention logit,
                           scores) + the fairseq-train command, its settings modulo paths and
                           seed, and the code version (git commit, dirty flag)
        train.json command.txt data_identity.json [cpu_seconds] [diverged]
                           the run directory's files of the same names (small)
        train.log          the statistics lines of the run's train.log only (train_inner,
                           train, valid; QKNorm's g0 line; fairseq's stop lines): the curves,
                           g and the max logit, without model prints or warnings
        test.hyp test.score.json   the scored hypotheses (none for a cell that is trained only,
                           e.g. the LR sweep's size axis: ``"scored": false`` in record.json)
        test.C.hyp test.C.score.json   the same for each other checkpoint C the profile also
                           decodes (decode.also, e.g. test.last.*: the final checkpoint beside
                           the averaged one)

A record directory is thus a minimal run directory: :func:`read_record` reads it with the same
:data:`.records.RUN_READERS` as a live run, so a table made from records equals one made from
the live runs. Checkpoints and TensorBoard files are never copied.

Refusal rules (:func:`check_record`, :func:`merge_runs_and_records`): a record is not mixed with
runs or records made on other data (``data_id``), with other settings (the fairseq-train
command, modulo paths, the seed and the log interval) or of another profile label; a record and
a live run of the same cell must be identical (every field of their records but paths, and the
same hypotheses), else it is an error naming the record file and the differing key.
"""

from __future__ import annotations

import argparse
import json
import re
import shlex
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from . import trainlog
from .exits import fail
from .provenance import IDENTITY_FILE, RUN_IDENTITY_FILE, short_id
from .records import PATH_FIELDS, QKNORM_RECORD, RunRecord, read_run, run_status
from .textio import OutputError, ResultsError, atomic_output, output_error_message, sha256_file

__all__ = [
    "RECORD_FILE",
    "check_record",
    "code_version",
    "command_settings",
    "merge_runs_and_records",
    "portable_paths",
    "read_record",
    "record_dir",
    "settings_difference",
    "write_record",
]

RECORD_FILE = "record.json"
#: files of a run directory copied as they are (the small ones the record readers need)
COPIED = ("train.json", "command.txt", RUN_IDENTITY_FILE, "cpu_seconds", "wall_seconds", "diverged",
          QKNORM_RECORD)  # fmt: skip
#: fairseq-train options whose value is a path (differs between machines, not a setting)
PATH_OPTIONS = ("--save-dir", "--tensorboard-logdir", "--user-dir")
#: fairseq-train options that change what is printed, not what is trained (the progress
#: line's interval: a budget below 50 updates logs every ``budget`` updates since issue 37)
LOG_OPTIONS = ("--log-interval",)
REPO = Path(__file__).resolve().parents[1]


def _is_setting(option: str) -> bool:
    """Whether a fairseq-train option is a setting of the run (no path, printing or seed)."""
    return option not in PATH_OPTIONS and option not in LOG_OPTIONS and option != "--seed"


def record_dir(records_root, pair: str, run_dir) -> Path:
    """Where the committed record of a run directory lives.

    ``runs/PAIR/LABEL/SYSTEM/seedN[-...]`` -> ``RECORDS_ROOT/PAIR/records/SYSTEM/seedN[-...]``
    (``RECORDS_ROOT`` = ``results/LABEL``).
    """
    run = Path(run_dir)
    return Path(records_root) / pair / "records" / run.parent.name / run.name


def code_version(repo=REPO) -> dict[str, object]:
    """The code version of ``repo``: ``{"commit": git rev-parse HEAD, "dirty": bool}``.

    ``dirty``: tracked files differ from the commit. Both ``None`` outside a git checkout (or
    without git).
    """
    try:
        commit = subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
        status = subprocess.run(
            ["git", "-C", str(repo), "status", "--porcelain", "--untracked-files=no"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": bool(status.strip())}


def command_settings(command: str) -> dict[str, object]:
    """The settings of a fairseq-train command line, modulo paths, seed and log interval.

    ``command`` is ``command.txt`` or a ``scripts/train.sh --dry-run`` line (anything before
    the ``fairseq-train`` token, such as ``env OMP_NUM_THREADS=N`` or a launcher, is dropped;
    so is the executable's directory). The data directory (the positional argument), the values
    of :data:`PATH_OPTIONS` and :data:`LOG_OPTIONS` and ``--seed`` are left out.

    Returns:
        ``{option: value}`` (``True`` for a bare flag; the last occurrence wins, as in
        argparse), in command order.

    Raises:
        ResultsError: not a shell command line, or no ``fairseq-train`` in it.
    """
    try:
        tokens = shlex.split(command)
    except ValueError as exc:
        raise ResultsError(f"not a shell command line: {exc}") from None
    start = next((i for i, t in enumerate(tokens) if Path(t).name == "fairseq-train"), None)
    if start is None:
        raise ResultsError("no fairseq-train in the command")
    tokens = tokens[start + 1 :]
    out: dict[str, object] = {}
    i = 0
    while i < len(tokens):
        tok = tokens[i]
        if not tok.startswith("--"):
            i += 1  # the positional data directory
            continue
        nxt = tokens[i + 1] if i + 1 < len(tokens) else None
        value: object = True if nxt is None or nxt.startswith("--") else nxt
        i += 1 if value is True else 2
        if not _is_setting(tok):
            continue
        out.pop(tok, None)
        out[tok] = value
    return out


def portable_paths(text: str, bases: Sequence[str | Path] = ()) -> str:
    """``text`` (a committed result's JSON or Markdown) without the paths of the machine.

    A path under the repository, the working directory or one of ``bases`` becomes relative to
    it (``/work/main/data/bin/gl-en`` -> ``data/bin/gl-en``); one under the temporary directory
    starts with ``$TMPDIR``. The rest of the text is kept as it is.
    """
    roots = {str(Path(b).resolve()) for b in (REPO, Path.cwd(), *bases)} - {"/"}
    for root in sorted(roots, key=len, reverse=True):
        text = re.sub(rf"(?<![\w./]){re.escape(root)}/", "", text)
    tmp = str(Path(tempfile.gettempdir()).resolve())
    if tmp != "/":
        text = re.sub(rf"(?<![\w./]){re.escape(tmp)}/", "$TMPDIR/", text)
    return text


def portable_command(command: str) -> str:
    """``command`` (a run's ``command.txt``) without the paths of the machine that ran it.

    The work dir (what ``--save-dir`` holds before ``/runs/``) and the repository (the parent of
    ``--user-dir``) become relative: ``data/bin/gl-en``, ``runs/...``, ``fairseq_qknorm``; the
    ``fairseq-train`` executable loses its directory. The rest of the text is kept as it is, so
    :func:`command_settings` (modulo paths) gives the same settings.

    Raises:
        ResultsError: not a shell command line.
    """
    try:
        tokens = shlex.split(command)
    except ValueError as exc:
        raise ResultsError(f"not a shell command line: {exc}") from None
    bases = []
    for i, tok in enumerate(tokens[:-1]):
        value = tokens[i + 1]
        if tok == "--save-dir" and "/runs/" in value:
            bases.append(value.split("/runs/", 1)[0])
        elif tok == "--user-dir" and value.startswith("/"):
            bases.append(str(Path(value).parent))
    bases = sorted({b for b in bases if b.startswith("/") and b != "/"}, key=len, reverse=True)
    new = {}
    for tok in tokens:
        if not tok.startswith("/"):
            continue
        if Path(tok).name == "fairseq-train":
            new[tok] = "fairseq-train"
            continue
        base = next((b for b in bases if tok == b or tok.startswith(b + "/")), None)
        if base is not None:
            new[tok] = str(Path(tok).relative_to(base))
    for tok in sorted(new, key=len, reverse=True):  # a token is never rewritten inside another
        command = re.sub(rf"(?<!\S){re.escape(tok)}(?!\S)", lambda _m, t=tok: new[t], command)
    return command


def settings_difference(a: Mapping[str, object], b: Mapping[str, object]) -> str | None:
    """The first differing option of two :func:`command_settings`, ``None`` when equal.

    As ``--opt: A vs B`` (``absent`` for an option only one of them has). Options that are no
    settings (:data:`LOG_OPTIONS`, paths, the seed: a record written before an option stopped
    being a setting still stores it) are not compared.
    """
    for key in [k for k in list(a) + [k for k in b if k not in a] if _is_setting(k)]:
        va, vb = a.get(key, "absent"), b.get(key, "absent")
        if va != vb:
            return f"{key}: {va} vs {vb}"
    return None


def _stats_lines(text: str) -> str:
    """The lines of a train.log that the record readers use (:mod:`.trainlog`)."""
    keep = []
    for line in text.splitlines():
        if (
            trainlog.parse_log_line(line) is not None
            or trainlog.qk_norm_g0(line) is not None
            or trainlog.stop_reason(line) is not None
        ):
            keep.append(line)
    return "\n".join(keep) + ("\n" if keep else "")


def also_decoded(run: Path, split: str = "test") -> list:
    """The other checkpoints C decoded on ``split`` in the run directory ``run``.

    The names C of every ``SPLIT.C.score.json`` with its ``SPLIT.C.hyp`` (``scripts/evaluate.sh
    --checkpoint C``: ``last``, ``best`` or ``avgN``), sorted; [] when there is none.
    """
    names = []
    for score in sorted(Path(run).glob(f"{split}.*.score.json")):
        c = score.name[len(split) + 1 : -len(".score.json")]
        hyp = Path(run) / f"{split}.{c}.hyp"
        if re.fullmatch(r"best|last|avg[1-9][0-9]*", c) and hyp.is_file():
            names.append(c)
    return names


def write_record(
    run_dir, rec_dir, split: str = "test", repo=REPO, scored: bool = True
) -> RunRecord:
    """Write the committed record of a finished, scored run (see the module docstring).

    ``scored=False``: a finished training is enough (a cell that is trained only, or diverged);
    its scores are copied when present, and the record says ``"scored": false``.

    Written into a temporary sibling directory and renamed into place
    (:func:`~.textio.atomic_output`), so that an existing record is replaced whole or not at all.

    Returns:
        The record as read back from ``rec_dir`` (:func:`read_record`).

    Raises:
        ResultsError: the run is not finished (and scored) (the missing files are named).
        OutputError: the record cannot be written (``rec_dir`` named).
    """
    run, dest = Path(run_dir), Path(rec_dir)
    missing = run_status(run, split, scored)
    if missing:
        what = "finished, scored" if scored else "finished"
        raise ResultsError(f"{run} is not a {what} run: no {', '.join(missing)}")
    with atomic_output(dest, directory=True) as tmp:
        # the dev set's hypotheses and score too, when the run's dev set was decoded (the
        # per-run table's dev BLEU; records.RunRecord.dev_bleu_tok)
        # and the scores and hypotheses of the other checkpoints decoded on the split (a
        # profile's decode.also: SPLIT.C.score.json, SPLIT.C.hyp, e.g. test.last.*)
        exts = ("hyp", "score.json")
        others = [f"{split}.{c}.{e}" for c in also_decoded(run, split) for e in exts]
        scores = (f"{split}.hyp", f"{split}.score.json", "dev.hyp", "dev.score.json", *others)
        for name in (*COPIED, *scores):
            if (run / name).is_file():
                (tmp / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(run / name, tmp / name)
        if (run / "train.log").is_file():
            log = (run / "train.log").read_text(encoding="utf-8", errors="replace")
            (tmp / "train.log").write_text(_stats_lines(log), encoding="utf-8")
        command = None
        if (run / "command.txt").is_file():  # committed without this machine's paths
            text = (run / "command.txt").read_text(encoding="utf-8")
            (tmp / "command.txt").write_text(portable_command(text), encoding="utf-8")
            command = portable_command(text.strip())
        rec = read_run(tmp, split, scored=scored)
        files = sorted(p.relative_to(tmp).as_posix() for p in tmp.rglob("*") if p.is_file())
        doc = {
            "format": 1,
            "scored": scored,
            "record": _record_json(rec),
            "command": command,
            "settings": command_settings(command) if command is not None else None,
            "code": code_version(repo),
            "sha256": {name: sha256_file(tmp / name) for name in files},
        }
        text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
        (tmp / RECORD_FILE).write_text(text, "utf-8")
    return read_record(dest, split)


def _record_json(rec: RunRecord) -> dict[str, object]:
    """A record's JSON without its (machine-specific) paths."""
    return {k: v for k, v in rec.to_json().items() if k not in PATH_FIELDS}


def read_record(rec_dir, split: str = "test") -> RunRecord:
    """The :class:`RunRecord` of a committed record directory (read like a run directory).

    Its ``extra`` holds ``settings`` (:func:`command_settings`) and ``code``; ``source`` names
    its ``record.json``.

    Raises:
        ResultsError: no or unreadable ``record.json``, or the record lacks files.
    """
    rec_dir = Path(rec_dir)
    doc_path = rec_dir / RECORD_FILE
    try:
        doc = json.loads(doc_path.read_text(encoding="utf-8"))
    except OSError as exc:
        raise ResultsError(f"cannot read {str(doc_path)!r}: {exc.strerror or exc}") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"{str(doc_path)!r} is not valid UTF-8 JSON: {exc}") from None
    _check_listed_files(rec_dir, doc.get("sha256") if isinstance(doc, dict) else None, doc_path)
    rec = read_run(rec_dir, split, scored=doc.get("scored", True) is not False)
    rec.source = str(doc_path)
    _check_files_give_the_record(rec, doc.get("record"), doc_path)
    _check_checksums(rec_dir, doc.get("sha256"), doc_path)
    _check_place(rec, rec_dir, doc_path)
    rec.extra = {"settings": doc.get("settings"), "code": doc.get("code") or {}}
    return rec


def _check_files_give_the_record(rec: RunRecord, stored, doc_path: Path) -> None:
    """The record read from the files equals the one ``record.json`` stored when written.

    Every field ``record.json`` stores is compared, and the hypotheses have the scored number of
    lines: a file cut short (a truncated copy of train.log, test.hyp, ...) or edited by hand
    gives another record than the run did.
    """
    if not isinstance(stored, dict):
        raise ResultsError(f"{doc_path}: holds no record (key 'record'): not a committed record")
    if rec.hyp_path and rec.n_lines is not None:
        n = len(Path(rec.hyp_path).read_bytes().splitlines())
        if n != rec.n_lines:
            raise ResultsError(
                f"{doc_path}: {Path(rec.hyp_path).name} has {n} lines, its score was made on "
                f"{rec.n_lines} (a file cut short or edited?); restore the record (git "
                f"checkout) or remove it to train the cell again"
            )
    read = _record_json(rec)
    for key, value in stored.items():
        if key in read and read[key] != value:
            raise ResultsError(
                f"{doc_path}: its files do not give the record it stores: {key} {value!r} stored, "
                f"{read[key]!r} read from the files (a file cut short or edited?); restore the "
                f"record (git checkout) or remove it to train the cell again"
            )


def _check_checksums(rec_dir: Path, stored, doc_path: Path) -> None:
    """Every file ``record.json`` lists has the sha256 it stores (written by :func:`write_record`).

    Catches what :func:`_check_files_give_the_record` cannot: a file edited in place that keeps
    its line count and the fields read from it (a hypothesis rewritten by hand).
    """
    if not isinstance(stored, dict) or not stored:
        raise ResultsError(
            f"{doc_path}: stores no sha256 of its files (key 'sha256'): not a record written by "
            f"`python -m qknorm_tools.committed write`"
        )
    _check_listed_files(rec_dir, stored, doc_path)
    for name, digest in sorted(stored.items()):
        if sha256_file(rec_dir / name) != digest:
            raise ResultsError(
                f"{doc_path}: {name} is not the file the record was written with (its sha256 "
                f"differs: edited by hand?); restore the record (git checkout) or remove it to "
                f"train the cell again"
            )


def _check_listed_files(rec_dir: Path, stored, doc_path: Path) -> None:
    """Every file ``record.json`` lists (its ``sha256`` keys) is a file of the record directory.

    Checked before the files are read, so that a deleted file is named as such (not as a field
    the files no longer give); nothing to check without a ``sha256`` dict.
    """
    for name in sorted(stored) if isinstance(stored, dict) else ():
        if Path(name).is_absolute() or ".." in Path(name).parts:
            raise ResultsError(f"{doc_path}: lists {name!r}, which is not a file of the record")
        if not (rec_dir / name).is_file():
            raise ResultsError(
                f"{doc_path}: its file {name} is missing (deleted, or left out of a copy); "
                "restore the record (git checkout) or remove it to train the cell again"
            )


def _check_place(rec: RunRecord, rec_dir: Path, doc_path: Path) -> None:
    """A record under ``.../PAIR/records/SYSTEM/seedN[-...]`` is of that pair, system and seed."""
    if rec_dir.parent.parent.name != "records":
        return  # a record directory outside a results tree (written where asked)
    where = {"pair": rec_dir.parents[2].name, "system": rec_dir.parent.name}
    for key, expected in where.items():
        if str(getattr(rec, key)) != expected:
            raise ResultsError(
                f"{doc_path}: {key} {getattr(rec, key)!r}, but the record is filed under "
                f"{key} {expected!r}"
            )
    if not re.match(rf"seed{rec.seed}(-|$)", rec_dir.name):
        raise ResultsError(
            f"{doc_path}: seed {rec.seed}, but the record is filed under {rec_dir.name}"
        )


def _identity_fields(rec: RunRecord) -> dict[str, object]:
    """Every field of a record that says what the run was and gave (no paths, no extras)."""
    return {k: v for k, v in _record_json(rec).items() if k not in ("extra",)}


def _same_cell(live: RunRecord, rec: RunRecord) -> str | None:
    """Why a live run and its committed record differ (``None``: identical)."""
    a, b = _identity_fields(live), _identity_fields(rec)
    for key in a:
        if a[key] != b.get(key):
            return f"{key}: {a[key]!r} in the run, {b.get(key)!r} in the record"
    command = Path(live.run_dir, "command.txt")
    if command.is_file() or rec.extra.get("settings") is not None:
        sa = command_settings(command.read_text(encoding="utf-8")) if command.is_file() else {}
        diff = settings_difference(sa, rec.extra.get("settings") or {})
        if diff:
            return f"settings {diff} (run vs record)"
    if (live.hyp_path is None) != (rec.hyp_path is None):
        return "the hypotheses (test.hyp): only one of the two was decoded"
    if live.hyp_path and Path(live.hyp_path).read_bytes() != Path(rec.hyp_path).read_bytes():
        return "the hypotheses (test.hyp) differ"
    return None


def check_record(
    rec: RunRecord,
    profile: str | None = None,
    data_id: str | None = None,
    settings: Mapping[str, object] | None = None,
) -> None:
    """Refuse a committed record of another profile, other data or other settings.

    Args:
        rec: a record from :func:`read_record`.
        profile: the expected profile label (``PROFILE`` or ``PROFILE-max-update-N``).
        data_id: the expected data identity (the current ``data/bin/PAIR/identity.json``).
        settings: the expected :func:`command_settings` (the command the cell would run now).

    Raises:
        ResultsError: naming the record file and the differing key.
    """
    where = rec.source or rec.run_dir
    if profile is not None and rec.profile != profile:
        raise ResultsError(f"{where}: profile {rec.profile!r}, not {profile!r}: another profile")
    if data_id is not None and rec.data_id != data_id:
        raise ResultsError(
            f"{where}: data_id {short_id(rec.data_id)} differs from the current data "
            f"{short_id(data_id)}: the record was made on other data"
        )
    if settings is not None:
        if rec.extra.get("settings") is None:
            raise ResultsError(f"{where}: holds no fairseq-train command: its settings are unknown")
        diff = settings_difference(rec.extra["settings"], settings)
        if diff:
            raise ResultsError(
                f"{where}: made with other settings: {diff} (record vs this command)"
            )


def merge_runs_and_records(
    cells: Sequence[tuple[RunRecord | None, RunRecord | None]],
    profile: str | None = None,
) -> list[RunRecord]:
    """The runs of a collection, one per cell: its live run, else its committed record.

    A cell with both keeps the live run if the two are identical. Every record must be of the
    profile label ``profile``; all runs and records of one (pair, system, variant, precision)
    must share their settings (the fairseq-train command modulo paths, seed and log interval),
    and all of a pair their data (``data_id``).

    Args:
        cells: ``(live run or None, committed record or None)`` per cell, in table order.
        profile: the collection's profile label (``None``: not checked).

    Returns:
        The chosen records, in the order of ``cells`` (cells with neither are left out).

    Raises:
        ResultsError: a record that differs from its live run, is of another profile, or was
            made on other data / with other settings than the others (record file and key named).
    """
    out = []
    for live, rec in cells:
        if rec is not None:
            check_record(rec, profile=profile)
            if live is not None:
                diff = _same_cell(live, rec)
                if diff:
                    raise ResultsError(
                        f"{rec.source}: the committed record differs from the live run "
                        f"{live.run_dir}: {diff}; remove the one that is wrong"
                    )
        chosen = live if live is not None else rec
        if chosen is not None:
            out.append(chosen)
    settings_of: dict[tuple, tuple[str, Mapping]] = {}
    data_of: dict[str, tuple[str, str | None]] = {}
    for r in out:
        where = r.source or r.run_dir
        s = r.extra.get("settings")
        command = Path(r.run_dir, "command.txt")
        if s is None and command.is_file():
            s = command_settings(command.read_text(encoding="utf-8"))
        group = (r.pair, r.system, tuple(sorted(r.variant.items())), r.precision or "fp32")
        if s is not None and group in settings_of:
            first, ref = settings_of[group]
            diff = settings_difference(s, ref)
            if diff:
                raise ResultsError(
                    f"{where}: made with other settings than {first}: {diff}; "
                    f"a table never mixes them"
                )
        elif s is not None:
            settings_of[group] = (where, s)
        if r.pair in data_of and data_of[r.pair][1] != r.data_id:
            first, did = data_of[r.pair]
            raise ResultsError(
                f"{where}: data_id {short_id(r.data_id)} differs from {short_id(did)} of "
                f"{first}: made on other data; a table never mixes them"
            )
        data_of.setdefault(r.pair, (where, r.data_id))
    return out


# ---------------------------------------------------------------------------------- CLI
def _cmd_write(a) -> int:
    rec = write_record(a.run, a.record, a.split)
    print(f"wrote {a.record} ({rec.system} seed {rec.seed}, {rec.stop_reason or 'no stop line'})")
    return 0


def _cmd_check(a) -> int:
    rec = read_record(a.record, a.split)
    data_id = None
    if a.data_identity:
        data_id = json.loads(Path(a.data_identity).read_text(encoding="utf-8")).get("data_id")
    settings = command_settings(a.command) if a.command else None
    check_record(rec, profile=a.profile, data_id=data_id, settings=settings)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m qknorm_tools.committed`` argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m qknorm_tools.committed",
        description="Write or check the committed record of a finished grid cell.",
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="a finished, scored run -> its committed record")
    w.add_argument("run", help="the run directory")
    w.add_argument("record", help="the record directory (results/LABEL/PAIR/records/SYSTEM/seedN)")
    w.add_argument("--split", default="test")
    w.set_defaults(fn=_cmd_write)
    c = sub.add_parser("check", help="refuse a record of another profile, data or settings")
    c.add_argument("record", help="the record directory")
    c.add_argument("--profile", help="the expected profile label")
    c.add_argument("--data-identity", help=f"the current data's data/bin/PAIR/{IDENTITY_FILE}")
    c.add_argument("--command", help="the fairseq-train command the cell would run now")
    c.add_argument("--split", default="test")
    c.set_defaults(fn=_cmd_check)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status (:mod:`~.exits`: 1 data, 2 usage)."""
    a = build_parser().parse_args(argv)
    try:
        return a.fn(a)
    except OutputError as exc:
        return fail(output_error_message(exc))
    except (ResultsError, OSError, ValueError) as exc:
        return fail(exc)


if __name__ == "__main__":
    sys.exit(main())
