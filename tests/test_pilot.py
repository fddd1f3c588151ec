"""qknorm_tools.pilot: the decisive 2x2's pilot measure and declared choice
(docs/decisive-2x2.md, "The pilot and the choice"), against numpy and statsmodels."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
from statsmodels.stats.power import TTestPower

from qknorm_tools import config, pilot

from conftest import REPO

RESULTS = REPO / "results"


@pytest.mark.slow
def test_the_plateau_runs_give_the_documented_measures():
    """(a) from its 12 committed runs: 0.98 unpaired, 1.20 paired (docs/decisive-2x2.md)."""
    scores = pilot.read_scores(RESULTS / "cpu-converge-d128/gl-en/records", "test")
    twt = [scores["twt"][s] for s in (1, 2, 3)]
    qk = [scores["qknorm_paper"][s] for s in (1, 2, 3)]
    unpaired = pilot.measure(scores, (1, 2, 3), paired=False)
    pooled = math.sqrt((np.var(twt, ddof=1) + np.var(qk, ddof=1)) / 2)
    assert unpaired["se"] == pytest.approx(math.sqrt(2) * pooled, abs=1e-12)
    assert round(unpaired["se"], 2) == 0.98 and round(unpaired["mean_twt"], 2) == 12.93
    assert round(unpaired["se_mean_twt"], 2) == 0.15
    assert unpaired["mean_difference"] == pytest.approx(np.mean(qk) - np.mean(twt), abs=1e-12)
    paired = pilot.measure(scores, (1, 2, 3), paired=True)
    assert paired["se"] == pytest.approx(np.std(np.subtract(qk, twt), ddof=1), abs=1e-12)
    assert round(paired["se"], 2) == 1.20


def rows(**se_and_mean):
    """Measured candidates: key -> (se, mean_twt), every pilot seed present."""
    out = {}
    for c in pilot.CANDIDATES:
        se, mean = se_and_mean[c.key.replace("-", "_")]
        out[c.key] = {"seeds": list(c.seeds), "se": se, "mean_twt": mean,
                      "se_mean_twt": 0.15, "sd": se if c.paired else se / math.sqrt(2)}  # fmt: skip
    return out


def test_choice_follows_the_declared_rule():
    # the lowest measure wins among candidates whose TWT mean is within one se of (a)'s
    r = rows(a=(0.98, 12.93), b=(0.60, 12.90), c=(0.70, 12.95), d_b=(0.40, 12.90),
             d_c=(0.50, 12.95))  # fmt: skip
    ch = pilot.choose(r)
    assert ch["complete"] and ch["chosen"] == "d-b" and ch["design"] == "paired"
    # a weaker baseline is not eligible, however quiet
    r = rows(a=(0.98, 12.93), b=(0.30, 12.70), c=(0.70, 12.80), d_b=(0.20, 12.70),
             d_c=(0.90, 12.80))  # fmt: skip
    ch = pilot.choose(r)
    assert ch["eligible"] == ["c", "a", "d-c"] and ch["chosen"] == "c"
    assert ch["mean_twt_floor"] == pytest.approx(12.78)
    # within 5% of the lowest: unpaired before paired, (c) before (b)
    r = rows(a=(0.98, 12.93), b=(0.62, 12.93), c=(0.63, 12.93), d_b=(0.60, 12.93),
             d_c=(0.90, 12.93))  # fmt: skip
    assert pilot.choose(r)["chosen"] == "c"


def test_seeds_are_the_fewest_whose_mde_reaches_the_target():
    r = rows(a=(0.98, 12.93), b=(2, 12.93), c=(2, 12.93), d_b=(0.74, 12.93), d_c=(2, 12.93))
    ch = pilot.choose(r)
    assert ch["chosen"] == "d-b"
    n = ch["seeds"]
    power = TTestPower()  # paired: one-sample t over the per-seed differences, df n - 1
    assert power.power(0.93 / 0.74, n, 0.05) >= 0.8 > power.power(0.93 / 0.74, n - 1, 0.05)
    # never fewer than the pilot's 4
    r = rows(a=(0.98, 12.93), b=(2, 12.93), c=(2, 12.93), d_b=(0.05, 12.93), d_c=(2, 12.93))
    assert pilot.choose(r)["seeds"] == pilot.MIN_SEEDS


@pytest.mark.slow
def test_an_incomplete_pilot_chooses_nothing_and_names_the_missing_seeds(tmp_path, capsys):
    res = tmp_path / "results"
    shutil.copytree(RESULTS / "cpu-converge-d128/gl-en/records",
                    res / "cpu-converge-d128/gl-en/records")  # fmt: skip
    rec = res / "cpu-fixed-d128/gl-en/records"
    for system in pilot.SYSTEMS:
        shutil.copytree(RESULTS / f"cpu-fixed-d128/gl-en/records/{system}/seed1",
                        rec / system / "seed1")  # fmt: skip
    assert pilot.main(["--results", str(res), "--out", str(tmp_path / "out/pilot")]) == 0
    doc = json.loads((tmp_path / "out/pilot.json").read_text())
    assert not doc["choice"]["complete"] and "chosen" not in doc["choice"]
    assert "(c) cpu-fixed-d128: seeds [2, 3, 4]" in doc["choice"]["missing"]
    assert doc["candidates"]["c"]["n"] == 1 and doc["candidates"]["c"]["se"] is None
    md = (tmp_path / "out/pilot.md").read_text()
    assert "**Pilot incomplete: nothing chosen.**" in md
    # a refused record: exit 1, named
    (rec / "twt/seed1/test.hyp").write_text("cut short\n")
    assert pilot.main(["--results", str(res)]) == 1
    assert "error: " in capsys.readouterr().err


@pytest.mark.slow
def test_the_committed_pilot_table_is_what_the_records_give():
    """results/decisive-pilot.{json,md} (quoted by docs/decisive-2x2.md) recompute from the
    committed records: regenerate with `python -m qknorm_tools.pilot --out
    results/decisive-pilot` when records are added."""
    doc = pilot.pilot(RESULTS)
    assert json.loads((RESULTS / "decisive-pilot.json").read_text()) == json.loads(json.dumps(doc))
    assert (RESULTS / "decisive-pilot.md").read_text() == pilot.markdown(doc)


def test_default_seeds_are_the_declared_then_the_pilots_then_1_2(capsys):
    """``ablation.sh --status --profile cpu-fixed-d128`` used to list seeds 1,2 and say nothing
    of the pilot: without --seeds a 2x2 runs the profile's [design] seeds, else (a profile of
    the declared pilot on its pair) the pilot's seeds with a pointer to this module, else 1,2."""
    seeds, why = pilot.default_seeds("cpu-fixed-d128", "gl-en", None)
    assert seeds == (1, 2, 3, 4)
    assert "cpu-fixed-d128 has no [design] seeds yet" in why
    assert "python -m qknorm_tools.pilot --out results/decisive-pilot" in why
    assert pilot.default_seeds("cpu-converge-d128", "gl-en", None)[0] == (1, 2, 3)
    assert pilot.main(["--default-seeds", "cpu-converge-d128"]) == 0
    assert capsys.readouterr().out.splitlines()[0] == ",".join(map(str, range(1, 11)))
    assert pilot.default_seeds("cpu-fixed-d128", "gl-en", 6) == (
        (1, 2, 3, 4, 5, 6),
        "seeds 1-6: the profile's [design] seeds = 6",
    )
    assert pilot.default_seeds("cpu-fixed-d128", "en-gl", None) == ((1, 2), "")
    assert pilot.default_seeds("cpu-proxy-fast", "gl-en", None) == ((1, 2), "")
    # the pilot is complete: the committed profile declares its 4 pilot seeds (it was not chosen)
    assert pilot.main(["--default-seeds", "cpu-fixed-d128"]) == 0
    first, second = capsys.readouterr().out.splitlines()
    assert first == "1,2,3,4" and second == "seeds 1-4: the profile's [design] seeds = 4"
    assert pilot.main(["--default-seeds", "nope"]) == 2
    assert "unknown profile 'nope'" in capsys.readouterr().err


def test_the_chosen_design_is_the_one_its_profile_declares():
    """The pilot's choice (results/decisive-pilot.json) is written into the chosen profile's
    [design] once, before the grid goes beyond the pilot: test and seeds per cell agree."""
    choice = json.loads((RESULTS / "decisive-pilot.json").read_text())
    chosen = choice["choice"]
    profile = config.load_profile(choice["candidates"][chosen["chosen"]]["profile"])
    assert (profile.design_test, profile.design_seeds) == (chosen["design"], chosen["seeds"])
    assert (profile.name, chosen["seeds"]) == ("cpu-converge-d128", 10)
