"""qknorm_tools.textio: fairseq-generate failures explained from the real errors, and an output
the tools cannot write: the error names the output's
own path (never its temporary ``.tmp``/``.partial`` sibling, never ``-``), the exit status is 1
(an output error; 2 is for usage and input errors), and an existing output is left intact.

A full disk is simulated with a file-size limit (``RLIMIT_FSIZE``, which binds root too): the
write fails part way, as on a full disk, with an ``OSError`` that names no file.
"""

from __future__ import annotations

import io
import json
import resource
import signal
import subprocess
import sys

import pytest
from test_collect import _finished_run

from qknorm_tools.textio import explain_generate_failure

from conftest import FAR_BOUND, REPO, cli_env, out

OLD = "the earlier output, which must survive a failed write\n" * 4


def _limit_file_size(limit: int):
    def apply():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # a write past the limit: EFBIG, no signal
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def _tool(module, *args, limit=None):
    env = cli_env()
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    return subprocess.run(
        [sys.executable, "-m", module, *map(str, args)], cwd=REPO, env=env, capture_output=True,
        text=True, timeout=FAR_BOUND, preexec_fn=_limit_file_size(limit) if limit else None,
    )  # fmt: skip


def _assert_output_error(p, path, reason, kept):
    assert p.returncode == 1, out(p)
    tail = f"; the existing {path} is left as it was" if kept else ""
    assert p.stderr.splitlines()[-1] == f"error: cannot write {path}: {reason}{tail}", out(p)
    assert ".tmp" not in p.stderr and ".partial" not in p.stderr and "error: -" not in p.stderr


def _no_siblings(directory, keep):
    assert sorted(x.name for x in directory.iterdir()) == sorted(keep)


@pytest.fixture
def texts(tmp_path):
    ref = tmp_path / "ref"
    ref.write_text("a b c\nd e f\n")
    return ref


def _compare(ref, dest, limit=None):
    return _tool(
        "qknorm_tools.evaluate", "compare", "--ref", ref, "--baseline", ref, "--system", ref,
        "--allow-few-lines", "--n-bootstrap", "5", "--n-ar", "5", "--json", "--out", dest,
        limit=limit,
    )  # fmt: skip


@pytest.mark.slow
def test_compare_on_a_full_disk_keeps_the_existing_output(tmp_path, texts):
    res = tmp_path / "res"
    res.mkdir()
    dest = res / "cmp.json"
    dest.write_text(OLD)
    p = _compare(texts, dest, limit=64)  # its JSON is ~1 KB: cut short on the way
    _assert_output_error(p, dest, "File too large", kept=True)
    assert dest.read_text() == OLD
    _no_siblings(res, ["cmp.json"])
    p = _compare(texts, dest)  # without the limit: written whole
    assert p.returncode == 0, out(p)
    assert json.loads(dest.read_text())["n_lines"] == 2


def test_compare_into_dev_full_names_it(texts):
    p = _compare(texts, "/dev/full")
    _assert_output_error(p, "/dev/full", "No space left on device", kept=False)


def test_compare_output_that_is_a_directory(tmp_path, texts):
    dest = tmp_path / "cmp.json"
    dest.mkdir()
    p = _compare(texts, dest)
    _assert_output_error(p, dest, "Is a directory", kept=True)
    _no_siblings(tmp_path, ["cmp.json", "ref"])


@pytest.mark.slow
def test_collect_on_a_full_disk_keeps_runs_json(tmp_path):
    res = tmp_path / "results"
    res.mkdir()
    (res / "runs.json").write_text(OLD)
    run = _finished_run(tmp_path)  # no finished run writes nothing (the earlier file is kept)
    args = ("runs", "--run", run, "--work-dir", tmp_path, "--out-dir", res)
    p = _tool("qknorm_tools.collect", *args, limit=8)
    _assert_output_error(p, res / "runs.json", "File too large", kept=True)
    assert (res / "runs.json").read_text() == OLD
    _no_siblings(res, ["runs.json"])
    (res / "runs.json").unlink()
    (res / "runs.json").mkdir()  # a directory in the way: the error names runs.json, not .tmp
    p = _tool("qknorm_tools.collect", *args)
    _assert_output_error(p, res / "runs.json", "Is a directory", kept=True)
    _no_siblings(res, ["runs.json"])


def test_collect_under_a_file_names_the_output(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    run = _finished_run(tmp_path)
    args = ("runs", "--run", run, "--work-dir", tmp_path, "--out-dir", blocker)
    p = _tool("qknorm_tools.collect", *args)
    _assert_output_error(
        p, blocker / "runs.json", f"cannot make its directory ({blocker}: File exists)", False
    )


@pytest.mark.slow
def test_extract_on_a_full_disk_keeps_the_hypotheses(tmp_path):
    gen = tmp_path / "gen.out"
    gen.write_text("".join(f"H-{i}\t-0.5\tword{i} long@@ er text\n" for i in range(20)))
    hyp = tmp_path / "test.hyp"
    hyp.write_text(OLD)
    args = ("extract", "--generate-output", gen, "--output", hyp)
    p = _tool("qknorm_tools.evaluate", *args, limit=64)
    _assert_output_error(p, hyp, "File too large", kept=True)
    assert hyp.read_text() == OLD
    p = _tool("qknorm_tools.evaluate", *args)
    assert p.returncode == 0, out(p)
    assert hyp.read_text().splitlines()[:2] == ["word0 longer text", "word1 longer text"]


def test_atomic_output_passes_the_bodys_input_errors_and_replaces_directories(tmp_path):
    from qknorm_tools.textio import OutputError, atomic_output, write_text_atomic

    missing = tmp_path / "missing-input"
    with pytest.raises(FileNotFoundError) as e:  # an input the body reads: its own error
        with atomic_output(tmp_path / "out.txt") as tmp:
            tmp.write_text(missing.read_text())
    assert e.value.filename == str(missing)
    assert sorted(x.name for x in tmp_path.iterdir()) == []
    dest = tmp_path / "rec"
    for text in ("one", "two"):  # a directory replaced whole
        with atomic_output(dest, directory=True) as tmp:
            (tmp / "a").write_text(text)
    assert [(x.name, x.read_text()) for x in dest.iterdir()] == [("a", "two")]
    assert sorted(x.name for x in tmp_path.iterdir()) == ["rec"]
    link = tmp_path / "link.txt"  # a symlink is followed: the target replaced, the link kept
    (tmp_path / "target.txt").write_text("old")
    link.symlink_to("target.txt")
    write_text_atomic(link, "new")
    assert link.is_symlink() and (tmp_path / "target.txt").read_text() == "new"
    with pytest.raises(OutputError) as e:
        write_text_atomic(dest, "x")
    assert str(e.value) == (
        f"cannot write {dest}: Is a directory; the existing {dest} is left as it was"
    )


@pytest.mark.slow
def test_the_other_tools_name_their_output_and_exit_1(tmp_path):
    """freshness write, plots and committed records: the same output errors (one helper,
    textio.atomic_output)."""
    rec = tmp_path / "made_by.json"
    rec.write_text(OLD)
    p = _tool("qknorm_tools.freshness", "write", rec, "--set", "k=" + "v" * 200, limit=64)
    _assert_output_error(p, rec, "File too large", kept=True)
    assert rec.read_text() == OLD
    p = _tool("qknorm_tools.freshness", "write", rec, "--set", "k=v")
    assert p.returncode == 0 and json.loads(rec.read_text()) == {"made_by": {"k": "v"}}, out(p)
    log = tmp_path / "train.log"
    log.write_text(
        "".join(
            f"2026-01-01 00:00:0{i} | INFO | train_inner | epoch 001:      {i} / 10 "
            f"loss={9 - i}.0, num_updates={i}\n"
            for i in (1, 2)
        )
    )
    blocker = tmp_path / "file"
    blocker.write_text("")
    p = _tool("qknorm_tools.plots", "curves", "--log", f"a={log}", "--out", blocker / "c.png")
    _assert_output_error(
        p, blocker / "c.png", f"cannot make its directory ({blocker}: File exists)", False
    )
    p = _tool("qknorm_tools.plots", "curves", "--log", f"a={log}", "--out", tmp_path / "c.png")
    assert p.returncode == 0 and (tmp_path / "c.png").read_bytes()[:4] == b"\x89PNG", out(p)
    (tmp_path / "c.png").unlink()
    _no_siblings(tmp_path, ["file", "made_by.json", "train.log"])


@pytest.mark.parametrize("which", ["--ref", "--baseline", "--system"])
@pytest.mark.slow
def test_compare_refuses_to_write_over_one_of_its_inputs(tmp_path, which):
    """--out naming an input file (a new-user trial overwrote a hypothesis file with the table):
    a usage error naming both, and every input left as it was."""
    files = {}
    for flag in ("--ref", "--baseline", "--system"):
        files[flag] = tmp_path / flag.strip("-")
        files[flag].write_text("a b c\nd e f\n")
    link = tmp_path / "same-file"  # the same file under another name is the same file
    link.symlink_to(files[which])
    p = _tool(
        "qknorm_tools.evaluate", "compare", *(x for f, v in files.items() for x in (f, v)),
        "--allow-few-lines", "--n-bootstrap", "5", "--n-ar", "5", "--out", link,
    )  # fmt: skip
    assert p.returncode == 2, out(p)
    assert f"--out {link} is the {which} file {files[which]}: it would be overwritten" in p.stderr
    assert all(f.read_text() == "a b c\nd e f\n" for f in files.values())


def test_an_output_error_exits_1(tmp_path):
    ref = tmp_path / "ref"
    ref.write_text("a b\n")
    blocker = tmp_path / "file"
    blocker.write_text("")
    p = subprocess.run(
        [sys.executable, "-m", "qknorm_tools.evaluate", "compare", "--ref", ref, "--baseline",
         ref, "--system", ref, "--allow-few-lines", "--n-bootstrap", "5", "--n-ar", "5",
         "--out", blocker / "cmp.txt"],
        cwd=REPO, env=cli_env(), capture_output=True, text=True, timeout=FAR_BOUND,
    )  # fmt: skip
    assert p.returncode == 1, out(p)
    assert p.stderr.splitlines()[-1] == (
        f"error: cannot write {blocker}/cmp.txt: cannot make its directory ({blocker}: File exists)"
    ), out(p)


def test_generate_failures_are_explained_from_the_real_errors(tmp_path):
    import torch

    buf = io.BytesIO()
    torch.save({"model": torch.zeros(100)}, buf)
    cut = tmp_path / "checkpoint_best.pt"
    cut.write_bytes(buf.getvalue()[:200])
    with pytest.raises(Exception) as e:
        torch.load(cut, weights_only=False)
    log = f"Traceback (most recent call last):\n  ...\n{type(e.value).__name__}: {e.value}\n"
    msg = explain_generate_failure(log, str(cut), "data/bin/gl-en")
    assert msg.startswith(f"{cut} is truncated or not a checkpoint (RuntimeError: PytorchStream")
    assert msg.endswith(
        "restore it, or retrain (scripts/train.sh resumes from checkpoints/checkpoint_last.pt)"
    )
    # another dictionary: the embedding has another number of rows
    with pytest.raises(RuntimeError) as e:
        torch.nn.Embedding(10, 4).load_state_dict(torch.nn.Embedding(12, 4).state_dict())
    log = f"Traceback (most recent call last):\nRuntimeError: {e.value}\n"
    assert explain_generate_failure(log, "ck.pt", "data/bin/gl-en") == (
        "ck.pt was made with another dictionary or model size than data/bin/gl-en (size "
        "mismatch for weight: copying a param with shape torch.Size([12, 4]) from checkpoint, "
        "the shape in current model is torch.Size([10, 4]).): decode it with the data it was "
        "trained on (data/bin/PAIR), or retrain it on these"
    )
    assert explain_generate_failure("x\nValueError: odd\n", "ck.pt", "b") == (
        "fairseq-generate failed (ValueError: odd)"
    )
    assert explain_generate_failure("", "ck.pt", "b") == "fairseq-generate failed"
