"""Checkpoint averaging (qknorm_model_tools.average_checkpoints) on real fairseq-train
checkpoints; the average decodes in real fairseq-generate under torch >= 2.6."""

import os
import re
import sys

import pytest
import torch

from conftest import PLUGIN_DIR, run_cli, tiny_model, tiny_training

# QKNorm g and ScaleNorm scales in one model: the QKNorm paper model with ScaleNorm
TRAIN = [
    "--user-dir",
    PLUGIN_DIR,
    "--arch",
    "transformer_qknorm_paper",
    "--norm-type",
    "scalenorm",
    "--qk-norm-length",
    "12",
    *tiny_model(),
    *tiny_training(lr="3e-3", max_tokens="400"),
    "--max-epoch",
    "3",
    "--save-interval-updates",
    "5",
]


@pytest.fixture(scope="module")
def save_dir(toy_data, tmp_path_factory):
    """3 epochs of 7 updates: checkpoint1..3.pt and checkpoint_E_U.pt every 5 updates."""
    _, bin_dir = toy_data
    save = tmp_path_factory.mktemp("avg_ckpt")
    run_cli(["fairseq-train", bin_dir, *TRAIN, "--save-dir", save])
    return save


def average(*args):
    """The command line, run for real (a subprocess)."""
    return run_cli(
        [sys.executable, "-m", "qknorm_model_tools.average_checkpoints", *args], check=False
    )


def average_main(capsys, *args):
    """The command line's main() in this process: (exit status, stderr)."""
    from qknorm_model_tools.average_checkpoints import main

    status = main([str(a) for a in args])
    return status, capsys.readouterr().err


def model(path):
    return torch.load(path, map_location="cpu", weights_only=False)["model"]


@pytest.mark.slow
def test_averaging_copies_of_one_checkpoint_gives_that_checkpoint(save_dir, tmp_path):
    from qknorm_model_tools.average_checkpoints import average_checkpoints

    path = str(save_dir / "checkpoint2.pt")
    state = average_checkpoints([path, path, path])
    for k, v in model(path).items():
        assert state["model"][k].dtype == v.dtype and torch.equal(state["model"][k], v), k
    assert "last_optimizer_state" not in state
    assert state["optimizer_history"][-1]["num_updates"] == 14  # the first input's history


@pytest.mark.slow
def test_average_of_two_checkpoints_is_the_mean_of_every_parameter(save_dir, tmp_path):
    a, b = save_dir / "checkpoint1.pt", save_dir / "checkpoint3.pt"
    proc = average("--inputs", a, b, "--output", tmp_path / "avg.pt")
    assert proc.returncode == 0, proc.stderr
    avg, ma, mb = model(tmp_path / "avg.pt"), model(a), model(b)
    assert avg.keys() == ma.keys()
    scalars = [k for k in ma if k.endswith(("qk_norm_g", "norm.scale"))]
    assert len(scalars) == 3 + 7  # 3 attention modules, 7 ScaleNorms (1+1 layers, final norms)
    for k in scalars:
        assert ma[k] != mb[k], k  # trained: a real average, not of equal values
    for k in ma:
        if ma[k].is_floating_point():
            mean = torch.stack([ma[k].double(), mb[k].double()]).mean(0).float()
            assert torch.equal(avg[k], mean), k


def test_last_n_checkpoints_of_a_run(save_dir, tmp_path, capsys):
    from qknorm_model_tools.average_checkpoints import average_checkpoints, last_checkpoints

    assert [os.path.basename(p) for p in last_checkpoints(str(save_dir), 2, False)] == [
        "checkpoint3.pt",
        "checkpoint2.pt",
    ]
    assert [os.path.basename(p) for p in last_checkpoints(str(save_dir), 2, True, 15)] == [
        "checkpoint_3_15.pt",
        "checkpoint_2_10.pt",
    ]
    out = tmp_path / "avg2.pt"
    assert (
        average_main(capsys, "--inputs", save_dir, "--num-epoch-checkpoints", "2", "--output", out)[
            0
        ]
        == 0
    )
    expected = average_checkpoints(
        [str(save_dir / "checkpoint3.pt"), str(save_dir / "checkpoint2.pt")]
    )["model"]
    assert all(torch.equal(v, expected[k]) for k, v in model(out).items())


@pytest.mark.parametrize(
    "args,message",
    [
        (["--num-epoch-checkpoints", "4"], r"found 3 checkpointE\.pt files, need 4"),
        (
            ["--num-update-checkpoints", "2", "--checkpoint-upper-bound", "7"],
            r"found 1 checkpoint_E_U\.pt files up to 7, need 2",
        ),
        (["--num-epoch-checkpoints", "0"], r"need at least 1"),
    ],
)
def test_too_few_checkpoints_is_a_clear_error(save_dir, tmp_path, capsys, args, message):
    status, err = average_main(capsys, "--inputs", save_dir, *args, "--output", tmp_path / "x.pt")
    assert status == 1 and re.search(message, err), err
    assert not (tmp_path / "x.pt").exists()


def test_checkpoints_of_other_models_are_refused(save_dir, tmp_path, capsys):
    state = torch.load(save_dir / "checkpoint1.pt", weights_only=False)
    del state["model"]["encoder.layers.0.self_attn.qk_norm_g"]
    torch.save(state, tmp_path / "other.pt")
    status, err = average_main(
        capsys,
        "--inputs",
        save_dir / "checkpoint1.pt",
        tmp_path / "other.pt",
        "--output",
        tmp_path / "x.pt",
    )
    assert status == 1 and "other.pt: parameter names differ" in err
    status, err = average_main(
        capsys, "--inputs", save_dir / "missing.pt", "--output", tmp_path / "x.pt"
    )
    assert status == 1 and "no such checkpoint file" in err
    assert not (tmp_path / "x.pt").exists()


@pytest.mark.slow
def test_averaged_checkpoint_decodes_every_test_sentence(save_dir, toy_data, tmp_path):
    """Real fairseq-generate on the average of the last 3 update checkpoints; no
    TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD needed."""
    raw, bin_dir = toy_data
    out = tmp_path / "checkpoint_avg3.pt"
    proc = average("--inputs", save_dir, "--num-update-checkpoints", "3", "--output", out)
    assert proc.returncode == 0, proc.stderr
    # the tool's own two lines, fairseq's import-time INFO line (tensorboardX) left out
    inputs = " ".join(
        str(save_dir / f"checkpoint_{e}_{u}.pt") for e, u in ((3, 20), (3, 15), (2, 10))
    )
    assert proc.stderr.splitlines() == [f"averaging 3 checkpoints: {inputs}", f"wrote {out}"]
    assert "TORCH_FORCE_NO_WEIGHTS_ONLY_LOAD" not in os.environ
    gen = run_cli(
        [
            "fairseq-generate",
            bin_dir,
            "--user-dir",
            PLUGIN_DIR,
            "--path",
            out,
            "--beam",
            "2",
            "--batch-size",
            "8",
            "--required-batch-size-multiple",
            "1",
            "--num-workers",
            "0",
        ]
    )
    n_test = sum(1 for _ in open(raw / "test.src"))
    ids = sorted(int(m) for m in re.findall(r"^H-(\d+)\t", gen.stdout, flags=re.M))
    assert ids == list(range(n_test))
