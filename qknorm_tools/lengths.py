"""Sentence lengths and their percentile: QKNorm's L (standard library; numpy when importable).

What ``python -m qknorm_tools.corpus length-percentile`` (:mod:`.corpus`) computes: the q-th
percentile L of tokens per line (:func:`length_stats`; the model computes its g0 from L).
:func:`line_lengths` is also what :mod:`.seglen` counts with.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from .corpus_check import CorpusError, decode_line


def percentile_linear(values: Sequence[float], q: float) -> float:
    """q-th percentile with linear interpolation between closest ranks.

    Identical to ``numpy.percentile(values, q)`` (default ``method='linear'``, the "type 7"
    estimator): with the values sorted ascending as v[0..n-1], the rank is h = (n-1)*q/100 and
    the result is v[floor(h)] + (h - floor(h)) * (v[floor(h)+1] - v[floor(h)]).
    numpy is used when importable; this pure-Python version is the fallback.
    """
    if not values:
        raise ValueError("percentile of an empty sequence")
    if not 0 <= q <= 100:
        raise ValueError(f"q must be in [0, 100], got {q}")
    try:
        import numpy as np  # noqa: PLC0415 - optional dependency

        return float(np.percentile(np.asarray(values, dtype=np.float64), q))
    except ImportError:  # pragma: no cover - numpy is installed in the project venv
        v = sorted(values)
        h = (len(v) - 1) * q / 100.0
        lo = math.floor(h)
        hi = min(lo + 1, len(v) - 1)
        return float(v[lo] + (h - lo) * (v[hi] - v[lo]))


def line_lengths(paths: Sequence[str]) -> list[int]:
    """Tokens (whitespace-separated, i.e. BPE units for BPE'd text) per line, all files."""
    lengths: list[int] = []
    for path in paths:
        with open(path, "rb") as f:
            for lineno, raw in enumerate(f, 1):
                lengths.append(len(decode_line(raw, path, lineno).split()))
    return lengths


def _ceil(x: float) -> int:
    """Round up, ignoring floating-point noise below 1e-9 (92.0000000001 -> 92)."""
    return int(math.ceil(x - 1e-9))


def length_stats(paths: Sequence[str], q: float = 97.5) -> dict:
    """QKNorm's L: the q-th percentile of BPE tokens per training sentence.

    Definition: every line of every given file is one sentence (normally the BPE'd training
    files of both sides, so each training pair contributes two lengths); its length is the
    number of whitespace-separated tokens (BPE units; no EOS). ``percentile`` is
    ``numpy.percentile(lengths, q)`` (linear interpolation); ``L = ceil(percentile)``, the
    smallest integer length covering q% of the sentences (our choice: the papers give integer
    L without saying how they rounded). The model computes its ``g0 = log2(L^2 - L)`` from L
    (``fairseq_qknorm.modules.qknorm_attention.qk_norm_initial_scale``) and logs it.
    """
    per_file = {}
    lengths: list[int] = []
    for path in paths:
        file_lengths = line_lengths([path])
        if file_lengths:
            fp = percentile_linear(file_lengths, q)
            per_file[str(path)] = {"n_lines": len(file_lengths), "percentile": fp, "L": _ceil(fp)}
        lengths.extend(file_lengths)
    if not lengths:
        raise CorpusError(
            paths[0] if paths else "-", "no lines to compute a length percentile from"
        )
    p = percentile_linear(lengths, q)
    L = _ceil(p)
    return {
        "L": L,
        "q": q,
        "n_lines": len(lengths),
        "percentile": p,
        "rounding": "ceil",
        "mean_length": sum(lengths) / len(lengths),
        "max_length": max(lengths),
        "files": [str(p_) for p_ in paths],
        "per_file": per_file,
        "definition": "L = ceil(numpy.percentile(tokens_per_line over all lines of all files, q, "
        "method='linear')) (Henry et al. 2020: 97.5th percentile)",
    }
