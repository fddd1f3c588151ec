"""What ``scripts/train.sh`` decides about one run before training it, in one process.

``scripts/train.sh`` keeps what bash is good at (its options, the launcher, the lock, the
process group, Ctrl-C, the exit hooks); what it used to ask five separate Python commands is
decided here in one start (issue 36: one Python spine for a run):

1. the symbol that undoes the data's BPE (``data/bpe/PAIR/bpe.json``; a dry run without it:
   the pair's configured tool), for validation BLEU;
2. for a QKNorm system, the data's L (``data/bpe/PAIR/length_stats.json``; a dry run without
   it: the authors' L) and the line that says it;
3. the fairseq-train command (:func:`qknorm_tools.commands.train_argv`);
4. settings that cannot work together refused (:func:`qknorm_tools.train_check.check_train_args`);
5. unless a dry run: the data binarized (``BIN/.done``) and one consistent chain raw -> BPE ->
   binarized (:func:`qknorm_tools.provenance.check_data`), its data identity; and where the
   command gives fewer max positions than fairseq's 1024 (which ``scripts/bpe.sh`` checks the
   data against), no dev line over them (:mod:`qknorm_tools.seglen`: fairseq-train would stop
   at its first validation).

``scripts/evaluate.sh``, once it holds a finished run's lock, asks one process (``evaluate-check``)
what it asked four: the run is the one asked for (:func:`qknorm_tools.evaluate.check_run_identity`;
a diverged run has no model to decode, exit 3), its checkpoint and the reference exist, the data
are consistent and the run's own (:mod:`qknorm_tools.provenance`), every line of the split fits
the model (:mod:`qknorm_tools.seglen`), and the symbol that undoes the data's BPE.

Command lines (shell-quoted assignments on stdout, for bash's ``eval``: ``REMOVE_BPE``, ``L``,
``L_NOTE``, ``CMD`` (an array) and, unless ``--dry-run``, ``DATA_ID``; ``evaluate-check``:
``DATA_ID`` and ``REMOVE_BPE``)::

    python -m qknorm_tools.run train-plan --pair P --system S --profile F --data DATA
        --run RUN --label LABEL --arch ARCH --seed N --max-update N --max-tokens N
        --data-root QK_DATA [--lr LR] [--bf16] [--nproc N --dist-backend gloo|nccl]
        [--what NAME] [--dry-run] [-- EXTRA...]
    python -m qknorm_tools.run evaluate-check --run RUN --pair P --profile LABEL --system S
        --seed N --precision bf16|fp32 [--variant lr=LR] --train-cmd CMD --checkpoint PT
        [--averaged] --ref REF --data-root QK_DATA --split test|dev

Exit status (:mod:`qknorm_tools.exits`): 0 planned; 2 a usage error (the message on stdout,
which ``scripts/lib/cli.sh:qk_usage_error`` shows with the script's usage, as for
``python -m qknorm_tools.commands``); 1 any other failure, each ``error: ...`` line on stderr
naming the file and what to run; ``evaluate-check``: 3 for a run that diverged (a finished
result without a model).
"""

from __future__ import annotations

import argparse
import json
import shlex
import sys
from pathlib import Path

from qknorm_tools import commands, config
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


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m qknorm_tools.run`` argument parser."""
    parser = argparse.ArgumentParser(
        prog="python -m qknorm_tools.run", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("train-plan", help="what train.sh decides before training (one process)")
    commands.add_train_arguments(p)
    commands.add_config_arguments(p)
    p.add_argument("--data-root", type=Path, required=True, help="raw/, bpe/ and bin/ of PAIR")
    p.add_argument("--what", default="the fairseq-train command", help="for error messages")
    p.add_argument("--dry-run", action="store_true", help="plan without data (see the module)")
    c = sub.add_parser("train-claim", help="what train.sh checks under the run's lock")
    c.add_argument("--identity", type=Path, required=True, help="data/bin/PAIR/identity.json")
    e = sub.add_parser("evaluate-plan", help="evaluate.sh's commands, and its checks")
    for q in (c, e):  # the run asked for
        q.add_argument("--run", type=Path, required=True, help="the run directory")
        q.add_argument("--pair", required=True)
        q.add_argument("--label", required=True, help="the run's label (scripts: qk_run_label)")
        q.add_argument("--system", required=True)
        q.add_argument("--seed", type=int, required=True)
        q.add_argument("--precision", choices=("bf16", "fp32"), required=True)
        q.add_argument("--variant", action="append", metavar="KEY=VALUE", help="e.g. lr=3e-3")
        q.add_argument("--train-cmd", required=True, help="the run's train.sh command (messages)")
    c.add_argument("--repo", type=Path, help="unused: the scripts pass their root to all")
    commands.add_config_arguments(e)
    e.add_argument("--checkpoint", required=True)
    e.add_argument(
        "--average", type=int, default=0, metavar="N",
        help="CHECKPOINT is the average of the last N checkpoints (made after the checks)",
    )  # fmt: skip
    e.add_argument("--data-root", required=True, help="raw/, bpe/ and bin/ of PAIR")
    e.add_argument("--split", choices=("test", "dev"), required=True)
    e.add_argument("--dry-run", action="store_true", help="the commands only, no checks")
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
            pair, system, profile = commands.load_configs(a)
            out = train_plan(
                pair, system, profile, repo=config.REPO, data_root=a.data_root,
                dry_run=a.dry_run, what=a.what, data=a.data, run=a.run, label=a.label,
                arch=a.arch, seed=a.seed, max_update=a.max_update, max_tokens=a.max_tokens,
                lr=a.lr, bf16=a.bf16, nproc=a.nproc, dist_backend=a.dist_backend,
                extra=tuple(extra),
            )  # fmt: skip
        else:
            out = _checked(a, parser)
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


def _checked(a: argparse.Namespace, parser: argparse.ArgumentParser) -> dict:
    """train-claim ({}) or evaluate-plan (its commands, and unless a dry run its checks)."""
    from qknorm_tools.evaluate import parse_kv

    try:
        variant = parse_kv(a.variant, "--variant")
    except Exception as e:  # EvaluationError: not KEY=VALUE
        die_usage(parser, str(e))
    expected = {"pair": a.pair, "profile": a.label, "system": a.system, "seed": a.seed,
                "precision": a.precision, "variant": variant}  # fmt: skip
    if a.cmd == "train-claim":
        train_claim(a.run, expected, identity_file=a.identity, train_cmd=a.train_cmd)
        return {}
    pair, _, profile = commands.load_configs(a)
    root = a.data_root  # the paths as evaluate.sh spells them (what --dry-run prints)
    gen = commands.generate_argv(
        pair, profile, repo=config.REPO, data=f"{root}/bin/{pair.name}", checkpoint=a.checkpoint,
        gen_subset="valid" if a.split == "dev" else "test", seed=a.seed, label=a.label,
    )  # fmt: skip
    out = {"AVG_CMD": [], "GEN_CMD": gen}
    if a.average:
        out["AVG_CMD"] = commands.average_argv(profile, a.run, a.average, a.checkpoint)
    if a.dry_run:
        return out
    return out | evaluate_check(
        a.run, expected, train_cmd=a.train_cmd, checkpoint=Path(a.checkpoint),
        averaged=bool(a.average), ref=Path(f"{root}/raw/{pair.name}/{a.split}.{pair.tgt}"),
        data_root=Path(root), split=a.split, src=pair.src, tgt=pair.tgt,
    )  # fmt: skip


if __name__ == "__main__":
    sys.exit(main())
