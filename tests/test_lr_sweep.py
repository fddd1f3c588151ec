"""The learning-rate sweep: lr identity of a run (scripts/lib.sh, train.sh --lr), divergence as a
finished result, the LR-sensitivity report (qknorm_tools.lr_sweep, evaluate lr-sensitivity) and
its figures, scripts/lr_sweep.sh as a dry run over the default grid and for real on tiny data.

The LR sensitivity is Wortsman et al. 2023 (arXiv:2309.14322, Sec. 2.2): mean over learning rates
of min(final loss, loss at initialization) minus its minimum over learning rates.
"""

import json
import math
import re
import shlex
from pathlib import Path

import pytest

from qknorm_tools import lr_sweep, plots_lr, records, trainlog
from qknorm_tools.records import RunRecord
from qknorm_tools.textio import ResultsError

from conftest import make_env, make_tiny_ted, out, run_script, run_without_torch

DEFAULT_SYSTEMS = ("prenorm_fixnorm_layernorm", "qknorm_paper", "qk_layernorm", "twt")
DEFAULT_LRS = ("3e-4", "1e-3", "3e-3", "1e-2", "3e-2", "1e-1")


def train_commands(stdout: str) -> list[list[str]]:
    return [
        shlex.split(line)
        for line in stdout.splitlines()
        if line.startswith("env ") and " fairseq-train " in line
    ]


def flag(tokens: list[str], name: str) -> str:
    """The value of the last ``name`` in a command (argparse: the last one wins)."""
    return [tokens[i + 1] for i, t in enumerate(tokens[:-1]) if t == name][-1]


# ------------------------------------------------------------------------------ lr identity
@pytest.mark.slow
def test_lr_override_replaces_the_profiles_lr_and_names_the_run(tmp_path):
    """--lr replaces the profile's peak lr only (warmup stays); the run is seedN-lrLR, and the
    profile's own lr (spelled any way) is the profile's run seedN."""
    env = make_env(tmp_path)
    base = ["gl-en", "twt", "--profile", "cpu-proxy-fast", "--dry-run"]
    plain = train_commands(run_script("train.sh", *base, env=env).stdout)[0]
    for lr, run_name in (("0.003", "seed1-lr3e-3"), ("1e-3", "seed1"), ("0.001", "seed1")):
        p = run_script("train.sh", *base, "--lr", lr, env=env)
        assert p.returncode == 0, out(p)
        cmd = train_commands(p.stdout)[0]
        assert cmd.count("--lr") == 1
        assert flag(cmd, "--lr") == ("3e-3" if run_name != "seed1" else "1e-3")
        # everything else as the profile's: warmup, schedule, budget
        for name in ("--warmup-updates", "--warmup-init-lr", "--lr-scheduler", "--max-update"):
            assert flag(cmd, name) == flag(plain, name)
        assert Path(flag(cmd, "--save-dir")).parent.name == run_name
        assert Path(flag(cmd, "--save-dir")).parts[-4] == "cpu-proxy-fast"
    p = run_script("train.sh", *base, "--lr", "fast", env=env)
    assert p.returncode == 2 and "--lr must be a non-negative decimal number" in p.stderr
    p = run_script("evaluate.sh", "gl-en", "twt", "--lr", "3e-3", env=env)  # nothing trained yet
    assert (
        p.returncode == 1 and "runs/gl-en/cpu-proxy/twt/seed1-lr3e-3 is not a finished" in p.stderr
    )
    assert "--lr 3e-3 --precision fp32 first" in p.stderr  # cpu-proxy: bf16 = auto
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").rglob("*.pt"))


# ------------------------------------------------------------------------------ the metric
def test_lr_sensitivity_equals_the_hand_computed_example():
    # l0 = 10; final losses at 4 LRs: 6, 5, diverged (NaN), 12 (above l0)
    # capped: 6, 5, 10, 10 -> mean 7.75, min 5 -> 2.75
    assert lr_sweep.lr_sensitivity([6.0, 5.0, None, 12.0], 10.0) == pytest.approx(2.75)
    assert lr_sweep.lr_sensitivity([6.0, 5.0, math.nan, 12.0], 10.0) == pytest.approx(2.75)
    assert lr_sweep.lr_sensitivity([4.0, 4.0, 4.0], 10.0) == 0.0  # flat: insensitive
    assert lr_sweep.lr_sensitivity([None, None], 10.0) == 0.0  # all diverged: degenerate 0
    with pytest.raises(ResultsError):
        lr_sweep.lr_sensitivity([], 10.0)
    with pytest.raises(ResultsError):
        lr_sweep.lr_sensitivity([5.0], math.nan)


def _rec(system, seed, lr, loss, diverged=None, bleu=None, profile="p-max-update-9"):
    return RunRecord(
        pair="gl-en",
        system=system,
        seed=seed,
        profile=profile if lr else "p-max-update-1",
        variant={"lr": lr_sweep.format_lr(lr)},  # as train.sh --lr records it
        lr=lr,
        dev_loss=loss,
        diverged=diverged,
        bleu_tok=bleu,
        max_attn_logit=None if loss is None else 10 * lr,
        run_dir=f"/runs/{system}/{seed}/{lr}",
    )


def test_lr_sweep_report_per_system():
    recs = [
        _rec("a", 1, 0.0, 10.0),
        _rec("a", 2, 0.0, 11.0),
        _rec("b", 1, 0.0, 10.5),
        # system a: seed 1 losses 6, 5, NaN-diverged; seed 2: 7, 12 (above l0 = 11), 6
        _rec("a", 1, 1e-3, 6.0, bleu=3.0),
        _rec("a", 1, 1e-2, 5.0, bleu=4.0),
        _rec("a", 1, 1e-1, 7.5, diverged="FloatingPointError: gradients are Nan/Inf"),
        _rec("a", 2, 1e-3, 7.0, bleu=2.0),
        _rec("a", 2, 1e-2, 12.0, bleu=0.5),
        _rec("a", 2, 1e-1, 6.0, bleu=5.0),
        # system b: one seed, flat curve
        _rec("b", 1, 1e-3, 6.0, bleu=3.5),
        _rec("b", 1, 1e-2, 6.0, bleu=3.6),
        _rec("b", 1, 1e-1, 6.0, bleu=3.7),
    ]
    res = lr_sweep.lr_sweep(recs)
    a, b = res.systems
    assert (a.system, b.system) == ("a", "b") and res.lrs == [1e-3, 1e-2, 1e-1]
    # seed 1: capped 6, 5, 10 (diverged: l0) -> 7 - 5 = 2; seed 2: 7, 11, 6 -> 8 - 6 = 2
    assert a.lr_sensitivity_per_seed == pytest.approx({1: 2.0, 2: 2.0})
    assert a.lr_sensitivity == pytest.approx(2.0) and b.lr_sensitivity == 0.0
    assert (a.n_runs, a.n_diverged, b.n_diverged) == (6, 2, 0)
    # best lr: mean capped loss per lr: 1e-3: 6.5, 1e-2: (5 + 11) / 2 = 8, 1e-1: (10 + 6) / 2 = 8
    assert a.best_lr == 1e-3 and a.best_loss == pytest.approx(6.5)
    assert b.best_lr == 1e-3  # a tie goes to the smaller lr
    div = {(r.seed, r.lr): r.diverged for r in res.runs if r.system == "a" and r.diverged}
    assert div[(1, 1e-1)].startswith("FloatingPointError")
    assert div[(2, 1e-2)] == "final dev loss 12.000 above the loss at initialization 11.000"
    nan_run = next(r for r in res.runs if r.system == "a" and r.seed == 1 and r.lr == 1e-1)
    assert nan_run.dev_loss is None and nan_run.capped_loss == 10.0  # its last log is not final
    # BLEU of diverged runs is not reported
    p = next(p for p in a.points if p.lr == 1e-2)
    assert p.bleu_tok == [4.0, None] and p.bleu_tok_mean == 4.0 and p.diverged == [False, True]
    md = lr_sweep.lr_sweep_markdown(res)
    assert re.search(
        r"\| a \| 2\.000 \(2\.000, 2\.000\) \| 2/6 \| 1e-3 \| 6\.500 \| 10\.500 \|", md
    )
    # final dev loss of the runs that did not diverge, per seed, daggers for diverged runs
    assert "| a | 6.500 (6.000, 7.000) | 5.000 †1 | 6.000 †1 |" in md
    assert "Wortsman et al. 2023" in md
    # BLEU of the runs that did not diverge (seed 2 at 1e-2 did), per lr
    assert "| a | 2.50 (3.00, 2.00) | 4.00 †1 | 5.00 †1 |" in md
    assert "not decoded" not in md
    doc = res.to_json()
    json.dumps(doc, allow_nan=False)  # valid JSON: no NaN
    assert doc["systems"][0]["points"][0]["capped_loss_mean"] == pytest.approx(6.5)


def test_lr_sweep_report_of_a_train_only_sweep_has_no_bleu_table():
    """The size axis' cells are not decoded: a note, not a table of dashes."""
    recs = [_rec("a", 1, 0.0, 10.0), _rec("a", 1, 1e-3, 6.0), _rec("a", 1, 1e-2, 5.0)]
    md = lr_sweep.lr_sweep_markdown(lr_sweep.lr_sweep(recs))
    assert "Test BLEU: not decoded (a train-only sweep: dev loss only)." in md
    assert "Test BLEU (tokenized" not in md
    assert md.count("| a | ") == 3  # summary, dev loss and max attention logit rows
    assert "| a | 6.000 | 5.000 |" in md


def test_lr_sweep_refuses_mixed_budgets_and_missing_lr():
    recs = [_rec("a", 1, 0.0, 10.0), _rec("a", 1, 1e-3, 6.0), _rec("a", 1, 1e-2, 6.0, profile="x")]
    with pytest.raises(ResultsError, match="several profiles/budgets"):
        lr_sweep.lr_sweep(recs)
    with pytest.raises(ResultsError, match="without a learning rate"):
        lr_sweep.lr_sweep([RunRecord(pair="gl-en", system="a", seed=1)])


def test_run_reader_takes_lr_losses_logits_and_divergence_from_the_run(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    log = (
        "x | INFO | train_inner | epoch 001:  50 / 9 loss=9.0, num_updates=50, "
        "attn_maxlogit_enc0_self=3.5, attn_maxlogit_dec0_cross=4.25\n"
        "x | INFO | train_inner | epoch 001: 100 / 9 loss=8.0, num_updates=100, "
        "attn_maxlogit_enc0_self=None\n"
        "x | INFO | valid | epoch 001 | valid on 'valid' subset | loss 7.5 | num_updates 100 "
        "| attn_maxlogit_enc0_self 5.5\n"
        "x | INFO | valid | epoch 001 | valid on 'valid' subset | loss 7.75 | num_updates 150\n"
    )
    (run / "train.log").write_text(log)
    (run / "command.txt").write_text(
        "/venv/bin/fairseq-train d --lr 1e-3 --warmup-init-lr 1e-7 --lr 3e-3\n"
    )
    records.write_train_json(run, {"pair": "gl-en", "system": "twt", "seed": 1})
    assert records.run_status(run) == ["test.score.json", "test.hyp"]
    assert records.run_status(run, scored=False) == []
    rec = records.read_run(run, scored=False)
    assert rec.lr == 3e-3  # the last --lr, as argparse reads it
    assert (rec.dev_loss, rec.dev_loss_min, rec.max_attn_logit) == (7.75, 7.5, 5.5)
    assert rec.diverged is None and rec.bleu_tok is None
    recs = trainlog.parse_log_text(log)
    # training and validation records, the largest module at each logged update
    assert trainlog.max_attention_logit_series(recs) == ([50.0, 100.0], [4.25, 5.5])
    assert trainlog.max_attention_logit_series(recs, ["train_inner"]) == ([50.0], [4.25])
    (run / "diverged").write_text("FloatingPointError: gradients are Nan/Inf\n")
    assert (
        records.read_run(run, scored=False).diverged == "FloatingPointError: gradients are Nan/Inf"
    )
    with pytest.raises(ResultsError, match="not a finished run"):
        records.read_run(run)  # scores required by default


# ------------------------------------------------------------------------------ dry run
@pytest.mark.slow
def test_lr_sweep_dry_run_prints_every_cell_with_its_lr(tmp_path):
    p = run_script("lr_sweep.sh", "gl-en", "--jobs", "2", "--dry-run", env=make_env(tmp_path))
    assert p.returncode == 0, out(p)
    cmds = train_commands(p.stdout)
    init = [c for c in cmds if flag(c, "--max-update") == "1"]
    cells = [c for c in cmds if flag(c, "--max-update") != "1"]
    assert len(init) == 4 * 2 and len(cells) == 4 * 6 * 2
    seen = set()
    for c in cells:
        save = Path(flag(c, "--save-dir")).parent
        system, run_name = save.parts[-2], save.name
        seed, lr = re.fullmatch(r"seed(\d+)(?:-lr(.+))?", run_name).groups()
        lr = lr or "1e-3"  # the profile's own lr: the profile's run name, seedN
        assert flag(c, "--lr") == lr and flag(c, "--seed") == seed and c[1] == "OMP_NUM_THREADS=1"
        assert flag(c, "--arch") == f"transformer_{system}_proxy"
        assert flag(c, "--warmup-updates") == "200" and flag(c, "--warmup-init-lr") == "1e-7"
        assert save.parts[-3] == "cpu-proxy-fast-max-update-250"
        seen.add((system, seed, lr))
    assert seen == {(s, n, lr) for s in DEFAULT_SYSTEMS for n in "12" for lr in DEFAULT_LRS}
    for c in init:  # the loss at initialization: one update at lr 0 from a warmup start of 0
        assert (flag(c, "--lr"), flag(c, "--warmup-init-lr")) == ("0", "0")
        assert Path(flag(c, "--save-dir")).parts[-4] == "cpu-proxy-fast-max-update-1"
        assert Path(flag(c, "--save-dir")).parent.name.endswith("-lr0")
    evals = re.findall(r"^bash \S+/evaluate\.sh (.*)$", p.stdout, flags=re.M)
    assert len(evals) == 48 and all("--lr " in e and "--max-update 250" in e for e in evals)
    out_dir = tmp_path / "results/cpu-proxy-fast-max-update-250/gl-en/lr-sweep"
    (collect,) = [shlex.split(x) for x in p.stdout.splitlines() if "qknorm_tools.collect" in x]
    assert collect[collect.index("runs") + 1] == "--keep-unscored"
    assert flag(collect, "--out-dir") == str(out_dir) and flag(collect, "--work-dir") == str(
        tmp_path
    )
    runs = [collect[i + 1] for i, t in enumerate(collect) if t == "--run"]
    assert sorted(runs) == sorted(str(Path(flag(c, "--save-dir")).parent) for c in cmds)
    assert "qknorm_tools.evaluate lr-sensitivity" in p.stdout
    for fig in ("loss", "maxlogit", "bleu"):
        assert (
            f"plots lr-{fig} --json {out_dir}/lr_sweep.json --out {out_dir}/lr_sweep_{fig}.png"
            in p.stdout
        )
    assert not any(tmp_path.iterdir()), "a dry run must not write anything"


@pytest.mark.slow
def test_lr_sweep_profile_lr_is_the_profiles_run(tmp_path):
    p = run_script(
        "lr_sweep.sh", "gl-en", "--systems", "twt", "--lrs", "0.001,3e-3", "--seeds", "1",
        "--max-update", "1000", "--dry-run", env=make_env(tmp_path),
    )  # fmt: skip
    assert p.returncode == 0, out(p)
    saves = [Path(flag(c, "--save-dir")).parent for c in train_commands(p.stdout)]
    # 0.001 is 1e-3 (written another way: 0.001,1e-3 is refused as a repeat, test_scripts),
    # and 1e-3 at the profile's own budget is the 2x2 ablation's run (reused, never retrained)
    assert [s.relative_to(tmp_path).as_posix() for s in saves] == [
        "runs/gl-en/cpu-proxy-fast-max-update-1/twt/seed1-lr0",
        "runs/gl-en/cpu-proxy-fast/twt/seed1",
        "runs/gl-en/cpu-proxy-fast/twt/seed1-lr3e-3",
    ]


@pytest.mark.slow
def test_lr_sweep_slurm_dry_run_prints_every_cell_and_the_report_job(tmp_path):
    """--launcher slurm: one array job over the initial models (train only) and every (system,
    seed, lr) cell, then this script with --report-only as a job after it."""
    p = run_script(
        "lr_sweep.sh", "gl-en", "--launcher", "slurm", "--partition", "gpu", "--dry-run",
        env=make_env(tmp_path),
    )  # fmt: skip
    assert p.returncode == 0, out(p)
    rows = [line.split("\t") for line in p.stdout.splitlines() if line.count("\t") >= 3]
    assert len(rows) == 4 * 2 + 4 * 6 * 2
    init, cells = rows[:8], rows[8:]
    for name, run, pair, system, *opts in init:
        seed = flag(opts, "--seed")
        assert name == f"gl-en/{system}/seed{seed}-init" and pair == "gl-en"
        assert run == str(
            tmp_path / f"runs/gl-en/cpu-proxy-fast-max-update-1/{system}/seed{seed}-lr0"
        )
        assert (flag(opts, "--lr"), flag(opts, "--max-update")) == ("0", "1")
        assert "--train-only" in opts and opts[opts.index("--") :] == [
            "--", "--warmup-init-lr", "0", "--no-save-optimizer-state",
        ]  # fmt: skip
    assert {(r[3], flag(r, "--seed")) for r in init} == {
        (s, n) for s in DEFAULT_SYSTEMS for n in "12"
    }
    seen = set()
    for name, run, pair, system, *opts in cells:
        seed, lr = flag(opts, "--seed"), flag(opts, "--lr")
        assert name == f"gl-en/{system}/seed{seed}-lr{lr}" and pair == "gl-en"
        assert "--train-only" not in opts
        assert flag(opts, "--max-update") == "250" and "--" not in opts
        run_name = f"seed{seed}" if lr == "1e-3" else f"seed{seed}-lr{lr}"  # the profile's lr
        assert run == str(
            tmp_path / f"runs/gl-en/cpu-proxy-fast-max-update-250/{system}/{run_name}"
        )
        seen.add((system, seed, lr))
    assert seen == {(s, n, lr) for s in DEFAULT_SYSTEMS for n in "12" for lr in DEFAULT_LRS}
    assert "#SBATCH --array=0-55\n" in p.stdout and "#SBATCH --partition=gpu" in p.stdout
    assert "#SBATCH --dependency=afterany:CELLS_JOB_ID" in p.stdout
    (report,) = [shlex.split(x[5:]) for x in p.stdout.splitlines() if x.startswith("exec bash ")
                 and "lr_sweep.sh" in x]  # fmt: skip
    out_dir = tmp_path / "results/cpu-proxy-fast-max-update-250/gl-en/lr-sweep"
    assert report[2:] == [
        "gl-en", "--systems", ",".join(DEFAULT_SYSTEMS), "--lrs", ",".join(DEFAULT_LRS),
        "--seeds", "1,2", "--profile", "cpu-proxy-fast", "--max-update", "250",
        "--precision", "fp32", "--results-dir", str(out_dir), "--report-only",
    ]  # fmt: skip
    # the report job's own dry run: the report commands only
    q = run_script("lr_sweep.sh", *report[2:], "--dry-run", env=make_env(tmp_path))
    assert q.returncode == 0 and not train_commands(q.stdout), out(q)
    assert "qknorm_tools.evaluate lr-sensitivity" in q.stdout and "sbatch" not in q.stdout
    # the train-only cells print no evaluate.sh command
    assert len(re.findall(r"^bash \S+/evaluate\.sh ", p.stdout, flags=re.M)) == 48
    assert not any(tmp_path.iterdir()), "a dry run must not write anything"


@pytest.mark.parametrize(
    "args, message",
    [
        (["--lrs", "1e-3,0"], "lr 0 is the loss at initialization"),
        (["--lrs", "1e-3,fast"], "'fast' is not a non-negative decimal number"),
        (["--lrs", "1e-3,"], "bad --lrs list '1e-3,'"),
        (["--systems", "twt,bogus"], "unknown system 'bogus'"),
        (["--seeds", "1,x"], "bad --seeds list '1,x'"),
    ],
)
@pytest.mark.slow
def test_lr_sweep_rejects_bad_arguments(args, message, tmp_path):
    p = run_script("lr_sweep.sh", "gl-en", *args, "--dry-run", env=make_env(tmp_path))
    assert p.returncode in (1, 2) and message in p.stderr, out(p)
    assert "fairseq-train" not in p.stdout


def test_lr_sensitivity_cli_runs_without_torch(tmp_path):
    recs = [_rec("a", 1, 0.0, 10.0), _rec("a", 1, 1e-3, 6.0, bleu=2.0)]
    recs.append(_rec("a", 1, 1e-2, 5.0, bleu=3.0))
    doc = {"work_dir": None, "runs": [r.to_json() for r in recs]}
    (tmp_path / "runs.json").write_text(json.dumps(doc))
    p = run_without_torch(
        "qknorm_tools.evaluate", "lr-sensitivity", "--results", tmp_path / "runs.json",
        "--out-dir", tmp_path,
    )  # fmt: skip
    assert p.returncode == 0, p.stderr
    assert (
        json.loads((tmp_path / "lr_sweep.json").read_text())["systems"][0]["lr_sensitivity"] == 0.5
    )


# ------------------------------------------------------------------------------ real tiny sweep
TINY_LRS = ("1e-3", "1e6")  # the profile's own lr, and an absurd one that really diverges
TINY_SYSTEMS = ("twt", "qk_layernorm")


@pytest.fixture(scope="module")
def tiny_sweep(tmp_path_factory):
    """scripts/lr_sweep.sh for real on tiny generated data: 2 systems x 2 lrs x 1 seed, 5
    updates per run, two at a time."""
    root = tmp_path_factory.mktemp("lr_sweep")
    make_tiny_ted(root / "data_in", sizes=(300, 30, 37))
    env = make_env(root / "work", QKNORM_DATA_DIR=root / "data_in")
    args = ["gl-en", "--systems", ",".join(TINY_SYSTEMS), "--lrs", ",".join(TINY_LRS)]
    args += ["--seeds", "1", "--max-update", "5", "--jobs", "2"]
    proc = run_script("lr_sweep.sh", *args, env=env)
    return root / "work", proc, args, env


def _valid_losses(log: Path) -> list[float]:
    """Dev losses of a fairseq-train log, read independently of qknorm_tools.trainlog."""
    return [
        float(m)
        for m in re.findall(r"valid on 'valid' subset .*?\| loss (\S+) \|", log.read_text())
    ]


@pytest.mark.slow
def test_tiny_sweep_reports_what_the_logs_say(tiny_sweep):
    work, proc, _, _ = tiny_sweep
    assert proc.returncode == 0, out(proc)[-4000:]
    runs = work / "runs/gl-en"
    res_dir = work / "results/cpu-proxy-fast-max-update-5/gl-en/lr-sweep"
    doc = json.loads((res_dir / "lr_sweep.json").read_text())
    assert doc["profile"] == "cpu-proxy-fast-max-update-5" and doc["lrs"] == [1e-3, 1e6]
    expected_div = 0
    for system in TINY_SYSTEMS:
        init_log = runs / f"cpu-proxy-fast-max-update-1/{system}/seed1-lr0/train.log"
        (init,) = _valid_losses(init_log)  # one validation, after the one lr-0 update
        capped = []
        for lr, name in (("1e-3", "seed1"), ("1e6", "seed1-lr1e6")):
            run = runs / f"cpu-proxy-fast-max-update-5/{system}/{name}"
            entry = next(r for r in doc["runs"] if r["system"] == system and r["lr"] == float(lr))
            if (run / "diverged").exists():
                assert "FloatingPointError" in (run / "diverged").read_text()
                assert (
                    entry["diverged"].startswith("FloatingPointError") and entry["dev_loss"] is None
                )
                assert entry["bleu_tok"] is None and not (run / "test.hyp").exists()
                capped.append(init)
                expected_div += 1
                continue
            final = _valid_losses(run / "train.log")[-1]
            assert entry["dev_loss"] == final and entry["init_loss"] == init
            score = json.loads((run / "test.score.json").read_text())
            assert entry["bleu_tok"] == score["bleu_tok"]
            capped.append(min(final, init))
            expected_div += final > init
        s = next(s for s in doc["systems"] if s["system"] == system)
        assert s["lr_sensitivity"] == pytest.approx(sum(capped) / 2 - min(capped), abs=1e-12)
        assert s["init_loss"] == {"1": init}
        assert s["best_lr"] == [1e-3, 1e6][capped.index(min(capped))]
    assert sum(s["n_diverged"] for s in doc["systems"]) == expected_div
    # the absurd lr really diverged for the TWT baseline: a finished result, not a failure
    twt_div = runs / "cpu-proxy-fast-max-update-5/twt/seed1-lr1e6"
    assert (twt_div / "diverged").exists() and (twt_div / "train.json").exists()
    assert "diverged (finished results): gl-en/twt/seed1-lr1e6" in proc.stderr
    md = (res_dir / "lr_sweep.md").read_text()
    assert "| twt |" in md and "†1" in md
    for fig in ("loss", "maxlogit", "bleu"):
        assert (res_dir / f"lr_sweep_{fig}.png").stat().st_size > 10_000


@pytest.mark.slow
def test_tiny_sweep_rerun_skips_everything_and_diverged_runs_stay_diverged(tiny_sweep):
    work, proc, args, env = tiny_sweep
    assert proc.returncode == 0, out(proc)[-4000:]
    before = {p: p.stat().st_mtime_ns for p in (work / "runs").rglob("*.pt")}
    again = run_script("lr_sweep.sh", *args, env=env)
    assert again.returncode == 0, out(again)[-3000:]
    assert {p: p.stat().st_mtime_ns for p in (work / "runs").rglob("*.pt")} == before
    assert "diverged (FloatingPointError: gradients are Nan/Inf): a finished result" in out(again)
    # evaluate.sh has nothing to decode for a diverged run
    p = run_script(
        "evaluate.sh", "gl-en", "twt", "--profile", "cpu-proxy-fast", "--max-update", "5",
        "--lr", "1e6", env=env,
    )  # fmt: skip
    assert p.returncode == 3 and "no model to decode" in p.stderr


@pytest.mark.slow
def test_tiny_sweep_figures_show_the_sweep(tiny_sweep):
    work, proc, _, _ = tiny_sweep
    assert proc.returncode == 0, out(proc)[-4000:]
    sweep = work / "results/cpu-proxy-fast-max-update-5/gl-en/lr-sweep/lr_sweep.json"
    doc = json.loads(sweep.read_text())
    fig = plots_lr.lr_loss_figure(sweep)
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and "learning rate" in ax.get_xlabel()
    assert "dev loss" in ax.get_ylabel()
    assert {t.get_text() for t in ax.get_legend().get_texts()} >= set(TINY_SYSTEMS)
    for s in doc["systems"]:  # a line per system through the mean capped loss per lr
        line = next(ln for ln in ax.get_lines() if ln.get_label() == s["system"])
        assert list(line.get_ydata()) == pytest.approx([p["capped_loss_mean"] for p in s["points"]])
    fig = plots_lr.lr_max_logit_figure(sweep)
    panels = [a for a in fig.axes if a.get_visible()]
    assert len(panels) == 2 and [a.get_title() for a in panels] == ["lr 0.001", "lr 1e+06"]
    assert all(a.get_yscale() == "log" and a.get_xlabel() == "num_updates" for a in panels)
    fig = plots_lr.lr_bleu_figure(sweep)
    (ax,) = fig.axes
    assert ax.get_xscale() == "log" and "BLEU" in ax.get_ylabel()
    twt = next(ln for ln in ax.get_lines() if ln.get_label() == "twt")
    assert list(twt.get_xdata()) == [1e-3]  # the diverged lr is left out of the BLEU curve


@pytest.mark.slow
def test_lr0_run_checkpoint_is_the_initial_model(tiny_sweep):
    """One update at lr 0 leaves every parameter as fairseq-train initialized it: its
    checkpoint equals a model built as fairseq_cli/train.py main builds it (seed, task, model)."""
    import torch
    from fairseq import checkpoint_utils, options, tasks, utils

    import fairseq_qknorm  # noqa: F401

    work, proc, _, _ = tiny_sweep
    assert proc.returncode == 0, out(proc)[-4000:]
    run = work / "runs/gl-en/cpu-proxy-fast-max-update-1/qk_layernorm/seed1-lr0"
    argv = shlex.split((run / "command.txt").read_text())[1:]
    args = options.parse_args_and_arch(options.get_training_parser(), argv)
    utils.set_torch_seed(args.seed)
    model = tasks.setup_task(args).build_model(args)
    state = checkpoint_utils.load_checkpoint_to_cpu(str(run / "checkpoints/checkpoint_last.pt"))
    assert state["optimizer_history"][-1]["num_updates"] == 1
    fresh = model.state_dict()
    assert state["model"].keys() == fresh.keys()
    assert all(torch.equal(state["model"][k], fresh[k]) for k in fresh)
