"""The translate helper (qknorm_model_tools/translate.py) on input the model cannot take whole
(issue 37 items 1 and 4): a line longer than the model takes is reported and left empty, every
other line is translated, exit 1 at the end; characters never seen in training are warned of
once. A tiny run of the real pipeline (prepare_data, bpe, binarize, 2 updates of train.sh)."""

import subprocess
import sys

import pytest

from conftest import (
    FAR_BOUND,
    GL_WORDS,
    REPO,
    cli_env,
    make_env,
    make_tiny_ted,
    out,
    prepare_pair,
    run_script,
    tiny_model,
)

LONG = " ".join(GL_WORDS[i % len(GL_WORDS)] for i in range(3000))  # 3,000 words seen in training
LINES = ["o mundo .", LONG, "a casa de auga ."]
CELL = ("gl-en", "twt", "--max-update", "2")


@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """A work dir with gl-en prepared and a 2-update twt run (fp32)."""
    root = tmp_path_factory.mktemp("translate")
    make_tiny_ted(root / "data_in", sizes=(120, 12, 15))
    env = make_env(root / "work", QKNORM_DATA_DIR=root / "data_in", OMP_NUM_THREADS=1)
    prepare_pair(env, "--merges", 50)
    p = run_script("train.sh", *CELL, "--threads", 1, "--", *tiny_model(), env=env)
    assert p.returncode == 0, out(p)
    return root / "work"


@pytest.fixture(scope="module")
def translator(work):
    import os

    from qknorm_model_tools.translate import Translator

    old = os.environ.get("QKNORM_WORK_DIR"), os.environ.get("QKNORM_BF16")
    os.environ.update(QKNORM_WORK_DIR=str(work), QKNORM_BF16="0")
    try:
        yield Translator.from_pipeline("gl-en", "twt", max_update=2)
    finally:
        for key, value in zip(("QKNORM_WORK_DIR", "QKNORM_BF16"), old):
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


@pytest.mark.slow
def test_a_line_too_long_is_left_out_and_the_others_translated(translator):
    """translate_fitting: '' for the long line (1-based line, its length, the limit), the
    others exactly as translated without it; translate() refuses the whole input."""
    from qknorm_model_tools.translate import InputTooLongError, TooLongLine

    assert translator.max_source_tokens == 1023
    n = translator.hub.encode(LONG).numel() - 1
    assert n >= 3000
    hyps, too_long = translator.translate_fitting(LINES)
    assert too_long == [TooLongLine(2, n, 1023)]
    assert hyps[1] == "" and hyps[0] and hyps[2]
    fitting = [LINES[0], LINES[2]]
    assert [hyps[0], hyps[2]] == translator.translate(fitting)
    assert translator.translate(fitting) == translator.hub.translate(
        fitting, **translator.generation
    )
    with pytest.raises(InputTooLongError) as e:
        translator.translate(LINES)
    assert str(e.value) == (
        f"line:2: {n} tokens after segmentation, over 1023, the most the model takes "
        "(Translator.translate_fitting translates the others)"
    )


@pytest.mark.slow
def test_the_cli_writes_every_line_it_can_and_exits_1(work, tmp_path):
    """The command line on 3 lines, the 2nd too long: lines 1 and 3 translated, an empty line 2,
    stderr names stdin:2 with its length and the limit, no traceback, no fairseq option
    suggested; exit 1. The same into --output FILE."""
    env = {**cli_env(), "QKNORM_WORK_DIR": str(work), "QKNORM_BF16": "0"}
    text = "".join(x + "\n" for x in LINES)
    cmd = [sys.executable, "-m", "qknorm_model_tools.translate", *CELL]
    p = subprocess.run(cmd, env=env, input=text, capture_output=True, text=True, timeout=FAR_BOUND)
    assert p.returncode == 1, p.stderr
    hyps = p.stdout.split("\n")
    assert len(hyps) == 4 and hyps[1] == "" and hyps[0] and hyps[2] and hyps[3] == ""
    errors = [x for x in p.stderr.splitlines() if x.startswith("error: ")]
    assert len(errors) == 2 and errors[0].startswith("error: stdin:2: ")
    assert errors[0].endswith(
        " tokens after segmentation, over 1023, the most the model takes: not translated"
    )
    assert errors[1] == (
        "error: 1 of 3 lines not translated (too long; each has an empty line in the output, the "
        "other lines are translated): split them into shorter sentences"
    )
    assert "Traceback" not in p.stderr and "--skip-invalid" not in p.stderr
    output = tmp_path / "out.en"
    p2 = subprocess.run(
        [*cmd, "--output", output], env=env, input=text, capture_output=True, text=True,
        timeout=FAR_BOUND,
    )  # fmt: skip
    assert p2.returncode == 1 and output.read_text(encoding="utf-8") == p.stdout, p2.stderr


@pytest.mark.slow
def test_characters_never_seen_in_training_are_warned_of_once(translator):
    """Characters in no dictionary entry: one warning, with the count and examples."""
    known = translator.known_characters()
    assert {"o", "a", "."} <= known and not {"@", "€", "ñ"} & known
    assert translator.unseen_character_warning(LINES, "stdin") is None
    warning = translator.unseen_character_warning(["o € .", "a casa", "€ ñ €"], "in.gl")
    assert warning == (
        "in.gl: 2 characters never seen in training (in no entry of the dictionary of "
        f"{translator.data_bin}), 4 occurrences in 2 lines: '€' (U+20AC euro sign, line 1, 3 "
        "times), 'ñ' (U+00F1 latin small letter n with tilde, line 3, 1 time); the pieces holding "
        "them reach the model as <unk>"
    )


def test_unseen_character_warning_counts_and_shows_the_first_examples():
    from qknorm_model_tools.translate import unseen_character_warning

    lines = ["abc", "a\u00e9 z", "\u00e9\u00e8\u00ea\u00eb\u00ec\u00ed"]
    warning = unseen_character_warning(lines, set("abc "), "stdin", "D", examples=2)
    assert warning == (
        "stdin: 7 characters never seen in training (in no entry of D), 8 occurrences in 2 lines: "
        "'é' (U+00E9 latin small letter e with acute, line 2, 2 times), 'z' (U+007A latin small "
        "letter z, line 2, 1 time), and 5 more; the pieces holding them reach the model as <unk>"
    )
    assert unseen_character_warning(["a b\tc"], set("abc"), "stdin", "D") is None


@pytest.mark.slow
def test_translate_names_the_runs_that_exist(tmp_path):
    runs = tmp_path / "runs" / "gl-en"
    for rel in ("cpu-proxy-max-update-5/qknorm_paper/seed1-bf16", "cpu-proxy/qknorm_paper/seed2",
                "cpu-proxy/twt/seed1", "cpu-proxy/qknorm_paper/seed3-lr3e-3"):  # fmt: skip
        (runs / rel / "checkpoints").mkdir(parents=True)
        (runs / rel / "checkpoints" / "checkpoint_best.pt").write_bytes(b"")
    env = make_env(tmp_path)

    def translate(*args):
        return subprocess.run(
            [sys.executable, "-m", "qknorm_model_tools.translate", *args], input="ola\n", cwd=REPO,
            env=env, capture_output=True, text=True, timeout=FAR_BOUND,
        )  # fmt: skip

    def not_found(*args):
        """The last stderr line of a translate call that must exit 1."""
        p = translate(*args)
        assert p.returncode == 1, out(p)
        return p.stderr.splitlines()[-1]

    assert not_found("gl-en", "qknorm_paper") == (
        f"error: checkpoint {runs}/cpu-proxy/qknorm_paper/seed1/checkpoints/checkpoint_best.pt "
        "not found: run scripts/train.sh gl-en qknorm_paper --profile cpu-proxy --seed 1 first; "
        "runs of this pair and system that have one: runs/gl-en/cpu-proxy/qknorm_paper/seed2 "
        "(--profile cpu-proxy --seed 2); runs/gl-en/cpu-proxy/qknorm_paper/seed3-lr3e-3; "
        "runs/gl-en/cpu-proxy-max-update-5/qknorm_paper/seed1-bf16 (--profile cpu-proxy "
        "--max-update 5 --seed 1 --bf16-autocast)"
    )
    # looking for bf16 runs (QKNORM_BF16=1, or the profile's auto on a bf16 CPU): the fp32 runs
    # it lists say how to select them
    env["QKNORM_BF16"] = "1"
    assert not_found("gl-en", "qknorm_paper", "--seed", "2") == (
        f"error: checkpoint {runs}/cpu-proxy/qknorm_paper/seed2-bf16/checkpoints/"
        "checkpoint_best.pt not found: run scripts/train.sh gl-en qknorm_paper --profile "
        "cpu-proxy --seed 2 --precision bf16 first; runs of this pair and system that have one: "
        "runs/gl-en/cpu-proxy/qknorm_paper/seed2 (--profile cpu-proxy --seed 2, with "
        "QKNORM_BF16=0 and no --bf16-autocast); runs/gl-en/cpu-proxy/qknorm_paper/seed3-lr3e-3; "
        "runs/gl-en/cpu-proxy-max-update-5/qknorm_paper/seed1-bf16 (--profile cpu-proxy "
        "--max-update 5 --seed 1 --bf16-autocast)"
    )
    env["QKNORM_BF16"] = "0"
    p = translate("gl-en", "no_such_system")
    assert p.returncode == 2 and "unknown system 'no_such_system'" in p.stderr, out(p)
    # --checkpoint avgN as evaluate.sh takes it: the file evaluate.sh --checkpoint avgN makes,
    # from a run that keeps at least N checkpoints to average (update checkpoints here)
    seed4 = runs / "cpu-proxy/qknorm_paper/seed4/checkpoints"
    seed4.mkdir(parents=True)
    for u in (400, 800, 1200):
        (seed4 / f"checkpoint_1_{u}.pt").write_bytes(b"")
    assert not_found("gl-en", "qknorm_paper", "--seed", "4", "--checkpoint", "avg3") == (
        f"error: checkpoint {seed4}/checkpoint_avg3.pt "
        "not found: run scripts/evaluate.sh gl-en qknorm_paper --profile cpu-proxy --seed 4 "
        "--checkpoint avg3 (it averages the last 3 checkpoints) first; no run of gl-en "
        "qknorm_paper has a checkpoint_avg3.pt"
    )
    # ... and from one that keeps fewer (a short try keeps only best and last): no advice to
    # run evaluate.sh, which would fail too
    for ckpt, fewer in (("avg3", ""), ("avg4", ", or avg3")):
        seed = "2" if ckpt == "avg3" else "4"
        kept = 0 if ckpt == "avg3" else 3
        assert not_found("gl-en", "qknorm_paper", "--seed", seed, "--checkpoint", ckpt) == (
            f"error: checkpoint {runs}/cpu-proxy/qknorm_paper/seed{seed}/checkpoints/"
            f"checkpoint_{ckpt}.pt not found, and its run keeps {kept} checkpoints to average "
            f"(checkpointE.pt or checkpoint_E_U.pt), fewer than {ckpt[3:]}: use --checkpoint "
            f"best or last{fewer} (a short try, or a profile with --no-epoch-checkpoints, keeps "
            "none)"
        )
    for bad in ("avg0", "avgx", "avg", "worst"):
        p = translate("gl-en", "qknorm_paper", "--checkpoint", bad)
        assert p.returncode == 2, out(p)
        assert p.stderr.splitlines()[-1].endswith(
            f"--checkpoint must be best, last or avgN (e.g. avg5), got '{bad}'"
        ), out(p)


def test_translate_checkpoint_names_are_evaluate_shs():
    """best, last and avgN name the files evaluate.sh decodes; other names are refused."""
    from qknorm_model_tools.translate import checkpoint_file_name

    assert [checkpoint_file_name(c) for c in ("best", "last", "avg1", "avg10")] == [
        "checkpoint_best.pt", "checkpoint_last.pt", "checkpoint_avg1.pt", "checkpoint_avg10.pt"
    ]  # fmt: skip
    for bad in ("avg0", "avg-1", "avg٣", "Best", ""):
        with pytest.raises(ValueError, match="must be best, last or avgN"):
            checkpoint_file_name(bad)


@pytest.mark.slow
def test_translate_warns_of_characters_the_pipeline_refuses(tmp_path):
    """No-break spaces, tabs and control characters in translate's input: translated as they
    are, with a warning naming the first line (the corpus checks refuse them)."""
    from qknorm_model_tools.translate import bad_character_warning

    assert bad_character_warning(["ola mundo", "bo dia"], "in.gl") is None
    lines = ["ola mundo", "ola\u00a0mundo", "un\tdous", "tres\u202fcatro"]
    assert bad_character_warning(lines, "in.gl") == (
        "in.gl:2: no-break space (U+00A0) at character 4: a word boundary for fairseq's "
        "tokenizer but not for BPE tools (subword-nmt splits words on U+0020 only and leaves a "
        "stray @@ token); replace it by a space; 2 more lines hold such characters; translated "
        "as it is"
    )
    assert bad_character_warning(lines[:3], "stdin").endswith(
        "; 1 more line holds such characters; translated as it is"
    )
    # said by the command before anything else (here: before the missing run's error)
    p = subprocess.run(
        [sys.executable, "-m", "qknorm_model_tools.translate", "gl-en", "twt"],
        input="ola\u00a0mundo\n", cwd=REPO, env=make_env(tmp_path), capture_output=True,
        text=True, timeout=FAR_BOUND,
    )  # fmt: skip
    assert p.returncode == 1, out(p)
    warnings = [line for line in p.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == [
        "warning: stdin:1: no-break space (U+00A0) at character 4: a word boundary for "
        "fairseq's tokenizer but not for BPE tools (subword-nmt splits words on U+0020 only and "
        "leaves a stray @@ token); replace it by a space; translated as it is"
    ], out(p)


@pytest.mark.slow
def test_translate_warns_of_a_byte_order_mark_and_empty_lines(tmp_path):
    """helper-12: a BOM (refused by the corpus checks) and empty lines (translated by fairseq
    to a made-up sentence) went by without a word; an --output that is a directory was said
    only after the model loaded."""
    from qknorm_model_tools.translate import bad_character_warning, empty_line_warning

    assert bad_character_warning(["\ufeffola mundo", "bo dia"], "in.gl") == (
        "in.gl:1: UTF-8 byte order mark (U+FEFF) at character 1: it becomes part of the first "
        "word; translated as it is"
    )
    assert empty_line_warning(["ola", "bo dia"], "in.gl") is None
    assert empty_line_warning(["ola", "", "  ", "bo dia"], "in.gl") == (
        "in.gl:2: an empty line (2 in all): fairseq translates an empty source to a sentence of "
        "its own, not to an empty line; translated as it is"
    )
    p = subprocess.run(
        [sys.executable, "-m", "qknorm_model_tools.translate", "gl-en", "twt",
         "--output", tmp_path],
        input="ola\n\n", cwd=REPO, env=make_env(tmp_path), capture_output=True, text=True,
        timeout=FAR_BOUND,
    )  # fmt: skip
    assert p.returncode == 1, out(p)
    assert p.stderr.splitlines() == [
        "warning: stdin:2: an empty line (1 in all): fairseq translates an empty source to a "
        "sentence of its own, not to an empty line; translated as it is",
        f"error: --output {tmp_path} is a directory: name a file",
    ], out(p)


@pytest.mark.slow
def test_translate_names_the_bad_line_and_the_first_step_of_a_missing_run(tmp_path):
    """Bytes that are not UTF-8: the line and the byte in it (1-based); --checkpoint avgN of a
    run that does not exist yet: train first, then average (not evaluate.sh alone)."""
    env = make_env(tmp_path)

    def translate(data: bytes, *args):
        return subprocess.run(
            [sys.executable, "-m", "qknorm_model_tools.translate", "gl-en", "twt", *args],
            input=data, cwd=REPO, env=env, capture_output=True, timeout=FAR_BOUND,
        )  # fmt: skip

    p = translate(b"ola mundo\nbo \xa0dia\n")
    assert p.returncode == 1, p.stderr
    assert p.stderr.decode().splitlines()[-1] == (
        "error: stdin:2: invalid UTF-8 (byte 0xa0 at byte 4 of the line)"
    )
    p = translate(b"ola\n", "--checkpoint", "avg3", "--max-update", "20")
    assert p.returncode == 1, p.stderr
    run = tmp_path / "runs/gl-en/cpu-proxy-max-update-20/twt/seed1/checkpoints/checkpoint_avg3.pt"
    assert p.stderr.decode().splitlines()[-1] == (
        f"error: checkpoint {run} not found: no run there yet; run scripts/train.sh gl-en twt "
        "--profile cpu-proxy --seed 1 --max-update 20, then scripts/evaluate.sh with the same "
        "options and --checkpoint avg3 (it averages the last 3 checkpoints); no run of gl-en twt "
        "has a checkpoint_avg3.pt"
    )


def test_translate_warns_of_crlf_line_endings(tmp_path, monkeypatch, capsys):
    """CRLF line endings (a file saved on Windows) went by without a word (issue 37, leftover
    5): the carriage return is whitespace to fairseq's tokenizer. Now warned of as the corpus
    checks refuse it (qknorm_tools.corpus_check.carriage_return_problems, the one rule): the
    first line and how many more, before anything else is said."""
    from qknorm_model_tools import translate
    from qknorm_tools.corpus_check import carriage_return_problems

    crlf = carriage_return_problems("ola mundo\r")
    assert crlf == [
        "CRLF line ending (carriage return before newline); convert with `sed -i 's/\\r$//'`"
    ]
    assert translate.bad_character_warning(["ola mundo", "bo\rdia", "tres\r"], "in.gl") == (
        "in.gl:2: stray carriage return (\\r) inside the line; text-mode readers would split the "
        "line here; 1 more line holds such characters; translated as it is"
    )
    f = tmp_path / "in.gl"
    f.write_bytes(b"ola mundo\r\nbo dia\r\ntres\r\n")
    monkeypatch.setenv("QKNORM_WORK_DIR", str(tmp_path / "work"))
    assert translate.main(["gl-en", "twt", "--input", str(f)]) == 1  # no such run here
    err = capsys.readouterr().err.splitlines()
    more = "2 more lines hold such characters; translated as it is"
    assert err[0] == f"warning: {f}:1: {crlf[0]}; {more}"


def test_translate_refuses_to_write_over_its_input(tmp_path, capsys):
    """--output naming the --input file replaced the text by its translations without a word
    (a new user's trial, 2026-12-07): a usage error before anything is read or written."""
    from qknorm_model_tools import translate

    f = tmp_path / "in.gl"
    f.write_text("ola mundo\n")
    same = tmp_path / "." / "in.gl"  # the same file under another spelling
    with pytest.raises(SystemExit) as e:
        translate.main(["gl-en", "twt", "--input", str(f), "--output", str(same)])
    assert e.value.code == 2 and f.read_text() == "ola mundo\n"
    assert f"--output {same} is the --input file" in capsys.readouterr().err


def test_a_missing_bf16_run_is_made_with_precision_bf16(tmp_path):
    """The hint for a missing bf16 run (translate --bf16-autocast) named train.sh without
    --precision bf16, which on a CPU that decides fp32 skips the finished fp32 twin instead."""
    from qknorm_model_tools.translate import missing_checkpoint

    ck = tmp_path / "runs/gl-en/cpu-proxy/qknorm_paper/seed1-bf16/checkpoints/checkpoint_best.pt"
    err = missing_checkpoint(ck, "gl-en", "qknorm_paper", "cpu-proxy", 1, "best", None)
    assert f"checkpoint {ck} not found: run scripts/train.sh gl-en qknorm_paper --profile " in str(
        err
    )
    assert "--profile cpu-proxy --seed 1 --precision bf16 first" in str(err)
