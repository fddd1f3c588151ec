"""Committed records (qknorm_tools.committed) and how a run record knows how its training
stopped (qknorm_tools.trainlog.stop_reason / dev_curve): a grid built over several sittings.

The unit tests build run directories by hand; the last test runs a real tiny 2x2 ablation
(1+1 layers, d 16, 4 updates, one seed) through scripts/ablation.sh.
"""

import json
import shutil

import pytest

from qknorm_tools import collect, committed, trainlog
from qknorm_tools.records import read_run, write_train_json
from qknorm_tools.scoring import score_lines
from qknorm_tools.textio import ResultsError

from conftest import REPO, make_env, make_tiny_ted, out, prepare_pair, run_script, tiny_model

# ----------------------------------------------------------------------------- stop reasons
HEAD = """\
2026-12-01 10:00:00 | INFO | fairseq_qknorm.models.transformer_qknorm | QKNorm g0 = 10.8 (qk_norm_length L = 43)
2026-12-01 10:00:01 | INFO | fairseq.trainer | begin training epoch 1
2026-12-01 10:00:05 | INFO | train_inner | epoch 001:      5 / 7 loss=9.1, lr=0.005, num_updates=5, wall=4
2026-12-01 10:00:06 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 7.5 | num_updates 7 | best_loss 7.5
2026-12-01 10:00:06 | INFO | train | epoch 001 | loss 8.0 | num_updates 7 | lr 0.01 | wall 6
2026-12-01 10:00:08 | INFO | valid | epoch 002 | valid on 'valid' subset | loss 7.2 | num_updates 14 | best_loss 7.2
2026-12-01 10:00:08 | INFO | train | epoch 002 | loss 7.0 | num_updates 14 | lr 0.01 | wall 8
2026-12-01 10:00:10 | INFO | valid | epoch 003 | valid on 'valid' subset | loss 7.3 | num_updates 21 | best_loss 7.2
2026-12-01 10:00:10 | INFO | train | epoch 003 | loss 6.8 | num_updates 21 | lr 0.01 | wall 10
"""  # noqa: E501
DONE = "2026-12-01 10:00:11 | INFO | fairseq_cli.train | done training in 10.0 seconds\n"
STOPS = {
    "early_stop": "early stop since valid performance hasn't improved for last 3 runs",
    "min_lr": "stopping training because current learning rate (1e-09) is smaller than or "
    "equal to minimum learning rate (--stop-min-lr=1e-09)",
    "max_update": "Stopping training due to num_updates: 21 >= max_update: 21",
}


@pytest.mark.parametrize("reason", sorted(STOPS))
def test_stop_reason_names_fairseqs_rule(reason):
    line = f"2026-12-01 10:00:10 | INFO | fairseq_cli.train | {STOPS[reason]}\n"
    assert trainlog.stop_reason(HEAD + line + DONE) == (reason, STOPS[reason])


def test_stop_reason_max_epoch_interrupted_and_resumed():
    # "done training" alone: the epoch loop ran to --max-epoch
    assert trainlog.stop_reason(HEAD + DONE) == ("max_epoch", "done training in 10.0 seconds")
    # no "done training" after the last statistics line: stopped or killed
    reason, message = trainlog.stop_reason(HEAD)
    assert reason == "interrupted" and message.startswith("train | epoch 003 | loss 6.8")
    # an early stop, then a resumed attempt that trains on and is killed: the last attempt's
    early = f"x | INFO | fairseq_cli.train | {STOPS['early_stop']}\n"
    resumed = HEAD + early + DONE + HEAD.splitlines(True)[2]
    assert trainlog.stop_reason(resumed)[0] == "interrupted"
    assert trainlog.stop_reason("no statistics\n") is None


def test_dev_curve_takes_lr_and_wall_of_the_epoch_end():
    recs = trainlog.parse_log_text(HEAD)
    assert trainlog.dev_curve(recs) == [
        {"epoch": 1, "updates": 7, "loss": 7.5, "lr": 0.01, "wall": 6.0},
        {"epoch": 2, "updates": 14, "loss": 7.2, "lr": 0.01, "wall": 8.0},
        {"epoch": 3, "updates": 21, "loss": 7.3, "lr": 0.01, "wall": 10.0},
    ]
    # a mid-epoch validation: the last train_inner record at or before it
    mid = HEAD.replace("num_updates 7 | best_loss 7.5", "num_updates 6 | best_loss 7.5")
    assert trainlog.dev_curve(trainlog.parse_log_text(mid))[0] == {
        "epoch": 1, "updates": 6, "loss": 7.5, "lr": 0.005, "wall": 4.0,
    }  # fmt: skip
    assert trainlog.epochs_trained(recs) == 3


# ----------------------------------------------------------------------------- records
COMMAND = (
    "/venv/bin/fairseq-train {work}/data/bin/gl-en --user-dir /repo/fairseq_qknorm --arch "
    "transformer_twt_proxy --dropout 0.3 --lr 1e-3 --max-update 21 --seed {seed} "
    "--save-dir {run}/checkpoints --log-format simple --tensorboard-logdir {run}/tensorboard\n"
)


def _run(work, system="twt", seed=1, profile="cpu-converge", data_id="a" * 64, mat="mat"):
    """A finished, scored run directory as scripts/train.sh and evaluate.sh leave it."""
    run = work / "runs" / "gl-en" / profile / system / f"seed{seed}"
    run.mkdir(parents=True)
    log = HEAD + f"x | INFO | fairseq_cli.train | {STOPS['early_stop']}\n" + DONE
    (run / "train.log").write_text("model print\nFutureWarning: noise\n" + log, encoding="utf-8")
    (run / "command.txt").write_text(COMMAND.format(work=work, run=run, seed=seed))
    (run / "data_identity.json").write_text(json.dumps({"data_id": data_id}))
    (run / "cpu_seconds").write_text("12.5\n")
    (run / "wall_seconds").write_text("11\n")
    ident = {"pair": "gl-en", "profile": profile, "system": system, "seed": seed,
             "arch": f"transformer_{system}_proxy", "precision": "fp32"}  # fmt: skip
    write_train_json(run, ident)
    refs = [f"the cat number {i} sat on the mat ." for i in range(10)]
    hyps = [r.replace("mat", mat) if i % 2 else r for i, r in enumerate(refs)]
    (run / "test.hyp").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    (run / "test.score.json").write_text(json.dumps(score_lines(hyps, refs)), encoding="utf-8")
    return run


@pytest.mark.slow
def test_record_is_a_small_run_directory_read_like_the_run(tmp_path):
    run = _run(tmp_path)
    rec_dir = committed.record_dir(tmp_path / "results" / "cpu-converge", "gl-en", run)
    assert rec_dir == tmp_path / "results/cpu-converge/gl-en/records/twt/seed1"
    rec = committed.write_record(run, rec_dir)
    live = read_run(run)
    skip = {"run_dir", "train_log", "hyp_path", "ref_path"}
    assert {k: v for k, v in rec.to_json().items() if k not in skip | {"settings", "code"}} == {
        k: v for k, v in live.to_json().items() if k not in skip
    }
    assert (rec.stop_reason, rec.epochs, rec.cpu_seconds, rec.wall_seconds) == (
        "early_stop", 3, 12.5, 11,
    )  # fmt: skip
    assert (rec.dev_loss_min, rec.best_dev_loss_epoch, rec.best_dev_loss_updates) == (7.2, 2, 14)
    assert [p["loss"] for p in rec.dev_curve] == [7.5, 7.2, 7.3]
    assert rec.qk_norm_g0 == 10.8
    assert sorted(p.name for p in rec_dir.iterdir()) == sorted(
        ["record.json", "train.json", "command.txt", "data_identity.json", "cpu_seconds",
         "wall_seconds", "train.log", "test.hyp", "test.score.json"]
    )  # fmt: skip
    log = (rec_dir / "train.log").read_text()
    assert "model print" not in log and "FutureWarning" not in log and "done training" in log
    doc = json.loads((rec_dir / "record.json").read_text())
    assert doc["record"]["stop_reason"] == "early_stop" and "run_dir" not in doc["record"]
    assert doc["settings"]["--dropout"] == "0.3" and "--seed" not in doc["settings"]
    assert "--save-dir" not in doc["settings"] and set(doc["code"]) == {"commit", "dirty"}
    assert str(tmp_path) not in json.dumps(doc["record"])


def test_a_record_keeps_the_command_without_the_machines_paths(tmp_path):
    """A committed record's command.txt and record.json used to hold the absolute paths of the
    machine that trained it (work dir, repository, virtual environment): they are stored
    relative (data/bin/..., runs/..., fairseq_qknorm, fairseq-train), with the same settings."""
    run = _run(tmp_path)
    rec_dir = committed.record_dir(tmp_path / "results" / "cpu-converge", "gl-en", run)
    committed.write_record(run, rec_dir)
    portable = (
        "fairseq-train data/bin/gl-en --user-dir fairseq_qknorm --arch transformer_twt_proxy "
        "--dropout 0.3 --lr 1e-3 --max-update 21 --seed 1 --save-dir "
        "runs/gl-en/cpu-converge/twt/seed1/checkpoints --log-format simple "
        "--tensorboard-logdir runs/gl-en/cpu-converge/twt/seed1/tensorboard"
    )
    assert (rec_dir / "command.txt").read_text() == portable + "\n"
    doc = json.loads((rec_dir / "record.json").read_text())
    assert doc["command"] == portable
    assert doc["settings"] == committed.command_settings((run / "command.txt").read_text())
    assert str(tmp_path) not in (rec_dir / "record.json").read_text()
    # a path outside the work dir and the repository stays as it is (the test names it)
    assert committed.portable_command("/v/bin/fairseq-train /elsewhere/bin --lr 1") == (
        "fairseq-train /elsewhere/bin --lr 1"
    )


def test_a_decoded_dev_set_travels_with_the_record(tmp_path):
    """evaluate.sh --split dev beside the test decoding: the record keeps dev.hyp and
    dev.score.json, and both the run and its record read the dev BLEU (the ablation's per-run
    table); a run without a decoded dev set has none."""
    run = _run(tmp_path)
    assert read_run(run).dev_bleu_tok is None
    refs = [f"a dog number {i} ran to the park ." for i in range(10)]
    hyps = [r.replace("park", "car") if i % 3 else r for i, r in enumerate(refs)]
    (run / "dev.hyp").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    dev = score_lines(hyps, refs)
    (run / "dev.score.json").write_text(json.dumps(dev), encoding="utf-8")
    rec_dir = committed.record_dir(tmp_path / "results" / "cpu-converge", "gl-en", run)
    rec = committed.write_record(run, rec_dir)
    assert rec.dev_bleu_tok == read_run(run).dev_bleu_tok == dev["bleu_tok"]
    assert 0 < dev["bleu_tok"] < 100 and rec.dev_bleu_tok != rec.bleu_tok
    assert (rec_dir / "dev.hyp").read_text() == (run / "dev.hyp").read_text()
    assert read_run(run, split="dev").dev_bleu_tok is None  # the dev split's own score is bleu_tok


def test_settings_are_the_command_modulo_paths_and_seed(tmp_path):
    a = committed.command_settings(COMMAND.format(work="/w1", run="/w1/r", seed=1))
    b = committed.command_settings(
        "env OMP_NUM_THREADS=1 " + COMMAND.format(work="/w2", run="/x", seed=7)
    )
    assert a == b and a["--arch"] == "transformer_twt_proxy"
    c = committed.command_settings(COMMAND.format(work="/w", run="/r", seed=1) + " --fp16")
    assert committed.settings_difference(a, c) == "--fp16: absent vs True"


def test_a_record_from_before_log_interval_stopped_being_a_setting_still_belongs():
    """The converged grid's committed records (written before issue 37) store --log-interval
    among their settings; the cell's command today gives another interval or none. The
    printing is no setting, so the record still belongs to the grid (seeds 4-10 used to be
    refused at the first recorded cell: "--log-interval: 50 vs absent")."""
    rec_dir = REPO / "results/cpu-converge-d128/gl-en/records/twt/seed1"
    stored = json.loads((rec_dir / "record.json").read_text())["settings"]
    assert stored["--log-interval"] == "50"
    rec = committed.read_record(rec_dir)
    assert rec.extra["settings"] == stored  # kept as written: runs.json rebuilds byte for byte
    now = {k: v for k, v in stored.items() if k != "--log-interval"}
    committed.check_record(rec, settings=now)
    with pytest.raises(ResultsError, match=r"made with other settings: --lr: 2e-3 vs 1e-3"):
        committed.check_record(rec, settings={**now, "--lr": "1e-3"})


@pytest.mark.parametrize(
    "kind, message",
    [
        ("profile", "profile 'cpu-proxy', not 'cpu-converge': another profile"),
        ("data", "data_id bbbbbbbbbbbb differs from the current data aaaaaaaaaaaa"),
        ("settings", "made with other settings: --dropout: 0.1 vs 0.3"),
    ],
)
def test_a_record_of_other_data_settings_or_profile_is_refused(kind, message, tmp_path):
    kw = {"profile": {"profile": "cpu-proxy"}, "data": {"data_id": "b" * 64}}.get(kind, {})
    run = _run(tmp_path, **kw)
    if kind == "settings":
        cmd = run / "command.txt"
        cmd.write_text(cmd.read_text().replace("--dropout 0.3", "--dropout 0.1"))
    rec_dir = tmp_path / "rec"
    committed.write_record(run, rec_dir)
    now = COMMAND.format(work="/elsewhere", run="/r", seed=1)
    args = ["check", str(rec_dir), "--profile", "cpu-converge", "--command", now]
    ident = tmp_path / "identity.json"
    ident.write_text(json.dumps({"data_id": "a" * 64}))
    with pytest.raises(ResultsError) as err:
        rec = committed.read_record(rec_dir)
        committed.check_record(rec, "cpu-converge", "a" * 64, committed.command_settings(now))
    assert str(rec_dir / "record.json") in str(err.value) and message in str(err.value)
    assert committed.main([*args, "--data-identity", str(ident)]) == 1


def test_collect_merges_records_refusing_a_record_that_differs_from_its_run(tmp_path, capsys):
    runs = [_run(tmp_path, s, seed) for s in ("twt", "qknorm_paper") for seed in (1, 2)]
    root = tmp_path / "results" / "cpu-converge"
    base = ["runs", "--work-dir", str(tmp_path), "--records-root", str(root), "--profile",
            "cpu-converge", "--aggregate", "--baseline", "twt", "--no-significance"]  # fmt: skip
    live_out, rec_out = tmp_path / "live", tmp_path / "fromrec"
    argv = [*base, "--out-dir", str(live_out), "--write-records"]
    assert collect.main(argv + [x for r in runs for x in ("--run", str(r))]) == 0
    assert len(list(root.glob("gl-en/records/*/seed*/record.json"))) == 4
    # a fresh clone: no runs/, the same tables from the records alone
    shutil.move(tmp_path / "runs", tmp_path / "runs.gone")
    argv = [*base, "--out-dir", str(rec_out)]
    assert collect.main(argv + [x for r in runs for x in ("--run", str(r))]) == 0
    assert "4 from committed records" in capsys.readouterr().err
    for name in ("aggregate.md", "aggregate.csv", "aggregate.json"):
        assert (rec_out / name).read_bytes() == (live_out / name).read_bytes(), name
    # a live run that differs from its committed record: an error naming both
    shutil.move(tmp_path / "runs.gone", tmp_path / "runs")
    (runs[0] / "test.hyp").write_text((runs[0] / "test.hyp").read_text().replace("cat", "dog"))
    assert collect.main([*base, "--out-dir", str(rec_out), "--run", str(runs[0])]) == 1
    err = capsys.readouterr().err
    assert str(root / "gl-en/records/twt/seed1/record.json") in err
    assert "differs from the live run" in err and "the hypotheses (test.hyp) differ" in err


def test_an_unscored_cell_leaves_a_record_read_back_from_its_own_label(tmp_path, capsys):
    """A cell that is trained only (the LR sweep's size axis, its lr-0 initial models) leaves a
    record too ("scored": false); --records-base finds each run's record under its own label
    (results/LABEL/...) and refuses one filed under another label."""
    trained = _run(tmp_path, profile="cpu-proxy-fast-max-update-5-d128")
    init = _run(tmp_path, profile="cpu-proxy-fast-max-update-1-d128")
    for run in (trained, init):
        (run / "test.hyp").unlink()
        (run / "test.score.json").unlink()
    with pytest.raises(ResultsError, match="is not a finished, scored run: no test.score.json"):
        committed.write_record(trained, tmp_path / "nowhere")
    base = ["runs", "--work-dir", str(tmp_path), "--keep-unscored", "--records-base",
            str(tmp_path / "results")]  # fmt: skip
    runs = [x for r in (trained, init) for x in ("--run", str(r))]
    assert collect.main([*base, "--out-dir", str(tmp_path / "live"), "--write-records", *runs]) == 0
    rec_dir = tmp_path / "results/cpu-proxy-fast-max-update-5-d128/gl-en/records/twt/seed1"
    doc = json.loads((rec_dir / "record.json").read_text())
    assert doc["scored"] is False and not (rec_dir / "test.hyp").exists()
    rec = committed.read_record(rec_dir)
    assert (rec.hyp_path, rec.bleu_tok, rec.dev_loss_min) == (None, None, 7.2)
    assert (tmp_path / "results/cpu-proxy-fast-max-update-1-d128/gl-en/records/twt/seed1").is_dir()
    shutil.move(tmp_path / "runs", tmp_path / "runs.gone")  # a new sitting: records only
    assert collect.main([*base, "--out-dir", str(tmp_path / "rec"), *runs]) == 0
    assert "2 from committed records" in capsys.readouterr().err
    live = json.loads((tmp_path / "live/runs.json").read_text())
    again = json.loads((tmp_path / "rec/runs.json").read_text())
    assert [r["dev_loss"] for r in again["runs"]] == [r["dev_loss"] for r in live["runs"]]
    # a record filed under another label than its run's: refused, naming it
    other = tmp_path / "results/cpu-proxy-fast-max-update-5-d128/gl-en/records/twt/seed1"
    shutil.copytree(other, tmp_path / "results/x-d128/gl-en/records/twt/seed1")
    moved = tmp_path / "runs/gl-en/x-d128/twt/seed1"
    assert collect.main([*base, "--out-dir", str(tmp_path / "x"), "--run", str(moved)]) == 1
    err = capsys.readouterr().err
    assert "profile 'cpu-proxy-fast-max-update-5-d128', not 'x-d128'" in err, err


def test_collect_refuses_records_made_with_other_settings_than_the_runs(tmp_path, capsys):
    r1, r2 = _run(tmp_path, seed=1), _run(tmp_path, seed=2)
    root = tmp_path / "results" / "cpu-converge"
    committed.write_record(r2, committed.record_dir(root, "gl-en", r2))
    shutil.rmtree(r2)  # seed 2 only as a record, made with --dropout 0.3; seed 1 live with 0.1
    cmd = r1 / "command.txt"
    cmd.write_text(cmd.read_text().replace("--dropout 0.3", "--dropout 0.1"))
    argv = ["runs", "--work-dir", str(tmp_path), "--records-root", str(root), "--out-dir",
            str(tmp_path / "out"), "--run", str(r1), "--run", str(r2)]  # fmt: skip
    assert collect.main(argv) == 1
    err = capsys.readouterr().err
    assert str(root / "gl-en/records/twt/seed2/record.json") in err
    assert "made with other settings than" in err and "--dropout: 0.3 vs 0.1" in err


# ----------------------------------------------------------------------------- the real grid
TINY = tiny_model()
ABL = ["gl-en", "--seeds", "1", "--profile", "cpu-proxy-fast", "--max-update", "4"]


@pytest.mark.slow
def test_ablation_rebuilds_from_records_and_trains_nothing(tmp_path):
    """A tiny 2x2 (4 cells, 1 seed, 4 updates): its records hold the tables; a later sitting
    without runs/ trains nothing, rebuilds byte-equal tables and lists the records; a record
    made with other settings is refused before anything trains."""
    make_tiny_ted(tmp_path / "data_in")
    work = tmp_path / "work"
    # QKNORM_DEV_BLEU=1: each cell also decodes the dev set, as the cpu-converge profiles do
    env = make_env(work, QKNORM_DATA_DIR=tmp_path / "data_in", OMP_NUM_THREADS=1,
                   QKNORM_DEV_BLEU=1)  # fmt: skip
    prepare_pair(env, "--merges", 60)
    dry = run_script("ablation.sh", *ABL, "--dry-run", "--", *TINY, env=env)
    assert dry.returncode == 0, out(dry)
    assert dry.stdout.count("--split dev") == 4  # one dev decoding per cell
    p = run_script("ablation.sh", *ABL, "--jobs", 2, "--", *TINY, env=env, timeout=1200)
    assert p.returncode == 0, out(p)
    res = work / "results" / "cpu-proxy-fast-max-update-4" / "gl-en"
    recs = sorted(res.glob("records/*/seed1/record.json"))
    for r in recs:  # the dev set's score travels with the record, into the per-run table
        dev = json.loads((r.parent / "dev.score.json").read_text())
        assert json.loads(r.read_text())["record"]["dev_bleu_tok"] == dev["bleu_tok"]
    runs = json.loads((res / "ablation.json").read_text())["runs"]
    assert len(runs) == 4 and all(x["dev_bleu_tok"] is not None for x in runs)
    assert [r.parent.parent.name for r in recs] == sorted(
        ["prenorm_fixnorm_layernorm", "qknorm_paper", "twt", "scalenorm_qknorm"]
    )
    for r in recs:  # small: no checkpoints, no TensorBoard
        assert sum(f.stat().st_size for f in r.parent.iterdir()) < 200_000
        assert json.loads(r.read_text())["record"]["stop_reason"] == "max_update"
    tables = {n: (res / n).read_bytes() for n in ("aggregate.md", "aggregate.json",
                                                    "ablation.md", "ablation.json")}  # fmt: skip

    shutil.rmtree(work / "runs")  # a later sitting on a fresh clone: records, no runs
    p = run_script("ablation.sh", *ABL, "--status", "--", *TINY, env=env)
    assert p.returncode == 0, out(p)
    rows = [line.split() for line in p.stdout.splitlines() if line.startswith("record ")]
    assert sorted(r[1] for r in rows) == sorted(
        f"gl-en/{s}/seed1" for s in ("prenorm_fixnorm_layernorm", "qknorm_paper", "twt",
                                     "scalenorm_qknorm")
    )  # fmt: skip
    assert p.stdout.splitlines()[-1] == (
        "4 cells: 0 done, 0 running, 0 pending, 0 failed, 0 todo, 4 committed records"
    )
    dry = run_script("ablation.sh", *ABL, "--dry-run", "--", *TINY, env=env)
    assert dry.returncode == 0, out(dry)
    assert (
        "# cell " not in dry.stdout and "fairseq-train" not in dry.stdout.split("# collection")[0]
    )
    p = run_script("ablation.sh", *ABL, "--", *TINY, env=env, timeout=600)
    assert p.returncode == 0, out(p)
    assert out(p).count("has a committed record, not trained again") == 4
    assert not (work / "runs").exists()  # nothing trained, nothing decoded
    for name, data in tables.items():
        assert (res / name).read_bytes() == data, name

    # the same grid with other settings (-- --dropout 0.2): refused, naming the record file
    p = run_script("ablation.sh", *ABL, "--", *TINY, "--dropout", "0.2", env=env)
    assert p.returncode != 0
    assert "records/prenorm_fixnorm_layernorm/seed1/record.json: made with other settings" in out(p)
    assert "--dropout: 0 vs 0.2" in out(p) and not (work / "runs").exists()


@pytest.mark.slow
def test_dry_run_before_the_data_skips_a_recorded_cell_and_says_when_it_is_checked(tmp_path):
    """On a fresh clone before any data step, a dry run lists the grid without the recorded
    cell (its check needs the data: the command would show the authors' L)."""
    rec = tmp_path / "results/cpu-proxy-fast/gl-en/records/twt/seed1"
    rec.mkdir(parents=True)
    (rec / "record.json").write_text("{}")
    env = make_env(tmp_path)
    p = run_script("ablation.sh", "gl-en", "--seeds", "1", "--dry-run", env=env)
    assert p.returncode == 0, out(p)
    cells = [line.split()[2] for line in p.stdout.splitlines() if line.startswith("# cell ")]
    assert cells == ["gl-en/prenorm_fixnorm_layernorm/seed1", "gl-en/qknorm_paper/seed1",
                     "gl-en/scalenorm_qknorm/seed1"]  # fmt: skip
    assert f"skip: cell gl-en/twt/seed1 has a committed record ({rec}), checked once" in p.stderr
    # --status reads the record as collect would: "{}" without its files is refused
    s = run_script("ablation.sh", "gl-en", "--seeds", "1", "--status", env=env)
    assert s.returncode == 1, out(s)
    assert s.stdout.splitlines()[-1] == (
        "4 cells: 0 done, 0 running, 0 pending, 0 failed, 3 todo, 0 committed records, "
        "1 refused records"
    )
    assert f"(refused: {rec} is not a finished run: no train.json, " in s.stdout


# ----------------------------------------------------------------------------- sound records
def _recorded(work, system, seed):
    """A finished run's committed record where a grid files it; the run itself removed."""
    run = _run(work, system, seed)
    rec = committed.record_dir(work / "results" / "cpu-converge", "gl-en", run)
    committed.write_record(run, rec)
    shutil.rmtree(run)
    return rec


def test_a_record_cut_short_edited_or_misfiled_is_refused_naming_its_file(tmp_path):
    """issue 37: what collect reads must be the record that was written: a train.log cut short,
    a record.json cut short, a seed edited by hand, a record copied under another seed."""
    cut = _recorded(tmp_path, "twt", 1)
    log = cut / "train.log"
    log.write_text(log.read_text()[: len(log.read_text()) // 2])
    with pytest.raises(ResultsError) as err:
        committed.read_record(cut)
    assert str(err.value).startswith(
        f"{cut / 'record.json'}: its files do not give the record it stores: "
    ) and "(a file cut short or edited?)" in str(err.value)

    doc = _recorded(tmp_path, "twt", 2) / "record.json"
    doc.write_text(doc.read_text()[:100])
    with pytest.raises(ResultsError, match="is not valid UTF-8 JSON"):
        committed.read_record(doc.parent)

    edited = _recorded(tmp_path, "qknorm_paper", 1)
    train = json.loads((edited / "train.json").read_text())
    (edited / "train.json").write_text(json.dumps({**train, "seed": 2}))
    with pytest.raises(ResultsError) as err:
        committed.read_record(edited)
    assert str(err.value).startswith(
        f"{edited / 'record.json'}: its files do not give the record it stores: seed 1 stored, "
        "2 read from the files"
    )

    gone = _recorded(tmp_path, "twt", 3)  # a new user's trial: said as a stop_reason mismatch
    (gone / "train.log").unlink()
    with pytest.raises(ResultsError) as err:
        committed.read_record(gone)
    assert str(err.value) == (
        f"{gone / 'record.json'}: its file train.log is missing (deleted, or left out of a copy); "
        "restore the record (git checkout) or remove it to train the cell again"
    )

    moved = _recorded(tmp_path, "qknorm_paper", 2)
    shutil.copytree(moved, moved.parent / "seed3")
    with pytest.raises(ResultsError) as err:
        committed.read_record(moved.parent / "seed3")
    assert str(err.value) == (
        f"{moved.parent / 'seed3' / 'record.json'}: seed 2, but the record is filed under seed3"
    )


def test_a_record_whose_hypotheses_are_edited_in_place_is_refused_naming_the_file(tmp_path):
    """issue 37 (F2): a test.hyp rewritten by hand with its line count kept passed every check
    (the fields read from the files are the same): record.json stores each file's sha256."""
    rec = _recorded(tmp_path, "twt", 1)
    doc = json.loads((rec / "record.json").read_text())
    assert (
        sorted(doc["sha256"])
        == sorted(
            p.relative_to(rec).as_posix()
            for p in rec.rglob("*")
            if p.is_file() and p.name != "record.json"
        )
        and "test.hyp" in doc["sha256"]
    )
    committed.read_record(rec)  # as written: accepted
    hyp = rec / "test.hyp"
    lines = hyp.read_text().splitlines()
    hyp.write_text("\n".join(["a better translation", *lines[1:]]) + "\n")
    assert len(hyp.read_text().splitlines()) == len(lines)
    with pytest.raises(ResultsError) as err:
        committed.read_record(rec)
    assert str(err.value) == (
        f"{rec / 'record.json'}: test.hyp is not the file the record was written with (its "
        "sha256 differs: edited by hand?); restore the record (git checkout) or remove it to "
        "train the cell again"
    )
    del doc["sha256"]
    (rec / "record.json").write_text(json.dumps(doc))
    with pytest.raises(ResultsError, match="stores no sha256 of its files"):
        committed.read_record(rec)


@pytest.mark.slow
def test_status_validates_each_record_and_names_its_own_seed(tmp_path):
    """ablation.sh --status listed a truncated record as a healthy committed record: each
    record now goes through collect's checks; a refused one is listed under its own cell, and
    after the whole listing the status exits 1 saying how many are invalid (it exited 0);
    --help names the record and invalid states it prints."""
    good = _recorded(tmp_path, "twt", 1)
    cut = _recorded(tmp_path, "twt", 2)
    (cut / "test.hyp").write_text("\n".join((cut / "test.hyp").read_text().splitlines()[:3]))
    edited = _recorded(tmp_path, "qknorm_paper", 1)
    train = json.loads((edited / "train.json").read_text())
    (edited / "train.json").write_text(json.dumps({**train, "seed": 2}))
    _recorded(tmp_path, "qknorm_paper", 2)
    p = run_script("ablation.sh", "gl-en", "--seeds", "1,2", "--profile", "cpu-converge",
                   "--precision", "fp32", "--status", env=make_env(tmp_path))  # fmt: skip
    assert p.returncode == 1, out(p)
    assert p.stderr.splitlines()[-1] == (
        "error: 2 committed record(s) invalid (listed above with the reason): a run of this "
        "grid refuses them; remove one to train its cell again"
    )
    rows = {line.split()[1]: line for line in p.stdout.splitlines()[1:-1]}
    assert rows["gl-en/twt/seed1"].split()[:4] == [
        "record", "gl-en/twt/seed1", "-", str(good / "record.json"),
    ]  # fmt: skip
    assert rows["gl-en/twt/seed2"].startswith("invalid  gl-en/twt/seed2 ")
    assert (
        f"(refused: {cut / 'record.json'}: test.hyp has 3 lines, its score was made on 10"
        in (rows["gl-en/twt/seed2"])
    )
    assert rows["gl-en/qknorm_paper/seed1"].startswith("invalid  gl-en/qknorm_paper/seed1 ")
    assert (
        f"(refused: {edited / 'record.json'}: its files do not give the record it stores: seed 1 "
        "stored, 2 read from the files" in rows["gl-en/qknorm_paper/seed1"]
    )
    assert rows["gl-en/qknorm_paper/seed2"].startswith("record ")
    assert p.stdout.splitlines()[-1] == (
        "8 cells: 0 done, 0 running, 0 pending, 0 failed, 4 todo, 2 committed records, "
        "2 refused records"
    )
    # the sound records alone: status 0
    shutil.rmtree(cut)
    shutil.rmtree(edited)
    p = run_script("ablation.sh", "gl-en", "--seeds", "1,2", "--profile", "cpu-converge",
                   "--precision", "fp32", "--status", env=make_env(tmp_path))  # fmt: skip
    assert p.returncode == 0, out(p)
    assert p.stdout.splitlines()[-1].endswith("6 todo, 2 committed records")
    h = run_script("ablation.sh", "--help", env=make_env(tmp_path))
    assert h.returncode == 0
    assert " ".join(h.stdout.split("--status", 2)[2].split()).startswith(
        "list each cell as done, running, pending, failed or todo, with its Slurm job and log "
        "(from the run's markers, its lock and squeue), or as record (a committed record, no "
        "live run: never trained again) or invalid (a committed record that would be refused, "
        "with the reason); exit status 1 when any record is invalid"
    )


def test_the_other_checkpoints_scores_travel_with_the_record(tmp_path):
    """A profile's decode.also (cpu-fixed-d128: the final checkpoint beside the averaged one):
    test.last.{hyp,score.json} are copied into the record; stray files are not."""
    run = _run(tmp_path, profile="cpu-fixed-d128")
    (run / "test.last.hyp").write_text("a\n", encoding="utf-8")
    (run / "test.last.score.json").write_text('{"bleu_tok": 1.5}', encoding="utf-8")
    (run / "test.avg5.score.json").write_text("{}", encoding="utf-8")  # no hypotheses: not one
    assert committed.also_decoded(run) == ["last"]
    rec_dir = committed.record_dir(tmp_path / "results" / "cpu-fixed-d128", "gl-en", run)
    committed.write_record(run, rec_dir)
    assert json.loads((rec_dir / "test.last.score.json").read_text()) == {"bleu_tok": 1.5}
    assert (rec_dir / "test.last.hyp").read_text() == "a\n"
    assert not (rec_dir / "test.avg5.score.json").exists()
