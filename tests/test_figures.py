"""What the figures show, read from matplotlib's objects (limits, tick labels, titles, texts),
not from pixels: BLEU bars from 0 with system names and a caption naming the test and the
baseline; g/health panels of one record kind, named, without offset tick labels; the ablation's
figures naming runs as its tables do."""

from __future__ import annotations

import json
import shlex
import subprocess

import pytest

from qknorm_tools import plots_bleu, plots_common, plots_training

from conftest import FAR_BOUND, FIXTURES, REPO, cli_env


@pytest.fixture
def figures(monkeypatch):
    """The figures the plot functions make, kept open instead of written."""
    made = []

    def keep(fig, out):
        made.append(fig)
        return str(out)

    for module in (plots_bleu, plots_training):
        monkeypatch.setattr(module, "_save", keep)
    yield made
    for fig in made:
        plots_common._pyplot().close(fig)


COMPARE = {  # evaluate compare --json, as demo.sh writes it (the committed demo's numbers)
    "metric": "bleu_tok",
    "n_bootstrap": 1000,
    "n_ar": 10000,
    "baseline": "twt",
    "systems": [
        {"name": "twt", "score": 8.6348, "ci_low": 8.0277, "ci_high": 9.2437, "p_ar": None},
        {
            "name": "qknorm_paper",
            "score": 8.8237,
            "ci_low": 8.1786,
            "ci_high": 9.4553,
            "p_ar": 0.4006,
        },
    ],
}


def _aggregate(pairs, concat=True):
    systems = {"twt": 20.0, "qknorm_paper": 21.0, "scalenorm_qknorm": 19.5}
    return {
        "metric": "bleu_tok",
        "baseline": "twt",
        "significance": {"n_bootstrap": 1000, "n_ar": 10000},
        "avg_delta": {s: 0 for s in systems},
        "pairs": {
            p: {
                "systems": {
                    s: {
                        "bleu_tok": {"mean": m, "sd": 0.3},
                        "concat": (
                            {
                                "score": m,
                                "ci_low": m - 1,
                                "ci_high": m + 1,
                                "p_ar": None if s == "twt" else 0.02,
                            }
                            if concat
                            else None
                        ),
                    }
                    for s, m in systems.items()
                }
            }
            for p in pairs
        },
    }


def _texts(ax):
    return [t.get_text() for t in ax.texts]


def test_compare_bars_start_at_zero_name_systems_and_the_test(tmp_path, figures):
    (tmp_path / "c.json").write_text(json.dumps(COMPARE))
    plots_bleu.plot_bleu_bars(tmp_path / "c.json", tmp_path / "b.png")
    (fig,) = figures
    (ax,) = fig.axes
    assert ax.get_ylim()[0] == 0.0  # a 0.19 difference is not drawn as a large one
    assert ax.get_ylim()[1] > 9.4553  # the CI fits
    assert [t.get_text() for t in ax.get_xticklabels()] == ["twt", "qknorm_paper"]
    assert "baseline" in _texts(ax) and "p=0.401" in _texts(ax)
    caption = " ".join(t.get_text() for t in fig.texts)
    assert "p: paired approximate randomization test (sacreBLEU, 10,000 trials)" in caption
    assert "against the baseline twt" in caption
    assert "error bars: 95% bootstrap CI (1,000 resamples)" in caption
    assert "BLEU points" in ax.get_ylabel()


def test_aggregate_bars_group_pairs_on_the_x_axis(tmp_path, figures):
    (tmp_path / "a.json").write_text(json.dumps(_aggregate(["gl-en", "en-vi"])))
    plots_bleu.plot_bleu_bars(tmp_path / "a.json", tmp_path / "b.png")
    (fig,) = figures
    (ax,) = fig.axes
    assert ax.get_ylim()[0] == 0.0
    assert [t.get_text() for t in ax.get_xticklabels()] == ["gl-en", "en-vi"]
    assert [t.get_text() for t in ax.get_legend().get_texts()] == [
        "twt",
        "qknorm_paper",
        "scalenorm_qknorm",
    ]
    caption = " ".join(t.get_text() for t in fig.texts)
    assert "against the baseline twt on the seed-concatenated outputs" in caption
    assert _texts(ax).count("p=0.02") == 4 and _texts(ax).count("baseline") == 2


def test_aggregate_bars_one_pair_and_mean_sd(tmp_path, figures):
    (tmp_path / "a.json").write_text(json.dumps(_aggregate(["gl-en"], concat=False)))
    plots_bleu.plot_bleu_bars(tmp_path / "a.json", tmp_path / "b.png", value="mean")
    (fig,) = figures
    (ax,) = fig.axes
    assert ax.get_ylim()[0] == 0.0
    assert [t.get_text() for t in ax.get_xticklabels()] == [
        "twt",
        "qknorm_paper",
        "scalenorm_qknorm",
    ]
    assert ax.get_xlabel() == "system (gl-en)"
    caption = " ".join(t.get_text() for t in fig.texts)
    assert "error bars: ± sd over seeds" in caption and "randomization" not in caption


def _write_log(path, records):
    """A fairseq-like log: (kind, num_updates, {key: value}) records."""
    lines = []
    for kind, u, kv in records:
        if kind == "train_inner":
            body = ", ".join(f"{k}={v}" for k, v in {**kv, "num_updates": u}.items())
            lines.append(f"t | INFO | train_inner | epoch 001:     {u} / 100 {body}")
        else:
            body = " | ".join(f"{k} {v}" for k, v in {**kv, "num_updates": u}.items())
            lines.append(f"t | INFO | valid | epoch 001 | valid on 'valid' subset | {body}")
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def test_g_panels_show_one_record_kind_and_plain_tick_labels(tmp_path, figures):
    # g near 13.03 moving by 1e-3: matplotlib would label the axis "+1.303e1"
    a = _write_log(
        tmp_path / "a.log",
        [
            ("train_inner", u, {"loss": 5, "qknorm_g_enc0_self": 13.03 + 1e-4 * u})
            for u in range(10, 60, 10)
        ]
        + [("valid", 50, {"loss": 5})],
    )
    # this run logged g only on validation: the panels must not mix train and valid
    b = _write_log(
        tmp_path / "b.log",
        [("train_inner", u, {"loss": 5}) for u in range(10, 60, 10)]
        + [("valid", u, {"loss": 5, "qknorm_g_enc0_self": 13.03 + 1e-4 * u}) for u in (25, 50)],
    )
    plots_training.plot_g({"a": a, "b": b}, tmp_path / "g.png")
    (fig,) = figures
    fig.canvas.draw()
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["a: training (train_inner lines)", "b: training (train_inner lines)"]
    assert "no qknorm_g_* keys in train_inner lines" in _texts(fig.axes[1])
    for ax in fig.axes:
        assert ax.yaxis.get_offset_text().get_text() == ""
    assert all("e1" not in t.get_text() for t in fig.axes[0].get_yticklabels())


def test_health_split_valid_names_validation_in_every_panel(figures, tmp_path):
    plots_training.plot_health(
        {"qk": str(FIXTURES / "train_qknorm.log"), "base": str(FIXTURES / "train_baseline.log")},
        tmp_path / "h.png",
        split="valid",
    )
    (fig,) = figures
    assert {ax.get_title().split(": ", 1)[1] for ax in fig.axes} == {
        "validation on dev (valid lines)"
    }


@pytest.mark.slow
def test_ablation_figures_name_runs_by_system_like_its_tables(tmp_path):
    """ablation_bleu.png (aggregate.json, rows = systems) and ablation_curves.png name each
    run the same way."""
    env = cli_env()
    env["QKNORM_WORK_DIR"] = str(tmp_path)
    proc = subprocess.run(
        ["bash", str(REPO / "scripts/ablation.sh"), "gl-en", "--seeds", "1", "--dry-run"],
        env=env,
        capture_output=True,
        text=True,
        timeout=FAR_BOUND,
    )
    assert proc.returncode == 0, proc.stderr
    (curves,) = [
        shlex.split(line)
        for line in proc.stdout.splitlines()
        if "qknorm_tools.plots curves" in line
    ]
    names = [a.split("=", 1)[0] for a in curves[curves.index("--log") + 1 :]]
    assert names == ["prenorm_fixnorm_layernorm", "qknorm_paper", "twt", "scalenorm_qknorm"]


def test_aggregate_bars_show_each_seed(tmp_path, figures):
    """With several seeds each bar carries one dot per seed at that seed's score, and the
    caption says so: the bootstrap CI of concatenated outputs hides the spread of training."""
    d = _aggregate(["gl-en"])
    per_seed = {"twt": [19.6, 20.1, 20.3], "qknorm_paper": [22.5, 20.0, 20.5]}
    for s, vals in per_seed.items():
        d["pairs"]["gl-en"]["systems"][s]["bleu_tok"]["values"] = vals
    (tmp_path / "a.json").write_text(json.dumps(d))
    plots_bleu.plot_bleu_bars(tmp_path / "a.json", tmp_path / "b.png")
    (fig,) = figures
    (ax,) = fig.axes
    dots = [ln for ln in ax.lines if ln.get_marker() == "o"]
    assert [list(ln.get_ydata()) for ln in dots] == list(per_seed.values())
    xs = [list(ln.get_xdata()) for ln in dots]
    assert xs[0][0] < xs[0][1] < xs[0][2] < xs[1][0]  # on their own bars, in seed order
    assert ax.get_ylim()[1] > 22.5  # the highest seed fits
    caption = " ".join(t.get_text() for t in fig.texts)
    assert "dots: each seed's own score" in caption
