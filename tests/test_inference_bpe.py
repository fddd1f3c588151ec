"""Raw-text translation with the training segmentation: fairseq ``--bpe pipeline``
(fairseq_qknorm/bpe.py) and the translate helper (qknorm_model_tools/translate.py).

The pipeline runs through the real scripts (prepare_data -> bpe -> binarize -> train ->
evaluate) on a tiny learnable corpus; fairseq-interactive, the hub interface and the helper
must reproduce evaluate.sh's hypotheses for the same checkpoint, for both BPE tools."""

import json
import random
import re
import subprocess
import sys
import unicodedata
from argparse import Namespace
from pathlib import Path

import pytest

from conftest import (
    EN_WORDS,
    FAR_BOUND,
    GL_WORDS,
    PLUGIN_DIR,
    SHARED,
    cli_env,
    make_env,
    out,
    prepare_pair,
    run_cli,
    run_script,
    tiny_model,
    write_sums,
)

TOOLS = ("subword-nmt", "sentencepiece")
# subword-nmt: 200 merges make every word of the tiny corpus one subword; a vocabulary
# threshold of 30 then reverts the merges of the rarer words (their segmentation differs
# from fairseq's codes-only --bpe subword_nmt). sentencepiece: a small joint model.
BPE_ARGS = {
    "subword-nmt": ["--merges", 200, "--vocab-threshold", 30],
    "sentencepiece": ["--tool", "sentencepiece", "--vocab-size", 60],
}
# train.sh passes these after the profile's flags (fairseq keeps the last value): with train.sh
# --lr 5e-3 (its run: seed1-lr5e-3), a tiny model that learns the word mapping in 200 updates
# (dropout 0, train.sh's fixed seed 1)
TINY_LR = ["--lr", "5e-3"]
TINY_MODEL = [
    *tiny_model(dim=32),
    "--warmup-updates",
    20,
    "--max-tokens",
    500,
]


def make_parallel_ted(data_dir: Path, sizes=(400, 30, 37), seed=0) -> Path:
    """A tiny gl-en TED pair (layout and SHA256SUMS of <shared>/data/ted-gl-en) that a model
    can learn: the English side maps the Galician one word by word; words follow a Zipf
    distribution, so some are frequent and some rare."""
    rng = random.Random(seed)
    mapping = dict(zip(GL_WORDS, EN_WORDS))
    weights = [1.0 / (rank + 1) for rank in range(len(GL_WORDS))]
    d = data_dir / "ted-gl-en"
    d.mkdir(parents=True)
    for split, n in zip(("train", "dev", "test"), sizes):
        src = [rng.choices(GL_WORDS, weights, k=rng.randint(3, 8)) for _ in range(n)]
        (d / f"{split}.gl").write_text("".join(" ".join(s) + " .\n" for s in src), encoding="utf-8")
        (d / f"{split}.en").write_text(
            "".join(" ".join(mapping[w] for w in s) + " .\n" for s in src), encoding="utf-8"
        )
    write_sums(data_dir)
    return data_dir


def translate_cli(*args, work: Path, input_text: str) -> subprocess.CompletedProcess:
    """``python -m qknorm_model_tools.translate ARGS`` with QKNORM_WORK_DIR=work."""
    env = {**cli_env(), "QKNORM_WORK_DIR": str(work)}
    return subprocess.run(
        [sys.executable, "-m", "qknorm_model_tools.translate", *map(str, args)],
        env=env,
        input=input_text,
        capture_output=True,
        text=True,
        timeout=FAR_BOUND,
    )


def read(path: Path):
    return path.read_text(encoding="utf-8").splitlines()


def build_bpe(**kwargs):
    from fairseq.data import encoders

    import fairseq_qknorm  # noqa: F401  (registers --bpe pipeline)

    return encoders.build_bpe(Namespace(**kwargs))


@pytest.fixture(scope="module", params=TOOLS)
def segmented(request, tmp_path_factory):
    """(env, work dir, tool) after prepare_data.sh, bpe.sh and binarize.sh."""
    tool = request.param
    if tool == "sentencepiece":
        pytest.importorskip("sentencepiece")
    root = tmp_path_factory.mktemp(f"infer-{tool}")
    env = make_env(
        root / "work", QKNORM_DATA_DIR=make_parallel_ted(root / "data_in"), OMP_NUM_THREADS=1
    )
    prepare_pair(env, *BPE_ARGS[tool])
    return env, root / "work", tool


@pytest.fixture(scope="module")
def evaluated(segmented):
    """... plus train.sh (tiny model) and evaluate.sh: returns (env, work, tool, run dir)."""
    env, work, tool = segmented
    p = run_script(
        "train.sh",
        "gl-en",
        "twt",
        "--max-update",
        200,
        "--threads",
        1,
        *TINY_LR,
        "--",
        *TINY_MODEL,
        env=env,
    )
    assert p.returncode == 0, out(p)
    p = run_script(
        "evaluate.sh", "gl-en", "twt", "--max-update", 200, *TINY_LR, "--threads", 1, env=env
    )
    assert p.returncode == 0, out(p)
    return env, work, tool, work / RUN


# --------------------------------------------------------------------------------------------
# the registered BPE against bpe.sh


@pytest.mark.slow
def test_manifest_and_segmentation_equal_bpe_sh(segmented):
    """bpe.json records the tool, languages and threshold; --bpe pipeline reproduces bpe.sh's
    output on every split and language, and decode inverts encode."""
    _, work, tool = segmented
    bpe_dir, raw = work / "data/bpe/gl-en", work / "data/raw/gl-en"
    manifest = json.loads((bpe_dir / "bpe.json").read_text())
    assert (manifest["tool"], manifest["src"], manifest["tgt"]) == (tool, "gl", "en")
    if tool == "subword-nmt":
        assert (manifest["merges"], manifest["vocab_threshold"]) == (200, 30)
    else:
        assert manifest["vocab_size"] == 60
    for lang in ("gl", "en"):
        bpe = build_bpe(bpe="pipeline", bpe_dir=str(bpe_dir), bpe_lang=lang)
        for split in ("train", "dev", "test"):
            lines = read(raw / f"{split}.{lang}")
            encoded = [bpe.encode(line) for line in lines]
            assert encoded == read(bpe_dir / f"{split}.{lang}"), (split, lang)
            assert [bpe.decode(e) for e in encoded] == lines
    # default language: the pair's source
    assert (
        build_bpe(bpe="pipeline", bpe_dir=str(bpe_dir)).encode(read(raw / "test.gl")[0])
        == read(bpe_dir / "test.gl")[0]
    )


def test_vocabulary_threshold_changes_segmentation(segmented):
    """The case of the issue: fairseq's own --bpe subword_nmt (codes only) segments test lines
    differently and produces <unk>s; --bpe pipeline (codes + vocabulary + threshold) does not."""
    _, work, tool = segmented
    if tool != "subword-nmt":
        pytest.skip("vocabulary threshold: subword-nmt only")
    from fairseq.data import Dictionary

    bpe_dir = work / "data/bpe/gl-en"
    lines = read(work / "data/raw/gl-en/test.gl")
    ours = [build_bpe(bpe="pipeline", bpe_dir=str(bpe_dir)).encode(x) for x in lines]
    stock = [
        build_bpe(bpe="subword_nmt", bpe_codes=str(bpe_dir / "codes")).encode(x) for x in lines
    ]
    n_diff = sum(a != b for a, b in zip(ours, stock))
    assert 0 < n_diff < len(lines)
    vocab = Dictionary.load(str(work / "data/bin/gl-en/dict.gl.txt"))

    def n_unk(segmented_lines):
        return sum(tok not in vocab.indices for x in segmented_lines for tok in x.split())

    assert n_unk(ours) == 0 and n_unk(stock) > 0


def test_bpe_dir_errors(tmp_path):
    from fairseq_qknorm.bpe import read_manifest

    with pytest.raises(FileNotFoundError, match=r"bpe\.json not found.*scripts/bpe\.sh"):
        build_bpe(bpe="pipeline", bpe_dir=str(tmp_path))
    (tmp_path / "bpe.json").write_text('{"tool": "fastbpe", "src": "gl", "tgt": "en"}')
    with pytest.raises(ValueError, match="'tool' must be one of"):
        read_manifest(tmp_path)
    (tmp_path / "bpe.json").write_text(
        '{"tool": "subword-nmt", "src": "gl", "tgt": "en", "codes": "codes",'
        ' "vocabulary": {"gl": "vocab.gl"}, "vocab_threshold": 50}'
    )
    with pytest.raises(FileNotFoundError, match="codes"):
        read_manifest(tmp_path)
    (tmp_path / "codes").write_text("#version: 0.2\na b</w>\n")  # one merge: a + final b
    (tmp_path / "vocab.gl").write_text("ab 60\nb@@ 90\n")
    with pytest.raises(ValueError, match="vocabularies for \\['gl'\\] only"):
        build_bpe(bpe="pipeline", bpe_dir=str(tmp_path), bpe_lang="en")
    # the threshold as subword-nmt apply-bpe applies it (outputs of its command line): "ab"
    # seen 60 >= 50 times keeps the merge, 40 times reverts it
    assert build_bpe(bpe="pipeline", bpe_dir=str(tmp_path)).encode("ab ba") == "ab b@@ a"
    (tmp_path / "vocab.gl").write_text("ab 40\nb@@ 90\n")
    assert build_bpe(bpe="pipeline", bpe_dir=str(tmp_path)).encode("ab ba") == "a@@ b b@@ a"


def test_generation_options():
    from qknorm_model_tools.translate import generation_options

    assert generation_options(
        ["--beam", "4", "--lenpen", "1.0", "--max-len-a", "1.5", "--max-len-b", "10"]
    ) == {"beam": 4, "lenpen": 1.0, "max_len_a": 1.5, "max_len_b": 10}
    assert generation_options(["--unnormalized"]) == {"unnormalized": True}
    assert generation_options([]) == {}
    with pytest.raises(ValueError, match="not fairseq generation options"):
        generation_options(["--max-tokens", "100"])


# --------------------------------------------------------------------------------------------
# end to end: every inference entry point equals evaluate.sh's hypotheses


# the README's commands, run in the work directory (paths relative to it, as in the README)
# a 200-update run: filed under the profile's name plus its budget (scripts/lib.sh qk_run_label)
RUN = "runs/gl-en/cpu-proxy-max-update-200/twt/seed1-lr5e-3"
README_CHECKPOINT = f"{RUN}/checkpoints/checkpoint_best.pt"
README_GENERATION = {"beam": 4, "lenpen": 1.0, "max_len_a": 1.5, "max_len_b": 10}


def interactive(work: Path, *bpe_args, input_text: str):
    """The README's fairseq-interactive command: D- lines = hypotheses with BPE removed."""
    proc = run_cli(
        [
            "fairseq-interactive",
            "data/bin/gl-en",
            "--user-dir",
            PLUGIN_DIR,
            "--source-lang",
            "gl",
            "--target-lang",
            "en",
            "--path",
            README_CHECKPOINT,
            *bpe_args,
            "--beam",
            4,
            "--lenpen",
            1.0,
            "--max-len-a",
            1.5,
            "--max-len-b",
            10,
            "--max-tokens",
            6000,
            "--buffer-size",
            1000,
        ],
        cwd=work,
        input=input_text,
    )
    found = re.findall(r"^D-(\d+)\t\S+\t(.*)$", proc.stdout, flags=re.M)
    assert [int(i) for i, _ in found] == list(range(len(found)))
    return [h for _, h in found]


@pytest.mark.slow
def test_raw_translation_equals_evaluate_sh(evaluated, monkeypatch):
    """fairseq-interactive, the hub interface and the translate helper on the raw test sentences
    give evaluate.sh's test.hyp (fairseq-generate on the binarized BPE test split, BPE removed)."""
    env, work, tool, run = evaluated
    from fairseq_qknorm.models.transformer_qknorm import TransformerQKNormModel
    from qknorm_model_tools.translate import generation_options, pipeline_settings

    monkeypatch.setenv("QKNORM_WORK_DIR", str(work))
    monkeypatch.chdir(work)
    settings = pipeline_settings("gl-en", "twt", "cpu-proxy", 1, max_update=200, lr="5e-3")
    # the README's flags are the profile's, as evaluate.sh passes them to fairseq-generate
    assert settings.checkpoint == work / README_CHECKPOINT and settings.max_tokens == 6000
    assert generation_options(settings.generate_flags) == README_GENERATION
    raw_test = work / "data/raw/gl-en/test.gl"
    expected = read(run / "test.hyp")
    assert len(expected) == 37 and len(set(expected)) > 30  # the output depends on the input

    text = raw_test.read_text(encoding="utf-8")
    assert (
        interactive(work, "--bpe", "pipeline", "--bpe-dir", "data/bpe/gl-en", input_text=text)
        == expected
    )

    hub = TransformerQKNormModel.from_pretrained(
        f"{RUN}/checkpoints",
        checkpoint_file="checkpoint_best.pt",
        data_name_or_path="data/bin/gl-en",
        bpe="pipeline",
        bpe_dir="data/bpe/gl-en",
    )
    assert hub.translate(read(raw_test), **README_GENERATION) == expected

    proc = translate_cli(
        "gl-en",
        "twt",
        "--profile",
        "cpu-proxy",
        "--max-update",
        200,
        *TINY_LR,
        work=work,
        input_text=text,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.splitlines() == expected
    # the terminal: the helper's own line, no fairseq INFO records; dependency warnings (torch's
    # deprecations during decoding) as one line, as in train.sh's terminal
    first, *rest = proc.stderr.splitlines()
    assert first == f"[translate] {work / README_CHECKPOINT}", proc.stderr
    hidden = "(Python warnings of fairseq's dependencies: not shown, --verbose shows them)"
    assert rest in ([], [hidden]), proc.stderr

    if tool == "subword-nmt":  # the comparison can fail: fairseq's codes-only BPE changes outputs
        stock = interactive(
            work, "--bpe", "subword_nmt", "--bpe-codes", "data/bpe/gl-en/codes", input_text=text
        )
        assert len(stock) == len(expected) and stock != expected


@pytest.mark.slow
def test_translate_helper_moses_input(evaluated, monkeypatch):
    """--moses: untokenized input (the corpus, Moses-detokenized) gives evaluate.sh's
    hypotheses, Moses-detokenized."""
    from sacremoses import MosesDetokenizer

    from qknorm_model_tools.translate import Translator

    env, work, tool, run = evaluated
    if tool != "subword-nmt":
        pytest.skip("the tokenizer does not depend on the BPE tool")
    monkeypatch.setenv("QKNORM_WORK_DIR", str(work))
    detok_gl, detok_en = MosesDetokenizer("gl"), MosesDetokenizer("en")
    untokenized = [detok_gl.detokenize(x.split()) for x in read(work / "data/raw/gl-en/test.gl")]
    assert untokenized[0].endswith(".") and not untokenized[0].endswith(" .")
    hyps = Translator.from_pipeline(
        "gl-en", "twt", moses=True, max_update=200, lr="5e-3"
    ).translate(untokenized)
    assert hyps == [detok_en.detokenize(h.split()) for h in read(run / "test.hyp")]


@pytest.mark.slow
def test_a_corrupt_checkpoint_is_named(evaluated, tmp_path):
    """A truncated checkpoint (a copy cut short, a full disk) is an error naming the file, from
    the Translator class and from the CLI (exit 1, an input error), not a torch traceback."""
    from qknorm_model_tools.translate import CheckpointError, Translator

    env, work, tool, run = evaluated
    if tool != "subword-nmt":
        pytest.skip("the checkpoint does not depend on the BPE tool")
    last = run / "checkpoints" / "checkpoint_last.pt"
    whole = last.read_bytes()
    cut = tmp_path / "checkpoint_best.pt"
    cut.write_bytes(whole[: len(whole) // 2])
    with pytest.raises(CheckpointError, match=f"cannot load the checkpoint {cut}: "):
        Translator(cut, work / "data/bin/gl-en", work / "data/bpe/gl-en")
    try:  # the run's own checkpoint_last.pt, cut short, then restored for the other tests
        last.write_bytes(whole[: len(whole) // 2])
        args = ("gl-en", "twt", "--max-update", 200, *TINY_LR, "--checkpoint", "last")
        proc = translate_cli(*args, work=work, input_text="o gato .\n")
    finally:
        last.write_bytes(whole)
    assert proc.returncode == 1, proc.stderr
    assert proc.stderr.splitlines()[-1].startswith(f"error: cannot load the checkpoint {last}: ")
    assert not proc.stdout


@pytest.mark.slow
def test_translate_output_file_whole_or_not_at_all(evaluated, tmp_path):
    """--output FILE holds stdout's lines; an output that cannot be written (a file where its
    directory should be) is an error naming it, exit 1, with nothing half-written."""
    env, work, tool, run = evaluated
    if tool != "subword-nmt":
        pytest.skip("writing the output does not depend on the BPE tool")
    args = (
        "gl-en",
        "twt",
        "--max-update",
        200,
        *TINY_LR,
        "--input",
        work / "data/raw/gl-en/test.gl",
    )
    good = tmp_path / "hyp.txt"
    proc = translate_cli(*args, "--output", good, work=work, input_text="")
    assert proc.returncode == 0, proc.stderr
    assert read(good) == read(run / "test.hyp") and not proc.stdout
    (tmp_path / "afile").write_text("x\n")
    bad = tmp_path / "afile" / "hyp.txt"
    proc = translate_cli(*args, "--output", bad, work=work, input_text="")
    assert proc.returncode == 1
    assert proc.stderr.splitlines()[-1].startswith(f"error: cannot write {bad}: ")
    assert (tmp_path / "afile").read_text() == "x\n"
    # stdout on a full disk: an error naming it, no traceback
    with open("/dev/full", "w") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "qknorm_model_tools.translate", *map(str, args)],
            env={**cli_env(), "QKNORM_WORK_DIR": str(work)}, stdout=full, stderr=subprocess.PIPE,
            text=True, timeout=FAR_BOUND,
        )  # fmt: skip
    assert proc.returncode == 1 and proc.stderr.splitlines()[-1] == (
        "error: cannot write the translations to stdout: No space left on device"
    ), proc.stderr
    assert "Traceback" not in proc.stderr
    # an empty input translates to nothing, and says so (a new user's `head` of a wrong path
    # left an empty file and a silent exit 0)
    proc = translate_cli("gl-en", "twt", "--max-update", 200, *TINY_LR, work=work, input_text="")
    assert (proc.returncode, proc.stdout) == (0, ""), proc.stderr
    assert "warning: stdin is empty: nothing to translate" in proc.stderr.splitlines()


@pytest.mark.slow
def test_translate_errors(tmp_path, monkeypatch):
    from qknorm_model_tools.translate import pipeline_settings

    monkeypatch.setenv("QKNORM_WORK_DIR", str(tmp_path))
    with pytest.raises(ValueError, match="unknown system 'no_such_system'"):
        pipeline_settings("gl-en", "no_such_system")
    proc = translate_cli("gl-en", "twt", "--seed", 3, work=tmp_path, input_text="")
    assert proc.returncode == 1 and "seed3/checkpoints/checkpoint_best.pt not found" in proc.stderr
    # seeds and budgets as train.sh takes them: a run directory train.sh could make
    for flag, bad in (("--seed", "-1"), ("--max-update", "01")):
        proc = translate_cli("gl-en", "twt", flag, bad, work=tmp_path, input_text="")
        assert proc.returncode == 2 and proc.stderr.splitlines()[-1] == (
            f"python -m qknorm_model_tools.translate: error: argument {flag}: {flag} must be a "
            f"non-negative integer (no leading zeros, below 10^9), got '{bad}'"
        ), proc.stderr
    # an empty --input / --output (an unset shell variable) is no file: not stdin / stdout
    for opt, std in (("--input", "stdin"), ("--output", "stdout")):
        proc = translate_cli("gl-en", "twt", opt, "", work=tmp_path, input_text="ola\n")
        assert proc.returncode == 2 and proc.stderr.splitlines()[-1] == (
            f"python -m qknorm_model_tools.translate: error: {opt} is empty: name a file, or leave "
            f"{opt} out for {std}"
        ), proc.stderr
    # a missing input is said before any model is looked for
    missing = tmp_path / "no_such.gl"
    proc = translate_cli("gl-en", "twt", "--input", missing, work=tmp_path, input_text="")
    assert (proc.returncode, proc.stderr) == (
        1,
        f"error: cannot read {missing}: No such file or directory\n",
    )
    # an output that cannot be written is said before any model is looked for (no run here:
    # the model's error would come first otherwise), and nothing is left behind
    (tmp_path / "plain").write_text("x\n")
    bad = tmp_path / "plain" / "hyp.txt"
    proc = translate_cli("gl-en", "twt", "--output", bad, work=tmp_path, input_text="ola\n")
    assert proc.returncode == 1 and proc.stderr.splitlines()[-1].startswith(
        f"error: cannot write {bad}: "
    ), proc.stderr
    assert "not found" not in proc.stderr and (tmp_path / "plain").read_text() == "x\n"
    # a model that is missing leaves an existing output as it was (no empty file)
    kept = tmp_path / "kept.txt"
    kept.write_text("earlier\n")
    proc = translate_cli("gl-en", "twt", "--output", kept, work=tmp_path, input_text="ola\n")
    assert proc.returncode == 1 and "checkpoint_best.pt not found" in proc.stderr
    assert kept.read_text() == "earlier\n" and not list(tmp_path.glob(".kept.txt*"))
    # a work dir that is a file: said as the scripts say it (scripts/lib.sh)
    afile = tmp_path / "afile"
    afile.write_text("x\n")
    proc = translate_cli("gl-en", "twt", work=afile / "sub", input_text="ola\n")
    assert (proc.returncode, proc.stderr) == (
        1,
        f"error: QKNORM_WORK_DIR={afile / 'sub'}: {afile} is not a directory (the work dir "
        "holds data/, runs/ and results/; point QKNORM_WORK_DIR at a directory)\n",
    )


# --------------------------------------------------------------------------------------------
# real data (skipped without ../shared/data)

needs_real_data = pytest.mark.skipif(
    not (SHARED / "ted-gl-en").is_dir(), reason=f"no shared data at {SHARED}"
)


@needs_real_data
@pytest.mark.slow
def test_real_gl_en_bpe_equals_apply_bpe(tmp_path):
    """Full gl-en, 3000 joint merges, vocabulary threshold 50 (bpe.sh's default): --bpe pipeline
    reproduces subword-nmt apply-bpe on every test line, fairseq's codes-only BPE does not
    (877 of 1112 gl lines differ); then the same for a sentencepiece model."""
    env = make_env(tmp_path / "work", QKNORM_DATA_DIR=SHARED, OMP_NUM_THREADS=1)
    bpe_dir, raw = tmp_path / "work/data/bpe/gl-en", tmp_path / "work/data/raw/gl-en"
    for step, args in (("prepare_data.sh", ["gl-en"]), ("bpe.sh", ["gl-en", "--merges", 3000])):
        p = run_script(step, *args, env=env)
        assert p.returncode == 0, out(p)
    assert json.loads((bpe_dir / "bpe.json").read_text())["vocab_threshold"] == 50
    for lang in ("gl", "en"):
        lines = read(raw / f"test.{lang}")
        assert len(lines) == 1112
        ours = [
            build_bpe(bpe="pipeline", bpe_dir=str(bpe_dir), bpe_lang=lang).encode(x) for x in lines
        ]
        assert ours == read(bpe_dir / f"test.{lang}")
        stock = [
            build_bpe(bpe="subword_nmt", bpe_codes=str(bpe_dir / "codes")).encode(x) for x in lines
        ]
        assert sum(a != b for a, b in zip(ours, stock)) > 500
    p = run_script("bpe.sh", "gl-en", "--tool", "sentencepiece", env=env)
    assert p.returncode == 0, out(p)
    bpe = build_bpe(bpe="pipeline", bpe_dir=str(bpe_dir))
    for lang in ("gl", "en"):
        lines = read(raw / f"test.{lang}")
        encoded = [bpe.encode(x) for x in lines]
        assert encoded == read(bpe_dir / f"test.{lang}")
        # decode gives the tokens back unchanged (bpe.sh trains with the identity normalization;
        # NFKC turned "1º" into "1o" on one gl test line); spaces come back single (23 gl lines)
        assert [bpe.decode(e).split() for e in encoded] == [x.split() for x in lines]
    # one gl test line is one NFKC would change, so the round trip above means something
    assert sum(unicodedata.normalize("NFKC", x) != x for x in read(raw / "test.gl")) == 1


@needs_real_data
def test_real_gl_en_moses_tokenizer_reproduces_corpus_tokens():
    """What the README says about untokenized text: fairseq's --tokenizer moses with the
    language and --moses-no-dash-splits (escaping on) turns the Moses-detokenized corpus back
    into its tokens (the corpus has no @-@ dash splits and keeps &apos; / &quot;)."""
    from fairseq.data import encoders
    from sacremoses import MosesDetokenizer

    for lang in ("gl", "en"):
        tok = encoders.build_tokenizer(
            Namespace(
                tokenizer="moses",
                source_lang=lang,
                target_lang=lang,
                moses_no_dash_splits=True,
                moses_no_escape=False,
            )
        )
        detok = MosesDetokenizer(lang)
        lines = read(SHARED / "ted-gl-en" / f"test.{lang}")
        assert [tok.encode(detok.detokenize(x.split())).split() for x in lines] == [
            x.split() for x in lines
        ]
    # fairseq's default (aggressive dash splits) does not
    tok = encoders.build_tokenizer(
        Namespace(
            tokenizer="moses",
            source_lang="en",
            target_lang="en",
            moses_no_dash_splits=False,
            moses_no_escape=False,
        )
    )
    assert tok.encode("a so-called test") == "a so @-@ called test"
