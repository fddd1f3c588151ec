"""The LR sweep's size axis: non-embedding parameters, the joined table and figure, and
scripts/lr_sweep.sh --sizes (dry run of the whole grid)."""

import json
import shutil

import pytest

from qknorm_tools.lr_sweep_sizes import main, non_embedding_params, size_axis

from conftest import make_env, out, run_script


def test_non_embedding_params_of_the_proxy_match_a_count_by_hand():
    # d 256, FFN 1024, 3+3 layers: attention 4 (256^2 + 256) = 263,168; FFN 2 * 256 * 1024 +
    # 1024 + 256 = 525,568; encoder layer + 2 LayerNorms (1,024) = 789,760; decoder layer: two
    # attentions 526,336 + FFN + 3 LayerNorms (1,536) = 1,053,440; final norms 1,024
    assert non_embedding_params(256, 3) == 3 * 789_760 + 3 * 1_053_440 + 1_024 == 5_530_624
    assert (
        non_embedding_params(128, 2) < non_embedding_params(256, 3) < non_embedding_params(384, 4)
    )


def _sweep(pair, system_sens, max_logits):
    # a minimal lr_sweep.json: systems with their sensitivity, runs with max attention logits
    systems = [
        {"system": s, "lr_sensitivity": v, "n_runs": 6, "n_diverged": int(v > 1)}
        for s, v in system_sens.items()
    ]
    runs = [
        {"system": s, "lr": lr, "max_attn_logit": m}
        for s, pairs in max_logits.items()
        for lr, m in pairs
    ]
    return {"pair": pair, "systems": systems, "runs": runs}


def test_size_axis_joins_sizes_per_system(tmp_path):
    small = _sweep(
        "gl-en",
        {"twt": 0.5, "qknorm_paper": 0.2},
        {"twt": [(0, 99.0), (1e-3, 11.0), (3e-2, 1.7e4)]},
    )
    large = _sweep(
        "gl-en", {"twt": 1.5, "qknorm_paper": 0.25}, {"twt": [(1e-3, 20.0), (3e-2, float("inf"))]}
    )
    (tmp_path / "a.json").write_text(json.dumps(small))
    res = size_axis({384: large, 128: str(tmp_path / "a.json")}, pair="gl-en")
    assert [s["d"] for s in res["sizes"]] == [128, 384]
    twt = next(s for s in res["systems"] if s["system"] == "twt")
    assert [p["lr_sensitivity"] for p in twt["points"]] == [0.5, 1.5]
    # the lr-0 initial model is not a sweep run; non-finite logits are left out
    assert [p["max_attn_logit"] for p in twt["points"]] == [1.7e4, 20.0]
    assert [p["n_diverged"] for p in twt["points"]] == [0, 1]
    assert twt["points"][0]["non_embedding_params"] == non_embedding_params(128, 2)
    with pytest.raises(Exception, match="size 512: not one of the sweep's widths"):
        size_axis({512: large})
    with pytest.raises(Exception, match="sweep of pair 'gl-en', expected 'sk-en'"):
        size_axis({128: small}, pair="sk-en")


@pytest.mark.slow
def test_cli_writes_table_json_and_figure(tmp_path):
    for d, sens in ((128, 0.4), (256, 0.6)):
        (tmp_path / f"d{d}.json").write_text(
            json.dumps(_sweep("gl-en", {"twt": sens}, {"twt": [(1e-3, 5.0)]}))
        )
    rc = main(["--size", f"128={tmp_path / 'd128.json'}", "--size", f"256={tmp_path / 'd256.json'}",
               "--out-dir", str(tmp_path / "out"), "--pair", "gl-en"])  # fmt: skip
    assert rc == 0
    md = (tmp_path / "out" / "lr_sweep_sizes.md").read_text()
    assert "| twt | 0.400 / 0 of 6 / 5 | 0.600 / 0 of 6 / 5 |" in md
    assert (
        json.loads((tmp_path / "out" / "lr_sweep_sizes.json").read_text())["sizes"][1]["d"] == 256
    )
    assert (tmp_path / "out" / "lr_sweep_sizes.png").stat().st_size > 1000
    assert main(["--size", "12x=foo", "--out-dir", str(tmp_path)]) == 2


@pytest.mark.slow
def test_lr_sweep_sizes_dry_run_prints_the_whole_grid(tmp_path):
    """2 sizes x 1 system x 2 lrs x 1 seed = 4 cells + 2 initial models, each train-only at its
    arch and label, then the per-size reports and the size axis."""
    env = make_env(tmp_path / "work")
    args = ["--sizes", "128,256", "--systems", "twt", "--lrs", "1e-3,1e-2", "--seeds", "1"]
    p = run_script("lr_sweep.sh", "gl-en", *args, "--dry-run", env=env, timeout=600)
    assert p.returncode == 0, out(p)
    text = p.stdout
    assert "4 runs (systems twt; lrs 1e-3 1e-2; seeds 1)" in text
    cells = [line for line in text.splitlines() if line.startswith("# cell ")]
    assert [c.split()[2] for c in cells] == [
        "gl-en/twt/d128/seed1-init", "gl-en/twt/d128/seed1-lr1e-3", "gl-en/twt/d128/seed1-lr1e-2",
        "gl-en/twt/d256/seed1-init", "gl-en/twt/d256/seed1-lr1e-3", "gl-en/twt/d256/seed1-lr1e-2",
    ]  # fmt: skip
    assert "cpu-proxy-fast-max-update-250-d128/twt/seed1-lr1e-2" in text
    assert "cpu-proxy-fast-max-update-250/twt/seed1-lr1e-2" in text  # d 256: the proxy's own label
    trains = [line for line in text.splitlines() if "fairseq-train" in line]
    assert sum("--arch transformer_twt_d128 " in t for t in trains) == 3
    assert sum("--arch transformer_twt_proxy " in t for t in trains) == 3
    assert "scripts/evaluate.sh" not in text and "fairseq-generate" not in text  # dev loss only
    assert "qknorm_tools.lr_sweep_sizes --out-dir" in text and "--size 128=" in text
    assert "lr-bleu" not in text


@pytest.mark.parametrize(
    ("precision", "bf16_env", "suffix", "pinned"),
    [
        ([], None, "", True),  # nothing said: fp32, pinned (not the profile's bf16 "auto")
        (["--precision", "bf16"], None, "-bf16", False),  # said: as said
        ([], "1", "-bf16", False),
    ],
)
@pytest.mark.slow
def test_size_axis_pins_fp32_unless_told(tmp_path, precision, bf16_env, suffix, pinned):
    """The size axis is built over several sittings (machines with and without native bf16):
    fp32 unless --precision or QKNORM_BF16 says otherwise; the one-size sweep keeps the
    profile's choice."""
    env = make_env(tmp_path / "work", QKNORM_BF16=bf16_env)
    args = ["--systems", "twt", "--lrs", "1e-2", "--seeds", "1", *precision, "--dry-run"]
    p = run_script("lr_sweep.sh", "gl-en", "--sizes", "128", *args, env=env, timeout=600)
    assert p.returncode == 0, out(p)
    assert ("size axis: fp32 pinned" in p.stderr) == pinned, p.stderr
    assert f"cpu-proxy-fast-max-update-250-d128/twt/seed1-lr1e-2{suffix}/" in p.stdout
    assert ("--bf16-autocast" in p.stdout) == (suffix == "-bf16")
    if not precision and bf16_env is None:  # without --sizes: nothing pinned
        p = run_script("lr_sweep.sh", "gl-en", *args, env=env, timeout=600)
        assert p.returncode == 0, out(p)
        assert "fp32 pinned" not in p.stderr


@pytest.mark.slow
def test_sizes_refuse_a_profile_with_its_own_model_size(tmp_path):
    """cpu-converge-d128 sets its width in model_flags: --size would give a d384 arch (6 heads)
    with width 128, no model of either size; refused with one line, by train.sh and up front
    by lr_sweep.sh."""
    env = make_env(tmp_path / "work")
    p = run_script("train.sh", "gl-en", "twt", "--profile", "cpu-converge-d128", "--size", "d384",
                   "--dry-run", env=env, timeout=600)  # fmt: skip
    assert p.returncode == 2, out(p)
    assert p.stderr.splitlines()[-1] == (
        "error: --size d384: profile cpu-converge-d128 sets its own model size "
        "(--encoder-embed-dim 128 --decoder-embed-dim 128 --encoder-ffn-embed-dim 512 "
        "--decoder-ffn-embed-dim 512); use a profile without model_flags (cpu-proxy, "
        "cpu-proxy-fast, ...) (scripts/train.sh --help lists every option)"
    )
    # a repeated size is a typo (as a repeated seed): refused, not silently one size
    p = run_script("lr_sweep.sh", "gl-en", "--sizes", "128,384,128", "--dry-run", env=env,
                   timeout=600)  # fmt: skip
    assert p.returncode == 2, out(p)
    assert p.stderr.splitlines()[-1] == (
        "error: bad --sizes list '128,384,128': 128 is given twice "
        "(scripts/lr_sweep.sh --help lists every option)"
    )
    args = ["--profile", "cpu-converge-d128", "--systems", "twt", "--lrs", "1e-3", "--seeds", "1"]
    p = run_script("lr_sweep.sh", "gl-en", "--sizes", "128", *args, "--dry-run", env=env,
                   timeout=600)  # fmt: skip
    assert p.returncode == 2, out(p)
    assert p.stderr.splitlines()[-1].startswith(
        "error: --sizes: profile cpu-converge-d128 sets its own model size"
    )
    assert "# cell " not in p.stdout  # refused before any cell
    # the one-size sweep of a profile with an lr floor (--stop-min-lr 3e-5): its initial model
    # (one update at lr 0) turns the floor off, the swept cells keep it
    p = run_script("lr_sweep.sh", "gl-en", *args, "--dry-run", env=env, timeout=600)
    assert p.returncode == 0, out(p)
    trains = [line for line in p.stdout.splitlines() if "fairseq-train" in line]
    init = [t for t in trains if "--lr 0 " in t]
    assert len(init) == 1 and len(trains) == 2, trains
    assert init[0].endswith("--warmup-init-lr 0 --no-save-optimizer-state --stop-min-lr -1")
    (cell,) = [t for t in trains if t not in init]
    assert "--stop-min-lr 3e-5" in cell and "--stop-min-lr -1" not in cell


@pytest.mark.slow
def test_tiny_real_sweep_over_two_sizes(tmp_path):
    """scripts/lr_sweep.sh --sizes 128,256 for real on tiny generated data: 1 system x 2 lrs x
    1 seed x 2 sizes, 5 updates per run, two at a time; each size's report, no decoding, and the
    size axis made from them."""
    from conftest import make_tiny_ted

    make_tiny_ted(tmp_path / "data_in", sizes=(300, 30, 37))
    env = make_env(tmp_path / "work", QKNORM_DATA_DIR=tmp_path / "data_in")
    args = ["gl-en", "--sizes", "128,256", "--systems", "twt", "--lrs", "1e-3,1e-2"]
    args += ["--seeds", "1", "--max-update", "5", "--jobs", "2"]
    p = run_script("lr_sweep.sh", *args, env=env, timeout=900)
    assert p.returncode == 0, out(p)[-4000:]
    work = tmp_path / "work"
    runs = work / "runs/gl-en"
    for label in ("cpu-proxy-fast-max-update-5-d128", "cpu-proxy-fast-max-update-5"):
        for name in ("seed1", "seed1-lr1e-2"):
            run = runs / label / "twt" / name
            assert (run / "train.json").is_file(), run
            assert not (run / "test.hyp").exists()  # dev loss only
    log = (runs / "cpu-proxy-fast-max-update-5-d128/twt/seed1/train.log").read_text()
    assert "transformer_twt_d128" in log
    res = work / "results/cpu-proxy-fast-max-update-5/gl-en/lr-sweep"
    sizes = json.loads((res / "lr_sweep_sizes.json").read_text())
    assert [s["d"] for s in sizes["sizes"]] == [128, 256]
    (twt,) = sizes["systems"]
    for point, d in zip(twt["points"], ("d128", "d256")):
        per_size = json.loads((res / d / "lr_sweep.json").read_text())
        assert point["lr_sensitivity"] == per_size["systems"][0]["lr_sensitivity"]
    assert (res / "lr_sweep_sizes.png").stat().st_size > 10_000
    # every cell left a committed record (the initial models too): with runs/ gone (a new
    # sitting on another machine) the same command trains nothing and reports the same
    records = sorted(p.parent for p in (work / "results").glob("*/gl-en/records/*/*/record.json"))
    assert len(records) == 2 * (1 + 2), records  # per size: the lr-0 initial model + 2 lrs
    before = {d: json.loads((res / d / "lr_sweep.json").read_text()) for d in ("d128", "d256")}
    shutil.rmtree(runs)
    p = run_script("lr_sweep.sh", *args, env=env, timeout=900)
    assert p.returncode == 0, out(p)[-4000:]
    assert p.stderr.count("has a committed record, not trained again") == 6, out(p)[-4000:]
    assert not runs.exists() or not list(runs.glob("*/*/*/train.json"))  # nothing trained
    for d, want in before.items():
        got = json.loads((res / d / "lr_sweep.json").read_text())
        assert got["systems"] == want["systems"], d
    assert json.loads((res / "lr_sweep_sizes.json").read_text()) == sizes
