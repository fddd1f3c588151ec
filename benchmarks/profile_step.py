"""Where the time of one training step goes: torch.profiler, top ops by self CPU time.

    python -m benchmarks.profile_step [--size small]
                                      [--systems qknorm_paper,twt,prenorm_fixnorm_layernorm,stock]
                                      [--rows 15] [--threads N] [--smoke] [--json OUT]
                                      [--decode] [--min-of N]

For each system: build the model (fairseq argument parsing, as ``benchmarks.run``), run
``--warmup`` untimed steps on the synthetic batch, profile one step and print the phase
totals (forward / backward / optimizer), op categories (matmul, attention, norms, dropout,
elementwise/other) by self CPU time, and the top ops by self CPU time.

``--decode`` profiles the ``decode`` section's raw incremental loop (16 sentences x beam 4,
30 steps) instead of a training step. ``--min-of N`` replaces torch.profiler by a figure
that a shared machine does not distort: every aten op's *thread CPU time*
(``time.thread_time``), its minimum over N interleaved runs (systems alternate), summed per
op and category, systems side by side; 1 thread (other threads' time is not the calling
thread's), and other processes then cost cache and memory bandwidth, not time slices.
"""

import argparse
import json
import re
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

import torch

from . import common as c

#: op-name patterns, first match wins (aten op names of torch 2.x)
CATEGORIES = [
    ("matmul", r"^aten::(mm|addmm|bmm|baddbmm|matmul|linear|_mkldnn|mkldnn_)"),
    ("attention kernel", r"scaled_dot_product|flash_attention|_softmax|softmax_backward"),
    ("norm", r"layer_norm|vector_norm|linalg_|_norm|rsqrt|clamp"),
    ("dropout", r"dropout|bernoulli"),
    ("embedding / loss", r"embedding|gather|scatter|log_softmax|nll"),
    ("optimizer (Adam)", r"Optimizer|_foreach|addcdiv|addcmul|lerp|sqrt"),
    ("copies / layout", r"copy_|contiguous|clone|cat|_reshape|permute|transpose|to_copy|empty"),
]


def categorize(name: str) -> str:
    """The category (:data:`CATEGORIES`) of a profiler op name."""
    for cat, pat in CATEGORIES:
        if re.search(pat, name):
            return cat
    return "elementwise / other"


def profile_system(task, system: str, size: str, batch, warmup: int, qk_length: float) -> dict:
    """Profile one training step of ``system``: phases, op categories and top ops (ms)."""
    model, _ = c.build_model(task, system, size, qk_length)
    step = c.make_train_step(model, batch, task.source_dictionary.pad(), phases=True)
    for _ in range(warmup):
        step()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        step()
    events = prof.key_averages()
    phases = {e.key: e.cpu_time_total / 1e3 for e in events if e.key.startswith("## ")}
    ops = [e for e in events if not e.key.startswith("## ") and e.self_cpu_time_total > 0]
    total_self = sum(e.self_cpu_time_total for e in ops) / 1e3
    cats: dict[str, float] = {}
    for e in ops:
        cat = categorize(e.key)
        cats[cat] = cats.get(cat, 0.0) + e.self_cpu_time_total / 1e3
    top = sorted(ops, key=lambda e: e.self_cpu_time_total, reverse=True)
    return {
        "system": system,
        "size": size,
        "total_self_ms": total_self,
        "phases_ms": phases,
        "categories_ms": dict(sorted(cats.items(), key=lambda kv: -kv[1])),
        "top_ops": [
            {
                "op": e.key,
                "self_ms": e.self_cpu_time_total / 1e3,
                "calls": e.count,
                "share": e.self_cpu_time_total / 1e3 / total_self,
            }
            for e in top[:50]
        ],
        "table": events.table(sort_by="self_cpu_time_total", row_limit=25),
    }


class _OpTimes(torch.utils._python_dispatch.TorchDispatchMode):
    """Records ``(aten op, thread CPU seconds)`` of every op dispatched while active."""

    def __init__(self):
        super().__init__()
        self.rows: list[tuple[str, float]] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        t0 = time.thread_time()
        out = func(*args, **(kwargs or {}))
        self.rows.append((f"aten::{func.overloadpacket.__name__}", time.thread_time() - t0))
        return out


def per_op_minimum(runs: dict[str, Callable], n: int) -> dict[str, dict]:
    """Per system: each op's minimum thread CPU time over ``n`` interleaved runs.

    Summed by op name and by category (:func:`categorize`), with the thread CPU time of the whole
    run (minimum over ``n`` unrecorded runs: includes Python and dispatch overhead).

    Raises:
        RuntimeError: a run dispatched a different op sequence than the first (the figure
            needs the same work every run).
    """
    logs: dict[str, list[list[tuple[str, float]]]] = {name: [] for name in runs}
    whole: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(n):
        for name, fn in runs.items():
            t0 = time.thread_time()
            fn()
            whole[name].append(time.thread_time() - t0)
            with _OpTimes() as rec:
                fn()
            logs[name].append(rec.rows)
    out = {}
    for name, rr in logs.items():
        if any([op for op, _ in r] != [op for op, _ in rr[0]] for r in rr):
            raise RuntimeError(f"{name}: the runs dispatched different ops")
        by_op: dict[str, float] = {}
        for i, (op, _) in enumerate(rr[0]):
            by_op[op] = by_op.get(op, 0.0) + 1e3 * min(r[i][1] for r in rr)
        cats: dict[str, float] = {}
        for op, ms in by_op.items():
            cats[categorize(op)] = cats.get(categorize(op), 0.0) + ms
        out[name] = {
            "ops": len(rr[0]),
            "sum_of_op_minima_ms": sum(by_op.values()),
            "whole_run_min_ms": 1e3 * min(whole[name]),
            "categories_ms": dict(sorted(cats.items(), key=lambda kv: -kv[1])),
            "ops_ms": dict(sorted(by_op.items(), key=lambda kv: -kv[1])),
        }
    return out


def decode_run(
    task, system: str, size: str, qk_length: float, bsz: int, beam: int = 4, steps: int = 30
) -> Callable:
    """The ``decode`` section's raw incremental loop for ``system`` (eval mode)."""
    from .micro import _incremental_loop

    model, _ = c.build_model(task, system, size, qk_length)
    model.eval()
    d = task.target_dictionary
    batch = c.synthetic_batch(d, bsz, 28, 28, seed=1)
    return _incremental_loop(
        model,
        batch["net_input"]["src_tokens"],
        batch["net_input"]["src_lengths"],
        beam,
        steps,
        d.eos(),
    )


def profile_decode(run: Callable, system: str, size: str, warmup: int) -> dict:
    """torch.profiler breakdown of one decoding loop (categories and top ops, self CPU)."""
    for _ in range(warmup):
        run()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        run()
    events = prof.key_averages()
    ops = [e for e in events if e.self_cpu_time_total > 0]
    total = sum(e.self_cpu_time_total for e in ops) / 1e3
    cats: dict[str, float] = {}
    for e in ops:
        cats[categorize(e.key)] = cats.get(categorize(e.key), 0.0) + e.self_cpu_time_total / 1e3
    top = sorted(ops, key=lambda e: e.self_cpu_time_total, reverse=True)
    return {
        "system": system,
        "size": size,
        "what": "incremental decoding loop",
        "total_self_ms": total,
        "phases_ms": {},
        "categories_ms": dict(sorted(cats.items(), key=lambda kv: -kv[1])),
        "top_ops": [
            {
                "op": e.key,
                "self_ms": e.self_cpu_time_total / 1e3,
                "calls": e.count,
                "share": e.self_cpu_time_total / 1e3 / total,
            }
            for e in top[:50]
        ],
    }


def min_of_report(task, systems, size, batch, a, warmup, steps, bsz) -> list[dict]:
    """``--min-of``: build the runs, print the per-op minimum table, return its rows."""
    runs = {}
    for system in systems:
        if a.decode:
            runs[system] = decode_run(task, system, size, a.qk_length, bsz, steps=steps)
        else:
            model, _ = c.build_model(task, system, size, a.qk_length)
            runs[system] = c.make_train_step(model, batch, task.source_dictionary.pad())
        for _ in range(max(warmup, 1)):
            runs[system]()
    res = per_op_minimum(runs, a.min_of)
    what = "incremental decoding loop" if a.decode else "training step"
    print(
        f"\n=== {what}, size {size}, per-op minimum of {a.min_of} interleaved runs, "
        "thread CPU ms, 1 thread"
    )
    print("".ljust(30) + "".join(f"{s:>14}" for s in systems))
    for key in ("whole_run_min_ms", "sum_of_op_minima_ms"):
        print(key.ljust(30) + "".join(f"{res[s][key]:14.1f}" for s in systems))
    cats = sorted(
        {k for s in systems for k in res[s]["categories_ms"]},
        key=lambda k: -res[systems[0]]["categories_ms"].get(k, 0.0),
    )
    for k in cats:
        print(
            f"  {k}".ljust(30)
            + "".join(f"{res[s]['categories_ms'].get(k, 0.0):14.1f}" for s in systems)
        )
    ops = sorted(
        {k for s in systems for k in res[s]["ops_ms"]},
        key=lambda k: -max(res[s]["ops_ms"].get(k, 0.0) for s in systems),
    )
    print(f"top {a.rows} ops:")
    for k in ops[: a.rows]:
        print(
            f"  {k[:28]}".ljust(30)
            + "".join(f"{res[s]['ops_ms'].get(k, 0.0):14.1f}" for s in systems)
        )
    return [
        {"system": s, "size": size, "what": what, "min_of": a.min_of, **res[s]} for s in systems
    ]


def main(argv=None) -> int:
    """Profile the systems, print the tables (and write ``--json``); exit status."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.profile_step", description=__doc__.splitlines()[0]
    )
    p.add_argument("--size", default=None, help="small (default), proxy or smoke")
    p.add_argument("--systems", default=",".join(c.SYSTEMS))
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--src-len", type=int, default=28)
    p.add_argument("--tgt-len", type=int, default=28)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rows", type=int, default=15)
    p.add_argument("--threads", type=int, default=c.usable_cpus())
    p.add_argument("--qk-length", type=float, default=c.DEFAULT_QK_LENGTH)
    p.add_argument("--smoke", action="store_true", help="tiny model and batch (tests)")
    p.add_argument("--json", type=Path, help="also write the figures as JSON")
    p.add_argument(
        "--decode",
        action="store_true",
        help="the incremental decoding loop (16 x beam 4, 30 steps) instead of a step",
    )
    p.add_argument(
        "--min-of",
        type=int,
        default=0,
        metavar="N",
        help="per-op minimum thread CPU time over N interleaved runs (1 thread)",
    )
    a = p.parse_args(argv)
    size = a.size or ("smoke" if a.smoke else "small")
    bsz = a.batch or ((2 if a.decode else 4) if a.smoke else (16 if a.decode else 80))
    warmup = min(a.warmup, 1) if a.smoke else a.warmup
    threads = 1 if a.min_of else a.threads
    torch.set_num_threads(threads)
    steps = 4 if a.smoke else 30
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        task = c.setup_task(c.write_dict_dir(Path(tmp) / "dict", a.vocab))
        batch = c.synthetic_batch(task.source_dictionary, bsz, a.src_len, a.tgt_len)
        systems = a.systems.split(",")
        if a.min_of:
            results = min_of_report(task, systems, size, batch, a, warmup, steps, bsz)
            systems = []
        for system in systems:
            if a.decode:
                r = profile_decode(
                    decode_run(task, system, size, a.qk_length, bsz, steps=steps),
                    system,
                    size,
                    warmup,
                )
                results.append(r)
                print(
                    f"\n=== {system} decoding ({size}, {bsz} x beam 4, {steps} steps, "
                    f"{threads} threads): profiled self CPU {r['total_self_ms']:.1f} ms"
                )
                print(
                    "categories (self ms, share): "
                    + ", ".join(
                        f"{k} {v:.1f} ({100 * v / r['total_self_ms']:.0f}%)"
                        for k, v in r["categories_ms"].items()
                    )
                )
                for o in r["top_ops"][: a.rows]:
                    print(
                        f"  {o['self_ms']:9.2f} ms {100 * o['share']:5.1f}%  x{o['calls']:<5d} "
                        f"{o['op']}"
                    )
                continue

            r = profile_system(task, system, size, batch, warmup, a.qk_length)
            results.append(r)
            print(
                f"\n=== {system} ({size}, batch {bsz} x {a.src_len}/{a.tgt_len}, "
                f"{a.threads} threads): profiled self CPU {r['total_self_ms']:.1f} ms"
            )
            print(
                "phases (ms, incl. children): "
                + ", ".join(f"{k[3:]} {v:.1f}" for k, v in r["phases_ms"].items())
            )
            print(
                "categories (self ms, share): "
                + ", ".join(
                    f"{k} {v:.1f} ({100 * v / r['total_self_ms']:.0f}%)"
                    for k, v in r["categories_ms"].items()
                )
            )
            print(f"top {a.rows} ops by self CPU time:")
            for o in r["top_ops"][: a.rows]:
                share = 100 * o["share"]
                print(f"  {o['self_ms']:9.2f} ms {share:5.1f}%  x{o['calls']:<5d} {o['op']}")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(
            json.dumps({"machine": c.machine_info(), "results": results}, indent=1) + "\n"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
