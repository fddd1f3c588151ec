"""One training run of the configuration, typed: a :class:`Run` and the rules that make it.

A run is a pair, a system, a profile (``QKNORM_*`` overrides applied), a seed, a peak learning
rate (the profile's or ``--lr``'s), an update budget (the profile's or ``--max-update``'s), a
size of the LR sweep's size axis (``--size``) and a precision (bf16 autocast or fp32). From
these alone follow its label (:func:`qknorm_tools.config.run_label`), its directory
(:func:`qknorm_tools.config.run_dir`), its arch (:func:`arch_name`), its variant (the record
key ``lr``) and the ``scripts/train.sh`` command that makes it (:meth:`Run.train_cmd`, for
messages). ``python -m qknorm_tools.run train-plan`` builds one :class:`Run` from
``scripts/train.sh``'s options (:func:`build_run`) and prints what bash needs (issue 36: one
Python spine for a run; bash keeps the launcher, the lock, the process group and Ctrl-C).

The precision is decided here once per run or grid (:func:`precision_mode`,
:func:`decide_precision`): ``--precision`` if given, else ``QKNORM_BF16``, else the profile's
``bf16`` key; ``auto`` asks ``python -m qknorm_model_tools.bf16_auto`` (torch: its own process;
it measures once per machine and caches the verdict, docs/bf16.md), and is fp32 for a profile
at the papers' size. ``qknorm_tools`` stays torch-free.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from qknorm_tools import config
from qknorm_tools.config_schema import (
    ConfigError,
    UsageError,
    check_posint,
    check_uint,
    lr_override,
)

__all__ = [
    "SIZES",
    "Run",
    "arch_name",
    "build_run",
    "check_posint",
    "check_uint",
    "decide_precision",
    "native_bf16",
    "precision_arg",
    "precision_mode",
    "require_sizeable",
]

#: the LR sweep's sizes besides the proxy (``--size``): 2+2 layers at d 128, 4+4 at d 384
SIZES = ("d128", "d384")

_BF16_MODES = "expected 1 (bf16 autocast), 0 (fp32) or auto (bf16 where measured faster)"


def arch_name(
    system: config.System, profile: config.Profile, pair: config.Pair, size: str = ""
) -> str:
    """The named arch of ``system`` at ``profile``'s size.

    The system's arch family (registered by ``fairseq_qknorm/models/transformer_qknorm.py``) at
    the profile's size: ``FAMILY_SIZE`` for a ``--size`` of the LR sweep, ``FAMILY_proxy`` for the
    CPU profiles, the pair's paper size for a profile at the papers' size (``FAMILY_small`` for
    gl-en's 4+4 layers, ``FAMILY`` for the 6+6 base).
    """
    if size:
        return f"{system.arch}_{size}"
    if profile.arch_size == "proxy":
        return f"{system.arch}_proxy"
    return f"{system.arch}_small" if pair.paper_arch_size == "small" else system.arch


def require_sizeable(profile: config.Profile, what: str) -> None:
    """A usage error (naming ``what``, e.g. ``--size d384``) unless ``profile`` takes a size.

    A CPU profile (proxy-size arch) that sets no model size of its own can train at the LR
    sweep's other sizes (``model_flags``, e.g. cpu-converge-d128's width 128, would override the
    size's widths and keep its layers and heads: no model of either size).

    Raises:
        UsageError: the profile is at the papers' size or sets ``model_flags``.
    """
    if profile.arch_size != "proxy":
        raise UsageError(f"{what} needs a CPU profile (proxy size), not {profile.name}")
    if profile.model_flags:
        raise UsageError(
            f"{what}: profile {profile.name} sets its own model size "
            f"({' '.join(profile.model_flags)}); use a profile without model_flags (cpu-proxy, "
            "cpu-proxy-fast, ...)"
        )


def precision_arg(arg: str, bf16_autocast: bool = False) -> str:
    """A script's ``--precision`` (bf16, fp32 or auto; ``""``: not given), checked.

    ``bf16_autocast`` (a script's ``--bf16-autocast``) is ``--precision bf16``.

    Raises:
        UsageError: a bad ``arg``, or one other than bf16 with ``bf16_autocast``.
    """
    if arg and arg not in ("bf16", "fp32", "auto"):
        raise UsageError(f"--precision must be bf16, fp32 or auto, got '{arg}'")
    if bf16_autocast:
        if arg not in ("", "bf16"):
            raise UsageError(f"--bf16-autocast and --precision {arg} exclude each other")
        return "bf16"
    return arg


def precision_mode(arg: str, profile: config.Profile, environ: Mapping = os.environ) -> str:
    """How a run's precision is decided: ``bf16``, ``fp32`` or ``auto``.

    ``arg`` (a script's ``--precision``: bf16, fp32 or auto; ``""``: not given) wins, then
    ``QKNORM_BF16`` (1, 0 or auto), then the profile's ``bf16`` key (default 0).

    Raises:
        UsageError: a bad ``arg`` or ``QKNORM_BF16``.
        ConfigError: a bad ``bf16`` key in the profile's file.
    """
    if precision_arg(arg):
        return arg
    env = environ.get("QKNORM_BF16") or ""
    mode = env or str(profile.bf16)
    if mode not in ("0", "1", "auto"):
        if env:
            raise UsageError(f"QKNORM_BF16='{mode}': {_BF16_MODES}")
        raise ConfigError(
            f"configs/profiles/{profile.name}.toml: key 'bf16' = '{mode}': {_BF16_MODES}"
        )
    return {"0": "fp32", "1": "bf16"}.get(mode, mode)


def decide_precision(
    mode: str,
    profile: config.Profile,
    *,
    work: Path,
    threads: int,
    cached_only: bool,
    repo: Path,
    quiet: bool = False,
) -> str:
    """The precision a run trains in: ``bf16`` (bf16 autocast on CPU) or ``fp32``.

    ``auto``: fp32 for a profile at the papers' size (a GPU profile: fairseq's ``--fp16`` there;
    a line on stderr says so); else ``python -m qknorm_model_tools.bf16_auto`` in its own
    process (it needs torch): bf16 only where the CPU has native bf16 and it was measured faster
    than fp32 at the proxy size with ``threads`` threads (measured once after a line saying what
    and roughly how long, cached under ``WORK/bf16-auto/``). ``cached_only``: never measure (fp32
    without a cached verdict), for steps that only find runs, and dry runs. ``quiet``: no line
    saying the verdict (errors are still said), for steps that train nothing.

    Raises:
        ConfigError: no decision (bf16_auto failed; its message is on stderr above).
    """
    if mode != "auto":
        return mode
    if profile.arch_size != "proxy":
        if quiet:
            return "fp32"
        print(f"[bf16 auto] fp32: profile {profile.name} trains at the papers' size (a GPU "
              "profile); bf16 autocast on CPU is measured at the proxy size only (--precision "
              "bf16 forces it)", file=sys.stderr)  # fmt: skip
        return "fp32"
    cmd = [sys.executable, "-m", "qknorm_model_tools.bf16_auto", str(Path(work) / "bf16-auto"),
           "--size", "proxy", "--threads", str(threads)]  # fmt: skip
    cmd += (["--cached-only"] if cached_only else []) + (["--quiet"] if quiet else [])
    env = dict(os.environ, OMP_NUM_THREADS=str(threads))
    done = subprocess.run(cmd, cwd=repo, env=env, stdout=subprocess.PIPE, text=True, check=False)
    answer = done.stdout.strip()
    if done.returncode != 0:
        raise ConfigError("no bf16 decision (above; --precision fp32 or bf16, or QKNORM_BF16=0 or "
                          "1, decides without one)")  # fmt: skip
    if answer not in ("bf16", "fp32"):
        raise ConfigError(
            f"python -m qknorm_model_tools.bf16_auto answered '{answer}', expected bf16 or fp32"
        )
    return answer


def native_bf16(repo: Path) -> tuple[bool, str]:
    """Whether this CPU has native bf16 instructions, and the detection's words.

    ``python -m qknorm_model_tools.bf16_auto --native-only`` (torch: its own process;
    :func:`fairseq_qknorm.tasks.cpu_bf16.native_bf16_support`, the check the plugin task makes
    before a ``--bf16-autocast`` run trains).

    Raises:
        ConfigError: the detection failed (its message is on stderr above).
    """
    cmd = [sys.executable, "-m", "qknorm_model_tools.bf16_auto", "--native-only"]
    done = subprocess.run(cmd, cwd=repo, capture_output=True, text=True, check=False)
    if done.returncode != 0 or done.stdout.strip() not in ("bf16", "fp32"):
        sys.stderr.write(done.stderr)
        raise ConfigError("cannot tell whether this CPU has native bf16 (above)")
    return done.stdout.strip() == "bf16", done.stderr.strip().removeprefix("[bf16 auto] ")


@dataclass(frozen=True)
class Run:
    """One training run: what it is made of and what follows from it.

    ``lr`` is fairseq-train's ``--lr`` where it replaces the profile's, in its one spelling
    (:func:`qknorm_tools.config_schema.lr_spelling`), ``""`` otherwise; ``lr_override`` the same,
    or ``""`` where it equals the profile's own lr (that run is the profile's, ``seedN``).
    ``max_update`` is the run's update budget; ``max_update_arg`` the ``--max-update`` given
    (``""``: none; for :meth:`train_cmd`); ``precision`` ``bf16`` or ``fp32``.
    """

    pair: config.Pair
    system: config.System
    profile: config.Profile
    seed: int
    work: Path
    max_update: int
    precision: str = "fp32"
    lr: str = ""
    lr_override: str = ""
    size: str = ""
    max_update_arg: str = ""

    @property
    def label(self) -> str:
        """PROFILE[-max-update-N][-SIZE]: what the run's results are filed under."""
        label = config.run_label(self.profile, self.max_update)
        return f"{label}-{self.size}" if self.size else label

    @property
    def dir(self) -> Path:
        """WORK/runs/PAIR/LABEL/SYSTEM/seedN[-lrLR][-bf16]."""
        return config.run_dir(self.work, self.pair.name, self.label, self.system.name, self.seed,
                              self.lr_override, self.precision)  # fmt: skip

    @property
    def arch(self) -> str:
        """The named arch (:func:`arch_name`)."""
        return arch_name(self.system, self.profile, self.pair, self.size)

    @property
    def variant(self) -> dict:
        """The record's variant keys: ``{"lr": LR}`` for a run at another lr, else ``{}``."""
        return {"lr": self.lr_override} if self.lr_override else {}

    @property
    def identity(self) -> dict:
        """What the run is, as its ``train.json`` records it.

        Pair, profile (the label), system, seed, precision and variant, as the scripts check
        them (:func:`qknorm_tools.evaluate.check_run_identity`).
        """
        return {"pair": self.pair.name, "profile": self.label, "system": self.system.name,
                "seed": self.seed, "precision": self.precision,
                "variant": self.variant}  # fmt: skip

    def train_cmd(self, environ: Mapping = os.environ) -> str:
        """The ``scripts/train.sh`` command that makes this run (for messages).

        fp32 is said only where the profile or ``QKNORM_BF16`` would not give it.
        """
        words = ["scripts/train.sh", self.pair.name, self.system.name, "--profile",
                 self.profile.name, "--seed", str(self.seed)]  # fmt: skip
        if self.max_update_arg:
            words += ["--max-update", self.max_update_arg]
        if self.lr_override:
            words += ["--lr", self.lr_override]
        if self.size:
            words += ["--size", self.size]
        if (
            self.precision == "bf16"
            or f"{self.profile.bf16}{environ.get('QKNORM_BF16', '')}" != "0"
        ):
            words += ["--precision", self.precision]
        return " ".join(words)


def build_run(
    pair: str,
    system: str,
    profile: str,
    *,
    seed: str,
    max_update: str = "",
    lr: str = "",
    size: str = "",
    work: Path,
    environ: Mapping = os.environ,
) -> Run:
    """The :class:`Run` of ``scripts/train.sh``'s options, as given (strings), precision fp32.

    Checks in the order train.sh always did: the seed and the size, the configuration (pair,
    system, profile, ``--lr``), the budget, and that a run of it stops. The precision is set
    after (``dataclasses.replace(run, precision=...)``, :func:`decide_precision`), since
    deciding it may measure for a minute.

    Raises:
        UsageError: a bad option or ``QKNORM_*`` value, an unknown name, a budget that never
            stops (``--max-update 0`` with a profile without an epoch limit).
        ConfigError: a configuration file that cannot be read.
    """
    seed_n = check_uint("--seed", seed)
    if size not in ("",) + SIZES:
        raise UsageError(
            f"--size must be d128 or d384 (the LR sweep's sizes besides the proxy), got '{size}'"
        )
    p = config.apply_env_pair(config.load_pair(pair, work))
    s = config.load_system(system)
    f = config.apply_env(config.load_profile(profile, p), environ)
    qk_lr, override = lr_override(f.name, f.optim_flags, lr) if lr else ("", "")
    budget = check_uint("--max-update", max_update) if max_update else f.run_max_update
    if budget == 0 and not f.max_epoch:
        raise UsageError(
            f"--max-update 0 with profile {f.name} (max-epoch 0) would never stop training"
        )
    return Run(pair=p, system=s, profile=f, seed=seed_n, work=work, max_update=budget, lr=qk_lr,
               lr_override=override, size=size, max_update_arg=max_update)  # fmt: skip


def with_precision(run: Run, precision: str) -> Run:
    """``run`` in ``precision`` (bf16 or fp32)."""
    return dataclasses.replace(run, precision=precision)
