"""Where the time of one training step goes: torch.profiler, top ops by self CPU time.

    python -m benchmarks.profile_step [--size small] [--systems qknorm_paper,twt,prenorm_fixnorm_layernorm,stock]
                                      [--rows 15] [--threads N] [--smoke] [--json OUT]

For each system: build the model (fairseq argument parsing, as ``benchmarks.run``), run
``--warmup`` untimed steps on the synthetic batch, profile one step and print the phase
totals (forward / backward / optimizer), op categories (matmul, attention, norms, dropout,
elementwise/other) by self CPU time, and the top ops by self CPU time.
"""

import argparse
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Dict

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
    for cat, pat in CATEGORIES:
        if re.search(pat, name):
            return cat
    return "elementwise / other"


def profile_system(task, system: str, size: str, batch, warmup: int, qk_length: float) -> Dict:
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
    cats: Dict[str, float] = {}
    for e in ops:
        cat = categorize(e.key)
        cats[cat] = cats.get(cat, 0.0) + e.self_cpu_time_total / 1e3
    top = sorted(ops, key=lambda e: e.self_cpu_time_total, reverse=True)
    return {
        "system": system, "size": size, "total_self_ms": total_self, "phases_ms": phases,
        "categories_ms": dict(sorted(cats.items(), key=lambda kv: -kv[1])),
        "top_ops": [{"op": e.key, "self_ms": e.self_cpu_time_total / 1e3, "calls": e.count,
                     "share": e.self_cpu_time_total / 1e3 / total_self} for e in top[:50]],
        "table": events.table(sort_by="self_cpu_time_total", row_limit=25),
    }


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.profile_step",
                                description=__doc__.splitlines()[0])
    p.add_argument("--size", default=None, help="small (default), proxy or smoke")
    p.add_argument("--systems", default=",".join(c.SYSTEMS))
    p.add_argument("--batch", type=int, default=None)
    p.add_argument("--src-len", type=int, default=28)
    p.add_argument("--tgt-len", type=int, default=28)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--rows", type=int, default=15)
    p.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    p.add_argument("--qk-length", type=float, default=c.DEFAULT_QK_LENGTH)
    p.add_argument("--smoke", action="store_true", help="tiny model and batch (tests)")
    p.add_argument("--json", type=Path, help="also write the figures as JSON")
    a = p.parse_args(argv)
    size = a.size or ("smoke" if a.smoke else "small")
    bsz = a.batch or (4 if a.smoke else 80)
    warmup = min(a.warmup, 1) if a.smoke else a.warmup
    torch.set_num_threads(a.threads)
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        task = c.setup_task(c.write_dict_dir(Path(tmp) / "dict", a.vocab))
        batch = c.synthetic_batch(task.source_dictionary, bsz, a.src_len, a.tgt_len)
        for system in a.systems.split(","):
            r = profile_system(task, system, size, batch, warmup, a.qk_length)
            results.append(r)
            print(f"\n=== {system} ({size}, batch {bsz} x {a.src_len}/{a.tgt_len}, "
                  f"{a.threads} threads): profiled self CPU {r['total_self_ms']:.1f} ms")
            print("phases (ms, incl. children): " + ", ".join(
                f"{k[3:]} {v:.1f}" for k, v in r["phases_ms"].items()))
            print("categories (self ms, share): " + ", ".join(
                f"{k} {v:.1f} ({100 * v / r['total_self_ms']:.0f}%)"
                for k, v in r["categories_ms"].items()))
            print(f"top {a.rows} ops by self CPU time:")
            for o in r["top_ops"][:a.rows]:
                print(f"  {o['self_ms']:9.2f} ms {100 * o['share']:5.1f}%  x{o['calls']:<5d} {o['op']}")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"machine": c.machine_info(), "results": results},
                                     indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
