"""Aggregation over seeds and language pairs, with paired tests against a baseline.

Per (pair, system): mean and sample sd over seeds of every score, the delta to the baseline,
and paired bootstrap / approximate randomization on the seed-concatenated outputs
(:func:`concat_over_seeds`); per system: the average delta over pairs, as the papers report
"+x BLEU on average".
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Iterable, Mapping, Sequence

from .provenance import check_one_data_version
from .records import RunRecord, as_record
from .scoring import SCORE_FIELDS
from .significance import RESULT_KEYS, paired_significance
from .textio import EvaluationError, ResultsError, check_same_length, read_lines, warn

__all__ = [
    "aggregate_results",
    "concat_over_seeds",
    "group_by_pair",
    "mean_sd",
    "select_for_aggregate",
    "seed_order",
]


def mean_sd(values: Sequence[float]) -> tuple[float, float]:
    """Mean and sample standard deviation (``ddof=1``).

    With a single value the sd is undefined and returned as ``nan`` (rendered as "n/a" in
    tables and ``null`` in JSON).

    Raises:
        EvaluationError: empty input.
    """
    vals = [float(v) for v in values]
    if not vals:
        raise EvaluationError("mean_sd of an empty list")
    return statistics.fmean(vals), (statistics.stdev(vals) if len(vals) > 1 else float("nan"))


def seed_order(records: Iterable[RunRecord]) -> list[RunRecord]:
    """The records sorted by seed (numeric seeds first)."""

    def key(r):
        try:
            return (0, float(r.seed), str(r.seed))
        except (TypeError, ValueError):
            return (1, 0.0, str(r.seed))

    return sorted(records, key=key)


def group_by_pair(records: Iterable[RunRecord]) -> dict[str, dict[str, list[RunRecord]]]:
    """``{pair: {system name: [records]}}`` in first-seen order."""
    pairs: dict[str, dict[str, list[RunRecord]]] = {}
    for r in records:
        pairs.setdefault(str(r.pair), {}).setdefault(r.name, []).append(r)
    return pairs


def concat_over_seeds(
    records: Sequence[RunRecord], refs: Sequence[str], ref_path="reference"
) -> tuple[list[str], list[str], list[object]]:
    """Concatenate the hypotheses of several seeds, in seed order.

    The hypotheses of seed s1 < s2 < ... are concatenated and scored against the reference
    repeated once per seed, so that a paired test on the result pairs line i of seed k of one
    system with line i of the k-th seed of the other (same reference line). ``ref_path``
    names the reference file in messages.

    Returns:
        ``(hyps, refs_repeated, seeds_in_order)``.

    Raises:
        ResultsError: a record lacks ``hyp_path``.
        LineCountError: a hypothesis file does not match the reference length.
    """
    recs = seed_order(as_record(r) for r in records)
    hyps: list[str] = []
    for r in recs:
        if not r.hyp_path:
            raise ResultsError(
                f"record pair={r.pair!r} system={r.name!r} seed={r.seed!r} has no hyp_path "
                f"(needed for the paired test)"
            )
        h = read_lines(r.hyp_path, "hypothesis")
        check_same_length(h, r.hyp_path, refs, ref_path)
        hyps.extend(h)
    return hyps, list(refs) * len(recs), [r.seed for r in recs]


def _nan_to_none(x):
    return None if isinstance(x, float) and math.isnan(x) else x


def _system_stats(pair: str, name: str, recs: list[RunRecord], metric: str) -> dict:
    """n_seeds, seeds and ``{mean, sd, values}`` of every score field present."""
    recs = seed_order(recs)
    entry = {"n_seeds": len(recs), "seeds": [r.seed for r in recs]}
    for f in SCORE_FIELDS:
        vals = [r.score(f) for r in recs]
        if all(v is None for v in vals):
            if f == metric:
                raise ResultsError(
                    f"pair {pair!r} system {name!r}: no {metric!r} scores (source {recs[0].source})"
                )
            continue
        if any(v is None for v in vals):
            bad = [r.seed for r in recs if r.score(f) is None]
            raise ResultsError(
                f"pair {pair!r} system {name!r}: field {f!r} missing for seeds {bad}"
            )
        m, sd = mean_sd(vals)
        entry[f] = {"mean": m, "sd": _nan_to_none(sd), "values": [float(v) for v in vals]}
    return entry


def _pair_reference(pair: str, systems: Mapping[str, list[RunRecord]], refs) -> str:
    ref_path = refs.get(pair)
    if ref_path is None:
        found = {r.ref_path for recs in systems.values() for r in recs if r.ref_path}
        if len(found) == 1:
            ref_path = found.pop()
    if ref_path is None:
        raise ResultsError(
            f"no reference for pair {pair!r}: pass --ref {pair}=PATH or add ref_path to the records"
        )
    return ref_path


def _pair_significance(pair, order, systems, stats, ref_path, metric, lang, **test_args) -> dict:
    """Paired tests on seed-concatenated outputs; fills ``stats[s]["concat"]``."""
    n_seeds = {s: len(systems[s]) for s in order}
    if len(set(n_seeds.values())) != 1:
        raise ResultsError(
            f"pair {pair!r}: systems have different numbers of seeds {n_seeds}; "
            f"the concatenated paired test needs equal numbers"
        )
    ref_lines = read_lines(ref_path, "reference")
    named, rep_refs = [], []
    for s in order:
        hyps, rep_refs, _ = concat_over_seeds(systems[s], ref_lines, ref_path)
        named.append((s, hyps))
    sig = paired_significance(rep_refs, named, metric=metric, tgt_lang=lang, **test_args)
    for rec in sig["systems"]:
        stats[rec["name"]]["concat"] = {k: rec[k] for k in RESULT_KEYS}
    return {
        "ref": str(ref_path),
        "n_lines_concat": len(rep_refs),
        "few_lines": sig["few_lines"],  # < MIN_SIG_LINES: the p-values are flagged
        "signatures": sig["signatures"],
        "systems": stats,
    }


def _avg_delta(out_pairs: Mapping[str, dict]) -> dict[str, dict]:
    systems = []
    for p in out_pairs.values():
        systems += [s for s in p["systems"] if s not in systems]
    avg = {}
    for s in systems:
        entry = {}
        for f in SCORE_FIELDS:
            ds = [
                p["systems"][s]["delta"][f]
                for p in out_pairs.values()
                if s in p["systems"] and f in p["systems"][s]["delta"]
            ]
            if ds:
                entry[f] = statistics.fmean(ds)
        entry["n_pairs"] = sum(1 for p in out_pairs.values() if s in p["systems"])
        avg[s] = entry
    return avg


def _notes(baseline: str) -> list[str]:
    return [
        "Scores are BLEU / chrF points (0-100); bleu_tok = BLEU on tokenized text as is "
        "(tokenize='none', multi-bleu.perl-equivalent); bleu = detokenized sacreBLEU (13a).",
        "mean ± sd over seeds; sd is the sample standard deviation (ddof=1); with one seed it is "
        "undefined (null / n/a).",
        f"Paired tests vs baseline {baseline!r} on the concatenated outputs over seeds: the "
        "hypotheses of each seed are concatenated in sorted seed order and scored against the "
        "reference repeated once per seed (sacreBLEU PairedTest: paired bootstrap resampling, "
        "Koehn 2004, with its 95% CI; paired approximate randomization, Riezler & Maxwell 2005).",
        "avg_delta = mean over language pairs of (system mean - baseline mean), as reported in "
        "the papers.",
    ]


def aggregate_results(
    records: Iterable[RunRecord | Mapping[str, object]],
    baseline: str,
    refs: Mapping[str, str] | None = None,
    metric: str = "bleu_tok",
    significance: bool = True,
    tgt_lang: Mapping[str, str] | None = None,
    n_bootstrap: int = 1000,
    n_ar: int = 10000,
    seed: int = 12345,
) -> dict[str, object]:
    """Aggregate per-seed scores per (pair, system) and test against a baseline.

    * mean and sample sd (``ddof=1``; ``None``/n/a for a single seed) over seeds of each score
      field present (``bleu_tok``, ``bleu``, ``chrf``);
    * ``delta``: system mean minus baseline mean, per pair and field;
    * if ``significance``: paired bootstrap (95% CI) and paired approximate randomization
      (sacreBLEU PairedTest, metric ``metric``) of each system against the baseline on the
      **concatenated** outputs over seeds (see :func:`concat_over_seeds`; baseline and system
      must have the same number of seeds, paired in sorted seed order);
    * ``avg_delta``: per system and field, the average over pairs of the per-pair delta of
      means (how the papers report "+x BLEU on average").

    Args:
        records: run records (:class:`~.records.RunRecord` or record-like mappings).
        baseline: system name used as baseline (must exist in every pair).
        refs: pair -> reference path (falls back to each record's ``ref_path``); needed only
            for significance.
        metric: score field of the main table and of the paired test.
        significance: run the paired tests.
        tgt_lang: pair -> target language for ``metric='bleu'`` (default: the part after ``-``
            in the pair name, else ``en``).
        n_bootstrap: bootstrap resamples.
        n_ar: approximate-randomization trials.
        seed: RNG seed of the tests.

    Returns:
        A JSON-ready dict (NaN -> None) with keys ``metric``, ``baseline``, ``significance``,
        ``pairs`` (each with the ``data_id`` its runs trained on), ``avg_delta``, ``notes``.

    Raises:
        ResultsError: missing baseline / fields / references, unequal numbers of seeds.
        DataMismatchError: runs of one pair trained on different data
            (:func:`~.provenance.check_one_data_version`).
    """
    if metric not in SCORE_FIELDS:
        raise ResultsError(f"metric must be one of {SCORE_FIELDS}, got {metric!r}")
    refs, tgt_lang = dict(refs or {}), dict(tgt_lang or {})
    records = [as_record(r) for r in records]
    data_ids = check_one_data_version(records)  # a table never mixes data versions of a pair
    pairs = group_by_pair(records)
    if not pairs:
        raise ResultsError("no result records")
    out_pairs = {}
    for pair, systems in pairs.items():
        if baseline not in systems:
            raise ResultsError(
                f"baseline system {baseline!r} has no records for pair {pair!r} "
                f"(systems: {sorted(systems)})"
            )
        order = [baseline] + [s for s in systems if s != baseline]
        stats = {s: _system_stats(pair, s, systems[s], metric) for s in order}
        base = stats[baseline]
        for entry in stats.values():
            entry["delta"] = {
                f: entry[f]["mean"] - base[f]["mean"]
                for f in SCORE_FIELDS
                if f in entry and f in base
            }
            entry["concat"] = None
        if significance and len(order) > 1:
            lang = tgt_lang.get(pair) or (pair.split("-")[-1] if "-" in pair else "en")
            out_pairs[pair] = _pair_significance(
                pair,
                order,
                systems,
                stats,
                _pair_reference(pair, systems, refs),
                metric,
                lang,
                n_bootstrap=n_bootstrap,
                n_ar=n_ar,
                seed=seed,
            )
        else:
            out_pairs[pair] = {
                "ref": refs.get(pair),
                "n_lines_concat": None,
                "signatures": None,
                "systems": stats,
            }
        out_pairs[pair]["data_id"] = data_ids[pair]
    return {
        "metric": metric,
        "baseline": baseline,
        "significance": {
            "enabled": bool(significance),
            "n_bootstrap": n_bootstrap,
            "n_ar": n_ar,
            "seed": seed,
            "on": "concatenated outputs over seeds",
        },
        "pairs": out_pairs,
        "avg_delta": _avg_delta(out_pairs),
        "notes": _notes(baseline),
    }


def select_for_aggregate(
    records: Sequence[RunRecord], baseline: str, refs: Mapping[str, str], significance: bool
) -> tuple[list[RunRecord], bool]:
    """What a partly finished grid can aggregate.

    A pair without a finished baseline run is left out (warning); the paired tests are
    switched off (warning) when the systems of a pair have different numbers of finished
    seeds or a pair's reference file is missing.

    Returns:
        ``(records of the pairs that have the baseline, whether to run the paired tests)``.
    """
    keep = []
    for pair, systems in group_by_pair(records).items():
        if baseline not in systems:
            warn(
                f"{pair}: no finished cell of the baseline {baseline!r} (finished: "
                f"{', '.join(sorted(systems))}): left out of the aggregate tables"
            )
            continue
        keep.append(pair)
        counts = {s: len(v) for s, v in systems.items()}
        if significance and len(set(counts.values())) > 1:
            warn(
                f"{pair}: systems have different numbers of finished seeds {counts}: paired "
                f"tests skipped (means are still reported)"
            )
            significance = False
        ref = refs.get(pair)
        if significance and ref is None:
            warn(f"{pair}: no reference (--ref {pair}=PATH): paired tests skipped")
            significance = False
        elif significance and not os.path.isfile(ref):
            warn(f"{pair}: reference file {ref} not found: paired tests skipped")
            significance = False
    return [r for r in records if r.pair in keep], significance
