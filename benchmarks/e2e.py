"""End-to-end sections of ``benchmarks.run``: fairseq-train, its batches, generate, bf16.

``batches`` (the model-only step on fairseq's own training batches, paired per batch), ``e2e``
(``fairseq-train`` words/s in alternating rounds, with the command lines and the parsing of
fairseq's log), ``generate`` (``fairseq-generate`` from the e2e checkpoints) and
``fairseq_bf16`` (whether ``fairseq-train --bf16 --cpu`` works). Each section fills the ``out``
dict it is given.
"""

import json
import math
import re
import shutil
import sys
from pathlib import Path
from typing import Optional

from qknorm_tools import commands

from . import authors_code, profile_e2e, stats
from . import common as c
from .micro import paired_speed_stats, speed_ratios
from .options import AUTHORS_SYSTEM, E2E_PROFILE, log, split_variant


# ===================================================================== e2e (train)
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
    """The profile's beam search at ``--beam`` (default the profile's), then its decoding flags.

    :func:`qknorm_tools.commands.beam_flags` (the length penalty is the profile's), the output
    length cap and ``--max-tokens`` of :data:`E2E_PROFILE` (``[decode]``).
    """
    return [
        *commands.beam_flags(E2E_PROFILE, a.beam),
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
