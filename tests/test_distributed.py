"""Multi-process training on CPU: the shim (fairseq_qknorm.distributed_compat) and real
``torchrun ... fairseq-train --cpu --distributed-backend gloo`` runs.

Equivalence: with 2 processes, fairseq shuffles the whole list of batches with seed + epoch and
gives rank r the batches r, r + 2, ... (fairseq/data/iterators.py ``ordered_batches``: a shorter
shard gets an empty, zero-weight batch); ``--update-freq 2`` in one process groups the batches of
the same shuffled list in consecutive pairs (``GroupedIterator``). So update u sees the same two
batches in both setups, and the gradient is their sum divided by the same sample size.
"""

import re
from pathlib import Path

import pytest
import torch

from conftest import PLUGIN_DIR, VENV_BIN, run_cli, tiny_model, tiny_training

HELPER = Path(__file__).with_name("fairseq_train_rank_params.py")

TINY = tiny_model()
# 300 toy sentences at --max-tokens 400: 7 batches = 4 updates of 2 batches per epoch, the last
# one a single batch (rank 1 gets fairseq's empty batch): 6 updates cross an epoch boundary and
# a reshuffle.
TRAIN = [
    "--user-dir",
    PLUGIN_DIR,
    "--cpu",
    *tiny_training(lr="1e-3", max_tokens="400", seed="3"),
    "--no-epoch-checkpoints",
    "--log-format",
    "simple",
    "--log-interval",
    "1",
    *TINY,
]
UPDATES = 6
# Measured (AMD EPYC Zen 4, OMP_NUM_THREADS=1): 0.0, the two setups are bit-identical: a sum of
# two per-batch gradients does not depend on their order, torch's DDP pre-division by the world
# size 2 and fairseq's multiplication by it (Trainer.train_step, multiply_grads) are exact powers
# of two. Not guaranteed in general: with 3+ processes gloo's ring all-reduce sums in another
# order than update-freq's accumulation and 1/3 is inexact, and batches that record attention
# statistics take another (mathematically equal) attention path (1.2e-7 measured when the two
# setups recorded on different batches). 1e-6 is a few float32 ulps at the weights' magnitude
# after 6 Adam updates of lr 1e-3: far below any real difference (another batch changes the
# weights by ~1e-3).
ATOL = 1e-6


def torchrun(script, *args, nproc=2):
    return run_cli(
        [VENV_BIN / "torchrun", "--standalone", "--nproc_per_node", nproc, script, *args]
    )


def model_params(path):
    return torch.load(path, map_location="cpu", weights_only=False)["model"]


def max_abs_diff(a, b):
    assert a.keys() == b.keys()
    return max((a[k].double() - b[k].double()).abs().max().item() for k in a)


# ------------------------------------------------------------------ the shim
TORCHRUN_ENV = {"MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29999", "WORLD_SIZE": "2", "RANK": "1"}


def _dist_cfg(*flags):
    """``cfg.distributed_training`` of ``fairseq-train --cpu FLAGS`` as fairseq builds it."""
    from fairseq import options
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    import fairseq_qknorm  # noqa: F401  (installs the shim)

    args = options.parse_args_and_arch(
        options.get_training_parser(), ["unused", "--arch", "transformer_qknorm", "--cpu", *flags]
    )
    return convert_namespace_to_omegaconf(args).distributed_training


@pytest.fixture
def cpu_torchrun_env(monkeypatch):
    for k, v in TORCHRUN_ENV.items():
        monkeypatch.setenv(k, v)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)


@pytest.mark.slow
def test_cpu_torchrun_launch_is_set_up_from_the_environment(cpu_torchrun_env):
    from fairseq.distributed import utils as distributed_utils

    cfg = _dist_cfg("--distributed-backend", "gloo")
    assert cfg.distributed_world_size == 1  # fairseq's default without CUDA
    distributed_utils.infer_init_method(cfg)
    assert cfg.distributed_init_method == "env://"
    assert (cfg.distributed_world_size, cfg.distributed_rank) == (2, 1)
    assert cfg.distributed_no_spawn and cfg.device_id == 0


@pytest.mark.slow
def test_cpu_torchrun_launch_destroys_its_process_group_at_exit(
    cpu_torchrun_env, monkeypatch, tmp_path
):
    """A CPU torchrun launch registers the group's destruction at exit (before interpreter
    shutdown, where gloo's threads aborted a rank now and then), and it destroys a real group."""
    import atexit

    import torch.distributed as dist
    from fairseq.distributed import utils as distributed_utils

    from fairseq_qknorm import distributed_compat

    registered = []
    monkeypatch.setattr(atexit, "register", registered.append)
    distributed_utils.infer_init_method(_dist_cfg("--distributed-backend", "gloo"))
    assert registered == [distributed_compat._end_process_group]
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    assert dist.is_initialized()
    distributed_compat._end_process_group()
    assert not dist.is_initialized()
    distributed_compat._end_process_group()  # no group left: nothing to do


def test_cpu_torchrun_launch_with_nccl_is_a_clear_error(cpu_torchrun_env):
    from fairseq.distributed import utils as distributed_utils

    with pytest.raises(ValueError, match="--distributed-backend gloo"):
        distributed_utils.infer_init_method(_dist_cfg())  # fairseq's default nccl


@pytest.mark.parametrize("case", ["cuda", "no_torchrun", "one_process"])
@pytest.mark.slow
def test_other_launches_are_left_to_fairseq(cpu_torchrun_env, monkeypatch, case):
    """With CUDA, without torchrun's variables or with WORLD_SIZE 1, fairseq's own
    infer_init_method runs (here: its torchrun branch is reached only with CUDA)."""
    from fairseq.distributed import utils as distributed_utils

    calls = []

    def fairseq_torchrun_branch(cfg):  # records the call; spawns nothing
        calls.append(cfg)
        cfg.distributed_no_spawn = True

    monkeypatch.setattr(
        distributed_utils, "_infer_torch_distributed_launch_init", fairseq_torchrun_branch
    )
    if case == "cuda":
        monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    elif case == "no_torchrun":
        monkeypatch.delenv("RANK")
    else:
        monkeypatch.setenv("WORLD_SIZE", "1")
    world_size = 2 if case == "cuda" else 1
    cfg = _dist_cfg("--distributed-backend", "gloo", "--distributed-world-size", str(world_size))
    distributed_utils.infer_init_method(cfg)
    assert len(calls) == (case == "cuda")
    assert cfg.distributed_init_method is None  # not set by the shim


def test_install_is_idempotent_and_wraps_fairseqs_functions():
    from fairseq.distributed import utils as distributed_utils
    from fairseq.models import distributed_fairseq_model as dfm
    from torch.nn.parallel import DistributedDataParallel

    import fairseq_qknorm

    before = (distributed_utils.infer_init_method, dfm.DistributedDataParallel)
    fairseq_qknorm.distributed_compat.install()
    assert (distributed_utils.infer_init_method, dfm.DistributedDataParallel) == before
    assert dfm.DistributedDataParallel.__wrapped__ is DistributedDataParallel
    assert distributed_utils.infer_init_method.__wrapped__.__module__ == "fairseq.distributed.utils"


@pytest.mark.slow
def test_pytorch_ddp_wraps_a_cpu_model(tmp_path, toy_task):
    """fairseq's DistributedFairseqModel with --ddp-backend pytorch_ddp (its default) on the
    CPU, in a real one-process gloo group; torch alone rejects fairseq's device_ids there."""
    import torch.distributed as dist
    from fairseq.models import DistributedFairseqModel
    from torch.nn.parallel import DistributedDataParallel

    from conftest import build_model

    model, _ = build_model(toy_task, "transformer_qknorm_paper", TINY + ["--qk-norm-length", "8"])
    dist.init_process_group(
        "gloo", init_method=f"file://{tmp_path / 'store'}", rank=0, world_size=1
    )
    try:
        with pytest.raises(ValueError, match="device_ids"):
            DistributedDataParallel(model, device_ids=[0], output_device=0)
        args = _dist_cfg("--ddp-backend", "pytorch_ddp")
        wrapped = DistributedFairseqModel(args, model, dist.group.WORLD, torch.device("cpu"))
        d = toy_task.source_dictionary
        src = torch.full((2, 4), d.nspecial + 1)
        out, _ = wrapped(src, torch.tensor([4, 4]), src)
        out.float().sum().backward()
        g = model.decoder.layers[0].encoder_attn.qk_norm_g
        assert g.grad is not None and torch.isfinite(g.grad).all()
    finally:
        dist.destroy_process_group()


def test_checkpoint_broadcast_load_is_trusted():
    """Ranks > 0 unpickle the checkpoint rank 0 broadcasts with fairseq.distributed.utils'
    ``torch.load`` (``_broadcast_object_slow``); checkpoints hold configs, not only tensors."""
    import io

    from fairseq.distributed import utils as distributed_utils
    from omegaconf import OmegaConf

    import fairseq_qknorm  # noqa: F401

    buf = io.BytesIO()
    torch.save({"cfg": OmegaConf.create({"arch": "transformer_twt"})}, buf)
    with pytest.raises(Exception, match="[Ww]eights only"):
        torch.load(io.BytesIO(buf.getvalue()))
    state = distributed_utils.torch.load(io.BytesIO(buf.getvalue()), map_location="cpu")
    assert state["cfg"].arch == "transformer_twt"


# ------------------------------------------------------- real torchrun runs
def _train_lines(log):
    """``{num_updates: "loss=..., nll_loss=..., wpb=..., bsz=..."}`` of train_inner lines."""
    return {
        int(m.group(3)): f"{m.group(1)}, {m.group(2)}"
        for m in re.finditer(
            r"train_inner\W.*?(loss=[^,]+, nll_loss=[^,]+).*?(wpb=[^,]+, bsz=[^,]+), "
            r"num_updates=(\d+)",
            log,
        )
    }


def _one_vs_two_processes(bin_dir, tmp_path, arch, extra, stop_at=None):
    """Train UPDATES updates with 1 process x --update-freq 2 and with 2 processes (torchrun,
    gloo), the latter stopped at ``stop_at`` (by fairseq-train itself) and resumed when given.
    Returns (log of the
    1-process run, log of the 2-process run(s), its checkpoint_last model, each rank's params)."""
    args = [bin_dir, *TRAIN, "--arch", arch, *extra]
    one = run_cli(
        [
            "fairseq-train",
            *args,
            "--max-update",
            UPDATES,
            "--update-freq",
            "2",
            "--save-dir",
            tmp_path / "one",
        ]
    )
    ddp = tmp_path / "ddp"
    log = ""
    # the stopped part runs fairseq-train itself, as a script would; the last run the helper
    # that also saves rank 1's parameters
    runs = ([(VENV_BIN / "fairseq-train", stop_at)] if stop_at else []) + [(HELPER, UPDATES)]
    for script, max_update in runs:
        proc = torchrun(
            script,
            *args,
            "--max-update",
            max_update,
            "--distributed-backend",
            "gloo",
            "--save-dir",
            ddp,
        )
        log += proc.stdout + proc.stderr
    assert "distributed init (rank 1): env://" in log
    ranks = [torch.load(ddp / f"params_rank{r}.pt", weights_only=True) for r in (0, 1)]
    assert max_abs_diff(model_params(ddp / "checkpoint_last.pt"), ranks[0]) == 0
    assert max_abs_diff(model_params(tmp_path / "one/checkpoint_last.pt"), ranks[0]) <= ATOL
    for k in ranks[0]:
        assert torch.equal(ranks[0][k], ranks[1][k]), k
    # the same 6 updates on the same sentences: logged loss, words and sentences per update
    expected = _train_lines(one.stdout + one.stderr)
    assert sorted(expected) == list(range(1, UPDATES + 1))
    assert _train_lines(log) == expected
    return one.stdout + one.stderr, log, ranks


@pytest.mark.slow
def test_twt_two_processes_equal_update_freq_two(toy_data, tmp_path):
    """2 processes x batch B == 1 process x --update-freq 2 after 6 updates; the ranks hold
    bit-identical parameters, every ScaleNorm scale among them."""
    _, _, ranks = _one_vs_two_processes(toy_data[1], tmp_path, "transformer_twt", [])
    assert sum(k.endswith("norm.scale") for k in ranks[0]) == 7  # 1+1 layers and final norms


@pytest.mark.slow
def test_qknorm_two_processes_with_attention_statistics_and_resume(toy_data, tmp_path):
    """The same for transformer_qknorm_paper (every QKNorm g identical on both ranks), with
    attention statistics recorded on every forward, training and validation (no rank waits
    for another, the all-reduced loss is unchanged), and the 2-process run stopped at 3
    updates and resumed (rank 0 broadcasts the checkpoint it loads)."""
    one, log, ranks = _one_vs_two_processes(
        toy_data[1],
        tmp_path,
        "transformer_qknorm_paper",
        ["--qk-norm-length", "12", "--attn-stats-interval", "1"],
        stop_at=3,
    )
    assert sum(k.endswith("qk_norm_g") for k in ranks[0]) == 3
    assert "Loaded checkpoint" in log and "@ 3 updates" in log
    for name in ("enc0_self", "dec0_self", "dec0_cross"):
        assert re.search(rf"train_inner\W.*attn_entropy_{name}=\d", log)
        assert re.search(rf"valid\W.*attn_maxlogit_{name} \d", log)
