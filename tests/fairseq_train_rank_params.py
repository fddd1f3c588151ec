"""``fairseq-train`` that also writes every rank's parameters: a test helper for DDP.

fairseq writes checkpoints on rank 0 only. Run under torchrun exactly like
``fairseq-train`` (this calls fairseq's own ``fairseq_cli.train.cli_main``);
each time fairseq saves, every rank also writes its model's state dict to
``{--save-dir}/params_rank{R}.pt``, so a test can compare the ranks.

Usage: ``torchrun --standalone --nproc_per_node N tests/fairseq_train_rank_params.py
DATA --save-dir DIR ...`` (any fairseq-train arguments).
"""

import os

import torch
from fairseq_cli import train as fairseq_train  # first: sets up logging as fairseq-train does

checkpoint_utils = fairseq_train.checkpoint_utils
_fairseq_save_checkpoint = checkpoint_utils.save_checkpoint


def save_checkpoint(cfg, trainer, epoch_itr, val_loss):
    saved = _fairseq_save_checkpoint(cfg, trainer, epoch_itr, val_loss)
    state = {k: v.detach().cpu().clone() for k, v in trainer.get_model().state_dict().items()}
    torch.save(state, os.path.join(cfg.save_dir, f"params_rank{trainer.data_parallel_rank}.pt"))
    return saved


if __name__ == "__main__":
    checkpoint_utils.save_checkpoint = save_checkpoint  # fairseq_cli.train looks it up per call
    fairseq_train.cli_main()
