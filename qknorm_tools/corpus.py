"""Corpus helpers of the data pipeline (standard library; numpy and sentencepiece when used).

``python -m qknorm_tools.corpus <command>`` (what the shell scripts run; nothing here imports
torch or fairseq).

Commands (``<command> -h`` for details):

check
    Verify a parallel pair of text files: two different files (not one file under two names),
    equal line counts, no empty line, valid UTF-8, no carriage return (CRLF), no byte order
    mark (U+FEFF, at the start of the file or anywhere in a line), no tab, no character that
    ``str.splitlines`` takes for a line break, no space separator other than U+0020 (no-break
    space, ...), no other control character, no line over ``--max-len`` whitespace tokens.
    Lines not in Unicode NFC (decomposed letters, mixed with composed ones) are reported as
    a warning with counts (:mod:`.unicode_forms`).
distinct
    Refuse files of which two are the same file (a symlink or hard link: ``os.path.samefile``).
overlap
    Report (warning, not error) dev/test sentences that also occur in the training data, with
    counts; print the counts as JSON.
sha256
    Print a file's sha256, or verify it (and its size) against an expected value or a
    ``SHA256SUMS`` file; detects an HTML page served in place of an archive.
diagnose
    Say what a data directory holds when it is not a usable copy of a pair (files one level
    too deep, ``train.src``/``train.tgt``, a dev split named ``valid.*``, ...).
untar
    Safely extract a (compressed) tar archive: no absolute paths, no ``..``, no links or
    device files. Extracts into a temporary sibling directory that is renamed into place only
    once complete, so a partial extraction is never taken for a complete one.
extract-tsv
    Extract a language pair from the TED all-talks TSVs (``all_talks_{train,dev,test}.tsv``).
extract-pair-folder
    Extract a language pair from a ``qi18naacl-dataset.tar.gz``-style pair folder.
length-percentile
    q-th percentile L of tokens per line (QKNorm's L; the model computes its g0 from it).
length-stats
    Show a ``length_stats.json`` written by ``length-percentile``, or one of its fields.
bpe-manifest
    Write ``bpe.json``, the record of how ``scripts/bpe.sh`` segmented a pair (see
    :func:`qknorm_tools.textio.bpe_manifest`).
spm
    Train a joint sentencepiece BPE model on the training data of both sides and segment every
    split (optionally with BPE-dropout sampling on the training split).

Every error is printed as ``error: <file>:<line>: <problem>`` (or ``error: <file>: <problem>``
when no line applies) on stderr, with exit status 2.
"""

from __future__ import annotations

import argparse
import fnmatch
import hashlib
import json
import math
import os
import re
import shutil
import sys
import tarfile
import tempfile
import unicodedata
import zlib
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from .exits import FAILURE, NO
from .textio import BPE_TOOL_SYMBOL, bpe_manifest, write_bpe_manifest
from .unicode_forms import FORMS, FormCounts, form_warning

# --------------------------------------------------------------------------------------------
# constants

#: Default maximum number of whitespace tokens per raw line accepted by ``check``. Raw TED /
#: IWSLT lines are far shorter (the longest gl-en training line has a few hundred tokens); a
#: line longer than this is almost certainly a broken sentence split or a concatenated file.
DEFAULT_MAX_LEN = 1024

#: Missing-translation markers of the TED all-talks TSVs. ``__NULL__`` is the usual form;
#: ``_ _ NULL _ _`` is the same marker after Moses tokenization (both occur in the data;
#: TensorFlow Datasets' ted_multi loader drops both).
NULL_MARKERS = ("__NULL__", "_ _ NULL _ _")

#: Standard split names of the pipeline (TSV files are ``all_talks_<split>.tsv``).
SPLITS = ("train", "dev", "test")

#: Exit status for every reported error: a data or environment failure (:mod:`.exits`).
EXIT_ERROR = FAILURE
#: Exit status of ``sha256 --sums`` when the file is not listed in the sums file: the answer no.
EXIT_NOT_LISTED = NO

#: Name of the marker file ``untar`` writes inside a completed extraction.
EXTRACTED_MARKER = ".qknorm_extracted"

MAX_REPORTED_ERRORS = 20

#: The characters other than ``\n`` and ``\r`` at which Python's ``str.splitlines`` ends a
#: line (Python docs, "str.splitlines": the Unicode line boundaries), with their names: a reader
#: built on it (and several BPE tools; U+2028 crashes subword-nmt's ``apply_bpe``) splits the
#: line there and misaligns the pair. ``\r`` is reported on the raw bytes (CRLF / stray CR).
LINE_BREAK_CHARS = {
    "\x0b": "line tabulation (vertical tab, \\v)",
    "\x0c": "form feed (\\f)",
    "\x1c": "file separator",
    "\x1d": "group separator",
    "\x1e": "record separator",
    "\x85": "next line (NEL)",
    "\u2028": "line separator",
    "\u2029": "paragraph separator",
}

#: The space separators other than U+0020 (Unicode category Zs): whitespace for Python's
#: ``str.split`` and ``\s``, hence word boundaries for fairseq's tokenizer
#: (``fairseq.tokenizer.tokenize_line``), but not for subword-nmt, which splits words on
#: U+0020 only: ``c\u00a0apital`` is segmented as one word, ``c@@ \u00a0@@ a@@ pi@@ tal``,
#: and fairseq then reads a stray ``@@`` token.
SPACE_SEPARATORS = "\u00a0\u1680\u2000-\u200a\u202f\u205f\u3000"

#: The byte order mark, U+FEFF (ZERO WIDTH NO-BREAK SPACE): at the start of a file it is
#: reported as such; inside a line (files concatenated with their BOMs, a copy-paste) it is
#: invisible and BPE tools take it as part of a word.
BOM = "\ufeff"

#: Every character refused inside a line after decoding: tab, the line breaks above, the space
#: separators above, the byte order mark, and every other control character (Unicode category
#: Cc: C0, DEL, C1) except ``\n`` (the line end), ``\r`` and NUL (both reported on the raw
#: bytes, before decoding).
_BAD_CHAR = re.compile(f"[\x01-\x09\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029{SPACE_SEPARATORS}{BOM}]")


class CorpusError(Exception):
    """A problem with an input file; ``str()`` is the full ``<file>:<line>: <problem>``."""

    def __init__(self, path: str, problem: str, line: int | None = None):
        self.path = str(path)
        self.line = line
        self.problem = problem
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {problem}")


class CorpusErrors(Exception):
    """Several problems, reported together."""

    def __init__(self, errors: list[CorpusError]):
        self.errors = errors
        super().__init__("\n".join(str(e) for e in errors))


def _info(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# check


def bad_character_problem(text: str) -> str | None:
    r"""The problem of a decoded line's first refused character, or None when it has none.

    Refused: tab (subword-nmt splits words on spaces only, so ``word\tword`` becomes one word
    with a stray ``@@`` and a ``\t@@`` vocabulary entry), the line breaks of
    :data:`LINE_BREAK_CHARS` (``str.splitlines``), the space separators of
    :data:`SPACE_SEPARATORS` (no-break space and the like: the same stray ``@@``), the byte
    order mark :data:`BOM` anywhere in the line, and every other control character (Unicode
    category Cc; invisible, and taken as part of a word). The message names the character
    (code point and name) and its position (1-based character index), and how many more refused
    characters the line holds.
    """
    m = _BAD_CHAR.search(text)
    if m is None:
        return None
    c, col = m.group(), m.start() + 1
    code = f"U+{ord(c):04X}"
    more = len(_BAD_CHAR.findall(text, m.end()))
    tail = f" ({more} more such character{'s' if more > 1 else ''} in the line)" if more else ""
    if c == "\t":
        return (
            f"tab ({code}) at character {col}: BPE tools split words on spaces only "
            f"(subword-nmt makes `word\\tword` one word with a stray @@); replace tabs by spaces "
            f"(`tr '\\t' ' '`){tail}"
        )
    if c in LINE_BREAK_CHARS:
        return (
            f"{LINE_BREAK_CHARS[c]} ({code}) at character {col}: a line break for Python's "
            f"str.splitlines and the readers built on it (the line would be split there and the "
            f"pair misaligned); replace it by a space{tail}"
        )
    if c == BOM:
        return (
            f"byte order mark, zero width no-break space ({code}) at character {col}: invisible, "
            f"and BPE tools take it as part of a word (files concatenated with their BOMs?); "
            f"remove it{tail}"
        )
    if unicodedata.category(c) == "Zs":
        return (
            f"{unicodedata.name(c).lower()} ({code}) at character {col}: a word boundary for "
            f"fairseq's tokenizer but not for BPE tools (subword-nmt splits words on U+0020 only "
            f"and leaves a stray @@ token); replace it by a space{tail}"
        )
    return (
        f"control character {code} at character {col}: invisible, and BPE tools take it as "
        f"part of a word; remove it{tail}"
    )


def _check_file_lines(
    path: str,
    name: str,
    max_len: int,
    errors: list[CorpusError],
    forms: FormCounts | None = None,
) -> int:
    r"""Check one file line by line; append problems to ``errors``; return the line count.

    ``forms``, when given, counts the decoded lines' Unicode normalization forms
    (:class:`.unicode_forms.FormCounts`).

    Lines are split on ``\\n`` only (the file is read as bytes), so a stray ``\\r`` is reported
    instead of silently splitting a line the way Python's universal-newline text mode (used by
    fairseq and subword-nmt) would, which would misalign the pair.
    """
    n = 0
    with open(path, "rb") as f:
        for n, raw in enumerate(f, 1):
            if raw.endswith(b"\n"):
                raw = raw[:-1]
            else:  # only the last line can lack it; `wc -l` and fairseq would count one line less
                errors.append(
                    CorpusError(
                        name, "last line has no final newline; add one with `echo >> FILE`", n
                    )
                )
            if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
                errors.append(CorpusError(name, "UTF-8 byte order mark (BOM) at start of file", n))
                raw = raw[3:]
            if raw.endswith(b"\r"):
                errors.append(
                    CorpusError(
                        name,
                        "CRLF line ending (carriage return before newline); "
                        "convert with `sed -i 's/\\r$//'`",
                        n,
                    )
                )
                raw = raw[:-1]
            if b"\r" in raw:
                errors.append(
                    CorpusError(
                        name,
                        "stray carriage return (\\r) inside the line; "
                        "text-mode readers would split the line here",
                        n,
                    )
                )
            nul = raw.find(b"\x00")
            if nul >= 0:
                errors.append(
                    CorpusError(
                        name,
                        f"NUL byte (\\x00) at byte offset {nul}: binary data "
                        "or a UTF-16/UTF-32 file (convert with `iconv -t UTF-8`)",
                        n,
                    )
                )
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                errors.append(
                    CorpusError(
                        name,
                        f"invalid UTF-8 (byte 0x{raw[e.start]:02x} at byte offset {e.start})",
                        n,
                    )
                )
                continue
            if forms is not None:
                forms.add(text)
            bad = bad_character_problem(text)
            if bad:
                errors.append(CorpusError(name, bad, n))
            ntok = len(text.split())
            if ntok == 0:
                errors.append(
                    CorpusError(
                        name, "empty line" if not text else "blank line (whitespace only)", n
                    )
                )
            elif ntok > max_len:
                errors.append(CorpusError(name, f"line too long: {ntok} tokens > max {max_len}", n))
    if n == 0:
        errors.append(CorpusError(name, "empty file (no sentences)"))
    return n


def misaligned_error(src: str, n_src: int, tgt: str, n_tgt: int) -> CorpusError:
    """The error for parallel files of different lengths (``n_src != n_tgt``).

    Reported at the shorter file's last line (``wc -l`` counts; ``check`` rejects a last line
    without newline separately): the pairs are known to be misaligned from there on, while the
    missing or extra line itself can be anywhere before it.
    """
    shorter, n_short, longer = (src, n_src, tgt) if n_src < n_tgt else (tgt, n_tgt, src)
    return CorpusError(
        shorter,
        f"misaligned parallel files: {src} has {n_src} lines, {tgt} has {n_tgt} lines "
        f"(wc -l); {shorter} ends at line {n_short} while {longer} goes on (a line is missing "
        "or extra somewhere up to here)",
        n_short if n_short > 0 else None,
    )


def same_file_errors(files: Sequence[tuple[str, str]]) -> list[CorpusError]:
    """An error for every file that is the same file as an earlier one.

    ``files``: ``(name, path)`` pairs. The same file: the same path, a symlink or a hard link to
    it (``os.path.samefile``: same device and inode). Missing files are skipped (reported
    elsewhere).
    """
    errors = []
    for j, (name_j, path_j) in enumerate(files):
        for name_i, path_i in files[:j]:
            try:
                same = os.path.samefile(path_i, path_j)
            except OSError:
                continue
            if same:
                errors.append(
                    CorpusError(
                        name_j,
                        f"the same file as {name_i} (the same path, a symlink or a hard link: "
                        "os.path.samefile); every side and split needs its own file",
                    )
                )
                break
    return errors


def check_pair(
    src: str,
    tgt: str,
    max_len: int = DEFAULT_MAX_LEN,
    src_name: str | None = None,
    tgt_name: str | None = None,
    warnings: list[str] | None = None,
    normalize: str = "none",
) -> int:
    """Verify a parallel pair; return the number of lines.

    ``warnings``, when given, receives a line per file with lines not in Unicode NFC
    (:func:`.unicode_forms.form_warning`; ``normalize`` is the pair's ``[text] normalize``).

    Raises:
        CorpusErrors: every problem found, each naming the file and line (see
            :func:`_check_file_lines`, :func:`bad_character_problem`, :func:`same_file_errors`).
    """
    src_name = src_name or src
    tgt_name = tgt_name or tgt
    errors: list[CorpusError] = same_file_errors([(src_name, src), (tgt_name, tgt)])
    if errors:
        raise CorpusErrors(errors)
    counts = []
    for path, name in ((src, src_name), (tgt, tgt_name)):
        if not os.path.isfile(path):
            errors.append(CorpusError(name, "no such file"))
            counts.append(None)
            continue
        forms = FormCounts()
        counts.append(_check_file_lines(path, name, max_len, errors, forms))
        warning = form_warning(name, forms, normalize)
        if warning and warnings is not None:
            warnings.append(warning)
    n_src, n_tgt = counts
    if n_src is not None and n_tgt is not None and n_src != n_tgt:
        errors.insert(0, misaligned_error(src_name, n_src, tgt_name, n_tgt))
    if errors:
        raise CorpusErrors(errors)
    return n_src  # type: ignore[return-value]


def _read_text_lines(path: str) -> list[str]:
    """A checked file's lines (split on newline only, as :func:`_check_file_lines` counts)."""
    with open(path, "rb") as f:
        return f.read().decode("utf-8").split("\n")[:-1]


def overlap_report(
    train: tuple[str, str], others: Sequence[tuple[str, str, str]], max_examples: int = 3
) -> list[dict]:
    """Dev/test sentences that also occur in the training data (a warning, not an error).

    Sentences are compared as whole lines, exactly (no normalisation: the tokenized text the
    model sees). Args: ``train`` = (source path, target path); ``others`` = (split name,
    source path, target path), e.g. dev and test. Returns one dict per split: ``split``,
    ``lines`` (sentence pairs), ``pairs_in_train`` (pairs whose source *and* target line form a
    training pair), ``src_in_train`` / ``tgt_in_train`` (lines whose source / target side alone
    occurs in the training data), ``distinct_pairs_in_train``, and ``examples``: up to
    ``max_examples`` of the most frequent overlapping pairs as ``{"src", "tgt", "count",
    "lines"}`` (count: occurrences in the split; lines: their 1-based line numbers, at most 5).
    Raises OSError / UnicodeDecodeError for unreadable files (run ``check`` first).
    """
    t_src, t_tgt = _read_text_lines(train[0]), _read_text_lines(train[1])
    pairs, src_set, tgt_set = set(zip(t_src, t_tgt)), set(t_src), set(t_tgt)
    report = []
    for split, s_path, t_path in others:
        s_lines, t_lines = _read_text_lines(s_path), _read_text_lines(t_path)
        where: dict[tuple[str, str], list[int]] = {}
        for n, pair in enumerate(zip(s_lines, t_lines), 1):
            if pair in pairs:
                where.setdefault(pair, []).append(n)
        top = sorted(where.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))[:max_examples]
        report.append(
            {
                "split": split,
                "lines": len(s_lines),
                "pairs_in_train": sum(len(v) for v in where.values()),
                "distinct_pairs_in_train": len(where),
                "src_in_train": sum(line in src_set for line in s_lines),
                "tgt_in_train": sum(line in tgt_set for line in t_lines),
                "examples": [
                    {"src": k[0], "tgt": k[1], "count": len(v), "lines": v[:5]} for k, v in top
                ],
            }
        )
    return report


def overlap_warnings(report: Sequence[dict], label: str) -> list[str]:
    """The ``warning: ...`` lines of an :func:`overlap_report`.

    None for a split without overlap; ``label`` names the data (e.g. ``gl-en``).
    """
    lines = []
    for r in report:
        if not (r["pairs_in_train"] or r["src_in_train"] or r["tgt_in_train"]):
            continue
        pct = 100.0 * r["pairs_in_train"] / r["lines"] if r["lines"] else 0.0
        ex = "; ".join(
            f"{e['src']!r} / {e['tgt']!r} ({e['count']}x, line{'s' if len(e['lines']) > 1 else ''} "
            f"{', '.join(map(str, e['lines']))}{', ...' if e['count'] > len(e['lines']) else ''})"
            for e in r["examples"]
        )
        lines.append(
            f"warning: {label} {r['split']}: {r['pairs_in_train']} of {r['lines']} sentence pairs "
            f"({pct:.1f}%) also occur in the training data ({r['distinct_pairs_in_train']} "
            f"distinct; source side alone: {r['src_in_train']} lines, target side alone: "
            f"{r['tgt_in_train']} lines){'; most frequent: ' + ex if ex else ''}"
        )
    return lines


# --------------------------------------------------------------------------------------------
# sha256 / download verification


def sha256_file(path: str, bufsize: int = 1 << 20) -> str:
    """The sha256 hex digest of a file, read in ``bufsize`` chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while True:
            chunk = f.read(bufsize)
            if not chunk:
                break
            h.update(chunk)
    return h.hexdigest()


def looks_like_html(path: str) -> bool:
    """True if the file starts like an HTML page (what dead download links serve)."""
    with open(path, "rb") as f:
        head = f.read(4096)
    if head.startswith(b"\x1f\x8b"):  # gzip magic: an archive, whatever follows
        return False
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if text.startswith((b"<!doctype html", b"<html", b"<head", b"<body")):
        return True
    return text.startswith((b"<?xml", b"<!--")) and b"<html" in text


def read_sums(sums_path: str) -> dict:
    """Parse a ``sha256sum``-format file into ``{relative_path: hexdigest}``."""
    out = {}
    with open(sums_path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 1)
            if len(parts) != 2 or len(parts[0]) != 64:
                raise CorpusError(sums_path, f"not a sha256sum line: {line[:60]!r}", lineno)
            name = parts[1].lstrip("*").strip()
            if name.startswith("./"):
                name = name[2:]
            out[name] = parts[0].lower()
    return out


def _html_error(path: str, name: str, expected_size: int | None) -> CorpusError:
    size = os.path.getsize(path)
    exp = f" instead of the expected {expected_size}-byte file" if expected_size else ""
    return CorpusError(
        name,
        f"got an HTML page ({size} bytes){exp}: the download link probably "
        "serves an error page or has moved; fetch the file from a mirror "
        "(e.g. a web-archive copy) and verify it",
    )


def verify_file(
    path: str,
    expected_sha256: str | None = None,
    expected_size: int | None = None,
    name: str | None = None,
) -> str:
    """Verify size and sha256 of ``path``; return its sha256 or raise :class:`CorpusError`.

    On a mismatch, an HTML page in place of the expected file (dead download links serve one)
    is reported as such instead of as a plain size/checksum mismatch.
    """
    name = name or path
    if not os.path.isfile(path):
        raise CorpusError(name, "no such file")
    size = os.path.getsize(path)
    if expected_size is not None and size != int(expected_size):
        if looks_like_html(path):
            raise _html_error(path, name, expected_size)
        raise CorpusError(
            name, f"size mismatch: expected {int(expected_size)} bytes, got {size} bytes"
        )
    got = sha256_file(path)
    if expected_sha256 is not None and got != expected_sha256.lower():
        if looks_like_html(path):
            raise _html_error(path, name, expected_size)
        raise CorpusError(name, f"sha256 mismatch: expected {expected_sha256.lower()}, got {got}")
    return got


# --------------------------------------------------------------------------------------------
# safe tar extraction


def _member_problem(m: tarfile.TarInfo) -> str | None:
    name = m.name
    if not name or "\x00" in name:
        return "empty or NUL-containing member name"
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return "absolute path"
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        return "path traversal ('..' component)"
    if m.issym() or m.islnk():
        return f"link member (-> {m.linkname!r}); links are not allowed"
    if not (m.isfile() or m.isdir()):
        return "special file (device, fifo or other); not allowed"
    return None


def _iter_safe_members(tf: tarfile.TarFile, archive: str) -> Iterator[tarfile.TarInfo]:
    for m in tf:
        problem = _member_problem(m)
        if problem:
            raise CorpusError(archive, f"unsafe archive member {m.name!r}: {problem}")
        yield m


_TAR_READ_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError)


def safe_extract(archive: str, dest: str, include: Sequence[str] = ()) -> str:
    """Extract ``archive`` into ``dest`` safely and atomically; return ``dest``.

    Members are checked one by one (absolute paths, ``..``, links and special files are
    refused, rejecting the whole archive). Extraction goes to a temporary directory next to
    ``dest`` which is renamed to ``dest`` only after the whole archive was read without error,
    together with a marker file; a leftover temporary directory is never used. ``include``:
    optional glob patterns (``fnmatch`` on member names) restricting what is extracted.
    If ``dest`` already is a completed extraction (marker present) nothing is done.
    """
    dest_p = Path(dest)
    if (dest_p / EXTRACTED_MARKER).is_file():
        _info(f"skip: {dest} already extracted from {os.path.basename(archive)}")
        return dest
    if dest_p.exists():
        raise CorpusError(
            dest,
            "exists but is not a completed extraction (no "
            f"{EXTRACTED_MARKER} marker); remove it and retry",
        )
    if not os.path.isfile(archive):
        raise CorpusError(archive, "no such file")
    dest_p.parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{dest_p.name}.tmp.", dir=str(dest_p.parent))
    try:
        n = 0
        try:
            with tarfile.open(archive, mode="r:*") as tf:
                for m in _iter_safe_members(tf, archive):
                    if (
                        include
                        and not m.isdir()
                        and not any(fnmatch.fnmatch(m.name, p) for p in include)
                    ):
                        continue
                    if hasattr(tarfile, "data_filter"):
                        tf.extract(m, tmp, filter="data")
                    else:  # pragma: no cover - Python < 3.11.4; members already vetted above
                        tf.extract(m, tmp)
                    n += 1
        except CorpusError:
            raise
        except _TAR_READ_ERRORS as e:
            if looks_like_html(archive):
                raise _html_error(archive, archive, None) from None
            raise CorpusError(
                archive, f"corrupt or truncated archive ({type(e).__name__}: {e})"
            ) from None
        if n == 0:
            raise CorpusError(archive, "archive is empty (or nothing matched --include)")
        with open(os.path.join(tmp, EXTRACTED_MARKER), "w", encoding="utf-8") as f:
            f.write(f"{os.path.basename(archive)}\t{os.path.getsize(archive)}\t{n} members\n")
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    _info(f"extracted {n} members of {archive} into {dest}")
    return dest


# --------------------------------------------------------------------------------------------
# TED extraction


def is_missing(text: str | None) -> bool:
    """True for a missing translation: None, empty/blank or containing a NULL marker."""
    return text is None or not text.strip() or any(m in text for m in NULL_MARKERS)


def _add_pair(s: str, t: str, out_src: list[str], out_tgt: list[str], counts: dict) -> None:
    """Append a sentence pair with whitespace normalized, or count it as dropped.

    A pair is dropped whole when either side is missing (empty or a NULL marker, see
    :func:`is_missing`).
    """
    if is_missing(s) or is_missing(t):
        counts["dropped"] += 1
        counts["dropped_null"] += 1
        return
    out_src.append(" ".join(s.split()))
    out_tgt.append(" ".join(t.split()))
    counts["kept"] += 1


def _atomic_write_lines(path: Path, lines: Iterable[str]) -> None:
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            for line in lines:
                f.write(line)
                f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if tmp.exists():
            tmp.unlink()
        raise


def _decode(raw: bytes, path: str, lineno: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorpusError(
            path, f"invalid UTF-8 (byte 0x{raw[e.start]:02x} at byte offset {e.start})", lineno
        ) from None


def extract_tsv_split(tsv: str, src: str, tgt: str) -> tuple[list[str], list[str], dict]:
    """Read one ``all_talks_<split>.tsv``; return (src_lines, tgt_lines, counts).

    Format (Qi et al. 2018, ``ted_talks.tar.gz``): a header row naming the columns
    (``talk_name`` then one column per language code), then one sentence per row, fields
    separated by tabs, no quoting. A row is kept when both requested sides are present and
    not missing (see :func:`is_missing`); fields are stripped of surrounding whitespace.
    Rows with fewer fields than the header (truncated rows) count as missing.
    """
    with open(tsv, "rb") as f:
        header_raw = f.readline()
        if not header_raw:
            raise CorpusError(tsv, "empty file (no header row)", 1)
        header = _decode(header_raw.rstrip(b"\r\n"), tsv, 1).split("\t")
        header = [h.strip() for h in header]
        for lang in (src, tgt):
            if lang not in header:
                raise CorpusError(
                    tsv, f"no column {lang!r} in header (columns: {' '.join(header)})", 1
                )
        i_src, i_tgt = header.index(src), header.index(tgt)
        out_src: list[str] = []
        out_tgt: list[str] = []
        counts = {"rows": 0, "kept": 0, "dropped": 0, "dropped_null": 0, "dropped_short_row": 0}
        for lineno, raw in enumerate(f, 2):
            line = _decode(raw.rstrip(b"\r\n"), tsv, lineno)
            if not line.strip():
                continue  # blank separator line, not a row
            counts["rows"] += 1
            fields = line.split("\t")
            if len(fields) <= max(i_src, i_tgt):
                counts["dropped"] += 1
                counts["dropped_short_row"] += 1
                continue
            _add_pair(fields[i_src], fields[i_tgt], out_src, out_tgt, counts)
    return out_src, out_tgt, counts


def extract_tsv(tsv_dir: str, src: str, tgt: str, out: str, splits: Sequence[str] = SPLITS) -> dict:
    """Extract ``{split}.{src}``/``{split}.{tgt}`` into ``out`` from ``all_talks_{split}.tsv``.

    Whitespace inside a sentence is normalised to single spaces (the TSVs are already
    tokenized; this only matters for stray double spaces/tabs). Returns per-split counts.
    """
    out_p = Path(out)
    out_p.mkdir(parents=True, exist_ok=True)
    report = {}
    results = {}
    for split in splits:
        tsv = os.path.join(tsv_dir, f"all_talks_{split}.tsv")
        if not os.path.isfile(tsv):
            raise CorpusError(tsv, "no such file (expected the all-talks TSVs of ted_talks.tar.gz)")
        results[split] = extract_tsv_split(tsv, src, tgt)
    for split, (s_lines, t_lines, counts) in results.items():
        if not s_lines:
            raise CorpusError(
                os.path.join(tsv_dir, f"all_talks_{split}.tsv"),
                f"no {src}-{tgt} sentence pair left after dropping missing rows",
            )
        _atomic_write_lines(out_p / f"{split}.{src}", s_lines)
        _atomic_write_lines(out_p / f"{split}.{tgt}", t_lines)
        report[split] = counts
    return report


def _find_pair_folder(root: str, folder: str) -> str:
    hits = []
    for dirpath, dirnames, _ in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        if os.path.basename(dirpath) == folder:
            hits.append(dirpath)
    if not hits:
        raise CorpusError(root, f"no folder named {folder!r} (expected e.g. datasets/{folder}/)")
    if len(hits) > 1:
        raise CorpusError(root, f"several folders named {folder!r}: {', '.join(sorted(hits))}")
    return hits[0]


def _pair_folder_files(folder: str, split: str, src: str, tgt: str) -> tuple[str, str]:
    """Locate the files of one split.

    The real qi18naacl-dataset layout is ``<lang>.<split>`` (``datasets/gl_to_en/gl.train``,
    as read by the TFDS/HuggingFace ``ted_hrlr`` loaders); ``<split>.<lang>`` (``train.gl``) is
    accepted too.
    """
    for pattern in ("{lang}.{split}", "{split}.{lang}"):
        s = os.path.join(folder, pattern.format(lang=src, split=split))
        t = os.path.join(folder, pattern.format(lang=tgt, split=split))
        if os.path.isfile(s) and os.path.isfile(t):
            return s, t
    raise CorpusError(
        folder,
        f"no {split} files for {src}/{tgt}: looked for {src}.{split} + {tgt}.{split} "
        f"and {split}.{src} + {split}.{tgt}",
    )


def _read_lines_checked(path: str) -> list[str]:
    lines = []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            lines.append(_decode(raw.rstrip(b"\r\n"), path, lineno))
    return lines


def extract_pair_folder(
    root: str, folder: str, src: str, tgt: str, out: str, splits: Sequence[str] = SPLITS
) -> dict:
    """Copy a pair folder (e.g. ``gl_to_en`` of ``qi18naacl-dataset.tar.gz``) to ``out``.

    Files are written as ``{split}.{lang}``, dropping pairs where either side is empty or a
    NULL marker.
    """
    pdir = _find_pair_folder(root, folder)
    out_p = Path(out)
    out_p.mkdir(parents=True, exist_ok=True)
    results = {}
    for split in splits:
        s_path, t_path = _pair_folder_files(pdir, split, src, tgt)
        s_lines, t_lines = _read_lines_checked(s_path), _read_lines_checked(t_path)
        if len(s_lines) != len(t_lines):
            raise misaligned_error(s_path, len(s_lines), t_path, len(t_lines))
        keep_s, keep_t = [], []
        counts = {"rows": len(s_lines), "kept": 0, "dropped": 0, "dropped_null": 0}
        for s, t in zip(s_lines, t_lines):
            _add_pair(s, t, keep_s, keep_t, counts)
        if not keep_s:
            raise CorpusError(s_path, "no sentence pair left after dropping empty/NULL lines")
        results[split] = (keep_s, keep_t, counts)
    report = {}
    for split, (keep_s, keep_t, counts) in results.items():
        _atomic_write_lines(out_p / f"{split}.{src}", keep_s)
        _atomic_write_lines(out_p / f"{split}.{tgt}", keep_t)
        report[split] = counts
    return report


# --------------------------------------------------------------------------------------------
# what a data directory holds (why it is not a usable copy of a pair)

#: Archives and TSVs ``prepare_data.sh`` reads from a data dir (besides pair folders).
KNOWN_INPUTS = (
    "qi18naacl-dataset.tar.gz",
    "ted_talks.tar.gz",
    "all_talks_train.tsv",
)
#: How deep below the data dir ``diagnose`` looks, and how many directories at most.
DIAGNOSE_DEPTH = 2
DIAGNOSE_MAX_DIRS = 500


def _walk_shallow(root: Path, depth: int, max_dirs: int) -> Iterator[tuple[Path, list[str]]]:
    """Yield (directory, sorted file names) for ``root`` and its subdirectories.

    Breadth first, down to ``depth`` levels, hidden entries skipped, at most ``max_dirs``
    directories.
    """
    queue = [(root, 0)]
    seen = 0
    while queue and seen < max_dirs:
        d, level = queue.pop(0)
        seen += 1
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            continue
        files = [e.name for e in entries if e.is_file() and not e.name.startswith(".")]
        yield d, files
        if level < depth:
            queue.extend(
                (Path(e.path), level + 1)
                for e in entries
                if e.is_dir() and not e.name.startswith(".")
            )


def diagnose_pair_dir(
    root: str, src: str, tgt: str, folder: str = "", splits: Sequence[str] = SPLITS
) -> list[str]:
    """Why ``root`` is not a usable copy of the pair ``src``-``tgt``: one hint per finding.

    ``prepare_data.sh`` reads ``root/folder/{split}.{lang}`` (or those files in ``root``
    itself) for every split in ``splits`` and both languages; it calls this when a data dir
    that was given holds neither them nor an archive, so that the error says what is there
    instead of downloading another corpus. Looks up to :data:`DIAGNOSE_DEPTH` levels down for:
    the six files one level too deep (a parent was given); some of them missing; a dev split
    named ``valid.*``; files with other side suffixes (``train.src``/``train.tgt``); the
    ``{lang}.{split}`` layout; archives or all-talks TSVs one level too deep; pair folders of
    other pairs.

    Args:
        root: the data directory.
        src: source language code (file suffix), e.g. ``gl``.
        tgt: target language code, e.g. ``en``.
        folder: the pair folder expected in ``root`` (e.g. ``ted-gl-en``), if any.
        splits: split names as file prefixes (IWSLT'15: ``train,tst2012,tst2013``).

    Returns:
        Hints such as ``"found train.src/train.tgt in DIR: name them train.gl/train.en, or
        write a pair config (CORPUS=local) naming them"``; ``[]`` if ``root`` is unreadable.
    """
    root_p = Path(root)
    langs = (src, tgt)
    wanted = [f"{sp}.{lang}" for sp in splits for lang in langs]
    hints: list[str] = []
    other_folders: list[str] = []
    first_entries: list[str] = []
    for d, files in _walk_shallow(root_p, DIAGNOSE_DEPTH, DIAGNOSE_MAX_DIRS):
        where = str(d)
        names = set(files)
        if d == root_p:
            try:
                first_entries = sorted(
                    e.name + ("/" if e.is_dir() else "")
                    for e in os.scandir(d)
                    if not e.name.startswith(".")
                )
            except OSError:
                return []
        elif d.parent == root_p and d.name.startswith(("ted-", "iwslt")) and d.name != folder:
            other_folders.append(d.name + "/")
        have = [w for w in wanted if w in names]
        if len(have) == len(wanted) and d != root_p:
            parent = f" (or its parent {d.parent})" if folder and d.name == folder else ""
            hints.append(
                f"{where} holds {{{','.join(splits)}}}.{{{src},{tgt}}}: pass --data-dir {d}{parent}"
            )
        elif (
            have
            and len(have) < len(wanted)
            # some of both sides (else it is another pair's folder), or the folder expected
            and (
                all(any(h.endswith(f".{lang}") for h in have) for lang in langs) or d.name == folder
            )
        ):
            missing = [w for w in wanted if w not in names]
            hints.append(f"{where} has {', '.join(have)} but lacks {', '.join(missing)}")
        valid = [f"valid.{lang}" for lang in langs if f"valid.{lang}" in names]
        if valid and "dev" in splits and not any(f"dev.{lang}" in names for lang in langs):
            hints.append(
                f"found {'/'.join(valid)} in {where}: the dev split must be named "
                f"dev.{src}/dev.{tgt} (rename or link them, or write a pair config with "
                "CORPUS=local naming your files)"
            )
        suffixes = sorted(
            {n.split(".", 1)[1] for n in names if n.startswith("train.")} - set(langs)
        )
        if suffixes and not have:
            shown = "/".join(f"train.{x}" for x in suffixes[:4])
            hints.append(
                f"found {shown} in {where}: this pair reads {src}->{tgt} from files named "
                f"{{{','.join(splits)}}}.{{{src},{tgt}}}; name them so, or write a pair config "
                '(configs/pairs/PAIR.toml with corpus = "local") naming your files'
            )
        swapped = [f"{lang}.train" for lang in langs if f"{lang}.train" in names]
        if swapped:
            hints.append(
                f"found {'/'.join(swapped)} in {where} (LANG.SPLIT names): name them "
                f"train.{src}/train.{tgt} (SPLIT.LANG), or write a pair config with CORPUS=local"
            )
        if d != root_p:
            for name in KNOWN_INPUTS:
                if name in names:
                    hints.append(f"{where} holds {name}: pass --data-dir {d}")
    if other_folders and folder:
        hints.append(f"{root} holds {', '.join(other_folders)} but no {folder}/")
    if not hints:
        shown = ", ".join(first_entries[:12]) + (" ..." if len(first_entries) > 12 else "")
        hints.append(f"{root} holds {shown}" if first_entries else f"{root} is empty")
    return hints


# --------------------------------------------------------------------------------------------
# length percentile (QKNorm's L)


def percentile_linear(values: Sequence[float], q: float) -> float:
    """q-th percentile with linear interpolation between closest ranks.

    Identical to ``numpy.percentile(values, q)`` (default ``method='linear'``, the "type 7"
    estimator): with the values sorted ascending as v[0..n-1], the rank is h = (n-1)*q/100 and
    the result is v[floor(h)] + (h - floor(h)) * (v[floor(h)+1] - v[floor(h)]).
    numpy is used when importable; this pure-Python version is the fallback.
    """
    if not values:
        raise ValueError("percentile of an empty sequence")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q}")
    try:
        import numpy as np  # noqa: PLC0415 - optional dependency

        return float(np.percentile(np.asarray(values, dtype=np.float64), q))
    except ImportError:  # pragma: no cover - numpy is installed in the project venv
        v = sorted(values)
        h = (len(v) - 1) * q / 100.0
        lo = math.floor(h)
        hi = min(lo + 1, len(v) - 1)
        return float(v[lo] + (h - lo) * (v[hi] - v[lo]))


def line_lengths(paths: Sequence[str]) -> list[int]:
    """Tokens (whitespace-separated, i.e. BPE units for BPE'd text) per line, all files."""
    lengths: list[int] = []
    for path in paths:
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                lengths.append(len(_decode(raw, path, lineno).split()))
    return lengths


def _ceil(x: float) -> int:
    """Round up, ignoring floating-point noise below 1e-9 (92.0000000001 -> 92)."""
    return int(math.ceil(x - 1e-9))


def length_stats(paths: Sequence[str], q: float = 97.5) -> dict:
    """QKNorm's L: the q-th percentile of BPE tokens per training sentence.

    Definition: every line of every given file is one sentence (normally the BPE'd training
    files of both sides, so each training pair contributes two lengths); its length is the
    number of whitespace-separated tokens (BPE units; no EOS). ``percentile`` is
    ``numpy.percentile(lengths, q)`` (linear interpolation); ``L = ceil(percentile)``, the
    smallest integer length covering q% of the sentences (our choice: the papers give integer
    L without saying how they rounded). The model computes its ``g0 = log2(L^2 - L)`` from L
    (``fairseq_qknorm.modules.qknorm_attention.qk_norm_initial_scale``) and logs it.
    """
    per_file = {}
    lengths: list[int] = []
    for path in paths:
        file_lengths = line_lengths([path])
        if file_lengths:
            fp = percentile_linear(file_lengths, q)
            per_file[str(path)] = {"n_lines": len(file_lengths), "percentile": fp, "L": _ceil(fp)}
        lengths.extend(file_lengths)
    if not lengths:
        raise CorpusError(
            paths[0] if paths else "-", "no lines to compute a length percentile from"
        )
    p = percentile_linear(lengths, q)
    L = _ceil(p)
    return {
        "L": L,
        "q": q,
        "n_lines": len(lengths),
        "percentile": p,
        "rounding": "ceil",
        "mean_length": sum(lengths) / len(lengths),
        "max_length": max(lengths),
        "files": [str(p_) for p_ in paths],
        "per_file": per_file,
        "definition": "L = ceil(numpy.percentile(tokens_per_line over all lines of all files, q, "
        "method='linear')) (Henry et al. 2020: 97.5th percentile)",
    }


# --------------------------------------------------------------------------------------------
# CLI


def _cmd_check(a: argparse.Namespace) -> int:
    warnings: list[str] = []
    n = check_pair(a.src, a.tgt, a.max_len, a.src_name, a.tgt_name, warnings, a.normalize)
    for line in warnings:
        _info(line)
    print(
        f"ok: {a.src_name or a.src} / {a.tgt_name or a.tgt}: {n} lines, "
        f"UTF-8, no empty/CRLF/over-long (> {a.max_len} tokens) lines, no tab, line-break, "
        "no-break-space, byte-order-mark or control characters"
    )
    return 0


def _cmd_distinct(a: argparse.Namespace) -> int:
    names = a.names or a.files
    if len(names) != len(a.files):
        raise ValueError(f"--names: {len(names)} names for {len(a.files)} files")
    errors = same_file_errors(list(zip(names, a.files)))
    if errors:
        raise CorpusErrors(errors)
    return 0


def _cmd_overlap(a: argparse.Namespace) -> int:
    d = Path(a.dir)
    others = [(sp, str(d / f"{sp}.{a.src}"), str(d / f"{sp}.{a.tgt}")) for sp in ("dev", "test")]
    report = overlap_report((str(d / f"train.{a.src}"), str(d / f"train.{a.tgt}")), others)
    for line in overlap_warnings(report, a.label or f"{a.src}-{a.tgt}"):
        _info(line)
    print(json.dumps(report, ensure_ascii=False))
    return 0


def _cmd_sha256(a: argparse.Namespace) -> int:
    expected = a.expected
    name = a.name or a.file
    if a.sums:
        key = a.key or os.path.basename(a.file)
        sums = read_sums(a.sums)
        if key not in sums:
            _info(f"warning: {a.sums}: no entry for {key!r}; {name} not verified")
            return EXIT_NOT_LISTED
        expected = sums[key]
    got = verify_file(a.file, expected, a.size, name=name)
    if expected or a.size is not None:
        what = " and ".join(w for w, v in (("size", a.size), ("sha256", expected)) if v is not None)
        print(f"ok: {name}: {what} verified ({got})")
    else:
        print(f"{got}  {a.file}")
    return 0


def _cmd_diagnose(a: argparse.Namespace) -> int:
    for hint in diagnose_pair_dir(a.dir, a.src, a.tgt, a.folder, a.splits.split(",")):
        print(hint)
    return 0


def _cmd_untar(a: argparse.Namespace) -> int:
    safe_extract(a.archive, a.dest, a.include or ())
    return 0


def _print_report(kind: str, src: str, tgt: str, report: dict) -> None:
    for split, c in report.items():
        extra = f", {c['dropped_short_row']} short rows" if c.get("dropped_short_row") else ""
        print(
            f"{kind} {src}-{tgt} {split}: kept {c['kept']} / {c['rows']} rows, "
            f"dropped {c['dropped']} "
            f"({c['dropped_null']} missing/NULL{extra})"
        )
    print(json.dumps({"source": kind, "src": src, "tgt": tgt, "splits": report}, sort_keys=True))


def _cmd_extract_tsv(a: argparse.Namespace) -> int:
    report = extract_tsv(a.tsv_dir, a.src, a.tgt, a.out, a.splits.split(","))
    _print_report("tsv", a.src, a.tgt, report)
    return 0


def _cmd_extract_pair_folder(a: argparse.Namespace) -> int:
    splits = a.splits.split(",")
    if a.root:
        report = extract_pair_folder(a.root, a.folder, a.src, a.tgt, a.out, splits)
    else:
        parent = Path(a.out).resolve().parent
        parent.mkdir(parents=True, exist_ok=True)
        work = tempfile.mkdtemp(prefix=".qknorm-untar.", dir=str(parent))
        try:
            root = safe_extract(a.archive, os.path.join(work, "x"), [f"*{a.folder}/*"])
            report = extract_pair_folder(root, a.folder, a.src, a.tgt, a.out, splits)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    _print_report("pair-folder", a.src, a.tgt, report)
    return 0


def _cmd_length_percentile(a: argparse.Namespace) -> int:
    files = list(a.file or [])
    if not files:
        raise CorpusError("-", "no input: give --file (repeatable) and/or --file2")
    stats = length_stats(files, a.q)
    for item in a.meta or []:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise ValueError(f"--meta expects KEY=VALUE, got {item!r}")
        try:
            stats[key] = json.loads(value)
        except json.JSONDecodeError:
            stats[key] = value
    text = json.dumps(stats, indent=None if not a.out else 2, sort_keys=False)
    if a.out:
        tmp = Path(a.out).with_name(f".{Path(a.out).name}.tmp.{os.getpid()}")
        tmp.write_text(text + "\n", encoding="utf-8")
        os.replace(tmp, a.out)
    summary = {k: stats[k] for k in ("L", "q", "n_lines")}
    print(json.dumps(summary))
    return 0


def _cmd_length_stats(a: argparse.Namespace) -> int:
    try:
        stats = json.loads(Path(a.stats).read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise CorpusError(a.stats, f"not a readable length_stats.json ({e})") from None
    if a.get:
        if a.get not in stats:
            raise CorpusError(a.stats, f"no field {a.get!r} (fields: {', '.join(stats)})")
        print(stats[a.get])
        return 0
    paper = f"; authors' L = {a.paper_l}" if a.paper_l is not None else ""
    print(
        f"L = {stats['L']} (q = {stats['q']} percentile of {stats['n_lines']} training lines = "
        f"{stats['percentile']:.2f}, rounded up{paper}); QKNorm's g0 = log2(L^2 - L) is computed "
        f"and logged by the model"
    )
    return 0


def _cmd_bpe_manifest(a: argparse.Namespace) -> int:
    manifest = bpe_manifest(
        a.pair,
        a.src,
        a.tgt,
        a.tool,
        merges=a.merges,
        vocab_threshold=a.vocab_threshold,
        vocab_size=a.vocab_size,
        bpe_dropout=a.bpe_dropout,
        seed=a.seed,
        samples=a.samples,
    )
    try:
        write_bpe_manifest(a.out, manifest)
    except OSError as e:
        raise CorpusError(a.out, f"cannot write ({e.strerror or e})") from None
    return 0


def spm_segment(
    raw: str,
    out: str,
    src: str,
    tgt: str,
    vocab_size: int,
    dropout: float = 0.0,
    seed: int = 1,
    splits: Sequence[str] = SPLITS,
    deterministic_dir: str | None = None,
) -> dict:
    """Joint sentencepiece BPE: train on ``raw/train.{src,tgt}``, segment every split to ``out``.

    The model (``out/spm.model``, ``out/spm.vocab``) is a BPE model of exactly ``vocab_size``
    pieces with full character coverage, no BOS/EOS/PAD (fairseq adds its own) and the
    ``identity`` normalization: sentencepiece's default NFKC rewrites characters (``1º`` ->
    ``1o``, full-width and ligature forms), so a decoded hypothesis could never match the raw
    reference and the source would not be the text the references were made from; with
    ``identity`` every segmented line decodes back to its raw line (whitespace-tokenized text).
    With ``dropout > 0`` the training split is segmented by sampling with ``alpha = dropout``
    (sentencepiece's BPE-dropout, Provilkov et al. 2020), seeded by ``seed``, once: one static
    sample that every epoch sees; dev and test are always segmented deterministically, and so
    is the training split written to ``deterministic_dir`` (for QKNorm's L).

    Returns:
        ``{"vocab_size": pieces in the model, "pieces_used": distinct pieces in the
        segmented training split}``.

    Raises:
        ImportError: the ``sentencepiece`` package is not installed (``pip install -e .[spm]``).
        CorpusError: sentencepiece cannot build ``vocab_size`` pieces from the training data
            (too few for its characters, or more than its merges can reach); its own message
            says which sizes work.
    """
    import sentencepiece as spm

    inputs = [os.path.join(raw, f"train.{lang}") for lang in (src, tgt)]
    try:
        spm.SentencePieceTrainer.train(
            input=",".join(inputs),
            model_prefix=os.path.join(out, "spm"),
            vocab_size=int(vocab_size),
            model_type="bpe",
            character_coverage=1.0,
            normalization_rule_name="identity",
            hard_vocab_limit=True,  # exactly vocab_size pieces, or an error saying what fits
            bos_id=-1,
            eos_id=-1,
            pad_id=-1,
            unk_id=0,
            num_threads=2,
            minloglevel=2,
        )
    except RuntimeError as e:  # sentencepiece's checks: "INTERNAL: file(line) [cond] message"
        reason = str(e).split("] ", 1)[-1].strip()
        raise CorpusError(
            " + ".join(inputs),
            f"sentencepiece cannot train a {vocab_size}-piece BPE model: {reason}",
        ) from None
    if hasattr(spm, "set_random_generator_seed"):
        spm.set_random_generator_seed(int(seed))
    sp = spm.SentencePieceProcessor(model_file=os.path.join(out, "spm.model"))
    used: set[str] = set()
    for split in splits:
        sample = split == "train" and dropout > 0
        for lang in (src, tgt):
            with open(os.path.join(raw, f"{split}.{lang}"), encoding="utf-8") as fin:
                lines = [line.strip() for line in fin]
            if sample:
                pieces = [
                    sp.encode(
                        line, out_type=str, enable_sampling=True, alpha=dropout, nbest_size=-1
                    )
                    for line in lines
                ]
            else:
                pieces = [sp.encode(line, out_type=str) for line in lines]
            _write_pieces(os.path.join(out, f"{split}.{lang}"), pieces)
            if split == "train":
                deterministic = (
                    pieces if not sample else [sp.encode(x, out_type=str) for x in lines]
                )
                used.update(p for ps in deterministic for p in ps)
                if deterministic_dir is not None:
                    os.makedirs(deterministic_dir, exist_ok=True)
                    _write_pieces(os.path.join(deterministic_dir, f"train.{lang}"), deterministic)
    return {"vocab_size": sp.get_piece_size(), "pieces_used": len(used)}


def _write_pieces(path: str, lines: Iterable[list[str]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for pieces in lines:
            f.write(" ".join(pieces) + "\n")


def _cmd_spm(a: argparse.Namespace) -> int:
    stats = spm_segment(
        a.raw, a.out, a.src, a.tgt, a.vocab_size, a.dropout, a.seed,
        deterministic_dir=a.deterministic_dir,
    )  # fmt: skip
    used, size = stats["pieces_used"], stats["vocab_size"]
    print(json.dumps(stats))
    if used < 0.9 * size:
        _info(
            f"warning: only {used} of the {size} sentencepiece pieces occur in the segmented "
            f"training data (the others are intermediate BPE merges): fairseq's dictionary will "
            f"have about {used} entries, not {size}; a smaller --vocab-size gives a vocabulary "
            f"the data use"
        )
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m qknorm_tools.corpus`` argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m qknorm_tools.corpus",
        description="Corpus helpers of the data pipeline.",
    )
    sub = p.add_subparsers(dest="cmd", required=True, metavar="<command>")

    c = sub.add_parser("check", help="verify a parallel pair of text files")
    c.add_argument("--src", required=True)
    c.add_argument("--tgt", required=True)
    c.add_argument(
        "--max-len",
        type=int,
        default=DEFAULT_MAX_LEN,
        help=f"max whitespace tokens per line (default {DEFAULT_MAX_LEN})",
    )
    c.add_argument("--src-name", help="name to show for --src in messages (default: the path)")
    c.add_argument("--tgt-name", help="name to show for --tgt in messages (default: the path)")
    c.add_argument(
        "--normalize",
        choices=FORMS,
        default="none",
        help="the pair's [text] normalize: lines not in NFC are reported either way (a "
        "warning with counts); the warning says whether they will be normalized",
    )
    c.set_defaults(func=_cmd_check)

    ds = sub.add_parser(
        "distinct", help="refuse files of which two are one file (symlink, hard link)"
    )
    ds.add_argument("files", nargs="+", metavar="FILE")
    ds.add_argument("--names", nargs="+", help="names to show for the files (default: paths)")
    ds.set_defaults(func=_cmd_distinct)

    ov = sub.add_parser(
        "overlap",
        help="warn about dev/test sentence pairs that also occur in the training data",
    )
    ov.add_argument("--dir", required=True, help="holds {train,dev,test}.{SRC,TGT}")
    ov.add_argument("--src", required=True)
    ov.add_argument("--tgt", required=True)
    ov.add_argument("--label", help="name of the data in the warnings (default SRC-TGT)")
    ov.set_defaults(func=_cmd_overlap)

    s = sub.add_parser("sha256", help="print or verify a file's sha256 (and size)")
    s.add_argument("--file", required=True)
    g = s.add_mutually_exclusive_group()
    g.add_argument("--expected", help="expected sha256 (hex)")
    g.add_argument(
        "--sums", help="a sha256sum-format file (e.g. SHA256SUMS) holding the expected value"
    )
    s.add_argument("--key", help="entry name in --sums (default: the file's basename)")
    s.add_argument("--size", type=int, help="expected size in bytes")
    s.add_argument("--name", help="name to show in messages (default: the path)")
    s.set_defaults(func=_cmd_sha256)

    d = sub.add_parser(
        "diagnose",
        help="what a data dir holds instead of a usable copy of a pair (one hint a line)",
    )
    d.add_argument("--dir", required=True, help="the data directory")
    d.add_argument("--src", required=True)
    d.add_argument("--tgt", required=True)
    d.add_argument("--folder", default="", help="pair folder expected in --dir (e.g. ted-gl-en)")
    d.add_argument("--splits", default=",".join(SPLITS), help="split file prefixes")
    d.set_defaults(func=_cmd_diagnose)

    u = sub.add_parser("untar", help="safely and atomically extract a tar(.gz) archive")
    u.add_argument("--archive", required=True)
    u.add_argument(
        "--dest", required=True, help="directory to create (must not exist unless complete)"
    )
    u.add_argument(
        "--include", action="append", help="glob of member names to extract (repeatable)"
    )
    u.set_defaults(func=_cmd_untar)

    t = sub.add_parser("extract-tsv", help="extract a pair from all_talks_{train,dev,test}.tsv")
    t.add_argument("--tsv-dir", required=True, help="directory holding all_talks_<split>.tsv")
    t.add_argument("--src", required=True, help="source language column, e.g. gl")
    t.add_argument("--tgt", required=True, help="target language column, e.g. en")
    t.add_argument("--out", required=True, help="output directory for <split>.<lang> files")
    t.add_argument(
        "--splits", default=",".join(SPLITS), help="comma-separated (default train,dev,test)"
    )
    t.set_defaults(func=_cmd_extract_tsv)

    f = sub.add_parser(
        "extract-pair-folder",
        help="extract a pair from a qi18naacl-dataset-style pair folder (e.g. gl_to_en)",
    )
    g = f.add_mutually_exclusive_group(required=True)
    g.add_argument(
        "--archive", help="qi18naacl-dataset.tar.gz (extracted safely to a temporary dir)"
    )
    g.add_argument("--root", help="an already extracted archive")
    f.add_argument("--folder", required=True, help="pair folder name, e.g. gl_to_en")
    f.add_argument("--src", required=True)
    f.add_argument("--tgt", required=True)
    f.add_argument("--out", required=True)
    f.add_argument("--splits", default=",".join(SPLITS))
    f.set_defaults(func=_cmd_extract_pair_folder)

    lp = sub.add_parser(
        "length-percentile", help="q-th percentile L of tokens per line (QKNorm's L), as JSON"
    )
    lp.add_argument("--file", action="append", help="a (BPE'd) text file; repeatable")
    lp.add_argument("--file2", action="append", dest="file", help="more files (same as --file)")
    lp.add_argument("--q", type=float, default=97.5, help="percentile (default 97.5, as in QKNorm)")
    lp.add_argument("--out", help="also write the full statistics as JSON to this file")
    lp.add_argument(
        "--meta",
        action="append",
        metavar="KEY=VALUE",
        help="extra field for the --out JSON (value parsed as JSON if possible); repeatable",
    )
    lp.set_defaults(func=_cmd_length_percentile)

    ls = sub.add_parser("length-stats", help="show a length_stats.json, or one of its fields")
    ls.add_argument("--stats", required=True, help="length_stats.json (length-percentile --out)")
    ls.add_argument("--get", metavar="FIELD", help="print only this field (e.g. L, tool)")
    ls.add_argument(
        "--paper-l",
        type=lambda text: int(text) if text else None,
        help="the authors' L, shown next to ours (empty: none, e.g. an own corpus)",
    )
    ls.set_defaults(func=_cmd_length_stats)

    bm = sub.add_parser("bpe-manifest", help="write bpe.json: how scripts/bpe.sh segmented a pair")
    bm.add_argument("--out", required=True, help="the file to write (data/bpe/PAIR/bpe.json)")
    bm.add_argument("--pair", required=True, help="language pair, e.g. gl-en")
    bm.add_argument("--src", required=True)
    bm.add_argument("--tgt", required=True)
    bm.add_argument("--tool", required=True, choices=sorted(BPE_TOOL_SYMBOL))
    bm.add_argument("--merges", type=int, required=True, help="joint BPE merges (subword-nmt)")
    bm.add_argument(
        "--vocab-threshold",
        type=int,
        required=True,
        help="apply-bpe --vocabulary-threshold (subword-nmt)",
    )
    bm.add_argument("--vocab-size", type=int, required=True, help="vocabulary size (sentencepiece)")
    bm.add_argument(
        "--bpe-dropout",
        type=float,
        default=0.0,
        help="BPE-dropout of the training split; recorded when above 0 (default 0)",
    )
    bm.add_argument("--seed", type=int, default=1, help="the BPE-dropout seed (default 1)")
    bm.add_argument(
        "--samples",
        type=int,
        default=1,
        help="BPE-dropout segmentations of the training split, one per epoch in turn (default 1)",
    )
    bm.set_defaults(func=_cmd_bpe_manifest)

    sp = sub.add_parser(
        "spm", help="joint sentencepiece BPE: train on both training sides, segment train/dev/test"
    )
    sp.add_argument("--raw", required=True, help="directory of {train,dev,test}.{SRC,TGT}")
    sp.add_argument("--out", required=True, help="output directory (spm.model, spm.vocab, splits)")
    sp.add_argument("--src", required=True)
    sp.add_argument("--tgt", required=True)
    sp.add_argument("--vocab-size", type=int, required=True)
    sp.add_argument(
        "--dropout",
        type=float,
        default=0.0,
        help="BPE-dropout (sampling alpha) on the training split only (default 0)",
    )
    sp.add_argument("--seed", type=int, default=1, help="sampling seed (default 1)")
    sp.add_argument(
        "--deterministic-dir",
        help="also write the deterministic segmentation of the training split here "
        "(with --dropout: what QKNorm's L is computed from)",
    )
    sp.set_defaults(func=_cmd_spm)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status (1 on any reported error, 2 on usage errors)."""
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except CorpusErrors as e:
        for err in e.errors[:MAX_REPORTED_ERRORS]:
            print(f"error: {err}", file=sys.stderr)
        if len(e.errors) > MAX_REPORTED_ERRORS:
            print(
                f"error: ... and {len(e.errors) - MAX_REPORTED_ERRORS} more problems",
                file=sys.stderr,
            )
        return EXIT_ERROR
    except CorpusError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_ERROR
    except ImportError as e:
        print(f"error: {e} (install the extra: pip install -e .[spm])", file=sys.stderr)
        return EXIT_ERROR
    except OSError as e:
        print(f"error: {getattr(e, 'filename', None) or '-'}: {e.strerror or e}", file=sys.stderr)
        return EXIT_ERROR


if __name__ == "__main__":
    sys.exit(main())
