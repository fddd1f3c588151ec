"""Padding-aware batching (``--batching bucketed`` of the task ``translation_word_dropout``):
exactly fairseq's sentences, similar source and target lengths, the padded-size budget, seeded
per-epoch batches, the padding fraction logged once per epoch."""

import collections
import re

import numpy as np
import pytest

from fairseq_qknorm.data import batching as B
from fairseq_qknorm.tasks import translation_word_dropout  # noqa: F401  (registers the task)

from conftest import PLUGIN_DIR, run_cli, tiny_model, tiny_training


def test_padding_stats_counts_real_and_padded_positions():
    src = np.array([3, 5, 4])
    tgt = np.array([2, 6, 7])
    st = B.padding_stats([[0, 1], [2]], src, tgt)
    # source: real 3+5+4 = 12, computed 2*5 + 1*4 = 14; target: real 15, computed 2*6 + 7 = 19
    assert (st.batches, st.sentences) == (2, 3)
    assert (st.src_real, st.src_padded, st.tgt_real, st.tgt_padded) == (12, 14, 15, 19)
    assert st.src_fraction == pytest.approx(2 / 14)
    assert st.tgt_fraction == pytest.approx(4 / 19)
    assert st.fraction == pytest.approx(6 / 33)
    assert "padding 18.2% of computed positions (source 14.3%, target 21.1%" in st.describe()


def test_serpentine_order_matches_a_sorted_reference():
    rng = np.random.default_rng(3)
    src = rng.integers(1, 30, size=200)
    tgt = rng.integers(1, 30, size=200)
    idx = np.arange(200)
    got = B.serpentine_order(idx, src, tgt, 4, np.random.default_rng(7))
    # reference: the same tie-breaking permutation, then Python's stable sort on the key
    perm = idx[np.random.default_rng(7).permutation(200)]
    key = {int(i): (src[i] // 4, -tgt[i] if (src[i] // 4) % 2 else tgt[i]) for i in perm}
    ref = sorted((int(i) for i in perm), key=lambda i: key[i])
    assert got.tolist() == ref
    with pytest.raises(ValueError, match="bucket width must be >= 1"):
        B.serpentine_order(idx, src, tgt, 0, rng)


def _lengths(n=2000, seed=0):
    # translation-like: target length about the source length, with noise
    rng = np.random.default_rng(seed)
    src = rng.integers(2, 60, size=n)
    tgt = np.clip(src + rng.integers(-8, 9, size=n), 2, None)
    return src, tgt


def test_bucketed_batches_keep_every_sentence_once_within_the_padded_budget():
    src, tgt = _lengths()
    keep = np.arange(0, 2000, 2)  # a subset: only these may appear
    batches, width = B.bucketed_batches(keep, src, tgt, max_tokens=600, seed=1)
    flat = np.concatenate(batches)
    assert sorted(flat.tolist()) == keep.tolist()
    assert width in B.BUCKET_WIDTHS
    for b in batches:
        assert len(b) * max(src[b].max(), tgt[b].max()) <= 600
    # fewer padded positions than fairseq's order (random permutation, by target then source)
    perm = keep[np.random.default_rng(1).permutation(len(keep))]
    perm = perm[np.argsort(tgt[perm], kind="mergesort")]
    perm = perm[np.argsort(src[perm], kind="mergesort")]
    fairseq_like = B._batch_by_size(perm, np.maximum(src, tgt), 600, None, 1)
    before = B.padding_stats(fairseq_like, src, tgt).fraction
    after = B.padding_stats(batches, src, tgt).fraction
    assert after < 0.75 * before, (before, after)  # measured: 0.101 -> 0.067


def test_bucketed_batches_respect_max_sentences_and_need_a_budget():
    src, tgt = _lengths(300)
    batches, _ = B.bucketed_batches(np.arange(300), src, tgt, None, max_sentences=16)
    assert max(len(b) for b in batches) == 16
    assert sum(len(b) for b in batches) == 300
    with pytest.raises(ValueError, match="needs --max-tokens or --batch-size"):
        B.bucketed_batches(np.arange(300), src, tgt, None, None)


def make_task(bin_dir, batching, seed=1):
    from fairseq import options, tasks

    args = options.parse_args_and_arch(
        options.get_training_parser(),
        [str(bin_dir), "--user-dir", str(PLUGIN_DIR), "--arch", "transformer_qknorm",
         "--task", "translation_word_dropout", "--batching", batching, "--seed", str(seed)],
    )  # fmt: skip
    task = tasks.setup_task(args)
    task.load_dataset("train")
    return task


def epochs_of_batches(bin_dir, batching, seed=1, epochs=2):
    """The batches (tuples of sentence ids, in iteration order) of ``epochs`` training epochs."""
    task = make_task(bin_dir, batching, seed)
    itr = task.get_batch_iterator(
        task.dataset("train"),
        max_tokens=120,
        max_positions=(1024, 1024),
        required_batch_size_multiple=8,
        seed=seed,
        epoch=1,
    )
    out = []
    for _ in range(epochs):
        ep = []
        for sample in itr.next_epoch_itr(shuffle=True):
            ep.append(tuple(sample["id"].tolist()))
        out.append(ep)
    return out


def test_an_epoch_holds_exactly_fairseqs_sentences_in_new_batches(toy_data):
    _, bin_dir = toy_data
    fairseq = epochs_of_batches(bin_dir, "fairseq")
    bucketed = epochs_of_batches(bin_dir, "bucketed")
    for ep in range(2):
        ours = collections.Counter(i for b in bucketed[ep] for i in b)
        theirs = collections.Counter(i for b in fairseq[ep] for i in b)
        assert ours == theirs
        assert max(ours.values()) == 1
    # fairseq drops a last incomplete batch of the 300 toy sentences (multiple of 8): so do we
    assert sum(len(b) for b in fairseq[0]) < 300
    assert set(map(frozenset, bucketed[0])) != set(map(frozenset, fairseq[0]))


def test_batches_are_reshuffled_per_epoch_and_reproducible_per_seed(toy_data):
    _, bin_dir = toy_data
    a = epochs_of_batches(bin_dir, "bucketed", seed=1)
    again = epochs_of_batches(bin_dir, "bucketed", seed=1)
    other = epochs_of_batches(bin_dir, "bucketed", seed=2)
    assert a == again  # same seed: same batches in the same order, epoch by epoch
    assert a[0] != a[1]  # a new order (and grouping) every epoch
    assert a[0] != other[0] and a[1] != other[1]


@pytest.mark.slow
def test_fairseq_train_logs_the_padding_fraction_once_per_epoch(toy_data, tmp_path):
    _, bin_dir = toy_data
    proc = run_cli(
        ["fairseq-train", bin_dir, "--user-dir", PLUGIN_DIR, "--task", "translation_word_dropout",
         "--batching", "bucketed", "--arch", "transformer_twt", *tiny_model(dropout=None),
         *tiny_training(lr="1e-3", max_tokens="500"), "--max-epoch", "2",
         "--no-save", "--disable-validation", "--log-format", "simple", "--log-interval", "1"],
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    lines = re.findall(
        r"bucketed batching: epoch (\d+): padding (\d+\.\d)% of computed positions "
        r"\(source (\d+\.\d)%, target (\d+\.\d)%; (\d+) batches, (\d+) sentences\), "
        r"bucket width (\d+); fairseq's batching: (\d+\.\d)%",
        log,
    )
    assert [ep for ep, *_ in lines] == ["1", "2"], log[-3000:]
    for _, total, _src, _tgt, nbatches, nsent, _w, before in lines:
        assert 0.0 <= float(total) <= float(before)
        assert 0 < int(nsent) <= 300 and int(nbatches) >= 1
    assert re.search(r"epoch 002 \| .*num_updates \d+", log) or "done training" in log


def test_a_resumed_epoch_continues_with_the_same_batches(toy_data):
    """fairseq restores the iterator's (epoch, position): the batches are rebuilt equal."""
    _, bin_dir = toy_data

    def iterator():
        task = make_task(bin_dir, "bucketed")
        return task.get_batch_iterator(
            task.dataset("train"), max_tokens=120, max_positions=(1024, 1024),
            required_batch_size_multiple=1, seed=1, epoch=1,
        )  # fmt: skip

    itr = iterator()
    for _ in itr.next_epoch_itr(shuffle=True):
        pass  # epoch 1 done
    ep2 = itr.next_epoch_itr(shuffle=True)
    ids = [tuple(next(ep2)["id"].tolist()) for _ in range(3)]
    state = itr.state_dict()
    rest = [tuple(s["id"].tolist()) for s in ep2]
    resumed = iterator()
    resumed.load_state_dict(state)
    again = [tuple(s["id"].tolist()) for s in resumed.next_epoch_itr(shuffle=True)]
    assert state["epoch"] == 2 and len(ids) == 3
    assert again == rest and len(rest) > 0
