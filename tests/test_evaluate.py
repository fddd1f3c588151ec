"""Tests of the evaluation tools (qknorm_tools: textio, scoring, significance, aggregate,
ablation and the evaluate command line)."""

import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import sacrebleu

from qknorm_tools import ablation, aggregate, evaluate, scoring, significance, textio

from conftest import FAR_BOUND

FIX = Path(__file__).parent / "fixtures"
REPO = Path(__file__).resolve().parents[1]

# ---------------------------------------------------------------------------
# helpers: synthetic (not real-corpus) tokenized text
# ---------------------------------------------------------------------------

WORDS = (
    "the a of and to in is that it we this for you was on are with as they be at one have "
    "from or had by but not what all were when there can an your which their said if do will "
    "each about how up out them then she many some so these would other into has more her two "
    "like him see time could no make than first been its who now people my made over did down "
    "only way find use may water long little very after words called just where most know"
).split()


def make_refs(n=120, seed=0):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, size=rng.integers(6, 16))) + " ." for _ in range(n)]


def corrupt(lines, p, seed):
    """Replace each token with probability p by a random word (a worse system)."""
    rng = np.random.default_rng(seed)
    out = []
    for line in lines:
        toks = [t if rng.random() > p else str(rng.choice(WORDS)) for t in line.split()]
        out.append(" ".join(toks))
    return out


def write(path, lines):
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


# ---------------------------------------------------------------------------
# CLI error handling: `python -m qknorm_tools.evaluate` as subprocesses
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli_errors(tmp_path_factory):
    d = tmp_path_factory.mktemp("cli")
    ref = write(d / "ref.txt", ["a b c d e", "f g h i j", "k l m n o"])
    short = write(d / "short_hyp.txt", ["a b c d e", "f g h i j"])
    empty = d / "empty_hyp.txt"
    empty.write_bytes(b"")
    bad = d / "bad_utf8_hyp.txt"
    bad.write_bytes(b"a b c\nd \xff\xfe f\ng h i\n")
    cases = {
        "mismatch": ["score", "--hyp", str(short), "--ref", str(ref)],
        "empty": ["score", "--hyp", str(empty), "--ref", str(ref)],
        "utf8": ["score", "--hyp", str(bad), "--ref", str(ref), "--json"],
    }
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    procs = {
        k: subprocess.Popen(
            [sys.executable, "-m", "qknorm_tools.evaluate", *args],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for k, args in cases.items()
    }
    out = {}
    for k, p in procs.items():
        so, se = p.communicate(timeout=FAR_BOUND)
        out[k] = (p.returncode, so, se)
    return {"results": out, "ref": ref, "short": short, "empty": empty, "bad": bad}


def test_cli_rejects_line_count_mismatch(cli_errors):
    rc, _, err = cli_errors["results"]["mismatch"]
    assert rc == 1
    assert "error:" in err
    assert str(cli_errors["short"]) in err and str(cli_errors["ref"]) in err
    assert "2 lines" in err and "3 lines" in err


def test_cli_rejects_empty_hypothesis(cli_errors):
    rc, _, err = cli_errors["results"]["empty"]
    assert rc == 1
    assert str(cli_errors["empty"]) in err and "empty" in err


def test_cli_rejects_invalid_utf8_naming_line(cli_errors):
    rc, _, err = cli_errors["results"]["utf8"]
    assert rc == 1
    assert str(cli_errors["bad"]) in err and "line 2" in err and "UTF-8" in err


def test_cli_compare_validates_inputs(cli_errors, capsys):
    rc = evaluate.main(
        [
            "compare",
            "--ref",
            str(cli_errors["ref"]),
            "--baseline",
            str(cli_errors["ref"]),
            "--system",
            str(cli_errors["short"]),
            "--n-bootstrap",
            "10",
            "--n-ar",
            "10",
            "--allow-few-lines",
        ]
    )
    assert rc == 1 and str(cli_errors["short"]) in capsys.readouterr().err


def test_cli_score_json_schema(cli_errors, capsys):
    rc = evaluate.main(
        ["score", "--hyp", str(cli_errors["ref"]), "--ref", str(cli_errors["ref"]), "--json"]
    )
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert set(d) == {"bleu_tok", "bleu", "chrf", "signatures", "n_lines"}
    assert set(d["signatures"]) == {"bleu_tok", "bleu", "chrf"}
    assert d["n_lines"] == 3
    assert d["bleu_tok"] == pytest.approx(100.0)


# ---------------------------------------------------------------------------
# score
# ---------------------------------------------------------------------------


def test_bleu_tok_equals_hand_computed_multibleu():
    """Papineni et al. (2002) BLEU = BP * exp(mean_n log p_n), counted by hand.

    hyp 1 "the cat sat on a mat ."          ref "the cat sat on the mat ."
    hyp 2 "there is a dog in the garden"    ref "there is a big dog in the garden ."
    matches / totals (line 1 + line 2):
      1-grams 6+7 / 7+7, 2-grams 4+5 / 6+6, 3-grams 2+3 / 5+5, 4-grams 1+1 / 4+4
    hyp length c = 14, ref length r = 16 -> BP = exp(1 - r/c).
    multi-bleu.perl prints the same formula rounded to 2 decimals.
    """
    p = [13 / 14, 9 / 12, 5 / 10, 2 / 8]
    bp = math.exp(1 - 16 / 14)
    expected = 100 * bp * math.exp(sum(math.log(x) for x in p) / 4)
    assert round(expected, 2) == 47.09
    res = scoring.score_files(FIX / "hyp_small.tok.en", FIX / "ref_small.tok.en")
    assert round(res["bleu_tok"], 2) == round(expected, 2)
    assert res["bleu_tok"] == pytest.approx(expected, abs=1e-9)
    assert res["n_lines"] == 2


def test_scores_match_independent_sacrebleu():
    refs = make_refs(60, seed=1)
    hyps = corrupt(refs, 0.3, seed=2)
    hyps[3] = hyps[3].replace("the", "it &apos;s", 1) + " &quot;"
    res = scoring.score_lines(hyps, refs, src_lang="gl", tgt_lang="en", warn=lambda m: None)
    assert res["bleu_tok"] == pytest.approx(
        sacrebleu.corpus_bleu(hyps, [refs], tokenize="none").score, abs=1e-9
    )
    assert res["chrf"] == pytest.approx(sacrebleu.corpus_chrf(hyps, [refs]).score, abs=1e-9)
    from sacremoses import MosesDetokenizer

    md = MosesDetokenizer(lang="en")
    dh = [md.detokenize(h.split()) for h in hyps]
    dr = [md.detokenize(r.split()) for r in refs]
    assert "it's" in dh[3] and '"' in dh[3]
    assert res["bleu"] == pytest.approx(
        sacrebleu.corpus_bleu(dh, [dr], tokenize="13a").score, abs=1e-9
    )
    sig = res["signatures"]
    assert "tok:none" in sig["bleu_tok"] and "tokenized" in sig["bleu_tok"]
    assert "tok:13a" in sig["bleu"] and "detokenized" in sig["bleu"]
    assert "nc:6" in sig["chrf"] and "tokenized" in sig["chrf"]
    assert "lang:gl-en" in sig["bleu_tok"]


def test_html_escape_warning(tmp_path):
    msgs = []
    scoring.score_lines(["it &apos;s ok ."], ["it &apos;s ok ."], warn=msgs.append)
    assert msgs and "&apos;" in msgs[0] and "unescaped" in msgs[0]


def test_validation_errors_in_api(tmp_path):
    ref = write(tmp_path / "r.txt", ["a", "b"])
    hyp = write(tmp_path / "h.txt", ["a"])
    with pytest.raises(textio.LineCountError, match="h.txt"):
        textio.load_hyp_ref(hyp, ref)
    bad = tmp_path / "bad.txt"
    bad.write_bytes(b"ok\n\xc3\x28\n")
    with pytest.raises(textio.EncodingError, match="line 2"):
        textio.read_lines(bad)
    assert issubclass(textio.EncodingError, ValueError)


def test_read_lines_keeps_unicode_separators(tmp_path):
    p = tmp_path / "u.txt"
    p.write_bytes("a\u2028b\nc\n".encode("utf-8"))
    assert textio.read_lines(p) == ["a\u2028b", "c"]


# ---------------------------------------------------------------------------
# extract
# ---------------------------------------------------------------------------


def test_extract_restores_order_and_removes_bpe(tmp_path):
    out = tmp_path / "hyp.txt"
    hyps = textio.extract_hypotheses(FIX / "generate_bpe.out", out, "subword_nmt", n_expected=4)
    expected = [
        "thank you .",
        "thank you very much .",
        "the cat is on the carpet .",
        "and that &apos;s it",
    ]
    assert hyps == expected
    assert out.read_text(encoding="utf-8") == "".join(h + "\n" for h in expected)


def test_extract_cli_and_none_mode(tmp_path):
    out = tmp_path / "raw.txt"
    assert (
        evaluate.main(
            [
                "extract",
                "--generate-output",
                str(FIX / "generate_bpe.out"),
                "--output",
                str(out),
                "--remove-bpe",
                "none",
            ]
        )
        == 0
    )
    assert textio.read_lines(out)[1] == "thank you very mu@@ ch ."


def test_extract_errors(tmp_path):
    with pytest.raises(textio.GenerateOutputError, match="expected 5"):
        textio.extract_hypotheses(FIX / "generate_bpe.out", None, n_expected=5)
    gap = write(tmp_path / "gap.out", ["H-0\t-1\ta", "H-2\t-1\tb"])
    with pytest.raises(textio.GenerateOutputError, match=r"missing ids.*\[1\]"):
        textio.extract_hypotheses(gap)
    dup = write(tmp_path / "dup.out", ["H-0\t-1\ta", "H-1\t-1\tb", "H-1\t-2\tc"])
    with pytest.raises(textio.GenerateOutputError, match="duplicate.*id 1.*line 3"):
        textio.extract_hypotheses(dup)
    assert (
        evaluate.main(["extract", "--generate-output", str(dup), "--output", str(tmp_path / "x")])
        == 1
    )


def test_finish_extracts_scores_and_records_in_one_process(tmp_path, capsys):
    """``evaluate finish`` (scripts/evaluate.sh after fairseq-generate): the hypotheses with
    the pair's BPE removed, scores equal to sacreBLEU's own, the made-by record last; a wrong
    line count stops at the extraction, writing neither score nor record."""
    bpe = tmp_path / "bpe"
    bpe.mkdir()
    (bpe / "bpe.json").write_text(json.dumps({"tool": "subword-nmt"}))
    refs = [
        "thank you .",
        "thank you very much .",
        "the cat is on the mat .",
        "and that &apos;s it",
    ]
    ref = write(tmp_path / "test.en", refs)
    ckpt = write(tmp_path / "checkpoint_best.pt", ["weights"])
    out = {k: tmp_path / f"test.{k}" for k in ("hyp", "score.json", "made_by.json")}

    def finish(n):
        args = ["finish", "--generate-output", str(FIX / "generate_bpe.out"), "--hyp"]
        args += [str(out["hyp"]), "--bpe-dir", str(bpe), "--n-expected", str(n), "--ref"]
        args += [str(ref), "--score", str(out["score.json"]), "--src-lang", "gl", "--tgt-lang"]
        args += ["en", "--data-id", "abc", "--", str(out["made_by.json"]), "--file"]
        args += [f"checkpoint={ckpt}", "--set", "split=test", "--scorer", "gl", "en"]
        return evaluate.main(args)

    assert finish(5) == 1
    assert "could not extract 5 hypotheses from" in capsys.readouterr().err
    assert not out["score.json"].exists() and not out["made_by.json"].exists()
    assert finish(4) == 0
    hyps = textio.read_lines(out["hyp"])
    assert hyps[2] == "the cat is on the carpet ."
    score = json.loads(out["score.json"].read_text())
    expected = sacrebleu.corpus_bleu(hyps, [refs], tokenize="none").score
    assert score["bleu_tok"] == pytest.approx(expected) and score["data_id"] == "abc"
    made_by = json.loads(out["made_by.json"].read_text())["made_by"]
    assert made_by["split"] == "test" and "checkpoint" in made_by
    fresh = ["check", str(out["made_by.json"]), "--file", f"checkpoint={ckpt}"]
    fresh += ["--set", "split=test", "--scorer", "gl", "en"]
    from qknorm_tools import freshness

    assert freshness.main(fresh) == 0  # what evaluate.sh asks before decoding again


def test_remove_bpe_modes():
    assert textio.remove_bpe("new@@ s@@ paper is gre@@ at", "subword_nmt") == "newspaper is great"
    assert textio.remove_bpe("the end@@", "subword_nmt") == "the end"
    assert (
        textio.remove_bpe("\u2581the \u2581news pa per \u2581.", "sentencepiece")
        == "the newspaper ."
    )
    assert textio.remove_bpe("a@@ b", "none") == "a@@ b"


# ---------------------------------------------------------------------------
# compare (paired bootstrap + approximate randomization)
# ---------------------------------------------------------------------------


@pytest.fixture(scope="module")
def systems(tmp_path_factory):
    d = tmp_path_factory.mktemp("sys")
    refs = make_refs(120, seed=0)
    base = corrupt(refs, 0.45, seed=10)
    better = corrupt(refs, 0.10, seed=11)
    return {
        "dir": d,
        "refs": refs,
        "base": base,
        "better": better,
        "ref_path": write(d / "ref.txt", refs),
        "base_path": write(d / "base.txt", base),
        "better_path": write(d / "better.txt", better),
        "same_path": write(d / "same.txt", base),
    }


def test_compare_identical_and_better(systems):
    res = significance.compare_files(
        systems["ref_path"],
        f"base={systems['base_path']}",
        [f"same={systems['same_path']}", f"better={systems['better_path']}"],
        n_bootstrap=200,
        n_ar=500,
        seed=7,
        allow_few_lines=True,  # 120 lines < MIN_SIG_LINES: flagged
    )
    by = {s["name"]: s for s in res["systems"]}
    assert res["baseline"] == "base" and by["base"]["p_ar"] is None
    assert by["same"]["p_ar"] > 0.9 and by["same"]["p_bs"] > 0.9
    assert by["same"]["delta"] == 0.0 and by["same"]["n_diff_lines"] == 0
    assert by["better"]["p_ar"] < 0.05 and by["better"]["p_bs"] < 0.05
    assert by["better"]["delta"] > 10
    ind = sacrebleu.corpus_bleu(systems["better"], [systems["refs"]], tokenize="none").score
    assert by["better"]["score"] == pytest.approx(ind)
    assert by["better"]["ci_low"] < by["better"]["score"] < by["better"]["ci_high"]
    assert "bs:200" in res["signatures"]["bs"] and "ar:500" in res["signatures"]["ar"]
    assert "seed:7" in res["signatures"]["ar"]


def test_compare_cli_json(systems, capsys):
    rc = evaluate.main(
        [
            "compare",
            "--ref",
            str(systems["ref_path"]),
            "--baseline",
            str(systems["base_path"]),
            "--system",
            str(systems["better_path"]),
            "--json",
            "--n-bootstrap",
            "50",
            "--n-ar",
            "50",
            "--tokenize",
            "13a",
            "--allow-few-lines",
        ]
    )
    assert rc == 0
    d = json.loads(capsys.readouterr().out)
    assert d["tokenize"] == "13a" and d["metric"] == "bleu"
    assert [s["name"] for s in d["systems"]] == ["base.txt", "better.txt"]
    assert {"score", "ci95", "ci_low", "ci_high", "p_bs", "p_ar", "delta", "path"} <= set(
        d["systems"][1]
    )


# ---------------------------------------------------------------------------
# aggregate
# ---------------------------------------------------------------------------


def _fake_runs(d, refs):
    recs = []
    for system, p, scores in (
        ("baseline", 0.45, (20.0, 21.0, 22.5)),
        ("qknorm", 0.10, (24.0, 24.5, 26.0)),
    ):
        for k, (seed, s) in enumerate(zip((1, 2, 3), scores)):
            hyp = write(d / f"{system}.s{seed}.txt", corrupt(refs, p, seed=100 * k + len(system)))
            recs.append(
                {
                    "pair": "gl-en",
                    "system": system,
                    "seed": seed,
                    "bleu_tok": s,
                    "bleu": s - 1.0,
                    "chrf": s + 20.0,
                    "hyp_path": str(hyp),
                }
            )
    return recs


def test_mean_sd():
    m, sd = aggregate.mean_sd([20.0, 21.0, 22.5])
    assert m == pytest.approx(statistics.mean([20.0, 21.0, 22.5]))
    assert sd == pytest.approx(statistics.stdev([20.0, 21.0, 22.5]))
    assert math.isnan(aggregate.mean_sd([3.0])[1])


def test_aggregate_three_seeds(systems, tmp_path):
    refs = systems["refs"]
    recs = _fake_runs(tmp_path, refs)
    (tmp_path / "runs").mkdir()
    for r in recs:
        (tmp_path / "runs" / f"{r['system']}_{r['seed']}.json").write_text(json.dumps(r))
    rc = evaluate.main(
        [
            "aggregate",
            "--results",
            str(tmp_path / "runs"),
            "--baseline",
            "baseline",
            "--ref",
            f"gl-en={systems['ref_path']}",
            "--out-dir",
            str(tmp_path / "out"),
            "--n-bootstrap",
            "100",
            "--n-ar",
            "200",
        ]
    )
    assert rc == 0
    agg = json.loads((tmp_path / "out" / "aggregate.json").read_text())
    q = agg["pairs"]["gl-en"]["systems"]["qknorm"]
    b = agg["pairs"]["gl-en"]["systems"]["baseline"]
    assert b["bleu_tok"]["mean"] == pytest.approx(21.1666666667)
    assert b["bleu_tok"]["sd"] == pytest.approx(statistics.stdev([20.0, 21.0, 22.5]))
    assert q["bleu_tok"]["mean"] == pytest.approx(24.8333333333)
    assert q["delta"]["bleu_tok"] == pytest.approx(24.8333333333 - 21.1666666667)
    assert q["chrf"]["mean"] == pytest.approx(44.8333333333)
    assert agg["avg_delta"]["qknorm"]["bleu_tok"] == pytest.approx(3.6666666667)
    # paired test on seed-concatenated outputs, checked independently
    cat = [line for s in (1, 2, 3) for line in textio.read_lines(tmp_path / f"qknorm.s{s}.txt")]
    assert q["concat"]["score"] == pytest.approx(
        sacrebleu.corpus_bleu(cat, [refs * 3], tokenize="none").score
    )
    assert q["concat"]["p_ar"] < 0.05 and q["concat"]["p_bs"] < 0.05
    assert agg["pairs"]["gl-en"]["n_lines_concat"] == 3 * len(refs)
    md = (tmp_path / "out" / "aggregate.md").read_text()
    assert "24.83 ± " in md and "concatenated" in md and "+3.67" in md
    tex = (tmp_path / "out" / "aggregate.tex").read_text()
    assert all(k in tex for k in (r"\toprule", r"\midrule", r"\bottomrule", r"$\pm$"))
    csv_text = (tmp_path / "out" / "aggregate.csv").read_text().splitlines()
    assert csv_text[0].startswith("pair,system,n_seeds,seeds,bleu_tok_mean,bleu_tok_sd")
    assert len(csv_text) == 3


def test_aggregate_single_seed_sd_is_null():
    recs = [
        {"pair": "p", "system": "a", "seed": 1, "bleu_tok": 10.0},
        {"pair": "p", "system": "b", "seed": 1, "bleu_tok": 12.0},
    ]
    agg = aggregate.aggregate_results(recs, "a", significance=False)
    assert agg["pairs"]["p"]["systems"]["b"]["bleu_tok"]["sd"] is None
    assert agg["avg_delta"]["b"]["bleu_tok"] == pytest.approx(2.0)
    with pytest.raises(textio.ResultsError, match="baseline"):
        aggregate.aggregate_results(recs, "zzz", significance=False)


# ---------------------------------------------------------------------------
# 2x2 ablation
# ---------------------------------------------------------------------------


def test_ablation_effects_constructed():
    means = {
        "layernorm_dot": 20.0,
        "layernorm_qknorm": 22.0,
        "scalenorm_dot": 21.5,
        "scalenorm_qknorm": 22.0,
    }
    e = ablation.ablation_effects(means)
    assert e["qknorm_effect_at_layernorm"] == pytest.approx(2.0)
    assert e["qknorm_effect_at_scalenorm"] == pytest.approx(0.5)
    assert e["norm_effect_at_dot"] == pytest.approx(1.5)
    assert e["norm_effect_at_qknorm"] == pytest.approx(0.0)
    assert e["interaction"] == pytest.approx(1.5)
    assert e["qknorm_main_effect"] == pytest.approx(1.25)
    assert e["norm_main_effect"] == pytest.approx(0.75)
    assert e["paper_comparison"] == pytest.approx(0.5)
    assert e["paper_comparison"] == pytest.approx(e["qknorm_main_effect"] - e["norm_main_effect"])
    dec = e["decomposition"]
    assert sum(dec["via_layernorm"].values()) == pytest.approx(0.5)
    assert sum(dec["via_scalenorm"].values()) == pytest.approx(0.5)
    with pytest.raises(textio.ResultsError):
        ablation.ablation_effects({"layernorm_dot": 1.0})


def test_ablation_report_cli(systems, tmp_path):
    refs = systems["refs"]
    quality = {
        "layernorm_dot": 0.45,
        "layernorm_qknorm": 0.10,
        "scalenorm_dot": 0.40,
        "scalenorm_qknorm": 0.12,
    }
    scores = {
        "layernorm_dot": (20.0, 22.0),
        "layernorm_qknorm": (25.0, 25.0),
        "scalenorm_dot": (21.0, 21.0),
        "scalenorm_qknorm": (24.0, 25.0),
    }
    cells = {}
    for k, (cell, p) in enumerate(quality.items()):
        cells[cell] = []
        for seed, s in zip((1, 2), scores[cell]):
            h = write(tmp_path / f"{cell}.{seed}.txt", corrupt(refs, p, seed=10 * k + seed))
            cells[cell].append({"system": cell, "seed": seed, "bleu_tok": s, "hyp_path": h.name})
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"ref": str(systems["ref_path"]), "pair": "gl-en", "cells": cells}))
    rc = evaluate.main(
        ["ablation", "--spec", str(spec), "--out-dir", str(tmp_path / "abl"), "--n-ar", "200"]
    )
    assert rc == 0
    rep = json.loads((tmp_path / "abl" / "ablation.json").read_text())
    e = rep["effects"]
    assert e["qknorm_effect_at_layernorm"] == pytest.approx(25.0 - 21.0)
    assert e["qknorm_effect_at_scalenorm"] == pytest.approx(24.5 - 21.0)
    assert e["norm_effect_at_dot"] == pytest.approx(0.0)
    assert e["interaction"] == pytest.approx(0.5)
    assert e["paper_comparison"] == pytest.approx(4.0)
    sig = rep["significance"]
    assert sig["qknorm_main_effect"]["p_ar"] < 0.05
    assert sig["qknorm_effect_at_layernorm"]["p_ar"] < 0.05
    assert "interaction" not in sig
    md = (tmp_path / "abl" / "ablation.md").read_text()
    assert "paper_comparison" in md and "QKNorm main effect" in md
    # the seed-level test in the JSON and the table: Welch's t on (25, 25) vs (20, 22)
    from scipy import stats

    p_welch = stats.ttest_ind([25.0, 25.0], [20.0, 22.0], equal_var=False).pvalue
    assert rep["seed_tests"]["qknorm_effect_at_layernorm"]["p"] == pytest.approx(p_welch)
    assert "| p (AR) | p (seeds, Welch) |" in md
    assert f"| {p_welch:.4f} |" in md.split("qknorm_effect_at_layernorm |")[1].splitlines()[0]


def test_ablation_report_lists_each_run(systems):
    """The per-run table (issue 19): stop, epochs, updates, best dev loss, g at the end, max
    logit and CPU time come from each run's record, in cell order then seed order."""
    refs = systems["refs"]
    cells = {}
    for k, cell in enumerate(ablation.ABLATION_CELLS):
        qk = cell.endswith("qknorm")
        cells[cell] = [
            {
                "pair": "gl-en",
                "system": cell,
                "seed": seed,
                "bleu_tok": 10.0 + k + seed,
                "dev_bleu_tok": 11.5 if seed == 1 else None,
                "stop_reason": "min_lr" if seed == 2 else "early_stop",
                "epochs": 40 + seed,
                "updates": 264 * (40 + seed),
                "dev_loss_min": 5.25 - 0.01 * k,
                "best_dev_loss_epoch": 39 + seed,
                "qk_norm_g0": 12.59 if qk else None,
                "qk_norm_g_final": {"enc0_self": 11.0, "dec0_self": 14.0} if qk else {},
                "max_attn_logit": 9.5 + k,
                "cpu_seconds": 3900.0,
            }
            for seed in (2, 1)  # unordered on purpose: rows come in seed order
        ]
    rep = ablation.ablation_report(cells, refs, significance=False)
    runs = rep["runs"]
    assert [(r["cell"], r["seed"]) for r in runs] == [
        (c, s) for c in ablation.ABLATION_CELLS for s in (1, 2)
    ]
    lq1 = runs[2]  # layernorm_qknorm, seed 1
    assert lq1["stop_reason"] == "early_stop" and lq1["epochs"] == 41
    assert lq1["updates"] == 264 * 41 and lq1["best_dev_loss_epoch"] == 40
    assert lq1["bleu_tok"] == pytest.approx(12.0)
    assert lq1["g_final_mean"] == pytest.approx(12.5)
    assert (lq1["g_final_min"], lq1["g_final_max"]) == (11.0, 14.0)
    assert lq1["cpu_minutes"] == pytest.approx(65.0)
    assert runs[0]["g_final"] is None and runs[0]["g_final_mean"] is None
    md = "\n".join(ablation._markdown(rep))
    assert "## Runs" in md
    assert (
        "| layernorm_qknorm | layernorm_qknorm | 1 | early_stop | 41 | 10824 | 5.240 (40) "
        "| 12.00 | 11.50 | 12.59 | 12.50 [11.00, 14.00] | 10.5 | 65.0 |"
    ) in md
    assert (
        "| layernorm_dot | layernorm_dot | 2 | min_lr | 42 | 11088 | 5.250 (41) | 12.00 | - | - |"
        in md
    )


def test_ablation_seed_tests_are_welchs_t():
    """Two-cell effects equal scipy's Welch test; four-cell contrasts (main effects,
    interaction) equal Welch-Satterthwaite computed by hand from the cell sds."""
    from scipy import stats

    vals = {
        "layernorm_dot": [13.02, 12.08, 11.30],
        "layernorm_qknorm": [13.67, 12.92, 11.79],
        "scalenorm_dot": [12.75, 12.79, 13.23],
        "scalenorm_qknorm": [13.08, 13.31, 12.04],
    }
    res = ablation.ablation_seed_tests(vals)
    pairs = {
        "qknorm_effect_at_layernorm": ("layernorm_qknorm", "layernorm_dot"),
        "qknorm_effect_at_scalenorm": ("scalenorm_qknorm", "scalenorm_dot"),
        "norm_effect_at_dot": ("scalenorm_dot", "layernorm_dot"),
        "norm_effect_at_qknorm": ("scalenorm_qknorm", "layernorm_qknorm"),
        "paper_comparison": ("layernorm_qknorm", "scalenorm_dot"),
    }
    for name, (treat, ctrl) in pairs.items():
        ref = stats.ttest_ind(vals[treat], vals[ctrl], equal_var=False)
        assert res[name]["t"] == pytest.approx(ref.statistic, rel=1e-9), name
        assert res[name]["p"] == pytest.approx(ref.pvalue, rel=1e-9), name
    # the interaction (b - a) - (d - c) with weights +-1 on every cell, by hand
    var = {c: np.var(v, ddof=1) / len(v) for c, v in vals.items()}
    se2 = sum(var.values())
    df = se2**2 / sum(x * x / 2 for x in var.values())
    est = (np.mean(vals["layernorm_qknorm"]) - np.mean(vals["layernorm_dot"])) - (
        np.mean(vals["scalenorm_qknorm"]) - np.mean(vals["scalenorm_dot"])
    )
    it = res["interaction"]
    assert it["estimate"] == pytest.approx(est) and it["df"] == pytest.approx(df)
    assert it["p"] == pytest.approx(2 * stats.t.sf(abs(est) / se2**0.5, df))
    # main effect: weights 1/2, so se is half the interaction's, the estimate the mean of two
    qk = res["qknorm_main_effect"]
    assert qk["se"] == pytest.approx(se2**0.5 / 2) and qk["df"] == pytest.approx(df)
    assert qk["estimate"] == pytest.approx(
        (
            res["qknorm_effect_at_layernorm"]["estimate"]
            + res["qknorm_effect_at_scalenorm"]["estimate"]
        )
        / 2
    )
    # one seed in a cell: no test for the effects that use it, the others still tested
    one = dict(vals, layernorm_dot=[13.02])
    res1 = ablation.ablation_seed_tests(one)
    assert res1["qknorm_effect_at_layernorm"] is None and res1["interaction"] is None
    assert res1["paper_comparison"]["p"] == pytest.approx(res["paper_comparison"]["p"])
    with pytest.raises(textio.ResultsError):
        ablation.ablation_seed_tests({"layernorm_dot": [1.0, 2.0]})


def test_the_profiles_checkpoint_is_the_runs_result(tmp_path):
    """evaluate.sh without --checkpoint decodes the profile's decode.checkpoint (cpu-fixed-d128:
    the average of the last 5 epoch checkpoints) into test.*; another checkpoint into test.C.*."""
    from conftest import make_env, run_script

    env = make_env(tmp_path)
    p = run_script(
        "evaluate.sh", "gl-en", "twt", "--profile", "cpu-fixed-d128", "--dry-run", env=env
    )
    assert p.returncode == 0, p.stderr
    lines = p.stdout.splitlines()
    assert "--num-epoch-checkpoints 5" in lines[0] and lines[0].endswith("checkpoint_avg5.pt")
    assert "checkpoints/checkpoint_avg5.pt --gen-subset test" in lines[1]
    assert lines[2].endswith("/twt/seed1/test.score.json")
    last = run_script("evaluate.sh", "gl-en", "twt", "--profile", "cpu-fixed-d128",
                      "--checkpoint", "last", "--dry-run", env=env)  # fmt: skip
    assert "checkpoint_last.pt" in last.stdout and last.stdout.rstrip().endswith(
        "test.last.score.json"
    )
    best = run_script("evaluate.sh", "gl-en", "twt", "--profile", "cpu-converge-d128", "--dry-run",
                      env=env)  # fmt: skip
    assert "checkpoint_best.pt" in best.stdout and best.stdout.rstrip().endswith("/test.score.json")
