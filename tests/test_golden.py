"""Golden command lines: the fairseq-train and fairseq-generate commands the pipeline runs.

For every pair x system x profile of ``configs/`` (and a list of option variants on gl-en),
``scripts/train.sh ... --dry-run`` and ``scripts/evaluate.sh ... --dry-run`` are compared, token
by token, with the files under ``tests/golden/`` (one per profile, ``variants.txt`` for the
options): the commands, the run directory (``--save-dir``) and the evaluation's output paths.
Issue 21 ("Must not break"): a refactoring of the configuration or of the scripts must leave
every command line and every path as it was.

Paths are normalised: the repository root reads ``<REPO>``, the work dir ``<WORK>``. The dry runs
need no data (the QKNorm systems show the authors' L of a pair, or ``L`` where there is none),
run with QKNORM_BF16=0 (fp32 unless an option says bf16), no GPU and no Slurm job.

A deliberate change of a command line regenerates the files (then review
``git diff tests/golden``)::

    QKNORM_UPDATE_GOLDEN=1 python -m pytest -q tests/test_golden.py
"""

from __future__ import annotations

import difflib
import os
import shlex
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from conftest import REPO, make_env, out, run_script

GOLDEN = Path(__file__).parent / "golden"
UPDATE = os.environ.get("QKNORM_UPDATE_GOLDEN") == "1"
REGENERATE = "QKNORM_UPDATE_GOLDEN=1 python -m pytest -q tests/test_golden.py"


def _names(kind: str) -> list:
    return sorted(p.stem for p in (REPO / "configs" / kind).glob("*.toml"))


PAIRS, SYSTEMS, PROFILES = _names("pairs"), _names("systems"), _names("profiles")

#: (environment, script, arguments): options that change the command or the paths, on gl-en
VARIANTS = [
    ({}, "train.sh", ["gl-en", "qknorm_paper", "--seed", "3"]),
    ({}, "train.sh", ["gl-en", "qknorm_paper", "--max-update", "60"]),
    ({}, "train.sh", ["gl-en", "qknorm_paper", "--lr", "3e-3"]),
    ({}, "train.sh", ["gl-en", "qknorm_paper", "--lr", "0.002"]),  # the profile's own lr
    ({}, "train.sh", ["gl-en", "qknorm_paper", "--bf16-autocast"]),
    ({}, "train.sh", ["gl-en", "twt", "--profile", "cpu-proxy-fast", "--bf16-autocast"]),
    ({}, "train.sh", ["gl-en", "qknorm_paper", "--threads", "1"]),
    ({}, "train.sh", ["gl-en", "qknorm_paper", "--nproc", "2"]),
    ({}, "train.sh", ["gl-en", "qknorm_paper", "--nproc", "2", "--launch", "srun"]),
    ({}, "train.sh", ["gl-en", "qknorm_paper", "--", "--patience", "3"]),
    ({}, "train.sh", ["gl-en", "twt", "--seed", "2", "--max-update", "60", "--lr", "3e-3"]),
    ({"QKNORM_MAX_UPDATE": "80"}, "train.sh", ["gl-en", "qknorm_paper"]),
    ({"QKNORM_THREADS": "1"}, "train.sh", ["gl-en", "qknorm_paper"]),
    ({"QKNORM_BF16": "1"}, "train.sh", ["gl-en", "qknorm_paper"]),
    ({}, "train.sh", ["gl-en", "qknorm_paper", "--precision", "bf16"]),  # as --bf16-autocast
    ({"QKNORM_BF16": "1"}, "train.sh", ["gl-en", "qknorm_paper", "--precision", "fp32"]),
    ({"QKNORM_BF16": "1"}, "evaluate.sh", ["gl-en", "qknorm_paper", "--precision", "fp32"]),
    ({}, "train.sh", ["en-gl", "qknorm_paper"]),  # the reverse direction of a pair
    ({}, "evaluate.sh", ["gl-en", "qknorm_paper", "--split", "dev"]),
    ({}, "evaluate.sh", ["gl-en", "qknorm_paper", "--checkpoint", "last"]),
    ({}, "evaluate.sh", ["gl-en", "qknorm_paper", "--checkpoint", "avg5"]),
    ({}, "evaluate.sh", ["gl-en", "qknorm_paper", "--profile", "paper", "--checkpoint", "avg5"]),
    ({}, "evaluate.sh", ["gl-en", "twt", "--seed", "2", "--max-update", "60", "--lr", "3e-3"]),
    ({}, "evaluate.sh", ["gl-en", "qknorm_paper", "--bf16-autocast"]),
    ({}, "evaluate.sh", ["gl-en", "qknorm_paper", "--threads", "1"]),
    ({"QKNORM_MAX_UPDATE": "80"}, "evaluate.sh", ["gl-en", "qknorm_paper"]),
    ({"QKNORM_BF16": "1"}, "evaluate.sh", ["gl-en", "qknorm_paper"]),
]


def _env(work: Path, extra: dict) -> dict:
    env = make_env(work, CUDA_VISIBLE_DEVICES="", **extra)  # no GPU: the CPU commands
    for key in [k for k in env if k.startswith("SLURM_")]:
        env.pop(key)  # outside a Slurm job
    return env


def _render(work: Path, jobs) -> str:
    """Run the dry runs ``jobs`` [(env extra, script, args)] in parallel -> the golden text:
    per command ``$ scripts/SCRIPT PAIR SYSTEM --dry-run OPTIONS`` (environment first), then
    one token of each printed command per line (indented), paths normalised."""

    def one(job):
        extra, script, args = job
        args = [*args[:2], "--dry-run", *args[2:]]  # before a `--` that ends the script's options
        p = run_script(script, *args, env=_env(work, extra), timeout=600)
        head = " ".join([*(f"{k}={v}" for k, v in extra.items()), f"scripts/{script}", *args])
        assert p.returncode == 0, f"{head} failed:\n{out(p)}"
        lines = [f"$ {head}"]
        for line in p.stdout.splitlines():
            line = line.replace(str(work), "<WORK>").replace(str(REPO), "<REPO>")
            if line.startswith("# "):  # evaluate.sh: "# outputs: PATH..."
                lines.append(f"  {line}")
                continue
            lines.append("  " + "\n  ".join(shlex.split(line)))
            lines.append("  ;")  # end of one command
        return "\n".join(lines)

    with ThreadPoolExecutor(max_workers=max(2, min(8, 2 * (os.cpu_count() or 1)))) as pool:
        parts = list(pool.map(one, jobs))
    return "\n".join(parts) + "\n"


def _compare(name: str, text: str) -> None:
    path = GOLDEN / name
    if UPDATE:
        GOLDEN.mkdir(exist_ok=True)
        path.write_text(text, encoding="utf-8")
        return
    assert path.is_file(), f"{path} missing: a new profile? regenerate with {REGENERATE}"
    want = path.read_text(encoding="utf-8")
    if text != want:
        diff = list(difflib.unified_diff(want.splitlines(), text.splitlines(),
                                         f"{path} (golden)", "now", lineterm="", n=8))  # fmt: skip
        shown = "\n".join(diff[:200]) + ("\n[...]" if len(diff) > 200 else "")
        pytest.fail(
            f"command lines of {name} changed ({len(diff)} diff lines). If deliberate: "
            f"{REGENERATE}, and say so in the commit.\n{shown}",
            pytrace=False,
        )


@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.slow
def test_command_lines_of_every_pair_and_system(profile, tmp_path):
    """fairseq-train and fairseq-generate of every pair x system under PROFILE == golden."""
    jobs = [
        ({}, script, [pair, system, "--profile", profile])
        for pair in PAIRS
        for system in SYSTEMS
        for script in ("train.sh", "evaluate.sh")
    ]
    text = _render(tmp_path, jobs)
    # what the golden file holds: every command, its run directory and the evaluation's outputs
    assert text.count("\n  fairseq-train\n") == len(PAIRS) * len(SYSTEMS)
    assert text.count("\n  fairseq-generate\n") == len(PAIRS) * len(SYSTEMS)
    assert text.count("\n  --save-dir\n  <WORK>/runs/") == len(PAIRS) * len(SYSTEMS)
    assert text.count("\n  # outputs: <WORK>/runs/") == len(PAIRS) * len(SYSTEMS)
    _compare(f"{profile}.txt", text)


@pytest.mark.slow
def test_command_lines_of_the_options(tmp_path):
    """The options and QKNORM_* overrides that change a command or a path == golden."""
    _compare("variants.txt", _render(tmp_path, VARIANTS))


def test_every_golden_file_has_its_profile():
    """A golden file whose profile is gone is stale (regenerating removes nothing)."""
    names = {p.name for p in GOLDEN.glob("*.txt")}
    assert names - {f"{p}.txt" for p in PROFILES} == {"variants.txt"}, (
        f"golden files without a profile in configs/profiles: remove them ({sorted(names)})"
    )


@pytest.mark.parametrize("script", ["train.sh", "evaluate.sh"])
@pytest.mark.slow
def test_precision_option_is_the_bf16_flag_and_wins_over_the_environment(script, tmp_path):
    """``--precision bf16`` is ``--bf16-autocast``; ``--precision fp32`` under QKNORM_BF16=1 is
    the fp32 run (the grids pass each cell its precision this way, issue 21)."""

    def body(extra, *options):
        text = _render(tmp_path, [(extra, script, ["gl-en", "qknorm_paper", *options])])
        return text.split("\n", 1)[1]  # the commands, without the `$ ...` head line

    assert body({}, "--precision", "bf16") == body({}, "--bf16-autocast")
    fp32 = body({"QKNORM_BF16": "1"}, "--precision", "fp32")
    assert fp32 == body({}) != body({"QKNORM_BF16": "1"})
    assert "--bf16-autocast" not in fp32 and "seed1-bf16" not in fp32
