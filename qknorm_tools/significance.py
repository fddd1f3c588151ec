"""Paired significance tests with sacreBLEU's implementation (``sacrebleu.significance``).

References:
    Koehn (2004), Statistical significance tests for MT evaluation (paired bootstrap
    resampling).
    Riezler & Maxwell (2005), On some pitfalls in automatic evaluation and significance
    testing for MT (approximate randomization).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from .scoring import detokenize_lines
from .textio import EvaluationError, check_same_length, read_lines, warn

__all__ = [
    "MIN_SIG_LINES",
    "RESULT_KEYS",
    "SIG_METRICS",
    "TOKENIZE_TO_METRIC",
    "compare_files",
    "format_compare",
    "format_p",
    "paired_significance",
    "split_named",
]

SIG_METRICS = ("bleu_tok", "bleu", "chrf")
#: The fewest sentences on which a paired test's p-value and CI are reported without a flag:
#: 300, the smallest test set on which Koehn (2004, abstract and Sec. 5) validated paired
#: bootstrap resampling for BLEU ("even for small test sizes of only 300 sentences"). Below it
#: the resamples repeat a handful of sentences: on one sentence every resample is that sentence,
#: so the CI is +- 0.00 and p is sacreBLEU's minimum 1/(n+1), whatever the systems.
MIN_SIG_LINES = 300
#: ``compare --tokenize`` value -> metric
TOKENIZE_TO_METRIC = {"none": "bleu_tok", "13a": "bleu"}
#: the test results of one system (paired_significance's "systems" entries, after its name)
RESULT_KEYS = (
    "score",
    "delta",
    "bs_mean",
    "ci95",
    "ci_low",
    "ci_high",
    "p_bs",
    "p_ar",
    "tie_corrected",
    "n_diff_lines",
)
_SYSTEM_KEYS = ("name", "is_baseline", *RESULT_KEYS, "identical")


@contextlib.contextmanager
def _sacrebleu_seed(seed: int):
    """Temporarily set ``SACREBLEU_SEED`` (read by PairedTest and its bootstrap)."""
    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = old


def _make_metric(metric: str, refs: Sequence[str], tgt_lang: str):
    """Return ``(sacrebleu metric with cached refs, hypothesis preprocessor)``."""
    from sacrebleu.metrics import BLEU, CHRF

    if metric == "bleu_tok":
        return BLEU(tokenize="none", force=True, references=[list(refs)]), list
    if metric == "bleu":
        detok_refs = [detokenize_lines(refs, tgt_lang)]
        return (
            BLEU(tokenize="13a", trg_lang=tgt_lang, references=detok_refs),
            lambda h: detokenize_lines(h, tgt_lang),
        )
    if metric == "chrf":
        return CHRF(references=[list(refs)]), list
    raise EvaluationError(f"unknown metric {metric!r}; expected one of {SIG_METRICS}")


def _check_arguments(named_systems, seed, tests, n_bootstrap, n_ar) -> None:
    if len(named_systems) < 1:
        raise EvaluationError("no systems given")
    if not isinstance(seed, int) or seed <= 0:
        raise EvaluationError(f"seed must be a positive integer, got {seed!r}")
    if not tests or any(t not in ("bs", "ar") for t in tests):
        raise EvaluationError(f"tests must be a non-empty subset of ('bs', 'ar'), got {tests}")
    if n_bootstrap < 1 or n_ar < 1:
        raise EvaluationError("n_bootstrap and n_ar must be >= 1")
    names = [n for n, _ in named_systems]
    if len(set(names)) != len(names):
        raise EvaluationError(f"system names must be unique, got {names}")


def _finish_system(
    rec: dict, hyps: Sequence[str], base_hyps, base_score: float, tests, base_name: str
) -> dict:
    """Delta, CI bounds, tie correction and the number of lines differing from the baseline."""
    n_diff = sum(1 for x, y in zip(hyps, base_hyps) if x != y)
    rec["n_diff_lines"] = n_diff
    rec["identical"] = (not rec["is_baseline"]) and n_diff == 0
    if rec["identical"]:
        warn(
            f"system {rec['name']!r} is identical to the baseline {base_name!r} (every line "
            "equal): there is no difference to test (p = 1 by definition)"
        )
    if not rec["is_baseline"] and 0 < n_diff < 20 and "ar" in tests:
        advice = (  # on too few sentences the bootstrap has (almost) nothing to resample either
            "prefer p_bs"
            if len(hyps) >= MIN_SIG_LINES
            else f"p_bs is no better on {len(hyps)} sentences: neither p-value is evidence"
        )
        warn(
            f"system {rec['name']!r} differs from the baseline on only {n_diff} lines: "
            f"sacreBLEU's approximate randomization counts only strictly larger shuffled "
            f"differences, so ties make its p-value too small here; {advice}"
        )
    rec["delta"] = rec["score"] - base_score
    for k in ("bs_mean", "ci95", "p_bs", "p_ar"):
        rec.setdefault(k, None)
    if rec["bs_mean"] is not None and rec["ci95"] is not None:
        rec["ci_low"] = rec["bs_mean"] - rec["ci95"]
        rec["ci_high"] = rec["bs_mean"] + rec["ci95"]
    else:
        rec["ci_low"] = rec["ci_high"] = None
    rec["tie_corrected"] = (not rec["is_baseline"]) and rec["score"] == base_score
    if rec["tie_corrected"]:
        for k in ("p_bs", "p_ar"):
            if rec[k] is not None:
                rec[k] = 1.0
    return {k: rec[k] for k in _SYSTEM_KEYS}


def paired_significance(
    refs: Sequence[str],
    named_systems: Sequence[tuple[str, Sequence[str]]],
    metric: str = "bleu_tok",
    tgt_lang: str = "en",
    n_bootstrap: int = 1000,
    n_ar: int = 10000,
    seed: int = 12345,
    tests: Sequence[str] = ("bs", "ar"),
) -> dict[str, object]:
    """Paired significance of each system against the first (the baseline).

    Runs sacreBLEU's own implementation (``sacrebleu.significance.PairedTest``) of

    * paired bootstrap resampling (Koehn, 2004; ``test_type='bs'``, ``n_bootstrap``
      resamples), which also gives each system's bootstrap mean and 95% CI half-width
      (sacreBLEU ``estimate_ci``: half the distance between the 2.5th and 97.5th percentile
      resample, around the mean);
    * paired approximate randomization (Riezler & Maxwell, 2005, as in MultEval;
      ``test_type='ar'``, ``n_ar`` trials).

    Both p-values are two-sided, ``(c + 1) / (n + 1)`` where ``c`` counts resamples with a
    difference strictly larger than the observed one. Tie correction: if the observed
    difference is exactly 0 (e.g. identical outputs), sacreBLEU's strict ``>`` yields the
    minimum p ``1/(n+1)`` (a known MultEval artefact, jhclark/multeval#5); by the definition
    ``p = P(|delta*| >= |delta|)`` the p-value is then 1, which is what we report
    (``tie_corrected: true``). The same strict inequality makes the AR p-value too small when
    only a few lines differ from the baseline (many shuffles tie with the observed
    difference); ``n_diff_lines`` is reported and a warning printed below 20 differing lines.
    A system identical to the baseline (``identical: true``) is named in a warning. On fewer
    than :data:`MIN_SIG_LINES` sentences the results are flagged (``few_lines: true``, and a
    warning: :func:`few_lines_message`).

    Args:
        refs: reference lines.
        named_systems: ``[(name, hyps), ...]``; the first is the baseline.
        metric: ``bleu_tok`` (tokenized BLEU, tokenize='none'), ``bleu`` (Moses-detokenized
            + 13a) or ``chrf``.
        tgt_lang: target language of the detokenizer (``bleu`` only).
        n_bootstrap: bootstrap resamples.
        n_ar: approximate-randomization trials.
        seed: RNG seed (``SACREBLEU_SEED``); a positive integer (sacreBLEU treats 0 as
            "unseeded").
        tests: subset of ``("bs", "ar")`` to run.

    Returns:
        ``{"metric", "tokenize", "n_lines", "min_lines", "few_lines", "n_bootstrap", "n_ar",
        "seed", "signatures": {"bs", "ar"}, "baseline", "systems": [{"name", "is_baseline",
        "score", "delta", "bs_mean", "ci95", "ci_low", "ci_high", "p_bs", "p_ar",
        "tie_corrected", "n_diff_lines", "identical"}, ...]}`` (points 0-100; p-values are
        ``None`` for the baseline or a test not run).

    Raises:
        EvaluationError: bad arguments, unequal line counts.
    """
    from sacrebleu.significance import PairedTest

    tests = tuple(tests)
    _check_arguments(named_systems, seed, tests, n_bootstrap, n_ar)
    names = [n for n, _ in named_systems]
    for name, hyps in named_systems:
        check_same_length(hyps, f"system {name!r}", refs, "reference")
    metric_obj, prep = _make_metric(metric, refs, tgt_lang)
    systems = [(n, prep(h)) for n, h in named_systems]

    recs = [{"name": n, "is_baseline": i == 0} for i, n in enumerate(names)]
    signatures = {}
    with _sacrebleu_seed(seed):
        for test in ("bs", "ar"):
            if test not in tests:
                continue
            # n_ar_confidence=-1: the CI comes from the bootstrap run only
            pt = PairedTest(
                systems,
                {metric: metric_obj},
                references=None,
                test_type=test,
                n_samples=n_bootstrap if test == "bs" else n_ar,
                n_ar_confidence=-1,
                n_jobs=1,
            )
            sigs, scores = pt()
            key = [k for k in scores if k != "System"][0]
            signatures[test] = str(sigs[key])
            for rec, res in zip(recs, scores[key]):
                rec["score"] = float(res.score)
                if test == "bs":
                    rec["bs_mean"] = float(res.mean) if res.mean is not None else None
                    rec["ci95"] = float(res.ci) if res.ci is not None else None
                rec[f"p_{test}"] = None if res.p_value is None else float(res.p_value)

    base_score, base_hyps = recs[0]["score"], systems[0][1]
    out_sys = [
        _finish_system(rec, hyps, base_hyps, base_score, tests, names[0])
        for rec, (_, hyps) in zip(recs, systems)
    ]
    few = len(refs) < MIN_SIG_LINES
    if few:
        warn(few_lines_message(len(refs)))
    return {
        "metric": metric,
        "tokenize": {"bleu_tok": "none", "bleu": "13a", "chrf": None}[metric],
        "n_lines": len(refs),
        "min_lines": MIN_SIG_LINES,
        "few_lines": few,
        "n_bootstrap": n_bootstrap if "bs" in tests else None,
        "n_ar": n_ar if "ar" in tests else None,
        "seed": seed,
        "signatures": signatures,
        "baseline": names[0],
        "systems": out_sys,
    }


def few_lines_message(n: int) -> str:
    """Why paired tests on ``n`` (< :data:`MIN_SIG_LINES`) sentences are flagged."""
    return (
        f"paired tests on {n} sentence{'s' if n != 1 else ''}, fewer than {MIN_SIG_LINES} (the "
        "smallest test set on which Koehn 2004 validated paired bootstrap for BLEU): the "
        "p-values and confidence intervals are not reliable"
    )


def split_named(arg: str) -> tuple[str, str]:
    """``NAME=PATH`` -> (NAME, PATH); a bare existing path -> (basename, path)."""
    if "=" in arg and not Path(arg).exists():
        name, path = arg.split("=", 1)
        if name and path:
            return name, path
    return Path(arg).name, arg


def compare_files(
    ref_path,
    baseline,
    systems: Sequence[str],
    tokenize: str = "none",
    tgt_lang: str = "en",
    n_bootstrap: int = 1000,
    n_ar: int = 10000,
    seed: int = 12345,
    allow_few_lines: bool = False,
) -> dict[str, object]:
    """Paired tests of hypothesis files against a baseline file.

    Args:
        ref_path: reference file.
        baseline: baseline hypothesis file, optionally ``NAME=PATH``.
        systems: system hypothesis files, each optionally ``NAME=PATH`` (default name: the
            file's basename, made unique).
        tokenize: ``none`` = tokenized BLEU on the text as is (default, as in the papers);
            ``13a`` = detokenized sacreBLEU (sacremoses detokenization with ``tgt_lang``
            first, like ``score``'s ``bleu``).
        tgt_lang: detokenizer language for ``tokenize='13a'``.
        n_bootstrap: bootstrap resamples.
        n_ar: approximate-randomization trials.
        seed: RNG seed.
        allow_few_lines: run the tests on fewer than :data:`MIN_SIG_LINES` sentences (the
            results are then flagged) instead of refusing.

    Returns:
        :func:`paired_significance` output plus ``"ref"`` and each system's ``"path"``.

    Raises:
        EvaluationError: see :func:`~.textio.load_hyp_ref`, unknown ``tokenize``, fewer than
            :data:`MIN_SIG_LINES` reference lines without ``allow_few_lines``.
    """
    if tokenize not in TOKENIZE_TO_METRIC:
        raise EvaluationError(
            f"tokenize must be one of {sorted(TOKENIZE_TO_METRIC)}, got {tokenize!r}"
        )
    refs = read_lines(ref_path, "reference")
    if len(refs) < MIN_SIG_LINES and not allow_few_lines:
        raise EvaluationError(
            f"{ref_path}: {len(refs)} sentence{'s' if len(refs) != 1 else ''}: paired tests "
            f"need at least {MIN_SIG_LINES} (the smallest test set on which Koehn 2004 "
            "validated paired bootstrap for BLEU); --allow-few-lines runs them anyway, flagged"
        )
    named, paths, used = [], {}, set()
    for arg in [baseline, *systems]:
        name, path = split_named(arg)
        base_name, k = name, 2
        while name in used:
            name = f"{base_name}#{k}"
            k += 1
        used.add(name)
        hyps = read_lines(path, "hypothesis")
        check_same_length(hyps, path, refs, ref_path)
        named.append((name, hyps))
        paths[name] = str(path)
    res = paired_significance(
        refs,
        named,
        metric=TOKENIZE_TO_METRIC[tokenize],
        tgt_lang=tgt_lang,
        n_bootstrap=n_bootstrap,
        n_ar=n_ar,
        seed=seed,
    )
    res["ref"] = str(ref_path)
    for rec in res["systems"]:
        rec["path"] = paths[rec["name"]]
    return res


def format_p(p: float | None) -> str:
    """A p-value with 4 decimals, ``-`` for none."""
    return "-" if p is None else f"{p:.4f}"


def format_compare(res: Mapping[str, object]) -> str:
    """Human-readable table of :func:`compare_files` / :func:`paired_significance` output."""
    lines = [
        f"metric: {res['metric']} (tokenize={res['tokenize']}), {res['n_lines']} lines, "
        f"baseline: {res['baseline']}"
    ]
    for k, v in res["signatures"].items():
        lines.append(f"  signature[{k}]: {v}")
    lines.append(
        f"{'system':<30} {'score':>7} {'delta':>7} {'95% CI (bootstrap)':>22} "
        f"{'p(bs)':>7} {'p(ar)':>7}"
    )
    few = bool(res.get("few_lines"))
    flag = "*" if few else ""
    for r in res["systems"]:
        ci = f"{r['bs_mean']:.2f} ± {r['ci95']:.2f}{flag}" if r["ci95"] is not None else "-"
        mark = " (baseline)" if r["is_baseline"] else " (identical)" if r.get("identical") else ""
        p_bs, p_ar = (format_p(r[k]) + (flag if r[k] is not None else "") for k in ("p_bs", "p_ar"))
        lines.append(
            f"{r['name'] + mark:<30} {r['score']:7.2f} {r['delta']:+7.2f} {ci:>22} "
            f"{p_bs:>7} {p_ar:>7}"
        )
    if few:
        lines.append(f"* {few_lines_message(res['n_lines'])}")
    identical = [r["name"] for r in res["systems"] if r.get("identical")]
    if identical:
        lines.append(
            f"identical to the baseline (every line equal): {', '.join(identical)}; "
            "no difference to test"
        )
    return "\n".join(lines)
