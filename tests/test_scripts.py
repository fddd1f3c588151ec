"""The scripts' shared machinery (scripts/lib.sh): option parsing and usage, the job pool, the
per-run lock, and what an interrupt (Ctrl-C / TERM) leaves behind: nothing running, wall time
kept. Trainings are a fake fairseq-train (tests/conftest.py) that runs until stopped."""

import json
import os
import re
import signal
import subprocess
import threading
import time

import pytest

from conftest import (
    FAR_BOUND,
    REPO,
    SCRIPTS,
    alive,
    make_data_chain,
    make_env,
    make_tiny_ted,
    out,
    run_script,
)

# Every script a user or a job runs: each has a usage (-h). lib.sh has none: it is sourced by
# the others (its functions are tested through them and by bash() below), never run.
SCRIPT_NAMES = sorted(p.name for p in SCRIPTS.glob("*.sh") if p.name != "lib.sh")


def bash(code: str, env=None, **kw) -> subprocess.CompletedProcess:
    """Run bash CODE after sourcing scripts/lib.sh."""
    return subprocess.run(
        ["bash", "-c", f'source "{SCRIPTS}/lib.sh"; {code}', "test"],
        env=env or make_env(REPO / "nonexistent"),
        capture_output=True,
        text=True,
        timeout=FAR_BOUND,
        **kw,
    )


def wait_for(predicate, proc, timeout=FAR_BOUND):
    """Wait for an event (PREDICATE true) of the started script PROC; fails at once, with its
    output, if the script exits first (an event that can no longer come is not waited for);
    TIMEOUT is only a far bound against a hang."""
    t0 = time.time()
    while not predicate():
        if proc.poll() is not None and not predicate():
            proc.reader.join(timeout=FAR_BOUND)
            raise AssertionError(f"exit {proc.returncode} before the event:\n{''.join(proc.lines)}")
        if time.time() - t0 > timeout:
            raise AssertionError(f"no event after {timeout:.0f} s (far bound)")
        time.sleep(0.1)


def pids(pid_file):
    return [int(x) for x in pid_file.read_text().split()] if pid_file.exists() else []


def start(args, env):
    """A script in its own session (its own process group, as a terminal's foreground job);
    its output (stdout and stderr) is read as it comes into ``proc.lines`` by a thread, so
    that a test can wait for a line (``has_line``)."""
    proc = subprocess.Popen(
        ["bash", *map(str, args)],
        env=env,
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    proc.lines = []
    proc.reader = threading.Thread(target=lambda: proc.lines.extend(proc.stdout), daemon=True)
    proc.reader.start()
    return proc


def has_line(proc, pattern):
    """Whether a started script has printed a line matching the regex PATTERN."""
    return any(re.search(pattern, line) for line in list(proc.lines))


def session_procs(sid: int) -> list:
    """Live processes of a session (everything a script started in its own session)."""
    found = subprocess.run(["pgrep", "-s", str(sid)], capture_output=True, text=True).stdout.split()
    return [int(pid) for pid in found if alive(int(pid))]


def finish(proc):
    """Wait for a started script to exit; its whole output."""
    proc.wait(timeout=FAR_BOUND)
    proc.reader.join(timeout=FAR_BOUND)
    return "".join(proc.lines)


def ctrl_c(proc):
    """What Ctrl-C in a terminal does: SIGINT to the foreground process group; its output."""
    os.killpg(proc.pid, signal.SIGINT)
    return finish(proc)


# ------------------------------------------------------------------------------ usage, options
def test_every_script_is_covered():
    """The usage test below covers scripts/*.sh found on disk (lib.sh is sourced, not run)."""
    assert {"lr_sweep.sh", "slurm_cell.sh", "train.sh"} <= set(SCRIPT_NAMES)
    assert "lib.sh" not in SCRIPT_NAMES
    # each one runs as ./scripts/NAME too, as git checks it out (slurm_cell.sh was not)
    modes = subprocess.run(["git", "ls-files", "-s", "scripts/*.sh"], cwd=REPO,
                           capture_output=True, text=True, check=True).stdout  # fmt: skip
    mode = {line.split("\t")[1].removeprefix("scripts/"): line.split()[0]
            for line in modes.splitlines()}  # fmt: skip
    assert {n: mode[n] for n in SCRIPT_NAMES} == {n: "100755" for n in SCRIPT_NAMES}


@pytest.mark.parametrize("name", SCRIPT_NAMES)
@pytest.mark.slow
def test_usage_lists_every_option(name):
    """-h exits 0 and its usage names every positional argument and option the script's parser
    accepts."""
    src = (SCRIPTS / name).read_text()
    call = src[src.index("qk_parse_args") :]
    call = call[: call.index('-- "$@"')]
    options = set(re.findall(r'"(--[a-z-]+)[| ]', call)) | set(re.findall(r"\|(--[a-z-]+) ", call))
    # "@PAIR_ARG SYSTEM_ARG?" -> PAIR, SYSTEM (the names the usage line shows)
    positionals = {
        x.removesuffix("?").removesuffix("_ARG")
        for spec in re.findall(r'"@([^"]*)"', call)
        for x in spec.split()
    }
    assert options or positionals, name
    p = run_script(name, "-h", env=make_env(REPO / "nonexistent"))
    assert p.returncode == 0 and p.stdout.startswith(f"usage: scripts/{name}"), out(p)
    usage_line = p.stdout.splitlines()[0]
    missing = [o for o in options if o not in p.stdout and o != "--dropout"]  # bpe.sh's alias
    missing += [x for x in positionals if not re.search(rf"\b{x}\b", usage_line)]
    assert not missing, (name, missing)


def test_parse_args():
    spec = '"@A_ARG B_ARG?" "--x X" "--y|--yy Y" "--on ON=1"'
    p = bash(
        f"B_ARG=dflt X= Y= ON=0; qk_parse_args {spec} -- a --x=1 --yy 2 --on -- rest r2; "
        f'echo "$A_ARG $B_ARG $X $Y $ON ${{QK_REST[*]}}"'
    )
    assert p.returncode == 0 and p.stdout == "a dflt 1 2 1 rest r2\n", out(p)
    for args, msg in (
        (["--x"], "--x needs a value"),
        (["a", "--x", "--on"], "--x needs a value"),
        ([], "missing A"),
        (["a", "b", "c"], "unexpected argument 'c'"),
        (["a", "--on=1"], "--on takes no value"),
        (["a", "--z"], "unknown option '--z'"),
    ):
        p = bash(f"X= Y= ON=0; qk_parse_args {spec} -- {' '.join(args)}")
        assert p.returncode == 2 and f"error: {msg}" in p.stderr, (args, out(p))


def test_relative_work_dir_is_made_absolute(tmp_path):
    """QKNORM_WORK_DIR=w from the directory D is D/w for every step, also for the steps that
    cd into the work dir (demo.sh's comparison wrote to w/w/results and then failed)."""
    env = make_env(tmp_path / "unused", QKNORM_WORK_DIR="w")
    p = bash(
        'printf "%s|%s|%s\\n" "$QK_WORK_DIR" "$QK_DATA" "$QKNORM_WORK_DIR"', env=env, cwd=tmp_path
    )
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == f"{tmp_path}/w|{tmp_path}/w/data|{tmp_path}/w"


@pytest.mark.slow
def test_demo_dry_run_prints_every_step_and_writes_nothing(tmp_path):
    """The README's main job previewed: the data steps, both systems' fairseq-train and
    fairseq-generate commands at the demo's settings, the report; no file made, no bf16
    measurement (a cached verdict or fp32)."""
    work = tmp_path / "work"
    env = make_env(work, QKNORM_BF16=None)
    p = run_script("demo.sh", "--max-update", "40", "--dry-run", env=env)
    assert p.returncode == 0, out(p)
    lines = p.stdout.splitlines()
    steps = [line for line in lines if line.startswith("# ")]
    assert steps[:2] == ["# 1. data (each step skips finished outputs)",
                         "# 2. both systems side by side, one thread each: train, then decode "
                         "and score test"]  # fmt: skip
    assert steps[2:5] == ["# twt", "# outputs: " + steps[3][len("# outputs: ") :], "# qknorm_paper"]
    assert steps[-1] == f"# 3. the report -> {work}/results/cpu-proxy-max-update-40/gl-en/"
    assert [line.split()[1].rsplit("/", 1)[-1] for line in lines[1:4]] == [
        "prepare_data.sh", "bpe.sh", "binarize.sh"]  # fmt: skip
    trains = [line for line in lines if " fairseq-train " in line]
    assert len(trains) == 2 and all("--max-update 40 " in t for t in trains)
    assert [re.search(r"--arch (\S+)", t).group(1) for t in trains] == [
        "transformer_twt_proxy", "transformer_qknorm_paper_proxy"]  # fmt: skip
    assert sum(" fairseq-generate " in line for line in lines) == 2
    report = lines[lines.index(steps[-1]) + 1 :]
    assert [r.split(" -m ")[1].split()[:2] for r in report] == [
        ["qknorm_tools.collect", "runs"], ["qknorm_tools.evaluate", "compare"],
        ["qknorm_tools.plots", "curves"], ["qknorm_tools.plots", "g"],
        ["qknorm_tools.plots", "health"], ["qknorm_tools.plots", "bleu-bars"]]  # fmt: skip
    assert report[1].startswith(f"(cd {work} && ")
    assert "measuring" not in p.stderr  # no bf16 measurement
    assert not work.exists() or not any(work.iterdir()), sorted(work.rglob("*"))


def test_other_budget_gets_its_own_runs(tmp_path):
    """QKNORM_MAX_UPDATE / --max-update other than the profile's: runs/PAIR/PROFILE-max-update-N."""
    for env_budget, args, label in (
        (None, [], "cpu-proxy"),
        ("40", [], "cpu-proxy-max-update-40"),
        ("40", ["--max-update", "60"], "cpu-proxy-max-update-60"),
        (None, ["--max-update", "1200"], "cpu-proxy"),
    ):
        env = make_env(tmp_path, QKNORM_MAX_UPDATE=env_budget)
        p = run_script("train.sh", "gl-en", "twt", *args, "--dry-run", env=env)
        assert p.returncode == 0, out(p)
        assert f"/runs/gl-en/{label}/twt/seed1/checkpoints " in p.stdout, (label, p.stdout)


# ------------------------------------------------------------------------------ the pool
POOL = """
job() {  # job NAME SECONDS RC: prints two lines, records its pid
    echo "$$" >>"$PIDS"; echo "$1 started"; sleep "$2" & wait $!; echo "$1 done"; return "$3"
}
qk_pool_init 2
qk_pool_submit a "" job a 0.2 0
qk_pool_submit b "$LOGB" job b 0.5 3
qk_pool_submit c "" job c "$SLOW" 0
qk_pool_wait
echo "failed: ${QK_POOL_FAILED[*]}"
"""


def test_pool_prefixes_output_and_reports_failures(tmp_path):
    env = make_env(tmp_path, PIDS=tmp_path / "pids", LOGB=tmp_path / "b.log", SLOW="0.1")
    p = bash(POOL, env=env)
    assert p.returncode == 0, out(p)
    lines = p.stdout.splitlines()
    assert {"[a] a started", "[a] a done", "[b] b started", "[b] b done", "[c] c done"} <= set(
        lines
    )
    assert lines[-1] == "failed: b" and "b failed (exit 3)" in p.stderr
    assert (tmp_path / "b.log").read_text() == "b started\nb done\n"  # the job's own output
    assert len(pids(tmp_path / "pids")) == 3


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
@pytest.mark.slow
def test_interrupted_pool_stops_every_job(tmp_path, sig):
    env = make_env(tmp_path, PIDS=tmp_path / "pids", LOGB="", SLOW="300")
    code = POOL.replace("0.2 0", "300 0").replace("0.5 3", "300 3")
    proc = start(["-c", f'source "{SCRIPTS}/lib.sh"; {code}', "test"], env)
    # a and b run (each has printed its first line), c waits for a slot
    wait_for(
        lambda: has_line(proc, r"^\[a\] a started") and has_line(proc, r"^\[b\] b started"), proc
    )
    if sig == signal.SIGINT:
        ctrl_c(proc)
    else:  # TERM to the script alone (kill PID), not to its group
        proc.send_signal(signal.SIGTERM)
        finish(proc)
    assert proc.returncode == {signal.SIGINT: 130, signal.SIGTERM: 143}[sig]
    said = {signal.SIGINT: "interrupted (Ctrl-C)", signal.SIGTERM: "stopped (TERM)"}[sig]
    assert has_line(proc, rf"^\[test\] {re.escape(said)}: stopping what this script started; "
                    "rerun the same command to go on$")  # fmt: skip
    assert len(pids(tmp_path / "pids")) == 2  # c never started
    assert not [pid for pid in pids(tmp_path / "pids") if alive(pid)]
    assert session_procs(proc.pid) == []  # nothing the script started is left (sleeps included)


# ------------------------------------------------------------------------------ train.sh
@pytest.fixture
def binarized(tmp_path):
    """A work dir whose data/bin/gl-en counts as binarized (the fake trainer reads nothing)."""
    work = tmp_path / "work"
    make_data_chain(work)
    return work


@pytest.mark.slow
def test_a_run_is_never_trained_twice_at_once(binarized, fake_fairseq_train):
    fake_bin, pid_file = fake_fairseq_train
    env = make_env(binarized, FAKE_TRAIN_PIDS=pid_file, PATH=f"{fake_bin}:{os.environ['PATH']}")
    first = start([SCRIPTS / "train.sh", "gl-en", "twt", "--max-update", "5"], env)
    wait_for(lambda: pids(pid_file), first)
    run = binarized / "runs/gl-en/cpu-proxy-max-update-5/twt/seed1"
    for script in ("train.sh", "evaluate.sh"):
        p = run_script(script, "gl-en", "twt", "--max-update", 5, env=env)
        assert p.returncode == 1, out(p)
        assert (
            f"error: {run} is in use by another process (pid {first.pid}, "
            f"scripts/train.sh gl-en twt --max-update 5, started " in p.stderr
        ), p.stderr
        assert "never trained or evaluated by two processes at once" in p.stderr
    assert len(pids(pid_file)) == 1  # the second never started a training
    ctrl_c(first)
    assert not alive(pids(pid_file)[0])


@pytest.mark.slow
def test_ctrl_c_stops_training_and_keeps_wall_time(binarized, fake_fairseq_train):
    fake_bin, pid_file = fake_fairseq_train
    env = make_env(binarized, FAKE_TRAIN_PIDS=pid_file, PATH=f"{fake_bin}:{os.environ['PATH']}")
    run = binarized / "runs/gl-en/cpu-proxy-max-update-5/twt/seed1"
    proc = start([SCRIPTS / "train.sh", "gl-en", "twt", "--max-update", "5"], env)
    wait_for(lambda: has_line(proc, r"QKNorm g0 = 12\.5"), proc)  # the training's lines are logged
    time.sleep(2.2)  # a lower bound of the wall time kept (a slower machine only adds to it)
    output = ctrl_c(proc)
    assert proc.returncode == 130, output
    assert not alive(pids(pid_file)[0]), "fairseq-train left running"
    assert session_procs(proc.pid) == []
    first = int((run / "wall_seconds").read_text())
    assert first >= 2 and not (run / "train.json").exists()
    # rerun: resumes (checkpoint_last.pt), finishes, and wall_seconds counts both parts
    p = run_script(
        "train.sh", "gl-en", "twt", "--max-update", 5, env={**env, "FAKE_TRAIN_SECONDS": "1"}
    )
    assert p.returncode == 0, out(p)
    assert "resuming from" in p.stderr
    assert (
        f"checkpoints every 400 updates in {run}/checkpoints: an interrupted run resumes from the "
        "last one (rerun the same command)"
    ) in output  # cpu-proxy's --save-interval-updates, said before training starts
    train = json.loads((run / "train.json").read_text())
    assert train["wall_seconds"] == int((run / "wall_seconds").read_text()) >= first + 1
    assert train["updates"] == 2 and train["qk_norm_g0"] == 12.5  # from train.log, both parts


@pytest.mark.slow
def test_a_rerun_without_a_checkpoint_says_it_starts_over(binarized, fake_fairseq_train):
    """An attempt stopped before fairseq's first save leaves nothing to resume: the rerun says
    so instead of looking like a resume (a new user's Ctrl-C before update 400)."""
    fake_bin, pid_file = fake_fairseq_train
    env = make_env(binarized, FAKE_TRAIN_PIDS=pid_file, PATH=f"{fake_bin}:{os.environ['PATH']}")
    run = binarized / "runs/gl-en/cpu-proxy-max-update-5/twt/seed1"
    proc = start([SCRIPTS / "train.sh", "gl-en", "twt", "--max-update", "5"], env)
    wait_for(lambda: has_line(proc, r"QKNorm g0 = 12\.5"), proc)
    ctrl_c(proc)
    (run / "checkpoints" / "checkpoint_last.pt").unlink(missing_ok=True)  # before the first save
    p = run_script(
        "train.sh", "gl-en", "twt", "--max-update", 5, env={**env, "FAKE_TRAIN_SECONDS": "1"}
    )
    assert p.returncode == 0, out(p)
    assert (
        f"no checkpoint from the earlier attempt ({run}/train.log): it stopped before the first "
        "save (every 400 updates); training starts at update 0"
    ) in p.stderr, out(p)
    assert "resuming from" not in p.stderr


@pytest.mark.slow
def test_ctrl_c_on_demo_stops_both_trainings(tmp_path, fake_fairseq_train):
    """The issue's case: Ctrl-C on demo.sh left both trainings running as orphans."""
    fake_bin, pid_file = fake_fairseq_train
    data = tmp_path / "data_in"
    make_tiny_ted(data, sizes=(200, 20, 20))
    env = make_env(
        tmp_path / "work", FAKE_TRAIN_PIDS=pid_file, PATH=f"{fake_bin}:{os.environ['PATH']}"
    )
    proc = start([SCRIPTS / "demo.sh", "gl-en", "--data-dir", data, "--max-update", "5"], env)
    # data prepared, both trainings on: each has printed its first update (the readable
    # progress line: update count and budget first, qknorm_tools.progress)
    for system in ("twt", "qknorm_paper"):
        wait_for(lambda s=system: has_line(proc, rf"^\[{s}\] .* \| 1/5 updates, ETA "), proc)
    output = ctrl_c(proc)
    assert proc.returncode == 130, output
    assert [pid for pid in pids(pid_file) if alive(pid)] == []
    assert session_procs(proc.pid) == []
    # the two trainings' lines, each prefixed with its system
    for system in ("twt", "qknorm_paper"):
        assert re.search(rf"^\[{system}\] .* \| 1/5 updates, ETA ", output, flags=re.M), output
    # a rerun is not blocked by stale locks (flock dies with its holder)
    p = run_script(
        "train.sh", "gl-en", "twt", "--max-update", 5, env={**env, "FAKE_TRAIN_SECONDS": "0"}
    )
    assert p.returncode == 0, out(p)


@pytest.mark.slow
def test_arguments_fairseq_train_refuses_are_a_usage_error(binarized):
    """A flag after -- that fairseq-train's argparse refuses (here a value that is not a
    number): exit 2 with fairseq's error, nothing trained, the run directory removed (not
    left holding only its .lock: new-user trial 2) so that the corrected command is not
    refused as "trained with another command" (helper-12: exit 1 and "rerun to resume").
    fairseq-train refuses it while parsing, before any data is read (the fake data chain of
    ``binarized`` has none)."""
    env = make_env(binarized, QKNORM_BF16="0")
    args = ["gl-en", "twt", "--profile", "cpu-proxy-fast", "--max-update", 3]
    p = run_script("train.sh", *args, "--", "--clip-norm", "abc", env=env, timeout=600)
    assert p.returncode == 2, out(p)
    last = p.stderr.splitlines()[-1]
    run = binarized / "runs/gl-en/cpu-proxy-fast-max-update-3/twt/seed1"
    assert last.startswith("error: fairseq-train: error: argument --clip-norm"), last
    assert last.endswith(
        f"; nothing was trained ({run} removed; the arguments after -- are fairseq-train's)"
    )
    assert "rerun to resume" not in p.stderr
    # nor the folders above it that held only it (new-user trial 3)
    assert not run.exists() and (not run.parent.exists() or any(run.parent.iterdir()))
    assert (binarized / "runs").is_dir()


@pytest.mark.parametrize("script", ["train.sh", "evaluate.sh", "prepare_data.sh"])
@pytest.mark.slow
def test_usage_error_is_the_last_line(tmp_path, script):
    """As argparse: the synopsis (the usage line and its continuations, not the whole help),
    then the error once, last, naming --help."""
    p = run_script(script, "gl-en", "--bogus", env=make_env(tmp_path))
    assert p.returncode == 2, out(p)
    lines = p.stderr.splitlines()
    assert lines[0].startswith(f"usage: scripts/{script} PAIR")
    assert all(x.startswith("     ") for x in lines[1:-1])  # continuations only
    assert lines[-1] == (
        f"error: unknown option '--bogus' (scripts/{script} --help lists every option)"
    )
    assert p.stderr.count("--bogus") == 1
    full = run_script(script, "--help", env=make_env(tmp_path))
    assert full.returncode == 0 and full.stdout.startswith(p.stderr.rsplit("\nerror: ", 1)[0])


@pytest.mark.parametrize("below", [False, True])
def test_work_dir_that_is_a_file(tmp_path, below):
    f = tmp_path / "afile"
    f.write_text("x\n")
    work = f / "sub" if below else f
    p = run_script("train.sh", "gl-en", "twt", "--dry-run", env=make_env(work))
    assert p.returncode == 1, out(p)
    assert p.stderr == (
        f"error: QKNORM_WORK_DIR={work}: {f} is not a directory (the work dir holds data/, runs/ "
        "and results/; point QKNORM_WORK_DIR at a directory)\n"
    )


@pytest.mark.parametrize(
    "script, args",
    [
        ("train.sh", ["gl-en", "twt", "--dry-run"]),
        ("evaluate.sh", ["gl-en", "twt"]),
        ("ablation.sh", ["gl-en", "--profile", "cpu-proxy", "--dry-run"]),
        ("reproduce.sh", ["--pairs", "gl-en", "--systems", "twt", "--dry-run"]),
    ],
)
@pytest.mark.slow
def test_a_budget_that_never_stops_is_a_usage_error_up_front(tmp_path, script, args):
    p = run_script(script, *args, "--max-update", 0, env=make_env(tmp_path))
    assert p.returncode == 2, out(p)
    assert p.stderr.splitlines()[-1] == (
        "error: --max-update 0 with profile cpu-proxy (max-epoch 0) would never stop training "
        "(scripts/" + script + " --help lists every option)"
    )
    assert not p.stdout  # nothing planned or run


def test_lr_overflow_is_named(tmp_path):
    p = run_script("train.sh", "gl-en", "twt", "--lr", "1e400", "--dry-run", env=make_env(tmp_path))
    assert p.returncode == 2
    assert p.stderr.splitlines()[-1] == (
        "error: --lr '1e400' overflows: fairseq reads it as a double, at most about 1.8e308 "
        "(infinite above) (scripts/train.sh --help lists every option)"
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--size", "d128", "--profile", "paper"], "--size d128 needs a CPU profile"),
        (["--precision", "fp16"], "--precision must be bf16, fp32 or auto, got 'fp16'"),
        (["--bf16-autocast", "--precision", "fp32"], "--bf16-autocast and --precision fp32"),
    ],
)
@pytest.mark.slow
def test_usage_errors_come_before_the_data_check(tmp_path, args, message):
    """On a fresh clone (no data yet) a bad option is said as a usage error, not hidden behind
    "bpe.json not found" (helper-12: exit 1 without --dry-run, exit 2 with it)."""
    p = run_script("train.sh", "gl-en", "twt", *args, env=make_env(tmp_path))
    assert p.returncode == 2, out(p)
    assert p.stderr.splitlines()[-1].startswith(f"error: {message}"), p.stderr
    assert "bpe.json" not in p.stderr


@pytest.mark.parametrize(
    "script, args, message",
    [
        ("lr_sweep.sh", ["gl-en", "--partition", "gpu"], "--partition needs --launcher slurm"),
        ("ablation.sh", ["gl-en", "--account", "a1"], "--account needs --launcher slurm"),
        (
            "reproduce.sh",
            ["--pairs", "gl-en", "--systems", "twt", "--sbatch-args=--qos=x"],
            "--sbatch-args needs --launcher slurm",
        ),
        (
            "lr_sweep.sh",
            ["gl-en", "--lrs", "1e-3,3e-3,1e-3"],
            "bad --lrs list '1e-3,3e-3,1e-3': 1e-3 is given twice",
        ),
        (
            "lr_sweep.sh",
            ["gl-en", "--lrs", "1e-3,0.001"],
            "bad --lrs list '1e-3,0.001': '0.001' is lr 1e-3 again (given twice, written another "
            "way)",
        ),
        (
            "bpe.sh",
            ["gl-en", "--vocab-size", "8000"],
            "--vocab-size is sentencepiece's (--tool sentencepiece); subword-nmt's size is "
            "--merges",
        ),
        (
            "bpe.sh",
            ["gl-en", "--tool", "sentencepiece", "--merges", "30"],
            "--merges is subword-nmt's; sentencepiece's size is --vocab-size",
        ),
        (
            "bpe.sh",
            ["gl-en", "--tool", "sentencepiece", "--vocab-threshold", "5"],
            "--vocab-threshold is subword-nmt's (apply-bpe --vocabulary-threshold); sentencepiece "
            "has none",
        ),
    ],
)
@pytest.mark.slow
def test_options_that_would_be_dropped_are_usage_errors(tmp_path, script, args, message):
    """helper-12: sbatch's options with the local launcher, a repeated lr and the other BPE
    tool's options were accepted and dropped without a word (a repeated seed, system or size
    was already refused); said before the data is looked for (none here)."""
    env = make_env(tmp_path)
    p = run_script(script, *args, *([] if script == "bpe.sh" else ["--dry-run"]), env=env)
    assert p.returncode == 2, out(p)
    assert p.stderr.splitlines()[-1].startswith(f"error: {message} (scripts/{script} --help")
    assert not p.stdout  # nothing planned
    # the environment's defaults stay ambient: not refused with the local launcher
    if "--partition" in args:
        p = run_script(script, "gl-en", "--dry-run", env={**env, "QKNORM_SLURM_PARTITION": "gpu"})
        assert p.returncode == 0, out(p)
