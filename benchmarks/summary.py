"""Summary of ``benchmarks.run``: number formatting, the targets' verdicts, the Markdown report.

:func:`targets` reads the issue's targets off the results (with :func:`e2e_from_batches`, QKNorm
vs stock end to end from the batches section), :func:`markdown` writes the report that
``benchmarks.run`` prints and saves next to its JSON.
"""

import math
from typing import Optional

from . import common as c
from . import stats
from .options import AUTHORS_SYSTEM


# ========================================================================= summary
def fmt(x, nd=2, pct=False):
    """``x`` with ``nd`` decimals (or as a percentage), ``n/a`` if missing or not finite."""
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "n/a"
    return f"{100 * x:.0f}%" if pct else f"{x:.{nd}f}"


def fmt_spread(summary: Optional[dict], nd: int = 3, pct: bool = False) -> str:
    """``median [min-max]`` of a :func:`benchmarks.stats.ratio_summary`."""
    if not summary:
        return "n/a"
    return (
        f"{fmt(summary['median'], nd, pct)} [{fmt(summary['min'], nd, pct)}-"
        f"{fmt(summary['max'], nd, pct)}]"
    )


def ratio_line(title: str, ratio_stats: dict[str, dict]) -> str:
    """One report line: ``title`` and each ratio's ``median [min-max]``.

    The number of paired repetitions once, or after each ratio where they differ.
    """
    if not ratio_stats:
        return f"{title}: n/a"
    ns = {v["n"] for v in ratio_stats.values()}
    if len(ns) == 1:
        return f"{title} (median [min-max] of {ns.pop()} paired repetitions): " + ", ".join(
            f"{k} {fmt_spread(v)}" for k, v in ratio_stats.items()
        )
    return f"{title} (median [min-max] of the paired repetitions): " + ", ".join(
        f"{k} {fmt_spread(v)} (n = {v['n']})" for k, v in ratio_stats.items()
    )


def targets(res: dict) -> list[dict]:
    """The targets evaluated on this run.

    Each with its per-repetition spread and verdict
    (:func:`benchmarks.stats.target_entry`): issue 14's "QKNorm at no cost" first, then
    the earlier ones (ScaleNorm vs LayerNorm, end-to-end vs model-only).
    """
    T = stats.target_entry
    t = []
    model = res.get("model", {})
    sized = {k: v for k, v in model.items() if isinstance(v, dict) and "systems" in v}
    for size, v in sized.items():
        t.append(
            T(
                f"QKNorm model-only training step >= 1.00x stock (`{size}`)",
                v["ratio_stats"].get("qknorm_paper/stock"),
                1.0,
            )
        )
    fb = res.get("batches", {})
    if fb.get("systems"):
        seq = fb.get("sequential")
        pair = fb["ratio_stats"].get("qknorm_paper/stock")
        looks = (  # the interval's own level (95% in records made before the looks)
            f"; group-sequential, looks at {seq['looks']}, "
            f"{100 * pair.get('confidence', stats.CONFIDENCE):.2f}% intervals"
            if seq and pair
            else ""
        )
        t.append(
            T(
                f"QKNorm model-only training step >= 1.00x stock on fairseq's own batches "
                f"(`{fb['size']}`, {fb['batches']} batches, paired per batch{looks})",
                pair,
                1.0,
            )
        )
    e2e = res.get("e2e", {})
    if e2e.get("systems"):
        t.append(
            T(
                f"QKNorm end-to-end fairseq-train >= 1.00x stock (`{e2e['size']}`, wps)",
                e2e["ratio_stats"].get("qknorm_paper/stock"),
                1.0,
            )
        )
        combined = e2e_from_batches(fb, e2e)
        if combined:
            t.append(
                T(
                    f"QKNorm end-to-end fairseq-train >= 1.00x stock (`{e2e['size']}`: the model "
                    "step on fairseq's batches paired per batch x the e2e rounds' model-step "
                    f"share ratio {combined['share_ratio']:.4f})",
                    combined,
                    1.0,
                )
            )
    dec = res.get("decode", {})
    if dec.get("systems"):
        t.append(
            T(
                "QKNorm decoding >= 1.00x stock (SequenceGenerator)",
                dec["ratio_stats_generator"].get("qknorm_paper/stock"),
                1.0,
            )
        )
        t.append(
            T(
                "QKNorm decoding >= 1.00x stock (raw incremental loop)",
                dec["ratio_stats_incremental"].get("qknorm_paper/stock"),
                1.0,
            )
        )
    small = sized.get("small") or next(iter(sized.values()), None)
    if small and "qknorm_paper" in small["systems"]:
        size = next(k for k, v in sized.items() if v is small)
        t.append(
            T(
                f"QKNorm model-only >= 70% of the same run's fp32 matmul peak (`{size}`)",
                small["systems"]["qknorm_paper"]["fraction_of_matmul_peak_stats"],
                0.70,
            )
        )
    # earlier targets, where this run measured them
    if small and "twt/prenorm_fixnorm_layernorm" in small["ratio_stats"]:
        t.append(
            T(
                "ScaleNorm >= 1.03x LayerNorm (model-only twt/prenorm_fixnorm_layernorm)",
                small["ratio_stats"]["twt/prenorm_fixnorm_layernorm"],
                1.03,
            )
        )
    norms = res.get("norms", {}).get("rows")
    if norms:
        t.append(
            T(
                f"ScaleNorm >= 1.03x LayerNorm (module fwd+bwd, {norms[0]['rows']} rows)",
                norms[0].get("ratio_stats", {}).get("scalenorm/layernorm"),
                1.03,
            )
        )
    gen = res.get("generate", {})
    if gen.get("ratios_tokens_per_s", {}).get("qknorm_paper/stock") is not None:
        one = gen["ratios_tokens_per_s"]["qknorm_paper/stock"]  # one run per system
        t.append(
            T(
                "QKNorm decoding >= 1.00x stock (fairseq-generate tokens/s, one run)",
                stats.ratio_summary([one]),
                1.0,
            )
        )
    if e2e.get("systems"):
        size = e2e["size"]
        mo = model.get(size, {}).get("systems", {})
        for system, v in e2e["systems"].items():
            per_round = [x["steady_wps"] for x in v["runs"] if x.get("steady_wps")]
            if per_round and system in mo:
                model_tps = mo[system]["tgt_tokens_per_s"]
                b = model[size]["batch"]
                t.append(
                    T(
                        f"end-to-end within 15% of model-only ({system}, `{size}`: fairseq "
                        "wps / model-only target tokens/s of its synthetic "
                        f"{b['sentences']} x {b['src_len']}/{b['tgt_len']} batch without "
                        "padding, spread over e2e rounds)",
                        stats.ratio_summary([w / model_tps for w in per_round]),
                        0.85,
                    )
                )
        for system, v in e2e["systems"].items():
            shares = [x["model_step_share"] for x in v["runs"] if x.get("model_step_share")]
            if shares:
                t.append(
                    T(
                        f"end-to-end within 15% of model-only on the same batches ({system}, "
                        f"`{size}`: model step's share of fairseq-train's wall time per update, "
                        "spread over e2e rounds)",
                        stats.ratio_summary(shares),
                        0.85,
                    )
                )
        for variant in [s for s in e2e["systems"] if "+" in s]:
            if f"{variant}/stock" in e2e["ratio_stats"]:
                t.append(
                    T(
                        f"end-to-end {variant} >= 1.4x stock fairseq-train with its default "
                        f"batching (`{size}`, wps = real target tokens/s)",
                        e2e["ratio_stats"][f"{variant}/stock"],
                        1.4,
                    )
                )
        for system in e2e["systems"]:
            if system.startswith("qknorm_paper") and AUTHORS_SYSTEM in e2e["systems"]:
                t.append(
                    T(
                        f"end-to-end {system} >= 1.5x the QKNorm authors' code (`{size}`, "
                        "real target tokens/s, same data and threads)",
                        e2e["ratio_stats"].get(f"{system}/{AUTHORS_SYSTEM}"),
                        1.5,
                    )
                )
        if "twt/prenorm_fixnorm_layernorm" in e2e["ratio_stats"]:
            t.append(
                T(
                    "ScaleNorm >= 1.03x LayerNorm end to end (twt/prenorm_fixnorm_layernorm wps)",
                    e2e["ratio_stats"]["twt/prenorm_fixnorm_layernorm"],
                    1.03,
                )
            )
    return t


def e2e_from_batches(batches: dict, e2e: dict) -> Optional[dict]:
    """QKNorm / stock end to end, from the paired model steps and the model step's share.

    An update of ``fairseq-train`` takes (model step) / (model step's share of the update), so
    its speed ratio is the model step's ratio on the same batches times
    ``share_qknorm / share_stock`` (medians over the e2e rounds; they vary by about 0.2%
    between rounds, run F). Each paired per-batch ratio of section ``batches`` is scaled by
    that factor; the summary (:func:`benchmarks.stats.ratio_summary`) adds ``share_ratio``.
    It assumes the harness's step (:func:`benchmarks.common.make_train_step`: torch's Adam, no
    gradient clipping) has the same QKNorm/stock ratio as fairseq-train's model step
    (fairseq's Adam, clipping at 1.0): the optimizer and the clipping are about 2% of a step
    and the same work for both systems of (nearly) equal parameter count.
    None unless both sections measured both systems at the same size.
    """
    pair = (batches.get("ratio_stats") or {}).get("qknorm_paper/stock")
    if not pair or batches.get("size") != e2e.get("size"):
        return None
    share = {}
    for system in ("qknorm_paper", "stock"):
        runs = e2e.get("systems", {}).get(system, {}).get("runs", [])
        values = [x["model_step_share"] for x in runs if x.get("model_step_share")]
        if not values:
            return None
        share[system] = c.median(values)
    k = share["qknorm_paper"] / share["stock"]
    level = {"confidence": pair["confidence"]} if "confidence" in pair else {}
    return {**stats.ratio_summary([v * k for v in pair["values"]], **level), "share_ratio": k}


def markdown(res: dict) -> str:
    """The Markdown summary of a result dict (machine, sections, targets)."""
    m = res["machine"]
    L = [
        f"# fairseq_qknorm benchmark ({m['date_utc']})",
        "",
        f"Machine: {m['cpu_model']} ({m.get('cpu_family_model') or 'family/model unknown'}; "
        f"flags: {', '.join(m['cpu_flags'])}), {m['cpu_count']} CPUs "
        f"({m['cpu_affinity']} usable), torch {m['torch']} with {m['torch_threads']} threads, "
        f"fairseq {m['fairseq']}; load average at start {m['loadavg_start']}, at end "
        f"{res.get('loadavg_end')}.",
        "",
        f"Command: `{res['command']}`",
        "",
    ]
    model = res.get("model", {})
    for size, v in model.items():
        if not isinstance(v, dict) or "systems" not in v:
            continue
        b = v["batch"]
        L += [
            f"## Model-only training step, size `{size}` "
            f"(batch {b['sentences']} x {b['src_len']}/{b['tgt_len']} tokens, vocab {b['vocab']})",
            "",
            "| system | step ms (median) | tokens/s (src+tgt) | GFLOP/s | of matmul peak |"
            " speed vs stock |",
            "|---|---:|---:|---:|---:|---:|",
        ]
        st = v["systems"].get("stock", {}).get("median_s")
        for s, r in v["systems"].items():
            L.append(
                f"| {s} | {1e3 * r['median_s']:.1f} | {r['tokens_per_s']:.0f} | "
                f"{r['gflops']:.1f} | "
                f"{fmt_spread(r.get('fraction_of_matmul_peak_stats'), pct=True)} | "
                f"{fmt(st / r['median_s']) if st else 'n/a'} |"
            )
        L += [
            "",
            "fp32 matmul peak (same interleaved loop): "
            + ", ".join(f"{k}: {p['gflops']:.1f} GFLOP/s" for k, p in v["matmul_peak"].items()),
            ratio_line("Speed ratios", v.get("ratio_stats", {})),
            "",
        ]
    if model.get("flop_formula"):
        L += [f"FLOP count: {model['flop_formula']}.", ""]
    bf = res.get("bf16", {})
    if bf.get("systems"):
        L += [
            f"## bf16 autocast (model-only, size `{bf['size']}`, CPU native bf16: "
            f"{bf['cpu_native_bf16']})",
            "",
            "| system | fp32 ms | bf16 ms | bf16 works | bf16 speedup |",
            "|---|---:|---:|---|---:|",
        ]
        for s, r in bf["systems"].items():
            f32, b16 = r["fp32"], r["bf16"]
            L.append(
                f"| {s} | {fmt(1e3 * f32['median_s'] if 'median_s' in f32 else None, 1)} | "
                f"{fmt(1e3 * b16['median_s'] if 'median_s' in b16 else None, 1)} | "
                f"{b16['works']}{' (' + b16['error'][:80] + ')' if 'error' in b16 else ''} | "
                f"{fmt(r.get('bf16_speedup'))} |"
            )
        L.append("")
    fb = res.get("fairseq_bf16", {})
    if any(isinstance(v, dict) for v in fb.values()):
        L += [
            "fairseq-train `--bf16 --cpu` (2 updates): "
            + "; ".join(
                f"{s}: {'works' if v['works'] else 'fails'}"
                + ("" if v["works"] else f" ({(v.get('error_tail') or ['?'])[-1][:160]})")
                for s, v in fb.items()
                if isinstance(v, dict)
            ),
            "",
        ]
    fb = res.get("batches", {})
    if fb.get("systems"):
        L += [
            f"## Model-only training step on fairseq's own batches, size `{fb['size']}` "
            f"({fb['batches']} batch{'es' if fb['batches'] != 1 else ''} of "
            f"`--max-tokens {fb['max_tokens']}` from "
            f"`{fb['data']}`, {sum(fb['tgt_tokens'])} real target tokens, target padding "
            f"{100 * fb['target_padding']:.1f}%; systems paired per batch)",
            "",
            "| system | batches | step ms (median) | real target tokens/s |",
            "|---|---:|---:|---:|",
        ]
        for s, r in fb["systems"].items():
            L.append(
                f"| {s} | {r.get('batches', fb['batches'])} | {1e3 * r['median_s']:.1f} | "
                f"{r['tgt_tokens_per_s']:.0f} |"
            )
        L += ["", ratio_line("Speed ratios (paired per batch)", fb.get("ratio_stats", {}))]
        seq = fb.get("sequential")
        if seq:
            L.append(
                f"Batches added one at a time until QKNorm/stock's verdict decided: stopped "
                f"({seq['stopped']}) after {seq['n']} batches, {seq['verdict']} (Pocock's "
                f"group-sequential looks at {seq['looks']} batches, "
                f"{100 * seq['confidence']:.2f}% intervals)."
            )
        L.append("")
    dec = res.get("decode", {})
    if dec.get("systems"):
        L += [
            f"## In-process decoding, size `{dec['size']}` ({dec['sentences']} sentences x "
            f"beam {dec['beam']}, {dec['steps']} steps)",
            "",
            "| system | incremental sent/s | incremental tok/s | generator sent/s | "
            "generator tok/s |",
            "|---|---:|---:|---:|---:|",
        ]
        for s, r in dec["systems"].items():
            i, g = r.get("incremental", {}), r.get("generator", {})
            L.append(
                f"| {s} | {fmt(i.get('sentences_per_s'), 1)} | {fmt(i.get('tokens_per_s'), 0)} | "
                f"{fmt(g.get('sentences_per_s'), 1)} | {fmt(g.get('tokens_per_s'), 0)} |"
            )
        L += [
            "",
            ratio_line("Speed ratios, incremental", dec.get("ratio_stats_incremental", {})),
            ratio_line("Speed ratios, generator", dec.get("ratio_stats_generator", {})),
            "",
        ]
    e2e = res.get("e2e", {})
    if e2e.get("systems"):
        L += [
            f"## End-to-end fairseq-train (size `{e2e['size']}`, {e2e['updates']} updates x "
            f"{e2e['rounds']} rounds, {e2e['data']})",
            "",
            "| system | wps (median) | per-run wps | target tokens/batch | model step share "
            "(median) | peak RSS MiB |",
            "|---|---:|---|---:|---:|---:|",
        ]
        for s, r in e2e["systems"].items():
            L.append(
                f"| {s} | {fmt(r['wps_median'], 0)} | "
                f"{', '.join(fmt(x['steady_wps'], 0) for x in r['runs'])} | "
                f"{fmt(r.get('wpb_mean'), 0)} | {fmt(r.get('model_step_share_median'), 3)} | "
                f"{r['peak_rss_mib']:.0f} |"
            )
        failed = [f"{s} {f}" for s, r in e2e["systems"].items() for f in r.get("failed_runs", [])]
        if failed:
            L += ["", "Failed runs (not scored): " + "; ".join(failed)]
        L += ["", ratio_line("Speed ratios (wps, paired by round)", e2e.get("ratio_stats", {})), ""]
    gen = res.get("generate", {})
    if gen.get("systems"):
        L += [
            f"## fairseq-generate (size `{gen['size']}`, {gen['subset_sentences']} test "
            f"sentences, {gen['flags']})",
            "",
            gen["note"] + ".",
            "",
            "| system | sent/s | tok/s | tokens/sentence | peak RSS MiB |",
            "|---|---:|---:|---:|---:|",
        ]
        for s, r in gen["systems"].items():
            L.append(
                f"| {s} | {fmt(r.get('sentences_per_s'), 1)} | {fmt(r.get('tokens_per_s'), 0)} | "
                f"{fmt(r.get('tokens_per_sentence'), 1)} | {fmt(r.get('peak_rss_mib'), 0)} |"
            )
        L += [
            "",
            "Ratios tokens/s: "
            + ", ".join(f"{k} {fmt(x, 3)}" for k, x in gen["ratios_tokens_per_s"].items()),
            "",
        ]
    mem = res.get("memory", {})
    if any(isinstance(v, dict) for v in mem.values()):
        L += [
            f"## Peak memory, training step (size `{mem.get('size')}`)",
            "",
            "| system | peak RSS MiB | RSS after build MiB | training increase MiB |",
            "|---|---:|---:|---:|",
        ]
        for s, r in mem.items():
            if isinstance(r, dict):
                L.append(
                    f"| {s} | {fmt(r.get('peak_rss_mib'), 0)} | "
                    f"{fmt(r.get('rss_after_build_mib'), 0)} | "
                    f"{fmt(r.get('training_increase_mib'), 0)} |"
                )
        L.append("")
    sc = res.get("scaling", {})
    if sc.get("rows"):
        names = list(sc["rows"][0]["ms"])
        L += [
            f"## Attention module fwd+bwd (d {sc['dim']}, {sc['heads']} heads, {sc['mask']}), ms",
            "",
            "| B | T | "
            + " | ".join(names)
            + " | qknorm_paper/stock | fused/explicit (qknorm_paper) |",
            "|---|---|" + "---:|" * (len(names) + 2),
        ]
        for r in sc["rows"]:
            L.append(
                f"| {r['bsz']} | {r['len']} | "
                + " | ".join(f"{r['ms'][n]:.2f}" for n in names)
                + f" | {fmt(r['ratio_vs_stock']['qknorm_fused'], 3)} | "
                f"{fmt(r['fused_vs_explicit_qknorm'], 2)} |"
            )
        L.append("")
    nm = res.get("norms", {})
    if nm.get("rows"):
        L += [
            "## Norm module fwd+bwd, ms",
            "",
            "| rows x dim | LayerNorm | ScaleNorm | ScaleNorm by plain autograd (previous) | "
            "ScaleNorm via F.rms_norm | ScaleNorm/LayerNorm speed | ScaleNorm/previous speed |",
            "|---|---:|---:|---:|---:|---:|---:|",
        ]
        for r in nm["rows"]:
            L.append(
                f"| {r['rows']} x {r['dim']} | {r['ms']['layernorm']:.3f} | "
                f"{r['ms']['scalenorm']:.3f} | {r['ms']['scalenorm_autograd']:.3f} | "
                f"{r['ms']['scalenorm_via_rms_norm']:.3f} | "
                f"{fmt(r['scalenorm/layernorm_speed'], 3)} | "
                f"{fmt(r['scalenorm/autograd_speed'], 3)} |"
            )
        qk = nm.get("qk_scale")
        if qk:
            L += [
                "",
                f"QKNorm query scaling fwd+bwd on {tuple(qk['shape'])}: F.normalize then "
                f"x g (previous) {qk['ms']['normalize_then_scale']:.3f} ms, g folded into "
                f"1/||q|| (plugin) "
                f"{qk['ms']['scale_folded']:.3f} ms (speed {fmt(qk['folded/previous_speed'], 3)})",
            ]
        L.append("")
    tg = res.get("targets", [])
    if tg:
        L += [
            "## Targets",
            "",
            f"Median of the per-repetition ratios, their min-max and the "
            f"{100 * stats.CONFIDENCE:.0f}% percentile-bootstrap interval of the median "
            f"({stats.BOOTSTRAP_RESAMPLES} resamples, seed {stats.BOOTSTRAP_SEED}); verdict "
            "`met` if the interval's lower end >= the threshold, `missed` if its upper end "
            f"< the threshold, else `cannot tell` (at least {stats.MIN_REPETITIONS} "
            "repetitions). Gap = median - threshold.",
            "",
            "| target | median | min-max | bootstrap interval | n | threshold | verdict | gap |",
            "|---|---:|---:|---:|---:|---:|---|---:|",
        ]
        for t in tg:
            if "median" not in t:
                L.append(f"| {t['target']} | n/a | | | | {t['threshold']:g} | {t['verdict']} | |")
                continue
            L.append(
                f"| {t['target']} | {fmt(t['median'], 3)} | {fmt(t['min'], 3)}-"
                f"{fmt(t['max'], 3)} | {fmt(t['ci_low'], 3)}-{fmt(t['ci_high'], 3)} | "
                f"{t['n']} | {t['threshold']:g} | **{t['verdict']}** | {t['gap']:+.3f} |"
            )
        own = [
            (name, sec.get(key, {}).get("qknorm_paper/prenorm_fixnorm_layernorm"))
            for name, sec, key in (
                [
                    (f"model-only `{k}`", v, "ratio_stats")
                    for k, v in model.items()
                    if isinstance(v, dict) and "systems" in v
                ]
                + [
                    ("decoding, generator", dec, "ratio_stats_generator"),
                    ("decoding, incremental", dec, "ratio_stats_incremental"),
                    ("end to end", e2e, "ratio_stats"),
                ]
            )
        ]
        own = [f"{name} {fmt_spread(s_)}" for name, s_ in own if s_]
        if own:
            L += [
                "",
                "QKNorm itself (the QKNorm model vs the same model with dot-product "
                "attention, `qknorm_paper/prenorm_fixnorm_layernorm`, same run): "
                + "; ".join(own)
                + ".",
            ]
        L.append("")
    if res.get("errors"):
        L += (
            ["## Errors", ""]
            + [f"- {k}: {v.splitlines()[-1] if v else ''}" for k, v in res["errors"].items()]
            + [""]
        )
    return "\n".join(L)
