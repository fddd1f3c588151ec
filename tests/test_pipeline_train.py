"""The whole pipeline through the real scripts: prepare -> bpe -> binarize -> train a few
updates -> evaluate -> collect (runs.json and the per-run table), on generated data always and
on a slice of the real gl-en corpus when ../shared/data exists."""

import json
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import (
    FAR_BOUND,
    SHARED,
    count_lines,
    make_env,
    make_tiny_ted,
    out,
    prepare_pair,
    run_script,
)

pytestmark = pytest.mark.slow

SYSTEMS = ("twt", "qknorm_paper")


def _run_pipeline(work: Path, data_dir: Path, n_test: int, merges: int):
    env = make_env(work, QKNORM_DATA_DIR=data_dir, OMP_NUM_THREADS=1)
    prepare_pair(env, "--merges", merges)
    stats = json.loads((work / "data/bpe/gl-en/length_stats.json").read_text())
    for system in SYSTEMS:
        p = run_script("train.sh", "gl-en", system, "--max-update", 3, "--threads", 1, env=env)
        assert p.returncode == 0, out(p)
        p = run_script("evaluate.sh", "gl-en", system, "--max-update", 3, "--threads", 1, env=env)
        assert p.returncode == 0, out(p)
    # a budget other than the profile's has its own runs (never the profile's runs/results)
    runs = [work / f"runs/gl-en/cpu-proxy-max-update-3/{s}/seed1" for s in SYSTEMS]
    assert not (work / "runs/gl-en/cpu-proxy").exists()
    for run in runs:
        assert count_lines(run / "test.hyp") == n_test
        score = json.loads((run / "test.score.json").read_text())
        assert score["n_lines"] == n_test
        assert 0.0 <= score["bleu_tok"] <= 100.0 and 0.0 <= score["chrf"] <= 100.0
        assert "tok:none" in score["signatures"]["bleu_tok"]
        train = json.loads((run / "train.json").read_text())
        assert train["updates"] == 3
        assert (train["pair"], train["system"], train["seed"]) == ("gl-en", run.parts[-2], 1)
        assert train["profile"] == "cpu-proxy-max-update-3"
        assert int((run / "wall_seconds").read_text()) == train["wall_seconds"] >= 0
    qk_train = json.loads((runs[1] / "train.json").read_text())
    assert qk_train["qk_norm_length"] == stats["L"]
    # g0 as the model logged it (train.log), not recomputed by the scripts
    assert qk_train["qk_norm_g0"] == pytest.approx(
        math.log2(stats["L"] ** 2 - stats["L"]), abs=1e-4
    )
    assert json.loads((runs[0] / "train.json").read_text())["qk_norm_g0"] is None
    assert "--qk-norm-length" in (runs[1] / "command.txt").read_text()
    assert "--qk-norm-length" not in (runs[0] / "command.txt").read_text()
    # the named arch of the profile, no size flag
    assert "--arch transformer_twt_proxy " in (runs[0] / "command.txt").read_text()
    assert "--encoder-layers" not in (runs[1] / "command.txt").read_text()

    # a finished run is skipped, not retrained
    p = run_script("train.sh", "gl-en", "twt", "--max-update", 3, env=env)
    assert p.returncode == 0 and "skip" in out(p)
    # ... but a run made with other settings is never silently reused, and the hint is right
    p = run_script(
        "train.sh", "gl-en", "twt", "--max-update", 3, "--", "--weight-decay", "0.0001", env=env
    )
    assert p.returncode != 0 and "another command" in out(p)
    # cpu-proxy's bf16 = auto: the command names the precision the run was asked with
    retrain = "scripts/train.sh gl-en twt --profile cpu-proxy --seed 1 --max-update 3"
    assert f"{retrain} --precision fp32 --force" in out(p)

    results = work / "results/cpu-proxy-max-update-3/gl-en"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "qknorm_tools.collect",
            "runs",
            *sum((["--run", str(r)] for r in runs), []),
            "--work-dir",
            str(work),
            "--out-dir",
            str(results),
            "--ref",
            f"gl-en={work}/data/raw/gl-en/test.en",
            "--require-all",
            "--runs-table",
            "demo",
            "--baseline",
            "twt",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=FAR_BOUND,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    table = (results / "demo.md").read_text()
    assert re.search(r"\| twt \| transformer_twt_proxy \| fp32 \| 1 \|", table)
    assert re.search(r"\| qknorm_paper \| transformer_qknorm_paper_proxy \| fp32 \| 1 \|", table)
    summary = json.loads((results / "demo.json").read_text())
    rows = {r["system"]: r for r in summary["runs"]}
    assert rows["twt"]["qk_norm_g_final_mean"] is None
    g = rows["qknorm_paper"]["qk_norm_g_final"]
    assert len(g) == 9  # 3 encoder self + 3 decoder self + 3 encoder-decoder attention modules
    assert (
        abs(rows["qknorm_paper"]["qk_norm_g_final_mean"] - qk_train["qk_norm_g0"]) < 0.1
    )  # 3 updates
    assert rows["twt"]["hyp_path"] == "runs/gl-en/cpu-proxy-max-update-3/twt/seed1/test.hyp"
    doc = json.loads((results / "runs.json").read_text())
    assert doc["work_dir"] == "../../.." and len(doc["runs"]) == 2
    return runs


def test_pipeline_on_generated_data(tmp_path):
    data_dir = tmp_path / "data_in"
    sizes = make_tiny_ted(data_dir, sizes=(300, 30, 37))
    _run_pipeline(tmp_path / "work", data_dir, n_test=sizes["test"], merges=60)


@pytest.mark.skipif(not (SHARED / "ted-gl-en").is_dir(), reason=f"no shared data at {SHARED}")
def test_pipeline_on_real_gl_en_slice(tmp_path):
    """First lines of the real corpus (no SHA256SUMS: a slice is not the published file)."""
    data_dir = tmp_path / "slice"
    (data_dir / "ted-gl-en").mkdir(parents=True)
    sizes = {"train": 600, "dev": 40, "test": 45}
    for split, n in sizes.items():
        for lang in ("gl", "en"):
            lines = (
                (SHARED / "ted-gl-en" / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
            )
            (data_dir / "ted-gl-en" / f"{split}.{lang}").write_text(
                "\n".join(lines[:n]) + "\n", encoding="utf-8"
            )
    runs = _run_pipeline(tmp_path / "work", data_dir, n_test=sizes["test"], merges=200)
    hyp = (runs[0] / "test.hyp").read_text(encoding="utf-8")
    assert "@@" not in hyp  # BPE removed
