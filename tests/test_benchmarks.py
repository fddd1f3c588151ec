"""The benchmark harness runs (smoke mode) and produces the expected figures.

No timing assertions: only that every section runs, the JSON has its keys and the numbers
are positive and finite.
"""

import json
import math
import sys

import pytest

from conftest import REPO

if str(REPO) not in sys.path:  # benchmarks/ is not an installed package
    sys.path.insert(0, str(REPO))

from benchmarks import (
    common,  # noqa: E402
    profile_step,  # noqa: E402
)
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
    assert {t["target"].split(" (")[0] for t in res["targets"]} >= {
        "QKNorm training step >= 1.00x stock",
        "model-only >= 60% of fp32 matmul peak",
    }


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
    parsed = bench.parse_train_log(log)
    assert [d["num_updates"] for d in parsed["inner"]] == [10, 20, 30]
    assert parsed["summary"]["wps"] == 1500.1
    assert bench.steady_wps(parsed) == pytest.approx(1900.5)  # first interval dropped
    m = bench.GEN_RE.search(
        "Translated 1,112 sentences (35,210 tokens) in 41.2s (26.99 sentences/s, 854.61 tokens/s)"
    )
    assert m and m.group(1) == "1,112" and float(m.group(5)) == 854.61


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
