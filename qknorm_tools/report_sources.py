"""Reading and validating the JSON sources of a results directory for the HTML report.

:func:`collect_sources` reads the result files :mod:`qknorm_tools.report` builds a page from
(:data:`KNOWN`, in the directory and two levels below it); the run records' labels, hover text
and ``train.log`` paths; :func:`validate_attention` checks an ``attention.json`` of
``qknorm_model_tools.attention_dump`` against its schema. Errors are :class:`ReportInputError`.
"""

from __future__ import annotations

import html
import json
import math
from collections.abc import Mapping
from pathlib import Path

__all__ = [
    "ATTENTION_FORMAT",
    "KNOWN",
    "REQUIRED_KEYS",
    "ReportInputError",
    "collect_sources",
    "not_a_directory",
    "report_dirs",
    "validate_attention",
]

#: the result files a page is built from (searched in the directory and two levels below)
KNOWN = (
    "runs.json",
    "demo.json",
    "aggregate.json",
    "demo_compare.json",
    "ablation.json",
    "lr_sweep.json",
    "attention.json",
)


#: the keys each result file's JSON object must hold, with their types (what its writer always
#: writes and the page reads); attention.json has its own schema (:func:`validate_attention`)
REQUIRED_KEYS = {
    "runs.json": {"runs": list},
    "demo.json": {"runs": list},
    "aggregate.json": {"metric": str, "pairs": dict},
    "demo_compare.json": {"metric": str, "systems": list},
    "ablation.json": {"metric": str, "cells": dict, "effects": dict},
    "lr_sweep.json": {"pair": str, "lrs": list, "runs": list},
}


class ReportInputError(ValueError):
    """Unusable input; the message names the file.

    A results directory that does not exist or holds none of :data:`KNOWN`, a file that is
    not JSON, an output that cannot be written, plotly missing.
    """


# ----------------------------------------------------------------------------- reading
def not_a_directory(path, what: str) -> str | None:
    """Why ``path`` (``what``: "results directory", ...) cannot be read as one, or ``None``.

    Not there (``not found``), or there but a file (or another non-directory), said as such.
    """
    path = Path(path)
    if path.is_dir():
        return None
    if path.is_file():
        return f"{what} {str(path)!r} is a file, not a directory"
    if path.exists():
        return f"{what} {str(path)!r} is not a directory"
    return f"{what} {str(path)!r} not found"


def _source_paths(root: Path) -> list[Path]:
    """The :data:`KNOWN` files of ``root`` and two levels below it, in reading order."""
    return [
        path
        for pattern in ("", "*/", "*/*/")
        for name in KNOWN
        for path in sorted(root.glob(pattern + name))
    ]


#: why `make report` skips a results directory that holds run records and nothing collected
RECORDS_ONLY = (
    "run records only (records/), none of the files a page is built from ({known}): collect "
    "the runs first (--aggregate-only of the script that trained them)"
)


def report_dirs(results_root) -> tuple[list[Path], list[tuple[Path, str]]]:
    """The results directories a page is built for, and the others with why each is skipped.

    Among ``RESULTS_ROOT/<label>/<pair>/`` (what ``make report`` builds and says), a directory
    gets a page when it holds one of :data:`KNOWN` (in it or up to two levels
    below: what :func:`collect_sources` reads); one with only ``records/`` (committed run
    records of runs not collected yet) or nothing known is skipped with its reason.
    """
    pages: list[Path] = []
    skipped: list[tuple[Path, str]] = []
    for d in sorted(p for p in Path(results_root).glob("*/*") if p.is_dir()):
        if _source_paths(d):
            pages.append(d)
        elif (d / "records").is_dir():
            skipped.append((d, RECORDS_ONLY.format(known=", ".join(KNOWN))))
        else:
            skipped.append((d, f"none of {', '.join(KNOWN)}"))
    return pages, skipped


def collect_sources(results_dir) -> dict[str, object]:
    """``{path relative to results_dir: parsed JSON}`` of the :data:`KNOWN` files.

    Raises:
        ReportInputError: no such directory (or a file), none of the files, or a file that is
            not JSON.
    """
    root = Path(results_dir)
    why = not_a_directory(root, "results directory")
    if why:
        raise ReportInputError(why)
    found: dict[str, object] = {}
    for path in _source_paths(root):
        rel = path.relative_to(root).as_posix()
        try:
            found[rel] = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, json.JSONDecodeError) as exc:
            raise ReportInputError(f"cannot read {str(path)!r}: {exc}") from None
        need = REQUIRED_KEYS.get(path.name, {})
        doc = found[rel]
        missing = [k for k in need if not isinstance(doc, dict) or k not in doc]
        if missing:
            what = "keys" if len(missing) > 1 else "key"
            raise ReportInputError(
                f"{str(path)!r} is not this project's {path.name} (no {what} "
                f"{', '.join(repr(k) for k in missing)}; its writer always writes them)"
            )
        for key, kind in need.items():
            if not isinstance(doc[key], kind):
                raise ReportInputError(
                    f"{str(path)!r} is not this project's {path.name} (key {key!r} holds a "
                    f"{type(doc[key]).__name__}, its writer writes a {kind.__name__})"
                )
    if not found:
        hint = ""
        if (root / "train.json").is_file():  # a run directory: its results are collected first
            hint = (
                f"; it is a run directory: collect it first (python -m qknorm_tools.collect runs "
                f"--run {root} --work-dir WORK --out-dir OUT --keep-unscored), then report OUT"
            )
        raise ReportInputError(
            f"{str(root)!r} holds none of {', '.join(KNOWN)} (up to two levels below it){hint}"
        )
    return dict(sorted(found.items()))


def _finite(x):
    return (
        x if isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x) else None
    )


def _clean(obj):
    """JSON-safe copy: non-finite floats become ``None`` (JSON has no NaN)."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, Mapping):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


def _run_label(r: Mapping) -> str:
    variant = r.get("variant") or {}
    extra = "".join(f" {k}={v}" for k, v in sorted(variant.items()))
    return f"{r.get('system')} seed{r.get('seed')}{extra}"


def _hover(r: Mapping) -> str:
    bits = [f"<b>{html.escape(_run_label(r))}</b>", f"profile {r.get('profile')}"]
    for key, fmt in (("updates", "{}"), ("bleu_tok", "{:.2f}"), ("dev_loss", "{:.3f}")):
        if _finite(r.get(key)) is not None:
            bits.append(f"{key} " + fmt.format(r[key]))
    if r.get("run_dir"):
        bits.append(html.escape(str(r["run_dir"])))
    return "<br>".join(bits)


def _records(sources: Mapping[str, object]) -> list[tuple[str, Mapping, dict]]:
    """``(source, records file content, record)`` of every run of runs.json (else demo.json)."""
    out = []
    dirs = {}
    for rel, d in sources.items():
        name = rel.rsplit("/", 1)[-1]
        if name in ("runs.json", "demo.json") and isinstance(d, Mapping):
            folder = rel.rsplit("/", 1)[0] if "/" in rel else ""
            # demo.json repeats runs.json's records: read it only without a runs.json
            if name == "demo.json" and dirs.get(folder) == "runs.json":
                continue
            if name == "runs.json":
                out = [o for o in out if o[0] != f"{folder}/demo.json".lstrip("/")]
            dirs[folder] = name
            for r in d.get("runs") or []:
                if isinstance(r, Mapping):
                    out.append((rel, d, dict(r)))
    return out


def _train_log(results_dir: Path, rel: str, d: Mapping, r: Mapping) -> Path | None:
    if not r.get("train_log"):
        return None
    log = Path(str(r["train_log"]))
    if not log.is_absolute():
        base = (results_dir / rel).parent / str(d.get("work_dir") or ".")
        log = base / log
    return log


#: the format tag of ``qknorm_model_tools.attention_dump`` (its ``FORMAT``; that module imports
#: torch, so the tag is repeated here and a test keeps the two equal)
ATTENTION_FORMAT = "qknorm-attention/1"


def _shape(x, depth: int) -> list[int] | None:
    """The sizes of a ``depth``-deep rectangular nested list, None when it is not one."""
    if depth == 0:
        return [] if x is None or _finite(x) is not None else None
    if not isinstance(x, list) or not x:
        return None
    inner = [_shape(v, depth - 1) for v in x]
    if any(i is None or i != inner[0] for i in inner):
        return None
    return [len(x), *inner[0]]


def validate_attention(att, path) -> None:
    """Check an attention dump against the schema ``qknorm_model_tools.attention_dump`` writes.

    ``{"format": "qknorm-attention/1", "models": [{"name", "sentences": [{"index",
    "src_tokens", "tgt_tokens", "modules": {name: {"kind", "qk_norm_type", "g", "logits",
    "probs", "entropy"}}}]}]}``: every model with the same sentences, ``logits`` and ``probs``
    ``[head][query][key]`` and ``entropy`` ``[head][query]`` sized by the tokens (queries and
    keys: source tokens in the encoder, target tokens in decoder self-attention, target x
    source in encoder-decoder attention); masked logits may be null.

    Raises:
        ReportInputError: naming ``path`` and the first thing missing or malformed.
    """

    def bad(where: str, what: str):
        raise ReportInputError(
            f"attention file {str(path)!r} is not an attention dump of "
            f"qknorm_model_tools.attention_dump ({ATTENTION_FORMAT}): {where}: {what}"
        )

    if not isinstance(att, Mapping):
        bad("top level", f"expected an object, got {type(att).__name__}")
    if att.get("format") != ATTENTION_FORMAT:
        bad("format", f"expected {ATTENTION_FORMAT!r}, got {att.get('format')!r}")
    models = att.get("models")
    if not isinstance(models, list) or not models:
        bad("models", "missing or empty (a list of models)")
    first_index = None
    for i, m in enumerate(models):
        where = f"models[{i}]"
        if not isinstance(m, Mapping) or not isinstance(m.get("name"), str):
            bad(where, "missing name")
        sents = m.get("sentences")
        if not isinstance(sents, list) or not sents:
            bad(f"{where}.sentences", "missing or empty")
        index = [s.get("index") if isinstance(s, Mapping) else None for s in sents]
        first_index = index if first_index is None else first_index
        if index != first_index:
            bad(f"{where}.sentences", f"indices {index} differ from models[0]'s {first_index}")
        for j, s in enumerate(sents):
            sw = f"{where}.sentences[{j}]"
            if not isinstance(s.get("index"), int):
                bad(sw, "missing index")
            toks = {}
            for key in ("src_tokens", "tgt_tokens"):
                t = s.get(key)
                if not isinstance(t, list) or not t or not all(isinstance(x, str) for x in t):
                    bad(f"{sw}.{key}", "missing or not a list of tokens")
                toks[key] = len(t)
            mods = s.get("modules")
            if not isinstance(mods, Mapping) or not mods:
                bad(f"{sw}.modules", "missing or empty")
            for name, mod in mods.items():
                mw = f"{sw}.modules.{name}"
                if not isinstance(mod, Mapping):
                    bad(mw, "not an object")
                for key in ("kind", "qk_norm_type"):
                    if not isinstance(mod.get(key), str):
                        bad(f"{mw}.{key}", "missing")
                g = mod.get("g")
                if not (g is None or _finite(g) is not None or _shape(g, 1) is not None):
                    bad(f"{mw}.g", "not null, a number or a list of numbers")
                q = toks["src_tokens"] if name.startswith("enc") else toks["tgt_tokens"]
                k = toks["src_tokens"] if name.startswith("enc") or "cross" in name else q
                heads = None
                for key, depth in (("probs", 3), ("logits", 3), ("entropy", 2)):
                    shape = _shape(mod.get(key), depth)
                    if shape is None:
                        dims = "[head][query][key]" if depth == 3 else "[head][query]"
                        bad(f"{mw}.{key}", f"missing or not a rectangular {dims} list of numbers")
                    heads = shape[0] if heads is None else heads
                    want = [heads, q, k][:depth]
                    if shape != want:
                        bad(
                            f"{mw}.{key}",
                            f"shape {shape}, expected {want} (heads, queries"
                            f"{', keys' if depth == 3 else ''})",
                        )
