"""qknorm_model_tools: the tools that build, load or run the plugin's models.

The layer between the fairseq plugin and the experiment tooling: it needs torch, fairseq and
the plugin (:mod:`fairseq_qknorm`, which imports only torch, fairseq and itself) and uses the
torch-free tooling (:mod:`qknorm_tools`: configuration, run records, terminal logging).

Commands (``python -m qknorm_model_tools.NAME --help``; ``python -m qknorm_model_tools`` lists
them):

* :mod:`.translate`: raw sentences through a trained run, segmented and decoded as
  ``scripts/evaluate.sh`` does (also :class:`~.translate.Translator` from Python);
* :mod:`.attention_dump`: the attention of chosen test sentences to JSON (``qknorm_tools.report``);
* :mod:`.average_checkpoints`: checkpoint averaging for decoding (``evaluate.sh --checkpoint
  avgN``);
* :mod:`.bf16_auto`: whether the CPU profiles train in bf16 on this machine (measured, cached).

Library module: :mod:`.bf16_timing` (the timing and statistics of ``bf16_auto``, shared with
``benchmarks/``).
"""

import sys as _sys

#: the modules that are commands (``python -m qknorm_model_tools.NAME --help``); every other
#: module is a library module
COMMANDS = ("translate", "bf16_auto", "attention_dump", "average_checkpoints")

# python -m qknorm_model_tools.TOOL: the tool imports fairseq (through the plugin), whose modules
# log at import time (the tensorboardX INFO line), before its main() runs; its terminal leaves
# fairseq's noise out (the hint: where to see it)
_QUIET_HINTS = {
    f"{__name__}.translate": "--verbose shows them",
    f"{__name__}.bf16_auto": "python -m benchmarks.bf16_cpu shows them",
}
_argv = getattr(_sys, "orig_argv", [])
_main = _argv[_argv.index("-m") + 1] if "-m" in _argv[:-1] else ""
if _main.startswith(f"{__name__}."):
    if _main.split(".", 1)[1] not in COMMANDS:
        raise SystemExit(
            f"error: {_main} is a library module, not a command. The commands: "
            + ", ".join(f"python -m {__name__}.{c}" for c in COMMANDS)
        )
    from qknorm_tools.progress import quiet_fairseq_logging

    quiet_fairseq_logging(_QUIET_HINTS.get(_main, "they do not concern this tool"))
