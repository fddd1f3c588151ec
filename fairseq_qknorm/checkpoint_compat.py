"""Load fairseq checkpoints under torch >= 2.6.

torch 2.6 changed ``torch.load``'s default to ``weights_only=True``; fairseq
checkpoints hold pickled Python objects (argparse/OmegaConf configs, meters,
iterator state), so ``fairseq.checkpoint_utils.load_checkpoint_to_cpu`` then
fails and neither resume nor ``fairseq-generate --path`` works.

The same happens in multi-process training on resume: rank 0 loads the
checkpoint and broadcasts it, and the other ranks unpickle it with a bare
``torch.load`` in ``fairseq/distributed/utils.py`` ``_broadcast_object_slow``
(called by ``Trainer.load_checkpoint`` through ``broadcast_object``).

The fix is narrow: only the name ``torch`` *inside*
``fairseq.checkpoint_utils`` and inside ``fairseq.distributed.utils`` is
replaced by a proxy whose ``load`` defaults to ``weights_only=False`` (an
explicit ``weights_only=`` from a caller wins); every other attribute is
torch's own. Every other ``torch.load`` in the process keeps torch's safe
default.

Security: ``weights_only=False`` runs pickle code from the checkpoint file.
Load only checkpoints you trust (your own, or from a source you trust).
"""

import types

import torch

_MARK = "_fairseq_qknorm_trusted_load"


class _TorchWithTrustedCheckpointLoad(types.ModuleType):
    """Module proxy for ``torch`` whose ``load`` defaults to ``weights_only=False``."""

    def __init__(self):
        super().__init__("torch")
        setattr(self, _MARK, True)

    def __getattr__(self, name):
        return getattr(torch, name)

    @staticmethod
    def load(f, *args, **kwargs):
        kwargs.setdefault("weights_only", False)
        return torch.load(f, *args, **kwargs)


def _needs_patch() -> bool:
    major, minor = (int(x) for x in torch.__version__.split(".")[:2])
    return (major, minor) >= (2, 6)


def install() -> bool:
    """Apply the proxy to ``fairseq.checkpoint_utils`` and ``fairseq.distributed.utils``.

    Idempotent.

    Returns:
        True if the proxy is in place (torch >= 2.6), False if not needed.
    """
    if not _needs_patch():
        return False
    from fairseq import checkpoint_utils
    from fairseq.distributed import utils as distributed_utils

    for module in (checkpoint_utils, distributed_utils):
        if not getattr(module.torch, _MARK, False):
            module.torch = _TorchWithTrustedCheckpointLoad()
    return True
