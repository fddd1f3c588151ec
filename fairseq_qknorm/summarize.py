"""Summarize finished runs into a results table (Markdown + JSON).

``python -m fairseq_qknorm.summarize --run DIR [--run DIR ...] --out-dir results/gl-en
[--name demo] [--baseline SYSTEM]``

Each ``DIR`` is a run directory written by ``scripts/train.sh`` and
``scripts/evaluate.sh`` (``train.json``, ``test.score.json``,
``checkpoints/checkpoint_best.pt``). The table has one row per run: system,
arch, tokenized BLEU (comparable to the papers), detokenized sacreBLEU, chrF,
QKNorm ``g0`` and the final mean ``g`` over attention modules (read from the
checkpoint), updates and training wall time.
"""

import argparse
import json
import os
import sys
from typing import Dict, List, Optional


class SummaryError(ValueError):
    """A run directory lacks a file the summary needs (message names it)."""


def final_qknorm_scales(checkpoint: str) -> Dict[str, float]:
    """``{parameter name: g}`` for every QKNorm scale in a fairseq checkpoint.

    Loads with ``weights_only=False`` (fairseq checkpoints hold pickled
    configs): only for checkpoints you trust. Empty dict for dot-product models.
    """
    import torch

    state = torch.load(checkpoint, map_location="cpu", weights_only=False)
    return {k: float(v) for k, v in state["model"].items() if k.endswith("qk_norm_g")}


def summarize_run(run_dir: str, split: str = "test") -> Dict:
    """One table row for a run directory.

    Raises:
        SummaryError: ``train.json`` or ``{split}.score.json`` missing.
    """
    paths = {name: os.path.join(run_dir, name) for name in ("train.json", f"{split}.score.json")}
    for name, path in paths.items():
        if not os.path.isfile(path):
            raise SummaryError(f"{path} not found (run scripts/train.sh and scripts/evaluate.sh)")
    train = json.load(open(paths["train.json"]))
    score = json.load(open(paths[f"{split}.score.json"]))
    ckpt = os.path.join(run_dir, "checkpoints", "checkpoint_best.pt")
    scales = final_qknorm_scales(ckpt) if os.path.isfile(ckpt) else {}
    return {
        **{k: train.get(k) for k in ("pair", "profile", "system", "seed", "arch", "updates",
                                     "wall_seconds", "qknorm_L", "paper_L", "qknorm_g0")},
        "bleu_tok": score["bleu_tok"],
        "bleu": score["bleu"],
        "chrf": score["chrf"],
        "n_lines": score["n_lines"],
        "signatures": score["signatures"],
        "qknorm_g_final_mean": (sum(scales.values()) / len(scales)) if scales else None,
        "qknorm_g_final": scales or None,
        "run_dir": os.path.abspath(run_dir),
    }


def _fmt(value, spec=".2f", none="–"):
    return none if value is None else format(value, spec)


def markdown_table(rows: List[Dict], baseline: Optional[str] = None) -> str:
    """Markdown table of :func:`summarize_run` rows (BLEU in points, wall in minutes)."""
    base = next((r for r in rows if r["system"] == baseline), None)
    head = ("| system | arch | seed | BLEU tok | Δ vs base | sacreBLEU detok | chrF | g0 (L) "
            "| final mean g | updates | train wall (min) |")
    lines = [head, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        delta = None if base is None or r is base else r["bleu_tok"] - base["bleu_tok"]
        g0 = (f"{r['qknorm_g0']:.2f} ({r['qknorm_L']})" if r.get("qknorm_g0") is not None else "–")
        lines.append(
            f"| {r['system']} | {r['arch']} | {r['seed']} | {_fmt(r['bleu_tok'])} | "
            f"{_fmt(delta, '+.2f')} | {_fmt(r['bleu'])} | {_fmt(r['chrf'])} | {g0} | "
            f"{_fmt(r['qknorm_g_final_mean'])} | {r['updates']} | "
            f"{_fmt(r['wall_seconds'] / 60 if r['wall_seconds'] is not None else None, '.1f')} |")
    sigs = rows[0]["signatures"] if rows else {}
    lines.append("")
    lines.append("BLEU tok: tokenized BLEU on the Moses-tokenized reference (as multi-bleu.perl and "
                 "the papers). sacreBLEU detok: detokenized, 13a. Signatures:")
    for key in ("bleu_tok", "bleu", "chrf"):
        if key in sigs:
            lines.append(f"- `{sigs[key]}`")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fairseq_qknorm.summarize",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--run", action="append", required=True, help="run directory (repeat)")
    parser.add_argument("--out-dir", required=True, help="where <name>.md and <name>.json go")
    parser.add_argument("--name", default="summary", help="output file stem (default: summary)")
    parser.add_argument("--baseline", help="system whose BLEU the Δ column subtracts")
    parser.add_argument("--split", default="test")
    args = parser.parse_args(argv)
    try:
        rows = [summarize_run(d, args.split) for d in args.run]
    except SummaryError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    os.makedirs(args.out_dir, exist_ok=True)
    table = markdown_table(rows, args.baseline)
    with open(os.path.join(args.out_dir, f"{args.name}.md"), "w") as f:
        f.write(table)
    with open(os.path.join(args.out_dir, f"{args.name}.json"), "w") as f:
        json.dump({"baseline": args.baseline, "runs": rows}, f, indent=2)
    print(table)
    return 0


if __name__ == "__main__":
    sys.exit(main())
