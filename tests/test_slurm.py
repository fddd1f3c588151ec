"""The grid on a real Slurm cluster: scripts/reproduce.sh and scripts/lr_sweep.sh --launcher
slurm against a private single-node cluster (munged, slurmctld, slurmd started by the
``slurm_cluster`` fixture of tests/conftest.py; skipped where Slurm is not installed or this is
not root).

Grid cells train a tiny model (1+1 layers, d 16, through fairseq flags after ``--``) for a few
updates on the tiny TED pair, one CPU each, so that the two cores of CI are enough; the LR
sweep's cells (no fairseq flags) train the profile's model for 5 updates.
"""

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import FAR_BOUND, make_env, make_tiny_ted, out, run_script, tiny_model

pytestmark = pytest.mark.slow

# a tiny model: the cells' cost is Slurm's and the scripts', not training's
TINY = tiny_model()
ONE_CPU = "--sbatch-args=--cpus-per-task=1 --mem=1G"
GRID = ["--pairs", "gl-en", "--seeds", "1", "--max-update", "6", "--no-significance"]
GOOD, BAD = ("twt", "qknorm_paper"), "prenorm_layernorm"
LABEL = "cpu-proxy-max-update-6"
DONE_STATES = {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY"}


# ------------------------------------------------------------------------------------ helpers
def slurm(conf, *args, check=True):
    """A Slurm client command against the test cluster."""
    env = make_env(conf.parent, SLURM_CONF=conf)
    p = subprocess.run(
        [*map(str, args)], env=env, capture_output=True, text=True, timeout=FAR_BOUND
    )
    if check and p.returncode != 0:
        raise AssertionError(f"{args} failed: {p.stderr}")
    return p.stdout


def job(conf, job_id):
    """``scontrol show job -o``: {field: value} (finished jobs stay for MinJobAge = 600 s)."""
    return dict(re.findall(r"(\w+)=(\S*)", slurm(conf, "scontrol", "show", "job", "-o", job_id)))


def wait_for(what, predicate, timeout):
    t0 = time.time()
    while not (result := predicate()):
        if time.time() - t0 > timeout:
            raise AssertionError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(0.5)
    return result


def wait_job(conf, job_id, timeout=FAR_BOUND):
    """Wait until a job (or array task) has ended; its fields."""
    return wait_for(
        f"job {job_id}",
        lambda: (j := job(conf, job_id)).get("JobState") in DONE_STATES and j,
        timeout,
    )


def submitted(stdout):
    """(cells job id or None, aggregation job id or None) from a --launcher slurm submission."""
    cells = re.search(r"^cells: job (\d+) ", stdout, flags=re.M)
    agg = re.search(r"^aggregation: job (\d+)", stdout, flags=re.M)
    return (cells and cells.group(1)), (agg and agg.group(1))


def strip_wall(record):
    """A record without what timing makes differ between two runs of the same cell: wall and
    CPU seconds, and the wall time of each point of the dev curve."""
    out = {k: v for k, v in record.items() if "wall" not in k and k != "cpu_seconds"}
    if out.get("dev_curve"):
        out["dev_curve"] = [{k: v for k, v in p.items() if k != "wall"} for p in out["dev_curve"]]
    return out


SAVED = re.compile(r"Saved checkpoint \S+checkpoint_last\.pt \(epoch \d+ @ (\d+) updates")


def wait_for_checkpoint(run, conf, job_id, timeout=FAR_BOUND):
    """Wait until the run's train.log reports a saved checkpoint_last.pt; fails at once if the
    job JOB_ID ends first (a checkpoint that can no longer come is not waited for)."""
    log = run / "train.log"

    def saved():
        if log.exists() and SAVED.search(log.read_text()):
            return True
        state = job(conf, job_id).get("JobState")
        if state in DONE_STATES and not (log.exists() and SAVED.search(log.read_text())):
            raise AssertionError(f"job {job_id} ended ({state}) before a checkpoint: {log}")
        return False

    wait_for("a first checkpoint", saved, timeout)


def resumed_once(run, total, interval):
    """Assert from RUN/train.log that the run stopped mid-training and resumed once from its
    checkpoint_last.pt (saved every ``interval`` updates) and that every update up to ``total``
    was trained, none up to the checkpoint twice; return the checkpoint's update count."""
    log = (run / "train.log").read_text()
    loaded = re.findall(
        r"Loaded checkpoint \S+checkpoint_last\.pt \(epoch \d+ @ (\d+) updates", log
    )
    assert len(loaded) == 1, loaded
    k = int(loaded[0])
    assert k >= interval and k % interval == 0 and k < total  # stopped mid-training
    first, second = log.split("Loaded checkpoint", 1)
    done_before = [int(n) for n in re.findall(r"train_inner\W.*num_updates=(\d+)", first)]
    done_after = [int(n) for n in re.findall(r"train_inner\W.*num_updates=(\d+)", second)]
    assert done_before[:k] == list(range(1, k + 1)) and len(done_before) < total
    assert done_after == list(range(k + 1, total + 1))  # from the checkpoint on, each update once
    assert json.loads((run / "train.json").read_text())["updates"] == total
    return k


@pytest.fixture(scope="module")
def data_template(tmp_path_factory):
    """A work dir whose data/ holds the tiny pair, prepared as scripts/reproduce.sh does
    (prepare_data.sh, bpe.sh, binarize.sh with the pair's settings): copies skip all three."""
    root = tmp_path_factory.mktemp("slurm_data")
    make_tiny_ted(root / "data_in", sizes=(300, 30, 37))
    env = make_env(root / "work", QKNORM_DATA_DIR=root / "data_in")
    for step in ("prepare_data.sh", "bpe.sh", "binarize.sh"):
        p = run_script(step, "gl-en", env=env)
        assert p.returncode == 0, out(p)
    return root


def work_copy(data_template, work):
    shutil.copytree(data_template / "work" / "data", work / "data")
    return work


# ------------------------------------------------------------------ a grid with a failing cell
@pytest.fixture(scope="module")
def grid(slurm_cluster, data_template, tmp_path_factory):
    """Three cells through Slurm: twt and qknorm_paper, and prenorm_layernorm made to fail (its
    run holds another command: scripts/train.sh never reuses it). The jobs are submitted held
    (sbatch --hold), submitted again (the second submission must add nothing), released, and
    left to finish with the aggregation job."""
    work = work_copy(data_template, tmp_path_factory.mktemp("grid"))
    bad = work / "runs" / "gl-en" / LABEL / BAD / "seed1"
    bad.mkdir(parents=True)
    (bad / "command.txt").write_text("fairseq-train made with other settings\n")
    env = make_env(work, SLURM_CONF=slurm_cluster)
    args = [*GRID, "--systems", ",".join((*GOOD, BAD)), "--launcher", "slurm", ONE_CPU]
    first = run_script("reproduce.sh", *args, f"{ONE_CPU} --hold", "--", *TINY, env=env)
    assert first.returncode == 0, out(first)
    cells, agg = submitted(first.stdout)
    assert cells and agg, first.stdout
    again = run_script("reproduce.sh", *args, "--", *TINY, env=env)
    slurm(slurm_cluster, "scontrol", "release", cells, agg)
    wait_job(slurm_cluster, agg)
    return dict(work=work, env=env, args=args, first=first, again=again, cells=cells, agg=agg)


def test_submission_prints_jobs_and_logs_and_is_never_doubled(grid, slurm_cluster):
    cells, agg = grid["cells"], grid["agg"]
    sub = re.search(
        r"\(3 cells: (\S+)/cells\.tsv\), logs (\S+)/logs/\d+_TASK\.out", grid["first"].stdout
    )
    assert sub, grid["first"].stdout
    submit_dir = grid["work"] / "slurm"
    assert sub.group(1) == sub.group(2) and sub.group(1).startswith(str(submit_dir))
    assert f"aggregation: job {agg} after {cells}, log " in grid["first"].stdout
    lines = (grid["work"] / sub.group(1) / "cells.tsv").read_text().splitlines()
    assert [line.split("\t")[:4] for line in lines] == [
        [f"gl-en/{s}/seed1", str(grid["work"] / "runs" / "gl-en" / LABEL / s / "seed1"), "gl-en", s]
        for s in (*GOOD, BAD)
    ]
    # the second submission, while the first one's cells were queued or running: nothing new
    again = grid["again"]
    assert again.returncode == 0, out(again)
    assert submitted(again.stdout) == (None, None), again.stdout
    for i, s in enumerate((*GOOD, BAD)):
        assert (
            f"skip gl-en/{s}/seed1: pending (job {cells}_{i}; Slurm PENDING, reason JobHeldUser)"
            in again.stderr
        )
    assert "no aggregation job" in again.stderr
    # one array job of three tasks, each started once
    for task in range(3):
        assert job(slurm_cluster, f"{cells}_{task}")["Restarts"] == "0"


def test_failing_cell_is_reported_and_does_not_block_the_others(grid, slurm_cluster):
    work, cells = grid["work"], grid["cells"]
    status = run_script("reproduce.sh", *grid["args"], "--status", env=grid["env"])
    assert status.returncode == 0, out(status)
    rows = {row.split()[1]: row.split() for row in status.stdout.splitlines()[1:-1]}
    (submit_dir,) = (work / "slurm").iterdir()
    log = {s: str(submit_dir / "logs" / f"{cells}_{i}.out") for i, s in enumerate((*GOOD, BAD))}
    for s in GOOD:
        assert rows[f"gl-en/{s}/seed1"][:4] == [
            "done",
            f"gl-en/{s}/seed1",
            f"{cells}_{GOOD.index(s)}",
            log[s],
        ]
    bad = rows[f"gl-en/{BAD}/seed1"]
    assert bad[:4] == ["failed", f"gl-en/{BAD}/seed1", f"{cells}_2", log[BAD]]
    assert "Slurm FAILED" in " ".join(bad[4:]) and "exit 1 on " in " ".join(bad[4:])
    assert (
        status.stdout.splitlines()[-1] == "3 cells: 2 done, 0 running, 0 pending, 1 failed, 0 todo"
    )
    marker = (work / "runs" / "gl-en" / LABEL / BAD / "seed1" / "cell.failed").read_text()
    assert f"(Slurm job {cells}_2); log {log[BAD]}" in marker
    assert "was trained with another command" in open(log[BAD]).read()
    assert job(slurm_cluster, f"{cells}_2")["JobState"] == "FAILED"


def test_aggregation_runs_after_the_cells(grid, slurm_cluster):
    work, cells, agg = grid["work"], grid["cells"], grid["agg"]
    a = job(slurm_cluster, agg)
    assert a["JobState"] == "COMPLETED" and a["Dependency"] == "(null)"
    for task in range(3):
        assert a["StartTime"] >= job(slurm_cluster, f"{cells}_{task}")["EndTime"]
    runs = json.loads((work / "results" / LABEL / "gl-en" / "runs.json").read_text())["runs"]
    assert sorted(r["system"] for r in runs) == sorted(GOOD)
    agg_log = next((work / "slurm").glob(f"*/logs/aggregate-{agg}.out")).read_text()
    assert "--aggregate-only" in next((work / "slurm").glob("*/aggregate.sbatch")).read_text()
    assert "[collect] wrote" in agg_log


def test_slurm_grid_equals_the_local_launcher(grid, data_template, tmp_path):
    """The same two cells with the local job pool (one thread each, as the Slurm cells' one
    CPU): identical hypotheses, scores, training summaries and collected records."""
    local = work_copy(data_template, tmp_path / "local")
    args = [*GRID, "--systems", ",".join(GOOD), "--jobs", "2", "--", *TINY]
    p = run_script("reproduce.sh", *args, env=make_env(local))
    assert p.returncode == 0, out(p)
    for s in GOOD:
        a, b = (w / "runs" / "gl-en" / LABEL / s / "seed1" for w in (grid["work"], local))
        assert (a / "test.hyp").read_bytes() == (b / "test.hyp").read_bytes()
        assert json.loads((a / "test.score.json").read_text()) == json.loads(
            (b / "test.score.json").read_text()
        )
        ta, tb = (json.loads((r / "train.json").read_text()) for r in (a, b))
        assert strip_wall(ta) == strip_wall(tb) and ta["updates"] == 6
        commands = [(r / "command.txt").read_text().replace(str(w), "WORK")
                    for r, w in ((a, grid["work"]), (b, local))]  # fmt: skip
        assert commands[0] == commands[1]
    ra, rb = (
        json.loads((w / "results" / LABEL / "gl-en" / "runs.json").read_text())["runs"]
        for w in (grid["work"], local)
    )
    assert [strip_wall(r) for r in ra] == [strip_wall(r) for r in rb]


def test_resubmission_runs_only_the_unfinished_cell(grid, slurm_cluster):
    """After the failure is fixed, the same command submits the one unfinished cell; the grid
    is then complete."""
    work = grid["work"]
    (work / "runs" / "gl-en" / LABEL / BAD / "seed1" / "command.txt").unlink()
    p = run_script("reproduce.sh", *grid["args"], "--", *TINY, env=grid["env"])
    assert p.returncode == 0, out(p)
    cells, agg = submitted(p.stdout)
    assert f"job {cells} (1 cells" in p.stdout and f"after {cells}," in p.stdout
    assert all(f"skip gl-en/{s}/seed1: done" in p.stderr for s in GOOD)
    wait_job(slurm_cluster, agg)
    status = run_script("reproduce.sh", *grid["args"], "--status", env=grid["env"])
    assert (
        status.stdout.splitlines()[-1] == "3 cells: 3 done, 0 running, 0 pending, 0 failed, 0 todo"
    )
    runs = json.loads((work / "results" / LABEL / "gl-en" / "runs.json").read_text())["runs"]
    assert sorted(r["system"] for r in runs) == sorted((*GOOD, BAD))


# ---------------------------------------------------------------------- requeue and resume
def test_requeued_cell_resumes_from_its_checkpoint(slurm_cluster, data_template, tmp_path):
    """Slurm's warning before the time limit (USR1 to the batch shell, as --signal=B:USR1@300
    sends it) makes the cell requeue itself; the next start resumes from checkpoint_last.pt:
    no update up to the checkpoint is trained again, and the aggregation waits for the end."""
    work = work_copy(data_template, tmp_path / "work")
    env = make_env(work, SLURM_CONF=slurm_cluster)
    args = ["--pairs", "gl-en", "--systems", "twt", "--max-update", "300", "--no-significance",
            "--launcher", "slurm", ONE_CPU, "--", *TINY, "--save-interval-updates", "10",
            "--log-interval", "1"]  # fmt: skip
    p = run_script("reproduce.sh", *args, env=env)
    assert p.returncode == 0, out(p)
    cells, agg = submitted(p.stdout)
    task = f"{cells}_0"
    run = work / "runs" / "gl-en" / "cpu-proxy-max-update-300" / "twt" / "seed1"
    wait_for_checkpoint(run, slurm_cluster, task)
    slurm(slurm_cluster, "scancel", "--batch", "--signal=USR1", task)
    wait_for("the requeue", lambda: job(slurm_cluster, task)["Restarts"] == "1", 120)
    # Slurm holds a requeued job for about two minutes before it may start again: release it
    wait_for("the pending task", lambda: job(slurm_cluster, task)["JobState"] == "PENDING", 60)
    slurm(slurm_cluster, "scontrol", "update", f"JobId={task}", "StartTime=now")
    assert wait_job(slurm_cluster, task)["JobState"] == "COMPLETED"
    a = wait_job(slurm_cluster, agg)
    assert a["JobState"] == "COMPLETED" and a["StartTime"] >= job(slurm_cluster, task)["EndTime"]

    resumed_once(run, 300, 10)
    slurm_log = (run / "slurm.job").read_text().split("\t")[1].strip()
    text = open(slurm_log).read()
    assert (
        f"requeueing job {task}" in text
        and "start 2," in text
        and "cell gl-en/twt/seed1 done" in text
    )
    runs = json.loads(
        (work / "results" / "cpu-proxy-max-update-300" / "gl-en" / "runs.json").read_text()
    )
    assert [r["updates"] for r in runs["runs"]] == [300]


def test_cancelled_cell_resumes_when_resubmitted(slurm_cluster, data_template, tmp_path):
    """A cell cancelled mid-training (scancel, after it saved checkpoint_last.pt) is shown as
    failed by --status; the same command submits it again, and the new job resumes from the
    checkpoint: no update up to it is trained twice."""
    work = work_copy(data_template, tmp_path / "work")
    env = make_env(work, SLURM_CONF=slurm_cluster)
    grid = ["--pairs", "gl-en", "--systems", "twt", "--max-update", "300", "--no-aggregate",
            "--launcher", "slurm", ONE_CPU]  # fmt: skip
    args = [*grid, "--", *TINY, "--save-interval-updates", "10", "--log-interval", "1"]
    p = run_script("reproduce.sh", *args, env=env)
    assert p.returncode == 0, out(p)
    first = f"{submitted(p.stdout)[0]}_0"
    run = work / "runs" / "gl-en" / "cpu-proxy-max-update-300" / "twt" / "seed1"
    wait_for_checkpoint(run, slurm_cluster, first)
    slurm(slurm_cluster, "scancel", first)
    assert wait_job(slurm_cluster, first)["JobState"] == "CANCELLED"
    assert not (run / "train.json").exists()  # stopped before its end
    status = run_script("reproduce.sh", *grid, "--status", env=env)
    (row,) = status.stdout.splitlines()[1:-1]
    assert row.split()[:3] == ["failed", "gl-en/twt/seed1", first] and "Slurm CANCELLED" in row

    again = run_script("reproduce.sh", *args, env=env)
    assert again.returncode == 0, out(again)
    cells, agg = submitted(again.stdout)
    assert f"job {cells} (1 cells" in again.stdout and agg is None and f"{cells}_0" != first
    assert wait_job(slurm_cluster, f"{cells}_0")["JobState"] == "COMPLETED"
    resumed_once(run, 300, 10)
    slurm_log = (run / "slurm.job").read_text().split("\t")[1].strip()
    assert (
        f"/logs/{cells}_0.out" in slurm_log
        and "cell gl-en/twt/seed1 done" in open(slurm_log).read()
    )
    assert (run / "test.score.json").exists() and not (run / "cell.failed").exists()


# ------------------------------------------------------------------ the LR sweep on Slurm
SWEEP_SYSTEMS, SWEEP_LRS = ("twt", "qk_layernorm"), ("1e-3", "1e6")  # 1e6 diverges for twt
SWEEP = ["gl-en", "--systems", ",".join(SWEEP_SYSTEMS), "--lrs", ",".join(SWEEP_LRS),
         "--seeds", "1", "--max-update", "5"]  # fmt: skip
SWEEP_OUT = "results/cpu-proxy-fast-max-update-5/gl-en/lr-sweep"


@pytest.fixture(scope="module")
def sweep(slurm_cluster, data_template, tmp_path_factory):
    """scripts/lr_sweep.sh --launcher slurm: 2 systems x 2 lrs x 1 seed (5 updates each, the
    profile's model) plus the 2 initial models, one CPU each; waits for the report job."""
    work = work_copy(data_template, tmp_path_factory.mktemp("sweep"))
    env = make_env(work, SLURM_CONF=slurm_cluster)
    p = run_script("lr_sweep.sh", *SWEEP, "--launcher", "slurm", ONE_CPU, env=env)
    assert p.returncode == 0, out(p)
    cells, agg = submitted(p.stdout)
    assert cells and agg, p.stdout
    wait_job(slurm_cluster, agg)
    return dict(work=work, env=env, proc=p, cells=cells, agg=agg)


def test_lr_sweep_on_slurm_reports_after_its_cells(sweep, slurm_cluster):
    """Six tasks (the diverged run too) complete, the report job starts after all of them and
    writes the sweep's report; --status shows every cell done, the diverged one as such."""
    work, cells, agg = sweep["work"], sweep["cells"], sweep["agg"]
    assert f"job {cells} (6 cells" in sweep["proc"].stdout
    a = job(slurm_cluster, agg)
    assert a["JobState"] == "COMPLETED"
    for task in range(6):
        t = job(slurm_cluster, f"{cells}_{task}")
        assert t["JobState"] == "COMPLETED" and a["StartTime"] >= t["EndTime"]
    assert "--report-only" in next((work / "slurm").glob("*/aggregate.sbatch")).read_text()
    for f in ("runs.json", "lr_sweep.md", "lr_sweep.json", "lr_sweep_loss.png"):
        assert (work / SWEEP_OUT / f).exists(), f
    status = run_script("lr_sweep.sh", *SWEEP, "--status", env=sweep["env"])
    assert status.returncode == 0, out(status)
    assert status.stdout.splitlines()[-1] == (
        "6 cells: 6 done, 0 running, 0 pending, 0 failed, 0 todo"
    )
    (div,) = [row for row in status.stdout.splitlines() if "diverged:" in row]
    assert div.split()[:2] == ["done", "gl-en/twt/seed1-lr1e6"] and "FloatingPointError" in div
    diverged = work / "runs/gl-en/cpu-proxy-fast-max-update-5/twt/seed1-lr1e6"
    assert (diverged / "diverged").exists() and not (diverged / "cell.failed").exists()
    init = work / "runs/gl-en/cpu-proxy-fast-max-update-1/twt/seed1-lr0"
    assert (init / "train.json").exists() and not (init / "test.hyp").exists()  # not decoded


def test_lr_sweep_on_slurm_equals_the_local_launcher(sweep, data_template, tmp_path):
    """The same sweep with the local job pool (two at a time, one thread each, as the Slurm
    cells' one CPU): the same runs, losses, scores and LR sensitivities in lr_sweep.json."""
    local = work_copy(data_template, tmp_path / "local")
    p = run_script("lr_sweep.sh", *SWEEP, "--jobs", "2", env=make_env(local))
    assert p.returncode == 0, out(p)
    assert "diverged (finished results): gl-en/twt/seed1-lr1e6" in p.stderr
    a, b = (
        json.loads((w / SWEEP_OUT / "lr_sweep.json").read_text()) for w in (sweep["work"], local)
    )
    for doc in (a, b):  # the run directories, relative to each work dir (no machine's path)
        for r in doc["runs"]:
            assert not Path(r["run_dir"]).is_absolute(), r["run_dir"]
    assert len(a["runs"]) == 4
    assert [strip_wall(r) for r in a["runs"]] == [strip_wall(r) for r in b["runs"]]
    del a["runs"], b["runs"]
    assert a == b
    for run in (sweep["work"] / "runs").rglob("train.json"):
        twin = local / run.relative_to(sweep["work"])
        assert strip_wall(json.loads(run.read_text())) == strip_wall(json.loads(twin.read_text()))


# ---------------------------------------------------------------------- a multi-process cell
FAKE_TASK_TRAIN = r"""#!/usr/bin/env bash
# a fake fairseq-train, one per Slurm task: records what fairseq's Slurm support would read
save=""; prev=""
for a in "$@"; do [[ "$prev" == --save-dir ]] && save="$a"; prev="$a"; done
mkdir -p "$save"
echo "$SLURM_PROCID $SLURM_LOCALID $SLURM_NTASKS $SLURM_NNODES $SLURM_JOB_ID $*" >>"$FAKE_TASKS"
echo "2026-01-01 00:00:00 | INFO | train_inner | epoch 001:      1 / 1 loss=9.0, num_updates=1"
: >"$save/checkpoint_last.pt"
"""


def test_multi_gpu_cell_runs_one_slurm_task_per_process(slurm_cluster, data_template, tmp_path):
    """--nproc 2 with a GPU profile: a job of 2 tasks, scripts/train.sh (once) starts
    fairseq-train in each through srun with the world size, the job's port and the profile's
    tokens per update split in two. fairseq-train is a fake (no GPU here: the test node has no
    GPUs, so --gres is dropped with --sbatch-args); it records each task's Slurm variables."""
    work = work_copy(data_template, tmp_path / "work")
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "fairseq-train").write_text(FAKE_TASK_TRAIN)
    (fake / "fairseq-train").chmod(0o755)
    tasks = tmp_path / "tasks"
    env = make_env(work, SLURM_CONF=slurm_cluster, FAKE_TASKS=tasks,
                   PATH=f"{fake}:{make_env(work)['PATH']}")  # fmt: skip
    p = run_script(
        "reproduce.sh", "--pairs", "gl-en", "--systems", "twt", "--profile", "paper",
        "--max-update", "5", "--no-aggregate", "--launcher", "slurm", "--nproc", "2",
        "--sbatch-args=--gres=none --cpus-per-task=1 --mem=500M", env=env,
    )  # fmt: skip
    assert p.returncode == 0, out(p)
    cells, agg = submitted(p.stdout)
    assert agg is None
    task = wait_job(slurm_cluster, f"{cells}_0")
    assert task["NumNodes"] == "1" and task["NumTasks"] == "2"
    records = sorted(line.split() for line in tasks.read_text().splitlines())
    assert [r[:4] for r in records] == [["0", "0", "2", "1"], ["1", "1", "2", "1"]]
    for r in records:
        args = r[5:]
        flag = {a: args[i + 1] for i, a in enumerate(args[:-1]) if a.startswith("--")}
        assert flag["--distributed-world-size"] == "2" and flag["--distributed-backend"] == "nccl"
        assert flag["--distributed-port"] == str(10000 + int(r[4]) % 50000)
        assert flag["--max-tokens"] == "2048" and "--cpu" not in args
    run = work / "runs/gl-en/paper-max-update-5/twt/seed1"
    command = (run / "command.txt").read_text()
    assert "--distributed-world-size 2" in command and "--distributed-port" not in command
