"""fairseq_qknorm: a fairseq ``--user-dir`` plugin for attention normalization in NMT.

Registers the model ``transformer_qknorm`` and its named architectures
(``transformer_twt*``, ``transformer_qknorm_paper*``), the BPE ``--bpe pipeline``
(the segmentation ``scripts/bpe.sh`` recorded, see :mod:`.bpe`) and makes fairseq
checkpoints loadable under torch >= 2.6 (see :mod:`.checkpoint_compat`),
multi-process training on CPU possible (:mod:`.distributed_compat`) and a
resumed run continue exactly (:mod:`.resume_compat`).

Use: ``fairseq-train --user-dir /abs/path/to/fairseq_qknorm --arch ...`` or
``import fairseq_qknorm`` before using fairseq's Python API.
"""

__version__ = "0.1.0"

import sys as _sys  # noqa: E402

# python -m fairseq_qknorm.TOOL (translate, bf16_auto, attention_dump, average_checkpoints, ...):
# Python imports this package, and so fairseq (whose modules log at import time: the tensorboardX
# INFO line), before the tool's main() runs; its terminal leaves fairseq's noise out (the hint:
# where to see it)
_QUIET_HINTS = {
    f"{__name__}.translate": "--verbose shows them",
    f"{__name__}.bf16_auto": "python -m benchmarks.bf16_cpu shows them",
}
#: the modules that are commands (``python -m fairseq_qknorm.NAME --help``); every other module
#: is a library module, which ``-m`` would run a second time, registering its fairseq names twice
COMMANDS = ("translate", "bf16_auto", "attention_dump", "average_checkpoints")
_argv = getattr(_sys, "orig_argv", [])
_main = _argv[_argv.index("-m") + 1] if "-m" in _argv[:-1] else ""
if _main.startswith(f"{__name__}."):
    if _main.split(".", 1)[1] not in COMMANDS:
        raise SystemExit(
            f"error: {_main} is a library module, not a command: fairseq uses it through "
            f"--user-dir {__name__} (docs/usage.md). The commands: "
            + ", ".join(f"python -m {__name__}.{c}" for c in COMMANDS)
        )
    from qknorm_tools.progress import quiet_fairseq_logging

    quiet_fairseq_logging(_QUIET_HINTS.get(_main, "they do not concern this tool"))

from . import checkpoint_compat, distributed_compat, resume_compat  # noqa: E402

checkpoint_compat.install()
distributed_compat.install()
resume_compat.install()

from . import bpe  # noqa: E402,F401  (registers --bpe pipeline)
from .criterions import label_smoothed_cross_entropy_zloss  # noqa: E402,F401  (registers the z-loss criterion)
from .models import transformer_qknorm  # noqa: E402,F401  (registers model + archs)
from .tasks import translation_word_dropout  # noqa: E402,F401  (registers task translation_word_dropout)
