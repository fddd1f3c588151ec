"""The CPU profiles' PROFILE_BF16=auto: bf16 autocast only where measured faster on this CPU.

qknorm_model_tools/bf16_auto.py decides (native bf16, then a cached or new measurement);
scripts/lib/config.sh:qk_resolve_bf16 files the runs as seedN-bf16 and exports the decision.
"""

import json
import subprocess
import sys

import pytest

from fairseq_qknorm.tasks import cpu_bf16
from qknorm_model_tools import bf16_auto

from conftest import FAR_BOUND, REPO, cli_env

NATIVE, NATIVE_REASON = cpu_bf16.native_bf16_support()


def bench_result(**ratios):
    """A ``bf16_auto.measure`` result whose per-repetition bf16 speed-ups are ``ratios[system]``
    (step times: fp32 = the ratio, bf16 = 1 s)."""
    return {
        "machine": {"date_utc": "2026-12-01 00:00:00 UTC"},
        "model": {
            "systems": {
                name: {"fp32": {"samples_s": list(r)}, "bf16": {"samples_s": [1.0] * len(r)}}
                for name, r in ratios.items()
            }
        },
    }


def test_verdict_from_the_bootstrap_interval_of_both_systems():
    # one disturbed repetition (0.84) does not decide: the interval of the median is above 1
    bf16, why = bf16_auto.verdict(
        bench_result(
            twt=[1.2, 1.25, 1.3, 1.4, 1.45, 1.5, 1.6],
            qknorm_paper=[0.84, 1.5, 1.7, 1.9, 2.2, 2.5, 3.3],
        )
    )
    assert bf16 is True
    assert why == (
        "bf16 faster than fp32 for a training step: "
        "twt 1.40x (95% CI 1.25-1.50; repetitions 1.20-1.60), "
        "qknorm_paper 1.90x (95% CI 1.50-2.50; repetitions 0.84-3.30)"
    )
    # a tie stays fp32: the interval of twt's median reaches below 1
    bf16, why = bf16_auto.verdict(
        bench_result(twt=[0.9, 0.95, 0.98, 1.02, 1.05, 1.08, 1.1], qknorm_paper=[1.5] * 7)
    )
    assert bf16 is False and why.startswith("bf16 not surely faster than fp32")
    assert "twt 1.02x (95% CI 0.95-1.08;" in why
    with pytest.raises(ValueError, match="no bf16 and fp32 step times for qknorm_paper"):
        bf16_auto.verdict(bench_result(twt=[1.3] * 5))


def forbid_measuring(monkeypatch):
    def fail(*args):
        raise AssertionError(f"measured: {args}")

    monkeypatch.setattr(bf16_auto, "measure", fail)


def test_no_native_bf16_is_fp32_without_measuring(tmp_path, monkeypatch):
    forbid_measuring(monkeypatch)
    monkeypatch.setattr(cpu_bf16, "native_bf16_support", lambda: (False, "no bf16 here"))
    assert bf16_auto.decide(tmp_path, "proxy", 1, 7, cached_only=False) == (False, "no bf16 here")
    assert list(tmp_path.iterdir()) == []


def test_measured_once_then_cached(tmp_path, monkeypatch):
    monkeypatch.setattr(cpu_bf16, "native_bf16_support", lambda: (True, "native: avx512_bf16"))
    calls = []

    def fake_measure(size, threads, reps):
        calls.append((size, threads, reps))
        return bench_result(twt=[1.3] * 5, qknorm_paper=[1.2] * 5)

    monkeypatch.setattr(bf16_auto, "measure", fake_measure)
    monkeypatch.setattr(bf16_auto.os, "getloadavg", lambda: (1.5, 1.0, 0.5))
    # nothing cached: --cached-only answers fp32 and measures nothing
    bf16, why = bf16_auto.decide(tmp_path, "proxy", 2, 7, cached_only=True)
    assert bf16 is False and why.startswith("not measured on this machine yet")
    assert calls == []
    bf16, why = bf16_auto.decide(tmp_path, "proxy", 2, 7, cached_only=False)
    assert bf16 is True and why.startswith(
        "bf16 faster than fp32 for a training step: twt 1.30x (95% CI 1.30-1.30; "
    )
    assert "; measured while other processes ran (load average 1.50 -> 1.50): on an idle " in why
    assert "(measured 2026-12-01 00:00:00 UTC, load average 1.50 at start, 1.50 at end;" in why
    assert why.endswith(": delete it to measure again)")
    assert calls == [("proxy", 2, 7)]
    key = bf16_auto.cache_key("proxy", "native: avx512_bf16")
    cached = json.loads(bf16_auto.cache_file(tmp_path, key).read_text())
    assert cached["decision"]["bf16"] is True and cached["decision"]["key"] == key
    assert cached["model"]["systems"]["twt"]["fp32"]["samples_s"] == [1.3] * 5
    # the second call (also --cached-only) reads the verdict: no second measurement
    assert bf16_auto.decide(tmp_path, "proxy", 2, 7, cached_only=False)[0] is True
    assert bf16_auto.decide(tmp_path, "proxy", 2, 7, cached_only=True)[0] is True
    assert len(calls) == 1
    # another model size (or CPU, torch) is another verdict
    assert bf16_auto.cache_file(tmp_path, bf16_auto.cache_key("small", "x")) != (
        bf16_auto.cache_file(tmp_path, key)
    )


def test_a_measurement_first_says_what_and_roughly_how_long(tmp_path, monkeypatch, capsys):
    """Before the minutes it takes: what is measured, with which thread count, roughly how long
    under the load at hand, where the verdict goes; a later run with another thread count is
    told the verdict's."""
    monkeypatch.setattr(cpu_bf16, "native_bf16_support", lambda: (True, "native: avx512_bf16"))
    monkeypatch.setattr(bf16_auto.os, "getloadavg", lambda: (6.0, 5.0, 4.0))
    monkeypatch.setattr(bf16_auto.os, "cpu_count", lambda: 2)
    key = bf16_auto.cache_key("proxy", "native: avx512_bf16")
    path = bf16_auto.cache_file(tmp_path, key)
    said = []

    def fake_measure(size, threads, reps):
        said.append(capsys.readouterr().err)  # what was on the terminal when measuring began
        return bench_result(twt=[0.9] * 7, qknorm_paper=[0.9] * 7)

    monkeypatch.setattr(bf16_auto, "measure", fake_measure)
    assert bf16_auto.decide(tmp_path, "proxy", 1, 7, cached_only=False)[0] is False
    # 2 CPU-minutes on 1 thread with a fair share 2/(6+1) of the 2 cores: 7 minutes
    assert said == [
        f"[bf16 auto] measuring once whether bf16 autocast trains faster than fp32 on "
        f"{key['cpu_model']}: a training step of twt and qknorm_paper at the proxy size, fp32 and "
        f"bf16 interleaved, 7 repetitions, 1 thread(s); roughly 7 min here (load average 6.0 on "
        f"2 cores; about 1 on 2 idle cores); the verdict is cached in {path} (QKNORM_BF16=0 or 1 "
        "decides without measuring)\n"
    ]
    assert json.loads(path.read_text())["decision"]["threads"] == 1
    assert bf16_auto.rough_minutes("proxy", 2, 7, 0.0, 2) == 1.0
    assert bf16_auto.rough_minutes("smoke", 2, 7, 0.0, 2) is None
    why = bf16_auto.decide(tmp_path, "proxy", 2, 7, cached_only=False)[1]
    assert ", with 1 thread(s), not this run's 2; cached in " in why
    assert "not this run's" not in bf16_auto.decide(tmp_path, "proxy", 1, 7, cached_only=True)[1]


def test_train_plan_measures_with_the_runs_thread_count(tmp_path, monkeypatch, capsys):
    """train.sh's plan passes the run's --threads (not the profile's 2) to the measurement, in its
    command and OMP_NUM_THREADS, and leaves its stderr uncaptured (it reaches the terminal
    directly: no filter that holds its lines back)."""
    from qknorm_tools import run, run_spec

    from conftest import make_data_chain

    calls, real_run = [], subprocess.run

    def spy(cmd, **kw):
        if "qknorm_model_tools.bf16_auto" not in cmd:
            return real_run(cmd, **kw)
        calls.append((cmd[1:], kw["env"]["OMP_NUM_THREADS"], kw.get("stderr")))
        return subprocess.CompletedProcess(cmd, 0, stdout="fp32\n")

    monkeypatch.setattr(run_spec.subprocess, "run", spy)
    monkeypatch.setenv("QKNORM_BF16", "auto")
    make_data_chain(tmp_path)
    argv = ["train-plan", "--pair", "gl-en", "--system", "twt", "--profile", "cpu-proxy",
            "--seed", "1", "--threads", "1", "--dry-run", f"--work-dir={tmp_path}",
            f"--data-root={tmp_path}/data"]  # fmt: skip
    assert run.main(argv) == 0, capsys.readouterr().err
    assert calls == [
        (
            [
                "-m",
                "qknorm_model_tools.bf16_auto",
                f"{tmp_path}/bf16-auto",
                "--size",
                "proxy",
                "--threads",
                "1",
                "--cached-only",
            ],
            "1",
            None,
        )  # fmt: skip
    ]


def test_a_cached_verdict_is_read_without_the_lock_and_a_corrupt_one_is_named(
    tmp_path, monkeypatch
):
    forbid_measuring(monkeypatch)
    monkeypatch.setattr(cpu_bf16, "native_bf16_support", lambda: (True, "native"))
    path = bf16_auto.cache_file(tmp_path, bf16_auto.cache_key("proxy", "native"))
    path.with_suffix(".lock").mkdir(parents=True)  # a lock that cannot be opened
    decision = {"bf16": True, "why": "w", "date": "d"}
    path.write_text(json.dumps({"decision": decision}))
    assert bf16_auto.decide(tmp_path, "proxy", 2, 7, cached_only=False) == (
        True,
        f"w (measured d; cached in {path}: delete it to measure again)",
    )
    for text in ('{"decision": {"bf16": tr', "{}", ""):
        path.write_text(text)
        with pytest.raises(bf16_auto.CacheError, match="cannot use the cached bf16 verdict") as e:
            bf16_auto.decide(tmp_path, "proxy", 2, 7, cached_only=True)
        assert str(path) in str(e.value) and "delete it to measure again" in str(e.value)
    assert bf16_auto.main([str(tmp_path), "--cached-only"]) == 1
    # no verdict and no place to keep one: an error, never a silent fp32 that a later step
    # (reading the cache) would not repeat
    path.unlink()
    assert bf16_auto.main([str(tmp_path)]) == 1  # the lock is still a directory


@pytest.mark.slow
def test_real_measurement_at_smoke_size(tmp_path):
    """The CLI end to end on this CPU: stdout bf16 or fp32, the verdict cached with its figures."""
    p = subprocess.run(
        [sys.executable, "-m", "qknorm_model_tools.bf16_auto", str(tmp_path), "--size", "smoke",
         "--threads", "1"],
        cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=FAR_BOUND,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr[-3000:]
    files = list(tmp_path.glob("bf16-auto-smoke-*.json"))
    if not NATIVE:
        assert p.stdout == "fp32\n" and files == []
        assert f"[bf16 auto] fp32: {NATIVE_REASON}" in p.stderr
        return
    assert len(files) == 1, list(tmp_path.iterdir())
    cached = json.loads(files[0].read_text())
    bf16, why = bf16_auto.verdict(cached)
    assert cached["decision"]["bf16"] is bf16 and cached["decision"]["why"].startswith(why)
    assert p.stdout == ("bf16\n" if bf16 else "fp32\n")
    assert f"[bf16 auto] {'bf16 autocast' if bf16 else 'fp32'}: {why}" in p.stderr
    assert "| twt |" not in p.stderr  # the benchmark's own report stays in the cache file
    assert cached["model"]["reps"] == 7 and set(cached["model"]["systems"]) == set(
        bf16_auto.SYSTEMS
    )


def forge_verdict(work, bf16: bool):
    """Write the cached verdict the CPU profiles would find in ``work`` (no measurement)."""
    key = bf16_auto.cache_key("proxy", NATIVE_REASON)
    path = bf16_auto.cache_file(work / "bf16-auto", key)
    path.parent.mkdir(parents=True)
    decision = {"bf16": bf16, "why": "forged by the test", "key": key, "date": "today"}
    path.write_text(json.dumps({"decision": decision}))


@pytest.mark.slow
def test_cpu_profile_trains_and_finds_bf16_where_measured_faster(tmp_path):
    """train.sh and evaluate.sh without --bf16-autocast follow the cached verdict; QKNORM_BF16
    overrides it; fp32 and bf16 runs are never collected into one table."""
    from conftest import count_lines, make_env, make_tiny_ted, out, prepare_pair, run_script

    sizes = make_tiny_ted(tmp_path / "data_in", sizes=(200, 20, 23))
    work = tmp_path / "work"
    env = make_env(work, QKNORM_DATA_DIR=tmp_path / "data_in", QKNORM_BF16=None)
    prepare_pair(env, "--merges", 60)
    forge_verdict(work, bf16=True)
    label = work / "runs/gl-en/cpu-proxy-max-update-2/twt"
    cell = ["gl-en", "twt", "--max-update", 2, "--threads", 1]
    p = run_script("train.sh", *cell, env=env)
    assert p.returncode == 0, out(p)
    if not NATIVE:  # the verdict is never read without native bf16
        assert f"[bf16 auto] fp32: {NATIVE_REASON}" in p.stderr
        assert (label / "seed1/train.json").is_file() and not (label / "seed1-bf16").exists()
        return
    assert "[bf16 auto] bf16 autocast: forged by the test" in p.stderr
    run = label / "seed1-bf16"
    assert "--bf16-autocast" in (run / "command.txt").read_text()
    assert not (label / "seed1").exists()
    assert json.loads((run / "train.json").read_text())["precision"] == "bf16"
    # fp32 asked for before there is an fp32 run: the finished bf16 twin is named
    p = run_script("evaluate.sh", *cell, env=dict(env, QKNORM_BF16="0"))
    assert p.returncode == 1
    assert (
        "twt/seed1 is not a finished run: run scripts/train.sh gl-en twt --profile cpu-proxy "
        f"--seed 1 --max-update 2 --precision fp32 first; {run} is finished: --precision bf16 "
        "selects it"
    ) in p.stderr, out(p)
    p = run_script("evaluate.sh", *cell, env=env)  # finds seed1-bf16
    assert p.returncode == 0, out(p)
    assert count_lines(run / "test.hyp") == sizes["test"]
    # QKNORM_BF16=0: fp32 whatever was measured, in seed1
    env0 = dict(env, QKNORM_BF16="0")
    for script in ("train.sh", "evaluate.sh"):
        p = run_script(script, *cell, env=env0)
        assert p.returncode == 0, out(p)
    assert json.loads((label / "seed1/train.json").read_text())["precision"] == "fp32"
    assert "--bf16-autocast" not in (label / "seed1/command.txt").read_text()
    # one table never holds both
    p = subprocess.run(
        [sys.executable, "-m", "qknorm_tools.collect", "runs", "--run", str(run),
         "--run", str(label / "seed1"), "--work-dir", str(work), "--out-dir", str(tmp_path / "r")],
        cwd=REPO, env=cli_env(), capture_output=True, text=True,
    )  # fmt: skip
    assert p.returncode == 1 and "runs trained in different precisions (bf16: " in p.stderr, out(p)
    # a bad value is named
    p = run_script("train.sh", *cell, env=dict(env, QKNORM_BF16="yes"))
    assert p.returncode == 2
    assert "QKNORM_BF16='yes': expected 1 (bf16 autocast), 0 (fp32) or auto" in p.stderr
    # --bf16-autocast (--precision bf16) decides over QKNORM_BF16: the hint names the fp32 twin's
    run.rename(run.with_name("moved"))
    p = run_script("evaluate.sh", *cell, "--bf16-autocast", env=env)
    assert p.returncode == 1
    assert (
        f"run scripts/train.sh gl-en twt --profile cpu-proxy --seed 1 --max-update 2 "
        f"--precision bf16 first; {label / 'seed1'} is finished: --precision fp32 selects it"
    ) in p.stderr, out(p)


@pytest.mark.slow
def test_ablation_files_every_cell_by_the_decision(tmp_path):
    """The grid decides once and its cells (and their collection) follow: seedN-bf16 dirs."""
    from conftest import make_env, run_script

    env = make_env(tmp_path / "work", QKNORM_BF16="1")
    p = run_script("ablation.sh", "gl-en", "--seeds", "1", "--dry-run", env=env)
    assert p.returncode == 0, p.stderr
    cells = [line for line in p.stdout.splitlines() if line.startswith("# cell ")]
    assert len(cells) == 4 and all(line.endswith("/seed1-bf16") for line in cells), cells
    assert p.stdout.count("--bf16-autocast") == 4
    env = make_env(tmp_path / "work", QKNORM_BF16="0")
    p = run_script("ablation.sh", "gl-en", "--seeds", "1", "--dry-run", env=env)
    assert p.returncode == 0 and "--bf16-autocast" not in p.stdout
    assert p.stdout.count("/seed1\n") == 4


def test_auto_is_fp32_for_the_paper_profile_and_checks_data_before_measuring(tmp_path):
    from conftest import make_env, run_script

    work = tmp_path / "work"
    env = make_env(work, QKNORM_BF16="auto")
    p = run_script("train.sh", "gl-en", "twt", "--profile", "paper", "--dry-run", env=env)
    assert p.returncode == 0, p.stderr
    assert "[bf16 auto] fp32: profile paper trains at the papers' size" in p.stderr
    assert "--bf16-autocast" not in p.stdout and "/twt/seed1/checkpoints" in p.stdout
    # no data: said at once, nothing measured
    p = run_script("train.sh", "gl-en", "twt", env=make_env(work, QKNORM_BF16=None))
    assert p.returncode == 1 and "data/bpe/gl-en/bpe.json not found" in p.stderr
    assert not (work / "bf16-auto").exists()


@pytest.mark.slow
def test_native_only_answers_the_plugin_tasks_detection():
    """``--native-only`` (run_spec.native_bf16 asks it before a bf16 run): the plugin task's
    own detection, nothing measured or cached."""
    p = subprocess.run(
        [sys.executable, "-m", "qknorm_model_tools.bf16_auto", "--native-only"],
        capture_output=True, text=True, env=cli_env(), cwd=REPO, timeout=FAR_BOUND,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert (p.stdout, p.stderr) == (
        "bf16\n" if NATIVE else "fp32\n",
        f"[bf16 auto] {NATIVE_REASON}\n",
    )


def test_an_interrupted_measurement_says_so_in_one_line_and_exits_130(
    tmp_path, monkeypatch, capsys
):
    """Ctrl-C of train.sh while the bf16 verdict is measured reaches this process too: one
    line and 130, not a KeyboardInterrupt traceback (a new user's trial saw one)."""
    from qknorm_model_tools import bf16_auto

    def interrupted(*args):
        raise KeyboardInterrupt

    monkeypatch.setattr(bf16_auto, "decide", interrupted)
    assert bf16_auto.main([str(tmp_path)]) == 130
    assert capsys.readouterr().err.endswith("[bf16 auto] interrupted: nothing measured is kept\n")
    assert list(tmp_path.iterdir()) == []
