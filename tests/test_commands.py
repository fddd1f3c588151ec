"""qknorm_tools.commands: the fairseq command lines built from the typed configuration.

The scripts run what these functions build (tests/test_golden.py compares their dry runs for
every pair x system x profile); here the builder itself, for known configurations, token by
token, and its command line.
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest

from qknorm_tools import commands, config

REPO = Path("/repo")
WORK = "/work"
OPTIM = ["--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--adam-eps", "1e-8",
         "--clip-norm", "1.0", "--lr", "2e-3", "--lr-scheduler", "inverse_sqrt",
         "--warmup-updates", "300", "--warmup-init-lr", "1e-7"]  # fmt: skip
VALID = ["--validate-interval", "1000000", "--validate-interval-updates", "400",
         "--save-interval", "1000000", "--save-interval-updates", "400",
         "--keep-interval-updates", "5", "--no-epoch-checkpoints",
         "--best-checkpoint-metric", "loss"]  # fmt: skip


def _configs(system: str = "qknorm_paper", profile: str = "cpu-proxy", pair: str = "gl-en"):
    p = config.load_pair(pair)
    return p, config.load_system(system), config.load_profile(profile, p)


def _train(system="qknorm_paper", profile="cpu-proxy", pair="gl-en", **kw) -> list:
    p, s, f = _configs(system, profile, pair)
    run = Path(f"{WORK}/runs/{pair}/{kw.get('label', profile)}/{system}/seed1")
    args = dict(repo=REPO, data=f"{WORK}/data/bin/{pair}", run=run, label=profile,
                arch=f"{s.arch}_proxy", seed=1, max_update=1200, max_tokens=4096,
                remove_bpe="@@ ", qk_norm_length="79" if s.qknorm else None)  # fmt: skip
    args.update(kw)
    return commands.train_argv(p, s, f, **args)


def test_generate_argv_of_gl_en_cpu_proxy():
    pair, _, profile = _configs()
    ckpt = f"{WORK}/runs/gl-en/cpu-proxy/twt/seed1/checkpoints/checkpoint_best.pt"
    argv = commands.generate_argv(pair, profile, repo=REPO, data=f"{WORK}/data/bin/gl-en",
                                  checkpoint=ckpt, gen_subset="test", seed=1)  # fmt: skip
    assert argv == [
        "fairseq-generate", f"{WORK}/data/bin/gl-en", "--user-dir", "/repo/fairseq_qknorm",
        "--task", "translation", "--source-lang", "gl", "--target-lang", "en",
        "--path", ckpt, "--gen-subset", "test", "--beam", "4", "--lenpen", "1.0",
        "--max-tokens", "6000", "--max-len-a", "1.5", "--max-len-b", "10",
        "--required-batch-size-multiple", "1", "--num-workers", "0", "--seed", "1",
    ]  # fmt: skip


def test_train_argv_of_gl_en_qknorm_paper_cpu_proxy():
    run = f"{WORK}/runs/gl-en/cpu-proxy/qknorm_paper/seed1"
    assert _train() == [
        "fairseq-train", f"{WORK}/data/bin/gl-en", "--user-dir", "/repo/fairseq_qknorm",
        "--task", "translation", "--source-lang", "gl", "--target-lang", "en",
        "--arch", "transformer_qknorm_paper_proxy", "--qk-norm-length", "79",
        *OPTIM,
        "--criterion", "label_smoothed_cross_entropy", "--label-smoothing", "0.1",
        "--max-tokens", "4096", "--max-update", "1200", "--max-epoch", "0",
        *VALID,
        "--required-batch-size-multiple", "1", "--seed", "1", "--save-dir", f"{run}/checkpoints",
        "--log-format", "simple", "--log-interval", "50",
        "--tensorboard-logdir", f"{run}/tensorboard",
        "--attn-stats-interval", "100", "--num-workers", "0",
    ]  # fmt: skip


def test_train_argv_options():
    base = _train(system="twt")
    assert "--qk-norm-length" not in base
    # a learning rate replaces the profile's, nothing else moves
    lr = _train(system="twt", lr="3e-3")
    assert lr[lr.index("--lr") + 1] == "3e-3" and len(lr) == len(base)
    # bf16 on stock translation: the plugin task with word dropout off
    bf16 = _train(system="twt", bf16=True)
    i = bf16.index("--task")
    assert bf16[i : i + 5] == ["--task", "translation_word_dropout", "--word-dropout", "0",
                               "--bf16-autocast"]  # fmt: skip
    # processes: DDP flags before the arguments after --
    cpu = _train(system="twt", nproc=2, extra=("--patience", "3"))
    assert cpu[-7:] == ["--cpu", "--distributed-world-size", "2", "--distributed-backend", "gloo",
                        "--patience", "3"]  # fmt: skip
    gpu = _train(system="twt", nproc=2, dist_backend="nccl")
    assert gpu[-4:] == ["--distributed-world-size", "2", "--distributed-backend", "nccl"]
    assert "--cpu" not in gpu
    with pytest.raises(ValueError, match="L"):
        _train(qk_norm_length=None)


def test_train_argv_paper_profile_short_try_and_bf16():
    own = _train(system="twt", profile="paper", label="paper")
    assert own[own.index("--eval-bleu-args") + 1] == '{"beam": 4}'
    assert own[own.index("--eval-bleu-remove-bpe") + 1] == "@@ "
    i = own.index("--task")
    assert own[i : i + 4] == ["--task", "translation_word_dropout", "--word-dropout", "0.1"]
    short = _train(system="twt", profile="paper", label="paper-max-update-20")
    assert short[short.index("--eval-bleu-args") + 1] == (
        '{"beam": 4, "max_len_a": 1.5, "max_len_b": 10}'
    )
    # bf16 on the plugin task keeps its word dropout
    bf16 = _train(system="twt", profile="paper", label="paper", bf16=True)
    i = bf16.index("--task")
    assert bf16[i : i + 5] == ["--task", "translation_word_dropout", "--word-dropout", "0.1",
                               "--bf16-autocast"]  # fmt: skip


def test_average_argv_kind_of_checkpoints(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    out = str(run / "checkpoints" / "checkpoint_avg5.pt")
    by_update = commands.average_argv(config.load_profile("cpu-proxy"), run, 5, out)
    assert by_update == ["python", "-m", "qknorm_model_tools.average_checkpoints",
                         "--inputs", str(run / "checkpoints"), "--num-update-checkpoints", "5",
                         "--output", out]  # fmt: skip
    paper = config.load_profile("paper")
    assert commands.average_argv(paper, run, 5, out)[5] == "--num-epoch-checkpoints"
    (run / "checkpoints" / "checkpoint_3_1200.pt").touch()  # the run's kind decides too
    assert commands.average_argv(paper, run, 5, out)[5] == "--num-update-checkpoints"


def test_cli_prints_the_argv_shell_quoted(capsys):
    rc = commands.main(["train", "--pair", "gl-en", "--system", "twt", "--profile", "cpu-proxy",
                        "--data", "/d", "--run", "/r", "--label", "cpu-proxy", "--arch", "a",
                        "--seed", "1", "--max-update", "5", "--max-tokens", "8",
                        "--remove-bpe", "@@ ", "--", "--patience", "3"])  # fmt: skip
    argv = shlex.split(capsys.readouterr().out)
    assert rc == 0 and argv[:2] == ["fairseq-train", "/d"] and argv[-2:] == ["--patience", "3"]
    assert argv[argv.index("--user-dir") + 1] == f"{config.REPO}/fairseq_qknorm"
    rc = commands.main(["generate", "--pair", "xx-yy", "--profile", "cpu-proxy", "--data", "/d",
                        "--checkpoint", "/c", "--gen-subset", "test", "--seed", "1"])  # fmt: skip
    assert rc == 2 and "xx-yy" in capsys.readouterr().out


def test_a_budget_bound_schedule_decays_over_the_runs_budget():
    """polynomial_decay gets --total-num-update from the budget, stated once (max_update); a
    run with another budget decays over its own; other schedulers are left alone."""
    pair, _, _ = _configs()
    profile = config.load_profile("cpu-fixed-d128", pair)
    assert profile.max_update == 7920 and profile.checkpoint == "avg5"
    assert profile.also_checkpoints == ("last",) and profile.design_test == "paired"
    argv = _train(profile="cpu-fixed-d128", max_update=profile.max_update)
    after = {a: b for a, b in zip(argv, argv[1:]) if a.startswith("--")}
    assert after["--total-num-update"] == "7920" == after["--max-update"]
    assert after["--lr-scheduler"] == "polynomial_decay"
    short = commands.with_decay_budget(["--lr-scheduler", "polynomial_decay"], 16)
    assert short == ["--lr-scheduler", "polynomial_decay", "--total-num-update", "16"]
    fixed = ["--lr-scheduler", "polynomial_decay", "--total-num-update", "5"]
    assert commands.with_decay_budget(fixed, 16) == fixed
    assert commands.with_decay_budget(["--lr-scheduler", "inverse_sqrt"], 16)[-1] == "inverse_sqrt"
    with pytest.raises(ValueError, match="set max_update"):
        commands.with_decay_budget(["--lr-scheduler", "polynomial_decay"], 0)


def test_the_beam_search_is_assembled_once():
    """--beam and --lenpen come from commands.beam_flags for evaluate.sh's fairseq-generate, the
    translate helper and the benchmarks (one place; the benchmarks' --beam replaces the width)."""
    profile = config.load_profile("cpu-proxy")
    assert commands.beam_flags(profile) == ["--beam", "4", "--lenpen", "1.0"]
    assert commands.beam_flags(profile, 8) == ["--beam", "8", "--lenpen", "1.0"]
    pair = config.load_pair("gl-en")
    argv = commands.generate_argv(
        pair, profile, repo=config.REPO, data="bin", checkpoint="ck.pt", gen_subset="test", seed=1
    )
    i = argv.index("--beam")
    assert argv[i : i + 4] == commands.beam_flags(profile)
