"""Committed results (qknorm_tools.committed): reports never degrade what is committed. On a fresh
clone at another path,
with no prepared data and no runs, rebuilding every committed results directory that holds a
runs.json either gives the committed files byte for byte or is refused with nothing touched.
In-process (collect, evaluate); the clone is a ``git clone`` of this checkout's HEAD."""

import hashlib
import json
import re
import subprocess
from pathlib import Path

import pytest

from qknorm_tools import collect, evaluate

REPO = Path(__file__).resolve().parents[1]


def _snapshot(root: Path) -> dict[str, str]:
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file()
    }


def _live(run_dir: str) -> str:
    """The live run a committed record stands for: results/LABEL/PAIR/records/SYSTEM/NAME ->
    runs/PAIR/LABEL/SYSTEM/NAME (what the scripts pass; collect reads the record for it)."""
    parts = Path(run_dir).parts
    if parts[0] == "results" and parts[3] == "records":
        return str(Path("runs", parts[2], parts[1], *parts[4:]))
    return run_dir


def _rebuild(clone: Path, out: Path) -> list[int]:
    """The collection and the report of ``out`` as the scripts make them; their statuses (up to
    the first refusal)."""
    doc = json.loads((out / "runs.json").read_text())
    runs = [str(clone / _live(r["run_dir"])) for r in doc["runs"]]
    pair = doc["runs"][0]["pair"]
    ref = f"{pair}={clone / 'data/raw' / pair / ('test.' + pair.split('-')[1])}"
    args = ["runs", "--work-dir", str(clone), "--out-dir", str(out), "--ref", ref]
    args += [x for r in runs for x in ("--run", r)]
    statuses = []
    if (out / "lr_sweep.json").exists():  # scripts/lr_sweep.sh: unscored runs kept
        statuses.append(collect.main([*args, "--keep-unscored", "--records-base",
                                      str(clone / "results")]))  # fmt: skip
        if statuses[-1] == 0:
            statuses.append(evaluate.main(["lr-sensitivity", "--results", str(out / "runs.json"),
                                           "--pair", pair, "--out-dir", str(out)]))  # fmt: skip
        return statuses
    label = out.parent.name
    statuses.append(collect.main([*args, "--aggregate", "--baseline", "twt", "--records-root",
                                  str(clone / "results" / label)]))  # fmt: skip
    if statuses[-1] == 0 and (out / "ablation.json").exists():
        abl = ["ablation", "--results", str(out / "runs.json"), "--out-dir", str(out)]
        statuses.append(evaluate.main([*abl, "--ref", ref.split("=", 1)[1]]))
    return statuses


@pytest.mark.slow
def test_fresh_clone_rebuilds_byte_for_byte_or_refuses_untouched(tmp_path, capsys):
    """Each results directory: every step exits 0 and the files are the committed ones, or a
    step refuses (exit 1, naming what is missing) and nothing under results/ changed."""
    clone = tmp_path / "elsewhere" / "clone"
    subprocess.run(["git", "clone", "-q", str(REPO), str(clone)], check=True)
    results = clone / "results"
    dirs = sorted(p.parent for p in results.rglob("runs.json"))
    assert any("lr-sweep" in str(d) for d in dirs) and any("converge" in str(d) for d in dirs)
    committed = _snapshot(results)
    rebuilt = []
    for out in dirs:
        statuses = _rebuild(clone, out)
        err = capsys.readouterr().err
        if all(s == 0 for s in statuses):
            rebuilt.append(str(out.relative_to(results)))
            assert _snapshot(results) == committed, f"{out}: rebuilt, but not byte for byte"
        else:
            assert statuses[-1] == 1 and "error: " in err, (out, statuses, err[-500:])
            assert _snapshot(results) == committed, f"{out}: refused, but files changed"
            if (out / "aggregate.json").exists() and "converge" in str(out):
                assert "scripts/prepare_data.sh gl-en" in err, err[-500:]
    # the size axis's sweeps rebuild from their committed records; the converged 2x2 needs
    # the reference (scripts/prepare_data.sh gl-en), the 1,000-update ablation and the demo
    # their runs (only runs.json is committed): refused
    assert rebuilt == [
        f"cpu-proxy-fast-max-update-250/gl-en/lr-sweep/d{d}" for d in (128, 256, 384)
    ]


def _tracked(*paths: str) -> list[str]:
    return subprocess.run(["git", "ls-files", "--", *paths], cwd=REPO, capture_output=True,
                          text=True, check=True).stdout.split()  # fmt: skip


def test_every_committed_aggregate_holds_all_its_tables_as_its_json_gives_them(tmp_path):
    """A results set is whole: each committed aggregate.json comes with every table the
    collection writes from it (aggregate.{md,tex,csv}, aggregate_avg_delta.csv), byte for byte
    what tables.write_aggregate_tables makes of it. cpu-converge-d128 lacked the .tex and the
    avg-delta CSV, so its --aggregate-only rebuild left them untracked in a clean clone."""
    from qknorm_tools.tables import write_aggregate_tables

    aggregates = [Path(p) for p in _tracked("results") if p.endswith("/aggregate.json")]
    assert aggregates
    for agg in aggregates:
        tracked = set(_tracked(str(agg.parent)))
        written = write_aggregate_tables(json.loads((REPO / agg).read_text()), tmp_path / agg)
        for path in map(Path, written.values()):
            committed = agg.parent / path.name
            assert str(committed) in tracked, f"{committed} is not committed"
            assert (REPO / committed).read_bytes() == path.read_bytes(), committed


def test_the_figure_steps_log_is_never_part_of_a_results_set():
    """plots.log (matplotlib's messages and this machine's paths: scripts/ablation.sh,
    scripts/lr_sweep.sh) is git-ignored under results/, and none is committed."""
    assert not [p for p in _tracked("results") if p.endswith("plots.log")]
    sweep = "results/cpu-proxy-fast-max-update-250/gl-en/lr-sweep/d128"
    for path in ("results/cpu-converge-d128/gl-en/plots.log", f"{sweep}/plots.log"):
        ignored = subprocess.run(["git", "check-ignore", "-q", "--no-index", path], cwd=REPO)
        assert ignored.returncode == 0, path


#: the start of an absolute path of a build machine (a work dir, a home, a temporary dir)
MACHINE_PATH = re.compile(r"(?<![\w.])/(work|home|tmp|root|Users)/")


@pytest.mark.slow
def test_no_committed_result_holds_a_path_of_the_machine_that_made_it():
    """Committed records (command.txt, record.json), plots.log and the calibration attention
    dump used to hold /work/... paths: every committed file under results/ is free of them
    (records store the command relative to the work dir: committed.portable_command)."""
    texts = {
        p: (REPO / p).read_text(encoding="utf-8", errors="replace")
        for p in [*_tracked("results"), *_tracked("benchmarks/results")]
    }
    found = [p for p, text in texts.items() if MACHINE_PATH.search(text)]
    assert found == []


def test_benchmark_results_are_written_without_the_machines_paths(tmp_path, monkeypatch):
    """benchmarks.run and benchmarks.bf16_cpu write their JSON and Markdown through
    committed.portable_paths: the checkout's and the working directory's paths become relative,
    the temporary directory's start with $TMPDIR; other text is kept."""
    import tempfile

    from qknorm_tools.committed import portable_paths

    monkeypatch.chdir(tmp_path)
    tmp = Path(tempfile.gettempdir()).resolve()
    text = (
        f'"command": "--e2e-data {REPO}/data/bin/gl-en --out {tmp}/x/b.json", '
        f"from `{tmp_path}/runs/a`, /other/place/{REPO.name}/kept, 1/2"
    )
    assert portable_paths(text) == (
        '"command": "--e2e-data data/bin/gl-en --out $TMPDIR/x/b.json", '
        f"from `runs/a`, /other/place/{REPO.name}/kept, 1/2"
    )
    assert portable_paths("/srv/w/a and /srv/wx/b", bases=["/srv/w"]) == "a and /srv/wx/b"
