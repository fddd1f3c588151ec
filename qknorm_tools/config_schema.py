"""The configuration's schema: every TOML key, its type and its check (``configs/**/*.toml``).

The tables below are the one list of what a pair, a system and a profile may set: (TOML key,
dataclass field of :mod:`qknorm_tools.config`, bash variable the scripts ``eval``, type).
:func:`_check` is the one rule per type, used for the files and for command-line options that
override a key (:func:`check_option`). Errors name the file (or option), the key and what is
allowed.
"""

from __future__ import annotations

import difflib
import json
import re
from decimal import Decimal
from typing import Any, Union

from qknorm_tools import exits

KINDS = ("pairs", "systems", "profiles")
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
        if ok:  # one spelling per value (0, 0.0 and .0 are one setting: off), else rebuilds
            value = 0 if value == 0 else float(value)
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
NUMBER_RE = re.compile(r"^([0-9]+(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?$")


def check_option(key: str, text: str, option: str) -> Value:
    """The value of a command-line option that overrides the configuration key ``key``.

    ``text`` must be a value the key allows (the same rule as in the files, :func:`_check`);
    numbers are decimals (``0.1``, ``.1``, ``1e-1``). The value returned is the key's one
    spelling of it (``bpe.dropout`` 0.0 -> 0, 1e-1 -> 0.1), the one the configuration
    exports. Raises UsageError naming ``option``, the value given and what the key allows.
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


#: how close (difflib's ratio) a configured name must be to an unknown one to be suggested: a
#: near miss (gl-em, cpu-converge-d12, qknorm_papr: 0.8 and more), not any pair ending in -en
#: (xx-en and sk-en: 0.6), as the keys of a file (cutoff 0.5) would
NAME_CUTOFF = 0.75


def did_you_mean(word: str, known, cutoff: float = 0.5) -> str:
    """``did you mean 'X'?`` for the closest of ``known`` to ``word`` (difflib), else "".

    The one suggestion for a key of a file and (``cutoff`` :data:`NAME_CUTOFF`) for a pair,
    system or profile name.
    """
    by_lower = {}
    for k in known:  # case-blind: 'TWT' and 'Gl-En' are close to 'twt' and 'gl-en'
        by_lower.setdefault(k.lower(), k)
    close = difflib.get_close_matches((word or "").lower(), list(by_lower), n=1, cutoff=cutoff)
    return f"did you mean '{by_lower[close[0]]}'?" if close else ""


def name_hint(name: str, known) -> str:
    """``; did you mean 'X'?`` after an unknown pair, system or profile name, else ""."""
    close = did_you_mean(name, known, NAME_CUTOFF)
    return f"; {close}" if close else ""


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
            hint = did_you_mean(full, known) or f"known keys: {', '.join(known)}"
            raise ConfigError(f"{file}: unknown key '{full}' ({hint})")
        flat[full] = value
    return flat


# ---------------------------------------------------------------------------------------------
# learning rates: one spelling per value (run directories seedN-lrLR, the sweep's cells)

LR_RE = re.compile(r"^((0|[1-9][0-9]*)(\.[0-9]*)?|\.[0-9]+)([eE][-+]?[0-9]+)?$")


def check_uint(option: str, text: str) -> int:
    """``text`` as a seed or an update budget (a script's option).

    A non-negative integer below 10^9 without leading zeros (``seed01`` and ``seed1`` are never
    one fairseq seed counted twice; ``--max-update 00`` is the 0 the never-stop check refuses).

    Raises:
        UsageError: naming ``option`` and the value.
    """
    if not UINT_RE.match(text):
        raise UsageError(
            f"{option} must be a non-negative integer (no leading zeros, below 10^9), got '{text}'"
        )
    return int(text)


def check_posint(option: str, text: str) -> int:
    """``text`` as a positive integer (threads, processes, jobs; a script's option).

    Raises:
        UsageError: naming ``option`` and the value.
    """
    if not POSINT_RE.match(text):
        raise UsageError(f"{option} must be a positive integer, got '{text}'")
    return int(text)


def lr_spelling(value: str | float) -> str:
    """A learning rate in its one spelling (0.003, 3E-03 and 3e-3 are all ``3e-3``).

    MANTISSAeEXPONENT, 7 significant digits (``%.6e``) without trailing zeros (``3e-3``,
    ``1.5e-2``, ``1e0``; ``0`` for zero), so that one learning rate is always one run directory.

    Args:
        value: a non-negative decimal number as typed (``3e-3``, ``0.003``) or a float.

    Raises:
        ValueError: not a non-negative decimal number, or an exponent beyond +-307 (fairseq reads
            --lr as a double: 1e400 is infinite).
    """
    text = repr(float(value)) if isinstance(value, float) else str(value)
    if not LR_RE.fullmatch(text):  # inf, nan, -1.0 too
        raise ValueError(f"not a non-negative decimal number: {text!r}")
    number = Decimal(text)
    if number == 0:
        return "0"
    mantissa, exponent = format(number, ".6e").split("e")
    if "." in mantissa:
        mantissa = mantissa.rstrip("0").rstrip(".")
    if abs(int(exponent)) > 307:
        raise ValueError(f"exponent beyond the range of a double: {text!r}")
    return f"{mantissa}e{int(exponent)}"


def lr_override(profile: str, optim_flags, lr: str) -> tuple[str, str]:
    """The peak learning rate ``lr`` (train.sh --lr) for a profile whose ``optim.flags`` set one.

    Returns:
        (QK_LR, QK_LR_OVERRIDE): ``lr`` in its spelling (:func:`lr_spelling`, the value of
        fairseq-train's --lr), and the same or ``""`` where it is the profile's own lr (that run
        is the profile's, filed as seedN; any other is seedN-lrLR).

    Raises:
        UsageError: ``lr`` is not a learning rate (the message names --lr and the value).
        ConfigError: the profile sets no --lr, or one that is not a number.
    """
    try:
        spelled = lr_spelling(lr)
    except ValueError:
        if re.fullmatch(r"([0-9]+\.?[0-9]*|\.[0-9]+)[eE]\+?[0-9]+", lr):
            raise UsageError(
                f"--lr '{lr}' overflows: fairseq reads it as a double, at most about 1.8e308 "
                "(infinite above)"
            ) from None
        if re.fullmatch(r"0[0-9].*", lr):
            raise UsageError(
                f"--lr '{lr}' has a leading zero (a typo? '01' may be 0.1 or 1): write it "
                "without (e.g. 3e-3, 0.003)"
            ) from None
        raise UsageError(
            f"--lr must be a non-negative decimal number (e.g. 3e-3, 0.003), got '{lr}'"
        ) from None
    flags, own = list(optim_flags), None
    for i, flag in enumerate(flags[:-1]):
        if flag == "--lr":
            try:
                own = lr_spelling(flags[i + 1])
            except ValueError:
                raise ConfigError(
                    f"configs/profiles/{profile}.toml: key 'optim.flags': --lr "
                    f"'{flags[i + 1]}' is not a number"
                ) from None
    if own is None:
        raise ConfigError(
            f"configs/profiles/{profile}.toml sets no --lr in key 'optim.flags': --lr cannot "
            "replace it"
        )
    return spelled, ("" if spelled == own else spelled)


def sweep_lrs(lrs_arg: str, items) -> list:
    """The learning rates of ``scripts/lr_sweep.sh --lrs LRS_ARG``, in the order given.

    ``items``: the comma-list's items; each is spelled once (:func:`lr_spelling`).

    Raises:
        UsageError: an item is not a learning rate, is 0 (the sweep measures the loss at
            initialization itself) or is an earlier item written another way.
    """
    lrs: list = []
    for item in items:
        try:
            lr = lr_spelling(item)
        except ValueError:
            raise UsageError(
                f"bad --lrs list '{lrs_arg}': '{item}' is not a non-negative decimal number "
                "(e.g. 3e-4,1e-3)"
            ) from None
        if lr == "0":
            raise UsageError(
                f"bad --lrs list '{lrs_arg}': lr 0 is the loss at initialization, which the "
                "sweep measures itself"
            )
        if lr in lrs:
            raise UsageError(
                f"bad --lrs list '{lrs_arg}': '{item}' is lr {lr} again (given twice, written "
                "another way)"
            )
        lrs.append(lr)
    return lrs
