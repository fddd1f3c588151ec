"""The smaller trips of issue 22: the usage error is repeated after the usage text, a work dir
that is a file, messages that named .tmp paths, an output error's exit status (1, not the
usage-error 2), and fairseq-generate failures explained (a truncated checkpoint, a checkpoint
of another dictionary)."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from qknorm_tools.textio import explain_generate_failure

from conftest import (
    FAR_BOUND,
    REPO,
    cli_env,
    make_env,
    out,
    run_progress_filter,
    run_script,
    write_sums,
)


@pytest.mark.parametrize("script", ["train.sh", "evaluate.sh", "prepare_data.sh"])
def test_usage_error_is_the_last_line(tmp_path, script):
    """As argparse: the synopsis (the usage line and its continuations, not the whole help),
    then the error once, last, naming --help."""
    p = run_script(script, "gl-en", "--bogus", env=make_env(tmp_path))
    assert p.returncode == 2, out(p)
    lines = p.stderr.splitlines()
    assert lines[0].startswith(f"usage: scripts/{script} PAIR")
    assert all(x.startswith("     ") for x in lines[1:-1])  # continuations only
    assert lines[-1] == (
        f"error: unknown option '--bogus' (scripts/{script} --help lists every option)"
    )
    assert p.stderr.count("--bogus") == 1
    full = run_script(script, "--help", env=make_env(tmp_path))
    assert full.returncode == 0 and full.stdout.startswith(p.stderr.rsplit("\nerror: ", 1)[0])


@pytest.mark.parametrize("below", [False, True])
def test_work_dir_that_is_a_file(tmp_path, below):
    f = tmp_path / "afile"
    f.write_text("x\n")
    work = f / "sub" if below else f
    p = run_script("train.sh", "gl-en", "twt", "--dry-run", env=make_env(work))
    assert p.returncode == 1, out(p)
    assert p.stderr == (
        f"error: QKNORM_WORK_DIR={work}: {f} is not a directory (the work dir holds data/, runs/ "
        "and results/; point QKNORM_WORK_DIR at a directory)\n"
    )


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


TB = "| INFO | fairseq.tasks.text_to_speech | Please install tensorboardX: pip install tensorboardX"
LOG = f"""2026-12-01 20:37:15 {TB}
/venv/hydra/experimental/initialize.py:45: Hydra14MigrationWarning:
The version_base parameter is not specified.
  self.delegate = real_initialize(
sys:1: UserWarning:
'config' is validated against ConfigStore schema with the same name.
2026-12-01 20:37:25 | INFO | fairseq_cli.train | {{'_name': None, 'common': {{'seed': 1}}}}
2026-12-01 20:37:26 | INFO | fairseq.tasks.translation | [gl] dictionary: 80 types
2026-12-01 20:37:27 | INFO | fairseq_cli.train | TransformerQKNormModel(
  (encoder): TransformerQKNormEncoder(
  )
)
2026-12-01 20:37:27 | INFO | fairseq_cli.train | task: TranslationWordDropoutTask
/venv/fairseq/tasks/fairseq_task.py:531: FutureWarning: `torch.cuda.amp.autocast` is deprecated.
  with torch.cuda.amp.autocast(enabled=(isinstance(optimizer, AMPOptimizer))):
2026-12-01 20:38:12 | INFO | train_inner | epoch 001:      2 / 10 loss=8.0, num_updates=2
Traceback (most recent call last):
  File "x.py", line 1, in <module>
FloatingPointError: Minimum loss scale reached
"""


def test_terminal_leaves_out_fairseqs_noise_not_errors():
    from qknorm_tools import progress

    buf = io.BytesIO()
    lines = [x.encode() + b"\n" for x in LOG.splitlines()]
    progress.TrainEta(0, 1).filter(lines, buf, heartbeat=0, quiet=True)
    assert buf.getvalue().decode().splitlines() == [
        "(Python warnings of fairseq's dependencies: not shown, see train.log)",
        "2026-12-01 20:37:25 | INFO | fairseq_cli.train | (the full configuration: see train.log)",
        "2026-12-01 20:37:26 | INFO | fairseq.tasks.translation | [gl] dictionary: 80 types",
        "2026-12-01 20:37:27 | INFO | fairseq_cli.train | (the model's structure: see train.log)",
        "2026-12-01 20:37:27 | INFO | fairseq_cli.train | task: TranslationWordDropoutTask",
        "2026-12-01 20:38:12 | 2/10 updates, ETA ? (at most: max-epoch 1) | epoch 001: 2 / 10 | "
        "loss=8.0",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "FloatingPointError: Minimum loss scale reached",
    ]
    buf = io.BytesIO()  # without quiet (train.log's copy): every line
    progress.TrainEta(0, 1).filter(lines, buf, heartbeat=0)
    assert len(buf.getvalue().splitlines()) == len(lines)


def test_in_process_fairseq_log_leaves_out_its_noise_not_its_warnings():
    """The translate helper's terminal (progress.TerminalLogHandler): fairseq's INFO records and
    its dependencies' Python warnings are left out as in train.sh's terminal; warnings and
    errors of fairseq are shown in its log format."""
    import logging
    import re
    import warnings

    from qknorm_tools import progress

    buf = io.StringIO()
    handler = progress.TerminalLogHandler("--verbose shows them", stream=buf)
    log = logging.getLogger("fairseq.test_terminal")
    log.propagate, py_log = False, logging.getLogger("py.warnings")
    log.addHandler(handler)
    py_log.addHandler(handler)
    # order-independent: a test before may have run quiet_fairseq_logging in this process
    # (bf16_auto), leaving Python warnings captured (captureWarnings(True) is then a no-op)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        logging.captureWarnings(False)
        try:
            log.setLevel(logging.INFO)
            logging.captureWarnings(True)
            log.info("loading archive file /x")
            logging.getLogger("fairseq.tasks.text_to_speech").handle(
                log.makeRecord("fairseq.tasks.text_to_speech", logging.WARNING, "f", 1,
                               "Please install tensorboardX: pip install tensorboardX", (), None)
            )  # fmt: skip
            warnings.warn_explicit(
                "`torch.cuda.amp.autocast` is deprecated", FutureWarning, "x.py", 3
            )
            warnings.warn_explicit("another one", UserWarning, "y.py", 4)
            log.warning("the checkpoint has no %s", "optimizer state")
            try:
                raise ValueError("bad")
            except ValueError:
                log.exception("cannot load")
        finally:
            logging.captureWarnings(False)
            log.removeHandler(handler)
            py_log.removeHandler(handler)
    lines = [
        re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "T", x) for x in buf.getvalue().splitlines()
    ]
    assert lines[:3] == [
        "(Python warnings of fairseq's dependencies: not shown, --verbose shows them)",
        "T | WARNING | fairseq.test_terminal | the checkpoint has no optimizer state",
        "T | ERROR | fairseq.test_terminal | cannot load",
    ]
    assert lines[3] == "Traceback (most recent call last):" and lines[-1] == "ValueError: bad"


@pytest.mark.parametrize(
    "script, args",
    [
        ("train.sh", ["gl-en", "twt", "--dry-run"]),
        ("evaluate.sh", ["gl-en", "twt"]),
        ("ablation.sh", ["gl-en", "--profile", "cpu-proxy", "--dry-run"]),
        ("reproduce.sh", ["--pairs", "gl-en", "--systems", "twt", "--dry-run"]),
    ],
)
def test_a_budget_that_never_stops_is_a_usage_error_up_front(tmp_path, script, args):
    p = run_script(script, *args, "--max-update", 0, env=make_env(tmp_path))
    assert p.returncode == 2, out(p)
    assert p.stderr.splitlines()[-1] == (
        "error: --max-update 0 with profile cpu-proxy (max-epoch 0) would never stop training "
        "(scripts/" + script + " --help lists every option)"
    )
    assert not p.stdout  # nothing planned or run


def test_lr_overflow_is_named(tmp_path):
    p = run_script("train.sh", "gl-en", "twt", "--lr", "1e400", "--dry-run", env=make_env(tmp_path))
    assert p.returncode == 2
    assert p.stderr.splitlines()[-1] == (
        "error: --lr '1e400' overflows: fairseq reads it as a double, at most about 1.8e308 "
        "(infinite above) (scripts/train.sh --help lists every option)"
    )


def test_translate_names_the_runs_that_exist(tmp_path):
    runs = tmp_path / "runs" / "gl-en"
    for rel in ("cpu-proxy-max-update-5/qknorm_paper/seed1-bf16", "cpu-proxy/qknorm_paper/seed2",
                "cpu-proxy/twt/seed1", "cpu-proxy/qknorm_paper/seed3-lr3e-3"):  # fmt: skip
        (runs / rel / "checkpoints").mkdir(parents=True)
        (runs / rel / "checkpoints" / "checkpoint_best.pt").write_bytes(b"")
    env = make_env(tmp_path)

    def translate(*args):
        return subprocess.run(
            [sys.executable, "-m", "qknorm_model_tools.translate", *args], input="ola\n", cwd=REPO,
            env=env, capture_output=True, text=True, timeout=FAR_BOUND,
        )  # fmt: skip

    def not_found(*args):
        """The last stderr line of a translate call that must exit 1."""
        p = translate(*args)
        assert p.returncode == 1, out(p)
        return p.stderr.splitlines()[-1]

    assert not_found("gl-en", "qknorm_paper") == (
        f"error: checkpoint {runs}/cpu-proxy/qknorm_paper/seed1/checkpoints/checkpoint_best.pt "
        "not found: run scripts/train.sh gl-en qknorm_paper --profile cpu-proxy --seed 1 first; "
        "runs of this pair and system that have one: runs/gl-en/cpu-proxy/qknorm_paper/seed2 "
        "(--profile cpu-proxy --seed 2); runs/gl-en/cpu-proxy/qknorm_paper/seed3-lr3e-3; "
        "runs/gl-en/cpu-proxy-max-update-5/qknorm_paper/seed1-bf16 (--profile cpu-proxy "
        "--max-update 5 --seed 1 --bf16-autocast)"
    )
    # looking for bf16 runs (QKNORM_BF16=1, or the profile's auto on a bf16 CPU): the fp32 runs
    # it lists say how to select them
    env["QKNORM_BF16"] = "1"
    assert not_found("gl-en", "qknorm_paper", "--seed", "2") == (
        f"error: checkpoint {runs}/cpu-proxy/qknorm_paper/seed2-bf16/checkpoints/"
        "checkpoint_best.pt not found: run scripts/train.sh gl-en qknorm_paper --profile "
        "cpu-proxy --seed 2 first; runs of this pair and system that have one: "
        "runs/gl-en/cpu-proxy/qknorm_paper/seed2 (--profile cpu-proxy --seed 2, with "
        "QKNORM_BF16=0 and no --bf16-autocast); runs/gl-en/cpu-proxy/qknorm_paper/seed3-lr3e-3; "
        "runs/gl-en/cpu-proxy-max-update-5/qknorm_paper/seed1-bf16 (--profile cpu-proxy "
        "--max-update 5 --seed 1 --bf16-autocast)"
    )
    env["QKNORM_BF16"] = "0"
    p = translate("gl-en", "no_such_system")
    assert p.returncode == 2 and "unknown system 'no_such_system'" in p.stderr, out(p)
    # --checkpoint avgN as evaluate.sh takes it: the file evaluate.sh --checkpoint avgN makes,
    # from a run that keeps at least N checkpoints to average (update checkpoints here)
    seed4 = runs / "cpu-proxy/qknorm_paper/seed4/checkpoints"
    seed4.mkdir(parents=True)
    for u in (400, 800, 1200):
        (seed4 / f"checkpoint_1_{u}.pt").write_bytes(b"")
    assert not_found("gl-en", "qknorm_paper", "--seed", "4", "--checkpoint", "avg3") == (
        f"error: checkpoint {seed4}/checkpoint_avg3.pt "
        "not found: run scripts/evaluate.sh gl-en qknorm_paper --profile cpu-proxy --seed 4 "
        "--checkpoint avg3 (it averages the last 3 checkpoints) first; no run of gl-en "
        "qknorm_paper has a checkpoint_avg3.pt"
    )
    # ... and from one that keeps fewer (a short try keeps only best and last): no advice to
    # run evaluate.sh, which would fail too
    for ckpt, fewer in (("avg3", ""), ("avg4", ", or avg3")):
        seed = "2" if ckpt == "avg3" else "4"
        kept = 0 if ckpt == "avg3" else 3
        assert not_found("gl-en", "qknorm_paper", "--seed", seed, "--checkpoint", ckpt) == (
            f"error: checkpoint {runs}/cpu-proxy/qknorm_paper/seed{seed}/checkpoints/"
            f"checkpoint_{ckpt}.pt not found, and its run keeps {kept} checkpoints to average "
            f"(checkpointE.pt or checkpoint_E_U.pt), fewer than {ckpt[3:]}: use --checkpoint "
            f"best or last{fewer} (a short try, or a profile with --no-epoch-checkpoints, keeps "
            "none)"
        )
    for bad in ("avg0", "avgx", "avg", "worst"):
        p = translate("gl-en", "qknorm_paper", "--checkpoint", bad)
        assert p.returncode == 2, out(p)
        assert p.stderr.splitlines()[-1].endswith(
            f"--checkpoint must be best, last or avgN (e.g. avg5), got '{bad}'"
        ), out(p)


def test_translate_checkpoint_names_are_evaluate_shs():
    """best, last and avgN name the files evaluate.sh decodes; other names are refused."""
    from qknorm_model_tools.translate import checkpoint_file_name

    assert [checkpoint_file_name(c) for c in ("best", "last", "avg1", "avg10")] == [
        "checkpoint_best.pt", "checkpoint_last.pt", "checkpoint_avg1.pt", "checkpoint_avg10.pt"
    ]  # fmt: skip
    for bad in ("avg0", "avg-1", "avg٣", "Best", ""):
        with pytest.raises(ValueError, match="must be best, last or avgN"):
            checkpoint_file_name(bad)


def test_train_loss_panel_shows_a_run_with_one_point(tmp_path, monkeypatch):
    from qknorm_tools import plots_training

    log = tmp_path / "train.log"
    log.write_text(
        "2026-12-01 00:00:00 | INFO | train_inner | epoch 001:      1 / 10 loss=9.0, "
        "num_updates=1\n"
        "2026-12-01 00:00:01 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.5 | "
        "num_updates 1\n"
    )
    figs = []
    monkeypatch.setattr(plots_training, "_save", lambda fig, out: figs.append(fig) or str(out))
    plots_training.plot_curves({"demo": str(log)}, tmp_path / "c.png")
    (line,) = figs[0].axes[0].lines
    assert (list(line.get_xdata()), list(line.get_ydata()), line.get_marker()) == ([1], [9.0], "o")
    two = tmp_path / "two.log"
    two.write_text(log.read_text().replace("loss=9.0, num_updates=1", "loss=9.0, num_updates=1\n"
                   "2026-12-01 00:00:00 | INFO | train_inner | epoch 001: 2 / 10 loss=8.0, "
                   "num_updates=2"))  # fmt: skip
    plots_training.plot_curves({"demo": str(two)}, tmp_path / "c2.png")
    (line,) = figs[1].axes[0].lines
    assert list(line.get_xdata()) == [1, 2] and line.get_marker() in ("", "None")


def test_a_line_before_the_first_progress_line():
    """Before fairseq's first train_inner line (every --log-interval updates) the terminal says
    training runs; it stops at the first progress line."""
    import re
    import time

    from qknorm_tools import progress

    lines, text, t = run_progress_filter(progress.TrainEta(100), heartbeat=0.2)
    lines.put(b"2026-12-01 20:00:00 | INFO | fairseq_cli.train | Start iterating over samples\n")
    t0 = time.time()
    while text().count("| training for ") < 2:  # the event: two lines; a far bound only
        assert time.time() - t0 < FAR_BOUND, text()
        time.sleep(0.05)
    lines.put(b"2026-12-01 20:01:00 | INFO | train_inner | epoch 001:     50 / 100 loss=9.0, "
              b"ups=1.0, num_updates=50, wall=60\n")  # fmt: skip
    while "ETA" not in text():
        assert time.time() - t0 < FAR_BOUND, text()
        time.sleep(0.05)
    shown = text().count("| training for ")
    time.sleep(0.5)  # more than two heartbeats: none may come after the progress line
    lines.put(None)
    t.join(FAR_BOUND)
    assert text().count("| training for ") == shown
    got = text().splitlines()
    assert all(
        re.fullmatch(
            r"\| training for \d+ s, no progress line yet: fairseq prints one every "
            r"--log-interval updates, the ETA comes with the first",
            x,
        )
        for x in got[1 : shown + 1]
    ), got
    assert got[-1].startswith("2026-12-01 20:01:00 | 50/100 updates, ETA 0:01 | epoch 001: 50")


@pytest.mark.parametrize(
    "tool", ["attention_dump", "average_checkpoints", "translate", "bf16_auto"]
)
def test_a_model_tools_help_is_not_preceded_by_fairseqs_noise(tool):
    """``python -m qknorm_model_tools.TOOL --help`` imports fairseq (through the plugin) before
    the tool's main(): its import-time INFO line ("Please install tensorboardX") stays off
    stderr."""
    p = subprocess.run(
        [sys.executable, "-m", f"qknorm_model_tools.{tool}", "--help"],
        capture_output=True,
        text=True,
        cwd=REPO,
        env=cli_env(),
        timeout=FAR_BOUND,
    )
    assert p.returncode == 0 and p.stdout.startswith("usage: "), out(p)
    assert p.stderr == "", out(p)


def _package_modules(package: str):
    """Every module of ``package``, as ``python -m`` names it, and whether its source has a
    ``__main__`` block (read from the file, independently of ``COMMANDS``)."""
    pkg = REPO / package
    for path in sorted(pkg.rglob("*.py")):
        if path.name in ("__init__.py", "__main__.py"):
            continue
        name = ".".join(path.relative_to(REPO).with_suffix("").parts)
        yield name, 'if __name__ == "__main__"' in path.read_text(encoding="utf-8")


def test_the_commands_are_the_modules_with_a_main_block():
    import qknorm_model_tools

    tools = _package_modules("qknorm_model_tools")
    assert set(qknorm_model_tools.COMMANDS) == {n.split(".", 1)[1] for n, main in tools if main}
    assert not [n for n, main in _package_modules("fairseq_qknorm") if main]  # the plugin: none
    p = subprocess.run(
        [sys.executable, "-m", "qknorm_model_tools"], cwd=REPO, env=cli_env(),
        capture_output=True, text=True, timeout=FAR_BOUND,
    )  # fmt: skip
    assert p.returncode == 0 and p.stderr == "", out(p)
    assert p.stdout.splitlines()[1:] == [
        f"  python -m qknorm_model_tools.{c}" for c in qknorm_model_tools.COMMANDS
    ]


@pytest.mark.parametrize(
    "module",
    [n for n, _ in _package_modules("fairseq_qknorm")]
    # a command's old path (before the tools left the plugin) says where the commands went
    + ["fairseq_qknorm.translate"]
    + [n for n, has_main in _package_modules("qknorm_model_tools") if not has_main],
)
def test_a_library_module_run_as_a_command_says_so(module):
    # python -m fairseq_qknorm.bpe --help used to end in "ValueError: Cannot register
    # duplicate bpe (pipeline)" (the package had registered it already); others printed nothing
    p = subprocess.run(
        [sys.executable, "-m", module, "--help"], cwd=REPO, env=cli_env(),
        capture_output=True, text=True, timeout=FAR_BOUND,
    )  # fmt: skip
    assert p.returncode == 1, out(p)
    assert p.stdout == ""
    if module.startswith("fairseq_qknorm."):
        expected = (
            f"error: {module} is not a command: fairseq_qknorm is a fairseq plugin (--user-dir "
            "fairseq_qknorm, docs/usage.md) whose modules are libraries. The commands that run "
            "its models are python -m qknorm_model_tools.NAME (python -m qknorm_model_tools "
            "lists them)"
        )
    else:
        expected = (
            f"error: {module} is a library module, not a command. The commands: python -m "
            "qknorm_model_tools.translate, python -m qknorm_model_tools.bf16_auto, python -m "
            "qknorm_model_tools.attention_dump, python -m qknorm_model_tools.average_checkpoints"
        )
    assert p.stderr.splitlines() == [expected]


def test_translate_warns_of_characters_the_pipeline_refuses(tmp_path):
    """No-break spaces, tabs and control characters in translate's input: translated as they
    are, with a warning naming the first line (the corpus checks refuse them)."""
    from qknorm_model_tools.translate import bad_character_warning

    assert bad_character_warning(["ola mundo", "bo dia"], "in.gl") is None
    lines = ["ola mundo", "ola\u00a0mundo", "un\tdous", "tres\u202fcatro"]
    assert bad_character_warning(lines, "in.gl") == (
        "in.gl:2: no-break space (U+00A0) at character 4: a word boundary for fairseq's "
        "tokenizer but not for BPE tools (subword-nmt splits words on U+0020 only and leaves a "
        "stray @@ token); replace it by a space; 2 more lines hold such characters; translated "
        "as it is"
    )
    assert bad_character_warning(lines[:3], "stdin").endswith(
        "; 1 more line holds such characters; translated as it is"
    )
    # said by the command before anything else (here: before the missing run's error)
    p = subprocess.run(
        [sys.executable, "-m", "qknorm_model_tools.translate", "gl-en", "twt"],
        input="ola\u00a0mundo\n", cwd=REPO, env=make_env(tmp_path), capture_output=True,
        text=True, timeout=FAR_BOUND,
    )  # fmt: skip
    assert p.returncode == 1, out(p)
    warnings = [line for line in p.stderr.splitlines() if line.startswith("warning: ")]
    assert warnings == [
        "warning: stdin:1: no-break space (U+00A0) at character 4: a word boundary for "
        "fairseq's tokenizer but not for BPE tools (subword-nmt splits words on U+0020 only and "
        "leaves a stray @@ token); replace it by a space; translated as it is"
    ], out(p)


def test_translate_warns_of_a_byte_order_mark_and_empty_lines(tmp_path):
    """helper-12: a BOM (refused by the corpus checks) and empty lines (translated by fairseq
    to a made-up sentence) went by without a word; an --output that is a directory was said
    only after the model loaded."""
    from qknorm_model_tools.translate import bad_character_warning, empty_line_warning

    assert bad_character_warning(["\ufeffola mundo", "bo dia"], "in.gl") == (
        "in.gl:1: UTF-8 byte order mark (U+FEFF) at character 1: it becomes part of the first "
        "word; translated as it is"
    )
    assert empty_line_warning(["ola", "bo dia"], "in.gl") is None
    assert empty_line_warning(["ola", "", "  ", "bo dia"], "in.gl") == (
        "in.gl:2: an empty line (2 in all): fairseq translates an empty source to a sentence of "
        "its own, not to an empty line; translated as it is"
    )
    p = subprocess.run(
        [sys.executable, "-m", "qknorm_model_tools.translate", "gl-en", "twt",
         "--output", tmp_path],
        input="ola\n\n", cwd=REPO, env=make_env(tmp_path), capture_output=True, text=True,
        timeout=FAR_BOUND,
    )  # fmt: skip
    assert p.returncode == 1, out(p)
    assert p.stderr.splitlines() == [
        "warning: stdin:2: an empty line (1 in all): fairseq translates an empty source to a "
        "sentence of its own, not to an empty line; translated as it is",
        f"error: --output {tmp_path} is a directory: name a file",
    ], out(p)


def test_translate_names_the_bad_line_and_the_first_step_of_a_missing_run(tmp_path):
    """Bytes that are not UTF-8: the line and the byte in it (1-based); --checkpoint avgN of a
    run that does not exist yet: train first, then average (not evaluate.sh alone)."""
    env = make_env(tmp_path)

    def translate(data: bytes, *args):
        return subprocess.run(
            [sys.executable, "-m", "qknorm_model_tools.translate", "gl-en", "twt", *args],
            input=data, cwd=REPO, env=env, capture_output=True, timeout=FAR_BOUND,
        )  # fmt: skip

    p = translate(b"ola mundo\nbo \xa0dia\n")
    assert p.returncode == 1, p.stderr
    assert p.stderr.decode().splitlines()[-1] == (
        "error: stdin:2: invalid UTF-8 (byte 0xa0 at byte 4 of the line)"
    )
    p = translate(b"ola\n", "--checkpoint", "avg3", "--max-update", "20")
    assert p.returncode == 1, p.stderr
    run = tmp_path / "runs/gl-en/cpu-proxy-max-update-20/twt/seed1/checkpoints/checkpoint_avg3.pt"
    assert p.stderr.decode().splitlines()[-1] == (
        f"error: checkpoint {run} not found: no run there yet; run scripts/train.sh gl-en twt "
        "--profile cpu-proxy --seed 1 --max-update 20, then scripts/evaluate.sh with the same "
        "options and --checkpoint avg3 (it averages the last 3 checkpoints); no run of gl-en twt "
        "has a checkpoint_avg3.pt"
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--size", "d128", "--profile", "paper"], "--size d128 needs a CPU profile"),
        (["--precision", "fp16"], "--precision must be bf16, fp32 or auto, got 'fp16'"),
        (["--bf16-autocast", "--precision", "fp32"], "--bf16-autocast and --precision fp32"),
    ],
)
def test_usage_errors_come_before_the_data_check(tmp_path, args, message):
    """On a fresh clone (no data yet) a bad option is said as a usage error, not hidden behind
    "bpe.json not found" (helper-12: exit 1 without --dry-run, exit 2 with it)."""
    p = run_script("train.sh", "gl-en", "twt", *args, env=make_env(tmp_path))
    assert p.returncode == 2, out(p)
    assert p.stderr.splitlines()[-1].startswith(f"error: {message}"), p.stderr
    assert "bpe.json" not in p.stderr


@pytest.mark.parametrize(
    "script, args, message",
    [
        ("lr_sweep.sh", ["gl-en", "--partition", "gpu"], "--partition needs --launcher slurm"),
        ("ablation.sh", ["gl-en", "--account", "a1"], "--account needs --launcher slurm"),
        (
            "reproduce.sh",
            ["--pairs", "gl-en", "--systems", "twt", "--sbatch-args=--qos=x"],
            "--sbatch-args needs --launcher slurm",
        ),
        (
            "lr_sweep.sh",
            ["gl-en", "--lrs", "1e-3,3e-3,1e-3"],
            "bad --lrs list '1e-3,3e-3,1e-3': 1e-3 is given twice",
        ),
        (
            "lr_sweep.sh",
            ["gl-en", "--lrs", "1e-3,0.001"],
            "bad --lrs list '1e-3,0.001': '0.001' is lr 1e-3 again (given twice, written another "
            "way)",
        ),
        (
            "bpe.sh",
            ["gl-en", "--vocab-size", "8000"],
            "--vocab-size is sentencepiece's (--tool sentencepiece); subword-nmt's size is "
            "--merges",
        ),
        (
            "bpe.sh",
            ["gl-en", "--tool", "sentencepiece", "--merges", "30"],
            "--merges is subword-nmt's; sentencepiece's size is --vocab-size",
        ),
        (
            "bpe.sh",
            ["gl-en", "--tool", "sentencepiece", "--vocab-threshold", "5"],
            "--vocab-threshold is subword-nmt's (apply-bpe --vocabulary-threshold); sentencepiece "
            "has none",
        ),
    ],
)
def test_options_that_would_be_dropped_are_usage_errors(tmp_path, script, args, message):
    """helper-12: sbatch's options with the local launcher, a repeated lr and the other BPE
    tool's options were accepted and dropped without a word (a repeated seed, system or size
    was already refused); said before the data is looked for (none here)."""
    env = make_env(tmp_path)
    p = run_script(script, *args, *([] if script == "bpe.sh" else ["--dry-run"]), env=env)
    assert p.returncode == 2, out(p)
    assert p.stderr.splitlines()[-1].startswith(f"error: {message} (scripts/{script} --help")
    assert not p.stdout  # nothing planned
    # the environment's defaults stay ambient: not refused with the local launcher
    if "--partition" in args:
        p = run_script(script, "gl-en", "--dry-run", env={**env, "QKNORM_SLURM_PARTITION": "gpu"})
        assert p.returncode == 0, out(p)
