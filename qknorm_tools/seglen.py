"""Segmented line lengths against what the model takes (``python -m qknorm_tools.seglen``).

The raw corpus check (``qknorm_tools.corpus check``) counts whitespace tokens; segmentation
makes a line longer (one 5,000-character "word" is one raw token and thousands of BPE tokens).
fairseq refuses a sentence whose length in tokens, *with* the end-of-sentence token its
binarization appends, exceeds the model's max positions: ``fairseq-train`` skips such a
training pair with a warning, ``fairseq-generate`` stops at it ("Size of sample #N is
invalid"). So the length is checked where it is made, after segmentation (``scripts/bpe.sh``
calls :func:`check_segmentation`; ``scripts/evaluate.sh`` checks the split it decodes):

* the limit is :func:`max_segment_tokens` = max positions - 1 tokens per line, with max
  positions = :data:`MAX_POSITIONS` (fairseq's ``max_source_positions`` and
  ``max_target_positions``, which every arch of the plugin and the translation task leave at
  fairseq's default; no profile sets another: tested);
* a dev or test line over it is an error naming the raw file and line, with its whitespace
  tokens before and its tokens after segmentation (a score on fewer lines would not be
  comparable, so they are never dropped);
* a training pair with either side over it is dropped from every segmentation of the training
  split, counted on stderr and listed in ``too_long.json`` beside the segmented files.

Nothing here imports torch or fairseq.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import asdict, dataclass

from .committed import command_settings
from .corpus_check import CorpusError
from .lengths import line_lengths
from .textio import OutputError, ResultsError, write_lines, write_text_atomic

#: fairseq's max positions per sentence (``DEFAULT_MAX_SOURCE_POSITIONS`` and
#: ``DEFAULT_MAX_TARGET_POSITIONS`` of ``fairseq.models.transformer``), which the plugin's
#: archs and the translation task keep (tests/test_seglen.py checks it).
MAX_POSITIONS = 1024

#: The file listing the training pairs dropped for their length (in the segmented dir).
RECORD = "too_long.json"

#: Lines named one by one on stderr before "... and N more".
MAX_NAMED = 20

#: Exit status of a refused split (a failure of the data).
EXIT_REFUSED = 1


def run_max_positions(command: str) -> tuple[int, int]:
    """The (source, target) max positions of a fairseq-train command line (``command.txt``).

    Its ``--max-source-positions`` / ``--max-target-positions`` (the last occurrence, as
    argparse takes it), else :data:`MAX_POSITIONS`, which the plugin's archs keep.

    Raises:
        qknorm_tools.textio.ResultsError: not a fairseq-train command line.
        ValueError: a value that is not an integer.
    """
    settings = command_settings(command)
    return tuple(
        int(settings.get(f"--max-{side}-positions", MAX_POSITIONS)) for side in ("source", "target")
    )  # type: ignore[return-value]


def max_segment_tokens(max_positions: int = MAX_POSITIONS) -> int:
    """The most tokens a segmented line may have.

    That is ``max_positions`` less the end-of-sentence token that binarization
    (``fairseq-preprocess``, the hub interface) appends.
    """
    return max_positions - 1


@dataclass(frozen=True)
class LongLine:
    """A segmented line over the limit.

    Attributes:
        path: the raw file (what to fix), as shown in messages.
        line: 1-based line number (the same in the raw and the segmented file).
        raw_tokens: whitespace tokens of the raw line.
        seg_tokens: tokens after segmentation (the longest of its segmentations).
        limit: :func:`max_segment_tokens`.
        seg_path: the segmented file, as shown in messages.
        origin: the file ``path`` is a line-for-line copy of (the user's, named by
            ``scripts/prepare_data.sh`` in ``SOURCE``; what to fix), or ``""``.
    """

    path: str
    line: int
    raw_tokens: int
    seg_tokens: int
    limit: int
    seg_path: str = ""
    origin: str = ""

    def __str__(self) -> str:
        seg = f" ({self.seg_path})" if self.seg_path else ""
        where = f"{self.path}:{self.line}"
        if self.origin:
            where = f"{self.origin}:{self.line} (prepared as {where})"
        return (
            f"{where}: {self.seg_tokens} tokens after segmentation{seg}, "
            f"{self.raw_tokens} before: over {self.limit}, the most the model takes "
            f"(max positions {self.limit + 1}, one for the end-of-sentence token)"
        )


def origins(raw_dir: str) -> dict[str, str]:
    """The user's files that ``raw_dir``'s splits are line-for-line copies of.

    Read from ``raw_dir/SOURCE`` (written by ``scripts/prepare_data.sh``: one line
    ``origin.SPLIT.LANG=FILE`` for each split copied from a file the user gave; none for a
    split extracted from an archive or TSV, or prepared before these lines existed).

    Returns:
        ``{"SPLIT.LANG": FILE}``; empty without ``SOURCE``.
    """
    try:
        with open(os.path.join(raw_dir, "SOURCE"), encoding="utf-8") as f:
            lines = f.read().splitlines()
    except (FileNotFoundError, UnicodeDecodeError):
        return {}
    pairs = (x[len("origin.") :].partition("=") for x in lines if x.startswith("origin."))
    return {name: path for name, sep, path in pairs if sep and path}


def long_lines(
    raw: str,
    segmented: Sequence[str],
    limit: int,
    raw_name: str | None = None,
    seg_name: str = "",
    origin: str = "",
) -> list[LongLine]:
    """The lines of ``raw`` whose segmentation (in any of ``segmented``) is over ``limit``.

    Args:
        raw: the raw file (whitespace-tokenized text).
        segmented: its segmentations, each line for line with ``raw`` (more than one for the
            BPE-dropout samples of a training split); a line's length is its longest.
        limit: the most tokens a segmented line may have (:func:`max_segment_tokens`).
        raw_name: ``raw`` as messages show it (default: ``raw``).
        seg_name: the segmented file as messages show it (default: not shown).
        origin: the user's file that ``raw`` is a copy of, line for line (default: none).

    Raises:
        CorpusError: a segmented file has another line count than ``raw`` (names both), or a
            line is not UTF-8.
    """
    raw_lengths = line_lengths([raw])
    longest = [0] * len(raw_lengths)
    for path in segmented:
        lengths = line_lengths([path])
        if len(lengths) != len(raw_lengths):
            raise CorpusError(
                path,
                f"{len(lengths)} lines, but {raw} has {len(raw_lengths)}: not its segmentation",
            )
        longest = [max(a, b) for a, b in zip(longest, lengths)]
    return [
        LongLine(raw_name or raw, i, raw_lengths[i - 1], n, limit, seg_name, origin)
        for i, n in enumerate(longest, 1)
        if n > limit
    ]


def _named(lines: Sequence[LongLine], prefix: str) -> list[str]:
    shown = [f"{prefix}{x}" for x in lines[:MAX_NAMED]]
    if len(lines) > MAX_NAMED:
        shown.append(f"{prefix}... and {len(lines) - MAX_NAMED} more such lines")
    return shown


def drop_lines(paths: Sequence[str], numbers: set[int]) -> None:
    """Rewrite each file of ``paths`` without its lines ``numbers`` (1-based).

    Each file whole or not at all (:func:`qknorm_tools.textio.write_lines`).
    """
    for path in paths:
        with open(path, "rb") as f:
            kept = [
                raw.rstrip(b"\n").decode("utf-8") for i, raw in enumerate(f, 1) if i not in numbers
            ]
        write_lines(path, kept)


@dataclass
class CheckResult:
    """What :func:`check_segmentation` found.

    Attributes:
        refused: dev/test lines over the limit (the split cannot be used as it is).
        dropped: training lines over the limit (their pairs were dropped), both sides.
        n_train: training pairs before dropping.
        langs: the (source, target) languages checked.
        max_positions: the (source, target) max positions checked against.
    """

    refused: list[LongLine]
    dropped: list[LongLine]
    n_train: int
    langs: tuple[str, str] = ("", "")
    max_positions: tuple[int, int] = (MAX_POSITIONS, MAX_POSITIONS)


def check_segmentation(
    raw_dir: str,
    seg_dir: str,
    src: str,
    tgt: str,
    splits: Sequence[str] = ("train", "dev", "test"),
    train_copies: Sequence[str] = (),
    max_positions: tuple[int, int] = (MAX_POSITIONS, MAX_POSITIONS),
    raw_name: str | None = None,
    seg_name: str | None = None,
) -> CheckResult:
    """Check the segmented splits of a pair against what the model takes; drop long training pairs.

    ``seg_dir/SPLIT.LANG`` is the segmentation of ``raw_dir/SPLIT.LANG``; ``train_copies`` are
    directories holding more segmentations of the training split (``train.LANG``: the
    deterministic one and the BPE-dropout samples); a line is also named in the user's file
    that ``raw_dir``'s split copies (:func:`origins`). Every split other than ``train`` is only
    checked. When no such split is refused, a training pair with either side over the limit in
    any segmentation is dropped from ``seg_dir/train.*`` and every copy, and listed in
    ``seg_dir/too_long.json`` (:data:`RECORD`; written only when a pair was dropped); when one
    is refused, no file is changed.

    Args:
        raw_dir: directory of the raw ``SPLIT.LANG`` files.
        seg_dir: directory of their segmentation (``SPLIT.LANG``).
        src: source language.
        tgt: target language.
        splits: the splits to check (``train`` is the only one ever changed).
        train_copies: directories with more segmentations of the training split.
        max_positions: the model's (source, target) max positions (:data:`MAX_POSITIONS`).
        raw_name: ``raw_dir`` as messages show it.
        seg_name: ``seg_dir`` as messages show it (a temporary directory is shown as the one
            it becomes; a refused dev or test line then names no segmented file: nothing is
            kept when one is refused).

    Raises:
        CorpusError: a segmented file is not line for line its raw file.
        OutputError: a file cannot be rewritten.
    """
    limits = dict(zip((src, tgt), map(max_segment_tokens, max_positions)))
    raw_name = raw_name or raw_dir
    kept = not seg_name or seg_name == seg_dir  # else seg_dir becomes seg_name if none is refused
    seg_name = seg_name or seg_dir
    copied_from = origins(raw_dir)
    refused: list[LongLine] = []
    dropped: list[LongLine] = []
    n_train = 0
    for split in splits:
        for lang, limit in limits.items():
            name = f"{split}.{lang}"
            segs = [os.path.join(seg_dir, name)]
            if split == "train":
                segs += [os.path.join(d, name) for d in train_copies]
            shown = os.path.join(seg_name, name) if kept or split == "train" else ""
            found = long_lines(
                os.path.join(raw_dir, name), segs, limit, os.path.join(raw_name, name), shown,
                copied_from.get(name, ""),
            )  # fmt: skip
            (dropped if split == "train" else refused).extend(found)
            if split == "train":
                n_train = len(line_lengths([os.path.join(raw_dir, name)]))
    result = CheckResult(refused, dropped, n_train, (src, tgt), tuple(max_positions))
    if refused or not dropped:
        return result
    numbers = {x.line for x in dropped}
    files = [
        os.path.join(d, f"train.{lang}") for d in (seg_dir, *train_copies) for lang in (src, tgt)
    ]
    drop_lines(files, numbers)
    record = {
        "split": "train",
        "max_positions": dict(zip((src, tgt), max_positions)),
        "limit": limits,
        "n_pairs": n_train,
        "n_dropped": len(numbers),
        "lines": [
            {k: v for k, v in asdict(x).items() if k != "origin"}  # the data's, not the user's
            for x in sorted(dropped, key=lambda x: (x.line, x.path))
        ],
        "definition": "a training pair is dropped when a side has more than limit = "
        "max_positions - 1 tokens after segmentation (its longest segmentation); line = "
        "1-based line of the raw file",
    }
    write_text_atomic(os.path.join(seg_dir, RECORD), json.dumps(record, indent=2) + "\n")
    return result


def _smaller_positions(result: CheckResult) -> list[tuple[str, int, int]]:
    """The sides whose refused lines are over a run's max positions below fairseq's.

    Below :data:`MAX_POSITIONS`, which ``scripts/bpe.sh`` checks the data against. Returns
    ``(side, its max positions, the max positions its longest refused line needs)`` per such
    side, side = ``source`` or ``target`` (fairseq-train's ``--max-SIDE-positions``).
    """
    out = []
    for side, lang, positions in zip(("source", "target"), result.langs, result.max_positions):
        over = [x.seg_tokens for x in result.refused if x.path.endswith(f".{lang}")]
        if lang and over and positions < MAX_POSITIONS:
            out.append((side, positions, max(over) + 1))
    return out


def report(result: CheckResult, seg_name: str, before_training: bool = False) -> list[str]:
    """The stderr lines of a check.

    Each refused line (``error: FILE:LINE: ...``) and what to do, or the count of dropped
    training pairs with examples and where they are listed (``seg_name/too_long.json``).
    Lines that are over a run's max positions smaller than fairseq's (``--run-command``) are
    said to be so, with the max positions a retraining needs (``before_training``: the
    max positions of the command about to train, which the training needs).
    """
    lines = []
    if result.refused:
        lines += _named(result.refused, "error: ")
        fix = "split or shorten them in the raw data and prepare the pair again"
        smaller = _smaller_positions(result)
        if smaller:
            had = " ".join(f"--max-{side}-positions {n}" for side, n, _ in smaller)
            need = " ".join(f"--max-{side}-positions {n}" for side, _, n in smaller)
            fix = (
                f"the run was trained with {had}, below fairseq's {MAX_POSITIONS} that "
                f"scripts/bpe.sh checks the data against: retrain it with {need} or more "
                f"(fairseq-train's options, after the -- of scripts/train.sh ... --force), "
                f"or {fix}"
            )
            if before_training:  # fairseq-train would stop at its first validation
                fix = (
                    f"the command gives {had}, below fairseq's {MAX_POSITIONS} that "
                    f"scripts/bpe.sh checks the data against: train with {need} or more "
                    f"(after the -- of scripts/train.sh), or {fix.rsplit(', or ', 1)[-1]}"
                )
        lines.append(
            f"error: {len(result.refused)} dev/test line(s) longer than the model takes: "
            "dev and test lines are never dropped "
            f"(a score on fewer lines is not comparable); {fix}"
        )
    elif result.dropped:
        n = len({x.line for x in result.dropped})
        lines += _named(
            sorted(result.dropped, key=lambda x: (x.line, x.path)), "warning: dropped: "
        )
        lines.append(
            f"warning: dropped {n} of {result.n_train} training pairs longer than the model "
            f"takes (on either side, after segmentation); listed in "
            f"{os.path.join(seg_name, RECORD)}"
        )
    return lines


def _cmd_check(a: argparse.Namespace) -> int:
    positions = (MAX_POSITIONS, MAX_POSITIONS)
    if a.run_command and os.path.isfile(a.run_command):  # a run copied without it: fairseq's
        with open(a.run_command, encoding="utf-8") as f:
            try:
                positions = run_max_positions(f.read())
            except (ResultsError, ValueError) as e:
                raise CorpusError(a.run_command, str(e)) from None
    result = check_segmentation(
        a.raw, a.seg, a.src, a.tgt, a.splits.split(","), a.train_copy or (),
        positions, a.raw_name, a.seg_name,
    )  # fmt: skip
    for line in report(result, a.seg_name or a.seg):
        print(line, file=sys.stderr)
    return EXIT_REFUSED if result.refused else 0


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m qknorm_tools.seglen`` argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m qknorm_tools.seglen",
        description="Segmented line lengths against what the model takes.",
    )
    sub = p.add_subparsers(dest="cmd", required=True, metavar="<command>")
    c = sub.add_parser(
        "check",
        help="refuse dev/test lines longer than the model takes; drop such training pairs",
    )
    c.add_argument("--raw", required=True, help="directory of the raw SPLIT.LANG files")
    c.add_argument("--seg", required=True, help="directory of their segmentation")
    c.add_argument("--src", required=True)
    c.add_argument("--tgt", required=True)
    c.add_argument("--splits", default="train,dev,test", help="comma-separated (default all)")
    c.add_argument(
        "--train-copy",
        action="append",
        metavar="DIR",
        help="a directory with another segmentation of the training split (train.LANG); repeatable",
    )
    c.add_argument(
        "--run-command",
        metavar="FILE",
        help="a run's command.txt: the model's max positions are its --max-source-positions / "
        f"--max-target-positions (default, and without the file: {MAX_POSITIONS}, fairseq's, "
        "as the plugin's archs)",
    )
    c.add_argument("--raw-name", help="--raw as messages show it")
    c.add_argument(
        "--seg-name",
        help="--seg as messages show it: the directory a temporary --seg becomes when no line is "
        "refused (a refused line then names no segmented file)",
    )
    c.set_defaults(func=_cmd_check)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status.

    0: fine (training pairs may have been dropped); 1: a split refused, or a file that is not
    its raw file's segmentation or cannot be written; 2: a usage error (argparse).
    """
    a = build_parser().parse_args(argv)
    try:
        return a.func(a)
    except (CorpusError, OutputError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    except OSError as e:
        print(f"error: {getattr(e, 'filename', None) or '-'}: {e.strerror or e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
