"""The fairseq command lines of the pipeline, built in one place from the typed configuration.

``scripts/evaluate.sh`` runs the fairseq-generate (and checkpoint averaging) command and
``scripts/train.sh`` the fairseq-train command that this module builds from a pair, a system and
a profile (:mod:`qknorm_tools.config`), plus the values only the script knows when it builds
them: the data and run directories, the data's L, the precision, the BPE removal, the launcher's
flags, the arguments after ``--``. Torch-free, fairseq-free: what ``--dry-run`` prints is what
runs, and what the golden tests (tests/test_golden.py) compare token by token.

Python::

    from qknorm_tools import commands, config
    argv = commands.generate_argv(config.load_pair("gl-en"), config.load_profile("cpu-proxy"),
                                  repo=REPO, data=..., checkpoint=..., gen_subset="test", seed=1)

Command line (the argv shell-quoted on one line, for bash's ``eval "CMD=($out)"``)::

    python -m qknorm_tools.commands generate --pair P --profile F --data BIN --checkpoint PT
        --gen-subset test|valid --seed N [--label LABEL]
    python -m qknorm_tools.commands average --profile F --run RUN -n N --output PT
    python -m qknorm_tools.commands train --pair P --system S --profile F --data DATA --run RUN
        --label LABEL --arch ARCH --seed N --max-update N --max-tokens N --remove-bpe SYMBOL
        [--lr LR] [--qk-norm-length L] [--bf16] [--nproc N --dist-backend gloo|nccl] [-- EXTRA...]

Exit status as ``python -m qknorm_tools.config``: 2 with the message on stdout for a name that
is not configured (or a bad ``QKNORM_*`` value), 1 with ``error: ...`` for a bad configuration.
"""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

from qknorm_tools import config
from qknorm_tools.config import Pair, Profile, System
from qknorm_tools.exits import OK, USAGE, die_usage, fail

#: A short try (a budget other than the profile's, filed as PROFILE-max-update-N) of a profile
#: without an output length cap decodes with the CPU profiles' cap, output <= 1.5 * source + 10
#: tokens (docs/short-paper-try.md): added to a dev-BLEU validation's --eval-bleu-args ...
SHORT_TRY_MAX_LEN = ', "max_len_a": 1.5, "max_len_b": 10}'
#: ... and to the decoding of the test set (fairseq-generate, the translate helper)
SHORT_TRY_GEN_CAP = ("--max-len-a", "1.5", "--max-len-b", "10")
#: fairseq-train prints a progress line (train_inner) every LOG_INTERVAL updates; a budget
#: below it (a short try, ``--max-update 20``) gets one every ``budget`` updates instead: with 50
#: it trained without a single update count on the terminal (docs/short-paper-try.md)
LOG_INTERVAL = 50
#: A short try's dev-BLEU validation decodes one batch of the 100 shortest dev sentences
#: (fairseq orders validation batches by length; it evaluates batches 0..--max-valid-steps)
SHORT_TRY_VALID = ("--batch-size-valid", "100", "--max-valid-steps", "0")


def _token(value) -> str:
    """A configuration value as the command-line token bash had from ``config shell``."""
    if isinstance(value, bool):
        return "1" if value else "0"
    return str(value)


def _user_dir(repo: Path) -> str:
    return f"{repo}/fairseq_qknorm"


def beam_flags(profile: Profile, beam: int | None = None) -> list:
    """``--beam B --lenpen P``: the profile's beam search, assembled here only.

    ``beam`` replaces the profile's width (the benchmarks' ``--beam``); evaluate.sh's
    fairseq-generate (:func:`generate_argv`), the translate helper and the benchmarks use it.
    """
    width = profile.beam if beam is None else beam
    return ["--beam", _token(width), "--lenpen", _token(profile.lenpen)]


def generate_argv(
    pair: Pair,
    profile: Profile,
    *,
    repo: Path,
    data: str,
    checkpoint: str,
    gen_subset: str,
    seed: int,
    label: str | None = None,
) -> list:
    """The fairseq-generate argv that decodes ``gen_subset`` of ``data`` with ``checkpoint``.

    The profile's beam, length penalty, batch size and decoding flags (:func:`decode_flags`
    for runs filed under ``label``, default the profile's name); every sentence kept
    (--required-batch-size-multiple 1), no data workers, the run's seed.
    """
    return ["fairseq-generate", data,
            "--user-dir", _user_dir(repo),
            "--task", "translation", "--source-lang", pair.src, "--target-lang", pair.tgt,
            "--path", checkpoint, "--gen-subset", gen_subset,
            *beam_flags(profile),
            "--max-tokens", _token(profile.gen_max_tokens),
            *decode_flags(profile, label or profile.name),
            "--required-batch-size-multiple", "1", "--num-workers", "0",
            "--seed", str(seed)]  # fmt: skip


def average_argv(profile: Profile, run: Path, n: int, output: str) -> list:
    """The argv averaging the last ``n`` checkpoints of ``run`` the profile keeps into ``output``.

    Update checkpoints (checkpoint_E_U.pt, the profile's --keep-interval-updates, also when none
    was written yet, or when the run has some), else epoch ones (checkpointE.pt,
    --keep-last-epochs).
    """
    checkpoints = Path(run) / "checkpoints"
    by_update = "--keep-interval-updates" in profile.valid_flags or any(
        checkpoints.glob("checkpoint_*_*.pt")
    )
    which = "--num-update-checkpoints" if by_update else "--num-epoch-checkpoints"
    return ["python", "-m", "qknorm_model_tools.average_checkpoints", "--inputs", str(checkpoints),
            which, str(n), "--output", output]  # fmt: skip


def _with_lr(optim_flags: tuple, lr: str | None) -> list:
    """``optim_flags`` with the value of every --lr replaced by ``lr`` (None: unchanged)."""
    flags = list(optim_flags)
    if lr is not None:
        for i, flag in enumerate(flags[:-1]):
            if flag == "--lr":
                flags[i + 1] = lr
    return flags


#: lr schedulers whose decay ends at a given update (fairseq's --total-num-update)
BUDGET_SCHEDULERS = ("polynomial_decay",)


def with_decay_budget(optim_flags: list, max_update: int) -> list:
    """``optim_flags`` with ``--total-num-update MAX_UPDATE`` for a budget-bound lr schedule.

    fairseq's ``polynomial_decay`` scheduler (linear warmup, then ``lr`` decays as
    ``(1 - step / total)**power`` to ``--end-learning-rate``) needs the update at which the
    decay ends. A profile states its budget once (``max_update``); this rule gives the
    scheduler that budget, so that a run with another budget (``--max-update N``) decays over
    its own. Flags that already name ``--total-num-update`` are kept as they are.

    Raises:
        ValueError: a budget-bound scheduler without an update budget (``max_update`` 0).
    """
    flags = list(optim_flags)
    try:
        scheduler = flags[flags.index("--lr-scheduler") + 1]
    except (ValueError, IndexError):
        return flags
    if scheduler not in BUDGET_SCHEDULERS or "--total-num-update" in flags:
        return flags
    if max_update <= 0:
        raise ValueError(f"--lr-scheduler {scheduler} decays over an update budget: set max_update")
    return flags + ["--total-num-update", str(max_update)]


def decode_flags(profile: Profile, label: str) -> list:
    """The profile's decoding flags for runs filed under ``label``.

    A short try (``label`` is not the profile's name: another budget) of a profile that sets
    no output length cap gets :data:`SHORT_TRY_GEN_CAP`: an undertrained model repeats tokens
    up to fairseq's default cap of 200 for every sentence (the ``paper`` profile's 1,112 gl-en
    test sentences with beam 4). The profile's own runs keep its settings.
    """
    flags = list(profile.gen_flags)
    if label != profile.name and not any(f.startswith("--max-len") for f in flags):
        flags += SHORT_TRY_GEN_CAP
    return flags


def _short_try(valid_flags: tuple) -> list:
    """``valid_flags`` of a short try: a dev-BLEU validation capped and on 100 sentences.

    A short try (a budget other than the profile's: PROFILE-max-update-N) that validates by dev
    BLEU decodes dev with the CPU profiles' length cap 1.5 * source + 10 (added to
    --eval-bleu-args unless it sets one) and only the 100 shortest dev sentences
    (:data:`SHORT_TRY_VALID`): an undertrained model repeats tokens up to fairseq's default cap
    of 200, and the first validation of ``--profile paper --max-update 20`` took more than 9
    minutes on a CPU on all 742 gl-en dev sentences, with the cap too. Validation by loss is
    left as it is (cheap). The profile's own runs keep its settings
    (docs/short-paper-try.md). Flags after ``--`` come later and win.
    """
    flags = list(valid_flags)
    if "--eval-bleu" in flags:
        flags += SHORT_TRY_VALID
    for i, flag in enumerate(list(flags)):
        value = flags[i + 1] if i + 1 < len(flags) else ""
        if flag == "--eval-bleu-args" and "max_len" not in value:
            value = (value[:-1] if value.endswith("}") else value) + SHORT_TRY_MAX_LEN
            if i + 1 < len(flags):
                flags[i + 1] = value
            else:
                flags.append(value)
    return flags


def train_argv(
    pair: Pair,
    system: System,
    profile: Profile,
    *,
    repo: Path,
    data: str,
    run: Path,
    label: str,
    arch: str,
    seed: int,
    max_update: int,
    max_tokens: int,
    remove_bpe: str,
    lr: str | None = None,
    qk_norm_length: str | None = None,
    bf16: bool = False,
    nproc: int = 1,
    dist_backend: str = "gloo",
    extra: tuple = (),
) -> list:
    """The fairseq-train argv of one run.

    ``data``: the data path (BIN, or BIN:BIN/shards/2:... for BPE-dropout samples); ``run``: the
    run directory (checkpoints/, tensorboard/ in it); ``label``: the run's label (a label other
    than the profile's name is a short try: dev BLEU decodes with a length cap); ``arch``: the
    named arch; ``max_update``, ``max_tokens``: the budget and the per-process batch;
    ``remove_bpe``: the data's BPE symbol for validation BLEU; ``lr``: a peak learning rate
    replacing the profile's --lr (canonical spelling); ``qk_norm_length``: the data's L, for a
    QKNorm system (required there); ``bf16``: the plugin task's --bf16-autocast (a profile on
    stock translation gets translation_word_dropout with --word-dropout 0); ``nproc`` >
    1: DDP flags, gloo (CPU, --cpu) or nccl; ``extra``: arguments after ``--``, last.
    """
    task, task_flags = profile.train_task or "translation", list(profile.task_flags)
    if bf16:
        # --bf16-autocast is an option of the plugin task (fairseq_qknorm/tasks); a profile on
        # stock translation gets it with word dropout off, which is stock translation's training
        if task == "translation":
            task, task_flags = "translation_word_dropout", ["--word-dropout", "0"]
        task_flags.append("--bf16-autocast")
    qknorm_flags = []
    if system.qknorm:
        if not qk_norm_length:
            raise ValueError(f"system {system.name} (QKNORM) needs the data's L (qk_norm_length)")
        qknorm_flags = ["--qk-norm-length", qk_norm_length]
    dropout = [] if profile.train_dropout is None else ["--dropout", _token(profile.train_dropout)]
    valid = list(profile.valid_flags) if label == profile.name else _short_try(profile.valid_flags)
    eval_bleu = ["--eval-bleu-remove-bpe", remove_bpe] if "--eval-bleu" in valid else []
    dist = []
    if nproc > 1:
        dist = ["--cpu"] if dist_backend == "gloo" else []
        dist += ["--distributed-world-size", str(nproc), "--distributed-backend", dist_backend]
    return ["fairseq-train", data,
            "--user-dir", _user_dir(repo),
            "--task", task, *task_flags,
            "--source-lang", pair.src, "--target-lang", pair.tgt,
            "--arch", arch, *system.flags, *qknorm_flags,
            *profile.model_flags,
            *dropout,
            *with_decay_budget(_with_lr(profile.optim_flags, lr), max_update),
            "--criterion", system.criterion or "label_smoothed_cross_entropy",
            "--label-smoothing", _token(profile.label_smoothing),
            *system.criterion_flags,
            "--max-tokens", str(max_tokens), "--max-update", str(max_update),
            "--max-epoch", _token(profile.max_epoch),
            *valid, *eval_bleu,
            # fairseq (upstream main) drops a last batch that is not a multiple of this value,
            # also in validation: 1 keeps every sentence
            "--required-batch-size-multiple", "1",
            "--seed", str(seed), "--save-dir", f"{run}/checkpoints",
            "--log-format", "simple",
            "--log-interval", str(max_update if 0 < max_update < LOG_INTERVAL else LOG_INTERVAL),
            "--tensorboard-logdir", f"{run}/tensorboard",
            "--attn-stats-interval", "100", "--num-workers", "0",
            *dist, *extra]  # fmt: skip


# ---------------------------------------------------------------------------------------------
# command line


def load_configs(args) -> tuple:
    """(pair, system, profile) of the command line (None where not given), QKNORM_* applied."""
    work_dir = config._work_dir(args.work_dir)
    name = getattr(args, "pair", None)
    pair = config.apply_env_pair(config.load_pair(name, work_dir)) if name else None
    system = config.load_system(args.system) if getattr(args, "system", None) else None
    profile = config.apply_env(config.load_profile(args.profile, pair))
    return pair, system, profile


def _argv(args) -> list:
    repo = args.repo if args.repo is not None else config.REPO
    pair, system, profile = load_configs(args)
    if args.cmd == "generate":
        return generate_argv(pair, profile, repo=repo, data=args.data, checkpoint=args.checkpoint,
                             gen_subset=args.gen_subset, seed=args.seed,
                             label=args.label)  # fmt: skip
    if args.cmd == "average":
        return average_argv(profile, args.run, args.n, args.output)
    return train_argv(
        pair, system, profile, repo=repo, data=args.data, run=args.run, label=args.label,
        arch=args.arch, seed=args.seed, max_update=args.max_update, max_tokens=args.max_tokens,
        remove_bpe=args.remove_bpe, lr=args.lr, qk_norm_length=args.qk_norm_length,
        bf16=args.bf16, nproc=args.nproc, dist_backend=args.dist_backend, extra=tuple(args.extra),
    )  # fmt: skip


def add_config_arguments(parser: argparse.ArgumentParser) -> None:
    """--profile, --work-dir and --repo: where a command line finds the configuration."""
    parser.add_argument("--profile", required=True)
    parser.add_argument("--work-dir", type=Path)
    parser.add_argument("--repo", type=Path, help="the repository root (its configs/ and plugin)")


def add_train_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of one run's fairseq-train command that the calling script knows.

    The arguments of :func:`train_argv` that the configuration does not give, as options
    (``--remove-bpe`` and ``--qk-norm-length`` excepted: ``python -m qknorm_tools.run
    train-plan`` finds them in the data), for ``commands train`` and ``run train-plan``.
    """
    parser.add_argument("--pair", required=True)
    parser.add_argument("--system", required=True)
    parser.add_argument("--data", required=True, help="the data path (BIN[:BIN/shards/K...])")
    parser.add_argument("--run", type=Path, required=True, help="the run directory")
    parser.add_argument("--label", required=True, help="the run's label (scripts: qk_run_label)")
    parser.add_argument("--arch", required=True)
    parser.add_argument("--seed", type=int, required=True)
    parser.add_argument("--max-update", type=int, required=True)
    parser.add_argument("--max-tokens", type=int, required=True, help="per process")
    parser.add_argument("--lr", help="the peak learning rate replacing the profile's")
    parser.add_argument("--bf16", action="store_true", help="bf16 autocast (the plugin task's)")
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--dist-backend", choices=("gloo", "nccl"), default="gloo")


def main(argv: list | None = None) -> int:
    """The command line (module docstring): prints the argv shell-quoted; returns the status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = []
    if "--" in argv:  # fairseq-train's own arguments, passed on unread
        extra, argv = argv[argv.index("--") + 1 :], argv[: argv.index("--")]
    parser = argparse.ArgumentParser(
        prog="python -m qknorm_tools.commands", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    gen = sub.add_parser("generate", help="the fairseq-generate command of a run's checkpoint")
    gen.add_argument("--pair", required=True)
    gen.add_argument("--data", required=True, help="the binarized data directory")
    gen.add_argument("--checkpoint", required=True)
    gen.add_argument("--gen-subset", required=True, help="test or valid")
    gen.add_argument("--seed", type=int, required=True)
    gen.add_argument("--label", help="the run's label (scripts: qk_run_label); default: PROFILE")
    avg = sub.add_parser("average", help="the checkpoint averaging command of a run")
    avg.add_argument("--run", type=Path, required=True)
    avg.add_argument("-n", type=int, required=True, help="how many checkpoints")
    avg.add_argument("--output", required=True)
    train = sub.add_parser("train", help="the fairseq-train command of a run")
    add_train_arguments(train)
    train.add_argument("--remove-bpe", required=True, help="the data's BPE symbol")
    train.add_argument("--qk-norm-length", help="the data's L (QKNorm systems)")
    for p in sub.choices.values():
        add_config_arguments(p)
    args = parser.parse_args(argv)
    args.extra = extra
    if args.cmd != "train" and extra:
        die_usage(parser, f"{args.cmd} takes no arguments after --")
    # scripts/lib.sh passes its own root (a copy of the scripts and configs)
    if args.repo is not None:
        config.REPO = args.repo.resolve()
    try:
        print(" ".join(shlex.quote(a) for a in _argv(args)))
    except config.UsageError as e:  # on stdout: scripts/lib/config.sh shows it with the usage
        print(e)
        return USAGE
    except (config.ConfigError, ValueError) as e:
        return fail(e)
    return OK


if __name__ == "__main__":
    sys.exit(main())
