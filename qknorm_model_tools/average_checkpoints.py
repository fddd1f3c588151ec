r"""Average the parameters of fairseq checkpoints (checkpoint averaging for decoding).

fairseq's own tool, ``scripts/average_checkpoints.py`` of the fairseq repository, is
not installed by the ``ve-fairseq`` package, and under torch >= 2.6 its ``torch.load``
(``weights_only=True``) refuses fairseq checkpoints unless
``TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD=1`` is set. This module does the same job with
the same options::

    python -m qknorm_model_tools.average_checkpoints --inputs A.pt B.pt --output avg.pt
    python -m qknorm_model_tools.average_checkpoints --inputs RUN/checkpoints \
        --num-epoch-checkpoints 5 --output RUN/checkpoints/checkpoint_avg5.pt
    python -m qknorm_model_tools.average_checkpoints --inputs RUN/checkpoints \
        --num-update-checkpoints 5 [--checkpoint-upper-bound 40000] --output avg.pt

``--num-epoch-checkpoints N`` takes the last N ``checkpointE.pt`` of the directory
(written unless ``--no-epoch-checkpoints``; keep them with ``--keep-last-epochs N``),
``--num-update-checkpoints N`` the last N ``checkpoint_E_U.pt``
(``--save-interval-updates``, ``--keep-interval-updates N``).

Each floating-point tensor of ``state["model"]`` becomes the mean over the inputs,
summed in float64 and stored in its own dtype; integer tensors get the floor of
the mean (as fairseq's tool). The output keeps the first input's configuration
and history (the newest one with ``--num-*-checkpoints``), not its optimizer state:
it is for ``fairseq-generate --path`` (training on from it needs
``--reset-optimizer``).

Security: the inputs are unpickled (``weights_only=False``), as every fairseq
checkpoint load is; average only checkpoints you trust.
"""

import argparse
import os
import re
import sys
from collections.abc import Sequence
from typing import Optional

import torch
from fairseq import checkpoint_utils

EPOCH_PATTERN = re.compile(r"checkpoint(\d+)\.pt")
UPDATE_PATTERN = re.compile(r"checkpoint_\d+_(\d+)\.pt")


def last_checkpoints(
    directory: str, n: int, update_based: bool, upper_bound: Optional[int] = None
) -> list[str]:
    """The ``n`` newest epoch or update checkpoints of ``directory``, newest first.

    Epoch checkpoints are ``checkpointE.pt``, update checkpoints ``checkpoint_E_U.pt``
    (fairseq's ``last_n_checkpoints``).

    Args:
        directory: a fairseq ``--save-dir``.
        n: how many.
        update_based: select by update number instead of epoch number.
        upper_bound: ignore checkpoints of a later epoch (update).

    Returns:
        ``n`` paths.

    Raises:
        ValueError: ``n`` < 1, or fewer than ``n`` matching files.
    """
    if n < 1:
        raise ValueError(f"need at least 1 checkpoint to average, got {n}")
    pattern = UPDATE_PATTERN if update_based else EPOCH_PATTERN
    found = []
    for name in os.listdir(directory):
        m = pattern.fullmatch(name)
        if m and (upper_bound is None or int(m.group(1)) <= upper_bound):
            found.append((int(m.group(1)), name))
    if len(found) < n:
        kind = "checkpoint_E_U.pt" if update_based else "checkpointE.pt"
        bound = f" up to {upper_bound}" if upper_bound is not None else ""
        raise ValueError(f"{directory}: found {len(found)} {kind} files{bound}, need {n}")
    return [os.path.join(directory, name) for _, name in sorted(found, reverse=True)[:n]]


def _load(path: str) -> dict:
    with open(path, "rb") as f:
        return torch.load(f, map_location="cpu", weights_only=False)


def average_checkpoints(paths: Sequence[str]) -> dict:
    """A checkpoint whose model parameters are the mean of those of ``paths``.

    Args:
        paths: fairseq checkpoint files with the same parameter names and shapes.

    Returns:
        The first checkpoint's state dict with ``"model"`` averaged and without
        ``"last_optimizer_state"``.

    Raises:
        ValueError: no paths, or a checkpoint whose parameter names or shapes differ
            from the first one's (the message names the file).
    """
    if not paths:
        raise ValueError("no checkpoints to average")
    first, sums = None, None
    for path in paths:
        state = _load(path)
        model = state["model"]
        if first is None:
            first = state
            sums = {
                k: v.to(torch.float64 if v.is_floating_point() else torch.int64).clone()
                for k, v in model.items()
            }
            continue
        if list(model) != list(sums):
            raise ValueError(
                f"{path}: parameter names differ from those of {paths[0]}: "
                f"{sorted(set(model) ^ set(sums))[:5]}"
            )
        for k, v in model.items():
            if v.shape != sums[k].shape:
                raise ValueError(
                    f"{path}: {k} has shape {tuple(v.shape)}, {paths[0]} {tuple(sums[k].shape)}"
                )
            sums[k] += v.to(sums[k].dtype)
    n = len(paths)
    dtypes = {k: v.dtype for k, v in first["model"].items()}
    first["model"] = {
        k: (s / n if s.is_floating_point() else s // n).to(dtypes[k]) for k, s in sums.items()
    }
    first.pop("last_optimizer_state", None)
    return first


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Command line: see the module docstring. Returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m qknorm_model_tools.average_checkpoints",
        description="Average the parameters of fairseq checkpoints into a new checkpoint "
        "(the options of fairseq's scripts/average_checkpoints.py).",
    )
    parser.add_argument(
        "--inputs",
        required=True,
        nargs="+",
        help="checkpoint files, or one --save-dir with --num-*-checkpoints",
    )
    parser.add_argument(
        "--output", required=True, metavar="FILE", help="where to write the averaged checkpoint"
    )
    num = parser.add_mutually_exclusive_group()
    num.add_argument(
        "--num-epoch-checkpoints",
        type=int,
        metavar="N",
        help="average the last N checkpointE.pt of the --inputs directory",
    )
    num.add_argument(
        "--num-update-checkpoints",
        type=int,
        metavar="N",
        help="average the last N checkpoint_E_U.pt of the --inputs directory",
    )
    parser.add_argument(
        "--checkpoint-upper-bound",
        type=int,
        metavar="E_OR_U",
        help="with --num-*-checkpoints: ignore later epochs (updates)",
    )
    args = parser.parse_args(argv)

    update_based = args.num_update_checkpoints is not None
    n = args.num_update_checkpoints if update_based else args.num_epoch_checkpoints
    if n is None and args.checkpoint_upper_bound is not None:
        parser.error(
            "--checkpoint-upper-bound needs --num-epoch-checkpoints or --num-update-checkpoints"
        )
    if n is not None and (len(args.inputs) != 1 or not os.path.isdir(args.inputs[0])):
        parser.error("--num-*-checkpoints needs exactly one --inputs directory")
    inputs = args.inputs
    try:
        if n is not None:
            inputs = last_checkpoints(inputs[0], n, update_based, args.checkpoint_upper_bound)
        missing = [p for p in inputs if not os.path.isfile(p)]
        if missing:
            raise ValueError(f"no such checkpoint file: {', '.join(missing)}")
        print(f"averaging {len(inputs)} checkpoints: {' '.join(inputs)}", file=sys.stderr)
        state = average_checkpoints(inputs)
    except ValueError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
    checkpoint_utils.torch_persistent_save(state, args.output)  # written to .tmp, then renamed
    print(f"wrote {args.output}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
