"""``python -m qknorm_tools.corpus <command>``: the corpus helpers of the data pipeline.

The command line the shell scripts run: the argument parser, one ``_cmd_*`` function a command
and :func:`main`; the work is done by the modules named below (standard library; numpy and
sentencepiece when used; nothing here imports torch or fairseq).

Commands (``<command> -h`` for details):

check
    Verify a parallel pair of text files: valid UTF-8, aligned, no empty line, no character
    BPE tools or line readers mishandle, no over-long line (:mod:`.corpus_check`).
distinct
    Refuse files of which two are the same file (a symlink or hard link;
    :mod:`.corpus_check`).
overlap
    Report (warning, not error) dev/test sentences that also occur in the training data, with
    counts; print the counts as JSON (:mod:`.corpus_check`).
sha256
    Print a file's sha256, or verify it (and its size) against an expected value or a
    ``SHA256SUMS`` file; detects an HTML page served in place of an archive (:mod:`.archives`).
diagnose
    Say what a data directory holds when it is not a usable copy of a pair
    (:mod:`.corpus_extract`).
untar
    Safely and atomically extract a (compressed) tar archive (:mod:`.archives`).
extract-tsv
    Extract a language pair from the TED all-talks TSVs (``all_talks_{train,dev,test}.tsv``;
    :mod:`.corpus_extract`).
extract-pair-folder
    Extract a language pair from a ``qi18naacl-dataset.tar.gz``-style pair folder
    (:mod:`.corpus_extract`).
length-percentile
    q-th percentile L of tokens per line (QKNorm's L; the model computes its g0 from it;
    :mod:`.lengths`).
length-stats
    Show a ``length_stats.json`` written by ``length-percentile``, or one of its fields.
bpe-manifest
    Write ``bpe.json``, the record of how ``scripts/bpe.sh`` segmented a pair (see
    :func:`qknorm_tools.textio.bpe_manifest`).
spm
    Train a joint sentencepiece BPE model on the training data of both sides and segment every
    split (optionally with BPE-dropout sampling on the training split; :mod:`.spm`).

Every error is printed as ``error: <file>:<line>: <problem>`` (or ``error: <file>: <problem>``
when no line applies) on stderr, with exit status 1 (:data:`.exits.FAILURE`).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .archives import read_sums, safe_extract, verify_file
from .corpus_check import (
    DEFAULT_MAX_LEN,
    CorpusError,
    CorpusErrors,
    check_pair,
    info,
    overlap_report,
    overlap_warnings,
    same_file_errors,
)
from .corpus_extract import SPLITS, diagnose_pair_dir, extract_pair_folder, extract_tsv
from .exits import FAILURE, NO, positive_int
from .lengths import length_stats
from .spm import spm_segment
from .textio import BPE_TOOL_SYMBOL, bpe_manifest, write_bpe_manifest
from .unicode_forms import FORMS

#: Exit status for every reported error: a data or environment failure (:mod:`.exits`).
EXIT_ERROR = FAILURE
#: Exit status of ``sha256 --sums`` when the file is not listed in the sums file: the answer no.
EXIT_NOT_LISTED = NO

#: How many of the problems found together (:class:`.corpus_check.CorpusErrors`) are printed.
MAX_REPORTED_ERRORS = 20


def _cmd_check(a: argparse.Namespace) -> int:
    warnings: list[str] = []
    n = check_pair(a.src, a.tgt, a.max_len, a.src_name, a.tgt_name, warnings, a.normalize)
    for line in warnings:
        info(line)
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
        info(line)
    print(json.dumps(report, ensure_ascii=False))
    return 0


def _cmd_sha256(a: argparse.Namespace) -> int:
    expected = a.expected
    name = a.name or a.file
    if a.sums:
        key = a.key or os.path.basename(a.file)
        sums = read_sums(a.sums)
        if key not in sums:
            info(f"warning: {a.sums}: no entry for {key!r}; {name} not verified")
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


def _cmd_spm(a: argparse.Namespace) -> int:
    stats = spm_segment(
        a.raw, a.out, a.src, a.tgt, a.vocab_size, a.dropout, a.seed,
        deterministic_dir=a.deterministic_dir,
    )  # fmt: skip
    used, size = stats["pieces_used"], stats["vocab_size"]
    print(json.dumps(stats))
    if used < 0.9 * size:
        info(
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
        type=positive_int,
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
        type=lambda text: positive_int(text) if text else None,
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
        type=positive_int,
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
    sp.add_argument("--vocab-size", type=positive_int, required=True)
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
