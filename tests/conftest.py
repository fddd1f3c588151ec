"""Shared fixtures: tiny generated corpora, binarized with the real fairseq-preprocess."""

import os
import random
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PLUGIN_DIR = REPO / "fairseq_qknorm"
SHARED_DATA = REPO.parent / "shared" / "data"
VENV_BIN = Path(sys.executable).parent


def pytest_configure(config):
    config.addinivalue_line("markers", "slow: end-to-end test over ~10 s (deselect: -m 'not slow')")


def cli_env():
    """Environment for subprocess CLIs: the venv's bin first, the repo importable."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_cli(args, cwd=None, check=True, input=None):
    """Run a command; on failure show its output in the assertion message."""
    proc = subprocess.run([str(a) for a in args], cwd=cwd, env=cli_env(), input=input,
                          capture_output=True, text=True)
    if check and proc.returncode != 0:
        raise AssertionError(f"{args[0]} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
                             f"{proc.stderr[-3000:]}")
    return proc


def write_toy_corpus(directory: Path, sizes=(("train", 300), ("valid", 30), ("test", 21)),
                     seed=0, src="src", tgt="tgt"):
    """A learnable toy translation task: target = reversed source, upper-cased.

    The test split size (21) is deliberately not a multiple of 8, to catch
    fairseq dropping the last partial batch (see scripts/lib.sh).
    """
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(24)]
    directory.mkdir(parents=True, exist_ok=True)
    for split, n in sizes:
        with open(directory / f"{split}.{src}", "w") as fs, open(directory / f"{split}.{tgt}", "w") as ft:
            for _ in range(n):
                sent = [rng.choice(words) for _ in range(rng.randint(3, 10))]
                fs.write(" ".join(sent) + "\n")
                ft.write(" ".join(reversed(sent)).upper() + "\n")
    return directory


@pytest.fixture(scope="session")
def toy_data(tmp_path_factory):
    """Binarized toy corpus (joined dictionary): returns (raw_dir, bin_dir)."""
    root = tmp_path_factory.mktemp("toy")
    raw = write_toy_corpus(root / "raw")
    bin_dir = root / "bin"
    run_cli(["fairseq-preprocess", "--source-lang", "src", "--target-lang", "tgt",
             "--trainpref", raw / "train", "--validpref", raw / "valid", "--testpref", raw / "test",
             "--destdir", bin_dir, "--joined-dictionary", "--workers", "1"])
    return raw, bin_dir


@pytest.fixture(scope="session")
def toy_task(toy_data):
    """A fairseq TranslationTask on the toy data (for building models in-process)."""
    import fairseq_qknorm  # noqa: F401
    from fairseq import options, tasks

    _, bin_dir = toy_data
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(bin_dir), "--arch", "transformer_qknorm"])
    task = tasks.setup_task(args)
    return task


def build_model(task, arch, extra=()):
    """Build ``arch`` for ``task`` through fairseq's real argument parsing.

    Returns ``(model, args)``; ``args`` holds the resolved hyperparameters.
    """
    from fairseq import options

    parser = options.get_training_parser()
    data = task.cfg.data if hasattr(task.cfg, "data") else task.args.data
    args = options.parse_args_and_arch(parser, [str(data), "--arch", arch, *extra])
    model = task.build_model(args)
    return model, args


def fresh_copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst
