"""qknorm_tools.unicode_forms: composed (NFC) and decomposed (NFD) letters in a corpus are
reported with counts by the corpus check, and a pair that opts in (`[text] normalize = "NFC"`)
is composed by prepare_data.sh, recorded in the data identity and applied by the translate
helper to its input (issue 37, item 4)."""

from __future__ import annotations

import json

import pytest

from qknorm_tools import corpus, unicode_forms
from qknorm_tools.unicode_forms import FormCounts, form_warning, normalize_file

from conftest import make_env, make_tiny_ted, out, run_script

#: "café" composed (U+00E9) and decomposed (e + U+0301 COMBINING ACUTE ACCENT), written out as
#: code points so that no editor or tool can normalize this file's own text
CAFE_NFC = "caf\u00e9"
CAFE_NFD = "cafe\u0301"


def counts_of(lines):
    c = FormCounts()
    for line in lines:
        c.add(line)
    return c


def test_counts_name_the_first_decomposed_line_and_the_composed_ones():
    c = counts_of(["a b", f"o {CAFE_NFC}", f"o {CAFE_NFD} e\u0301", "x", f"{CAFE_NFD}"])
    assert (c.lines, c.not_nfc, c.composed, c.first_line) == (5, 2, 1, 3)
    assert "U+0065 LATIN SMALL LETTER E + U+0301 COMBINING ACUTE ACCENT" in c.example
    assert "U+00E9 LATIN SMALL LETTER E WITH ACUTE" in c.example
    assert counts_of(["a", CAFE_NFC]).not_nfc == 0
    # a file in NFD only: no composed letter, still reported (the other data may be NFC)
    only = counts_of([CAFE_NFD, "b"])
    assert (only.not_nfc, only.composed, only.first_line) == (1, 0, 1)


def test_warning_gives_counts_and_what_happens():
    assert form_warning("train.gl", counts_of(["a", CAFE_NFC])) is None
    c = counts_of([CAFE_NFC, CAFE_NFD, CAFE_NFD])
    w = form_warning("train.gl", c)
    assert w.startswith("warning: train.gl: 2 of 3 lines not in Unicode NFC (decomposed letters, ")
    assert "first at line 2:" in w and "mixed with 1 line(s) holding composed characters" in w
    assert 'set [text] normalize = "NFC"' in w
    assert 'normalized to NFC ([text] normalize = "NFC")' in form_warning("t", c, "NFC")
    w = form_warning("test.gl", counts_of([CAFE_NFD]))
    assert "no composed character elsewhere in the file" in w


def test_normalize_file_composes_in_place_and_counts_changed_lines(tmp_path):
    f = tmp_path / "test.gl"
    f.write_text(f"{CAFE_NFD} a\nb\n{CAFE_NFC}\n", encoding="utf-8")
    assert normalize_file(str(f), str(f), "NFC") == 1
    assert f.read_text(encoding="utf-8") == f"{CAFE_NFC} a\nb\n{CAFE_NFC}\n"
    assert normalize_file(str(f), str(f), "NFC") == 0
    assert [p.name for p in tmp_path.iterdir()] == ["test.gl"]  # no temporary file left
    with pytest.raises(ValueError, match="'NFKC': one of none, NFC"):
        normalize_file(str(f), str(f), "NFKC")


def test_cli_prints_changed_lines_and_exits_by_meaning(tmp_path, capsys):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text(f"{CAFE_NFD}\n{CAFE_NFD}\n", encoding="utf-8")
    b.write_text("x\n", encoding="utf-8")
    assert unicode_forms.main(["normalize", "--form", "NFC", str(a), str(b)]) == 0
    assert capsys.readouterr().out == f"{a}\t2\n{b}\t0\n"
    bad = tmp_path / "latin1"
    bad.write_bytes(b"caf\xe9\n")
    assert unicode_forms.main(["normalize", "--form", "NFC", str(bad)]) == 1
    assert capsys.readouterr().err.startswith(f"error: {bad}: ")
    assert bad.read_bytes() == b"caf\xe9\n"  # untouched
    with pytest.raises(SystemExit) as e:
        unicode_forms.main(["normalize", "--form", "NFD", str(a)])
    assert e.value.code == 2


def test_corpus_check_reports_mixed_forms_as_a_warning(tmp_path, capsys):
    src, tgt = tmp_path / "dev.gl", tmp_path / "dev.en"
    src.write_text(f"o {CAFE_NFC}\nun {CAFE_NFD}\n", encoding="utf-8")
    tgt.write_text("the coffee\na coffee\n", encoding="utf-8")
    assert corpus.main(["check", "--src", str(src), "--tgt", str(tgt)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith(f"warning: {src}: 1 of 2 lines not in Unicode NFC")
    assert "first at line 2" in err[0] and "mixed with 1 line(s)" in err[0]


PAIR_TOML = """\
src = "gl"
tgt = "en"
corpus = "local"
bpe_merges = 60
{extra}
[local]
dir = "{dir}"
train_src = "train.gl"
train_tgt = "train.en"
dev_src = "dev.gl"
dev_tgt = "dev.en"
test_src = "test.gl"
test_tgt = "test.en"
"""


@pytest.mark.slow
def test_prepare_composes_an_opted_in_pair_and_the_identity_records_it(tmp_path):
    """The shell contract: the warning with counts, the NFC files, the setting in .settings and
    the data identity; switching the key back prepares the text as it was."""
    make_tiny_ted(tmp_path / "in", sizes=(200, 20, 20))
    own = tmp_path / "in" / "ted-gl-en"
    test_gl = own / "test.gl"
    lines = test_gl.read_text(encoding="utf-8").splitlines()
    lines[4] = f"{lines[4]} {CAFE_NFD}"
    test_gl.write_text("\n".join(lines) + "\n", encoding="utf-8")
    work = tmp_path / "work"
    env = make_env(work)
    cfg = work / "configs" / "pairs" / "gl-xx.toml"
    cfg.parent.mkdir(parents=True)

    def prepare(extra):
        cfg.write_text(PAIR_TOML.format(dir=own, extra=extra))
        return run_script("prepare_data.sh", "gl-xx", env=env)

    p = prepare('[text]\nnormalize = "NFC"\n')
    assert p.returncode == 0, out(p)
    assert f"warning: {test_gl}: 1 of 20 lines not in Unicode NFC" in p.stderr
    assert "first at line 5" in p.stderr and "normalized to NFC" in p.stderr
    assert "test.gl 1;" in p.stderr  # the lines changed, per file
    raw = work / "data" / "raw" / "gl-xx"
    assert raw.joinpath("test.gl").read_text(encoding="utf-8").splitlines()[4].endswith(CAFE_NFC)
    assert "normalize=NFC" in raw.joinpath(".settings").read_text().splitlines()
    assert "skip:" in prepare('[text]\nnormalize = "NFC"\n').stdout  # nothing changed: reused
    for step in ("bpe.sh", "binarize.sh"):
        p = run_script(step, "gl-xx", env=env)
        assert p.returncode == 0, out(p)
    ident = json.loads((work / "data" / "bin" / "gl-xx" / "identity.json").read_text())
    assert ident["text_normalize"] == "NFC"
    from qknorm_model_tools.translate import text_normalize_of

    assert text_normalize_of(work / "data" / "bin" / "gl-xx") == "NFC"
    # the key back to "none": prepared again, the text as the corpus has it, the warning says so
    p = prepare("")
    assert p.returncode == 0, out(p)
    assert "another [text] normalize" in p.stderr or "other settings" in p.stderr
    assert 'set [text] normalize = "NFC"' in p.stderr
    assert raw.joinpath("test.gl").read_text(encoding="utf-8").splitlines()[4].endswith(CAFE_NFD)
    settings = raw.joinpath(".settings").read_text().split()
    assert not any(x.startswith("normalize=") for x in settings)


def test_translate_reads_the_form_from_the_data_identity(tmp_path):
    from qknorm_model_tools.translate import text_normalize_of

    assert text_normalize_of(tmp_path) == "none"  # no identity.json
    (tmp_path / "identity.json").write_text(json.dumps({"data_id": "x"}))
    assert text_normalize_of(tmp_path) == "none"  # made before the key, or without it
    (tmp_path / "identity.json").write_text(json.dumps({"text_normalize": "NFC"}))
    assert text_normalize_of(tmp_path) == "NFC"
    # what the Translator encodes (and checks for unseen characters): the sentences composed
    from qknorm_model_tools.translate import Translator

    t = Translator.__new__(Translator)  # no checkpoint needed for the input's form
    t.text_normalize = "NFC"
    assert t._normalized([CAFE_NFD, "a"]) == [CAFE_NFC, "a"]
    t.text_normalize = "none"
    assert t._normalized([CAFE_NFD]) == [CAFE_NFD]
