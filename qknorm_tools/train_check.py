"""Up-front consistency check of a ``fairseq-train`` command (no torch, no fairseq).

``scripts/train.sh`` builds its command from a profile (``configs/profiles/P.toml``), a system,
the data and the user's ``-- EXTRA`` arguments, then runs
``python -m qknorm_tools.train_check --remove-bpe SYMBOL -- ARGS...`` before training (and before
printing a ``--dry-run``). Values that each look fine but cannot work together are refused
with a message naming them, instead of a run that stops before its first update or silently
trains on something else than intended. Each rule names the fairseq code it follows
(``fairseq_cli/train.py``, ``fairseq/checkpoint_utils.py``, ``fairseq/tasks/translation.py``,
``fairseq/optim/lr_scheduler/*``):

* the learning rate fairseq starts from (the warmup's ``--warmup-init-lr``, 0 when unset, or
  ``--lr`` without warmup) must be above ``--stop-min-lr``: ``fairseq_cli/train.py`` stops
  ("current learning rate ... is smaller than or equal to minimum learning rate") whenever
  ``lr <= --stop-min-lr`` before an epoch, the first one included;
* ``--best-checkpoint-metric bleu`` needs ``--eval-bleu`` (else there is no ``bleu`` to select
  by) and ``--maximize-best-checkpoint-metric`` (else the *worst* BLEU is kept, and
  ``reduce_lr_on_plateau`` and ``--patience`` treat a rising BLEU as getting worse); a loss
  metric must not be maximized;
* ``--eval-bleu`` must remove exactly the segmentation of the data: ``--eval-bleu-remove-bpe``
  given *without* a value means ``"@@ "`` (subword-nmt) in fairseq, so on sentencepiece data the
  validation BLEU, and with it checkpoint selection, LR decay and early stopping, would be
  computed on pieces;
* ``--lr-scheduler reduce_lr_on_plateau`` steps on the last validation of each epoch
  (``fairseq_cli/train.py``: ``trainer.lr_step(epoch, valid_losses[0])``): it needs validation at
  epoch ends, i.e. no ``--disable-validation`` and a ``--validate-interval`` within
  ``--max-epoch``; ``--patience`` needs validation too;
* checkpoints kept for averaging must be written: ``--keep-last-epochs N`` keeps
  ``checkpointE.pt`` files that ``--no-epoch-checkpoints`` never writes, and
  ``--keep-interval-updates N`` keeps ``checkpoint_E_U.pt`` files that exist only with
  ``--save-interval-updates``;
* a run must be able to stop: ``--max-update 0`` with ``--max-epoch 0`` trains forever.

Exit status 2 (with one ``error:`` line per problem) when a rule is broken, 0 otherwise.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from .exits import OK, USAGE
from .textio import BPE_TOOL_SYMBOL

__all__ = ["check_train_args", "main"]

#: ``--eval-bleu-remove-bpe`` values that fairseq's ``post_process`` treats alike
_SAME_SYMBOL = {"@@ ": "subword_nmt", "@@": "subword_nmt"}

#: metrics fairseq's criteria log where lower is better
_LOSS_METRICS = {"loss", "nll_loss", "ppl"}


def _fairseq_subset_parser() -> argparse.ArgumentParser:
    """The fairseq-train options the rules read, with fairseq's defaults.

    The last value of a repeated option wins, as in fairseq's argparse.
    """
    p = argparse.ArgumentParser(add_help=False, allow_abbrev=False)
    add = p.add_argument
    add("--lr", default="0.25")  # fairseq: lr = [0.25]; a comma-separated list per epoch
    add("--lr-scheduler", default="fixed")
    add("--warmup-updates", type=int, default=0)
    add("--warmup-init-lr", type=float, default=-1.0)
    add("--stop-min-lr", type=float, default=-1.0)
    add("--best-checkpoint-metric", default="loss")
    add("--maximize-best-checkpoint-metric", action="store_true")
    add("--eval-bleu", action="store_true")
    # fairseq: argparse_const "@@ " (the option without a value)
    add("--eval-bleu-remove-bpe", nargs="?", const="@@ ", default=None)
    add("--patience", type=int, default=-1)
    add("--disable-validation", action="store_true")
    add("--validate-interval", type=int, default=1)
    add("--no-epoch-checkpoints", action="store_true")
    add("--keep-last-epochs", type=int, default=-1)
    add("--keep-interval-updates", type=int, default=-1)
    add("--save-interval-updates", type=int, default=0)
    add("--max-update", type=int, default=0)
    add("--max-epoch", type=int, default=0)
    return p


def _start_lr(a: argparse.Namespace) -> tuple[float, str] | None:
    """The learning rate before the first update and where it comes from.

    Known for ``reduce_lr_on_plateau``, ``inverse_sqrt`` and ``fixed`` (else ``None``).
    """
    lr = float(str(a.lr).split(",")[0])
    if a.lr_scheduler not in ("reduce_lr_on_plateau", "inverse_sqrt", "fixed"):
        return None
    if a.lr_scheduler != "fixed" and a.warmup_updates > 0:
        # both schedulers: warmup_init_lr < 0 means 0 with warmup (their __init__)
        if a.warmup_init_lr < 0:
            return (
                0.0,
                f"0 (the start of the {a.warmup_updates}-update warmup without --warmup-init-lr)",
            )
        return a.warmup_init_lr, f"--warmup-init-lr {a.warmup_init_lr:g} (start of the warmup)"
    return lr, f"--lr {lr:g}"


def check_train_args(argv: Sequence[str], remove_bpe: str | None = None) -> list[str]:
    """The problems of a ``fairseq-train`` argument list (see the module docstring).

    Args:
        argv: the arguments after ``fairseq-train`` (data directory and options).
        remove_bpe: the fairseq ``post_process`` symbol that undoes the data's segmentation
            (``subword_nmt`` or ``sentencepiece``: :data:`~.textio.BPE_TOOL_SYMBOL` of the
            tool in ``bpe.json``); ``None`` skips the ``--eval-bleu-remove-bpe`` rule.

    Returns:
        One message per broken rule (empty: consistent).
    """
    a, _ = _fairseq_subset_parser().parse_known_args(list(argv))
    problems = []
    start = _start_lr(a)
    if start is not None and start[0] <= a.stop_min_lr:
        problems.append(
            f"the learning rate before the first update, {start[1]}, is <= --stop-min-lr "
            f"{a.stop_min_lr:g}: fairseq-train would stop before training (it stops whenever "
            f"lr <= --stop-min-lr at the start of an epoch); use a --stop-min-lr below it"
        )
    metric = a.best_checkpoint_metric
    if metric == "bleu" and not a.eval_bleu:
        problems.append("--best-checkpoint-metric bleu needs --eval-bleu (no BLEU is computed)")
    if metric == "bleu" and not a.maximize_best_checkpoint_metric:
        problems.append(
            "--best-checkpoint-metric bleu needs --maximize-best-checkpoint-metric: otherwise "
            "the lowest BLEU is kept as best and LR decay / early stopping treat a rising BLEU "
            "as a plateau"
        )
    if metric in _LOSS_METRICS and a.maximize_best_checkpoint_metric:
        problems.append(
            f"--maximize-best-checkpoint-metric with --best-checkpoint-metric {metric}: "
            f"the highest {metric} would be kept as best"
        )
    if a.eval_bleu and remove_bpe is not None:
        given_symbol = _SAME_SYMBOL.get(a.eval_bleu_remove_bpe, a.eval_bleu_remove_bpe)
        if given_symbol != remove_bpe:
            tool = {v: k for k, v in BPE_TOOL_SYMBOL.items()}.get(remove_bpe, remove_bpe)
            given = (
                "no --eval-bleu-remove-bpe"
                if a.eval_bleu_remove_bpe is None
                else f"--eval-bleu-remove-bpe {a.eval_bleu_remove_bpe!r}"
            )
            problems.append(
                f"--eval-bleu with {given} on {tool} data: the validation BLEU (checkpoint "
                f"selection, LR decay, early stopping) would be computed on subword pieces; use "
                f"--eval-bleu-remove-bpe {remove_bpe}"
            )
    plateau = a.lr_scheduler == "reduce_lr_on_plateau"
    no_epoch_validation = a.disable_validation or (
        a.max_epoch > 0 and a.validate_interval > a.max_epoch
    )
    if plateau and no_epoch_validation:
        problems.append(
            "--lr-scheduler reduce_lr_on_plateau steps on the validation at the end of an "
            "epoch, and this command never validates there (--disable-validation, or "
            f"--validate-interval {a.validate_interval} > --max-epoch {a.max_epoch}): the "
            "learning rate would never decay"
        )
    if a.patience > 0 and a.disable_validation:
        problems.append(
            f"--patience {a.patience} with --disable-validation: early stopping never fires"
        )
    if a.keep_last_epochs > 0 and a.no_epoch_checkpoints:
        problems.append(
            f"--keep-last-epochs {a.keep_last_epochs} with --no-epoch-checkpoints: no "
            f"checkpointE.pt is written, so none is kept (checkpoint averaging needs them)"
        )
    if a.keep_interval_updates > 0 and a.save_interval_updates <= 0:
        problems.append(
            f"--keep-interval-updates {a.keep_interval_updates} without --save-interval-updates: "
            f"no checkpoint_E_U.pt is written, so none is kept"
        )
    if a.max_update == 0 and a.max_epoch == 0:
        problems.append("--max-update 0 with --max-epoch 0: training would never stop")
    return problems


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m qknorm_tools.train_check [--remove-bpe S] -- FAIRSEQ_TRAIN_ARGS...``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" in argv:
        i = argv.index("--")
        own, train_args = argv[:i], argv[i + 1 :]
    else:
        own, train_args = argv, []
    p = argparse.ArgumentParser(
        prog="python -m qknorm_tools.train_check",
        description="Refuse a fairseq-train command whose settings cannot work together.",
        usage="%(prog)s [--remove-bpe SYMBOL] [--what NAME] -- FAIRSEQ_TRAIN_ARGS...",
    )
    p.add_argument(
        "--remove-bpe",
        choices=sorted(BPE_TOOL_SYMBOL.values()),
        help="the symbol that undoes the data's BPE (qknorm_tools.textio.BPE_TOOL_SYMBOL)",
    )
    p.add_argument("--what", default="the fairseq-train command", help="name used in messages")
    a = p.parse_args(own)
    problems = check_train_args(train_args, a.remove_bpe)
    for msg in problems:
        print(f"error: {a.what}: {msg}", file=sys.stderr)
    return USAGE if problems else OK  # settings that cannot work together: the command's usage


if __name__ == "__main__":
    sys.exit(main())
