"""The 2x2 confound ablation: {LayerNorm, ScaleNorm} x {dot product, QKNorm}.

All four cells are PreNorm + FixNorm.
The QKNorm paper (Henry et al. 2020) compares LayerNorm + QKNorm with the ScaleNorm + dot
product baseline of Nguyen & Salazar (2019): two changes at once. The four cells separate
them; :func:`ablation_effects` gives the simple and main effects, their interaction and the
paper's comparison decomposed into them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from .aggregate import mean_sd, seed_order
from .power import contrast_inference
from .records import RunRecord, as_record
from .significance import format_p, paired_significance
from .tables import format_mean_sd, format_optional, write_markdown_and_json
from .textio import ResultsError, check_same_length, read_lines

__all__ = [
    "ABLATION_CELLS",
    "ablation_effects",
    "ablation_report",
    "ablation_runs",
    "ablation_seed_tests",
    "ablation_significance",
    "write_ablation_report",
]

ABLATION_CELLS = ("layernorm_dot", "layernorm_qknorm", "scalenorm_dot", "scalenorm_qknorm")

# name -> (treatment cell(s), control cell(s), description)
_SIMPLE_EFFECTS = {
    "qknorm_effect_at_layernorm": (
        ("layernorm_qknorm",),
        ("layernorm_dot",),
        "QKNorm effect with LayerNorm: (LN,QK) - (LN,dot)",
    ),
    "qknorm_effect_at_scalenorm": (
        ("scalenorm_qknorm",),
        ("scalenorm_dot",),
        "QKNorm effect with ScaleNorm: (SN,QK) - (SN,dot)",
    ),
    "norm_effect_at_dot": (
        ("scalenorm_dot",),
        ("layernorm_dot",),
        "ScaleNorm-vs-LayerNorm effect with dot attention: (SN,dot) - (LN,dot)",
    ),
    "norm_effect_at_qknorm": (
        ("scalenorm_qknorm",),
        ("layernorm_qknorm",),
        "ScaleNorm-vs-LayerNorm effect with QKNorm: (SN,QK) - (LN,QK)",
    ),
}
_POOLED_EFFECTS = {
    "qknorm_main_effect": (
        ("layernorm_qknorm", "scalenorm_qknorm"),
        ("layernorm_dot", "scalenorm_dot"),
        "QKNorm main effect: mean of the two QKNorm effects",
    ),
    "norm_main_effect": (
        ("scalenorm_dot", "scalenorm_qknorm"),
        ("layernorm_dot", "layernorm_qknorm"),
        "ScaleNorm main effect: mean of the two norm-type effects",
    ),
    "paper_comparison": (
        ("layernorm_qknorm",),
        ("scalenorm_dot",),
        "paper's comparison: (LN,QK) - (SN,dot)",
    ),
}
_DESIGN_TEXT = {"welch": "Welch t over seeds", "paired": "paired t over the seeds all cells share"}
_EFFECT_ORDER = (
    "qknorm_effect_at_layernorm",
    "qknorm_effect_at_scalenorm",
    "norm_effect_at_dot",
    "norm_effect_at_qknorm",
    "qknorm_main_effect",
    "norm_main_effect",
    "interaction",
    "paper_comparison",
)

# every effect as a contrast of the four cell means, weights in ABLATION_CELLS order (a, b, c, d)
_CONTRASTS = {
    "qknorm_effect_at_layernorm": (-1.0, 1.0, 0.0, 0.0),
    "qknorm_effect_at_scalenorm": (0.0, 0.0, -1.0, 1.0),
    "norm_effect_at_dot": (-1.0, 0.0, 1.0, 0.0),
    "norm_effect_at_qknorm": (0.0, -1.0, 0.0, 1.0),
    "interaction": (-1.0, 1.0, 1.0, -1.0),
    "qknorm_main_effect": (-0.5, 0.5, -0.5, 0.5),
    "norm_main_effect": (-0.5, -0.5, 0.5, 0.5),
    "paper_comparison": (0.0, 1.0, -1.0, 0.0),
}


def ablation_effects(means: Mapping[str, float]) -> dict[str, object]:
    """Effects of the 2x2 design from the four cell means (pure function).

    With a=(LN,dot), b=(LN,QK), c=(SN,dot), d=(SN,QK) (BLEU points, mean over seeds):

    * ``qknorm_effect_at_layernorm`` = b - a, ``qknorm_effect_at_scalenorm`` = d - c
    * ``norm_effect_at_dot`` = c - a, ``norm_effect_at_qknorm`` = d - b (ScaleNorm minus
      LayerNorm)
    * ``interaction`` = (b - a) - (d - c)  (= -((d-b) - (c-a)))
    * ``qknorm_main_effect`` = ((b-a) + (d-c)) / 2, ``norm_main_effect`` = ((c-a) + (d-b)) / 2
    * ``paper_comparison`` = b - c (LN+QKNorm vs SN+dot, the comparison the QKNorm paper makes
      against the ScaleNorm baseline), decomposed as ``(b-a) - (c-a)`` (QKNorm effect at LN
      minus norm effect at dot), ``(d-c) - (d-b)`` (QKNorm effect at SN minus norm effect at
      QKNorm) and ``qknorm_main_effect - norm_main_effect`` (exact; the interaction cancels).

    Args:
        means: mapping with the four keys of :data:`ABLATION_CELLS`.

    Returns:
        Dict of floats plus ``decomposition`` of the paper comparison.

    Raises:
        ResultsError: a cell is missing.
    """
    missing = [c for c in ABLATION_CELLS if c not in means]
    if missing:
        raise ResultsError(f"ablation cells missing: {missing} (need {list(ABLATION_CELLS)})")
    m = [float(means[k]) for k in ABLATION_CELLS]
    effects = {name: sum(wi * mi for wi, mi in zip(w, m)) for name, w in _CONTRASTS.items()}
    qk_ln, qk_sn = effects["qknorm_effect_at_layernorm"], effects["qknorm_effect_at_scalenorm"]
    nm_dot, nm_qk = effects["norm_effect_at_dot"], effects["norm_effect_at_qknorm"]
    qk_main, nm_main = effects["qknorm_main_effect"], effects["norm_main_effect"]
    return {
        **effects,
        "decomposition": {
            "via_layernorm": {
                "qknorm_effect_at_layernorm": qk_ln,
                "minus_norm_effect_at_dot": -nm_dot,
            },
            "via_scalenorm": {
                "qknorm_effect_at_scalenorm": qk_sn,
                "minus_norm_effect_at_qknorm": -nm_qk,
            },
            "main_effects": {"qknorm_main_effect": qk_main, "minus_norm_main_effect": -nm_main},
        },
    }


def ablation_seed_tests(values: Mapping[str, Sequence[float]]) -> dict[str, dict | None]:
    """Welch t-tests of the ablation effects over seeds: training noise included.

    The AR test of :func:`ablation_significance` asks whether fixed outputs differ beyond the
    sampling of test sentences; it cannot see that a second training run of the same system
    scores differently. Here each seed's score is one draw of training, and each effect is a
    contrast ``L = sum_i w_i mean_i`` of the four cell means (weights in
    :data:`_CONTRASTS`). Its standard error and degrees of freedom are Welch's
    (Welch 1947; Satterthwaite 1946):

        se^2 = sum_i w_i^2 s_i^2 / n_i,   df = se^4 / sum_i (w_i^2 s_i^2 / n_i)^2 / (n_i - 1),

    with ``s_i`` the sample sd (ddof 1) and ``n_i`` the number of seeds of cell ``i``;
    ``t = L / se`` and ``p = 2 P(T_df > |t|)``. For an effect of two cells this is exactly
    ``scipy.stats.ttest_ind(..., equal_var=False)``. Seeds are not paired: runs of different
    systems with one seed share the data order, not the initialisation. On why
    single-run comparisons mislead: Clark et al. (2011), *Better Hypothesis Testing for
    Statistical Machine Translation: Controlling for Optimizer Instability*.

    Args:
        values: cell -> per-seed scores (BLEU points), the four keys of
            :data:`ABLATION_CELLS`.

    Returns:
        Effect name -> ``{"estimate", "se", "df", "t", "p"}``, or None where a cell the
        effect uses has fewer than 2 seeds or every such cell has zero spread.

    Raises:
        ResultsError: a cell is missing.
    """
    from scipy import stats

    missing = [c for c in ABLATION_CELLS if c not in values]
    if missing:
        raise ResultsError(f"ablation cells missing: {missing} (need {list(ABLATION_CELLS)})")
    # (mean, sd, n) of each cell; sd is nan for a single seed
    cells = [(*mean_sd(values[c]), len(values[c])) for c in ABLATION_CELLS]
    out: dict[str, dict | None] = {}
    for name, w in _CONTRASTS.items():
        used = [(wi, cell) for wi, cell in zip(w, cells) if wi != 0.0]
        if any(n < 2 for _, (_, _, n) in used):
            out[name] = None
            continue
        terms = [(wi * wi * sd**2 / n, n) for wi, (_, sd, n) in used]
        var = sum(t for t, _ in terms)
        if var <= 0.0:
            out[name] = None
            continue
        est = sum(wi * mean for wi, (mean, _, _) in used)
        se = var**0.5
        df = var * var / sum(t * t / (n - 1) for t, n in terms)
        t_stat = est / se
        p = float(2.0 * stats.t.sf(abs(t_stat), df))
        out[name] = {"estimate": est, "se": se, "df": df, "t": t_stat, "p": p}
    return out


def ablation_significance(
    cell_hyps: Mapping[str, Sequence[Sequence[str]]],
    refs: Sequence[str],
    metric: str = "bleu_tok",
    tgt_lang: str = "en",
    n_ar: int = 10000,
    seed: int = 12345,
) -> dict[str, object]:
    """Paired approximate randomization for the ablation effects.

    Each cell's per-seed hypotheses (already in seed order) are concatenated; pooled effects
    concatenate the two cells of each level (e.g. QKNorm main effect: [(LN,QK) seeds, (SN,QK)
    seeds] vs [(LN,dot) seeds, (SN,dot) seeds], against the reference repeated accordingly).
    Tested: the four simple effects, the two main effects and the paper comparison; the
    interaction is not tested.

    Args:
        cell_hyps: cell -> list over seeds of hypothesis line lists (equal numbers of seeds in
            all cells).
        refs: reference lines.
        metric: score of the test.
        tgt_lang: detokenizer language (``metric='bleu'``).
        n_ar: approximate-randomization trials.
        seed: RNG seed.

    Returns:
        Effect name -> ``{"description", "treatment", "control", "delta_concat", "p_ar",
        "n_ar", "signature"}`` (delta of the concatenated-output score, points).

    Raises:
        ResultsError: missing cells or unequal seed counts.
    """
    missing = [c for c in ABLATION_CELLS if c not in cell_hyps]
    if missing:
        raise ResultsError(f"ablation cells missing: {missing}")
    n_seeds = {c: len(cell_hyps[c]) for c in ABLATION_CELLS}
    if len(set(n_seeds.values())) != 1 or 0 in n_seeds.values():
        raise ResultsError(f"ablation cells need equal, non-zero numbers of seeds, got {n_seeds}")
    out = {}
    for name, (treat, ctrl, desc) in {**_SIMPLE_EFFECTS, **_POOLED_EFFECTS}.items():
        t_h = [line for c in treat for seed_h in cell_hyps[c] for line in seed_h]
        c_h = [line for c in ctrl for seed_h in cell_hyps[c] for line in seed_h]
        rep = list(refs) * (n_seeds[treat[0]] * len(treat))
        res = paired_significance(
            rep,
            [("control", c_h), ("treatment", t_h)],
            metric=metric,
            tgt_lang=tgt_lang,
            n_ar=n_ar,
            seed=seed,
            tests=("ar",),
        )
        out[name] = {
            "description": desc,
            "treatment": list(treat),
            "control": list(ctrl),
            "delta_concat": res["systems"][1]["delta"],
            "p_ar": res["systems"][1]["p_ar"],
            "n_ar": n_ar,
            "few_lines": res["few_lines"],  # < MIN_SIG_LINES sentences: p_ar is flagged
            "signature": res["signatures"]["ar"],
        }
    return out


def _cell_stats(cell: str, recs: list[RunRecord], metric: str) -> dict:
    vals = []
    for r in recs:
        if r.score(metric) is None:
            raise ResultsError(f"ablation cell {cell!r}: record seed={r.seed!r} has no {metric!r}")
        vals.append(float(r.score(metric)))
    m, sd = mean_sd(vals)
    return {
        "system": recs[0].system,
        "n_seeds": len(recs),
        "seeds": [r.seed for r in recs],
        "mean": m,
        "sd": None if sd != sd else sd,
        "values": vals,
    }


def _cell_hypotheses(cell: str, recs: list[RunRecord], refs: Sequence[str]) -> list[list[str]]:
    seq = []
    for r in recs:
        if not r.hyp_path:
            raise ResultsError(f"ablation cell {cell!r}: record seed={r.seed!r} has no hyp_path")
        h = read_lines(r.hyp_path, "hypothesis")
        check_same_length(h, r.hyp_path, refs, "reference")
        seq.append(h)
    return seq


def ablation_runs(ordered: Mapping[str, Sequence[RunRecord]], metric: str) -> list[dict]:
    """One row per run of the four cells: how its training ended and what it learned.

    What the issue's converged grid reports per run besides the score: the stop (fairseq's
    reason, ``early_stop`` or ``min_lr`` for a run stopped by the profile's rule, epochs and
    updates at the stop), the lowest dev loss (label-smoothed cross-entropy of fairseq's
    validation, bits per target token) and its epoch, QKNorm's learned ``g`` at the end per
    attention module (Henry et al. 2020, Eq. 2; ``None`` for dot-product cells) with its
    initial value ``g0 = log2(L^2 - L)`` (Eq. 4), the largest attention logit logged over
    training and validation, and the training cost in CPU minutes.

    Args:
        ordered: cell name -> its records in seed order.
        metric: the test score shown (``bleu_tok``, ``bleu`` or ``chrf``).

    Returns:
        A list of ``{"cell", "system", "seed", "stop_reason", "epochs", "updates",
        "dev_loss_min", "best_dev_loss_epoch", metric, "dev_bleu_tok", "g0", "g_final",
        "g_final_mean", "g_final_min", "g_final_max", "max_attn_logit", "cpu_minutes"}``;
        fields a record does not have are ``None``.
    """
    rows = []
    for cell in ABLATION_CELLS:
        for r in ordered.get(cell, ()):
            g = dict(r.qk_norm_g_final or {})
            rows.append(
                {
                    "cell": cell,
                    "system": r.system,
                    "seed": r.seed,
                    "stop_reason": r.stop_reason,
                    "epochs": r.epochs,
                    "updates": r.updates,
                    "dev_loss_min": r.dev_loss_min,
                    "best_dev_loss_epoch": r.best_dev_loss_epoch,
                    metric: r.score(metric),
                    "dev_bleu_tok": r.dev_bleu_tok,
                    "g0": r.qk_norm_g0,
                    "g_final": g or None,
                    "g_final_mean": r.qk_norm_g_final_mean,
                    "g_final_min": min(g.values()) if g else None,
                    "g_final_max": max(g.values()) if g else None,
                    "max_attn_logit": r.max_attn_logit,
                    "cpu_minutes": None if r.cpu_seconds is None else r.cpu_seconds / 60.0,
                }
            )
    return rows


def ablation_report(
    cells: Mapping[str, Sequence[RunRecord | Mapping[str, object]]],
    refs: Sequence[str] | None = None,
    metric: str = "bleu_tok",
    significance: bool = True,
    tgt_lang: str = "en",
    n_ar: int = 10000,
    seed: int = 12345,
    design: str = "welch",
    targets: Sequence[float] = (0.5, 0.93),
    tost_margin: float | None = None,
) -> dict[str, object]:
    """Full 2x2 ablation report from per-seed records of the four cells.

    All four systems are PreNorm + FixNorm; they differ in the normalization layer (LayerNorm
    / ScaleNorm) and the attention score (dot product / QKNorm). Effects are differences of
    mean ``metric`` over seeds (:func:`ablation_effects`); significance by
    :func:`ablation_significance` on concatenated outputs.

    Args:
        cells: cell name -> run records with ``seed``, ``metric`` and (for significance)
            ``hyp_path``.
        refs: reference lines (required if ``significance``).
        metric: the score compared.
        significance: run the paired tests.
        tgt_lang: detokenizer language (``metric='bleu'``).
        n_ar: approximate-randomization trials.
        seed: RNG seed.
        design: the seed-level design declared in the profile (``[design] test``): ``welch``
            (independent seeds) or ``paired`` (seed s shared by the four systems).
        targets: differences (BLEU) for which the seeds needed per cell are given.
        tost_margin: equivalence margin (BLEU) of the TOST, or None.

    Returns:
        ``{"metric", "cells": {cell: {"system", "n_seeds", "seeds", "mean", "sd", "values"}},
        "effects", "significance", "seed_tests", "design", "runs" (:func:`ablation_runs`),
        "notes"}``; ``seed_tests[effect]`` is :func:`ablation_seed_tests`' Welch test plus
        the declared design's inference (:func:`.power.contrast_inference`: ``test``,
        ``ci95``, ``mde``, ``n_needed``, ``tost``, ...; with ``design`` paired its estimate,
        p and CI are the paired test's and ``welch_p`` keeps Welch's p).

    Raises:
        ResultsError: a cell without records, a record without the score or hypotheses.
    """
    missing = [c for c in ABLATION_CELLS if c not in cells or not cells[c]]
    if missing:
        raise ResultsError(
            f"ablation cells without records: {missing} (need {list(ABLATION_CELLS)})"
        )
    ordered = {c: seed_order(as_record(r) for r in cells[c]) for c in ABLATION_CELLS}
    cell_stats = {c: _cell_stats(c, ordered[c], metric) for c in ABLATION_CELLS}
    effects = ablation_effects({c: cell_stats[c]["mean"] for c in ABLATION_CELLS})
    sig = None
    if significance:
        if refs is None:
            raise ResultsError("ablation significance needs a reference (--ref)")
        cell_hyps = {c: _cell_hypotheses(c, ordered[c], refs) for c in ABLATION_CELLS}
        sig = ablation_significance(
            cell_hyps, refs, metric=metric, tgt_lang=tgt_lang, n_ar=n_ar, seed=seed
        )
    notes = [
        "All cells are PreNorm + FixNorm. Effects are differences of mean scores over seeds "
        f"({metric}, BLEU points); a=(LN,dot), b=(LN,QK), c=(SN,dot), d=(SN,QK).",
        "interaction = (b - a) - (d - c): how much larger the QKNorm gain is with LayerNorm "
        "than with ScaleNorm.",
        "paper_comparison = b - c = (b - a) - (c - a) = (d - c) - (d - b) = qknorm_main_effect "
        "- norm_main_effect: the paper's LN+QKNorm vs SN+dot gain mixes the QKNorm effect with "
        "the (negated) ScaleNorm effect.",
        "p-values: paired approximate randomization (sacreBLEU, Riezler & Maxwell 2005) on the "
        "outputs concatenated over seeds (and over the two cells of a level for main effects); "
        "the interaction is not tested.",
        "p (seeds, Welch): Welch's t-test of the effect over the per-seed scores (each seed one "
        "training run; Satterthwaite df for contrasts of more than two cells): it includes "
        "training noise, which the AR test on fixed outputs does not (Clark et al. 2011); with "
        "few seeds per cell it has few degrees of freedom.",
    ]
    seed_tests = ablation_seed_tests({c: cell_stats[c]["values"] for c in ABLATION_CELLS})
    by_seed = {
        c: dict(zip(cell_stats[c]["seeds"], cell_stats[c]["values"])) for c in ABLATION_CELLS
    }
    for name, w in _CONTRASTS.items():
        inf = contrast_inference(
            by_seed, dict(zip(ABLATION_CELLS, w)), design, targets, tost_margin
        )
        if seed_tests.get(name) is None or inf is None:
            continue
        welch_p = seed_tests[name]["p"]
        seed_tests[name] = {**seed_tests[name], **inf}
        if design == "paired":
            seed_tests[name]["welch_p"] = welch_p
    notes.append(
        f"Seed-level inference ({_DESIGN_TEXT[design]}, "
        "declared in the profile before the runs): 95% CI of each effect; MDE = the difference "
        "that test detects with 80% power (two-sided 5%) with the seeds at hand, from the "
        "observed sd; seeds needed = seeds per cell for 80% power at each target difference "
        "(statsmodels.stats.power; qknorm_tools/power.py)"
        + (
            f"; TOST: equivalence within ±{tost_margin:g} BLEU (two one-sided tests, 5%)."
            if tost_margin is not None
            else "."
        )
    )
    return {
        "metric": metric,
        "cells": cell_stats,
        "effects": effects,
        "significance": sig,
        "seed_tests": seed_tests,
        "design": {"test": design, "targets": list(targets), "tost_margin": tost_margin},
        "runs": ablation_runs(ordered, metric),
        "notes": notes,
    }


def _markdown(report: Mapping[str, object]) -> list[str]:
    metric, cs, eff = report["metric"], report["cells"], report["effects"]
    sig = report.get("significance") or {}
    md = [
        f"# 2x2 ablation: normalization x attention ({metric}, BLEU points)",
        "",
        "All systems PreNorm + FixNorm. Cells: mean ± sample sd over seeds.",
        "",
        "| norm \\ attention | dot | qknorm |",
        "|---|---:|---:|",
    ]
    for norm in ("layernorm", "scalenorm"):
        row = [norm] + [
            format_mean_sd(cs[f"{norm}_{att}"]) + f" (n={cs[f'{norm}_{att}']['n_seeds']})"
            for att in ("dot", "qknorm")
        ]
        md.append("| " + " | ".join(row) + " |")
    seed_tests = report.get("seed_tests") or {}
    design = report.get("design") or {"test": "welch", "targets": [], "tost_margin": None}
    test = "Welch" if design["test"] == "welch" else "paired"
    md += [
        "",
        f"| effect | definition | Δ mean | Δ concat | p (AR) | p (seeds, {test}) |",
        "|---|---|---:|---:|---:|---:|",
    ]
    defs = {k: v[2] for k, v in {**_SIMPLE_EFFECTS, **_POOLED_EFFECTS}.items()}
    defs["interaction"] = "((LN,QK) - (LN,dot)) - ((SN,QK) - (SN,dot))"
    for k in _EFFECT_ORDER:
        s = sig.get(k) or {}
        dc = f"{s['delta_concat']:+.2f}" if s.get("delta_concat") is not None else "-"
        p_seed = (seed_tests.get(k) or {}).get("p")
        md.append(
            f"| {k} | {defs[k]} | {eff[k]:+.2f} | {dc} | {format_p(s.get('p_ar'))} "
            f"| {format_p(p_seed)} |"
        )
    if any("ci95" in (seed_tests.get(k) or {}) for k in _EFFECT_ORDER):
        md += _power_markdown(seed_tests, design)
    dec, paper = eff["decomposition"], eff["paper_comparison"]
    md += [
        "",
        "Paper comparison (LN+QKNorm vs SN+dot) decomposed:",
        "",
        f"- = QKNorm effect at LN ({dec['via_layernorm']['qknorm_effect_at_layernorm']:+.2f}) "
        f"− ScaleNorm effect at dot ({-dec['via_layernorm']['minus_norm_effect_at_dot']:+.2f}) "
        f"= {paper:+.2f}",
        f"- = QKNorm effect at SN ({dec['via_scalenorm']['qknorm_effect_at_scalenorm']:+.2f}) "
        f"− ScaleNorm effect at QKNorm "
        f"({-dec['via_scalenorm']['minus_norm_effect_at_qknorm']:+.2f}) = {paper:+.2f}",
        f"- = QKNorm main effect ({eff['qknorm_main_effect']:+.2f}) − ScaleNorm main effect "
        f"({eff['norm_main_effect']:+.2f}) = {paper:+.2f}",
        "",
    ]
    md += [f"- {n}" for n in report["notes"]]
    return md + _runs_markdown(report.get("runs") or [], metric)


def _power_markdown(seed_tests: Mapping[str, object], design: Mapping[str, object]) -> list[str]:
    """The seed-level table: estimate, 95% CI, MDE, seeds needed and TOST of every effect."""
    targets = [f"{t:g}" for t in design.get("targets") or []]
    margin = design.get("tost_margin")
    head = "| effect | estimate | 95% CI | n | sd | MDE (80%) |"
    rule = "|---|---:|---|---:|---:|---:|"
    for t in targets:
        head += f" seeds for {t} |"
        rule += "---:|"
    if margin is not None:
        head += f" TOST ±{margin:g} (p) |"
        rule += "---|"
    md = [
        "",
        f"Seed-level inference ({_DESIGN_TEXT[design['test']]}; n = seeds per cell used, sd = "
        + ("the sd of the per-seed effect" if design["test"] == "paired" else "the per-cell sd "
           "pooled over the four cells")
        + "; MDE = the effect the test detects with 80% power at two-sided 5%; seeds for X = "
        "seeds per cell for 80% power at a difference of X BLEU):",
        "",
        head,
        rule,
    ]  # fmt: skip
    for k in _EFFECT_ORDER:
        st = seed_tests.get(k) or {}
        if "ci95" not in st:
            md.append(
                f"| {k} | - | - | - | - | - |" + " - |" * (len(targets) + (margin is not None))
            )
            continue
        lo, hi = st["ci95"]
        row = (
            f"| {k} | {st['estimate']:+.2f} | [{lo:+.2f}, {hi:+.2f}] | {st['n']} | {st['sd']:.2f} "
            f"| {st['mde']:.2f} |"
        )
        for t in targets:
            need = (st.get("n_needed") or {}).get(t)
            row += f" {need if need is not None else '> 1000'} |"
        if margin is not None:
            tost = st.get("tost") or {}
            verdict = "equivalent" if tost.get("equivalent") else "not shown"
            row += f" {verdict} ({format_p(tost.get('p'))}) |"
        md.append(row)
    return md


def _opt(value, spec: str) -> str:
    return format_optional(value, spec, none="-")


def _runs_markdown(runs: Sequence[Mapping[str, object]], metric: str) -> list[str]:
    """The per-run table of :func:`ablation_runs` (empty without runs)."""
    if not runs:
        return []
    md = [
        "",
        "## Runs",
        "",
        "Per run: why and when training stopped, the lowest dev loss (bits per target token) and "
        f"its epoch, the test score ({metric}) and the dev set's tokenized BLEU (same checkpoint; "
        "- where the dev set was not decoded), QKNorm's g at the end over the attention modules "
        "(mean [min, max]; g0 = log2(L^2 - L)), the largest attention logit logged over "
        "training and validation, and the training CPU time.",
        "",
        "| cell | system | seed | stop | epochs | updates | best dev loss (epoch) "
        f"| {metric} | dev BLEU | g0 | g at the end | max logit | CPU min |",
        "|---|---|---:|---|---:|---:|---:|---:|---:|---:|---|---:|---:|",
    ]
    for r in runs:
        g = "-"
        if r.get("g_final_mean") is not None:
            g = f"{r['g_final_mean']:.2f} [{r['g_final_min']:.2f}, {r['g_final_max']:.2f}]"
        best = _opt(r.get("dev_loss_min"), ".3f")
        if r.get("best_dev_loss_epoch") is not None:
            best += f" ({r['best_dev_loss_epoch']})"
        md.append(
            f"| {r['cell']} | {r['system']} | {r['seed']} | {r.get('stop_reason') or '-'} "
            f"| {_opt(r.get('epochs'), 'd')} | {_opt(r.get('updates'), 'd')} | {best} "
            f"| {_opt(r.get(metric), '.2f')} | {_opt(r.get('dev_bleu_tok'), '.2f')} "
            f"| {_opt(r.get('g0'), '.2f')} | {g} "
            f"| {_opt(r.get('max_attn_logit'), '.1f')} | {_opt(r.get('cpu_minutes'), '.1f')} |"
        )
    return md


def write_ablation_report(
    report: Mapping[str, object], out_dir, stem: str = "ablation"
) -> dict[str, str]:
    """Write :func:`ablation_report` output as ``<stem>.md`` and ``<stem>.json``.

    Returns:
        Mapping kind -> path written.
    """
    return write_markdown_and_json(out_dir, stem, "\n".join(_markdown(report)) + "\n", report)
