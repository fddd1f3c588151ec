r"""Where the CPU time of a real ``fairseq-train`` goes: cProfile by role.

Runs fairseq's own ``fairseq_cli.train.cli_main`` in this process under ``cProfile`` with the
process CPU-time clock (``time.process_time``: all threads of the process, not wall time, so a
loaded machine inflates it less than wall time) and sums the cumulative time of fairseq's (and
the plugin's) functions by role (:data:`ROLES`): forward + loss, backward, optimizer step,
per-update trainer work, data loading, metrics and logging, attention statistics, validation,
checkpoint saving. Writes the raw profile (``--pstats``) and prints a Markdown table.

Use::

    python -m benchmarks.profile_e2e --pstats /tmp/e2e.pstats -- \
        data/bin/gl-en --user-dir fairseq_qknorm --arch transformer_qknorm_paper_proxy ...

``--per-update-json PATH`` records each training update's wall time and the wall time of the
model step inside it (forward + loss, backward, optimizer step: what the model-only step of
``benchmarks.run`` times; with ``--timers`` too, both); ``benchmarks.run``'s e2e rounds run
through it to read end to end against the model-only step *on the same batches*
(:func:`model_step_share`).

Roles overlap where fairseq nests them (validation contains forward passes; the rows give
what each role's entry point costs, inclusive), and "per-update Python work" is
``Trainer.train_step`` minus its forward, backward and optimizer parts.
"""

import argparse
import cProfile
import os
import pstats
import sys
import time
from typing import Any, Callable, Optional

from qknorm_tools.exits import die_data

#: role -> (file suffix, function name) entry points whose cumulative CPU time is the role's
ROLES = {
    "whole run (fairseq_cli.train.main)": [("fairseq_cli/train.py", "main")],
    "training steps (Trainer.train_step)": [("fairseq/trainer.py", "train_step")],
    "forward + loss (task.train_step -> criterion)": [
        ("label_smoothed_cross_entropy.py", "forward")
    ],
    "backward (torch.autograd.backward)": [("torch/autograd/__init__.py", "backward")],
    "optimizer step (Trainer: optimizer.step)": [("fairseq/optim/fairseq_optimizer.py", "step")],
    "gradient clipping (clip_grad_norm)": [("fairseq/trainer.py", "clip_grad_norm")],
    "data loading (collate, iterator)": [
        ("fairseq/data/language_pair_dataset.py", "collater"),
    ],
    "batching (get_batch_iterator, batch_by_size)": [
        ("fairseq/tasks/fairseq_task.py", "get_batch_iterator"),
        ("fairseq_qknorm/tasks/translation_word_dropout.py", "get_batch_iterator"),
    ],
    "metrics and logging (train.py: progress.log / print, metrics)": [
        ("fairseq/logging/progress_bar.py", "log"),
        ("fairseq/logging/progress_bar.py", "print"),
        ("fairseq/trainer.py", "_reduce_and_log_stats"),
    ],
    "attention statistics (plugin: _store_stats)": [
        ("fairseq_qknorm/modules/qknorm_attention.py", "_store_stats"),
        ("fairseq_qknorm/models/transformer_qknorm.py", "drop_unrecorded_stat_meters"),
    ],
    "validation (train.py: validate)": [("fairseq_cli/train.py", "validate")],
    "checkpoint saving (checkpoint_utils.save_checkpoint)": [
        ("fairseq/checkpoint_utils.py", "save_checkpoint")
    ],
}


#: ``--timers``: role -> (module, attribute path) wrapped with CPU-time and wall-time counters
TIMER_POINTS = {
    "training steps (Trainer.train_step)": ("fairseq.trainer", "Trainer.train_step"),
    "forward + loss (task.train_step -> criterion)": (
        "fairseq.criterions.label_smoothed_cross_entropy",
        "LabelSmoothedCrossEntropyCriterion.forward",
    ),
    "backward (torch.autograd.backward)": (
        "fairseq.optim.fairseq_optimizer",
        "FairseqOptimizer.backward",
    ),
    "optimizer step (Trainer: optimizer.step)": (
        "fairseq.optim.fairseq_optimizer",
        "FairseqOptimizer.step",
    ),
    "gradient clipping (clip_grad_norm)": (
        "fairseq.optim.fairseq_optimizer",
        "FairseqOptimizer.clip_grad_norm",
    ),
    "data loading (collate, getitem)": ("fairseq.data.language_pair_dataset", "collate"),
    "data loading: __getitem__": (
        "fairseq.data.language_pair_dataset",
        "LanguagePairDataset.__getitem__",
    ),
    "batching (get_batch_iterator, batch_by_size)": (
        "fairseq.tasks.fairseq_task",
        "FairseqTask.get_batch_iterator",
    ),
    "metrics: Trainer._reduce_and_log_stats": ("fairseq.trainer", "Trainer._reduce_and_log_stats"),
    "logging: train.py get_training_stats + progress.log": (
        "fairseq.logging.progress_bar",
        "SimpleProgressBar.log",
    ),
    "attention statistics (plugin: _store_stats)": (
        "fairseq_qknorm.modules.qknorm_attention",
        "QKNormMultiheadAttention._store_stats",
    ),
    "attention statistics (plugin: drop_unrecorded_stat_meters)": (
        "fairseq_qknorm.models.transformer_qknorm",
        "drop_unrecorded_stat_meters",
    ),
    "validation (train.py: validate)": ("fairseq_cli.train", "validate"),
    "checkpoint saving (checkpoint_utils.save_checkpoint)": (
        "fairseq.checkpoint_utils",
        "save_checkpoint",
    ),
}


def _entry_point(module: str, attr: str) -> tuple[Any, str, Callable]:
    """``(owner, name, function)`` of ``module.attr``, ``attr`` a function or ``Class.method``.

    Raises:
        ImportError: no module ``module``.
        AttributeError: no such class or function in it.
    """
    import importlib

    owner: Any = importlib.import_module(module)
    name = attr
    if "." in attr:
        cls, name = attr.split(".")
        owner = getattr(owner, cls)
    return owner, name, getattr(owner, name)


def install_timers(points: dict = TIMER_POINTS) -> dict:
    """Wrap each entry point of ``points`` with counters; returns role -> [calls, cpu_s, wall_s].

    CPU time is ``time.process_time`` (all threads of the process), inclusive of nested roles.
    A module-level function is replaced in its module (callers that look it up at call time,
    as fairseq_cli/train.py does for ``validate`` and ``checkpoint_utils.save_checkpoint``,
    see the wrapper); a method on its class. Entry points that do not exist are skipped.
    """
    import functools

    counters = {}
    active: set = set()  # roles running now (nesting)
    VALID = "validation (train.py: validate)"
    FWD = "forward + loss (task.train_step -> criterion)"
    for role, (module, attr) in points.items():
        try:
            owner, name, fn = _entry_point(module, attr)
        except (ImportError, AttributeError):
            continue
        c = counters[role] = [0, 0.0, 0.0]
        if role == FWD:  # the criterion's calls inside validate() counted apart
            counters[FWD + " in validation"] = [0, 0.0, 0.0]

        def wrap(fn=fn, c=c, role=role):
            @functools.wraps(fn)
            def timed(*args, **kwargs):
                cc = counters[FWD + " in validation"] if role == FWD and VALID in active else c
                t0, w0 = time.process_time(), time.perf_counter()
                active.add(role)
                try:
                    return fn(*args, **kwargs)
                finally:
                    active.discard(role)
                    cc[0] += 1
                    cc[1] += time.process_time() - t0
                    cc[2] += time.perf_counter() - w0

            return timed

        setattr(owner, name, wrap())
    return counters


#: the parts of a fairseq update that the model-only step
#: (:func:`benchmarks.common.make_train_step`) also times: forward + label-smoothed loss,
#: backward, Adam
MODEL_STEP_POINTS = {
    "forward + loss": (
        "fairseq.criterions.label_smoothed_cross_entropy",
        "LabelSmoothedCrossEntropyCriterion.forward",
    ),
    "backward": ("fairseq.optim.fairseq_optimizer", "FairseqOptimizer.backward"),
    "optimizer step": ("fairseq.optim.fairseq_optimizer", "FairseqOptimizer.step"),
}


def install_update_timers() -> list[dict]:
    """Time every training update and the model step inside it (wall clock, seconds).

    Wraps ``fairseq.trainer.Trainer.train_step`` and the entry points of
    :data:`MODEL_STEP_POINTS`. Returns the list that each finished ``train_step`` call appends
    ``{"start": s, "end": s, "model_s": s}`` to (``time.perf_counter`` values; ``model_s`` = the
    wall time of the model-step parts called inside that update). Calls of those parts outside
    a training update (validation's forward passes) are not counted.

    Raises:
        AttributeError: fairseq lacks one of the wrapped entry points (a fairseq version whose
            trainer or optimizer differs from 0.12's).
    """
    import functools

    from fairseq import trainer

    updates: list[dict] = []
    current: list[dict] = []  # the running update, if any

    train_step = trainer.Trainer.train_step

    @functools.wraps(train_step)
    def timed_train_step(*args, **kwargs):
        u = {"start": time.perf_counter(), "model_s": 0.0}
        current.append(u)
        try:
            return train_step(*args, **kwargs)
        finally:
            current.pop()
            u["end"] = time.perf_counter()
            updates.append(u)

    trainer.Trainer.train_step = timed_train_step
    for module, attr in MODEL_STEP_POINTS.values():
        owner, name, fn = _entry_point(module, attr)

        def wrap(fn=fn):
            @functools.wraps(fn)
            def timed(*args, **kwargs):
                if not current:
                    return fn(*args, **kwargs)
                t0 = time.perf_counter()
                try:
                    return fn(*args, **kwargs)
                finally:
                    current[-1]["model_s"] += time.perf_counter() - t0

            return timed

        setattr(owner, name, wrap())
    return updates


def model_step_share(updates: list[dict], skip: int) -> Optional[float]:
    """Wall time of the model step / wall time of the updates, after the first ``skip`` updates.

    Update ``k``'s wall time runs from the end of update ``k - 1`` to its own end: it holds
    everything fairseq-train does per update (data loading, logging, the trainer's own work),
    as fairseq's ``wps`` does. The share equals end-to-end real target tokens/s divided by the
    model-only step's tokens/s *on the same batches* (the tokens cancel).

    Args:
        updates: :func:`install_update_timers`' list, in order.
        skip: leading updates left out (warm-up; ``steady_wps`` skips the first logged interval).

    Returns:
        The share in (0, 1], or ``None`` when no update follows the first ``max(skip, 1)``.
    """
    first = max(skip, 1)
    if len(updates) < first + 1:
        return None
    wall = updates[-1]["end"] - updates[first - 1]["end"]
    model = sum(u["model_s"] for u in updates[first:])
    return model / wall if wall > 0 else None


def timers_markdown(counters: dict, whole: tuple, updates: int) -> str:
    """Markdown table of :func:`install_timers`' counters (CPU s, ms CPU / update, wall s)."""
    cpu_all, wall_all = whole
    lines = [
        "| role | calls | CPU s | CPU ms / update | % of run CPU | wall s |",
        "|---|---:|---:|---:|---:|---:|",
        f"| whole run (fairseq_cli.train.cli_main) | 1 | {cpu_all:.2f} | "
        f"{1000 * cpu_all / max(updates, 1):.1f} | 100.0 | {wall_all:.1f} |",
    ]
    for role, (n, cpu, wall) in counters.items():
        lines.append(
            f"| {role} | {n} | {cpu:.2f} | {1000 * cpu / max(updates, 1):.1f} | "
            f"{100 * cpu / max(cpu_all, 1e-9):.1f} | {wall:.1f} |"
        )
    g = {k: v[1] for k, v in counters.items()}
    steps = g.get("training steps (Trainer.train_step)", 0.0)
    inner = sum(
        g.get(k, 0.0)
        for k in (
            "forward + loss (task.train_step -> criterion)",
            "backward (torch.autograd.backward)",
            "optimizer step (Trainer: optimizer.step)",
            "gradient clipping (clip_grad_norm)",
        )
    )
    lines.append(
        f"| per-update rest of train_step (train_step - forward - backward - clip - step) | "
        f"| {steps - inner:.2f} | {1000 * (steps - inner) / max(updates, 1):.1f} | "
        f"{100 * (steps - inner) / max(cpu_all, 1e-9):.1f} | |"
    )
    return "\n".join(lines)


def role_times(stats: pstats.Stats) -> dict:
    """Cumulative seconds per role of :data:`ROLES` (sum over its entry points)."""
    out = {}
    for role, entries in ROLES.items():
        total = 0.0
        for (filename, _line, func), (_cc, _nc, _tt, ct, _callers) in stats.stats.items():
            if any(filename.endswith(suffix) and func == name for suffix, name in entries):
                total += ct
        out[role] = total
    return out


def markdown(times: dict, updates: int) -> str:
    """Markdown table of :func:`role_times` with ms per update."""
    whole = times["whole run (fairseq_cli.train.main)"] or 1.0
    lines = ["| role | CPU s | ms / update | % of run |", "|---|---:|---:|---:|"]
    for role, t in times.items():
        per_update = 1000 * t / max(updates, 1)
        lines.append(f"| {role} | {t:.2f} | {per_update:.1f} | {100 * t / whole:.1f} |")
    steps = times["training steps (Trainer.train_step)"]
    inner = sum(
        times[k]
        for k in (
            "forward + loss (task.train_step -> criterion)",
            "backward (torch.autograd.backward)",
            "optimizer step (Trainer: optimizer.step)",
        )
    )
    lines.append(
        f"| per-update Python work (train_step - forward - backward - optimizer) | "
        f"{steps - inner:.2f} | {1000 * (steps - inner) / max(updates, 1):.1f} | "
        f"{100 * (steps - inner) / whole:.1f} |"
    )
    return "\n".join(lines)


def main(argv=None) -> int:
    """Profile ``fairseq-train ARGS`` (after ``--``); print the table; exit status 0."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--pstats", default="e2e.pstats", help="raw profile output (pstats)")
    p.add_argument("--updates", type=int, default=0, help="updates of the run (ms/update)")
    p.add_argument(
        "--timers",
        action="store_true",
        help="instead of cProfile: counters on fairseq's entry points only (TIMER_POINTS; "
        "no per-call profiler overhead)",
    )
    p.add_argument(
        "--per-update-json",
        metavar="PATH",
        help="write each training update's wall time and its model step's (forward + loss, "
        "backward, optimizer step; install_update_timers) to PATH as JSON",
    )
    p.add_argument("train_args", nargs=argparse.REMAINDER, help="-- fairseq-train arguments")
    a = p.parse_args(argv)
    args = a.train_args[1:] if a.train_args[:1] == ["--"] else a.train_args
    if not args:
        p.error("fairseq-train arguments missing (after --)")
    if a.per_update_json and not os.path.isdir(os.path.dirname(os.path.abspath(a.per_update_json))):
        die_data(f"--per-update-json {a.per_update_json}: its directory does not exist")
    from fairseq_cli import train

    sys.argv = ["fairseq-train", *args]
    if a.timers or a.per_update_json:
        updates = install_update_timers() if a.per_update_json else None
        counters = install_timers() if a.timers else None
        t0, w0 = time.process_time(), time.perf_counter()
        try:
            train.cli_main()
        finally:
            if updates is not None:
                import json

                with open(a.per_update_json, "w") as f:
                    json.dump({"updates": updates}, f)
        whole = (time.process_time() - t0, time.perf_counter() - w0)
        if counters is not None:
            print(timers_markdown(counters, whole, a.updates))
        return 0
    prof = cProfile.Profile(time.process_time)
    prof.enable()
    try:
        train.cli_main()
    finally:
        prof.disable()
        prof.dump_stats(a.pstats)
    times = role_times(pstats.Stats(a.pstats))
    print(markdown(times, a.updates))
    return 0


if __name__ == "__main__":
    sys.exit(main())
