"""Evaluation tools for the QKNorm / ScaleNorm low-resource NMT experiments.

Pure sacreBLEU / sacremoses / numpy code: this module must not import fairseq
or torch, so it can run on any machine that has the decoded text.

Subcommands (``python -m fairseq_qknorm.evaluate <cmd> --help``):

``extract``
    Parse ``fairseq-generate`` output, restore source order, remove BPE.
``score``
    Tokenized BLEU (``bleu_tok``, as reported by the papers; equals
    ``multi-bleu.perl``), detokenized sacreBLEU (``bleu``) and chrF, each with
    its sacreBLEU signature.
``compare``
    Paired bootstrap resampling and paired approximate randomization
    (sacreBLEU's implementation, ``sacrebleu.significance.PairedTest``).
``aggregate``
    Mean ± sample sd over seeds per language pair and system, paired tests on
    seed-concatenated outputs, average delta over pairs; Markdown, LaTeX
    (booktabs) and CSV tables.
``ablation``
    2x2 {layernorm, scalenorm} x {dot, qknorm} confound report.

All scores are in BLEU / chrF points on the 0-100 scale.

References
----------
* Papineni et al. (2002), BLEU: a method for automatic evaluation of MT.
* Popović (2015), chrF: character n-gram F-score for automatic MT evaluation.
* Koehn (2004), Statistical significance tests for MT evaluation (paired
  bootstrap resampling).
* Riezler & Maxwell (2005), On some pitfalls in automatic evaluation and
  significance testing for MT (approximate randomization).
* Post (2018), A call for clarity in reporting BLEU scores (sacreBLEU).

Errors are raised as subclasses of :class:`EvaluationError` (a
``ValueError``) whose messages name the offending file and line; the CLI turns
them into ``error: ...`` on stderr and exit status 2.
"""
from __future__ import annotations

import argparse
import contextlib
import csv
import json
import logging
import math
import os
import re
import sys
from collections import OrderedDict
from pathlib import Path
from typing import Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Tuple

import numpy as np

__all__ = [
    "EvaluationError", "InputFileError", "LineCountError", "EmptyFileError",
    "EncodingError", "GenerateOutputError", "ResultsError",
    "read_lines", "write_lines", "load_hyp_ref", "remove_bpe",
    "parse_generate_output", "extract_hypotheses",
    "detokenize_lines", "find_html_escapes",
    "score_lines", "score_files", "format_scores", "format_compare",
    "paired_significance", "compare_files",
    "load_results", "mean_sd", "concat_over_seeds", "aggregate_results",
    "write_aggregate_tables",
    "ABLATION_CELLS", "ablation_effects", "ablation_significance",
    "ablation_report", "write_ablation_report",
    "main",
]

# ---------------------------------------------------------------------------
# errors
# ---------------------------------------------------------------------------


class EvaluationError(ValueError):
    """Base class of all input errors of this module (a ``ValueError``)."""


class InputFileError(EvaluationError):
    """A file is missing or unreadable."""


class LineCountError(EvaluationError):
    """Hypothesis and reference files have different numbers of lines."""


class EmptyFileError(EvaluationError):
    """A hypothesis (or reference) file has no lines."""


class EncodingError(EvaluationError):
    """A file is not valid UTF-8 (the message names file and line)."""


class GenerateOutputError(EvaluationError):
    """``fairseq-generate`` output has missing / duplicate / too few ids."""


class ResultsError(EvaluationError):
    """Malformed per-run result records (aggregate / ablation input)."""


def _warn(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr)


# ---------------------------------------------------------------------------
# file I/O and validation
# ---------------------------------------------------------------------------


def read_lines(path, what: str = "file") -> List[str]:
    """Read a UTF-8 text file into a list of lines (without line terminators).

    Lines are split on ``\\n`` only (not on Unicode line separators, which
    ``str.splitlines`` would break on); a final newline does not create an
    extra empty line, and a trailing ``\\r`` is kept (sacreBLEU strips it).

    :param path: file to read.
    :param what: role of the file for error messages ("hypothesis", ...).
    :raises InputFileError: if the file cannot be read.
    :raises EncodingError: if a line is not valid UTF-8 (names file and
        1-based line number).
    """
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise InputFileError(f"cannot read {what} file {str(path)!r}: {exc.strerror or exc}") from None
    if not data:
        return []
    raw = data.split(b"\n")
    if raw[-1] == b"":
        raw.pop()
    lines = []
    for i, line in enumerate(raw, start=1):
        try:
            lines.append(line.decode("utf-8"))
        except UnicodeDecodeError as exc:
            raise EncodingError(
                f"{what} file {str(path)!r}: invalid UTF-8 on line {i} "
                f"(byte offset {exc.start} in that line: {line[exc.start:exc.start + 4]!r})"
            ) from None
    return lines


def write_lines(path, lines: Iterable[str]) -> None:
    """Write one string per line, UTF-8, ``\\n``-terminated; creates parents."""
    path = Path(path)
    if path.parent and not path.parent.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        for line in lines:
            f.write(line + "\n")


def _check_same_length(hyps: Sequence[str], hyp_path, refs: Sequence[str], ref_path) -> None:
    if len(hyps) == 0:
        raise EmptyFileError(f"hypothesis file {str(hyp_path)!r} is empty (0 lines); "
                             f"the reference {str(ref_path)!r} has {len(refs)} lines")
    if len(refs) == 0:
        raise EmptyFileError(f"reference file {str(ref_path)!r} is empty (0 lines)")
    if len(hyps) != len(refs):
        raise LineCountError(
            f"line count mismatch: hypothesis file {str(hyp_path)!r} has {len(hyps)} lines, "
            f"reference file {str(ref_path)!r} has {len(refs)} lines")
    if all(not h.strip() for h in hyps):
        _warn(f"every line of hypothesis file {str(hyp_path)!r} is empty")


def load_hyp_ref(hyp_path, ref_path) -> Tuple[List[str], List[str]]:
    """Read and validate a hypothesis file and its reference.

    :returns: ``(hyps, refs)`` lists of equal, non-zero length.
    :raises EncodingError: invalid UTF-8 (file and line named).
    :raises EmptyFileError: a file with 0 lines.
    :raises LineCountError: different line counts (both files and counts named).
    """
    refs = read_lines(ref_path, "reference")
    hyps = read_lines(hyp_path, "hypothesis")
    _check_same_length(hyps, hyp_path, refs, ref_path)
    return hyps, refs


# ---------------------------------------------------------------------------
# extract: fairseq-generate output -> plain hypotheses
# ---------------------------------------------------------------------------

BPE_MODES = ("subword_nmt", "sentencepiece", "none")

_H_LINE = re.compile(r"^H-(\d+)\t([^\t]*)(?:\t(.*))?$")


def remove_bpe(text: str, mode: str) -> str:
    """Undo subword segmentation the way fairseq's ``--remove-bpe`` does.

    * ``subword_nmt``: ``(text + " ").replace("@@ ", "").rstrip()``, i.e. remove
      the ``@@ `` continuation markers including a dangling final ``@@``
      (fairseq ``post_process(..., "@@ ")``).
    * ``sentencepiece``: remove spaces, turn U+2581 into a space, strip
      (fairseq ``post_process(..., "sentencepiece")``).
    * ``none``: return ``text`` unchanged.

    :raises ValueError: unknown ``mode``.
    """
    if mode == "subword_nmt":
        return (text + " ").replace("@@ ", "").rstrip()
    if mode == "sentencepiece":
        return text.replace(" ", "").replace("\u2581", " ").strip()
    if mode == "none":
        return text
    raise EvaluationError(f"unknown BPE mode {mode!r}; expected one of {BPE_MODES}")


def parse_generate_output(lines: Iterable[str], source: str = "<generate output>") -> Dict[int, str]:
    """Collect the ``H-<id>\\t<score>\\t<text>`` lines of ``fairseq-generate``.

    Only lines matching exactly ``H-<int>\\t`` are used; other lines (``S-``,
    ``T-``, ``D-``, ``P-``, logging, warnings starting with "H") are ignored.
    A missing text field counts as an empty hypothesis.

    :returns: mapping sentence id -> hypothesis text (as printed, e.g. BPE'd).
    :raises GenerateOutputError: an id occurs twice (e.g. ``--nbest`` > 1) or
        no ``H-`` line is found; the message names ``source`` and the line.
    """
    hyps: Dict[int, str] = {}
    first_line: Dict[int, int] = {}
    for lineno, line in enumerate(lines, start=1):
        if not line.startswith("H-"):
            continue
        m = _H_LINE.match(line.rstrip("\r\n"))
        if m is None:
            continue
        sid = int(m.group(1))
        if sid in hyps:
            raise GenerateOutputError(
                f"{source}: duplicate hypothesis for sentence id {sid} on line {lineno} "
                f"(first seen on line {first_line[sid]}); was fairseq-generate run with --nbest > 1?")
        hyps[sid] = m.group(3) or ""
        first_line[sid] = lineno
    if not hyps:
        raise GenerateOutputError(f"{source}: no 'H-<id>\\t<score>\\t<text>' lines found")
    return hyps


def _ordered_hypotheses(hyps: Mapping[int, str], source: str, n_expected: Optional[int]) -> List[str]:
    ids = sorted(hyps)
    n = len(ids)
    if n_expected is not None and n != n_expected:
        missing = [i for i in range(n_expected) if i not in hyps][:10]
        extra = [i for i in ids if i >= n_expected][:10]
        detail = []
        if missing:
            detail.append(f"missing ids (first 10): {missing}")
        if extra:
            detail.append(f"ids >= {n_expected}: {extra}")
        raise GenerateOutputError(
            f"{source}: found {n} hypotheses, expected {n_expected}"
            + ("; " + "; ".join(detail) if detail else ""))
    if ids != list(range(n)):
        missing = sorted(set(range(ids[-1] + 1)) - set(ids))[:10]
        raise GenerateOutputError(
            f"{source}: sentence ids are not contiguous 0..{n - 1} "
            f"(max id {ids[-1]}, missing ids (first 10): {missing})")
    return [hyps[i] for i in range(n)]


def extract_hypotheses(generate_output, output=None, remove_bpe_mode: str = "subword_nmt",
                       n_expected: Optional[int] = None) -> List[str]:
    """Extract detokenization-free, BPE-free hypotheses from ``fairseq-generate`` output.

    :param generate_output: path of the captured ``fairseq-generate`` stdout
        (run without ``--remove-bpe``).
    :param output: if given, write one hypothesis per line (UTF-8) there.
    :param remove_bpe_mode: ``subword_nmt`` | ``sentencepiece`` | ``none``
        (see :func:`remove_bpe`).
    :param n_expected: number of source sentences; if given, the number of
        hypotheses must match it exactly.
    :returns: hypotheses in source order (sorted by sentence id 0..N-1).
    :raises GenerateOutputError: missing, duplicated or unexpected ids.
    :raises EncodingError: invalid UTF-8 (file and line named).
    """
    source = str(generate_output)
    lines = read_lines(generate_output, "fairseq-generate output")
    ordered = _ordered_hypotheses(parse_generate_output(lines, source), source, n_expected)
    out = [remove_bpe(h, remove_bpe_mode) for h in ordered]
    if output is not None:
        write_lines(output, out)
    return out


# ---------------------------------------------------------------------------
# score
# ---------------------------------------------------------------------------

_HTML_ESCAPE = re.compile(r"&(?:apos|quot|amp|lt|gt|#\d+|#x[0-9a-fA-F]+);")


def find_html_escapes(lines: Sequence[str]) -> Tuple[int, List[str]]:
    """Count lines containing HTML/Moses escapes (``&apos;``, ``&quot;``, ``&#124;`` ...).

    :returns: ``(number of lines with an escape, sorted distinct escapes)``.
    """
    n = 0
    found = set()
    for line in lines:
        hits = _HTML_ESCAPE.findall(line)
        if hits:
            n += 1
            found.update(hits)
    return n, sorted(found)


def detokenize_lines(lines: Sequence[str], lang: str = "en") -> List[str]:
    """Moses-detokenize whitespace-tokenized lines with sacremoses.

    ``MosesDetokenizer(lang=lang).detokenize(line.split(), unescape=True)``,
    which also unescapes ``&apos;``, ``&quot;``, ``&amp;``, ``&#124;`` etc.
    """
    from sacremoses import MosesDetokenizer  # lazy: only needed here

    md = MosesDetokenizer(lang=lang)
    return [md.detokenize(line.split(), return_str=True, unescape=True) for line in lines]


def _label_signature(label: str, signature) -> str:
    return f"{label}: {signature}"


def score_lines(hyps: Sequence[str], refs: Sequence[str], src_lang: Optional[str] = None,
                tgt_lang: str = "en", warn: Callable[[str], None] = _warn,
                names: Tuple[str, str] = ("hypothesis", "reference")) -> Dict[str, object]:
    """Corpus BLEU (tokenized and detokenized) and chrF of aligned hypotheses.

    * ``bleu_tok``: sacreBLEU ``BLEU(tokenize='none')`` on the text as is
      (Moses-tokenized, escapes kept). Same n-gram counts, brevity penalty and
      geometric mean as ``multi-bleu.perl`` (Papineni et al., 2002); identical
      to it whenever every n-gram precision (n=1..4) is non-zero, which holds
      for any realistic test set (sacreBLEU's default ``exp`` smoothing only
      differs from multi-bleu's 0 when some precision is 0). This is what the
      QKNorm / ScaleNorm papers report.
    * ``bleu``: detokenized sacreBLEU (Post, 2018): both sides detokenized
      with sacremoses ``MosesDetokenizer(lang=tgt_lang)`` (which unescapes
      ``&apos;`` ``&quot;`` ...), then sacreBLEU's default ``13a`` tokenizer.
    * ``chrf``: sacreBLEU ``CHRF()`` defaults (chrF2, char order 6, Popović
      2015) on the tokenized text as is.

    :param hyps: hypotheses, one per segment.
    :param refs: references, same length.
    :param src_lang: optional source language, added to the signatures as
        ``lang:src-tgt``.
    :param tgt_lang: target language (detokenizer rules).
    :param warn: callback for warnings (default: print to stderr).
    :returns: ``{"bleu_tok", "bleu", "chrf", "signatures": {same keys},
        "n_lines"}``; scores are floats in points (0-100); each signature is
        ``"<label>: <sacreBLEU signature>"`` saying tokenized / detokenized.
    :raises EmptyFileError, LineCountError: empty or unequal inputs.
    """
    from sacrebleu.metrics import BLEU, CHRF

    _check_same_length(hyps, names[0], refs, names[1])
    hyps = list(hyps)
    refs = list(refs)
    for name, lines in zip(names, (hyps, refs)):
        n_esc, escapes = find_html_escapes(lines)
        if n_esc:
            warn(f"{name} has HTML escapes ({', '.join(escapes[:6])}) on {n_esc} lines; they are "
                 f"unescaped by MosesDetokenizer for detokenized BLEU ('bleu'), and kept as is "
                 f"for tokenized BLEU ('bleu_tok') and chrF")

    lang = f"{src_lang}-{tgt_lang}" if src_lang else None

    def sig(metric):
        s = metric.get_signature()
        if lang:
            s.update("lang", lang)
        return s.format()

    # force=True: the input is tokenized on purpose; silences sacreBLEU's
    # "forgot to detokenize" warning (does not change the score or signature)
    m_tok = BLEU(tokenize="none", force=True)
    bleu_tok = m_tok.corpus_score(hyps, [refs])

    m_detok = BLEU(tokenize="13a", trg_lang=tgt_lang)
    bleu = m_detok.corpus_score(detokenize_lines(hyps, tgt_lang), [detokenize_lines(refs, tgt_lang)])

    m_chrf = CHRF()
    chrf = m_chrf.corpus_score(hyps, [refs])

    return OrderedDict([
        ("bleu_tok", float(bleu_tok.score)),
        ("bleu", float(bleu.score)),
        ("chrf", float(chrf.score)),
        ("signatures", OrderedDict([
            ("bleu_tok", _label_signature(
                "BLEU on tokenized text as is (multi-bleu.perl-equivalent)", sig(m_tok))),
            ("bleu", _label_signature(
                f"BLEU on detokenized text (sacremoses MosesDetokenizer lang={tgt_lang}, "
                f"escapes unescaped) = sacreBLEU", sig(m_detok))),
            ("chrf", _label_signature("chrF on tokenized text as is", sig(m_chrf))),
        ])),
        ("n_lines", len(hyps)),
    ])


def score_files(hyp_path, ref_path, src_lang: Optional[str] = None, tgt_lang: str = "en",
                warn: Callable[[str], None] = _warn) -> Dict[str, object]:
    """:func:`score_lines` on files (validated by :func:`load_hyp_ref`).

    :raises EncodingError, EmptyFileError, LineCountError: see :func:`load_hyp_ref`.
    """
    hyps, refs = load_hyp_ref(hyp_path, ref_path)
    return score_lines(hyps, refs, src_lang=src_lang, tgt_lang=tgt_lang, warn=warn,
                       names=(f"hypothesis file {str(hyp_path)!r}", f"reference file {str(ref_path)!r}"))


def format_scores(scores: Mapping[str, object]) -> str:
    """Human-readable multi-line rendering of :func:`score_lines` output."""
    sigs = scores["signatures"]
    lines = [f"BLEU(tokenized) = {scores['bleu_tok']:.2f}   BLEU(detokenized sacreBLEU) = "
             f"{scores['bleu']:.2f}   chrF(tokenized) = {scores['chrf']:.2f}   "
             f"({scores['n_lines']} lines)"]
    for k in ("bleu_tok", "bleu", "chrf"):
        lines.append(f"  {k}: {sigs[k]}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# paired significance tests (sacrebleu.significance.PairedTest)
# ---------------------------------------------------------------------------

SIG_METRICS = ("bleu_tok", "bleu", "chrf")
_TOKENIZE_TO_METRIC = {"none": "bleu_tok", "13a": "bleu"}


@contextlib.contextmanager
def _sacrebleu_seed(seed: int):
    """Temporarily set ``SACREBLEU_SEED`` (read by PairedTest and its bootstrap)."""
    old = os.environ.get("SACREBLEU_SEED")
    os.environ["SACREBLEU_SEED"] = str(seed)
    try:
        yield
    finally:
        if old is None:
            os.environ.pop("SACREBLEU_SEED", None)
        else:
            os.environ["SACREBLEU_SEED"] = old


def _make_metric(metric: str, refs: Sequence[str], tgt_lang: str):
    """Return ``(sacrebleu metric with cached refs, hypothesis preprocessor)``."""
    from sacrebleu.metrics import BLEU, CHRF

    if metric == "bleu_tok":
        return BLEU(tokenize="none", force=True, references=[list(refs)]), list
    if metric == "bleu":
        return (BLEU(tokenize="13a", trg_lang=tgt_lang, references=[detokenize_lines(refs, tgt_lang)]),
                lambda h: detokenize_lines(h, tgt_lang))
    if metric == "chrf":
        return CHRF(references=[list(refs)]), list
    raise EvaluationError(f"unknown metric {metric!r}; expected one of {SIG_METRICS}")


def paired_significance(refs: Sequence[str], named_systems: Sequence[Tuple[str, Sequence[str]]],
                        metric: str = "bleu_tok", tgt_lang: str = "en",
                        n_bootstrap: int = 1000, n_ar: int = 10000, seed: int = 12345,
                        tests: Sequence[str] = ("bs", "ar")) -> Dict[str, object]:
    """Paired significance of each system against the first (the baseline).

    Runs sacreBLEU's own implementation (``sacrebleu.significance.PairedTest``)
    of

    * paired bootstrap resampling (Koehn, 2004; ``test_type='bs'``,
      ``n_bootstrap`` resamples), which also gives each system's bootstrap
      mean and 95% CI half-width (sacreBLEU ``estimate_ci``: half the distance
      between the 2.5th and 97.5th percentile resample, around the mean);
    * paired approximate randomization (Riezler & Maxwell, 2005, as in
      MultEval; ``test_type='ar'``, ``n_ar`` trials).

    Both p-values are two-sided, ``(c + 1) / (n + 1)`` where ``c`` counts
    resamples with a difference strictly larger than the observed one.
    Tie correction: if the observed difference is exactly 0 (e.g. identical
    outputs), sacreBLEU's strict ``>`` yields the minimum p ``1/(n+1)``
    (a known MultEval artefact, jhclark/multeval#5); by the definition
    ``p = P(|delta*| >= |delta|)`` the p-value is then 1, which is what we
    report (``tie_corrected: true``). The same strict inequality makes the AR
    p-value too small when only a few lines differ from the baseline (many
    shuffles tie with the observed difference); ``n_diff_lines`` is reported
    and a warning printed below 20 differing lines.

    :param refs: reference lines.
    :param named_systems: ``[(name, hyps), ...]``; the first is the baseline.
    :param metric: ``bleu_tok`` (tokenized BLEU, tokenize='none'), ``bleu``
        (Moses-detokenized + 13a) or ``chrf``.
    :param seed: RNG seed (``SACREBLEU_SEED``); must be a positive integer
        (sacreBLEU treats 0 as "unseeded").
    :returns: ``{"metric", "tokenize", "n_lines", "n_bootstrap", "n_ar",
        "seed", "signatures": {"bs", "ar"}, "baseline", "systems": [{"name",
        "is_baseline", "score", "delta", "bs_mean", "ci95", "ci_low",
        "ci_high", "p_bs", "p_ar", "tie_corrected", "n_diff_lines"}, ...]}``
        (points 0-100;
        p-values are ``None`` for the baseline or a test not run).
    :raises EvaluationError: bad arguments, unequal line counts.
    """
    from sacrebleu.significance import PairedTest

    if len(named_systems) < 1:
        raise EvaluationError("no systems given")
    if not isinstance(seed, int) or seed <= 0:
        raise EvaluationError(f"seed must be a positive integer, got {seed!r}")
    tests = tuple(tests)
    if not tests or any(t not in ("bs", "ar") for t in tests):
        raise EvaluationError(f"tests must be a non-empty subset of ('bs', 'ar'), got {tests}")
    if n_bootstrap < 1 or n_ar < 1:
        raise EvaluationError("n_bootstrap and n_ar must be >= 1")
    names = [n for n, _ in named_systems]
    if len(set(names)) != len(names):
        raise EvaluationError(f"system names must be unique, got {names}")
    for name, hyps in named_systems:
        _check_same_length(hyps, f"system {name!r}", refs, "reference")

    metric_obj, prep = _make_metric(metric, refs, tgt_lang)
    systems = [(n, prep(h)) for n, h in named_systems]

    out_sys = [OrderedDict([("name", n), ("is_baseline", i == 0)]) for i, n in enumerate(names)]
    signatures = OrderedDict()
    with _sacrebleu_seed(seed):
        for test in ("bs", "ar"):
            if test not in tests:
                continue
            n = n_bootstrap if test == "bs" else n_ar
            # n_ar_confidence=-1: the CI comes from the bootstrap run only
            pt = PairedTest(systems, {metric: metric_obj}, references=None, test_type=test,
                            n_samples=n, n_ar_confidence=-1, n_jobs=1)
            sigs, scores = pt()
            key = [k for k in scores if k != "System"][0]
            signatures[test] = str(sigs[key])
            for rec, res in zip(out_sys, scores[key]):
                rec["score"] = float(res.score)
                if test == "bs":
                    rec["bs_mean"] = float(res.mean) if res.mean is not None else None
                    rec["ci95"] = float(res.ci) if res.ci is not None else None
                rec[f"p_{test}"] = None if res.p_value is None else float(res.p_value)

    base = out_sys[0]["score"]
    base_hyps = systems[0][1]
    for rec, (_, hyps) in zip(out_sys, systems):
        n_diff = sum(1 for x, y in zip(hyps, base_hyps) if x != y)
        rec["n_diff_lines"] = n_diff
        if not rec["is_baseline"] and 0 < n_diff < 20 and "ar" in tests:
            _warn(f"system {rec['name']!r} differs from the baseline on only {n_diff} lines: "
                  f"sacreBLEU's approximate randomization counts only strictly larger shuffled "
                  f"differences, so ties make its p-value too small here; prefer p_bs")
        rec["delta"] = rec["score"] - base
        rec.setdefault("bs_mean", None)
        rec.setdefault("ci95", None)
        rec.setdefault("p_bs", None)
        rec.setdefault("p_ar", None)
        if rec.get("bs_mean") is not None and rec.get("ci95") is not None:
            rec["ci_low"] = rec["bs_mean"] - rec["ci95"]
            rec["ci_high"] = rec["bs_mean"] + rec["ci95"]
        else:
            rec["ci_low"] = rec["ci_high"] = None
        tie = (not rec["is_baseline"]) and rec["score"] == base
        rec["tie_corrected"] = bool(tie)
        if tie:
            for k in ("p_bs", "p_ar"):
                if rec[k] is not None:
                    rec[k] = 1.0
    order = ["name", "is_baseline", "score", "delta", "bs_mean", "ci95", "ci_low", "ci_high",
             "p_bs", "p_ar", "tie_corrected", "n_diff_lines"]
    out_sys = [OrderedDict((k, r[k]) for k in order) for r in out_sys]
    return OrderedDict([
        ("metric", metric),
        ("tokenize", {"bleu_tok": "none", "bleu": "13a", "chrf": None}[metric]),
        ("n_lines", len(refs)),
        ("n_bootstrap", n_bootstrap if "bs" in tests else None),
        ("n_ar", n_ar if "ar" in tests else None),
        ("seed", seed),
        ("signatures", signatures),
        ("baseline", names[0]),
        ("systems", out_sys),
    ])


def _split_named(arg: str) -> Tuple[str, str]:
    """``NAME=PATH`` -> (NAME, PATH); a bare existing path -> (basename, path)."""
    if "=" in arg and not Path(arg).exists():
        name, path = arg.split("=", 1)
        if name and path:
            return name, path
    return Path(arg).name, arg


def compare_files(ref_path, baseline, systems: Sequence[str], tokenize: str = "none",
                  tgt_lang: str = "en", n_bootstrap: int = 1000, n_ar: int = 10000,
                  seed: int = 12345) -> Dict[str, object]:
    """Paired tests of hypothesis files against a baseline file.

    :param ref_path: reference file.
    :param baseline: baseline hypothesis file, optionally ``NAME=PATH``.
    :param systems: system hypothesis files, each optionally ``NAME=PATH``
        (default name: the file's basename, made unique).
    :param tokenize: ``none`` = tokenized BLEU on the text as is (default,
        as in the papers); ``13a`` = detokenized sacreBLEU (sacremoses
        detokenization with ``tgt_lang`` first, like ``score``'s ``bleu``).
    :returns: :func:`paired_significance` output plus ``"ref"`` and each
        system's ``"path"``.
    :raises EvaluationError: see :func:`load_hyp_ref`, unknown tokenize.
    """
    if tokenize not in _TOKENIZE_TO_METRIC:
        raise EvaluationError(f"tokenize must be one of {sorted(_TOKENIZE_TO_METRIC)}, got {tokenize!r}")
    refs = read_lines(ref_path, "reference")
    named = []
    paths = {}
    used = set()
    for arg in [baseline, *systems]:
        name, path = _split_named(arg)
        base_name, k = name, 2
        while name in used:
            name = f"{base_name}#{k}"
            k += 1
        used.add(name)
        hyps = read_lines(path, "hypothesis")
        _check_same_length(hyps, path, refs, ref_path)
        named.append((name, hyps))
        paths[name] = str(path)
    res = paired_significance(refs, named, metric=_TOKENIZE_TO_METRIC[tokenize], tgt_lang=tgt_lang,
                              n_bootstrap=n_bootstrap, n_ar=n_ar, seed=seed)
    res["ref"] = str(ref_path)
    for rec in res["systems"]:
        rec["path"] = paths[rec["name"]]
    return res


def _fmt_p(p: Optional[float]) -> str:
    if p is None:
        return "-"
    return f"{p:.4f}"


def format_compare(res: Mapping[str, object]) -> str:
    """Human-readable table of :func:`compare_files` / :func:`paired_significance`."""
    lines = [f"metric: {res['metric']} (tokenize={res['tokenize']}), {res['n_lines']} lines, "
             f"baseline: {res['baseline']}"]
    for k, v in res["signatures"].items():
        lines.append(f"  signature[{k}]: {v}")
    lines.append(f"{'system':<30} {'score':>7} {'delta':>7} {'95% CI (bootstrap)':>22} {'p(bs)':>7} {'p(ar)':>7}")
    for r in res["systems"]:
        ci = f"{r['bs_mean']:.2f} ± {r['ci95']:.2f}" if r["ci95"] is not None else "-"
        mark = " (baseline)" if r["is_baseline"] else ""
        lines.append(f"{r['name'] + mark:<30} {r['score']:7.2f} {r['delta']:+7.2f} {ci:>22} "
                     f"{_fmt_p(r['p_bs']):>7} {_fmt_p(r['p_ar']):>7}")
    return "\n".join(lines)


# ---------------------------------------------------------------------------
# aggregate over seeds and pairs
# ---------------------------------------------------------------------------

REQUIRED_FIELDS = ("pair", "system", "seed")
SCORE_FIELDS = ("bleu_tok", "bleu", "chrf")


def _resolve_path(p: Optional[str], base_dir: Optional[Path]) -> Optional[str]:
    if p is None:
        return None
    path = Path(p)
    if path.is_absolute() or path.exists() or base_dir is None:
        return str(path)
    alt = base_dir / path
    return str(alt) if alt.exists() else str(path)


def load_results(source) -> List[Dict[str, object]]:
    """Load per-run score records.

    :param source: a JSON file holding a record or a list of records, or a
        directory whose ``*.json`` files (non-recursive, sorted) each hold a
        record or a list of records. Records need ``pair``, ``system``,
        ``seed`` and score fields (``bleu_tok``, ``bleu``, ``chrf``, BLEU
        points) and usually ``hyp_path`` (and optionally ``ref_path``);
        relative paths are resolved against the current directory, else
        against the JSON file's directory.
    :raises ResultsError: unreadable JSON, missing fields, duplicate
        (pair, system, seed) (file named).
    """
    source = Path(source)
    files = sorted(source.glob("*.json")) if source.is_dir() else [source]
    if not files:
        raise ResultsError(f"no *.json result files in directory {str(source)!r}")
    records = []
    seen = {}
    for f in files:
        try:
            data = json.loads(f.read_text(encoding="utf-8"))
        except OSError as exc:
            raise InputFileError(f"cannot read results file {str(f)!r}: {exc.strerror or exc}") from None
        except (UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ResultsError(f"results file {str(f)!r} is not valid UTF-8 JSON: {exc}") from None
        items = data if isinstance(data, list) else [data]
        for i, rec in enumerate(items):
            if not isinstance(rec, dict):
                raise ResultsError(f"results file {str(f)!r}: record {i} is not an object")
            missing = [k for k in REQUIRED_FIELDS if k not in rec]
            if missing:
                raise ResultsError(f"results file {str(f)!r}: record {i} lacks fields {missing}")
            rec = dict(rec)
            for k in ("hyp_path", "ref_path"):
                if rec.get(k) is not None:
                    rec[k] = _resolve_path(rec[k], f.parent)
            key = (str(rec["pair"]), str(rec["system"]), rec["seed"])
            if key in seen:
                raise ResultsError(f"duplicate record pair={key[0]!r} system={key[1]!r} seed={key[2]!r} "
                                   f"in {str(f)!r} (also in {seen[key]!r})")
            seen[key] = str(f)
            rec["_source"] = str(f)
            records.append(rec)
    return records


def mean_sd(values: Sequence[float]) -> Tuple[float, float]:
    """Mean and sample standard deviation (``ddof=1``).

    With a single value the sd is undefined and returned as ``nan`` (rendered
    as "n/a" in tables and ``null`` in JSON).

    :raises ValueError: empty input.
    """
    vals = np.asarray(list(values), dtype=float)
    if vals.size == 0:
        raise EvaluationError("mean_sd of an empty list")
    mean = float(vals.mean())
    sd = float(vals.std(ddof=1)) if vals.size > 1 else float("nan")
    return mean, sd


def _seed_key(seed):
    try:
        return (0, float(seed), str(seed))
    except (TypeError, ValueError):
        return (1, 0.0, str(seed))


def concat_over_seeds(records: Sequence[Mapping[str, object]], refs: Sequence[str]
                      ) -> Tuple[List[str], List[str], List[object]]:
    """Concatenate the hypotheses of several seeds, in seed order.

    The hypotheses of seed s1 < s2 < ... are concatenated and scored against
    the reference repeated once per seed, so that a paired test on the result
    pairs line i of seed k of one system with line i of the k-th seed of the
    other (same reference line).

    :returns: ``(hyps, refs_repeated, seeds_in_order)``.
    :raises ResultsError: a record lacks ``hyp_path``; :raises LineCountError:
        a hypothesis file does not match the reference length.
    """
    recs = sorted(records, key=lambda r: _seed_key(r["seed"]))
    hyps: List[str] = []
    for r in recs:
        if not r.get("hyp_path"):
            raise ResultsError(f"record pair={r.get('pair')!r} system={r.get('system')!r} seed={r.get('seed')!r} "
                               f"has no hyp_path (needed for the paired test)")
        h = read_lines(r["hyp_path"], "hypothesis")
        _check_same_length(h, r["hyp_path"], refs, "reference")
        hyps.extend(h)
    return hyps, list(refs) * len(recs), [r["seed"] for r in recs]


def _nan_to_none(x):
    if isinstance(x, float) and math.isnan(x):
        return None
    return x


def aggregate_results(records: Sequence[Mapping[str, object]], baseline: str,
                      refs: Optional[Mapping[str, str]] = None, metric: str = "bleu_tok",
                      significance: bool = True, tgt_lang: Optional[Mapping[str, str]] = None,
                      n_bootstrap: int = 1000, n_ar: int = 10000, seed: int = 12345
                      ) -> Dict[str, object]:
    """Aggregate per-seed scores per (pair, system) and test against a baseline.

    * mean and sample sd (``ddof=1``; ``None``/n/a for a single seed) over
      seeds of each score field present (``bleu_tok``, ``bleu``, ``chrf``);
    * ``delta``: system mean minus baseline mean, per pair and field;
    * if ``significance``: paired bootstrap (95% CI) and paired approximate
      randomization (sacreBLEU PairedTest, metric ``metric``) of each system
      against the baseline on the **concatenated** outputs over seeds (see
      :func:`concat_over_seeds`; baseline and system must have the same
      number of seeds, paired in sorted seed order);
    * ``avg_delta``: per system and field, the average over pairs of the
      per-pair delta of means (how the papers report "+x BLEU on average").

    :param records: from :func:`load_results`.
    :param baseline: system name used as baseline (must exist in every pair).
    :param refs: pair -> reference path (falls back to each record's
        ``ref_path``); needed only for significance.
    :param metric: score field of the main table and of the paired test.
    :param tgt_lang: pair -> target language for ``metric='bleu'``
        (default: the part after ``-`` in the pair name, else ``en``).
    :returns: dict (JSON-ready, NaN -> None) with keys ``metric``,
        ``baseline``, ``significance``, ``pairs``, ``avg_delta``, ``notes``.
    :raises ResultsError: missing baseline / fields / references,
        unequal numbers of seeds.
    """
    if metric not in SCORE_FIELDS:
        raise ResultsError(f"metric must be one of {SCORE_FIELDS}, got {metric!r}")
    refs = dict(refs or {})
    tgt_lang = dict(tgt_lang or {})
    pairs: "OrderedDict[str, OrderedDict[str, list]]" = OrderedDict()
    for r in records:
        pairs.setdefault(str(r["pair"]), OrderedDict()).setdefault(str(r["system"]), []).append(r)
    if not pairs:
        raise ResultsError("no result records")

    out_pairs = OrderedDict()
    for pair, systems in pairs.items():
        if baseline not in systems:
            raise ResultsError(f"baseline system {baseline!r} has no records for pair {pair!r} "
                               f"(systems: {sorted(systems)})")
        order = [baseline] + [s for s in systems if s != baseline]
        stats = OrderedDict()
        for sysname in order:
            recs = sorted(systems[sysname], key=lambda r: _seed_key(r["seed"]))
            entry = OrderedDict([("n_seeds", len(recs)), ("seeds", [r["seed"] for r in recs])])
            for field in SCORE_FIELDS:
                vals = [r.get(field) for r in recs]
                if all(v is None for v in vals):
                    if field == metric:
                        raise ResultsError(f"pair {pair!r} system {sysname!r}: no {metric!r} scores "
                                           f"(source {recs[0]['_source'] if '_source' in recs[0] else '?'})")
                    continue
                if any(v is None for v in vals):
                    bad = [r["seed"] for r in recs if r.get(field) is None]
                    raise ResultsError(f"pair {pair!r} system {sysname!r}: field {field!r} missing for seeds {bad}")
                m, sd = mean_sd([float(v) for v in vals])
                entry[field] = OrderedDict([("mean", m), ("sd", _nan_to_none(sd)),
                                            ("values", [float(v) for v in vals])])
            stats[sysname] = entry
        base = stats[baseline]
        for sysname, entry in stats.items():
            entry["delta"] = OrderedDict(
                (f, entry[f]["mean"] - base[f]["mean"]) for f in SCORE_FIELDS if f in entry and f in base)
            entry["concat"] = None

        if significance and len(order) > 1:
            ref_path = refs.get(pair)
            if ref_path is None:
                rp = {r.get("ref_path") for s in order for r in systems[s] if r.get("ref_path")}
                if len(rp) == 1:
                    ref_path = rp.pop()
            if ref_path is None:
                raise ResultsError(f"no reference for pair {pair!r}: pass --ref {pair}=PATH or add ref_path to the records")
            ref_lines = read_lines(ref_path, "reference")
            n_seeds = {s: len(systems[s]) for s in order}
            if len(set(n_seeds.values())) != 1:
                raise ResultsError(f"pair {pair!r}: systems have different numbers of seeds {n_seeds}; "
                                   f"the concatenated paired test needs equal numbers")
            named = []
            rep_refs = None
            for s in order:
                hyps, rep_refs, _ = concat_over_seeds(systems[s], ref_lines)
                named.append((s, hyps))
            lang = tgt_lang.get(pair) or (pair.split("-")[-1] if "-" in pair else "en")
            sig = paired_significance(rep_refs, named, metric=metric, tgt_lang=lang,
                                      n_bootstrap=n_bootstrap, n_ar=n_ar, seed=seed)
            for rec in sig["systems"]:
                stats[rec["name"]]["concat"] = OrderedDict(
                    (k, rec[k]) for k in ("score", "delta", "bs_mean", "ci95", "ci_low", "ci_high",
                                          "p_bs", "p_ar", "tie_corrected", "n_diff_lines"))
            out_pairs[pair] = OrderedDict([("ref", str(ref_path)), ("n_lines_concat", len(rep_refs)),
                                           ("signatures", sig["signatures"]), ("systems", stats)])
        else:
            out_pairs[pair] = OrderedDict([("ref", refs.get(pair)), ("n_lines_concat", None),
                                           ("signatures", None), ("systems", stats)])

    all_systems = []
    for p in out_pairs.values():
        for s in p["systems"]:
            if s not in all_systems:
                all_systems.append(s)
    avg = OrderedDict()
    for s in all_systems:
        entry = OrderedDict()
        for f in SCORE_FIELDS:
            ds = [p["systems"][s]["delta"][f] for p in out_pairs.values()
                  if s in p["systems"] and f in p["systems"][s]["delta"]]
            if ds:
                entry[f] = float(np.mean(ds))
        entry["n_pairs"] = sum(1 for p in out_pairs.values() if s in p["systems"])
        avg[s] = entry

    notes = [
        "Scores are BLEU / chrF points (0-100); bleu_tok = BLEU on tokenized text as is "
        "(tokenize='none', multi-bleu.perl-equivalent); bleu = detokenized sacreBLEU (13a).",
        "mean ± sd over seeds; sd is the sample standard deviation (ddof=1); with one seed it is "
        "undefined (null / n/a).",
        f"Paired tests vs baseline {baseline!r} on the concatenated outputs over seeds: the "
        "hypotheses of each seed are concatenated in sorted seed order and scored against the "
        "reference repeated once per seed (sacreBLEU PairedTest: paired bootstrap resampling, "
        "Koehn 2004, with its 95% CI; paired approximate randomization, Riezler & Maxwell 2005).",
        "avg_delta = mean over language pairs of (system mean - baseline mean), as reported in the papers.",
    ]
    return OrderedDict([
        ("metric", metric),
        ("baseline", baseline),
        ("significance", OrderedDict([("enabled", bool(significance)), ("n_bootstrap", n_bootstrap),
                                      ("n_ar", n_ar), ("seed", seed),
                                      ("on", "concatenated outputs over seeds")])),
        ("pairs", out_pairs),
        ("avg_delta", avg),
        ("notes", notes),
    ])


def _fmt_mean_sd(entry: Optional[Mapping[str, object]]) -> str:
    if not entry:
        return "-"
    sd = entry.get("sd")
    return f"{entry['mean']:.2f} ± {sd:.2f}" if sd is not None else f"{entry['mean']:.2f} ± n/a"


def _latex_escape(s: str) -> str:
    repl = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#",
            "_": r"\_", "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}"}
    return "".join(repl.get(c, c) for c in s)


def _sig_mark(concat: Optional[Mapping[str, object]], alpha: float = 0.05) -> bool:
    return bool(concat) and concat.get("p_ar") is not None and concat["p_ar"] < alpha


def write_aggregate_tables(agg: Mapping[str, object], out_dir, stem: str = "aggregate") -> Dict[str, str]:
    """Write :func:`aggregate_results` as Markdown, LaTeX (booktabs) and CSV.

    Files: ``<stem>.md``, ``<stem>.tex``, ``<stem>.csv`` (one row per pair and
    system), ``<stem>_avg_delta.csv`` and ``<stem>.json``.

    :returns: mapping kind -> path written.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    metric = agg["metric"]
    baseline = agg["baseline"]
    pairs = agg["pairs"]
    systems = list(agg["avg_delta"].keys())
    sig_on = agg["significance"]["enabled"]
    n_ar = agg["significance"]["n_ar"]

    # --- Markdown
    md = [f"# Results ({metric}, BLEU points)", ""]
    head = ["System"] + list(pairs) + [f"Avg Δ vs {baseline}"]
    md.append("| " + " | ".join(head) + " |")
    md.append("|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|")
    for s in systems:
        row = [s]
        for p in pairs.values():
            e = p["systems"].get(s)
            cell = _fmt_mean_sd(e.get(metric)) if e else "-"
            if e and _sig_mark(e.get("concat")) and s != baseline:
                cell += " †"
            row.append(cell)
        d = agg["avg_delta"][s].get(metric)
        row.append("—" if s == baseline else (f"{d:+.2f}" if d is not None else "-"))
        md.append("| " + " | ".join(row) + " |")
    md.append("")
    md.append(f"Cells: mean ± sample sd (ddof=1) of {metric} over seeds (n/a: single seed). "
              f"Avg Δ: mean over pairs of (system mean − {baseline} mean).")
    if sig_on:
        md.append(f"† p < 0.05, paired approximate randomization ({n_ar} trials, sacreBLEU) against "
                  f"{baseline} on the concatenated outputs over seeds (hypotheses of each seed "
                  f"concatenated in seed order, reference repeated once per seed).")
    md += ["", "## Details", ""]
    dh = ["Pair", "System", "Seeds", "BLEU (tok)", "BLEU (detok)", "chrF", f"Δ {metric}",
          "concat score", "95% CI (bootstrap)", "p (bootstrap)", "p (AR)"]
    md.append("| " + " | ".join(dh) + " |")
    md.append("|" + "|".join(["---"] * 3 + ["---:"] * (len(dh) - 3)) + "|")
    csv_rows = []
    for pname, p in pairs.items():
        for s, e in p["systems"].items():
            c = e.get("concat") or {}
            ci = (f"[{c['ci_low']:.2f}, {c['ci_high']:.2f}]" if c.get("ci_low") is not None else "-")
            md.append("| " + " | ".join([
                pname, s, str(e["n_seeds"]), _fmt_mean_sd(e.get("bleu_tok")), _fmt_mean_sd(e.get("bleu")),
                _fmt_mean_sd(e.get("chrf")), "—" if s == baseline else f"{e['delta'][metric]:+.2f}",
                f"{c['score']:.2f}" if c.get("score") is not None else "-", ci,
                _fmt_p(c.get("p_bs")) if s != baseline else "-",
                _fmt_p(c.get("p_ar")) if s != baseline else "-"]) + " |")
            row = OrderedDict([("pair", pname), ("system", s), ("n_seeds", e["n_seeds"]),
                               ("seeds", " ".join(str(x) for x in e["seeds"]))])
            for f in SCORE_FIELDS:
                row[f"{f}_mean"] = e[f]["mean"] if f in e else ""
                row[f"{f}_sd"] = (e[f]["sd"] if e[f]["sd"] is not None else "") if f in e else ""
                row[f"delta_{f}"] = e["delta"].get(f, "")
            for k in ("score", "ci_low", "ci_high", "p_bs", "p_ar"):
                v = c.get(k)
                row[f"concat_{k}"] = "" if v is None or (s == baseline and k.startswith("p_")) else v
            csv_rows.append(row)
    (out / f"{stem}.md").write_text("\n".join(md) + "\n", encoding="utf-8")

    # --- LaTeX (booktabs)
    cols = "l" + "r" * (len(pairs) + 1)
    tex = [r"% requires \usepackage{booktabs}", r"\begin{tabular}{" + cols + "}", r"\toprule",
           " & ".join(["System"] + [_latex_escape(p) for p in pairs] + [r"Avg.\ $\Delta$"]) + r" \\",
           r"\midrule"]
    for s in systems:
        row = [_latex_escape(s)]
        for p in pairs.values():
            e = p["systems"].get(s)
            if not e or metric not in e:
                row.append("--")
                continue
            m, sd = e[metric]["mean"], e[metric]["sd"]
            cell = f"{m:.2f}" + (f" $\\pm$ {sd:.2f}" if sd is not None else "")
            if s != baseline and _sig_mark(e.get("concat")):
                cell += r"$^\dagger$"
            row.append(cell)
        d = agg["avg_delta"][s].get(metric)
        row.append("--" if s == baseline or d is None else f"{d:+.2f}")
        tex.append(" & ".join(row) + r" \\")
    tex += [r"\bottomrule", r"\end{tabular}",
            f"% mean $\\pm$ sample sd (ddof=1) of {metric} over seeds; "
            + (f"$\\dagger$: p < 0.05, paired approximate randomization vs {_latex_escape(baseline)} "
               f"on seed-concatenated outputs" if sig_on else "no significance test")]
    (out / f"{stem}.tex").write_text("\n".join(tex) + "\n", encoding="utf-8")

    # --- CSV
    with open(out / f"{stem}.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.DictWriter(f, fieldnames=list(csv_rows[0].keys()))
        w.writeheader()
        w.writerows(csv_rows)
    with open(out / f"{stem}_avg_delta.csv", "w", encoding="utf-8", newline="") as f:
        w = csv.writer(f)
        w.writerow(["system", "n_pairs"] + [f"avg_delta_{x}" for x in SCORE_FIELDS])
        for s, d in agg["avg_delta"].items():
            w.writerow([s, d["n_pairs"]] + [d.get(x, "") for x in SCORE_FIELDS])
    (out / f"{stem}.json").write_text(json.dumps(agg, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return {"md": str(out / f"{stem}.md"), "tex": str(out / f"{stem}.tex"), "csv": str(out / f"{stem}.csv"),
            "avg_delta_csv": str(out / f"{stem}_avg_delta.csv"), "json": str(out / f"{stem}.json")}


# ---------------------------------------------------------------------------
# 2x2 ablation: {layernorm, scalenorm} x {dot, qknorm}
# ---------------------------------------------------------------------------

ABLATION_CELLS = ("layernorm_dot", "layernorm_qknorm", "scalenorm_dot", "scalenorm_qknorm")

# name -> (treatment cell(s), control cell(s), description)
_SIMPLE_EFFECTS = OrderedDict([
    ("qknorm_effect_at_layernorm", (("layernorm_qknorm",), ("layernorm_dot",),
                                    "QKNorm effect with LayerNorm: (LN,QK) - (LN,dot)")),
    ("qknorm_effect_at_scalenorm", (("scalenorm_qknorm",), ("scalenorm_dot",),
                                    "QKNorm effect with ScaleNorm: (SN,QK) - (SN,dot)")),
    ("norm_effect_at_dot", (("scalenorm_dot",), ("layernorm_dot",),
                            "ScaleNorm-vs-LayerNorm effect with dot attention: (SN,dot) - (LN,dot)")),
    ("norm_effect_at_qknorm", (("scalenorm_qknorm",), ("layernorm_qknorm",),
                               "ScaleNorm-vs-LayerNorm effect with QKNorm: (SN,QK) - (LN,QK)")),
])
_POOLED_EFFECTS = OrderedDict([
    ("qknorm_main_effect", (("layernorm_qknorm", "scalenorm_qknorm"), ("layernorm_dot", "scalenorm_dot"),
                            "QKNorm main effect: mean of the two QKNorm effects")),
    ("norm_main_effect", (("scalenorm_dot", "scalenorm_qknorm"), ("layernorm_dot", "layernorm_qknorm"),
                          "ScaleNorm main effect: mean of the two norm-type effects")),
    ("paper_comparison", (("layernorm_qknorm",), ("scalenorm_dot",),
                          "paper's comparison: (LN,QK) - (SN,dot)")),
])


def ablation_effects(means: Mapping[str, float]) -> Dict[str, object]:
    """Effects of the 2x2 design from the four cell means (pure function).

    With a=(LN,dot), b=(LN,QK), c=(SN,dot), d=(SN,QK) (BLEU points, mean over
    seeds):

    * ``qknorm_effect_at_layernorm`` = b - a, ``qknorm_effect_at_scalenorm`` = d - c
    * ``norm_effect_at_dot`` = c - a, ``norm_effect_at_qknorm`` = d - b
      (ScaleNorm minus LayerNorm)
    * ``interaction`` = (b - a) - (d - c)  (= -((d-b) - (c-a)))
    * ``qknorm_main_effect`` = ((b-a) + (d-c)) / 2, ``norm_main_effect`` =
      ((c-a) + (d-b)) / 2
    * ``paper_comparison`` = b - c (LN+QKNorm vs SN+dot, the comparison the
      QKNorm paper makes against the ScaleNorm baseline), decomposed as
      ``(b-a) - (c-a)`` (QKNorm effect at LN minus norm effect at dot),
      ``(d-c) - (d-b)`` (QKNorm effect at SN minus norm effect at QKNorm) and
      ``qknorm_main_effect - norm_main_effect`` (exact; the interaction
      cancels).

    :param means: mapping with the four keys of :data:`ABLATION_CELLS`.
    :returns: dict of floats plus ``decomposition`` of the paper comparison.
    :raises ValueError: a cell is missing.
    """
    missing = [c for c in ABLATION_CELLS if c not in means]
    if missing:
        raise ResultsError(f"ablation cells missing: {missing} (need {list(ABLATION_CELLS)})")
    a, b, c, d = (float(means[k]) for k in ABLATION_CELLS)
    qk_ln, qk_sn = b - a, d - c
    nm_dot, nm_qk = c - a, d - b
    qk_main = (qk_ln + qk_sn) / 2
    nm_main = (nm_dot + nm_qk) / 2
    paper = b - c
    return OrderedDict([
        ("qknorm_effect_at_layernorm", qk_ln),
        ("qknorm_effect_at_scalenorm", qk_sn),
        ("norm_effect_at_dot", nm_dot),
        ("norm_effect_at_qknorm", nm_qk),
        ("interaction", qk_ln - qk_sn),
        ("qknorm_main_effect", qk_main),
        ("norm_main_effect", nm_main),
        ("paper_comparison", paper),
        ("decomposition", OrderedDict([
            ("via_layernorm", OrderedDict([("qknorm_effect_at_layernorm", qk_ln),
                                           ("minus_norm_effect_at_dot", -nm_dot)])),
            ("via_scalenorm", OrderedDict([("qknorm_effect_at_scalenorm", qk_sn),
                                           ("minus_norm_effect_at_qknorm", -nm_qk)])),
            ("main_effects", OrderedDict([("qknorm_main_effect", qk_main),
                                          ("minus_norm_main_effect", -nm_main)])),
        ])),
    ])


def ablation_significance(cell_hyps: Mapping[str, Sequence[Sequence[str]]], refs: Sequence[str],
                          metric: str = "bleu_tok", tgt_lang: str = "en", n_ar: int = 10000,
                          seed: int = 12345) -> Dict[str, object]:
    """Paired approximate randomization for the ablation effects.

    Each cell's per-seed hypotheses (already in seed order) are concatenated;
    pooled effects concatenate the two cells of each level (e.g. QKNorm main
    effect: [(LN,QK) seeds, (SN,QK) seeds] vs [(LN,dot) seeds, (SN,dot)
    seeds], against the reference repeated accordingly). Tested: the four
    simple effects, the two main effects and the paper comparison; the
    interaction is not tested.

    :param cell_hyps: cell -> list over seeds of hypothesis line lists (equal
        numbers of seeds in all cells).
    :returns: effect name -> ``{"treatment", "control", "delta_concat",
        "p_ar", "n_ar"}`` (delta of the concatenated-output score, points).
    :raises ResultsError: missing cells or unequal seed counts.
    """
    missing = [c for c in ABLATION_CELLS if c not in cell_hyps]
    if missing:
        raise ResultsError(f"ablation cells missing: {missing}")
    n_seeds = {c: len(cell_hyps[c]) for c in ABLATION_CELLS}
    if len(set(n_seeds.values())) != 1 or 0 in n_seeds.values():
        raise ResultsError(f"ablation cells need equal, non-zero numbers of seeds, got {n_seeds}")
    out = OrderedDict()
    for name, (treat, ctrl, desc) in list(_SIMPLE_EFFECTS.items()) + list(_POOLED_EFFECTS.items()):
        t_h = [line for c in treat for seed_h in cell_hyps[c] for line in seed_h]
        c_h = [line for c in ctrl for seed_h in cell_hyps[c] for line in seed_h]
        rep = list(refs) * (n_seeds[treat[0]] * len(treat))
        res = paired_significance(rep, [("control", c_h), ("treatment", t_h)], metric=metric,
                                  tgt_lang=tgt_lang, n_ar=n_ar, seed=seed, tests=("ar",))
        out[name] = OrderedDict([("description", desc), ("treatment", list(treat)), ("control", list(ctrl)),
                                 ("delta_concat", res["systems"][1]["delta"]),
                                 ("p_ar", res["systems"][1]["p_ar"]), ("n_ar", n_ar),
                                 ("signature", res["signatures"]["ar"])])
    return out


def ablation_report(cells: Mapping[str, Sequence[Mapping[str, object]]], refs: Optional[Sequence[str]] = None,
                    metric: str = "bleu_tok", significance: bool = True, tgt_lang: str = "en",
                    n_ar: int = 10000, seed: int = 12345) -> Dict[str, object]:
    """Full 2x2 ablation report from per-seed records of the four cells.

    All four systems are PreNorm + FixNorm; they differ in the normalization
    layer (LayerNorm / ScaleNorm) and the attention score (dot product /
    QKNorm). Effects are differences of mean ``metric`` over seeds
    (:func:`ablation_effects`); significance by :func:`ablation_significance`
    on concatenated outputs.

    :param cells: cell name -> list of records with ``seed``, ``metric`` and
        (for significance) ``hyp_path``.
    :param refs: reference lines (required if ``significance``).
    :returns: ``{"metric", "cells": {cell: {"n_seeds", "seeds", "mean",
        "sd", "values"}}, "effects", "significance", "notes"}``.
    """
    missing = [c for c in ABLATION_CELLS if c not in cells or not cells[c]]
    if missing:
        raise ResultsError(f"ablation cells without records: {missing} (need {list(ABLATION_CELLS)})")
    cell_stats = OrderedDict()
    for c in ABLATION_CELLS:
        recs = sorted(cells[c], key=lambda r: _seed_key(r.get("seed")))
        vals = []
        for r in recs:
            if r.get(metric) is None:
                raise ResultsError(f"ablation cell {c!r}: record seed={r.get('seed')!r} has no {metric!r}")
            vals.append(float(r[metric]))
        m, sd = mean_sd(vals)
        cell_stats[c] = OrderedDict([("system", recs[0].get("system")), ("n_seeds", len(recs)),
                                     ("seeds", [r.get("seed") for r in recs]), ("mean", m),
                                     ("sd", _nan_to_none(sd)), ("values", vals)])
    effects = ablation_effects({c: cell_stats[c]["mean"] for c in ABLATION_CELLS})
    sig = None
    if significance:
        if refs is None:
            raise ResultsError("ablation significance needs a reference (--ref)")
        cell_hyps = OrderedDict()
        for c in ABLATION_CELLS:
            recs = sorted(cells[c], key=lambda r: _seed_key(r.get("seed")))
            seq = []
            for r in recs:
                if not r.get("hyp_path"):
                    raise ResultsError(f"ablation cell {c!r}: record seed={r.get('seed')!r} has no hyp_path")
                h = read_lines(r["hyp_path"], "hypothesis")
                _check_same_length(h, r["hyp_path"], refs, "reference")
                seq.append(h)
            cell_hyps[c] = seq
        sig = ablation_significance(cell_hyps, refs, metric=metric, tgt_lang=tgt_lang, n_ar=n_ar, seed=seed)
    notes = [
        "All cells are PreNorm + FixNorm. Effects are differences of mean scores over seeds "
        f"({metric}, BLEU points); a=(LN,dot), b=(LN,QK), c=(SN,dot), d=(SN,QK).",
        "interaction = (b - a) - (d - c): how much larger the QKNorm gain is with LayerNorm than with ScaleNorm.",
        "paper_comparison = b - c = (b - a) - (c - a) = (d - c) - (d - b) = qknorm_main_effect - norm_main_effect: "
        "the paper's LN+QKNorm vs SN+dot gain mixes the QKNorm effect with the (negated) ScaleNorm effect.",
        "p-values: paired approximate randomization (sacreBLEU, Riezler & Maxwell 2005) on the outputs "
        "concatenated over seeds (and over the two cells of a level for main effects); the interaction is "
        "not tested.",
    ]
    return OrderedDict([("metric", metric), ("cells", cell_stats), ("effects", effects),
                        ("significance", sig), ("notes", notes)])


def write_ablation_report(report: Mapping[str, object], out_dir, stem: str = "ablation") -> Dict[str, str]:
    """Write :func:`ablation_report` output as ``<stem>.md`` and ``<stem>.json``."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    metric = report["metric"]
    cs = report["cells"]
    eff = report["effects"]
    sig = report.get("significance") or {}
    md = [f"# 2x2 ablation: normalization x attention ({metric}, BLEU points)", "",
          "All systems PreNorm + FixNorm. Cells: mean ± sample sd over seeds.", "",
          "| norm \\ attention | dot | qknorm |", "|---|---:|---:|"]
    for norm in ("layernorm", "scalenorm"):
        row = [norm]
        for att in ("dot", "qknorm"):
            e = cs[f"{norm}_{att}"]
            row.append(_fmt_mean_sd(e) + f" (n={e['n_seeds']})")
        md.append("| " + " | ".join(row) + " |")
    md += ["", "| effect | definition | Δ mean | Δ concat | p (AR) |", "|---|---|---:|---:|---:|"]
    defs = {k: v[2] for k, v in list(_SIMPLE_EFFECTS.items()) + list(_POOLED_EFFECTS.items())}
    defs["interaction"] = "((LN,QK) - (LN,dot)) - ((SN,QK) - (SN,dot))"
    for k in ("qknorm_effect_at_layernorm", "qknorm_effect_at_scalenorm", "norm_effect_at_dot",
              "norm_effect_at_qknorm", "qknorm_main_effect", "norm_main_effect", "interaction",
              "paper_comparison"):
        s = sig.get(k) or {}
        dc = f"{s['delta_concat']:+.2f}" if s.get("delta_concat") is not None else "-"
        md.append(f"| {k} | {defs[k]} | {eff[k]:+.2f} | {dc} | {_fmt_p(s.get('p_ar'))} |")
    dec = eff["decomposition"]
    md += ["", "Paper comparison (LN+QKNorm vs SN+dot) decomposed:", "",
           f"- = QKNorm effect at LN ({dec['via_layernorm']['qknorm_effect_at_layernorm']:+.2f}) "
           f"− ScaleNorm effect at dot ({-dec['via_layernorm']['minus_norm_effect_at_dot']:+.2f}) "
           f"= {eff['paper_comparison']:+.2f}",
           f"- = QKNorm effect at SN ({dec['via_scalenorm']['qknorm_effect_at_scalenorm']:+.2f}) "
           f"− ScaleNorm effect at QKNorm ({-dec['via_scalenorm']['minus_norm_effect_at_qknorm']:+.2f}) "
           f"= {eff['paper_comparison']:+.2f}",
           f"- = QKNorm main effect ({eff['qknorm_main_effect']:+.2f}) − ScaleNorm main effect "
           f"({eff['norm_main_effect']:+.2f}) = {eff['paper_comparison']:+.2f}", ""]
    md += [f"- {n}" for n in report["notes"]]
    (out / f"{stem}.md").write_text("\n".join(md) + "\n", encoding="utf-8")
    (out / f"{stem}.json").write_text(json.dumps(report, indent=2, ensure_ascii=False) + "\n", encoding="utf-8")
    return {"md": str(out / f"{stem}.md"), "json": str(out / f"{stem}.json")}


# ---------------------------------------------------------------------------
# CLI
# ---------------------------------------------------------------------------


def _parse_kv(items: Optional[Sequence[str]], flag: str) -> Dict[str, str]:
    out = {}
    for it in items or []:
        if "=" not in it:
            raise EvaluationError(f"{flag} expects KEY=VALUE, got {it!r}")
        k, v = it.split("=", 1)
        out[k] = v
    return out


def _dump(obj) -> str:
    return json.dumps(obj, indent=2, ensure_ascii=False)


def _cmd_extract(a) -> int:
    hyps = extract_hypotheses(a.generate_output, a.output, a.remove_bpe, a.n_expected)
    print(f"wrote {len(hyps)} hypotheses to {a.output}", file=sys.stderr)
    return 0


def _cmd_score(a) -> int:
    res = score_files(a.hyp, a.ref, src_lang=a.src_lang, tgt_lang=a.tgt_lang)
    print(_dump(res) if a.json else format_scores(res))
    return 0


def _cmd_compare(a) -> int:
    res = compare_files(a.ref, a.baseline, a.system, tokenize=a.tokenize, tgt_lang=a.tgt_lang,
                        n_bootstrap=a.n_bootstrap, n_ar=a.n_ar, seed=a.seed)
    print(_dump(res) if a.json else format_compare(res))
    return 0


def _cmd_aggregate(a) -> int:
    records = []
    for src in a.results:
        records.extend(load_results(src))
    refs = _parse_kv(a.ref, "--ref")
    langs = _parse_kv(a.tgt_lang, "--tgt-lang")
    agg = aggregate_results(records, a.baseline, refs=refs, metric=a.metric,
                            significance=not a.no_significance, tgt_lang=langs,
                            n_bootstrap=a.n_bootstrap, n_ar=a.n_ar, seed=a.seed)
    paths = write_aggregate_tables(agg, a.out_dir)
    print((Path(paths["md"]).read_text(encoding="utf-8")))
    print("wrote " + ", ".join(paths.values()), file=sys.stderr)
    return 0


def _cmd_ablation(a) -> int:
    ref_path = a.ref
    pair = a.pair
    metric = a.metric
    if a.spec:
        try:
            spec = json.loads(Path(a.spec).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ResultsError(f"cannot read ablation spec {a.spec!r}: {exc}") from None
        if not isinstance(spec, dict) or "cells" not in spec:
            raise ResultsError(f"ablation spec {a.spec!r} must be an object with 'cells'")
        base = Path(a.spec).parent
        cells = {}
        for c, recs in spec["cells"].items():
            cells[c] = [dict(r, hyp_path=_resolve_path(r.get("hyp_path"), base)) for r in recs]
        if ref_path is None and spec.get("ref"):
            ref_path = _resolve_path(spec["ref"], base)
        pair = pair or spec.get("pair")
    else:
        if not a.results:
            raise ResultsError("ablation needs --spec or --results")
        records = []
        for src in a.results:
            records.extend(load_results(src))
        pairs = sorted({str(r["pair"]) for r in records})
        if pair is None:
            if len(pairs) != 1:
                raise ResultsError(f"several pairs in the results {pairs}: choose one with --pair")
            pair = pairs[0]
        mapping = {c: c for c in ABLATION_CELLS}
        mapping.update(_parse_kv(a.cell, "--cell"))
        unknown = [c for c in mapping if c not in ABLATION_CELLS]
        if unknown:
            raise ResultsError(f"unknown ablation cells {unknown}; cells are {list(ABLATION_CELLS)}")
        cells = {c: [r for r in records if str(r["pair"]) == pair and str(r["system"]) == s]
                 for c, s in mapping.items()}
        if ref_path is None:
            rp = {r.get("ref_path") for recs in cells.values() for r in recs if r.get("ref_path")}
            if len(rp) == 1:
                ref_path = rp.pop()
    refs = None
    if not a.no_significance:
        if ref_path is None:
            raise ResultsError("ablation significance needs --ref (or 'ref' in the spec)")
        refs = read_lines(ref_path, "reference")
    lang = a.tgt_lang or ((pair.split("-")[-1]) if pair and "-" in pair else "en")
    rep = ablation_report(cells, refs, metric=metric, significance=not a.no_significance,
                          tgt_lang=lang, n_ar=a.n_ar, seed=a.seed)
    rep["pair"] = pair
    rep["ref"] = ref_path
    paths = write_ablation_report(rep, a.out_dir)
    print(Path(paths["md"]).read_text(encoding="utf-8"))
    print("wrote " + ", ".join(paths.values()), file=sys.stderr)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``python -m fairseq_qknorm.evaluate`` argument parser."""
    p = argparse.ArgumentParser(
        prog="python -m fairseq_qknorm.evaluate",
        description="BLEU/chrF scoring (sacreBLEU), paired significance tests and result tables.")
    sub = p.add_subparsers(dest="cmd", required=True)

    e = sub.add_parser("extract", help="hypotheses from fairseq-generate output, in source order")
    e.add_argument("--generate-output", required=True, help="captured fairseq-generate stdout")
    e.add_argument("--output", required=True, help="hypothesis file to write (one per line, UTF-8)")
    e.add_argument("--remove-bpe", choices=BPE_MODES, default="subword_nmt",
                   help="subword removal (default: subword_nmt, i.e. '@@ ')")
    e.add_argument("--n-expected", type=int, default=None, help="required number of hypotheses")
    e.set_defaults(fn=_cmd_extract)

    s = sub.add_parser("score", help="tokenized BLEU, detokenized sacreBLEU and chrF")
    s.add_argument("--hyp", required=True)
    s.add_argument("--ref", required=True)
    s.add_argument("--json", action="store_true", help="print JSON")
    s.add_argument("--src-lang", default=None)
    s.add_argument("--tgt-lang", default="en", help="target language for detokenization (default en)")
    s.set_defaults(fn=_cmd_score)

    c = sub.add_parser("compare", help="paired bootstrap + approximate randomization vs a baseline")
    c.add_argument("--ref", required=True)
    c.add_argument("--baseline", required=True, help="baseline hypotheses, PATH or NAME=PATH")
    c.add_argument("--system", required=True, nargs="+", help="system hypotheses, PATH or NAME=PATH")
    c.add_argument("--json", action="store_true")
    c.add_argument("--n-bootstrap", type=int, default=1000)
    c.add_argument("--n-ar", type=int, default=10000)
    c.add_argument("--seed", type=int, default=12345)
    c.add_argument("--tokenize", choices=sorted(_TOKENIZE_TO_METRIC), default="none",
                   help="none: tokenized BLEU on the text as is (default); 13a: Moses-detokenize, then sacreBLEU 13a")
    c.add_argument("--tgt-lang", default="en", help="detokenizer language for --tokenize 13a")
    c.set_defaults(fn=_cmd_compare)

    g = sub.add_parser("aggregate", help="mean ± sd over seeds, paired tests, Markdown/LaTeX/CSV tables")
    g.add_argument("--results", required=True, nargs="+",
                   help="JSON file(s) with a record or list of records, or directories of *.json")
    g.add_argument("--baseline", required=True, help="baseline system name")
    g.add_argument("--ref", action="append", metavar="PAIR=PATH", help="reference per pair (repeatable)")
    g.add_argument("--out-dir", required=True)
    g.add_argument("--metric", choices=SCORE_FIELDS, default="bleu_tok")
    g.add_argument("--tgt-lang", action="append", metavar="PAIR=LANG",
                   help="target language per pair (for --metric bleu); default: after '-' in the pair")
    g.add_argument("--n-bootstrap", type=int, default=1000)
    g.add_argument("--n-ar", type=int, default=10000)
    g.add_argument("--seed", type=int, default=12345)
    g.add_argument("--no-significance", action="store_true", help="skip the paired tests")
    g.set_defaults(fn=_cmd_aggregate)

    b = sub.add_parser("ablation", help="2x2 {layernorm,scalenorm} x {dot,qknorm} report")
    b.add_argument("--spec", help="JSON {'ref': PATH, 'pair': P, 'cells': {CELL: [records]}}")
    b.add_argument("--results", nargs="+", help="result JSON file(s)/dir(s), as for aggregate")
    b.add_argument("--pair", default=None)
    b.add_argument("--cell", action="append", metavar="CELL=SYSTEM",
                   help=f"system name of a cell (default: the cell name); cells: {', '.join(ABLATION_CELLS)}")
    b.add_argument("--ref", default=None)
    b.add_argument("--out-dir", required=True)
    b.add_argument("--metric", choices=SCORE_FIELDS, default="bleu_tok")
    b.add_argument("--tgt-lang", default=None)
    b.add_argument("--n-ar", type=int, default=10000)
    b.add_argument("--seed", type=int, default=12345)
    b.add_argument("--no-significance", action="store_true")
    b.set_defaults(fn=_cmd_ablation)
    return p


def main(argv: Optional[Sequence[str]] = None) -> int:
    """CLI entry point; returns the exit status (2 on input errors)."""
    args = build_parser().parse_args(argv)
    # sacreBLEU logs every resampling step at INFO (visible when fairseq has
    # configured the root logger); keep the CLI output readable
    logging.getLogger("sacrebleu").setLevel(logging.WARNING)
    try:
        return args.fn(args)
    except (EvaluationError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
