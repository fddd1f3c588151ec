"""Peak-memory child of ``benchmarks.run``: one system, one fresh process.

``python -m benchmarks.memory_child --system qknorm_paper --size small ...`` builds the model,
runs ``--steps`` training steps on the synthetic batch and prints one JSON line with the RSS
after imports, after building and the peak (VmHWM). The parent adds the kernel's own
``ru_maxrss`` from ``os.wait4``.
"""

import argparse
import json
import sys
import tempfile
from pathlib import Path

import torch


def main(argv=None) -> int:
    """Build one system, run ``--steps`` training steps, print RSS figures as JSON; exit status."""
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--system", required=True)
    p.add_argument("--size", required=True)
    p.add_argument("--batch", type=int, default=80)
    p.add_argument("--src-len", type=int, default=28)
    p.add_argument("--tgt-len", type=int, default=28)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--qk-length", type=float, default=92.0)
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)

    from . import common as c

    rss_import = c.vm_rss_mib()
    with tempfile.TemporaryDirectory() as tmp:
        task = c.setup_task(c.write_dict_dir(Path(tmp) / "dict", a.vocab))
        model, _ = c.build_model(task, a.system, a.size, a.qk_length)
        rss_build = c.vm_rss_mib()
        batch = c.synthetic_batch(task.source_dictionary, a.batch, a.src_len, a.tgt_len)
        step = c.make_train_step(model, batch, task.source_dictionary.pad())
        for _ in range(a.steps):
            step()
    print(
        "MEMORY_JSON "
        + json.dumps(
            {
                "rss_after_import_mib": rss_import,
                "rss_after_build_mib": rss_build,
                # the kernel updates VmHWM lazily (on unmap; RSS counters are per-CPU caches),
                # so after memory is freed it can read below an RSS sampled earlier: the peak
                # is at least every RSS this process saw
                "vm_hwm_mib": max(
                    (v for v in (c.vm_hwm_mib(), rss_import, rss_build) if v), default=None
                ),
                "params": c.param_counts(model)["total"],
            }
        )
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
