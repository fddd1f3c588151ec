"""Side-by-side performance harness: QKNorm vs TWT vs dot-product vs stock fairseq.

    python -m benchmarks.run [--smoke] [--out benchmarks/results/NAME.json] [options]

Everything runs in one process and one run; within each section the compared entries are
timed in interleaved order (A, B, C, A, B, C, ...) so that machine drift hits them alike.
Sections (``--sections``, default all):

* ``model``    model-only training step (forward + label-smoothed CE + backward + Adam) on
               one identical synthetic batch, every ``--sizes`` size, with fp32 matmul peak
               entries timed in the same interleaved loop;
* ``bf16``     the same step under ``torch.autocast("cpu", dtype=torch.bfloat16)`` vs fp32;
* ``decode``   in-process decoding on identical inputs for a fixed number of steps, beam
               layout (B sentences x beam rows): the raw incremental decoder loop and
               fairseq's SequenceGenerator with min_len = max_len;
* ``scaling``  attention-module forward+backward vs sequence length and batch: QKNorm and
               dot-product (our module, fused and explicit paths) vs fairseq's
               MultiheadAttention (F.multi_head_attention_forward in training);
* ``norms``    ScaleNorm vs LayerNorm module forward+backward;
* ``memory``   peak RSS of a training step, one fresh child process per system;
* ``batches``  the model-only step on the first ``--batches`` of fairseq's own training
               batches of the e2e data (its ``--max-tokens``), every system on each batch
               one right after the other: one paired ratio per batch;
* ``e2e``      ``fairseq-train`` words/s (fairseq's ``wps``) on real data, systems alternating,
               ``--e2e-rounds`` rounds, plus peak RSS of each run;
* ``generate`` ``fairseq-generate`` (beam 4) sentences/s and tokens/s from the e2e runs'
               (throwaway, barely trained) checkpoints on a test subset, plus peak RSS;
* ``fairseq_bf16`` whether ``fairseq-train --bf16 --cpu`` works (2 updates).

Writes a JSON of all figures (``--out``) and prints a Markdown summary (also written next
to the JSON as ``.md``).
"""

import argparse
import datetime
import gc
import json
import logging
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Optional

import torch

# fairseq's text_to_speech task logs an INFO "Please install tensorboardX" when imported (the
# plugin logs through tensorboard itself): not the first line of --help or of a report
logging.getLogger("fairseq.tasks.text_to_speech").setLevel(logging.WARNING)

from qknorm_tools import config  # noqa: E402  (after the logger above: imports fairseq)
from qknorm_tools.exits import die_data  # noqa: E402

from . import authors_code, profile_e2e, stats  # noqa: E402
from . import common as c  # noqa: E402

#: the sections that read the binarized e2e data (``--e2e-data``)
DATA_SECTIONS = ("batches", "e2e", "generate", "fairseq_bf16")
ALL_SECTIONS = (
    "model",
    "bf16",
    "decode",
    "scaling",
    "norms",
    "memory",
    "batches",
    "e2e",
    "generate",
    "fairseq_bf16",
)
#: the profile whose settings the e2e and generate sections train and decode with (optimizer,
#: label smoothing, batch, beam, output length cap: configs/profiles/cpu-proxy.toml, read by
#: qknorm_tools.config, never copied here)
E2E_PROFILE = config.load_profile("cpu-proxy")
#: where scripts/{prepare_data,bpe,binarize}.sh put gl-en ($QKNORM_WORK_DIR, as scripts/lib.sh)
DATA_ROOT = Path(os.environ.get("QKNORM_WORK_DIR") or c.REPO) / "data"
DEFAULT_E2E_DATA = DATA_ROOT / "bin" / "gl-en"
LENGTH_STATS = DATA_ROOT / "bpe" / "gl-en" / "length_stats.json"
#: ``--targets``: the issue's targets only (sections, systems, repetitions). 2026-12-02 (2 Zen 4
#: cores): 7 e2e rounds of 8 updates left two verdicts undecided (a third of spread between
#: rounds, 3 logged intervals of 2 updates each); since 2026-12-03 rounds of 24 updates (5 steady
#: intervals of 4). Since 2026-12-03 evening every model and decoding round is its own paired
#: repetition (21 and 33, no block minima: on this kind of machine the pairs of single
#: adjacent steps gave narrower intervals than the minima of blocks of 3, benchmarks/README.md),
#: QKNorm vs stock end to end comes from the model step on fairseq's own batches paired per
#: batch (section ``batches``), and the e2e section trains only QKNorm, stock and the profile as
#: it trains on this CPU
TARGET_PRESET = dict(
    sections=["model", "decode", "batches", "e2e"],
    systems=["qknorm_paper", "prenorm_fixnorm_layernorm", "stock"],
    e2e_systems=["qknorm_paper", "stock"],
    sizes=["small", "proxy"],
    reps=21,
    min_of=1,
    decode_reps=33,
    batches=30,
    batches_max=240,
    e2e_rounds=7,
    e2e_updates=24,
    e2e_log_interval=4,
)


def csv(type_=str):
    """An argparse ``type=`` for a comma list of ``type_`` values."""
    return lambda s: [type_(x) for x in s.split(",") if x.strip()]


def positive_int(s: str) -> int:
    """An argparse ``type=``: an integer >= 1 (repetitions, threads, sizes of batches).

    Raises:
        argparse.ArgumentTypeError: not an integer, or below 1 (argparse: exit 2).
    """
    try:
        v = int(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}") from None
    if v < 1:
        raise argparse.ArgumentTypeError(f"expected a positive integer, got {s!r}")
    return v


def nonnegative_seconds(s: str) -> float:
    """An argparse ``type=``: seconds, a number >= 0 (``inf``: no limit; not ``nan``).

    Raises:
        argparse.ArgumentTypeError: not a number, ``nan`` or below 0 (argparse: exit 2).
    """
    try:
        v = float(s)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {s!r}") from None
    if math.isnan(v) or v < 0:
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {s!r}")
    return v


def parse_args(argv=None):
    """Command-line options of ``python -m benchmarks.run``."""
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.run", description=__doc__.split("\n\n")[0]
    )
    p.add_argument(
        "--smoke",
        action="store_true",
        help="tiny sizes, 1 repetition, e2e only with --e2e-data (for the tests)",
    )
    p.add_argument(
        "--targets",
        action="store_true",
        help="only what the targets need: sections model,decode,batches,e2e, systems "
        "qknorm_paper,prenorm_fixnorm_layernorm,stock (e2e: qknorm_paper, stock and the "
        "cpu-proxy profile as it trains on this CPU: qknorm_paper+bucketed, +bf16 on a CPU "
        "with native bf16), 21 paired repetitions (decoding 33), 30 of fairseq's batches "
        "then up to 240 within 300 s, e2e 7 rounds x 24 updates; builds data/bin/gl-en if "
        "missing (explicit options still win)",
    )
    p.add_argument(
        "--out", type=Path, help="JSON output (default benchmarks/results/bench-DATE.json)"
    )
    p.add_argument(
        "--sections", type=csv(), help=f"comma list of {','.join(ALL_SECTIONS)} (default all)"
    )
    p.add_argument("--systems", type=csv(), help=f"default {','.join(c.SYSTEMS)}")
    p.add_argument(
        "--threads",
        type=positive_int,
        default=c.usable_cpus(),
    )
    p.add_argument("--sizes", type=csv(), help="model-only sizes (default small,proxy)")
    p.add_argument("--batch", type=positive_int, help="sentences per synthetic batch (default 80)")
    p.add_argument("--src-len", type=positive_int, help="source tokens per sentence incl. EOS (28)")
    p.add_argument("--tgt-len", type=positive_int, help="target tokens per sentence incl. EOS (28)")
    p.add_argument(
        "--vocab", type=positive_int, default=2048, help="joined vocabulary (gl-en: 2048)"
    )
    p.add_argument("--reps", type=positive_int, help="timed repetitions per entry (default 5)")
    p.add_argument(
        "--min-of",
        type=positive_int,
        help="model and decode sections: each repetition is the minimum of K interleaved "
        "rounds (default 1), interference only adds time",
    )
    p.add_argument(
        "--batches",
        type=positive_int,
        help="section batches: model steps on the first N of fairseq's training batches of "
        "the e2e data, systems paired per batch (default 12; --targets: 30)",
    )
    p.add_argument(
        "--batches-max",
        type=positive_int,
        help="section batches: after --batches, add batches one by one until QKNorm/stock's "
        "verdict at 1.00 is decided (from 5 batches on), this many batches or "
        "--batches-budget-s; needs systems qknorm_paper and stock and M >= 5 (default: "
        "--batches, no additions; --targets: 240; raised to --batches if below)",
    )
    p.add_argument(
        "--batches-budget-s",
        type=nonnegative_seconds,
        help="section batches: seconds for the added batches, >= 0 or inf (default 300)",
    )
    p.add_argument("--warmup", type=int, default=1, help="untimed interleaved rounds")
    p.add_argument(
        "--matmul-sizes", type=csv(positive_int), help="square fp32 matmul sizes (1024,2048)"
    )
    p.add_argument(
        "--qk-length",
        type=float,
        help="QKNorm L (g0 = log2(L^2-L)); default from data/bpe/gl-en, else 92",
    )
    p.add_argument("--bf16-size", help="size for the bf16 section (default proxy)")
    p.add_argument("--decode-size", help="size for in-process decoding (default small)")
    p.add_argument("--decode-bsz", type=positive_int, help="sentences (default 16)")
    p.add_argument("--decode-steps", type=positive_int, help="decoder steps (default 30)")
    p.add_argument("--decode-reps", type=positive_int, help="repetitions for decoding (default 3)")
    p.add_argument("--scaling-reps", type=positive_int, help="repetitions for scaling (default 3)")
    p.add_argument("--bf16-reps", type=positive_int, help="repetitions for bf16 (default 2)")
    p.add_argument("--beam", type=positive_int, default=E2E_PROFILE.beam)
    p.add_argument("--scaling-lens", type=csv(positive_int), help="default 32,64,128,256,512")
    p.add_argument("--scaling-bsz", type=csv(positive_int), help="default 8,32")
    p.add_argument("--scaling-dim", type=positive_int, help="default 512 (4 heads)")
    p.add_argument("--scaling-heads", type=positive_int, help="default 4")
    p.add_argument(
        "--norm-rows", type=csv(positive_int), help="rows of (rows, dim) inputs (2240,8960)"
    )
    p.add_argument("--e2e-data", type=Path, help=f"binarized data (default {DEFAULT_E2E_DATA})")
    p.add_argument("--e2e-src", default=None, help="source language (default gl)")
    p.add_argument("--e2e-tgt", default=None, help="target language (default en)")
    p.add_argument("--e2e-size", help="model size for fairseq-train/generate (default proxy)")
    p.add_argument(
        "--e2e-updates", type=positive_int, help="updates per fairseq-train run (default 200)"
    )
    p.add_argument("--e2e-rounds", type=positive_int, help="alternating rounds (default 2)")
    p.add_argument("--e2e-systems", type=csv(), help="systems of e2e/generate (default --systems)")
    p.add_argument(
        "--e2e-log-interval", type=positive_int, help="fairseq --log-interval (default 10)"
    )
    p.add_argument("--e2e-max-tokens", type=positive_int, default=E2E_PROFILE.max_tokens)
    p.add_argument(
        "--gen-sentences", type=positive_int, help="test sentences decoded (default 300)"
    )
    p.add_argument(
        "--gen-checkpoint",
        action="append",
        default=[],
        metavar="SYSTEM=PATH",
        help="decode this checkpoint instead of the e2e run's (repeatable)",
    )
    p.add_argument(
        "--authors-dir",
        type=Path,
        help="the QKNorm authors' code, assembled as benchmarks/authors_code.py says: the e2e "
        f"section also trains it ({AUTHORS_SYSTEM}, same size, data and threads)",
    )
    p.add_argument(
        "--authors-bpe",
        type=Path,
        help="BPE text for --authors-dir (default data/bpe/PAIR, PAIR = the e2e data's name)",
    )
    p.add_argument("--work-dir", type=Path, help="scratch dir (default: a temp dir, removed)")
    a = p.parse_args(argv)
    sections_given = a.sections is not None

    full = dict(
        sizes=["small", "proxy"],
        batch=80,
        src_len=28,
        tgt_len=28,
        reps=5,
        min_of=1,
        batches=12,
        batches_budget_s=300.0,
        matmul_sizes=[1024, 2048],
        bf16_size="proxy",
        bf16_reps=2,
        decode_size="small",
        decode_bsz=16,
        decode_steps=30,
        decode_reps=3,
        scaling_lens=[32, 64, 128, 256, 512],
        scaling_bsz=[8, 32],
        scaling_dim=512,
        scaling_heads=4,
        scaling_reps=3,
        norm_rows=[2240, 8960],
        e2e_size="proxy",
        e2e_updates=200,
        e2e_rounds=2,
        e2e_log_interval=10,
        gen_sentences=300,
    )
    smoke = dict(
        sizes=["smoke"],
        batch=4,
        src_len=8,
        tgt_len=9,
        reps=1,
        batches=2,
        batches_max=2,
        matmul_sizes=[64, 128],
        bf16_size="smoke",
        bf16_reps=1,
        decode_size="smoke",
        decode_bsz=2,
        decode_steps=4,
        decode_reps=1,
        min_of=1,
        scaling_lens=[8, 16],
        scaling_bsz=[2],
        scaling_dim=32,
        scaling_heads=2,
        scaling_reps=1,
        norm_rows=[64],
        e2e_size="smoke",
        e2e_updates=2,
        e2e_rounds=1,
        e2e_log_interval=1,
        gen_sentences=5,
    )
    if a.targets and a.e2e_systems is None:  # --targets' own, by this CPU (smoke: fp32)
        from fairseq_qknorm.tasks.cpu_bf16 import native_bf16_support

        a.e2e_systems = target_e2e_systems(native_bf16_support()[0] and not a.smoke)
    # precedence: explicit options, --smoke's sizes, --targets, the full run's defaults
    presets = (
        ([smoke] if a.smoke else [])
        + ([TARGET_PRESET] if a.targets else [])
        + [full, dict(sections=list(ALL_SECTIONS), systems=list(c.SYSTEMS))]
    )
    for preset in presets:
        for k, v in preset.items():
            if getattr(a, k) is None:
                setattr(a, k, v)
    if a.e2e_systems is None:
        a.e2e_systems = list(a.systems)
    if a.batches_max is None or a.batches_max < a.batches:
        a.batches_max = a.batches
    if "batches" in a.sections and a.batches_max > a.batches:
        if a.batches_max < stats.MIN_REPETITIONS:
            p.error(
                f"--batches-max {a.batches_max}: adding batches until a verdict needs at least "
                f"{stats.MIN_REPETITIONS} (no verdict below {stats.MIN_REPETITIONS} repetitions)"
            )
        if not {"qknorm_paper", "stock"} <= set(a.systems):
            p.error(
                f"--batches-max {a.batches_max}: batches are added until QKNorm/stock's verdict "
                "decides, so --systems needs qknorm_paper and stock"
            )
    if a.smoke:
        a.warmup = min(a.warmup, 1)
    if a.e2e_data is None and not a.smoke and a.targets and {"e2e", "batches"} & set(a.sections):
        build_gl_en_data()
    if a.e2e_data is None and not a.smoke and DEFAULT_E2E_DATA.is_dir():
        a.e2e_data = DEFAULT_E2E_DATA
    if a.e2e_data is not None and (a.e2e_src is None or a.e2e_tgt is None):
        src, tgt = _guess_langs(a.e2e_data)
        a.e2e_src = a.e2e_src or src
        a.e2e_tgt = a.e2e_tgt or tgt
    if a.qk_length is None:
        a.qk_length = c.DEFAULT_QK_LENGTH
        if LENGTH_STATS.is_file() and (a.e2e_data is None or "gl-en" in str(a.e2e_data)):
            a.qk_length = float(json.loads(LENGTH_STATS.read_text())["L"])
    unknown = set(a.sections) - set(ALL_SECTIONS)
    if unknown:
        p.error(f"unknown sections {sorted(unknown)}; known: {ALL_SECTIONS}")
    for opt in ("sizes", "bf16_size", "decode_size", "e2e_size"):
        given = getattr(a, opt)
        for size in [given] if isinstance(given, str) else given:
            if size not in c.SIZES:
                p.error(f"--{opt.replace('_', '-')}: unknown size {size!r}; known: {list(c.SIZES)}")
    for spec in a.gen_checkpoint:
        system, sep, path = spec.partition("=")
        if not sep or not system or not path:
            p.error(f"--gen-checkpoint {spec!r}: expected SYSTEM=PATH")
    bad = (set(a.systems) | {s.split("+")[0] for s in a.e2e_systems}) - set(c.SYSTEMS)
    if bad:
        p.error(f"unknown systems {sorted(bad)}; known: {c.SYSTEMS}")
    for system in a.e2e_systems:
        try:
            split_variant(system)
        except ValueError as e:
            p.error(str(e))
    if "e2e" in a.sections and a.e2e_updates < 2 * a.e2e_log_interval:
        p.error(
            f"--e2e-updates {a.e2e_updates} is less than twice --e2e-log-interval "
            f"{a.e2e_log_interval}: the first logged interval is the warm-up, left out of wps"
        )
    if a.authors_dir is not None:
        try:
            authors_code.check_authors_dir(a.authors_dir)
        except FileNotFoundError as e:  # a path the user named that is not there: data
            die_data(f"--authors-dir: {e}")
        if "e2e" not in a.sections:
            p.error("--authors-dir: the authors' code is timed in the e2e section (--sections)")
        a.e2e_systems = [*a.e2e_systems, AUTHORS_SYSTEM]
        if a.authors_bpe is None and a.e2e_data is not None:  # data/{bin,bpe}/PAIR
            data = Path(a.e2e_data).resolve()
            a.authors_bpe = data.parent.parent / "bpe" / data.name
        if a.authors_bpe is not None and a.e2e_data is not None and Path(a.e2e_data).is_dir():
            missing = authors_code.missing_bpe_files(a.authors_bpe, a.e2e_src, a.e2e_tgt)
            if missing:
                die_data(f"--authors-bpe {a.authors_bpe}: missing {', '.join(missing)}")
    needs_data = sorted(set(a.sections) & set(DATA_SECTIONS), key=a.sections.index)
    if a.e2e_data is None and sections_given and needs_data:  # data not prepared: environment
        die_data(
            f"--sections {','.join(needs_data)} need binarized data: --e2e-data DIR, or "
            f"{DEFAULT_E2E_DATA} (scripts/prepare_data.sh, bpe.sh, binarize.sh gl-en; "
            "--targets builds it)"
        )
    if a.e2e_data is not None and needs_data:
        if not Path(a.e2e_data).is_dir():
            die_data(f"--e2e-data {a.e2e_data}: no such directory")
        if not list(Path(a.e2e_data).glob("train.*-*.*.idx")):
            die_data(
                f"--e2e-data {a.e2e_data}: no binarized training split "
                "(train.SRC-TGT.SRC.idx; fairseq-preprocess writes it)"
            )
    if a.out is None:
        stamp = datetime.datetime.now(datetime.timezone.utc).strftime("%Y%m%d-%H%M%S")
        name = f"bench-{'smoke-' if a.smoke else ''}{stamp}.json"
        a.out = c.REPO / "benchmarks" / "results" / name
    return a


def build_gl_en_data() -> None:
    """Make ``DEFAULT_E2E_DATA`` (binarized gl-en) with the project's own pipeline.

    Runs scripts/prepare_data.sh, bpe.sh, binarize.sh under ``$QKNORM_WORK_DIR`` unless it
    exists; about 20-60 s. Raises ``SystemExit`` naming the failed script.
    """
    if DEFAULT_E2E_DATA.is_dir():
        return
    env = c.cli_env(1)
    for script in ("prepare_data.sh", "bpe.sh", "binarize.sh"):
        log(f"building gl-en: scripts/{script} gl-en")
        rc = subprocess.run(["bash", str(c.REPO / "scripts" / script), "gl-en"], env=env).returncode
        if rc != 0:
            raise SystemExit(
                f"scripts/{script} gl-en failed (exit {rc}); the e2e section "
                f"needs {DEFAULT_E2E_DATA} (or pass --e2e-data)"
            )


def _guess_langs(data: Path):
    """(src, tgt) from ``train.SRC-TGT.SRC.idx`` in a binarized dir."""
    for f in sorted(Path(data).glob("train.*-*.*.idx")):
        pair = f.name.split(".")[1]
        src, tgt = pair.split("-")
        return src, tgt
    return "src", "tgt"


def log(msg: str) -> None:
    """Print a time-stamped progress line to stderr."""
    print(f"[bench {time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


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


# ===================================================================== e2e (train)
#: e2e system variants ``SYSTEM+VARIANT[+VARIANT]``: options of the plugin task
#: ``translation_word_dropout`` (issue 20), e.g. ``qknorm_paper+bucketed``; ``bf16`` is the
#: task's CPU bf16 autocast, what the cpu-proxy profile's ``bf16 = "auto"`` trains with where the
#: CPU has native bf16 and it was measured faster (qknorm_model_tools/bf16_auto.py)
E2E_VARIANTS = {
    "bucketed": ["--batching", "bucketed"],
    "compile": ["--torch-compile"],
    "bf16": ["--bf16-autocast"],
}
#: the e2e entry of ``--targets`` that trains as the cpu-proxy profile does on a CPU with native
#: bf16 (added by :func:`target_e2e_systems` only there: elsewhere the profile trains in fp32)
PROFILE_BF16_ENTRY = "qknorm_paper+bucketed+bf16"


def target_e2e_systems(native_bf16: bool) -> list[str]:
    """The e2e systems of ``--targets``: QKNorm, stock, and the opt-in bucketed + bf16 profile.

    The cpu-proxy profile trains ``qknorm_paper`` with bucketed batching, plus bf16 autocast on
    a CPU with native bf16 (``native_bf16``:
    :func:`fairseq_qknorm.tasks.cpu_bf16.native_bf16_support`): ``qknorm_paper+bucketed`` or
    :data:`PROFILE_BF16_ENTRY`, so that the 1.4x target is read for what a user of the profile
    gets on this CPU.
    """
    profile = PROFILE_BF16_ENTRY if native_bf16 else "qknorm_paper+bucketed"
    return TARGET_PRESET["e2e_systems"] + [profile]


#: the e2e entry of ``--authors-dir``: the QKNorm authors' code (:mod:`benchmarks.authors_code`)
AUTHORS_SYSTEM = "authors_qknorm"


def split_variant(system: str) -> tuple[str, list[str]]:
    """``"qknorm_paper+bucketed"`` -> ``("qknorm_paper", ["--batching", "bucketed"])``.

    Raises:
        ValueError: an unknown variant (known: :data:`E2E_VARIANTS`).
    """
    base, *variants = system.split("+")
    flags = []
    for v in variants:
        if v not in E2E_VARIANTS:
            raise ValueError(
                f"unknown e2e variant {v!r} of {system!r}; known: {list(E2E_VARIANTS)}"
            )
        flags += E2E_VARIANTS[v]
    return base, flags


def train_cmd(a, system: str, save_dir: Path, updates: int, size: str, extra=()) -> list:
    """The ``fairseq-train`` command line of an end-to-end run (cpu-proxy settings) + ``extra``.

    The optimizer flags and the label smoothing are the profile's (:data:`E2E_PROFILE`).

    A variant ``SYSTEM+bucketed`` / ``+compile`` / ``+bf16`` (:func:`split_variant`) trains
    ``SYSTEM`` with the plugin task ``translation_word_dropout`` and that option (word dropout 0).
    """
    base, variant_flags = split_variant(system)
    task = ["--task", "translation_word_dropout", *variant_flags] if variant_flags else [
        "--task", "translation"]  # fmt: skip
    return [
        c.VENV_BIN / "fairseq-train",
        a.e2e_data,
        "--user-dir",
        c.PLUGIN_DIR,
        *task,
        "-s",
        a.e2e_src,
        "-t",
        a.e2e_tgt,
        *c.system_args(base, size, a.qk_length),
        *E2E_PROFILE.optim_flags,
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        str(E2E_PROFILE.label_smoothing),
        "--max-tokens",
        a.e2e_max_tokens,
        "--max-update",
        updates,
        "--max-epoch",
        "0",
        "--required-batch-size-multiple",
        "1",
        "--seed",
        "1",
        "--save-dir",
        save_dir,
        "--no-epoch-checkpoints",
        "--save-interval",
        "1000000",
        "--disable-validation",
        "--log-format",
        "simple",
        "--log-interval",
        a.e2e_log_interval,
        "--num-workers",
        "0",
        *extra,
    ]


def timed_train_cmd(cmd: list, per_update_json: Path) -> list:
    """A :func:`train_cmd` command run through :mod:`benchmarks.profile_e2e`'s update timers.

    The same fairseq entry point as the ``fairseq-train`` console script
    (``fairseq_cli.train.cli_main``), in a ``python -m benchmarks.profile_e2e
    --per-update-json PATH`` process that also writes each update's wall time and its model
    step's (three wrapped calls per update) for :func:`benchmarks.profile_e2e.model_step_share`.
    """
    return [
        sys.executable,
        "-m",
        "benchmarks.profile_e2e",
        "--per-update-json",
        per_update_json,
        "--",
        *cmd[1:],
    ]


def _last_line(text: str) -> str:
    """The last non-empty line of a run's output (its error, for the report)."""
    lines = [x for x in text.splitlines() if x.strip()]
    return lines[-1].strip() if lines else ""


_NUM = r"([0-9.eE+-]+)"


def parse_train_log(text: str) -> dict:
    """``wps=`` etc. of every ``train_inner`` line and the last epoch summary."""
    inner = []
    for line in text.splitlines():
        if "train_inner" in line and "wps=" in line:
            d = {}
            for key in ("wps", "wpb", "bsz", "num_updates", "loss", "train_wall"):
                m = re.search(rf"\b{key}={_NUM}", line)
                if m:
                    d[key] = float(m.group(1))
            inner.append(d)
    summary = {}
    for line in text.splitlines():
        if "| train |" in line or " | INFO | train | " in line:
            for key in ("wps", "wpb", "num_updates", "loss", "train_wall"):
                m = re.search(rf"\| {key} {_NUM}", line)
                if m:
                    summary[key] = float(m.group(1))
    return {"inner": inner, "summary": summary}


def steady_wps(parsed: dict) -> Optional[float]:
    """Median ``wps`` over the logged intervals after the first (warm-up), else the summary's."""
    w = [d["wps"] for d in parsed["inner"] if "wps" in d]
    if len(w) > 1:
        return c.median(w[1:])
    if w:
        return w[0]
    return parsed["summary"].get("wps")


def fairseq_train_batches(task, model, max_tokens: int, n: int) -> list[dict]:
    """The first ``n`` training batches as ``fairseq-train`` builds them (epoch 1, 2, ...).

    The e2e runs' settings (:func:`train_cmd`): ``--max-tokens max_tokens``,
    ``--required-batch-size-multiple 1``, ``--seed 1``, shuffled, the positions limit of the
    task and ``model``; fairseq's own ``task.get_batch_iterator`` and collate. A training split
    of fewer than ``n`` batches goes on into the next epochs, as fairseq-train does.

    Raises:
        ValueError: the training split gives no batch.
    """
    from fairseq import utils

    task.load_dataset("train")
    itr = task.get_batch_iterator(
        dataset=task.dataset("train"),
        max_tokens=max_tokens,
        max_positions=utils.resolve_max_positions(task.max_positions(), model.max_positions()),
        ignore_invalid_inputs=True,
        required_batch_size_multiple=1,
        seed=1,
        epoch=1,
    )
    batches: list[dict] = []
    while len(batches) < n:
        before = len(batches)
        for sample in itr.next_epoch_itr(shuffle=True):
            batches.append(sample)
            if len(batches) == n:
                break
        if len(batches) == before:
            raise ValueError(f"{task.cfg.data}: the training split gives no batch")
    return batches


def section_batches(a, out: dict) -> None:
    """Model-only training steps on fairseq's own batches of the e2e data, paired per batch.

    What ``fairseq-train`` spends nearly all of an update on (the model step's share, section
    e2e), on the batches it trains on (padding, real lengths) instead of the synthetic one, for
    every system on the same batch within seconds (:func:`benchmarks.common.paired_per_batch`):
    one paired ratio per batch, over ``--batches`` batches. With ``--batches-max`` above
    ``--batches`` and both ``qknorm_paper`` and ``stock`` among the systems, batches are then
    added one at a time, for those two systems only (the others keep ``--batches``), until the
    verdict of QKNorm/stock at 1.00 is decided
    (:func:`benchmarks.stats.sequential_verdict` at Pocock's group-sequential looks,
    :func:`benchmarks.stats.pocock_looks`: 4 equally spaced looks, each interval at 98.18%,
    for an overall 95%), ``--batches-max`` or ``--batches-budget-s``; ``out["sequential"]``
    (that summary, its looks and how it stopped) is the QKNorm/stock target's figure. Size
    ``--e2e-size``; the e2e section's ``--max-tokens`` and data.
    """
    seq = None
    size = a.e2e_size
    log(f"model step on fairseq's batches, size {size}, {a.batches}-{a.batches_max} batches")
    task = c.setup_task(a.e2e_data, a.e2e_src, a.e2e_tgt)
    pad = task.target_dictionary.pad()
    steps = {}
    for system in a.systems:
        model, _ = c.build_model(task, system, size, a.qk_length)
        steps[system] = c.make_train_step(model, None, pad)
    batches = fairseq_train_batches(task, model, a.e2e_max_tokens, a.batches_max)
    times = c.paired_per_batch(steps, batches[: a.batches], a.warmup)
    if a.batches_max > a.batches and {"qknorm_paper", "stock"} <= set(steps):
        measured = iter([s / q for s, q in zip(times["stock"], times["qknorm_paper"])])
        pair = {name: steps[name] for name in ("qknorm_paper", "stock")}  # the others: fixed n

        def next_ratio() -> float:
            r = next(measured, None)  # the fixed batches first, then one more batch per call
            if r is not None:
                return r
            i = len(times["stock"])
            for system, t in c.paired_per_batch(pair, [batches[i]], warmup=0, start=i).items():
                times[system] += t
            return times["stock"][-1] / times["qknorm_paper"][-1]

        first = max(a.batches, stats.MIN_REPETITIONS)  # no verdict below 5 (target_entry)
        looks, confidence = stats.pocock_looks(first, a.batches_max)
        seq = stats.sequential_verdict(
            next_ratio,
            1.0,
            min_n=first,
            max_n=a.batches_max,
            budget_s=a.batches_budget_s,
            looks=looks,
            confidence=confidence,
        )
        out["sequential"] = {
            **seq,
            "looks": looks,
            "pair": "qknorm_paper/stock",
        }
        log(f"batches: {seq['n']} paired batches, stopped: {seq['stopped']} ({seq['verdict']})")
    batches = batches[: max(len(t) for t in times.values())]
    tgt = [int(b["ntokens"]) for b in batches]
    padded = [int(b["target"].numel()) for b in batches]
    res = {}
    for system, samples in times.items():
        res[system] = {
            **c.summarize(samples),
            "batches": len(samples),
            "tgt_tokens_per_s": sum(tgt[: len(samples)]) / sum(samples),
        }
    out.update(
        {
            "size": size,
            "data": str(a.e2e_data),
            "max_tokens": a.e2e_max_tokens,
            "batches": len(batches),
            "tgt_tokens": tgt,
            "target_padding": 1.0 - sum(tgt) / sum(padded),
            "systems": res,
            "ratio_stats": paired_speed_stats(times),
        }
    )
    if seq:  # the same values; the interval at the looks' confidence is the pair's figure
        out["ratio_stats"]["qknorm_paper/stock"] = {
            k: v for k, v in seq.items() if k not in ("verdict", "stopped")
        }


def section_e2e(a, work: Path, out: dict) -> dict[str, Path]:
    """``fairseq-train`` words/s and peak RSS, systems alternating; into ``out``.

    Returns:
        The last checkpoint of each system that trained (for :func:`section_generate`).
    """
    checkpoints = {}
    runs = {s: [] for s in a.e2e_systems}
    authors_error = None
    if AUTHORS_SYSTEM in runs:
        log(f"the authors' code: preparing its data from {a.authors_bpe}")
        try:
            authors_data = authors_code.prepare(
                a.authors_dir, a.authors_bpe, a.e2e_src, a.e2e_tgt, work / "authors",
                sys.executable,
            )  # fmt: skip
        except (OSError, RuntimeError) as e:  # only the authors' entry fails
            authors_error = f"data preparation failed: {e}"
            log(f"the authors' code: {authors_error}")
    for r in range(a.e2e_rounds):
        # rotated order, as common.interleaved: no system always starts a round
        order = a.e2e_systems[r % len(a.e2e_systems) :] + a.e2e_systems[: r % len(a.e2e_systems)]
        for system in order:
            if system == AUTHORS_SYSTEM and authors_error:
                runs[system].append(
                    {"rc": None, "steady_wps": None, "model_step_share": None,
                     "peak_rss_mib": float("nan"), "intervals": [], "summary": {},
                     "error": authors_error}
                )  # fmt: skip
                continue
            log(f"fairseq-train {system} round {r + 1}/{a.e2e_rounds} ({a.e2e_updates} updates)")
            save = work / "e2e" / system / f"round{r}"
            per_update = save / "updates.json"
            if system == AUTHORS_SYSTEM:
                cmd = authors_code.train_cmd(
                    sys.executable,
                    a.authors_dir,
                    authors_data,
                    save / "dump",
                    authors_code.pair_name(a.e2e_src, a.e2e_tgt),
                    c.SIZES[a.e2e_size],
                    a.e2e_updates,
                    a.e2e_log_interval,
                    a.threads,
                    a.qk_length,
                )
            else:
                cmd = timed_train_cmd(
                    train_cmd(a, system, save, a.e2e_updates, a.e2e_size), per_update
                )
            res = c.run_with_rusage(cmd, c.cli_env(a.threads), save / "train.log")
            parsed = parse_train_log(res["output"])
            share = None
            ok = res["rc"] == 0  # a failed run is not scored (its logged intervals stay listed)
            if ok and per_update.is_file():  # the updates of steady_wps: after the first interval
                updates = json.loads(per_update.read_text())["updates"]
                share = profile_e2e.model_step_share(updates, skip=a.e2e_log_interval)
            run = {
                "rc": res["rc"],
                "wall_s": res["wall_s"],
                "peak_rss_mib": res["peak_rss_mib"],
                "steady_wps": steady_wps(parsed) if ok else None,
                "model_step_share": share,
                "intervals": parsed["inner"],
                "summary": parsed["summary"],
            }
            if res["rc"] != 0:
                run["error"] = res["output"][-2000:]
            runs[system].append(run)
            ckpt = save / "checkpoint_last.pt"
            if ckpt.is_file():
                old = checkpoints.get(system)
                if old is not None:
                    shutil.rmtree(old.parent, ignore_errors=True)  # keep the last round only
                checkpoints[system] = ckpt
    res = {}
    for system, rs in runs.items():
        wps = [x["steady_wps"] for x in rs if x["steady_wps"]]
        wpb = [d["wpb"] for x in rs for d in x["intervals"][1:] if "wpb" in d]
        shares = [x["model_step_share"] for x in rs if x.get("model_step_share")]
        res[system] = {
            "runs": rs,
            "wps_median": c.median(wps) if wps else None,
            "model_step_share_median": c.median(shares) if shares else None,
            "wpb_mean": sum(wpb) / len(wpb) if wpb else None,
            "peak_rss_mib": max(x["peak_rss_mib"] for x in rs),
            "failed_runs": [
                f"round {r + 1}: rc {x['rc']}: {_last_line(x['error'])}"
                for r, x in enumerate(rs)
                if x.get("error")
            ],
        }
    out.update(
        {
            "data": str(a.e2e_data),
            "size": a.e2e_size,
            "updates": a.e2e_updates,
            "rounds": a.e2e_rounds,
            "max_tokens": a.e2e_max_tokens,
            "threads": a.threads,
            "what": (
                "fairseq-train wps (target tokens/s) per run = median of the logged "
                "intervals after the first; systems alternate within each round; model step "
                "share = wall time of forward + loss, backward and optimizer step / wall time "
                "of the same updates (after the first interval) = wps / the model-only step's "
                "target tokens/s on the same batches"
            ),
            "systems": res,
            "ratios": speed_ratios(
                {s: 1.0 / v["wps_median"] for s, v in res.items() if v["wps_median"]}
            ),
            "ratio_stats": paired_speed_stats(
                {s: [x["steady_wps"] for x in rs] for s, rs in runs.items()}, throughput=True
            ),
        }
    )
    return checkpoints


# ================================================================ generate (decode)
def make_subset(data: Path, split: str, src: str, tgt: str, n: int, dest: Path) -> Path:
    """The first ``n`` sentences of ``split`` as a new binarized dir (same dictionaries)."""
    from fairseq.data import Dictionary, indexed_dataset

    dest.mkdir(parents=True, exist_ok=True)
    for lang in (src, tgt):
        shutil.copy(data / f"dict.{lang}.txt", dest / f"dict.{lang}.txt")
        prefix = f"{split}.{src}-{tgt}.{lang}"
        ds = indexed_dataset.MMapIndexedDataset(str(data / prefix))
        vocab = len(Dictionary.load(str(data / f"dict.{lang}.txt")))
        builder = indexed_dataset.make_builder(
            indexed_dataset.data_file_path(str(dest / prefix)), impl="mmap", vocab_size=vocab
        )
        for i in range(min(n, len(ds))):
            builder.add_item(ds[i])
        builder.finalize(indexed_dataset.index_file_path(str(dest / prefix)))
    return dest


GEN_RE = re.compile(
    r"Translated ([\d,]+) sentences \(([\d,]+) tokens\) in ([\d.]+)s "
    r"\(([\d.]+) sentences/s, ([\d.]+) tokens/s\)"
)


def gen_flags(a) -> list[str]:
    """``--beam`` (``--beam``, default the profile's), then the profile's decoding flags.

    The output length cap and ``--max-tokens`` of :data:`E2E_PROFILE` (``[decode]``).
    """
    return [
        "--beam",
        str(a.beam),
        *E2E_PROFILE.gen_flags,
        "--max-tokens",
        str(E2E_PROFILE.gen_max_tokens),
    ]


def section_generate(a, work: Path, checkpoints: dict[str, Path], out: dict) -> None:
    """``fairseq-generate`` sentences/s, tokens/s and peak RSS per checkpoint; into ``out``."""
    subset = make_subset(
        a.e2e_data, "test", a.e2e_src, a.e2e_tgt, a.gen_sentences, work / "gen_subset"
    )
    res = {}
    # variants decode as their base; the authors' code is not decoded
    for system in [s for s in a.e2e_systems if "+" not in s and s != AUTHORS_SYSTEM]:
        ckpt = checkpoints.get(system)
        if ckpt is None:
            res[system] = {"error": "no checkpoint (e2e run failed or skipped)"}
            continue
        log(f"fairseq-generate {system}")
        cmd = [
            c.VENV_BIN / "fairseq-generate",
            subset,
            "--user-dir",
            c.PLUGIN_DIR,
            "--task",
            "translation",
            "-s",
            a.e2e_src,
            "-t",
            a.e2e_tgt,
            "--path",
            ckpt,
            "--gen-subset",
            "test",
            *gen_flags(a),
            "--quiet",
            "--seed",
            "1",
            "--num-workers",
            "0",
            "--required-batch-size-multiple",
            "1",
        ]
        r = c.run_with_rusage(cmd, c.cli_env(a.threads), work / f"generate_{system}.log")
        m = GEN_RE.search(r["output"])
        entry = {
            "rc": r["rc"],
            "wall_s": r["wall_s"],
            "peak_rss_mib": r["peak_rss_mib"],
            "checkpoint": str(ckpt),
        }
        if m:
            n_sent, n_tok = int(m.group(1).replace(",", "")), int(m.group(2).replace(",", ""))
            entry.update(
                {
                    "sentences": n_sent,
                    "generated_tokens": n_tok,
                    "tokens_per_sentence": n_tok / max(n_sent, 1),
                    "gen_time_s": float(m.group(3)),
                    "sentences_per_s": float(m.group(4)),
                    "tokens_per_s": float(m.group(5)),
                }
            )
        else:
            entry["error"] = r["output"][-1500:]
        res[system] = entry
    ok = {s: v for s, v in res.items() if "sentences_per_s" in v}
    out.update(
        {
            "size": a.e2e_size,
            "beam": a.beam,
            "subset_sentences": a.gen_sentences,
            "flags": " ".join(gen_flags(a)),
            "note": (
                "checkpoints barely trained (the e2e runs): output lengths differ between "
                "systems, so compare tokens/s (per generated token) rather than sentences/s"
            ),
            "systems": res,
            "ratios_tokens_per_s": speed_ratios(
                {s: 1.0 / v["tokens_per_s"] for s, v in ok.items()}
            ),
            "ratios_sentences_per_s": speed_ratios(
                {s: 1.0 / v["sentences_per_s"] for s, v in ok.items()}
            ),
        }
    )


# ===================================================================== fairseq bf16
def section_fairseq_bf16(a, work: Path, out: dict) -> None:
    """Whether ``fairseq-train --bf16 --cpu`` runs 2 updates; the outcome into ``out``."""
    # the failure (if any) is in fairseq's option handling, not in a model: one system suffices
    for system in a.systems[:1]:
        log(f"fairseq-train --bf16 --cpu smoke: {system}")
        save = work / "bf16" / system
        cmd = train_cmd(
            a,
            system,
            save,
            2,
            a.e2e_size,
            extra=["--bf16", "--cpu", "--no-save", "--log-interval", "1"],
        )
        r = c.run_with_rusage(cmd, c.cli_env(a.threads), save / "train.log")
        parsed = parse_train_log(r["output"])
        losses = [d.get("loss") for d in parsed["inner"]]
        works = (
            r["rc"] == 0
            and bool(losses)
            and all(x is not None and math.isfinite(x) for x in losses)
        )
        entry = {"rc": r["rc"], "works": works, "losses": losses, "wall_s": r["wall_s"]}
        if not works:
            err = [ln for ln in r["output"].splitlines() if ln.strip()][-6:]
            entry["error_tail"] = err
        out[system] = entry
    out["command"] = "fairseq-train ... --bf16 --cpu --max-update 2"
    out["note"] = (
        "fairseq/options.py (parse_args_and_arch) sets args.tpu = True whenever "
        "--bf16 is given, so the trainer asks torch_xla for a TPU device; fairseq's "
        "--bf16 is TPU-only, --cpu does not override it"
    )


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


# ============================================================================ main
def main(argv=None) -> int:
    """Run the selected sections, write the JSON and Markdown, print the Markdown; exit status."""
    a = parse_args(argv)
    torch.set_num_threads(a.threads)
    try:
        torch.set_num_interop_threads(1)
    except RuntimeError:
        pass
    command = "python -m benchmarks.run " + " ".join(sys.argv[1:] if argv is None else argv)
    res: dict = {
        "command": command,
        "machine": c.machine_info(),
        "smoke": a.smoke,
        "config": {k: (str(v) if isinstance(v, Path) else v) for k, v in vars(a).items()},
        "errors": {},
    }
    if os.getloadavg()[0] > 0.5 * a.threads and not a.smoke:
        log(
            f"WARNING: load average {os.getloadavg()} with {a.threads} threads: another job "
            "is running, timings will be noisy"
        )
    tmp_ctx = None
    if a.work_dir is None:
        tmp_ctx = tempfile.TemporaryDirectory(prefix="qknorm-bench-")
        work = Path(tmp_ctx.name)
    else:
        work = a.work_dir
        work.mkdir(parents=True, exist_ok=True)
    t_start = time.perf_counter()
    try:
        task = c.setup_task(c.write_dict_dir(work / "dict", a.vocab))

        def guarded(name, fn, *args):
            if name not in a.sections:
                return None
            t0 = time.perf_counter()
            out: dict = {}
            res[name] = out
            try:
                return fn(*args, out)
            except Exception:
                res["errors"][name] = traceback.format_exc()
                log(f"section {name} failed:\n{res['errors'][name]}")
                return None
            finally:
                out["section_wall_s"] = time.perf_counter() - t0
                log(f"section {name}: {out['section_wall_s']:.0f}s")
                gc.collect()
                # partial results survive an interrupted run
                a.out.parent.mkdir(parents=True, exist_ok=True)
                a.out.write_text(json.dumps(res, indent=1, default=str) + "\n")

        guarded("model", section_model, a, task)
        guarded("bf16", section_bf16, a, task)
        guarded("decode", section_decode, a, task)
        guarded("scaling", section_scaling, a)
        guarded("norms", section_norms, a)
        guarded("memory", section_memory, a, work)
        checkpoints = {}
        if a.e2e_data is not None:
            guarded("batches", section_batches, a)
            checkpoints = guarded("e2e", section_e2e, a, work) or {}
            for spec in a.gen_checkpoint:
                system, path = spec.split("=", 1)
                checkpoints[system] = Path(path)
            if checkpoints:
                guarded("generate", section_generate, a, work, checkpoints)
            guarded("fairseq_bf16", section_fairseq_bf16, a, work)
        else:
            for name in DATA_SECTIONS:
                if name in a.sections:
                    res[name] = {"skipped": "no --e2e-data"}
    finally:
        if tmp_ctx is not None:
            tmp_ctx.cleanup()
    res["loadavg_end"] = os.getloadavg()
    res["total_wall_s"] = time.perf_counter() - t_start
    res["targets"] = targets(res)
    a.out.parent.mkdir(parents=True, exist_ok=True)
    a.out.write_text(json.dumps(res, indent=1, default=str) + "\n")
    md = markdown(res)
    a.out.with_suffix(".md").write_text(md + "\n")
    print(md)
    log(f"wrote {a.out} and {a.out.with_suffix('.md')} in {res['total_wall_s']:.0f}s")
    if res["errors"]:
        log(f"sections that failed: {', '.join(res['errors'])} (see the report's Errors)")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
