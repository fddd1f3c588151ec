"""A run decoded under the wrong name (issue 22): a run directory copied under another
profile label, seed or system is refused by evaluate.sh as by train.sh (one check,
python -m qknorm_tools.run train-claim and evaluate-check)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from qknorm_tools.evaluate import run_identity_mismatches

from conftest import FAR_BOUND, REPO, make_data_chain, make_env, out, run_script


def test_identity_fields_compared():
    rec = {"pair": "gl-en", "profile": "cpu-proxy", "system": "twt", "seed": 1,
           "precision": "fp32", "variant": {"lr": "0.001"}}  # fmt: skip
    assert run_identity_mismatches(rec, dict(rec)) == []
    asked = {**rec, "profile": "cpu-proxy-fast-max-update-60", "seed": 2, "variant": {}}
    assert run_identity_mismatches(rec, asked) == [
        "profile: trained as 'cpu-proxy', asked for 'cpu-proxy-fast-max-update-60'",
        "seed: trained as 1, asked for 2",
        "variant: trained as {'lr': '0.001'}, asked for {}",
    ]
    # a record from before a field was written: that field is not compared
    old = {k: v for k, v in rec.items() if k not in ("precision", "variant")}
    assert run_identity_mismatches(old, {**rec, "precision": "bf16", "variant": {}}) == []


@pytest.mark.slow
def test_a_copied_run_is_never_decoded_under_another_name(tmp_path, fake_fairseq_train):
    fake_bin, pid_file = fake_fairseq_train
    work = tmp_path / "work"
    make_data_chain(work)
    env = make_env(work, FAKE_TRAIN_PIDS=pid_file, FAKE_TRAIN_SECONDS=0,
                   PATH=f"{fake_bin}:{os.environ['PATH']}")  # fmt: skip
    p = run_script("train.sh", "gl-en", "twt", "--max-update", 5, env=env)
    assert p.returncode == 0, out(p)
    runs = work / "runs" / "gl-en"
    run = runs / "cpu-proxy-max-update-5" / "twt" / "seed1"
    assert json.loads((run / "train.json").read_text())["profile"] == "cpu-proxy-max-update-5"
    # the case: copied under cpu-proxy-fast-max-update-60
    copy = runs / "cpu-proxy-fast-max-update-60" / "twt" / "seed1"
    shutil.copytree(run, copy, ignore=shutil.ignore_patterns(".lock"))
    p = run_script("evaluate.sh", "gl-en", "twt", "--profile", "cpu-proxy-fast",
                   "--max-update", 60, env=env)  # fmt: skip
    assert p.returncode == 1, out(p)
    assert (
        f"error: {copy} is another run than the one asked for ({copy}/train.json: profile: "
        "trained as 'cpu-proxy-max-update-5', asked for 'cpu-proxy-fast-max-update-60'): a run "
        "directory copied or renamed is never trained on, decoded or scored under another name"
    ) in p.stderr, p.stderr
    assert (
        f"error: {copy} is not the run of scripts/train.sh gl-en twt --profile "
        "cpu-proxy-fast --seed 1 --max-update 60 --precision fp32 (above)" in p.stderr
    ), p.stderr
    assert not list(copy.glob("test.*"))  # nothing decoded or scored
    # train.sh refuses the same directory (its command check comes first)
    p = run_script("train.sh", "gl-en", "twt", "--profile", "cpu-proxy-fast", "--max-update", 60,
                   env=env)  # fmt: skip
    assert p.returncode == 1 and "was trained with another command" in p.stderr, out(p)
    # another seed's name
    seed2 = run.with_name("seed2")
    shutil.copytree(run, seed2, ignore=shutil.ignore_patterns(".lock"))
    p = run_script("evaluate.sh", "gl-en", "twt", "--max-update", 5, "--seed", 2, env=env)
    assert p.returncode == 1 and "seed: trained as 1, asked for 2" in p.stderr, out(p)
    # the run itself passes the check (and then lacks its checkpoint: a fake training)
    p = run_script("evaluate.sh", "gl-en", "twt", "--max-update", 5, env=env)
    assert p.returncode == 1 and "another run than the one asked for" not in p.stderr, out(p)
    assert f"checkpoint {run}/checkpoints/checkpoint_best.pt not found" in p.stderr


@pytest.mark.slow
def test_the_translate_helper_checks_the_runs_identity(tmp_path):
    """python -m qknorm_model_tools.translate refuses a copied or renamed run as evaluate.sh does
    (the same check: qknorm_tools.evaluate.check_run_identity), before loading it."""
    runs = tmp_path / "runs" / "gl-en"
    run = runs / "cpu-proxy-max-update-5" / "twt" / "seed1"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "checkpoint_best.pt").write_bytes(b"")
    record = {"pair": "gl-en", "profile": "cpu-proxy-max-update-5", "system": "twt", "seed": 1,
              "precision": "fp32", "variant": {}}  # fmt: skip
    (run / "train.json").write_text(json.dumps(record))
    env = make_env(tmp_path)

    def translate(*args):
        return subprocess.run(
            [sys.executable, "-m", "qknorm_model_tools.translate", "gl-en", "twt", *map(str, args)],
            input="ola\n", cwd=REPO, env=env, capture_output=True, text=True, timeout=FAR_BOUND,
        )  # fmt: skip

    for copy, args, field in [
        (runs / "cpu-proxy-fast-max-update-60" / "twt" / "seed1",
         ("--profile", "cpu-proxy-fast", "--max-update", 60),
         "profile: trained as 'cpu-proxy-max-update-5', asked for 'cpu-proxy-fast-max-update-60'"),
        (run.with_name("seed2"), ("--max-update", 5, "--seed", 2),
         "seed: trained as 1, asked for 2"),
        (run.with_name("seed1-bf16"), ("--max-update", 5, "--bf16-autocast"),
         "precision: trained as 'fp32', asked for 'bf16'"),
    ]:  # fmt: skip
        shutil.copytree(run, copy)
        p = translate(*args)
        assert p.returncode == 1, out(p)
        assert p.stderr.splitlines()[-1] == (
            f"error: {copy} is another run than the one asked for ({copy}/train.json: {field}): "
            "a run directory copied or renamed is never trained on, decoded or scored under "
            "another name"
        ), out(p)
        assert not p.stdout
    # the run under its own name passes the check (then fails to load its empty checkpoint,
    # named: torch.load's "Ran out of input")
    p = translate("--max-update", 5)
    assert p.returncode == 1 and "another run than the one asked for" not in p.stderr, out(p)
    assert p.stderr.splitlines()[-1] == (
        f"error: cannot load the checkpoint {run}/checkpoints/checkpoint_best.pt: Ran out of input"
    ), out(p)
