"""The corpus checks (qknorm_tools.corpus, corpus_check): bad corpora, each refused where it enters
(``python -m qknorm_tools.corpus check`` / ``distinct``, run by ``prepare_data.sh`` for every
corpus, own corpora included), each kind with its whole family: a tab, every character that
``str.splitlines`` takes for a line break and every other control character; one file under two
names (symlink, hard link) for every pair of the six files; dev/test sentences that also occur
in the training data (a warning with counts, not an error)."""

from __future__ import annotations

import itertools
import json
import os
import subprocess
import sys
import unicodedata

import pytest

from qknorm_tools import corpus, corpus_check

from conftest import FAR_BOUND, cli_env, make_env, make_tiny_ted, out, run_script, write_sums

SIX = [f"{split}.{lang}" for split in ("train", "dev", "test") for lang in ("gl", "en")]


def run_corpus(*args):
    return subprocess.run(
        [sys.executable, "-m", "qknorm_tools.corpus", *map(str, args)],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=FAR_BOUND,
    )


# ------------------------------------------------------------------------------ characters
ALL_CHARS = [chr(i) for i in range(0x110000)]
#: derived independently of corpus_check.py: where str.splitlines ends a line, and Unicode's Cc
SPLITLINES_BREAKS = {c for c in ALL_CHARS if len(f"a{c}b".splitlines()) == 2}
CONTROL = {c for c in ALL_CHARS if unicodedata.category(c) == "Cc"}
#: \n ends the line; \r and NUL are reported on the raw bytes (their own messages)
ON_BYTES = {"\n", "\r", "\x00"}


def _word_boundary_for_fairseq_only(c: str) -> bool:
    """fairseq's tokenizer splits ``a{c}b`` in two, subword-nmt (words split on " ") does not."""
    from fairseq.tokenizer import tokenize_line

    return len(tokenize_line(f"a{c}b")) == 2 and len(f"a{c}b".split(" ")) == 1


#: a stray "@@" token after subword-nmt (no-break space and the other space separators)
SPACE_LIKE = {c for c in ALL_CHARS if _word_boundary_for_fairseq_only(c)} - SPLITLINES_BREAKS
#: the byte order mark: refused anywhere, not only at the start of a file (README, "Data checks")
BOM = "\N{ZERO WIDTH NO-BREAK SPACE}"
#: Unicode's PropList.txt, Prepended_Concatenation_Mark (visible signs, though category Cf)
PCM = {chr(c) for c in [*range(0x600, 0x606), 0x6DD, 0x70F, 0x890, 0x891, 0x8E2, 0x110BD, 0x110CD]}
#: zero width non-joiner and joiner: spelling in Persian, Kurdish, the Indic scripts
JOINERS = {"\N{ZERO WIDTH NON-JOINER}", "\N{ZERO WIDTH JOINER}"}
#: the invisible format characters: zero width space, soft hyphen, word joiner, bidi marks, ...
INVISIBLE_FORMAT = {c for c in ALL_CHARS if unicodedata.category(c) == "Cf"} - PCM - JOINERS - {BOM}
#: what a decoder writes for bytes it could not decode
REPLACEMENT = "\N{REPLACEMENT CHARACTER}"


def test_line_breaks_are_exactly_the_ones_of_str_splitlines():
    assert SPLITLINES_BREAKS - {"\n", "\r"} == set(corpus_check.LINE_BREAK_CHARS)
    assert len(corpus_check.LINE_BREAK_CHARS) == 8  # \v \f \x1c \x1d \x1e \x85 \u2028 \u2029


@pytest.mark.slow
def test_every_refused_character_and_only_those():
    refused = SPLITLINES_BREAKS | CONTROL | SPACE_LIKE | {"\t", BOM, REPLACEMENT}
    refused = (refused | INVISIBLE_FORMAT) - ON_BYTES
    # Cc (65, \t \v \f \x1c-\x1e \x85 among them), U+2028-9, 16 space separators (and \x1f),
    # the byte order mark, the replacement character, 147 invisible format characters (Unicode
    # 14: 163 Cf less the BOM, 13 prepended concatenation marks and the 2 joiners)
    assert len(SPACE_LIKE - CONTROL) == 16 and "\u00a0" in SPACE_LIKE and "\u3000" in SPACE_LIKE
    assert set("\u200b\u00ad\u2060\u200e\u200f\u202b\u2066") <= INVISIBLE_FORMAT
    assert len(INVISIBLE_FORMAT) == 147 and not JOINERS & INVISIBLE_FORMAT
    assert len(refused) == 65 + 2 + 16 - 3 + 1 + 1 + len(INVISIBLE_FORMAT)
    wrong = [
        f"U+{ord(c):04X}"
        for c in ALL_CHARS
        if (corpus_check.bad_character_problem(f"x y{c}") is not None) != (c in refused)
    ]
    assert wrong == []
    for c in refused:
        problem = corpus_check.bad_character_problem(f"ab c{c}d {c}")
        assert f"(U+{ord(c):04X}) at character 5" in problem or (
            f"character U+{ord(c):04X} at character 5" in problem
        ), problem
        assert problem.endswith("(1 more such character in the line)"), problem


def test_invisible_format_and_replacement_characters_are_named(tmp_path):
    """A new user's trial: zero width space, soft hyphen, word joiner, the bidi marks and
    isolates and U+FFFD passed the check. The zero width (non-)joiner pass on purpose: they
    spell Persian, Kurdish and Indic words (a second trial: refusing them blocked such corpora)."""
    src, tgt = tmp_path / "x.gl", tmp_path / "x.en"
    src.write_text(
        "ola mun\u200bdo .\nca\u00adsa .\nbo\ufffd .\n\u0600 ola .\nmi\u200cha \u200d .\n",
        encoding="utf-8",
    )
    tgt.write_text("hello world .\n" * 5, encoding="utf-8")
    p = run_corpus("check", "--src", src, "--tgt", tgt)
    assert p.returncode == 1, out(p)
    assert p.stderr.splitlines() == [
        f"error: {src}:1: zero width space (U+200B) at character 8: an invisible format "
        "character, and BPE tools take it as part of a word (the word with it and without it "
        "are two vocabulary entries); remove it",
        f"error: {src}:2: soft hyphen (U+00AD) at character 3: an invisible format character, "
        "and BPE tools take it as part of a word (the word with it and without it are two "
        "vocabulary entries); remove it",
        f"error: {src}:3: replacement character (U+FFFD) at character 3: what a decoder writes "
        "for bytes it could not decode; the original character was lost before this file "
        "(decode the source with its real encoding)",
    ]  # line 4: an Arabic number sign, a visible sign of its script, passes; line 5: joiners


def test_check_names_file_line_and_character(tmp_path):
    src, tgt = tmp_path / "x.gl", tmp_path / "x.en"
    bad = ["\t", "\v", "\f", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029", "\x1b", "\x7f"]
    bad += ["\u00a0", "\u3000"]
    src.write_text("".join(f"ola{c}mundo .\n" for c in bad), encoding="utf-8")
    tgt.write_text("hello world .\n" * len(bad), encoding="utf-8")
    p = run_corpus("check", "--src", src, "--tgt", tgt)
    assert p.returncode == 1, out(p)
    lines = p.stderr.splitlines()
    assert len(lines) == len(bad), lines
    assert lines[0] == (
        f"error: {src}:1: tab (U+0009) at character 4: BPE tools split words on spaces only "
        "(subword-nmt makes `word\\tword` one word with a stray @@); replace tabs by spaces "
        "(`tr '\\t' ' '`)"
    )
    assert lines[7] == (
        f"error: {src}:8: line separator (U+2028) at character 4: a line break for Python's "
        "str.splitlines and the readers built on it (the line would be split there and the pair "
        "misaligned); replace it by a space"
    )
    assert lines[2].startswith(f"error: {src}:3: form feed (\\f) (U+000C) at character 4")
    assert lines[6].startswith(f"error: {src}:7: next line (NEL) (U+0085) at character 4")
    assert lines[9] == (
        f"error: {src}:10: control character U+001B at character 4: invisible, and BPE tools "
        "take it as part of a word; remove it"
    )
    assert lines[10].startswith(f"error: {src}:11: control character U+007F at character 4")
    assert lines[11] == (
        f"error: {src}:12: no-break space (U+00A0) at character 4: a word boundary for fairseq's "
        "tokenizer but not for BPE tools (subword-nmt splits words on U+0020 only and leaves a "
        "stray @@ token); replace it by a space"
    )
    assert lines[12].startswith(f"error: {src}:13: ideographic space (U+3000) at character 4")


def test_check_of_a_directory_says_it_is_one(tmp_path, capsys):
    """``check --src DIR`` said "no such file" of a directory: a path named on the command line
    that exists but is not a file is a wrong file (exit 1, as a missing one), said as such."""
    (tmp_path / "x.en").write_text("hello .\n", encoding="utf-8")
    (tmp_path / "gl").mkdir()
    assert (
        corpus.main(["check", "--src", str(tmp_path / "gl"), "--tgt", str(tmp_path / "x.en")]) == 1
    )
    assert capsys.readouterr().err == f"error: {tmp_path / 'gl'}: is a directory, expected a file\n"
    assert corpus.main(["check", "--src", str(tmp_path / "no.gl"), "--tgt", str(tmp_path)]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"error: {tmp_path / 'no.gl'}: no such file",
        f"error: {tmp_path}: is a directory, expected a file",
    ]


def test_a_byte_order_mark_is_refused_anywhere_naming_file_line_and_character(tmp_path):
    """At the start of the file (its own message), inside a line, at a line's start (a file
    concatenated with its BOM) and twice in one line: each names file, line and character."""
    src, tgt = tmp_path / "x.gl", tmp_path / "x.en"
    src.write_text(
        f"{BOM}ola .\nola{BOM} mundo .\n{BOM}outra .\na{BOM}b{BOM} .\n", encoding="utf-8"
    )
    tgt.write_text("hello .\n" * 4, encoding="utf-8")
    with pytest.raises(corpus_check.CorpusErrors) as err:
        corpus_check.check_pair(str(src), str(tgt))
    assert [(e.path, e.line) for e in err.value.errors] == [(str(src), n) for n in (1, 2, 3, 4)]
    problems = [e.problem for e in err.value.errors]
    assert problems[0] == "UTF-8 byte order mark (BOM) at start of file"
    assert problems[1] == (
        "byte order mark, zero width no-break space (U+FEFF) at character 4: invisible, and BPE "
        "tools take it as part of a word (files concatenated with their BOMs?); remove it"
    )
    assert problems[2].startswith(
        "byte order mark, zero width no-break space (U+FEFF) at character 1"
    )
    assert problems[3].startswith(
        "byte order mark, zero width no-break space (U+FEFF) at character 2"
    )
    assert problems[3].endswith("(1 more such character in the line)")


# ------------------------------------------------------------------------------ one file twice
@pytest.mark.parametrize("link", ["symlink", "hardlink"])
@pytest.mark.slow
def test_every_pair_of_the_six_files_that_is_one_file_is_refused(tmp_path, link):
    for i, j in itertools.combinations(range(6), 2):
        d = tmp_path / f"{link}{i}{j}"
        d.mkdir()
        paths = [d / name for name in SIX]
        for k, p in enumerate(paths):
            if k != j:
                p.write_text(f"line of {SIX[k]}\n")
        (os.symlink if link == "symlink" else os.link)(paths[i], paths[j])
        errors = corpus_check.same_file_errors([(SIX[k], str(p)) for k, p in enumerate(paths)])
        assert [str(e) for e in errors] == [
            f"{SIX[j]}: the same file as {SIX[i]} (the same path, a symlink or a hard link: "
            "os.path.samefile); every side and split needs its own file"
        ], (i, j)
    # corpus check: train.en of the first case is the same file as its train.gl
    src, tgt = tmp_path / f"{link}01/train.gl", tmp_path / f"{link}01/train.en"
    p = run_corpus("check", "--src", src, "--tgt", tgt)
    assert p.returncode == 1 and f"error: {tgt}: the same file as {src}" in p.stderr, out(p)
    copy = tmp_path / "copy.en"
    copy.write_bytes(src.read_bytes())  # two files with the same text are two files
    assert run_corpus("check", "--src", src, "--tgt", copy).returncode == 0


@pytest.mark.slow
def test_prepare_refuses_a_source_that_is_the_target_under_another_name(tmp_path):
    """The issue's case: ted-gl-en/train.gl a symlink to train.en (English -> English)."""
    data = tmp_path / "data"
    make_tiny_ted(data)
    folder = data / "ted-gl-en"
    (folder / "train.gl").unlink()
    (folder / "train.gl").symlink_to("train.en")
    write_sums(data)
    work = tmp_path / "work"
    p = run_script("prepare_data.sh", "gl-en", "--data-dir", data, env=make_env(work))
    assert p.returncode == 1, out(p)
    assert (
        f"error: {folder}/train.en: the same file as {folder}/train.gl (the same path, a symlink "
        "or a hard link: os.path.samefile)" in p.stderr
    ), p.stderr
    assert "gl-en corpus names one file twice" in p.stderr
    assert not (work / "data" / "raw" / "gl-en").exists()


def test_own_corpus_with_a_hard_link_is_refused_naming_the_fields(tmp_path):
    make_tiny_ted(tmp_path / "ted")
    corpus_dir = tmp_path / "mine"
    corpus_dir.mkdir()
    for split in ("train", "dev", "test"):
        for side, lang in (("src", "gl"), ("tgt", "en")):
            (corpus_dir / f"{split}.{side}").write_bytes(
                (tmp_path / "ted" / "ted-gl-en" / f"{split}.{lang}").read_bytes()
            )
    (corpus_dir / "test.tgt").unlink()
    os.link(corpus_dir / "dev.tgt", corpus_dir / "test.tgt")  # test target = dev target
    work = tmp_path / "work"
    cfg = work / "configs" / "pairs" / "mine.toml"
    cfg.parent.mkdir(parents=True)
    fields = "".join(
        f'{split}_{side} = "{split}.{side}"\n'
        for split in ("train", "dev", "test")
        for side in ("src", "tgt")
    )
    head = 'src = "de"\ntgt = "en"\ncorpus = "local"\nbpe_merges = 50\n'
    cfg.write_text(f'{head}[local]\ndir = "{corpus_dir}"\n{fields}')
    p = run_script("prepare_data.sh", "mine", env=make_env(work))
    assert p.returncode == 1, out(p)
    assert (
        f"error: {cfg}: local.test_tgt = {corpus_dir}/test.tgt: the same file as {cfg}: "
        f"local.dev_tgt = {corpus_dir}/dev.tgt (the same path, a symlink or a hard link" in p.stderr
    ), p.stderr
    assert not (work / "data" / "raw" / "mine").exists()


# ------------------------------------------------------------------------------ overlap
@pytest.mark.slow
def test_dev_test_overlap_with_training_data_is_a_warning_with_counts(tmp_path):
    data = tmp_path / "data"
    make_tiny_ted(data)
    f = data / "ted-gl-en"
    train = {lang: (f / f"train.{lang}").read_text().splitlines() for lang in ("gl", "en")}
    dev = {lang: (f / f"dev.{lang}").read_text().splitlines() for lang in ("gl", "en")}
    test = {lang: (f / f"test.{lang}").read_text().splitlines() for lang in ("gl", "en")}
    # dev lines 2 and 5: training pair 7; dev line 9: training pair 11; test line 3: only the
    # source of training pair 4 (its target differs)
    for lang in ("gl", "en"):
        dev[lang][1] = dev[lang][4] = train[lang][6]
        dev[lang][8] = train[lang][10]
    test["gl"][2] = train["gl"][3]
    for split, lines in (("dev", dev), ("test", test)):
        for lang in ("gl", "en"):
            (f / f"{split}.{lang}").write_text("\n".join(lines[lang]) + "\n")
    write_sums(data)
    work = tmp_path / "work"
    p = run_script("prepare_data.sh", "gl-en", "--data-dir", data, env=make_env(work))
    assert p.returncode == 0, out(p)
    warnings = [x for x in p.stderr.splitlines() if "also occur in the training data" in x]
    assert warnings == [
        "warning: gl-en dev: 3 of 30 sentence pairs (10.0%) also occur in the training data "
        "(2 distinct; source side alone: 3 lines, target side alone: 3 lines); most frequent: "
        f"{train['gl'][6]!r} / {train['en'][6]!r} (2x, lines 2, 5); "
        f"{train['gl'][10]!r} / {train['en'][10]!r} (1x, line 9)",
        "warning: gl-en test: 0 of 40 sentence pairs (0.0%) also occur in the training data "
        "(0 distinct; source side alone: 1 lines, target side alone: 0 lines)",
    ], p.stderr
    report = json.loads((work / "data/raw/gl-en/overlap.json").read_text())
    assert [(r["split"], r["pairs_in_train"], r["src_in_train"]) for r in report] == [
        ("dev", 3, 3),
        ("test", 0, 1),
    ]


def test_an_overlap_seen_more_often_than_its_lines_listed_says_so(tmp_path):
    """The report keeps 5 line numbers per sentence; a 6th occurrence is marked "...", never a
    count that the listed lines contradict."""
    train = [tmp_path / "train.gl", tmp_path / "train.en"]
    dev = [tmp_path / "dev.gl", tmp_path / "dev.en"]
    train[0].write_text("ola .\nadeus .\n")
    train[1].write_text("hello .\nbye .\n")
    dev[0].write_text("ola .\n" * 6 + "outra .\n")
    dev[1].write_text("hello .\n" * 6 + "other .\n")
    report = corpus_check.overlap_report(
        (str(train[0]), str(train[1])), [("dev", str(dev[0]), str(dev[1]))]
    )
    (line,) = corpus_check.overlap_warnings(report, "gl-en")
    assert line.endswith("most frequent: 'ola .' / 'hello .' (6x, lines 1, 2, 3, 4, 5, ...)")


@pytest.mark.slow
def test_corpus_errors_of_extracted_files_name_no_tmp_path(tmp_path):
    """(Extraction normalizes whitespace, str.split: a line break inside a field becomes a
    space; a control character stays and is refused, named without the temporary path.)"""
    from test_data_pipeline import TSV_ROWS, write_tsvs

    data, work = tmp_path / "data", tmp_path / "work"
    write_tsvs(data)
    bad = data / "all_talks_train.tsv"
    row = "\t".join(TSV_ROWS["train"][0])
    bad.write_text(bad.read_text().replace(row, row.replace("Ahoj svet", "Ahoj\x1bsvet")))
    write_sums(data)
    p = run_script("prepare_data.sh", "sk-en", "--data-dir", data, env=make_env(work))
    assert p.returncode == 1, out(p)
    assert ".tmp" not in p.stderr, p.stderr
    assert (
        f"error: train.sk (as extracted from the TED all-talks TSVs in {data}):1: control "
        "character U+001B at character 5" in p.stderr
    ), p.stderr
