"""Multi-process fairseq training on CPU: ``torchrun ... fairseq-train --cpu``.

fairseq's distributed start-up assumes one CUDA device per process. On a
machine without CUDA, ``torchrun --nproc_per_node N fairseq-train --cpu
--distributed-backend gloo ...`` fails in two places (installed fairseq,
upstream main):

1. ``fairseq/distributed/utils.py`` ``_infer_torch_distributed_launch_init``
   (reached from ``call_main`` -> ``infer_init_method``) picks the device with
   ``cfg.device_id = cfg.distributed_rank % torch.cuda.device_count()``: a
   ``ZeroDivisionError`` without CUDA. Before that, ``infer_init_method`` returns
   early when ``--distributed-world-size`` is 1, its CPU default
   (``max(1, torch.cuda.device_count())`` in ``fairseq/dataclass/configs.py``):
   without the flag, the N processes would each train alone, silently, into the
   same ``--save-dir``.
2. ``fairseq/models/distributed_fairseq_model.py`` ``DistributedFairseqModel``
   builds torch's ``DistributedDataParallel(module, device_ids=[device_id],
   output_device=device_id, ...)`` for ``--ddp-backend pytorch_ddp`` (the
   default); torch rejects ``device_ids`` for a module on the CPU
   (``ValueError``).

:func:`install` patches exactly these two names, each only where it matters:

* ``fairseq.distributed.utils.infer_init_method``: when torchrun's environment
  (``MASTER_ADDR MASTER_PORT WORLD_SIZE RANK``) says ``WORLD_SIZE > 1`` and there
  is no CUDA device, it sets what ``_infer_torch_distributed_launch_init`` sets
  (``env://``, world size and rank from the environment, no spawning) except
  the CUDA device. Otherwise fairseq's own function runs unchanged.
* ``fairseq.models.distributed_fairseq_model.DistributedDataParallel``: for a
  module whose parameters are all on the CPU it passes ``device_ids=None`` and
  ``output_device=None``, as torch requires; GPU modules get fairseq's
  arguments unchanged.

Everything else on the way runs as fairseq wrote it: ``distributed_init``
skips its CUDA warm-up all-reduce without CUDA, the trainer puts the model on
the CPU under ``--cpu``, and logging outputs are summed with
``all_reduce_dict`` on the trainer's device. Not covered: criteria whose
logging outputs cannot be summed go through ``all_gather_list``, which
allocates a ``torch.cuda.ByteTensor`` (none of this plugin's recipes uses one).

Rank 0 loads a checkpoint to resume and broadcasts it; the receiving side's
``torch.load`` is made trusted by :mod:`.checkpoint_compat`.

At exit, a CPU torchrun launch destroys its gloo process group (:func:`_end_process_group`,
registered with :mod:`atexit`; fairseq's ``distributed_main`` ends with a barrier but never
destroys the group). Without it, gloo's threads were torn down during interpreter shutdown, and
a rank now and then aborted there ("terminate called without an active exception", SIGABRT,
seen on a busy machine after "done training"): torchrun reported a finished training as failed.
Destroying is local (no collective), so a rank that exits on an error cannot hang in it.
"""

import atexit
import logging
import os

import torch

_MARK = "_fairseq_qknorm_cpu_distributed"
TORCHRUN_ENV = ("MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE", "RANK")


def _cpu_torchrun_launch(cfg) -> bool:
    """Whether ``cfg`` is a multi-process torchrun launch that fairseq cannot start.

    ``cfg`` is fairseq's ``DistributedTrainingConfig``; such a launch has several processes
    on a machine without CUDA.
    """
    return (
        cfg.distributed_init_method is None
        and not cfg.tpu
        and not cfg.pipeline_model_parallel
        and torch.cuda.device_count() == 0
        and all(k in os.environ for k in TORCHRUN_ENV)
        and int(os.environ["WORLD_SIZE"]) > 1
    )


def _end_process_group() -> None:
    """Destroy the default process group, if one is still up (before interpreter shutdown)."""
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()):
        return
    try:
        dist.destroy_process_group()
    except Exception as e:  # the training's own status is what torchrun reports
        logging.getLogger(__name__).warning(f"could not destroy the process group at exit: {e}")


def _wrap_infer_init_method(fairseq_infer_init_method):
    def infer_init_method(cfg, force_distributed=False):
        """Fairseq's ``infer_init_method``; a CPU torchrun launch is set up here.

        Raises:
            ValueError: a CPU torchrun launch with ``--distributed-backend nccl``
                (fairseq's default; NCCL needs CUDA).
        """
        if not _cpu_torchrun_launch(cfg):
            return fairseq_infer_init_method(cfg, force_distributed)
        if cfg.distributed_backend == "nccl":
            raise ValueError(
                "multi-process training without CUDA needs "
                "--distributed-backend gloo (fairseq's default nccl needs CUDA)"
            )
        # fairseq/distributed/utils.py _infer_torch_distributed_launch_init, minus its
        # CUDA device pick (rank % torch.cuda.device_count())
        cfg.distributed_init_method = "env://"
        cfg.distributed_world_size = int(os.environ["WORLD_SIZE"])
        cfg.distributed_rank = int(os.environ["RANK"])
        cfg.distributed_no_spawn = True
        atexit.unregister(_end_process_group)  # registered once, however often this runs
        atexit.register(_end_process_group)

    setattr(infer_init_method, _MARK, True)
    infer_init_method.__wrapped__ = fairseq_infer_init_method
    return infer_init_method


def _wrap_ddp(torch_ddp):
    def DistributedDataParallel(module, device_ids=None, output_device=None, **kwargs):  # noqa: N802
        """PyTorch's ``DistributedDataParallel``; a CPU module gets no ``device_ids``."""
        if all(p.device.type == "cpu" for p in module.parameters()):
            device_ids = output_device = None
        return torch_ddp(module, device_ids=device_ids, output_device=output_device, **kwargs)

    setattr(DistributedDataParallel, _MARK, True)
    DistributedDataParallel.__wrapped__ = torch_ddp
    return DistributedDataParallel


def install() -> None:
    """Patch ``infer_init_method`` and fairseq's ``DistributedDataParallel`` name.

    Idempotent; see the module docstring for the fairseq lines worked around.
    """
    from fairseq.distributed import utils as distributed_utils
    from fairseq.models import distributed_fairseq_model

    if not getattr(distributed_utils.infer_init_method, _MARK, False):
        distributed_utils.infer_init_method = _wrap_infer_init_method(
            distributed_utils.infer_init_method
        )
    if not getattr(distributed_fairseq_model.DistributedDataParallel, _MARK, False):
        distributed_fairseq_model.DistributedDataParallel = _wrap_ddp(
            distributed_fairseq_model.DistributedDataParallel
        )
