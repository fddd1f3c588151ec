"""qknorm_tools.significance: paired tests on too few sentences are refused (``compare``) or
flagged (everywhere), and a system identical to the baseline is named (issue 22: on a 1-sentence
test set ``compare`` printed p(bs) = 0.0010, p(ar) = 0.0001 and a CI of +- 0.00, and comparing a
file with itself gave p = 1.0 without saying why)."""

from __future__ import annotations

import json

from qknorm_tools import evaluate, significance

FEW = (
    "paired tests on 1 sentence, fewer than 300 (the smallest test set on which Koehn 2004 "
    "validated paired bootstrap for BLEU): the p-values and confidence intervals are not reliable"
)


def write(path, lines):
    path.write_text("".join(f"{x}\n" for x in lines), encoding="utf-8")
    return path


def test_minimum_is_koehns_smallest_test_set():
    assert significance.MIN_SIG_LINES == 300


def test_compare_refuses_one_sentence(tmp_path, capsys):
    ref = write(tmp_path / "ref", ["the house is big ."])
    base = write(tmp_path / "base", ["the house is small ."])
    rc = evaluate.main(
        ["compare", "--ref", str(ref), "--baseline", str(base), "--system", str(ref)]
    )
    assert rc == 1  # the data's failure, not a usage error (qknorm_tools.exits)
    assert capsys.readouterr().err == (
        f"error: {ref}: 1 sentence: paired tests need at least 300 (the smallest test set on "
        "which Koehn 2004 validated paired bootstrap for BLEU); --allow-few-lines runs them "
        "anyway, flagged\n"
    )


def test_allowed_few_lines_are_flagged_and_identical_systems_named(tmp_path, capsys):
    ref = write(tmp_path / "ref", ["the house is big ."])
    base = write(tmp_path / "base", ["the house is small ."])
    args = ["compare", "--ref", str(ref), "--baseline", f"base={base}", "--system",
            f"sys={ref}", f"same={base}", "--allow-few-lines", "--n-bootstrap", "100",
            "--n-ar", "100"]  # fmt: skip
    assert evaluate.main(args) == 0
    cap = capsys.readouterr()
    assert cap.out.splitlines()[3:] == [
        "system                           score   delta     95% CI (bootstrap)   p(bs)   p(ar)",
        "base (baseline)                  42.73   +0.00          42.73 ± 0.00*       -       -",
        "sys                             100.00  +57.27         100.00 ± 0.00* 0.0099* 0.0099*",
        "same (identical)                 42.73   +0.00          42.73 ± 0.00* 1.0000* 1.0000*",
        f"* {FEW}",
        "identical to the baseline (every line equal): same; no difference to test",
    ]
    assert (
        "warning: system 'same' is identical to the baseline 'base' (every line equal): there is "
        "no difference to test (p = 1 by definition)\n" in cap.err
    )
    assert f"warning: {FEW}\n" in cap.err
    assert (
        "warning: system 'sys' differs from the baseline on only 1 lines: sacreBLEU's approximate "
        "randomization counts only strictly larger shuffled differences, so ties make its "
        "p-value too small here; p_bs is no better on 1 sentences: neither p-value is evidence\n"
        in cap.err
    )
    assert evaluate.main([*args, "--json"]) == 0
    res = json.loads(capsys.readouterr().out)
    assert (res["n_lines"], res["min_lines"], res["few_lines"]) == (1, 300, True)
    assert [(s["name"], s["identical"], s["n_diff_lines"]) for s in res["systems"]] == [
        ("base", False, 0),
        ("sys", False, 1),
        ("same", True, 0),
    ]


def test_enough_lines_are_not_flagged(tmp_path, capsys):
    refs = [f"sentence {i} about the house ." for i in range(300)]
    hyps = [f"sentence {i} about a house ." if i % 3 else r for i, r in enumerate(refs)]
    res = significance.paired_significance(
        refs, [("base", hyps), ("same", list(hyps))], n_bootstrap=20, n_ar=20
    )
    assert (res["n_lines"], res["few_lines"]) == (300, False)
    assert res["systems"][1]["identical"] is True
    text = significance.format_compare(res)
    assert "*" not in text and "fewer than 300" not in text
    assert "fewer than 300" not in capsys.readouterr().err
    # 299 lines: flagged, and the aggregate / ablation tests carry the flag (few_lines)
    res = significance.paired_significance(
        refs[:299], [("base", hyps[:299]), ("b", refs[:299])], n_bootstrap=20, n_ar=20
    )
    assert res["few_lines"] is True and res["systems"][1]["identical"] is False
