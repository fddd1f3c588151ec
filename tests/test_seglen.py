"""Segmented line lengths against what the model takes (qknorm_tools/seglen.py; issue 37 item 1).

The rule in process on tiny files; bpe.sh's and evaluate.sh's use of it in
tests/test_seglen_scripts.py."""

import argparse
import json

import pytest

from qknorm_tools import config, seglen

from conftest import build_model, tiny_model


def write(path, lines):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("".join(x + "\n" for x in lines), encoding="utf-8")


def pair_dirs(tmp_path, limit_tokens=7, long_at=None):
    """raw/ and seg/ of a pair gl-en with 4 lines per split; ``long_at`` = {(split, lang): line}
    whose segmentation gets ``limit_tokens + 1`` tokens from one raw word."""
    raw, seg = tmp_path / "raw", tmp_path / "seg"
    for split in ("train", "dev", "test"):
        for lang in ("gl", "en"):
            lines = [f"{lang} {split} {i} ." for i in range(1, 5)]
            segs = list(lines)
            line = (long_at or {}).get((split, lang))
            if line:
                lines[line - 1] = "x" * (limit_tokens + 1)
                segs[line - 1] = " ".join(["x@@"] * limit_tokens + ["x"])
            write(raw / f"{split}.{lang}", lines)
            write(seg / f"{split}.{lang}", segs)
    return raw, seg


def check_argv(raw, seg, *extra, positions=None, cmd=None):
    """``seglen check`` arguments for gl-en in ``raw`` / ``seg``; with ``positions`` a run's
    ``cmd`` (command.txt) passing them as --max-source/target-positions is written and given."""
    argv = ["check", "--raw", raw, "--seg", seg, "--src", "gl", "--tgt", "en", *extra]
    argv = [str(x) for x in argv]
    if positions is not None:
        cmd.write_text(
            f"fairseq-train d --max-source-positions {positions} "
            f"--max-target-positions {positions}\n"
        )
        argv += ["--run-command", str(cmd)]
    return argv


def snapshot(d):
    return {p.name: p.read_bytes() for p in sorted(d.rglob("*")) if p.is_file()}


def test_limit_is_max_positions_less_eos():
    assert seglen.MAX_POSITIONS == 1024 and seglen.max_segment_tokens() == 1023
    assert seglen.max_segment_tokens(8) == 7
    cmd = "env OMP_NUM_THREADS=1 /x/fairseq-train data/bin/gl-en --max-source-positions 8 --lr 1"
    assert seglen.run_max_positions(cmd) == (8, 1024)
    assert seglen.run_max_positions("fairseq-train d --max-target-positions 9") == (1024, 9)


def test_max_positions_is_what_every_arch_and_profile_gives(toy_task):
    """MAX_POSITIONS is the models': no arch of the plugin sets fairseq's source or target max
    positions (fairseq's model build then takes its defaults), a built model and the
    translation task give it, and no profile passes another."""
    from fairseq.models import ARCH_CONFIG_REGISTRY, ARCH_MODEL_NAME_REGISTRY
    from fairseq.models.transformer import (
        DEFAULT_MAX_SOURCE_POSITIONS,
        DEFAULT_MAX_TARGET_POSITIONS,
    )
    from fairseq.tasks.translation import TranslationConfig

    import fairseq_qknorm  # noqa: F401  (registers the archs)

    assert DEFAULT_MAX_SOURCE_POSITIONS == DEFAULT_MAX_TARGET_POSITIONS == seglen.MAX_POSITIONS
    archs = [a for a, m in ARCH_MODEL_NAME_REGISTRY.items() if m == "transformer_qknorm"]
    assert len(archs) > 20 and "transformer_twt_proxy" in archs
    for arch in archs:
        args = argparse.Namespace()
        ARCH_CONFIG_REGISTRY[arch](args)
        assert getattr(args, "max_source_positions", None) is None, arch
        assert getattr(args, "max_target_positions", None) is None, arch
    model, _ = build_model(toy_task, "transformer_twt_proxy", tiny_model())
    assert model.max_positions() == (seglen.MAX_POSITIONS, seglen.MAX_POSITIONS)
    task = TranslationConfig()
    assert (task.max_source_positions, task.max_target_positions) == (1024, 1024)
    for name in config.names("profiles"):
        p = config.load_profile(name)
        flags = [*p.model_flags, *p.optim_flags, *p.task_flags, *p.valid_flags, *p.gen_flags]
        assert not [f for f in flags if str(f).endswith("-positions")], name


def test_dev_and_test_lines_over_the_limit_are_refused_and_nothing_changes(tmp_path, capsys):
    """A dev or test line whose segmentation is over the limit: each named (raw file, 1-based
    line, both lengths, the limit), exit 1, no file touched (the training split neither)."""
    raw, seg = pair_dirs(
        tmp_path, long_at={("test", "gl"): 2, ("dev", "en"): 4, ("train", "gl"): 1}
    )
    before = snapshot(tmp_path)
    result = seglen.check_segmentation(str(raw), str(seg), "gl", "en", max_positions=(8, 8))
    assert [(x.path, x.line, x.raw_tokens, x.seg_tokens, x.limit) for x in result.refused] == [
        (f"{raw}/dev.en", 4, 1, 8, 7),
        (f"{raw}/test.gl", 2, 1, 8, 7),
    ]
    assert snapshot(tmp_path) == before
    # the command line, as bpe.sh calls it (its temporary dir shown as data/bpe/PAIR): a refused
    # line names no segmented file, since none is kept (issue 37, leftover 8: it named
    # data/bpe/gl-en/dev.en, which did not exist or held an earlier segmentation)
    argv = check_argv(raw, seg, "--seg-name", "data/bpe/gl-en", positions=8, cmd=tmp_path / "c")
    assert seglen.main(argv) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        f"error: {raw}/dev.en:4: 8 tokens after segmentation, 1 before: over 7, the most the "
        "model takes (max positions 8, one for the end-of-sentence token)"
    )
    # segmented files that stay where they are (no --seg-name, as evaluate.sh checks data/bpe)
    assert seglen.main(check_argv(raw, seg, positions=8, cmd=tmp_path / "c")) == 1
    assert capsys.readouterr().err.splitlines()[0] == (
        f"error: {raw}/dev.en:4: 8 tokens after segmentation ({seg}/dev.en), 1 before: over 7, "
        "the most the model takes (max positions 8, one for the end-of-sentence token)"
    )
    assert err[1].startswith(f"error: {raw}/test.gl:2: 8 tokens after segmentation")
    assert err[2] == (
        "error: 2 dev/test line(s) longer than the model takes: dev and test lines are never "
        "dropped (a score on fewer lines is not comparable); the run was trained with "
        "--max-source-positions 8 --max-target-positions 8, below fairseq's 1024 that "
        "scripts/bpe.sh checks the data against: retrain it with --max-source-positions 9 "
        "--max-target-positions 9 or more (fairseq-train's options, after the -- of "
        "scripts/train.sh ... --force), or split or shorten them in the raw data and prepare the "
        "pair again"
    )
    before["c"] = (tmp_path / "c").read_bytes()
    assert len(err) == 3 and snapshot(tmp_path) == before
    # fairseq's 1024 positions: everything fits, nothing is said
    assert seglen.main(argv[:-2]) == 0 and capsys.readouterr().err == ""


def test_the_advice_for_a_long_line_fits_the_runs_max_positions(tmp_path):
    """A run trained with smaller max positions than fairseq's (command.txt's
    --max-source-positions 64): the advice named only the raw data, which scripts/bpe.sh had
    accepted at 1024; it now names the run's own limit and what a retraining needs, only for
    the side that is smaller; at fairseq's limit (bpe.sh, a run without such options) it
    names the raw data alone, as before."""
    raw, seg = pair_dirs(tmp_path, limit_tokens=79, long_at={("test", "gl"): 3})
    result = seglen.check_segmentation(str(raw), str(seg), "gl", "en", ("test",), (), (64, 512))
    assert [(x.line, x.seg_tokens, x.limit) for x in result.refused] == [(3, 80, 63)]
    assert seglen.report(result, "seg")[-1] == (
        "error: 1 dev/test line(s) longer than the model takes: dev and test lines are never "
        "dropped (a score on fewer lines is not comparable); the run was trained with "
        "--max-source-positions 64, below fairseq's 1024 that scripts/bpe.sh checks the data "
        "against: retrain it with --max-source-positions 81 or more (fairseq-train's options, "
        "after the -- of scripts/train.sh ... --force), or split or shorten them in the raw data "
        "and prepare the pair again"
    )
    raw, seg = pair_dirs(tmp_path / "big", limit_tokens=1023, long_at={("dev", "en"): 1})
    result = seglen.check_segmentation(str(raw), str(seg), "gl", "en", ("dev",))
    assert seglen.report(result, "seg")[-1] == (
        "error: 1 dev/test line(s) longer than the model takes: dev and test lines are never "
        "dropped (a score on fewer lines is not comparable); split or shorten them in the raw "
        "data and prepare the pair again"
    )


def test_training_pairs_over_the_limit_are_dropped_counted_and_listed(tmp_path, capsys):
    """A training pair with a side over the limit, in the deterministic segmentation or in a
    BPE-dropout sample: dropped from every segmentation of the training split (line for line
    with each other), counted on stderr and listed in too_long.json; dev and test untouched."""
    raw, seg = pair_dirs(tmp_path, long_at={("train", "en"): 2})
    sample = tmp_path / "epochs" / "2"
    write(sample / "train.gl", ["a", "b", "c", "d@@ " * 7 + "d"])  # line 4 long in a sample only
    write(sample / "train.en", ["a", "b", "c", "d"])
    dev_test = {k: v for k, v in snapshot(seg).items() if not k.startswith("train")}
    argv = check_argv(
        raw, seg, "--train-copy", sample, "--seg-name", "data/bpe/gl-en", positions=8,
        cmd=tmp_path / "c",
    )  # fmt: skip
    assert seglen.main(argv) == 0
    err = capsys.readouterr().err.splitlines()
    assert err == [
        f"warning: dropped: {raw}/train.en:2: 8 tokens after segmentation "
        "(data/bpe/gl-en/train.en), 1 before: over 7, the most the model takes (max positions 8, "
        "one for the end-of-sentence token)",
        f"warning: dropped: {raw}/train.gl:4: 8 tokens after segmentation "
        "(data/bpe/gl-en/train.gl), 4 before: over 7, the most the model takes (max positions 8, "
        "one for the end-of-sentence token)",
        "warning: dropped 2 of 4 training pairs longer than the model takes (on either side, "
        "after segmentation); listed in data/bpe/gl-en/too_long.json",
    ]
    assert (seg / "train.gl").read_text() == "gl train 1 .\ngl train 3 .\n"
    assert (seg / "train.en").read_text() == "en train 1 .\nen train 3 .\n"
    assert (sample / "train.gl").read_text() == "a\nc\n" and (
        sample / "train.en"
    ).read_text() == "a\nc\n"
    assert {
        k: v for k, v in snapshot(seg).items() if not k.startswith(("train", "too_long"))
    } == dev_test
    record = json.loads((seg / "too_long.json").read_text())
    assert (record["n_pairs"], record["n_dropped"], record["limit"]) == (4, 2, {"gl": 7, "en": 7})
    assert [(x["path"], x["line"], x["seg_tokens"]) for x in record["lines"]] == [
        (f"{raw}/train.en", 2, 8),
        (f"{raw}/train.gl", 4, 8),
    ]
    # nothing over the limit: no record, nothing said
    raw2, seg2 = pair_dirs(tmp_path / "ok")
    assert seglen.main(check_argv(raw2, seg2)) == 0
    assert not (seg2 / "too_long.json").exists() and capsys.readouterr().err == ""


def test_a_long_line_is_named_in_the_file_the_user_gave(tmp_path):
    """scripts/prepare_data.sh writes ``origin.SPLIT.LANG=FILE`` in SOURCE for each split it
    copied from a file the user gave: a long line is named there first (what to fix), then in
    the prepared copy (new-user trial 2: only data/raw/PAIR's copy was named); splits without
    such a line (extracted from an archive) and a SOURCE without any keep the copy's name; the
    too_long.json record lists the data's lines only."""
    raw, seg = pair_dirs(tmp_path, long_at={("test", "gl"): 2, ("train", "en"): 3})
    mine = tmp_path / "my corpus"
    (raw / "SOURCE").write_text(
        "pair=gl-en\nsrc=gl\ntgt=en\nsource=own corpus\nprepared=2026-12-07T00:00:00Z\n"
        f"origin.test.gl={mine}/test.gl\norigin.train.en={mine}/train.en\n"
    )
    assert seglen.origins(str(raw)) == {
        "test.gl": f"{mine}/test.gl",
        "train.en": f"{mine}/train.en",
    }
    result = seglen.check_segmentation(str(raw), str(seg), "gl", "en", ("test",), (), (8, 8))
    assert seglen.report(result, "seg")[0] == (
        f"error: {mine}/test.gl:2 (prepared as {raw}/test.gl:2): 8 tokens after segmentation "
        f"({seg}/test.gl), 1 before: over 7, the most the model takes (max positions 8, one "
        "for the end-of-sentence token)"
    )
    result = seglen.check_segmentation(str(raw), str(seg), "gl", "en", ("train",), (), (8, 8))
    assert str(result.dropped[0]).startswith(f"{mine}/train.en:3 (prepared as {raw}/train.en:3): ")
    record = json.loads((seg / "too_long.json").read_text())
    assert [(x["path"], x["line"]) for x in record["lines"]] == [(f"{raw}/train.en", 3)]
    assert "origin" not in record["lines"][0]
    (raw / "SOURCE").write_text("pair=gl-en\nsource=TED all-talks TSVs in /d\n")
    assert seglen.origins(str(raw)) == {} and seglen.origins(str(tmp_path / "none")) == {}


def test_a_segmentation_that_is_not_line_for_line_is_an_error(tmp_path, capsys):
    raw, seg = pair_dirs(tmp_path)
    write(seg / "test.en", ["one line"])
    assert seglen.main(check_argv(raw, seg, "--splits", "test")) == 1
    assert capsys.readouterr().err == (
        f"error: {seg}/test.en: 1 lines, but {raw}/test.en has 4: not its segmentation\n"
    )


def test_explain_generate_names_the_line_fairseq_stopped_at():
    """fairseq-generate's 'Size of sample #N is invalid' (0-based), named as FILE:LINE of the
    segmented split with its length and the limit (evaluate.sh's message)."""
    from qknorm_tools.textio import explain_generate_failure

    log = (
        "Traceback (most recent call last):\n  ...\nException: Size of sample #4 is invalid "
        "(=(5001, 12)) since max_positions=(1024, 1024), skip this example with "
        "--skip-invalid-size-inputs-valid-test\n"
    )
    files = ["data/bpe/gl-en/test.gl", "data/bpe/gl-en/test.en"]
    assert explain_generate_failure(log, "ck.pt", "data/bin/gl-en", files) == (
        "data/bpe/gl-en/test.gl:5: 5000 tokens after segmentation, over 1023, the most the "
        "model takes (max positions 1024, one for the end-of-sentence token)"
    )
    assert "skip-invalid" not in explain_generate_failure(log, "ck.pt", "d")


@pytest.mark.parametrize("n_long", [25])
def test_many_long_lines_are_counted_not_all_named(tmp_path, n_long, capsys):
    raw, seg = tmp_path / "raw", tmp_path / "seg"
    for d, word in ((raw, "x"), (seg, "x@@ x@@ x")):
        for lang in ("gl", "en"):
            write(d / f"test.{lang}", [word] * n_long)
    assert (
        seglen.main(check_argv(raw, seg, "--splits", "test", positions=3, cmd=tmp_path / "c")) == 1
    )
    err = capsys.readouterr().err.splitlines()
    assert len(err) == seglen.MAX_NAMED + 2
    assert err[-2] == "error: ... and 30 more such lines"
    assert err[-1].startswith("error: 50 dev/test line(s) longer than the model takes")
