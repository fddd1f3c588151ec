"""In-process micro-benchmark sections of ``benchmarks.run``: model step, bf16, decode, ...

``model`` (the model-only training step, with the compared ``PAIRS`` and their per-repetition
speed ratios, also used by the e2e sections), ``bf16``, ``decode`` (incremental decoder loop and
SequenceGenerator), ``scaling`` (attention module vs length and batch), ``norms`` (ScaleNorm vs
LayerNorm) and ``memory`` (peak RSS of a training step in a fresh child process). Each section
fills the ``out`` dict it is given.
"""

import gc
import json
import math
import re
import sys
from pathlib import Path
from typing import Optional

import torch

from . import common as c
from . import stats
from .options import AUTHORS_SYSTEM, log


# =================================================================== model-only step
def section_model(a, task, out: dict) -> None:
    """Model-only training steps per size and system, interleaved; times and FLOPs into ``out``."""
    dictionary = task.source_dictionary
    out["flop_formula"] = c.FLOP_FORMULA
    for size in a.sizes:
        log(f"model-only step, size {size}")
        s = c.SIZES[size]
        batch = c.synthetic_batch(dictionary, a.batch, a.src_len, a.tgt_len)
        entries, info = {}, {}
        for system in a.systems:
            model, _ = c.build_model(task, system, size, a.qk_length)
            counts = c.param_counts(model)
            flops = c.train_step_flops(
                counts, s["layers"], s["dim"], len(dictionary), a.batch, a.src_len, a.tgt_len
            )
            entries[system] = c.make_train_step(model, batch, dictionary.pad())
            info[system] = {"params": counts, "flops_per_step": flops}
        mm = c.matmul_entries(a.matmul_sizes)
        for name, (fn, _) in mm.items():
            entries[name] = fn
        times = c.interleaved(
            entries, a.reps, a.warmup, min_time=0.3 if not a.smoke else 0.0, min_of=a.min_of
        )
        peak = {}
        for name, (_, flops) in mm.items():
            peak[name] = {**times[name], "gflops": flops / times[name]["median_s"] / 1e9}
        peak_gflops = max(v["gflops"] for v in peak.values())
        src_tok, tgt_tok = a.batch * a.src_len, a.batch * a.tgt_len
        # per repetition: the best matmul of that repetition is its peak
        peak_per_rep = [
            max(flops / times[name]["samples_s"][r] / 1e9 for name, (_, flops) in mm.items())
            for r in range(a.reps)
        ]
        res = {}
        for system in a.systems:
            t = times[system]["median_s"]
            fl = info[system]["flops_per_step"]["total"]
            fractions = [
                fl / x / 1e9 / pk for x, pk in zip(times[system]["samples_s"], peak_per_rep)
            ]
            res[system] = {
                **times[system],
                **info[system],
                "tokens_per_s": (src_tok + tgt_tok) / t,
                "tgt_tokens_per_s": tgt_tok / t,
                "gflops": fl / t / 1e9,
                "fraction_of_matmul_peak": fl / t / 1e9 / peak_gflops,
                "fraction_of_matmul_peak_stats": stats.ratio_summary(fractions),
            }
        out[size] = {
            "batch": {
                "sentences": a.batch,
                "src_len": a.src_len,
                "tgt_len": a.tgt_len,
                "src_tokens": src_tok,
                "tgt_tokens": tgt_tok,
                "vocab": len(dictionary),
            },
            "systems": res,
            "matmul_peak": peak,
            "matmul_peak_gflops": peak_gflops,
            "ratios": speed_ratios({k: v["median_s"] for k, v in res.items()}),
            "ratio_stats": paired_speed_stats({k: v["samples_s"] for k, v in res.items()}),
            "matmul_peak_per_rep_gflops": peak_per_rep,
        }
        del entries
        gc.collect()


#: the compared pairs (A, B): ``A/B`` > 1 means A is faster
PAIRS = [
    ("qknorm_paper", "stock"),
    ("twt", "stock"),
    ("prenorm_fixnorm_layernorm", "stock"),
    ("qknorm_paper", "prenorm_fixnorm_layernorm"),
    ("twt", "prenorm_fixnorm_layernorm"),
    ("qknorm_paper", "twt"),
]


def speed_ratios(times: dict[str, float]) -> dict[str, float]:
    """Throughput ratios ``A/B = time_B / time_A`` (> 1: A is faster) for the pairs of interest."""
    return {
        f"{x}/{y}": times[y] / times[x]
        for x, y in PAIRS
        if x in times and y in times and times[x] > 0
    }


def paired_speed_stats(
    samples: dict[str, list[Optional[float]]], throughput: bool = False
) -> dict[str, dict]:
    """Per-repetition speed ratios ``A/B`` of every pair in ``PAIRS``.

    With their median, min-max and bootstrap interval (:mod:`benchmarks.stats`).

    ``samples[system][r]``: seconds (or, with ``throughput``, e.g. words/s) of repetition
    ``r``; a repetition where either value is missing (None, a failed run) is left out.
    """
    out = {}
    variants = [(s, "stock") for s in samples if "+" in s]  # SYSTEM+VARIANT vs stock
    variants += [(s, s.split("+")[0]) for s in samples if "+" in s]  # ... vs its base
    if AUTHORS_SYSTEM in samples:  # ours vs the authors' code
        variants += [(s, AUTHORS_SYSTEM) for s in samples if s != AUTHORS_SYSTEM]
    for x, y in PAIRS + variants:
        if x not in samples or y not in samples:
            continue
        pairs = [
            (sx, sy)
            for sx, sy in zip(samples[x], samples[y])
            if sx and sy and math.isfinite(sx) and math.isfinite(sy)
        ]
        if not pairs:
            continue
        sx, sy = zip(*pairs)
        ratios = stats.paired_ratios(sx, sy) if throughput else stats.paired_ratios(sy, sx)
        out[f"{x}/{y}"] = stats.ratio_summary(ratios)
    return out


# ============================================================================ bf16
def section_bf16(a, task, out: dict) -> None:
    """The model-only step under bf16 CPU autocast against fp32, per system; into ``out``."""
    size = a.bf16_size
    log(f"bf16 autocast step, size {size}")
    dictionary = task.source_dictionary
    batch = c.synthetic_batch(dictionary, a.batch, a.src_len, a.tgt_len)
    entries, status = {}, {}
    for system in a.systems:
        for kind, dtype in (("fp32", None), ("bf16", torch.bfloat16)):
            model, _ = c.build_model(task, system, size, a.qk_length)
            step = c.make_train_step(model, batch, dictionary.pad(), autocast_dtype=dtype)
            name = f"{system}:{kind}"
            try:
                loss = step()
                ok = math.isfinite(loss) and all(
                    torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None
                )
                status[name] = {"works": bool(ok), "loss": loss}
                entries[name] = step
            except Exception as exc:  # report what fails, do not fix it
                status[name] = {"works": False, "error": f"{type(exc).__name__}: {exc}"[:500]}
    times = c.interleaved(entries, a.bf16_reps, warmup=0)  # the check step warmed up
    res = {}
    for system in a.systems:
        f32, b16 = f"{system}:fp32", f"{system}:bf16"
        r = {
            "fp32": {**status[f32], **times.get(f32, {})},
            "bf16": {**status[b16], **times.get(b16, {})},
        }
        if f32 in times and b16 in times:
            r["bf16_speedup"] = times[f32]["median_s"] / times[b16]["median_s"]
        res[system] = r
    out.update(
        {
            "size": size,
            "systems": res,
            "cpu_native_bf16": any(f in c.cpu_flags() for f in ("avx512_bf16", "amx_bf16")),
        }
    )


# ========================================================================== decode
def section_decode(a, task, out: dict) -> None:
    """In-process decoding per system: incremental loop and SequenceGenerator; into ``out``."""
    from fairseq.sequence_generator import SequenceGenerator

    size = a.decode_size
    log(f"in-process decoding, size {size}")
    dictionary = task.target_dictionary
    B, beam, steps = a.decode_bsz, a.beam, a.decode_steps
    batch = c.synthetic_batch(dictionary, B, a.src_len, a.tgt_len, seed=1)
    src_tokens = batch["net_input"]["src_tokens"]
    src_lengths = batch["net_input"]["src_lengths"]
    sample = {"net_input": {"src_tokens": src_tokens, "src_lengths": src_lengths}}
    entries, gen_tokens = {}, {}
    for system in a.systems:
        model, _ = c.build_model(task, system, size, a.qk_length)
        model.eval()
        entries[f"{system}:incremental"] = _incremental_loop(
            model, src_tokens, src_lengths, beam, steps, dictionary.eos()
        )
        gen = SequenceGenerator(
            [model], dictionary, beam_size=beam, max_len_a=0, max_len_b=steps, min_len=steps
        )

        def run_gen(gen=gen, system=system, model=model):
            with torch.no_grad():
                hyps = gen.generate([model], sample)
            gen_tokens[system] = sum(len(h[0]["tokens"]) for h in hyps)

        entries[f"{system}:generator"] = run_gen
    if "qknorm_paper" in a.systems and not a.targets:
        # beam-shared encoder-decoder attention (keys stored once per sentence); fairseq's
        # TransformerModel has no set_beam_size, so fairseq-generate never enables it
        model, _ = c.build_model(task, "qknorm_paper", size, a.qk_length)
        model.eval()
        model.decoder.set_beam_size(beam)
        entries["qknorm_paper_beamshared:incremental"] = _incremental_loop(
            model, src_tokens, src_lengths, beam, steps, dictionary.eos()
        )
    times = c.interleaved(entries, a.decode_reps, a.warmup, min_of=a.min_of)
    res = {}
    for name, t in times.items():
        system, kind = name.split(":")
        tokens = B * steps if kind == "incremental" else gen_tokens[system]
        res.setdefault(system, {})[kind] = {
            **t,
            "sentences_per_s": B / t["median_s"],
            "tokens_per_s": tokens / t["median_s"],
            "generated_tokens": tokens,
        }
    out.update(
        {
            "size": size,
            "sentences": B,
            "beam": beam,
            "steps": steps,
            "src_len": a.src_len,
            "note": (
                "identical random inputs, fixed length (incremental: exactly `steps` decoder "
                "steps on B*beam rows with a beam reorder each step; generator: fairseq "
                "SequenceGenerator with min_len = max_len = steps), untrained weights: "
                "cost per step does not depend on quality"
            ),
            "systems": res,
            "ratios_incremental": speed_ratios(
                {s: v["incremental"]["median_s"] for s, v in res.items() if "incremental" in v}
            ),
            "ratios_generator": speed_ratios(
                {s: v["generator"]["median_s"] for s, v in res.items() if "generator" in v}
            ),
            "ratio_stats_incremental": paired_speed_stats(
                {s: v["incremental"]["samples_s"] for s, v in res.items() if "incremental" in v}
            ),
            "ratio_stats_generator": paired_speed_stats(
                {s: v["generator"]["samples_s"] for s, v in res.items() if "generator" in v}
            ),
        }
    )


def _incremental_loop(model, src_tokens, src_lengths, beam, steps, eos):
    """Encoder once, then ``steps`` incremental decoder steps over ``B*beam`` rows.

    A greedy token per row and a within-sentence beam reorder per step (as beam search).
    """
    B = src_tokens.size(0)
    expand = torch.arange(B).repeat_interleave(beam)
    perm = torch.arange(B * beam).view(B, beam).roll(1, dims=1).reshape(-1)

    def run():
        with torch.no_grad():
            enc = model.encoder(src_tokens, src_lengths=src_lengths)
            enc = model.encoder.reorder_encoder_out(enc, expand)
            tokens = torch.full((B * beam, steps + 1), eos, dtype=torch.long)
            state: dict[str, dict[str, Optional[torch.Tensor]]] = {}
            for t in range(steps):
                dec = model.decoder(tokens[:, : t + 1], encoder_out=enc, incremental_state=state)
                lprobs = model.get_normalized_probs((dec[0][:, -1:, :], dec[1]), log_probs=True)
                tokens[:, t + 1] = lprobs[:, -1].argmax(-1)
                model.decoder.reorder_incremental_state_scripting(state, perm)
                enc = model.encoder.reorder_encoder_out(enc, perm)
        return tokens

    return run


# ========================================================================= scaling
def section_scaling(a, out: dict) -> None:
    """Attention forward+backward against length and batch, per attention variant; into ``out``."""
    from fairseq.modules import MultiheadAttention

    from fairseq_qknorm.modules import QKNormMultiheadAttention, qk_norm_initial_scale

    dim, heads = a.scaling_dim, a.scaling_heads
    g0 = qk_norm_initial_scale(length=a.qk_length)
    torch.manual_seed(0)
    stock = MultiheadAttention(dim, heads, self_attention=True)
    mods = {}
    for qk in (True, False):
        for fused in (True, False):
            m = QKNormMultiheadAttention(
                dim, heads, self_attention=True, qk_norm=qk, qk_norm_scale=g0 if qk else None
            )
            m.load_state_dict(stock.state_dict(), strict=False)
            m.use_fused = fused
            mods[f"{'qknorm' if qk else 'dotprod'}_{'fused' if fused else 'explicit'}"] = m
    mods["stock"] = stock
    for m in mods.values():
        m.train()
    rows = []
    for bsz in a.scaling_bsz:
        for T in a.scaling_lens:
            log(f"attention scaling B={bsz} T={T}")
            g = torch.Generator().manual_seed(T * 1000 + bsz)
            x = torch.randn(T, bsz, dim, generator=g).requires_grad_()
            grad = torch.randn(T, bsz, dim, generator=g)
            pad = torch.zeros(bsz, T, dtype=torch.bool)
            pad[1::2, T - max(1, T // 8) :] = True  # every other sentence is 1/8 padding
            entries = {}
            for name, m in mods.items():

                def fn(m=m, x=x, pad=pad, grad=grad):
                    m.zero_grad(set_to_none=True)
                    x.grad = None
                    y, _ = m(x, x, x, key_padding_mask=pad, need_weights=False)
                    y.backward(grad)

                entries[name] = fn
            times = c.interleaved(
                entries, a.scaling_reps, a.warmup, min_time=0.0 if a.smoke else 0.1
            )
            row = {
                "bsz": bsz,
                "len": T,
                "ms": {k: v["median_s"] * 1e3 for k, v in times.items()},
                "samples_s": {k: v["samples_s"] for k, v in times.items()},
            }
            st = times["stock"]["median_s"]
            row["ratio_vs_stock"] = {k: st / v["median_s"] for k, v in times.items()}
            row["qknorm_vs_dotprod_fused"] = (
                times["dotprod_fused"]["median_s"] / times["qknorm_fused"]["median_s"]
            )
            row["fused_vs_explicit_qknorm"] = (
                times["qknorm_explicit"]["median_s"] / times["qknorm_fused"]["median_s"]
            )
            rows.append(row)
    # growth: time ratio between consecutive lengths (2x length -> x growth)
    for bsz in a.scaling_bsz:
        sel = [r for r in rows if r["bsz"] == bsz]
        for prev, cur in zip(sel, sel[1:]):
            cur["growth_vs_prev_len"] = {k: cur["ms"][k] / prev["ms"][k] for k in cur["ms"]}
    out.update(
        {
            "dim": dim,
            "heads": heads,
            "mask": "key padding (every other row 1/8 padded)",
            "what": "self-attention module forward+backward, training mode, dropout 0",
            "rows": rows,
        }
    )


# =========================================================================== norms
def section_norms(a, out: dict) -> None:
    """ScaleNorm against LayerNorm (and the QKNorm query scaling) forward+backward; into ``out``."""
    import torch.nn.functional as F
    from fairseq.modules import LayerNorm

    from fairseq_qknorm.modules import ScaleNorm
    from fairseq_qknorm.modules.qknorm_attention import qk_scaled_queries

    from . import candidates as cand

    dim = c.SIZES[a.sizes[0]]["dim"] if a.smoke else 512
    ln, sn = LayerNorm(dim), ScaleNorm(dim)
    g = torch.nn.Parameter(torch.tensor(math.sqrt(dim)))

    def make(fn, x, grad):
        def run():
            x.grad = None
            fn(x).backward(grad)

        return run

    min_time = 0.0 if a.smoke else 0.1
    rows = []
    for n in a.norm_rows:
        log(f"norms rows={n}")
        x = torch.randn(n, dim).requires_grad_()
        grad = torch.randn(n, dim)
        entries = {
            "layernorm": make(ln, x, grad),
            "scalenorm": make(sn, x, grad),
            # the previous plain-autograd ScaleNorm (benchmarks/candidates.py): same function
            "scalenorm_autograd": make(
                lambda t: cand.scale_norm_autograd(t, sn.scale, sn.eps), x, grad
            ),
            "scalenorm_via_rms_norm": make(
                lambda t: F.rms_norm(t, (dim,), eps=1e-10 / dim) * (g / math.sqrt(dim)), x, grad
            ),
        }
        times = c.interleaved(entries, max(a.reps, 3), a.warmup, min_time=min_time)
        ln_t = times["layernorm"]["median_s"]
        rows.append(
            {
                "rows": n,
                "dim": dim,
                "ratio_stats": {
                    "scalenorm/layernorm": stats.ratio_summary(
                        stats.paired_ratios(
                            times["layernorm"]["samples_s"], times["scalenorm"]["samples_s"]
                        )
                    )
                },
                "ms": {k: v["median_s"] * 1e3 for k, v in times.items()},
                "scalenorm/layernorm_speed": ln_t / times["scalenorm"]["median_s"],
                "autograd/layernorm_speed": ln_t / times["scalenorm_autograd"]["median_s"],
                "scalenorm/autograd_speed": times["scalenorm_autograd"]["median_s"]
                / times["scalenorm"]["median_s"],
                "rms_candidate/layernorm_speed": ln_t / times["scalenorm_via_rms_norm"]["median_s"],
            }
        )
    # QKNorm's query scaling: F.normalize then * g (today) vs g folded into 1/||q||
    s = c.SIZES[a.sizes[0]]
    heads = int(s["heads"])
    shape = (a.batch, heads, a.tgt_len, int(s["dim"]) // heads)
    q = torch.randn(*shape).requires_grad_()
    qgrad = torch.randn(*shape)
    gq = torch.nn.Parameter(torch.tensor(13.0))
    entries = {
        "normalize_then_scale": make(lambda t: cand.qk_normalize_then_scale(t, gq), q, qgrad),
        "scale_folded": make(lambda t: qk_scaled_queries(t, gq), q, qgrad),
    }
    times = c.interleaved(entries, max(a.reps, 3), a.warmup, min_time=min_time)
    qk = {
        "shape": list(shape),
        "ms": {k: v["median_s"] * 1e3 for k, v in times.items()},
        "folded/previous_speed": times["normalize_then_scale"]["median_s"]
        / times["scale_folded"]["median_s"],
    }
    out.update(
        {"what": "forward+backward of one norm module on (rows, dim)", "rows": rows, "qk_scale": qk}
    )


# ========================================================================== memory
def section_memory(a, work: Path, out: dict) -> None:
    """Peak RSS of a training step, one fresh :mod:`benchmarks.memory_child` per system."""
    size = a.sizes[0]
    for system in a.systems:
        log(f"memory child {system} ({size})")
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.memory_child",
            "--system",
            system,
            "--size",
            size,
            "--batch",
            a.batch,
            "--src-len",
            a.src_len,
            "--tgt-len",
            a.tgt_len,
            "--vocab",
            a.vocab,
            "--threads",
            a.threads,
            "--qk-length",
            a.qk_length,
        ]
        r = c.run_with_rusage(cmd, c.cli_env(a.threads), work / f"memory_{system}.log")
        m = re.search(r"MEMORY_JSON (\{.*\})", r["output"])
        entry = {
            "rc": r["rc"],
            "peak_rss_mib": r["peak_rss_mib"],
            "ru_maxrss_mib": r["peak_rss_mib"],
        }
        if m:
            entry.update(json.loads(m.group(1)))
            if entry.get("vm_hwm_mib"):
                entry["peak_rss_mib"] = entry["vm_hwm_mib"]
            entry["training_increase_mib"] = entry["peak_rss_mib"] - entry["rss_after_build_mib"]
        else:
            entry["error"] = r["output"][-1500:]
        out[system] = entry
    out["size"] = size
    out["what"] = (
        "peak RSS (the child's VmHWM; ru_maxrss agrees) of a fresh process that "
        "imports fairseq, builds the model and runs 2 training steps on the "
        "synthetic batch; training_increase = peak - RSS after building the model"
    )
