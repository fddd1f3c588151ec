"""Inputs that used to change scores silently: a UTF-8 byte order mark, subword markers left in
a hypothesis, all-empty hypotheses; and the segmentation itself: sentencepiece's normalization
and vocabulary size, BPE-dropout's length statistics."""

import json
import subprocess
import sys

import pytest
import sacrebleu

from qknorm_tools import scoring, textio

from conftest import FAR_BOUND, SHARED, make_env, make_tiny_ted, out, run_script

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
        timeout=FAR_BOUND,
    )


def write(path, lines, bom=False):
    path.write_bytes((b"\xef\xbb\xbf" if bom else b"") + ("\n".join(lines) + "\n").encode())
    return path


# ----------------------------------------------------------------------- byte order mark
@pytest.mark.parametrize("side", ["hyp", "ref"])
@pytest.mark.slow
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
@pytest.mark.slow
def test_bpe_markers_in_a_hypothesis_are_refused_unless_allowed(tmp_path, hyp_line, marker):
    hyps = [hyp_line, *REFS[1:]]
    hyp = write(tmp_path / "hyp.txt", hyps)
    ref = write(tmp_path / "ref.txt", REFS)
    p = score_cli("--hyp", hyp, "--ref", ref, "--json")
    assert p.returncode == 1 and p.stdout == ""  # the data, not the usage (exits)
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
@pytest.mark.slow
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


# ----------------------------------------------------------------------- sentencepiece
@pytest.fixture(scope="module")
def prepared(tmp_path_factory):
    """A prepared tiny gl-en pair whose lines hold characters NFKC would rewrite."""
    root = tmp_path_factory.mktemp("spm")
    make_tiny_ted(root / "data_in")
    special = "o 1º de xaneiro , ﬁn e ＡＢＣ ½ ."  # ordinal, ligature, full width, fraction
    for split in ("train", "dev", "test"):
        for lang in ("gl", "en"):
            path = root / "data_in" / "ted-gl-en" / f"{split}.{lang}"
            lines = path.read_text(encoding="utf-8").splitlines()
            lines[0] = special
            path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    (root / "data_in" / "SHA256SUMS").unlink()
    env = make_env(root / "work", QKNORM_DATA_DIR=root / "data_in", OMP_NUM_THREADS=1)
    p = run_script("prepare_data.sh", "gl-en", env=env)
    assert p.returncode == 0, out(p)
    return root / "work", env, special


@pytest.mark.slow
def test_sentencepiece_segmentation_decodes_back_to_the_raw_text(prepared):
    """Identity normalization: the pieces of every line decode to the raw line (NFKC turned
    '1º' into '1o', so no hypothesis could ever match such a reference)."""
    pytest.importorskip("sentencepiece")
    from fairseq.data.data_utils import post_process

    work, env, special = prepared
    p = run_script("bpe.sh", "gl-en", "--tool", "sentencepiece", "--vocab-size", "120", env=env)
    assert p.returncode == 0, out(p)
    for split in ("train", "dev", "test"):
        for lang in ("gl", "en"):
            raw = (work / f"data/raw/gl-en/{split}.{lang}").read_text(encoding="utf-8")
            seg = (work / f"data/bpe/gl-en/{split}.{lang}").read_text(encoding="utf-8")
            decoded = [post_process(s, "sentencepiece") for s in seg.splitlines()]
            assert decoded == raw.splitlines(), (split, lang)
    assert decoded[0] == special
    bpe = json.loads((work / "data/bpe/gl-en/bpe.json").read_text())
    assert bpe["normalization"] == "identity"


@pytest.mark.parametrize(
    "size, message",
    [
        ("5", "sentencepiece cannot train a 5-piece BPE model: Vocabulary size is smaller "
              "than required_chars. 5 vs"),
        ("5000", "sentencepiece cannot train a 5000-piece BPE model: Vocabulary size too high "
                 "(5000). Please set it to a value <="),
    ],
)  # fmt: skip
@pytest.mark.slow
def test_sentencepiece_vocabulary_it_cannot_build_is_a_clear_error(prepared, size, message):
    """Too small: sentencepiece's own reason (not 'is sentencepiece installed?'); too large:
    refused (it used to give fewer pieces silently), saying which sizes work. Nothing is lost."""
    pytest.importorskip("sentencepiece")
    work, env, _ = prepared
    p = run_script("bpe.sh", "gl-en", "--tool", "sentencepiece", "--vocab-size", size, env=env)
    assert p.returncode != 0
    assert message in p.stderr, p.stderr
    assert "installed" not in p.stderr


@pytest.mark.slow
def test_sentencepiece_reports_pieces_the_data_do_not_use(prepared):
    pytest.importorskip("sentencepiece")
    work, env, _ = prepared
    p = run_script("bpe.sh", "gl-en", "--tool", "sentencepiece", "--vocab-size", "150", env=env)
    assert p.returncode == 0, out(p)
    assert "warning: only " in p.stderr and "of the 150 sentencepiece pieces occur" in p.stderr


# ----------------------------------------------------------------------- BPE-dropout
@pytest.mark.parametrize(
    "tool_args",
    [["--merges", "60"], ["--tool", "sentencepiece", "--vocab-size", "120"]],
    ids=["subword-nmt", "sentencepiece"],
)
@pytest.mark.slow
def test_bpe_dropout_L_comes_from_the_deterministic_segmentation(prepared, tool_args):
    """QKNorm's L (and g0) is a property of the model's deterministic segmentation; the
    sampled training split is longer. The sample is static, and bpe.sh says so."""
    if "sentencepiece" in tool_args:
        pytest.importorskip("sentencepiece")
    work, env, _ = prepared
    bpe = work / "data/bpe/gl-en"
    p = run_script("bpe.sh", "gl-en", *tool_args, "--force", env=env)
    assert p.returncode == 0, out(p)
    plain = json.loads((bpe / "length_stats.json").read_text())
    p = run_script("bpe.sh", "gl-en", *tool_args, "--bpe-dropout", "0.5", env=env)
    assert p.returncode == 0, out(p)
    assert "one static sample" in p.stderr and "not resampled per epoch" in p.stderr
    stats = json.loads((bpe / "length_stats.json").read_text())
    assert stats["L"] == plain["L"] and stats["segmentation"] == "deterministic"
    sampled = subprocess.run(
        [sys.executable, "-m", "qknorm_tools.corpus", "length-percentile", "--file",
         bpe / "train.gl", "--file", bpe / "train.en"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert json.loads(sampled.stdout)["L"] > stats["L"]  # the sample really is longer
    manifest = json.loads((bpe / "bpe.json").read_text())
    assert manifest["bpe_dropout"]["p"] == 0.5 and "static" in manifest["bpe_dropout"]["sample"]
    assert not (bpe / ".deterministic").exists()


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "ted-gl-en").is_dir(), reason=f"no shared data at {SHARED}")
def test_real_gl_en_sentencepiece_round_trip(tmp_path):
    """The 14 gl-en lines NFKC changed (1 test, 2 dev, 11 train) now decode to themselves."""
    pytest.importorskip("sentencepiece")
    from fairseq.data.data_utils import post_process

    from qknorm_tools.spm import spm_segment

    spm_segment(str(SHARED / "ted-gl-en"), str(tmp_path), "gl", "en", 3000)
    for split in ("train", "dev", "test"):
        for lang in ("gl", "en"):
            raw = (SHARED / "ted-gl-en" / f"{split}.{lang}").read_text(encoding="utf-8")
            seg = (tmp_path / f"{split}.{lang}").read_text(encoding="utf-8").splitlines()
            bad = [
                (i, r)
                for i, (r, s) in enumerate(zip(raw.splitlines(), seg), 1)
                if post_process(s, "sentencepiece") != " ".join(r.split())
            ]
            assert bad == [], (split, lang, bad[:3])
