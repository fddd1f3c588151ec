"""A short try of the papers' recipe (issue 22): ``train.sh PAIR SYSTEM --profile paper
--max-update N`` decodes its dev-BLEU validations with a length cap, shows progress while it
validates, and finishes (docs/short-paper-try.md)."""

from __future__ import annotations

import json
import re
import shlex
import time

import pytest

from qknorm_tools import progress

from conftest import (
    FAR_BOUND,
    flags,
    make_env,
    make_tiny_ted,
    out,
    prepare_pair,
    run_progress_filter,
    run_script,
    tiny_model,
    train_commands,
)


def eval_bleu_args(stdout):
    (cmd,) = train_commands(stdout)
    return json.loads(flags(cmd)["--eval-bleu-args"])


def test_a_short_try_caps_validation_decoding(tmp_path):
    env = make_env(tmp_path / "work")
    short = run_script("train.sh", "gl-en", "qknorm_paper", "--profile", "paper",
                       "--max-update", 20, "--dry-run", env=env)  # fmt: skip
    assert short.returncode == 0, out(short)
    assert eval_bleu_args(short.stdout) == {"beam": 4, "max_len_a": 1.5, "max_len_b": 10}
    assert "/runs/gl-en/paper-max-update-20/qknorm_paper/seed1/" in short.stdout
    # the profile's own runs keep the papers' recipe (fairseq's default cap)
    full = run_script("train.sh", "gl-en", "qknorm_paper", "--profile", "paper", "--dry-run",
                      env=env)  # fmt: skip
    assert full.returncode == 0, out(full)
    assert eval_bleu_args(full.stdout) == {"beam": 4}
    # a cap given by the user is kept
    own = run_script("train.sh", "gl-en", "twt", "--profile", "paper", "--max-update", 20,
                     "--dry-run", "--", "--eval-bleu-args", '{"beam": 2, "max_len_b": 5}',
                     env=env)  # fmt: skip
    assert own.returncode == 0, out(own)
    assert eval_bleu_args(own.stdout) == {"beam": 2, "max_len_b": 5}


def _gen_flags(stdout):
    (line,) = [x for x in stdout.splitlines() if "fairseq-generate" in x]
    return flags(shlex.split(line))


@pytest.mark.slow
def test_a_short_try_validates_and_decodes_little(tmp_path):
    """Dev BLEU on one batch of the 100 shortest dev sentences, test decoding capped as the
    CPU profiles cap it; the profile's own runs keep the papers' settings (all of dev, no cap)."""
    env = make_env(tmp_path / "work")
    cell = ["gl-en", "qknorm_paper", "--profile", "paper"]
    short = run_script("train.sh", *cell, "--max-update", 20, "--dry-run", env=env)
    full = run_script("train.sh", *cell, "--dry-run", env=env)
    assert short.returncode == full.returncode == 0, out(short) + out(full)
    (s,), (f,) = train_commands(short.stdout), train_commands(full.stdout)
    assert (flags(s)["--batch-size-valid"], flags(s)["--max-valid-steps"]) == ("100", "0")
    assert "--batch-size-valid" not in f and "--max-valid-steps" not in f
    short = run_script("evaluate.sh", *cell, "--max-update", 20, "--dry-run", env=env)
    full = run_script("evaluate.sh", *cell, "--dry-run", env=env)
    assert short.returncode == full.returncode == 0, out(short) + out(full)
    assert (_gen_flags(short.stdout)["--max-len-a"], _gen_flags(short.stdout)["--max-len-b"]) == (
        "1.5",
        "10",
    )
    assert "--max-len-a" not in full.stdout and "--max-len-b" not in full.stdout
    # the translate helper decodes as evaluate.sh
    from qknorm_model_tools.translate import pipeline_settings

    settings = pipeline_settings("gl-en", "qknorm_paper", "paper", max_update=20)
    assert settings.generate_flags[-4:] == ["--max-len-a", "1.5", "--max-len-b", "10"]
    assert "--max-len-a" not in pipeline_settings("gl-en", "qknorm_paper", "paper").generate_flags


def test_validation_shows_progress():
    """The filter prints a line every heartbeat while fairseq validates (it prints nothing of
    its own until the result), and stops at the result line."""
    lines, text, t = run_progress_filter(progress.TrainEta(20), heartbeat=0.2)
    lines.put(
        b'2026-12-01 20:00:00 | INFO | fairseq_cli.train | begin validation on "valid" subset\n'
    )
    t0 = time.time()
    while text().count("| validating on 'valid' for ") < 2:  # event: two lines; far bound only
        assert time.time() - t0 < FAR_BOUND, text()
        time.sleep(0.05)
    lines.put(
        b"2026-12-01 20:09:00 | INFO | valid | epoch 001 | valid on 'valid' subset | bleu 0.1\n"
    )
    shown = text().count("validating")
    lines.put(None)
    t.join(FAR_BOUND)
    got = text().splitlines()
    assert got[0].endswith('begin validation on "valid" subset')
    assert all(
        re.fullmatch(
            r"\| validating on 'valid' for \d+ s \(fairseq prints the result when the whole "
            r"subset is done; dev BLEU decodes it with beam search\)",
            line,
        )
        for line in got[1:-1]
    ), got
    assert got[-1].startswith("2026-12-01 20:09:00 | INFO | valid |")
    assert text().count("validating") == shown  # none after the result


@pytest.mark.slow
def test_the_documented_short_try_finishes_on_tiny_data(tmp_path):
    """docs/short-paper-try.md's recipe on a tiny pair (tiny model flags after --)."""
    make_tiny_ted(tmp_path / "data_in")
    env = make_env(tmp_path / "work", QKNORM_DATA_DIR=tmp_path / "data_in", OMP_NUM_THREADS=1)
    prepare_pair(env, "--merges", 60)
    args = ["gl-en", "qknorm_paper", "--profile", "paper", "--max-update", 6, "--threads", 1]
    p = run_script("train.sh", *args, "--", *tiny_model(), env=env)
    assert p.returncode == 0, out(p)
    run = tmp_path / "work/runs/gl-en/paper-max-update-6/qknorm_paper/seed1"
    log = (run / "train.log").read_text()
    assert "max_len_b" in (run / "command.txt").read_text()
    assert re.search(r"\| valid on 'valid' subset \|.* bleu [\d.]+ ", log), log[-2000:]
    assert json.loads((run / "train.json").read_text())["updates"] == 6
    p = run_script("evaluate.sh", *args[:6], "--threads", 1, env=env)
    assert p.returncode == 0, out(p)
    assert "bleu_tok" in json.loads((run / "test.score.json").read_text())
