"""Joint sentencepiece BPE of a language pair (needs the ``sentencepiece`` package).

What ``python -m qknorm_tools.corpus spm`` (:mod:`.corpus`) runs: train a joint sentencepiece
BPE model on the training data of both sides and segment every split, optionally with
BPE-dropout sampling on the training split (:func:`spm_segment`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence

from .corpus_check import CorpusError
from .corpus_extract import SPLITS


def spm_segment(
    raw: str,
    out: str,
    src: str,
    tgt: str,
    vocab_size: int,
    dropout: float = 0.0,
    seed: int = 1,
    splits: Sequence[str] = SPLITS,
    deterministic_dir: str | None = None,
) -> dict:
    """Joint sentencepiece BPE: train on ``raw/train.{src,tgt}``, segment every split to ``out``.

    The model (``out/spm.model``, ``out/spm.vocab``) is a BPE model of exactly ``vocab_size``
    pieces with full character coverage, no BOS/EOS/PAD (fairseq adds its own) and the
    ``identity`` normalization: sentencepiece's default NFKC rewrites characters (``1º`` ->
    ``1o``, full-width and ligature forms), so a decoded hypothesis could never match the raw
    reference and the source would not be the text the references were made from; with
    ``identity`` every segmented line decodes back to its raw line (whitespace-tokenized text).
    With ``dropout > 0`` the training split is segmented by sampling with ``alpha = dropout``
    (sentencepiece's BPE-dropout, Provilkov et al. 2020), seeded by ``seed``, once: one static
    sample that every epoch sees; dev and test are always segmented deterministically, and so
    is the training split written to ``deterministic_dir`` (for QKNorm's L).

    Returns:
        ``{"vocab_size": pieces in the model, "pieces_used": distinct pieces in the
        segmented training split}``.

    Raises:
        ImportError: the ``sentencepiece`` package is not installed (``pip install -e .[spm]``).
        CorpusError: sentencepiece cannot build ``vocab_size`` pieces from the training data
            (too few for its characters, or more than its merges can reach); its own message
            says which sizes work.
    """
    import sentencepiece as spm

    inputs = [os.path.join(raw, f"train.{lang}") for lang in (src, tgt)]
    try:
        spm.SentencePieceTrainer.train(
            input=",".join(inputs),
            model_prefix=os.path.join(out, "spm"),
            vocab_size=int(vocab_size),
            model_type="bpe",
            character_coverage=1.0,
            normalization_rule_name="identity",
            hard_vocab_limit=True,  # exactly vocab_size pieces, or an error saying what fits
            bos_id=-1,
            eos_id=-1,
            pad_id=-1,
            unk_id=0,
            num_threads=2,
            minloglevel=2,
        )
    except RuntimeError as e:  # sentencepiece's checks: "INTERNAL: file(line) [cond] message"
        reason = str(e).split("] ", 1)[-1].strip()
        raise CorpusError(
            " + ".join(inputs),
            f"sentencepiece cannot train a {vocab_size}-piece BPE model: {reason}",
        ) from None
    if hasattr(spm, "set_random_generator_seed"):
        spm.set_random_generator_seed(int(seed))
    sp = spm.SentencePieceProcessor(model_file=os.path.join(out, "spm.model"))
    used: set[str] = set()
    for split in splits:
        sample = split == "train" and dropout > 0
        for lang in (src, tgt):
            with open(os.path.join(raw, f"{split}.{lang}"), encoding="utf-8") as fin:
                lines = [line.strip() for line in fin]
            if sample:
                pieces = [
                    sp.encode(
                        line, out_type=str, enable_sampling=True, alpha=dropout, nbest_size=-1
                    )
                    for line in lines
                ]
            else:
                pieces = [sp.encode(line, out_type=str) for line in lines]
            _write_pieces(os.path.join(out, f"{split}.{lang}"), pieces)
            if split == "train":
                deterministic = (
                    pieces if not sample else [sp.encode(x, out_type=str) for x in lines]
                )
                used.update(p for ps in deterministic for p in ps)
                if deterministic_dir is not None:
                    os.makedirs(deterministic_dir, exist_ok=True)
                    _write_pieces(os.path.join(deterministic_dir, f"train.{lang}"), deterministic)
    return {"vocab_size": sp.get_piece_size(), "pieces_used": len(used)}


def _write_pieces(path: str, lines: Iterable[list[str]]) -> None:
    with open(path, "w", encoding="utf-8") as f:
        for pieces in lines:
            f.write(" ".join(pieces) + "\n")
