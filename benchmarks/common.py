"""Shared pieces of the benchmarks.

Systems, model building, synthetic batches, FLOP counting, interleaved timing, machine
description and subprocess peak RSS.
"""

import datetime
import json
import math
import os
import platform
import re
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Optional

import torch

from qknorm_tools import config

REPO = Path(__file__).resolve().parents[1]
PLUGIN_DIR = REPO / "fairseq_qknorm"
VENV_BIN = Path(sys.executable).parent

#: Arch-name suffix of each model size: ``small`` = the papers' gl-en size (the *_small archs:
#: 4+4 layers, d 512, FFN 2048, 4 heads, dropout 0.4); ``proxy`` = the CPU profiles' size (the
#: *_proxy archs: 3+3, d 256, FFN 1024, 4 heads, dropout 0.3). The numbers live in the archs
#: (fairseq_qknorm/models/transformer_qknorm.py) only; ``smoke`` is a tiny size for tests.
SIZE_SUFFIX = {"small": "_small", "proxy": "_proxy"}
SMOKE = {"layers": 1, "dim": 32, "ffn": 64, "heads": 2, "dropout": 0.1}


def arch_size(arch: str) -> dict[str, float]:
    """``{layers, dim, ffn, heads, dropout}`` that the named ``arch`` resolves to."""
    import argparse

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

#: The compared systems, named as in configs/systems (plus fairseq's own ``stock``). All share
#: all embeddings and have identical sizes. ``qknorm_paper``: the QKNorm paper's model (PreNorm
#: + FixNorm + LayerNorm + QKNorm); ``prenorm_fixnorm_layernorm``: the same with dot-product
#: attention, so that qknorm_paper/prenorm_fixnorm_layernorm isolates QKNorm's cost; ``twt``:
#: TWT (PreNorm + FixNorm + ScaleNorm), so that twt/prenorm_fixnorm_layernorm isolates
#: ScaleNorm vs LayerNorm; ``stock``: fairseq's own ``transformer`` (PostNorm + LayerNorm,
#: fairseq's MultiheadAttention) at the same size.
SYSTEMS = ("qknorm_paper", "twt", "prenorm_fixnorm_layernorm", "stock")
SYSTEM_DESC = {
    "qknorm_paper": "transformer_qknorm_paper[_SIZE]: PreNorm+FixNorm+LayerNorm+QKNorm",
    "twt": "transformer_twt[_SIZE]: PreNorm+FixNorm+ScaleNorm, dot-product",
    "prenorm_fixnorm_layernorm": "transformer_prenorm_fixnorm_layernorm[_SIZE]: "
    "PreNorm+FixNorm+LayerNorm, dot-product",
    "stock": "fairseq transformer (PostNorm+LayerNorm, fairseq MultiheadAttention)",
}

#: gl-en 97.5th-percentile BPE length (data/bpe/gl-en/length_stats.json); the model computes
#: its g0 = log2(L^2 - L) from it
DEFAULT_QK_LENGTH = 92.0


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
        ValueError: unknown ``system``.
    """
    if system == "stock":
        return ["--arch", "transformer", "--share-all-embeddings", *size_flags(size)]
    if system not in SYSTEMS:
        raise ValueError(f"unknown system {system!r}; known: {SYSTEMS}")
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


def setup_task(data_dir: Path, src="src", tgt="tgt"):
    """A fairseq translation task on ``data_dir`` (the plugin registered)."""
    from fairseq import options, tasks

    import fairseq_qknorm  # noqa: F401  (registers the models)

    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser,
        [
            str(data_dir),
            "--task",
            "translation",
            "-s",
            src,
            "-t",
            tgt,
            "--arch",
            "transformer_qknorm",
        ],
    )
    return tasks.setup_task(args)


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


def embedding_params(model) -> set:
    """``id()`` of the embedding, output-projection and positional parameters."""
    ids = {id(model.encoder.embed_tokens.weight), id(model.decoder.embed_tokens.weight)}
    proj = getattr(model.decoder, "output_projection", None)
    if proj is not None:
        ids.add(id(proj.weight))
    for emb in (
        getattr(model.encoder, "embed_positions", None),
        getattr(model.decoder, "embed_positions", None),
    ):
        if emb is not None:
            ids.update(id(p) for p in emb.parameters())
    return ids


def param_counts(model) -> dict[str, int]:
    """Parameter counts: ``encoder`` / ``decoder`` non-embedding, ``embedding``, ``total``."""
    emb = embedding_params(model)
    enc = sum(p.numel() for p in model.encoder.parameters() if id(p) not in emb)
    dec = sum(p.numel() for p in model.decoder.parameters() if id(p) not in emb)
    total = sum(p.numel() for p in model.parameters())  # tied parameters counted once
    return {"encoder": enc, "decoder": dec, "embedding": total - enc - dec, "total": total}


def train_step_flops(
    counts: dict[str, int], layers: int, dim: int, vocab: int, bsz: int, src_len: int, tgt_len: int
) -> dict[str, float]:
    """FLOPs of one training step (forward + backward = 3 x forward, 2 FLOPs per MAC).

    ``dense = 6 * (N_enc * B*S + N_dec * B*T)`` with ``N_*`` the non-embedding parameters;
    ``output = 6 * d * V * B*T`` (the tied output projection, a real matmul);
    ``attention = 12 * d * B * L * (S^2 + T^2 + T*S)`` (q.k^T and A.v, full square for
    the causal decoder self-attention as the kernels compute it). Embedding lookups,
    norms, softmax, dropout and the optimizer are not counted.
    """
    src_tok, tgt_tok = bsz * src_len, bsz * tgt_len
    dense = 6.0 * (counts["encoder"] * src_tok + counts["decoder"] * tgt_tok)
    output = 6.0 * dim * vocab * tgt_tok
    attention = 12.0 * dim * bsz * layers * (src_len**2 + tgt_len**2 + tgt_len * src_len)
    return {
        "dense": dense,
        "output": output,
        "attention": attention,
        "total": dense + output + attention,
    }


FLOP_FORMULA = (
    "FLOPs/step = 6*(N_enc*B*S + N_dec*B*T) + 6*d*V*B*T + "
    "12*d*B*L*(S^2 + T^2 + T*S); N_* = non-embedding parameters, "
    "B*S / B*T = source / target tokens, V = vocabulary (tied output projection), "
    "L = layers per side; fwd+bwd = 3x fwd, 2 FLOPs per multiply-add"
)


def synthetic_batch(dictionary, bsz: int, src_len: int, tgt_len: int, seed: int = 0):
    """Identical random batch for every system: no padding, EOS-terminated."""
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


def make_train_step(
    model,
    batch,
    pad: int,
    lr: float = 1e-4,
    autocast_dtype: Optional[torch.dtype] = None,
    phases: bool = False,
) -> Callable[[], float]:
    """One training step as a function returning the loss.

    Forward, label-smoothed CE (0.1, as the criterion), backward, Adam (torch.optim.Adam,
    betas 0.9/0.98). ``phases`` labels ``## forward`` / ``## backward`` / ``## optimizer`` for
    torch.profiler.
    """
    from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-8)
    target = batch["target"].view(-1)

    def label(name):
        return torch.profiler.record_function(name) if phases else nullcontext()

    def step() -> float:
        model.train()
        opt.zero_grad(set_to_none=True)
        ctx = (
            torch.autocast("cpu", dtype=autocast_dtype)
            if autocast_dtype is not None
            else nullcontext()
        )
        with ctx, label("## forward"):
            out = model(**batch["net_input"])
            lprobs = model.get_normalized_probs(out, log_probs=True)
            loss, _ = label_smoothed_nll_loss(
                lprobs.view(-1, lprobs.size(-1)), target, 0.1, ignore_index=pad, reduce=True
            )
        with label("## backward"):
            loss.backward()
        with label("## optimizer"):
            opt.step()
        return float(loss.detach())

    step.optimizer = opt  # type: ignore[attr-defined]
    return step


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
    so samples of two entries pair up (``benchmarks.stats.paired_ratios``). With ``min_of
    = K`` each repetition is K consecutive interleaved rounds and its sample the minimum of
    the K (``benchmarks.stats.block_minima``: interference only adds time). Returns per
    entry the median, min and max seconds per call, the samples and the inner count.
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


def matmul_entries(sizes: Sequence[int]) -> dict[str, tuple[Callable, float]]:
    """``{name: (fn, flops)}`` for fp32 ``torch.matmul`` of square ``n x n`` matrices."""
    out = {}
    for n in sizes:
        g = torch.Generator().manual_seed(n)
        a = torch.randn(n, n, generator=g)
        b = torch.randn(n, n, generator=g)

        def fn(a=a, b=b):
            return torch.matmul(a, b)

        out[f"matmul_{n}"] = (fn, 2.0 * n**3)
    return out


# ------------------------------------------------------------------------ machine
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


# --------------------------------------------------------------------- subprocess
def cli_env(threads: int) -> dict[str, str]:
    """Environment of a benchmarked command: the venv first, the repo importable, threads."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env["OMP_NUM_THREADS"] = str(threads)
    env["MKL_NUM_THREADS"] = str(threads)
    return env


def run_with_rusage(
    cmd: Sequence, env: dict[str, str], log_path: Path, timeout: float = 3600.0
) -> dict:
    """Run ``cmd`` with output to ``log_path``.

    Returns rc, wall time, the command's own peak RSS in MiB (``ru_maxrss``, through
    :mod:`benchmarks.rusage_launcher` so that it does not include this process's footprint),
    CPU times and the output text.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    usage_path = log_path.with_suffix(".rusage.json")
    launcher = [
        sys.executable,
        "-S",
        str(Path(__file__).with_name("rusage_launcher.py")),
        str(usage_path),
    ]
    with open(log_path, "w") as log:
        t0 = time.perf_counter()
        proc = subprocess.Popen(
            launcher + [str(x) for x in cmd],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            rc = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        wall = time.perf_counter() - t0
    usage = json.loads(usage_path.read_text()) if usage_path.is_file() else {}
    maxrss = usage.get("maxrss_kb")
    return {
        "rc": rc,
        "wall_s": wall,
        "peak_rss_mib": maxrss / 1024.0 if maxrss is not None else float("nan"),
        "cpu_s": usage.get("utime_s", 0.0) + usage.get("stime_s", 0.0),
        "output": log_path.read_text(errors="replace"),
    }


def _proc_status_mib(field: str) -> Optional[float]:
    """``field`` (kB) of /proc/self/status in MiB; None where /proc is unavailable."""
    try:
        m = re.search(rf"{field}:\s+(\d+) kB", Path("/proc/self/status").read_text())
        return int(m.group(1)) / 1024.0 if m else None
    except OSError:
        return None


def vm_hwm_mib() -> Optional[float]:
    """This process's peak RSS (VmHWM) in MiB."""
    return _proc_status_mib("VmHWM")


def vm_rss_mib() -> Optional[float]:
    """This process's current RSS (VmRSS) in MiB."""
    return _proc_status_mib("VmRSS")
