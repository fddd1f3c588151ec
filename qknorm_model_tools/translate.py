"""Translate raw (pre-BPE) sentences with a trained checkpoint, segmented as in training.

A thin layer over fairseq's hub interface (``from_pretrained(..., bpe="pipeline",
bpe_dir=...)``, see :mod:`fairseq_qknorm.bpe`): the source is segmented with the tool,
files and vocabulary threshold that ``scripts/bpe.sh`` recorded, and hypotheses come back
with the segmentation removed, as ``scripts/evaluate.sh`` writes ``test.hyp``.

Python::

    from qknorm_model_tools.translate import Translator
    t = Translator.from_pipeline("gl-en", "twt", profile="cpu-proxy", seed=1)
    t.translate(["Era unha tarde de outono de 2005 ."])

Command line (same arguments as ``scripts/evaluate.sh``; one sentence per line)::

    python -m qknorm_model_tools.translate gl-en twt --profile cpu-proxy < input.gl > output.en

``from_pipeline`` takes the checkpoint, ``data/bin/PAIR``, ``data/bpe/PAIR``, beam, length
penalty, ``--max-tokens`` and the profile's other generation flags (``GEN_FLAGS``, e.g.
``--max-len-a 1.5 --max-len-b 10``) from the scripts' own configuration
(:mod:`qknorm_tools.config`, runs under ``QKNORM_WORK_DIR``), as ``evaluate.sh`` passes them to
``fairseq-generate``.

Same checkpoint, segmentation and beam search as ``evaluate.sh``, so the output equals its
``test.hyp`` line for line, with one caveat from fairseq itself: the output length cap
``max_len_a * S + max_len_b`` uses S = the longest source in the *batch*, so a hypothesis that
runs into the cap (an undertrained model repeating itself) can depend on which sentences
share its batch, and ``fairseq-generate`` batches the test split in another order.
"""

import argparse
import dataclasses
import json
import logging
import os
import pickle
import re
import sys
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Optional

from qknorm_tools import commands, config, run_spec
from qknorm_tools.config_schema import check_uint
from qknorm_tools.exits import UsageError
from qknorm_tools.provenance import IDENTITY_FILE
from qknorm_tools.unicode_forms import FORMS, normalize_lines


def _precision(profile, work: Path) -> str:
    """The precision a run was trained in: ``bf16`` or ``""``.

    ``bf16`` or ``""``: the precision the run was trained in, decided as train.sh decides it
    (:func:`qknorm_tools.run_spec.precision_mode`: QKNORM_BF16, else the profile's ``bf16``;
    ``auto``: the cached verdict of this machine, never a measurement).
    """
    try:
        mode = run_spec.precision_mode("", profile)
    except config.ConfigError as e:  # a bad QKNORM_BF16 or bf16 key, named
        raise ValueError(str(e)) from None
    if mode != "auto":
        return "bf16" if mode == "bf16" else ""
    if profile.arch_size != "proxy":
        return ""  # a profile at the papers' size: fp32 on CPU (run_spec.decide_precision)
    from . import bf16_auto

    threads = profile.threads  # QKNORM_THREADS applied (config.apply_env), as train.sh
    try:
        bf16, _ = bf16_auto.decide(work / "bf16-auto", "proxy", threads, 7, cached_only=True)
    except bf16_auto.CacheError as e:
        raise ValueError(str(e)) from None
    return "bf16" if bf16 else ""


def generation_options(flags: Sequence[str]) -> dict[str, object]:
    """Parse ``fairseq-generate`` generation flags into hub ``translate`` keyword arguments.

    Uses fairseq's own parser for its ``GenerationConfig`` (the options group
    ``fairseq-generate`` and ``fairseq-interactive`` share).

    Args:
        flags: command-line flags, e.g. ``["--max-len-a", "1.5", "--max-len-b", "10"]``.

    Returns:
        ``{field: value}`` for each option given, e.g. ``{"max_len_a": 1.5, "max_len_b": 10}``
        (flags of type bool give ``True``).

    Raises:
        ValueError: a flag that is not a fairseq generation option.
    """
    from fairseq.dataclass.configs import GenerationConfig
    from fairseq.dataclass.utils import gen_parser_from_dataclass

    parser = argparse.ArgumentParser(allow_abbrev=False, add_help=False)
    gen_parser_from_dataclass(parser, GenerationConfig())
    # keep what the flags set, also a value equal to fairseq's default (the hub interface starts
    # from the checkpoint's saved generation config): argparse fills in defaults only for
    # attributes the namespace does not have yet
    unset = object()
    names = [f.name for f in dataclasses.fields(GenerationConfig)]
    given, unknown = parser.parse_known_args(
        list(flags), namespace=argparse.Namespace(**{name: unset for name in names})
    )
    if unknown:
        raise ValueError(f"not fairseq generation options: {unknown} (in {list(flags)})")
    return {k: v for k, v in vars(given).items() if v is not unset}


@dataclasses.dataclass
class PipelineSettings:
    """What ``scripts/evaluate.sh PAIR SYSTEM --profile P --seed N`` decodes with.

    Attributes:
        checkpoint: ``runs/PAIR/PROFILE/SYSTEM/seedN/checkpoints/checkpoint_{best,last}.pt``.
        data_bin: ``data/bin/PAIR``.
        bpe_dir: ``data/bpe/PAIR``.
        max_tokens: the profile's ``GEN_MAX_TOKENS`` (``--max-tokens``).
        generate_flags: ``--beam BEAM --lenpen LENPEN`` and the profile's ``GEN_FLAGS``, as
            evaluate.sh passes them to ``fairseq-generate`` (and ``fairseq-interactive``
            accepts them).
        run_identity: the identity the run's ``train.json`` must record (pair, profile
            label, system, seed, precision, variant), as ``scripts/evaluate.sh`` checks it
            (``qk_check_run_identity``; :func:`qknorm_tools.evaluate.check_run_identity`).
    """

    checkpoint: Path
    data_bin: Path
    bpe_dir: Path
    max_tokens: int
    generate_flags: list[str]
    run_identity: Optional[dict] = None


def checkpoint_file_name(checkpoint: str) -> str:
    """The file name in ``checkpoints/`` of a run for ``--checkpoint`` as ``evaluate.sh`` takes it.

    ``best`` -> ``checkpoint_best.pt``, ``last`` -> ``checkpoint_last.pt``, ``avgN`` (N >= 1)
    -> ``checkpoint_avgN.pt`` (the parameter average of the last N checkpoints,
    :mod:`qknorm_model_tools.average_checkpoints`, written by ``scripts/evaluate.sh --checkpoint
    avgN``).

    Raises:
        ValueError: anything else (``avg0``, ``avgx``, ``worst``), with evaluate.sh's wording.
    """
    n = checkpoint[3:] if checkpoint.startswith("avg") else ""
    if checkpoint in ("best", "last") or (n.isdigit() and n.isascii() and int(n) >= 1):
        return f"checkpoint_{checkpoint}.pt"
    raise ValueError(f"--checkpoint must be best, last or avgN (e.g. avg5), got {checkpoint!r}")


def _check_work_dir(work: Path) -> None:
    """Refuse a work dir that is a file or lies below one, as ``scripts/lib.sh`` does.

    Raises:
        NotADirectoryError: ``work``, or its nearest existing ancestor, is not a directory.
    """
    up = work
    while not up.exists() and up != up.parent:
        up = up.parent
    if not up.is_dir():
        raise NotADirectoryError(
            f"QKNORM_WORK_DIR={work}: {up} is not a directory (the work dir holds data/, runs/ "
            "and results/; point QKNORM_WORK_DIR at a directory)"
        )


def pipeline_settings(
    pair: str,
    system: str,
    profile: str = "cpu-proxy",
    seed: int = 1,
    checkpoint: str = "best",
    max_update: Optional[int] = None,
    lr: str = "",
) -> PipelineSettings:
    """Resolve a pipeline run as ``scripts/evaluate.sh`` does (:mod:`qknorm_tools.run_spec`).

    Args:
        pair: language pair, as for ``scripts/evaluate.sh`` (e.g. ``gl-en``).
        system: system name, as for ``scripts/evaluate.sh``.
        profile: profile name, as for ``scripts/evaluate.sh``.
        seed: training seed, as for ``scripts/evaluate.sh``.
        checkpoint: ``best``, ``last`` or ``avgN`` (``checkpoint_avgN.pt``, the average of the
            last N checkpoints that ``scripts/evaluate.sh --checkpoint avgN`` makes).
        max_update: the run's budget when it is not the profile's (``--max-update`` of
            ``scripts/train.sh``; such runs live under ``runs/PAIR/PROFILE-max-update-N/``).
        lr: the run's peak learning rate when it is not the profile's (``--lr`` of
            ``scripts/train.sh``, any spelling of it; such runs are ``seedN-lrLR``).

    Returns:
        :class:`PipelineSettings` (paths under ``QKNORM_WORK_DIR``, default the repository).

    Raises:
        ValueError: unknown pair/system/profile, a bad lr or budget (the scripts' message) or
            checkpoint.
        NotADirectoryError: ``QKNORM_WORK_DIR`` is a file or lies below one.
    """
    name = checkpoint_file_name(checkpoint)
    work = config.work_dir()
    try:  # the scripts' run, made as they make it (qknorm_tools.run_spec)
        budget = "" if max_update is None else str(max_update)
        run = run_spec.build_run(pair, system, profile, seed=str(seed), max_update=budget, lr=lr,
                                 work=work)  # fmt: skip
    except config.ConfigError as e:
        raise ValueError(str(e)) from None
    _check_work_dir(work)
    run = run_spec.with_precision(run, _precision(run.profile, work) or "fp32")
    data = work / "data"
    return PipelineSettings(
        checkpoint=run.dir / "checkpoints" / name,
        data_bin=data / "bin" / run.pair.name,
        bpe_dir=data / "bpe" / run.pair.name,
        max_tokens=run.profile.gen_max_tokens,
        # as evaluate.sh decodes
        generate_flags=[
            *commands.beam_flags(run.profile),
            *commands.decode_flags(run.profile, run.label),
        ],  # fmt: skip
        run_identity=run.identity,
    )


def averageable(save_dir: Path) -> Optional[int]:
    """How many checkpoints ``save_dir`` keeps that ``--checkpoint avgN`` could average.

    Counts epoch ``checkpointE.pt`` or update ``checkpoint_E_U.pt`` files (the larger count),
    as :func:`qknorm_model_tools.average_checkpoints.last_checkpoints` selects them.

    Returns:
        The count, or ``None`` when ``save_dir`` is not a directory (no run yet).
    """
    from qknorm_model_tools.average_checkpoints import EPOCH_PATTERN, UPDATE_PATTERN

    if not save_dir.is_dir():
        return None
    names = [p.name for p in save_dir.iterdir()]
    return max(
        sum(1 for name in names if pattern.fullmatch(name))
        for pattern in (EPOCH_PATTERN, UPDATE_PATTERN)
    )


def bad_character_warning(lines: Sequence[str], name: str) -> Optional[str]:
    r"""What an input to translate holds that the pipeline refuses in a corpus, or ``None``.

    The characters of :func:`qknorm_tools.corpus_check.bad_character_problem` (tab, no-break and
    other space separators, control characters): BPE splits words on U+0020 only, so they
    reach the model as parts of words (stray ``@@`` tokens); and the carriage returns of
    :func:`qknorm_tools.corpus_check.carriage_return_problems` (a CRLF line ending, a stray
    ``\r``), which the corpus checks refuse as well. A translation input is translated as it
    is, so this is a warning, naming the first such line (``NAME:LINE``, 1-based) and how many
    lines hold one.
    """
    from qknorm_tools.corpus_check import bad_character_problem, carriage_return_problems

    def problem(line: str) -> Optional[str]:
        if line.startswith("\ufeff"):  # the corpus checks refuse it at the start of a file
            return (
                "UTF-8 byte order mark (U+FEFF) at character 1: it becomes part of the first word"
            )
        return next(iter(carriage_return_problems(line)), None) or bad_character_problem(line)

    found = [(i, p) for i, line in enumerate(lines, 1) if (p := problem(line))]
    if not found:
        return None
    (first, what), more = found[0], len(found) - 1
    others = (
        f"; {more} more line{'s hold' if more > 1 else ' holds'} such characters" if more else ""
    )
    return f"{name}:{first}: {what}{others}; translated as it is"


def empty_line_warning(lines: Sequence[str], name: str) -> Optional[str]:
    """A warning for empty or whitespace-only input lines, or ``None`` when there are none.

    fairseq's beam search translates an empty source (EOS alone) to a sentence of its own, as
    ``fairseq-generate`` and ``fairseq-interactive`` do; the line is translated as it is (one
    output line per input line), and the warning names the first such line (``NAME:LINE``,
    1-based) and how many there are.
    """
    empty = [i for i, line in enumerate(lines, 1) if not line.strip()]
    if not empty:
        return None
    n = len(empty)
    return (
        f"{name}:{empty[0]}: an empty line ({n} in all): fairseq translates an empty source to "
        "a sentence of its own, not to an empty line; translated as it is"
    )


def existing_runs(
    pair_runs: Path, system: str, checkpoint_name: str, bf16_now: bool = False
) -> list:
    """The runs of ``system`` under ``pair_runs`` (``runs/PAIR``) that hold ``checkpoint_name``.

    Each as ``"runs/PAIR/LABEL/SYSTEM/SEEDDIR (OPTIONS)"`` with the options of this command
    that select it (``--profile P [--max-update N] --seed S [--bf16-autocast]``; a run with
    an lr of its own, ``seedN-lrLR``, is listed without options: it is not selectable here).
    With ``bf16_now`` (this command looks for bf16 runs: ``--bf16-autocast``, ``QKNORM_BF16=1``
    or the profile's ``auto`` on this CPU) an fp32 run's options end in ``QKNORM_BF16=0`` and no
    ``--bf16-autocast`` (which sets ``QKNORM_BF16=1`` whatever the environment says).
    """
    out = []
    for ck in sorted(Path(pair_runs).glob(f"*/{system}/*/checkpoints/{checkpoint_name}")):
        run = ck.parent.parent
        label, seed_dir = run.parent.parent.name, run.name
        profile, _, budget = label.partition("-max-update-")
        m = re.fullmatch(r"seed(\d+)(-bf16)?", seed_dir)
        where = f"runs/{pair_runs.name}/{label}/{system}/{seed_dir}"
        if m is None:
            out.append(where)
            continue
        opts = f"--profile {profile}" + (f" --max-update {budget}" if budget else "")
        opts += f" --seed {m.group(1)}" + (" --bf16-autocast" if m.group(2) else "")
        if bf16_now and not m.group(2):
            opts += ", with QKNORM_BF16=0 and no --bf16-autocast"  # the flag sets it to 1
        out.append(f"{where} ({opts})")
    return out


def missing_checkpoint(
    path: Path,
    pair: str,
    system: str,
    profile: str,
    seed: int,
    checkpoint: str,
    max_update: Optional[int],
    lr: str = "",
) -> FileNotFoundError:
    """The error for a checkpoint ``path`` that does not exist, saying what makes it.

    ``path`` is ``runs/PAIR/LABEL/SYSTEM/RUN/checkpoints/NAME``. For ``best`` / ``last``:
    ``train.sh`` with these options. For ``avgN``: ``evaluate.sh --checkpoint avgN`` when the
    run keeps at least N checkpoints to average (:func:`averageable`), the checkpoints to use
    instead when it keeps fewer, training first when there is no run. The runs of the pair and
    system that do hold such a file are listed (:func:`existing_runs`).
    """
    budget = "" if max_update is None else f" --max-update {max_update}"
    bf16_now = path.parents[1].name.endswith("-bf16")
    found = existing_runs(path.parents[4], system, path.name, bf16_now)
    listed = (
        "; runs of this pair and system that have one: " + "; ".join(found)
        if found
        else f"; no run of {pair} {system} has a {path.name}"
    )
    # a bf16 run is made (and decoded) with --precision bf16, whatever this CPU would decide
    options = (
        f"--profile {profile} --seed {seed}{budget}"
        + (f" --lr {lr}" if lr else "")
        + (" --precision bf16" if bf16_now else "")
    )
    if not checkpoint.startswith("avg"):
        return FileNotFoundError(
            f"checkpoint {path} not found: run scripts/train.sh {pair} {system} {options} "
            f"first{listed}"
        )
    n, kept = int(checkpoint[3:]), averageable(path.parent)
    averaged = f"--checkpoint {checkpoint} (it averages the last {n} checkpoints)"
    if kept is None:  # no run yet: training first
        return FileNotFoundError(
            f"checkpoint {path} not found: no run there yet; run scripts/train.sh {pair} "
            f"{system} {options}, then scripts/evaluate.sh with the same options and "
            f"{averaged}{listed}"
        )
    if kept < n:  # evaluate.sh could not make it either
        other = f", or avg{kept}" if kept else ""
        return FileNotFoundError(
            f"checkpoint {path} not found, and its run keeps {kept} checkpoints to average "
            f"(checkpointE.pt or checkpoint_E_U.pt), fewer than {n}: use --checkpoint best or "
            f"last{other} (a short try, or a profile with --no-epoch-checkpoints, keeps none)"
        )
    return FileNotFoundError(
        f"checkpoint {path} not found: run scripts/evaluate.sh {pair} {system} {options} "
        f"{averaged} first{listed}"
    )


@dataclasses.dataclass(frozen=True)
class TooLongLine:
    """An input line longer than the model takes after segmentation.

    Attributes:
        line: 1-based line number in the input.
        tokens: its tokens after segmentation (without the end-of-sentence token).
        limit: the most tokens the model takes (:attr:`Translator.max_source_tokens`).
    """

    line: int
    tokens: int
    limit: int

    def message(self, name: str) -> str:
        """``NAME:LINE: N tokens after segmentation, over LIMIT, the most the model takes``."""
        return (
            f"{name}:{self.line}: {self.tokens} tokens after segmentation, over {self.limit}, "
            "the most the model takes"
        )


class InputTooLongError(ValueError):
    """Input lines longer than the model takes (:meth:`Translator.translate`).

    ``lines`` lists them (:class:`TooLongLine`), the message names each (``line:N: ...``).
    """

    def __init__(self, lines: Sequence[TooLongLine]):
        self.lines = list(lines)
        named = "; ".join(x.message("line") for x in self.lines)
        super().__init__(f"{named} (Translator.translate_fitting translates the others)")


def unseen_character_warning(
    lines: Sequence[str], known: set, name: str, where: str, examples: int = 5
) -> Optional[str]:
    """A warning for characters of ``lines`` that no entry of the model's dictionary holds.

    A character never seen in training is in no dictionary entry (``known``: the characters
    of the entries, subword markers removed), so the pieces holding it reach the model as
    ``<unk>``. Whitespace is not counted. The warning (one for the whole input) gives how many
    distinct such characters there are, their occurrences and lines, and the first
    ``examples`` of them (code point, name, first line, count); ``where`` names the
    dictionary. ``None`` when there are none.
    """
    import unicodedata

    count: dict[str, int] = {}
    first: dict[str, int] = {}
    in_lines = set()
    for i, line in enumerate(lines, 1):
        for c in line:
            if c in known or c.isspace():
                continue
            count[c] = count.get(c, 0) + 1
            first.setdefault(c, i)
            in_lines.add(i)
    if not count:
        return None
    shown = [
        f"{c!r} (U+{ord(c):04X} {unicodedata.name(c, 'unnamed').lower()}, line {first[c]}, "
        f"{count[c]} time{'s' if count[c] > 1 else ''})"
        for c in sorted(count, key=lambda c: first[c])[:examples]
    ]
    more = f", and {len(count) - examples} more" if len(count) > examples else ""
    n, total = len(count), sum(count.values())
    return (
        f"{name}: {n} character{'s' if n > 1 else ''} never seen in training (in no entry of "
        f"{where}), {total} occurrence{'s' if total > 1 else ''} in {len(in_lines)} "
        f"line{'s' if len(in_lines) > 1 else ''}: {', '.join(shown)}{more}; the pieces holding "
        "them reach the model as <unk>"
    )


class CheckpointError(RuntimeError):
    """A checkpoint file that cannot be loaded.

    Truncated, corrupt, not a fairseq checkpoint, or a model that does not match it; the
    message names the file.
    """


def text_normalize_of(data_bin) -> str:
    """The ``[text] normalize`` form the binarized data were made with: ``"none"`` or ``"NFC"``.

    Read from ``DATA_BIN/identity.json`` (``text_normalize``, written by
    :func:`qknorm_tools.provenance.write_identity`); ``"none"`` when it has no such entry or the
    directory has no identity (data made before the key existed, or outside the pipeline).
    """
    try:
        ident = json.loads((Path(data_bin) / IDENTITY_FILE).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "none"
    form = ident.get("text_normalize", "none") if isinstance(ident, dict) else "none"
    return form if form in FORMS else "none"


class Translator:
    """A checkpoint with the pipeline's segmentation and generation settings.

    Args:
        checkpoint: path of a fairseq checkpoint (``.../checkpoints/checkpoint_best.pt``).
        data_bin: binarized data directory with the dictionaries (``data/bin/PAIR``).
        bpe_dir: segmented pair directory with ``bpe.json`` (``data/bpe/PAIR``).
        max_tokens: tokens per batch (``--max-tokens``); default: the checkpoint's.
        moses: input is untokenized text: tokenize it with fairseq's ``--tokenizer moses``
            (sacremoses, source language, HTML escapes, no dash splits: the corpus form) and
            detokenize the output with the target language. Default: input is already in
            the corpus' tokenized form (``data/raw/PAIR``) and output stays tokenized.
        **generation: fairseq generation options (``GenerationConfig`` fields such as
            ``beam``, ``lenpen``, ``max_len_a``, ``max_len_b``); others come from the
            checkpoint's saved generation config (fairseq's defaults for runs of
            ``scripts/train.sh``); ``beam`` defaults to fairseq's 5.

    Raises:
        ValueError: an unknown generation option.
        FileNotFoundError: no checkpoint file; see also :func:`fairseq_qknorm.bpe.read_manifest`.
        CheckpointError: the checkpoint file cannot be loaded.
    """

    def __init__(
        self,
        checkpoint,
        data_bin,
        bpe_dir,
        max_tokens: Optional[int] = None,
        moses: bool = False,
        **generation,
    ):
        from fairseq.dataclass.configs import GenerationConfig

        from fairseq_qknorm.bpe import read_manifest
        from fairseq_qknorm.models.transformer_qknorm import TransformerQKNormModel

        fields = {f.name: f.default for f in dataclasses.fields(GenerationConfig)}
        unknown = sorted(set(generation) - set(fields))
        if unknown:
            raise ValueError(f"unknown fairseq generation option(s) {unknown}")
        self.generation = {"beam": fields["beam"], **generation}
        checkpoint = Path(checkpoint)
        if not checkpoint.is_file():
            raise FileNotFoundError(f"checkpoint {checkpoint} not found")
        overrides = {} if max_tokens is None else {"max_tokens": int(max_tokens)}
        if moses:
            manifest = read_manifest(bpe_dir)
            overrides.update(
                tokenizer="moses",
                source_lang=manifest["src"],
                target_lang=manifest["tgt"],
                moses_no_dash_splits=True,
            )
        # absolute paths: hub_utils.from_pretrained reads a data path starting with "."
        # relative to the checkpoint's directory
        checkpoint = checkpoint.resolve()
        #: the checkpoint file translated with (absolute)
        self.checkpoint = checkpoint
        try:
            self.hub = TransformerQKNormModel.from_pretrained(
                str(checkpoint.parent),
                checkpoint_file=checkpoint.name,
                data_name_or_path=os.path.abspath(data_bin),
                bpe="pipeline",
                bpe_dir=os.path.abspath(bpe_dir),
                **overrides,
            )
        # what torch.load raises on a truncated, empty or foreign file (and load_state_dict on
        # a model that does not match): named with the file, as any bad input
        except (pickle.UnpicklingError, EOFError, RuntimeError) as e:
            first = str(e).strip().split("\n")[0] or type(e).__name__
            raise CheckpointError(f"cannot load the checkpoint {checkpoint}: {first}") from e
        self.hub.eval()
        #: the binarized data directory whose dictionary the model reads (absolute)
        self.data_bin = Path(os.path.abspath(data_bin))
        #: the Unicode normalization the training text had (``[text] normalize``, recorded as
        #: ``text_normalize`` in the data identity): applied to every input sentence
        self.text_normalize = text_normalize_of(self.data_bin)

    @classmethod
    def from_pipeline(
        cls,
        pair: str,
        system: str,
        profile: str = "cpu-proxy",
        seed: int = 1,
        checkpoint: str = "best",
        moses: bool = False,
        max_update: Optional[int] = None,
        lr: str = "",
    ) -> "Translator":
        """The run ``scripts/evaluate.sh PAIR SYSTEM --profile P --seed N`` evaluates.

        With its settings (see :func:`pipeline_settings`).

        Raises:
            ValueError: see :func:`pipeline_settings`.
            qknorm_tools.evaluate.RunIdentityError: the run directory holds another run (copied
                or renamed; its ``train.json`` records another identity), as ``evaluate.sh``
                refuses it.
            FileNotFoundError: the run has no such checkpoint (the message says what makes
                it, or for ``avgN`` that the run keeps fewer than N checkpoints to average).
            NotADirectoryError: see :func:`pipeline_settings`.
        """
        from qknorm_tools.evaluate import check_run_identity

        s = pipeline_settings(pair, system, profile, seed, checkpoint, max_update, lr)
        check_run_identity(s.checkpoint.parents[1], s.run_identity)
        if not s.checkpoint.is_file():
            raise missing_checkpoint(
                s.checkpoint, pair, system, profile, seed, checkpoint, max_update, lr
            )
        return cls(
            s.checkpoint,
            s.data_bin,
            s.bpe_dir,
            max_tokens=s.max_tokens,
            moses=moses,
            **generation_options(s.generate_flags),
        )

    @property
    def max_source_tokens(self) -> int:
        """The most tokens a segmented source line may have.

        The model's source max positions (fairseq's ``max_source_positions``, 1024 for every
        arch of the plugin), or ``--max-tokens`` where lower, less the end-of-sentence token
        that binarization appends: a longer line stops fairseq's batching ("Size of sample #N
        is invalid").
        """
        positions = self.hub.max_positions
        src = positions[0] if isinstance(positions, (tuple, list)) else positions
        max_tokens = self.hub.cfg.dataset.max_tokens
        if src is None or (max_tokens and max_tokens < src):
            src = max_tokens
        return int(src) - 1 if src else sys.maxsize

    def known_characters(self) -> set:
        """The characters of the source dictionary's entries: what training saw.

        Subword markers (``@@``, ``\u2581``) removed, fairseq's special and padding entries
        left out.
        """
        d = self.hub.src_dict
        known = set()
        for sym in d.symbols[d.nspecial :]:
            if sym.startswith("madeupword"):  # fairseq's padding entries
                continue
            known.update(sym.removesuffix("@@").replace("\u2581", ""))
        return known

    def unseen_character_warning(self, sentences: Sequence[str], name: str) -> Optional[str]:
        """:func:`unseen_character_warning` of ``sentences`` against :meth:`known_characters`.

        The sentences as the model reads them (Moses-tokenized with ``moses=True``).
        """
        tokenized = [self.hub.tokenize(x) for x in self._normalized(sentences)]
        return unseen_character_warning(
            tokenized, self.known_characters(), name, f"the dictionary of {self.data_bin}"
        )

    def _normalized(self, sentences: Iterable[str]) -> list[str]:
        """``sentences`` in the training text's normalization form (:attr:`text_normalize`)."""
        return normalize_lines(list(sentences), self.text_normalize)

    def translate_fitting(self, sentences: Iterable[str]) -> tuple[list[str], list[TooLongLine]]:
        """Translate every sentence the model takes; an empty string for each other one.

        Args:
            sentences: as for :meth:`translate`.

        Returns:
            ``(hypotheses, too_long)``: one hypothesis per sentence, in input order (``""`` for
            a sentence longer than :attr:`max_source_tokens` after segmentation), and those
            sentences (:class:`TooLongLine`, 1-based). The others are batched and decoded as
            :meth:`translate` does.
        """
        encoded, too_long = self._encode(sentences)
        return self._decode_fitting(encoded, too_long), too_long

    def _encode(self, sentences: Iterable[str]) -> tuple[list, list[TooLongLine]]:
        """Each sentence encoded, and those longer than :attr:`max_source_tokens`.

        Encoded: tokenized, segmented and looked up in the dictionary (``hub.encode``).
        """
        limit = self.max_source_tokens
        encoded = [self.hub.encode(x) for x in self._normalized(sentences)]
        too_long = [
            TooLongLine(i, t.numel() - 1, limit)
            for i, t in enumerate(encoded, 1)
            if t.numel() - 1 > limit
        ]
        return encoded, too_long

    def _decode_fitting(self, encoded: list, too_long: Sequence[TooLongLine]) -> list[str]:
        """Beam search on the encoded sentences not in ``too_long``; ``""`` for the others.

        Batched and decoded as ``hub.translate`` does.
        """
        skip = {x.line for x in too_long}
        kept = [t for i, t in enumerate(encoded, 1) if i not in skip]
        found = self.hub.generate(kept, **self.generation) if kept else []
        hyps = iter(self.hub.decode(h[0]["tokens"]) for h in found)
        return ["" if i in skip else next(hyps) for i in range(1, len(encoded) + 1)]

    def translate(self, sentences: Iterable[str]) -> list[str]:
        """Translate raw (not yet segmented) sentences.

        Args:
            sentences: one sentence per item, in the corpus' form (``data/raw/PAIR``) or,
                with ``moses=True``, untokenized.

        Returns:
            The best hypothesis of each sentence, in input order, segmentation removed.

        Raises:
            InputTooLongError: a sentence is longer than the model takes after segmentation
                (:attr:`max_source_tokens`); nothing is translated (:meth:`translate_fitting`
                translates the others).
        """
        sentences = list(sentences)
        if not sentences:
            return []
        encoded, too_long = self._encode(sentences)
        if too_long:
            raise InputTooLongError(too_long)
        return self._decode_fitting(encoded, too_long)


def _uint(flag: str):
    """An argparse type: a non-negative integer below 10^9 without leading zeros.

    The values train.sh and evaluate.sh accept for seeds and budgets (the one rule:
    ``qknorm_tools.config_schema.check_uint``): the run directory they name must be one
    train.sh can make.
    """

    def parse(text: str) -> int:
        try:
            return check_uint(flag, text)
        except UsageError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return parse


class _Refused(Exception):
    """The model could not be loaded; the error is printed, ``status`` is the exit status."""

    def __init__(self, status: int):
        super().__init__(status)
        self.status = status


def _load_translator(a) -> "Translator":
    """:meth:`Translator.from_pipeline` of the parsed command line ``a``, its checkpoint said.

    Raises:
        _Refused: after printing the error: status 2 for an unknown pair, system or profile
            (a usage error), 1 for a missing or unreadable run or checkpoint, a copied or
            renamed run (qknorm_tools.textio.EvaluationError).
    """
    from qknorm_tools.textio import EvaluationError  # RunIdentityError among them

    try:
        translator = Translator.from_pipeline(
            a.pair,
            a.system,
            a.profile,
            a.seed,
            a.checkpoint,
            moses=a.moses,
            max_update=a.max_update,
            lr=a.lr or "",
        )
    except EvaluationError as e:  # a copied or renamed run (as evaluate.sh), an unreadable record
        print(f"error: {e}", file=sys.stderr)
        raise _Refused(1) from None
    except ValueError as e:  # unknown pair, system or profile: a usage error
        print(f"error: {e}", file=sys.stderr)
        raise _Refused(2) from None
    except (FileNotFoundError, NotADirectoryError, CheckpointError) as e:
        print(f"error: {e}", file=sys.stderr)
        raise _Refused(1) from None
    print(f"[translate] {translator.checkpoint}", file=sys.stderr)
    return translator


def _translate_lines(translator: "Translator", lines: Sequence[str], name: str):
    """Every line the model takes translated, each other one said on stderr.

    Warns once about characters never seen in training
    (:meth:`Translator.unseen_character_warning`); a line longer than the model takes gets an
    empty output line (line alignment kept) and an ``error: NAME:LINE: ...`` with its length
    and the limit. Returns ``(hypotheses, exit status)``: 1 when a line was left out, else 0.
    """
    warning = translator.unseen_character_warning(lines, name)
    if warning:
        print(f"warning: {warning}", file=sys.stderr)
    hyps, too_long = translator.translate_fitting(lines)
    for x in too_long:
        print(f"error: {x.message(name)}: not translated", file=sys.stderr)
    if too_long:
        print(
            f"error: {len(too_long)} of {len(lines)} lines not translated (too long; each has an "
            "empty line in the output, the other lines are translated): split them into shorter "
            "sentences",
            file=sys.stderr,
        )
    return hyps, 1 if too_long else 0


def main(argv: Optional[Sequence[str]] = None) -> int:
    """``python -m qknorm_model_tools.translate PAIR SYSTEM [...] < input > output``."""
    p = argparse.ArgumentParser(
        prog="python -m qknorm_model_tools.translate",
        description="Translate raw sentences (one per line, tokenized like data/raw/PAIR) with "
        "a pipeline run, segmented and decoded as scripts/evaluate.sh does.",
    )
    p.add_argument("pair")
    p.add_argument("system")
    p.add_argument("--profile", default="cpu-proxy")
    p.add_argument("--seed", type=_uint("--seed"), default=1)
    p.add_argument(
        "--checkpoint",
        default="best",
        metavar="best|last|avgN",
        help="as for scripts/evaluate.sh: avgN is checkpoint_avgN.pt, which evaluate.sh "
        "--checkpoint avgN makes (default: best)",
    )
    p.add_argument(
        "--max-update",
        type=_uint("--max-update"),
        help="the run's budget, if not the profile's (as given to scripts/train.sh)",
    )
    p.add_argument(
        "--lr",
        help="the run's peak learning rate, if not the profile's (as given to scripts/train.sh: "
        "its runs are seedN-lrLR)",
    )
    p.add_argument(
        "--moses",
        action="store_true",
        help="input is untokenized: Moses-tokenize it (and detokenize the output)",
    )
    p.add_argument(
        "--bf16-autocast",
        action="store_true",
        help="the run trained with bf16 autocast (seedN-bf16); default: the precision the "
        "profile chose on this machine (QKNORM_BF16; README, 'bf16 training on CPU'); "
        "decoding is fp32 either way",
    )
    p.add_argument("--input", help="input file (default: stdin)")
    p.add_argument("--output", help="output file (default: stdout)")
    p.add_argument(
        "--verbose",
        action="store_true",
        help="show fairseq's INFO records and its dependencies' warnings (default: its warnings "
        "and errors only, as scripts/train.sh's terminal)",
    )
    a = p.parse_args(argv)
    try:
        checkpoint_file_name(a.checkpoint)
    except ValueError as e:
        p.error(str(e))
    for opt, std in (("input", "stdin"), ("output", "stdout")):  # "": an unset variable
        if getattr(a, opt) == "":
            p.error(f"--{opt} is empty: name a file, or leave --{opt} out for {std}")
    if a.input and a.output and os.path.realpath(a.input) == os.path.realpath(a.output):
        p.error(f"--output {a.output} is the --input file: the translations would replace the "
                "text they translate; name another file")  # fmt: skip
    from qknorm_tools.progress import FAIRSEQ_LOG_FORMAT, quiet_fairseq_logging

    if a.verbose:
        logging.captureWarnings(False)
        logging.basicConfig(format=FAIRSEQ_LOG_FORMAT, level=logging.INFO, force=True)
    else:  # before fairseq is imported: its modules' logging.basicConfig then changes nothing
        quiet_fairseq_logging("--verbose shows them")

    # the input is read and checked before the model loads (an unreadable file or bytes that
    # are not UTF-8 are said at once)
    try:
        if a.input:
            with open(a.input, "rb") as f:
                data = f.read()
        else:
            data = sys.stdin.buffer.read()
    except OSError as e:
        print(f"error: cannot read {a.input}: {e.strerror or e}", file=sys.stderr)
        return 1
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        column = e.start - (data.rfind(b"\n", 0, e.start) + 1) + 1  # 1-based byte of the line
        print(
            f"error: {a.input or 'stdin'}:{line}: invalid UTF-8 (byte 0x{data[e.start]:02x} at "
            f"byte {column} of the line)",
            file=sys.stderr,
        )
        return 1
    # lines end at "\n" only, as for the pipeline's tools (str.splitlines also splits at
    # U+2028, U+0085, ...)
    lines = text.split("\n")
    if lines[-1] == "":
        lines.pop()
    if not lines:  # said, not an error: an empty stdin in a pipeline translates to nothing
        print(f"warning: {a.input or 'stdin'} is empty: nothing to translate", file=sys.stderr)
    for warning in (
        bad_character_warning(lines, a.input or "stdin"),
        empty_line_warning(lines, a.input or "stdin"),
    ):
        if warning:
            print(f"warning: {warning}", file=sys.stderr)
    if a.output and os.path.isdir(a.output):  # said before the model loads, as other outputs
        print(f"error: --output {a.output} is a directory: name a file", file=sys.stderr)
        return 1
    if a.bf16_autocast:
        os.environ["QKNORM_BF16"] = "1"
    if a.output:
        # whole or not at all: the output is opened before the model loads (an unwritable one
        # is said at once), written after; an existing file is left as it was on any error
        from qknorm_tools.textio import OutputError, atomic_output

        try:
            with atomic_output(a.output) as tmp, open(tmp, "w", encoding="utf-8") as f:
                hyps, status = _translate_lines(_load_translator(a), lines, a.input or "stdin")
                f.write("".join(h + "\n" for h in hyps))
        except OutputError as e:
            print(f"error: {e}", file=sys.stderr)
            return 1
        except _Refused as e:
            return e.status
        return status
    try:
        translator = _load_translator(a)
    except _Refused as e:
        return e.status
    hyps, status = _translate_lines(translator, lines, a.input or "stdin")
    try:
        sys.stdout.write("".join(h + "\n" for h in hyps))
        sys.stdout.flush()
    except OSError as e:  # a full disk, a closed pipe
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
        print(f"error: cannot write the translations to stdout: {e.strerror or e}", file=sys.stderr)
        return 1
    return status


if __name__ == "__main__":
    sys.exit(main())
