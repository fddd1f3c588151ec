"""Every training profile (``configs/profiles/*.toml``) trains for real, through the real
``scripts/train.sh`` and ``scripts/evaluate.sh``, on tiny data.

A recipe counts as working only once a test has trained it: a dry run proves the command line,
not that it trains (the ``paper`` profile's warmup once started below its ``--stop-min-lr``,
so every run stopped before its first update). Each profile here runs its own schedule,
validation and checkpoint selection; the test only scales them down (a 1+1-layer d-16 model,
a 4-update warmup, patience 0 / 3, short validation intervals) with ``-- EXTRA`` arguments, and
checks the logged learning rates, validations and the kept checkpoints against independent
re-implementations of fairseq's rules. A profile added to ``configs/profiles`` without an
entry in :data:`EXPECT` fails :func:`test_profile_trains_for_real`.
"""

import json
import math
import re
import sys
from pathlib import Path

import pytest
import torch

from qknorm_tools import trainlog
from qknorm_tools.records import read_run
from qknorm_tools.train_check import check_train_args

from conftest import REPO, make_env, make_tiny_ted, out, prepare_pair, run_script, tiny_model

PROFILES = sorted(p.stem for p in (REPO / "configs" / "profiles").glob("*.toml"))
PAIRS = sorted(p.stem for p in (REPO / "configs" / "pairs").glob("*.toml"))

#: test-made size override: the profile's arch family, 1+1 layers of width 16 (seconds on CPU)
TINY_MODEL = tiny_model(dropout=None)

#: the CPU profiles: update-based, best by dev loss; 4 updates per tiny epoch, so validation and
#: checkpoint_E_U.pt every 3 updates (checkpoint_E_U.pt at 3, 6, 9, 15: 12 ends epoch 3)
CPU_PROFILE = {
    "metric": "loss",
    "scheduler": "inverse_sqrt",
    "word_dropout": None,
    "max_update": 15,
    "overrides": ["--warmup-updates", "4", "--validate-interval-updates", "3",
                  "--save-interval-updates", "3"],
}  # fmt: skip

#: the converging CPU profiles: plateau decay and early stopping on dev loss, validated each epoch
#: (7 updates per tiny epoch); lr 1e-2 (train.sh --lr: its run is seed1-lr1e-2) without dropout
#: makes the tiny model's dev loss plateau within about 30 epochs (lr halvings, then the early
#: stop), --max-epoch 60 a far bound. They keep no epoch checkpoints (--no-epoch-checkpoints):
#: nothing to average.
CONVERGE_PROFILE = {
    "metric": "loss",
    "scheduler": "reduce_lr_on_plateau",
    "word_dropout": None,
    "max_update": None,  # epochs until early stopping (the profile's --max-update 0)
    "average": False,
    "lr": "1e-2",
    "overrides": ["--warmup-updates", "4", "--max-epoch", "60", "--dropout", "0"],
}  # fmt: skip

#: the fixed-budget profiles of the decisive 2x2 (docs/decisive-2x2.md): linear warmup, then
#: linear decay to 0 at the budget (polynomial_decay, power 1), validated each epoch (7 updates
#: per tiny epoch: 42 updates are 6 epochs), the last 5 epoch checkpoints kept and their average
#: the run's result (decode.checkpoint avg5), the final checkpoint decoded beside it
FIXED_PROFILE = {
    "metric": "loss",
    "scheduler": "polynomial_decay",
    "word_dropout": None,
    "max_update": 42,
    "decode": "avg5",
    "epoch_checkpoints": True,
    "overrides": ["--warmup-updates", "4"],
}  # fmt: skip

#: per profile: the selection metric, scheduler and word dropout its real run must show, and
#: the test-made overrides that scale its schedule down (budget: train.sh --max-update)
EXPECT = {
    "paper": {
        "metric": "bleu",
        "scheduler": "reduce_lr_on_plateau",
        "word_dropout": 0.1,
        "max_update": None,  # epochs until early stopping (--max-epoch 40 as a safety net)
        "overrides": ["--warmup-updates", "4", "--lr-patience", "0", "--patience", "3",
                      "--max-epoch", "40"],
    },
    "cpu-proxy": CPU_PROFILE,
    "cpu-proxy-fast": CPU_PROFILE,
    # the same schedule; the plugin's padding-aware batching, word dropout 0
    "cpu-proxy-fast-bucketed": {**CPU_PROFILE, "batching": "bucketed"},
    "cpu-converge": CONVERGE_PROFILE,
    "cpu-converge-d128": CONVERGE_PROFILE,
    "cpu-fixed-d128": FIXED_PROFILE,
    "gpu-fixed-d128": FIXED_PROFILE,
}  # fmt: skip

SYSTEM = "qknorm_paper"


def flag_values(tokens):
    """``--flag value`` / bare ``--flag`` -> dict (the last occurrence wins, as in fairseq)."""
    f = {}
    for i, tok in enumerate(tokens):
        if tok.startswith("--"):
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            f[tok] = True if nxt is None or nxt.startswith("--") else nxt
    return f


@pytest.fixture(scope="module")
def tiny_work(tmp_path_factory):
    """A work dir with the tiny gl-en pair prepared, segmented (60 merges) and binarized."""
    root = tmp_path_factory.mktemp("profiles")
    make_tiny_ted(root / "data_in")
    env = make_env(root / "work", QKNORM_DATA_DIR=root / "data_in", OMP_NUM_THREADS=1)
    prepare_pair(env, "--merges", 60)
    return root / "work", env


def counting_env(env, tmp_path):
    """``env`` with a ``fairseq-train`` first on PATH that counts word dropout
    (tests/fairseq_train_counting.py) into the returned JSON path."""
    bin_dir = tmp_path / "counting_bin"
    bin_dir.mkdir()
    exe = bin_dir / "fairseq-train"
    hook = Path(__file__).with_name("fairseq_train_counting.py")
    exe.write_text(f'#!/usr/bin/env bash\nexec "{sys.executable}" "{hook}" "$@"\n')
    exe.chmod(0o755)
    counts = tmp_path / "word_dropout_counts.json"
    env = dict(env, PATH=f"{bin_dir}:{env['PATH']}", QKNORM_TEST_WORD_DROPOUT_COUNTS=str(counts))
    return env, counts


# ------------------------------------------------------------------ fairseq's rules, re-derived
def plateau_lrs(valids, lr, shrink, patience, warmup, threshold=1e-4, maximize=True):
    """The lr each epoch trains with under fairseq's reduce_lr_on_plateau: torch's
    ReduceLROnPlateau (mode max for BLEU, min for loss: --maximize-best-checkpoint-metric)
    stepped with the epoch's validation metric once the warmup is over (fairseq steps it only
    after an update past --warmup-updates), rel. threshold 1e-4.

    Args:
        valids: ``[(epoch, metric value, num_updates at its end)]`` in order.

    Returns:
        ``{epoch + 1: lr after the step at the end of epoch}``.
    """
    best, bad, out = (-math.inf if maximize else math.inf), 0, {}
    for epoch, value, updates in valids:
        if updates > warmup:
            # torch, threshold_mode rel: mode max a > best (1 + t), mode min a < best (1 - t)
            better = value > best * (1 + threshold) if maximize else value < best * (1 - threshold)
            if better:
                best, bad = value, 0
            else:
                bad += 1
            if bad > patience:
                lr, bad = lr * shrink, 0
        out[epoch + 1] = lr
    return out


def early_stop_index(values, patience, maximize):
    """Index of the validation after which fairseq stops (``should_stop_early``: no strict
    improvement for ``patience`` validations), or ``None``."""
    best, runs = None, 0
    for i, v in enumerate(values):
        if best is None or (v > best if maximize else v < best):
            best, runs = v, 0
        else:
            runs += 1
            if runs >= patience:
                return i
    return None


def best_index(values, maximize):
    """fairseq's checkpoint_best: the last validation whose value ties the best so far
    (``is_better`` is >= / <=)."""
    best_value = max(values) if maximize else min(values)
    return max(i for i, v in enumerate(values) if v == best_value)


# ------------------------------------------------------------------ the real trainings
def test_every_profile_has_expectations():
    """A new configs/profiles/P.toml needs its entry in EXPECT (and so its real training)."""
    assert set(PROFILES) == set(EXPECT), (
        f"profiles without a real-training test: {sorted(set(PROFILES) - set(EXPECT))}; "
        f"add them to tests/test_profiles.py EXPECT"
    )


@pytest.mark.slow
@pytest.mark.parametrize("profile", PROFILES)
def test_profile_trains_for_real(profile, tiny_work, tmp_path):
    if profile not in EXPECT:
        pytest.fail(f"configs/profiles/{profile}.toml has no real-training test: add it to EXPECT")
    exp = EXPECT[profile]
    work, env = tiny_work
    env, counts_path = counting_env(env, tmp_path)
    budget = ["--max-update", exp["max_update"]] if exp["max_update"] else []
    lr = ["--lr", exp["lr"]] if "lr" in exp else []
    common = ["gl-en", SYSTEM, "--profile", profile, *budget, *lr]
    extra = [*TINY_MODEL, *exp["overrides"], "--log-interval", "1"]

    dry = run_script("train.sh", *common, "--dry-run", "--", *extra, env=env)
    assert dry.returncode == 0, out(dry)
    f = flag_values(dry.stdout.split())
    assert f["--lr-scheduler"] == exp["scheduler"]
    assert f["--best-checkpoint-metric"] == exp["metric"]
    p = run_script("train.sh", *common, "--threads", 1, "--", *extra, env=env)
    assert p.returncode == 0, out(p)
    assert "stopping training because current learning rate" not in out(p)
    label = profile + (f"-max-update-{exp['max_update']}" if exp["max_update"] else "")
    run = work / "runs" / "gl-en" / label / SYSTEM / ("seed1" + (f"-lr{exp['lr']}" if lr else ""))
    records = trainlog.parse_log(run / "train.log")
    inner = [r for r in records if r["kind"] == "train_inner"]
    valid = [r for r in records if r["kind"] == "valid"]
    train = {r["epoch"]: r["metrics"] for r in records if r["kind"] == "train"}
    assert inner and valid, "the run neither trained nor validated"

    # the learning rate warms up linearly from --warmup-init-lr to --lr over 4 updates
    # (polynomial_decay has no --warmup-init-lr: its warmup starts from 0)
    lr, init, warmup = float(f["--lr"]), float(f.get("--warmup-init-lr", 0)), 4
    logged = {int(r["metrics"]["num_updates"]): r["metrics"]["lr"] for r in inner}
    for u in range(1, warmup + 1):
        assert logged[u] == pytest.approx(init + u * (lr - init) / warmup, rel=1e-3), u
    assert [logged[u] for u in range(1, warmup + 1)] == sorted(logged[u] for u in range(1, 5))
    assert logged[1] < logged[warmup] == pytest.approx(lr, rel=1e-3)

    metric = exp["metric"]
    maximize = metric == "bleu"
    values = [r["metrics"][metric] for r in valid]
    if exp["scheduler"] == "inverse_sqrt":  # then lr * sqrt(warmup / update)
        for u in range(warmup, exp["max_update"] + 1):
            assert logged[u] == pytest.approx(lr * math.sqrt(warmup / u), rel=1e-3), u
        # validation by dev loss every 3 updates, the budget reached
        assert [int(r["metrics"]["num_updates"]) for r in valid] == [3, 6, 9, 12, 15]
        assert max(logged) == exp["max_update"]
    elif exp["scheduler"] == "polynomial_decay":  # linear from lr at the warmup's end to 0
        total = exp["max_update"]
        assert f["--total-num-update"] == str(total)
        power, end = float(f["--power"]), float(f["--end-learning-rate"])
        for u in range(warmup, total + 1):
            want = (lr - end) * max(0.0, 1 - (u - warmup) / (total - warmup)) ** power + end
            assert logged[u] == pytest.approx(want, rel=1e-3, abs=1e-9), u
        # one validation per epoch, the budget reached at the last one; nothing stopped it early
        epochs = [r["epoch"] for r in valid]
        assert epochs == list(range(1, len(epochs) + 1)) and len(epochs) >= 5, epochs
        assert int(valid[-1]["metrics"]["num_updates"]) == total == max(logged)
    else:  # plateau decay x --lr-shrink on the dev metric, then early stopping by --patience
        shrink, patience = float(f["--lr-shrink"]), 3
        epochs = [(r["epoch"], r["metrics"][metric], r["metrics"]["num_updates"]) for r in valid]
        expected = plateau_lrs(epochs, lr, shrink, patience=0, warmup=warmup, maximize=maximize)
        past_warmup = [e for e in train if e in expected and e > 1]
        assert past_warmup
        for e in past_warmup:
            assert train[e]["lr"] == pytest.approx(expected[e], rel=1e-3), (e, epochs)
        assert min(train[e]["lr"] for e in past_warmup) <= lr * shrink * (1 + 1e-3), (
            f"the learning rate never decayed on a dev-{metric} plateau"
        )
        # two stopping rules: --patience validations without improvement, or (checked by
        # fairseq at the start of each epoch) lr <= --stop-min-lr; the first that fires ends it
        stop = early_stop_index(values, patience, maximize=maximize)
        floor = float(f["--stop-min-lr"])
        below = [i for i, (e, _, _) in enumerate(epochs) if expected[e + 1] <= floor]
        floor_stop = below[0] if below else None
        firsts = [i for i in (stop, floor_stop) if i is not None]
        assert firsts and min(firsts) == len(values) - 1, (values, expected, "stopped elsewhere")
        log = (run / "train.log").read_text()
        reason = "early_stop" if stop == len(values) - 1 else "min_lr"
        early = f"early stop since valid performance hasn't improved for last {patience} runs"
        assert (early in log) == (reason == "early_stop")
        # the run's record says so (qknorm_tools.trainlog.stop_reason, read by read_run)
        rec = read_run(run, scored=False)
        assert rec.stop_reason == reason and rec.epochs == valid[-1]["epoch"]
        assert [p["loss"] for p in rec.dev_curve] == [r["metrics"]["loss"] for r in valid]

    # checkpoint_best.pt is the best validation by the profile's metric (ties: the later one)
    best = best_index(values, maximize)
    state = torch.load(run / "checkpoints" / "checkpoint_best.pt", map_location="cpu",
                       weights_only=False)  # fmt: skip
    assert state["extra_state"]["val_loss"] == pytest.approx(values[best], abs=1e-3)
    assert state["optimizer_history"][-1]["num_updates"] == valid[best]["metrics"]["num_updates"]

    # the batching: the plugin's bucketed batching logs its padding once per epoch (4 updates
    # per tiny epoch, 15 updates: epochs 1-4); fairseq's batching logs nothing of the kind
    log = (run / "train.log").read_text()
    bucket_lines = re.findall(r"bucketed batching: epoch (\d+): padding", log)
    if exp.get("batching") == "bucketed":
        assert [int(e) for e in bucket_lines] == sorted(train), (bucket_lines, sorted(train))
    else:
        assert bucket_lines == []

    # word dropout: on in training (about p of the tokens), never in validation / eval-bleu
    counts = json.loads(counts_path.read_text())
    assert counts["valid"]["calls"] == 0
    if exp["word_dropout"]:
        share = counts["train"]["replaced"] / counts["train"]["tokens"]
        assert counts["train"]["calls"] > 0 and counts["train"]["tokens"] > 5000
        assert share == pytest.approx(exp["word_dropout"], abs=0.02)
    else:
        assert counts["train"]["calls"] == 0

    # evaluate.sh decodes the profile's checkpoint (checkpoint_best unless decode.checkpoint
    # says otherwise); on dev the BLEU of checkpoint_best is the one validation logged
    p = run_script("evaluate.sh", *common, "--split", "dev", "--threads", 1, env=env)
    assert p.returncode == 0, out(p)
    assert f"checkpoint_{exp.get('decode', 'best')}.pt" in (run / "dev.gen.log").read_text()
    score = json.loads((run / "dev.score.json").read_text())
    if metric == "bleu" and "decode" not in exp:
        assert score["bleu_tok"] == pytest.approx(values[best], abs=0.005)

    if exp.get("average") is False:
        return
    # checkpoint averaging through the pipeline: the last 2 checkpoints the profile keeps
    p = run_script("evaluate.sh", *common, "--checkpoint", "avg2", "--threads", 1, env=env)
    assert p.returncode == 0, out(p)
    ckpts = run / "checkpoints"
    by_epoch = exp.get("epoch_checkpoints", not exp["max_update"])
    kept = sorted(ckpts.glob("checkpoint[0-9]*.pt" if by_epoch else "checkpoint_*_*.pt"),
                  key=lambda c: int(c.stem.split("_")[-1].removeprefix("checkpoint")))  # fmt: skip
    assert len(kept) >= 2, sorted(c.name for c in ckpts.iterdir())
    if "decode" in exp:  # --keep-last-epochs 5: exactly the 5 checkpoints avg5 averages
        assert [c.name for c in kept] == [f"checkpoint{e}.pt" for e in range(2, 7)]
    avg = torch.load(ckpts / "checkpoint_avg2.pt", map_location="cpu", weights_only=False)
    last2 = [torch.load(c, map_location="cpu", weights_only=False)["model"] for c in kept[-2:]]
    for k, v in avg["model"].items():
        ref = (last2[0][k].double() + last2[1][k].double()) / 2
        assert torch.allclose(v.double(), ref.to(v.dtype).double(), atol=1e-6), k
    assert (run / "test.avg2.hyp").is_file()
    assert json.loads((run / "test.avg2.score.json").read_text())["n_lines"] == 40
    assert "checkpoint_avg2.pt" in (run / "test.avg2.gen.log").read_text()


# ------------------------------------------------------------------ refused up front
@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.parametrize("pair", PAIRS)
@pytest.mark.slow
def test_every_profile_passes_the_consistency_check(profile, pair, tmp_path):
    env = make_env(tmp_path / "work")
    p = run_script("train.sh", pair, SYSTEM, "--profile", profile, "--dry-run", env=env)
    assert p.returncode == 0, out(p)


def test_paper_profile_stop_min_lr_above_warmup_start_is_refused(tmp_path):
    """The issue's failure: --stop-min-lr 1e-6 above --warmup-init-lr 1e-7 stops fairseq-train
    before its first update; train.sh now refuses it before anything runs (dry run too)."""
    env = make_env(tmp_path / "work")
    p = run_script(
        "train.sh",
        "gl-en",
        "twt",
        "--profile",
        "paper",
        "--dry-run",
        "--",
        "--stop-min-lr",
        "1e-6",
        env=env,
    )
    assert p.returncode != 0
    assert "--warmup-init-lr 1e-07" in out(p) and "--stop-min-lr 1e-06" in out(p)
    assert "profile paper (configs/profiles/paper.toml) with -- --stop-min-lr 1e-6" in out(p)
    assert "fairseq-train" not in p.stdout  # no command printed


BASE = ["data", "--lr", "1e-3", "--lr-scheduler", "inverse_sqrt", "--max-update", "10"]


@pytest.mark.parametrize(
    "args, remove_bpe, problem",
    [
        (["--warmup-updates", "8", "--warmup-init-lr", "1e-7", "--stop-min-lr", "1e-6"], None,
         "--warmup-init-lr 1e-07 (start of the warmup), is <= --stop-min-lr 1e-06"),
        (["--warmup-updates", "8", "--stop-min-lr", "0"], None, "0 (the start of the 8-update"),
        (["--stop-min-lr", "1e-3"], None, "--lr 0.001, is <= --stop-min-lr"),
        (["--best-checkpoint-metric", "bleu", "--maximize-best-checkpoint-metric"], None,
         "needs --eval-bleu"),
        (["--eval-bleu", "--best-checkpoint-metric", "bleu"], None,
         "needs --maximize-best-checkpoint-metric"),
        (["--maximize-best-checkpoint-metric"], None, "the highest loss would be kept"),
        (["--eval-bleu", "--eval-bleu-remove-bpe"], "sentencepiece",
         "--eval-bleu-remove-bpe '@@ ' on sentencepiece data"),
        (["--eval-bleu"], "subword_nmt", "no --eval-bleu-remove-bpe on subword-nmt data"),
        (["--lr-scheduler", "reduce_lr_on_plateau", "--disable-validation"], None,
         "the learning rate would never decay"),
        (["--lr-scheduler", "reduce_lr_on_plateau", "--validate-interval", "1000000",
          "--max-epoch", "100"], None, "never validates there"),
        (["--patience", "3", "--disable-validation"], None, "early stopping never fires"),
        (["--keep-last-epochs", "5", "--no-epoch-checkpoints"], None, "no checkpointE.pt"),
        (["--keep-interval-updates", "5"], None, "no checkpoint_E_U.pt is written"),
        (["--max-update", "0"], None, "training would never stop"),
    ],
)  # fmt: skip
def test_train_check_refuses_settings_that_cannot_work_together(args, remove_bpe, problem):
    problems = check_train_args(BASE + args, remove_bpe)
    assert len(problems) == 1 and problem in problems[0], problems


@pytest.mark.parametrize(
    "args, remove_bpe",
    [
        (["--warmup-updates", "8", "--warmup-init-lr", "1e-7", "--stop-min-lr", "1e-9"], None),
        (["--eval-bleu", "--eval-bleu-remove-bpe", "sentencepiece"], "sentencepiece"),
        (["--eval-bleu", "--eval-bleu-remove-bpe"], "subword_nmt"),  # bare: "@@ "
        (["--eval-bleu", "--eval-bleu-remove-bpe", "subword_nmt", "--best-checkpoint-metric",
          "bleu", "--maximize-best-checkpoint-metric"], "subword_nmt"),
        (["--save-interval-updates", "4", "--keep-interval-updates", "5"], None),
        (["--keep-last-epochs", "5"], None),
    ],
)  # fmt: skip
def test_train_check_accepts_consistent_settings(args, remove_bpe):
    assert check_train_args(BASE + args, remove_bpe) == []


# ------------------------------------------------------------------ sentencepiece + paper
@pytest.mark.slow
def test_paper_profile_validation_bleu_removes_sentencepiece(tmp_path):
    """With --tool sentencepiece the validation BLEU (checkpoint selection, LR decay, early
    stopping) is computed on words, not pieces: the logged reference is the raw dev line."""
    pytest.importorskip("sentencepiece")
    make_tiny_ted(tmp_path / "data_in")
    env = make_env(tmp_path / "work", QKNORM_DATA_DIR=tmp_path / "data_in", OMP_NUM_THREADS=1)
    prepare_pair(env, "--tool", "sentencepiece", "--vocab-size", "120")
    common = ["gl-en", "twt", "--profile", "paper"]
    extra = [*TINY_MODEL, "--max-epoch", "2", "--eval-bleu-print-samples"]
    dry = run_script("train.sh", *common, "--dry-run", "--", *extra, env=env)
    assert flag_values(dry.stdout.split())["--eval-bleu-remove-bpe"] == "sentencepiece"
    p = run_script("train.sh", *common, "--threads", 1, "--", *extra, env=env)
    assert p.returncode == 0, out(p)
    log = (tmp_path / "work/runs/gl-en/paper/twt/seed1/train.log").read_text(encoding="utf-8")
    refs = [line.split("example reference: ", 1)[1] for line in log.splitlines()
            if "example reference: " in line]  # fmt: skip
    dev = (tmp_path / "work/data/raw/gl-en/dev.en").read_text(encoding="utf-8").splitlines()
    assert refs and all(r in dev for r in refs), refs
    assert not any("\u2581" in r for r in refs)
    p = run_script("evaluate.sh", *common, "--threads", 1, env=env)
    assert p.returncode == 0, out(p)
    hyp = (tmp_path / "work/runs/gl-en/paper/twt/seed1/test.hyp").read_text(encoding="utf-8")
    assert "\u2581" not in hyp
