"""A researcher's own corpus (one config file, configs/pairs/NAME.toml, corpus = "local") and the
reverse direction of a built-in pair (en-gl from gl-en's files) run the same pipeline with the
same checks: prepare -> bpe -> binarize -> train a few updates -> evaluate (and demo.sh for
en-gl); bad configs are errors naming the config and the field."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from conftest import (
    FAR_BOUND,
    SCRIPTS,
    count_lines,
    doc_text,
    make_env,
    make_tiny_ted,
    out,
    run_script,
)

#: own file names: the side is not the language code, the dev split is "valid"
OWN_NAMES = {
    ("train", "src"): "train.src",
    ("train", "tgt"): "train.tgt",
    ("dev", "src"): "valid.src",
    ("dev", "tgt"): "valid.tgt",
    ("test", "src"): "test.src",
    ("test", "tgt"): "test.tgt",
}


def readme_pair_config(local_dir: str) -> str:
    """The own-corpus config of docs/own-data.md, with LOCAL_DIR set to ``local_dir``."""
    text = doc_text()
    block = re.search(r"```toml\n(# configs/pairs/de-en\.toml\n.*?)```", text, flags=re.S)
    assert block, "README.md / docs/*.md: no configs/pairs/de-en.toml example"
    config, n = re.subn(r'^dir = "\S+"', f'dir = "{local_dir}"', block.group(1), flags=re.M)
    assert n == 1
    return config


@pytest.fixture
def own_corpus(tmp_path):
    """(data dir, corpus folder) with a tiny corpus under its own file names."""
    ted = tmp_path / "ted"
    sizes = make_tiny_ted(ted, sizes=(300, 30, 37))
    corpus = tmp_path / "data" / "my-corpus"
    corpus.mkdir(parents=True)
    for (split, side), name in OWN_NAMES.items():
        lang = "gl" if side == "src" else "en"
        shutil.copy(ted / "ted-gl-en" / f"{split}.{lang}", corpus / name)
    return tmp_path / "data", corpus, sizes


def write_config(work: Path, name: str, text: str) -> Path:
    path = work / "configs" / "pairs" / f"{name}.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def run_steps(env, pair, merges=60):
    for step, args in (
        ("prepare_data.sh", [pair]),
        ("bpe.sh", [pair, "--merges", merges]),
        ("binarize.sh", [pair]),
    ):
        p = run_script(step, *args, env=env)
        assert p.returncode == 0, out(p)
    return p


@pytest.mark.slow
def test_own_corpus_from_the_readme_config_runs_the_pipeline(tmp_path, own_corpus):
    data, corpus, sizes = own_corpus
    work = tmp_path / "work"
    # LOCAL_DIR relative to the data dir given by QKNORM_DATA_DIR
    write_config(work, "de-en", readme_pair_config("my-corpus"))
    env = make_env(work, QKNORM_DATA_DIR=data, OMP_NUM_THREADS=1)
    run_steps(env, "de-en")
    raw = work / "data/raw/de-en"
    assert (raw / "train.de").read_bytes() == (corpus / "train.src").read_bytes()
    assert (raw / "dev.en").read_bytes() == (corpus / "valid.tgt").read_bytes()
    assert count_lines(raw / "test.de") == sizes["test"]
    assert "own corpus" in (raw / "SOURCE").read_text()
    assert (work / "data/bin/de-en/train.de-en.de.bin").is_file()
    stats = json.loads((work / "data/bpe/de-en/length_stats.json").read_text())

    p = run_script(
        "train.sh", "de-en", "qknorm_paper", "--max-update", 3, "--threads", 1,
        "--", "--log-interval", 1,  # a progress line per update (adds to what train.sh manages)
        env=env,
    )  # fmt: skip
    assert p.returncode == 0, out(p)
    run = work / "runs/de-en/cpu-proxy-max-update-3/qknorm_paper/seed1"
    # the terminal gets an ETA on progress lines, train.log fairseq's lines unchanged
    assert re.search(r"\| \d/3 updates, ETA \d+:\d\d \| epoch \d+: ", p.stdout)
    log = (run / "train.log").read_text()
    assert "train_inner" in log and "ETA" not in log
    train = json.loads((run / "train.json").read_text())
    assert (train["pair"], train["updates"]) == ("de-en", 3)
    assert train["qk_norm_length"] == stats["L"] and train["paper_qk_norm_length"] is None
    assert "--source-lang de --target-lang en" in (run / "command.txt").read_text()
    assert (run / "command.txt").read_text().rstrip().endswith("--log-interval 1")

    p = run_script(
        "evaluate.sh", "de-en", "qknorm_paper", "--max-update", 3, "--threads", 1, env=env,

    )  # fmt: skip
    assert p.returncode == 0, out(p)
    assert "read bleu_tok in" in p.stderr and "not the BLEU4 line" in p.stderr
    score = json.loads((run / "test.score.json").read_text())
    assert score["n_lines"] == sizes["test"] and 0.0 <= score["bleu_tok"] <= 100.0
    # fairseq-generate's own BLEU4 is on BPE units, not on the words bleu_tok scores
    assert re.search(r"^Generate test with beam=4: BLEU4 = ", (run / "test.gen.out").read_text(),
                     flags=re.M)  # fmt: skip

    # a changed file is prepared again; the same files are skipped
    p = run_script("prepare_data.sh", "de-en", env=env)
    assert p.stdout.startswith("skip:"), out(p)
    with open(corpus / "test.tgt", "a") as f, open(corpus / "test.src", "a") as g:
        f.write("one more line .\n")
        g.write("unha liña máis .\n")
    p = run_script("prepare_data.sh", "de-en", env=env)
    assert p.returncode == 0 and count_lines(raw / "test.en") == sizes["test"] + 1, out(p)


@pytest.mark.slow
def test_reverse_direction_en_gl_runs_demo_from_the_gl_en_files(tmp_path):
    data = tmp_path / "data_in"
    sizes = make_tiny_ted(data, sizes=(200, 20, 23))
    work = tmp_path / "work"
    env = make_env(work, OMP_NUM_THREADS=1)
    t0 = time.monotonic()
    p = run_script("demo.sh", "en-gl", "--data-dir", data, "--max-update", 3, env=env)
    measured = time.monotonic() - t0
    assert p.returncode == 0, out(p)[-4000:]
    # issue 37: the total left out the bf16 measurement (14 min said, 16 min 50 s measured):
    # it is the whole script's, to the second (bash's start and exit are all it leaves out)
    m = re.search(
        r"; total wall time (\d+) min (\d+) s \(from the start of scripts/demo.sh", p.stderr
    )
    assert m, out(p)[-4000:]
    assert measured - 3 <= int(m[1]) * 60 + int(m[2]) <= measured + 1  # date +%s: whole seconds
    raw = work / "data/raw/en-gl"
    for split in ("train", "dev", "test"):
        for lang in ("en", "gl"):  # the same files, source and target swapped
            assert (raw / f"{split}.{lang}").read_bytes() == (
                data / "ted-gl-en" / f"{split}.{lang}"
            ).read_bytes()
    assert (work / "data/bin/en-gl/train.en-gl.en.idx").is_file()
    label = "cpu-proxy-max-update-3"
    for system in ("twt", "qknorm_paper"):
        run = work / f"runs/en-gl/{label}/{system}/seed1"
        assert "--source-lang en --target-lang gl" in (run / "command.txt").read_text()
        score = json.loads((run / "test.score.json").read_text())
        assert score["n_lines"] == sizes["test"] and "|lang:en-gl|" in score["signatures"]["bleu"]
    for system in ("twt", "qknorm_paper"):  # both trainings' lines, prefixed
        assert re.search(rf"^\[{system}\] .*done training in", p.stdout, flags=re.M), system
    results = work / f"results/{label}/en-gl"
    # every file the demo writes (scripts/demo.sh's header), each regenerated by this run
    for name in ("demo.md", "demo.json", "runs.json", "demo_compare.json", "demo_curves.png",
                 "demo_g.png", "demo_health.png", "demo_bleu.png"):  # fmt: skip
        assert (results / name).is_file(), name
        assert (results / name).stat().st_size > 0, name


@pytest.mark.slow
def test_reverse_direction_dry_run_and_listing(tmp_path):
    env = make_env(tmp_path)
    p = run_script("train.sh", "en-gl", "qknorm_paper", "--profile", "paper", "--dry-run", env=env)
    assert p.returncode == 0, out(p)
    assert "--source-lang en --target-lang gl --arch transformer_qknorm_paper_small" in p.stdout
    assert "--qk-norm-length 79 " in p.stdout  # gl-en's settings (L over both sides)
    assert "/data/bin/en-gl " in p.stdout
    p = run_script("train.sh", "vi-en", "twt", "--dry-run", env=env)
    assert p.returncode == 0 and "--source-lang vi --target-lang en" in p.stdout


def bash_lib(code: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", "-c", f'source "{SCRIPTS}/lib.sh"; {code}'],
        env=env,
        capture_output=True,
        text=True,
        timeout=FAR_BOUND,
    )


LOCAL_OK = """src = "de"
tgt = "en"
corpus = "local"
bpe_merges = 100
[local]
dir = "{dir}"
train_src = "train.src"
train_tgt = "train.tgt"
dev_src = "valid.src"
dev_tgt = "valid.tgt"
test_src = "test.src"
test_tgt = "test.tgt"
"""


@pytest.mark.parametrize(
    "edit, message",
    [
        (('test_tgt = "test.tgt"\n', ""), "no key 'local.test_tgt' (corpus = \"local\" needs"),
        (('corpus = "local"', 'corpus = "files"'),
         "key 'corpus' = \"files\": allowed ted, iwslt15, local"),
        (('src = "de"', 'src = "en"'), "keys 'src' and 'tgt' are both \"en\""),
        (('src = "de"', 'src = "de-DE"'), "key 'src' = \"de-DE\": allowed a language code"),
        (('dev_src = "valid.src"', 'dev_src = "train.src"'),
         "key 'local.dev_src' = \"train.src\" names a file already used"),
        (("bpe_merges = 100", 'bpe_merges = "8k"'),
         "key 'bpe_merges' = \"8k\": allowed a positive integer"),
        (("bpe_merges = 100", 'bpe_merges = 100\npaper_arch_size = "large"'),
         "key 'paper_arch_size' = \"large\": allowed small, base"),
        (("bpe_merges = 100", "bpe_merge = 100"),
         "unknown key 'bpe_merge' (did you mean 'bpe_merges'?)"),
        (('dir = "{dir}"', 'dir = "/no/such/dir"'),
         "key 'local.dir': /no/such/dir is not a directory"),
        (('test_src = "test.src"', 'test_src = "tst.src"'),
         "key 'local.test_src' = \"tst.src\": {dir}/tst.src not found (local.dir: {dir}); "
         "{dir} holds: "),  # what the folder holds, not the hints for a standard pair folder
    ],
)  # fmt: skip
@pytest.mark.slow
def test_bad_own_config_is_an_error_naming_config_and_field(tmp_path, own_corpus, edit, message):
    _, corpus, _ = own_corpus
    work = tmp_path / "work"
    text = LOCAL_OK.replace(*edit).replace("{dir}", str(corpus))
    cfg = write_config(work, "mine", text)
    p = run_script("prepare_data.sh", "mine", env=make_env(work))
    assert p.returncode == 1, out(p)
    assert f"error: {cfg}" in p.stderr and message.replace("{dir}", str(corpus)) in p.stderr
    assert "name them so" not in p.stderr  # the config names its files: no renaming advice
    assert not (work / "data" / "raw" / "mine").exists()


@pytest.mark.parametrize(
    "text, message",
    [
        ('reverse_of = "xx-yy"\n', "key 'reverse_of' = \"xx-yy\": no configs/pairs/xx-yy.toml"),
        ('reverse_of = "gl-en"\nsrc = "de"\n', 'cannot set src = "de" tgt = "gl"'),
        ('reverse_of = "he2en"\n', "names the pair itself"),
    ],
)
@pytest.mark.slow
def test_bad_reverse_config(tmp_path, text, message):
    work = tmp_path / "work"
    write_config(work, "he2en", text)
    p = bash_lib("load_pair_config he2en", make_env(work))
    assert p.returncode == 1 and message in p.stderr, out(p)


def test_reverse_config_file_names_a_new_direction(tmp_path):
    """he-en is en->he; its reverse needs a name of its own: REVERSE_OF in a config."""
    work = tmp_path / "work"
    write_config(work, "he2en", 'reverse_of = "he-en"\n')
    p = bash_lib(
        'load_pair_config he2en; echo "$SRC $TGT $CORPUS $PAIR_REVERSE_OF"', make_env(work)
    )
    assert p.returncode == 0 and p.stdout == "he en ted he-en\n", out(p)
    # a config in the work dir must not shadow a built-in pair
    write_config(work, "gl-en", 'src = "gl"\n')
    p = bash_lib("load_pair_config gl-en", make_env(work))
    assert p.returncode == 1 and "pair gl-en is defined twice" in p.stderr


@pytest.mark.slow
def test_own_pairs_are_listed(tmp_path, own_corpus):
    _, corpus, _ = own_corpus
    work = tmp_path / "work"
    write_config(work, "mine", LOCAL_OK.replace("{dir}", str(corpus)))
    p = run_script("reproduce.sh", "--list", env=make_env(work))
    assert p.returncode == 0, out(p)
    assert re.search(r"^  mine\s+de->en\s+local\s+BPE\s+100 merges", p.stdout, flags=re.M)
    p = run_script("prepare_data.sh", "mine", "--download", env=make_env(work))
    assert p.returncode == 2 and "nothing to download" in p.stderr


@pytest.mark.slow
def test_every_pair_script_says_in_its_help_that_it_takes_own_and_reverse_pairs(tmp_path):
    """bpe.sh and binarize.sh --help listed only the configured pairs as PAIR, though every step
    takes the reverse direction of one and an own configs/pairs/PAIR.toml (prepare_data.sh said
    so): each script that takes a PAIR says it in the same words, listing the configured ones
    (the work dir's own configs among them)."""
    work = tmp_path / "work"
    write_config(work, "mine", 'reverse_of = "gl-en"\n')
    for name in ("prepare_data", "bpe", "binarize", "train", "evaluate", "ablation", "lr_sweep"):
        p = run_script(f"{name}.sh", "--help", env=make_env(work))
        assert p.returncode == 0, out(p)
        line = re.search(r"^  PAIR +(.*\n +.*)", p.stdout, flags=re.M)
        assert line, p.stdout
        assert " ".join(line.group(1).split()) == (
            "one of: ar-en en-vi gl-en he-en mine sk-en; or the reverse direction of one (e.g. "
            "en-gl); or your own configs/pairs/PAIR.toml (docs/own-data.md)"
        ), name
