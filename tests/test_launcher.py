"""Launching a grid's cells (scripts/lib.sh:qk_launch): the local pool's GPU sharing, the
Slurm launcher's dry runs and options, the cells file the Slurm tasks read, the --status view,
extra fairseq flags for every cell, and scripts/train.sh --nproc (torch.distributed).

Runs against a real Slurm cluster are in tests/test_slurm.py; here nothing needs Slurm: GPUs
are a fake device list (CUDA_VISIBLE_DEVICES; the fake fairseq-train records what it sees) and
squeue, where a state is needed, is a stub.
"""

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
from pathlib import Path

import pytest
import torch

from conftest import (
    FAR_BOUND,
    REPO,
    SCRIPTS,
    flags,
    make_data_chain,
    make_env,
    make_tiny_ted,
    out,
    run_script,
    tiny_model,
    train_commands,
)

PAPER_GRID = ["--pairs", "all", "--systems", "all", "--seeds", "1,2,3", "--profile", "paper"]
TINY = tiny_model()


def bash(code: str, env) -> subprocess.CompletedProcess:
    """Run bash CODE after sourcing scripts/lib.sh."""
    return subprocess.run(
        ["bash", "-c", f'source "{SCRIPTS}/lib.sh"; {code}', "test"],
        env=env,
        capture_output=True,
        text=True,
        timeout=FAR_BOUND,
    )


def commands(stdout, start):
    """Lines of stdout starting with ``start``, as token lists."""
    return [shlex.split(line) for line in stdout.splitlines() if line.startswith(start)]


def sbatch_lines(stdout, script):
    """The #SBATCH options of the batch script printed after the '# .../SCRIPT' line."""
    lines = stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if re.match(rf"# \S+/{script} ", line))
    body = lines[start + 1 :]
    body = body[: next(i for i, line in enumerate(body) if line.startswith("exec "))]
    return [line.split(" ", 1)[1] for line in body if line.startswith("#SBATCH ")]


@pytest.fixture
def work(tmp_path):
    return tmp_path / "work"


# ------------------------------------------------------------------------- local: one GPU each
def test_pool_gives_each_running_job_its_own_gpu(tmp_path):
    """Two slots on GPUs 0 and 1: a (still running) keeps GPU 0, b and then c get GPU 1."""
    rec = tmp_path / "rec"
    code = f"""
    job() {{
        echo "$1 start $CUDA_VISIBLE_DEVICES" >>{rec}
        if [[ $1 == a ]]; then until grep -q "c end" {rec}; do sleep 0.05; done; fi
        echo "$1 end $CUDA_VISIBLE_DEVICES" >>{rec}
    }}
    qk_pool_init 2 0 1
    for name in a b c; do qk_pool_submit "$name" "" job "$name"; done
    qk_pool_wait
    """
    p = bash(code, make_env(tmp_path))
    assert p.returncode == 0, out(p)
    assert sorted(rec.read_text().splitlines()) == [
        "a end 0", "a start 0", "b end 1", "b start 1", "c end 1", "c start 1",
    ]  # fmt: skip
    assert "a on GPU 0" in p.stderr and "c on GPU 1" in p.stderr
    assert "[a] " not in p.stdout  # the jobs' output went to the record file only


FAKE_GPU_TRAIN = r"""#!/usr/bin/env bash
# a fake fairseq-train: records the GPUs it sees and its start and end (ns), logs one update
save=""; prev=""
for a in "$@"; do [[ "$prev" == --save-dir ]] && save="$a"; prev="$a"; done
mkdir -p "$save"
start=$(date +%s%N)
echo "2026-01-01 00:00:00 | INFO | train_inner | epoch 001:      1 / 1 loss=9.0, num_updates=1"
: >"$save/checkpoint_last.pt"
sleep 0.5
echo "${CUDA_VISIBLE_DEVICES-unset} $start $(date +%s%N) $save" >>"$FAKE_GPU_RECORD"
"""


@pytest.mark.slow
@pytest.mark.parametrize("source", ["CUDA_VISIBLE_DEVICES", "--gpus"])
def test_local_launcher_runs_each_cell_on_its_own_gpu(tmp_path, source):
    """--jobs 2 on a machine with two (fake) GPUs: three cells through scripts/train.sh, never
    two at once on one GPU, each on exactly one of them."""
    work = tmp_path / "work"
    make_data_chain(work)
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "fairseq-train").write_text(FAKE_GPU_TRAIN)
    (fake / "fairseq-train").chmod(0o755)
    record = tmp_path / "record"
    devices = {"CUDA_VISIBLE_DEVICES": ("3,5", ""), "--gpus": (None, "QK_GPUS_ARG=3,5")}[source]
    env = make_env(
        work,
        PATH=f"{fake}:{os.environ['PATH']}",
        FAKE_GPU_RECORD=record,
        CUDA_VISIBLE_DEVICES=devices[0],
    )
    systems = ("twt", "postnorm_layernorm", "prenorm_layernorm")  # no QKNorm: no BPE'd data needed
    label = "cpu-proxy-max-update-5"
    adds = f"declare -A D=(); qk_run_dirs D {label} gl-en {','.join(systems)} 1; " + "; ".join(
        f'qk_cell_add {s} "${{D[gl-en/{s}/1]}}" gl-en {s} --max-update 5' for s in systems
    )
    p = bash(
        f"QK_JOBS=2 {devices[1]}; qk_launch_check; {adds}; qk_launch cpu-proxy; "
        "echo ${#QK_LAUNCH_FAILED[@]}",
        env,
    )
    assert p.returncode == 0, out(p)
    runs = [line.split() for line in record.read_text().splitlines()]
    assert sorted(Path(r[3]).parts[-3] for r in runs) == sorted(systems)
    assert all(r[0] in ("3", "5") for r in runs), runs
    for i, a in enumerate(runs):
        for b in runs[i + 1 :]:
            if int(a[1]) < int(b[2]) and int(b[1]) < int(a[2]):  # ran at the same time
                assert a[0] != b[0], runs
    # the fake trains no real model: evaluation fails, each cell is reported with its log
    assert p.stdout.splitlines()[-1] == "3"
    for s in systems:
        marker = (
            work / "runs/gl-en/cpu-proxy-max-update-5" / s / "seed1" / "cell.failed"
        ).read_text()
        assert marker.startswith("exit 1 on ") and marker.rstrip().endswith("/cell.log")


def test_more_jobs_than_gpus_is_an_error(tmp_path):
    env = make_env(tmp_path, CUDA_VISIBLE_DEVICES="0,1")
    p = bash("QK_JOBS=3; qk_cell_add x /tmp/x gl-en twt; qk_launch cpu-proxy", env)
    assert p.returncode == 1
    assert "--jobs 3 x --nproc 1 needs 3 GPUs, found 2 (0 1;" in p.stderr


@pytest.mark.slow
def test_more_cpu_jobs_than_cores_is_a_warning(work):
    """issue 37: --jobs 999 on 2 cores was accepted without a word. CPU cells (no GPU) of the
    local launcher: a warning naming processes, cores and the --jobs that fits; none at the
    number of cores. The processes counted are those that run at once: --jobs 999 on a grid
    of fewer cells counts its cells (it counted 999), and warns only when they exceed the
    cores."""
    cores = len(os.sched_getaffinity(0))
    env = make_env(work, CUDA_VISIBLE_DEVICES="")
    seeds = ",".join(str(s) for s in range(1, cores + 2))  # cores + 1 cells
    grid = ["--pairs", "gl-en", "--systems", "twt", "--seeds", seeds, "--dry-run"]
    p = run_script("reproduce.sh", *grid, "--jobs", cores + 1, env=env)
    assert p.returncode == 0, out(p)
    warnings = [line for line in p.stderr.splitlines() if "warning:" in line]
    assert warnings == [
        f"[reproduce] warning: --jobs {cores + 1} x --nproc 1 = {cores + 1} training processes at "
        f"once on {cores} CPU cores: they share the cores and every cell runs slower; --jobs "
        f"{cores} keeps a core for each process"
    ], out(p)
    p = run_script("reproduce.sh", *grid, "--jobs", cores, env=env)
    assert p.returncode == 0 and "warning:" not in p.stderr, out(p)
    p = run_script("reproduce.sh", *grid, "--jobs", 999, env=env)
    assert p.returncode == 0, out(p)
    assert [line for line in p.stderr.splitlines() if "warning:" in line] == [
        f"[reproduce] warning: --jobs 999 ({cores + 1} cells to run) x --nproc 1 = {cores + 1} "
        f"training processes at once on {cores} CPU cores: they share the cores and every cell "
        f"runs slower; --jobs {cores} keeps a core for each process"
    ], out(p)
    # as many cells as cores: no warning however large --jobs
    few = ["--seeds", ",".join(str(s) for s in range(1, cores + 1))]
    p = run_script("reproduce.sh", *grid, *few, "--jobs", 999, env=env)
    assert p.returncode == 0 and "warning:" not in p.stderr, out(p)
    # a done cell runs nothing: cores + 1 cells, one done, fit the cores
    cells = "".join(f"qk_cell_add c{i} {work}/c{i} gl-en twt; " for i in range(cores + 1))
    (work / "c0/checkpoints").mkdir(parents=True)
    for f in ("checkpoints/checkpoint_best.pt", "train.json", "test.score.json"):
        (work / "c0" / f).write_text("x\n")
    os.utime(work / "c0/checkpoints/checkpoint_best.pt", (1, 1))  # scores newer: decoded
    p = bash(cells + "_qk_warn_cpu_jobs 999", env)
    assert p.returncode == 0 and p.stderr == "", out(p)
    # more processes per cell than cores; GPU cells are never warned about
    p = bash(f"qk_cell_add x {work}/x gl-en twt; QK_NPROC={cores + 1}; _qk_warn_cpu_jobs 1", env)
    assert p.stderr.rstrip().endswith(f"--jobs 1 --nproc {cores} keeps a core for each process")
    p = bash("_qk_warn_cpu_jobs 999", make_env(work, CUDA_VISIBLE_DEVICES="0,1"))
    assert p.returncode == 0 and p.stderr == ""


@pytest.mark.parametrize(
    "value, ids", [("0,1", ["0", "1"]), ("", []), ("-1", []), ("2, 3,-1,4", ["2", "3"])]
)
def test_gpu_list_reads_cuda_visible_devices_as_cuda_does(tmp_path, value, ids):
    p = bash("qk_gpu_list", make_env(tmp_path, CUDA_VISIBLE_DEVICES=value))
    assert p.stdout.split() == ids


# ------------------------------------------------------------------------- Slurm: dry runs
@pytest.mark.slow
def test_slurm_dry_run_of_the_paper_grid(work):
    """The issue's command: 90 training cells in one array job, the aggregation after it."""
    p = run_script(
        "reproduce.sh", *PAPER_GRID, "--launcher", "slurm", "--dry-run", env=make_env(work)
    )
    assert p.returncode == 0, out(p)
    lines = p.stdout.splitlines()
    i = next(
        i for i, line in enumerate(lines) if line.endswith("/cells.tsv (task i = line i + 1):")
    )
    cells = [line.split("\t") for line in lines[i + 1 : i + 91]]
    assert (
        lines[i + 91].startswith("# ") and "/cells.sbatch (submitted with: sbatch" in lines[i + 91]
    )
    pairs = ("ar-en", "en-vi", "gl-en", "he-en", "sk-en")
    assert sorted((c[2], c[3], c[c.index("--seed") + 1]) for c in cells) == sorted(
        (p_, s, str(n))
        for p_ in pairs
        for s in ("postnorm_layernorm", "prenorm_fixnorm_layernorm", "prenorm_layernorm",
                  "qknorm_paper", "scalenorm_qknorm", "twt")
        for n in (1, 2, 3)
    )  # fmt: skip
    assert all(
        c[1] == f"{work}/runs/{c[2]}/paper/{c[3]}/seed{c[c.index('--seed') + 1]}" for c in cells
    )
    cell_opts = sbatch_lines(p.stdout, "cells.sbatch")
    assert cell_opts[:6] == [
        "--job-name=qk-reproduce",
        "--array=0-89",
        f"--output={Path(lines[i].split()[1]).parent}/logs/%A_%a.out",
        "--open-mode=append",
        "--requeue",
        "--signal=B:USR1@300",
    ]
    # the paper profile's resources: one GPU, 4 CPUs, 16G, 24 h per start
    assert cell_opts[6:] == [
        "--time=24:00:00", "--nodes=1", "--ntasks-per-node=1", "--cpus-per-task=4", "--mem=16G",
        "--gres=gpu:1",
    ]  # fmt: skip
    agg = sbatch_lines(p.stdout, "aggregate.sbatch")
    assert "--dependency=afterany:CELLS_JOB_ID" in agg and not any("gres" in a for a in agg)
    (agg_cmd,) = [c for c in commands(p.stdout, "exec bash ") if "slurm_cell.sh" not in c[2]]
    assert agg_cmd[2].endswith("scripts/reproduce.sh") and agg_cmd[-1] == "--aggregate-only"
    assert flags(agg_cmd)["--seeds"] == "1,2,3" and flags(agg_cmd)["--profile"] == "paper"
    assert len(train_commands(p.stdout)) == 90
    assert "qknorm_tools.collect" not in p.stdout  # the aggregation job collects
    assert not work.exists(), "a dry run writes nothing"


@pytest.mark.slow
def test_slurm_dry_run_of_a_two_node_cell(work):
    """2 nodes x 4 GPUs: 8 Slurm tasks, srun + fairseq's Slurm support, the profile's tokens
    per update kept (4096 / 8 per process), 4 GPUs and 4 x 16G per node."""
    p = run_script(
        "reproduce.sh", "--pairs", "gl-en", "--systems", "twt", "--profile", "paper",
        "--launcher", "slurm", "--nproc", "8", "--nodes", "2", "--partition", "gpu",
        "--account", "nmt", "--sbatch-args=--qos=long --time=48:00:00", "--dry-run",
        env=make_env(work),
    )  # fmt: skip
    assert p.returncode == 0, out(p)
    opts = sbatch_lines(p.stdout, "cells.sbatch")
    assert opts[6:] == [
        "--time=24:00:00", "--nodes=2", "--ntasks-per-node=4", "--cpus-per-task=4", "--mem=64G",
        "--gres=gpu:4", "--partition=gpu", "--account=nmt", "--qos=long", "--time=48:00:00",
    ]  # fmt: skip
    cell = next(line for line in p.stdout.splitlines() if line.startswith("gl-en/twt/seed1\t"))
    assert cell.split("\t")[2:] == ["gl-en", "twt", "--nproc", "8", "--launch", "srun", "--seed",
                                    "1", "--profile", "paper", "--precision", "fp32"]  # fmt: skip
    (cmd,) = train_commands(p.stdout)
    assert cmd[2:7] == ["srun", "--ntasks", "8", "--kill-on-bad-exit=1", "fairseq-train"]
    f = flags(cmd)
    assert f["--max-tokens"] == "512" and f["--distributed-world-size"] == "8"
    assert f["--distributed-backend"] == "nccl" and "--cpu" not in f
    assert "--distributed-port" in f
    assert "--partition=gpu" in sbatch_lines(p.stdout, "aggregate.sbatch")


@pytest.mark.slow
def test_ablation_on_slurm_dry_run(work):
    p = run_script("ablation.sh", "gl-en", "--launcher", "slurm", "--jobs", "2", "--dry-run",
                   env=make_env(work))  # fmt: skip
    assert p.returncode == 0, out(p)
    opts = sbatch_lines(p.stdout, "cells.sbatch")
    assert "--array=0-7%2" in opts and "--cpus-per-task=2" in opts and "--mem=4G" in opts
    assert not any("gres" in o for o in opts)
    (agg_cmd,) = [c for c in commands(p.stdout, "exec bash ") if "slurm_cell.sh" not in c[2]]
    assert agg_cmd[2].endswith("scripts/ablation.sh") and agg_cmd[3] == "gl-en"
    assert agg_cmd[-1] == "--aggregate-only"
    assert len(train_commands(p.stdout)) == 8
    assert "qknorm_tools.evaluate ablation" not in p.stdout  # the aggregation job reports


@pytest.mark.parametrize(
    "args, rc, message",
    [
        (["--launcher", "pbs"], 2, "--launcher must be local or slurm, got 'pbs'"),
        (["--nodes", "2"], 2, "--nodes needs --launcher slurm"),
        (["--launcher", "slurm", "--nproc", "3", "--nodes", "2"], 2, "multiple of --nodes 2"),
        (["--launcher", "slurm", "--gpus", "0"], 2, "--gpus is for the local launcher"),
        (["--nproc", "0"], 2, "--nproc must be a positive integer"),
        (["--launcher", "slurm", "--nodes", "2", "--nproc", "2", "--profile", "cpu-proxy"], 2,
         "multi-node cells are for GPU profiles"),
        (["--launcher", "slurm", "--sbatch-args=qos=high"], 1, "'qos=high' is not an sbatch"),
        (["--dry-run", "--status"], 2, "--dry-run and --status exclude each other"),
    ],
)  # fmt: skip
@pytest.mark.slow
def test_launcher_rejects_bad_options(args, rc, message, work):
    p = run_script(
        "reproduce.sh", "--pairs", "gl-en", "--systems", "twt", "--dry-run", *args,
        env=make_env(work),
    )  # fmt: skip
    assert p.returncode == rc, out(p)
    assert message in p.stderr


@pytest.mark.slow
def test_extra_fairseq_flags_reach_every_cell(work):
    """reproduce.sh and ablation.sh -- ARGS: appended to each cell's fairseq-train command."""
    for script, args in (
        ("reproduce.sh", ["--pairs", "gl-en,sk-en", "--systems", "twt,qknorm_paper"]),
        ("ablation.sh", ["gl-en"]),
    ):
        p = run_script(
            script, *args, "--dry-run", "--", "--fp16", "--weight-decay", "0.01", env=make_env(work)
        )
        assert p.returncode == 0, out(p)
        cmds = train_commands(p.stdout)
        assert len(cmds) in (4, 8) and all(
            c[-3:] == ["--fp16", "--weight-decay", "0.01"] for c in cmds
        )
        # evaluation gets the cell's options, never fairseq-train's flags
        assert all("--fp16" not in c for c in commands(p.stdout, "bash ") if "evaluate.sh" in c[1])


def test_make_grid_passes_launcher_and_train_args():
    p = subprocess.run(
        ["make", "-n", "-C", str(REPO), "grid", "PROFILE=paper", "PAIRS=all", "LAUNCHER=slurm",
         "JOBS=4", "LAUNCH_ARGS=--partition gpu", "TRAIN_ARGS=--fp16"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    (line,) = [s for s in p.stdout.replace("\\\n", " ").splitlines() if "reproduce.sh" in s]
    cmd = shlex.split(line.split("PATH=", 1)[1].split(" ", 1)[1])
    assert cmd[cmd.index("--launcher") + 1] == "slurm" and cmd[cmd.index("--jobs") + 1] == "4"
    assert cmd[cmd.index("--partition") + 1] == "gpu" and cmd[-2:] == ["--", "--fp16"]


# ------------------------------------------------------------------------- the cells file
@pytest.mark.parametrize(
    "content, index, message",
    [
        (None, 0, "cells file {f} not found"),
        ("a\t/r\tgl-en\ttwt\n", 1, "{f} has no line 2 (task 1)"),
        ("a /r gl-en twt\n", 0, "{f} line 1: expected NAME, RUN, PAIR, SYSTEM"),
        ("a\t/r\tgl-en\ttwt\n", "x", "INDEX must be a non-negative integer"),
    ],
)
def test_slurm_cell_rejects_bad_cells_files(tmp_path, content, index, message):
    f = tmp_path / "cells.tsv"
    if content is not None:
        f.write_text(content)
    p = run_script("slurm_cell.sh", f, index, env=make_env(tmp_path))
    assert p.returncode in (1, 2) and message.format(f=f) in p.stderr, out(p)


def test_cells_with_tabs_or_empty_arguments_are_refused(tmp_path):
    for arg in ("", "a\tb"):
        p = bash(f"qk_cell_add x /r gl-en twt -- {shlex.quote(arg)}", make_env(tmp_path))
        assert p.returncode == 1 and "is empty or holds a tab or newline" in p.stderr


# ------------------------------------------------------------------------- --status
@pytest.mark.slow
def test_status_from_markers_lock_and_squeue(tmp_path):
    """done (scores newer than the best checkpoint), running (a live lock holder here; Slurm
    RUNNING), pending (Slurm PENDING, with the reason), failed (cell.failed), todo (with
    checkpoint_last.pt: resumes). squeue is a stub printing fixed states."""
    work = tmp_path / "work"
    label = work / "runs/gl-en/cpu-proxy-max-update-5"

    def run(system, *files, job=None):
        r = label / system / "seed1"
        (r / "checkpoints").mkdir(parents=True)
        for f in files:
            (r / f).write_text("x\n")
        if job:
            (r / "slurm.job").write_text(f"{job}\t/logs/{job}.out\n")
        return r

    run("twt", "checkpoints/checkpoint_best.pt", "train.json", "test.score.json")
    run("qknorm_paper", "checkpoints/checkpoint_last.pt", job="7_1")
    run("prenorm_layernorm", job="7_2")
    failed = run("postnorm_layernorm")
    (failed / "cell.failed").write_text("exit 1 on vm at 2026-01-01 00:00:00; log /x/cell.log\n")
    locked = run("scalenorm_qknorm")
    host = socket.gethostname().split(".")[0]
    (locked / ".lock").write_text(f"pid {os.getpid()}, scripts/train.sh, started 2026 on {host}\n")
    run("prenorm_fixnorm_layernorm", "checkpoints/checkpoint_last.pt")
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "squeue").write_text(
        '#!/usr/bin/env bash\necho "$*" >>"${0%/*}/args"\necho "7_1|RUNNING|None"\n'
        'echo "7_2|PENDING|Resources"\n'
    )
    (stub / "squeue").chmod(0o755)
    env = make_env(work, PATH=f"{stub}:{os.environ['PATH']}")
    p = run_script("reproduce.sh", "--pairs", "gl-en", "--systems", "all", "--max-update", "5",
                   "--status", env=env)  # fmt: skip
    assert p.returncode == 0, out(p)
    rows = {line.split()[1].split("/")[1]: line for line in p.stdout.splitlines()[1:-1]}
    assert rows["twt"].split()[0] == "done"
    assert rows["qknorm_paper"].split()[:4] == [
        "running",
        "gl-en/qknorm_paper/seed1",
        "7_1",
        "/logs/7_1.out",
    ]
    assert rows["prenorm_layernorm"].split()[0] == "pending"
    assert "(Slurm PENDING, reason Resources)" in rows["prenorm_layernorm"]
    assert (
        rows["postnorm_layernorm"].split()[0] == "failed"
        and "log /x/cell.log" in rows["postnorm_layernorm"]
    )
    assert (
        rows["scalenorm_qknorm"].split()[0] == "running"
        and f"pid {os.getpid()}" in rows["scalenorm_qknorm"]
    )
    assert rows["prenorm_fixnorm_layernorm"].split()[0] == "todo"
    assert "resumes from checkpoints/checkpoint_last.pt" in rows["prenorm_fixnorm_layernorm"]
    assert p.stdout.splitlines()[-1] == "6 cells: 1 done, 2 running, 1 pending, 1 failed, 1 todo"
    assert (stub / "args").read_text().split()[-1] in ("7_1,7_2", "7_2,7_1")  # one call


# ------------------------------------------------------------------------- train.sh --nproc
@pytest.mark.parametrize(
    "args, devices, launch, expect",
    [
        ([], "", ["torchrun", "--standalone", "--nproc_per_node", "2"],
         {"--max-tokens": "2048", "--cpu": True, "--distributed-backend": "gloo"}),
        ([], "0,1,2,3", ["torchrun", "--standalone", "--nproc_per_node", "2"],
         {"--max-tokens": "2048", "--distributed-backend": "nccl"}),
        (["--launch", "srun", "--profile", "paper"], "", ["srun", "--ntasks", "2",
         "--kill-on-bad-exit=1"], {"--max-tokens": "2048", "--distributed-backend": "nccl",
         "--distributed-port": "10000"}),
    ],
)  # fmt: skip
def test_train_nproc_keeps_the_tokens_per_update(work, args, devices, launch, expect):
    env = make_env(work, CUDA_VISIBLE_DEVICES=devices)
    p = run_script("train.sh", "gl-en", "twt", "--nproc", 2, *args, "--dry-run", env=env)
    assert p.returncode == 0, out(p)
    (cmd,) = train_commands(p.stdout)
    threads = "1" if "--cpu" in expect else "2"  # the profile's 2 threads shared out on CPU
    assert cmd[1] == f"OMP_NUM_THREADS={threads}" and cmd[2 : 2 + len(launch)] == launch
    assert cmd[2 + len(launch)] == "fairseq-train"
    f = flags(cmd)
    assert {k: f.get(k) for k in expect} == expect and f["--distributed-world-size"] == "2"
    assert ("--cpu" in f) == ("--cpu" in expect)


@pytest.mark.parametrize(
    "args, devices, message",
    [
        (["--nproc", "3"], "", "--nproc 3 does not divide the profile's --max-tokens 4096"),
        (["--nproc", "4"], "0,1", "--nproc 4: only 2 GPUs here (0 1)"),
        (["--nproc", "2", "--launch", "srun"], "", "--launch srun runs inside a Slurm job"),
        (["--launch", "mpirun"], "", "--launch must be auto, torchrun or srun"),
    ],
)
@pytest.mark.slow
def test_train_nproc_errors(work, args, devices, message):
    env = make_env(work, CUDA_VISIBLE_DEVICES=devices, SLURM_JOB_ID=None)
    p = run_script("train.sh", "gl-en", "twt", *args, env=env)
    usage = "divide" in message or "--launch must" in message  # the others: this machine's
    assert p.returncode == (2 if usage else 1) and message in p.stderr, out(p)


@pytest.fixture(scope="module")
def tiny_work(tmp_path_factory):
    """A work dir with the tiny TED pair prepared, BPE'd (60 merges) and binarized."""
    root = tmp_path_factory.mktemp("nproc")
    make_tiny_ted(root / "data_in", sizes=(300, 30, 37))
    env = make_env(root / "work", QKNORM_DATA_DIR=root / "data_in")
    for step, args in (
        ("prepare_data.sh", []),
        ("bpe.sh", ["--merges", "60"]),
        ("binarize.sh", []),
    ):
        p = run_script(step, "gl-en", *args, env=env)
        assert p.returncode == 0, out(p)
    return root / "work"


# Measured (AMD EPYC Zen 4, 6 updates of the tiny twt model, the cpu-proxy profile's Adam, lr
# schedule and --clip-norm 1.0): 7.5e-9 (2^-27, a few float32 ulps at the weights' magnitude).
# tests/test_distributed.py (no clipping) measures 0.0 at the fairseq level; its reasoning and
# tolerance 1e-6 hold here: another batch would change the weights by ~1e-3.
ATOL = 1e-6


@pytest.mark.slow
def test_train_nproc_2_equals_one_process_with_update_freq_2(tiny_work, tmp_path):
    """scripts/train.sh --nproc 2 (torchrun, gloo, 2048 tokens per process) trains the same
    model as one process with --max-tokens 2048 --update-freq 2, and the run evaluates."""
    one = tmp_path / "one"
    shutil.copytree(tiny_work / "data", one / "data")
    base = ["gl-en", "twt", "--max-update", "6", "--threads", "2"]
    p = run_script(
        "train.sh",
        *base,
        "--nproc",
        "2",
        "--",
        *TINY,
        env=make_env(tiny_work, CUDA_VISIBLE_DEVICES=""),
    )
    assert p.returncode == 0, out(p)
    q = run_script("train.sh", *base, "--", *TINY, "--max-tokens", "2048", "--update-freq", "2",
                   env=make_env(one, CUDA_VISIBLE_DEVICES=""))  # fmt: skip
    assert q.returncode == 0, out(q)
    runs = [w / "runs/gl-en/cpu-proxy-max-update-6/twt/seed1" for w in (tiny_work, one)]
    log = (runs[0] / "train.log").read_text()
    assert "distributed init (rank 1)" in log
    f = flags(shlex.split((runs[0] / "command.txt").read_text()))
    assert (f["--max-tokens"], f["--distributed-world-size"], f["--distributed-backend"]) == (
        "2048",
        "2",
        "gloo",
    )
    states = [
        torch.load(r / "checkpoints/checkpoint_last.pt", weights_only=False)["model"] for r in runs
    ]
    diff = max(
        (states[0][k].double() - states[1][k].double()).abs().max().item() for k in states[0]
    )
    print(f"max |2 processes - 1 process x update-freq 2| = {diff}")
    assert diff <= ATOL, diff
    trained = [json.loads((r / "train.json").read_text()) for r in runs]
    assert trained[0]["updates"] == trained[1]["updates"] == 6
    e = run_script("evaluate.sh", "gl-en", "twt", "--max-update", 6, env=make_env(tiny_work))
    assert e.returncode == 0, out(e)
    assert json.loads((runs[0] / "test.score.json").read_text())["n_lines"] == 37


def test_cells_share_a_gpu_with_cells_per_gpu(tmp_path):
    """--cells-per-gpu K: each GPU id is offered to K running cells (small models leave a GPU
    idle); without it, more jobs than GPUs is an error (above)."""
    env = make_env(tmp_path, CUDA_VISIBLE_DEVICES="0,1")
    p = bash('QK_CELLS_PER_GPU=2; _qk_device_groups g 4; echo "${g[*]}"', env)
    assert p.returncode == 0 and p.stdout.split() == ["0", "1", "0", "1"], out(p)
    p = bash('QK_CELLS_PER_GPU=2; _qk_device_groups g 5; echo "${g[*]}"', env)
    assert p.returncode == 1 and "needs 5 GPUs, found 4" in p.stderr
    e = run_script("ablation.sh", "gl-en", "--cells-per-gpu", "2", "--launcher", "slurm",
                   "--dry-run", env=make_env(tmp_path / "w"))  # fmt: skip
    assert e.returncode == 2 and "--cells-per-gpu is for the local launcher" in e.stderr
