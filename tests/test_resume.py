"""A resumed fairseq-train run continues exactly (fairseq_qknorm.resume_compat): LR schedule
(ReduceLROnPlateau's patience count, the end-of-epoch step), early stopping, data order."""

import re

import pytest
import torch

from conftest import PLUGIN_DIR, run_cli, tiny_model, tiny_training


def _plateau(patience=3, shrink=0.8, lr=1e-3):
    """fairseq's reduce_lr_on_plateau scheduler over a one-parameter Adam, as fairseq-train
    builds it."""
    from fairseq import optim
    from fairseq.optim.lr_scheduler import build_lr_scheduler
    from omegaconf import OmegaConf

    import fairseq_qknorm  # noqa: F401  (installs the fix)

    opt_cfg = OmegaConf.create(
        {
            "_name": "adam",
            "lr": [lr],
            "adam_betas": "(0.9, 0.999)",
            "adam_eps": 1e-8,
            "weight_decay": 0.0,
            "use_old_adam": False,
            "fp16_adam_stats": False,
            "tpu": False,
        }
    )
    optimizer = optim.build_optimizer(opt_cfg, [torch.nn.Parameter(torch.zeros(2))])
    sched_cfg = OmegaConf.create(
        {
            "_name": "reduce_lr_on_plateau",
            "lr_shrink": shrink,
            "lr_threshold": 1e-4,
            "lr_patience": patience,
            "warmup_updates": 0,
            "warmup_init_lr": -1,
            "lr": [lr],
            "maximize_best_checkpoint_metric": False,
        }
    )
    return build_lr_scheduler(sched_cfg, optimizer), optimizer


def test_plateau_patience_count_survives_a_checkpoint():
    """Issue 10 item 6: after 3 bad epochs (patience 3), one more takes the lr to 8e-4 in
    an uninterrupted run and in a saved-and-reloaded one."""
    run, opt = _plateau()
    for epoch, valid_loss in enumerate([1.0, 1.0, 1.0, 1.0], start=1):  # best, then 3 bad
        run.step(epoch, valid_loss)
    assert opt.get_lr() == 1e-3
    state = run.state_dict()
    assert state == {"best": 1.0, "last_epoch": 4, "num_bad_epochs": 3}  # fairseq PR #4071 keys

    resumed, resumed_opt = _plateau()
    resumed_opt.load_state_dict(opt.state_dict())
    resumed.load_state_dict(state)
    for sched, o in ((run, opt), (resumed, resumed_opt)):
        sched.step(5, 1.0)
        assert o.get_lr() == pytest.approx(8e-4, rel=1e-12)


def test_plateau_state_without_the_count_loads_as_before():
    """Checkpoints written without the fix (fairseq's two keys) still load: count 0."""
    sched, opt = _plateau(patience=1)
    sched.load_state_dict({"best": 0.5, "last_epoch": 7})
    assert (sched.lr_scheduler.best, sched.lr_scheduler.num_bad_epochs) == (0.5, 0)
    sched.step(8, 0.6)
    assert opt.get_lr() == 1e-3  # 1 bad epoch, patience 1: no decay yet
    sched.step(9, 0.6)
    assert opt.get_lr() == pytest.approx(8e-4, rel=1e-12)


def test_early_stopping_state_round_trip(monkeypatch):
    """should_stop_early's counter, read into a checkpoint and put back into a fresh process
    (its function attributes reset), takes the same stop decision."""
    from fairseq_cli.train import should_stop_early
    from omegaconf import OmegaConf

    from fairseq_qknorm import resume_compat

    cfg = OmegaConf.create(
        {"checkpoint": {"patience": 2, "maximize_best_checkpoint_metric": False}}
    )
    monkeypatch.setattr(should_stop_early, "best", None, raising=False)
    monkeypatch.setattr(should_stop_early, "num_runs", 0, raising=False)
    assert resume_compat.early_stop_state() is None
    assert not should_stop_early(cfg, 1.0) and not should_stop_early(cfg, 1.5)
    state = resume_compat.early_stop_state()
    assert state == {"best": 1.0, "num_runs": 1}

    should_stop_early.best, should_stop_early.num_runs = None, 0  # a new process
    assert not should_stop_early(cfg, 1.5)  # without the state: a fresh start
    resume_compat.set_early_stop_state(state)
    assert should_stop_early(cfg, 1.5)  # second validation without improvement: stop


def test_install_is_idempotent():
    from fairseq.optim.lr_scheduler.reduce_lr_on_plateau import ReduceLROnPlateauLRSchedule
    from fairseq.trainer import Trainer

    import fairseq_qknorm

    def patched():
        return [
            ReduceLROnPlateauLRSchedule.state_dict,
            ReduceLROnPlateauLRSchedule.load_state_dict,
            Trainer.save_checkpoint,
            Trainer.load_checkpoint,
            Trainer.get_train_iterator,
        ]

    names = patched()
    fairseq_qknorm.resume_compat.install()
    assert patched() == names
    assert all(fn.__wrapped__.__module__.startswith("fairseq.") for fn in names)


# -------------------------------------------------- interrupted == uninterrupted
# 300 toy sentences at --max-tokens 400: 7 updates per epoch. The validation metric is the
# number of sentences per validation batch (bsz), constant: a plateau from the second
# validation on, so the LR schedule and early stopping depend only on their counters.
# Validations: end of every epoch (7, 14, 21, 28) and every 10 updates (--save-interval-updates).
# Scheduler (end of epoch, after the warmup of 6 updates; patience 1): best at epoch 1, 1 bad
# epoch at 2, decay x0.8 at 3 (lr 8e-4 from update 22), 1 bad at 4.
# Early stopping (patience 6): the 6th validation without improvement (update 30) stops.
RESUME_ARGS = [
    "--user-dir",
    PLUGIN_DIR,
    "--arch",
    "transformer_qknorm_paper",
    "--qk-norm-length",
    "12",
    # dropout 0.1: fairseq reseeds every update: a resume must not change the masks
    *tiny_model(dropout=0.1),
    *tiny_training(lr="1e-3", max_tokens="400", seed="5"),
    "--lr-scheduler",
    "reduce_lr_on_plateau",
    "--lr-patience",
    "1",
    "--lr-shrink",
    "0.8",
    "--warmup-updates",
    "6",
    "--warmup-init-lr",
    "1e-7",
    "--best-checkpoint-metric",
    "bsz",
    "--patience",
    "6",
    "--save-interval-updates",
    "10",
    "--no-epoch-checkpoints",
    "--log-format",
    "simple",
    "--log-interval",
    "1",
]
MAX_EPOCH = 12  # never reached: early stopping ends both runs


def _lr_per_update(log):
    return {
        int(u): float(lr)
        for u, lr in re.findall(r"train_inner\W.*?num_updates=(\d+), lr=([0-9.e-]+)", log)
    }


def _early_stop_updates(log):
    """num_updates of the checkpoint fairseq saves when it stops early."""
    assert log.count("early stop since valid performance hasn't improved") == 1, log[-3000:]
    return int(re.findall(r"Saved checkpoint .* @ (\d+) updates", log)[-1])


@pytest.mark.slow
def test_stopped_and_resumed_run_equals_uninterrupted_run(toy_data, tmp_path):
    """Run B stops after epoch 2 (an end-of-epoch checkpoint, update 14) and at update 20
    (mid-epoch) and resumes each time; run A never stops. Same lr at every update, same early
    stop, same parameters (same batches and dropout masks), same scheduler state."""
    _, bin_dir = toy_data
    a, b = tmp_path / "a", tmp_path / "b"
    log_a = run_cli(
        ["fairseq-train", bin_dir, *RESUME_ARGS, "--max-epoch", MAX_EPOCH, "--save-dir", a]
    )
    log_a = log_a.stdout + log_a.stderr
    log_b = ""
    for stop in (
        ["--max-epoch", "2"],
        ["--max-epoch", MAX_EPOCH, "--max-update", "20"],
        ["--max-epoch", MAX_EPOCH],
    ):
        proc = run_cli(["fairseq-train", bin_dir, *RESUME_ARGS, *stop, "--save-dir", b])
        log_b += proc.stdout + proc.stderr
    assert log_b.count("Loaded checkpoint") == 2

    lr_a = _lr_per_update(log_a)
    assert sorted(lr_a) == list(range(1, 31))
    assert lr_a[6] == 1e-3 and lr_a[21] == 1e-3 and lr_a[22] == 8e-4  # warmup, decay at epoch 3
    assert _lr_per_update(log_b) == lr_a
    assert _early_stop_updates(log_a) == _early_stop_updates(log_b) == 30

    state_a, state_b = (torch.load(d / "checkpoint_last.pt", weights_only=False) for d in (a, b))
    for k, v in state_a["model"].items():
        assert torch.equal(v, state_b["model"][k]), k
    sched = [s["optimizer_history"][-1]["lr_scheduler_state"] for s in (state_a, state_b)]
    assert sched[0]["num_bad_epochs"] == sched[1]["num_bad_epochs"] == 1
    assert sched[0]["best"] == sched[1]["best"]
    assert (
        state_a["extra_state"]["should_stop_early"]
        == state_b["extra_state"]["should_stop_early"]
        == {"best": sched[0]["best"], "num_runs": 6}
    )
