"""The pipeline's configuration as data: pairs, systems and profiles (``configs/**/*.toml``).

One typed, torch-free reader of ``configs/base.toml``, ``configs/pairs/*.toml``,
``configs/systems/*.toml`` and ``configs/profiles/*.toml`` (and a researcher's own pairs in
``$QKNORM_WORK_DIR/configs/pairs/``), used by every consumer: the scripts (through the CLI
below, whose output bash ``eval``s), the translate helper, the benchmarks. Design:
docs/design/config-as-data.md.

Python::

    from qknorm_tools import config
    pair = config.load_pair("gl-en")            # Pair(src="gl", tgt="en", bpe_merges=3000, ...)
    profile = config.load_profile("cpu-proxy")  # Profile(optim_flags=("--optimizer", ...), ...)
    profile = config.apply_env(profile, os.environ)  # the QKNORM_* overrides, in one place

Command line::

    python -m qknorm_tools.config names pairs|systems|profiles [--in-all]
    python -m qknorm_tools.config known pairs|systems|profiles NAME   # exit 3: not configured
    python -m qknorm_tools.config shell [--pair P] [--system S] [--profile F] [--paper-max-epoch N]
    python -m qknorm_tools.config option KEY --value=V --option=NAME  # exit 2: V not allowed
    python -m qknorm_tools.config convert FILE.sh     # a bash pair config -> FILE.toml

Errors are :class:`ConfigError`, naming the file, the key and the allowed values; unknown keys
are errors naming the closest known key. The CLI prints them as ``error: ...`` and exits 1;
a name that is not configured (or a bad ``QKNORM_*`` value) exits 2 with the message on stdout
(the scripts print it as a usage error, with their usage).
"""

from __future__ import annotations

import argparse
import dataclasses
import difflib
import json
import os
import re
import shlex
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Union

import tomllib

from qknorm_tools import exits

REPO = Path(__file__).resolve().parents[1]
KINDS = ("pairs", "systems", "profiles")
#: the pairs of the papers' tables (TWT Table 1, QKNorm Table 1), shipped in configs/pairs:
#: what ``--pairs all`` means. A researcher's own pairs (docs/own-data.md) run only when named.
PAPER_PAIRS = ("ar-en", "en-vi", "gl-en", "he-en", "sk-en")
NAME_RE = re.compile(r"^[a-z0-9][a-z0-9_-]*$")
LANG_RE = re.compile(r"^[A-Za-z][A-Za-z0-9_]{0,15}$")
UINT_RE = re.compile(r"^(0|[1-9][0-9]{0,8})$")
POSINT_RE = re.compile(r"^[1-9][0-9]{0,5}$")
#: a checkpoint a run is decoded with: checkpoint_best.pt, checkpoint_last.pt, or the parameter
#: average of the last N checkpoints the profile keeps (scripts/evaluate.sh --checkpoint)
CHECKPOINT_RE = re.compile(r"^(best|last|avg[1-9][0-9]{0,2})$")


class ConfigError(Exception):
    """A configuration file that cannot be used: the message names the file and the key."""


class UsageError(ConfigError, exits.UsageError):
    """A name that is not configured, or a bad QKNORM_* value: the user's input, not a file."""


# ---------------------------------------------------------------------------------------------
# schema: (TOML key, dataclass field, bash variable, type). Types: str, lang, posint, uint,
# num (int or float), flags (list of strings), files (list of {name, bytes, sha256}), and
# enum:A|B.

BASE_KEYS = [
    ("max_tokens_check", "max_tokens_check", "MAX_TOKENS_CHECK", "posint"),
    ("text.normalize", "text_normalize", "TEXT_NORMALIZE", "enum:none|NFC"),
    ("bpe.tool", "bpe_tool", "BPE_TOOL", "enum:subword-nmt|sentencepiece"),
    ("bpe.vocab_threshold", "bpe_vocab_threshold", "BPE_VOCAB_THRESHOLD", "uint"),
    ("bpe.dropout", "bpe_dropout", "BPE_DROPOUT", "dropout"),
    ("bpe.dropout_seed", "bpe_dropout_seed", "BPE_DROPOUT_SEED", "uint"),
    ("bpe.dropout_samples", "bpe_dropout_samples", "BPE_DROPOUT_SAMPLES", "posint"),
    ("bpe.length_percentile", "length_percentile", "LENGTH_PERCENTILE", "num"),
    ("binarize.workers", "preprocess_workers", "PREPROCESS_WORKERS", "posint"),
]
SOURCE_KEYS = [  # per [sources.NAME]: NAME_URL, NAME_FILE, NAME_BYTES, NAME_SHA256
    ("url", "str"),
    ("file", "str"),
    ("bytes", "bytes"),
    ("sha256", "sha256"),
]
SOURCES = {"qi18": "QI18", "ted_talks": "TED_TALKS", "iwslt15": "IWSLT15"}
_ALL = ("url", "file", "bytes", "sha256")
SOURCE_REQUIRED = {"qi18": _ALL, "ted_talks": _ALL, "iwslt15": ("url",)}
PAIR_KEYS = [
    ("reverse_of", "reverse_of", "REVERSE_OF", "name"),
    ("src", "src", "SRC", "lang"),
    ("tgt", "tgt", "TGT", "lang"),
    ("corpus", "corpus", "CORPUS", "enum:ted|iwslt15|local"),
    ("ted_local_dir", "ted_local_dir", "TED_LOCAL_DIR", "str"),
    ("qi18_folder", "qi18_folder", "QI18_FOLDER", "str"),
    ("iwslt15.local_dir", "iwslt15_local_dir", "IWSLT15_LOCAL_DIR", "str"),
    ("iwslt15.dev", "iwslt15_dev", "IWSLT15_DEV", "str"),
    ("iwslt15.test", "iwslt15_test", "IWSLT15_TEST", "str"),
    ("iwslt15.files", "iwslt15_files", "IWSLT15_FILES", "files"),
    ("local.dir", "local_dir", "LOCAL_DIR", "str"),
    ("local.train_src", "local_train_src", "LOCAL_TRAIN_SRC", "str"),
    ("local.train_tgt", "local_train_tgt", "LOCAL_TRAIN_TGT", "str"),
    ("local.dev_src", "local_dev_src", "LOCAL_DEV_SRC", "str"),
    ("local.dev_tgt", "local_dev_tgt", "LOCAL_DEV_TGT", "str"),
    ("local.test_src", "local_test_src", "LOCAL_TEST_SRC", "str"),
    ("local.test_tgt", "local_test_tgt", "LOCAL_TEST_TGT", "str"),
    ("bpe_merges", "bpe_merges", "BPE_MERGES", "posint"),
    ("spm_vocab_size", "spm_vocab_size", "SPM_VOCAB_SIZE", "posint"),
    ("paper_L", "paper_L", "PAPER_L", "L"),
    ("paper_arch_size", "paper_arch_size", "PAPER_ARCH_SIZE", "enum:small|base"),
    ("paper_max_epoch", "paper_max_epoch", "PAPER_MAX_EPOCH", "uint"),
    ("paper_train_pairs", "paper_train_pairs", "PAPER_TRAIN_PAIRS", "str"),
    ("lines.train", "lines_train", "LINES_TRAIN", "uint"),
    ("lines.dev", "lines_dev", "LINES_DEV", "uint"),
    ("lines.test", "lines_test", "LINES_TEST", "uint"),
    ("qi18_lines.train", "qi18_lines_train", "QI18_LINES_TRAIN", "uint"),
    ("qi18_lines.dev", "qi18_lines_dev", "QI18_LINES_DEV", "uint"),
    ("qi18_lines.test", "qi18_lines_test", "QI18_LINES_TEST", "uint"),
]
LOCAL_FILE_KEYS = [k for k, *_ in PAIR_KEYS if k.startswith("local.") and k != "local.dir"]
SYSTEM_KEYS = [
    ("desc", "desc", "SYSTEM_DESC", "str"),
    ("paper_row", "paper_row", "PAPER_ROW", "str"),
    ("arch", "arch", "SYSTEM_ARCH", "str"),
    ("qknorm", "qknorm", "SYSTEM_QKNORM", "bool"),
    ("in_all", "in_all", "SYSTEM_IN_ALL", "bool"),
    ("flags", "flags", "SYSTEM_FLAGS", "flags"),
    ("criterion", "criterion", "SYSTEM_CRITERION", "str"),
    ("criterion_flags", "criterion_flags", "SYSTEM_CRITERION_FLAGS", "flags"),
]
PROFILE_KEYS = [
    ("arch_size", "arch_size", "PROFILE_ARCH", "enum:proxy|paper"),
    ("model_flags", "model_flags", "PROFILE_MODEL_FLAGS", "flags"),
    ("train_dropout", "train_dropout", "TRAIN_DROPOUT", "num"),
    ("train_task", "train_task", "TRAIN_TASK", "str"),
    ("task_flags", "task_flags", "TASK_FLAGS", "flags"),
    ("label_smoothing", "label_smoothing", "LABEL_SMOOTHING", "num"),
    ("max_tokens", "max_tokens", "MAX_TOKENS", "posint"),
    ("max_update", "max_update", "PROFILE_MAX_UPDATE", "uint"),
    ("max_epoch", "max_epoch", "MAX_EPOCH", "epoch"),
    ("bf16", "bf16", "PROFILE_BF16", "bf16"),
    ("threads", "threads", "THREADS", "posint"),
    ("optim.flags", "optim_flags", "OPTIM_FLAGS", "flags"),
    ("valid.flags", "valid_flags", "VALID_FLAGS", "flags"),
    ("decode.beam", "beam", "BEAM", "posint"),
    ("decode.lenpen", "lenpen", "LENPEN", "num"),
    ("decode.max_tokens", "gen_max_tokens", "GEN_MAX_TOKENS", "posint"),
    ("decode.flags", "gen_flags", "GEN_FLAGS", "flags"),
    ("decode.dev_bleu", "dev_bleu", "DEV_BLEU", "bool"),
    ("decode.checkpoint", "checkpoint", "DECODE_CHECKPOINT", "checkpoint"),
    ("decode.also", "also_checkpoints", "DECODE_ALSO", "checkpoints"),
    ("design.test", "design_test", "DESIGN_TEST", "enum:welch|paired"),
    ("design.seeds", "design_seeds", "DESIGN_SEEDS", "posint"),
    ("design.targets", "design_targets", "DESIGN_TARGETS", "nums"),
    ("design.tost_margin", "design_tost_margin", "DESIGN_TOST_MARGIN", "num"),
    ("job.gpus", "job_gpus", "JOB_GPUS", "enum:0|1"),
    ("job.cpus", "job_cpus", "JOB_CPUS", "posint"),
    ("job.mem", "job_mem", "JOB_MEM", "mem"),
    ("job.time", "job_time", "JOB_TIME", "str"),
]
PROFILE_REQUIRED = ("arch_size", "max_update", "max_epoch", "label_smoothing", "max_tokens",
                    "threads", "optim.flags", "decode.beam", "decode.lenpen",
                    "decode.max_tokens")  # fmt: skip
ALLOWED = {
    "str": "a string",
    "name": "a pair name (letters a-z, digits, - and _)",
    "lang": "a language code (letters, digits, _; it names the files train.SRC, ...)",
    "posint": "a positive integer",
    "uint": "a non-negative integer",
    "bytes": "a size in bytes (a positive integer)",
    "num": "a number",
    # 1 drops every merge (the training split becomes single characters), above 1 is no
    # probability: BPE-dropout p is 0 (off) or in the open interval (0, 1)
    "dropout": "0 (off) or a number strictly between 0 and 1",
    "bool": "true or false",
    "flags": "a list of strings (command-line tokens, in order)",
    "files": 'a list of {name = "...", bytes = N, sha256 = "..."}',
    "L": "an integer >= 2 (or no key: none)",
    "epoch": 'a non-negative integer, or "paper" (the pair\'s paper_max_epoch)',
    "bf16": '0 (fp32), 1 (bf16 autocast) or "auto" (bf16 where measured faster)',
    "mem": "like 4G or 4000M",
    "sha256": "64 hexadecimal digits",
    "checkpoint": '"best", "last" or "avgN" (N >= 1: the average of the last N checkpoints kept)',
    "checkpoints": 'a list of "best", "last" or "avgN"',
    "nums": "a list of positive numbers",
}

Value = Union[str, int, float, bool, tuple]


def _allowed(kind: str) -> str:
    if kind.startswith("enum:"):
        return ", ".join(kind[5:].split("|"))
    return ALLOWED[kind]


def _check(file: str, key: str, value: Any, kind: str) -> Value:
    """``value`` of ``key`` if it is of ``kind`` (lists become tuples), else ConfigError."""
    ok = False
    is_int = isinstance(value, int) and not isinstance(value, bool)
    if kind == "str":
        ok = isinstance(value, str)
    elif kind == "name":
        ok = isinstance(value, str) and bool(NAME_RE.match(value))
    elif kind == "lang":
        ok = isinstance(value, str) and bool(LANG_RE.match(value))
    elif kind == "posint":
        ok = is_int and bool(POSINT_RE.match(str(value)))
    elif kind == "bytes":
        ok = is_int and value > 0
    elif kind == "uint":
        ok = is_int and bool(UINT_RE.match(str(value)))
    elif kind == "num":
        ok = (is_int or isinstance(value, float)) and value >= 0
    elif kind == "dropout":
        ok = (is_int or isinstance(value, float)) and (value == 0 or 0 < value < 1)
    elif kind == "bool":
        ok = isinstance(value, bool)
    elif kind == "flags":
        ok = isinstance(value, list) and all(isinstance(v, str) for v in value)
        value = tuple(value) if ok else value
    elif kind == "files":
        ok = isinstance(value, list) and all(
            isinstance(f, dict) and set(f) == {"name", "bytes", "sha256"}
            and isinstance(f["name"], str) and isinstance(f["bytes"], int)
            and isinstance(f["sha256"], str) and re.fullmatch(r"[0-9a-f]{64}", f["sha256"])
            for f in value
        )  # fmt: skip
        value = tuple((f["name"], f["bytes"], f["sha256"]) for f in value) if ok else value
    elif kind == "L":
        ok = is_int and value >= 2
    elif kind == "epoch":
        ok = (is_int and bool(UINT_RE.match(str(value)))) or value == "paper"
    elif kind == "bf16":
        ok = value in ("auto",) or (is_int and value in (0, 1))
    elif kind == "mem":
        ok = isinstance(value, str) and bool(re.fullmatch(r"[1-9][0-9]*[KMGT]?", value))
    elif kind == "sha256":
        ok = isinstance(value, str) and bool(re.fullmatch(r"[0-9a-f]{64}", value))
    elif kind == "checkpoint":
        ok = isinstance(value, str) and bool(CHECKPOINT_RE.match(value))
    elif kind == "checkpoints":
        ok = isinstance(value, list) and all(
            isinstance(v, str) and CHECKPOINT_RE.match(v) for v in value
        )
        value = tuple(value) if ok else value
    elif kind == "nums":
        ok = (
            isinstance(value, list)
            and bool(value)
            and all(
                isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0 for v in value
            )
        )
        value = tuple(value) if ok else value
    elif kind.startswith("enum:"):
        ok = str(value) in kind[5:].split("|") and not isinstance(value, (bool, float))
        ok = ok and (isinstance(value, str) or kind == "enum:0|1")
    if not ok:
        raise ConfigError(f"{file}: key '{key}' = {_show(value)}: allowed {_allowed(kind)}")
    return value


#: a number as the command line gives it (what bash passes on to subword-nmt and awk)
NUMBER_RE = re.compile(r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)$")


def check_option(key: str, text: str, option: str) -> Value:
    """The value of a command-line option that overrides the configuration key ``key``.

    ``text`` must be a value the key allows (the same rule as in the files, :func:`_check`);
    numbers are plain decimals (``0.1``, ``.1``). Raises UsageError naming ``option``, the
    value given and what the key allows.
    """
    kinds = {k: kind for k, _, _, kind in BASE_KEYS + PAIR_KEYS + SYSTEM_KEYS + PROFILE_KEYS}
    kind = kinds[key]
    value: Any = text
    if kind in ("num", "dropout"):
        value = float(text) if NUMBER_RE.match(text) else None
    try:
        return _check(option, key, value, kind)
    except ConfigError:
        raise UsageError(f"{option} must be {_allowed(kind)}, got '{text}'") from None


def _show(value: Any) -> str:
    return (
        json.dumps(value) if isinstance(value, (str, int, float, bool, list, dict)) else repr(value)
    )


def _flatten(file: str, data: dict, known: list, prefix: str = "") -> dict:
    """The TOML data as {dotted key: value}, every key checked.

    {dotted key: value} of the TOML ``data``; an unknown key or table is a ConfigError
    naming the closest known key.
    """
    flat = {}
    tables = {k.split(".")[0] for k in known if "." in k}
    for key, value in data.items():
        full = prefix + key
        if isinstance(value, dict) and (
            full in tables or any(k.startswith(full + ".") for k in known)
        ):
            flat.update(_flatten(file, value, known, full + "."))
            continue
        if full not in known:
            close = difflib.get_close_matches(full, known, n=1, cutoff=0.5)
            hint = f"did you mean '{close[0]}'?" if close else f"known keys: {', '.join(known)}"
            raise ConfigError(f"{file}: unknown key '{full}' ({hint})")
        flat[full] = value
    return flat


def _read(path: Path) -> dict:
    try:
        with open(path, "rb") as f:
            return tomllib.load(f)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{_rel(path)}: not valid TOML: {e}") from None
    except OSError as e:
        raise ConfigError(f"{_rel(path)}: cannot read it: {e.strerror}") from None


def _rel(path: Path) -> str:
    """A repository file relative to the repository (configs/...), any other one in full."""
    try:
        return str(Path(path).relative_to(REPO))
    except ValueError:
        return str(path)


# ---------------------------------------------------------------------------------------------
# the typed configuration


@dataclass(frozen=True)
class Source:
    """A canonical download: url (a QKNORM_*_URL mirror may replace it), file, size, sha256."""

    url: str
    file: str | None = None
    bytes: int | None = None
    sha256: str | None = None


@dataclass(frozen=True)
class Pair:
    """A language pair.

    A language pair: its corpus, BPE sizes, the papers' values, and configs/base.toml's
    settings (which the pair's own file may override).
    """

    name: str
    src: str
    tgt: str
    corpus: str
    source: Path  # the file it came from (for a reverse direction: the derived or base file)
    config: str  # how messages name it: the file (in full), or "configs/pairs/BASE.toml (reversed)"
    reverse_of: str | None = None
    ted_local_dir: str | None = None
    qi18_folder: str | None = None
    iwslt15_local_dir: str | None = None
    iwslt15_dev: str | None = None
    iwslt15_test: str | None = None
    iwslt15_files: tuple | None = None
    local_dir: str | None = None
    local_train_src: str | None = None
    local_train_tgt: str | None = None
    local_dev_src: str | None = None
    local_dev_tgt: str | None = None
    local_test_src: str | None = None
    local_test_tgt: str | None = None
    bpe_merges: int = 0
    spm_vocab_size: int = 0
    paper_L: int | None = None
    paper_arch_size: str = "base"
    paper_max_epoch: int = 200
    paper_train_pairs: str | None = None
    lines_train: int | None = None
    lines_dev: int | None = None
    lines_test: int | None = None
    qi18_lines_train: int | None = None
    qi18_lines_dev: int | None = None
    qi18_lines_test: int | None = None
    max_tokens_check: int = 1024
    text_normalize: str = "none"
    bpe_tool: str = "subword-nmt"
    bpe_vocab_threshold: int = 50
    bpe_dropout: float = 0
    bpe_dropout_seed: int = 1
    bpe_dropout_samples: int = 1
    length_percentile: float = 97.5
    preprocess_workers: int = 2
    sources: tuple = ()  # ((name, Source), ...)

    @property
    def desc(self) -> str:
        """Direction and corpus, for messages."""
        rev = f", the reverse of {self.reverse_of}" if self.reverse_of else ""
        return f"{self.src}->{self.tgt}, {self.corpus} corpus{rev}"

    def shell_vars(self) -> list:
        """[(bash variable, value)] as scripts/lib.sh:load_pair_config sets them."""
        out = [(var, getattr(self, field)) for _, field, var, _ in BASE_KEYS + PAIR_KEYS]
        # an own corpus without a reference L: PAPER_L set and empty (the scripts read it)
        out = [(v, "" if v == "PAPER_L" and x is None else x) for v, x in out]
        for name, src in self.sources:
            prefix = SOURCES[name]
            out += [(f"{prefix}_{k.upper()}", getattr(src, k)) for k, _ in SOURCE_KEYS]
        out += [("PAIR", self.name), ("PAIR_CONFIG", self.config), ("PAIR_DESC", self.desc),
                ("PAIR_REVERSE_OF", self.reverse_of)]  # fmt: skip
        return out


@dataclass(frozen=True)
class System:
    """A system: an arch family (its size comes from the profile), QKNorm's L, a criterion."""

    name: str
    desc: str
    paper_row: str
    arch: str
    qknorm: bool
    source: Path
    in_all: bool = True  # false: not in the papers' tables, `--systems all` leaves it out
    flags: tuple = ()
    criterion: str = ""  # empty: train.sh's default, label_smoothed_cross_entropy
    criterion_flags: tuple = ()

    def shell_vars(self) -> list:
        """[(bash variable, value)] as scripts/lib.sh:load_system_config sets them."""
        return [(var, getattr(self, field)) for _, field, var, _ in SYSTEM_KEYS] + [
            ("SYSTEM", self.name)
        ]


@dataclass(frozen=True)
class Profile:
    """A training profile.

    A training profile (model size, optimizer, budget, validation, decoding, cluster job).
    ``max_epoch`` is an int, or "paper" until :func:`for_pair` gives the pair's value;
    ``chain`` is the ``extends`` chain, the profile's own file first.
    """

    name: str
    arch_size: str
    max_update: int
    max_epoch: int | str
    label_smoothing: float
    max_tokens: int
    threads: int
    optim_flags: tuple
    beam: int
    lenpen: float
    gen_max_tokens: int
    chain: tuple
    model_flags: tuple = ()
    train_dropout: float | None = None
    train_task: str | None = None
    task_flags: tuple = ()
    bf16: int | str = 0
    valid_flags: tuple = ()
    gen_flags: tuple = ()
    #: a grid cell also decodes the dev set with the chosen checkpoint (dev BLEU in its record)
    dev_bleu: bool = False
    #: the checkpoint whose test score is a run's result (SPLIT.score.json): best, last or avgN
    checkpoint: str = "best"
    #: checkpoints a grid cell also decodes on the test set (SPLIT.C.score.json, kept in records)
    also_checkpoints: tuple = ()
    #: the statistical design declared before the runs (docs/decisive-2x2.md): the primary
    #: seed-level test (welch: independent seeds per cell; paired: seed s shared by every system,
    #: per-seed contrasts), the seeds per cell the grid is run with, the target differences
    #: (BLEU) that seeds-needed is computed for, and the TOST equivalence margin (BLEU)
    design_test: str = "welch"
    design_seeds: int | None = None
    design_targets: tuple = (0.5, 0.93)
    design_tost_margin: float | None = None
    job_gpus: int | None = None
    job_cpus: int | None = None
    job_mem: str | None = None
    job_time: str | None = None
    env_max_update: int | None = None  # QKNORM_MAX_UPDATE (apply_env), else None

    @property
    def source(self) -> Path:
        """The profile's own file."""
        return self.chain[0]

    @property
    def run_max_update(self) -> int:
        """The budget a run trains with: QKNORM_MAX_UPDATE if set, else the profile's."""
        return self.max_update if self.env_max_update is None else self.env_max_update

    def for_pair(self, pair: Pair | None) -> Profile:
        """The profile with max_epoch = "paper" replaced by the pair's paper_max_epoch."""
        if self.max_epoch != "paper" or pair is None:
            return self
        return dataclasses.replace(self, max_epoch=pair.paper_max_epoch)

    def shell_vars(self) -> list:
        """[(bash variable, value)] as scripts/lib.sh:load_profile_config sets them."""
        out = [(var, getattr(self, field)) for _, field, var, _ in PROFILE_KEYS]
        out = [(v, None if v == "MAX_EPOCH" and x == "paper" else x) for v, x in out]
        return out + [("PROFILE", self.name), ("MAX_UPDATE", self.run_max_update)]


# ---------------------------------------------------------------------------------------------
# where the files are


def config_dirs(kind: str, work_dir: Path | None = None) -> list:
    """Folders of configs/KIND.

    Folders of configs/KIND: the repository's, and for pairs also the work dir's (a
    researcher's own pairs, docs/own-data.md), unless that is the same folder.
    """
    dirs = [REPO / "configs" / kind]
    if kind == "pairs" and work_dir is not None:
        own = Path(work_dir) / "configs" / "pairs"
        if own.is_dir() and own.resolve() != dirs[0].resolve():
            dirs.append(own)
    return dirs


def _work_dir(work_dir: Path | None) -> Path:
    if work_dir is not None:
        return Path(work_dir)
    return Path(os.environ.get("QKNORM_WORK_DIR") or REPO)


def names(kind: str, work_dir: Path | None = None, in_all: bool = False) -> list:
    """Names of configs/KIND.

    Names of configs/KIND/*.toml (and leftover bash pair configs *.sh of the work dir, which
    load_pair then asks to convert), sorted. ``in_all``: only those that ``all`` means: the
    systems of `--systems all` (``in_all`` true), the pairs of :data:`PAPER_PAIRS` (never an own
    pair of the repository's or the work dir's configs/pairs).
    """
    out = set()
    for d in config_dirs(kind, _work_dir(work_dir)):
        out.update(p.stem for p in d.glob("*.toml"))
        if kind == "pairs" and d != REPO / "configs" / "pairs":
            out.update(p.stem for p in d.glob("*.sh"))
    found = sorted(out, key=lambda n: n + ".toml")  # as the files sort (the .sh era's order)
    if in_all and kind == "systems":
        found = [n for n in found if load_system(n).in_all]
    if in_all and kind == "pairs":
        found = [n for n in found if n in PAPER_PAIRS]
    return found


def config_file(kind: str, name: str, work_dir: Path | None = None) -> Path | None:
    """The file of KIND NAME, or None.

    The file of KIND NAME (for pairs: in the repository or the work dir, or a leftover
    ``.sh`` there), or None. Defined twice is a ConfigError.
    """
    if not NAME_RE.match(name or ""):
        return None
    found = []
    for d in config_dirs(kind, _work_dir(work_dir)):
        for ext in (".toml", ".sh") if kind == "pairs" else (".toml",):
            if (d / f"{name}{ext}").is_file() and not (
                ext == ".sh" and d == REPO / "configs" / kind
            ):
                found.append(d / f"{name}{ext}")
    if len(found) > 1:
        raise ConfigError(f"pair {name} is defined twice: {' '.join(map(str, found))} (keep one)")
    return found[0] if found else None


def _not_converted(path: Path) -> ConfigError:
    return ConfigError(
        f"{path} is a bash pair config; convert it once with\n"
        f"  python -m qknorm_tools.config convert {path}   (writes {path.stem}.toml next to it)"
    )


# ---------------------------------------------------------------------------------------------
# loading


def _pair_flat(path: Path) -> dict:
    if path.suffix == ".sh":
        raise _not_converted(path)
    return _flatten(_rel(path), _read(path), [k for k, *_ in BASE_KEYS + PAIR_KEYS])


def _base() -> tuple:
    """(flat values, sources) of configs/base.toml."""
    path = REPO / "configs" / "base.toml"
    data = _read(path)
    sources = data.pop("sources", {})
    flat = _flatten(_rel(path), data, [k for k, *_ in BASE_KEYS])
    srcs = []
    for name, table in sources.items():
        if name not in SOURCES:
            raise ConfigError(
                f"{_rel(path)}: unknown key 'sources.{name}' (allowed {', '.join(SOURCES)})"
            )
        vals = {}
        for key, value in table.items():
            kind = dict(SOURCE_KEYS).get(key)
            if kind is None:
                raise ConfigError(f"{_rel(path)}: unknown key 'sources.{name}.{key}' "
                                  f"(allowed {', '.join(k for k, _ in SOURCE_KEYS)})")  # fmt: skip
            vals[key] = _check(_rel(path), f"sources.{name}.{key}", value, kind)
        for key in SOURCE_REQUIRED[name]:
            if key not in vals:
                raise ConfigError(f"{_rel(path)}: no key 'sources.{name}.{key}'")
        srcs.append((name, Source(**vals)))
    return flat, tuple(srcs)


def _direction(path: Path) -> tuple:
    """(src, tgt) a pair file sets, or (None, None) (unreadable files count as neither)."""
    try:
        flat = _pair_flat(path)
    except ConfigError:
        return None, None
    return flat.get("src"), flat.get("tgt")


def reverse_of(name: str, work_dir: Path | None = None) -> str | None:
    """The pair whose reverse direction NAME is, or None.

    For NAME = A-B without a config of its own: the configured pair B-A whose direction is
    B->A (gl-en for en-gl), else None. Only a config whose languages match its name counts.
    """
    m = re.fullmatch(r"([a-zA-Z][a-zA-Z0-9_]*)-([a-zA-Z][a-zA-Z0-9_]*)", name or "")
    if not m:
        return None
    a, b = m.groups()
    path = config_file("pairs", f"{b}-{a}", work_dir)
    if path is None or _direction(path) != (b, a):
        return None
    return f"{b}-{a}"


def known(kind: str, name: str, work_dir: Path | None = None) -> tuple:
    """Whether KIND NAME is configured.

    (True, "") if KIND NAME is configured (a pair also as the reverse of one), else (False,
    the hint scripts add to their 'unknown pair' message).
    """
    if config_file(kind, name, work_dir) is not None:
        return True, ""
    if kind != "pairs":
        return False, ""
    if reverse_of(name, work_dir):
        return True, ""
    more = (
        "; the reverse direction of one, e.g. en-gl; or your own configs/pairs/NAME.toml: "
        "docs/own-data.md"
    )
    m = re.fullmatch(r"([a-zA-Z0-9_]+)-([a-zA-Z0-9_]+)", name or "")
    if m:
        a, b = m.groups()
        path = config_file("pairs", f"{b}-{a}", work_dir)
        if path is not None and _direction(path) == (a, b):
            more += f"; note: {b}-{a} already is {a}->{b}"
    return False, more


def _unknown(kind: str, name: str, work_dir: Path | None) -> UsageError:
    _, more = known(kind, name, work_dir)
    listed = " ".join(names(kind, work_dir))
    return UsageError(f"unknown {kind[:-1]} '{name}' (known {kind}: {listed}{more})")


def load_pair(name: str, work_dir: Path | None = None) -> Pair:
    """The pair NAME, checked.

    configs/base.toml, then configs/pairs/NAME.toml (repository or work dir), checked. A
    reverse direction (``reverse_of = "BASE"`` in its file, or a name A-B without a file when
    B-A is configured as B->A) is BASE's settings with src and tgt swapped.
    """
    work_dir = _work_dir(work_dir)
    base_flat, sources = _base()
    file = config_file("pairs", name, work_dir)
    own: dict = {}
    if file is not None:
        own = _pair_flat(file)
        base_name = own.get("reverse_of")
        cfg = str(file)
    else:
        base_name = reverse_of(name, work_dir)
        if base_name is None:
            raise _unknown("pairs", name, work_dir)
        cfg = f"configs/pairs/{base_name}.toml (reversed)"
    values = dict(base_flat)
    if base_name is not None:
        _check(cfg, "reverse_of", base_name, "name")
        base_file = config_file("pairs", base_name, work_dir)
        if base_file is None:
            raise ConfigError(
                f"{cfg}: key 'reverse_of' = \"{base_name}\": no configs/pairs/{base_name}.toml"
            )
        if base_name == name:
            raise ConfigError(f"{cfg}: key 'reverse_of' = \"{base_name}\" names the pair itself")
        base_own = _pair_flat(base_file)
        if base_own.get("reverse_of"):
            raise ConfigError(f"{cfg}: key 'reverse_of' = \"{base_name}\", which is itself a "
                              f"reverse direction ({_rel(base_file)})")  # fmt: skip
        values.update(base_own)
        bsrc, btgt = values.get("src"), values.get("tgt")
        values["src"], values["tgt"] = btgt, bsrc
        for side in ("src", "tgt"):
            if side in own and own[side] != values[side]:
                raise ConfigError(
                    f'{cfg}: reverse_of = "{base_name}" reads {base_name}\'s corpus with the sides '
                    f'swapped ({btgt}->{bsrc}); it cannot set src = "{own.get("src", btgt)}" '
                    f'tgt = "{own.get("tgt", bsrc)}"'
                )
        values.update(own)
        values["reverse_of"] = base_name
    else:
        values.update(own)
    return _make_pair(
        name, cfg, file or REPO / "configs/pairs" / f"{base_name}.toml", values, sources
    )


def _make_pair(name: str, cfg: str, path: Path, values: dict, sources: tuple) -> Pair:
    kinds = {k: kind for k, _, _, kind in BASE_KEYS + PAIR_KEYS}
    for key in list(values):
        values[key] = _check(cfg, key, values[key], kinds[key])
    corpus = values.get("corpus")
    if corpus is None:
        raise ConfigError(f"{cfg}: no key 'corpus' (allowed ted, iwslt15, local)")
    if corpus == "ted" and not values.get("ted_local_dir"):
        raise ConfigError(f"{cfg}: corpus = \"ted\" needs key 'ted_local_dir'")
    if corpus == "local":  # own corpus: what has no papers' value gets ours (docs/own-data.md)
        if "bpe_merges" in values:
            values.setdefault("spm_vocab_size", values["bpe_merges"])
        for key in ("src", "tgt", "bpe_merges", *LOCAL_FILE_KEYS):
            if key not in values:
                raise ConfigError(
                    f"{cfg}: no key '{key}' (corpus = \"local\" needs src, tgt, bpe_merges and "
                    "the six file names local.{train,dev,test}_{src,tgt}; docs/own-data.md)"
                )
    else:
        for key in ("src", "tgt", "bpe_merges", "spm_vocab_size", "paper_L", "paper_arch_size",
                    "paper_max_epoch"):  # fmt: skip
            if key not in values:
                raise ConfigError(f"{cfg}: no key '{key}' (nor in configs/base.toml)")
    for key, *_ in BASE_KEYS:
        if key not in values:
            raise ConfigError(f"configs/base.toml: no key '{key}'")
    if values["src"] == values["tgt"]:
        raise ConfigError(f"{cfg}: keys 'src' and 'tgt' are both \"{values['src']}\"")
    if corpus == "local":
        seen: dict = {}
        for key in LOCAL_FILE_KEYS:
            f = values[key]
            if f in seen:
                raise ConfigError(f"{cfg}: key '{key}' = \"{f}\" names a file already used by "
                                  f"another split or side ('{seen[f]}')")  # fmt: skip
            seen[f] = key
    fields = {field: values[key] for key, field, _, _ in BASE_KEYS + PAIR_KEYS if key in values}
    return Pair(name=name, config=cfg, source=path, sources=sources, **fields)


def load_system(name: str) -> System:
    """configs/systems/NAME.toml, checked."""
    path = config_file("systems", name)
    if path is None:
        raise _unknown("systems", name, None)
    cfg = _rel(path)
    flat = _flatten(cfg, _read(path), [k for k, *_ in SYSTEM_KEYS])
    kinds = {k: kind for k, _, _, kind in SYSTEM_KEYS}
    for key in ("desc", "paper_row", "arch", "qknorm"):
        if key not in flat:
            raise ConfigError(f"{cfg}: no key '{key}' ({_allowed(kinds[key])})")
    fields = {key: _check(cfg, key, value, kinds[key]) for key, value in flat.items()}
    return System(name=name, source=path, **fields)


def _profile_data(name: str, chain: tuple) -> tuple:
    """A profile's data with its ``extends`` resolved.

    (merged TOML data, chain of files) of profile NAME, its ``extends`` resolved: a table
    of the child replaces the parent's key by key, a list (flags) is replaced whole.
    """
    path = config_file("profiles", name)
    if path is None:
        if chain:
            parent = _rel(chain[-1][1])
            raise ConfigError(
                f"{parent}: key 'extends' = \"{name}\": no configs/profiles/{name}.toml "
                f"(allowed {', '.join(names('profiles'))})"
            )
        raise _unknown("profiles", name, None)
    if any(n == name for n, _ in chain):
        cycle = " -> ".join([*(n for n, _ in chain), name])
        raise ConfigError(f"{_rel(chain[-1][1])}: key 'extends' makes a cycle: {cycle}")
    data = _read(path)
    parent = data.pop("extends", None)
    if parent is None:
        return data, (path,)
    _check(_rel(path), "extends", parent, "name")
    base, files = _profile_data(parent, (*chain, (name, path)))
    merged = dict(base)
    for key, value in data.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = {**merged[key], **value}
        else:
            merged[key] = value
    return merged, (path, *files)


def load_profile(name: str, pair: Pair | None = None) -> Profile:
    """The profile NAME, checked.

    configs/profiles/NAME.toml (``extends`` resolved), checked; with ``pair``, max_epoch =
    "paper" becomes the pair's paper_max_epoch. The QKNORM_* overrides: :func:`apply_env`.
    """
    data, chain = _profile_data(name, ())
    cfg = _rel(chain[0])
    known_keys = [k for k, *_ in PROFILE_KEYS]
    flat = _flatten(cfg, data, known_keys)
    kinds = {k: kind for k, _, _, kind in PROFILE_KEYS}
    for key in PROFILE_REQUIRED:
        if key not in flat:
            raise ConfigError(f"{cfg}: no key '{key}' ({_allowed(kinds[key])})")
    fields = {}
    for key, field, _, kind in PROFILE_KEYS:
        if key in flat:
            fields[field] = _check(cfg, key, flat[key], kind)
    return Profile(name=name, chain=chain, **fields).for_pair(pair)


def apply_env(profile: Profile, environ: Mapping = os.environ) -> Profile:
    """A profile with the QKNORM_* overrides applied.

    The QKNORM_* overrides of a profile, in one place: QKNORM_THREADS (intra-op threads),
    QKNORM_MAX_UPDATE (the update budget; runs then filed as PROFILE-max-update-N),
    QKNORM_DEV_BLEU (0 or 1: whether a grid cell also decodes the dev set). A bad value is a
    UsageError naming the variable. (QKNORM_BF16 is resolved by scripts/lib.sh's
    qk_resolve_bf16, which may measure; the download mirrors QKNORM_*_URL: :func:`apply_env_pair`.)
    """
    changes: dict = {}
    threads = environ.get("QKNORM_THREADS") or ""
    if threads:
        if not POSINT_RE.match(threads):
            raise UsageError(f"QKNORM_THREADS must be a positive integer, got '{threads}'")
        changes["threads"] = int(threads)
    budget = environ.get("QKNORM_MAX_UPDATE") or ""
    if budget:
        if not UINT_RE.match(budget):
            raise UsageError("QKNORM_MAX_UPDATE must be a non-negative integer (no leading zeros, "
                             f"below 10^9), got '{budget}'")  # fmt: skip
        changes["env_max_update"] = int(budget)
    dev_bleu = environ.get("QKNORM_DEV_BLEU") or ""
    if dev_bleu:
        if dev_bleu not in ("0", "1"):
            raise UsageError(f"QKNORM_DEV_BLEU must be 0 or 1, got '{dev_bleu}'")
        changes["dev_bleu"] = dev_bleu == "1"
    return dataclasses.replace(profile, **changes) if changes else profile


def apply_env_pair(pair: Pair, environ: Mapping = os.environ) -> Pair:
    """A pair with the download mirrors applied.

    The download mirrors QKNORM_QI18_URL, QKNORM_TED_TALKS_URL, QKNORM_IWSLT15_URL (sizes and
    checksums stay canonical).
    """
    sources = []
    for name, src in pair.sources:
        url = environ.get(f"QKNORM_{SOURCES[name]}_URL") or ""
        sources.append((name, dataclasses.replace(src, url=url) if url else src))
    return dataclasses.replace(pair, sources=tuple(sources))


# ---------------------------------------------------------------------------------------------
# runs (scripts/lib.sh: qk_run_label, qk_run_dir)


def work_dir(environ: Mapping = os.environ) -> Path:
    """$QKNORM_WORK_DIR (relative: from the current directory), else the repository."""
    work = environ.get("QKNORM_WORK_DIR") or ""
    return Path(work).absolute() if work else REPO


def run_label(profile: Profile, max_update: int | None = None) -> str:
    """The label runs and results of ``profile`` are filed under.

    What runs and results of ``profile`` are filed under: its name for its own budget,
    PROFILE-max-update-N for any other (``max_update``, else QKNORM_MAX_UPDATE via
    :func:`apply_env`).
    """
    budget = profile.run_max_update if max_update is None else max_update
    return profile.name if budget == profile.max_update else f"{profile.name}-max-update-{budget}"


def run_dir(
    work: Path, pair: str, label: str, system: str, seed: int, lr: str = "", precision: str = ""
) -> Path:
    """WORK/runs/PAIR/LABEL/SYSTEM/seedN[-lrLR][-bf16] (scripts/lib.sh:qk_run_dir)."""
    name = f"seed{seed}" + (f"-lr{lr}" if lr else "") + (f"-{precision}" if precision else "")
    return Path(work) / "runs" / pair / label / system / name


# ---------------------------------------------------------------------------------------------
# bash


def _shell_value(value: Value) -> str:
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, tuple):
        if value and isinstance(value[0], tuple):  # iwslt15 files: "name bytes sha256" lines
            return shlex.quote("\n".join(" ".join(map(str, f)) for f in value))
        return "(" + " ".join(shlex.quote(str(v)) for v in value) + ")"
    return shlex.quote(str(value))


def shell_lines(pairs: list) -> list:
    """Lines for bash's eval.

    ``VAR=value`` lines for bash's eval: ``unset VAR`` for a value that is None (unset, as
    a variable the config does not set), arrays as ``VAR=(...)``, shell-quoted.
    """
    out = []
    for var, value in pairs:
        if value is None:
            out.append(f"unset {var}")
        else:
            out.append(f"{var}={_shell_value(value)}")
    return out


# ---------------------------------------------------------------------------------------------
# converter of bash pair configs (the only place bash runs for configuration)

_SH_ALIASES = {var: key for key, _, var, _ in BASE_KEYS + PAIR_KEYS}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(value)


def _typed(key: str, text: str) -> Any:
    """A bash string value as the TOML value of ``key`` (numbers for numeric keys)."""
    kind = {k: kind for k, _, _, kind in BASE_KEYS + PAIR_KEYS}[key]
    if kind in ("posint", "uint", "L") and re.fullmatch(r"[0-9]+", text):
        return int(text)
    if kind == "num" and re.fullmatch(r"[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?", text):
        return int(text) if text.isdigit() else float(text)
    if kind == "files":
        rows = [line.split() for line in text.splitlines() if line.strip()]
        if all(len(r) == 3 and r[1].isdigit() for r in rows):
            return [{"name": r[0], "bytes": int(r[1]), "sha256": r[2]} for r in rows]
    return text


def _sh_values(path: Path) -> dict:
    """{VAR: value} of what sourcing the bash file ``path`` sets (strings; arrays as lists)."""
    script = (
        'before="$(compgen -v)"; source "$1" >/dev/null || exit 1; '
        'for v in $(compgen -v); do grep -qx -- "$v" <<<"$before" && continue; '
        '[[ "$v" == before ]] && continue; declare -p "$v"; done'
    )
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/")}
    p = subprocess.run(["bash", "--noprofile", "--norc", "-c", script, "convert", str(path)],
                       capture_output=True, text=True, env=env)  # fmt: skip
    if p.returncode != 0:
        raise ConfigError(f"{path}: bash could not source it:\n{p.stderr.strip()}")
    values = {}
    for line in p.stdout.splitlines():
        m = re.match(r"declare -(\S*) ([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?$", line)
        if not m:
            continue
        flags, var, rest = m.groups()
        if rest is None or var in ("PIPESTATUS", "_", "before", "v") or var.startswith("BASH"):
            continue
        if "a" in flags:  # declare -a X=([0]="a" [1]="b")
            items = shlex.split(rest[1:-1]) if rest.startswith("(") else []
            values[var] = [i.split("=", 1)[1] for i in items]
        else:
            values[var] = shlex.split(rest)[0] if rest not in ('""', "") else ""
    return values


def _sh_comments(path: Path) -> tuple:
    """The comments of a bash config.

    (header comment lines, {VAR: comment lines above it + its trailing comment}) of a bash
    config: comments are kept next to the key they describe.
    """
    header, above, found = [], [], {}
    seen_assignment = False
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line.startswith("#"):
            if line.startswith("# shellcheck"):
                continue
            above.append(line)
            continue
        if not line:
            if not seen_assignment and above:
                header += above + [""]
                above = []
            elif above:
                above.append("")
            continue
        m = re.match(r"([A-Z_][A-Z0-9_]*)=", line)
        trailing = re.search(r"\s#\s?(.*)$", line)
        if m:
            seen_assignment = True
            notes = [a for a in above]
            while notes and notes[-1] == "":
                notes.pop()
            if trailing:
                notes.append("# " + trailing.group(1))
            found.setdefault(m.group(1), []).extend(notes)
            above = []
    return header, found


def convert(path: Path, out: Path | None = None) -> tuple:
    """Convert a bash pair config into TOML.

    Convert the bash pair config ``path`` (configs/pairs/NAME.sh) into TOML next to it.
    Returns (the TOML file written, [unknown variables, kept as comments]).

    Raises:
        ConfigError: ``path`` is missing or not a ``.sh`` file, the TOML file exists already
            (it is never overwritten), or bash cannot source ``path``.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such file (expected a bash pair config FILE.sh)")
    if path.suffix != ".sh":
        raise ConfigError(f"{path}: expected a bash pair config FILE.sh")
    out = out or path.with_suffix(".toml")
    if out.exists():  # a TOML config the user may have edited since: never written over
        raise ConfigError(f"{out} exists: remove it first to convert {path.name} again")
    values = _sh_values(path)
    header, comments = _sh_comments(path)
    known_vals, unknown = {}, []
    for var, value in values.items():
        if var in _SH_ALIASES:
            if value == "" or value == []:
                continue  # empty = not set (the scripts treat both alike)
            known_vals[_SH_ALIASES[var]] = (var, _typed(_SH_ALIASES[var], value))
        else:
            unknown.append(var)
    lines = [c if c else "" for c in header]
    if lines and lines[-1] != "":
        lines.append("")
    lines[0:0] = [
        f"# {out.name}: converted from {path.name} by python -m qknorm_tools.config convert"
    ]
    tables: dict = {}
    for key, _, var, _ in BASE_KEYS + PAIR_KEYS:
        if key not in known_vals:
            continue
        table, _, leaf = key.rpartition(".")
        tables.setdefault(table, []).append((leaf, known_vals[key][1], comments.get(var, [])))
    for table in sorted(tables, key=lambda t: (t != "", t)):
        if table:
            lines.append(f"\n[{table}]")
        for leaf, value, notes in tables[table]:
            lines += notes
            lines.append(f"{leaf} = {_toml_value(value)}")
    if unknown:
        lines.append("")
        lines.append("# not pair settings (the converter does not know them; kept here, not read):")
        lines += [f"# {var}={values[var]!r}" for var in unknown]
    out.write_text("\n".join(lines).strip("\n") + "\n", encoding="utf-8")
    return out, unknown


def _compare_converted(sh_path: Path, toml_path: Path, name: str) -> list:
    """Differences between what the bash file set and what the TOML file gives (empty: none)."""
    sh = {k: v for k, v in _sh_values(sh_path).items() if k in _SH_ALIASES}
    flat = _flatten(str(toml_path), _read(toml_path), [k for k, *_ in BASE_KEYS + PAIR_KEYS])
    diffs = []
    for var, value in sh.items():
        key = _SH_ALIASES[var]
        want = value
        got = flat.get(key)
        if isinstance(got, list) and got and isinstance(got[0], dict):
            got = "\n".join(f"{f['name']} {f['bytes']} {f['sha256']}" for f in got)
        got = "" if got is None else str(got) if not isinstance(got, list) else got
        if str(want) != str(got) and not (want in ("", []) and got in ("", [])):
            diffs.append(f"-{var}={want!r}\n+{key} = {got!r}")
    return diffs


# ---------------------------------------------------------------------------------------------
# command line


def _shell(args) -> list:
    lines = []
    work_dir = _work_dir(args.work_dir)
    pair = None
    if args.pair is not None:
        pair = apply_env_pair(load_pair(args.pair, work_dir))
        lines += shell_lines(pair.shell_vars())
    if args.system is not None:
        lines += shell_lines(load_system(args.system).shell_vars())
    if args.profile is not None:
        profile = apply_env(load_profile(args.profile, pair))
        if pair is None and args.paper_max_epoch is not None and profile.max_epoch == "paper":
            pme = args.paper_max_epoch
            profile = dataclasses.replace(profile, max_epoch=int(pme) if pme.isdigit() else None)
        lines += shell_lines(profile.shell_vars())
    return lines


def main(argv: list | None = None) -> int:
    """The command line (module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m qknorm_tools.config", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("names", help="the configured names of a kind, space-separated")
    p.add_argument("kind", choices=KINDS)
    p.add_argument(
        "--in-all",
        action="store_true",
        help="only those `all` means: the papers' systems and pairs",
    )
    p.add_argument("--work-dir", type=Path)
    p = sub.add_parser("known", help="exit 0 if NAME is configured, else 3 and the hint")
    p.add_argument("kind", choices=KINDS)
    p.add_argument("name")
    p.add_argument("--work-dir", type=Path)
    p = sub.add_parser("shell", help="shell-quoted assignments for bash's eval")
    p.add_argument("--pair")
    p.add_argument("--system")
    p.add_argument("--profile")
    p.add_argument(
        "--paper-max-epoch", help='without --pair: the loaded pair\'s, for max_epoch = "paper"'
    )
    p.add_argument("--work-dir", type=Path)
    p = sub.add_parser(
        "option", help="exit 0 if VALUE is allowed for KEY, else 2 and the message naming OPTION"
    )
    p.add_argument("key", help="the configuration key the option overrides, e.g. bpe.dropout")
    p.add_argument(
        "--value", required=True, help="the value given (--value=V: it may start with -)"
    )
    p.add_argument(
        "--option", required=True, help="the option's name, for the message (--option=NAME)"
    )
    p.add_argument("--work-dir", type=Path)
    p = sub.add_parser("convert", help="a bash pair config FILE.sh -> FILE.toml next to it")
    p.add_argument("file", type=Path)
    for p in sub.choices.values():
        p.add_argument(
            "--repo", type=Path, help="the repository whose configs/ to read (default: this one)"
        )
    args = parser.parse_args(argv)
    if (
        args.repo is not None
    ):  # scripts/lib.sh passes its own root (a copy of the scripts and configs)
        global REPO
        REPO = args.repo.resolve()
    try:
        if args.cmd == "names":
            print(" ".join(names(args.kind, args.work_dir, in_all=args.in_all)))
        elif args.cmd == "known":
            ok, more = known(args.kind, args.name, args.work_dir)
            if not ok:
                print(more)
                return exits.NO
        elif args.cmd == "shell":
            print("\n".join(_shell(args)))
        elif args.cmd == "option":
            check_option(args.key, args.value, args.option)
        elif args.cmd == "convert":
            out, unknown = convert(args.file)
            diffs = _compare_converted(args.file, out, args.file.stem)
            print(f"wrote {out}")
            if unknown:
                print(f"not pair settings, kept as comments at the end: {' '.join(unknown)}")
            if diffs:
                print("differences (check them by hand):\n" + "\n".join(diffs))
                return exits.FAILURE
            print(f"same settings as {args.file}; remove it once checked: rm {args.file}")
    except UsageError as e:  # on stdout: scripts/lib/config.sh shows it with the usage
        print(e)
        return exits.USAGE
    except ConfigError as e:
        return exits.fail(e)
    return exits.OK


if __name__ == "__main__":
    sys.exit(main())
