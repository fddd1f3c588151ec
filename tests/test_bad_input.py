"""Bad input gets a clear error before anything is spent, and a given data dir is used or refused.

* corpus checks: NUL bytes, misaligned sides reported where the shorter file ends;
* prepare_data.sh: a data dir that was given is never replaced by data/download/ or a download
  (missing file, files one level deeper or shallower, train.src/train.tgt, valid.*), a pair
  prepared from another data dir is prepared again, option values are never options;
* demo.sh checks every option before the first data step;
* train.sh refuses extra fairseq arguments that would override what it manages;
* unknown pair/system/profile: the error and the usage line, exit status 2;
* the fairseq-train commands of README.md and docs/*.md have a stopping criterion.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import (
    FAR_BOUND,
    REPO,
    cli_env,
    doc_text,
    make_env,
    make_tiny_ted,
    out,
    run_script,
    sha256,
    write_sums,
)


def corpus_check(src: Path, tgt: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "qknorm_tools.corpus", "check", "--src", src, "--tgt", tgt],
        capture_output=True,
        text=True,
        env=cli_env(),
        timeout=FAR_BOUND,
    )


def no_download_env(work: Path, tmp: Path, **extra) -> dict:
    """Online, but every download URL points at a missing local file: a download attempt shows
    as 'downloading ...' in the output (and fails), so its absence proves none was tried."""
    missing = tmp / "no-such-mirror"
    return make_env(
        work,
        QKNORM_OFFLINE=None,
        QKNORM_QI18_URL=f"file://{missing}/qi18naacl-dataset.tar.gz",
        QKNORM_TED_TALKS_URL=f"file://{missing}/ted_talks.tar.gz",
        QKNORM_IWSLT15_URL=f"file://{missing}",
        **extra,
    )


# ------------------------------------------------------------------------------ corpus check
def test_nul_byte_is_an_error_with_file_and_line(tmp_path):
    s, t = tmp_path / "a.gl", tmp_path / "a.en"
    s.write_bytes(b"ola mundo .\nunha\x00casa .\n")
    t.write_bytes(b"hello world .\na house .\n")
    p = corpus_check(s, t)
    assert p.returncode == 1, out(p)
    assert f"error: {s}:2: NUL byte (\\x00) at byte offset 4" in p.stderr


def test_utf16_file_is_rejected_naming_the_encoding(tmp_path):
    s, t = tmp_path / "a.gl", tmp_path / "a.en"
    s.write_bytes("ola .\n".encode("utf-16-le"))
    t.write_bytes(b"hello .\n")
    p = corpus_check(s, t)
    assert p.returncode == 1 and f"error: {s}:1: NUL byte" in p.stderr and "UTF-16" in p.stderr


@pytest.mark.parametrize("short", ["src", "tgt"])
def test_misaligned_sides_reported_where_the_shorter_file_ends(tmp_path, short):
    s, t = tmp_path / "x.gl", tmp_path / "x.en"
    long_text = "".join(f"line {i} .\n" for i in range(1, 8))  # 7 lines
    short_text = "".join(f"line {i} .\n" for i in range(1, 6))  # 5 lines
    s.write_text(short_text if short == "src" else long_text)
    t.write_text(long_text if short == "src" else short_text)
    shorter = s if short == "src" else t
    n_s, n_t = (5, 7) if short == "src" else (7, 5)
    p = corpus_check(s, t)
    assert p.returncode == 1
    first = p.stderr.splitlines()[0]
    # the shorter file's last line (wc -l), both counts; not "line 6 of the longer file"
    assert first.startswith(
        f"error: {shorter}:5: misaligned parallel files: {s} has {n_s} lines, {t} has {n_t} lines"
    ), first
    assert "(wc -l)" in first and f"{shorter} ends at line 5" in first


# ------------------------------------------------------------------------------ prepare_data.sh
@pytest.fixture
def good(tmp_path):
    """A tiny TED pair laid out like the shared data dir (ted-gl-en/ + SHA256SUMS)."""
    d = tmp_path / "good"
    make_tiny_ted(d)
    return d


def test_missing_file_in_given_dir_is_an_error_not_a_download(tmp_path, good):
    (good / "ted-gl-en" / "test.en").unlink()
    write_sums(good)
    work = tmp_path / "work"
    p = run_script(
        "prepare_data.sh", "gl-en", "--data-dir", good, env=no_download_env(work, tmp_path)
    )
    assert p.returncode == 1, out(p)
    assert f"{good / 'ted-gl-en'} lacks test.en" in p.stderr
    assert "downloading" not in p.stderr and "warning" not in p.stderr
    assert not (work / "data" / "download").exists() and not (work / "data/raw/gl-en").exists()


def test_missing_file_in_default_shared_copy_is_an_error_too(tmp_path):
    """A broken pre-extracted folder is never silently skipped (it was a warning, then a
    download of the other corpus)."""
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "scripts", repo / "scripts")
    shutil.copytree(REPO / "configs", repo / "configs")
    shared = tmp_path / "shared" / "data"
    make_tiny_ted(shared)
    (shared / "ted-gl-en" / "dev.gl").unlink()
    work = tmp_path / "work"
    p = subprocess.run(
        ["bash", repo / "scripts" / "prepare_data.sh", "gl-en"],
        env=no_download_env(work, tmp_path, PYTHONPATH=str(REPO)),
        capture_output=True,
        text=True,
        timeout=FAR_BOUND,
    )
    assert p.returncode == 1, out(p)
    assert "lacks dev.gl" in p.stderr and "downloading" not in p.stderr


@pytest.mark.parametrize(
    "layout, expected",
    [
        # the parent of the data dir was given: the pair folder is two levels down
        ("shallow", ["holds {train,dev,test}.{gl,en}: pass --data-dir {d}/data/ted-gl-en"]),
        ("src_tgt_names", ["found train.src/train.tgt in {d}", "write a pair config"]),
        (
            "valid_split",
            ["found valid.gl/valid.en in {d}", "dev split must be named dev.gl/dev.en"],
        ),
        ("other_pair", ["holds ted-sk-en/ but no ted-gl-en/"]),
        ("empty", ["{d} is empty"]),
    ],
)
@pytest.mark.slow
def test_given_dir_without_a_usable_copy_is_refused_naming_what_it_holds(
    tmp_path, good, layout, expected
):
    d = tmp_path / "given"
    src = good / "ted-gl-en"
    if layout == "shallow":
        shutil.copytree(good, d / "data")
    elif layout == "src_tgt_names":
        d.mkdir()
        for split in ("train", "dev", "test"):
            shutil.copy(src / f"{split}.gl", d / f"{split}.src")
            shutil.copy(src / f"{split}.en", d / f"{split}.tgt")
    elif layout == "valid_split":
        shutil.copytree(src, d)
        (d / "dev.gl").rename(d / "valid.gl")
        (d / "dev.en").rename(d / "valid.en")
    elif layout == "other_pair":
        make_tiny_ted(d, src="sk", folder="ted-sk-en")
    else:
        d.mkdir()
    work = tmp_path / "work"
    p = run_script("prepare_data.sh", "gl-en", "--data-dir", d, env=no_download_env(work, tmp_path))
    assert p.returncode == 1, out(p)
    for frag in expected:
        assert frag.replace("{d}", str(d)) in p.stderr, (frag, p.stderr)
    if layout != "valid_split":  # a pair folder with dev missing says so itself
        assert f"data dir {d} (from --data-dir) holds no usable copy of gl-en" in p.stderr
        assert "Looked for: ted-gl-en/{train,dev,test}.{gl,en}" in p.stderr
    assert "downloading" not in p.stderr
    assert not (work / "data" / "raw" / "gl-en").exists()


def test_qknorm_data_dir_is_used_or_refused_as_well(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    env = no_download_env(tmp_path / "work", tmp_path, QKNORM_DATA_DIR=empty)
    p = run_script("prepare_data.sh", "sk-en", env=env)
    assert p.returncode == 1 and "(from QKNORM_DATA_DIR) holds no usable copy of sk-en" in p.stderr
    assert "downloading" not in p.stderr and "unset QKNORM_DATA_DIR" in p.stderr


@pytest.mark.slow
def test_the_pair_folder_itself_is_accepted_and_verified_by_the_parents_sums(tmp_path, good):
    work = tmp_path / "work"
    p = run_script("prepare_data.sh", "gl-en", "--data-dir", good / "ted-gl-en", env=make_env(work))
    assert p.returncode == 0, out(p)
    assert p.stderr.count("sha256 verified") == 6
    raw = work / "data" / "raw" / "gl-en"
    assert (raw / "dev.gl").read_bytes() == (good / "ted-gl-en" / "dev.gl").read_bytes()
    # a corrupted file is caught by the parent's SHA256SUMS
    f = good / "ted-gl-en" / "train.en"
    f.write_bytes(f.read_bytes().replace(b"the", b"teh", 1))
    p = run_script(
        "prepare_data.sh", "gl-en", "--data-dir", good / "ted-gl-en", "--force", env=make_env(work)
    )
    assert p.returncode == 1 and f"{f}: sha256 mismatch" in p.stderr


def test_papers_folder_download_says_which_corpus_it_is(tmp_path):
    """No local source at all: the log names the 10,017-pair folder and that it differs from
    the local 11,233-pair copy, before the download (which fails offline here)."""
    p = run_script("prepare_data.sh", "gl-en", "--download", env=make_env(tmp_path / "work"))
    assert p.returncode == 1
    assert "gl_to_en folder of qi18naacl-dataset.tar.gz (131005909 bytes)" in p.stderr
    assert "10017 / 682 / 1007 train / dev / test pairs, a different corpus from the" in p.stderr
    assert "11233 / 742 / 1112 all-talks extraction" in p.stderr


@pytest.mark.slow
def test_prepared_pair_is_prepared_again_from_another_given_dir(tmp_path, good):
    other = tmp_path / "other"
    make_tiny_ted(other, sizes=(200, 20, 25))
    work = tmp_path / "work"
    env = make_env(work)
    assert run_script("prepare_data.sh", "gl-en", "--data-dir", good, env=env).returncode == 0
    raw = work / "data" / "raw" / "gl-en"
    assert sha256(raw / "train.gl") == sha256(good / "ted-gl-en" / "train.gl")
    p = run_script("prepare_data.sh", "gl-en", "--data-dir", other, env=env)
    assert p.returncode == 0, out(p)
    assert not p.stdout.startswith("skip:")
    # the log names the source as recorded and as now (issue 37, leftover 6: it showed the
    # recorded settings only, as if they were what it prepared from)
    assert (
        f"{raw} was made with other settings or inputs: data_dir {good} -> {other}: preparing "
        "again\n"
    ) in p.stderr, out(p)
    assert sha256(raw / "train.gl") == sha256(other / "ted-gl-en" / "train.gl")
    assert f"data_dir={other}" in (raw / ".settings").read_text()
    # the same dir again, or no dir at all: skipped
    for args in (["--data-dir", other], []):
        p = run_script("prepare_data.sh", "gl-en", *args, env=env)
        assert p.returncode == 0 and p.stdout.startswith("skip:"), (args, out(p))


@pytest.mark.parametrize(
    "args, message",
    [
        (["--data-dir", "--force"], "--data-dir needs a value"),
        (["--data-dir=", "--force"], "--data-dir needs a value"),
        (["--data-dir", "x", "--download"], "--data-dir and --download exclude each other"),
        (["en-vi"], "unexpected argument 'en-vi'"),
    ],
)
def test_prepare_data_option_values_are_never_options(tmp_path, args, message):
    p = run_script("prepare_data.sh", "gl-en", *args, env=make_env(tmp_path / "work"))
    assert p.returncode == 2 and f"error: {message}" in p.stderr
    assert "usage: scripts/prepare_data.sh PAIR" in p.stderr
    assert not (tmp_path / "work").exists()


# ------------------------------------------------------------------------------ demo.sh
@pytest.mark.parametrize(
    "args, env_extra, message",
    [
        (["--max-update", "0"], {}, "--max-update 0 with profile cpu-proxy (max-epoch 0) would"),
        ([], {"QKNORM_MAX_UPDATE": "12x"}, "QKNORM_MAX_UPDATE must be a non-negative integer"),
        ([], {"QKNORM_THREADS": "0"}, "QKNORM_THREADS must be a positive integer"),
        (["--seed", "one"], {}, "--seed must be a non-negative integer"),
        (["gl-en", "en-vi"], {}, "unexpected argument 'en-vi'"),
        (["xx-yy"], {}, "unknown pair 'xx-yy'"),
        (["--data-dir", "/no/such/dir"], {}, "--data-dir '/no/such/dir' is not a directory"),
    ],
)
@pytest.mark.slow
def test_demo_checks_every_option_before_any_data_step(tmp_path, good, args, env_extra, message):
    work = tmp_path / "work"
    data_args = [] if "--data-dir" in args else ["--data-dir", good]
    p = run_script("demo.sh", *args, *data_args, env=make_env(work, **env_extra))
    assert p.returncode == 2, out(p)
    assert f"error: {message}" in p.stderr and "usage: scripts/demo.sh" in p.stderr
    assert not (work / "data").exists()  # nothing prepared


# ------------------------------------------------------------------------------ train.sh --
@pytest.mark.parametrize(
    "extra, flag, hint",
    [
        (["--seed", "7"], "--seed", "use train.sh --seed N"),
        (
            ["--save-dir=/tmp/elsewhere"],
            "--save-dir=/tmp/elsewhere",
            "use the run directory runs/PAIR/LABEL/SYSTEM/seedN",
        ),
        (["--dropout", "0.1", "--arch", "transformer"], "--arch", "a system (configs/systems"),
        (["--lr", "0.5"], "--lr", "use train.sh --lr LR (its runs go to seedN-lrLR"),
        (["--qk-norm"], "--qk-norm", "a system (configs/systems: each sets these flags"),
        (["--norm-type", "scalenorm"], "--norm-type", "another model filed under this system"),
        (["--fix-norm"], "--fix-norm", "another model filed under this system's name"),
        (["--attn-logit-softcap", "50"], "--attn-logit-softcap", "a system (configs/systems"),
        (["--max-update", "5"], "--max-update", "train.sh --max-update N"),
        (["--user-dir", "/x"], "--user-dir", "always loads this repository's plugin"),
        (["--source-lang", "en"], "--source-lang", "the pair's direction"),
        (["--task", "translation"], "--task", "a profile (train_task, task_flags in"),
        (["--qk-norm-length", "50"], "--qk-norm-length", "the data's L"),
        (["--bf16-autocast"], "--bf16-autocast", "use train.sh --bf16-autocast"),
    ],
)
@pytest.mark.slow
def test_extra_fairseq_args_never_override_managed_flags(tmp_path, extra, flag, hint):
    p = run_script(
        "train.sh", "gl-en", "qknorm_paper", "--dry-run", "--", *extra, env=make_env(tmp_path)
    )
    assert p.returncode == 2, out(p)
    assert f"error: {flag} after -- would override a setting train.sh manages" in p.stderr
    assert hint in p.stderr and "usage: scripts/train.sh" in p.stderr
    assert "fairseq-train" not in p.stdout


def test_force_dry_run_says_it_would_empty_the_run(tmp_path):
    """A new user's trial: ``train.sh --force --dry-run`` printed the command only, not that
    the real run deletes the run's checkpoints first; the dry run itself deletes nothing."""
    run = tmp_path / "runs/gl-en/cpu-proxy/twt/seed1"
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints/checkpoint_last.pt").write_bytes(b"x")
    p = run_script("train.sh", "gl-en", "twt", "--force", "--dry-run", env=make_env(tmp_path))
    assert p.returncode == 0, out(p)
    assert (
        f"[train] --force: the real run first empties {run} (its checkpoints, logs and scores "
        "are deleted)"
    ) in p.stderr.splitlines(), p.stderr
    assert (run / "checkpoints/checkpoint_last.pt").read_bytes() == b"x"
    p = run_script("train.sh", "gl-en", "twt", "--dry-run", env=make_env(tmp_path))
    assert "--force" not in p.stderr


@pytest.mark.slow
def test_extra_fairseq_args_that_add_settings_pass(tmp_path):
    p = run_script(
        "train.sh",
        "gl-en",
        "twt",
        "--dry-run",
        "--",
        "--weight-decay",
        "1e-4",
        "--adam-betas",
        "(0.9,0.98)",
        "--fp16",
        env=make_env(tmp_path),
    )
    assert p.returncode == 0, out(p)
    assert p.stdout.rstrip().endswith("--weight-decay 1e-4 --adam-betas \\(0.9\\,0.98\\) --fp16")
    p = run_script(
        "train.sh", "gl-en", "twt", "--dry-run", "--", "data/bin/x", env=make_env(tmp_path)
    )
    assert p.returncode == 2 and "unexpected argument 'data/bin/x' after --" in p.stderr


@pytest.mark.parametrize(
    "args, env_extra, message",
    [
        ([], {"QKNORM_MAX_UPDATE": "-5"}, "QKNORM_MAX_UPDATE must be a non-negative integer"),
        (["--max-update", "-5"], {}, "--max-update must be a non-negative integer"),
        (["--max-update", "-5"], {"QKNORM_MAX_UPDATE": "7"}, "--max-update must be"),
    ],
)
@pytest.mark.slow
def test_train_sh_names_the_budget_the_user_gave(tmp_path, args, env_extra, message):
    """A bad budget from QKNORM_MAX_UPDATE is called that, not --max-update (not given)."""
    p = run_script(
        "train.sh", "gl-en", "twt", "--dry-run", *args, env=make_env(tmp_path, **env_extra)
    )
    assert p.returncode == 2 and f"error: {message}" in p.stderr, out(p)


# ------------------------------------------------------------------------------ unknown names
@pytest.mark.parametrize(
    "script, args, message",
    [
        ("train.sh", ["xx-yy", "twt"], "unknown pair 'xx-yy' (known pairs: ar-en en-vi gl-en"),
        ("train.sh", ["gl-en", "bogus"], "unknown system 'bogus' (known systems: "),
        ("train.sh", ["gl-en", "twt", "--profile", "gpu"], "unknown profile 'gpu' (known "),
        ("evaluate.sh", ["gl-en", "bogus"], "unknown system 'bogus'"),
        ("prepare_data.sh", ["../../etc"], "unknown pair '../../etc'"),
        ("bpe.sh", ["en-he"], "note: he-en already is en->he"),
        ("binarize.sh", ["xx"], "or your own configs/pairs/NAME.toml"),
    ],
)
@pytest.mark.slow
def test_unknown_names_are_usage_errors_with_the_usage_line(tmp_path, script, args, message):
    p = run_script(script, *args, env=make_env(tmp_path / "work"))
    assert p.returncode == 2, out(p)
    assert message in p.stderr and f"usage: scripts/{script}" in p.stderr


# ------------------------------------------------------------------------------ README
def test_readme_fairseq_train_commands_have_a_stopping_criterion():
    text = doc_text()
    commands = re.findall(r"^fairseq-train .*?(?<!\\)$", text, flags=re.M | re.S)
    assert commands, "no fairseq-train command in README.md or docs/*.md"
    for cmd in commands:
        assert "--max-update" in cmd or "--max-epoch" in cmd, cmd
