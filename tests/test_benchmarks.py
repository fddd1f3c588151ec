"""The benchmark harness runs (smoke mode) and produces the expected figures.

No timing assertions: only that every section runs, the JSON has its keys and the numbers
are positive and finite.
"""

import collections
import json
import math
import os
import sys
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO

if str(REPO) not in sys.path:  # benchmarks/ is not an installed package
    sys.path.insert(0, str(REPO))

from benchmarks import (
    authors_code,  # noqa: E402
    common,  # noqa: E402
    micro,  # noqa: E402
    options,  # noqa: E402
    profile_e2e,  # noqa: E402
    profile_step,  # noqa: E402
    stats,  # noqa: E402
    summary,  # noqa: E402
)
from benchmarks import e2e as bench_e2e  # noqa: E402
from benchmarks import run as bench  # noqa: E402


def positive(x):
    return isinstance(x, (int, float)) and math.isfinite(x) and x > 0


@pytest.fixture(scope="module")
def in_process(tmp_path_factory):
    out = tmp_path_factory.mktemp("bench") / "smoke.json"
    bench.main(
        [
            "--smoke",
            "--threads",
            "1",
            "--systems",
            "qknorm_paper,twt,stock",
            "--sections",
            "model,bf16,decode,scaling,norms",
            "--out",
            str(out),
        ]
    )
    return json.loads(out.read_text()), out


@pytest.mark.slow
def test_in_process_sections(in_process):
    res, out = in_process
    assert res["errors"] == {}, res["errors"]
    assert out.with_suffix(".md").read_text().startswith("# fairseq_qknorm benchmark")
    m = res["machine"]
    assert m["cpu_model"] and m["torch"] and m["date_utc"] and m["torch_threads"] == 1

    model = res["model"]["smoke"]
    assert positive(model["matmul_peak_gflops"])
    for system in ("qknorm_paper", "twt", "stock"):
        r = model["systems"][system]
        for key in (
            "median_s",
            "tokens_per_s",
            "tgt_tokens_per_s",
            "gflops",
            "fraction_of_matmul_peak",
        ):
            assert positive(r[key]), (system, key)
        assert r["flops_per_step"]["total"] > r["flops_per_step"]["attention"] > 0
    assert set(model["ratios"]) >= {"qknorm_paper/stock", "twt/stock", "qknorm_paper/twt"}
    assert all(positive(v) for v in model["ratios"].values())

    for system, r in res["bf16"]["systems"].items():
        assert r["fp32"]["works"], system
        # autocast bf16 trains on this CPU (emulated where there is no avx512_bf16): a finite
        # loss and gradients, and the same loss as fp32 within bf16's precision (same weights,
        # batch and seed; an untrained model's loss is about log(vocabulary))
        assert r["bf16"]["works"] is True, (system, r["bf16"])
        assert r["bf16"]["loss"] == pytest.approx(r["fp32"]["loss"], rel=0.05), system

    dec = res["decode"]["systems"]
    for system in ("qknorm_paper", "twt", "stock", "qknorm_paper_beamshared"):
        assert positive(dec[system]["incremental"]["tokens_per_s"]), system
    for system in ("qknorm_paper", "twt", "stock"):
        assert positive(dec[system]["generator"]["sentences_per_s"])
        assert dec[system]["generator"]["generated_tokens"] > 0

    rows = res["scaling"]["rows"]
    assert len(rows) == 2
    for r in rows:
        assert set(r["ms"]) == {
            "qknorm_fused",
            "qknorm_explicit",
            "dotprod_fused",
            "dotprod_explicit",
            "stock",
        }
        assert all(positive(v) for v in r["ms"].values())
    assert "growth_vs_prev_len" in rows[1]

    norms = res["norms"]["rows"][0]
    assert positive(norms["scalenorm/layernorm_speed"])
    assert positive(norms["scalenorm/autograd_speed"])
    assert positive(res["norms"]["qk_scale"]["folded/previous_speed"])
    targets = {t["target"].split(" (")[0]: t for t in res["targets"]}
    assert set(targets) >= {
        "QKNorm model-only training step >= 1.00x stock",
        "QKNorm decoding >= 1.00x stock",
        "QKNorm model-only >= 70% of the same run's fp32 matmul peak",
    }
    step = targets["QKNorm model-only training step >= 1.00x stock"]
    # one repetition: figures reported, no verdict; the ratio is the paired one
    assert step["n"] == 1 and step["verdict"].startswith("too few repetitions")
    assert step["median"] == pytest.approx(
        model["systems"]["stock"]["samples_s"][0] / model["systems"]["qknorm_paper"]["samples_s"][0]
    )
    assert model["ratio_stats"]["qknorm_paper/stock"]["values"] == [round(step["median"], 5)]


@pytest.mark.slow
def test_subprocess_sections_on_toy_data(toy_data, tmp_path):
    """A 2-update fairseq-train and fairseq-generate from its checkpoint (one system)."""
    _, bin_dir = toy_data
    out = tmp_path / "sub.json"
    bench.main(
        [
            "--smoke",
            "--threads",
            "1",
            "--systems",
            "qknorm_paper",
            "--sections",
            "e2e,generate",
            "--e2e-data",
            str(bin_dir),
            "--out",
            str(out),
        ]
    )
    res = json.loads(out.read_text())
    assert res["errors"] == {}, res["errors"]
    e2e = res["e2e"]["systems"]["qknorm_paper"]
    assert e2e["runs"][0]["rc"] == 0 and positive(e2e["wps_median"])
    assert positive(e2e["peak_rss_mib"])
    gen = res["generate"]["systems"]["qknorm_paper"]
    assert gen["rc"] == 0, gen.get("error")
    assert gen["sentences"] == 5 and positive(gen["tokens_per_s"])
    assert positive(gen["peak_rss_mib"])


@pytest.mark.slow
def test_targets_command_on_toy_data(toy_data, tmp_path):
    """The README's targets command (``--targets``) for real, at smoke size on the toy
    corpus: model-only (3 systems, 2 sizes' worth of targets at one size), decoding and
    fairseq-train for QKNorm, stock and QKNorm with bucketed batching; every issue-14 target
    is reported with its paired figures (one repetition: no verdict)."""
    _, bin_dir = toy_data
    out = tmp_path / "targets.json"
    bench.main(
        ["--targets", "--smoke", "--threads", "1", "--e2e-data", str(bin_dir), "--out", str(out)]
    )
    res = json.loads(out.read_text())
    assert res["errors"] == {}, res["errors"]
    assert set(res) >= {"model", "decode", "batches", "e2e"} and "generate" not in res
    assert res["machine"]["cpu_model"] and "cpu_family_model" in res["machine"]
    runs = res["e2e"]["systems"]
    assert set(runs) == {"qknorm_paper", "stock", "qknorm_paper+bucketed"} and all(
        r["runs"][0]["rc"] == 0 for r in runs.values()
    )
    wps = {s: runs[s]["runs"][0]["steady_wps"] for s in runs}
    for r in runs.values():  # update 2 of 2 (the first is the warm-up interval)
        assert 0 < r["runs"][0]["model_step_share"] <= 1
        assert r["model_step_share_median"] == r["runs"][0]["model_step_share"]
    assert res["e2e"]["ratio_stats"]["qknorm_paper/stock"]["values"] == [
        round(wps["qknorm_paper"] / wps["stock"], 5)
    ]
    assert "qknorm_paper_beamshared" not in res["decode"]["systems"]
    fb = res["batches"]  # 2 of fairseq's batches of the toy data, every system on each
    assert fb["batches"] == 2 and len(fb["tgt_tokens"]) == 2 and 0 <= fb["target_padding"] < 1
    steps = {s: v["samples_s"] for s, v in fb["systems"].items()}
    assert set(steps) == {"qknorm_paper", "prenorm_fixnorm_layernorm", "stock"}
    pair = fb["ratio_stats"]["qknorm_paper/stock"]["values"]
    assert pair == pytest.approx([b / q for q, b in zip(steps["qknorm_paper"], steps["stock"])],
                                 rel=1e-4)  # fmt: skip
    share = [runs[s]["runs"][0]["model_step_share"] for s in ("qknorm_paper", "stock")]
    (e2e,) = [t for t in res["targets"] if "x the e2e rounds' model-step share" in t["target"]]
    assert e2e["share_ratio"] == pytest.approx(share[0] / share[1])
    assert e2e["values"] == pytest.approx([v * share[0] / share[1] for v in pair], rel=1e-4)
    names = [t["target"] for t in res["targets"]]
    for prefix in (
        "QKNorm model-only training step >= 1.00x stock (`smoke`)",
        "QKNorm model-only training step >= 1.00x stock on fairseq's own batches",
        "QKNorm end-to-end fairseq-train >= 1.00x stock (`smoke`, wps)",
        "QKNorm end-to-end fairseq-train >= 1.00x stock (`smoke`: the model step on fairseq's",
        "QKNorm decoding >= 1.00x stock (SequenceGenerator)",
        "QKNorm decoding >= 1.00x stock (raw incremental loop)",
        "QKNorm model-only >= 70% of the same run's fp32 matmul peak",
        "end-to-end qknorm_paper+bucketed >= 1.4x stock fairseq-train",
        "end-to-end within 15% of model-only on the same batches (qknorm_paper,",
        "end-to-end within 15% of model-only on the same batches (stock,",
    ):
        (t,) = [t for t in res["targets"] if t["target"].startswith(prefix)]
        assert positive(t["median"]) and t["min"] <= t["median"] <= t["max"], t
        assert t["verdict"] == f"too few repetitions (n = {t['n']} < 5)" and t["n"] in (1, 2)
    assert len(names) == len(set(names))
    md = out.with_suffix(".md").read_text()
    assert "| target | median | min-max | bootstrap interval |" in md
    assert "QKNorm itself (the QKNorm model vs the same model with dot-product" in md


def test_parse_fairseq_logs():
    log = (
        "2026-01-01 | INFO | train_inner | epoch 001:     10 / 90 loss=12.1, nll_loss=11.9, "
        "ppl=3800, wps=0, ups=0.5, wpb=3500, bsz=120, num_updates=10, lr=1e-05, gnorm=3.1, "
        "clip=100, train_wall=20, gb_free=None, wall=25\n"
        "2026-01-01 | INFO | train_inner | epoch 001:     20 / 90 loss=11.0, wps=1800.5, "
        "wpb=3400, bsz=110, num_updates=20, train_wall=2, wall=27\n"
        "2026-01-01 | INFO | train_inner | epoch 001:     30 / 90 loss=10.0, wps=2000.5, "
        "wpb=3400, bsz=110, num_updates=30, train_wall=2, wall=29\n"
        "2026-01-01 | INFO | train | epoch 001 | loss 10.5 | wps 1500.1 | wpb 3450 | "
        "num_updates 30 | train_wall 24\n"
    )
    parsed = bench_e2e.parse_train_log(log)
    assert [d["num_updates"] for d in parsed["inner"]] == [10, 20, 30]
    assert parsed["summary"]["wps"] == 1500.1
    assert bench_e2e.steady_wps(parsed) == pytest.approx(1900.5)  # first interval dropped
    m = bench_e2e.GEN_RE.search(
        "Translated 1,112 sentences (35,210 tokens) in 41.2s (26.99 sentences/s, 854.61 tokens/s)"
    )
    assert m and m.group(1) == "1,112" and float(m.group(5)) == 854.61


def test_paired_per_batch_times_every_system_on_each_batch_in_rotated_order():
    """Batch i is trained by every system one right after the other (the order rotated per
    batch, warm-up on the first batch untimed), and the i-th times pair up by batch."""
    calls = []

    def step(name):
        return lambda batch: calls.append((name, batch["id"]))

    steps = {s: step(s) for s in ("a", "b", "c")}
    batches = [{"id": i} for i in range(4)]
    times = common.paired_per_batch(steps, batches, warmup=1)
    assert calls == [("a", 0), ("b", 0), ("c", 0),  # warm-up
                     ("a", 0), ("b", 0), ("c", 0), ("b", 1), ("c", 1), ("a", 1),
                     ("c", 2), ("a", 2), ("b", 2), ("a", 3), ("b", 3), ("c", 3)]  # fmt: skip
    assert {k: len(v) for k, v in times.items()} == {"a": 4, "b": 4, "c": 4}
    assert all(t >= 0 for v in times.values() for t in v)
    with pytest.raises(ValueError, match="at least one batch"):
        common.paired_per_batch(steps, [])


def test_e2e_from_batches_scales_each_pair_by_the_share_ratio():
    """QKNorm/stock end to end = the per-batch step ratio x share_qknorm / share_stock."""
    batches = {"size": "proxy", "ratio_stats": {"qknorm_paper/stock": {"values": [0.9, 1.0, 1.1]}}}
    e2e = {
        "size": "proxy",
        "systems": {
            "qknorm_paper": {"runs": [{"model_step_share": 0.99}, {"model_step_share": 0.97}]},
            "stock": {"runs": [{"model_step_share": 0.96}, {"model_step_share": 0.96}]},
        },
    }
    out = summary.e2e_from_batches(batches, e2e)
    assert out["share_ratio"] == pytest.approx(0.98 / 0.96)
    assert out["values"] == pytest.approx([0.9 * 0.98 / 0.96, 0.98 / 0.96, 1.1 * 0.98 / 0.96],
                                          abs=1e-5)  # fmt: skip
    assert summary.e2e_from_batches({**batches, "size": "small"}, e2e) is None
    assert summary.e2e_from_batches(batches, {"size": "proxy", "systems": {}}) is None


@pytest.mark.slow
def test_batches_section_adds_batches_until_decided_or_its_cap(toy_data, tmp_path):
    """--batches-max above --batches: after the fixed batches, one more paired batch per look
    until QKNorm/stock's verdict is decided (never below 5 batches, where no verdict is given)
    or the cap; every added batch is in the figures, and the report says how it stopped."""
    _, bin_dir = toy_data
    out = tmp_path / "b.json"
    bench.main(
        ["--smoke", "--threads", "1", "--systems", "qknorm_paper,stock,twt", "--sections",
         "batches", "--e2e-data", str(bin_dir), "--batches", "2", "--batches-max", "6",
         "--batches-budget-s", "inf", "--out", str(out)]
    )  # fmt: skip
    res = json.loads(out.read_text())
    assert res["errors"] == {}, res["errors"]
    fb = res["batches"]
    seq = fb["sequential"]
    assert seq["n"] == fb["batches"] == len(fb["systems"]["stock"]["samples_s"]) in (5, 6)
    assert seq["stopped"] == ("decided" if seq["n"] == 5 else seq["stopped"])
    assert seq["stopped"] in ("decided", "max repetitions")
    # Pocock's looks at 5 and 6 batches, each interval at 1 - 0.0294; the target row is that
    assert seq["looks"] == [5, 6] and seq["confidence"] == pytest.approx(1 - 0.0294)
    (row,) = [t for t in res["targets"] if "on fairseq's own batches" in t["target"]]
    assert (row["ci_low"], row["ci_high"], row["n"]) == (seq["ci_low"], seq["ci_high"], seq["n"])
    # batches are added for QKNorm and stock only: twt keeps the fixed 2
    assert len(fb["systems"]["twt"]["samples_s"]) == fb["systems"]["twt"]["batches"] == 2
    assert fb["ratio_stats"]["twt/stock"]["n"] == 2
    md = out.with_suffix(".md").read_text()
    assert f"stopped ({seq['stopped']}) after {seq['n']} batches, {seq['verdict']} (" in md
    pair = fb["ratio_stats"]["qknorm_paper/stock"]
    assert pair["n"] == seq["n"] and (seq["stopped"] == "max repetitions") == (
        seq["verdict"] == "cannot tell"
    )


def test_flop_count_matches_formula():
    counts = {"encoder": 10, "decoder": 20}
    f = common.train_step_flops(counts, layers=2, dim=4, vocab=8, bsz=3, src_len=5, tgt_len=6)
    assert f["dense"] == 6 * (10 * 15 + 20 * 18)
    assert f["output"] == 6 * 4 * 8 * 18
    assert f["attention"] == 12 * 4 * 3 * 2 * (25 + 36 + 30)
    assert f["total"] == f["dense"] + f["output"] + f["attention"]


def test_profile_step_smoke(tmp_path, capsys):
    out = tmp_path / "prof.json"
    profile_step.main(
        ["--smoke", "--threads", "1", "--systems", "qknorm_paper,stock", "--json", str(out)]
    )
    printed = capsys.readouterr().out
    assert "top 15 ops by self CPU time" in printed
    res = json.loads(out.read_text())["results"]
    assert [r["system"] for r in res] == ["qknorm_paper", "stock"]
    for r in res:
        assert positive(r["total_self_ms"]) and r["top_ops"]
        assert set(r["phases_ms"]) == {"## forward", "## backward", "## optimizer"}


@pytest.mark.parametrize("decode", [False, True])
def test_profile_step_per_op_minimum(tmp_path, capsys, decode):
    """--min-of: per-op minimum thread CPU time over interleaved runs, for a training step
    and for the decoding loop; the l2 norms (QKNorm, FixNorm) appear only for qknorm_paper."""
    out = tmp_path / "opmin.json"
    profile_step.main(
        ["--smoke", "--min-of", "2", "--systems", "qknorm_paper,stock", "--json", str(out)]
        + (["--decode"] if decode else [])
    )
    assert "per-op minimum of 2 interleaved runs" in capsys.readouterr().out
    res = {r["system"]: r for r in json.loads(out.read_text())["results"]}
    for r in res.values():
        assert (
            r["ops"] > 0 and positive(r["sum_of_op_minima_ms"]) and positive(r["whole_run_min_ms"])
        )
        assert r["sum_of_op_minima_ms"] == pytest.approx(sum(r["ops_ms"].values()))
        assert r["sum_of_op_minima_ms"] == pytest.approx(sum(r["categories_ms"].values()))
        assert r["categories_ms"]["matmul"] > 0
    assert res["qknorm_paper"]["ops_ms"]["aten::linalg_vector_norm"] > 0
    assert "aten::linalg_vector_norm" not in res["stock"]["ops_ms"]


def test_memory_child_in_process(capsys):
    """The peak-memory child (run as a subprocess by the ``memory`` section)."""
    from benchmarks import memory_child

    assert (
        memory_child.main(
            [
                "--system",
                "twt",
                "--size",
                "smoke",
                "--batch",
                "2",
                "--src-len",
                "5",
                "--tgt-len",
                "6",
                "--steps",
                "1",
            ]
        )
        == 0
    )
    line = [ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("MEMORY_JSON")]
    mem = json.loads(line[-1].split(" ", 1)[1])
    assert mem["vm_hwm_mib"] >= mem["rss_after_build_mib"] > 0 and mem["params"] > 0


def test_run_with_rusage_reports_child_peak(tmp_path):
    """The child's own peak RSS, not this (large) process's high-water mark."""
    import sys as _sys

    r = common.run_with_rusage(
        [
            _sys.executable,
            "-S",
            "-c",
            "b = bytearray(64 * 2**20); b[::4096] = b'x' * len(b[::4096])",
        ],
        common.cli_env(1),
        tmp_path / "child.log",
    )
    assert r["rc"] == 0
    assert 64 <= r["peak_rss_mib"] < 64 + 60, r


@pytest.mark.parametrize("clamped", [False, True])
def test_previous_implementations_compute_the_plugins_functions(clamped):
    """The benchmarked references compute the plugin's functions (values and gradients, fp32)."""
    import torch

    from benchmarks import candidates
    from fairseq_qknorm.modules import ScaleNorm
    from fairseq_qknorm.modules.qknorm_attention import qk_scaled_queries

    torch.manual_seed(0)
    sn = ScaleNorm(16)
    x = torch.randn(5, 3, 16)
    if clamped:
        x[0, 0] = 1e-7  # norm below eps: clamped branch
    xa, xb = x.clone().requires_grad_(), x.clone().requires_grad_()
    g = sn.scale.detach().clone().requires_grad_()
    ya = sn(xa)
    yb = candidates.scale_norm_autograd(xb, g, sn.eps)
    torch.testing.assert_close(ya, yb)
    dy = torch.randn_like(ya)
    ya.backward(dy)
    yb.backward(dy)
    torch.testing.assert_close(xa.grad, xb.grad)
    torch.testing.assert_close(sn.scale.grad, g.grad)

    q = torch.randn(2, 4, 5, 8)
    if clamped:
        q[0, 0, 0] = 0.0
    gq = torch.tensor(13.0, requires_grad=True)
    qa, qb = q.clone().requires_grad_(), q.clone().requires_grad_()
    oa = candidates.qk_normalize_then_scale(qa, gq)
    ob = qk_scaled_queries(qb, gq)
    torch.testing.assert_close(oa, ob)
    dq = torch.randn_like(oa)
    (ga,) = torch.autograd.grad(oa, qa, dq)
    (gb,) = torch.autograd.grad(ob, qb, dq)
    torch.testing.assert_close(ga, gb)


# ------------------------------------------------------------------ statistics
def test_paired_ratios_pair_repetitions_and_reject_bad_input():
    np = pytest.importorskip("numpy")
    r = stats.paired_ratios([2.0, 4.0, 3.0], [1.0, 5.0, 3.0])
    assert r.tolist() == [2.0, 0.8, 1.0]
    for a, b in (
        ([1.0], [1.0, 2.0]),
        ([], []),
        ([1.0, -1.0], [1.0, 1.0]),
        ([1.0, float("nan")], [1.0, 1.0]),
        ([1.0], [0.0]),
    ):
        with pytest.raises(ValueError):
            stats.paired_ratios(a, b)
    assert isinstance(r, np.ndarray)


def test_bootstrap_interval_of_the_median():
    """n = 5: the 95% interval is exactly [min, max] (P(resampled median = min) = 5.8% > 2.5%);
    n = 9: it drops the extremes but holds the median; seeded: same input, same interval."""
    five = [0.97, 1.02, 0.99, 1.01, 1.00]
    assert stats.bootstrap_median_interval(five) == {"low": 0.97, "high": 1.02}
    nine = [0.90, 0.97, 0.98, 0.99, 1.00, 1.01, 1.02, 1.03, 1.10]
    ci = stats.bootstrap_median_interval(nine)
    assert 0.90 < ci["low"] <= 1.00 <= ci["high"] < 1.10
    assert ci["low"] in nine and ci["high"] in nine
    assert stats.bootstrap_median_interval(nine) == ci
    assert stats.bootstrap_median_interval([1.5]) == {"low": 1.5, "high": 1.5}
    for bad in ([], [1.0, float("inf")]):
        with pytest.raises(ValueError):
            stats.bootstrap_median_interval(bad)
    with pytest.raises(ValueError):
        stats.bootstrap_median_interval(five, confidence=1.0)
    s = stats.ratio_summary(five)
    assert (s["median"], s["min"], s["max"], s["ci_low"], s["ci_high"], s["n"]) == (
        1.00,
        0.97,
        1.02,
        0.97,
        1.02,
        5,
    )


def test_verdicts_only_where_the_interval_excludes_the_threshold():
    assert stats.verdict(1.00, 1.04, 1.0) == "met"  # lower end reaches the threshold
    assert stats.verdict(1.01, 1.04, 1.0) == "met"
    assert stats.verdict(0.90, 0.99, 1.0) == "missed"
    assert stats.verdict(0.90, 1.00, 1.0) == "cannot tell"  # upper end touches it
    assert stats.verdict(0.98, 1.03, 1.0) == "cannot tell"
    with pytest.raises(ValueError):
        stats.verdict(1.1, 1.0, 1.0)
    with pytest.raises(ValueError):
        stats.verdict(float("nan"), 1.0, 1.0)
    five = stats.ratio_summary([0.95, 0.96, 0.97, 0.98, 0.99])
    t = stats.target_entry("x", five, 1.0)
    assert t["verdict"] == "missed" and t["gap"] == pytest.approx(-0.03)
    assert stats.target_entry("x", five, 0.95)["verdict"] == "met"
    assert (
        stats.target_entry("x", stats.ratio_summary([0.9, 1.1]), 1.0)["verdict"]
        == "too few repetitions (n = 2 < 5)"
    )
    assert stats.target_entry("x", None, 1.0)["verdict"] == "not measured"


def test_paired_speed_stats_orientation_and_missing_rounds():
    """Times: qknorm_paper/stock = t_stock / t_qknorm per repetition; throughputs (wps): the
    inverse; a repetition with a missing value (failed run) is left out of the pair."""
    times = {
        "qknorm_paper": [2.0, 1.0, 4.0],
        "stock": [1.0, 1.0, 2.0],
        "prenorm_fixnorm_layernorm": [1.0, None, 2.0],
    }
    st = micro.paired_speed_stats(times)
    assert st["qknorm_paper/stock"]["values"] == [0.5, 1.0, 0.5]
    assert (
        st["qknorm_paper/prenorm_fixnorm_layernorm"]["values"] == [0.5, 0.5]
        and st["qknorm_paper/prenorm_fixnorm_layernorm"]["n"] == 2
    )
    wps = micro.paired_speed_stats(
        {"qknorm_paper": [900.0, 1100.0], "stock": [1000.0, 1000.0]}, throughput=True
    )
    assert wps["qknorm_paper/stock"]["values"] == [0.9, 1.1]
    assert "twt/stock" not in st


def test_targets_preset_and_precedence(tmp_path):
    """--targets: the targets' sections, systems and repetitions; explicit options and
    --smoke's sizes win; given --e2e-data, no data is built."""
    from fairseq_qknorm.tasks.cpu_bf16 import native_bf16_support

    a = options.parse_args(["--targets", "--sections", "model,decode"])
    assert (a.sections, a.systems) == (
        ["model", "decode"],
        ["qknorm_paper", "prenorm_fixnorm_layernorm", "stock"],
    )
    # the opt-in bucketed profile: + bf16 autocast only on a CPU with native bf16
    profile = "qknorm_paper+bucketed" + ("+bf16" if native_bf16_support()[0] else "")
    assert a.e2e_systems == ["qknorm_paper", "stock", profile]
    assert (a.reps, a.min_of, a.decode_reps, a.batches, a.e2e_rounds, a.e2e_updates) == (
        21, 1, 33, 30, 7, 24)  # fmt: skip
    assert (a.sizes, a.batches_max, a.batches_budget_s) == (["small", "proxy"], 240, 300.0)
    data = tmp_path / "bin"
    data.mkdir()
    (data / "train.gl-en.gl.idx").touch()  # a binarized training split (read only by name)
    a = options.parse_args(["--targets", "--smoke", "--e2e-data", str(data), "--reps", "7"])
    assert a.sections == ["model", "decode", "batches", "e2e"] and a.e2e_data == data
    assert (a.reps, a.sizes, a.decode_reps, a.batches, a.e2e_rounds, a.min_of) == (
        7, ["smoke"], 1, 2, 1, 1)  # fmt: skip
    assert a.e2e_systems == ["qknorm_paper", "stock", "qknorm_paper+bucketed"]  # smoke: fp32
    assert a.batches_max == 2  # smoke: no batches added
    a = options.parse_args([])
    assert a.sections == list(options.ALL_SECTIONS) and a.e2e_systems == list(common.SYSTEMS)


# ------------------------------------------------------------------ benchmarks/gpu_check.sh
def test_gpu_check_dry_run_prints_every_command_and_runs_nothing(tmp_path):
    import shlex
    import subprocess

    out = tmp_path / "gpu"
    proc = subprocess.run(
        ["bash", str(REPO / "benchmarks" / "gpu_check.sh"), "--dry-run", "--out", str(out),
         "--wheels", str(tmp_path / "wheels")],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert not out.exists()  # nothing ran, nothing written
    cmds = [shlex.split(line[2:]) for line in proc.stdout.splitlines() if line.startswith("+ ")]
    assert cmds[0][1:6] == ["-m", "pip", "install", "--no-index", "--find-links"]
    assert [c[0] for c in cmds[1:4]] == [
        "scripts/prepare_data.sh", "scripts/bpe.sh", "scripts/binarize.sh"]  # fmt: skip
    train = [c for c in cmds if "benchmarks.gpu_train" in c]
    assert len(train) == 15
    archs = collections.Counter(c[c.index("--arch") + 1] for c in train)
    assert archs == {"transformer_twt_small": 5, "transformer_qknorm_paper_small": 5,
                     "transformer": 5}  # fmt: skip
    for c in train:
        assert c[:3] == ["timeout", "120", c[2]] and c[3:5] == ["-m", "benchmarks.gpu_train"]
        assert c[c.index("--max-tokens") + 1] == "4096"
        assert c[c.index("--max-update") + 1] == "100"
        assert ("--fp16" in c) != ("--bf16-autocast-cuda" in c)
        assert c[c.index("--batching") + 1] in ("fairseq", "bucketed")
        assert "--disable-validation" in c and "--no-save" in c and "--cpu" not in c
        if c[c.index("--arch") + 1] == "transformer":
            assert "--share-all-embeddings" in c and c[c.index("--encoder-embed-dim") + 1] == "512"
        if "qknorm_paper" in c[c.index("--arch") + 1]:
            assert c[c.index("--qk-norm-length") + 1] == "92"
    compiled = [c for c in train if "--torch-compile" in c]
    assert len(compiled) == 3
    assert all("--bf16-autocast-cuda" in c and "bucketed" in c for c in compiled)
    grid = {(c[c.index("--arch") + 1], "--fp16" in c, c[c.index("--batching") + 1])
            for c in train if "--torch-compile" not in c}  # fmt: skip
    assert len(grid) == 12
    assert cmds[-1][1:4] == ["-m", "benchmarks.gpu_check", "report"]


def test_gpu_check_usage_error_exits_2():
    import subprocess

    proc = subprocess.run(["bash", str(REPO / "benchmarks" / "gpu_check.sh"), "--bogus"],
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    assert proc.returncode == 2 and "usage: benchmarks/gpu_check.sh" in proc.stderr


def test_gpu_check_report_from_logs(tmp_path):
    from benchmarks import gpu_check

    lines = [
        '| train_inner | {"epoch": 1, "loss": "9.5", "wps": "1000", "num_updates": "10"}',
        '| train_inner | {"epoch": 1, "loss": "8.5", "wps": "3000", "num_updates": "20"}',
        '| train_inner | {"epoch": 1, "loss": "8.0", "wps": "2000", "num_updates": "30"}',
        "INFO | torch.compile: update 0 compiled 3 graph(s) (3 in all) in a step of 41.5 s",
        "peak_cuda_memory_gib=3.250",
    ]  # fmt: skip
    (tmp_path / "twt-bf16-bucketed.log").write_text("\n".join(lines) + "\n")
    (tmp_path / "twt-bf16-bucketed.status").write_text("ok\n")
    (tmp_path / "stock-fp16-fairseq.log").write_text('| {"loss": "nan", "wps": "5"}\n')
    out = gpu_check.report(tmp_path, "NVIDIA H100 80GB HBM3", vocab=2048, updates=30)
    runs = {r["name"]: r for r in out["runs"]}
    r = runs["twt-bf16-bucketed"]
    # median of the intervals after the first: (3000, 2000) -> the upper middle, 3000
    assert r["wps"] == 3000 and r["losses"] == [9.5, 8.5, 8.0] and r["updates"] == 30
    assert r["peak_mem_gib"] == 3.25 and r["compile_s"] == 41.5 and r["loss_finite"] is True
    # 4+4 layers, d 512, FFN 2048: N_enc = 4 * (4 * 512^2 + 2 * 512 * 2048) = 12,582,912,
    # N_dec = 4 * (8 * 512^2 + 2 * 512 * 2048) = 16,777,216; 6 * (N_enc + N_dec) + 6 * 512 * 2048
    per_token = 6 * (12_582_912 + 16_777_216) + 6 * 512 * 2048
    assert gpu_check.flops_per_target_token(2048) == per_token
    assert r["tflops"] == pytest.approx(3000 * per_token / 1e12)
    assert r["fraction_of_bf16_peak"] == pytest.approx(r["tflops"] / 989.4)
    assert runs["stock-fp16-fairseq"]["loss_finite"] is False
    assert runs["qknorm_paper-fp16-fairseq"]["status"] == "not run"
    assert gpu_check.peak_tflops("NVIDIA H100 PCIe") == 756.0
    assert gpu_check.peak_tflops("NVIDIA GeForce GTX 1080") is None
    md = (tmp_path / "gpu-check.md").read_text()
    assert "| twt-bf16-bucketed | ok | 3000 |" in md
    assert json.loads((tmp_path / "gpu-check.json").read_text())["bf16_peak_tflops"] == 989.4


# ------------------------------------------------------------------ decisive verdicts
def test_block_minima_take_the_least_disturbed_repetition_of_each_block():
    ref = [1.0, 1.3, 1.1, 2.0, 1.05, 1.2, 9.9]  # the 7th (incomplete block) is dropped
    cand = [1.2, 1.1, 1.4, 1.15, 3.0, 1.25, 0.1]
    r, c = stats.block_minima(ref, cand, 3)
    assert r.tolist() == [1.0, 1.05] and c.tolist() == [1.1, 1.15]
    with pytest.raises(ValueError, match="block >= 1"):
        stats.block_minima(ref, cand, 8)
    with pytest.raises(ValueError, match="equally long"):
        stats.block_minima(ref, cand[:3], 2)


def _noisy_ratios(true_ratio, spread, n, seed=0):
    # one-sided interference: each timed entry is its true time times (1 + |noise|)
    rng = np.random.default_rng(seed)
    t_ref = 1.0 * (1 + np.abs(rng.normal(0, spread, n)))
    t_cand = (1.0 / true_ratio) * (1 + np.abs(rng.normal(0, spread, n)))
    return t_ref, t_cand


def test_block_minima_narrow_the_spread_of_noisy_ratios():
    t_ref, t_cand = _noisy_ratios(1.05, 0.10, 60)
    raw = stats.paired_ratios(t_ref, t_cand)
    r, c = stats.block_minima(t_ref, t_cand, 3)
    mins = stats.paired_ratios(r, c)
    assert np.std(mins) < np.std(raw)
    assert abs(np.median(mins) - 1.05) < abs(np.median(raw) - 1.05) + 0.01


def test_sequential_verdict_stops_at_the_first_decisive_look():
    seq = iter([1.10, 1.12, 1.09, 1.11, 1.13, 1.5, 1.5])
    s = stats.sequential_verdict(lambda: next(seq), 1.0, min_n=5)
    assert (s["verdict"], s["stopped"], s["n"]) == ("met", "decided", 5)
    seq = iter([0.90, 0.92, 0.91, 0.89, 0.93])
    s = stats.sequential_verdict(lambda: next(seq), 1.0, min_n=5)
    assert (s["verdict"], s["n"]) == ("missed", 5)


def test_pocock_looks_and_a_group_sequential_verdict_only_at_them():
    """Pocock (1977): K equally spaced looks, each at level POCOCK_ALPHA[K] (0.0182 for 4),
    so that stopping at the first decisive one keeps the overall level near 0.05."""
    assert stats.pocock_looks(30, 240) == ([60, 120, 180, 240], pytest.approx(1 - 0.0182))
    assert stats.pocock_looks(5, 6) == ([5, 6], pytest.approx(1 - 0.0294))
    assert stats.pocock_looks(5, 5) == ([5], pytest.approx(0.95))
    with pytest.raises(ValueError):
        stats.pocock_looks(10, 5)
    # clearly above 1 from the start: not decided before the first look (8), decided there
    calls = []

    def ratio():
        calls.append(1)
        return 1.2 + 0.01 * (len(calls) % 3)

    looks, conf = stats.pocock_looks(5, 16, k=2)
    assert looks == [8, 16]
    s = stats.sequential_verdict(ratio, 1.0, min_n=5, max_n=16, looks=looks, confidence=conf)
    assert (s["verdict"], s["stopped"], s["n"], len(calls)) == ("met", "decided", 8, 8)
    assert s["confidence"] == pytest.approx(1 - 0.0294)
    # never decided: looks at 8 and 16, then the cap
    it = iter([0.95, 1.05] * 20)
    s = stats.sequential_verdict(lambda: next(it), 1.0, min_n=5, max_n=16, looks=looks)
    assert (s["verdict"], s["stopped"], s["n"]) == ("cannot tell", "max repetitions", 16)


def test_sequential_verdict_adds_repetitions_until_decided_or_capped():
    # alternating around the threshold first, then clearly above: decided after 12
    vals = [0.95, 1.05] * 3 + [1.2] * 20
    it = iter(vals)
    s = stats.sequential_verdict(lambda: next(it), 1.0, min_n=5, max_n=25)
    assert s["stopped"] == "decided" and s["verdict"] == "met"
    assert s["n"] == min(
        n for n in range(5, 26)
        if stats.ratio_summary(vals[:n])["ci_low"] >= 1.0
    )  # fmt: skip
    # never decided: stops at max_n with cannot tell
    it = iter([0.95, 1.05] * 20)
    s = stats.sequential_verdict(lambda: next(it), 1.0, min_n=5, max_n=9)
    assert (s["verdict"], s["stopped"], s["n"]) == ("cannot tell", "max repetitions", 9)
    # the time budget: a fake clock advancing 60 s per look
    ticks = iter(range(0, 10000, 60))
    it = iter([0.95, 1.05] * 20)
    s = stats.sequential_verdict(
        lambda: next(it), 1.0, min_n=5, max_n=40, budget_s=400, clock=lambda: next(ticks)
    )
    assert s["stopped"] == "time budget" and s["n"] < 40
    with pytest.raises(ValueError, match="min_n <= max_n"):
        stats.sequential_verdict(lambda: 1.0, 1.0, min_n=5, max_n=3)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sizes", "huge"], "--sizes: unknown size 'huge'"),
        (["--e2e-size", "huge"], "--e2e-size: unknown size 'huge'"),
        (
            ["--sections", "e2e", "--e2e-updates", "3", "--e2e-log-interval", "2"],
            "--e2e-updates 3 is less than twice --e2e-log-interval 2",
        ),
        (["--threads", "0"], "argument --threads: expected a positive integer, got '0'"),
        (["--reps", "-1"], "argument --reps: expected a positive integer, got '-1'"),
        (["--min-of", "x"], "argument --min-of: expected a positive integer, got 'x'"),
        (["--gen-checkpoint", "foo"], "--gen-checkpoint 'foo': expected SYSTEM=PATH"),
        (["--batches-budget-s", "nan"], "argument --batches-budget-s: expected seconds >= 0"),
        (["--batches-budget-s", "-1"], "argument --batches-budget-s: expected seconds >= 0"),
        (
            ["--sections", "batches", "--batches", "2", "--batches-max", "4"],
            "--batches-max 4: adding batches until a verdict needs at least 5",
        ),
        (
            ["--sections", "batches", "--systems", "twt", "--batches-max", "9"],
            "--batches-max 9: batches are added until QKNorm/stock's verdict decides",
        ),
    ],
)
def test_bad_benchmark_arguments_are_usage_errors(args, message, capsys):
    """Refused when parsed (exit 2, the option named), before any section runs: helper-12's
    ``--sizes huge`` ran every other section for minutes and exited 0."""
    with pytest.raises(SystemExit) as e:
        options.parse_args(["--smoke", *args])
    assert e.value.code == 2
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(f"python -m benchmarks.run: error: {message}"), last


@pytest.mark.parametrize(
    "args, message",
    [
        (["--sections", "model,batches"], "--sections batches need binarized data: --e2e-data"),
        (["--sections", "e2e", "--e2e-data", "/nonexistent"], "--e2e-data /nonexistent: no such"),
    ],
)
def test_missing_benchmark_data_is_a_data_failure(args, message, capsys):
    """Data that are not there (a directory named, or not prepared) exit 1, when parsed."""
    with pytest.raises(SystemExit) as e:
        options.parse_args(["--smoke", *args])
    assert e.value.code == 1
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(f"error: {message}"), last


def test_e2e_variants_train_with_the_plugin_task_option(tmp_path, capsys):
    with pytest.raises(SystemExit):  # a directory without a binarized training split
        options.parse_args(["--targets", "--e2e-data", str(tmp_path)])
    assert f"--e2e-data {tmp_path}: no binarized training split" in capsys.readouterr().err
    (tmp_path / "train.gl-en.gl.idx").touch()
    a = options.parse_args(["--targets", "--e2e-data", str(tmp_path)])
    cmd = [str(x) for x in bench_e2e.train_cmd(a, "qknorm_paper+bucketed", tmp_path, 8, "proxy")]
    assert cmd[cmd.index("--task") + 1] == "translation_word_dropout"
    assert cmd[cmd.index("--batching") + 1] == "bucketed"
    assert cmd[cmd.index("--arch") + 1] == "transformer_qknorm_paper_proxy"
    plain = [str(x) for x in bench_e2e.train_cmd(a, "qknorm_paper", tmp_path, 8, "proxy")]
    assert plain[plain.index("--task") + 1] == "translation" and "--batching" not in plain
    assert options.split_variant("twt+bucketed+compile") == (
        "twt", ["--batching", "bucketed", "--torch-compile"])  # fmt: skip
    assert options.split_variant(options.PROFILE_BF16_ENTRY) == (
        "qknorm_paper", ["--batching", "bucketed", "--bf16-autocast"])  # fmt: skip
    # --targets reads the 1.4x target for the profile as it trains: with bf16 autocast only
    # where the CPU has native bf16 (the profile's auto never chooses it elsewhere)
    assert options.target_e2e_systems(False) == ["qknorm_paper", "stock", "qknorm_paper+bucketed"]
    assert options.target_e2e_systems(True) == [
        "qknorm_paper",
        "stock",
        "qknorm_paper+bucketed+bf16",
    ]
    assert "qknorm_paper+bucketed+bf16" not in options.TARGET_PRESET["e2e_systems"]
    with pytest.raises(SystemExit):
        options.parse_args(["--e2e-systems", "twt+bogus"])
    st = micro.paired_speed_stats(
        {"stock": [100.0] * 5, "qknorm_paper": [100.0] * 5,
         "qknorm_paper+bucketed": [150.0, 140.0, 160.0, 150.0, 145.0]}, throughput=True,
    )  # fmt: skip
    assert st["qknorm_paper+bucketed/stock"]["median"] == pytest.approx(1.5)
    assert st["qknorm_paper+bucketed/qknorm_paper"]["median"] == pytest.approx(1.5)
    res = {"e2e": {"size": "proxy", "systems": {"stock": {"runs": []},
                   "qknorm_paper+bucketed": {"runs": []}}, "ratio_stats": st}}  # fmt: skip
    t = [x for x in summary.targets(res) if "qknorm_paper+bucketed >= 1.4x" in x["target"]]
    assert len(t) == 1 and t[0]["threshold"] == 1.4 and t[0]["verdict"] == "met"


@pytest.mark.slow
def test_profile_e2e_timers_count_fairseqs_entry_points(toy_data, tmp_path):
    """``benchmarks.profile_e2e --timers`` on a real 4-update fairseq-train (subprocess: it
    wraps fairseq's classes): one row per role, the calls each entry point got."""
    import re
    import subprocess

    from conftest import PLUGIN_DIR, cli_env, tiny_model, tiny_training

    _, bin_dir = toy_data
    per_update = tmp_path / "updates.json"
    proc = subprocess.run(
        [sys.executable, "-m", "benchmarks.profile_e2e", "--timers", "--updates", "4",
         "--per-update-json", str(per_update), "--",
         str(bin_dir), "--user-dir", str(PLUGIN_DIR), "--arch", "transformer_qknorm_paper",
         "--qk-norm-length", "12", *tiny_model(dropout=None),
         *tiny_training(lr="1e-3", max_tokens="500"), "--max-update", "4",
         "--validate-interval-updates", "2", "--save-interval-updates", "4",
         "--attn-stats-interval", "2", "--required-batch-size-multiple", "1",
         "--no-epoch-checkpoints", "--save-dir", str(tmp_path / "ck"), "--log-interval", "2"],
        capture_output=True, text=True, timeout=600, cwd=REPO, env=cli_env(),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr[-3000:]
    calls = dict(re.findall(r"^\| ([^|]+?) \| (\d+) \|", proc.stdout, re.M))
    assert calls["training steps (Trainer.train_step)"] == "4"
    assert calls["optimizer step (Trainer: optimizer.step)"] == "4"
    assert calls["backward (torch.autograd.backward)"] == "4"
    assert calls["validation (train.py: validate)"] == "2"  # updates 2 and 4
    assert int(calls["checkpoint saving (checkpoint_utils.save_checkpoint)"]) >= 1
    assert int(calls["attention statistics (plugin: _store_stats)"]) > 0
    assert "| per-update rest of train_step" in proc.stdout
    fwd = "forward + loss (task.train_step -> criterion)"
    assert calls[fwd] == "4" and int(calls[fwd + " in validation"]) >= 2
    # per update: its wall time holds its model step; validation (outside updates) not counted
    updates = json.loads(per_update.read_text())["updates"]
    assert len(updates) == 4
    for u, nxt in zip(updates, updates[1:] + [None]):
        assert 0 < u["model_s"] <= u["end"] - u["start"]
        assert nxt is None or nxt["start"] >= u["end"]
    share = profile_e2e.model_step_share(updates, skip=1)
    assert 0 < share < 1  # updates 3 and 4 follow validations (updates 2): time outside steps


def test_model_step_share_of_the_updates_after_the_warm_up():
    """Model step time / wall time from the end of update ``skip`` to the last end."""
    ups = [{"start": 0.0, "end": 5.0, "model_s": 4.0},  # warm-up: left out
           {"start": 5.5, "end": 7.0, "model_s": 1.0},  # 2.0 s of wall since update 1 ended
           {"start": 7.0, "end": 10.0, "model_s": 2.0}]  # fmt: skip
    assert profile_e2e.model_step_share(ups, skip=1) == pytest.approx(3.0 / 5.0)
    assert profile_e2e.model_step_share(ups, skip=2) == pytest.approx(2.0 / 3.0)
    assert profile_e2e.model_step_share(ups, skip=0) == profile_e2e.model_step_share(ups, 1)
    assert profile_e2e.model_step_share(ups, skip=3) is None
    assert profile_e2e.model_step_share(ups[:1], skip=0) is None


def test_authors_code_intervals_as_fairseq_logs_them():
    """The authors' run's ``train_inner`` lines: tokens / wall time since the previous line."""
    lines = authors_code.interval_lines(
        ends=[1.0, 3.0, 4.0, 8.0, 9.0], words=[100, 200, 300, 500, 7], start=0.5, log_interval=2
    )
    assert lines == [
        "train_inner | epoch 001:      2 | wps=120.0, wpb=150.0, num_updates=2",  # 300 / 2.5 s
        "train_inner | epoch 001:      4 | wps=160.0, wpb=400.0, num_updates=4",  # 800 / 5 s
    ]  # update 5 is an incomplete interval: no line
    parsed = bench_e2e.parse_train_log("\n".join(lines))
    assert bench_e2e.steady_wps(parsed) == 160.0  # the first interval is the warm-up


def test_authors_dir_must_hold_the_assembled_code(tmp_path, capsys):
    """--authors-dir names what is missing; without CyndxAI's files (no QKNorm switch) too."""
    with pytest.raises(SystemExit) as e:
        options.parse_args(["--sections", "e2e", "--authors-dir", str(tmp_path)])
    assert e.value.code == 1  # a directory named that is not the authors' code: data
    err = capsys.readouterr().err
    assert f"--authors-dir: {tmp_path}: not the authors' code (missing main.py," in err
    for f in authors_code.REQUIRED_FILES:
        (tmp_path / f).write_text("config = {}\n")
    with pytest.raises(SystemExit):
        options.parse_args(["--sections", "e2e", "--authors-dir", str(tmp_path)])
    assert "configurations.py has no 'mha_sup' (QKNorm)" in capsys.readouterr().err
    (tmp_path / "configurations.py").write_text("config['mha_sup'] = True\n")
    with pytest.raises(SystemExit):
        options.parse_args(["--sections", "model", "--authors-dir", str(tmp_path)])
    assert "timed in the e2e section" in capsys.readouterr().err
    data = tmp_path / "bin" / "gl-en"
    data.mkdir(parents=True)  # data present: the BPE text beside it is checked
    (data / "train.gl-en.gl.idx").touch()
    with pytest.raises(SystemExit):
        options.parse_args(["--sections", "e2e", "--e2e-data", str(data),
                          "--authors-dir", str(tmp_path)])  # fmt: skip
    err = capsys.readouterr().err
    assert f"--authors-bpe {tmp_path / 'bpe' / 'gl-en'}: missing train.gl, train.en, dev.gl" in err
    (tmp_path / "bpe" / "gl-en").mkdir(parents=True)
    for name in authors_code.missing_bpe_files(tmp_path / "bpe" / "gl-en", "gl", "en"):
        (tmp_path / "bpe" / "gl-en" / name).write_text("a b\n")
    a = options.parse_args(["--sections", "e2e", "--e2e-data", str(data),
                          "--authors-dir", str(tmp_path)])  # fmt: skip
    assert a.e2e_systems[-1] == options.AUTHORS_SYSTEM
    assert a.authors_bpe == tmp_path / "bpe" / "gl-en"  # beside the binarized data
    with pytest.raises(SystemExit):
        options.parse_args(["--sections", "e2e", "--authors-dir", str(tmp_path / "nowhere")])
    assert f"--authors-dir: {tmp_path / 'nowhere'}: not a directory" in capsys.readouterr().err


def _toy_bpe_dir(raw: Path, dest: Path) -> Path:
    """The toy corpus as the authors' code reads it: ``{train,dev,test}.{src,tgt}`` in ``dest``."""
    import shutil

    dest.mkdir()
    for lang in ("src", "tgt"):
        for split, name in (("train", "train"), ("valid", "dev"), ("test", "test")):
            shutil.copyfile(raw / f"{split}.{lang}", dest / f"{name}.{lang}")
    return dest


def _fake_authors_dir(root: Path, preprocessing: str, main: str) -> Path:
    """A stand-in for the authors' code whose preprocessing.py and main.py are given."""
    root.mkdir()
    (root / "configurations.py").write_text("def gl2en():\n    return {'mha_sup': True}\n")
    (root / "controller.py").write_text("class Controller:\n    def run_log(self, b, e):\n"
                                        "        pass\n")  # fmt: skip
    (root / "layers.py").write_text("")
    (root / "preprocessing.py").write_text(preprocessing)
    (root / "main.py").write_text(main)
    return root


@pytest.mark.slow
def test_a_failing_authors_run_is_reported_and_not_scored(toy_data, tmp_path):
    """The authors' entry failing (its data preparation; its training after two logged
    intervals) fails alone: ours trains, the failed runs are listed and not scored, and the
    1.5x target is `not measured`."""
    raw, bin_dir = toy_data
    bpe = _toy_bpe_dir(raw, tmp_path / "bpe")
    line = "print('train_inner | epoch 001: 1 | wps=500.0, wpb=10.0, num_updates=1')\n"
    cases = {
        "preparation": _fake_authors_dir(
            tmp_path / "prep", "import sys\nprint('vocab: bad input')\nsys.exit(4)\n", ""
        ),
        "training": _fake_authors_dir(tmp_path / "train", "", line * 2 + "raise SystemExit(3)\n"),
    }
    for case, authors in cases.items():
        out = tmp_path / f"{case}.json"
        rc = bench.main(
            ["--smoke", "--threads", "1", "--systems", "qknorm_paper", "--sections", "e2e",
             "--e2e-data", str(bin_dir), "--authors-dir", str(authors), "--authors-bpe", str(bpe),
             "--out", str(out)]
        )  # fmt: skip
        res = json.loads(out.read_text())
        assert rc == 0 and res["errors"] == {}, res["errors"]
        runs = res["e2e"]["systems"]
        assert positive(runs["qknorm_paper"]["wps_median"])
        theirs = runs[options.AUTHORS_SYSTEM]
        assert theirs["wps_median"] is None and theirs["runs"][0]["steady_wps"] is None
        if case == "preparation":
            assert theirs["failed_runs"][0].startswith("round 1: rc None: data preparation failed")
            assert "preprocessing.py exited 4" in theirs["failed_runs"][0]
            assert "vocab: bad input" in theirs["failed_runs"][0]
        else:  # two logged intervals, then exit 3: not scored
            assert len(theirs["runs"][0]["intervals"]) == 2
            assert theirs["failed_runs"] == ["round 1: rc 3: " + theirs["runs"][0]["error"]
                                             .strip().splitlines()[-1].strip()]  # fmt: skip
        (t,) = [t for t in res["targets"] if "1.5x the QKNorm authors' code" in t["target"]]
        assert t["verdict"] == "not measured"
        md = out.with_suffix(".md").read_text()
        assert "Failed runs (not scored): authors_qknorm round 1: rc " in md


@pytest.mark.skipif(
    not os.environ.get("QKNORM_AUTHORS_DIR"),
    reason="QKNORM_AUTHORS_DIR (the assembled QKNorm authors' code) not set",
)
def test_authors_code_trains_beside_ours_on_toy_data(toy_data, tmp_path):
    """The authors' code for real (2 updates on the toy corpus) in the e2e section, paired with
    ours round by round; the ratio is ours / theirs of the same round."""
    raw, bin_dir = toy_data
    bpe = _toy_bpe_dir(raw, tmp_path / "bpe")
    out = tmp_path / "authors.json"
    bench.main(
        ["--smoke", "--threads", "1", "--systems", "qknorm_paper", "--sections", "e2e",
         "--e2e-data", str(bin_dir), "--authors-dir", os.environ["QKNORM_AUTHORS_DIR"],
         "--authors-bpe", str(bpe), "--out", str(out)]
    )  # fmt: skip
    res = json.loads(out.read_text())
    assert res["errors"] == {}, res["errors"]
    runs = res["e2e"]["systems"]
    theirs = runs[options.AUTHORS_SYSTEM]["runs"][0]
    assert theirs["rc"] == 0, theirs.get("error")
    assert positive(theirs["steady_wps"]) and theirs["model_step_share"] is None
    ours = runs["qknorm_paper"]["runs"][0]["steady_wps"]
    assert res["e2e"]["ratio_stats"][f"qknorm_paper/{options.AUTHORS_SYSTEM}"]["values"] == [
        round(ours / theirs["steady_wps"], 5)
    ]
    (t,) = [t for t in res["targets"] if "1.5x the QKNorm authors' code" in t["target"]]
    assert t["threshold"] == 1.5


def test_per_update_json_in_a_missing_directory_is_refused_before_training(tmp_path, capsys):
    """Refused when parsed (exit 1: a missing directory), not after a whole training run."""
    with pytest.raises(SystemExit) as e:
        profile_e2e.main(["--per-update-json", str(tmp_path / "no" / "u.json"), "--", "data"])
    assert e.value.code == 1
    assert "its directory does not exist" in capsys.readouterr().err
