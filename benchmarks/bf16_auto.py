r"""Whether the CPU profiles train in bf16 on this machine: measured once, then cached.

    python -m benchmarks.bf16_auto CACHE_DIR [--size proxy] [--threads N] [--cached-only]

The CPU profiles (``configs/profiles/cpu-proxy*.sh``: ``PROFILE_BF16=auto``) train with the
plugin task's ``--bf16-autocast`` only where it is *measured* faster than fp32 on the CPU at
hand (``scripts/lib.sh``, ``qk_resolve_bf16``, calls this; ``QKNORM_BF16=0`` or ``1`` there
decides without it):

1. no native bf16 (:func:`fairseq_qknorm.tasks.cpu_bf16.native_bf16_support`): fp32, nothing
   measured (emulated bf16 is about 20x slower);
2. a verdict cached in ``CACHE_DIR`` for this CPU model, its bf16 features, the torch version
   and the model size: that verdict;
3. otherwise (unless ``--cached-only``, which then answers fp32): ``benchmarks.bf16_cpu``'s
   model-only section, a training step of the demo's two systems (``twt``, ``qknorm_paper``) at
   the profile's size, fp32 and bf16 interleaved over ``--reps`` repetitions (about a minute
   at the proxy size on 2 cores); bf16 is chosen only if **every** repetition of **both**
   systems ran faster in bf16 (the lowest per-repetition ratio above 1), so noise never
   switches a profile to bf16. The full benchmark result and the verdict are cached.

Prints ``bf16`` or ``fp32`` on stdout and one line saying why on stderr. Exit status 0, or 2
for bad arguments. A failed measurement is reported and answers fp32 (not cached).
"""

import argparse
import contextlib
import fcntl
import hashlib
import json
import sys
from pathlib import Path

import torch

from . import bf16_cpu

#: the systems timed for the verdict: the demo's two (the TWT baseline and the paper's QKNorm)
SYSTEMS = ("twt", "qknorm_paper")


def cache_key(size: str, native_reason: str) -> dict:
    """What a cached verdict holds for: CPU model and bf16 features, torch version, model size."""
    from fairseq_qknorm.tasks import cpu_bf16

    return {
        "cpu_model": cpu_bf16.cpu_model_name(),
        "native_bf16": native_reason,
        "torch": torch.__version__,
        "size": size,
    }


def cache_file(cache_dir: Path, key: dict) -> Path:
    """``CACHE_DIR/bf16-auto-SIZE-HASH.json``: one file per :func:`cache_key` value."""
    digest = hashlib.sha1(json.dumps(key, sort_keys=True).encode()).hexdigest()[:12]
    return cache_dir / f"bf16-auto-{key['size']}-{digest}.json"


def verdict(result: dict) -> tuple[bool, str]:
    """``(bf16, why)`` from a ``benchmarks.bf16_cpu`` result with the model section.

    bf16 only if every timed system's lowest per-repetition speed-up is above 1.

    Raises:
        ValueError: the result has no model-section speed-up for a system of :data:`SYSTEMS`.
    """
    systems = result.get("model", {}).get("systems", {})
    parts, faster = [], True
    for name in SYSTEMS:
        try:
            s = systems[name]["speedup"]["bf16"]
        except KeyError:
            msg = f"no bf16 speed-up measured for {name}: {result.get('errors')}"
            raise ValueError(msg) from None
        faster &= s["rep_ratio_min"] > 1.0
        parts.append(
            f"{name} {s['median_ratio']:.2f}x ({s['rep_ratio_min']:.2f}-{s['rep_ratio_max']:.2f})"
        )
    word = "faster" if faster else "not faster in every repetition"
    return faster, f"bf16 {word} than fp32 for a training step: {', '.join(parts)}"


def decide(cache_dir: Path, size: str, threads: int, reps: int, cached_only: bool):
    """``(bf16, why)`` for this machine: steps 1-3 of the module docstring."""
    from fairseq_qknorm.tasks import cpu_bf16

    native, reason = cpu_bf16.native_bf16_support()
    if not native:
        return False, reason
    key = cache_key(size, reason)
    path = cache_file(cache_dir, key)
    if cached_only:
        return _decide_locked(path, key, size, threads, reps, cached_only)
    path.parent.mkdir(parents=True, exist_ok=True)
    # one measurement per machine: a second caller (two trainings started at once) waits for it
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _decide_locked(path, key, size, threads, reps, cached_only)


def _decide_locked(path: Path, key: dict, size: str, threads: int, reps: int, cached_only: bool):
    if path.is_file():
        cached = json.loads(path.read_text())["decision"]
        return cached["bf16"], f"{cached['why']} (measured {cached['date']}; cached in {path})"
    if cached_only:
        return False, f"not measured on this machine yet (no {path})"
    print(
        f"[bf16 auto] measuring once whether bf16 autocast trains faster than fp32 on "
        f"{key['cpu_model']} ({', '.join(SYSTEMS)}, {size} size, {reps} repetitions, "
        f"{threads} threads; about a minute); the verdict is cached in {path}",
        file=sys.stderr,
    )
    tmp = path.with_suffix(".partial.json")
    args = ["--sections", "model", "--systems", ",".join(SYSTEMS), "--size", size]
    args += ["--reps", str(reps), "--threads", str(threads), "--no-explicit-attention"]
    with contextlib.redirect_stdout(sys.stderr):  # its Markdown report; stdout is the answer
        bf16_cpu.main([*args, "--out", str(tmp)])
    result = json.loads(tmp.read_text())
    bf16, why = verdict(result)
    result["decision"] = {
        "bf16": bf16,
        "why": why,
        "key": key,
        "date": result["machine"]["date_utc"],
    }
    tmp.write_text(json.dumps(result, indent=1, default=str) + "\n")
    tmp.replace(path)
    tmp.with_suffix(".md").unlink(missing_ok=True)
    return bf16, f"{why} (cached in {path})"


def main(argv=None) -> int:
    """Print ``bf16`` or ``fp32`` (stdout) and the reason (stderr); exit status."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.bf16_auto", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("cache_dir", type=Path, help="where verdicts are cached")
    p.add_argument("--size", default="proxy", help="model size (a benchmarks size: proxy, ...)")
    p.add_argument("--threads", type=int, default=2, help="threads of the measurement")
    p.add_argument("--reps", type=int, default=5, help="interleaved repetitions (>= 5)")
    p.add_argument(
        "--cached-only",
        action="store_true",
        help="never measure: answer fp32 where no verdict is cached",
    )
    a = p.parse_args(argv)
    if a.threads < 1 or a.reps < 5:
        p.error("--threads must be >= 1 and --reps >= 5")
    torch.set_num_threads(a.threads)
    try:
        bf16, why = decide(a.cache_dir, a.size, a.threads, a.reps, a.cached_only)
    except (OSError, ValueError, RuntimeError) as exc:
        bf16, why = False, f"the bf16 measurement failed ({exc}); nothing cached"
    print(f"[bf16 auto] {'bf16 autocast' if bf16 else 'fp32'}: {why}", file=sys.stderr)
    print("bf16" if bf16 else "fp32")
    return 0


if __name__ == "__main__":
    sys.exit(main())
