"""Data provenance: every run is tied to the data it trained on (raw corpus, BPE, binarized data
and dictionary); later steps refuse or redo work when the data changed, and result tables never
mix data versions."""

import json
import re
import subprocess
import sys

import pytest

from qknorm_tools import aggregate, provenance, records, tables
from qknorm_tools.provenance import DataMismatchError, ProvenanceError
from qknorm_tools.records import RunRecord

from conftest import make_data_chain, make_env, make_tiny_ted, out, run_script, sha256, tiny_model

TINY_MODEL = tiny_model(dropout=None)


# ----------------------------------------------------------------------------- the chain
def test_identity_covers_raw_bpe_and_binarized_data(tmp_path):
    data_id = make_data_chain(tmp_path / "w")
    ident = provenance.check_data(tmp_path / "w" / "data", "gl-en")
    assert ident["data_id"] == data_id and ident["bpe_tool"] == "subword-nmt"
    raw = {"train.gl": "a" * 64}
    bpe = {"bpe.json": "b" * 64}
    bin_ = {"dict.gl.txt": "c" * 64, "fairseq-preprocess.out": "d" * 64}
    base = provenance.identity_of(raw, bpe, bin_)
    # any change of a data file changes the identity; logs and markers do not
    for changed in (
        provenance.identity_of({"train.gl": "e" * 64}, bpe, bin_),
        provenance.identity_of(raw, {"bpe.json": "e" * 64}, bin_),
        provenance.identity_of(raw, bpe, {**bin_, "dict.gl.txt": "e" * 64}),
        provenance.identity_of(raw, bpe, {**bin_, "train.gl-en.gl.bin": "e" * 64}),
    ):
        assert changed["data_id"] != base["data_id"]
    same = provenance.identity_of(raw, bpe, {**bin_, "fairseq-preprocess.out": "f" * 64})
    assert same == base


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: (d / "bin/gl-en/dict.gl.txt").write_text("changed\n"),
         "dict.gl.txt was modified after it was made"),
        (lambda d: (d / "bin/gl-en/identity.json").unlink(),
         "identity.json (listed in"),
        (lambda d: (d / "raw/gl-en/train.gl").write_text("changed\n"),
         "rerun scripts/prepare_data.sh gl-en"),
        (lambda d: (d / "bpe/gl-en/.settings").write_text("raw=0\n"),
         "was made from other raw data than the current"),
        (lambda d: (d / "bin/gl-en/.settings").write_text("bpe=0\n"),
         "was binarized from another"),
    ],
)  # fmt: skip
def test_a_broken_chain_names_the_step_to_rerun(tmp_path, damage, message):
    make_data_chain(tmp_path / "w")
    damage(tmp_path / "w" / "data")
    with pytest.raises(ProvenanceError, match=re.escape(message)):
        provenance.check_data(tmp_path / "w" / "data", "gl-en")


def _raw_prepared_again(work, text="raw train.gl, new\n"):
    """The raw data of a make_data_chain prepared again (scripts/prepare_data.sh rerun on a
    changed corpus): train.gl changed, its marker rewritten, the BPE data left as they were;
    the BPE step keeps the raw marker it read (.raw.done, as scripts/bpe.sh)."""
    raw, bpe = work / "data/raw/gl-en", work / "data/bpe/gl-en"
    (bpe / ".raw.done").write_bytes((raw / ".done").read_bytes())
    (raw / "train.gl").write_text(text, encoding="utf-8")
    (raw / ".done").write_text(f"{sha256(raw / 'train.gl')}  train.gl\n", encoding="utf-8")


def test_stale_bpe_names_the_raw_files_that_changed(tmp_path, capsys):
    """The BPE data made from other raw data than the current ones: the chain rule says which raw
    files changed since scripts/bpe.sh ran (from its .raw.done), and without that record (BPE
    data made before it was kept) what it said before."""
    work = tmp_path / "w"
    make_data_chain(work)
    _raw_prepared_again(work)
    data, bpe = work / "data", work / "data/bpe/gl-en"
    stale = (
        f"{bpe} was made from other raw data than the current {data / 'raw/gl-en'}"
        " (train.gl changed since scripts/bpe.sh ran): rerun scripts/bpe.sh gl-en, then "
        "scripts/binarize.sh gl-en"
    )
    with pytest.raises(ProvenanceError) as err:
        provenance.check_data(data, "gl-en")
    assert str(err.value) == stale
    # the same rule for the BPE step alone (scripts/binarize.sh, before it binarizes)
    assert provenance.main(["check-bpe", "--pair", "gl-en", "--data", str(data)]) == 1
    assert capsys.readouterr().err == f"error: {stale}\n"
    (bpe / ".raw.done").unlink()
    with pytest.raises(ProvenanceError) as err:
        provenance.check_data(data, "gl-en")
    assert str(err.value) == stale.replace(" (train.gl changed since scripts/bpe.sh ran)", "")


@pytest.mark.slow
def test_binarize_refuses_bpe_data_of_other_raw_data(tmp_path):
    """binarize.sh said "skip: already binarized from the current BPE data" (exit 0) when the raw
    data had changed since scripts/bpe.sh ran (and with --force binarized, then failed): it now
    refuses first, exit 1, with the chain rule's message naming the raw file and bpe.sh."""
    work = tmp_path / "w"
    make_data_chain(work)
    _raw_prepared_again(work)
    bin_dir = work / "data/bin/gl-en"
    before = {f.name: f.read_bytes() for f in bin_dir.iterdir()}
    for force in ([], ["--force"]):
        p = run_script("binarize.sh", "gl-en", *force, env=make_env(work))
        assert p.returncode == 1, out(p)
        assert p.stderr.splitlines() == [
            f"error: {work / 'data/bpe/gl-en'} was made from other raw data than the current "
            f"{work / 'data/raw/gl-en'} (train.gl changed since scripts/bpe.sh ran): rerun "
            "scripts/bpe.sh gl-en, then scripts/binarize.sh gl-en",
            "error: the data of gl-en are not consistent (above); nothing was binarized",
        ]
        assert p.stdout == ""
        assert {f.name: f.read_bytes() for f in bin_dir.iterdir()} == before


def test_run_identity_recorded_then_checked(tmp_path, capsys):
    make_data_chain(tmp_path / "w")
    ident = provenance.check_data(tmp_path / "w" / "data", "gl-en")
    run = tmp_path / "run"
    assert provenance.check_run(run, ident, record=True) == ident["data_id"]
    assert json.loads((run / "data_identity.json").read_text()) == ident
    assert provenance.check_run(run, ident) == ident["data_id"]
    other = {
        "data_id": "f" * 64,
        "pair": "gl-en",
        "components": {**ident["components"], "bpe": "0" * 64},
    }
    with pytest.raises(DataMismatchError) as e:
        provenance.check_run(run, other)
    msg = str(e.value)
    assert ident["data_id"][:12] in msg and "ffffffffffff" in msg
    assert "they differ in: BPE segmentation)" in msg
    # a run from before data identities: a warning, never silently adopted when finished
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "train.json").write_text("{}")
    assert provenance.check_run(legacy, ident, record=True) is None
    assert "which data it was trained on cannot be verified" in capsys.readouterr().err
    assert not (legacy / "data_identity.json").exists()
    # the CLI's check --run (scripts/evaluate.sh): the data and the run in one process
    data = str(tmp_path / "w" / "data")
    assert provenance.main(["check", "--pair", "gl-en", "--data", data, "--run", str(run)]) == 0
    assert capsys.readouterr().out == ident["data_id"] + "\n"
    (run / "data_identity.json").write_text(json.dumps(other))
    assert provenance.main(["check", "--pair", "gl-en", "--data", data, "--run", str(run)]) == 1
    io = capsys.readouterr()
    assert io.out == "" and "was trained on data ffffffffffff" in io.err


# ----------------------------------------------------------------------------- records, tables
def _record(pair, system, seed, data_id):
    scores = {"bleu_tok": 10.0 + seed, "bleu": 9.0, "chrf": 30.0}
    run_dir = f"runs/{system}/{seed}"
    return RunRecord(
        pair=pair, system=system, seed=seed, data_id=data_id, run_dir=run_dir, **scores
    )


def test_tables_refuse_to_mix_data_versions(tmp_path, capsys):
    a, b = "a" * 64, "b" * 64
    mixed = [_record("gl-en", "twt", 1, a), _record("gl-en", "qk", 1, b)]
    expected = (
        "runs of gl-en were trained on different data (aaaaaaaaaaaa: runs/twt/1; bbbbbbbbbbbb"
    )
    with pytest.raises(DataMismatchError, match=re.escape(expected)):
        aggregate.aggregate_results(mixed, "twt", significance=False)
    # one data version per pair: each pair's identity is in the tables
    ok = [_record("gl-en", "twt", 1, a), _record("gl-en", "qk", 1, a),
          _record("en-vi", "twt", 1, b), _record("en-vi", "qk", 1, b)]  # fmt: skip
    agg = aggregate.aggregate_results(ok, "twt", significance=False)
    assert agg["pairs"]["gl-en"]["data_id"] == a and agg["pairs"]["en-vi"]["data_id"] == b
    paths = tables.write_aggregate_tables(agg, tmp_path)
    csv = (tmp_path / "aggregate.csv").read_text().splitlines()
    assert csv[0].endswith(",data_id") and all(line.endswith(a) for line in csv[1:3])
    assert "| aaaaaaaaaaaa |" in (tmp_path / "aggregate.md").read_text() and paths
    table = tables.runs_table(ok[:2], "twt")
    assert "| data |" in table and table.count("| aaaaaaaaaaaa |") == 2
    # a record from before identities next to a known one: reported, with a warning
    provenance.check_one_data_version(
        [_record("gl-en", "twt", 1, a), _record("gl-en", "qk", 1, None)]
    )
    assert "run(s) without a data identity" in capsys.readouterr().err


def test_a_score_made_on_other_data_than_the_run_is_refused(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text("")
    (run / "train.json").write_text(
        json.dumps({"pair": "gl-en", "system": "twt", "seed": 1, "data_id": "a" * 64})
    )
    (run / "test.hyp").write_text("x\n")
    (run / "test.score.json").write_text(json.dumps({"bleu_tok": 1.0, "data_id": "b" * 64}))
    with pytest.raises(records.ResultsError, match="was scored on data bbbbbbbbbbbb, but the run "
                                                   "was trained on data aaaaaaaaaaaa"):  # fmt: skip
        records.read_run(run)


# ----------------------------------------------------------------------------- the issue, for real
def _collect(env, work, *runs):
    args = [sys.executable, "-m", "qknorm_tools.collect", "runs", "--work-dir", work,
            "--out-dir", work / "results", *sum((["--run", r] for r in runs), [])]  # fmt: skip
    return subprocess.run(list(map(str, args)), env=env, capture_output=True, text=True)


@pytest.mark.slow
def test_runs_and_scores_are_never_reused_on_changed_data(tmp_path):
    """The issue: BPE 60 merges -> binarize -> train -> evaluate; BPE 55 merges -> binarize:
    train.sh said the run was finished and evaluate.sh that the score was up to date, and
    evaluate.sh --force decoded with the mismatched dictionary. Now every later step refuses
    (naming both identities), --force retrains, and results never mix the two data versions."""
    make_tiny_ted(tmp_path / "data_in")
    work = tmp_path / "work"
    env = make_env(work, QKNORM_DATA_DIR=tmp_path / "data_in", OMP_NUM_THREADS=1)

    def step(name, *args, ok=True):
        p = run_script(name, *args, env=env)
        assert (p.returncode == 0) == ok, out(p)
        return p

    def ident():
        return json.loads((work / "data/bin/gl-en/identity.json").read_text())["data_id"]

    step("prepare_data.sh", "gl-en")
    step("bpe.sh", "gl-en", "--merges", 60)
    step("binarize.sh", "gl-en")
    first = ident()
    cell = ["gl-en", "twt", "--max-update", 3, "--threads", 1]
    runs = {s: work / f"runs/gl-en/cpu-proxy-max-update-3/twt/seed{s}" for s in (1, 2)}
    for s in (1, 2):
        step("train.sh", *cell, "--seed", s, "--", *TINY_MODEL)
        step("evaluate.sh", *cell, "--seed", s)
        assert json.loads((runs[s] / "train.json").read_text())["data_id"] == first
        assert json.loads((runs[s] / "test.score.json").read_text())["data_id"] == first
    hyp = (runs[1] / "test.hyp").read_bytes()

    step("bpe.sh", "gl-en", "--merges", 55)
    # BPE redone, binarized data not: nothing trains or evaluates on the stale pair
    p = step("train.sh", *cell, "--seed", 1, "--", *TINY_MODEL, ok=False)
    assert "was binarized from another" in out(p) and "rerun scripts/binarize.sh gl-en" in out(p)
    step("binarize.sh", "gl-en")
    second = ident()
    assert second != first

    p = step("train.sh", *cell, "--seed", 1, "--", *TINY_MODEL, ok=False)
    assert f"was trained on data {first[:12]}" in out(p) and f"are {second[:12]}" in out(p)
    assert "--seed 1 --max-update 3 --precision fp32 --force" in out(p) and "skip" not in out(p)
    for force in ([], ["--force"]):
        p = step("evaluate.sh", *cell, "--seed", 1, *force, ok=False)
        assert f"was trained on data {first[:12]}" in out(p)
        assert "never decoded with another dictionary" in out(p)
    assert (runs[1] / "test.hyp").read_bytes() == hyp  # nothing decoded with the new data
    # a resumable run (checkpoint_last.pt, no train.json) on the old data is refused as well
    (runs[2] / "train.json").unlink()
    p = step("train.sh", *cell, "--seed", 2, "--", *TINY_MODEL, ok=False)
    assert f"was trained on data {first[:12]}" in out(p)

    # retraining on the current data, then the score follows the data
    step("train.sh", *cell, "--seed", 1, "--force", "--", *TINY_MODEL)
    step("evaluate.sh", *cell, "--seed", 1)
    assert json.loads((runs[1] / "data_identity.json").read_text())["data_id"] == second
    assert json.loads((runs[1] / "test.score.json").read_text())["data_id"] == second
    p = step("evaluate.sh", *cell, "--seed", 1)
    assert f"up to date (data {second[:12]})" in p.stderr

    # a table of seed 1 (new data) and seed 2 (old data) is refused; seed 1 alone carries its id
    (runs[2] / "train.json").write_text(
        json.dumps({"pair": "gl-en", "system": "twt", "seed": 2, "profile": "x", "data_id": first})
    )
    p = _collect(env, work, runs[1], runs[2])
    # (refused where collect merges runs and committed records, naming both runs)
    assert p.returncode == 1 and "made on other data; a table never mixes them" in p.stderr
    assert str(runs[1]) in p.stderr and str(runs[2]) in p.stderr
    p = _collect(env, work, runs[1])
    assert p.returncode == 0, p.stderr
    doc = json.loads((work / "results/runs.json").read_text())
    assert doc["runs"][0]["data_id"] == second
    # the identity covers the raw corpus, the BPE and the binarized data files
    stored = json.loads((work / "data/bin/gl-en/identity.json").read_text())
    assert set(stored["components"]) == {"raw", "bpe", "bin"}
    assert (
        sha256(work / "data/bin/gl-en/identity.json") in (work / "data/bin/gl-en/.done").read_text()
    )
