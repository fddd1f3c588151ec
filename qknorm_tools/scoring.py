"""Corpus scores with sacreBLEU: tokenized BLEU, detokenized sacreBLEU and chrF.

References:
    Papineni et al. (2002), BLEU: a method for automatic evaluation of MT.
    Popović (2015), chrF: character n-gram F-score for automatic MT evaluation.
    Post (2018), A call for clarity in reporting BLEU scores (sacreBLEU).

All scores are points on the 0-100 scale; each is stored with its sacreBLEU signature,
labelled tokenized or detokenized.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence

from .textio import check_same_length, load_hyp_ref, warn

__all__ = [
    "SCORE_FIELDS",
    "detokenize_lines",
    "find_html_escapes",
    "format_scores",
    "score_files",
    "score_lines",
]

#: The score fields of a run: tokenized BLEU, detokenized sacreBLEU, chrF.
SCORE_FIELDS = ("bleu_tok", "bleu", "chrf")

_HTML_ESCAPE = re.compile(r"&(?:apos|quot|amp|lt|gt|#\d+|#x[0-9a-fA-F]+);")


def find_html_escapes(lines: Sequence[str]) -> tuple[int, list[str]]:
    """Count lines containing HTML/Moses escapes (``&apos;``, ``&quot;``, ``&#124;`` ...).

    Returns:
        ``(number of lines with an escape, sorted distinct escapes)``.
    """
    n = 0
    found = set()
    for line in lines:
        hits = _HTML_ESCAPE.findall(line)
        if hits:
            n += 1
            found.update(hits)
    return n, sorted(found)


def detokenize_lines(lines: Sequence[str], lang: str = "en") -> list[str]:
    """Moses-detokenize whitespace-tokenized lines with sacremoses.

    ``MosesDetokenizer(lang=lang).detokenize(line.split(), unescape=True)``, which also
    unescapes ``&apos;``, ``&quot;``, ``&amp;``, ``&#124;`` etc.
    """
    from sacremoses import MosesDetokenizer  # lazy: only the detokenized scores need it

    md = MosesDetokenizer(lang=lang)
    return [md.detokenize(line.split(), return_str=True, unescape=True) for line in lines]


def score_lines(
    hyps: Sequence[str],
    refs: Sequence[str],
    src_lang: str | None = None,
    tgt_lang: str = "en",
    warn: Callable[[str], None] = warn,
    names: tuple[str, str] = ("hypothesis", "reference"),
    allow_bpe_markers: bool = False,
) -> dict[str, object]:
    """Corpus BLEU (tokenized and detokenized) and chrF of aligned hypotheses.

    * ``bleu_tok``: sacreBLEU ``BLEU(tokenize='none')`` on the text as is (Moses-tokenized,
      escapes kept). Same n-gram counts, brevity penalty and geometric mean as
      ``multi-bleu.perl`` (Papineni et al., 2002); identical to it whenever every n-gram
      precision (n=1..4) is non-zero, which holds for any realistic test set (sacreBLEU's
      default ``exp`` smoothing only differs from multi-bleu's 0 when some precision is 0).
      This is what the QKNorm / ScaleNorm papers report.
    * ``bleu``: detokenized sacreBLEU (Post, 2018): both sides detokenized with sacremoses
      ``MosesDetokenizer(lang=tgt_lang)`` (which unescapes ``&apos;`` ``&quot;`` ...), then
      sacreBLEU's default ``13a`` tokenizer.
    * ``chrf``: sacreBLEU ``CHRF()`` defaults (chrF2, char order 6, Popović 2015) on the
      tokenized text as is.

    Args:
        hyps: hypotheses, one per segment.
        refs: references, same length.
        src_lang: optional source language, added to the signatures as ``lang:src-tgt``.
        tgt_lang: target language (detokenizer rules).
        warn: callback for warnings (default: print to stderr).
        names: names of the two inputs for messages.
        allow_bpe_markers: score text that still holds ``@@`` / ``\u2581`` (warning only).

    Returns:
        ``{"bleu_tok", "bleu", "chrf", "signatures": {same keys}, "n_lines"}``; scores are
        floats in points (0-100); each signature is ``"<label>: <sacreBLEU signature>"``
        saying tokenized / detokenized.

    Raises:
        EmptyFileError: empty inputs.
        LineCountError: unequal inputs.
        BPEMarkerError: subword markers left in either input (unless ``allow_bpe_markers``).
    """
    check_same_length(hyps, names[0], refs, names[1], allow_bpe_markers)
    return _score_checked(hyps, refs, src_lang, tgt_lang, warn, names)


def _score_checked(hyps, refs, src_lang, tgt_lang, warn, names) -> dict[str, object]:
    """:func:`score_lines` on inputs that passed :func:`~.textio.check_same_length`."""
    hyps = list(hyps)
    refs = list(refs)
    for name, lines in zip(names, (hyps, refs)):
        n_esc, escapes = find_html_escapes(lines)
        if n_esc:
            warn(
                f"{name} has HTML escapes ({', '.join(escapes[:6])}) on {n_esc} lines; they are "
                f"unescaped by MosesDetokenizer for detokenized BLEU ('bleu'), and kept as is "
                f"for tokenized BLEU ('bleu_tok') and chrF"
            )

    m_tok, m_detok, m_chrf = _metrics(tgt_lang)
    bleu_tok = m_tok.corpus_score(hyps, [refs])
    bleu = m_detok.corpus_score(
        detokenize_lines(hyps, tgt_lang), [detokenize_lines(refs, tgt_lang)]
    )
    chrf = m_chrf.corpus_score(hyps, [refs])
    return {
        "bleu_tok": float(bleu_tok.score),
        "bleu": float(bleu.score),
        "chrf": float(chrf.score),
        "signatures": _signatures((m_tok, m_detok, m_chrf), src_lang, tgt_lang),
        "n_lines": len(hyps),
    }


def _metrics(tgt_lang):
    """The sacreBLEU metrics of :func:`score_lines`: tokenized BLEU, detokenized BLEU, chrF."""
    from sacrebleu.metrics import BLEU, CHRF

    # force=True: the input is tokenized on purpose; silences sacreBLEU's
    # "forgot to detokenize" warning (does not change the score or signature)
    return BLEU(tokenize="none", force=True), BLEU(tokenize="13a", trg_lang=tgt_lang), CHRF()


def _signatures(metrics, src_lang, tgt_lang) -> dict[str, str]:
    m_tok, m_detok, m_chrf = metrics
    lang = f"{src_lang}-{tgt_lang}" if src_lang else None

    def sig(metric):
        s = metric.get_signature()
        if lang:
            s.update("lang", lang)
        return s.format()

    detok_label = (
        f"BLEU on detokenized text (sacremoses MosesDetokenizer lang={tgt_lang}, "
        f"escapes unescaped) = sacreBLEU"
    )
    return {
        "bleu_tok": f"BLEU on tokenized text as is (multi-bleu.perl-equivalent): {sig(m_tok)}",
        "bleu": f"{detok_label}: {sig(m_detok)}",
        "chrf": f"chrF on tokenized text as is: {sig(m_chrf)}",
    }


def scorer_signatures(src_lang: str | None, tgt_lang: str | None) -> dict[str, str]:
    """The signatures :func:`score_lines` stores with its scores, without scoring anything.

    Args:
        src_lang: source language (the signatures' ``lang:``), or None.
        tgt_lang: target language (the detokenizer's rules, ``lang:``).

    Returns:
        ``{"bleu_tok", "bleu", "chrf"}`` -> ``"<label>: <sacreBLEU signature>"`` (the signature
        holds sacreBLEU's version and every metric setting; Post 2018, "A Call for Clarity in
        Reporting BLEU Scores", Sec. 4). What a score was made by (:mod:`.freshness`).
    """
    metrics = _metrics(tgt_lang)
    for m in metrics:  # a signature names the number of references: one, as score_lines scores
        m.corpus_score(["a"], [["a"]])
    return _signatures(metrics, src_lang, tgt_lang)


def score_files(
    hyp_path,
    ref_path,
    src_lang: str | None = None,
    tgt_lang: str = "en",
    warn: Callable[[str], None] = warn,
    allow_bpe_markers: bool = False,
) -> dict[str, object]:
    """:func:`score_lines` on files (validated once by :func:`~.textio.load_hyp_ref`).

    Raises:
        EncodingError: invalid UTF-8.
        EmptyFileError: a file with 0 lines.
        LineCountError: different line counts.
        BPEMarkerError: subword markers left (unless ``allow_bpe_markers``).
    """
    hyps, refs = load_hyp_ref(hyp_path, ref_path, allow_bpe_markers)
    names = (f"hypothesis file {str(hyp_path)!r}", f"reference file {str(ref_path)!r}")
    return _score_checked(hyps, refs, src_lang, tgt_lang, warn, names)


def format_scores(scores: Mapping[str, object]) -> str:
    """Human-readable multi-line rendering of :func:`score_lines` output."""
    sigs = scores["signatures"]
    lines = [
        f"BLEU(tokenized) = {scores['bleu_tok']:.2f}   BLEU(detokenized sacreBLEU) = "
        f"{scores['bleu']:.2f}   chrF(tokenized) = {scores['chrf']:.2f}   "
        f"({scores['n_lines']} lines)"
    ]
    for k in SCORE_FIELDS:
        lines.append(f"  {k}: {sigs[k]}")
    return "\n".join(lines)
