"""Word dropout (TWT, Nguyen & Salazar 2019, Sec. 4: p = 0.1, tokens replaced by UNK) as the
fairseq task ``translation_word_dropout``: training inputs only, never targets or validation."""

import re

import pytest
import torch

from fairseq_qknorm.tasks import translation_word_dropout as wd  # registers the task

from conftest import PLUGIN_DIR, run_cli, tiny_model, tiny_training


def make_task(bin_dir, p, seed=1):
    from fairseq import options, tasks

    args = options.parse_args_and_arch(
        options.get_training_parser(),
        [
            str(bin_dir),
            "--user-dir",
            str(PLUGIN_DIR),
            "--arch",
            "transformer_qknorm",
            "--task",
            "translation_word_dropout",
            "--word-dropout",
            str(p),
            "--seed",
            str(seed),
        ],
    )
    task = tasks.setup_task(args)
    assert type(task).__name__ == "TranslationWordDropoutTask"
    return task


@pytest.fixture(scope="module")
def batch(toy_data):
    """One batch holding the whole toy training set (300 sentences)."""
    _, bin_dir = toy_data
    task = make_task(bin_dir, 0.0)
    task.load_dataset("train")
    itr = task.get_batch_iterator(
        task.dataset("train"),
        max_tokens=100000,
        max_sentences=1000,
        seed=1,
        required_batch_size_multiple=1,
    )
    sample = next(iter(itr.next_epoch_itr(shuffle=False)))
    assert sample["nsentences"] == 300
    return sample


class Recorder:
    """Stand-in criterion/model/optimizer for train_step/valid_step: records the sample the
    model would see."""

    def __init__(self):
        self.seen = []

    def __call__(self, model, sample):  # criterion(model, sample)
        self.seen.append(sample)
        return torch.zeros((), requires_grad=True), 1, {}

    # model
    def train(self):
        pass

    def eval(self):
        pass

    def set_num_updates(self, n):
        pass

    # optimizer
    def backward(self, loss):
        loss.backward()


def clone(sample):
    return {
        "net_input": {k: v.clone() for k, v in sample["net_input"].items()},
        "target": sample["target"].clone(),
    }


def regular(tokens, task):
    return tokens >= task.src_dict.nspecial


def test_p0_leaves_the_batch_unchanged(toy_data, batch):
    task = make_task(toy_data[1], 0.0)
    rec = Recorder()
    task.train_step(batch, rec, rec, rec, update_num=5)
    seen = rec.seen[0]
    for key in ("src_tokens", "prev_output_tokens", "src_lengths"):
        assert torch.equal(seen["net_input"][key], batch["net_input"][key])
    assert torch.equal(seen["target"], batch["target"])


def test_p1_replaces_every_regular_token_of_the_inputs_only(toy_data, batch):
    task = make_task(toy_data[1], 1.0)
    before = clone(batch)
    rec = Recorder()
    task.train_step(batch, rec, rec, rec, update_num=0)
    seen = rec.seen[0]
    unk = task.src_dict.unk()
    for key in ("src_tokens", "prev_output_tokens"):
        orig, new = before["net_input"][key], seen["net_input"][key]
        reg = regular(orig, task)
        assert reg.sum() > 1500  # the toy corpus: 300 sentences of 3-10 words
        assert (new[reg] == unk).all()
        # <pad>, </s> (and <s>) untouched, positions unchanged
        assert torch.equal(new[~reg], orig[~reg])
        assert (orig == task.src_dict.eos()).any() and (orig == task.src_dict.pad()).any()
    assert torch.equal(seen["target"], before["target"])  # the loss still sees the true words
    assert torch.equal(seen["net_input"]["src_lengths"], before["net_input"]["src_lengths"])
    # the caller's batch is not modified in place
    assert torch.equal(batch["net_input"]["src_tokens"], before["net_input"]["src_tokens"])


def test_p05_replaces_about_half(toy_data, batch):
    task = make_task(toy_data[1], 0.5)
    seen = task.apply_word_dropout(batch, update_num=3)
    unk = task.src_dict.unk()
    n = dropped = 0
    for key in ("src_tokens", "prev_output_tokens"):
        reg = regular(batch["net_input"][key], task)
        n += int(reg.sum())
        dropped += int((seen["net_input"][key][reg] == unk).sum())
    # ~4000 regular tokens: sd of the fraction = sqrt(0.25 / 4000) ~ 0.008
    assert abs(dropped / n - 0.5) < 0.04, (dropped, n)
    # a bigger synthetic batch: fraction 0.1 at p = 0.1 (TWT's value)
    tokens = torch.randint(4, 1000, (256, 64))
    out = wd.word_dropout(
        tokens, 0.1, unk=3, nspecial=4, generator=torch.Generator().manual_seed(0)
    )
    assert abs((out == 3).float().mean().item() - 0.1) < 0.005
    assert torch.equal(out[out != 3], tokens[out != 3])


def test_masks_are_reproducible_from_seed_and_update(toy_data, batch):
    bin_dir = toy_data[1]

    def mask(seed, update):
        t = make_task(bin_dir, 0.3, seed=seed)
        return t.apply_word_dropout(batch, update)["net_input"]["src_tokens"]

    assert torch.equal(mask(1, 7), mask(1, 7))  # resumed run: same masks
    assert not torch.equal(mask(1, 7), mask(1, 8))  # next update: new mask
    assert not torch.equal(mask(1, 7), mask(2, 7))  # other seed: new mask
    # --update-freq > 1: the micro-batches of one update get different masks
    t = make_task(bin_dir, 0.3)
    a = t.apply_word_dropout(batch, 4)["net_input"]["src_tokens"]
    b = t.apply_word_dropout(batch, 4)["net_input"]["src_tokens"]
    assert not torch.equal(a, b)


def test_not_applied_in_validation(toy_data, batch):
    task = make_task(toy_data[1], 1.0)
    rec = Recorder()
    task.valid_step(batch, rec, rec)
    assert torch.equal(rec.seen[0]["net_input"]["src_tokens"], batch["net_input"]["src_tokens"])
    assert torch.equal(
        rec.seen[0]["net_input"]["prev_output_tokens"], batch["net_input"]["prev_output_tokens"]
    )


def test_bad_probability_is_rejected(toy_data):
    with pytest.raises(ValueError, match=r"--word-dropout must be in \[0, 1\]"):
        make_task(toy_data[1], 1.5)


@pytest.mark.slow
def test_fairseq_train_with_word_dropout_end_to_end(toy_data, tmp_path):
    """fairseq's --user-dir loader registers the task (fairseq_qknorm/tasks/*.py); 3 updates."""
    _, bin_dir = toy_data
    proc = run_cli(
        [
            "fairseq-train",
            bin_dir,
            "--user-dir",
            PLUGIN_DIR,
            "--task",
            "translation_word_dropout",
            "--word-dropout",
            "0.1",
            "--arch",
            "transformer_twt",
            *tiny_model(dropout=None),
            *tiny_training(lr="1e-3", max_tokens="500"),
            "--max-update",
            "3",
            "--required-batch-size-multiple",
            "1",
            "--no-epoch-checkpoints",
            "--log-format",
            "simple",
            "--log-interval",
            "1",
            "--save-dir",
            tmp_path / "ckpt",
        ]
    )
    log = proc.stdout + proc.stderr
    assert "task: TranslationWordDropoutTask" in log
    assert "word dropout: p = 0.1 on src_tokens and prev_output_tokens" in log
    assert re.search(r"num_updates[ =]3\b", log)
    assert (tmp_path / "ckpt" / "checkpoint_last.pt").exists()
    # decoding needs no word dropout: the checkpoint decodes with the plain translation task
    gen = run_cli(
        [
            "fairseq-generate",
            bin_dir,
            "--user-dir",
            PLUGIN_DIR,
            "--task",
            "translation",
            "--path",
            tmp_path / "ckpt" / "checkpoint_last.pt",
            "--beam",
            "1",
            "--batch-size",
            "32",
            "--required-batch-size-multiple",
            "1",
            "--num-workers",
            "0",
        ]
    )
    assert len(re.findall(r"^H-\d+\t", gen.stdout, flags=re.M)) == 21
