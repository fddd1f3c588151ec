"""What ``scripts/train.sh`` and ``scripts/evaluate.sh`` decide about one run, in Python.

The scripts keep what bash is good at (their options, the launcher, the lock, the process
group, Ctrl-C, the exit hooks); every rule is here (issue 36: one Python spine for a run).
``train-plan`` and ``evaluate-plan`` take the script's options as given and build the run
(:class:`qknorm_tools.run_spec.Run`: the configuration checked, label, directory, arch, the
precision decided once) in one start:

``train-plan`` (before the run's lock):

1. the options, the configuration and the processes (``--nproc``: tokens per update kept;
   ``--launch``; the GPUs train.sh found), in train.sh's order of checks;
2. the symbol that undoes the data's BPE (``data/bpe/PAIR/bpe.json``; a dry run without it:
   the pair's configured tool), for validation BLEU; then the precision (``auto`` may measure
   once per machine, in ``qknorm_model_tools.bf16_auto``'s own process: it needs torch);
3. for a QKNorm system, the data's L (``data/bpe/PAIR/length_stats.json``; a dry run without
   it: the authors' L) and the line that says it;
4. the fairseq-train command (:func:`qknorm_tools.commands.train_argv`), settings that cannot
   work together refused (:func:`qknorm_tools.train_check.check_train_args`);
5. unless a dry run: the data binarized (``BIN/.done``) and one consistent chain raw -> BPE ->
   binarized (:func:`qknorm_tools.provenance.check_data`), its data identity; and where the
   command gives fewer max positions than fairseq's 1024 (which ``scripts/bpe.sh`` checks the
   data against), no dev line over them (:mod:`qknorm_tools.seglen`: fairseq-train would stop
   at its first validation).

``train-claim`` (under the lock): a run made on other data is never reused, a new run records
the data, a finished run is the one asked for.

``evaluate-plan``: the run, its checkpoint, outputs and commands (:func:`plan_evaluation`);
``evaluate-check`` (under the lock, with the precision the plan decided): the run is the one
asked for (:func:`qknorm_tools.evaluate.check_run_identity`; a diverged run has no model to
decode, exit 3), its checkpoint and the reference exist, the data are consistent and the
run's own (:mod:`qknorm_tools.provenance`), every line of the split fits the model
(:mod:`qknorm_tools.seglen`), and the symbol that undoes the data's BPE.

Command lines (shell-quoted assignments on stdout, for bash's ``eval``; each function's
docstring lists them)::

    python -m qknorm_tools.run train-plan --pair P --system S --profile F --seed N
        [--max-update N] [--lr LR] [--size S] [--threads N] [--nproc N] [--launch L]
        [--gpus IDS] [--precision P | --bf16-autocast] --work-dir W --data-root D
        [--dry-run] [-- EXTRA...]
    python -m qknorm_tools.run train-claim --run RUN --identity ID --pair P --label LABEL
        --system S --seed N --precision bf16|fp32 [--variant lr=LR] --train-cmd CMD
    python -m qknorm_tools.run precision --profile F [--precision P] [--threads N]
        [--cached-only] [--quiet] --work-dir W
    python -m qknorm_tools.run dirs --work-dir W --label L --precision bf16|fp32 --pairs P,..
        --systems S,.. --seeds N,.. [--lr LR ...]   # KEY<TAB>DIR lines (grid_dirs)
    python -m qknorm_tools.run evaluate-plan|evaluate-check --pair P --system S --profile F
        --seed N [--max-update N] [--lr LR] [--threads N] [--precision P | --bf16-autocast]
        [--split test|dev] [--checkpoint best|last|avgN] --work-dir W --data-root D
    python -m qknorm_tools.run options [--work-dir W] SPEC...   # a script's integers and lists
        (uint:OPTION=VALUE, seeds:VAR=LIST, ...: qknorm_tools/script_options.py)

Exit status (:mod:`qknorm_tools.exits`): 0 planned; 2 a usage error (the message on stdout,
which ``scripts/lib/cli.sh:qk_usage_error`` shows with the script's usage, as for
``python -m qknorm_tools.commands``); 1 any other failure, each ``error: ...`` line on stderr
naming the file and what to run; ``evaluate-check``: 3 for a run that diverged (a finished
result without a model).
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from pathlib import Path

from qknorm_tools import commands, config, run_spec, script_options
from qknorm_tools.config_schema import POSINT_RE
from qknorm_tools.exits import FAILURE, OK, USAGE, UsageError, die_usage, fail
from qknorm_tools.provenance import check_data, check_run, read_identity
from qknorm_tools.textio import BPE_TOOL_SYMBOL, bpe_tool
from qknorm_tools.train_check import check_train_args

__all__ = ["DIVERGED", "PlanError", "evaluate_check", "main", "train_claim", "train_plan"]

#: evaluate-check's exit status for a run that diverged (scripts/evaluate.sh exits with it)
DIVERGED = 3


class PlanError(Exception):
    """A run that cannot be planned: ``lines`` are its ``error: ...`` messages, in order."""

    def __init__(self, *lines: str, status: int = FAILURE, warning: str = "") -> None:
        super().__init__(lines[-1] if lines else warning)
        self.lines, self.status, self.warning = lines, status, warning


def _bf16_run(precision: str) -> str:
    """The scripts' QK_BF16_RUN of a run in ``precision``: ``bf16``, or ``""`` for fp32."""
    return "bf16" if precision == "bf16" else ""


def _data_bpe_symbol(pair: str, bpe_dir: Path) -> str:
    """The symbol that undoes the BPE tool ``bpe_dir/bpe.json`` names (train and evaluate)."""
    try:
        return BPE_TOOL_SYMBOL[bpe_tool(bpe_dir)]
    except Exception as e:  # InputFileError, EvaluationError: named by bpe_tool
        raise PlanError(
            str(e), f"cannot read the BPE tool of {pair} from {bpe_dir}/bpe.json"
        ) from None


def _remove_bpe(pair: config.Pair, bpe_dir: Path, dry_run: bool) -> str:
    """The BPE symbol of the data (bpe.json), or of the pair's tool for a dry run without data."""
    if (bpe_dir / "bpe.json").is_file():
        return _data_bpe_symbol(pair.name, bpe_dir)
    if dry_run:
        return BPE_TOOL_SYMBOL[pair.bpe_tool]
    raise PlanError(
        f"{bpe_dir}/bpe.json not found: run scripts/bpe.sh {pair.name} "
        f"(then scripts/binarize.sh {pair.name}) first"
    )


def _qk_norm_length(pair: config.Pair, bpe_dir: Path, dry_run: bool) -> tuple[str, str]:
    """(L, the line saying it) of a QKNorm system: the data's L, for a dry run the authors'."""
    stats, note = bpe_dir / "length_stats.json", ""
    if stats.is_file():
        try:
            value = json.loads(stats.read_text(encoding="utf-8"))["L"]
        except (OSError, ValueError, KeyError, TypeError) as e:
            raise PlanError(
                f"{stats}: not a readable length_stats.json with a field 'L' ({e})",
                f"cannot read L from {stats}",
            ) from None
        length = str(value)
    elif dry_run:
        authors = "" if pair.paper_L is None else str(pair.paper_L)
        length = authors or "L"
        note = f" (dry run without data/bpe/{pair.name}: " + (
            "authors' L shown)" if authors else "L comes from scripts/bpe.sh)"
        )
    else:
        raise PlanError(
            f"{stats} not found: run scripts/bpe.sh {pair.name} first (QKNorm needs the data's L)"
        )
    paper = "none" if pair.paper_L is None else pair.paper_L
    return length, (
        f"QKNorm L = {length} (authors' L for {pair.name}: {paper}); the model logs its "
        f"g0 = log2(L^2 - L){note}"
    )


def train_plan(
    pair: config.Pair,
    system: config.System,
    profile: config.Profile,
    *,
    repo: Path,
    data_root: Path,
    dry_run: bool,
    what: str,
    remove_bpe: str | None = None,
    **argv_kwargs,
) -> dict:
    """Everything train.sh needs to know about one run before it takes the run's lock.

    Args:
        pair: the run's pair (:mod:`qknorm_tools.config`).
        system: its system.
        profile: its profile (``QKNORM_*`` overrides applied).
        repo: the repository root (its plugin directory goes to ``--user-dir``).
        data_root: the data directory (``raw/``, ``bpe/``, ``bin/``: train.sh's QK_DATA).
        dry_run: plan without data: the pair's BPE tool and the authors' L stand in for the
            data's, and the data are not checked.
        what: how error messages name the settings (the profile and the ``--`` arguments).
        remove_bpe: the symbol that undoes the data's BPE where the caller found it already
            (None: found here, as :func:`_remove_bpe`).
        **argv_kwargs: :func:`qknorm_tools.commands.train_argv`'s keyword arguments other than
            ``repo``, ``remove_bpe`` and ``qk_norm_length`` (which the plan finds).

    Returns:
        ``{"REMOVE_BPE": str, "L": str, "L_NOTE": str, "CMD": list, "DATA_ID": str}``
        (``DATA_ID`` only without ``dry_run``; ``L`` and ``L_NOTE`` empty for a system without
        QKNorm).

    Raises:
        PlanError: data missing or not consistent, settings that cannot work together, dev
            lines over the command's max positions.
        config.UsageError: a value the configuration refuses (a usage error).
        config.ConfigError: a configuration file that cannot be read.
    """
    bpe_dir = data_root / "bpe" / pair.name
    if remove_bpe is None:
        remove_bpe = _remove_bpe(pair, bpe_dir, dry_run)
    length, note = _qk_norm_length(pair, bpe_dir, dry_run) if system.qknorm else ("", "")
    cmd = commands.train_argv(
        pair, system, profile, repo=repo, remove_bpe=remove_bpe,
        qk_norm_length=length or None, **argv_kwargs,
    )  # fmt: skip
    problems = check_train_args(cmd[1:], remove_bpe)
    if problems:
        raise PlanError(
            *(f"{what}: {p}" for p in problems),
            "refusing to train: settings that cannot work together (above)",
        )
    plan = {"REMOVE_BPE": remove_bpe, "L": length, "L_NOTE": note, "CMD": cmd}
    if not dry_run:
        bin_dir = data_root / "bin" / pair.name
        if not (bin_dir / ".done").is_file():
            raise PlanError(
                f"{bin_dir} is not binarized: run scripts/binarize.sh {pair.name} first"
            )
        try:
            plan["DATA_ID"] = check_data(data_root, pair.name)["data_id"]
        except Exception as e:  # EvaluationError, OSError: named by check_data
            raise PlanError(
                str(e), f"the data of {pair.name} are not consistent (above); nothing was trained"
            ) from None
        _check_dev_lengths(pair, data_root, cmd)
    return plan


def _launch(a: argparse.Namespace, max_tokens: int, threads: int, environ) -> tuple:
    """(nproc, launcher, DDP backend, max tokens per process, threads per process).

    ``--nproc N``: N processes of fairseq's DistributedDataParallel training. ``--max-tokens`` is
    per process and N processes x B tokens = 1 process x ``--update-freq N`` x B, so each
    batches MAX_TOKENS/N: the profile's tokens per update stay. ``auto`` is srun inside a Slurm
    job of N tasks with GPUs here, else torchrun. CPU: gloo, the threads shared out; GPU: NCCL,
    one GPU per process (``--gpus``: the ids train.sh found).
    """
    nproc = run_spec.check_posint("--nproc", a.nproc)
    launch = a.launch
    if launch not in ("auto", "torchrun", "srun"):
        raise UsageError("--launch must be auto, torchrun or srun")
    gpus = [g for g in a.gpus.split(",") if g]
    if nproc == 1:
        return nproc, "", "gloo", max_tokens, threads
    if max_tokens % nproc:  # a usage error: another --nproc works
        raise UsageError(f"--nproc {nproc} does not divide the profile's --max-tokens {max_tokens} "
                         "(tokens per update are kept)")  # fmt: skip
    ntasks = environ.get("SLURM_NTASKS") or "1"
    if launch == "auto":
        slurm = environ.get("SLURM_JOB_ID") and ntasks == str(nproc) and gpus
        launch = "srun" if slurm else "torchrun"
    backend = "nccl" if launch == "srun" or gpus else "gloo"
    if launch == "srun" and not a.dry_run:
        if not environ.get("SLURM_JOB_ID"):
            raise PlanError(f"--launch srun runs inside a Slurm job (sbatch --ntasks {nproc}, one "
                            "GPU per task)")  # fmt: skip
        if ntasks != str(nproc):
            raise PlanError(f"--nproc {nproc} with --launch srun needs a Slurm job of {nproc} "
                            f"tasks, this one has {ntasks}")  # fmt: skip
    elif launch == "torchrun" and gpus and len(gpus) < nproc:
        raise PlanError(f"--nproc {nproc}: only {len(gpus)} GPUs here ({' '.join(gpus)})")
    elif launch == "torchrun" and not gpus:
        threads = threads // nproc if threads > nproc else 1
    return nproc, launch, backend, max_tokens // nproc, threads


def _warn_oversubscribed(nproc: int, threads: int, cores: int) -> None:
    """Warn (stderr) when a CPU run's processes x threads exceed the ``cores`` it may use.

    They then share the cores and the run is slower, not faster; the warning says what to ask
    instead.
    """
    if nproc * threads <= cores:
        return
    if nproc > 1:
        asked = f"--nproc {nproc} x {threads} thread{'s' if threads > 1 else ''} = "
        asked += f"{nproc * threads} threads"
        fix = f"--nproc {cores}" if nproc > cores else f"--threads {cores // nproc}"
    else:
        asked, fix = f"--threads {threads}", f"--threads {cores}"
    print(f"warning: {asked} on {cores} CPU cores: they share the cores and the run is slower, "
          f"not faster; {fix} keeps one thread a core", file=sys.stderr)  # fmt: skip


def _train_data(bin_dir: str) -> str:
    """BIN, and per-epoch BPE-dropout samples: BIN:BIN/shards/2:... (fairseq's epoch shards).

    ``scripts/bpe.sh --bpe-dropout-samples K``: BIN holds sample 1 and BIN/shards/k sample k;
    fairseq reads shard (epoch-1) % K of the data path.
    """
    shards = Path(bin_dir) / "shards"
    if not shards.is_dir():
        return bin_dir
    ks = sorted(
        (d.name for d in shards.iterdir() if d.is_dir()),
        key=lambda k: (int(k) if k.isdigit() else 0, k),
    )  # as sort -n
    return ":".join([bin_dir] + [f"{bin_dir}/shards/{k}" for k in ks])


def _require_native_bf16() -> None:
    """Refuse a bf16 run on a CPU without native bf16 before its directory exists.

    The plugin task refuses it too, but only after fairseq has started (a traceback, and a
    "rerun to resume" that cannot help). Dry runs do not ask (torch's start, for each cell).

    Raises:
        PlanError: no native bf16 on this CPU; config.ConfigError: no answer.
    """
    native, why = run_spec.native_bf16(config.REPO)
    if not native:
        raise PlanError(
            f"bf16 autocast: {why}; torch would emulate bf16, about 20x slower than fp32 "
            "(benchmarks/README.md): train in fp32 (--precision fp32), or pass -- "
            "--bf16-autocast-allow-emulated to train so anyway"
        )


def plan_training(a: argparse.Namespace, extra: tuple, environ=os.environ) -> dict:
    """``train-plan``: the run of train.sh's options (a :class:`run_spec.Run`) and its plan.

    In train.sh's order of checks: the options and the configuration (usage errors), the
    processes (:func:`_launch`), the size and the precision options, the data's BPE (before the
    precision decision, which may measure for a minute), the precision, then :func:`train_plan`.

    Returns:
        the assignments train.sh evaluates: the run (``PAIR``, ``SYSTEM``, ``PROFILE``,
        ``LABEL``, ``RUN``, ``ARCH``, ``QK_BF16_RUN``, ``QK_LR_OVERRIDE``, ``TRAIN_CMD``), its
        settings (``SYSTEM_DESC``, ``PAPER_ROW``, ``PAPER_L``, ``THREADS``, ``MAX_TOKENS`` per
        process, ``MAX_UPDATE``, ``MAX_EPOCH``), its processes (``NPROC``, ``LAUNCH_KIND``:
        torchrun, srun or empty), ``BIN``, and :func:`train_plan`'s.

    Raises:
        UsageError, PlanError, config.ConfigError: as :func:`run_spec.build_run`,
            :func:`train_plan` and the checks above.
    """
    run = run_spec.build_run(a.pair, a.system, a.profile, seed=a.seed, max_update=a.max_update,
                             lr=a.lr, size=a.size, work=a.work_dir, environ=environ)  # fmt: skip
    pair, system, profile = run.pair, run.system, run.profile
    threads = run_spec.check_posint("--threads", a.threads) if a.threads else profile.threads
    nproc, launch, backend, max_tokens, threads = _launch(a, profile.max_tokens, threads, environ)
    if (a.threads or nproc > 1) and not a.gpus:
        _warn_oversubscribed(nproc, threads, len(os.sched_getaffinity(0)))
    if a.size:  # usage errors that need the profile, before any data is looked for
        run_spec.require_sizeable(profile, f"--size {a.size}")
    precision = run_spec.precision_arg(a.precision, a.bf16_autocast)
    root = str(a.data_root)
    remove_bpe = _remove_bpe(pair, Path(root) / "bpe" / pair.name, a.dry_run)
    mode = run_spec.precision_mode(precision, profile, environ)
    run = run_spec.with_precision(
        run,
        run_spec.decide_precision(
            mode, profile, work=a.work_dir, threads=threads, cached_only=a.dry_run, repo=config.REPO
        ),
    )
    if run.precision == "bf16" and not a.dry_run and "--bf16-autocast-allow-emulated" not in extra:
        _require_native_bf16()
    bin_dir, train_cmd = f"{root}/bin/{pair.name}", run.train_cmd(environ)
    what = f"profile {profile.name} (configs/profiles/{profile.name}.toml)"
    plan = train_plan(
        pair, system, profile, repo=config.REPO, data_root=Path(root), dry_run=a.dry_run,
        what=what + (f" with -- {' '.join(extra)}" if extra else ""), remove_bpe=remove_bpe,
        data=_train_data(bin_dir), run=run.dir, label=run.label, arch=run.arch, seed=run.seed,
        max_update=run.max_update, max_tokens=max_tokens, lr=run.lr or None,
        bf16=run.precision == "bf16", nproc=nproc, dist_backend=backend, extra=extra,
    )  # fmt: skip
    return {
        "PAIR": pair.name, "SYSTEM": system.name, "PROFILE": profile.name, "LABEL": run.label,
        "RUN": str(run.dir), "ARCH": run.arch,
        "QK_BF16_RUN": _bf16_run(run.precision),
        "QK_LR_OVERRIDE": run.lr_override, "TRAIN_CMD": train_cmd,
        # the retrain hint keeps the arguments after -- (they are part of the run's command)
        "RETRAIN": train_cmd + (f" --threads {a.threads}" if a.threads else "") + " --force"
        + (" -- " + shlex.join(extra) if extra else ""),
        "SYSTEM_DESC": system.desc, "PAPER_ROW": system.paper_row,
        "PAPER_L": "" if pair.paper_L is None else str(pair.paper_L), "THREADS": str(threads),
        "MAX_TOKENS": str(max_tokens), "MAX_UPDATE": str(run.max_update),
        "MAX_EPOCH": str(profile.max_epoch or 0), "NPROC": str(nproc), "LAUNCH_KIND": launch,
        "BIN": bin_dir,
    } | plan  # fmt: skip


def _check_dev_lengths(pair: config.Pair, data_root: Path, cmd: list) -> None:
    """Dev lines over the command's max positions, where they are below fairseq's 1024.

    ``scripts/bpe.sh`` checks the data against fairseq's 1024 positions; a command that gives
    fewer (``-- --max-source-positions 64``) would stop at its first validation on a longer
    dev line ("Size of sample #N is invalid"): refused before training, each line named.
    """
    from qknorm_tools import seglen

    positions = seglen.run_max_positions(" ".join(shlex.quote(str(t)) for t in cmd))
    if min(positions) >= seglen.MAX_POSITIONS or "--skip-invalid-size-inputs-valid-test" in cmd:
        return  # (fairseq skips such lines when told to)
    raw, seg = data_root / "raw" / pair.name, data_root / "bpe" / pair.name
    try:
        result = seglen.check_segmentation(
            str(raw), str(seg), pair.src, pair.tgt, ("dev",), (), positions
        )
    except Exception as e:  # CorpusError: a file that is missing or not its raw file's
        raise PlanError(
            str(e), "cannot check the dev lines against the command's max positions"
        ) from None
    if result.refused:
        raise PlanError(
            *(line.removeprefix("error: ") for line in seglen.report(result, str(seg), True)),
            "refusing to train: fairseq-train would stop at the first validation (above)",
        )


def _check_identity(run: Path, expected: dict, train_cmd: str) -> None:
    """RUN/train.json records the run asked for, or PlanError naming the difference.

    A run directory copied or renamed (runs/.../cpu-proxy/... copied under
    cpu-proxy-fast-max-update-60) is never reused, decoded or scored under another name.
    """
    from qknorm_tools.evaluate import RunIdentityError, check_run_identity

    try:
        check_run_identity(run, expected)
    except RunIdentityError as e:
        raise PlanError(
            str(e), f"{run} is not the run of {train_cmd} (above): train it there with that "
            f"command, or remove {run}",
        ) from None  # fmt: skip


def train_claim(run: Path, expected: dict, *, identity_file: Path, train_cmd: str) -> None:
    """What train.sh checks once it holds the run's lock, before training or skipping it.

    A run, finished or resumable, made on other data is never reused, and a new one records
    the data it trains on (:func:`qknorm_tools.provenance.check_run` with ``record``); a
    finished run must be the run asked for (:func:`_check_identity`).

    Args:
        run: the run directory.
        expected: the run asked for (see :func:`evaluate_check`).
        identity_file: the current data's ``data/bin/PAIR/identity.json``.
        train_cmd: the ``scripts/train.sh`` command of the run (for messages).

    Raises:
        PlanError: the run belongs to other data, or records another run.
    """
    try:
        identity = read_identity(identity_file)
        if identity is None:
            raise OSError(f"{identity_file} not found")
        check_run(run, identity, record=True)
    except Exception as e:  # DataMismatchError, ProvenanceError, OSError: named there
        raise PlanError(
            str(e), f"{run} belongs to other data than the current {identity_file.parent}: "
            f"retrain it on the current data with {train_cmd} --force (or restore the data it "
            f"was trained on)",
        ) from None  # fmt: skip
    if (run / "train.json").is_file():
        _check_identity(run, expected, train_cmd)


def evaluate_check(
    run: Path,
    expected: dict,
    *,
    train_cmd: str,
    checkpoint: Path,
    averaged: bool,
    ref: Path,
    data_root: Path,
    split: str,
    src: str,
    tgt: str,
) -> dict:
    """What evaluate.sh checks once it holds a finished run's lock, in its order.

    Args:
        run: the run directory (its ``train.json`` exists).
        expected: the run asked for, as :func:`qknorm_tools.evaluate.check_run_identity` takes it
            (pair, profile label, system, seed, precision, variant).
        train_cmd: the ``scripts/train.sh`` command of that run (for messages).
        checkpoint: the checkpoint to decode.
        averaged: the checkpoint is made by averaging (after this check): it need not exist yet.
        ref: the split's reference (``data/raw/PAIR/SPLIT.TGT``).
        data_root: the data directory (``raw/``, ``bpe/``, ``bin/``).
        split: ``test`` or ``dev``.
        src: the pair's source language (in its file names).
        tgt: the pair's target language.

    Returns:
        ``{"DATA_ID": str, "REMOVE_BPE": str}``.

    Raises:
        PlanError: status 1 with the messages (another run, a missing checkpoint or reference,
            data not consistent or not the run's, a line too long for the model, an unreadable
            bpe.json); status :data:`DIVERGED` with the warning for a run that diverged.
    """
    from qknorm_tools import seglen

    pair = expected["pair"]
    _check_identity(run, expected, train_cmd)
    diverged = run / "diverged"
    if diverged.is_file():
        reason = (diverged.read_text(encoding="utf-8", errors="replace").splitlines() or [""])[0]
        raise PlanError(status=DIVERGED, warning=f"{run} diverged ({reason}): no model to decode")
    if not averaged and not checkpoint.is_file():
        raise PlanError(f"checkpoint {checkpoint} not found")
    if not ref.is_file():
        raise PlanError(f"reference {ref} not found: run scripts/prepare_data.sh {pair}")
    try:
        identity = check_data(data_root, pair)
        check_run(run, identity)
    except Exception as e:  # EvaluationError (DataMismatchError), OSError: named there
        raise PlanError(
            str(e), f"nothing was evaluated: the data of {pair} are not consistent, or {run} was "
            f"trained on other data than the current {data_root / 'bin' / pair} (above); a run is "
            f"never decoded with another dictionary or scored against another reference: retrain "
            f"it with {train_cmd} --force, or restore the data it was trained on",
        ) from None  # fmt: skip
    # every line of the split must fit the model, or fairseq-generate stops at it (data/bpe
    # made before scripts/bpe.sh checked segmented lengths); the model's max positions: those
    # of the run's command.txt, else fairseq's 1024
    rc = seglen.main(["check", "--raw", str(data_root / "raw" / pair), "--seg",
                      str(data_root / "bpe" / pair), "--src", src, "--tgt", tgt, "--splits", split,
                      "--run-command", str(run / "command.txt")])  # fmt: skip
    if rc != 0:
        raise PlanError(f"cannot decode the {split} split of {pair} (above): nothing was decoded")
    remove_bpe = _data_bpe_symbol(pair, data_root / "bpe" / pair)
    return {"DATA_ID": identity["data_id"], "REMOVE_BPE": remove_bpe}


def grid_precision(a: argparse.Namespace, environ=os.environ) -> dict:
    """``precision``: the precision a grid passes to each of its cells (decided once).

    :func:`run_spec.precision_mode` and :func:`run_spec.decide_precision` for ``--profile``
    (``QKNORM_*`` applied), as train.sh decides a run's.

    Returns:
        ``{"QK_BF16_RUN": "bf16" or "", "QK_PRECISION": "bf16" or "fp32"}``.

    Raises:
        UsageError: a bad ``--precision``, ``--threads`` or ``QKNORM_BF16``; config.ConfigError:
            a configuration file that cannot be read, or no decision.
    """
    profile = config.apply_env(config.load_profile(a.profile), environ)
    threads = run_spec.check_posint("--threads", a.threads) if a.threads else profile.threads
    mode = run_spec.precision_mode(a.precision, profile, environ)
    precision = run_spec.decide_precision(mode, profile, work=a.work_dir, threads=threads,
                                          cached_only=a.cached_only, repo=config.REPO,
                                          quiet=a.quiet)  # fmt: skip
    return {"QK_BF16_RUN": _bf16_run(precision), "QK_PRECISION": precision}


def grid_dirs(a: argparse.Namespace) -> dict:
    """``dirs``: the run directory of each cell of a grid (:func:`qknorm_tools.config.run_dir`).

    Returns:
        ``{"PAIR/SYSTEM/SEED": dir}``, or with ``--lr`` (lr_sweep.sh's LR_DIRS, ``""`` for the
        profile's own lr) ``{"PAIR/SYSTEM/SEED/LR": dir}``, in the order of the arguments.
    """
    out = {}
    for pair in a.pairs.split(","):
        for system in a.systems.split(","):
            for seed in a.seeds.split(","):
                for lr in a.lr or [None]:
                    key = f"{pair}/{system}/{seed}" + ("" if lr is None else f"/{lr}")
                    out[key] = str(config.run_dir(a.work_dir, pair, a.label, system, int(seed),
                                                  lr or "", a.precision))  # fmt: skip
    return out


def _evaluation(a: argparse.Namespace, environ=os.environ) -> tuple[dict, run_spec.Run]:
    """``evaluate-plan``: the run evaluate.sh's options name, its outputs and its commands.

    The run train.sh made with the same options (:class:`run_spec.Run`; the precision of a run
    is decided as train.sh decides it, never measured here: ``auto`` reads the machine's cached
    verdict); the checkpoint (``--checkpoint``, else the profile's ``decode.checkpoint``: best,
    last or avgN); the outputs (``SPLIT.*`` for the profile's checkpoint, ``SPLIT.C.*`` for
    another one C); AVG_CMD (the last N checkpoints the profile keeps) and GEN_CMD
    (:mod:`qknorm_tools.commands`: what ``--dry-run`` prints is what runs).

    Returns:
        the assignments evaluate.sh evaluates (``RUN``, ``CHECKPOINT``, ``GEN``, ``HYP``,
        ``SCORE``, ``TRAIN_CMD``, ``TWIN_HINT``, ``GEN_CMD``, ...) and the :class:`run_spec.Run`.

    Raises:
        UsageError: a bad option; config.ConfigError: a configuration file that cannot be read.
    """
    run_spec.check_uint("--seed", a.seed)
    if a.max_update:
        run_spec.check_uint("--max-update", a.max_update)
    threads = run_spec.check_posint("--threads", a.threads) if a.threads else 0
    if a.split not in ("test", "dev"):
        raise UsageError("--split must be test or dev")
    run = run_spec.build_run(a.pair, a.system, a.profile, seed=a.seed, max_update=a.max_update,
                             lr=a.lr, work=a.work_dir, environ=environ)  # fmt: skip
    pair, profile = run.pair, run.profile
    ckpt = a.checkpoint or profile.checkpoint
    if ckpt.startswith("avg"):
        if not POSINT_RE.match(ckpt[3:]):
            raise UsageError(f"--checkpoint avgN needs a positive N (e.g. avg5), got '{ckpt}'")
    elif ckpt not in ("best", "last"):
        raise UsageError(f"--checkpoint must be best, last or avgN (e.g. avg5), got '{ckpt}'")
    threads = threads or profile.threads
    mode = run_spec.precision_mode(
        run_spec.precision_arg(a.precision, a.bf16_autocast), profile, environ
    )
    precision = run_spec.decide_precision(
        mode, profile, work=a.work_dir, threads=threads, cached_only=True, repo=config.REPO
    )
    run = run_spec.with_precision(run, precision)
    other = "fp32" if precision == "bf16" else "bf16"
    twin = run_spec.with_precision(run, other).dir  # seedN <-> seedN-bf16
    hint = f"; {twin} is finished: --precision {other} selects it"
    root, rundir = str(a.data_root), str(run.dir)
    checkpoint = f"{rundir}/checkpoints/checkpoint_{ckpt}.pt"
    stem = a.split if ckpt == profile.checkpoint else f"{a.split}.{ckpt}"
    n_average = int(ckpt[3:]) if ckpt.startswith("avg") else 0
    gen = commands.generate_argv(
        pair, profile, repo=config.REPO, data=f"{root}/bin/{pair.name}", checkpoint=checkpoint,
        gen_subset="valid" if a.split == "dev" else "test", seed=run.seed, label=run.label,
    )  # fmt: skip
    avg = commands.average_argv(profile, run.dir, n_average, checkpoint) if n_average else []
    return {
        "PAIR": pair.name, "SYSTEM": run.system.name, "PROFILE": profile.name,
        "LABEL": run.label, "RUN": rundir, "QK_BF16_RUN": _bf16_run(precision),
        "QK_LR_OVERRIDE": run.lr_override, "TRAIN_CMD": run.train_cmd(environ),
        "TWIN_HINT": hint if (twin / "train.json").is_file() else "", "SPLIT": a.split,
        "CKPT": ckpt, "N_AVERAGE": str(n_average or ""), "CHECKPOINT": checkpoint,
        "BIN": f"{root}/bin/{pair.name}", "REF": f"{root}/raw/{pair.name}/{a.split}.{pair.tgt}",
        "SRC": pair.src, "TGT": pair.tgt, "STEM": stem, "GEN": f"{rundir}/{stem}.gen.out",
        "HYP": f"{rundir}/{stem}.hyp", "SCORE": f"{rundir}/{stem}.score.json",
        "THREADS": str(threads), "BEAM": str(profile.beam), "LENPEN": str(profile.lenpen),
        "AVG_CMD": avg, "GEN_CMD": gen,
    }, run  # fmt: skip


def plan_evaluation(a: argparse.Namespace, environ=os.environ) -> dict:
    """``evaluate-plan``: :func:`_evaluation`'s assignments."""
    return _evaluation(a, environ)[0]


def check_evaluation(a: argparse.Namespace, environ=os.environ) -> dict:
    """``evaluate-check``: :func:`evaluate_check` for the run of evaluate.sh's options.

    evaluate.sh passes the precision :func:`plan_evaluation` decided (``--precision``), so that
    nothing is decided twice.

    Returns:
        ``{"DATA_ID": str, "REMOVE_BPE": str}``.

    Raises:
        PlanError, UsageError, config.ConfigError: as :func:`plan_evaluation` and
            :func:`evaluate_check`.
    """
    plan, run = _evaluation(a, environ)
    return evaluate_check(
        run.dir, run.identity, train_cmd=plan["TRAIN_CMD"],
        checkpoint=Path(plan["CHECKPOINT"]), averaged=bool(plan["N_AVERAGE"]),
        ref=Path(plan["REF"]), data_root=Path(str(a.data_root)), split=a.split,
        src=plan["SRC"], tgt=plan["TGT"],
    )  # fmt: skip


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m qknorm_tools.run`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="python -m qknorm_tools.run", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("train-plan", help="what train.sh decides before training (one process)")
    for name in ("pair", "system", "profile", "seed"):
        p.add_argument(f"--{name}", required=True)
    for name in ("max-update", "lr", "size", "threads", "precision", "gpus"):
        p.add_argument(f"--{name}", default="", help="as train.sh's option ('': not given)")
    p.add_argument("--nproc", default="1")
    p.add_argument("--launch", default="auto")
    p.add_argument("--bf16-autocast", action="store_true", help="train.sh --bf16-autocast")
    p.add_argument("--work-dir", type=Path, required=True)
    p.add_argument("--repo", type=Path)
    p.add_argument("--data-root", type=Path, required=True, help="raw/, bpe/ and bin/ of PAIR")
    p.add_argument("--dry-run", action="store_true", help="plan without data (see the module)")
    c = sub.add_parser("train-claim", help="what train.sh checks under the run's lock")
    c.add_argument("--identity", type=Path, required=True, help="data/bin/PAIR/identity.json")
    c.add_argument("--run", type=Path, required=True, help="the run directory")
    c.add_argument("--pair", required=True)
    c.add_argument("--label", required=True, help="the run's label")
    c.add_argument("--system", required=True)
    c.add_argument("--seed", type=int, required=True)
    c.add_argument("--precision", choices=("bf16", "fp32"), required=True)
    c.add_argument("--variant", action="append", metavar="KEY=VALUE", help="e.g. lr=3e-3")
    c.add_argument("--train-cmd", required=True, help="the run's train.sh command (messages)")
    c.add_argument("--repo", type=Path, help="unused: the scripts pass their root to all")
    r = sub.add_parser("precision", help="the precision of a profile's runs here (the grids)")
    r.add_argument("--profile", required=True)
    r.add_argument("--precision", default="", help="the script's --precision ('': not given)")
    r.add_argument("--threads", default="", help="the runs' threads ('': the profile's)")
    r.add_argument("--cached-only", action="store_true", help="never measure (fp32 if no verdict)")
    r.add_argument("--quiet", action="store_true", help="no line saying the verdict")
    r.add_argument("--work-dir", type=Path, required=True)
    r.add_argument("--repo", type=Path)
    d = sub.add_parser("dirs", help="a grid's run directories (KEY<TAB>DIR lines)")
    d.add_argument("--work-dir", type=Path, required=True)
    d.add_argument("--label", required=True, help="the runs' label (qk_run_label)")
    d.add_argument("--precision", choices=("bf16", "fp32"), required=True)
    for name in ("pairs", "systems", "seeds"):
        d.add_argument(f"--{name}", required=True, help="comma-separated")
    d.add_argument("--lr", action="append", help="a run directory's lr (LR_DIRS; '': seedN)")
    d.add_argument("--repo", type=Path)
    e = sub.add_parser("evaluate-plan", help="evaluate.sh's run, outputs and commands")
    k = sub.add_parser("evaluate-check", help="evaluate.sh's checks under the run's lock")
    for q in (e, k):  # evaluate.sh's options, as given
        for name in ("pair", "system", "profile", "seed"):
            q.add_argument(f"--{name}", required=True)
        for name in ("max-update", "lr", "threads", "precision", "checkpoint"):
            q.add_argument(f"--{name}", default="", help="as evaluate.sh's option ('': not given)")
        q.add_argument("--split", default="test")
        q.add_argument("--bf16-autocast", action="store_true", help="evaluate.sh --bf16-autocast")
        q.add_argument("--work-dir", type=Path, required=True)
        q.add_argument("--repo", type=Path)
        q.add_argument("--data-root", required=True, help="raw/, bpe/ and bin/ of PAIR")
    o = sub.add_parser("options", help="a script's integers and lists (script_options.py)")
    o.add_argument("specs", nargs="*", metavar="SPEC", help="uint:OPTION=VALUE, seeds:VAR=LIST...")
    o.add_argument("--work-dir", type=Path, help="the researcher's own configs (names:KIND)")
    o.add_argument("--repo", type=Path)
    return parser


def main(argv: list | None = None) -> int:
    """The command line (module docstring); returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    extra = []
    if "--" in argv:  # fairseq-train's own arguments, passed on unread
        extra, argv = argv[argv.index("--") + 1 :], argv[: argv.index("--")]
    parser = build_parser()
    a = parser.parse_args(argv)
    if extra and a.cmd != "train-plan":
        die_usage(parser, f"{a.cmd} takes no arguments after --")
    if a.repo is not None:  # scripts/lib.sh passes its own root (a copy of the scripts and configs)
        config.REPO = a.repo.resolve()
    try:
        if a.cmd == "train-plan":
            out = plan_training(a, tuple(extra))
        elif a.cmd == "precision":
            out = grid_precision(a)
        elif a.cmd == "dirs":
            print("\n".join(f"{k}\t{v}" for k, v in grid_dirs(a).items()))
            return OK
        elif a.cmd == "evaluate-plan":
            out = plan_evaluation(a)
        elif a.cmd == "evaluate-check":
            out = check_evaluation(a)
        elif a.cmd == "options":
            out = dict(script_options.check(a.specs, a.work_dir))
        else:
            out = _claim(a, parser)
    except UsageError as e:  # on stdout: qk_usage_error shows it
        print(e)
        return USAGE
    except PlanError as e:
        if e.warning:  # as scripts/lib/cli.sh:qk_warn writes it
            print(f"[evaluate] warning: {e.warning}", file=sys.stderr)
        for line in e.lines:
            fail(line)
        return e.status
    except (config.ConfigError, ValueError) as e:
        return fail(e)
    if out:
        # as `config shell` prints them: arrays VAR=(...), every value shell-quoted
        print("\n".join(config.shell_lines([(k, tuple(map(str, v)) if isinstance(v, list) else v)
                                             for k, v in out.items()])))  # fmt: skip
    return OK


def _claim(a: argparse.Namespace, parser: argparse.ArgumentParser) -> dict:
    """train-claim: {} once the run is claimed (:func:`train_claim`)."""
    from qknorm_tools.evaluate import parse_kv

    try:
        variant = parse_kv(a.variant, "--variant")
    except Exception as e:  # EvaluationError: not KEY=VALUE
        die_usage(parser, str(e))
    expected = {"pair": a.pair, "profile": a.label, "system": a.system, "seed": a.seed,
                "precision": a.precision, "variant": variant}  # fmt: skip
    train_claim(a.run, expected, identity_file=a.identity, train_cmd=a.train_cmd)
    return {}


if __name__ == "__main__":
    sys.exit(main())
