r"""Data provenance: which data a run trained on, checked before any later step reuses it.

One **data identity** covers everything a run's numbers depend on: the raw corpus
(``data/raw/PAIR``), its segmentation (``data/bpe/PAIR``: ``bpe.json``, BPE codes and
vocabularies or ``spm.model``, the segmented splits, ``length_stats.json``) and the binarized
data (``data/bin/PAIR``: dictionaries and ``.bin``/``.idx`` files). Each step's completion
marker (``.done``, written by ``scripts/lib.sh:qk_write_done``) holds the sha256 of every file
it made; the identity is

* ``raw``, ``bpe``, ``bin``: sha256 of the sorted ``"<sha256>  <file>"`` lines of each step's
  data files (``bin`` leaves out logs and markers, which do not change the data);
* ``data_id``: sha256 of ``"raw <raw>\nbpe <bpe>\nbin <bin>\n"`` (shown by its first 12 hex
  digits).

``scripts/binarize.sh`` writes it to ``data/bin/PAIR/identity.json`` (:func:`write_identity`).
Every later step first verifies the chain (:func:`check_data`): each step's files still match
its marker, ``data/bpe/PAIR`` was made from the current raw data (its ``.settings`` record the
raw marker's fingerprint) and ``data/bin/PAIR`` from the current BPE data, and
``identity.json`` is that of the files present. ``scripts/train.sh`` records the identity in the
run (``RUN/data_identity.json``, before training starts, so a resumed run is checked too) and
``train.json``; a run made on other data is refused with both identities named
(:func:`check_run`); ``scripts/evaluate.sh`` never decodes a run with other data than it was
trained on and stores the identity in each score file; ``qknorm_tools.collect`` carries it in
every run record, and result tables refuse to mix data versions of a pair
(:func:`check_one_data_version`).

Command line (what the scripts run; no torch, no fairseq)::

    python -m qknorm_tools.provenance write --pair P --data DATA --bin-dir DIR [--files F...]
    python -m qknorm_tools.provenance check --pair P --data DATA      # prints the data_id
    python -m qknorm_tools.provenance check-bpe --pair P --data DATA  # raw -> bpe only
    python -m qknorm_tools.provenance run RUN --identity DATA/bin/P/identity.json [--record]
    python -m qknorm_tools.provenance get FILE KEY                    # one field of a JSON file

Errors print ``error: ...`` with exit status 1 (data not consistent, a run made on other data,
an identity that cannot be written); usage errors exit 2 (:mod:`qknorm_tools.exits`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path

from .exits import fail
from .freshness import read_record
from .textio import (
    EvaluationError,
    OutputError,
    output_error_message,
    sha256_file,
    warn,
    write_text_atomic,
)

__all__ = [
    "IDENTITY_FILE",
    "RUN_IDENTITY_FILE",
    "DataMismatchError",
    "ProvenanceError",
    "check_data",
    "check_one_data_version",
    "check_run",
    "identity_of",
    "main",
    "read_identity",
    "short_id",
    "write_identity",
]

#: the identity of a binarized pair, ``data/bin/PAIR/identity.json``
IDENTITY_FILE = "identity.json"
#: the identity a run trained on, ``RUN/data_identity.json``
RUN_IDENTITY_FILE = "data_identity.json"
#: the raw data's ``.done`` as ``scripts/bpe.sh`` read it (``data/bpe/PAIR/.raw.done``, not
#: data): when the BPE data are stale it names the raw files that changed since
RAW_DONE_COPY = ".raw.done"
#: files of ``data/bin/PAIR`` that are not data: markers, the identity itself, logs
NOT_DATA = frozenset(
    {".done", ".settings", IDENTITY_FILE, "fairseq-preprocess.out", "preprocess.log"}
)


class ProvenanceError(EvaluationError):
    """The data on disk are not one consistent chain raw -> BPE -> binarized."""


class DataMismatchError(ProvenanceError):
    """A run (or score) was made on other data than the current ones."""


def short_id(data_id: str | None) -> str:
    """The first 12 hex digits of a data identity (``unknown`` for ``None``)."""
    return data_id[:12] if data_id else "unknown"


def _digest(lines: Iterable[str]) -> str:
    return hashlib.sha256("".join(f"{line}\n" for line in lines).encode("utf-8")).hexdigest()


def _files_digest(entries: Mapping[str, str]) -> str:
    """sha256 of the sorted ``"<sha256>  <name>"`` lines (``sha256sum``'s format)."""
    return _digest(f"{sha}  {name}" for name, sha in sorted(entries.items()))


def _read_done(step_dir: Path) -> dict[str, str]:
    """``{file: sha256}`` of ``step_dir/.done`` (``sha256sum`` output)."""
    marker = step_dir / ".done"
    try:
        text = marker.read_text(encoding="utf-8")
    except OSError:
        raise ProvenanceError(f"{marker} not found: {step_dir} is not complete") from None
    return _parse_sums(marker, text)


def _parse_sums(marker: Path, text: str) -> dict[str, str]:
    """``{file: sha256}`` of ``sha256sum`` output ``text`` read from ``marker``."""
    entries = {}
    for i, line in enumerate(text.splitlines(), start=1):
        sha, sep, name = line.partition("  ")
        if not sep or len(sha) != 64:
            raise ProvenanceError(f"{marker}:{i}: not a 'sha256  file' line: {line!r}")
        entries[name] = sha
    return entries


def _verify_done(step_dir: Path, fix: str) -> dict[str, str]:
    """The entries of ``step_dir/.done`` after checking every file still has its checksum."""
    entries = _read_done(step_dir)
    for name, sha in entries.items():
        path = step_dir / name
        if not path.is_file():
            raise ProvenanceError(f"{path} (listed in {step_dir}/.done) is missing: {fix}")
        if sha256_file(path) != sha:
            raise ProvenanceError(
                f"{path} was modified after it was made (its sha256 differs from "
                f"{step_dir}/.done): {fix}"
            )
    return entries


def _settings(step_dir: Path) -> dict[str, str]:
    """A data step's made-by record (``STEP/.settings``, :func:`.freshness.read_record`).

    ``{}`` when it is missing or unreadable (the chain check then names the step to rerun).
    """
    try:
        return read_record(step_dir / ".settings") or {}
    except (OSError, ValueError):
        return {}


def _marker_fingerprint(step_dir: Path) -> str:
    """sha256 of the ``.done`` file's bytes (``scripts/lib.sh:qk_fingerprint``)."""
    return sha256_file(step_dir / ".done")


def identity_of(raw: Mapping[str, str], bpe: Mapping[str, str], bin_: Mapping[str, str]) -> dict:
    """The data identity from each step's ``{file: sha256}``.

    Args:
        raw: the raw corpus files (``data/raw/PAIR/.done``).
        bpe: the segmentation's files (``data/bpe/PAIR/.done``).
        bin_: the binarized files; logs and markers (:data:`NOT_DATA`) are left out.

    Returns:
        ``{"data_id", "components": {"raw", "bpe", "bin"}}``, sha256 hex digests.
    """
    components = {
        "raw": _files_digest(raw),
        "bpe": _files_digest(bpe),
        "bin": _files_digest({k: v for k, v in bin_.items() if k not in NOT_DATA}),
    }
    data_id = _digest(f"{k} {components[k]}" for k in ("raw", "bpe", "bin"))
    return {"data_id": data_id, "components": components}


def _step_dirs(data: Path, pair: str) -> tuple[Path, Path, Path]:
    return data / "raw" / pair, data / "bpe" / pair, data / "bin" / pair


def _raw_changes(bpe_dir: Path, made_from: str | None, raw: Mapping[str, str]) -> str:
    """The raw files that changed since ``scripts/bpe.sh`` read them, said in a few words.

    ``raw`` holds the current raw checksums, ``made_from`` the fingerprint of the raw marker in
    the BPE data's ``.settings``. Returns ``"train.gl, dev.gl changed since scripts/bpe.sh
    ran"``, or ``""`` when unknown: no :data:`RAW_DONE_COPY` (BPE data made before it was
    kept), or not the marker that ``made_from`` names.
    """
    copy = bpe_dir / RAW_DONE_COPY
    try:
        if sha256_file(copy) != made_from:
            return ""
        old = _parse_sums(copy, copy.read_text(encoding="utf-8"))
    except (OSError, ValueError, ProvenanceError):
        return ""
    names = []
    for name in sorted(old.keys() | raw.keys(), key=lambda n: (n not in old, n)):
        if name not in raw:
            names.append(f"{name} (removed)")
        elif name not in old:
            names.append(f"{name} (new)")
        elif old[name] != raw[name]:
            names.append(name)
    return f"{', '.join(names)} changed since scripts/bpe.sh ran" if names else ""


def _chain_entries(data: Path, pair: str) -> tuple[dict, dict]:
    """Verified ``raw`` and ``bpe`` entries; ``bpe`` made from the current raw data."""
    raw_dir, bpe_dir, _ = _step_dirs(data, pair)
    raw = _verify_done(raw_dir, f"rerun scripts/prepare_data.sh {pair}")
    bpe = _verify_done(bpe_dir, f"rerun scripts/bpe.sh {pair} --force")
    made_from = _settings(bpe_dir).get("raw")
    if made_from != _marker_fingerprint(raw_dir):
        changes = _raw_changes(bpe_dir, made_from, raw)
        raise ProvenanceError(
            f"{bpe_dir} was made from other raw data than the current {raw_dir}"
            f"{f' ({changes})' if changes else ''}: "
            f"rerun scripts/bpe.sh {pair}, then scripts/binarize.sh {pair}"
        )
    return raw, bpe


def write_identity(data, pair: str, bin_dir, files: Sequence[str] | None = None) -> dict:
    """Write ``bin_dir/identity.json`` for freshly binarized data (``scripts/binarize.sh``).

    Args:
        data: the pipeline's data directory (``raw/PAIR``, ``bpe/PAIR`` below it).
        pair: the language pair.
        bin_dir: the binarized files (the temporary directory before it is put in place).
        files: the outputs of ``bin_dir`` (those its ``.done`` will list); default: every
            file in it.

    Returns:
        The identity written (``data_id``, ``components``, ``pair``, ``bpe_tool``, and
        ``text_normalize`` when ``prepare_data.sh`` normalized the text: ``[text] normalize``).

    Raises:
        ProvenanceError: the raw or BPE data are not complete or not one chain.
    """
    data, bin_dir = Path(data), Path(bin_dir)
    raw, bpe = _chain_entries(data, pair)
    if files is None:
        files = [p.name for p in bin_dir.iterdir() if p.is_file() and not p.name.startswith(".")]
    bin_files = {name: sha256_file(bin_dir / name) for name in files if name not in NOT_DATA}
    ident = identity_of(raw, bpe, bin_files)
    try:
        tool = json.loads((data / "bpe" / pair / "bpe.json").read_text(encoding="utf-8"))["tool"]
    except (OSError, ValueError, KeyError):
        tool = None
    ident.update(pair=pair, bpe_tool=tool)
    # the raw text's Unicode normalization ([text] normalize), when it changed the text:
    # the translate helper applies it to its input (absent: the text as the corpus had it)
    normalize = _settings(data / "raw" / pair).get("normalize")
    if normalize:
        ident["text_normalize"] = normalize
    write_text_atomic(bin_dir / IDENTITY_FILE, json.dumps(ident, indent=2) + "\n")
    return ident


def read_identity(path: Path) -> dict | None:
    """The identity stored at ``path`` (``identity.json``, ``data_identity.json``), or None.

    Raises:
        ProvenanceError: the file is not JSON or has no ``data_id``.
    """
    try:
        ident = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise ProvenanceError(f"{path}: not a readable identity ({exc})") from None
    if not isinstance(ident, dict) or not ident.get("data_id"):
        raise ProvenanceError(f"{path}: no data_id")
    return ident


def check_data(data, pair: str) -> dict:
    """The identity of the current ``data/bin/PAIR`` after verifying the whole chain.

    Verifies that every file of ``raw``, ``bpe`` and ``bin`` still matches its step's marker,
    that the BPE data were made from the current raw data and the binarized data from the
    current BPE data, and that ``identity.json`` is the identity of these files.

    Raises:
        ProvenanceError: what is stale or modified, and the step to rerun.
    """
    data = Path(data)
    _, bpe_dir, bin_dir = _step_dirs(data, pair)
    raw, bpe = _chain_entries(data, pair)
    bin_ = _verify_done(bin_dir, f"rerun scripts/binarize.sh {pair} --force")
    if _settings(bin_dir).get("bpe") != _marker_fingerprint(bpe_dir):
        raise ProvenanceError(
            f"{bin_dir} was binarized from another {bpe_dir} (scripts/bpe.sh was rerun since): "
            f"rerun scripts/binarize.sh {pair}"
        )
    stored = read_identity(bin_dir / IDENTITY_FILE)
    if stored is None:
        raise ProvenanceError(
            f"{bin_dir}/{IDENTITY_FILE} not found (binarized before data identities were "
            f"recorded): rerun scripts/binarize.sh {pair} --force"
        )
    current = identity_of(raw, bpe, bin_)
    if stored["data_id"] != current["data_id"]:
        raise ProvenanceError(
            f"{bin_dir}/{IDENTITY_FILE} ({short_id(stored['data_id'])}) is not the identity of "
            f"the data present ({short_id(current['data_id'])}): rerun scripts/binarize.sh "
            f"{pair} --force"
        )
    return stored


def _differences(a: Mapping, b: Mapping) -> str:
    names = {"raw": "raw corpus", "bpe": "BPE segmentation", "bin": "binarized data/dictionary"}
    ca, cb = a.get("components") or {}, b.get("components") or {}
    diff = [names[k] for k in ("raw", "bpe", "bin") if ca.get(k) != cb.get(k)]
    return ", ".join(diff) if diff else "unknown parts"


def check_run(run_dir, identity: Mapping, record: bool = False) -> str | None:
    """Check (and with ``record``, store) the data identity of a run.

    Args:
        run_dir: the run directory.
        identity: the current data's identity (:func:`check_data`).
        record: write ``RUN/data_identity.json`` when the run has none yet and is not finished
            (``train.json`` absent): what ``scripts/train.sh`` does before training.

    Returns:
        The run's data identity, or ``None`` for a run that predates data identities (a
        warning says that its data cannot be verified).

    Raises:
        DataMismatchError: the run was trained on other data (both identities and what
            differs are named).
    """
    run = Path(run_dir)
    path = run / RUN_IDENTITY_FILE
    recorded = read_identity(path)
    if recorded is not None:
        if recorded["data_id"] != identity["data_id"]:
            raise DataMismatchError(
                f"{run} was trained on data {short_id(recorded['data_id'])} ({path}), but the "
                f"current data of {identity.get('pair') or 'the pair'} are "
                f"{short_id(identity['data_id'])} (they differ in: "
                f"{_differences(recorded, identity)})"
            )
        return recorded["data_id"]
    if record and not (run / "train.json").exists():
        run.mkdir(parents=True, exist_ok=True)
        if (run / "checkpoints" / "checkpoint_last.pt").exists():
            warn(
                f"{run} has a checkpoint but no {RUN_IDENTITY_FILE} (made before data identities "
                f"were recorded): resuming it on the current data {short_id(identity['data_id'])}"
            )
        write_text_atomic(path, json.dumps(dict(identity), indent=2) + "\n")
        return identity["data_id"]
    warn(
        f"{run} has no {RUN_IDENTITY_FILE} (made before data identities were recorded): "
        f"which data it was trained on cannot be verified"
    )
    return None


def check_one_data_version(records: Sequence) -> dict[str, str | None]:
    """The data identity of each pair of a set of run records (what a table shows).

    Args:
        records: :class:`~.records.RunRecord` objects (``pair``, ``data_id``, ``run_dir``).

    Returns:
        ``{pair: data_id}`` (``None`` when no record of the pair has one).

    Raises:
        DataMismatchError: runs of one pair were trained on different data (the identities
            and their runs are named): a table would mix data versions.
    """
    by_pair: dict[str, dict[str | None, list[str]]] = {}
    for r in records:
        label = r.run_dir or f"{r.system} seed {r.seed}"
        by_pair.setdefault(r.pair, {}).setdefault(r.data_id, []).append(label)
    out = {}
    for pair, ids in by_pair.items():
        known = [i for i in ids if i is not None]
        if len(known) > 1:
            detail = "; ".join(f"{short_id(i)}: {', '.join(ids[i])}" for i in known)
            raise DataMismatchError(
                f"runs of {pair} were trained on different data ({detail}): a table never mixes "
                f"data versions; retrain the stale runs (scripts/train.sh ... --force) or collect "
                f"each data version separately"
            )
        if None in ids and known:
            warn(
                f"{pair}: {len(ids[None])} run(s) without a data identity (made before identities "
                f"were recorded) are reported next to runs on data {short_id(known[0])}: "
                f"{', '.join(ids[None])}"
            )
        out[pair] = known[0] if known else None
    return out


# ---------------------------------------------------------------------------
# command line


def _cmd_write(a) -> int:
    ident = write_identity(a.data, a.pair, a.bin_dir, a.files)
    print(ident["data_id"])
    return 0


def _cmd_check(a) -> int:
    identity = check_data(a.data, a.pair)
    if a.run:  # the run too (scripts/evaluate.sh): one process for both checks
        check_run(a.run, identity)
    print(identity["data_id"])
    return 0


def _cmd_check_bpe(a) -> int:
    _chain_entries(Path(a.data), a.pair)
    return 0


def _cmd_run(a) -> int:
    identity = read_identity(Path(a.identity))
    if identity is None:
        raise ProvenanceError(f"{a.identity} not found")
    print(check_run(a.run, identity, record=a.record) or "")
    return 0


def _cmd_get(a) -> int:
    try:
        value = json.loads(Path(a.file).read_text(encoding="utf-8")).get(a.key)
    except FileNotFoundError:
        value = None
    except (OSError, ValueError, AttributeError) as exc:
        raise ProvenanceError(f"{a.file}: not a JSON object ({exc})") from None
    print("" if value is None else value)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m qknorm_tools.provenance`` argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m qknorm_tools.provenance",
        description="Data identities: which data a run trained on, checked before reuse.",
    )
    sub = p.add_subparsers(dest="cmd", required=True)
    w = sub.add_parser("write", help="write BIN_DIR/identity.json (scripts/binarize.sh)")
    w.add_argument("--pair", required=True)
    w.add_argument("--data", required=True, help="the data directory (raw/, bpe/, bin/)")
    w.add_argument("--bin-dir", required=True, help="the binarized files of PAIR")
    w.add_argument("--files", nargs="+", help="its outputs (default: every file in it)")
    w.set_defaults(fn=_cmd_write)
    c = sub.add_parser("check", help="verify raw -> bpe -> bin of PAIR, print its data_id")
    c.add_argument("--pair", required=True)
    c.add_argument("--data", required=True, help="the data directory (raw/, bpe/, bin/)")
    c.add_argument("--run", help="also check that this run was trained on these data")
    c.set_defaults(fn=_cmd_check)
    cb = sub.add_parser(
        "check-bpe",
        help="verify raw -> bpe of PAIR: the BPE data made from the current raw data "
        "(scripts/binarize.sh, before it binarizes)",
    )
    cb.add_argument("--pair", required=True)
    cb.add_argument("--data", required=True, help="the data directory (raw/, bpe/, bin/)")
    cb.set_defaults(fn=_cmd_check_bpe)
    r = sub.add_parser("run", help="a run's data identity against the current one")
    r.add_argument("run", help="the run directory")
    r.add_argument("--identity", required=True, help="the current data/bin/PAIR/identity.json")
    r.add_argument("--record", action="store_true", help="store it in an unfinished run")
    r.set_defaults(fn=_cmd_run)
    g = sub.add_parser("get", help="print one field of a JSON file (empty if absent)")
    g.add_argument("file")
    g.add_argument("key")
    g.set_defaults(fn=_cmd_get)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status.

    0, or 1 (:mod:`~.exits`: data not consistent, a run made on other data, an identity file
    that cannot be written); 2 on usage errors.
    """
    a = build_parser().parse_args(argv)
    try:
        return a.fn(a)
    except OutputError as exc:
        return fail(output_error_message(exc))
    except (EvaluationError, OSError) as exc:  # DataMismatchError too
        return fail(exc)


if __name__ == "__main__":
    sys.exit(main())
