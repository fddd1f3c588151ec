"""The one route from finished runs to results (no torch, no fairseq).

``python -m qknorm_tools.collect runs --run DIR ... --work-dir W --out-dir RESULTS`` reads the
given run directories (:func:`~.records.read_run`; unfinished ones are listed and skipped),
refuses runs of one pair trained on different data (each record carries its ``data_id``,
:mod:`~.provenance`), writes ``RESULTS/runs.json`` and, on request, the reports built from
those records:

* ``--runs-table STEM``: one row per run, ``STEM.md`` and ``STEM.json`` (``make demo``);
* ``--aggregate``: mean ± sd over seeds and paired tests against ``--baseline``,
  ``aggregate.{md,tex,csv,json}`` (``scripts/reproduce.sh``, ``scripts/ablation.sh``); a
  partly finished grid aggregates what it can (:func:`~.aggregate.select_for_aggregate`);
* ``--keep-unscored``: runs whose training finished but that were not decoded (diverged runs,
  the LR sweep's lr-0 initial-model runs) are kept, with null scores (``scripts/lr_sweep.sh``).
* ``--records-root DIR`` (one profile label: ``results/LABEL``) or ``--records-base DIR``
  (``results/``: each run's own label, for a collection over several, as the LR sweep's initial
  models and sizes): a cell without a finished live run is read from its committed record
  (:mod:`~.committed`); ``--write-records`` writes the record of every finished run without one.

``python -m qknorm_tools.collect train-json RUN --pair ... --arch ...`` writes a finished
training's ``train.json`` (what ``scripts/train.sh`` calls; see
:func:`~.records.write_train_json`).

Errors print ``error: ...``; exit statuses as every command's (:mod:`~.exits`): 1 for
data that cannot be collected, 2 for usage errors.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from .aggregate import aggregate_results, select_for_aggregate
from .committed import (
    RECORD_FILE,
    check_record,
    merge_runs_and_records,
    read_record,
    record_dir,
    write_record,
)
from .evaluate import parse_kv
from .exits import die_usage, fail, status_of
from .provenance import check_one_data_version
from .records import (
    load_records,
    read_run,
    relative_path,
    run_status,
    save_records,
    write_train_json,
)
from .tables import write_aggregate_tables, write_runs_table
from .textio import EvaluationError, output_error_message, warn

__all__ = ["build_parser", "main"]


def _log(msg: str) -> None:
    print(f"[collect] {msg}", file=sys.stderr)


def _check_one_precision(records) -> None:
    """Refuse fp32 and bf16 runs in one collection: a table would average them as seeds."""
    by = {}
    for r in records:
        by.setdefault(r.precision or "fp32", []).append(r.run_dir or f"{r.system} seed {r.seed}")
    if len(by) > 1:
        detail = "; ".join(f"{p}: {', '.join(runs)}" for p, runs in sorted(by.items()))
        raise EvaluationError(
            f"runs trained in different precisions ({detail}): a table never mixes fp32 and "
            f"bf16 runs; collect each precision separately"
        )


def _lost_runs(out: Path, records) -> list[str]:
    """The runs of ``out/runs.json`` (an earlier or committed collection) not among ``records``."""
    try:
        old = load_records(out / "runs.json") if (out / "runs.json").is_file() else []
    except EvaluationError as exc:  # unreadable: nothing to compare with, said
        warn(f"{out / 'runs.json'}: not compared with this collection ({exc})")
        return []
    have = {r.key for r in records}
    return [f"{r.pair}/{r.system}/seed{r.seed}" for r in old if r.key not in have]


def _lost_tests(out: Path, pairs, refs, significance: bool) -> list[str]:
    """Why the paired tests of ``out/aggregate.json`` are impossible here: missing references."""
    old = out / "aggregate.json"
    if not significance or not old.is_file():
        return []
    try:
        had = json.loads(old.read_text(encoding="utf-8")).get("significance") or {}
    except (OSError, ValueError, AttributeError):
        return []
    if not had.get("enabled"):
        return []
    return [
        f"{pair}: its reference {refs.get(pair) or '(no --ref)'} is missing: make it with "
        f"scripts/prepare_data.sh {pair}"
        for pair in sorted(pairs)
        if not refs.get(pair) or not Path(refs[pair]).is_file()
    ]


def refuse_degrading(out: Path, records, refs, significance: bool) -> None:
    """Refuse a collection that would replace ``out``'s results with less, before any write.

    Less: runs of its ``runs.json`` missing here, or the paired tests (bootstrap CIs, p-values,
    daggers) of its ``aggregate.json`` with a reference that is missing here.

    Raises:
        EvaluationError: naming what is missing and the command that makes it.
    """
    lost = _lost_runs(out, records)
    if lost:
        raise EvaluationError(
            f"{out / 'runs.json'} holds runs this collection does not have: {', '.join(lost)}; "
            "nothing was written (train them, restore their runs or committed records, or "
            f"remove {out / 'runs.json'} to report on fewer runs)"
        )
    tests = _lost_tests(out, {str(r.pair) for r in records}, refs, significance)
    if tests:
        raise EvaluationError(
            f"{out / 'aggregate.json'} holds paired tests that cannot be recomputed here: "
            + "; ".join(tests)
            + "; nothing was written"
        )


def _require_systems(runs, cells, systems) -> None:
    """Refuse, before any write, a collection lacking one of ``systems`` in a pair.

    Each of ``systems`` needs a finished run or a committed record in every pair of ``runs``
    (``runs/PAIR/LABEL/SYSTEM/seedN``).

    Raises:
        EvaluationError: naming each pair's systems without one.
    """
    have = set()
    for live, rec, _ in cells:
        r = live or rec
        have.add((str(r.pair), str(r.system)))
    pairs = sorted({Path(run).parents[2].name for run in runs})
    lacking = [(p, s) for p in pairs for s in systems if (p, s) not in have]
    if lacking:
        raise EvaluationError(
            ", ".join(f"{p}/{s}" for p, s in lacking)
            + f": no finished run or committed record among the {len(runs)} runs given (each "
            "needs train.json, test.score.json and test.hyp, or a committed record); every "
            f"system of {','.join(systems)} needs one: nothing was written"
        )


def _cmd_runs(a) -> int:
    refs = parse_kv(a.ref, "--ref")
    cells, unfinished, n_recorded, looked = [], [], 0, {}
    for run in a.run:
        live = rec = None
        rec_dir = None
        root = a.records_root
        if a.records_base:  # runs/PAIR/LABEL/SYSTEM/seedN -> BASE/LABEL
            root = Path(a.records_base) / Path(run).parents[1].name
        if root:  # runs/PAIR/LABEL/SYSTEM/seedN -> RECORDS_ROOT/PAIR/records/...
            rec_dir = record_dir(root, Path(run).parents[2].name, run)
            looked[str(rec_dir.parents[1])] = None  # the records folder, in order
            if (rec_dir / RECORD_FILE).is_file():
                rec = read_record(rec_dir, a.split)
                if a.records_base:  # a record under BASE/LABEL is of profile label LABEL
                    check_record(rec, profile=Path(run).parents[1].name)
        missing = run_status(run, a.split, scored=not a.keep_unscored)
        if not missing:
            live = read_run(run, a.split, scored=not a.keep_unscored)
        elif rec is None:
            unfinished.append(f"{run} (no {', '.join(missing)})")
            continue
        for r in (live, rec):
            if r is not None and refs.get(r.pair):
                r.ref_path = os.path.abspath(refs[r.pair])  # links kept: data/ may be one
        if live is None:
            n_recorded += 1
            _log(f"from its committed record: {rec.source}")
        cells.append((live, rec, rec_dir))
    if unfinished and a.require_all and cells:  # none at all: the message below says so
        raise EvaluationError(
            f"unfinished runs, {len(unfinished)} of {len(a.run)} (--require-all: nothing "
            "written; finish them, or name the runs to report on): " + "; ".join(unfinished)
        )
    if a.require_systems and cells:  # none at all: the message below says so
        _require_systems(a.run, cells, a.require_systems.split(","))
    # live runs and committed records of other data, settings or profiles never mix
    records = merge_runs_and_records([(lv, rc) for lv, rc, _ in cells], profile=a.profile)
    check_one_data_version(records)  # results never mix data versions of a pair
    # a --ref of no pair among the runs: misspelled, or the runs are not the ones meant
    pairs = {str(r.pair) for r in records}
    pairs |= {Path(run).parents[2].name for run in a.run if len(Path(run).parents) > 2}
    for pair in sorted(set(refs) - pairs):
        warn(
            f"--ref {pair}=...: no run of pair {pair!r} is given (pairs: {' '.join(sorted(pairs))})"
        )
    out = Path(a.out_dir)
    if records:  # a committed report is never replaced by less (none: refused below)
        refuse_degrading(out, records, refs, a.aggregate and not a.no_significance)
    if a.write_records:
        for live, rec, rec_dir in cells:
            if live is None or rec is not None or rec_dir is None:
                continue
            if live.hyp_path or a.keep_unscored:  # scored, or a collection of unscored runs
                write_record(live.run_dir, rec_dir, a.split, scored=live.hyp_path is not None)
                _log(f"wrote the committed record {rec_dir}")
    _check_one_precision(records)
    for u in unfinished:
        _log(f"not finished, left out: {u}")
    if not records:  # an earlier runs.json (and its tables) is never replaced by an empty one
        kept = f"; {out / 'runs.json'} left as it was" if (out / "runs.json").exists() else ""
        where = f" in {', '.join(looked)}" if looked else ""
        raise EvaluationError(
            f"no finished run among the {len(a.run)} given (each needs train.json, "
            f"test.score.json and test.hyp, or a committed record{where}, of which there is "
            f"none): nothing to report{kept}"
        )
    save_records(records, out / "runs.json", work_dir=a.work_dir)
    _log(
        f"wrote {out / 'runs.json'} ({len(records)} runs"
        + (f", {n_recorded} from committed records)" if n_recorded else ")")
    )
    if a.runs_table:
        paths = write_runs_table(records, out, a.runs_table, a.baseline, work_dir=a.work_dir)
        print(Path(paths["md"]).read_text(encoding="utf-8"))
        _log("wrote " + ", ".join(paths.values()))
    if a.aggregate:
        keep, significance = select_for_aggregate(
            records, a.baseline, refs, significance=not a.no_significance
        )
        if not keep:
            warn(f"no pair has a finished {a.baseline!r} run: no aggregate tables (--baseline)")
            return 0
        agg = aggregate_results(keep, a.baseline, refs=refs, significance=significance)
        for entry in agg["pairs"].values():  # stored relative to the work dir, like runs.json
            if entry["ref"]:
                entry["ref"] = relative_path(entry["ref"], a.work_dir)
        paths = write_aggregate_tables(agg, out)
        _log("wrote " + ", ".join(paths.values()))
    return 0


def _cmd_train_json(a) -> int:
    identity = {
        "pair": a.pair,
        "profile": a.profile,
        "system": a.system,
        "seed": a.seed,
        "arch": a.arch,
        "precision": a.precision,
        "qk_norm_length": a.qk_norm_length,
        "paper_qk_norm_length": a.paper_qk_norm_length,
        "variant": parse_kv(a.variant, "--variant"),
    }
    rec = write_train_json(a.run, identity)
    g0 = f", QKNorm g0 = {rec.qk_norm_g0:.4f} (logged by the model)" if rec.qk_norm_g0 else ""
    print(f"{rec.updates} updates, {rec.wall_seconds} s of training{g0}")
    return 0


def _number(text: str) -> float:
    """An int when integral (L is a whole number of tokens), else a float."""
    value = float(text)
    return int(value) if value.is_integer() else value


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m qknorm_tools.collect`` argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m qknorm_tools.collect",
        description="Collect finished runs into runs.json and the result tables.",
    )
    sub = p.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("runs", help="finished run directories -> runs.json (+ tables)")
    r.add_argument(
        "--run",
        action="append",
        required=True,
        metavar="DIR",
        help="a run directory (repeatable); unfinished ones are left out",
    )
    r.add_argument(
        "--work-dir", required=True, help="the pipeline's work dir: stored paths are relative to it"
    )
    r.add_argument("--out-dir", required=True, help="where runs.json and the tables go")
    r.add_argument("--ref", action="append", metavar="PAIR=PATH", help="reference per pair")
    r.add_argument("--split", default="test", help="the evaluated split (default test)")
    r.add_argument("--require-all", action="store_true", help="an unfinished run is an error")
    r.add_argument(
        "--require-systems",
        metavar="S1,S2,...",
        help="each of these systems needs a finished run or a committed record in every pair, "
        "else an error naming those without one, nothing written (scripts/ablation.sh's 2x2)",
    )
    r.add_argument("--baseline", default=None, help="baseline system of the tables")
    r.add_argument("--runs-table", metavar="STEM", help="write the per-run table STEM.{md,json}")
    r.add_argument(
        "--aggregate",
        action="store_true",
        help="write aggregate.{md,tex,csv,json} against --baseline",
    )
    r.add_argument("--no-significance", action="store_true", help="aggregate without paired tests")
    r.add_argument(
        "--keep-unscored",
        action="store_true",
        help="also keep finished trainings without scores (diverged or never decoded runs; "
        "their scores are null); not with --aggregate or --runs-table",
    )
    r.add_argument(
        "--records-root",
        metavar="DIR",
        help="results/LABEL: a run's committed record is DIR/PAIR/records/SYSTEM/RUN_NAME; a cell "
        "without a finished live run is read from it (qknorm_tools.committed)",
    )
    r.add_argument(
        "--records-base",
        metavar="DIR",
        help="results/: as --records-root with DIR/LABEL, LABEL each run's own profile label "
        "(runs/PAIR/LABEL/...), which its record must have; for collections over several labels",
    )
    r.add_argument(
        "--write-records",
        action="store_true",
        help="write the committed record of every finished, scored live run that has none "
        "(with --keep-unscored: of every finished one; needs --records-root or --records-base)",
    )
    r.add_argument(
        "--profile",
        metavar="LABEL",
        help="the profile label every committed record must have (another one is refused)",
    )
    r.set_defaults(fn=_cmd_runs)

    t = sub.add_parser("train-json", help="write RUN/train.json for a finished training")
    t.add_argument("run", help="the run directory (train.log, wall_seconds)")
    t.add_argument("--pair", required=True)
    t.add_argument("--profile", required=True, help="profile label (with -max-update-N)")
    t.add_argument("--system", required=True)
    t.add_argument("--seed", type=int, required=True)
    t.add_argument("--arch", required=True)
    t.add_argument(
        "--precision",
        choices=("fp32", "bf16"),
        default="fp32",
        help="training precision (bf16: bf16 autocast on CPU)",
    )
    t.add_argument("--qk-norm-length", type=_number, help="the data's L passed to the model")
    t.add_argument("--paper-qk-norm-length", type=_number, help="the QKNorm authors' L")
    t.add_argument(
        "--variant",
        action="append",
        metavar="KEY=VALUE",
        help="a run-defining override beyond pair/profile/system/seed, e.g. lr=3e-3 (repeatable)",
    )
    t.set_defaults(fn=_cmd_train_json)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point; returns the exit status (:mod:`~.exits`: 1 data, 2 usage)."""
    parser = build_parser()
    a = parser.parse_args(argv)
    if a.cmd == "runs" and a.aggregate and not a.baseline:
        die_usage(parser, "--aggregate needs --baseline")
    if a.cmd == "runs" and a.records_root and a.records_base:
        die_usage(parser, "--records-root and --records-base exclude each other")
    if a.cmd == "runs" and a.write_records and not (a.records_root or a.records_base):
        die_usage(parser, "--write-records needs --records-root or --records-base")
    if a.cmd == "runs" and a.keep_unscored and (a.aggregate or a.runs_table):
        die_usage(parser, "--keep-unscored keeps runs without scores: not with the score tables")
    logging.getLogger("sacrebleu").setLevel(logging.WARNING)
    try:
        return a.fn(a)
    except (EvaluationError, ValueError) as exc:  # ArgumentError (--ref without =): usage
        return fail(exc, status_of(exc))
    except OSError as exc:  # inputs are read as InputFileError (above): mostly an output here
        return fail(output_error_message(exc))


if __name__ == "__main__":
    sys.exit(main())
