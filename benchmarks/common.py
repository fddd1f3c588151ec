"""Shared pieces of the benchmarks.

Systems, model building, synthetic batches, FLOP counting, interleaved timing, machine
description and subprocess peak RSS. Model sizes and building, synthetic batches, interleaved
timing and the machine description are the model tools' (:mod:`qknorm_model_tools.bf16_timing`,
which the CPU profiles' bf16 decision times with), imported here under their harness names.
"""

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from contextlib import nullcontext
from pathlib import Path
from typing import Callable, Optional

import torch

from qknorm_model_tools import bf16_timing as bt
from qknorm_model_tools.bf16_timing import (  # noqa: F401  (the harness's names for them)
    DEFAULT_QK_LENGTH,
    SIZE_SUFFIX,
    SIZES,
    SMOKE,
    arch_size,
    build_model,
    cpu_family_model,
    cpu_flags,
    cpu_model,
    interleaved,
    machine_info,
    median,
    size_flags,
    summarize,
    synthetic_batch,
    usable_cpus,
    write_dict_dir,
)

REPO = Path(__file__).resolve().parents[1]
PLUGIN_DIR = bt.PLUGIN_DIR
VENV_BIN = Path(sys.executable).parent

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


def system_args(system: str, size: str, qk_length: float = DEFAULT_QK_LENGTH) -> list[str]:
    """:func:`qknorm_model_tools.bf16_timing.system_args` for one of :data:`SYSTEMS`.

    Raises:
        ValueError: ``system`` is not one of :data:`SYSTEMS`.
    """
    if system not in SYSTEMS:
        raise ValueError(f"unknown system {system!r}; known: {SYSTEMS}")
    return bt.system_args(system, size, qk_length)


# ------------------------------------------------------------------ task / models
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
    torch.profiler. ``step()`` trains on ``batch``, ``step(sample)`` on another fairseq batch
    (``net_input`` and ``target``), with the same optimizer.
    """
    from fairseq.criterions.label_smoothed_cross_entropy import label_smoothed_nll_loss

    opt = torch.optim.Adam(model.parameters(), lr=lr, betas=(0.9, 0.98), eps=1e-8)

    def label(name):
        return torch.profiler.record_function(name) if phases else nullcontext()

    def step(sample: Optional[dict] = None) -> float:
        sample = batch if sample is None else sample
        target = sample["target"].view(-1)
        model.train()
        opt.zero_grad(set_to_none=True)
        ctx = (
            torch.autocast("cpu", dtype=autocast_dtype)
            if autocast_dtype is not None
            else nullcontext()
        )
        with ctx, label("## forward"):
            out = model(**sample["net_input"])
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


def paired_per_batch(
    steps: dict[str, Callable], batches: Sequence[dict], warmup: int = 1, start: int = 0
) -> dict[str, list[float]]:
    """Seconds of every system's training step on each batch, the systems side by side.

    Batch ``i`` is trained by every entry of ``steps`` (a :func:`make_train_step` function,
    called as ``step(batch)``) one right after the other, the order rotated by one entry per
    batch (no system always first); so the ``i``-th times of two systems come from the same
    batch and the same few seconds of the machine, and pair up
    (:func:`qknorm_model_tools.bf16_timing.paired_ratios`). Slow drift of a shared machine then
    cancels in each pair, and the spread of the pairs' ratios over many batches is what a
    bootstrap interval sees. ``warmup`` untimed steps per system on the first batch come first;
    ``start`` numbers the first batch (for the rotation) when a run goes on batch by batch.

    Returns:
        ``{name: [seconds of batch 0, batch 1, ...]}``.

    Raises:
        ValueError: no batches or no steps.
    """
    if not batches or not steps:
        raise ValueError("paired_per_batch needs at least one batch and one step function")
    names = list(steps)
    for _ in range(warmup):
        for name in names:
            steps[name](batches[0])
    out: dict[str, list[float]] = {name: [] for name in names}
    for i, batch in enumerate(batches, start):
        for name in names[i % len(names) :] + names[: i % len(names)]:
            t0 = time.perf_counter()
            steps[name](batch)
            out[name].append(time.perf_counter() - t0)
    return out


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
