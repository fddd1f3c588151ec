"""Text I/O of the evaluation tools: errors, UTF-8 line files, ``fairseq-generate`` output.

Errors are subclasses of :class:`EvaluationError` (a ``ValueError``) whose messages name the
offending file and line; the command lines turn them into ``error: ...`` and exit status 2.
Outputs are written through :func:`atomic_output` / :func:`write_text_atomic`: a failed write
raises :class:`OutputError`, which names the output's own path (exit status 1).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import stat
import sys
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path

from . import exits

__all__ = [
    "sha256_file",
    "BPE_MODES",
    "BPE_TOOL_SYMBOL",
    "BPEMarkerError",
    "EmptyFileError",
    "EncodingError",
    "EvaluationError",
    "GenerateOutputError",
    "InputFileError",
    "ArgumentError",
    "LineCountError",
    "OutputError",
    "ResultsError",
    "BPE_MANIFEST",
    "bpe_manifest",
    "bpe_tool",
    "check_same_length",
    "extract_hypotheses",
    "find_bpe_markers",
    "load_hyp_ref",
    "parse_generate_output",
    "read_lines",
    "remove_bpe",
    "atomic_output",
    "output_error_message",
    "warn",
    "write_bpe_manifest",
    "write_lines",
    "write_text_atomic",
]


class EvaluationError(ValueError):
    """Base class of all input errors of the evaluation tools (a ``ValueError``)."""


class ArgumentError(EvaluationError, exits.UsageError):
    """A malformed or contradictory argument: a usage error (exit status 2, :mod:`.exits`)."""


class InputFileError(EvaluationError):
    """A file is missing or unreadable."""


class LineCountError(EvaluationError):
    """Hypothesis and reference files have different numbers of lines."""


class EmptyFileError(EvaluationError):
    """A hypothesis (or reference) file has no lines."""


class EncodingError(EvaluationError):
    """A file is not valid UTF-8 (the message names file and line)."""


class GenerateOutputError(EvaluationError):
    """``fairseq-generate`` output has missing, duplicate or too few sentence ids."""


class ResultsError(EvaluationError):
    """Malformed or incomplete run records (aggregate / ablation input)."""


class BPEMarkerError(EvaluationError):
    """Text to be scored still holds subword markers (``@@`` or ``\u2581``)."""


class OutputError(OSError):
    """An output cannot be written (disk full, a directory or a file in the way, ...).

    ``filename`` is the output's own path, never the temporary sibling it was written
    through; ``str()`` is the whole message (``cannot write PATH: reason; ...``). An
    ``OSError``, so that the command lines exit with status 1 (an output error) for it.
    """

    def __init__(self, path, reason: str, errno_: int | None = None, kept: bool = False):
        super().__init__(errno_, reason, str(path))
        self.kept = kept

    def __str__(self) -> str:
        tail = f"; the existing {self.filename} is left as it was" if self.kept else ""
        return f"cannot write {self.filename}: {self.strerror}{tail}"


def output_error_message(exc: OSError) -> str:
    """The ``error:`` text of a command line for an ``OSError`` (no ``error:`` prefix).

    :class:`OutputError` is its own message; another ``OSError`` is ``FILE: reason`` (its
    ``filename`` and ``filename2`` when it has them, else only the reason): never a
    placeholder for a missing name.
    """
    if isinstance(exc, OutputError):
        return str(exc)
    names = " -> ".join(str(f) for f in (exc.filename, exc.filename2) if f is not None)
    reason = exc.strerror or str(exc)
    return f"{names}: {reason}" if names else reason


def _in(path, tmp: Path) -> bool:
    """Whether ``path`` (an OSError's filename) is ``tmp`` or lies below it."""
    try:
        p = Path(os.fsdecode(path)).absolute()
    except TypeError:  # a file descriptor
        return False
    return p == tmp.absolute() or tmp.absolute() in p.parents


@contextmanager
def atomic_output(path, directory: bool = False) -> Iterator[Path]:
    """Write ``path`` whole or not at all: yield a hidden sibling to write, then rename it.

    The body writes the yielded path (``.NAME.partial`` next to ``path``: a file, or with
    ``directory`` a directory made empty), which replaces ``path`` when the body returns.
    On any error the sibling is removed and an existing ``path`` is left as it was. A
    symlink is followed (its target replaced, the link kept); an existing ``path`` that is
    not a regular file or directory (``/dev/stdout``, a FIFO) cannot be replaced and is
    yielded itself, written in place. Parent directories are created.

    Raises:
        OutputError: the parent directory, the sibling or the rename failed, or the body
            raised an ``OSError`` of the sibling (or one without a file name, as a full disk
            gives): the message names ``path``. Other errors of the body pass unchanged.
    """
    shown = Path(path)
    real = Path(os.path.realpath(shown))
    try:
        mode = os.stat(real).st_mode
    except OSError:
        mode = None
    in_place = mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))
    kept = mode is not None and not in_place
    tmp = real if in_place else real.with_name(f".{real.name}.partial")
    try:
        try:
            real.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise OutputError(
                shown, f"cannot make its directory ({output_error_message(exc)})", exc.errno
            ) from None
        try:
            if not in_place:
                _remove(tmp)
                if directory:
                    tmp.mkdir()
            yield tmp
            if not in_place:
                _replace(tmp, real, directory and mode is not None and stat.S_ISDIR(mode))
        except OSError as exc:
            if isinstance(exc, OutputError):
                raise
            ours = [f for f in (exc.filename, exc.filename2) if f is not None]
            if ours and not any(_in(f, tmp) or _in(f, real) for f in ours):
                raise  # the body's own error of another file (an input it reads)
            raise OutputError(shown, exc.strerror or str(exc), exc.errno, kept=kept) from None
    finally:
        if not in_place:
            _remove(tmp)


def _replace(tmp: Path, real: Path, old_dir: bool) -> None:
    """Rename ``tmp`` to ``real``; an existing directory ``real`` is set aside, then removed.

    If the second rename fails, the directory set aside is put back.
    """
    if not old_dir:
        os.replace(tmp, real)
        return
    old = real.with_name(f".{real.name}.old")
    _remove(old)
    os.replace(real, old)
    try:
        os.replace(tmp, real)
    except OSError:
        os.replace(old, real)
        raise
    _remove(old)


def _remove(path: Path) -> None:
    """Remove a file or directory tree if it is there (errors ignored)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            path.unlink()
        except OSError:
            pass


def write_text_atomic(path, text: str) -> None:
    r"""Write ``text`` (UTF-8, ``\n`` kept as is) to ``path`` through :func:`atomic_output`.

    Raises:
        OutputError: it cannot be written (the message names ``path``; an existing file is
            left as it was).
    """
    with atomic_output(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)


_BOM = "\ufeff"

#: subword-nmt's continuation marker ending a token, or sentencepiece's word-boundary piece
_BPE_MARKER = re.compile(r"\S@@(?=\s|$)|\u2581")


def warn(msg: str) -> None:
    """Print ``warning: msg`` on stderr."""
    print(f"warning: {msg}", file=sys.stderr)


# ---------------------------------------------------------------------------
# fairseq-generate failures

#: what torch / fairseq print for a checkpoint file that is cut short or not a checkpoint
#: (torch.load: a zip without its central directory, an empty or cut pickle)
_TRUNCATED = (
    "PytorchStreamReader failed",
    "failed finding central directory",
    "Ran out of input",
    "unexpected EOF",
    "invalid load key",
)


#: fairseq's refusal of a sentence longer than the model takes (``filter_indices_by_size``):
#: its 0-based index, its (source, target) sizes with the end-of-sentence token, the limits
_INVALID_SIZE = re.compile(
    r"Size of sample #(\d+) is invalid \(=\((\d+), (\d+)\)\) since max_positions=\((\d+), (\d+)\)"
)


def _too_long_message(m: re.Match, split_files: Sequence[str]) -> str:
    """The line fairseq-generate stopped at (``_INVALID_SIZE``), named by file and 1-based line."""
    line = int(m.group(1)) + 1
    sizes = int(m.group(2)), int(m.group(3))
    limits = int(m.group(4)), int(m.group(5))
    names = list(split_files) or ["source", "target"]
    over = [
        f"{name}:{line}: {size - 1} tokens after segmentation, over {limit - 1}, the most the "
        f"model takes (max positions {limit}, one for the end-of-sentence token)"
        for name, size, limit in zip(names, sizes, limits)
        if size > limit
    ]
    return "; ".join(over) or f"line {line} is longer than the model takes ({m.group(0)})"


def explain_generate_failure(
    log: str, checkpoint: str, data: str, split_files: Sequence[str] = ()
) -> str:
    """The error message for a failed ``fairseq-generate`` whose stderr is ``log``.

    Names the cause where the log shows one: a truncated or corrupt ``checkpoint`` (torch's
    load errors), a checkpoint made for another dictionary or model size than ``data``
    (``load_state_dict``'s ``size mismatch for ...``, e.g. an embedding of another vocabulary
    size), or a line longer than the model takes (fairseq's ``Size of sample #N is invalid``,
    named as ``FILE:LINE`` of ``split_files``, the segmented source and target of the split,
    with its length and the limit); else the last error line of the log. Never raises.
    """
    lines = [x.strip() for x in log.splitlines() if x.strip()]
    m = next((m for x in lines if (m := _INVALID_SIZE.search(x))), None)
    if m:
        return _too_long_message(m, split_files)
    hit = next((x for x in lines if any(t in x for t in _TRUNCATED)), None)
    if hit:
        return (
            f"{checkpoint} is truncated or not a checkpoint ({hit[:160]}): restore it, or "
            "retrain (scripts/train.sh resumes from checkpoints/checkpoint_last.pt)"
        )
    hit = next((x for x in lines if x.startswith("size mismatch for ")), None)
    if hit:
        return (
            f"{checkpoint} was made with another dictionary or model size than {data} "
            f"({hit[:200]}): decode it with the data it was trained on (data/bin/PAIR), or "
            "retrain it on these"
        )
    last = next((x for x in reversed(lines) if "Error" in x or "error" in x), None)
    return f"fairseq-generate failed{f' ({last[:200]})' if last else ''}"


# ---------------------------------------------------------------------------
# line files


def read_lines(path, what: str = "file") -> list[str]:
    r"""Read a UTF-8 text file into a list of lines (without line terminators).

    Lines are split on ``\\n`` only (not on Unicode line separators, which
    ``str.splitlines`` would break on); a final newline does not create an extra empty
    line, and a trailing ``\\r`` is kept (sacreBLEU strips it). A UTF-8 byte order mark
    (U+FEFF) at the start of the file or of a line is removed with a warning: it is an
    encoding signature (Windows editors write one), not text, and kept it would glue itself
    to the first word, so that identical text no longer scores BLEU 100.

    Args:
        path: file to read.
        what: role of the file for error messages ("hypothesis", ...).

    Returns:
        The lines.

    Raises:
        InputFileError: the file cannot be read.
        EncodingError: a line is not valid UTF-8 (names file and 1-based line number).
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputFileError(
            f"cannot read {what} file {str(path)!r}: {exc.strerror or exc}"
        ) from None
    if not data:
        return []
    raw = data.split(b"\n")
    if raw[-1] == b"":
        raw.pop()
    lines, bom_lines = [], []
    for i, line in enumerate(raw, start=1):
        try:
            text = line.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise EncodingError(
                f"{what} file {str(path)!r}: invalid UTF-8 on line {i} "
                f"(byte offset {exc.start} in that line: {line[exc.start : exc.start + 4]!r})"
            ) from None
        if text.startswith(_BOM):
            bom_lines.append(i)
            text = text.lstrip(_BOM)
        lines.append(text)
    if bom_lines:
        where = ", ".join(map(str, bom_lines[:5])) + (" ..." if len(bom_lines) > 5 else "")
        warn(
            f"{what} file {str(path)!r}: removed a UTF-8 byte order mark (BOM) at the start of "
            f"{len(bom_lines)} line(s) (line {where}); it is not text and would change the scores"
        )
    return lines


def write_lines(path, lines: Iterable[str]) -> None:
    r"""Write one string per line, UTF-8, ``\\n``-terminated, whole or not at all.

    Creates parent directories; written through :func:`atomic_output`.

    Raises:
        OutputError: it cannot be written (an existing file is left as it was).
    """
    with atomic_output(path) as tmp:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            for line in lines:
                f.write(line + "\n")


def find_bpe_markers(lines: Sequence[str]) -> list[int]:
    """The 1-based numbers of the lines that hold a subword marker.

    A marker is a token ending in ``@@`` (subword-nmt's continuation mark; ``@@`` alone or
    inside a token is text) or the sentencepiece word-boundary symbol U+2581.
    """
    return [i for i, line in enumerate(lines, start=1) if _BPE_MARKER.search(line)]


def check_same_length(
    hyps: Sequence[str],
    hyp_path,
    refs: Sequence[str],
    ref_path,
    allow_bpe_markers: bool = False,
) -> None:
    """Check that hypotheses and references are non-empty, aligned and free of BPE.

    Args:
        hyps: hypothesis lines.
        hyp_path: their file (or a name) for messages.
        refs: reference lines.
        ref_path: their file (or a name) for messages.
        allow_bpe_markers: score text holding ``@@`` / ``\u2581`` (a warning instead of an
            error), for text where these are really part of it.

    Raises:
        EmptyFileError: either side has 0 lines.
        LineCountError: different numbers of lines (both files and counts named).
        BPEMarkerError: subword markers left in either side (segmentation not removed; the
            file, the number of lines and the first one are named), unless allowed.
    """
    if len(hyps) == 0:
        raise EmptyFileError(
            f"hypothesis file {str(hyp_path)!r} is empty (0 lines); "
            f"the reference {str(ref_path)!r} has {len(refs)} lines"
        )
    if len(refs) == 0:
        raise EmptyFileError(f"reference file {str(ref_path)!r} is empty (0 lines)")
    if len(hyps) != len(refs):
        raise LineCountError(
            f"line count mismatch: hypothesis file {str(hyp_path)!r} has {len(hyps)} lines, "
            f"reference file {str(ref_path)!r} has {len(refs)} lines"
        )
    for kind, lines, path in (("hypothesis", hyps, hyp_path), ("reference", refs, ref_path)):
        marked = find_bpe_markers(lines)
        if not marked:
            continue
        msg = (
            f"{kind} file {str(path)!r} still holds subword markers ('@@' or '\u2581') on "
            f"{len(marked)} of {len(lines)} lines (first: line {marked[0]}: "
            f"{lines[marked[0] - 1][:80]!r}): BLEU on subword pieces is not comparable"
        )
        if not allow_bpe_markers:
            raise BPEMarkerError(
                msg + "; remove the segmentation first (python -m qknorm_tools.evaluate extract "
                "--bpe-dir data/bpe/PAIR), or score with --allow-bpe-markers if they are text"
            )
        warn(msg + " (scored as is: --allow-bpe-markers)")
    if all(not h.strip() for h in hyps):
        warn(
            f"every one of the {len(hyps)} lines of hypothesis file {str(hyp_path)!r} is empty: "
            f"its scores are 0"
        )


def load_hyp_ref(
    hyp_path, ref_path, allow_bpe_markers: bool = False
) -> tuple[list[str], list[str]]:
    """Read and validate a hypothesis file and its reference (:func:`check_same_length`).

    Returns:
        ``(hyps, refs)``, lists of equal, non-zero length.

    Raises:
        EncodingError: invalid UTF-8 (file and line named).
        EmptyFileError: a file with 0 lines.
        LineCountError: different line counts (both files and counts named).
        BPEMarkerError: subword markers left (unless ``allow_bpe_markers``).
    """
    refs = read_lines(ref_path, "reference")
    hyps = read_lines(hyp_path, "hypothesis")
    check_same_length(hyps, hyp_path, refs, ref_path, allow_bpe_markers)
    return hyps, refs


# ---------------------------------------------------------------------------
# fairseq-generate output -> plain hypotheses

BPE_MODES = ("subword_nmt", "sentencepiece", "none")

#: ``scripts/bpe.sh`` tool (``bpe.json`` "tool") -> the fairseq ``post_process`` symbol that
#: undoes it (``--eval-bleu-remove-bpe``, ``--post-process``, :func:`remove_bpe`). fairseq's
#: ``--eval-bleu-remove-bpe`` without a value means ``"@@ "``, right for subword-nmt only.
#: The plugin's ``--bpe pipeline`` reads the same table as ``fairseq_qknorm.bpe.POST_PROCESS``
#: (the plugin imports nothing from here; ``tests/test_layers.py`` holds the two equal).
BPE_TOOL_SYMBOL = {"subword-nmt": "subword_nmt", "sentencepiece": "sentencepiece"}

#: The file in ``data/bpe/PAIR`` that records how ``scripts/bpe.sh`` segmented the pair:
#: written by :func:`write_bpe_manifest`, read by :func:`bpe_tool` and by the plugin's
#: ``--bpe pipeline`` (``fairseq_qknorm.bpe.read_manifest``, whose ``MANIFEST`` equals this).
BPE_MANIFEST = "bpe.json"


def bpe_tool(bpe_dir) -> str:
    """The segmentation tool ``scripts/bpe.sh`` recorded in ``bpe_dir/bpe.json``.

    Args:
        bpe_dir: a segmented pair directory, ``data/bpe/PAIR``.

    Returns:
        ``subword-nmt`` or ``sentencepiece`` (a key of :data:`BPE_TOOL_SYMBOL`).

    Raises:
        InputFileError: no readable ``bpe.json`` (the directory was not made by
            ``scripts/bpe.sh``, or by a version before it wrote one).
        EvaluationError: ``bpe.json`` is not JSON or names another tool.
    """
    path = Path(bpe_dir) / BPE_MANIFEST
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputFileError(
            f"cannot read {str(path)!r} ({exc.strerror or exc}): the BPE tool of the data is "
            f"unknown; segment with scripts/bpe.sh PAIR (it writes bpe.json)"
        ) from None
    try:
        tool = json.loads(text).get("tool")
    except (json.JSONDecodeError, AttributeError):
        raise EvaluationError(f"{str(path)!r} is not a JSON object") from None
    if tool not in BPE_TOOL_SYMBOL:
        raise EvaluationError(
            f"{str(path)!r}: 'tool' must be one of {sorted(BPE_TOOL_SYMBOL)}, got {tool!r}"
        )
    return tool


def bpe_manifest(
    pair: str,
    src: str,
    tgt: str,
    tool: str,
    *,
    merges: int,
    vocab_threshold: int,
    vocab_size: int,
    bpe_dropout: float = 0.0,
    seed: int = 1,
    samples: int = 1,
) -> dict[str, object]:
    """The ``bpe.json`` record of one segmentation by ``scripts/bpe.sh``.

    It says how to segment new text exactly as the pair was segmented (the files are
    relative to ``data/bpe/PAIR``).

    Args:
        pair: the language pair, e.g. ``gl-en``.
        src: source language code.
        tgt: target language code.
        tool: ``subword-nmt`` or ``sentencepiece`` (a key of :data:`BPE_TOOL_SYMBOL`).
        merges: joint BPE merges (recorded for ``subword-nmt`` only).
        vocab_threshold: ``subword-nmt apply-bpe --vocabulary-threshold`` (``subword-nmt``
            only).
        vocab_size: sentencepiece vocabulary size (``sentencepiece`` only).
        bpe_dropout: BPE-dropout probability of the training split (Provilkov et al. 2020);
            recorded with ``seed`` when above 0. New text is always segmented
            deterministically.
        seed: the seed of the one static BPE-dropout sample (of the first of ``samples``).
        samples: the number K of BPE-dropout segmentations of the training split, trained as
            epoch shards (``samples`` and ``seeds`` recorded when K > 1).

    Returns:
        ``pair``, ``src``, ``tgt``, ``tool``; for ``subword-nmt`` ``codes``, ``vocabulary``
        (language -> file), ``merges``, ``vocab_threshold``; for ``sentencepiece`` ``model``,
        ``vocab_size``, ``normalization`` (``identity``); with BPE-dropout, ``bpe_dropout``
        (``p``, ``seed``, ``sample``). Keys in this order.

    Raises:
        EvaluationError: an unknown ``tool``.
    """
    if tool not in BPE_TOOL_SYMBOL:
        raise EvaluationError(f"tool must be one of {sorted(BPE_TOOL_SYMBOL)}, got {tool!r}")
    manifest: dict[str, object] = {"pair": pair, "src": src, "tgt": tgt, "tool": tool}
    if tool == "subword-nmt":
        manifest.update(
            codes="codes",
            vocabulary={src: f"vocab.{src}", tgt: f"vocab.{tgt}"},
            merges=merges,
            vocab_threshold=vocab_threshold,
        )
    else:
        manifest.update(model="spm.model", vocab_size=vocab_size, normalization="identity")
    if bpe_dropout > 0:  # the training split only; new text is segmented deterministically
        manifest["bpe_dropout"] = {
            "p": bpe_dropout,
            "seed": seed,
            "sample": "static: the training split segmented once, the same sample in every epoch",
        }
        if samples > 1:
            manifest["bpe_dropout"].update(
                sample=f"resampled per epoch: {samples} segmentations of the training split, "
                f"epoch e trains on sample ((e-1) % {samples}) + 1",
                samples=samples,
                seeds=list(range(seed, seed + samples)),
            )
    return manifest


def write_bpe_manifest(path, manifest: Mapping[str, object]) -> None:
    """Write a :func:`bpe_manifest` record as ``scripts/bpe.sh`` always has.

    JSON indented by 2, ASCII, no final newline: the bytes stay those of earlier pipeline
    versions, so the data identity hashed from them (:mod:`.provenance`) does not change.

    Args:
        path: the file to write, ``data/bpe/PAIR/bpe.json`` (or its temporary directory).
        manifest: the record.

    Raises:
        OSError: ``path`` cannot be written.
    """
    with open(path, "w", encoding="utf-8") as f:
        json.dump(manifest, f, indent=2)


_H_LINE = re.compile(r"^H-(\d+)\t([^\t]*)(?:\t(.*))?$")


def remove_bpe(text: str, mode: str) -> str:
    """Undo subword segmentation the way fairseq's ``--remove-bpe`` does.

    * ``subword_nmt``: ``(text + " ").replace("@@ ", "").rstrip()``, i.e. remove the ``@@ ``
      continuation markers including a dangling final ``@@`` (fairseq
      ``post_process(..., "@@ ")``).
    * ``sentencepiece``: remove spaces, turn U+2581 into a space, strip (fairseq
      ``post_process(..., "sentencepiece")``).
    * ``none``: return ``text`` unchanged.

    Raises:
        EvaluationError: unknown ``mode``.
    """
    if mode == "subword_nmt":
        return (text + " ").replace("@@ ", "").rstrip()
    if mode == "sentencepiece":
        return text.replace(" ", "").replace("\u2581", " ").strip()
    if mode == "none":
        return text
    raise EvaluationError(f"unknown BPE mode {mode!r}; expected one of {BPE_MODES}")


def parse_generate_output(
    lines: Iterable[str], source: str = "<generate output>"
) -> dict[int, str]:
    r"""Collect the ``H-<id>\\t<score>\\t<text>`` lines of ``fairseq-generate``.

    Only lines matching exactly ``H-<int>\\t`` are used; other lines (``S-``, ``T-``, ``D-``,
    ``P-``, logging, warnings starting with "H") are ignored. A missing text field counts as
    an empty hypothesis.

    Returns:
        Sentence id -> hypothesis text (as printed, e.g. BPE'd).

    Raises:
        GenerateOutputError: an id occurs twice (e.g. ``--nbest`` > 1) or no ``H-`` line is
            found; the message names ``source`` and the line.
    """
    hyps: dict[int, str] = {}
    first_line: dict[int, int] = {}
    for lineno, line in enumerate(lines, start=1):
        if not line.startswith("H-"):
            continue
        m = _H_LINE.match(line.rstrip("\r\n"))
        if m is None:
            continue
        sid = int(m.group(1))
        if sid in hyps:
            raise GenerateOutputError(
                f"{source}: duplicate hypothesis for sentence id {sid} on line {lineno} "
                f"(first seen on line {first_line[sid]}); "
                f"was fairseq-generate run with --nbest > 1?"
            )
        hyps[sid] = m.group(3) or ""
        first_line[sid] = lineno
    if not hyps:
        raise GenerateOutputError(f"{source}: no 'H-<id>\\t<score>\\t<text>' lines found")
    return hyps


def _ordered_hypotheses(hyps: Mapping[int, str], source: str, n_expected: int | None) -> list[str]:
    """The hypotheses sorted by sentence id; ids must be exactly ``0..N-1``."""
    ids = sorted(hyps)
    n = len(ids)
    if n_expected is not None and n != n_expected:
        missing = [i for i in range(n_expected) if i not in hyps][:10]
        extra = [i for i in ids if i >= n_expected][:10]
        detail = []
        if missing:
            detail.append(f"missing ids (first 10): {missing}")
        if extra:
            detail.append(f"ids >= {n_expected}: {extra}")
        raise GenerateOutputError(
            f"{source}: found {n} hypotheses, expected {n_expected}"
            + ("; " + "; ".join(detail) if detail else "")
        )
    if ids != list(range(n)):
        missing = sorted(set(range(ids[-1] + 1)) - set(ids))[:10]
        raise GenerateOutputError(
            f"{source}: sentence ids are not contiguous 0..{n - 1} "
            f"(max id {ids[-1]}, missing ids (first 10): {missing})"
        )
    return [hyps[i] for i in range(n)]


def extract_hypotheses(
    generate_output,
    output=None,
    remove_bpe_mode: str = "subword_nmt",
    n_expected: int | None = None,
) -> list[str]:
    """Hypotheses in source order, BPE removed, from ``fairseq-generate`` output.

    Args:
        generate_output: path of the captured ``fairseq-generate`` stdout (run without
            ``--remove-bpe``).
        output: if given, write one hypothesis per line (UTF-8) there.
        remove_bpe_mode: ``subword_nmt`` | ``sentencepiece`` | ``none`` (see
            :func:`remove_bpe`).
        n_expected: number of source sentences; if given, the number of hypotheses must
            match it exactly.

    Returns:
        The hypotheses, sorted by sentence id 0..N-1.

    Raises:
        GenerateOutputError: missing, duplicated or unexpected ids.
        EncodingError: invalid UTF-8 (file and line named).
    """
    source = str(generate_output)
    lines = read_lines(generate_output, "fairseq-generate output")
    ordered = _ordered_hypotheses(parse_generate_output(lines, source), source, n_expected)
    out = [remove_bpe(h, remove_bpe_mode) for h in ordered]
    if output is not None:
        write_lines(output, out)
    return out


def sha256_file(path) -> str:
    """The sha256 hex digest of the file ``path``, read in 1 MiB blocks.

    Raises:
        OSError: the file cannot be read.
    """
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
