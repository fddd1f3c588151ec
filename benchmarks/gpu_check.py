"""The plan and the report of ``benchmarks/gpu_check.sh`` (one NVIDIA GPU, paper-size gl-en).

``python -m benchmarks.gpu_check plan DATA PLUGIN_DIR --updates N`` prints one measurement a
line, ``NAME<TAB>fairseq-train arguments`` (shell-quoted); ``report LOG_DIR --gpu NAME``
reads every ``NAME.log`` the script wrote and writes ``gpu-check.json`` and ``gpu-check.md``.
torch-free (runs before the environment is known to work).

Measurements (:func:`plan`): systems ``twt``, ``qknorm_paper`` (the ``*_small`` archs: the
papers' gl-en size, 4+4 layers, d 512) and fairseq's ``transformer`` at the same size, each
in fp16 (fairseq's ``--fp16``: fp16 parameters, fp32 master copy) and bf16 (the plugin task's
``--bf16-autocast-cuda``: fp32 parameters, forward + loss under CUDA bf16 autocast; fairseq's
``--bf16`` is TPU-only), with fairseq's batching and ``--batching bucketed``; then bf16 +
bucketed with ``--torch-compile``. Each run: ``--max-tokens 4096`` (the papers' batch), N
updates, no validation, no checkpoint, fairseq's JSON log every 10 updates.

Fraction of peak (:func:`achieved_tflops`): FLOPs per target token ``6 * (N_enc * r + N_dec)
+ 6 * d * V`` (``N_*`` = non-embedding weights ``L * (4 d^2 + 2 d f)`` encoder and ``L * (8
d^2 + 2 d f)`` decoder, biases and norms left out; ``r`` = source/target tokens, 1.0 for
gl-en's BPE; the tied output projection; attention score FLOPs, ~1% at these lengths, left
out: ``benchmarks/README.md``, Formulas) times fairseq's ``wps`` (target tokens/s), over the
dense bf16 tensor-core peak of :data:`BF16_PEAK_TFLOPS`.
"""

import argparse
import json
import math
import shlex
import sys
from pathlib import Path

from qknorm_tools.exits import fail

#: dense (no sparsity) bf16 tensor-core peak, TFLOP/s, by a substring of nvidia-smi's name;
#: from NVIDIA's data sheets (H100/H200: "H100 Tensor Core GPU" and "H200" data sheets, SXM
#: 989.4, PCIe 756; A100 data sheet 312; L40S 362.05; L4 121; A10 125). First match wins.
BF16_PEAK_TFLOPS = (
    ("H200", 989.4),
    ("H100 PCIe", 756.0),
    ("H100 NVL", 835.0),
    ("H100", 989.4),
    ("A100", 312.0),
    ("L40S", 362.05),
    ("L4", 121.0),
    ("A10", 125.0),
)

#: the papers' gl-en size (the ``*_small`` archs; benchmarks/common.py SIZES["small"])
SMALL = {"layers": 4, "dim": 512, "ffn": 2048, "heads": 4, "dropout": 0.4}

SYSTEMS = ("twt", "qknorm_paper", "stock")


def system_args(system: str) -> list:
    """``--task/--arch`` flags of ``system`` at the small size (stock: fairseq's transformer)."""
    if system == "stock":
        size = []
        for side in ("encoder", "decoder"):
            size += [f"--{side}-layers", str(SMALL["layers"]),
                     f"--{side}-embed-dim", str(SMALL["dim"]),
                     f"--{side}-ffn-embed-dim", str(SMALL["ffn"]),
                     f"--{side}-attention-heads", str(SMALL["heads"])]  # fmt: skip
        return ["--arch", "transformer", "--share-all-embeddings", *size,
                "--dropout", str(SMALL["dropout"])]  # fmt: skip
    if system == "twt":
        return ["--arch", "transformer_twt_small"]
    if system == "qknorm_paper":
        return ["--arch", "transformer_qknorm_paper_small", "--qk-norm-length", "92"]
    raise ValueError(f"unknown system {system!r}; known: {SYSTEMS}")


def plan(data: str, plugin: str, updates: int) -> list:
    """``[(name, argv)]`` of the measurements, in the order the script runs them.

    The no-compile grid (3 systems x fp16/bf16 x fairseq/bucketed batching) first, then the
    three bf16 + bucketed runs with ``--torch-compile``. Names: ``SYSTEM-PREC-BATCHING[-compile]``.
    """
    common = [data, "--user-dir", plugin, "--task", "translation_word_dropout",
              "--source-lang", "gl", "--target-lang", "en",
              "--optimizer", "adam", "--adam-betas", "(0.9,0.98)", "--clip-norm", "1.0",
              "--lr", "1e-3", "--lr-scheduler", "inverse_sqrt", "--warmup-updates", "4000",
              "--warmup-init-lr", "1e-7", "--criterion", "label_smoothed_cross_entropy",
              "--label-smoothing", "0.1", "--max-tokens", "4096", "--max-update", str(updates),
              "--disable-validation", "--no-save", "--log-format", "json",
              "--log-interval", "10", "--seed", "1", "--num-workers", "2"]  # fmt: skip
    prec = {"fp16": ["--fp16"], "bf16": ["--bf16-autocast-cuda"]}
    out = []
    for batching in ("fairseq", "bucketed"):
        for p in ("fp16", "bf16"):
            for system in SYSTEMS:
                argv = [*common, *system_args(system), *prec[p], "--batching", batching]
                out.append((f"{system}-{p}-{batching}", argv))
    for system in SYSTEMS:
        argv = [*common, *system_args(system), *prec["bf16"], "--batching", "bucketed",
                "--torch-compile"]  # fmt: skip
        out.append((f"{system}-bf16-bucketed-compile", argv))
    return out


def flops_per_target_token(vocab: int, size: dict = SMALL, src_per_tgt: float = 1.0) -> float:
    """Training FLOPs per target token (see the module docstring for the formula)."""
    d, f, L = size["dim"], size["ffn"], size["layers"]
    n_enc = L * (4 * d * d + 2 * d * f)
    n_dec = L * (8 * d * d + 2 * d * f)
    return 6.0 * (n_enc * src_per_tgt + n_dec) + 6.0 * d * vocab


def peak_tflops(gpu: str):
    """Dense bf16 peak of ``gpu`` (nvidia-smi name) from :data:`BF16_PEAK_TFLOPS`, or None."""
    for key, peak in BF16_PEAK_TFLOPS:
        if key.lower() in gpu.lower():
            return peak
    return None


def achieved_tflops(wps: float, vocab: int) -> float:
    """TFLOP/s achieved at ``wps`` target tokens/s."""
    return wps * flops_per_target_token(vocab) / 1e12


def parse_log(text: str) -> dict:
    """Parse fairseq ``--log-format json`` train_inner lines and the launcher's peak-memory line.

    Returns ``wps`` (median of the logged intervals after the first, the warm-up), ``losses``
    (every logged train loss), ``updates`` (last ``num_updates``), ``peak_mem_gib`` (from
    ``benchmarks.gpu_train``'s ``peak_cuda_memory_gib=X`` line) and ``compile_s`` (sum of the
    plugin's ``torch.compile: ... in a step of X s`` lines).
    """
    wps, losses, updates, peak, compile_s = [], [], 0, None, 0.0
    for line in text.splitlines():
        if "peak_cuda_memory_gib=" in line:
            peak = float(line.split("peak_cuda_memory_gib=")[1].split()[0])
        if "torch.compile: update" in line and "in a step of" in line:
            compile_s += float(line.split("in a step of")[1].split()[0])
        start = line.find("{")
        if start < 0 or '"wps"' not in line:
            continue
        try:
            rec = json.loads(line[start:])
        except json.JSONDecodeError:
            continue
        wps.append(float(rec["wps"]))
        losses.append(float(rec["loss"]))
        updates = max(updates, int(float(rec.get("num_updates", 0))))
    steady = wps[1:] or wps
    med = sorted(steady)[len(steady) // 2] if steady else None
    return {"wps": med, "losses": losses, "updates": updates, "peak_mem_gib": peak,
            "compile_s": compile_s}  # fmt: skip


def report(log_dir: Path, gpu: str, vocab: int, updates: int) -> dict:
    """Read ``log_dir/NAME.log`` of every planned run; write gpu-check.{json,md}; return it."""
    peak = peak_tflops(gpu)
    rows = []
    for name, _argv in plan("DATA", "PLUGIN", updates):
        log = log_dir / f"{name}.log"
        status = (
            (log_dir / f"{name}.status").read_text().strip()
            if (log_dir / f"{name}.status").exists()
            else "not run"
        )
        r = {"name": name, "status": status}
        if log.exists():
            r.update(parse_log(log.read_text(errors="replace")))
            if r.get("wps"):
                tf = achieved_tflops(r["wps"], vocab)
                r["tflops"] = tf
                r["fraction_of_bf16_peak"] = tf / peak if peak else None
            r["loss_finite"] = bool(r["losses"]) and all(math.isfinite(x) for x in r["losses"])
        rows.append(r)
    out = {"gpu": gpu, "bf16_peak_tflops": peak, "updates_per_run": updates, "vocab": vocab,
           "flops_per_target_token": flops_per_target_token(vocab), "runs": rows}  # fmt: skip
    (log_dir / "gpu-check.json").write_text(json.dumps(out, indent=2) + "\n")
    lines = [f"# GPU check: {gpu}", "",
             f"Paper-size gl-en (4+4, d 512), --max-tokens 4096, {updates} updates per run; "
             f"bf16 peak {peak} TFLOP/s (dense, NVIDIA data sheet).", "",
             "| run | status | target tok/s | TFLOP/s | of bf16 peak | peak mem GiB | "
             "compile s | last loss | finite |",
             "|---|---|---:|---:|---:|---:|---:|---:|---|"]  # fmt: skip
    for r in rows:

        def f(x, fmt):
            return fmt.format(x) if isinstance(x, (int, float)) else "-"

        last = r["losses"][-1] if r.get("losses") else None
        lines.append(
            f"| {r['name']} | {r['status']} | {f(r.get('wps'), '{:.0f}')} | "
            f"{f(r.get('tflops'), '{:.1f}')} | {f(r.get('fraction_of_bf16_peak'), '{:.1%}')} | "
            f"{f(r.get('peak_mem_gib'), '{:.2f}')} | {f(r.get('compile_s'), '{:.0f}')} | "
            f"{f(last, '{:.3f}')} | {r.get('loss_finite', '-')} |"
        )
    (log_dir / "gpu-check.md").write_text("\n".join(lines) + "\n")
    return out


def main(argv=None) -> int:
    """``plan`` or ``report`` (module docstring); exit status as :mod:`qknorm_tools.exits`."""
    p = argparse.ArgumentParser(description="plan and report of benchmarks/gpu_check.sh")
    sub = p.add_subparsers(dest="cmd", required=True)
    pl = sub.add_parser("plan")
    pl.add_argument("data")
    pl.add_argument("plugin")
    pl.add_argument("--updates", type=int, default=100)
    rp = sub.add_parser("report")
    rp.add_argument("log_dir", type=Path)
    rp.add_argument("--gpu", required=True)
    rp.add_argument("--vocab", type=int, required=True)
    rp.add_argument("--updates", type=int, default=100)
    a = p.parse_args(argv)
    if a.cmd == "plan":
        for name, args in plan(a.data, a.plugin, a.updates):
            print(f"{name}\t{shlex.join(args)}")
    else:
        try:
            report(a.log_dir, a.gpu, a.vocab, a.updates)
        except (OSError, ValueError) as exc:  # a missing or unreadable log directory
            return fail(exc)
        print(a.log_dir / "gpu-check.md")
    return 0


if __name__ == "__main__":
    sys.exit(main())
