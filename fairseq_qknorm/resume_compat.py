"""Exact resume of ``fairseq-train`` from ``checkpoint_last.pt``.

A run stopped and resumed from its last checkpoint should continue as if it had
never stopped. It does for the parameters, the optimizer, the update count,
dropout (fairseq reseeds every update) and the position in the epoch, but not
for four pieces of state in the installed fairseq (upstream main):

1. ``fairseq/optim/lr_scheduler/reduce_lr_on_plateau.py``
   ``ReduceLROnPlateauLRSchedule.state_dict`` saves only ``best`` and
   ``last_epoch`` of torch's ``ReduceLROnPlateau``, not ``num_bad_epochs``: after
   a resume the patience count starts from 0 and the lr decays later than in an
   uninterrupted run. Fixed as upstream PR facebookresearch/fairseq#4071 (closed,
   not in this build) proposed: ``num_bad_epochs`` is one more key of the same
   state dict, and a state without it (older checkpoints) loads as before.
2. ``fairseq_cli/train.py`` ``should_stop_early`` (``--patience``) keeps its
   best validation value and its count of validations without improvement in
   function attributes that no checkpoint holds: a resumed run restarts the
   count. Here ``Trainer.save_checkpoint`` adds them to the checkpoint's
   ``extra_state`` under ``"should_stop_early"`` and ``Trainer.load_checkpoint``
   puts them back (unless ``--reset-optimizer`` / ``--reset-meters``, the
   conditions under which fairseq restores its own ``best``).
3. ``fairseq_cli/train.py`` ``main`` saves the end-of-epoch checkpoint *before*
   ``trainer.lr_step(epoch, valid_loss)`` feeds that epoch's validation result
   to the scheduler; resuming from that checkpoint skips this step (fairseq's
   ``Trainer.load_checkpoint`` calls ``lr_step(epoch)`` without a loss). Here
   ``Trainer.load_checkpoint`` takes that step when the checkpoint was written
   at the end of an epoch (iterator state version 2 at position 0) and the
   scheduler state was restored (no ``--reset-optimizer``,
   ``--reset-lr-scheduler``, ``--reset-dataloader``).
4. ``fairseq/tasks/fairseq_task.py`` ``FairseqTask.get_batch_iterator`` builds
   the batches (which sentences of equal length share a batch) under
   ``numpy_seed(seed + epoch)`` of the epoch the iterator is created at, and
   reuses that iterator for every later epoch (only the order of the batches
   is reshuffled per epoch). An uninterrupted run creates it at epoch 1; a run
   resumed at epoch e > 1 creates it at e and trains on other batches from
   then on. Here ``Trainer.get_train_iterator``, when it has just created such
   a reusable iterator for an epoch e > 1, builds it again as for epoch 1 and
   sets it to epoch e (the resume then restores its position, as before).

:func:`install` wraps these five names (two methods of the scheduler class,
three of ``fairseq.trainer.Trainer``); each wrapper calls fairseq's method.
"""

import os
import sys

_MARK = "_fairseq_qknorm_exact_resume"
EARLY_STOP_KEY = "should_stop_early"


def _should_stop_early_functions():
    """Fairseq's ``should_stop_early`` as loaded in this process.

    In ``fairseq_cli.train`` (``fairseq-train``) or ``__main__``
    (``python -m fairseq_cli.train``).
    """
    suffix = os.path.join("fairseq_cli", "train.py")
    found = []
    for name in ("fairseq_cli.train", "__main__"):
        fn = getattr(sys.modules.get(name), "should_stop_early", None)
        if (
            callable(fn)
            and getattr(fn, "__code__", None) is not None
            and fn.__code__.co_filename.endswith(suffix)
        ):
            found.append(fn)
    return found


def early_stop_state():
    """``{"best": float, "num_runs": int}`` of fairseq's ``should_stop_early``.

    None before its first validation with ``--patience`` > 0.
    """
    for fn in _should_stop_early_functions():
        if getattr(fn, "best", None) is not None:
            return {"best": fn.best, "num_runs": getattr(fn, "num_runs", 0)}
    return None


def set_early_stop_state(state) -> None:
    """Put :func:`early_stop_state`'s dict back into ``should_stop_early``."""
    for fn in _should_stop_early_functions():
        fn.best = state["best"]
        fn.num_runs = state["num_runs"]


def _wrap_plateau(cls):
    fairseq_state_dict, fairseq_load_state_dict = cls.state_dict, cls.load_state_dict

    def state_dict(self):
        """Fairseq's state plus ``num_bad_epochs`` (fairseq PR #4071)."""
        state = fairseq_state_dict(self)
        state["num_bad_epochs"] = self.lr_scheduler.num_bad_epochs
        return state

    def load_state_dict(self, state_dict):
        fairseq_load_state_dict(self, state_dict)
        if "num_bad_epochs" in state_dict:
            self.lr_scheduler.num_bad_epochs = state_dict["num_bad_epochs"]

    return state_dict, load_state_dict


def _wrap_trainer(cls):
    fairseq_save, fairseq_load = cls.save_checkpoint, cls.load_checkpoint
    fairseq_get_train_iterator = cls.get_train_iterator

    def save_checkpoint(self, filename, extra_state):
        """fairseq's; ``extra_state`` also holds ``should_stop_early``'s state."""
        state = early_stop_state()
        if state is not None:
            extra_state = {**extra_state, EARLY_STOP_KEY: state}
        return fairseq_save(self, filename, extra_state)

    def load_checkpoint(
        self,
        filename,
        reset_optimizer=False,
        reset_lr_scheduler=False,
        optimizer_overrides=None,
        reset_meters=False,
    ):
        """Fairseq's, then the early-stopping state and the pending ``lr_step``.

        Restores the early-stopping state and takes the end-of-epoch ``lr_step(epoch, valid_loss)``
        the checkpoint was saved before.
        """
        extra_state = fairseq_load(
            self,
            filename,
            reset_optimizer=reset_optimizer,
            reset_lr_scheduler=reset_lr_scheduler,
            optimizer_overrides=optimizer_overrides,
            reset_meters=reset_meters,
        )
        if extra_state is None:
            return extra_state
        if EARLY_STOP_KEY in extra_state and not reset_optimizer and not reset_meters:
            set_early_stop_state(extra_state[EARLY_STOP_KEY])
        itr = extra_state.get("train_iterator", {})
        end_of_epoch = (
            itr.get("version", 1) >= 2
            and itr.get("iterations_in_epoch") == 0
            and itr.get("epoch", 1) > 1
        )
        if (
            end_of_epoch
            and extra_state.get("val_loss") is not None
            and not (reset_optimizer or reset_lr_scheduler or self.cfg.checkpoint.reset_dataloader)
        ):
            # fairseq_cli/train.py main: lr = trainer.lr_step(epoch_itr.epoch, valid_losses[0])
            self.lr_step(itr["epoch"] - 1, extra_state["val_loss"])
        return extra_state

    def get_train_iterator(
        self,
        epoch,
        combine=True,
        load_dataset=True,
        data_selector=None,
        shard_batch_itr=True,
        disable_iterator_cache=False,
    ):
        """Fairseq's, except for a reusable iterator first created at epoch > 1.

        Such an iterator gets the batches of epoch 1, as in a run that never stopped.
        """
        cached = dict(self.task.dataset_to_epoch_iter)
        kwargs = dict(
            combine=combine,
            data_selector=data_selector,
            shard_batch_itr=shard_batch_itr,
            disable_iterator_cache=disable_iterator_cache,
        )
        itr = fairseq_get_train_iterator(self, epoch, load_dataset=load_dataset, **kwargs)
        dataset = self.task.dataset(self.cfg.dataset.train_subset)
        if (
            epoch > 1
            and self.task.dataset_to_epoch_iter.get(dataset) is itr
            and cached.get(dataset) is not itr
        ):
            del self.task.dataset_to_epoch_iter[dataset]
            itr = fairseq_get_train_iterator(self, 1, load_dataset=False, **kwargs)
            itr.epoch = epoch  # what EpochBatchIterator(epoch=epoch) sets
        return itr

    return save_checkpoint, load_checkpoint, get_train_iterator


def install() -> None:
    """Wrap the scheduler's and the trainer's checkpoint methods.

    Idempotent; see the module docstring for the fairseq lines worked around.
    """
    from fairseq.optim.lr_scheduler.reduce_lr_on_plateau import ReduceLROnPlateauLRSchedule
    from fairseq.trainer import Trainer

    for cls, wrap, names in (
        (ReduceLROnPlateauLRSchedule, _wrap_plateau, ("state_dict", "load_state_dict")),
        (Trainer, _wrap_trainer, ("save_checkpoint", "load_checkpoint", "get_train_iterator")),
    ):
        if getattr(getattr(cls, names[0]), _MARK, False):
            continue
        for name, fn in zip(names, wrap(cls)):
            setattr(fn, _MARK, True)
            fn.__wrapped__ = getattr(cls, name)
            setattr(cls, name, fn)
