"""Checks of a raw parallel corpus, and the errors of the corpus modules (standard library).

What ``python -m qknorm_tools.corpus`` (:mod:`.corpus`) runs for

check
    Verify a parallel pair of text files (:func:`check_pair`): two different files (not one
    file under two names), equal line counts, no empty line, valid UTF-8, no carriage return
    (CRLF), no byte order mark (U+FEFF, at the start of the file or anywhere in a line), no
    tab, no character that ``str.splitlines`` takes for a line break, no space separator other
    than U+0020 (no-break space, ...), no other control character, no invisible format
    character (zero width space, soft hyphen, bidi marks, ...), no U+FFFD (a lossy decoding
    upstream), no line over ``max_len``
    whitespace tokens. Lines not in Unicode NFC (decomposed letters, mixed with composed ones)
    are reported as a warning with counts (:mod:`.unicode_forms`).
distinct
    Refuse files of which two are the same file (a symlink or hard link: ``os.path.samefile``;
    :func:`same_file_errors`).
overlap
    Report (warning, not error) dev/test sentences that also occur in the training data, with
    counts (:func:`overlap_report`, :func:`overlap_warnings`).

Every problem is a :class:`CorpusError` (``<file>:<line>: <problem>``, or ``<file>: <problem>``
when no line applies), several found together a :class:`CorpusErrors`; the other corpus
modules (:mod:`.archives`, :mod:`.corpus_extract`, :mod:`.lengths`, :mod:`.spm`) raise them
too.
"""

from __future__ import annotations

import functools
import os
import re
import sys
import unicodedata
from collections.abc import Sequence

from .unicode_forms import FormCounts, form_warning

# --------------------------------------------------------------------------------------------
# constants

#: Default maximum number of whitespace tokens per raw line accepted by ``check``. Raw TED /
#: IWSLT lines are far shorter (the longest gl-en training line has a few hundred tokens); a
#: line longer than this is almost certainly a broken sentence split or a concatenated file.
DEFAULT_MAX_LEN = 1024

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

#: The prepended concatenation marks (Unicode property Prepended_Concatenation_Mark: the Arabic
#: number signs, end of ayah, Syriac abbreviation mark, ...): format characters (category Cf)
#: that are visible signs of their scripts, so not refused with the other format characters.
PREPENDED_CONCATENATION_MARKS = "\u0600-\u0605\u06dd\u070f\u0890\u0891\u08e2\U000110bd\U000110cd"

#: Zero width non-joiner and joiner (U+200C, U+200D): format characters that are part of the
#: spelling in Persian, Kurdish and the Indic scripts (and of emoji sequences); removing them
#: changes the words, so they are not refused.
JOINERS = "\u200c\u200d"

#: U+FFFD REPLACEMENT CHARACTER: what a decoder writes for bytes it could not decode (``errors=
#: "replace"``); the original character is lost upstream.
REPLACEMENT_CHARACTER = "\ufffd"

#: Every character refused inside a line after decoding, but the invisible format characters
#: (:func:`_bad_char_re` adds them): tab, the line breaks above, the space separators above, the
#: byte order mark, the replacement character, and every other control character (Unicode
#: category Cc: C0, DEL, C1) except ``\n`` (the line end), ``\r`` and NUL (both reported on the
#: raw bytes, before decoding).
_BAD_CHARS = (
    f"\x01-\x09\x0b\x0c\x0e-\x1f\x7f-\x9f\u2028\u2029{SPACE_SEPARATORS}{BOM}{REPLACEMENT_CHARACTER}"
)


@functools.cache
def _bad_char_re() -> re.Pattern:
    """The refused characters: :data:`_BAD_CHARS` and the invisible format characters.

    Those are every format character (Unicode category Cf, of this Python's Unicode database)
    but the prepended concatenation marks and the joiners (:data:`JOINERS`), e.g. zero width
    space, soft hyphen, word joiner, the bidirectional marks, embeddings and isolates. Built
    once (a scan of the code points, about 0.2 s).
    """
    kept = re.compile(f"[{PREPENDED_CONCATENATION_MARKS}{JOINERS}]")
    cf = "".join(
        chr(c) for c in range(sys.maxunicode + 1)
        if unicodedata.category(chr(c)) == "Cf" and not kept.match(chr(c))
    )  # fmt: skip
    return re.compile(f"[{_BAD_CHARS}{re.escape(cf)}]")


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


def info(msg: str) -> None:
    """Print ``msg`` on stderr (the corpus commands' notes and warnings)."""
    print(msg, file=sys.stderr, flush=True)


def decode_line(raw: bytes, path: str, lineno: int) -> str:
    """``raw`` decoded as UTF-8, or a :class:`CorpusError` at ``path:lineno`` if it is not."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise CorpusError(
            path, f"invalid UTF-8 (byte 0x{raw[e.start]:02x} at byte offset {e.start})", lineno
        ) from None


# --------------------------------------------------------------------------------------------
# check


def carriage_return_problems(line: str | bytes) -> list[str]:
    r"""The carriage returns of a line without its ``\n`` (text or raw bytes), as problems.

    A ``\r`` at the end: a CRLF line ending; one anywhere else: a stray carriage return, at
    which text-mode readers (fairseq, subword-nmt: Python's universal newlines) split the line.
    Both can hold for one line; ``[]`` when it has none.
    """
    cr = "\r" if isinstance(line, str) else b"\r"
    problems = []
    if line.endswith(cr):
        problems.append(
            "CRLF line ending (carriage return before newline); convert with `sed -i 's/\\r$//'`"
        )
    if cr in line.removesuffix(cr):
        problems.append(
            "stray carriage return (\\r) inside the line; text-mode readers would split the "
            "line here"
        )
    return problems


def bad_character_problem(text: str) -> str | None:
    r"""The problem of a decoded line's first refused character, or None when it has none.

    Refused: tab (subword-nmt splits words on spaces only, so ``word\tword`` becomes one word
    with a stray ``@@`` and a ``\t@@`` vocabulary entry), the line breaks of
    :data:`LINE_BREAK_CHARS` (``str.splitlines``), the space separators of
    :data:`SPACE_SEPARATORS` (no-break space and the like: the same stray ``@@``), the byte
    order mark :data:`BOM` anywhere in the line, every other control character (Unicode
    category Cc; invisible, and taken as part of a word), the invisible format characters
    (:func:`_bad_char_re`: the same) and :data:`REPLACEMENT_CHARACTER` (a character lost to a
    lossy decoding before the file). The message names the character
    (code point and name) and its position (1-based character index), and how many more refused
    characters the line holds.
    """
    bad_char = _bad_char_re()
    m = bad_char.search(text)
    if m is None:
        return None
    c, col = m.group(), m.start() + 1
    code = f"U+{ord(c):04X}"
    more = len(bad_char.findall(text, m.end()))
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
    if c == REPLACEMENT_CHARACTER:
        return (
            f"replacement character ({code}) at character {col}: what a decoder writes for bytes "
            f"it could not decode; the original character was lost before this file (decode the "
            f"source with its real encoding){tail}"
        )
    if unicodedata.category(c) == "Cf":
        return (
            f"{unicodedata.name(c, 'format character').lower()} ({code}) at character {col}: an "
            f"invisible format character, and BPE tools take it as part of a word (the word with "
            f"it and without it are two vocabulary entries); remove it{tail}"
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
            errors.extend(CorpusError(name, p, n) for p in carriage_return_problems(raw))
            raw = raw.removesuffix(b"\r")
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
            what = "is a directory, expected a file" if os.path.isdir(path) else "no such file"
            errors.append(CorpusError(name, what))
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
