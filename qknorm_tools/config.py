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
        [--max-update N] [--check-stops]  # MAX_UPDATE, QK_RUN_LABEL (and QK_ARCH: P, S and F)
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
import os
import re
import shlex
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

import tomllib

from qknorm_tools import exits
from qknorm_tools.config_schema import (
    BASE_KEYS,
    KINDS,
    LOCAL_FILE_KEYS,
    NAME_RE,
    PAIR_KEYS,
    POSINT_RE,
    PROFILE_KEYS,
    PROFILE_REQUIRED,
    SOURCE_KEYS,
    SOURCE_REQUIRED,
    SOURCES,
    SYSTEM_KEYS,
    UINT_RE,
    ConfigError,
    UsageError,
    Value,
    _allowed,
    _check,
    _flatten,
    check_option,
    check_uint,
    lr_override,
    name_hint,
    sweep_lrs,
)

#: the repository whose configs/ are read (``--repo`` of the command line changes it)
REPO = Path(__file__).resolve().parents[1]
#: the papers' pairs (TWT and QKNorm Table 1): ``--pairs all``; own pairs run only when named
PAPER_PAIRS = ("ar-en", "en-vi", "gl-en", "he-en", "sk-en")


def _read(path: Path) -> dict:
    try:
        data = path.read_bytes()
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError as e:  # TOML is UTF-8
        raise ConfigError(f"{_rel(path)}: not UTF-8 text ({e}); TOML files are UTF-8") from None
    except tomllib.TOMLDecodeError as e:
        bom = " (it starts with a byte order mark: remove it)" * data.startswith(b"\xef\xbb\xbf")
        raise ConfigError(f"{_rel(path)}: not valid TOML: {e}{bom}") from None
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

    Names of configs/KIND/*.toml (and leftover bash pair configs *.sh, in the repository or
    the work dir, which load_pair then asks to convert), sorted. ``in_all``: only those that
    ``all`` means: the systems of `--systems all` (``in_all`` true), the pairs of
    :data:`PAPER_PAIRS` (never an own pair of the repository's or the work dir's configs/pairs).
    """
    out = set()
    for d in config_dirs(kind, _work_dir(work_dir)):
        out.update(p.stem for p in d.glob("*.toml"))
        if kind == "pairs":
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
            if (d / f"{name}{ext}").is_file():
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
    the hint added to an 'unknown pair/system/profile' message, ending in "did you mean").
    """
    if config_file(kind, name, work_dir) or (kind == "pairs" and reverse_of(name, work_dir)):
        return True, ""
    more = ""
    if kind == "pairs":
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
    return False, more + name_hint(name, names(kind, work_dir))  # config_schema's rule


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
# runs: named here only (the scripts read the names: QK_RUN_LABEL, qk_run_dirs)


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
    """WORK/runs/PAIR/LABEL/SYSTEM/seedN[-lrLR][-bf16] (the scripts: qk_run_dirs).

    ``precision``: ``bf16`` adds ``-bf16`` (a run next to its fp32 twin); ``fp32``, ``""``: none.
    """
    name = f"seed{seed}" + (f"-lr{lr}" if lr else "") + ("-bf16" if precision == "bf16" else "")
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
        if args.max_update:  # a script's --max-update: the budget instead of the profile's
            budget = check_uint("--max-update", args.max_update)
            profile = dataclasses.replace(profile, env_max_update=budget)
        if args.check_stops and profile.run_max_update == 0 and not profile.max_epoch:
            raise UsageError(f"--max-update 0 with profile {profile.name} (max-epoch 0) would "
                             "never stop training")  # fmt: skip
        lines += shell_lines(profile.shell_vars() + [("QK_RUN_LABEL", run_label(profile))])
        if pair is not None and args.system is not None:  # QK_ARCH: the system at this size
            from qknorm_tools.run_spec import arch_name

            lines += shell_lines([("QK_ARCH", arch_name(load_system(args.system), profile, pair))])
        if args.sweep_lr:  # lr_sweep.sh --lrs: LRS and LR_DIRS (seedN-lrLR, "": seedN)
            lrs = sweep_lrs(args.lrs_arg, args.sweep_lr)
            dirs = [lr_override(profile.name, profile.optim_flags, lr)[1] for lr in lrs]
            lines += shell_lines([("LRS", tuple(lrs)), ("LR_DIRS", tuple(dirs))])
    return lines


def main(argv: list | None = None) -> int:
    """The command line (module docstring); returns the exit status."""
    parser = argparse.ArgumentParser(
        prog="python -m qknorm_tools.config", description=__doc__.split("\n")[0]
    )
    sub = parser.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("names", help="the configured names of a kind, space-separated")
    p.add_argument("kind", choices=KINDS)
    p.add_argument("--in-all", action="store_true", help="only the papers' (what `all` means)")
    p.add_argument("--work-dir", type=Path)
    p = sub.add_parser("known", help="exit 0 if NAME is configured, else 3 and the hint")
    p.add_argument("kind", choices=KINDS)
    p.add_argument("name")
    p.add_argument("--work-dir", type=Path)
    p = sub.add_parser("shell", help="shell-quoted assignments for bash's eval")
    for name in ("--pair", "--system", "--profile"):
        p.add_argument(name)
    p.add_argument("--paper-max-epoch", help='no --pair: the loaded pair\'s (max_epoch "paper")')
    p.add_argument("--max-update", help="with --profile: a budget (MAX_UPDATE, QK_RUN_LABEL)")
    p.add_argument("--check-stops", action="store_true", help="refuse a budget that never stops")
    p.add_argument("--sweep-lr", action="append", help="with --profile: lr_sweep.sh's lrs")
    p.add_argument("--lrs-arg", default="", help="lr_sweep.sh's --lrs as given (messages)")
    p.add_argument("--work-dir", type=Path)
    what = "print VALUE as KEY spells it (exit 0) if allowed, else exit 2 naming OPTION"
    p = sub.add_parser("option", help=what)
    p.add_argument("key", help="the configuration key the option overrides, e.g. bpe.dropout")
    p.add_argument("--value", required=True, help="the value given (--value=V: may start -)")
    p.add_argument("--option", required=True, help="the option's name (--option=NAME)")
    p.add_argument("--work-dir", type=Path)
    p = sub.add_parser("convert", help="a bash pair config FILE.sh -> FILE.toml next to it")
    p.add_argument("file", type=Path)
    for p in sub.choices.values():
        p.add_argument("--repo", type=Path, help="the repository whose configs/ to read")
    args = parser.parse_args(argv)
    if args.repo is not None:  # scripts/lib.sh passes its own root (a copy of configs/)
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
            print(_shell_value(check_option(args.key, args.value, args.option)))
        elif args.cmd == "convert":
            from qknorm_tools.config_convert import convert_command

            return convert_command(args.file)
    except UsageError as e:  # on stdout: scripts/lib/config.sh shows it with the usage
        print(e)
        return exits.USAGE
    except ConfigError as e:
        return exits.fail(e)
    return exits.OK


if __name__ == "__main__":
    sys.exit(main())
