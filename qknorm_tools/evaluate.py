"""Command line of the evaluation tools (no torch, no fairseq).

``python -m qknorm_tools.evaluate <command> --help``:

``extract``
    Parse ``fairseq-generate`` output, restore source order, remove BPE (``--bpe-dir``: the
    way the tool recorded in ``data/bpe/PAIR/bpe.json`` requires).
``score``
    Tokenized BLEU (``bleu_tok``, as reported by the papers; equals ``multi-bleu.perl``),
    detokenized sacreBLEU (``bleu``) and chrF, each with its sacreBLEU signature.
``compare``
    Paired bootstrap resampling and paired approximate randomization (sacreBLEU's
    implementation, ``sacrebleu.significance.PairedTest``).
``aggregate``
    Mean ± sample sd over seeds per language pair and system, paired tests on
    seed-concatenated outputs, average delta over pairs; Markdown, LaTeX (booktabs) and CSV.
``ablation``
    2x2 {layernorm, scalenorm} x {dot, qknorm} confound report.
``lr-sensitivity``
    LR sweep per system: final dev loss and test BLEU per peak learning rate, LR sensitivity
    (Wortsman et al. 2023), diverged runs, best LR (:mod:`.lr_sweep`).

Input errors print ``error: ...`` (naming file and line) and exit with status 2.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

from . import freshness
from .ablation import ABLATION_CELLS, ablation_report, write_ablation_report
from .aggregate import aggregate_results
from .exits import fail, positive_int, status_of
from .lr_sweep import lr_sweep, write_lr_sweep_report
from .provenance import check_one_data_version
from .records import RunRecord, load_records, relative_path, work_dir_of
from .scoring import SCORE_FIELDS, format_scores, score_files
from .significance import (
    MIN_SIG_LINES,
    TOKENIZE_TO_METRIC,
    compare_files,
    format_compare,
    split_named,
)
from .tables import write_aggregate_tables
from .textio import (
    BPE_MODES,
    BPE_TOOL_SYMBOL,
    ArgumentError,
    EvaluationError,
    ResultsError,
    bpe_tool,
    explain_generate_failure,
    extract_hypotheses,
    output_error_message,
    read_lines,
    warn,
    write_text_atomic,
)

__all__ = [
    "RUN_IDENTITY_FIELDS",
    "RunIdentityError",
    "build_parser",
    "check_run_identity",
    "main",
    "parse_kv",
    "run_identity_mismatches",
]

#: What names a run (its directory runs/PAIR/PROFILE-LABEL/SYSTEM/seedN[-bf16][-lr...]): the
#: fields of train.json that scripts/train.sh writes from the settings it trained with
RUN_IDENTITY_FIELDS = ("pair", "profile", "system", "seed", "precision", "variant")


def run_identity_mismatches(recorded: dict, expected: dict) -> list[str]:
    """The identity fields on which a run's ``train.json`` differs from the run asked for.

    A field the record lacks (a run from before it was recorded) is not compared; a missing
    ``variant`` is ``{}``. Returns ``"FIELD: trained as R, asked for E"`` strings, in
    :data:`RUN_IDENTITY_FIELDS` order (empty: the run is the one asked for).
    """
    out = []
    for key in RUN_IDENTITY_FIELDS:
        if key not in recorded and key != "variant":
            continue
        got = recorded.get(key) or ({} if key == "variant" else None)
        want = expected.get(key) or ({} if key == "variant" else None)
        if key == "seed":
            got, want = int(got), int(want)
        if got != want:
            out.append(f"{key}: trained as {got!r}, asked for {want!r}")
    return out


def parse_kv(items: Sequence[str] | None, flag: str) -> dict[str, str]:
    """``["K=V", ...]`` -> ``{K: V}``.

    Raises:
        EvaluationError: an item without ``=`` (``flag`` named).
    """
    out = {}
    for it in items or []:
        if "=" not in it:
            raise ArgumentError(f"{flag} expects KEY=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        out[k] = v
    return out


def _dump(obj) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False)


def _load_all(sources: Sequence[str]) -> list[RunRecord]:
    records = []
    for src in sources:
        records.extend(load_records(src))
    check_one_data_version(records)  # a report never mixes data versions of a pair
    return records


def _cmd_extract(a) -> int:
    mode = BPE_TOOL_SYMBOL[bpe_tool(a.bpe_dir)] if a.bpe_dir else a.remove_bpe
    # written whole or not at all; an error names the output, not its temporary sibling
    hyps = extract_hypotheses(a.generate_output, a.output, mode, a.n_expected)
    print(f"wrote {len(hyps)} hypotheses to {a.output}", file=sys.stderr)
    return 0


def _cmd_score(a) -> int:
    res = score_files(
        a.hyp,
        a.ref,
        src_lang=a.src_lang,
        tgt_lang=a.tgt_lang,
        allow_bpe_markers=a.allow_bpe_markers,
    )
    if a.data_id:
        res["data_id"] = a.data_id
    print(_dump(res) if a.json else format_scores(res))
    return 0


def _cmd_finish(a) -> int:
    """After fairseq-generate, in one process: hypotheses, scores, the made-by record.

    What ``scripts/evaluate.sh`` does once the decoding is written: ``extract`` (the
    hypotheses in source order, the pair's segmentation removed, exactly ``--n-expected``
    of them), ``score`` (its JSON written to ``--score`` atomically) and ``freshness write``
    (the made-by record, written last: an output without it is decoded again). Each step's
    error names its file and says which step stopped; nothing later is written.
    """
    made_by = a.made_by[1:] if a.made_by[:1] == ["--"] else a.made_by
    fr = freshness.build_parser().parse_args(["write", *made_by])
    try:
        mode = BPE_TOOL_SYMBOL[bpe_tool(a.bpe_dir)]
        hyps = extract_hypotheses(a.generate_output, a.hyp, mode, a.n_expected)
    except (EvaluationError, OSError) as exc:
        raise EvaluationError(
            f"could not extract {a.n_expected} hypotheses from {a.generate_output}: {exc}"
        ) from exc
    print(f"wrote {len(hyps)} hypotheses to {a.hyp}", file=sys.stderr)
    try:
        res = score_files(a.hyp, a.ref, src_lang=a.src_lang, tgt_lang=a.tgt_lang)
    except EvaluationError as exc:
        raise EvaluationError(f"scoring {a.hyp} against {a.ref} failed: {exc}") from exc
    res["data_id"] = a.data_id
    write_text_atomic(a.score, _dump(res) + "\n")
    freshness.write_record(fr.record, freshness.current_settings(fr))
    return 0


def _cmd_compare(a) -> int:
    if a.out:  # never write the table over one of the files it is computed from
        for arg, what in ((a.ref, "--ref"), (a.baseline, "--baseline"),
                          *((x, "--system") for x in a.system)):  # fmt: skip
            path = Path(split_named(arg)[1])
            if path.exists() and Path(a.out).exists() and path.samefile(a.out):
                raise ArgumentError(f"--out {a.out} is the {what} file {path}: it would be "
                                      "overwritten; write the results elsewhere")  # fmt: skip
    res = compare_files(
        a.ref,
        a.baseline,
        a.system,
        tokenize=a.tokenize,
        tgt_lang=a.tgt_lang,
        n_bootstrap=a.n_bootstrap,
        n_ar=a.n_ar,
        seed=a.seed,
        allow_few_lines=a.allow_few_lines,
    )
    text = _dump(res) if a.json else format_compare(res)
    if a.out:
        write_text_atomic(a.out, text + "\n")
        print(f"wrote {a.out}", file=sys.stderr)
    else:
        print(text)
    return 0


def _cmd_aggregate(a) -> int:
    agg = aggregate_results(
        _load_all(a.results),
        a.baseline,
        refs=parse_kv(a.ref, "--ref"),
        metric=a.metric,
        significance=not a.no_significance,
        tgt_lang=parse_kv(a.tgt_lang, "--tgt-lang"),
        n_bootstrap=a.n_bootstrap,
        n_ar=a.n_ar,
        seed=a.seed,
    )
    paths = write_aggregate_tables(agg, a.out_dir)
    print(Path(paths["md"]).read_text(encoding="utf-8"))
    print("wrote " + ", ".join(paths.values()), file=sys.stderr)
    return 0


def _ablation_cells_from_spec(path: str) -> tuple[dict, str | None, str | None]:
    try:
        spec = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise ResultsError(f"cannot read ablation spec {path!r}: {exc}") from None
    if not isinstance(spec, dict) or "cells" not in spec:
        raise ResultsError(f"ablation spec {path!r} must be an object with 'cells'")
    base = str(Path(path).parent)
    pair = spec.get("pair")
    cells = {
        c: [RunRecord.from_json({"pair": pair or "", **r}, base, source=path) for r in recs]
        for c, recs in spec["cells"].items()
    }
    ref = None
    if spec.get("ref"):
        ref_path = Path(spec["ref"])
        ref = str(
            ref_path if ref_path.is_absolute() or ref_path.exists() else Path(base) / ref_path
        )
    return cells, ref, pair


def _ablation_cells_from_results(a) -> tuple[dict, str | None, str]:
    records = _load_all(a.results)
    pair = a.pair
    if pair is None:
        pairs = sorted({r.pair for r in records})
        if len(pairs) != 1:
            raise ArgumentError(f"several pairs in the results {pairs}: choose one with --pair")
        pair = pairs[0]
    mapping = {c: c for c in ABLATION_CELLS}
    mapping.update(parse_kv(a.cell, "--cell"))
    unknown = [c for c in mapping if c not in ABLATION_CELLS]
    if unknown:
        raise ArgumentError(f"unknown ablation cells {unknown}; cells are {list(ABLATION_CELLS)}")
    cells = {c: [r for r in records if r.pair == pair and r.name == s] for c, s in mapping.items()}
    found = {r.ref_path for recs in cells.values() for r in recs if r.ref_path}
    return cells, (found.pop() if len(found) == 1 else None), pair


def _cmd_ablation(a) -> int:
    if a.spec:
        cells, ref_path, pair = _ablation_cells_from_spec(a.spec)
        pair = a.pair or pair
    elif a.results:
        cells, ref_path, pair = _ablation_cells_from_results(a)
    else:
        raise ArgumentError("ablation needs --spec or --results")
    ref_path = a.ref or ref_path
    check_one_data_version([r for recs in cells.values() for r in recs])
    significance = not a.no_significance
    counts = {c: len(recs) for c, recs in cells.items()}
    if significance and all(counts.values()) and len(set(counts.values())) > 1:
        warn(f"cells have different numbers of finished seeds {counts}: paired tests skipped")
        significance = False
    refs = None
    if significance:
        if ref_path is None:
            raise ArgumentError("ablation significance needs --ref (or 'ref' in the spec)")
        refs = read_lines(ref_path, "reference")
    lang = a.tgt_lang or (pair.split("-")[-1] if pair and "-" in pair else "en")
    design, targets, margin = "welch", (0.5, 0.93), None
    if a.profile:
        from . import config

        try:
            prof = config.load_profile(a.profile)
        except config.ConfigError as exc:
            raise EvaluationError(str(exc)) from None
        design, targets, margin = prof.design_test, prof.design_targets, prof.design_tost_margin
    if a.target:
        targets = tuple(a.target)
    if a.tost_margin is not None:
        margin = a.tost_margin
    rep = ablation_report(
        cells,
        refs,
        metric=a.metric,
        significance=significance,
        tgt_lang=lang,
        n_ar=a.n_ar,
        seed=a.seed,
        design=design,
        targets=targets,
        tost_margin=margin,
    )
    rep["pair"], rep["ref"] = pair, ref_path
    paths = write_ablation_report(rep, a.out_dir)
    print(Path(paths["md"]).read_text(encoding="utf-8"))
    print("wrote " + ", ".join(paths.values()), file=sys.stderr)
    return 0


def _positive_float(text: str) -> float:
    """The argparse type of a positive finite number (BLEU points)."""
    try:
        value = float(text)
    except ValueError:
        value = float("nan")
    if not (value > 0 and value != float("inf")):
        raise argparse.ArgumentTypeError(f"a positive number of BLEU points, got '{text}'")
    return value


def _cmd_explain_generate(a) -> int:
    log = Path(a.log).read_text(encoding="utf-8", errors="replace") if Path(a.log).is_file() else ""
    print(explain_generate_failure(log, a.checkpoint, a.data, a.split_files or ()))
    return 0


class RunIdentityError(EvaluationError):
    """A run directory holds another run than the one asked for (copied or renamed)."""


def check_run_identity(run, expected: dict) -> None:
    """Check that the run directory ``run`` holds the run asked for, by its ``train.json``.

    What ``scripts/train.sh`` and ``scripts/evaluate.sh`` check (``python -m
    qknorm_tools.run train-claim`` and ``evaluate-check``) and the translate helper too. A run
    without ``train.json`` (not finished yet) passes.

    Args:
        run: the run directory.
        expected: the identity asked for (keys of :data:`RUN_IDENTITY_FIELDS`).

    Raises:
        EvaluationError: ``train.json`` cannot be read (the file named).
        RunIdentityError: it records another run (the run, its file and each differing
            field named, as :func:`run_identity_mismatches` gives them).
    """
    path = Path(run) / "train.json"
    if not path.is_file():
        return
    try:
        recorded = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise EvaluationError(f"{path}: cannot read the run's record: {exc}") from exc
    problems = run_identity_mismatches(recorded, expected)
    if problems:
        raise RunIdentityError(
            f"{run} is another run than the one asked for ({path}: {'; '.join(problems)}): a "
            "run directory copied or renamed is never trained on, decoded or scored under "
            "another name"
        )


def _cmd_lr_sensitivity(a) -> int:
    systems = a.systems.split(",") if a.systems else None
    records = _load_all(a.results)
    for src in a.results:  # run_dir as runs.json stores it: relative to the work dir
        try:
            base = work_dir_of(json.loads(Path(src).read_text(encoding="utf-8")), Path(src))
        except (OSError, ValueError):  # read above: a directory of record files
            base = None
        for rec in records:
            if base and rec.run_dir:
                rec.run_dir = relative_path(rec.run_dir, base)
    res = lr_sweep(records, pair=a.pair, systems=systems)
    paths = write_lr_sweep_report(res, a.out_dir, a.stem)
    print(Path(paths["md"]).read_text(encoding="utf-8"))
    print("wrote " + ", ".join(paths.values()), file=sys.stderr)
    return 0


def _add_test_args(p, bootstrap: bool = True) -> None:
    if bootstrap:
        p.add_argument("--n-bootstrap", type=positive_int, default=1000, help="bootstrap resamples")
    p.add_argument(
        "--n-ar", type=positive_int, default=10000, help="approximate-randomization trials"
    )
    p.add_argument("--seed", type=positive_int, default=12345, help="seed of the resampling (>= 1)")


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m qknorm_tools.evaluate`` argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m qknorm_tools.evaluate",
        description="BLEU/chrF scoring (sacreBLEU), paired significance tests and result tables.",
    )
    sub = p.add_subparsers(dest="cmd", required=True)

    e = sub.add_parser("extract", help="hypotheses from fairseq-generate output, in source order")
    e.add_argument("--generate-output", required=True, help="captured fairseq-generate stdout")
    e.add_argument("--output", required=True, help="hypothesis file to write (one per line, UTF-8)")
    how = e.add_mutually_exclusive_group()
    how.add_argument(
        "--remove-bpe",
        choices=BPE_MODES,
        default="subword_nmt",
        help="subword removal (default: subword_nmt, i.e. '@@ ')",
    )
    how.add_argument(
        "--bpe-dir",
        help="remove the segmentation of the tool recorded in DIR/bpe.json (data/bpe/PAIR)",
    )
    e.add_argument("--n-expected", type=int, default=None, help="required number of hypotheses")
    e.set_defaults(fn=_cmd_extract)

    s = sub.add_parser("score", help="tokenized BLEU, detokenized sacreBLEU and chrF")
    s.add_argument("--hyp", required=True, help="hypotheses, one per line")
    s.add_argument("--ref", required=True, help="reference, one per line")
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument("--src-lang", default=None, help="source language (in the signatures)")
    s.add_argument(
        "--tgt-lang", default="en", help="target language for detokenization (default en)"
    )
    s.add_argument(
        "--allow-bpe-markers",
        action="store_true",
        help="score text that still holds '@@' / '\u2581' (default: refused, the segmentation "
        "was not removed)",
    )
    s.add_argument(
        "--data-id",
        help="identity of the data scored (python -m qknorm_tools.provenance), kept in the JSON",
    )
    s.set_defaults(fn=_cmd_score)

    f = sub.add_parser(
        "finish",
        help="after fairseq-generate: extract + score + made-by record (scripts/evaluate.sh)",
    )
    f.add_argument("--generate-output", required=True, help="captured fairseq-generate stdout")
    f.add_argument("--hyp", required=True, help="hypothesis file to write")
    f.add_argument("--bpe-dir", required=True, help="the segmented pair (its bpe.json's tool)")
    f.add_argument("--n-expected", type=positive_int, required=True, help="lines of the split")
    f.add_argument("--ref", required=True, help="reference, one per line")
    f.add_argument("--score", required=True, help="score JSON to write")
    f.add_argument("--src-lang", required=True, help="source language (in the signatures)")
    f.add_argument("--tgt-lang", required=True, help="target language (detokenization)")
    f.add_argument("--data-id", required=True, help="the data's identity, kept in the JSON")
    f.add_argument(
        "made_by",
        nargs=argparse.REMAINDER,
        help="(after --) RECORD and the arguments of `python -m qknorm_tools.freshness write`",
    )
    f.set_defaults(fn=_cmd_finish)

    c = sub.add_parser("compare", help="paired bootstrap + approximate randomization vs a baseline")
    c.add_argument("--ref", required=True, help="reference, one per line")
    c.add_argument("--baseline", required=True, help="baseline hypotheses, PATH or NAME=PATH")
    c.add_argument(
        "--system", required=True, nargs="+", help="system hypotheses, PATH or NAME=PATH"
    )
    c.add_argument("--json", action="store_true", help="print JSON")
    c.add_argument("--out", default=None, help="write the output to this file instead of stdout")
    _add_test_args(c)
    c.add_argument(
        "--tokenize",
        choices=sorted(TOKENIZE_TO_METRIC),
        default="none",
        help="none: tokenized BLEU on the text as is (default); 13a: "
        "Moses-detokenize, then sacreBLEU 13a",
    )
    c.add_argument("--tgt-lang", default="en", help="detokenizer language for --tokenize 13a")
    c.add_argument(
        "--allow-few-lines",
        action="store_true",
        help=f"test on fewer than {MIN_SIG_LINES} sentences (flagged in the output) instead of "
        "refusing",
    )
    c.set_defaults(fn=_cmd_compare)

    g = sub.add_parser(
        "aggregate", help="mean ± sd over seeds, paired tests, Markdown/LaTeX/CSV tables"
    )
    g.add_argument(
        "--results",
        required=True,
        nargs="+",
        help="runs.json (python -m qknorm_tools.collect), JSON file(s) with a record "
        "or list of records, or directories of *.json",
    )
    g.add_argument("--baseline", required=True, help="baseline system name")
    g.add_argument(
        "--ref", action="append", metavar="PAIR=PATH", help="reference per pair (repeatable)"
    )
    g.add_argument("--out-dir", required=True, help="where aggregate.{md,tex,csv,json} go")
    g.add_argument("--metric", choices=SCORE_FIELDS, default="bleu_tok", help="score of the tables")
    g.add_argument(
        "--tgt-lang",
        action="append",
        metavar="PAIR=LANG",
        help="target language per pair (for --metric bleu); default: after '-' in the pair",
    )
    _add_test_args(g)
    g.add_argument("--no-significance", action="store_true", help="skip the paired tests")
    g.set_defaults(fn=_cmd_aggregate)

    b = sub.add_parser("ablation", help="2x2 {layernorm,scalenorm} x {dot,qknorm} report")
    b.add_argument("--spec", help="JSON {'ref': PATH, 'pair': P, 'cells': {CELL: [records]}}")
    b.add_argument("--results", nargs="+", help="result JSON file(s)/dir(s), as for aggregate")
    b.add_argument("--pair", default=None, help="the pair (default: the only one in --results)")
    b.add_argument(
        "--cell",
        action="append",
        metavar="CELL=SYSTEM",
        help=f"system name of a cell (default: the cell name); cells: {', '.join(ABLATION_CELLS)}",
    )
    b.add_argument("--ref", default=None, help="reference (default: the records' ref_path)")
    b.add_argument("--out-dir", required=True, help="where ablation.{md,json} go")
    b.add_argument("--metric", choices=SCORE_FIELDS, default="bleu_tok", help="score compared")
    b.add_argument("--tgt-lang", default=None, help="detokenizer language (default: from the pair)")
    _add_test_args(b, bootstrap=False)
    b.add_argument("--no-significance", action="store_true", help="skip the paired tests")
    b.add_argument(
        "--profile",
        default=None,
        help="the grid's profile: its [design] (seed-level test, targets, TOST margin) "
        "declared before the runs (default: Welch, targets 0.5 and 0.93, no TOST)",
    )
    b.add_argument(
        "--target",
        type=_positive_float,
        action="append",
        default=None,
        help="a difference (BLEU) to give the seeds needed per cell for (repeatable; replaces "
        "the profile's targets)",
    )
    b.add_argument(
        "--tost-margin",
        type=_positive_float,
        default=None,
        help="equivalence margin (BLEU) of the TOST",
    )
    b.set_defaults(fn=_cmd_ablation)

    lr = sub.add_parser(
        "lr-sensitivity",
        help="LR sweep: dev loss and BLEU per learning rate, LR sensitivity, divergence",
    )
    lr.add_argument(
        "--results",
        required=True,
        nargs="+",
        help="runs.json of the sweep (python -m qknorm_tools.collect runs --keep-unscored), "
        "with the lr-0 initial-model runs",
    )
    lr.add_argument("--pair", default=None, help="the pair (default: the only one in --results)")
    lr.add_argument("--systems", default=None, help="comma-separated systems, in table order")
    lr.add_argument("--out-dir", required=True, help="where STEM.{md,json} go")
    lr.add_argument("--stem", default="lr_sweep", help="file stem (default lr_sweep)")
    lr.set_defaults(fn=_cmd_lr_sensitivity)
    eg = sub.add_parser("explain-generate", help="the cause of a failed fairseq-generate")
    eg.add_argument("--log", required=True, help="its stderr")
    eg.add_argument("--checkpoint", required=True)
    eg.add_argument("--data", required=True, help="the binarized data it decoded")
    eg.add_argument(
        "--split-files",
        nargs=2,
        metavar=("SRC_FILE", "TGT_FILE"),
        help="the segmented source and target files of the decoded split (names a line too long)",
    )
    eg.set_defaults(fn=_cmd_explain_generate)

    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status (:mod:`~.exits`: 1 data, 2 usage)."""
    args = build_parser().parse_args(argv)
    # sacreBLEU logs every resampling step at INFO when the root logger is configured
    logging.getLogger("sacrebleu").setLevel(logging.WARNING)
    try:
        return args.fn(args)
    except EvaluationError as exc:  # ArgumentError: a usage error
        return fail(exc, status_of(exc))
    except OSError as exc:  # inputs are read as InputFileError (above): mostly an output here
        return fail(output_error_message(exc))


if __name__ == "__main__":
    sys.exit(main())
