"""The segmented-length check as the scripts run it (issue 37 item 1 and 3): scripts/bpe.sh
refuses dev/test lines longer than the model takes, keeping data/bpe/PAIR as it was, and drops
such training pairs with a count; scripts/evaluate.sh names the test line a run's model cannot
take instead of pointing into fairseq-generate's log. The rule itself: tests/test_seglen.py."""

import json
import shutil
from pathlib import Path

import pytest

from conftest import (
    count_lines,
    make_env,
    make_tiny_ted,
    out,
    prepare_pair,
    run_script,
    tiny_model,
    write_sums,
)

LONG_WORD = "x" + "yz" * 600  # one raw token, over 1,023 subwords with 50 merges


def snapshot(root: Path) -> dict:
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def with_long_line(good: Path, dst: Path, name: str, line: int) -> Path:
    """A copy of the data dir ``good`` whose ted-gl-en/NAME has LONG_WORD as line ``line``."""
    shutil.copytree(good, dst)
    f = dst / "ted-gl-en" / name
    lines = f.read_text(encoding="utf-8").splitlines()
    lines[line - 1] = LONG_WORD
    f.write_text("".join(x + "\n" for x in lines), encoding="utf-8")
    write_sums(dst)
    return dst


@pytest.mark.slow
def test_bpe_sh_refuses_long_test_lines_and_drops_long_training_pairs(tmp_path):
    good = tmp_path / "good"
    sizes = make_tiny_ted(good, sizes=(120, 12, 15))
    work = tmp_path / "work"
    env = make_env(work)
    for step, args in (("prepare_data.sh", ["--data-dir", good]), ("bpe.sh", ["--merges", 50])):
        p = run_script(step, "gl-en", *args, env=env)
        assert p.returncode == 0, out(p)
    bpe = work / "data/bpe/gl-en"
    before = snapshot(bpe)

    # a test line of one raw token that segments into more than 1,023: refused, data/bpe kept
    bad = with_long_line(good, tmp_path / "bad", "test.gl", 3)
    p = run_script("prepare_data.sh", "gl-en", "--data-dir", bad, env=env)
    assert p.returncode == 0, out(p)  # one whitespace token: the raw check passes
    p = run_script("bpe.sh", "gl-en", "--merges", 50, env=env)
    assert p.returncode == 1, out(p)
    raw = work / "data/raw/gl-en"
    # the line is named in the user's file (what to fix), then in its prepared copy (new-user
    # trial 2: only the copy was named)
    where = f"{bad.resolve()}/ted-gl-en/test.gl:3 (prepared as {raw}/test.gl:3)"
    line = next(x for x in p.stderr.splitlines() if x.startswith(f"error: {where}: "))
    n_seg = int(line[len(f"error: {where}: ") :].split()[0])
    # no segmented file named: this segmentation is not kept ({bpe}/test.gl is the earlier one)
    assert n_seg > 1023 and line == (
        f"error: {where}: {n_seg} tokens after segmentation, 1 before: over 1023, the "
        "most the model takes (max positions 1024, one for the end-of-sentence token)"
    ), out(p)
    assert p.stderr.splitlines()[-1] == (
        f"error: the segmented lengths of gl-en are refused (above); nothing in {bpe} was changed"
    )
    assert snapshot(bpe) == before
    assert sorted(x.name for x in (work / "data/bpe").iterdir()) == ["gl-en"]  # no leftovers

    # the same in the training split: the pair is dropped, counted, listed; binarize follows
    long_train = with_long_line(good, tmp_path / "long_train", "train.en", 7)
    p = run_script("prepare_data.sh", "gl-en", "--data-dir", long_train, env=env)
    assert p.returncode == 0, out(p)
    p = run_script("bpe.sh", "gl-en", "--merges", 50, env=env)
    assert p.returncode == 0, out(p)
    assert (
        f"warning: dropped 1 of {sizes['train']} training pairs longer than the model takes (on "
        f"either side, after segmentation); listed in {bpe}/too_long.json"
    ) in p.stderr.splitlines(), out(p)
    assert (
        f"warning: dropped: {long_train.resolve()}/ted-gl-en/train.en:7 (prepared as "
        f"{raw}/train.en:7): "
    ) in p.stderr, out(p)
    record = json.loads((bpe / "too_long.json").read_text())  # the data's lines, not the user's
    assert [(x["path"], x["line"], x["raw_tokens"]) for x in record["lines"]] == [
        (f"{raw}/train.en", 7, 1)
    ]
    for lang in ("gl", "en"):
        assert count_lines(bpe / f"train.{lang}") == sizes["train"] - 1
        assert count_lines(bpe / f"test.{lang}") == sizes["test"]
    stats = json.loads((bpe / "length_stats.json").read_text())
    assert stats["n_lines"] == 2 * (sizes["train"] - 1) and stats["max_length"] <= 1023
    p = run_script("binarize.sh", "gl-en", env=env)
    assert p.returncode == 0, out(p)
    assert f"({sizes['train'] - 1} training pairs" in p.stdout


@pytest.mark.slow
def test_evaluate_sh_names_the_test_line_the_model_cannot_take(tmp_path):
    """A run trained with smaller max positions than its longest test line: evaluate.sh names
    each test line over the limit (raw file:line, both lengths, the limit) before decoding,
    exit 1, no output."""
    data = tmp_path / "data_in"
    make_tiny_ted(data, sizes=(120, 12, 15))
    work = tmp_path / "work"
    env = make_env(work, QKNORM_DATA_DIR=data, OMP_NUM_THREADS=1)
    prepare_pair(env, "--merges", 50)
    raw, bpe = work / "data/raw/gl-en", work / "data/bpe/gl-en"
    # max positions = the longest test line's tokens: that line is over the limit (one less),
    # shorter dev and training lines are not
    n = max(len(x.split()) for f in bpe.glob("test.*") for x in f.read_text().splitlines())
    cell = ["gl-en", "twt", "--max-update", 2, "--threads", 1]
    # (a dev line may be longer too: fairseq skips it, as train.sh's check then allows)
    small = ["--max-source-positions", n, "--max-target-positions", n,
             "--skip-invalid-size-inputs-valid-test"]  # fmt: skip
    p = run_script(
        "train.sh", *cell, "--", *tiny_model(), *small,
        "--skip-invalid-size-inputs-valid-test", env=env,
    )  # fmt: skip
    assert p.returncode == 0, out(p)
    p = run_script("evaluate.sh", *cell, env=env)
    assert p.returncode == 1, out(p)
    errors = [x for x in p.stderr.splitlines() if x.startswith("error: ")]
    expected = []
    for lang in ("gl", "en"):
        raw_lines = (raw / f"test.{lang}").read_text(encoding="utf-8").splitlines()
        seg_lines = (bpe / f"test.{lang}").read_text(encoding="utf-8").splitlines()
        for i, (r, s) in enumerate(zip(raw_lines, seg_lines), 1):
            if len(s.split()) > n - 1:
                where = f"{data.resolve()}/ted-gl-en/test.{lang}:{i}"
                where += f" (prepared as {raw}/test.{lang}:{i})"
                expected.append(
                    f"error: {where}: {len(s.split())} tokens after segmentation "
                    f"({bpe}/test.{lang}), {len(r.split())} before: over {n - 1}, the most the "
                    f"model takes (max positions {n}, one for the end-of-sentence token)"
                )
    assert expected and errors[: len(expected)] == expected, out(p)
    # the advice fits the run: its own limit, and what a retraining needs
    longest = {
        side: max(len(x.split()) for x in (bpe / f"test.{lang}").read_text().splitlines())
        for side, lang in (("source", "gl"), ("target", "en"))
    }
    over = [side for side in longest if longest[side] > n - 1]  # the sides with a refused line
    had = " ".join(f"--max-{side}-positions {n}" for side in over)
    need = " ".join(f"--max-{side}-positions {longest[side] + 1}" for side in over)
    assert errors[-2].endswith(
        f"the run was trained with {had}, below fairseq's 1024 that scripts/bpe.sh checks the "
        f"data against: retrain it with {need} or more (fairseq-train's options, after the -- of "
        "scripts/train.sh ... --force), or split or shorten them in the raw data and prepare the "
        "pair again"
    ), out(p)
    assert errors[-1] == "error: cannot decode the test split of gl-en (above): nothing was decoded"
    run = work / "runs/gl-en/cpu-proxy-max-update-2/twt/seed1"
    assert not list(run.glob("test.*")), sorted(x.name for x in run.iterdir())
