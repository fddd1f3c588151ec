r"""Whether the CPU profiles train in bf16 on this machine: measured once, then cached.

    python -m qknorm_model_tools.bf16_auto CACHE_DIR [--size proxy] [--threads N] [--cached-only]
                                                     [--quiet]
    python -m qknorm_model_tools.bf16_auto --native-only [--quiet]

The CPU profiles (``configs/profiles/cpu-proxy*.toml``: ``bf16 = "auto"``) train with the
plugin task's ``--bf16-autocast`` only where it is *measured* faster than fp32 on the CPU at
hand (``qk_resolve_bf16`` of ``scripts/lib/config.sh`` calls this; ``QKNORM_BF16=0`` or ``1``
there decides without it):

1. no native bf16 (:func:`fairseq_qknorm.tasks.cpu_bf16.native_bf16_support`): fp32, nothing
   measured (emulated bf16 is about 20x slower);
2. a verdict cached in ``CACHE_DIR`` for this CPU model, its bf16 features, the torch version
   and the model size: that verdict;
3. otherwise (unless ``--cached-only``, which then answers fp32): the model-only section of
   :mod:`qknorm_model_tools.bf16_timing` (:func:`measure`; ``benchmarks.bf16_cpu`` runs the same
   section), a training step of the demo's two systems (``twt``, ``qknorm_paper``) at the
   profile's size, fp32 and bf16 interleaved over ``--reps`` repetitions (7: about a minute at
   the proxy size on 2 idle cores, up to 3 minutes under load); bf16 is chosen only if, for
   **both** systems, the 95% bootstrap interval of the median per-repetition speed-up
   (:func:`qknorm_model_tools.bf16_timing.ratio_summary`, as the benchmark harness's targets) lies
   at or above 1: one disturbed repetition does not decide, and a tie stays fp32. The full
   benchmark result, the load average and the verdict are cached; delete the file to measure
   again.

The thread count is not part of the key: a machine gets one verdict, measured with
``--threads`` of the training that measured it (``qk_resolve_bf16`` passes the run's own
thread count), so that every step that only finds runs (``--cached-only``) agrees with the
step that trained; a verdict read for another thread count says so.

Before it measures (or waits for another process's measurement) it says on stderr what it
measures and roughly how long that takes here (:func:`rough_minutes`). Prints ``bf16`` or
``fp32`` on stdout and one line saying why on stderr (none with ``--quiet``: a step that trains
nothing and only finds the runs, e.g. ``scripts/reproduce.sh --aggregate-only``). Exit status
0; 1 if a cached verdict cannot be read (named, with what to do) or the cache cannot be written (no
silent fp32 that a later step would not repeat); 2 for bad arguments. A measurement that
fails is reported and answers fp32, uncached (so later steps answer fp32 too).
"""

import argparse
import contextlib
import fcntl
import hashlib
import json
import os
import sys
from pathlib import Path

import torch

from qknorm_tools.progress import quiet_fairseq_logging

from . import bf16_timing

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


class CacheError(Exception):
    """A cached verdict that cannot be used (the message names the file and what to do)."""


def verdict(result: dict) -> tuple[bool, str]:
    """``(bf16, why)`` from a result with the model section (:func:`measure`).

    Per system, the per-repetition speed-ups ``t_fp32[i] / t_bf16[i]`` (> 1: bf16 faster), their
    median and its 95% bootstrap interval (:func:`.bf16_timing.ratio_summary`); bf16 only
    if the interval's verdict against 1.0 is ``met`` (low end >= 1) for every system of
    :data:`SYSTEMS`.

    Raises:
        ValueError: the result has no fp32 and bf16 step times for a system of
            :data:`SYSTEMS` (a failed measurement).
    """
    systems = result.get("model", {}).get("systems", {})
    parts, faster = [], True
    for name in SYSTEMS:
        try:
            fp32, bf16 = (systems[name][m]["samples_s"] for m in ("fp32", "bf16"))
        except KeyError:
            msg = f"no bf16 and fp32 step times for {name}: {result.get('errors')}"
            raise ValueError(msg) from None
        r = bf16_timing.ratio_summary(bf16_timing.paired_ratios(fp32, bf16))
        faster &= bf16_timing.verdict(r["ci_low"], r["ci_high"], 1.0) == bf16_timing.MET
        parts.append(
            f"{name} {r['median']:.2f}x (95% CI {r['ci_low']:.2f}-{r['ci_high']:.2f}; "
            f"repetitions {r['min']:.2f}-{r['max']:.2f})"
        )
    word = "faster" if faster else "not surely faster"
    return faster, f"bf16 {word} than fp32 for a training step: {', '.join(parts)}"


#: CPU-minutes of one measurement (7 repetitions, both systems) per model size: about a minute
#: on 2 idle Zen 4 cores at the proxy size (36 s to 1 min measured, 2026-12-01)
CORE_MINUTES = {"proxy": 2.0}


def rough_minutes(size: str, threads: int, reps: int, load: float, cpus: int) -> float | None:
    """A rough duration of a measurement in minutes (None for a size without a figure).

    :data:`CORE_MINUTES` scaled to ``reps`` and spread over the ``threads`` it runs with, of
    which only the share the load average ``load`` leaves on ``cpus`` cores is free.
    """
    if size not in CORE_MINUTES:
        return None
    share = min(1.0, cpus / max(load + threads, 1.0))  # > 1 runnable per core: a fair share
    return CORE_MINUTES[size] * reps / 7 / (min(threads, cpus) * share)


def announce(key: dict, size: str, threads: int, reps: int, path: Path) -> str:
    """The line said before a measurement (after ``[bf16 auto]``).

    What it measures, roughly how long it takes (:func:`rough_minutes` at the load at hand),
    where the verdict is cached.
    """
    load, cpus = os.getloadavg()[0], os.cpu_count() or 1
    minutes = rough_minutes(size, threads, reps, load, cpus)
    took = (
        f"roughly {max(1, round(minutes))} min here (load average {load:.1f} on {cpus} cores; "
        f"about {CORE_MINUTES[size] / 2:.0f} on 2 idle cores)"
        if minutes is not None
        else f"no time estimate for the {size} size"
    )
    return (
        f"measuring once whether bf16 autocast trains faster than fp32 on "
        f"{key['cpu_model']}: a training step of {' and '.join(SYSTEMS)} at the {size} size, "
        f"fp32 and bf16 interleaved, {reps} repetitions, {threads} thread(s); {took}; the "
        f"verdict is cached in {path} (QKNORM_BF16=0 or 1 decides without measuring)"
    )


def _read_cached(path: Path, threads: int | None = None) -> tuple[bool, str]:
    try:
        d = json.loads(path.read_text())["decision"]
        bf16, why, date, load = bool(d["bf16"]), d["why"], d["date"], d.get("loadavg")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise CacheError(
            f"cannot use the cached bf16 verdict {path} ({type(exc).__name__}: {exc}): delete "
            f"it to measure again, or set QKNORM_BF16=0 or 1"
        ) from None
    load = f", load average {load}" if load else ""
    measured_with = d.get("threads")
    if threads is not None and measured_with is not None and measured_with != threads:
        load += f", with {measured_with} thread(s), not this run's {threads}"
    return bf16, f"{why} (measured {date}{load}; cached in {path}: delete it to measure again)"


def decide(cache_dir: Path, size: str, threads: int, reps: int, cached_only: bool):
    """``(bf16, why)`` for this machine: steps 1-3 of the module docstring."""
    from fairseq_qknorm.tasks import cpu_bf16

    native, reason = cpu_bf16.native_bf16_support()
    if not native:
        return False, reason
    key = cache_key(size, reason)
    path = cache_file(cache_dir, key)
    if path.is_file():  # read without the lock: a work dir may be read-only
        return _read_cached(path, None if cached_only else threads)
    if cached_only:
        return False, (
            f"not measured on this machine yet (no {path}): fp32 here; a training measures first"
        )
    path.parent.mkdir(parents=True, exist_ok=True)
    # one measurement per machine: a second caller (two trainings started at once) waits for it
    with open(path.with_suffix(".lock"), "w") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            print(
                f"[bf16 auto] waiting for the bf16 measurement another process is making "
                f"(it holds {lock.name}; {announce(key, size, threads, reps, path)})",
                file=sys.stderr,
            )
            fcntl.flock(lock, fcntl.LOCK_EX)
        if path.is_file():
            return _read_cached(path, threads)
        print(f"[bf16 auto] {announce(key, size, threads, reps, path)}", file=sys.stderr)
        return _measure(path, key, size, threads, reps)


def measure(size: str, threads: int, reps: int) -> dict:
    """The measurement of step 3: :data:`SYSTEMS` timed at ``size``, fp32 and bf16 interleaved.

    :func:`qknorm_model_tools.bf16_timing.measure_model` with ``threads`` torch threads and ``reps``
    repetitions, without the explicit-attention entry; what it prints (and fairseq's warnings)
    goes nowhere: the result (step times in seconds, machine, load) is what the cache keeps. A
    failure is in the result's ``errors``, not raised.
    """
    command = (
        f"python -m qknorm_model_tools.bf16_auto CACHE_DIR --size {size} --threads {threads} "
        f"--reps {reps}"
    )
    with (
        open(os.devnull, "w") as quiet,
        contextlib.redirect_stdout(quiet),
        contextlib.redirect_stderr(quiet),
    ):
        return bf16_timing.measure_model(
            command, SYSTEMS, size, threads, reps, explicit_attention=False
        )


def _measure(path: Path, key: dict, size: str, threads: int, reps: int) -> tuple[bool, str]:
    load_start = os.getloadavg()[0]
    tmp = path.with_suffix(".partial.json")
    result = measure(size, threads, reps)
    try:
        bf16, why = verdict(result)
    except ValueError as exc:
        return False, f"the bf16 measurement failed ({exc}); nothing cached"
    load_end = os.getloadavg()[0]
    if max(load_start, load_end) >= 0.5:  # something else ran: the figures may be the load's
        why += (
            f"; measured while other processes ran (load average {load_start:.2f} -> "
            f"{load_end:.2f}): on an idle machine the verdict may differ"
        )
    result["decision"] = {
        "bf16": bf16,
        "why": why,
        "key": key,
        "date": result["machine"]["date_utc"],
        "loadavg": f"{load_start:.2f} at start, {load_end:.2f} at end",
        "threads": threads,
    }
    tmp.write_text(json.dumps(result, indent=1, default=str) + "\n")
    tmp.replace(path)
    return _read_cached(path)


def main(argv=None) -> int:
    """Print ``bf16`` or ``fp32`` (stdout) and the reason (stderr); exit status."""
    p = argparse.ArgumentParser(
        prog="python -m qknorm_model_tools.bf16_auto", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("cache_dir", type=Path, nargs="?", help="where verdicts are cached")
    p.add_argument("--size", default="proxy", help="model size (proxy; smoke for tests)")
    p.add_argument("--threads", type=int, default=2, help="threads of the measurement")
    p.add_argument(
        "--reps",
        type=int,
        default=7,
        help="interleaved repetitions (>= 5; with 7 the 95%% interval of the median leaves out "
        "the extreme repetitions, with 5 it is their min-max)",
    )
    p.add_argument(
        "--cached-only",
        action="store_true",
        help="never measure: answer fp32 where no verdict is cached",
    )
    p.add_argument(
        "--quiet",
        action="store_true",
        help="no line saying why on stderr (errors are still said): for a step that trains "
        "nothing and only finds the runs",
    )
    p.add_argument(
        "--native-only",
        action="store_true",
        help="answer from the CPU alone (step 1: bf16 where it has native bf16; nothing measured "
        "or cached): whether --precision bf16 can train here",
    )
    a = p.parse_args(argv)
    if a.threads < 1 or a.reps < 5:
        p.error("--threads must be >= 1 and --reps >= 5")
    if a.native_only:
        from fairseq_qknorm.tasks import cpu_bf16

        native, why = cpu_bf16.native_bf16_support()
        if not a.quiet:
            print(f"[bf16 auto] {why}", file=sys.stderr)
        print("bf16" if native else "fp32")
        return 0
    if a.cache_dir is None:
        p.error("the following arguments are required: cache_dir")
    torch.set_num_threads(a.threads)
    # fairseq's INFO records (its tensorboardX line) and warnings: not on the terminal
    quiet_fairseq_logging("python -m benchmarks.bf16_cpu shows them")
    try:
        bf16, why = decide(a.cache_dir, a.size, a.threads, a.reps, a.cached_only)
    except KeyboardInterrupt:  # Ctrl-C of the script that asked: one line, no traceback
        print("[bf16 auto] interrupted: nothing measured is kept", file=sys.stderr)
        return 130
    except CacheError as exc:
        print(f"[bf16 auto] error: {exc}", file=sys.stderr)
        return 1
    except OSError as exc:
        print(
            f"[bf16 auto] error: cannot keep a bf16 verdict in {a.cache_dir} ({exc}); "
            f"set QKNORM_BF16=0 or 1",
            file=sys.stderr,
        )
        return 1
    if not a.quiet:
        print(f"[bf16 auto] {'bf16 autocast' if bf16 else 'fp32'}: {why}", file=sys.stderr)
    print("bf16" if bf16 else "fp32")
    return 0


if __name__ == "__main__":
    sys.exit(main())
