r"""Dump the attention of chosen test sentences from one or more checkpoints to JSON.

::

    python -m qknorm_model_tools.attention_dump RUN/checkpoints/checkpoint_best.pt \
        [BASELINE/checkpoints/checkpoint_best.pt] --data BIN_DIR --sentences 0,1,2 \
        [--names qknorm_paper,twt] [--subset test] -o results/PROFILE/PAIR/attention.json

Each sentence (index into the binarized ``--subset``, as ``fairseq-generate`` numbers it) is
run through each model once, teacher-forced on its reference translation (no beam search:
every model sees the same source and target tokens, so two models' heads can be compared
cell by cell), in ``eval`` mode (no dropout), one sentence per batch (no padding).

For every attention module (``enc{i}_self``, ``dec{i}_self``, ``dec{i}_cross``, the names of
:meth:`~fairseq_qknorm.models.transformer_qknorm.TransformerQKNormModel.attention_modules`
and of the training log) and every head, the JSON holds:

* ``logits`` ``[heads][tgt][src]``: the pre-softmax logits *as the module computes them*
  (l2 QKNorm: ``g * cos(q, k)``, Henry et al. 2020 Eq. 3; QK-LayerNorm/RMSNorm and dot
  product: ``q.k / sqrt(d_head)``, Vaswani et al. 2017 Eq. 1), taken from the module's own
  statistics path (:meth:`QKNormMultiheadAttention._store_stats` receives exactly the logits
  that enter the softmax), never recomputed here; masked entries (the decoder's future
  positions) are ``null``;
* ``probs`` ``[heads][tgt][src]``: the softmax probabilities the module used (float32);
* ``entropy`` ``[heads][tgt]``: ``-sum_j p_ij ln p_ij`` in nats (Zhai et al. 2023, Sec. 3);
* the module's ``g`` (l2 QKNorm; ``null`` otherwise).

Tokens are the dictionary's symbols (BPE units, ``</s>`` included): ``src_tokens`` label the
keys of ``enc*_self`` and ``dec*_cross``, ``tgt_tokens`` (the decoder input, ``</s>`` first,
as fairseq shifts it) label the queries of the decoder modules and the keys of ``dec*_self``;
``tgt_output`` is what each decoder position predicts. ``qknorm_tools.report`` shows the file
as a heatmap with layer / head selectors, the models side by side.

Security: checkpoints are unpickled, as every fairseq checkpoint load is; dump only
checkpoints you trust.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

logger = logging.getLogger("qknorm_model_tools.attention_dump")

#: format tag of the JSON written (read by qknorm_tools.report)
FORMAT = "qknorm-attention/1"


class AttentionDumpError(ValueError):
    """Unusable input: a missing checkpoint or data directory, a sentence index out of range."""


def parse_sentences(text: str) -> list[int]:
    """``"0,1,5-7"`` -> ``[0, 1, 5, 6, 7]``.

    Raises:
        AttentionDumpError: not a comma-separated list of non-negative integers or ranges.
    """
    out: list[int] = []
    for part in text.split(","):
        part = part.strip()
        try:
            if "-" in part:
                a, b = (int(x) for x in part.split("-", 1))
                if a < 0 or b < a:
                    raise ValueError
                out.extend(range(a, b + 1))
            else:
                i = int(part)
                if i < 0:
                    raise ValueError
                out.append(i)
        except ValueError:
            raise AttentionDumpError(
                f"--sentences {text!r}: expected non-negative indices or ranges like 0,1,5-7"
            ) from None
    if not out:
        raise AttentionDumpError("--sentences: no sentence given")
    return out


class AttentionRecorder:
    """Record the logits and probabilities of every attention module of a model.

    Sets each module's ``record_stats`` (so that its forward takes the explicit path and
    hands the logits entering the softmax to ``_store_stats``) and wraps that method on the
    instance; :meth:`close` restores both. Use as a context manager.

    ``records[name]`` after a forward: ``(logits, probs)``, each ``(B', H, T', S)`` float32
    on the CPU (``B'`` = batch, ``T'`` = queries, ``S`` = keys; ``-inf`` at masked logits).
    """

    def __init__(self, modules: dict):
        self.modules = modules
        self.records: dict[str, tuple[torch.Tensor, torch.Tensor]] = {}
        self._saved = {}

    def __enter__(self) -> AttentionRecorder:
        for name, m in self.modules.items():
            self._saved[name] = m.record_stats
            original = m._store_stats

            def store(logits, probs, dead, _name=name, _original=original):
                self.records[_name] = (logits.detach().float().cpu(), probs.detach().float().cpu())
                return _original(logits, probs, dead)

            m._store_stats = store  # instance attribute: shadows the class method
            m.record_stats = True
        return self

    def close(self) -> None:
        """Restore the modules (no wrapper, the previous ``record_stats``)."""
        for name, m in self.modules.items():
            m.__dict__.pop("_store_stats", None)
            m.record_stats = self._saved.get(name, False)

    def __exit__(self, *exc) -> None:
        self.close()


def _rounded(t: torch.Tensor, decimals: int) -> list:
    """Nested lists of ``t`` rounded to ``decimals``; non-finite values as ``None``."""

    def conv(x):
        if isinstance(x, list):
            return [conv(y) for y in x]
        return round(x, decimals) if math.isfinite(x) else None

    return conv(t.tolist())


def entropy(probs: torch.Tensor) -> torch.Tensor:
    """``-sum_j p_ij ln p_ij`` over the last axis, in nats (``0 ln 0 = 0``).

    Args:
        probs: ``(..., S)`` probabilities.

    Returns:
        ``(...)``, float64.
    """
    p = probs.double()
    return -(p * torch.log(p.clamp_min(1e-300))).sum(-1)


def load_model(checkpoint, data: str):
    """``(model, task, arch)`` of a fairseq checkpoint of this plugin, in eval mode on the CPU.

    Raises:
        AttentionDumpError: no such checkpoint file or data directory.
    """
    from fairseq import checkpoint_utils

    import fairseq_qknorm  # noqa: F401  (registers the plugin's models and tasks)

    checkpoint = Path(checkpoint)
    if not checkpoint.is_file():
        raise AttentionDumpError(f"checkpoint {str(checkpoint)!r} not found")
    if not Path(data, "dict.txt").is_file() and not any(Path(data).glob("dict.*.txt")):
        raise AttentionDumpError(f"--data {data!r}: no fairseq dictionary (dict.*.txt) there")
    models, cfg, task = checkpoint_utils.load_model_ensemble_and_task(
        [str(checkpoint)], arg_overrides={"data": str(data)}
    )
    model = models[0]
    if not hasattr(model, "attention_modules"):
        raise AttentionDumpError(
            f"checkpoint {str(checkpoint)!r} is not a transformer_qknorm model "
            f"({type(model).__name__}): its attention cannot be recorded"
        )
    model.eval()
    arch = getattr(cfg.model, "arch", None) or getattr(cfg.model, "_name", None)
    return model, task, arch


def _symbols(dictionary, ids: torch.Tensor) -> list[str]:
    return [dictionary[int(i)] for i in ids]


@torch.no_grad()
def dump_model(model, task, subset: str, sentences: Sequence[int], decimals: int = 5) -> dict:
    """The attention of ``sentences`` of ``subset`` through ``model`` (module docstring).

    Returns:
        ``{"sentences": [{"index", "src_tokens", "tgt_tokens", "tgt_output",
        "modules": {name: {"kind", "layer", "logits", "probs", "entropy", "g"}}}]}``.

    Raises:
        AttentionDumpError: a sentence index past the end of ``subset``.
    """
    task.load_dataset(subset)
    dataset = task.dataset(subset)
    n = len(dataset)
    bad = [i for i in sentences if i >= n]
    if bad:
        raise AttentionDumpError(
            f"sentence(s) {bad} out of range: subset {subset!r} of {task.cfg.data} "
            f"has {n} sentences (0-{n - 1})"
        )
    modules = model.attention_modules()
    kinds = {"self": "self-attention", "cross": "encoder-decoder attention"}
    out = []
    for index in sentences:
        batch = dataset.collater([dataset[index]])
        net_input = batch["net_input"]
        with AttentionRecorder(modules) as rec:
            model(**net_input)
        entry = {
            "index": index,
            "src_tokens": _symbols(task.source_dictionary, net_input["src_tokens"][0]),
            "tgt_tokens": _symbols(task.target_dictionary, net_input["prev_output_tokens"][0]),
            "tgt_output": _symbols(task.target_dictionary, batch["target"][0]),
            "modules": {},
        }
        for name, m in modules.items():
            if name not in rec.records:
                raise RuntimeError(f"attention module {name} recorded nothing")
            logits, probs = rec.records[name]  # (1, H, T, S)
            side, kind = name.split("_", 1)
            g = None if m.qk_norm_g is None else m.qk_norm_g.detach().float().tolist()
            entry["modules"][name] = {
                "kind": ("encoder " if side.startswith("enc") else "decoder ") + kinds[kind],
                "layer": int(side[3:]),
                "qk_norm_type": m.qk_norm_type if m.qk_norm else "none",
                "g": g,
                "logits": _rounded(logits[0], decimals),
                "probs": _rounded(probs[0], decimals),
                "entropy": _rounded(entropy(probs[0]), decimals),
            }
        out.append(entry)
    return {"sentences": out}


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser (``--help`` lists every option)."""
    p = argparse.ArgumentParser(
        prog="python -m qknorm_model_tools.attention_dump",
        description="Dump per-layer, per-head attention logits, probabilities and entropy of "
        "chosen sentences (teacher-forced on the reference) to JSON for qknorm_tools.report.",
    )
    p.add_argument("checkpoints", nargs="+", help="one or more checkpoints (e.g. QKNorm, baseline)")
    p.add_argument("--data", required=True, help="the binarized data directory (data-bin)")
    p.add_argument("--subset", default="test", help="split to read sentences from (default test)")
    p.add_argument("--sentences", default="0,1,2", help="indices, e.g. 0,1,5-7 (default 0,1,2)")
    p.add_argument("--names", help="comma-separated model names (default: the run directory)")
    p.add_argument("--decimals", type=int, default=5, help="rounding of stored values")
    p.add_argument("-o", "--output", required=True, help="JSON file to write")
    return p


def _portable(path) -> str:
    """``path`` as the dump stores it: relative to the work dir when below it.

    The work dir is ``QKNORM_WORK_DIR``, else the repository: a committed dump holds no path
    of the machine that made it.
    """
    from qknorm_tools.config import REPO
    from qknorm_tools.records import relative_path

    return relative_path(str(path), os.environ.get("QKNORM_WORK_DIR") or str(REPO))


def _default_name(checkpoint: str) -> str:
    path = Path(checkpoint).resolve()
    parent = path.parent.parent if path.parent.name == "checkpoints" else path.parent
    return f"{parent.parent.name}/{parent.name}" if parent.parent.name else parent.name


def main(argv: Sequence[str] | None = None) -> int:
    """Command line: exit 0 on success, 1 on bad input (message names it), 2 on usage errors."""
    args = build_parser().parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    try:
        sentences = parse_sentences(args.sentences)
        names = (
            args.names.split(",") if args.names else [_default_name(c) for c in args.checkpoints]
        )
        if len(names) != len(args.checkpoints):
            print(
                f"error: --names has {len(names)} names for {len(args.checkpoints)} checkpoints",
                file=sys.stderr,
            )
            return 2
        result = {"format": FORMAT, "subset": args.subset, "target": "reference (teacher-forced)",
                  "data": _portable(args.data), "models": []}  # fmt: skip
        for name, ckpt in zip(names, args.checkpoints):
            model, task, arch = load_model(ckpt, args.data)
            d = dump_model(model, task, args.subset, sentences, args.decimals)
            result["models"].append(
                {"name": name, "checkpoint": _portable(ckpt), "arch": arch, **d}
            )
        out = Path(args.output)
        out.parent.mkdir(parents=True, exist_ok=True)
        tmp = out.with_name(out.name + ".part")
        tmp.write_text(json.dumps(result, separators=(",", ":")) + "\n", encoding="utf-8")
        tmp.replace(out)
    except (AttentionDumpError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"wrote {out} ({len(sentences)} sentences x {len(names)} models)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
