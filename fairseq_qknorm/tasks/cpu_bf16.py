"""bf16 autocast on CPU for the plugin's translation task, and the detection of native bf16.

fairseq's own ``--bf16`` is TPU-only (``fairseq/options.py``, ``parse_args_and_arch``, sets
``args.tpu = True`` whenever ``--bf16`` is given, so ``fairseq-train --bf16 --cpu`` asks
torch_xla for a device and fails). The task options ``--bf16-autocast`` and
``--bf16-autocast-inference`` (:mod:`.translation_word_dropout`) instead run the forward passes
under ``torch.autocast("cpu", dtype=torch.bfloat16)``: parameters, gradients and the
optimizer stay float32 (autocast casts operands per op, e.g. the inputs and weights of every
``linear``/``matmul``, and the backward of each cast returns float32 gradients), so nothing
else in fairseq changes.

This only pays on CPUs that compute in bf16 natively: x86 with AVX-512 BF16 (``avx512_bf16``:
AMD Zen 4 and later, Intel Cooper Lake, Sapphire Rapids and later) or AMX (``amx_bf16``:
Intel Sapphire Rapids and later), ARMv8.6+ with the BF16 extension (``bf16``: e.g. AWS
Graviton3, Apple M2 and later). Elsewhere torch emulates bf16 matmuls: the same training step
ran about 20x slower than fp32 on an AVX2-only AMD EPYC (``benchmarks/README.md``). The task
therefore refuses the options without native bf16 unless ``--bf16-autocast-allow-emulated``.
"""

import logging
import platform
import subprocess
from collections.abc import Iterable
from contextlib import nullcontext
from pathlib import Path
from typing import Optional

import torch

logger = logging.getLogger(__name__)

#: CPU feature names (Linux ``/proc/cpuinfo`` spelling) that give native bf16 arithmetic:
#: x86 AVX-512 BF16 dot products and AMX-BF16 tiles; ARM's BF16 extension (FEAT_BF16).
NATIVE_BF16_FEATURES = ("avx512_bf16", "amx_bf16", "bf16")

#: The autocast that ``--bf16-autocast`` applies (CPU device, bfloat16 compute dtype).
AUTOCAST_DTYPE = torch.bfloat16


def _read_text(path: str) -> Optional[str]:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def cpu_model_name(cpuinfo: Optional[str] = None) -> str:
    """The CPU's model name (``/proc/cpuinfo`` ``model name``, else ``platform.processor()``)."""
    text = _read_text("/proc/cpuinfo") if cpuinfo is None else cpuinfo
    for line in (text or "").splitlines():
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine() or "unknown CPU"


def bf16_features_from_cpuinfo(cpuinfo: str) -> list[str]:
    """The :data:`NATIVE_BF16_FEATURES` that a ``/proc/cpuinfo`` text lists.

    Args:
        cpuinfo: the text of Linux ``/proc/cpuinfo``: x86 lists features on ``flags`` lines,
            arm64 on ``Features`` lines (the kernel omits those it does not support).

    Returns:
        The features found, in :data:`NATIVE_BF16_FEATURES` order (``bf16`` only from a
        ``Features`` line: x86 has no feature of that name).
    """
    flags, arm = set(), set()
    for line in cpuinfo.splitlines():
        key, _, value = line.partition(":")
        key = key.strip().lower()
        if key == "flags":
            flags.update(value.split())
        elif key == "features":
            arm.update(value.split())
    found = [f for f in ("avx512_bf16", "amx_bf16") if f in flags]
    if "bf16" in arm:
        found.append("bf16")
    return found


def _torch_bf16_features() -> list[str]:
    """bf16 features according to torch's own CPU checks.

    The checks are the cpuinfo library's (CPUID plus the OS's support for the AVX-512 state),
    through private ``torch.cpu`` helpers that some builds lack.
    """
    found = []
    check = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    try:
        if check is not None and check():
            found.append("avx512_bf16")
    except Exception:  # noqa: BLE001  (a private helper: never let it break training)
        pass
    return found


def _macos_bf16_features() -> list[str]:
    """ARM BF16 on macOS (``sysctl hw.optional.arm.FEAT_BF16``: Apple M2 and later)."""
    if platform.system() != "Darwin":
        return []
    try:
        out = subprocess.run(
            ["sysctl", "-n", "hw.optional.arm.FEAT_BF16"], capture_output=True, text=True, timeout=5
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return []
    return ["bf16"] if out == "1" else []


def _onednn_bf16() -> tuple[bool, str]:
    """Whether torch's oneDNN is built and reports bf16 support.

    oneDNN runs bf16 ``linear``/``matmul`` on CPU.
    """
    if not torch.backends.mkldnn.is_available():
        return (
            False,
            "this torch build has no oneDNN (torch.backends.mkldnn.is_available() is False)",
        )
    check = getattr(getattr(torch.ops, "mkldnn", None), "_is_mkldnn_bf16_supported", None)
    try:
        if check is not None and not check():
            return (
                False,
                "torch's oneDNN reports no bf16 support (mkldnn._is_mkldnn_bf16_supported)",
            )
    except Exception:  # noqa: BLE001
        pass
    return True, ""


def native_bf16_support(cpuinfo: Optional[str] = None) -> tuple[bool, str]:
    """Whether this CPU computes in bf16 natively, so that bf16 autocast can beat fp32.

    Native means a bf16 instruction set (:data:`NATIVE_BF16_FEATURES`: ``avx512_bf16`` or
    ``amx_bf16`` on x86, ``bf16`` on ARM) found in ``/proc/cpuinfo`` (Linux), ``sysctl``
    (macOS) or torch's own CPU checks, *and* torch's oneDNN built with bf16 support. Note
    that torch's oneDNN check alone is not enough: it also accepts AVX-512 CPUs without
    AVX512-BF16 (Skylake-X), where bf16 is converted in software.

    Args:
        cpuinfo: a ``/proc/cpuinfo`` text to judge instead of this machine (tests); with it,
            only that text is read (no ``sysctl``, no torch checks).

    Returns:
        ``(native, reason)``: ``reason`` names the features found, or says what is missing.
    """
    given = cpuinfo is not None
    text = cpuinfo if given else (_read_text("/proc/cpuinfo") or "")
    features = bf16_features_from_cpuinfo(text)
    if not given:
        features += _macos_bf16_features() + _torch_bf16_features()
    features = [f for f in NATIVE_BF16_FEATURES if f in features]  # ordered, no duplicates
    cpu = cpu_model_name(text)
    if not features:
        return False, (
            f"this CPU ({cpu}) has no native bf16 instructions (looked for "
            f"avx512_bf16 or amx_bf16 on x86, bf16 on ARM)"
        )
    if not given:
        ok, why = _onednn_bf16()
        if not ok:
            return False, f"this CPU ({cpu}) has {', '.join(features)}, but {why}"
    return True, f"native bf16 on this CPU ({cpu}): {', '.join(features)}"


def check_native_bf16(options: Iterable[str], allow_emulated: bool) -> tuple[bool, str]:
    """Refuse bf16 autocast options on a CPU without native bf16, unless ``allow_emulated``.

    Args:
        options: the options asked for (named in the message), e.g. ``["--bf16-autocast"]``.
        allow_emulated: warn instead of raising (``--bf16-autocast-allow-emulated``).

    Returns:
        ``(native, reason)`` from the detection.

    Raises:
        ValueError: no native bf16 and not ``allow_emulated``; the message says why, what it
            costs and the two ways out.
    """
    native, reason = native_bf16_support()
    if native:
        return native, reason
    asked = " and ".join(options)
    msg = (
        f"{asked}: {reason}. Without it torch emulates bf16 matmuls and autocast makes "
        f"training much slower than fp32 (about 20x on an AVX2-only AMD EPYC, "
        f"benchmarks/README.md)."
    )
    if not allow_emulated:
        raise ValueError(
            f"{msg} Train in fp32 (drop {asked}), or pass "
            f"--bf16-autocast-allow-emulated to run it anyway."
        )
    logger.warning("%s Running anyway (--bf16-autocast-allow-emulated).", msg)
    return native, reason


def require_cpu(modules: Iterable[torch.nn.Module]) -> None:
    """Raise ``ValueError`` if a parameter of ``modules`` is not on the CPU.

    CPU autocast would silently do nothing for CUDA tensors (use fairseq's ``--amp``/``--fp16``
    there).
    """
    for module in modules:
        for p in module.parameters():
            if p.device.type != "cpu":
                raise ValueError(
                    f"--bf16-autocast is CPU autocast, but the model is on "
                    f"{p.device}: train with --cpu, or on a GPU use fairseq's "
                    f"--amp or --fp16 instead"
                )
            break  # one parameter per module: fairseq keeps a model on one device


def bf16_autocast(enabled: bool):
    """``torch.autocast("cpu", dtype=torch.bfloat16)`` if ``enabled``, else a no-op context.

    Never ``autocast(enabled=False)``, which would switch off an enclosing autocast.
    """
    return torch.autocast("cpu", dtype=AUTOCAST_DTYPE) if enabled else nullcontext()


class Bf16AutocastCriterion:
    """A criterion whose call ``criterion(model, sample)`` (forward, loss) runs in bf16 autocast.

    fairseq's ``FairseqTask.train_step`` calls ``criterion(model, sample)`` and then
    ``optimizer.backward(loss)``; passing this wrapper instead of the criterion puts exactly
    the forward pass and the loss under autocast and leaves the backward outside it, as torch
    recommends ("backward passes under autocast are not recommended": the backward of each op
    runs in the dtype autocast chose for its forward anyway).

    Args:
        criterion: a fairseq criterion (any callable ``criterion(model, sample)``).
    """

    def __init__(self, criterion):
        self.criterion = criterion

    def __call__(self, model, sample):
        """The wrapped criterion's ``(loss, sample_size, logging_output)``, computed in autocast."""
        with bf16_autocast(True):
            return self.criterion(model, sample)
