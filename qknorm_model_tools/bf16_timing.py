r"""Timing of a training step, fp32 against bf16 autocast, and the interval of its speed-up.

What the CPU profiles' bf16 decision (:mod:`qknorm_model_tools.bf16_auto`) measures, in the package
it serves; ``benchmarks/`` (``bf16_cpu``, ``common``, ``stats``, ``run``) imports it from here.

* Models: a named system (``configs/systems/SYSTEM.toml`` through
  :func:`qknorm_tools.config.load_system`, or fairseq's ``stock`` transformer) built through
  fairseq's real argument parsing at a size of the named archs (:data:`SIZES`).
* The model-only section (:func:`section_model`): one training step through the plugin task's
  own ``train_step`` (fairseq's label-smoothed criterion and Adam) on one synthetic batch without
  padding, fp32 against ``--bf16-autocast``, entries interleaved (:func:`interleaved`) so that
  machine drift hits both alike; :func:`measure_model` wraps it with the machine description.
* Statistics: per-repetition ratios of paired times (:func:`paired_ratios`), a seeded
  percentile-bootstrap interval of their median (:func:`bootstrap_median_interval`,
  :func:`ratio_summary`) and the verdict of an interval against a threshold (:func:`verdict`).
  With ``n`` repetitions the percentile bootstrap of the median can only return sample values;
  for ``n <= 5`` its 95% interval is exactly ``[min, max]`` (the chance that a resample's median
  is the smallest value is 5.8% for ``n = 5``, above the 2.5% tail), from ``n = 7`` on it drops
  the extremes.
"""

import argparse
import datetime
import importlib.util
import math
import os
import platform
import subprocess
import tempfile
import time
import traceback
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Callable, Optional

import numpy as np
import torch

from qknorm_tools import config

#: the plugin's directory (fairseq's ``--user-dir``), found without importing it (and fairseq)
PLUGIN_DIR = Path(importlib.util.find_spec("fairseq_qknorm").origin).resolve().parent

#: Arch-name suffix of each model size: ``small`` = the papers' gl-en size (the *_small archs:
#: 4+4 layers, d 512, FFN 2048, 4 heads, dropout 0.4); ``proxy`` = the CPU profiles' size (the
#: *_proxy archs: 3+3, d 256, FFN 1024, 4 heads, dropout 0.3). The numbers live in the archs
#: (fairseq_qknorm/models/transformer_qknorm.py) only; ``smoke`` is a tiny size for tests.
SIZE_SUFFIX = {"small": "_small", "proxy": "_proxy"}
SMOKE = {"layers": 1, "dim": 32, "ffn": 64, "heads": 2, "dropout": 0.1}

#: gl-en 97.5th-percentile BPE length (data/bpe/gl-en/length_stats.json); the model computes
#: its g0 = log2(L^2 - L) from it
DEFAULT_QK_LENGTH = 92.0

MODES = ("fp32", "bf16")
#: model-only extra entry: bf16 autocast with the attention modules' explicit matmul/softmax
#: path instead of torch's fused scaled_dot_product_attention
EXPLICIT = "bf16_explicit_attention"


# ------------------------------------------------------------------------ sizes, systems
def arch_size(arch: str) -> dict[str, float]:
    """``{layers, dim, ffn, heads, dropout}`` that the named ``arch`` resolves to."""
    from fairseq.models import ARCH_CONFIG_REGISTRY

    import fairseq_qknorm  # noqa: F401  (registers the archs)

    args = argparse.Namespace()
    ARCH_CONFIG_REGISTRY[arch](args)
    return {
        "layers": args.encoder_layers,
        "dim": args.encoder_embed_dim,
        "ffn": args.encoder_ffn_embed_dim,
        "heads": args.encoder_attention_heads,
        "dropout": args.dropout,
    }


class _Sizes(Mapping):
    """``SIZES[size]``: the dimensions of a size, read from the archs (``smoke``: tests only)."""

    def __getitem__(self, size: str) -> dict[str, float]:
        if size == "smoke":
            return dict(SMOKE)
        return arch_size("transformer_twt" + SIZE_SUFFIX[size])

    def __iter__(self):
        return iter((*SIZE_SUFFIX, "smoke"))

    def __len__(self) -> int:
        return len(SIZE_SUFFIX) + 1


SIZES = _Sizes()


def size_flags(size: str) -> list[str]:
    """Explicit size flags of ``size`` (for fairseq's ``transformer`` and the smoke size)."""
    s = SIZES[size]
    flags = []
    for side in ("encoder", "decoder"):
        flags += [
            f"--{side}-layers",
            str(s["layers"]),
            f"--{side}-embed-dim",
            str(s["dim"]),
            f"--{side}-ffn-embed-dim",
            str(s["ffn"]),
            f"--{side}-attention-heads",
            str(s["heads"]),
        ]
    return flags + ["--dropout", str(s["dropout"])]


def system_args(system: str, size: str, qk_length: float = DEFAULT_QK_LENGTH) -> list[str]:
    """``--arch ...`` plus flags for ``system`` at ``size`` (fairseq-train syntax).

    Our systems use their named arch at that size (``transformer_qknorm_paper_small`` ...), as
    scripts/train.sh does: the arch family, the system's flags and whether it takes QKNorm's L
    come from configs/systems/SYSTEM.toml (qknorm_tools.config.load_system). fairseq's
    ``transformer`` (``stock``) gets the same size as explicit flags, and so does every system
    at the tests' ``smoke`` size.

    Raises:
        qknorm_tools.config.ConfigError: no (or a bad) configs/systems/SYSTEM.toml.
    """
    if system == "stock":
        return ["--arch", "transformer", "--share-all-embeddings", *size_flags(size)]
    cfg = config.load_system(system)
    head = ["--arch", cfg.arch + SIZE_SUFFIX.get(size, ""), *cfg.flags]
    if cfg.qknorm:
        head += ["--qk-norm-length", f"{qk_length:g}"]
    return head + (size_flags(size) if size == "smoke" else [])


# ------------------------------------------------------------------ task / models
def write_dict_dir(directory: Path, vocab: int, langs=("src", "tgt")) -> Path:
    """A data dir holding only ``dict.{lang}.txt`` (joined) with ``vocab`` entries in all."""
    directory.mkdir(parents=True, exist_ok=True)
    lines = "".join(f"tok{i} {1000 - i % 1000}\n" for i in range(vocab - 4))  # + 4 specials
    for lang in langs:
        (directory / f"dict.{lang}.txt").write_text(lines)
    return directory


def build_model(task, system: str, size: str, qk_length: float = DEFAULT_QK_LENGTH, seed: int = 1):
    """Build ``system`` through fairseq's real argument parsing; returns ``(model, args)``."""
    from fairseq import options

    parser = options.get_training_parser()
    data = task.cfg.data if hasattr(task.cfg, "data") else task.args.data
    argv = [
        str(data),
        "--task",
        "translation",
        "-s",
        task.cfg.source_lang,
        "-t",
        task.cfg.target_lang,
        *system_args(system, size, qk_length),
    ]
    args = options.parse_args_and_arch(parser, argv)
    torch.manual_seed(seed)
    model = task.build_model(args)
    return model, args


def synthetic_batch(dictionary, bsz: int, src_len: int, tgt_len: int, seed: int = 0):
    """Identical random batch for every system: no padding, EOS-terminated.

    ``src_tokens`` (bsz, src_len), ``prev_output_tokens`` and ``target`` (bsz, tgt_len).
    """
    g = torch.Generator().manual_seed(seed)
    lo, hi = dictionary.nspecial, len(dictionary)
    src = torch.randint(lo, hi, (bsz, src_len), generator=g)
    src[:, -1] = dictionary.eos()
    tgt = torch.randint(lo, hi, (bsz, tgt_len), generator=g)
    tgt[:, -1] = dictionary.eos()
    prev = torch.cat([torch.full((bsz, 1), dictionary.eos()), tgt[:, :-1]], dim=1)
    return {
        "net_input": {
            "src_tokens": src,
            "src_lengths": torch.full((bsz,), src_len),
            "prev_output_tokens": prev,
        },
        "target": tgt,
    }


def mode_flags(allow_emulated: bool = False) -> dict[str, list[str]]:
    """fairseq-train flags of each mode: CPU, the plugin task, and bf16 autocast or not."""
    base = ["--cpu", "--task", "translation_word_dropout"]
    return {
        "fp32": base,
        "bf16": base
        + ["--bf16-autocast"]
        + (["--bf16-autocast-allow-emulated"] if allow_emulated else []),
    }


def plugin_task(dict_dir: Path, flags: list[str]):
    """``(task, args)`` as fairseq-train builds them from ``flags`` (:func:`mode_flags`).

    Plus the cpu-proxy criterion and optimizer, on a dictionary-only data dir.
    """
    from fairseq import options, tasks

    args = options.parse_args_and_arch(
        options.get_training_parser(),
        [
            str(dict_dir),
            "--user-dir",
            str(PLUGIN_DIR),
            "-s",
            "src",
            "-t",
            "tgt",
            "--arch",
            "transformer_qknorm",
            "--criterion",
            "label_smoothed_cross_entropy",
            "--label-smoothing",
            "0.1",
            "--optimizer",
            "adam",
            "--adam-betas",
            "(0.9,0.98)",
            "--adam-eps",
            "1e-8",
            "--lr",
            "1e-4",
            *flags,
        ],
    )
    return tasks.setup_task(args), args


def make_step(task, args, model, batch):
    """One fairseq training step: ``task.train_step``, then ``optimizer.step``.

    Forward + loss under the task's autocast, backward outside, with fairseq's criterion and
    Adam.
    """
    from fairseq import optim
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    criterion = task.build_criterion(args)
    optimizer = optim.build_optimizer(
        convert_namespace_to_omegaconf(args).optimizer, list(model.parameters())
    )

    def step() -> float:
        optimizer.zero_grad()
        loss, _, _ = task.train_step(batch, model, criterion, optimizer, update_num=1)
        optimizer.step()
        return float(loss.detach())

    return step


def use_explicit_attention(model) -> int:
    """Switch every QKNorm/TWT attention module of ``model`` to its explicit path.

    The explicit matmul/softmax path is ``QKNormMultiheadAttention.use_fused = False``;
    returns how many modules were switched.
    """
    from fairseq_qknorm.modules import QKNormMultiheadAttention

    mods = [m for m in model.modules() if isinstance(m, QKNormMultiheadAttention)]
    for m in mods:
        m.use_fused = False
    return len(mods)


# ------------------------------------------------------------------------ timing
def _time_call(fn: Callable, inner: int) -> float:
    t0 = time.perf_counter()
    for _ in range(inner):
        fn()
    return (time.perf_counter() - t0) / inner


def interleaved(
    entries: dict[str, Callable],
    reps: int,
    warmup: int = 1,
    min_time: float = 0.0,
    min_of: int = 1,
) -> dict[str, dict]:
    """Time every entry ``reps`` times in interleaved order (A, B, C, B, C, A, C, A, B, ...).

    After ``warmup`` untimed interleaved rounds, each entry gets an inner repeat count so
    that one measurement lasts at least ``min_time`` seconds. Repetition ``r`` starts at
    entry ``r mod len(entries)`` (a rotation: no entry always runs first or right after
    the same neighbour), and ``samples_s[r]`` of every entry comes from repetition ``r``,
    so samples of two entries pair up (:func:`paired_ratios`). With ``min_of = K`` each
    repetition is K consecutive interleaved rounds and its sample the minimum of the K
    (interference only adds time). Returns per entry the median, min and max seconds per call,
    the samples and the inner count.
    """
    last: dict[str, float] = {}
    for _ in range(warmup):
        for name, fn in entries.items():
            last[name] = _time_call(fn, 1)
    inner = {}
    for name, fn in entries.items():
        if min_time <= 0:
            inner[name] = 1
            continue
        t = last[name] if name in last else _time_call(fn, 1)  # the last warm-up call
        inner[name] = max(1, math.ceil(min_time / max(t, 1e-9)))
    samples: dict[str, list[float]] = {name: [] for name in entries}
    names = list(entries)
    rounds: dict[str, list[float]] = {name: [] for name in entries}
    for r in range(reps * max(1, min_of)):
        for name in names[r % len(names) :] + names[: r % len(names)]:
            rounds[name].append(_time_call(entries[name], inner[name]))
    k = max(1, min_of)
    for name in names:
        samples[name] = [min(rounds[name][i * k : (i + 1) * k]) for i in range(reps)]
    return {
        name: summarize(s, inner=inner[name], **({"min_of": k} if k > 1 else {}))
        for name, s in samples.items()
    }


def median(xs: Sequence[float]) -> float:
    """The median (nan for no values)."""
    s = sorted(xs)
    n = len(s)
    if n == 0:
        return float("nan")
    return s[n // 2] if n % 2 else 0.5 * (s[n // 2 - 1] + s[n // 2])


def summarize(samples: Sequence[float], **extra) -> dict:
    """Median, min, max (seconds) and the samples (6 significant digits), plus ``extra``."""
    return {
        "median_s": median(samples),
        "min_s": min(samples),
        "max_s": max(samples),
        "samples_s": [float(f"{x:.6g}") for x in samples],
        **extra,
    }  # 6 significant digits


def speedup(fp32_s: list[float], bf16_s: list[float]) -> dict:
    """Speed of bf16 relative to fp32 (> 1: bf16 faster).

    The ratio of the medians, the min-max of the per-repetition ratios (repetition i of both entries
    ran back to back), and the ratio of the fastest repetitions (the figure least disturbed by other
    jobs).
    """
    per_rep = [f / b for f, b in zip(fp32_s, bf16_s)]
    return {
        "median_ratio": median(fp32_s) / median(bf16_s),
        "rep_ratio_min": min(per_rep),
        "rep_ratio_max": max(per_rep),
        "best_ratio": min(fp32_s) / min(bf16_s),
    }


def section_model(
    out: dict,
    work: Path,
    systems: Sequence[str],
    size: str,
    reps: int,
    *,
    batch: int = 146,
    length: int = 28,
    vocab: int = 2048,
    bf16_ok: bool = True,
    explicit_attention: bool = True,
    allow_emulated: bool = False,
) -> None:
    """Time training steps per system and mode on one synthetic batch; results into ``out``.

    One batch of ``batch`` sentences x ``length`` tokens per side (EOS included; the default
    146 x 28 = 4,088 tokens is a full ``--max-tokens 4096`` batch without padding) over a
    joined dictionary of ``vocab`` entries (gl-en: 2048) in ``work``; ``reps`` interleaved
    repetitions after one warm-up round. The bf16 modes run only if ``bf16_ok``; with
    ``explicit_attention`` also :data:`EXPLICIT`. ``out`` gets per system and mode the step
    times (:func:`summarize`, seconds) and the speed-ups over fp32 (:func:`speedup`).
    """
    dict_dir = write_dict_dir(work / "dict", vocab)
    tasks = {
        mode: plugin_task(dict_dir, mode_flags(allow_emulated)[mode])
        for mode in MODES
        if mode == "fp32" or bf16_ok
    }
    data = synthetic_batch(tasks["fp32"][0].source_dictionary, batch, length, length)
    data.update(ntokens=data["target"].numel(), nsentences=batch)  # the criterion's
    entries = {}
    for system in systems:
        for mode, (task, args) in tasks.items():
            model, _ = build_model(task, system, size)
            entries[f"{system}:{mode}"] = make_step(task, args, model, data)
            if mode == "bf16" and explicit_attention:
                model, _ = build_model(task, system, size)
                if use_explicit_attention(model):
                    entries[f"{system}:{EXPLICIT}"] = make_step(task, args, model, data)
    times = interleaved(entries, reps, warmup=1)
    res = {}
    for system in systems:
        r = {
            mode: times[f"{system}:{mode}"]
            for mode in (*MODES, EXPLICIT)
            if f"{system}:{mode}" in times
        }
        r["speedup"] = {
            mode: speedup(r["fp32"]["samples_s"], r[mode]["samples_s"])
            for mode in r
            if mode != "fp32"
        }
        res[system] = r
    out.update(
        {
            "size": size,
            "model": SIZES[size],
            "batch_sentences": batch,
            "tokens_per_side": batch * length,
            "reps": reps,
            "systems": res,
            "what": "task.train_step (fairseq label-smoothed CE, fairseq Adam) + "
            "optimizer.step; one synthetic batch without padding; "
            f"{EXPLICIT}: bf16 with the attention's explicit path (use_fused=False)",
        }
    )


def new_result(command: str) -> dict:
    """The head of a bf16-vs-fp32 result: the command, machine, load and bf16 detector.

    ``{"command", "machine"`` (:func:`machine_info`), ``"uptime_start"``, ``"bf16_detector"``,
    ``"native_bf16"`` (:func:`fairseq_qknorm.tasks.cpu_bf16.native_bf16_support`),
    ``"errors": {}}``.
    """
    from fairseq_qknorm.tasks import cpu_bf16

    native, reason = cpu_bf16.native_bf16_support()
    return {
        "command": command,
        "machine": machine_info(),
        "uptime_start": uptime(),
        "bf16_detector": reason,
        "native_bf16": native,
        "errors": {},
    }


def measure_model(
    command: str, systems: Sequence[str], size: str, threads: int, reps: int, **section_kwargs
) -> dict:
    """The model-only result of :func:`section_model` with its :func:`new_result` head.

    Runs with ``threads`` torch threads in a temporary directory; bf16 only with native bf16.
    A section that fails is recorded as ``errors["model"]`` (its traceback), not raised; the
    result ends with ``uptime_end`` and ``total_wall_s`` (seconds).
    """
    torch.set_num_threads(threads)
    res = new_result(command)
    t0 = time.perf_counter()
    res["model"] = {}
    with tempfile.TemporaryDirectory(prefix="qknorm-bf16-") as work:
        try:
            section_model(
                res["model"],
                Path(work),
                systems,
                size,
                reps,
                bf16_ok=res["native_bf16"],
                **section_kwargs,
            )
        except Exception:  # noqa: BLE001  (reported in the result, as the harness does)
            res["errors"]["model"] = traceback.format_exc()
    res["uptime_end"] = uptime()
    res["total_wall_s"] = time.perf_counter() - t0
    return res


# ------------------------------------------------------------------------ machine
def uptime() -> str:
    """The ``uptime`` line (load averages), or ``os.getloadavg()`` without it."""
    try:
        return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()
    except OSError:
        return f"load average {os.getloadavg()}"


def cpu_model() -> str:
    """The CPU model name (/proc/cpuinfo)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def cpu_family_model() -> Optional[str]:
    """``family F model M stepping S`` of the first CPU in /proc/cpuinfo.

    It identifies the microarchitecture where a hypervisor shows only a generic model name.
    """
    try:
        fields = {}
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            key = key.strip()
            if key in ("cpu family", "model", "stepping") and key not in fields:
                fields[key] = value.strip()
            if not line.strip() and fields:
                break
        if "cpu family" in fields:
            return (
                f"family {fields['cpu family']} model {fields.get('model', '?')} "
                f"stepping {fields.get('stepping', '?')}"
            )
    except OSError:
        pass
    return None


def cpu_flags() -> list[str]:
    """The CPU features that matter for these benchmarks (AVX2, AVX-512, AMX ...)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("flags"):
                have = set(line.split(":", 1)[1].split())
                wanted = (
                    "avx2",
                    "fma",
                    "avx512f",
                    "avx512_bf16",
                    "avx512_vnni",
                    "amx_bf16",
                    "amx_tile",
                )
                return [f for f in wanted if f in have]
    except OSError:
        pass
    return []


def usable_cpus() -> int:
    """CPUs this process may run on (its affinity mask; ``os.cpu_count()`` where there is none)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def machine_info() -> dict:
    """Date, CPU, thread settings and library versions of this run."""
    import fairseq

    return {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        "cpu_model": cpu_model(),
        "cpu_family_model": cpu_family_model(),
        "cpu_flags": cpu_flags(),
        "cpu_count": os.cpu_count(),
        "cpu_affinity": usable_cpus() if hasattr(os, "sched_getaffinity") else None,
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        "mkldnn": torch.backends.mkldnn.is_available(),
        "mkl": torch.backends.mkl.is_available(),
        "fairseq": getattr(fairseq, "__version__", "?"),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "loadavg_start": os.getloadavg(),
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS"),
    }


# ------------------------------------------------------------------------ statistics
#: bootstrap resamples and seed (fixed: the same samples always give the same interval)
BOOTSTRAP_RESAMPLES = 10000
BOOTSTRAP_SEED = 0
#: two-sided confidence of the bootstrap interval
CONFIDENCE = 0.95

MET, MISSED, CANNOT_TELL = "met", "missed", "cannot tell"


def paired_ratios(reference: Sequence[float], candidate: Sequence[float]) -> np.ndarray:
    """Per-repetition ratios ``reference[i] / candidate[i]``.

    With times, ``paired_ratios(t_stock, t_qknorm)`` is the QKNorm model's speed relative
    to stock in each repetition (> 1: faster); with throughputs pass them the other way.

    Args:
        reference: positive, finite numbers, one per repetition.
        candidate: as ``reference`` and as long (the ``i``-th of each from the same
            interleaved repetition).

    Returns:
        float64 array of ``len(reference)`` ratios.

    Raises:
        ValueError: different lengths, no values, or a value that is not positive and finite.
    """
    ref = np.asarray(reference, dtype=np.float64)
    cand = np.asarray(candidate, dtype=np.float64)
    if ref.shape != cand.shape or ref.ndim != 1 or ref.size == 0:
        raise ValueError(
            f"paired ratios need two equally long, non-empty sequences; got "
            f"{ref.shape} and {cand.shape}"
        )
    if not (
        np.isfinite(ref).all() and np.isfinite(cand).all() and (ref > 0).all() and (cand > 0).all()
    ):
        raise ValueError("paired ratios need positive, finite values")
    return ref / cand


def bootstrap_median_interval(
    values: Sequence[float],
    confidence: float = CONFIDENCE,
    resamples: int = BOOTSTRAP_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> dict[str, float]:
    """Percentile-bootstrap interval of the median (Efron & Tibshirani 1993, Ch. 13).

    ``resamples`` samples of ``len(values)`` values drawn with replacement (numpy
    ``default_rng(seed)``); the interval is the ``(1 - confidence) / 2`` and
    ``(1 + confidence) / 2`` quantiles of their medians (numpy's ``lower`` / ``higher``
    quantile methods, so the ends are sample values).

    Args:
        values: one value per repetition (at least one, finite).
        confidence: two-sided confidence in (0, 1).
        resamples: number of bootstrap samples (> 0).
        seed: seed of the resampling.

    Returns:
        ``{"low": ..., "high": ...}``.

    Raises:
        ValueError: no values, a non-finite value, or a bad ``confidence``/``resamples``.
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0 or not np.isfinite(x).all():
        raise ValueError(
            f"bootstrap needs a non-empty 1-D sequence of finite values, got {values!r}"
        )
    if not 0.0 < confidence < 1.0 or resamples < 1:
        raise ValueError(
            f"confidence must be in (0, 1) and resamples > 0, got {confidence}, {resamples}"
        )
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(resamples, x.size))
    medians = np.median(x[idx], axis=1)
    alpha = (1.0 - confidence) / 2.0
    return {
        "low": float(np.quantile(medians, alpha, method="lower")),
        "high": float(np.quantile(medians, 1.0 - alpha, method="higher")),
    }


def ratio_summary(values: Sequence[float], **bootstrap_kwargs) -> dict:
    """Median, min, max, bootstrap interval of the median and the values themselves.

    Returns:
        ``{"median", "min", "max", "ci_low", "ci_high", "confidence", "n", "values"}``.
    """
    x = np.asarray(values, dtype=np.float64)
    ci = bootstrap_median_interval(x, **bootstrap_kwargs)
    return {
        "median": float(np.median(x)),
        "min": float(x.min()),
        "max": float(x.max()),
        "ci_low": ci["low"],
        "ci_high": ci["high"],
        "confidence": bootstrap_kwargs.get("confidence", CONFIDENCE),
        "n": int(x.size),
        "values": [round(float(v), 5) for v in x],
    }


def verdict(low: float, high: float, threshold: float) -> str:
    """``met`` if ``low >= threshold``, ``missed`` if ``high < threshold``, else ``cannot tell``.

    Raises:
        ValueError: ``low > high`` or a non-finite bound.
    """
    if not (np.isfinite(low) and np.isfinite(high)) or low > high:
        raise ValueError(f"an interval needs finite low <= high, got [{low}, {high}]")
    if low >= threshold:
        return MET
    if high < threshold:
        return MISSED
    return CANNOT_TELL
