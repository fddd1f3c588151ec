"""qknorm_tools.run: what train.sh decides before training a run, in one process.

The plan's command is :func:`qknorm_tools.commands.train_argv`'s (tests/test_commands.py,
tests/test_golden.py); here what the plan adds: the BPE symbol and L found in the data, the
refusals with their messages and exit statuses, the data identity, the shell output.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from qknorm_tools import commands, config, run
from qknorm_tools.exits import FAILURE, OK, USAGE

from conftest import (
    count_python_starts,
    make_data_chain,
    make_env,
    run_script,
    shell_assignments,
)


def _args(
    work: Path,
    system: str = "qknorm_paper",
    *extra: str,
    dry_run: bool = False,
    profile: str = "cpu-proxy",
) -> list:
    """train-plan as train.sh calls it: its options as given (fp32: nothing measured)."""
    argv = ["train-plan", "--pair", "gl-en", "--system", system, "--profile", profile,
            "--seed", "1", "--precision", "fp32", f"--work-dir={work}",
            f"--data-root={work}/data"]  # fmt: skip
    return argv + (["--dry-run"] if dry_run else []) + (["--", *extra] if extra else [])


def _plan(capsys, argv) -> tuple[int, dict, str, str]:
    rc = run.main(argv)
    cap = capsys.readouterr()
    values = shell_assignments(cap.out) if rc == OK else {}  # read back as bash would
    return rc, values, cap.out, cap.err


def _write_l(work: Path, value) -> None:
    (work / "data/bpe/gl-en/length_stats.json").write_text(json.dumps({"L": value}))


def test_plan_finds_the_datas_bpe_symbol_l_and_identity(tmp_path, capsys):
    data_id = make_data_chain(tmp_path, tool="sentencepiece")
    _write_l(tmp_path, 64)
    rc, v, _, err = _plan(capsys, _args(tmp_path, profile="paper"))  # validation BLEU
    assert (rc, err) == (OK, "")
    assert v["REMOVE_BPE"] == ["sentencepiece"] and v["DATA_ID"] == [data_id]
    assert v["L"] == ["64"]
    assert v["L_NOTE"] == [
        "QKNorm L = 64 (authors' L for gl-en: 79); the model logs its g0 = log2(L^2 - L)"
    ]
    pair = config.load_pair("gl-en")
    profile = config.load_profile("paper", pair)
    r = tmp_path / "runs/gl-en/paper/qknorm_paper/seed1"  # the run of train.sh's options
    assert (v["RUN"], v["LABEL"], v["ARCH"]) == (
        [str(r)],
        ["paper"],
        ["transformer_qknorm_paper_small"],
    )
    expected = commands.train_argv(
        pair, config.load_system("qknorm_paper"), profile,
        repo=config.REPO, data=f"{tmp_path}/data/bin/gl-en", run=r,
        label="paper", arch="transformer_qknorm_paper_small", seed=1,
        max_update=profile.max_update, max_tokens=profile.max_tokens,
        remove_bpe="sentencepiece", qk_norm_length="64",
    )  # fmt: skip
    assert v["CMD"] == expected
    assert v["CMD"][v["CMD"].index("--eval-bleu-remove-bpe") + 1] == "sentencepiece"


def test_dry_run_without_data_shows_the_pairs_tool_and_the_authors_l(tmp_path, capsys):
    rc, v, _, _ = _plan(capsys, _args(tmp_path, dry_run=True))
    assert rc == OK and "DATA_ID" not in v
    assert v["REMOVE_BPE"] == ["subword_nmt"] and v["L"] == ["79"]
    assert v["L_NOTE"][0].endswith("(dry run without data/bpe/gl-en: authors' L shown)")
    rc, v, _, _ = _plan(capsys, _args(tmp_path, "twt", dry_run=True))
    assert rc == OK and v["L"] == [""] and v["L_NOTE"] == [""]  # no QKNorm: no L


def test_missing_or_broken_data_is_named_with_the_step_to_run(tmp_path, capsys):
    rc, _, _, err = _plan(capsys, _args(tmp_path))
    assert rc == FAILURE
    assert f"error: {tmp_path}/data/bpe/gl-en/bpe.json not found: run scripts/bpe.sh gl-en" in err
    make_data_chain(tmp_path)
    rc, _, _, err = _plan(capsys, _args(tmp_path))  # a QKNorm system without length_stats.json
    assert rc == FAILURE and "length_stats.json not found: run scripts/bpe.sh gl-en first" in err
    _write_l(tmp_path, None)
    (tmp_path / "data/bpe/gl-en/length_stats.json").write_text("{")
    rc, _, _, err = _plan(capsys, _args(tmp_path))
    assert rc == FAILURE and err.rstrip().endswith(
        f"error: cannot read L from {tmp_path}/data/bpe/gl-en/length_stats.json"
    )
    _write_l(tmp_path, 64)
    (tmp_path / "data/bin/gl-en/.done").unlink()
    rc, _, _, err = _plan(capsys, _args(tmp_path))
    assert rc == FAILURE
    bin_dir = tmp_path / "data/bin/gl-en"
    assert err == f"error: {bin_dir} is not binarized: run scripts/binarize.sh gl-en first\n"


def test_data_changed_after_binarizing_is_refused(tmp_path, capsys):
    make_data_chain(tmp_path)
    _write_l(tmp_path, 64)
    (tmp_path / "data/raw/gl-en/train.gl").write_text("edited\n")
    rc, _, _, err = _plan(capsys, _args(tmp_path))
    assert rc == FAILURE and "train.gl" in err
    assert err.rstrip().endswith(
        "error: the data of gl-en are not consistent (above); nothing was trained"
    )


def test_settings_that_cannot_work_together_are_refused_by_name(tmp_path, capsys):
    make_data_chain(tmp_path, tool="sentencepiece")
    _write_l(tmp_path, 64)
    rc, _, _, err = _plan(capsys, _args(tmp_path, "qknorm_paper", "--stop-min-lr", "1"))
    assert rc == FAILURE
    lines = err.splitlines()
    what = "profile cpu-proxy (configs/profiles/cpu-proxy.toml) with -- --stop-min-lr 1"
    assert lines[0].startswith(f"error: {what}: ") and "is <= --stop-min-lr" in lines[0]
    assert lines[-1] == "error: refusing to train: settings that cannot work together (above)"


def test_bf16_without_native_bf16_is_refused_before_the_run_exists(tmp_path, capsys, monkeypatch):
    """A new user's trial: --precision bf16 on a CPU without native bf16 passed the plan, then
    fairseq stopped with a traceback after 25 s and train.sh said "rerun to resume". Now the
    plan refuses it (exit 1, before the lock and the run directory); a dry run does not ask, and
    -- --bf16-autocast-allow-emulated trains anyway."""
    from qknorm_tools import run_spec

    make_data_chain(tmp_path)
    why = "this CPU (AMD EPYC) has no native bf16 instructions (looked for avx512_bf16 ...)"
    monkeypatch.setattr(run_spec, "native_bf16", lambda repo: (False, why))
    bf16 = [a if a != "fp32" else "bf16" for a in _args(tmp_path, "twt")]
    rc, _, _, err = _plan(capsys, bf16)
    assert rc == FAILURE and err.splitlines() == [
        f"error: bf16 autocast: {why}; torch would emulate bf16, about 20x slower than fp32 "
        "(benchmarks/README.md): train in fp32 (--precision fp32), or pass -- "
        "--bf16-autocast-allow-emulated to train so anyway"
    ]
    assert not (tmp_path / "runs").exists()
    assert _plan(capsys, [*bf16, "--dry-run"])[0] == OK
    rc, values, _, _ = _plan(capsys, [*bf16, "--", "--bf16-autocast-allow-emulated"])
    assert rc == OK and values["RUN"][0].endswith("/twt/seed1-bf16")


@pytest.mark.parametrize(
    "extra, warning",
    [
        (["--nproc", "4"], "--nproc 4 x 1 thread = 4 threads on 2 CPU cores: they share the cores "
         "and the run is slower, not faster; --nproc 2 keeps one thread a core"),
        (["--threads", "999"], "--threads 999 on 2 CPU cores: they share the cores and the run is "
         "slower, not faster; --threads 2 keeps one thread a core"),
        (["--nproc", "2", "--threads", "4"], "--nproc 2 x 2 threads = 4 threads on 2 CPU cores: "
         "they share the cores and the run is slower, not faster; --threads 1 keeps one thread "
         "a core"),
        (["--threads", "2"], None),
        (["--nproc", "4", "--gpus", "0,1,2,3"], None),
    ],
)  # fmt: skip
def test_more_threads_than_cores_is_said(tmp_path, capsys, monkeypatch, extra, warning):
    """A new user's trial: --nproc 4 on 2 cores, or --threads 999, trained without a word."""
    monkeypatch.setattr(run.os, "sched_getaffinity", lambda pid: {0, 1})
    make_data_chain(tmp_path)
    rc, _, _, err = _plan(capsys, [*_args(tmp_path, "twt", dry_run=True), *extra])
    assert rc == OK, err
    assert [x for x in err.splitlines() if x.startswith("warning")] == (
        [f"warning: {warning}"] if warning else []
    )


def test_the_retrain_hint_keeps_the_arguments_after_the_double_dash(tmp_path, capsys):
    """A second trial: "retrain it with ... --force" dropped the run's -- arguments and
    --threads; copied, it would have overwritten the run with another model."""
    make_data_chain(tmp_path)
    argv = [*_args(tmp_path, "twt", dry_run=True), "--threads", "1", "--", "--dropout", "0.3"]
    rc, values, _, err = _plan(capsys, argv)
    assert rc == OK, err
    assert values["RETRAIN"] == [
        "scripts/train.sh gl-en twt --profile cpu-proxy --seed 1 --precision fp32 --threads 1 "
        "--force -- --dropout 0.3"
    ]


def test_an_unknown_system_is_a_usage_error_on_stdout(tmp_path, capsys):
    rc, _, out, _ = _plan(capsys, _args(tmp_path, "nosuch", dry_run=True))
    assert rc == USAGE and out.startswith("unknown system 'nosuch'")


def test_train_sh_starts_python_once_before_its_lock(tmp_path):
    """train.sh's dry run: the plan (the configuration, the run, its command) in one start."""
    env = make_env(tmp_path)
    log = count_python_starts(env, tmp_path)
    p = run_script("train.sh", "gl-en", "qknorm_paper", "--dry-run", "--precision", "fp32", env=env)
    assert p.returncode == 0, p.stderr
    assert log.read_text().split() == ["qknorm_tools.serve"]


def _finished_run(work: Path, **record) -> Path:
    rec = {"pair": "gl-en", "profile": "cpu-proxy", "system": "twt", "seed": 1,
           "precision": "fp32", "variant": {}, **record}  # fmt: skip
    r = work / "runs/gl-en/cpu-proxy/twt/seed1"
    (r / "checkpoints").mkdir(parents=True)
    (r / "checkpoints/checkpoint_best.pt").write_bytes(b"")
    (r / "train.json").write_text(json.dumps(rec))
    (r / "command.txt").write_text("fairseq-train data\n")
    return r


EXPECTED = {"pair": "gl-en", "profile": "cpu-proxy", "system": "twt", "seed": 1,
            "precision": "fp32", "variant": {}}  # fmt: skip
TRAIN_CMD = "scripts/train.sh gl-en twt --profile cpu-proxy --seed 1"


def _check(work: Path, r: Path, **kw):
    data = work / "data"
    args = dict(train_cmd=TRAIN_CMD, checkpoint=r / "checkpoints/checkpoint_best.pt",
                averaged=False, ref=data / "raw/gl-en/test.en", data_root=data, split="test",
                src="gl", tgt="en")  # fmt: skip
    args.update(kw)
    return run.evaluate_check(r, dict(EXPECTED), **args)


def test_train_claim_records_the_data_and_refuses_other_data_or_another_run(tmp_path):
    data_id = make_data_chain(tmp_path)
    identity = tmp_path / "data/bin/gl-en/identity.json"
    r = tmp_path / "runs/gl-en/cpu-proxy/twt/seed1"
    run.train_claim(r, EXPECTED, identity_file=identity, train_cmd=TRAIN_CMD)
    assert json.loads((r / "data_identity.json").read_text())["data_id"] == data_id
    (r / "data_identity.json").write_text(json.dumps({"data_id": "f" * 64}))
    with pytest.raises(run.PlanError) as e:
        run.train_claim(r, EXPECTED, identity_file=identity, train_cmd=TRAIN_CMD)
    assert e.value.lines[-1] == (
        f"{r} belongs to other data than the current {identity.parent}: retrain it on the "
        f"current data with {TRAIN_CMD} --force (or restore the data it was trained on)"
    )
    (r / "data_identity.json").write_text(json.dumps({"data_id": data_id}))
    (r / "train.json").write_text(json.dumps({**EXPECTED, "seed": 2}))
    with pytest.raises(run.PlanError) as e:
        run.train_claim(r, EXPECTED, identity_file=identity, train_cmd=TRAIN_CMD)
    assert "seed: trained as 2, asked for 1" in e.value.lines[0]
    assert e.value.lines[-1].startswith(f"{r} is not the run of {TRAIN_CMD} (above)")


def test_evaluate_check_in_evaluate_shs_order(tmp_path):
    data_id = make_data_chain(tmp_path, tool="sentencepiece")
    r = _finished_run(tmp_path, seed=2)
    with pytest.raises(run.PlanError) as e:  # another run's record comes first
        _check(tmp_path, r)
    assert "seed: trained as 2, asked for 1" in e.value.lines[0] and e.value.status == 1
    (r / "train.json").write_text(json.dumps(EXPECTED))
    (r / "diverged").write_text("FloatingPointError: Minimum loss scale reached\n")
    with pytest.raises(run.PlanError) as e:
        _check(tmp_path, r)
    assert e.value.status == run.DIVERGED and e.value.lines == ()
    assert (
        e.value.warning
        == f"{r} diverged (FloatingPointError: Minimum loss scale reached): no model to decode"
    )
    (r / "diverged").unlink()
    with pytest.raises(run.PlanError) as e:
        _check(tmp_path, r, checkpoint=r / "checkpoints/checkpoint_last.pt")
    assert e.value.lines == (f"checkpoint {r}/checkpoints/checkpoint_last.pt not found",)
    with pytest.raises(run.PlanError) as e:  # make_data_chain writes no test split
        _check(tmp_path, r)
    ref = tmp_path / "data/raw/gl-en/test.en"
    assert e.value.lines == (f"reference {ref} not found: run scripts/prepare_data.sh gl-en",)
    (r / "data_identity.json").write_text(json.dumps({"data_id": "f" * 64}))
    ref.write_text("a b\n")
    with pytest.raises(run.PlanError) as e:
        _check(tmp_path, r)
    assert f"{r} was trained on data ffffffffffff" in e.value.lines[0]
    assert e.value.lines[-1].startswith("nothing was evaluated: the data of gl-en")
    (r / "data_identity.json").write_text(json.dumps({"data_id": data_id}))
    raw, seg = tmp_path / "data/raw/gl-en", tmp_path / "data/bpe/gl-en"
    (raw / "test.gl").write_text("a b\n")
    for f in ("test.gl", "test.en"):
        (seg / f).write_text("▁a ▁b\n")
    assert _check(tmp_path, r) == {"DATA_ID": data_id, "REMOVE_BPE": "sentencepiece"}
    (seg / "test.gl").write_text("▁a ▁b" + " ▁x" * 1100 + "\n")  # over fairseq's 1024 positions
    with pytest.raises(run.PlanError) as e:
        _check(tmp_path, r)
    assert e.value.lines == ("cannot decode the test split of gl-en (above): nothing was decoded",)


@pytest.mark.slow
def test_train_sh_python_starts(tmp_path, fake_fairseq_train):
    """A real train.sh run (a fake fairseq-train) starts Python twice: its one Python process
    (qknorm_tools.serve: the plan, the claim under the lock and train.json) and the progress
    display; a second call, which skips the finished run, once. (With a real fairseq-train and
    evaluate.sh: tests/test_freshness.py.)"""
    fake_bin, pid_file = fake_fairseq_train
    work = tmp_path / "work"
    make_data_chain(work)
    env = make_env(work, FAKE_TRAIN_PIDS=pid_file, FAKE_TRAIN_SECONDS=0,
                   PATH=f"{fake_bin}:{os.environ['PATH']}")  # fmt: skip
    log = count_python_starts(env, tmp_path)
    p = run_script("train.sh", "gl-en", "twt", "--max-update", 5, env=env)
    assert p.returncode == 0, p.stderr
    assert log.read_text().split() == ["qknorm_tools.serve", "qknorm_tools.progress"]
    assert (work / "runs/gl-en/cpu-proxy-max-update-5/twt/seed1/train.json").is_file()
    log.unlink()
    p = run_script("train.sh", "gl-en", "twt", "--max-update", 5, env=env)
    assert p.returncode == 0 and "skip: " in p.stderr, p.stderr
    assert log.read_text().split() == ["qknorm_tools.serve"]


def test_evaluate_plan_builds_the_run_and_its_commands_then_checks(tmp_path, capsys):
    r = tmp_path / "runs/gl-en/paper/twt/seed1"
    ckpt = f"{r}/checkpoints/checkpoint_avg3.pt"
    opts = ["--pair", "gl-en", "--system", "twt", "--profile", "paper", "--seed", "1",
            "--precision", "fp32", "--checkpoint", "avg3", f"--work-dir={tmp_path}",
            f"--data-root={tmp_path}/data", "--split", "dev"]  # fmt: skip
    rc, v, _, _ = _plan(capsys, ["evaluate-plan", *opts])
    pair = config.load_pair("gl-en")
    profile = config.load_profile("paper", pair)
    assert rc == OK and v["RUN"] == [str(r)] and v["CHECKPOINT"] == [ckpt]
    assert v["TRAIN_CMD"] == [TRAIN_CMD.replace("cpu-proxy", "paper")]
    assert (v["STEM"], v["N_AVERAGE"], v["TWIN_HINT"]) == (["dev.avg3"], ["3"], [""])
    assert v["GEN_CMD"] == commands.generate_argv(
        pair, profile, repo=config.REPO, data=f"{tmp_path}/data/bin/gl-en", checkpoint=ckpt,
        gen_subset="valid", seed=1, label="paper",
    )  # fmt: skip
    assert v["AVG_CMD"] == commands.average_argv(profile, r, 3, ckpt)
    twin = tmp_path / "runs/gl-en/paper/twt/seed1-bf16"
    twin.mkdir(parents=True)
    (twin / "train.json").write_text("{}")
    rc, v, _, _ = _plan(capsys, ["evaluate-plan", *opts])
    assert v["TWIN_HINT"] == [f"; {twin} is finished: --precision bf16 selects it"]
    rc, _, _, err = _plan(capsys, ["evaluate-check", *opts])  # no train.json here
    assert rc == FAILURE and "error: " in err


def test_evaluate_sh_starts_python_once_before_decoding(tmp_path):
    """evaluate.sh up to its checks: its one Python process (qknorm_tools.serve: the plan and
    the checks under the lock; then, decoding, the freshness check, the scoring; the progress
    display is the second start: tests/test_freshness.py)."""
    work = tmp_path / "work"
    make_data_chain(work)
    r = _finished_run(work)
    (r / "data_identity.json").write_text((work / "data/bin/gl-en/identity.json").read_text())
    env = make_env(work)
    log = count_python_starts(env, tmp_path)
    p = run_script("evaluate.sh", "gl-en", "twt", env=env)
    assert p.returncode == 1 and "reference " in p.stderr, p.stderr  # a fake chain: no test set
    assert log.read_text().split() == ["qknorm_tools.serve"]


def test_dev_lines_over_the_commands_smaller_max_positions_are_refused(tmp_path, capsys):
    """-- --max-source-positions 4: fairseq-train would stop at its first validation on a
    longer dev line (a trial saw 'Size of sample #102 is invalid'); refused before training."""
    make_data_chain(tmp_path)
    _write_l(tmp_path, 64)
    raw, seg = tmp_path / "data/raw/gl-en", tmp_path / "data/bpe/gl-en"
    (raw / "dev.gl").write_text("a b\na b c d e f\n")
    (raw / "dev.en").write_text("a\nb\n")
    (seg / "dev.gl").write_text("a b\na b c d e f\n")
    (seg / "dev.en").write_text("a\nb\n")
    small = ("--max-source-positions", "4", "--max-target-positions", "4")
    rc, _, _, err = _plan(capsys, _args(tmp_path, "twt", *small))
    assert rc == FAILURE, err
    assert f"{raw}/dev.gl:2: " in err and "over 3" in err
    assert "train with --max-source-positions 7 or more (after the -- of scripts/train.sh)" in err
    assert err.rstrip().endswith(
        "error: refusing to train: fairseq-train would stop at the first validation (above)"
    )
    rc, _, _, err = _plan(capsys, _args(tmp_path, "twt", "--max-source-positions", "8"))
    assert (rc, err) == (OK, "")
