"""Exit statuses with one meaning (qknorm_tools.exits): every Python command line of the project
(each module with ``if __name__ == "__main__"``) exits 2 on a usage error and 1 on a failure of
its data or environment. In-process: each case calls the module's ``main(argv)``."""

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from qknorm_tools import exits

from conftest import (
    FAR_BOUND,
    REPO,
    cli_env,
    out,
)

PACKAGES = ("qknorm_tools", "qknorm_model_tools", "benchmarks", "fairseq_qknorm")


def _commands() -> list[str]:
    """Every ``python -m`` entry point: the modules of the packages with a __main__ guard."""
    return sorted(
        f"{pkg}.{f.stem}"
        for pkg in PACKAGES
        for f in (REPO / pkg).glob("*.py")
        # a package's __main__ only lists the package's commands: it takes no arguments
        if f.stem != "__main__" and 'if __name__ == "__main__"' in f.read_text(encoding="utf-8")
    )


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _broken_record(tmp: Path) -> Path:
    """A results tree whose committed record is not JSON: a data failure."""
    rec = tmp / "results" / "cpu-converge-d128" / "gl-en" / "records" / "twt" / "seed1"
    rec.mkdir(parents=True)
    _write(rec / "record.json", "{not json")
    return tmp / "results"


def _config_repo(tmp: Path) -> Path:
    """A repository whose gl-en pair and cpu-proxy profile are not TOML: a data failure."""
    for kind, name in (("pairs", "gl-en"), ("profiles", "cpu-proxy")):
        (tmp / "configs" / kind).mkdir(parents=True)
        (tmp / "configs" / kind / f"{name}.toml").write_text("src = \n")
    return tmp


def _unequal_corpus(tmp: Path) -> list[str]:
    (tmp / "a.gl").write_text("un\ndous\n")
    (tmp / "a.en").write_text("one\n")
    return ["check", "--src", str(tmp / "a.gl"), "--tgt", str(tmp / "a.en")]


#: module -> (a usage error, a data or environment error; None: the command reads no data, why)
CASES = {
    "qknorm_tools.collect": (
        lambda t: ["runs", "--run", "x", "--work-dir", str(t), "--out-dir", str(t), "--aggregate"],
        lambda t: [
            "runs",
            "--run",
            str(t / "runs/gl-en/p/twt/seed1"),
            "--work-dir",
            str(t),
            "--out-dir",
            str(t / "out"),
        ],  # fmt: skip  (no finished run)
    ),
    "qknorm_tools.commands": (
        lambda t: ["generate", "--pair", "gl-en"],
        lambda t: [
            "average",
            "--run",
            str(t),
            "-n",
            "2",
            "--output",
            "x",
            "--profile",
            "cpu-proxy",
            "--repo",
            str(_config_repo(t)),
        ],  # fmt: skip
    ),
    "qknorm_tools.committed": (
        lambda t: ["check"],
        lambda t: ["check", str(t / "no-record"), "--profile", "cpu-proxy"],
    ),
    "qknorm_tools.config": (
        lambda t: ["names", "pears"],
        lambda t: ["shell", "--pair", "gl-en", "--repo", str(_config_repo(t))],
    ),
    "qknorm_tools.corpus": (lambda t: ["chek"], _unequal_corpus),
    "qknorm_tools.seglen": (
        lambda t: ["check", "--src", "gl"],
        lambda t: [
            "check",
            "--raw",
            str(t / "raw"),
            "--seg",
            str(t / "seg"),
            "--src",
            "gl",
            "--tgt",
            "en",
        ],  # fmt: skip  (no such directories)
    ),
    "qknorm_tools.pilot": (
        lambda t: ["--bogus"],
        lambda t: ["--results", str(_broken_record(t))],
    ),
    "qknorm_tools.unicode_forms": (
        lambda t: ["normalize", "--form", "NFKC", "x"],
        lambda t: ["normalize", "--form", "NFC", str(t / "missing.gl")],
    ),
    "qknorm_tools.evaluate": (
        lambda t: ["aggregate", "--baseline", "twt"],
        lambda t: ["score", "--ref", str(t / "missing.en"), "--hyp", str(t / "missing.hyp")],
    ),
    "qknorm_tools.freshness": (
        lambda t: ["check"],
        lambda t: ["check", str(_write(t / "made_by.json", "{not json")), "--set", "a=1"],
    ),
    "qknorm_tools.lr_sweep_sizes": (
        lambda t: ["--size", "d128", "--out-dir", str(t)],
        lambda t: ["--size", f"128={t / 'missing.json'}", "--out-dir", str(t)],
    ),
    "qknorm_tools.plots": (
        lambda t: ["curves"],
        lambda t: ["curves", "--log", f"a={t / 'missing.log'}", "--out", str(t / "c.png")],
    ),
    "qknorm_tools.progress": (lambda t: ["decode", "--total", "1"], None),  # a filter of logs
    "qknorm_tools.provenance": (
        lambda t: ["check", "--pair", "gl-en"],
        lambda t: ["check", "--pair", "gl-en", "--data", str(t / "data")],
    ),
    "qknorm_tools.report": (
        lambda t: [str(t), str(t), "-o", str(t / "r.html")],
        lambda t: [str(t / "missing-results-dir")],
    ),
    "qknorm_tools.run": (
        lambda t: ["train-plan", "--pair", "gl-en"],  # argparse: required options missing
        lambda t: [
            "train-plan",
            "--pair",
            "gl-en",
            "--system",
            "twt",
            "--profile",
            "cpu-proxy",
            "--seed",
            "1",
            "--precision",
            "fp32",
            f"--work-dir={t}",
            f"--data-root={t / 'no-data'}",
        ],  # fmt: skip
    ),
    "qknorm_tools.serve": (
        lambda t: ["--bogus"],
        lambda t: ["--requests", str(_write(t / "requests", "two\n"))],
    ),
    "qknorm_tools.train_check": (
        lambda t: ["--", "--best-checkpoint-metric", "bleu"],
        None,  # checks a command line only
    ),
    "benchmarks.run": (
        lambda t: ["--sections", "nonesuch"],
        lambda t: ["--sections", "e2e", "--e2e-data", str(t / "missing-bin")],
    ),
    "benchmarks.profile_e2e": (
        lambda t: ["--per-update-json", str(t / "u.json")],
        lambda t: ["--per-update-json", str(t / "missing/u.json"), "--", "data-bin"],
    ),
    "benchmarks.authors_code": (
        lambda t: ["train"],
        lambda t: [
            "train",
            "--authors-dir",
            str(t / "missing"),
            "--data-dir",
            str(t),
            "--dump-dir",
            str(t),
            "--pair",
            "gl2en",
            "--updates",
            "1",
            "--log-interval",
            "1",
            "--threads",
            "1",
            "--qk-length",
            "79",
            "--layers",
            "1",
            "--dim",
            "8",
            "--ffn",
            "8",
            "--heads",
            "1",
            "--dropout",
            "0",
        ],  # fmt: skip
    ),
    "benchmarks.gpu_check": (
        lambda t: ["report"],
        lambda t: ["report", str(t / "missing"), "--gpu", "H200", "--vocab", "8"],
    ),
    "benchmarks.bf16_cpu": (lambda t: ["--nonesuch"], None),  # times synthetic models
    # fairseq-train's own parser; no data of its own
    "benchmarks.gpu_train": (lambda t: [str(t), "--arch", "transformer", "--nonesuch"], None),
    "benchmarks.memory_child": (lambda t: ["--nonesuch"], None),  # synthetic batches
    "benchmarks.profile_step": (lambda t: ["--nonesuch"], None),  # synthetic batches
    "benchmarks.rusage_launcher": (lambda t: [], None),  # the command's own status otherwise
    # the plugin's commands import only torch, fairseq and the plugin: the same statuses,
    # written by argparse and their own mains
    "qknorm_model_tools.attention_dump": (
        lambda t: ["--nonesuch"],
        lambda t: [str(t / "missing.pt"), "--data", str(t), "--out", str(t / "a.json")],
    ),
    "qknorm_model_tools.average_checkpoints": (
        lambda t: [
            "--inputs",
            "a.pt",
            "--output",
            "b.pt",
            "--num-epoch-checkpoints",
            "2",
            "--num-update-checkpoints",
            "2",
        ],  # fmt: skip
        lambda t: ["--inputs", str(t / "missing.pt"), "--output", str(t / "avg.pt")],
    ),
    "qknorm_model_tools.bf16_auto": (lambda t: ["--threads", "0"], None),  # times this CPU
    "qknorm_model_tools.translate": (
        lambda t: ["gl-en"],
        lambda t: ["gl-en", "twt", "--input", str(t / "missing.gl")],
    ),
}


def _status(module: str, argv: list[str], monkeypatch) -> int:
    from qknorm_tools import config

    mod = importlib.import_module(module)
    monkeypatch.setattr(config, "REPO", config.REPO)  # --repo sets it: restored after the test
    monkeypatch.setattr(sys, "argv", [module, *argv])
    try:
        status = mod.main() if module.endswith("rusage_launcher") else mod.main(argv)
    except SystemExit as e:
        status = e.code if isinstance(e.code, int) else 1
    return status


def test_every_command_has_cases():
    """A new command line is added to CASES (and so to the convention) or this fails."""
    assert sorted(CASES) == _commands()


@pytest.mark.parametrize("module", sorted(CASES))
@pytest.mark.slow
def test_usage_error_exits_2_and_data_error_exits_1(module, tmp_path, monkeypatch, capsys):
    """The usage case exits 2 (exits.USAGE), the data case 1 (exits.FAILURE), each with a
    message on stderr."""
    usage, data = CASES[module]
    assert _status(module, usage(tmp_path), monkeypatch) == 2
    assert capsys.readouterr().err.strip()
    if data is None:
        return
    d = tmp_path / "data-case"
    d.mkdir()
    assert _status(module, data(d), monkeypatch) == exits.FAILURE
    assert "error" in capsys.readouterr().err


def test_predicates_answer_no_with_3(tmp_path, capsys):
    """The question-answering commands say "no" with 3 (exits.NO), not with an error status:
    ``freshness check`` of a stale record, ``config known`` of an unknown name."""
    from qknorm_tools import config, freshness

    record = tmp_path / "made_by.json"
    assert freshness.main(["write", str(record), "--set", "a=1"]) == 0
    assert freshness.main(["check", str(record), "--set", "a=2"]) == exits.NO
    assert "a" in capsys.readouterr().out
    assert config.main(["known", "pairs", "xx-yy"]) == exits.NO


@pytest.mark.parametrize("text", ["0", "-5", "1.5", "x", ""])
def test_positive_int_refuses_what_is_not_an_integer_of_at_least_1(text):
    import argparse

    with pytest.raises(argparse.ArgumentTypeError, match="expected a positive integer"):
        exits.positive_int(text)
    assert exits.positive_int("1") == 1
    assert exits.positive_int("1024") == 1024


@pytest.mark.parametrize(
    "module, argv, option",
    [
        (
            "qknorm_tools.corpus",
            ["check", "--src", "a", "--tgt", "b", "--max-len", "0"],
            "--max-len",
        ),
        (
            "qknorm_tools.corpus",
            ["check", "--src", "a", "--tgt", "b", "--max-len", "-5"],
            "--max-len",
        ),
        (
            "qknorm_tools.corpus",
            ["spm", "--raw", "r", "--out", "o", "--src", "gl", "--tgt", "en", "--vocab-size", "0"],
            "--vocab-size",
        ),
        (
            "qknorm_tools.corpus",
            ["length-stats", "--stats", "s.json", "--paper-l", "-3"],
            "--paper-l",
        ),
        (
            "qknorm_tools.evaluate",
            ["compare", "--ref", "r", "--baseline", "b", "--system", "s", "--n-ar", "0"],
            "--n-ar",
        ),
    ],
)
def test_an_integer_option_below_1_is_a_usage_error_naming_it(
    module, argv, option, monkeypatch, capsys
):
    """``corpus check --max-len 0`` (and -5) used to be accepted: every count, length and size
    option of the corpus and evaluate commands takes exits.positive_int, so argparse refuses a
    value below 1 with exit 2 and names the option, before any file is read."""
    assert _status(module, argv, monkeypatch) == exits.USAGE
    err = capsys.readouterr().err
    assert f"argument {option}" in err and "expected a positive integer" in err


@pytest.mark.parametrize(
    "tool", ["attention_dump", "average_checkpoints", "translate", "bf16_auto"]
)
@pytest.mark.slow
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
@pytest.mark.slow
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
