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

# every module of the plugin is a library module: ``python -m fairseq_qknorm.NAME`` would run it
# a second time, registering its fairseq names twice ("Cannot register duplicate ..."). The
# commands that run its models live one layer up (qknorm_model_tools, docs/usage.md).
_argv = getattr(_sys, "orig_argv", [])
_main = _argv[_argv.index("-m") + 1] if "-m" in _argv[:-1] else ""
if _main.startswith(f"{__name__}."):
    raise SystemExit(
        f"error: {_main} is not a command: {__name__} is a fairseq plugin (--user-dir "
        f"{__name__}, docs/usage.md) whose modules are libraries. The commands that run its "
        "models are python -m qknorm_model_tools.NAME (python -m qknorm_model_tools lists them)"
    )

from . import checkpoint_compat, distributed_compat, resume_compat  # noqa: E402

checkpoint_compat.install()
distributed_compat.install()
resume_compat.install()

from . import bpe  # noqa: E402,F401  (registers --bpe pipeline)
from .criterions import label_smoothed_cross_entropy_zloss  # noqa: E402,F401  (registers the z-loss criterion)
from .models import transformer_qknorm  # noqa: E402,F401  (registers model + archs)
from .tasks import translation_word_dropout  # noqa: E402,F401  (registers task translation_word_dropout)
