"""BPE-dropout resampled per epoch (Provilkov et al. 2020): ``bpe.sh --bpe-dropout-samples K``
segments the training split K times, ``binarize.sh`` makes fairseq epoch shards against one
dictionary covering them all, ``train.sh`` trains on the data path ``BIN:BIN/shards/2:...``."""

import json

import pytest

from conftest import PLUGIN_DIR, make_env, make_tiny_ted, out, run_script, train_commands

K = 2
#: fairseq-preprocess for the dictionary, the main data and each shard: over 30 s
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def resampled(tmp_path_factory):
    root = tmp_path_factory.mktemp("bpe_epochs")
    data, work = root / "data", root / "work"
    sizes = make_tiny_ted(data)
    env = make_env(work)
    for script, args in (
        ("prepare_data.sh", ["--data-dir", data]),
        ("bpe.sh", ["--merges", "50", "--bpe-dropout", "0.3", "--bpe-dropout-samples", K]),
        ("binarize.sh", []),
    ):
        p = run_script(script, "gl-en", *args, env=env, timeout=1200)  # a far bound
        assert p.returncode == 0, out(p)
        if script == "bpe.sh":
            assert f"resampled per epoch: {K} segmentations" in p.stderr, out(p)
    return work, env, sizes


def _lines(path):
    return path.read_text(encoding="utf-8").splitlines()


def test_consecutive_epochs_load_different_segmentations_of_the_same_sentences(resampled):
    """What fairseq loads per epoch through the task (load_dataset with epoch=1..K+1) from the
    data path train.sh passes: sample ((e-1) % K) + 1, so consecutive epochs differ; each is a
    segmentation of the same raw sentence; the one dictionary covers every sample (no <unk>)."""
    from fairseq import options, tasks

    import fairseq_qknorm  # noqa: F401

    work, env, sizes = resampled
    bpe, bin_dir = work / "data/bpe/gl-en", work / "data/bin/gl-en"
    p = run_script(
        "train.sh", "gl-en", "twt", "--profile", "cpu-proxy", "--dry-run", env=env, timeout=600
    )
    assert p.returncode == 0, out(p)
    (cmd,) = train_commands(p.stdout)
    data_path = cmd[3]
    assert data_path == f"{bin_dir}:{bin_dir}/shards/2"
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(
        parser, [data_path, "--user-dir", str(PLUGIN_DIR), "--arch", "transformer_twt_proxy",
                 "--source-lang", "gl", "--target-lang", "en"]
    )  # fmt: skip
    task = tasks.setup_task(args)
    d = task.source_dictionary
    seen = []
    for epoch in range(1, K + 2):
        task.load_dataset("train", epoch=epoch)
        ds = task.dataset("train")
        assert len(ds) == sizes["train"]
        for i in range(len(ds)):
            assert d.unk() not in ds[i]["source"].tolist() + ds[i]["target"].tolist()
        seen.append([d.string(ds[i]["source"]) for i in range(len(ds))])
    files = [bpe / "train.gl"] + [bpe / f"epochs/{k}/train.gl" for k in range(2, K + 1)]
    for epoch, lines in enumerate(seen[:K]):  # epoch e = sample e (fairseq's order by index)
        assert lines == _lines(files[epoch])
    assert seen[K] == seen[0]  # epoch K+1 wraps to sample 1
    raw = _lines(work / "data/raw/gl-en/train.gl")
    deterministic = _lines(bpe / "deterministic/train.gl")
    for a, b in zip(seen, seen[1:]):
        changed = sum(x != y for x, y in zip(a, b))
        assert changed > sizes["train"] // 5, changed  # p = 0.3: most sentences differ
    for lines in seen + [deterministic]:
        assert [x.replace("@@ ", "") for x in lines] == raw  # the same sentences
    assert seen[0] != deterministic
    # valid (dev) is the deterministic segmentation, from the first path only
    task.load_dataset("valid", epoch=2)
    valid = task.dataset("valid")
    assert [d.string(valid[i]["source"]) for i in range(len(valid))] == _lines(bpe / "dev.gl")


def test_dictionary_covers_every_sample_and_settings_are_recorded(resampled):
    work, env, _ = resampled
    bpe, bin_dir = work / "data/bpe/gl-en", work / "data/bin/gl-en"
    vocab = {line.split()[0] for line in _lines(bin_dir / "dict.gl.txt")}
    for f in [bpe / "deterministic/train.gl", bpe / "train.gl", bpe / "epochs/2/train.gl"]:
        assert {t for line in _lines(f) for t in line.split()} <= vocab
    for f in ["dict.en.txt", "dict.gl.txt"]:
        assert not (bin_dir / "shards/2" / f).exists()  # one dictionary, in the first path
    assert f"bpe_dropout_samples={K}" in (bpe / ".settings").read_text()
    manifest = json.loads((bpe / "bpe.json").read_text())["bpe_dropout"]
    assert manifest["samples"] == K and manifest["seeds"] == [1, 2]
    assert "resampled per epoch" in manifest["sample"]
    stats = json.loads((bpe / "length_stats.json").read_text())
    assert stats["segmentation"] == "deterministic"  # QKNorm's L
    done = (bin_dir / ".done").read_text()  # the shards are part of the binarized data
    shard_files = [
        f"shards/{k}/train.gl-en.{lang}.{ext}"
        for k in range(2, K + 1)
        for lang in ("gl", "en")
        for ext in ("bin", "idx")
    ]
    assert all(f"  {f}\n" in done for f in shard_files)
    bpe_args = ["--merges", "50", "--bpe-dropout", "0.3", "--bpe-dropout-samples", K]
    for script, args in (("bpe.sh", bpe_args), ("binarize.sh", [])):
        p = run_script(script, "gl-en", *args, env=env, timeout=600)
        assert p.returncode == 0 and p.stdout.startswith("skip:"), out(p)


@pytest.mark.parametrize(
    "args, message",
    [
        (["--bpe-dropout-samples", "3"], "needs --bpe-dropout P > 0"),
        (["--bpe-dropout-samples", "0", "--bpe-dropout", "0.1"], "must be a positive integer"),
        (["--bpe-dropout-samples", "2", "--bpe-dropout", "0.1", "--tool", "sentencepiece"],
         "subword-nmt only"),
    ],
)  # fmt: skip
def test_bad_sample_counts_are_usage_errors(resampled, args, message):
    _, env, _ = resampled
    p = run_script("bpe.sh", "gl-en", *args, env=env, timeout=600)
    assert p.returncode == 2 and message in p.stderr, out(p)
