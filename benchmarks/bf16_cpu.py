r"""bf16 autocast on CPU (``--task translation_word_dropout --bf16-autocast``) against fp32.

    python -m benchmarks.bf16_cpu [--sections model,e2e] [--systems twt,qknorm_paper] [--reps 7]
                                  [--threads N] [--e2e-data DIR] [--work-dir DIR] [--out JSON]

One command, one process, entries interleaved (fp32, bf16, fp32, bf16, ...) so that machine
drift hits both alike:

* ``model``: the cpu-proxy model (3+3 layers, d 256, FFN 1024, 4 heads, dropout 0.3, the
  ``*_proxy`` archs) on one synthetic batch of ``--batch`` x ``--len`` tokens per side
  (default 146 x 28 = 4,088, a full ``--max-tokens 4096`` batch without padding): one training
  step through the plugin task's own ``train_step`` (fairseq's label-smoothed criterion and
  Adam), fp32 vs ``--bf16-autocast``. ``--reps`` timed repetitions after one warm-up round;
  the median step time of each, and the speed-up as the ratio of the medians with the
  min-max of the per-repetition ratios (fp32 and bf16 of one repetition run back to back).
  A third entry, ``bf16_explicit_attention``, runs bf16 with the attention modules' explicit
  matmul/softmax path (``use_fused = False``) instead of torch's fused
  ``scaled_dot_product_attention``, whose CPU kernel is slower in bf16 than in fp32 at these
  short lengths (torch 2.13): what a model-side dispatch by dtype would gain.
* ``e2e``: ``fairseq-train`` words/s (fairseq's ``wps``, target tokens/s; median of the
  logged intervals after the first) on real gl-en with the cpu-proxy training settings
  (``benchmarks.e2e.train_cmd``: 4,096-token batches, validation off), fp32 and
  ``--bf16-autocast`` alternating, ``--e2e-rounds`` rounds. Data: ``--e2e-data``, else
  ``data/bin/gl-en`` of the repository, else built from the raw corpus
  (``scripts/prepare_data.sh``, ``bpe.sh``, ``binarize.sh``, about 20 s) under ``--work-dir``.

The CPU model, its bf16 features, the native-bf16 verdict of the task's detector and the load
average at start and end are printed and stored. Without native bf16 the bf16 entries are
skipped (they would run about 20x slower) unless ``--allow-emulated``. Writes
``benchmarks/results/bf16-cpu-DATE.{json,md}`` (``--out``) and prints the Markdown.

Quality at equal updates and the end-to-end speed at a real profile are not measured here but
with the pipeline (data from ``scripts/prepare_data.sh gl-en && scripts/bpe.sh gl-en &&
scripts/binarize.sh gl-en``; docs/bf16.md has the figures)::

    for s in 1 2 3; do  # runs .../twt/seedS (fp32) and .../twt/seedS-bf16
        for b in "" --bf16-autocast; do
            scripts/train.sh gl-en twt --profile cpu-proxy-fast --seed $s $b
            scripts/evaluate.sh gl-en twt --profile cpu-proxy-fast --seed $s $b  # fp32 decoding
        done
    done

then compare ``test.score.json`` (BLEU), ``train.json`` (dev loss, training seconds) of each
``seedS`` with its ``seedS-bf16`` against the seed-to-seed spread. The bf16 run's dev loss is
computed under autocast; its fp32 dev loss: ``fairseq-validate data/bin/gl-en --user-dir
fairseq_qknorm --task translation --cpu --path .../seedS-bf16/checkpoints/checkpoint_last.pt
--max-tokens 4096 --required-batch-size-multiple 1``.
"""

import argparse
import datetime
import json
import subprocess
import sys
import tempfile
import time
import traceback
from contextlib import nullcontext
from pathlib import Path
from types import SimpleNamespace

import torch

from qknorm_model_tools import bf16_timing as bt
from qknorm_model_tools.bf16_timing import EXPLICIT, MODES, speedup
from qknorm_tools.committed import portable_paths

from . import common as c
from . import e2e, options, summary

SECTIONS = ("model", "e2e")


def parse_args(argv=None):
    """Command-line options of ``python -m benchmarks.bf16_cpu``."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.bf16_cpu", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--sections",
        type=options.csv(),
        default=list(SECTIONS),
        help=f"comma list of {','.join(SECTIONS)}",
    )
    p.add_argument(
        "--systems",
        type=options.csv(),
        default=["twt", "qknorm_paper"],
        help=f"comma list of {','.join(c.SYSTEMS)} (default: the demo's two)",
    )
    p.add_argument("--size", default="proxy", help="model size (proxy; smoke for tests)")
    p.add_argument(
        "--threads",
        type=int,
        default=c.usable_cpus(),
    )
    p.add_argument("--batch", type=int, default=146, help="sentences per synthetic batch")
    p.add_argument("--len", type=int, default=28, help="tokens per sentence and side, EOS incl.")
    p.add_argument("--vocab", type=int, default=2048, help="joined vocabulary (gl-en: 2048)")
    p.add_argument("--reps", type=int, default=7, help="timed repetitions per entry (>= 5)")
    p.add_argument(
        "--e2e-data",
        type=Path,
        help="binarized data (default data/bin/gl-en, "
        "else built from ../shared/data under --work-dir)",
    )
    p.add_argument("--e2e-updates", type=int, default=40, help="updates per fairseq-train run")
    p.add_argument("--e2e-rounds", type=int, default=2, help="fp32/bf16 alternations")
    p.add_argument("--e2e-log-interval", type=int, default=10)
    p.add_argument("--e2e-max-tokens", type=int, default=4096)
    p.add_argument(
        "--no-explicit-attention",
        dest="explicit_attention",
        action="store_false",
        help=f"leave out the model-only entry {EXPLICIT}",
    )
    p.add_argument(
        "--allow-emulated",
        action="store_true",
        help="time bf16 even without native bf16 (about 20x slower than fp32)",
    )
    p.add_argument("--work-dir", type=Path, help="scratch dir (default: a temp dir, removed)")
    p.add_argument(
        "--out",
        type=Path,
        help="JSON output (default benchmarks/results/bf16-cpu-DATE.json; Markdown next to it)",
    )
    a = p.parse_args(argv)
    if set(a.sections) - set(SECTIONS) or set(a.systems) - set(c.SYSTEMS):
        p.error(f"sections: {SECTIONS}; systems: {c.SYSTEMS}")
    if a.out is None:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
        a.out = c.REPO / "benchmarks" / "results" / f"bf16-cpu-{stamp}.json"
    return a


# ------------------------------------------------------------------------ model-only
def section_model(a, work: Path, bf16_ok: bool, out: dict) -> None:
    """Time training steps per system and mode on one synthetic batch; results into ``out``.

    :func:`qknorm_model_tools.bf16_timing.section_model` (the CPU profiles' bf16 decision times
    the same step) with this command's options; the bf16 modes run only if ``bf16_ok``.
    """
    bt.section_model(
        out,
        work,
        a.systems,
        a.size,
        a.reps,
        batch=a.batch,
        length=a.len,
        vocab=a.vocab,
        bf16_ok=bf16_ok,
        explicit_attention=a.explicit_attention,
        allow_emulated=a.allow_emulated,
    )


# ------------------------------------------------------------------------ end to end
def prepare_gl_en(work: Path) -> Path:
    """Build data/bin/gl-en under ``work`` with the project's scripts.

    The real corpus comes from ``../shared/data`` or $QKNORM_DATA_DIR.
    """
    env = dict(c.cli_env(1), QKNORM_WORK_DIR=str(work))
    for script in ("prepare_data.sh", "bpe.sh", "binarize.sh"):
        options.log(f"{script} gl-en -> {work}")
        proc = subprocess.run(
            [str(c.REPO / "scripts" / script), "gl-en"], env=env, capture_output=True, text=True
        )
        if proc.returncode != 0:
            raise RuntimeError(f"scripts/{script} gl-en failed:\n{proc.stderr[-3000:]}")
    return work / "data" / "bin" / "gl-en"


def section_e2e(a, work: Path, bf16_ok: bool, out: dict) -> None:
    """``fairseq-train`` words/s, fp32 against ``--bf16-autocast``, on real gl-en; into ``out``.

    The bf16 runs only if ``bf16_ok``.
    """
    data = a.e2e_data
    if data is None:
        data = (
            options.DEFAULT_E2E_DATA if options.DEFAULT_E2E_DATA.is_dir() else prepare_gl_en(work)
        )
    src, tgt = options._guess_langs(data)
    stats = data.parent.parent / "bpe" / data.name / "length_stats.json"
    qk_length = (
        float(json.loads(stats.read_text())["L"]) if stats.is_file() else c.DEFAULT_QK_LENGTH
    )
    cfg = SimpleNamespace(
        e2e_data=data,
        e2e_src=src,
        e2e_tgt=tgt,
        qk_length=qk_length,
        e2e_max_tokens=a.e2e_max_tokens,
        e2e_log_interval=a.e2e_log_interval,
    )
    modes = [m for m in MODES if m == "fp32" or bf16_ok]
    extra = bt.mode_flags(a.allow_emulated)
    runs: dict[str, list[dict]] = {f"{s}:{m}": [] for s in a.systems for m in modes}
    for r in range(a.e2e_rounds):
        for system in a.systems:
            for mode in modes:
                options.log(f"fairseq-train {system} {mode}, round {r + 1}/{a.e2e_rounds}")
                save = work / "e2e" / f"{system}-{mode}-{r}"
                cmd = e2e.train_cmd(cfg, system, save, a.e2e_updates, a.size, extra[mode])
                res = c.run_with_rusage(cmd, c.cli_env(a.threads), save / "train.log")
                parsed = e2e.parse_train_log(res["output"])
                run = {
                    "rc": res["rc"],
                    "wall_s": res["wall_s"],
                    "steady_wps": e2e.steady_wps(parsed),
                    "final_train_loss": parsed["summary"].get("loss"),
                }
                if res["rc"] != 0:
                    run["error"] = res["output"][-2000:]
                runs[f"{system}:{mode}"].append(run)
    res = {}
    for system in a.systems:
        r = {}
        for mode in modes:
            rs = runs[f"{system}:{mode}"]
            wps = [x["steady_wps"] for x in rs if x["steady_wps"]]
            r[mode] = {"runs": rs, "wps": wps, "wps_median": c.median(wps) if wps else None}
        if "bf16" in r and r["fp32"]["wps"] and r["bf16"]["wps"]:
            # time per word = 1 / wps; round i of both modes ran back to back
            r["speedup"] = {
                "bf16": speedup(
                    [1 / w for w in r["fp32"]["wps"]], [1 / w for w in r["bf16"]["wps"]]
                )
            }
        res[system] = r
    out.update(
        {
            "data": str(data),
            "updates": a.e2e_updates,
            "rounds": a.e2e_rounds,
            "max_tokens": a.e2e_max_tokens,
            "threads": a.threads,
            "qk_length": qk_length,
            "what": "fairseq-train wps (target tokens/s), median of the logged intervals "
            "after the first; cpu-proxy settings (benchmarks.e2e.train_cmd)",
            "systems": res,
        }
    )


# ------------------------------------------------------------------------ report
def _table(title: str, unit: str, rows: dict[str, dict], cell) -> list[str]:
    """A Markdown table with one row per system.

    Per mode ``cell(entry)`` and, for the bf16 modes, the speed-up over fp32
    (:func:`speedup`).
    """
    fmt = summary.fmt
    modes = [m for m in (*MODES, EXPLICIT) if any(m in r for r in rows.values())]
    head = ["system", f"fp32 {unit}"]
    for m in modes[1:]:
        head += [f"{m} {unit}", f"{m} speed-up (per-rep min-max; fastest reps)"]
    out = [title, "", "| " + " | ".join(head) + " |", "|---" + "|---:" * (len(head) - 1) + "|"]
    for system, r in rows.items():
        cells = [system, cell(r["fp32"])]
        for m in modes[1:]:
            s = r.get("speedup", {}).get(m)
            cells += [
                cell(r[m]) if m in r else "skipped",
                f"**{fmt(s['median_ratio'])}x** ({fmt(s['rep_ratio_min'])}-"
                f"{fmt(s['rep_ratio_max'])}; {fmt(s['best_ratio'])}x)"
                if s
                else "–",
            ]
        out.append("| " + " | ".join(cells) + " |")
    return out + [""]


def markdown(res: dict) -> str:
    """The Markdown report of a result dict (machine, load, tables)."""
    m = res["machine"]
    L = [
        "# bf16 autocast vs fp32 on CPU",
        "",
        f"- CPU: {m['cpu_model']}; bf16 detector: {res['bf16_detector']}",
        f"- CPU flags: {', '.join(m['cpu_flags'])}; torch {m['torch']}, "
        f"{m['torch_threads']} threads; {m['date_utc']}",
        f"- load: start `{res['uptime_start']}`; end `{res['uptime_end']}`",
        f"- command: `{res['command']}`",
        "",
    ]
    mo = res.get("model", {})
    if "systems" in mo:
        s = mo["model"]
        L += _table(
            f"## Model-only training step (`{mo['size']}`: {s['layers']}+{s['layers']} "
            f"layers, d {s['dim']}, FFN {s['ffn']}; {mo['tokens_per_side']} tokens per "
            f"side; {mo['reps']} interleaved repetitions)",
            "median ms (min-max)",
            mo["systems"],
            lambda t: f"{1e3 * t['median_s']:.0f} ({1e3 * t['min_s']:.0f}-{1e3 * t['max_s']:.0f})",
        )
    e = res.get("e2e", {})
    if "systems" in e:
        L += _table(
            f"## End to end: fairseq-train on {e['data']} ({e['updates']} updates x "
            f"{e['rounds']} rounds, --max-tokens {e['max_tokens']}, {e['threads']} "
            "threads)",
            "words/s (runs)",
            e["systems"],
            lambda t: (
                f"{summary.fmt(t['wps_median'], 0)} ({', '.join(f'{w:.0f}' for w in t['wps'])})"
                if t["wps_median"]
                else "failed"
            ),
        )
    if res["errors"]:
        L += ["## Errors", ""] + [
            f"- {k}: {v.strip().splitlines()[-1]}" for k, v in res["errors"].items()
        ]
    return "\n".join(L)


def main(argv=None) -> int:
    """Run the benchmark, write the JSON and Markdown, print the Markdown; exit status."""
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    command = "python -m benchmarks.bf16_cpu " + " ".join(sys.argv[1:] if argv is None else argv)
    res = bt.new_result(command)
    reason = res["bf16_detector"]
    bf16_ok = res["native_bf16"] or a.allow_emulated
    options.log(f"{res['machine']['cpu_model']}: {reason}; {res['uptime_start']}")
    if not bf16_ok:
        options.log("no native bf16: bf16 entries skipped (--allow-emulated to time them)")
    t0 = time.perf_counter()
    a.out.parent.mkdir(parents=True, exist_ok=True)
    if a.work_dir is not None:
        a.work_dir.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.TemporaryDirectory(prefix="qknorm-bf16-")
        if a.work_dir is None
        else nullcontext(a.work_dir)
    ) as work:
        for name, fn in (("model", section_model), ("e2e", section_e2e)):
            if name in a.sections:
                res[name] = {}
                try:
                    fn(a, Path(work), bf16_ok, res[name])
                except Exception as exc:  # noqa: BLE001  (report it, keep the other section)
                    res["errors"][name] = traceback.format_exc()
                    options.log(f"section {name} failed: {exc}")
                res["uptime_end"] = bt.uptime()
                a.out.write_text(json.dumps(res, indent=1, default=str) + "\n")  # partial
                options.log(f"section {name} done:\n{markdown(res)}")
    res["total_wall_s"] = time.perf_counter() - t0
    a.out.write_text(portable_paths(json.dumps(res, indent=1, default=str)) + "\n")
    md = portable_paths(markdown(res))
    a.out.with_suffix(".md").write_text(md + "\n")
    print(md)
    options.log(f"wrote {a.out} and {a.out.with_suffix('.md')} in {res['total_wall_s']:.0f}s")
    return 1 if res["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())
