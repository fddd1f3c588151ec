"""Unicode normalization forms of a corpus: mixed composed (NFC) and decomposed (NFD) text.

The same letter can be one code point (``é``, U+00E9, composed) or a base letter and a
combining mark (``e`` + U+0301, decomposed). Both render alike, but BPE tools and fairseq's
dictionary see different characters, so a corpus that mixes the two forms learns two
segmentations of one word, and a test set in the other form than the training data meets
characters never seen in training. ``scripts/prepare_data.sh`` therefore reports the lines of
each file that are not in NFC (with counts, :func:`form_warning`), and a pair may opt in to
normalizing every file to NFC (``[text] normalize = "NFC"`` in ``configs/base.toml`` or the
pair's file; :data:`FORMS`), which the data identity of the binarized data then records
(``text_normalize``) and the translate helper applies to its input.

Normalization forms: Unicode Standard Annex #15 (Unicode Normalization Forms), as implemented
by Python's :func:`unicodedata.normalize` / :func:`unicodedata.is_normalized`.

``python -m qknorm_tools.unicode_forms normalize --form NFC FILE...``: normalize each file in
place (atomically); print each file's number of changed lines.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field

from . import exits

#: The values of ``[text] normalize``: ``none`` keeps the text as it is (the default, as the
#: papers' pipelines); ``NFC`` composes every line (UAX #15, canonical composition).
FORMS = ("none", "NFC")


@dataclass
class FormCounts:
    """How a file's lines stand against NFC (filled line by line by :meth:`add`).

    Attributes:
        lines: lines seen.
        not_nfc: lines that NFC changes (they hold decomposed sequences that compose, or
            other non-NFC sequences).
        composed: lines holding a composed character that NFD decomposes (the other form).
        first_line: 1-based number of the first line not in NFC (None: every line is NFC).
        example: the first such line's first non-NFC sequence, described (code points and
            names), or "".
    """

    lines: int = 0
    not_nfc: int = 0
    composed: int = 0
    first_line: int | None = None
    example: str = ""
    _seen: set = field(default_factory=set, repr=False)

    def add(self, text: str) -> None:
        """Count one decoded line (without its newline)."""
        self.lines += 1
        if text.isascii():
            return
        if not unicodedata.is_normalized("NFC", text):
            self.not_nfc += 1
            if self.first_line is None:
                self.first_line = self.lines
                self.example = _first_non_nfc(text)
        if not unicodedata.is_normalized("NFD", text):
            self.composed += 1


def _describe(chars: str) -> str:
    return " + ".join(f"U+{ord(c):04X} {unicodedata.name(c, '?')}" for c in chars)


def _first_non_nfc(text: str) -> str:
    """The first base-plus-combining-marks sequence of ``text`` that NFC changes, described."""
    i = 0
    while i < len(text):
        j = i + 1
        while j < len(text) and unicodedata.combining(text[j]):
            j += 1
        chunk = text[i:j]
        nfc = unicodedata.normalize("NFC", chunk)
        if nfc != chunk:
            return f"{chunk!r} ({_describe(chunk)}), NFC {nfc!r} ({_describe(nfc)})"
        i = j
    return ""


def form_warning(name: str, counts: FormCounts, normalize: str = "none") -> str | None:
    """The ``warning: ...`` line for a file with lines not in NFC, else None.

    Args:
        name: the file as the user knows it.
        counts: its :class:`FormCounts`.
        normalize: the pair's ``[text] normalize`` (:data:`FORMS`): with ``NFC`` the lines
            are normalized, and the line says so instead of suggesting it.
    """
    if not counts.not_nfc:
        return None
    mixed = (
        f"mixed with {counts.composed} line(s) holding composed characters: the same letter "
        "in two forms, segmented differently"
        if counts.composed
        else "no composed character elsewhere in the file: check that the training data and "
        "the text to translate use the same form"
    )
    action = (
        'normalized to NFC ([text] normalize = "NFC")'
        if normalize == "NFC"
        else 'kept as they are; set [text] normalize = "NFC" in the pair\'s configs/pairs/'
        "PAIR.toml to compose them (the data identity records it)"
    )
    return (
        f"warning: {name}: {counts.not_nfc} of {counts.lines} lines not in Unicode NFC "
        f"(decomposed letters, first at line {counts.first_line}: {counts.example}), "
        f"{mixed}; {action}"
    )


def normalize_file(src: str, dst: str, form: str) -> int:
    """Write ``src`` normalized to ``form`` into ``dst`` (atomically: a temporary file renamed).

    Args:
        src: a UTF-8 text file (checked by ``qknorm_tools.corpus check`` before).
        dst: the output path (may equal ``src``).
        form: one of :data:`FORMS`; ``none`` copies.

    Returns:
        The number of lines changed.

    Raises:
        ValueError: ``form`` not in :data:`FORMS`.
        UnicodeDecodeError: ``src`` is not UTF-8.
    """
    if form not in FORMS:
        raise ValueError(f"normalization form {form!r}: one of {', '.join(FORMS)}")
    changed = 0
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(os.path.abspath(dst)), prefix=".normalize.")
    try:
        with (
            open(src, encoding="utf-8", newline="\n") as f,
            os.fdopen(fd, "w", encoding="utf-8", newline="\n") as out,
        ):
            for line in f:
                new = line if form == "none" else unicodedata.normalize(form, line)
                changed += new != line
                out.write(new)
        os.replace(tmp, dst)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return changed


def normalize_lines(lines: Sequence[str], form: str) -> list[str]:
    """``lines`` normalized to ``form`` (:data:`FORMS`; ``none``: unchanged)."""
    if form not in FORMS:
        raise ValueError(f"normalization form {form!r}: one of {', '.join(FORMS)}")
    return list(lines) if form == "none" else [unicodedata.normalize(form, x) for x in lines]


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m qknorm_tools.unicode_forms`` argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m qknorm_tools.unicode_forms",
        description="Unicode normalization of corpus files (UAX #15).",
    )
    sub = p.add_subparsers(dest="command", required=True)
    n = sub.add_parser(
        "normalize",
        help="normalize files in place (each atomically); print each file's changed lines",
    )
    n.add_argument("--form", required=True, choices=FORMS)
    n.add_argument("files", nargs="+", metavar="FILE")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point: 0 done, 1 a file that cannot be read or is not UTF-8, 2 usage.

    Prints ``FILE<TAB>LINES_CHANGED`` per file.
    """
    a = build_parser().parse_args(argv)
    for path in a.files:
        try:
            changed = normalize_file(path, path, a.form)
        except (OSError, UnicodeDecodeError) as e:
            print(f"error: {path}: {e}", file=sys.stderr)
            return exits.FAILURE
        print(f"{path}\t{changed}")
    return exits.OK


if __name__ == "__main__":
    sys.exit(main())
