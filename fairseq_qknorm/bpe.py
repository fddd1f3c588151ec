"""The pipeline's subword segmentation for raw text at inference: fairseq ``--bpe pipeline``.

``scripts/bpe.sh`` segments every split with one of two tools and records which in
``data/bpe/PAIR/bpe.json``:

* ``subword-nmt``: joint BPE codes plus a per-language vocabulary filter,
  ``subword-nmt apply-bpe -c codes --vocabulary vocab.L --vocabulary-threshold T``
  (Sennrich et al. 2016; the filter reverts merges that produce a subword seen fewer than
  ``T`` times on side ``L`` of the segmented training data). fairseq's own
  ``--bpe subword_nmt`` applies the codes only, so it segments differently and many test
  words become ``<unk>``.
* ``sentencepiece``: one joint ``spm.model``; fairseq's own ``--bpe sentencepiece`` applies
  it as ``bpe.sh`` does and is reused here.

``--bpe pipeline --bpe-dir data/bpe/PAIR`` reads ``bpe.json`` and applies the recorded tool
with the recorded files and threshold, so ``fairseq-interactive``, the hub interface
(``from_pretrained(..., bpe="pipeline", bpe_dir=...)``) and :mod:`qknorm_model_tools.translate`
see the source segmentation the model was trained on. ``decode`` removes the segmentation
the way ``fairseq-generate --post-process`` does for that tool.
"""

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from fairseq.data.data_utils import post_process
from fairseq.data.encoders import register_bpe
from fairseq.data.encoders.sentencepiece_bpe import SentencepieceBPE, SentencepieceConfig
from fairseq.dataclass import FairseqDataclass

#: The file of ``data/bpe/PAIR`` that records the segmentation (``--bpe-dir``'s contract with
#: its writer, ``qknorm_tools.textio.write_bpe_manifest``; the plugin imports only torch, fairseq
#: and itself, so the tooling's ``BPE_MANIFEST`` equals this one by test, not by import)
MANIFEST = "bpe.json"

#: ``bpe.json`` "tool" -> the fairseq ``post_process`` symbol that undoes its segmentation (the
#: tooling's ``--eval-bleu-remove-bpe`` and extraction use the same table,
#: ``qknorm_tools.textio.BPE_TOOL_SYMBOL``, held equal to this one by
#: ``tests/test_layers.py``)
POST_PROCESS = {"subword-nmt": "subword_nmt", "sentencepiece": "sentencepiece"}

TOOLS = tuple(POST_PROCESS)


def read_manifest(bpe_dir) -> dict[str, object]:
    """Read ``bpe_dir/bpe.json`` as written by ``scripts/bpe.sh``.

    Args:
        bpe_dir: a segmented pair directory, ``data/bpe/PAIR``.

    Returns:
        The manifest: ``pair``, ``src``, ``tgt``, ``tool`` and, for ``subword-nmt``,
        ``codes``, ``vocabulary`` (language -> file), ``merges``, ``vocab_threshold``; for
        ``sentencepiece``, ``model`` and ``vocab_size``. File entries are absolute paths.

    Raises:
        FileNotFoundError: no ``bpe.json`` (not made by ``scripts/bpe.sh``, or by a version
            before it wrote one), or a file it names is missing.
        ValueError: the manifest is not valid JSON or lacks a field it needs.
    """
    bpe_dir = Path(bpe_dir)
    path = bpe_dir / MANIFEST
    if not path.is_file():
        raise FileNotFoundError(
            f"{path} not found: --bpe-dir must be a directory made by scripts/bpe.sh "
            f"(data/bpe/PAIR); one made before bpe.sh wrote {MANIFEST} needs "
            f"'scripts/bpe.sh PAIR --force' (same settings, same segmentation) and "
            f"'scripts/binarize.sh PAIR'"
        )
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: not valid JSON ({e})") from e
    tool = manifest.get("tool")
    if tool not in TOOLS:
        raise ValueError(f"{path}: 'tool' must be one of {TOOLS}, got {tool!r}")
    needed = ("src", "tgt") + (
        ("codes", "vocabulary", "vocab_threshold") if tool == "subword-nmt" else ("model",)
    )
    missing = [k for k in needed if k not in manifest]
    if missing:
        raise ValueError(f"{path}: missing field(s) {missing} for tool {tool}")
    if tool == "subword-nmt":
        manifest["codes"] = _existing(bpe_dir / manifest["codes"], path)
        manifest["vocabulary"] = {
            lang: _existing(bpe_dir / f, path) for lang, f in manifest["vocabulary"].items()
        }
    else:
        manifest["model"] = _existing(bpe_dir / manifest["model"], path)
    return manifest


def _existing(file: Path, manifest_path: Path) -> str:
    if not file.is_file():
        raise FileNotFoundError(f"{file} (named in {manifest_path}) not found")
    return str(file.resolve())


class SubwordNMTVocabularyBPE:
    """subword-nmt BPE with a vocabulary filter, as ``subword-nmt apply-bpe`` applies it.

    That is ``subword-nmt apply-bpe --codes CODES --vocabulary VOCAB
    --vocabulary-threshold T``.

    Uses subword-nmt's own ``apply_bpe.BPE`` and ``apply_bpe.read_vocabulary`` (the
    functions its command line calls), reading the files as UTF-8 like the command does.

    Args:
        codes: path of the BPE codes (``learn-joint-bpe-and-vocab --output``).
        vocabulary: path of one language's vocabulary (``--write-vocabulary``).
        threshold: minimum frequency of a subword in ``vocabulary`` for a merge that
            produces it to be kept.

    The continuation marker is subword-nmt's default ``@@`` (``bpe.sh`` keeps it).
    """

    def __init__(self, codes: str, vocabulary: str, threshold: int):
        from subword_nmt import apply_bpe

        with open(vocabulary, encoding="utf-8") as f:
            vocab = apply_bpe.read_vocabulary(f, threshold)
        with open(codes, encoding="utf-8") as f:
            self.bpe = apply_bpe.BPE(f, vocab=vocab)

    def encode(self, x: str) -> str:
        """Segment one whitespace-tokenized line (``apply-bpe``'s ``process_line``)."""
        return self.bpe.process_line(x)

    def decode(self, x: str) -> str:
        """Join subwords: remove ``"@@ "`` (fairseq ``post_process(x, "subword_nmt")``)."""
        return post_process(x, POST_PROCESS["subword-nmt"])


@dataclass
class PipelineBPEConfig(FairseqDataclass):
    """Options of ``--bpe pipeline``: ``--bpe-dir`` and ``--bpe-lang``."""

    bpe_dir: str = field(
        default="???",
        metadata={
            "help": "segmented pair directory written by scripts/bpe.sh (data/bpe/PAIR); "
            "its bpe.json names the tool, files and vocabulary threshold"
        },
    )
    bpe_lang: Optional[str] = field(
        default=None,
        metadata={
            "help": "language of the text to segment, whose vocabulary (vocab.LANG) "
            "applies the threshold (subword-nmt); default: the pair's source "
            "language in bpe.json"
        },
    )


@register_bpe("pipeline", dataclass=PipelineBPEConfig)
class PipelineBPE:
    """fairseq ``--bpe pipeline``: segment and join exactly as ``scripts/bpe.sh`` did.

    Args:
        cfg: :class:`PipelineBPEConfig` (``bpe_dir``, optional ``bpe_lang``).

    Raises:
        FileNotFoundError, ValueError: see :func:`read_manifest`; ``ValueError`` also for a
            ``bpe_lang`` that has no vocabulary in the manifest.
    """

    def __init__(self, cfg):
        manifest = read_manifest(cfg.bpe_dir)
        self.tool = manifest["tool"]
        self.lang = cfg.bpe_lang or manifest["src"]
        self.post_process = POST_PROCESS[self.tool]
        if self.tool == "subword-nmt":
            if self.lang not in manifest["vocabulary"]:
                raise ValueError(
                    f"--bpe-lang {self.lang!r}: {cfg.bpe_dir}/{MANIFEST} has "
                    f"vocabularies for {sorted(manifest['vocabulary'])} only"
                )
            self.segmenter = SubwordNMTVocabularyBPE(
                manifest["codes"],
                manifest["vocabulary"][self.lang],
                int(manifest["vocab_threshold"]),
            )
        else:
            self.segmenter = SentencepieceBPE(
                SentencepieceConfig(sentencepiece_model=manifest["model"])
            )

    def encode(self, x: str) -> str:
        """Segment one tokenized line as ``scripts/bpe.sh`` segments the test split."""
        return self.segmenter.encode(x)

    def decode(self, x: str) -> str:
        """Undo the segmentation (fairseq ``post_process`` with this tool's symbol)."""
        return post_process(x, self.post_process)
