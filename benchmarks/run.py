"""Side-by-side performance harness: QKNorm vs TWT vs dot-product vs stock fairseq.

    python -m benchmarks.run [--smoke] [--out benchmarks/results/NAME.json] [options]

Everything runs in one process and one run; within each section the compared entries are
timed in interleaved order (A, B, C, A, B, C, ...) so that machine drift hits them alike.
Sections (``--sections``, default all):

* ``model``    model-only training step (forward + label-smoothed CE + backward + Adam) on
               one identical synthetic batch, every ``--sizes`` size, with fp32 matmul peak
               entries timed in the same interleaved loop;
* ``bf16``     the same step under ``torch.autocast("cpu", dtype=torch.bfloat16)`` vs fp32;
* ``decode``   in-process decoding on identical inputs for a fixed number of steps, beam
               layout (B sentences x beam rows): the raw incremental decoder loop and
               fairseq's SequenceGenerator with min_len = max_len;
* ``scaling``  attention-module forward+backward vs sequence length and batch: QKNorm and
               dot-product (our module, fused and explicit paths) vs fairseq's
               MultiheadAttention (F.multi_head_attention_forward in training);
* ``norms``    ScaleNorm vs LayerNorm module forward+backward;
* ``memory``   peak RSS of a training step, one fresh child process per system;
* ``batches``  the model-only step on the first ``--batches`` of fairseq's own training
               batches of the e2e data (its ``--max-tokens``), every system on each batch
               one right after the other: one paired ratio per batch;
* ``e2e``      ``fairseq-train`` words/s (fairseq's ``wps``) on real data, systems alternating,
               ``--e2e-rounds`` rounds, plus peak RSS of each run;
* ``generate`` ``fairseq-generate`` (beam 4) sentences/s and tokens/s from the e2e runs'
               (throwaway, barely trained) checkpoints on a test subset, plus peak RSS;
* ``fairseq_bf16`` whether ``fairseq-train --bf16 --cpu`` works (2 updates).

Writes a JSON of all figures (``--out``) and prints a Markdown summary (also written next
to the JSON as ``.md``).
"""

import gc
import json
import logging
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path

import torch

# fairseq's text_to_speech task logs an INFO "Please install tensorboardX" when imported (the
# plugin logs through tensorboard itself): not the first line of --help or of a report
logging.getLogger("fairseq.tasks.text_to_speech").setLevel(logging.WARNING)

from qknorm_tools.committed import portable_paths  # noqa: E402

from . import common as c  # noqa: E402  (after the logger above: imports fairseq)
from .e2e import (  # noqa: E402
    section_batches,
    section_e2e,
    section_fairseq_bf16,
    section_generate,
)
from .micro import (  # noqa: E402
    section_bf16,
    section_decode,
    section_memory,
    section_model,
    section_norms,
    section_scaling,
)
from .options import DATA_SECTIONS, log, parse_args  # noqa: E402
from .summary import markdown, targets  # noqa: E402


# ============================================================================ main
def main(argv=None) -> int:
    """Run the selected sections, write the JSON and Markdown, print the Markdown; exit status."""
    a = parse_args(argv, description=__doc__.split("\n\n")[0])
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    command = "python -m benchmarks.run " + " ".join(sys.argv[1:] if argv is None else argv)
    res: dict = {
        "command": command,
        "machine": c.machine_info(),
        "smoke": a.smoke,
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
        "errors": {},
    }
    if os.getloadavg()[0] > 0.5 * a.threads and not a.smoke:
        log(
            f"WARNING: load average {os.getloadavg()} with {a.threads} threads: another job "
            "is running, timings will be noisy"
        )
    tmp_ctx = None
    if a.work_dir is None:
        tmp_ctx = tempfile.TemporaryDirectory(prefix="qknorm-bench-")
        work = Path(tmp_ctx.name)
    else:
        work = a.work_dir
        work.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    try:
        task = c.setup_task(c.write_dict_dir(work / "dict", a.vocab))

        def guarded(name, fn, *args):
            if name not in a.sections:
                return None
            t0 = time.perf_counter()
            out: dict = {}
            res[name] = out
            try:
                return fn(*args, out)
            except Exception:
                res["errors"][name] = traceback.format_exc()
                log(f"section {name} failed:\n{res['errors'][name]}")
                return None
            finally:
                out["section_wall_s"] = time.perf_counter() - t0
                log(f"section {name}: {out['section_wall_s']:.0f}s")
                gc.collect()
                # partial results survive an interrupted run
                a.out.parent.mkdir(parents=True, exist_ok=True)
                a.out.write_text(json.dumps(res, indent=1, default=str) + "\n")

        guarded("model", section_model, a, task)
        guarded("bf16", section_bf16, a, task)
        guarded("decode", section_decode, a, task)
        guarded("scaling", section_scaling, a)
        guarded("norms", section_norms, a)
        guarded("memory", section_memory, a, work)
        checkpoints = {}
        if a.e2e_data is not None:
            guarded("batches", section_batches, a)
            checkpoints = guarded("e2e", section_e2e, a, work) or {}
            for spec in a.gen_checkpoint:
                system, path = spec.split("=", 1)
                checkpoints[system] = Path(path)
            if checkpoints:
                guarded("generate", section_generate, a, work, checkpoints)
            guarded("fairseq_bf16", section_fairseq_bf16, a, work)
        else:
            for name in DATA_SECTIONS:
                if name in a.sections:
                    res[name] = {"skipped": "no --e2e-data"}
    finally:
        if tmp_ctx is not None:
            tmp_ctx.cleanup()
    res["loadavg_end"] = os.getloadavg()
    res["total_wall_s"] = time.perf_counter() - t_start
    res["targets"] = targets(res)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(portable_paths(json.dumps(res, indent=1, default=str)) + "\n")
    md = portable_paths(markdown(res))
    a.out.with_suffix(".md").write_text(md + "\n")
    print(md)
    log(f"wrote {a.out} and {a.out.with_suffix('.md')} in {res['total_wall_s']:.0f}s")
    if res["errors"]:
        log(f"sections that failed: {', '.join(res['errors'])} (see the report's Errors)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
