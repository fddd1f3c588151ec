"""scripts/gpu_grid.sh: the decisive 2x2 on one GPU machine, many cells at once, in waves of
whole seeds. Its dry run (no GPU needed) and its usage errors; the waves run only on a GPU
machine (benchmarks/results/gpu-check-20261204-h200/README.md)."""

import shlex

import pytest

from conftest import REPO, make_env, out, run_script


def _lines(stdout: str, start: str) -> list:
    return [shlex.split(line[2:]) for line in stdout.splitlines() if line.startswith("+ " + start)]


def test_dry_run_prints_install_data_waves_and_archive(tmp_path):
    p = run_script("gpu_grid.sh", "--dry-run", "--wheels", tmp_path, "--jobs", 8,
                   env=make_env(tmp_path / "work"))  # fmt: skip
    assert p.returncode == 0, out(p)
    pip = _lines(p.stdout, "python3 -m pip install")
    assert pip and pip[0][:9] == ["python3", "-m", "pip", "install", "-q", "--no-index",
                                  "--no-deps", "--no-compile", "--no-cache-dir"]  # fmt: skip
    assert [c[0] for c in _lines(p.stdout, "scripts/")] == [
        "scripts/prepare_data.sh", "scripts/bpe.sh", "scripts/binarize.sh"]  # fmt: skip
    waves = _lines(p.stdout, "timeout")
    assert len(waves) == 2  # the dry run shows two waves, then says more may follow
    first = waves[0][waves[0].index("scripts/ablation.sh") :]
    assert first == ["scripts/ablation.sh", "gl-en", "--profile", "gpu-fixed-d128",
                     "--seeds", "1,2,3,4", "--jobs", "8", "--cells-per-gpu", "8",
                     "--no-significance"]  # fmt: skip
    assert "--seeds" in waves[1] and waves[1][waves[1].index("--seeds") + 1] == "5,6,7,8"
    tar = _lines(p.stdout, "tar")[0]
    assert tar[-2:] == ["results/gpu-fixed-d128/gl-en/records", "runs/gl-en/gpu-fixed-d128"]
    assert "--exclude=checkpoints" in tar


def test_probe_dry_run_times_one_training_then_the_jobs(tmp_path):
    p = run_script("gpu_grid.sh", "--dry-run", "--probe", 264, env=make_env(tmp_path))
    assert p.returncode == 0, out(p)
    train = _lines(p.stdout, "scripts/train.sh")
    assert train == [["scripts/train.sh", "gl-en", "twt", "--profile", "gpu-fixed-d128",
                      "--seed", "1001", "--max-update", "264", "--threads", "1"]]  # fmt: skip
    assert "ablation.sh" not in p.stdout


def test_usage_errors_exit_2(tmp_path):
    env = make_env(tmp_path)
    for args, message in ((["--bogus"], "unknown option '--bogus'"),
                          (["--jobs", "0"], "--jobs must be a positive integer"),
                          (["--budget-s", "600", "--hard-s", "500"], "must not exceed"),
                          (["--jobs"], "--jobs needs a value")):  # fmt: skip
        p = run_script("gpu_grid.sh", *args, env=env)
        assert p.returncode == 2 and message in p.stderr, out(p)
    assert (REPO / "scripts" / "gpu_grid.sh").stat().st_mode & 0o111


@pytest.mark.slow
def test_a_bad_profile_or_pair_is_a_usage_error_of_gpu_grid_naming_the_choices(tmp_path):
    """``--profile nope`` and ``--pair xx-yy`` used to pass a dry run (exit 0), and a bad pair
    showed prepare_data.sh's usage: both are checked up front by the config loader, with
    gpu_grid.sh's own usage and the known names."""
    env = make_env(tmp_path)
    for args, bad, known in ((["--profile", "nope"], "unknown profile 'nope'", "gpu-fixed-d128"),
                             (["--pair", "xx-yy"], "unknown pair 'xx-yy'", "gl-en")):  # fmt: skip
        p = run_script("gpu_grid.sh", "--dry-run", *args, env=env)
        assert p.returncode == 2, out(p)
        assert bad in p.stderr and known in p.stderr
        assert p.stderr.startswith("usage: scripts/gpu_grid.sh") and "prepare_data" not in out(p)
        assert "+ " not in p.stdout  # nothing printed as run


def test_no_gpu_fails_before_the_data_and_leaves_no_output(tmp_path):
    """Without a GPU (an nvidia-smi that fails), gpu_grid.sh used to prepare the data first and
    leave an empty OUT/gpu-grid.log: now it fails (exit 1) before any step, creating nothing."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text("#!/bin/sh\necho 'NVIDIA-SMI has failed: no devices were found' >&2\nexit 9\n")
    smi.chmod(0o755)
    env = make_env(tmp_path / "work")
    env["PATH"] = f"{bin_dir}:{env['PATH']}"
    result = tmp_path / "out"
    p = run_script("gpu_grid.sh", "--out", result, env=env)
    assert p.returncode == 1, out(p)
    assert "nvidia-smi failed: no NVIDIA GPU here" in p.stderr
    assert "+ " not in p.stdout  # no step ran: no data preparation
    assert not result.exists() and not (tmp_path / "work").exists()
