"""The decisive 2x2's pilot: which design adds the least noise, from the committed records.

docs/decisive-2x2.md declares, before the runs, the candidates, the measure and the choice;
this module computes them (``python -m qknorm_tools.pilot``), so the rule is written once:

* **Candidates** (:data:`CANDIDATES`): (a) the plateau rule, ``cpu-converge-d128``'s committed
  runs, test BLEU of the checkpoint with the lowest dev loss; (b) the fixed budget,
  ``cpu-fixed-d128``, the final checkpoint (``test.last.score.json``); (c) the same runs, the
  average of the last 5 epoch checkpoints (``test.score.json``); (d) (b) and (c) analysed as a
  paired design (seed ``s`` gives both systems the same batch order).
* **Measure**: the standard error of the paper's comparison per seed
  (``qknorm_paper - twt``) on one scale: unpaired, ``sqrt(2) x`` the per-cell sd (ddof 1)
  pooled over the two systems, ``sqrt((sd_twt^2 + sd_qk^2) / 2)``; paired, the sd of the
  per-seed difference over the seeds both systems have.
* **Choice** (when every candidate has its declared pilot seeds, :data:`PILOT_SEEDS`): the
  lowest measure among the candidates whose mean TWT BLEU is not below (a)'s by more than one
  standard error of (a)'s TWT mean; measures within 5% of the lowest tie, and a tie goes to
  the unpaired analysis, then to (c) over (b) (:data:`TIE_ORDER`).
* **Seeds**: the smallest number of seeds per cell, at least :data:`MIN_SEEDS`, whose MDE of
  the paper's comparison is <= 0.93 BLEU (80% power, two-sided 5%) at the chosen candidate's
  sd (:func:`.power.seeds_needed`: Welch over the 2x2's four cells with the pooled sd, or the
  paired one-sample t with the sd of the difference).

* **Default seeds** (:func:`default_seeds`, ``--default-seeds PROFILE``): what
  ``scripts/ablation.sh`` runs and lists without ``--seeds``: the profile's ``[design] seeds``,
  else the pilot's seeds for a pilot profile, else 1,2.

Scores are tokenized BLEU (``bleu_tok``) of the gl-en test set. No torch, no fairseq.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import config, exits
from .committed import read_record
from .power import seeds_needed
from .textio import ResultsError

#: the systems of the paper's comparison (qknorm_paper - twt) and the pair
SYSTEMS = ("twt", "qknorm_paper")
PAIR = "gl-en"
#: the paper's comparison as a contrast of the 2x2's cells, in the order of
#: :data:`qknorm_tools.ablation.ABLATION_CELLS` (layernorm_dot, layernorm_qknorm, scalenorm_dot,
#: scalenorm_qknorm): Welch pools the sd of all four cells
PAPER_WEIGHTS = (0.0, 1.0, -1.0, 0.0)
#: the QKNorm paper's gain, the MDE the grid must reach (Henry et al. 2020, Table 1, gl-en)
TARGET = 0.93
MIN_SEEDS = 4
#: the pilot's seeds of the fixed-budget design; (a)'s pilot is its 3 committed seeds
PILOT_SEEDS = (1, 2, 3, 4)
#: measures within this fraction of the lowest tie
TIE = 0.05


@dataclass(frozen=True)
class Candidate:
    """One design of the pilot: where its runs are and which score it reads."""

    key: str
    profile: str
    #: the score file of each record (``test.score.json`` or ``test.last.score.json``)
    score: str
    paired: bool
    what: str
    seeds: tuple[int, ...] = PILOT_SEEDS


CANDIDATES = (
    Candidate("a", "cpu-converge-d128", "test", False, "plateau rule, lowest dev loss", (1, 2, 3)),
    Candidate("b", "cpu-fixed-d128", "test.last", False, "fixed budget, final checkpoint"),
    Candidate("c", "cpu-fixed-d128", "test", False, "fixed budget, average of the last 5"),
    Candidate("d-b", "cpu-fixed-d128", "test.last", True, "(b) paired over shared seeds"),
    Candidate("d-c", "cpu-fixed-d128", "test", True, "(c) paired over shared seeds"),
)
#: the order a tie is broken in: unpaired before paired, (c) before (b)
TIE_ORDER = ("c", "b", "a", "d-c", "d-b")
#: the seeds of a 2x2 whose profile declares none and is no pilot candidate (scripts/ablation.sh)
DEFAULT_SEEDS = (1, 2)


def default_seeds(profile: str, pair: str, design_seeds: int | None) -> tuple[tuple, str]:
    """The seeds a 2x2 of PROFILE on PAIR trains and reports when none are given, and why.

    The profile's ``[design] seeds`` N when declared (seeds 1..N); else, for a profile of the
    declared pilot (:data:`CANDIDATES` on :data:`PAIR`), the pilot's seeds, with a note that the
    seeds per cell are not chosen yet and how they are; else :data:`DEFAULT_SEEDS`, no note.
    """
    if design_seeds:
        seeds = tuple(range(1, design_seeds + 1))
        return seeds, f"seeds 1-{design_seeds}: the profile's [design] seeds = {design_seeds}"
    pilot_seeds = sorted({s for c in CANDIDATES if c.profile == profile for s in c.seeds})
    if pair == PAIR and pilot_seeds:
        listed = ",".join(map(str, pilot_seeds))
        return tuple(pilot_seeds), (
            f"seeds {listed}: {profile} has no [design] seeds yet; these are the declared "
            f"pilot's (docs/decisive-2x2.md). Once they all have records, `python -m "
            f"qknorm_tools.pilot --out results/decisive-pilot` chooses the design and the seeds "
            f"per cell, written into configs/profiles/{profile}.toml [design] seeds"
        )
    return DEFAULT_SEEDS, ""


def read_scores(records: Path, score: str) -> dict[str, dict[int, float]]:
    """``{system: {seed: bleu_tok}}`` of the committed records of :data:`SYSTEMS`.

    Args:
        records: ``results/PROFILE/PAIR/records``.
        score: ``test`` or ``test.last``: the ``SCORE.score.json`` read.

    Each record is validated (:func:`.committed.read_record`) before its score is read.

    Raises:
        ResultsError: a record that is refused, or lacks the score file.
    """
    out: dict[str, dict[int, float]] = {}
    for system in SYSTEMS:
        out[system] = {}
        for rec_dir in sorted((records / system).glob("seed*")):
            rec = read_record(rec_dir)
            path = rec_dir / f"{score}.score.json"
            try:
                value = json.loads(path.read_text(encoding="utf-8"))["bleu_tok"]
            except (OSError, ValueError, KeyError) as e:
                raise ResultsError(f"{path}: no bleu_tok ({e})") from None
            out[system][rec.seed] = float(value)
    return out


def _sd(values: Sequence[float]) -> float:
    return statistics.stdev(values) if len(values) >= 2 else math.nan


def measure(scores: Mapping[str, Mapping[int, float]], seeds: Sequence[int], paired: bool) -> dict:
    """The pilot's measure of one candidate over ``seeds`` (those present are used).

    Returns:
        ``{"n", "seeds", "mean_twt", "se_mean_twt", "sd_twt", "sd_qknorm_paper", "sd", "se",
        "mean_difference"}``: ``sd`` is the per-cell sd pooled over the two systems
        (unpaired) or the sd of the per-seed difference (paired); ``se`` the measure,
        ``sqrt(2) x sd`` (unpaired) or ``sd`` (paired). BLEU points; ``None`` where fewer
        than 2 seeds (or none).
    """
    twt, qk = scores["twt"], scores["qknorm_paper"]
    both = [s for s in seeds if s in twt and s in qk]
    a = [twt[s] for s in both]
    b = [qk[s] for s in both]
    sd_a, sd_b = _sd(a), _sd(b)
    if paired:
        sd = _sd([y - x for x, y in zip(a, b)])
        se = sd
    else:
        sd = math.sqrt((sd_a**2 + sd_b**2) / 2)
        se = math.sqrt(2) * sd
    row = {
        "n": len(both),
        "seeds": both,
        "mean_twt": statistics.fmean(a) if a else math.nan,
        "se_mean_twt": sd_a / math.sqrt(len(a)) if a else math.nan,
        "sd_twt": sd_a,
        "sd_qknorm_paper": sd_b,
        "sd": sd,
        "se": se,
        "mean_difference": statistics.fmean(b) - statistics.fmean(a) if a else math.nan,
    }
    return {k: None if isinstance(v, float) and math.isnan(v) else v for k, v in row.items()}


def choose(rows: Mapping[str, dict]) -> dict:
    """The declared choice among measured candidates (``rows`` by :data:`CANDIDATES` key).

    Returns:
        ``{"complete", "missing", "eligible", "chosen", "design", "sd", "seeds"}``:
        ``complete`` is False (and nothing chosen) while a candidate lacks pilot seeds
        (``missing`` names them); ``seeds`` per cell from :func:`.power.seeds_needed`.
    """
    missing = [
        f"({c.key}) {c.profile}: seeds {sorted(set(c.seeds) - set(rows[c.key]['seeds']))}"
        for c in CANDIDATES
        if set(c.seeds) - set(rows[c.key]["seeds"])
    ]
    out: dict = {"complete": not missing, "missing": missing}
    if missing:
        return out
    floor = rows["a"]["mean_twt"] - rows["a"]["se_mean_twt"]
    eligible = [k for k in TIE_ORDER if rows[k]["mean_twt"] >= floor]
    best = min(rows[k]["se"] for k in eligible)
    tied = [k for k in eligible if rows[k]["se"] <= best * (1 + TIE)]
    chosen = tied[0]  # TIE_ORDER
    cand = next(c for c in CANDIDATES if c.key == chosen)
    design = "paired" if cand.paired else "welch"
    sd = rows[chosen]["sd"]
    n = seeds_needed(sd, TARGET, PAPER_WEIGHTS, design)
    out.update(
        eligible=eligible,
        mean_twt_floor=floor,
        chosen=chosen,
        design=design,
        sd=sd,
        seeds=None if n is None else max(MIN_SEEDS, n),
    )
    return out


def pilot(results: Path) -> dict:
    """Every candidate's measure and the choice, from ``results/PROFILE/PAIR/records``.

    Raises:
        ResultsError: a refused record (:func:`read_scores`).
    """
    cache: dict[tuple[str, str], dict] = {}
    rows = {}
    for c in CANDIDATES:
        key = (c.profile, c.score)
        if key not in cache:
            records = results / c.profile / PAIR / "records"
            cache[key] = read_scores(records, c.score) if records.is_dir() else {
                s: {} for s in SYSTEMS
            }  # fmt: skip
        rows[c.key] = {"what": c.what, "profile": c.profile, "score": f"{c.score}.score.json",
                       "paired": c.paired, **measure(cache[key], c.seeds, c.paired)}  # fmt: skip
    return {"pair": PAIR, "target": TARGET, "candidates": rows, "choice": choose(rows)}


def _f(x: float | None, d: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{d}f}"


def markdown(doc: Mapping) -> str:
    """The pilot's table and choice as Markdown (what ``--out`` writes beside the JSON)."""
    lines = [
        "# The decisive 2x2's pilot (docs/decisive-2x2.md; `python -m qknorm_tools.pilot`)",
        "",
        "| candidate | design | score | seeds | TWT mean | sd twt | sd qknorm_paper "
        "| measure (se of the comparison) | qknorm_paper - twt |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|",
    ]
    for key, r in doc["candidates"].items():
        lines.append(
            f"| ({key}) | {r['what']} ({r['profile']}) | `{r['score']}` | {r['n']} "
            f"| {_f(r['mean_twt'])} | {_f(r['sd_twt'])} | {_f(r['sd_qknorm_paper'])} "
            f"| {_f(r['se'])} | {_f(r['mean_difference'], 2)} |"
        )
    ch = doc["choice"]
    lines.append("")
    if not ch["complete"]:
        lines.append("**Pilot incomplete: nothing chosen.** Missing: " + "; ".join(ch["missing"]))
    else:
        lines.append(
            f"**Chosen: ({ch['chosen']})**, {ch['design']} test, sd {_f(ch['sd'])}: "
            f"{ch['seeds']} seeds per cell for an MDE <= {doc['target']} BLEU "
            f"(eligible: {', '.join(ch['eligible'])}; TWT mean floor {_f(ch['mean_twt_floor'])})."
        )
    lines.append("")
    lines.append(
        "Measure: unpaired sqrt(2) x the per-cell sd pooled over twt and qknorm_paper; paired "
        "the sd of the per-seed difference. Tokenized BLEU, gl-en test."
    )
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m qknorm_tools.pilot`` argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m qknorm_tools.pilot",
        description="The decisive 2x2's pilot: each design's noise and the declared choice.",
    )
    p.add_argument("--results", default="results", help="the results tree (default: results)")
    p.add_argument("--out", help="write OUT.json and OUT.md (default: print the Markdown)")
    p.add_argument(
        "--default-seeds",
        metavar="PROFILE",
        help="no table: print the seeds a 2x2 of PROFILE on --pair runs when none are given "
        "(comma-separated), then why on a second line (scripts/ablation.sh)",
    )
    p.add_argument("--pair", default=PAIR, help=f"with --default-seeds (default {PAIR})")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """CLI entry point: 0 done, 1 a refused record or an unwritable output, 2 usage."""
    a = build_parser().parse_args(argv)
    if a.default_seeds:
        try:
            profile = config.load_profile(a.default_seeds)
        except config.ConfigError as e:
            return exits.fail(e, exits.status_of(e))
        seeds, why = default_seeds(profile.name, a.pair, profile.design_seeds)
        print(",".join(map(str, seeds)))
        print(why)
        return exits.OK
    try:
        doc = pilot(Path(a.results))
        if a.out:
            Path(a.out).parent.mkdir(parents=True, exist_ok=True)
            Path(f"{a.out}.json").write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
            Path(f"{a.out}.md").write_text(markdown(doc), encoding="utf-8")
        else:
            print(markdown(doc), end="")
    except (ResultsError, OSError) as e:
        return exits.fail(e)
    return exits.OK


if __name__ == "__main__":
    sys.exit(main())
