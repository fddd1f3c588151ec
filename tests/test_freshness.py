"""Made-by records (qknorm_tools.freshness): an output is reused only if what made it is unchanged.

Issue 21 item 3: evaluate.sh reused ``test.score.json`` when it was newer than the checkpoint and
on the same data, so after a profile's beam, length penalty or length cap changed, old scores were
reported as new. Now every setting is compared and the log names the one that changed.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from qknorm_tools import freshness as fr

from conftest import (
    REPO,
    count_python_starts,
    make_env,
    make_tiny_ted,
    out,
    prepare_pair,
    run_script,
    run_without_torch,
    tiny_model,
)


def test_changes_names_every_changed_new_and_gone_setting():
    stored = {"beam": "4", "lenpen": "1.0", "max-len-b": "10", "seed": "1"}
    current = {"beam": "5", "lenpen": "1.0", "max-len-b": "10", "max-tokens": "6000"}
    assert fr.changes(stored, current) == [
        "beam 4 -> 5",
        "max-tokens (none) -> 6000",
        "seed 1 -> (none)",
    ]
    assert fr.changes(dict(current), current) == []
    assert fr.changes(None, current) == ["no record of what made it"]


def test_generate_settings_fill_fairseqs_defaults_and_drop_what_changes_nothing():
    argv = ["/w/data/bin/gl-en", "--user-dir", "/repo/fairseq_qknorm", "--beam", "4",
            "--max-len-a", "1.5", "--path", "/w/ckpt.pt", "--num-workers", "0", "--quiet",
            "--lenpen=0.6"]  # fmt: skip
    assert fr.generate_settings(argv) == {
        "data_dir": "/w/data/bin/gl-en",
        "beam": "4",
        "lenpen": "0.6",
        "max-len-a": "1.5",
        "max-len-b": "200",  # fairseq's default, written out
        "path": "/w/ckpt.pt",
        "quiet": "true",
    }
    # a profile that writes out fairseq's default length cap decodes nothing again
    a = fr.generate_settings(["d", "--beam", "4"])
    b = fr.generate_settings(["d", "--beam", "4", "--max-len-a", "0", "--max-len-b", "200"])
    assert fr.changes(a, b) == []
    with pytest.raises(ValueError, match="argument '5' is not a --flag or its value"):
        fr.generate_settings(["d", "--beam", "4", "5"])


def test_records_round_trip_and_settings_lines(tmp_path):
    rec = {"beam": "4", "checkpoint": fr.file_identity(__file__)}
    fr.write_record(tmp_path / "x.made_by.json", rec)
    assert fr.read_record(tmp_path / "x.made_by.json") == rec
    assert not (tmp_path / "x.made_by.json.tmp").exists()
    assert fr.read_record(tmp_path / "none.json") is None
    (tmp_path / ".settings").write_text("pair=gl-en\nmerges=60\nraw=ab=c\n")
    assert fr.read_record(tmp_path / ".settings") == {
        "pair": "gl-en",
        "merges": "60",
        "raw": "ab=c",
    }
    (tmp_path / ".settings").write_text("pair=gl-en\nmerges 60\n")
    with pytest.raises(ValueError, match=r"\.settings:2: expected key=value, got 'merges 60'"):
        fr.read_record(tmp_path / ".settings")
    (tmp_path / "bad.json").write_text('{"bleu": 3}')
    with pytest.raises(ValueError, match="bad.json is not a made-by record"):
        fr.read_record(tmp_path / "bad.json")


def test_file_identity_changes_when_the_file_is_written_again(tmp_path):
    f = tmp_path / "checkpoint_best.pt"
    f.write_bytes(b"one")
    first = fr.file_identity(f)
    assert first == f"{f} size=3 mtime_ns={f.stat().st_mtime_ns}"
    os.utime(f, ns=(f.stat().st_atime_ns, f.stat().st_mtime_ns + 1_000_000))
    assert fr.file_identity(f) != first
    with pytest.raises(FileNotFoundError):
        fr.file_identity(tmp_path / "missing.pt")


def test_scorer_settings_are_the_signatures_stored_with_a_score():
    from qknorm_tools.scoring import score_lines

    sigs = score_lines(["a b c d ."], ["a b x d ."], src_lang="gl", tgt_lang="en")["signatures"]
    made_by = fr.scorer_settings("gl", "en")
    assert made_by["scorer_signature"] == " | ".join(f"{k}: {v}" for k, v in sigs.items())
    assert "nrefs:1|" in sigs["bleu_tok"] and "tok:none|" in sigs["bleu_tok"]
    assert fr.scorer_settings("gl", "vi") != made_by  # the detokenizer's language


def test_cli_check_and_write_without_torch(tmp_path):
    rec = tmp_path / "test.made_by.json"
    gen = ["--generate", "bin", "--beam", "4", "--max-len-b", "10"]
    p = run_without_torch("qknorm_tools.freshness", "check", rec, "--set", "split=test", *gen)
    assert (p.returncode, p.stdout) == (3, "no record of what made it\n"), p.stderr
    p = run_without_torch("qknorm_tools.freshness", "write", rec, "--set", "split=test",
                          "--scorer", "gl", "en", *gen)  # fmt: skip
    assert p.returncode == 0, p.stderr
    made_by = json.loads(rec.read_text())["made_by"]
    assert made_by["scorer"].startswith("sacrebleu 2.") and "sacremoses" in made_by["scorer"]
    assert "bleu_tok: BLEU on tokenized text as is" in made_by["scorer_signature"]
    assert "|lang:gl-en|" in made_by["scorer_signature"]
    p = run_without_torch("qknorm_tools.freshness", "check", rec, "--set", "split=test",
                          "--scorer", "gl", "en", "--generate", "bin", "--beam", "5",
                          "--max-len-b", "10")  # fmt: skip
    assert (p.returncode, p.stdout) == (3, "beam 4 -> 5\n"), p.stderr
    (tmp_path / "junk.json").write_text("[]")
    p = run_without_torch("qknorm_tools.freshness", "check", tmp_path / "junk.json")
    assert p.returncode == 1 and "junk.json is not a made-by record" in p.stderr


@pytest.mark.slow
def test_a_profiles_beam_change_makes_evaluate_decode_again_and_bpe_says_why(tmp_path):
    """Train a tiny run, evaluate, then change the profile's beam, then its length cap: each
    decodes again and the log says which setting changed; nothing changed: the score is
    reused (two decodes more; the other settings: the tests above). train.sh and evaluate.sh
    each start Python twice, their one Python process and the progress display (issue 36)."""
    # a copy of the repository's scripts and configs whose profile the test may edit
    repo = tmp_path / "repo"
    shutil.copytree(REPO / "scripts", repo / "scripts")
    shutil.copytree(REPO / "configs", repo / "configs")
    (repo / "fairseq_qknorm").symlink_to(REPO / "fairseq_qknorm")
    make_tiny_ted(tmp_path / "data_in")
    work = tmp_path / "work"
    env = make_env(work, QKNORM_DATA_DIR=tmp_path / "data_in", QKNORM_PYTHON=sys.executable,
                   PYTHONPATH=str(REPO), OMP_NUM_THREADS=1)  # fmt: skip
    prepare_pair(env, "--merges", 60)
    cell = ["gl-en", "twt", "--max-update", "3", "--threads", "1"]
    starts = count_python_starts(env, tmp_path, sys.executable)

    def started():
        """The modules started since the last call (python -m MODULE)."""
        modules = starts.read_text().split() if starts.exists() else []
        starts.unlink(missing_ok=True)
        return modules

    def step(name, *args):
        p = subprocess.run(["bash", repo / "scripts" / name, *cell, *args], env=env,
                           capture_output=True, text=True, timeout=600)  # fmt: skip
        assert p.returncode == 0, out(p)
        return p.stderr

    step("train.sh", "--", *tiny_model())
    assert started() == ["qknorm_tools.serve", "qknorm_tools.progress"]
    run = work / "runs/gl-en/cpu-proxy-max-update-3/twt/seed1"
    assert "decoding gl-en test" in step("evaluate.sh")
    assert started() == ["qknorm_tools.serve", "qknorm_tools.progress"]
    made_by = json.loads((run / "test.made_by.json").read_text())["made_by"]
    assert made_by["beam"] == "4" and made_by["max-len-b"] == "10"
    assert made_by["checkpoint_choice"] == "best" and made_by["remove_bpe"] == "subword_nmt"
    assert made_by["checkpoint"].startswith(f"{run}/checkpoints/checkpoint_best.pt size=")
    assert "is up to date" in step("evaluate.sh")  # nothing changed: reused
    assert started() == ["qknorm_tools.serve"]

    profile = repo / "configs/profiles/cpu-proxy.toml"
    text = profile.read_text()
    assert "\nbeam = 4\n" in text and '"--max-len-b", "10"]' in text
    profile.write_text(text.replace("\nbeam = 4\n", "\nbeam = 2\n"))
    log = step("evaluate.sh")
    assert "decoding again: " in log and "made with other settings: beam 4 -> 2\n" in log, log
    assert "decoding gl-en test" in log and "(beam 2," in log
    made_by = json.loads((run / "test.made_by.json").read_text())["made_by"]
    assert made_by["beam"] == "2" and made_by["max-len-b"] == "10"
    # the length cap (and the beam back): both named, in the record's order
    profile.write_text(text.replace('"--max-len-b", "10"]', '"--max-len-b", "12"]'))
    log = step("evaluate.sh")
    assert "made with other settings: beam 2 -> 4; max-len-b 10 -> 12\n" in log, log
    assert "is up to date" in step("evaluate.sh")
    # a forced decode that fails (here a truncated checkpoint) replaces nothing: the earlier
    # outputs keep their record and are reused once the checkpoint is back
    ckpt = run / "checkpoints/checkpoint_best.pt"
    kept = ckpt.with_name("kept.pt")
    ckpt.rename(kept)
    ckpt.write_bytes(kept.read_bytes()[:1000])
    p = subprocess.run(["bash", repo / "scripts/evaluate.sh", *cell, "--force"], env=env,
                       capture_output=True, text=True, timeout=600)  # fmt: skip
    assert p.returncode == 1 and f"{ckpt} is truncated or not a checkpoint" in p.stderr, out(p)
    assert (run / "test.made_by.json").is_file() and not (run / "test.gen.out.tmp").exists()
    kept.replace(ckpt)
    assert "is up to date" in step("evaluate.sh")
    # (a checkpoint written again, a score without a record: the tests above)

    # the data steps' rule is the same one: BPE and binarized data say what changed
    p = run_script("bpe.sh", "gl-en", "--merges", 55, env=env, timeout=600)
    assert p.returncode == 0, out(p)
    assert "made with other settings or inputs: merges 60 -> 55\n" in p.stderr, out(p)
    old_bpe = fr.read_record(work / "data/bin/gl-en/.settings")["bpe"]
    p = run_script("binarize.sh", "gl-en", env=env, timeout=600)
    assert p.returncode == 0, out(p)
    new_bpe = fr.read_record(work / "data/bin/gl-en/.settings")["bpe"]
    assert f"made with other settings or inputs: bpe {old_bpe} -> {new_bpe}\n" in p.stderr
    p = run_script("binarize.sh", "gl-en", env=env, timeout=600)
    assert p.returncode == 0 and p.stdout.startswith("skip: "), out(p)


def test_decode_record_names_a_rewritten_checkpoint_and_each_setting(tmp_path):
    """What evaluate.sh records of a decode (qknorm_tools.freshness.decode_record)."""
    ckpt = tmp_path / "checkpoint_best.pt"
    ckpt.write_bytes(b"weights")
    gen = ["bin", "--path", str(ckpt), "--beam", "4", "--lenpen", "1.0", "--max-len-a", "1.5",
           "--max-len-b", "10", "--user-dir", "/repo/fairseq_qknorm"]  # fmt: skip
    extra = {
        "checkpoint_choice": "best",
        "split": "test",
        "remove_bpe": "subword_nmt",
        "data_id": "d1",
    }
    first = fr.decode_record(ckpt, gen, extra)
    assert first == {"checkpoint": fr.file_identity(ckpt), "data_dir": "bin", "beam": "4",
                     "lenpen": "1.0", "max-len-a": "1.5", "max-len-b": "10", **extra}  # fmt: skip
    # fairseq saves a new best: another checkpoint, same path
    ckpt.write_bytes(b"new weights")
    again = fr.decode_record(ckpt, gen, extra)
    assert fr.changes(first, again) == [
        f"checkpoint {first['checkpoint']} -> {again['checkpoint']}"
    ]
    other = fr.decode_record(
        ckpt, [*gen, "--lenpen", "0.6"], {**extra, "remove_bpe": "sentencepiece"}
    )
    assert fr.changes(again, other) == [
        "lenpen 1.0 -> 0.6",
        "remove_bpe subword_nmt -> sentencepiece",
    ]
