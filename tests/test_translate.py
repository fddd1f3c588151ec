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
