"""The attention heatmap figure: one sentence's attention matrix (tgt_len x src_len)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from .plots_common import PlotInputError, _pyplot, _save

__all__ = ["load_attention", "plot_heatmap"]


def load_attention(path) -> tuple[object, list[str] | None, list[str] | None]:
    """Load an attention matrix (tgt_len x src_len) from ``.npy`` or ``.json``.

    JSON: a list of rows, or an object with ``attn`` (or ``attention``) and optional ``src`` /
    ``tgt`` token lists (or space-separated strings).

    Returns:
        ``(matrix as a numpy array of shape (tgt_len, src_len), src_tokens or None,
        tgt_tokens or None)``.

    Raises:
        PlotInputError: unreadable file or not a 2-D numeric matrix.
    """
    import numpy as np

    path = Path(path)
    src = tgt = None
    try:
        if path.suffix == ".npy":
            mat = np.load(path, allow_pickle=False)
        else:
            d = json.loads(path.read_text(encoding="utf-8"))
            if isinstance(d, dict):
                mat = d.get("attn", d.get("attention"))
                src, tgt = d.get("src"), d.get("tgt")
                src = src.split() if isinstance(src, str) else src
                tgt = tgt.split() if isinstance(tgt, str) else tgt
            else:
                mat = d
            mat = np.asarray(mat, dtype=float)
    except (OSError, ValueError) as exc:
        raise PlotInputError(f"cannot read attention matrix {str(path)!r}: {exc}") from None
    if mat is None or np.ndim(mat) != 2:
        raise PlotInputError(
            f"attention in {str(path)!r} must be a 2-D (tgt_len x src_len) matrix, "
            f"got shape {np.shape(mat)}"
        )
    return np.asarray(mat, dtype=float), src, tgt


def plot_heatmap(
    attn, src_tokens: Sequence[str] | None, tgt_tokens: Sequence[str] | None, out, title: str = ""
) -> str:
    """Heatmap of one sentence's attention (rows: target tokens, columns: source tokens).

    Args:
        attn: array of shape (tgt_len, src_len).
        src_tokens: column labels (default: indices).
        tgt_tokens: row labels (default: indices).
        out: PNG to write.
        title: figure title.

    Returns:
        The path of the PNG written.

    Raises:
        PlotInputError: token counts do not match the matrix shape.
    """
    import numpy as np

    plt = _pyplot()
    attn = np.asarray(attn, dtype=float)
    t_len, s_len = attn.shape
    if src_tokens is not None and len(src_tokens) != s_len:
        raise PlotInputError(
            f"{len(src_tokens)} source tokens but the matrix has {s_len} columns "
            f"(shape {attn.shape} = tgt_len x src_len)"
        )
    if tgt_tokens is not None and len(tgt_tokens) != t_len:
        raise PlotInputError(
            f"{len(tgt_tokens)} target tokens but the matrix has {t_len} rows "
            f"(shape {attn.shape} = tgt_len x src_len)"
        )
    fig, ax = plt.subplots(figsize=(max(4.0, 0.45 * s_len + 2), max(3.0, 0.4 * t_len + 1.5)))
    im = ax.imshow(
        attn, cmap="Blues", aspect="auto", vmin=0.0, vmax=max(1e-9, float(np.nanmax(attn)))
    )
    ax.set_xticks(range(s_len))
    ax.set_yticks(range(t_len))
    ax.set_xticklabels(
        src_tokens if src_tokens is not None else range(s_len), rotation=60, ha="right", fontsize=8
    )
    ax.set_yticklabels(tgt_tokens if tgt_tokens is not None else range(t_len), fontsize=8)
    ax.set_xlabel("source")
    ax.set_ylabel("target")
    if title:
        ax.set_title(title)
    fig.colorbar(im, ax=ax, fraction=0.046, pad=0.04)
    fig.tight_layout()
    return _save(fig, out)
