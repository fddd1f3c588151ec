"""The size axis of the LR sweep: LR sensitivity against non-embedding parameters, per system.

Wortsman et al. 2023 ("Small-scale proxies for large-scale Transformer training instabilities",
arXiv:2309.14322, Fig. 1 and Sec. 3.1) plot LR sensitivity (:func:`.lr_sweep.lr_sensitivity`)
against the number of non-embedding parameters: without qk-layernorm it grows with model size,
with it it stays low. ``scripts/lr_sweep.sh --sizes 128,256,384`` runs the sweep at each width
(one ``lr_sweep.json`` per size, :func:`.lr_sweep.lr_sweep`) and
``python -m qknorm_tools.lr_sweep_sizes`` joins them: per system and size the LR sensitivity,
diverged runs and the largest max attention logit of any run, as ``lr_sweep_sizes.{md,json}``
and ``lr_sweep_sizes.png`` (:func:`.plots.plot_lr_sizes`). Torch-free.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from .exits import UsageError, fail, status_of
from .tables import write_markdown_and_json
from .textio import OutputError, ResultsError, output_error_message

__all__ = ["SWEEP_SIZES", "non_embedding_params", "size_axis", "size_axis_markdown", "main"]

#: width d -> encoder (= decoder) layers of the sweep's sizes (fairseq_qknorm archs
#: FAMILY_d128, FAMILY_proxy, FAMILY_d384; FFN 4 d, heads of 64)
SWEEP_SIZES = {128: 2, 256: 3, 384: 4}


def non_embedding_params(d: int, layers: int, ffn: int | None = None) -> int:
    """Non-embedding parameters of a PreNorm encoder-decoder Transformer (weights and biases).

    Per encoder layer: self-attention ``4 (d^2 + d)``, FFN ``2 d f + f + d``, two LayerNorms
    ``2 * 2 d``; per decoder layer: self- and encoder-attention ``8 (d^2 + d)``, the FFN, three
    LayerNorms; plus the two final LayerNorms ``2 * 2 d``. Token embeddings (tied with the output
    projection) and sinusoidal positions are left out, as Wortsman et al. count; ScaleNorm (1
    parameter per norm instead of 2 d), QKNorm's g and QK-norm weights change the count by less
    than 0.5% at these sizes and are not counted (one count per size for every system).

    Args:
        d: model width.
        layers: encoder layers (= decoder layers).
        ffn: FFN width (default 4 d).

    Returns: the count.
    """
    f = 4 * d if ffn is None else ffn
    ffn_params = 2 * d * f + f + d
    enc = layers * (4 * (d * d + d) + ffn_params + 2 * 2 * d)
    dec = layers * (8 * (d * d + d) + ffn_params + 3 * 2 * d)
    return enc + dec + 2 * 2 * d


def _load(path) -> dict:
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise ResultsError(f"{path}: not a readable lr_sweep.json ({exc})") from None
    if not isinstance(data, dict) or "systems" not in data or "runs" not in data:
        raise ResultsError(f"{path}: not an lr_sweep.json (no 'systems'/'runs')")
    return data


def size_axis(sweeps: Mapping[int, object], pair: str | None = None) -> dict:
    """Join per-size LR sweeps into the size axis.

    Args:
        sweeps: width d -> an ``lr_sweep.json`` (path or loaded dict) of that size; every width
            must be one of :data:`SWEEP_SIZES`.
        pair: the pair (checked against each sweep's when given).

    Returns:
        ``{"pair", "sizes": [{"d", "layers", "non_embedding_params"}], "systems": [{"system",
        "points": [{"d", "non_embedding_params", "lr_sensitivity", "n_runs", "n_diverged",
        "max_attn_logit"}]}]}``, sizes ascending; a system missing at a size has no point there.

    Raises:
        ResultsError: an unknown width, an unreadable sweep, or sweeps of different pairs.
    """
    sizes, by_system = [], {}
    for d in sorted(sweeps):
        if d not in SWEEP_SIZES:
            raise ResultsError(f"size {d}: not one of the sweep's widths {sorted(SWEEP_SIZES)}")
        data = sweeps[d] if isinstance(sweeps[d], dict) else _load(sweeps[d])
        if pair is not None and data.get("pair") not in (None, pair):
            raise ResultsError(f"size {d}: sweep of pair {data.get('pair')!r}, expected {pair!r}")
        pair = pair or data.get("pair")
        n = non_embedding_params(d, SWEEP_SIZES[d])
        sizes.append({"d": d, "layers": SWEEP_SIZES[d], "non_embedding_params": n})
        for s in data["systems"]:
            logits = [
                r["max_attn_logit"]
                for r in data["runs"]
                if r.get("system") == s["system"]
                and r.get("lr", 0) != 0
                and isinstance(r.get("max_attn_logit"), (int, float))
                and math.isfinite(r["max_attn_logit"])
            ]
            by_system.setdefault(s["system"], []).append(
                {
                    "d": d,
                    "non_embedding_params": n,
                    "lr_sensitivity": s.get("lr_sensitivity"),
                    "n_runs": s.get("n_runs"),
                    "n_diverged": s.get("n_diverged"),
                    "max_attn_logit": max(logits) if logits else None,
                }
            )
    systems = [{"system": name, "points": pts} for name, pts in by_system.items()]
    return {"pair": pair, "sizes": sizes, "systems": systems, "definition": _DEFINITION}


_DEFINITION = (
    "LR sensitivity per size as in lr_sweep.json (Wortsman et al. 2023, arXiv:2309.14322, "
    "Sec. 2.2) against non-embedding parameters (Fig. 1); max attention logit: the largest of "
    "any run of that system and size"
)


def _num(x, spec: str) -> str:
    return "-" if x is None else format(x, spec)


def size_axis_markdown(res: Mapping) -> str:
    """The size axis as a Markdown table: one row per system, one column group per size."""
    sizes = res["sizes"]
    head = ["system"] + [
        f"d {s['d']} ({s['layers']}+{s['layers']}, {s['non_embedding_params'] / 1e6:.2f}M)"
        for s in sizes
    ]
    lines = [
        f"# LR sensitivity vs model size{' (' + res['pair'] + ')' if res.get('pair') else ''}",
        "",
        "LR sensitivity (bits) / diverged runs / max attention logit, per system and size.",
        "",
        "| " + " | ".join(head) + " |",
        "|---|" + "---:|" * len(sizes),
    ]
    for s in res["systems"]:
        at = {p["d"]: p for p in s["points"]}
        cells = []
        for size in sizes:
            p = at.get(size["d"])
            cells.append(
                "-"
                if p is None
                else f"{_num(p['lr_sensitivity'], '.3f')} / {_num(p['n_diverged'], 'd')}"
                f" of {_num(p['n_runs'], 'd')} / {_num(p['max_attn_logit'], '.3g')}"
            )
        lines.append(f"| {s['system']} | " + " | ".join(cells) + " |")
    lines += ["", res.get("definition", _DEFINITION) + "."]
    return "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m qknorm_tools.lr_sweep_sizes --size 128=DIR/lr_sweep.json ... --out-dir D``.

    Writes ``lr_sweep_sizes.{md,json,png}``; exit status (:mod:`~.exits`) 1 on bad input or an
    output error, 2 on a usage error.
    """
    p = argparse.ArgumentParser(prog="python -m qknorm_tools.lr_sweep_sizes", description=__doc__)
    p.add_argument("--size", action="append", required=True, metavar="D=JSON",
                   help="width and its lr_sweep.json (repeat per size)")  # fmt: skip
    p.add_argument("--out-dir", required=True)
    p.add_argument("--pair", default=None)
    p.add_argument("--title", default="")
    a = p.parse_args(argv)
    try:
        sweeps = {}
        for item in a.size:
            d, sep, path = item.partition("=")
            if not sep or not d.isdigit():
                raise UsageError(
                    f"--size {item!r}: expected WIDTH=PATH, e.g. 128=d128/lr_sweep.json"
                )
            sweeps[int(d)] = path
        res = size_axis(sweeps, pair=a.pair)
        write_markdown_and_json(a.out_dir, "lr_sweep_sizes", size_axis_markdown(res), res)
        from .plots_lr import plot_lr_sizes

        png = plot_lr_sizes(res, Path(a.out_dir) / "lr_sweep_sizes.png", title=a.title)
    except OutputError as exc:
        return fail(output_error_message(exc))
    except (ResultsError, OSError, UsageError) as exc:
        return fail(exc, status_of(exc))
    print(f"wrote {Path(a.out_dir) / 'lr_sweep_sizes.md'}, .json and {png}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
