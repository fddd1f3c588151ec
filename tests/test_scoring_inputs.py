"""Inputs that used to change scores silently: a UTF-8 byte order mark, subword markers left in
a hypothesis, all-empty hypotheses."""

import json
import subprocess
import sys

import pytest
import sacrebleu

from qknorm_tools import scoring, textio


REFS = [
    "the cat sat on the mat .",
    "hello world , how are you ?",
    "it is a nice day today .",
    "we go home now .",
]


def score_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "qknorm_tools.evaluate", "score", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def write(path, lines, bom=False):
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + ("\n".join(lines) + "\n").encode())
    return path


# ----------------------------------------------------------------------- byte order mark
@pytest.mark.parametrize("side", ["hyp", "ref"])
def test_bom_is_removed_loudly_and_identical_text_scores_100(tmp_path, side):
    """A BOM (an encoding signature, not text) glued to the first word cost BLEU on identical
    text; it is removed with a warning naming the file."""
    hyp = write(tmp_path / "hyp.txt", REFS, bom=side == "hyp")
    ref = write(tmp_path / "ref.txt", REFS, bom=side == "ref")
    # what sacreBLEU gives when the BOM is kept: below 100 on identical text
    kept = [("\ufeff" + REFS[0]) if i == 0 else r for i, r in enumerate(REFS)]
    assert sacrebleu.corpus_bleu(kept, [REFS], tokenize="none").score < 95
    p = score_cli("--hyp", hyp, "--ref", ref, "--json")
    assert p.returncode == 0, p.stderr
    res = json.loads(p.stdout)
    for key in ("bleu_tok", "bleu", "chrf"):
        assert res[key] == pytest.approx(100.0), key
    path = hyp if side == "hyp" else ref
    assert f"file {str(path)!r}: removed a UTF-8 byte order mark (BOM)" in p.stderr
    assert "(line 1)" in p.stderr


def test_bom_at_the_start_of_later_lines_is_named(tmp_path, capsys):
    """Concatenated files carry a BOM at the start of each part: each line is named."""
    path = tmp_path / "cat.txt"
    path.write_bytes("a b\n\ufeffc d\ne f\n\ufeffg\n".encode())
    assert textio.read_lines(path, "hypothesis") == ["a b", "c d", "e f", "g"]
    assert "at the start of 2 line(s) (line 2, 4)" in capsys.readouterr().err


# ----------------------------------------------------------------------- subword markers
@pytest.mark.parametrize(
    "hyp_line, marker",
    [("the c@@ at sat on the mat .", "@@"), ("\u2581the \u2581cat sat on the mat .", "\u2581")],
)
def test_bpe_markers_in_a_hypothesis_are_refused_unless_allowed(tmp_path, hyp_line, marker):
    hyps = [hyp_line, *REFS[1:]]
    hyp = write(tmp_path / "hyp.txt", hyps)
    ref = write(tmp_path / "ref.txt", REFS)
    p = score_cli("--hyp", hyp, "--ref", ref, "--json")
    assert p.returncode == 2 and p.stdout == ""
    assert f"hypothesis file {str(hyp)!r} still holds subword markers" in p.stderr
    assert "on 1 of 4 lines (first: line 1" in p.stderr and "--allow-bpe-markers" in p.stderr
    p = score_cli("--hyp", hyp, "--ref", ref, "--json", "--allow-bpe-markers")
    assert p.returncode == 0, p.stderr
    assert "warning:" in p.stderr and "scored as is: --allow-bpe-markers" in p.stderr
    expected = sacrebleu.corpus_bleu(hyps, [REFS], tokenize="none").score
    assert json.loads(p.stdout)["bleu_tok"] == pytest.approx(expected)


def test_bpe_markers_in_a_reference_are_refused(tmp_path):
    ref = write(tmp_path / "ref.txt", ["the c@@ at sat", *REFS[1:]])
    with pytest.raises(textio.BPEMarkerError, match=r"reference file .* subword markers"):
        scoring.score_files(write(tmp_path / "hyp.txt", REFS), ref)


@pytest.mark.parametrize("text", ["e-mail me @@ home", "x@@y", "C++ and C@", "50 % off"])
def test_text_that_only_looks_like_markers_is_scored(text):
    """'@@' as a token of its own or inside a word is text, not a continuation marker."""
    assert textio.find_bpe_markers([text]) == []


# ----------------------------------------------------------------------- empty hypotheses
def test_all_empty_hypotheses_warn_once_with_a_plain_label(tmp_path):
    hyp = write(tmp_path / "hyp.txt", [""] * len(REFS))
    ref = write(tmp_path / "ref.txt", REFS)
    p = score_cli("--hyp", hyp, "--ref", ref, "--json")
    assert p.returncode == 0, p.stderr
    warnings = [line for line in p.stderr.splitlines() if line.startswith("warning:")]
    assert warnings == [
        f"warning: every one of the 4 lines of hypothesis file {str(hyp)!r} is empty: "
        f"its scores are 0"
    ]
    assert json.loads(p.stdout)["bleu_tok"] == 0.0
