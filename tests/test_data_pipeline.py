"""Tests of the data pipeline: scripts/{prepare_data,bpe,binarize}.sh and qknorm_tools/corpus.py.

Everything runs in temporary directories (QKNORM_WORK_DIR); nothing is written into the repo.
The real-data tests read the project's shared corpora at <repo>/../shared/data and are skipped
when it is absent.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import math
import os
import random
import shutil
import struct
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

from qknorm_tools import archives, corpus, lengths

from conftest import (
    EN_WORDS,
    FAR_BOUND,
    GL_WORDS,
    SHARED,
    SPLITS,
    cli_env,
    count_lines,
    make_env,
    make_tiny_ted,
    out,
    run_script,
    run_without_torch,
    sha256,
    tiny_sentences,
    write_sums,
)

# --------------------------------------------------------------------------------------------
# helpers


def run_corpus(*args, cwd=None, timeout: float = FAR_BOUND) -> subprocess.CompletedProcess:
    """``python -m qknorm_tools.corpus ARGS``."""
    return subprocess.run(
        [sys.executable, "-m", "qknorm_tools.corpus", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=cli_env(),
        timeout=timeout,
    )


def snapshot(root: Path) -> dict:
    """{relative path: (mtime_ns, sha256)} of every file below root, plus the directory list."""
    snap = {}
    for p in sorted(root.rglob("*")):
        rel = p.relative_to(root).as_posix()
        snap[rel] = (p.stat().st_mtime_ns, sha256(p)) if p.is_file() else "dir"
    return snap


def idx_num_sentences(idx: Path) -> int:
    """Sentences in a fairseq MMapIndexedDataset .idx file (header: magic, version, dtype, len)."""
    with open(idx, "rb") as f:
        assert f.read(9) == b"MMIDIDX\x00\x00"
        struct.unpack("<Q", f.read(8))
        struct.unpack("<B", f.read(1))
        return struct.unpack("<Q", f.read(8))[0]


# --------------------------------------------------------------------------------------------
# generated tiny corpus: prepare -> bpe -> binarize, rerun skips


@pytest.mark.slow
def test_tiny_pipeline_end_to_end_and_rerun_skips(tmp_path):
    data, work = tmp_path / "data", tmp_path / "work"
    sizes = make_tiny_ted(data)
    env = make_env(work)

    p = run_script("prepare_data.sh", "gl-en", "--data-dir", data, env=env)
    assert p.returncode == 0, out(p)
    assert "sha256 verified" in out(p)
    raw = work / "data" / "raw" / "gl-en"
    for split, n in sizes.items():
        for lang in ("gl", "en"):
            assert count_lines(raw / f"{split}.{lang}") == n
            assert (raw / f"{split}.{lang}").read_bytes() == (
                data / "ted-gl-en" / f"{split}.{lang}"
            ).read_bytes()
    assert (raw / ".done").is_file()

    p = run_script("bpe.sh", "gl-en", "--merges", "50", env=env)
    assert p.returncode == 0, out(p)
    bpe = work / "data" / "bpe" / "gl-en"
    for name in ("codes", "vocab.gl", "vocab.en", "length_stats.json", ".done"):
        assert (bpe / name).is_file(), name
    # the raw marker it read: names the raw files that change later (qknorm_tools.provenance)
    assert (bpe / ".raw.done").read_bytes() == (raw / ".done").read_bytes()
    assert (
        len((bpe / "codes").read_text(encoding="utf-8").splitlines()) <= 51
    )  # version line + <= 50 merges
    for split, n in sizes.items():
        for lang in ("gl", "en"):
            assert count_lines(bpe / f"{split}.{lang}") == n
    assert "@@" in (bpe / "train.gl").read_text(encoding="utf-8")
    stats = json.loads((bpe / "length_stats.json").read_text(encoding="utf-8"))
    assert stats["n_lines"] == 2 * sizes["train"]
    assert stats["q"] == 97.5 and isinstance(stats["L"], int)
    assert "g0" not in stats  # the data's property is L; the model computes and logs its g0
    assert f"L = {stats['L']}" in p.stdout

    p = run_script("binarize.sh", "gl-en", env=env)
    assert p.returncode == 0, out(p)
    binp = work / "data" / "bin" / "gl-en"
    assert (binp / "dict.gl.txt").is_file() and (binp / "dict.en.txt").is_file()
    assert (binp / "dict.gl.txt").read_bytes() == (
        binp / "dict.en.txt"
    ).read_bytes()  # joined dictionary
    for split, fsplit in zip(SPLITS, ("train", "valid", "test")):
        for lang in ("gl", "en"):
            assert (binp / f"{fsplit}.gl-en.{lang}.bin").stat().st_size > 0
            assert idx_num_sentences(binp / f"{fsplit}.gl-en.{lang}.idx") == sizes[split]

    # rerun: every step skips and nothing changes (no leftover temporary directories either)
    before = snapshot(work)
    for script, args in (
        ("prepare_data.sh", ["--data-dir", data]),
        ("bpe.sh", ["--merges", "50"]),
        ("binarize.sh", []),
    ):
        p = run_script(script, "gl-en", *args, env=env)
        assert p.returncode == 0, out(p)
        assert p.stdout.startswith("skip:"), out(p)
    assert snapshot(work) == before

    # 0.0 is 0 (off): the same setting, so the finished BPE is kept (new-user trial: it rebuilt)
    for zero in ("0.0", ".0"):
        p = run_script("bpe.sh", "gl-en", "--merges", "50", "--bpe-dropout", zero, env=env)
        assert p.returncode == 0 and p.stdout.startswith("skip:"), out(p)
    assert snapshot(work) == before

    # BPE-dropout: training data only, dev/test identical; the changed BPE makes binarize rebuild
    dev_before = (bpe / "dev.gl").read_bytes()
    train_before = (bpe / "train.gl").read_bytes()
    p = run_script("bpe.sh", "gl-en", "--merges", "50", "--bpe-dropout", "0.1", env=env)
    assert p.returncode == 0, out(p)
    assert (bpe / "dev.gl").read_bytes() == dev_before
    assert (bpe / "train.gl").read_bytes() != train_before
    assert "bpe_dropout=0.1" in (bpe / ".settings").read_text()


@pytest.mark.slow
def test_sentencepiece_option(tmp_path):
    pytest.importorskip("sentencepiece")
    data, work = tmp_path / "data", tmp_path / "work"
    sizes = make_tiny_ted(data)
    env = make_env(work)
    assert run_script("prepare_data.sh", "gl-en", "--data-dir", data, env=env).returncode == 0
    p = run_script("bpe.sh", "gl-en", "--tool", "sentencepiece", "--vocab-size", "120", env=env)
    assert p.returncode == 0, out(p)
    bpe = work / "data" / "bpe" / "gl-en"
    assert (bpe / "spm.model").is_file()
    for split, n in sizes.items():
        assert count_lines(bpe / f"{split}.en") == n
    assert "\u2581" in (bpe / "train.en").read_text(encoding="utf-8")
    assert json.loads((bpe / "length_stats.json").read_text())["tool"] == "sentencepiece"


# --------------------------------------------------------------------------------------------
# real gl-en from the shared data dir


@pytest.mark.slow
@pytest.mark.skipif(not (SHARED / "ted-gl-en").is_dir(), reason=f"no shared data at {SHARED}")
def test_real_gl_en_prepare_verifies_checksums_and_plausible_L(tmp_path):
    work = tmp_path / "work"
    env = make_env(work)
    p = run_script("prepare_data.sh", "gl-en", "--data-dir", SHARED, env=env)
    assert p.returncode == 0, out(p)
    assert out(p).count("sha256 verified") == 6
    raw = work / "data" / "raw" / "gl-en"
    sums = archives.read_sums(str(SHARED / "SHA256SUMS"))
    for split, n in zip(SPLITS, (11233, 742, 1112)):
        for lang in ("gl", "en"):
            assert count_lines(raw / f"{split}.{lang}") == n
            assert sha256(raw / f"{split}.{lang}") == sums[f"ted-gl-en/{split}.{lang}"]
    # line counts match the config's expectations: the only warnings are the dev/test pairs
    # that also occur in the training data (mostly "( Applause )" and "Thank you .")
    warnings = [x for x in out(p).splitlines() if "warning" in x]
    assert [x.split(" (")[0] for x in warnings] == [
        "warning: gl-en dev: 7 of 742 sentence pairs",
        "warning: gl-en test: 14 of 1112 sentence pairs",
    ], warnings

    p = run_script("bpe.sh", "gl-en", env=env)  # 3000 merges, as in the papers
    assert p.returncode == 0, out(p)
    stats = json.loads((work / "data" / "bpe" / "gl-en" / "length_stats.json").read_text())
    assert stats["n_lines"] == 2 * 11233
    # the authors report L = 79 for their (slightly smaller) gl->en set
    assert 60 <= stats["L"] <= 120, stats
    assert "g0" not in stats
    # same numbers from the CLI on the BPE'd files
    bpe = work / "data" / "bpe" / "gl-en"
    q = run_corpus(
        "length-percentile", "--file", bpe / "train.gl", "--file2", bpe / "train.en", "--q", "97.5"
    )
    assert q.returncode == 0, out(q)
    assert json.loads(q.stdout) == {k: stats[k] for k in ("L", "q", "n_lines")}


@pytest.mark.skipif(not (SHARED / "iwslt15-en-vi").is_dir(), reason=f"no shared data at {SHARED}")
@pytest.mark.slow
def test_real_en_vi_dev_test_verified_train_missing_is_clear_error(tmp_path):
    work = tmp_path / "work"
    p = run_script("prepare_data.sh", "en-vi", "--data-dir", SHARED, env=make_env(work))
    assert p.returncode != 0
    text = out(p)
    assert text.count("sha256 verified") == 4  # tst2012/tst2013 en+vi
    assert "train.en is missing" in text
    assert "https://nlp.stanford.edu/projects/nmt/data/iwslt15.en-vi/train.en" in text
    assert "verified OK" in text
    assert not (work / "data" / "raw" / "en-vi").exists()
    # no partial or temporary output: the folders made for it are gone too (left empty)
    assert not (work / "data" / "raw").exists()


# --------------------------------------------------------------------------------------------
# bad inputs: non-zero exit, file + line + problem named, earlier complete outputs untouched


def _mutate_lines(path: Path, fn):
    lines = path.read_bytes().split(b"\n")[:-1]
    path.write_bytes(b"\n".join(fn(lines)) + b"\n")


def _set_line(lineno, value):
    def fn(lines):
        lines[lineno - 1] = value
        return lines

    return fn


BAD_CASES = {
    # case: (file, mutation, expected fragments of the message)
    "misaligned": (
        "train.en",
        lambda lines: lines[:-1],
        ["train.en:299: misaligned", "train.gl has 300 lines", "train.en has 299 lines"],
    ),
    "nul_byte": ("dev.gl", _set_line(4, b"ola\x00mundo ."), ["dev.gl:4: NUL byte"]),
    "empty_line": ("dev.en", _set_line(3, b""), ["dev.en:3: empty line"]),
    "invalid_utf8": ("train.gl", _set_line(5, b"ol\xff \xfe mundo"), ["train.gl:5: invalid UTF-8"]),
    "crlf": ("test.en", _set_line(2, b"the house .\r"), ["test.en:2: CRLF"]),
    # issue 22: passed the checks, then broke BPE (the whole family: tests/test_corpus.py)
    "tab": ("train.gl", _set_line(6, b"ola\tmundo ."), ["train.gl:6: tab (U+0009) at character 4"]),
    "line_separator": (
        "dev.en",
        _set_line(2, "the\u2028house .".encode()),
        ["dev.en:2: line separator (U+2028) at character 4"],
    ),
    "control_char": (
        "test.gl",
        _set_line(3, b"a \x1b[0m casa"),
        ["test.gl:3: control character U+001B at character 3"],
    ),
    "over_long": (
        "train.en",
        _set_line(7, b" ".join([b"word"] * 1100)),
        ["train.en:7: line too long: 1100 tokens > max 1024"],
    ),
}


@pytest.fixture
def prepared(tmp_path):
    """A work dir with a complete data/raw/gl-en, and the good tiny data dir it came from."""
    good, work = tmp_path / "good", tmp_path / "work"
    make_tiny_ted(good)
    env = make_env(work)
    p = run_script("prepare_data.sh", "gl-en", "--data-dir", good, env=env)
    assert p.returncode == 0, out(p)
    return good, work, env


def _assert_raw_intact(work: Path, before: dict):
    raw_parent = work / "data" / "raw"
    assert snapshot(raw_parent) == before
    assert sorted(p.name for p in raw_parent.iterdir()) == ["gl-en"]  # no temporary leftovers


@pytest.mark.parametrize("case", sorted(BAD_CASES))
@pytest.mark.slow
def test_bad_input_rejected_and_outputs_intact(prepared, tmp_path, case):
    good, work, env = prepared
    before = snapshot(work / "data" / "raw")
    bad = tmp_path / f"bad_{case}"
    shutil.copytree(good, bad)
    fname, mutate, expected = BAD_CASES[case]
    _mutate_lines(bad / "ted-gl-en" / fname, mutate)
    write_sums(bad)  # checksums fine: the corpus check must catch it
    p = run_script("prepare_data.sh", "gl-en", "--data-dir", bad, "--force", env=env)
    assert p.returncode != 0
    assert str(bad / "ted-gl-en") in p.stderr  # names the file
    for frag in expected:
        assert frag in p.stderr, (frag, p.stderr)
    _assert_raw_intact(work, before)


@pytest.mark.slow
def test_checksum_mismatch_rejected(prepared, tmp_path):
    good, work, env = prepared
    before = snapshot(work / "data" / "raw")
    bad = tmp_path / "bad_sum"
    shutil.copytree(good, bad)  # keeps the old SHA256SUMS
    f = bad / "ted-gl-en" / "train.gl"
    f.write_bytes(f.read_bytes().replace(b"casa", b"casas", 1))
    p = run_script("prepare_data.sh", "gl-en", "--data-dir", bad, "--force", env=env)
    assert p.returncode != 0
    assert (
        f"{f}: sha256 mismatch: expected {sha256(good / 'ted-gl-en' / 'train.gl')}, got {sha256(f)}"
        in p.stderr
    )
    _assert_raw_intact(work, before)


@pytest.mark.slow
def test_unknown_pair_name(tmp_path):
    env = make_env(tmp_path / "work")
    for script in ("prepare_data.sh", "bpe.sh", "binarize.sh"):
        p = run_script(script, "xx-yy", env=env)
        assert p.returncode != 0
        assert "unknown pair 'xx-yy'" in p.stderr
        assert "known pairs: ar-en en-vi gl-en he-en sk-en" in p.stderr
    p = run_script("prepare_data.sh", "../../etc", env=env)
    assert p.returncode != 0 and "unknown pair" in p.stderr
    assert not (tmp_path / "work" / "data" / "raw").exists()


@pytest.mark.slow
def test_usage_and_missing_prerequisites(tmp_path):
    env = make_env(tmp_path / "work")
    for script in ("prepare_data.sh", "bpe.sh", "binarize.sh"):
        p = run_script(script, "-h", env=env)
        assert p.returncode == 0 and p.stdout.startswith(f"usage: scripts/{script} PAIR")
        p = run_script(script, env=env)
        assert p.returncode == 2 and "missing PAIR" in p.stderr
    p = run_script("bpe.sh", "gl-en", env=env)
    assert p.returncode != 0 and "run scripts/prepare_data.sh gl-en first" in p.stderr
    p = run_script("binarize.sh", "gl-en", env=env)
    assert p.returncode != 0 and "run scripts/bpe.sh gl-en first" in p.stderr


HTML_PAGE = (
    b"<!DOCTYPE html>\n<html><head><title>404 Not Found</title></head><body>gone</body></html>\n"
)


@pytest.mark.slow
def test_html_page_instead_of_archive_in_data_dir(prepared, tmp_path):
    _, work, env = prepared
    before = snapshot(work / "data" / "raw")
    d = tmp_path / "mirror"
    d.mkdir()
    (d / "qi18naacl-dataset.tar.gz").write_bytes(HTML_PAGE)
    p = run_script("prepare_data.sh", "gl-en", "--data-dir", d, "--force", env=env)
    assert p.returncode != 0
    assert (
        f"{d / 'qi18naacl-dataset.tar.gz'}: got an HTML page ({len(HTML_PAGE)} bytes)" in p.stderr
    )
    assert "131005909" in p.stderr
    _assert_raw_intact(work, before)


def test_html_page_download_rejected_without_partial_file(tmp_path):
    work = tmp_path / "work"
    page = tmp_path / "page.html"
    page.write_bytes(HTML_PAGE)
    env = make_env(work, QKNORM_OFFLINE=None, QKNORM_QI18_URL=f"file://{page}")
    p = run_script("prepare_data.sh", "gl-en", "--download", env=env)
    assert p.returncode != 0
    assert "got an HTML page" in p.stderr and "nothing kept" in p.stderr
    dl = work / "data" / "download"
    assert not dl.exists() or not any(dl.rglob("*.*"))  # no partial or rejected file
    assert not (work / "data" / "raw" / "gl-en").exists()


def test_download_failure_is_clear(tmp_path):
    work = tmp_path / "work"
    url = "http://127.0.0.1:9/ted_talks.tar.gz"  # nothing listens on the discard port
    env = make_env(work, QKNORM_OFFLINE=None, QKNORM_TED_TALKS_URL=url)
    p = run_script("prepare_data.sh", "sk-en", "--download", env=env)
    assert p.returncode != 0
    assert f"download of {url} failed" in p.stderr
    assert "ted_talks.tar.gz (352222045 bytes" in p.stderr  # says what to fetch instead
    dl = work / "data" / "download"
    assert not dl.exists() or not any(p_.is_file() for p_ in dl.rglob("*"))


@pytest.mark.slow
def test_en_vi_train_missing_offline(tmp_path):
    """Tiny stand-ins for tst2012/tst2013 (own SHA256SUMS): verified, then a clear train error."""
    data, work = tmp_path / "data", tmp_path / "work"
    d = data / "iwslt15-en-vi"
    d.mkdir(parents=True)
    for name, n in (("tst2012", 12), ("tst2013", 9)):
        (d / f"{name}.en").write_text(
            "\n".join(tiny_sentences(n, 1, EN_WORDS)) + "\n", encoding="utf-8"
        )
        (d / f"{name}.vi").write_text(
            "\n".join(tiny_sentences(n, 2, GL_WORDS)) + "\n", encoding="utf-8"
        )
    write_sums(data)
    p = run_script("prepare_data.sh", "en-vi", "--data-dir", data, env=make_env(work))
    assert p.returncode != 0
    assert p.stderr.count("sha256 verified") == 4
    # a data dir that was given is never completed by a download: no download is attempted
    assert "train.en is missing" in p.stderr and "downloading" not in p.stderr
    assert "never completed by downloads" in p.stderr and "verified OK" in p.stderr
    assert not (work / "data" / "raw" / "en-vi").exists()

    # with train files present the pair is complete: dev = tst2012, test = tst2013
    (d / "train.en").write_text("\n".join(tiny_sentences(50, 3, EN_WORDS)) + "\n", encoding="utf-8")
    (d / "train.vi").write_text("\n".join(tiny_sentences(50, 4, GL_WORDS)) + "\n", encoding="utf-8")
    write_sums(data)
    p = run_script("prepare_data.sh", "en-vi", "--data-dir", data, env=make_env(work))
    assert p.returncode == 0, out(p)
    raw = work / "data" / "raw" / "en-vi"
    assert (raw / "dev.vi").read_bytes() == (d / "tst2012.vi").read_bytes()
    assert (raw / "test.en").read_bytes() == (d / "tst2013.en").read_bytes()
    assert count_lines(raw / "train.vi") == 50


# --------------------------------------------------------------------------------------------
# TED extraction: all-talks TSVs and qi18naacl-style pair folders


TSV_ROWS = {
    # talk_name, en, gl, sk
    "train": [
        ("t1", "Hello world .", "Ola mundo .", "Ahoj svet ."),
        ("t1", "__NULL__", "Isto non .", "Toto nie ."),  # en missing
        ("t1", "Good morning .", "_ _ NULL _ _", "Dobré ráno ."),  # gl missing (spaced form)
        ("t2", "Thank you .", "Grazas .", "__NULL__"),  # sk missing only
        ("t2", "It &apos;s  fine .", "Está ben .", "Je to v poriadku ."),
        ("t2", "Bye .", "", "Zbohom ."),  # gl empty
    ],
    "dev": [("t3", "Yes .", "Si .", "Áno ."), ("t3", "No .", "__NULL__", "Nie .")],
    "test": [("t4", "Maybe .", "Quizais .", "Možno .")],
}


def write_tsvs(d: Path) -> None:
    d.mkdir(parents=True, exist_ok=True)
    for split, rows in TSV_ROWS.items():
        text = "talk_name\ten\tgl\tsk\n" + "".join("\t".join(r) + "\n" for r in rows)
        (d / f"all_talks_{split}.tsv").write_text(text, encoding="utf-8")


def test_extract_tsv_drops_null_rows_and_reports_counts(tmp_path):
    write_tsvs(tmp_path / "tsv")
    p = run_corpus(
        "extract-tsv",
        "--tsv-dir",
        tmp_path / "tsv",
        "--src",
        "gl",
        "--tgt",
        "en",
        "--out",
        tmp_path / "o",
    )
    assert p.returncode == 0, out(p)
    o = tmp_path / "o"
    assert (o / "train.gl").read_text(encoding="utf-8") == "Ola mundo .\nGrazas .\nEstá ben .\n"
    assert (o / "train.en").read_text(
        encoding="utf-8"
    ) == "Hello world .\nThank you .\nIt &apos;s fine .\n"
    assert (o / "dev.gl").read_text(encoding="utf-8") == "Si .\n"
    assert (o / "test.en").read_text(encoding="utf-8") == "Maybe .\n"
    report = json.loads(p.stdout.strip().splitlines()[-1])["splits"]
    assert report["train"] == {
        "rows": 6,
        "kept": 3,
        "dropped": 3,
        "dropped_null": 3,
        "dropped_short_row": 0,
    }
    assert report["dev"]["kept"] == 1 and report["dev"]["dropped"] == 1
    assert "kept 3 / 6 rows, dropped 3" in p.stdout

    # sk-en keeps a different subset (the sk column's NULL, not gl's)
    p = run_corpus(
        "extract-tsv",
        "--tsv-dir",
        tmp_path / "tsv",
        "--src",
        "sk",
        "--tgt",
        "en",
        "--out",
        tmp_path / "s",
    )
    assert p.returncode == 0, out(p)
    assert (tmp_path / "s" / "train.sk").read_text(encoding="utf-8").splitlines() == [
        "Ahoj svet .",
        "Dobré ráno .",
        "Je to v poriadku .",
        "Zbohom .",
    ]

    p = run_corpus(
        "extract-tsv",
        "--tsv-dir",
        tmp_path / "tsv",
        "--src",
        "ar",
        "--tgt",
        "en",
        "--out",
        tmp_path / "x",
    )
    assert (
        p.returncode == 1 and "no column 'ar' in header (columns: talk_name en gl sk)" in p.stderr
    )


@pytest.mark.slow
def test_prepare_sk_en_from_tsv_data_dir(tmp_path):
    data, work = tmp_path / "data", tmp_path / "work"
    write_tsvs(data)
    write_sums(data)
    p = run_script("prepare_data.sh", "sk-en", "--data-dir", data, env=make_env(work))
    assert p.returncode == 0, out(p)
    raw = work / "data" / "raw" / "sk-en"
    assert count_lines(raw / "train.sk") == 4 and count_lines(raw / "train.en") == 4
    assert "sha256 verified" in p.stderr and "kept 4 / 6 rows" in p.stderr


def make_tar(path: Path, members: dict, extra=None) -> None:
    """members: {name: bytes}; extra: list of TarInfo-modifying callables for special members."""
    with tarfile.open(path, "w:gz") as tf:
        for name, data in members.items():
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
        for make in extra or []:
            tf.addfile(make())


def qi18_members(layout: str = "lang.split") -> dict:
    files = {
        "train": (
            ["Ola mundo .", "", "Grazas .", "Adeus ."],
            ["Hello world .", "Bye .", "Thanks .", "__NULL__"],
        ),
        "dev": (["Si ."], ["Yes ."]),
        "test": (["Non .", "Quizais ."], ["No .", "Maybe ."]),
    }
    m = {}
    for split, (gl, en) in files.items():
        for lang, lines in (("gl", gl), ("en", en)):
            name = f"{lang}.{split}" if layout == "lang.split" else f"{split}.{lang}"
            m[f"datasets/gl_to_en/{name}"] = ("\n".join(lines) + "\n").encode("utf-8")
    m["datasets/pt_to_en/pt.train"] = b"Ola .\n"
    return m


@pytest.mark.parametrize("layout", ["lang.split", "split.lang"])
def test_extract_pair_folder_from_tarball(tmp_path, layout):
    arc = tmp_path / "qi18naacl-dataset.tar.gz"
    make_tar(arc, qi18_members(layout))
    p = run_corpus(
        "extract-pair-folder",
        "--archive",
        arc,
        "--folder",
        "gl_to_en",
        "--src",
        "gl",
        "--tgt",
        "en",
        "--out",
        tmp_path / "o",
    )
    assert p.returncode == 0, out(p)
    o = tmp_path / "o"
    assert (o / "train.gl").read_text(encoding="utf-8") == "Ola mundo .\nGrazas .\n"
    assert (o / "train.en").read_text(encoding="utf-8") == "Hello world .\nThanks .\n"
    assert (o / "test.gl").read_text(encoding="utf-8") == "Non .\nQuizais .\n"
    report = json.loads(p.stdout.strip().splitlines()[-1])["splits"]
    assert report["train"] == {"rows": 4, "kept": 2, "dropped": 2, "dropped_null": 2}
    assert sorted(x.name for x in tmp_path.iterdir()) == [
        "o",
        "qi18naacl-dataset.tar.gz",
    ]  # temp dir removed


@pytest.mark.slow
def test_prepare_from_previously_extracted_archives(tmp_path):
    """Archives extracted once (safely, with marker) to data/download/ are reused by prepare
    when no data dir is given (--download): gl-en from the qi18 pair folder, sk-en from
    ted_talks' TSVs (nested folder)."""
    work = tmp_path / "work"
    dl = work / "data" / "download"
    arc = tmp_path / "qi18naacl-dataset.tar.gz"
    make_tar(arc, qi18_members())
    assert run_corpus("untar", "--archive", arc, "--dest", dl / "qi18naacl-dataset").returncode == 0
    write_tsvs(tmp_path / "tsv" / "ted_data")
    arc2 = tmp_path / "ted_talks.tar.gz"
    with tarfile.open(arc2, "w:gz") as tf:
        tf.add(tmp_path / "tsv" / "ted_data", arcname="ted_data")
    assert run_corpus("untar", "--archive", arc2, "--dest", dl / "ted_talks").returncode == 0

    env = make_env(work)
    p = run_script("prepare_data.sh", "gl-en", "--download", env=env)
    assert p.returncode == 0, out(p)
    raw = work / "data" / "raw" / "gl-en"
    assert (raw / "train.gl").read_text(encoding="utf-8") == "Ola mundo .\nGrazas .\n"
    assert "gl_to_en of qi18naacl-dataset.tar.gz" in (raw / "SOURCE").read_text()
    assert "expected 10017" in p.stderr  # line count differs from the real set's: warned

    p = run_script("prepare_data.sh", "sk-en", "--download", env=env)
    assert p.returncode == 0, out(p)
    assert (work / "data" / "raw" / "sk-en" / "dev.sk").read_text(
        encoding="utf-8"
    ) == "Áno .\nNie .\n"


def test_corrupted_tarball_rejected(tmp_path):
    arc = tmp_path / "good.tar.gz"
    make_tar(arc, {f"datasets/f{i}.txt": os.urandom(20000) for i in range(5)})
    truncated = tmp_path / "truncated.tar.gz"
    truncated.write_bytes(arc.read_bytes()[: arc.stat().st_size // 2])
    garbage = tmp_path / "garbage.tar.gz"
    garbage.write_bytes(
        gzip.compress(b"this is not a tar archive at all" * 100)[:200] + b"\x00" * 50
    )
    for bad in (truncated, garbage):
        dest = tmp_path / f"x_{bad.stem}"
        p = run_corpus("untar", "--archive", bad, "--dest", dest)
        assert p.returncode == 1, out(p)
        assert f"error: {bad}: corrupt or truncated archive" in p.stderr
        assert not dest.exists()
    assert not [x for x in tmp_path.iterdir() if x.name.startswith(".")]  # no temporary leftovers
    # the intact archive extracts, atomically, with a completion marker; a second call skips
    p = run_corpus("untar", "--archive", arc, "--dest", tmp_path / "ok")
    assert p.returncode == 0, out(p)
    assert (tmp_path / "ok" / ".qknorm_extracted").is_file() and len(
        list((tmp_path / "ok" / "datasets").iterdir())
    ) == 5
    p = run_corpus("untar", "--archive", arc, "--dest", tmp_path / "ok")
    assert p.returncode == 0 and "skip:" in p.stderr


def _symlink_member():
    ti = tarfile.TarInfo("datasets/link")
    ti.type = tarfile.SYMTYPE
    ti.linkname = "/etc/passwd"
    return ti


@pytest.mark.parametrize("kind", ["dotdot", "absolute", "symlink"])
def test_unsafe_tar_member_rejected(tmp_path, kind):
    arc = tmp_path / "evil.tar.gz"
    members = {"datasets/gl_to_en/gl.train": b"Ola .\n"}
    extra = []
    if kind == "dotdot":
        members["datasets/../../evil.txt"] = b"pwned\n"
    elif kind == "absolute":
        members[str(tmp_path / "abs_evil.txt")] = b"pwned\n"
    else:
        extra = [_symlink_member]
    make_tar(arc, members, extra)
    dest = tmp_path / "sub" / "x"
    p = run_corpus("untar", "--archive", arc, "--dest", dest)
    assert p.returncode == 1
    assert "unsafe archive member" in p.stderr
    assert {"dotdot": "path traversal", "absolute": "absolute path", "symlink": "link member"}[
        kind
    ] in p.stderr
    assert not dest.exists()
    assert not (tmp_path / "evil.txt").exists() and not (tmp_path.parent / "evil.txt").exists()
    assert not (tmp_path / "abs_evil.txt").exists()
    assert list((tmp_path / "sub").iterdir()) == []


# --------------------------------------------------------------------------------------------
# check, sha256, length percentile


def test_g0_formula_is_the_models():
    """g0 = log2(L^2 - L) has one home, the plugin's qk_norm_initial_scale (Henry et al. 2020,
    Eq. 4); the corpus tool computes L only."""
    from fairseq_qknorm.modules.qknorm_attention import qk_norm_initial_scale

    assert qk_norm_initial_scale(79) == pytest.approx(math.log2(6162))
    assert qk_norm_initial_scale(79) == pytest.approx(
        12.589, abs=1e-3
    )  # QKNorm paper's gl->en value
    for L, g in ((75, 12.44), (72, 12.32)):
        assert qk_norm_initial_scale(L) == pytest.approx(g, abs=0.01)
    with pytest.raises(ValueError):
        qk_norm_initial_scale(1)
    assert not any(hasattr(m, "g0_from_length") for m in (corpus, lengths))
    assert run_corpus("g0", "--L", "79").returncode == 2  # no such command


def test_corpus_tool_runs_without_torch_or_fairseq(tmp_path):
    """`python -m qknorm_tools.corpus` from the repository root, with torch, fairseq and the
    plugin unimportable (the pipeline's data steps need neither)."""
    f = tmp_path / "bpe.txt"
    f.write_text("".join(" ".join(["x@@", "y"] * n) + "\n" for n in range(1, 41)))  # 2..80 tokens
    p = run_without_torch("qknorm_tools.corpus", "length-percentile", "--file", f, "--q", "97.5")
    assert p.returncode == 0, out(p)
    # numpy.percentile(2, 4, ..., 80; 97.5) = 2 + 2 * 39 * 0.975 = 78.05 -> L = 79
    assert json.loads(p.stdout) == {"L": 79, "q": 97.5, "n_lines": 40}
    g = tmp_path / "bpe2.txt"  # a second file: one file as both sides is refused
    g.write_bytes(f.read_bytes())
    p = run_without_torch("qknorm_tools.corpus", "check", "--src", f, "--tgt", g)
    assert p.returncode == 0 and "40 lines" in p.stdout, out(p)


def test_bpe_manifest_bytes(tmp_path):
    """`corpus bpe-manifest` (what scripts/bpe.sh runs, without torch) writes bpe.json byte for
    byte as bpe.sh's former inline Python did: the data identity hashes these bytes."""
    common = ["--pair", "gl-en", "--src", "gl", "--tgt", "en", "--merges", "8000"]
    common += ["--vocab-threshold", "50", "--vocab-size", "4000"]
    f = tmp_path / "bpe.json"
    p = run_without_torch(
        "qknorm_tools.corpus", "bpe-manifest", "--out", f, *common, "--tool", "subword-nmt"
    )
    assert p.returncode == 0, out(p)
    assert f.read_bytes() == (
        b'{\n  "pair": "gl-en",\n  "src": "gl",\n  "tgt": "en",\n  "tool": "subword-nmt",\n'
        b'  "codes": "codes",\n  "vocabulary": {\n    "gl": "vocab.gl",\n    "en": "vocab.en"\n'
        b'  },\n  "merges": 8000,\n  "vocab_threshold": 50\n}'
    )
    args = [*common, "--tool", "sentencepiece", "--bpe-dropout", ".1", "--seed", "7"]
    assert run_corpus("bpe-manifest", "--out", f, *args).returncode == 0
    assert json.loads(f.read_text()) == {
        "pair": "gl-en",
        "src": "gl",
        "tgt": "en",
        "tool": "sentencepiece",
        "model": "spm.model",
        "vocab_size": 4000,
        "normalization": "identity",
        "bpe_dropout": {
            "p": 0.1,
            "seed": 7,
            "sample": "static: the training split segmented once, the same sample in every epoch",
        },
    }
    p = run_corpus("bpe-manifest", "--out", f, *common, "--tool", "fastbpe")
    assert p.returncode == 2 and "invalid choice: 'fastbpe'" in p.stderr


def test_length_percentile_definition(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.write_text("".join(" ".join(["x"] * n) + "\n" for n in range(1, 6)))  # lengths 1..5
    b.write_text("".join(" ".join(["y"] * n) + "\n" for n in range(6, 11)))  # lengths 6..10
    p = run_corpus(
        "length-percentile", "--file", a, "--file2", b, "--q", "97.5", "--out", tmp_path / "s.json"
    )
    assert p.returncode == 0, out(p)
    # numpy.percentile(1..10, 97.5) = 1 + 9 * 0.975 = 9.775 -> L = ceil = 10
    assert json.loads(p.stdout) == {"L": 10, "q": 97.5, "n_lines": 10}
    full = json.loads((tmp_path / "s.json").read_text())
    assert full["percentile"] == pytest.approx(9.775) and full["rounding"] == "ceil"
    assert full["per_file"][str(a)]["L"] == 5
    assert lengths.percentile_linear(list(range(1, 11)), 50) == pytest.approx(5.5)
    np = pytest.importorskip("numpy")
    vals = [random.Random(3).randint(1, 200) for _ in range(1001)]
    assert lengths.percentile_linear(vals, 97.5) == pytest.approx(float(np.percentile(vals, 97.5)))


def test_check_cli_reports_every_problem_with_file_and_line(tmp_path):
    s, t = tmp_path / "x.gl", tmp_path / "x.en"
    s.write_bytes(b"ola\n\nmundo\r\n")
    t.write_bytes(b"hello\nworld \xc3\x28\nfoo\nbar\n")
    p = run_corpus("check", "--src", s, "--tgt", t)
    assert p.returncode == 1
    lines = p.stderr.splitlines()
    # at the shorter file's last line, with both counts (wc -l)
    assert any(
        x.startswith(f"error: {s}:3: misaligned parallel files: {s} has 3 lines, {t} has 4 lines")
        for x in lines
    ), lines
    assert f"error: {s}:2: empty line" in lines
    assert any(x.startswith(f"error: {s}:3: CRLF line ending") for x in lines)
    assert any(x.startswith(f"error: {t}:2: invalid UTF-8") for x in lines)
    s.write_bytes(b"ola mundo\n")
    t.write_bytes(b"a b c d e\n")
    assert run_corpus("check", "--src", s, "--tgt", t, "--max-len", "5").returncode == 0
    p = run_corpus("check", "--src", s, "--tgt", t, "--max-len", "4")
    assert p.returncode == 1 and f"error: {t}:1: line too long: 5 tokens > max 4" in p.stderr


def test_sha256_cli(tmp_path):
    f = tmp_path / "f.txt"
    f.write_bytes(b"abc\n")
    digest = hashlib.sha256(b"abc\n").hexdigest()
    assert run_corpus("sha256", "--file", f, "--expected", digest, "--size", "4").returncode == 0
    p = run_corpus("sha256", "--file", f, "--expected", "0" * 64)
    assert p.returncode == 1 and f"expected {'0' * 64}, got {digest}" in p.stderr
    p = run_corpus("sha256", "--file", f, "--size", "5")
    assert p.returncode == 1 and "size mismatch: expected 5 bytes, got 4 bytes" in p.stderr
    (tmp_path / "SHA256SUMS").write_text(f"{digest}  sub/f.txt\n")
    assert (
        run_corpus(
            "sha256", "--file", f, "--sums", tmp_path / "SHA256SUMS", "--key", "sub/f.txt"
        ).returncode
        == 0
    )
    p = run_corpus("sha256", "--file", f, "--sums", tmp_path / "SHA256SUMS", "--key", "other")
    assert p.returncode == 3 and "no entry for 'other'" in p.stderr
    h = tmp_path / "ted_talks.tar.gz"
    h.write_bytes(HTML_PAGE)
    p = run_corpus("sha256", "--file", h, "--size", "352222045", "--expected", "0" * 64)
    assert p.returncode == 1 and "got an HTML page" in p.stderr and "352222045" in p.stderr
    p = run_corpus("untar", "--archive", h, "--dest", tmp_path / "u")
    assert p.returncode == 1 and "got an HTML page" in p.stderr


@pytest.mark.parametrize(
    "content, problem",
    [
        (b"one line\nno final newline", "no final newline"),
        (b"", "empty file"),
    ],
)
def test_check_rejects_missing_final_newline_and_empty_file(tmp_path, content, problem):
    """`wc -l` (and fairseq) count a last line without newline one short: reject it up front."""
    src, tgt = tmp_path / "a.gl", tmp_path / "a.en"
    src.write_bytes(content)
    tgt.write_bytes(content)
    p = run_corpus("check", "--src", src, "--tgt", tgt)
    assert p.returncode != 0
    assert problem in out(p) and str(src) in out(p)
