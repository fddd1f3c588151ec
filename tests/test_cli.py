"""End to end through fairseq's real CLIs with --user-dir on a generated corpus.

Every test uses the module's real fairseq-train runs (and fairseq-generate/-interactive or the
hub interface on their checkpoint): all of them are end-to-end tests, marked slow."""

import re

import pytest
import torch

from conftest import PLUGIN_DIR, run_cli, tiny_model, tiny_training

pytestmark = pytest.mark.slow

TRAIN_ARGS = [
    "--user-dir",
    PLUGIN_DIR,
    "--arch",
    "transformer_qknorm_paper_proxy",
    "--qk-norm-length",
    "12",
    *tiny_model(layers=2, dim=32, heads=None, dropout=None),
    *tiny_training(lr="3e-3", max_tokens="800"),
    "--lr-scheduler",
    "inverse_sqrt",
    "--warmup-updates",
    "5",
    "--required-batch-size-multiple",
    "1",
    "--no-epoch-checkpoints",
    "--log-format",
    "simple",
    "--log-interval",
    "5",
    "--attn-stats-interval",
    "5",
]


@pytest.fixture(scope="module")
def trained(toy_data, tmp_path_factory):
    """Train 15 updates, then resume to 25: returns (bin_dir, save_dir, logs)."""
    _, bin_dir = toy_data
    save = tmp_path_factory.mktemp("ckpt")
    first = run_cli(
        ["fairseq-train", bin_dir, *TRAIN_ARGS, "--max-update", "15", "--save-dir", save]
    )
    resumed = run_cli(
        ["fairseq-train", bin_dir, *TRAIN_ARGS, "--max-update", "25", "--save-dir", save]
    )
    return bin_dir, save, first.stdout + first.stderr, resumed.stdout + resumed.stderr


def test_train_logs_qknorm_health_and_saves(trained):
    _, save, log, _ = trained
    assert (save / "checkpoint_last.pt").exists() and (save / "checkpoint_best.pt").exists()
    assert log.count("QKNorm g0 = 7.044394 (qk_norm_length L = 12)") == 1  # log2(12^2 - 12)
    assert re.search(r"qknorm_g_dec1_cross[ =]7\.\d+", log)
    assert re.search(r"attn_entropy_enc0_self[ =]\d", log)


def test_resume_continues_from_checkpoint_last(trained):
    _, save, _, resumed = trained
    assert "Loaded checkpoint" in resumed and "@ 15 updates" in resumed
    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["optimizer_history"][-1]["num_updates"] == 25
    g = [v for k, v in state["model"].items() if k.endswith("qk_norm_g")]
    assert len(g) == 6 and all(t.dtype == torch.float32 for t in g)


def test_generate_with_checkpoint_outputs_every_sentence(trained, toy_data):
    raw, _ = toy_data
    bin_dir, save, _, _ = trained
    n_test = sum(1 for _ in open(raw / "test.src"))
    proc = run_cli(
        [
            "fairseq-generate",
            bin_dir,
            "--user-dir",
            PLUGIN_DIR,
            "--path",
            save / "checkpoint_best.pt",
            "--beam",
            "4",
            "--batch-size",
            "8",
            "--required-batch-size-multiple",
            "1",
            "--num-workers",
            "0",
        ]
    )
    ids = sorted(int(m) for m in re.findall(r"^H-(\d+)\t", proc.stdout, flags=re.M))
    assert ids == list(range(n_test))


def test_interactive_translates(trained):
    bin_dir, save, _, _ = trained
    proc = run_cli(
        [
            "fairseq-interactive",
            bin_dir,
            "--user-dir",
            PLUGIN_DIR,
            "--path",
            save / "checkpoint_last.pt",
            "--beam",
            "2",
            "--source-lang",
            "src",
            "--target-lang",
            "tgt",
        ],
        input="w1 w2 w3\nw4 w5\n",
    )
    hyps = re.findall(r"^H-(\d+)\t(\S+)\t(.*)$", proc.stdout, flags=re.M)
    assert [h[0] for h in hyps] == ["0", "1"]
    assert all(h[2].strip() for h in hyps)


def test_hub_interface_translates(trained):
    import fairseq_qknorm  # noqa: F401  (registers the model, patches checkpoint loading)
    from fairseq_qknorm.models.transformer_qknorm import TransformerQKNormModel

    bin_dir, save, _, _ = trained
    hub = TransformerQKNormModel.from_pretrained(
        str(save), checkpoint_file="checkpoint_last.pt", data_name_or_path=str(bin_dir)
    )
    hub.eval()
    out = hub.translate(["w1 w2 w3", "w7 w8"], beam=2)
    assert len(out) == 2 and all(isinstance(o, str) and o for o in out)
    assert hub.models[0].decoder.layers[0].encoder_attn.qk_norm
