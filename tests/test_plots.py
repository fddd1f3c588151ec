"""Tests of qknorm_tools.trainlog (fairseq log parsing) and qknorm_tools.plots (figures)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from qknorm_tools import (
    plots,
    plots_attention,
    plots_bleu,
    plots_common,
    plots_training,
    trainlog,
)

from conftest import (
    FAR_BOUND,
    REPO,
)

FIX = Path(__file__).parent / "fixtures"
BASE_LOG = FIX / "train_baseline.log"
QK_LOG = FIX / "train_qknorm.log"
QK_JSON_LOG = FIX / "train_qknorm_json.log"
MIN_PNG = 5 * 1024


def _png_ok(path):
    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    assert len(data) > MIN_PNG, f"{path}: only {len(data)} bytes"


def test_parse_simple_lines():
    r = trainlog.parse_log_line(
        "2026-11-29 21:00:00 | INFO | train_inner | epoch 001:     10 / 50 loss=12.1, nll_loss=12, "
        "ppl=4096, wps=3000, ups=1.1, wpb=3600, bsz=140, num_updates=10, lr=5e-05, gnorm=2.1, "
        "train_wall=7, wall=9"
    )
    assert r["kind"] == "train_inner" and r["epoch"] == 1
    assert (
        r["metrics"]["loss"] == 12.1
        and r["metrics"]["num_updates"] == 10
        and r["metrics"]["lr"] == 5e-05
    )
    v = trainlog.parse_log_line(
        "2026-11-29 21:00:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 11.5 | "
        "nll_loss 11.2 | ppl 2353.5 | wps 9000 | num_updates 50"
    )
    assert v["kind"] == "valid" and v["metrics"] == {
        "loss": 11.5,
        "nll_loss": 11.2,
        "ppl": 2353.5,
        "wps": 9000.0,
        "num_updates": 50.0,
    }
    t = trainlog.parse_log_line("x | INFO | train | epoch 002 | loss 12.0 | num_updates 100")
    assert t["kind"] == "train" and t["epoch"] == 2 and t["metrics"]["loss"] == 12.0
    assert trainlog.parse_log_line("2026 | INFO | fairseq_cli.train | model: transformer") is None
    assert (
        trainlog.parse_log_line(
            "2026 | INFO | fairseq.data | loaded 742 examples from: valid subset"
        )
        is None
    )


def test_parse_json_lines():
    r = trainlog.parse_log_line(
        't | INFO | train_inner | {"epoch": 1, "update": 0.2, "loss": "12.1", '
        '"num_updates": "10", "qknorm_g_enc0_self": "20.5"}'
    )
    assert r["kind"] == "train_inner" and r["epoch"] == 1
    assert r["metrics"]["loss"] == 12.1 and r["metrics"]["qknorm_g_enc0_self"] == 20.5
    v = trainlog.parse_log_line(
        't | INFO | valid | {"epoch": 1, "valid_loss": "11.5", "valid_num_updates": "50"}'
    )
    assert v["kind"] == "valid" and v["metrics"] == {"loss": 11.5, "num_updates": 50.0}


def test_parse_fixture_logs():
    recs = trainlog.parse_log(QK_LOG)
    x, y = trainlog.series(recs, "train_inner", "loss")
    assert len(x) == 20 and x[0] == 10 and x[-1] == 200 and np.all(np.diff(x) > 0)
    vx, vy = trainlog.series(recs, "valid", "loss")
    assert list(vx) == [50, 100, 150, 200] and vy[0] == pytest.approx(11.419)
    keys = trainlog.metric_keys(recs, "qknorm_g_", "train_inner")
    assert keys[:2] == ["qknorm_g_enc0_self", "qknorm_g_enc1_self"] and len(keys) == 6
    jrecs = trainlog.parse_log(QK_JSON_LOG)
    jx, _ = trainlog.series(jrecs, "valid", "loss")
    assert list(jx) == [50, 100, 150]
    assert trainlog.metric_keys(jrecs, "attn_maxlogit_", "train_inner")


@pytest.mark.slow
def test_curves_g_health_png(tmp_path):
    logs = {"baseline": str(BASE_LOG), "qknorm": str(QK_LOG), "qknorm-json": str(QK_JSON_LOG)}
    _png_ok(plots_training.plot_curves(logs, tmp_path / "curves.png"))
    _png_ok(
        plots_training.plot_g(
            {"qknorm": str(QK_LOG), "qknorm-json": str(QK_JSON_LOG)}, tmp_path / "g.png"
        )
    )
    _png_ok(
        plots_training.plot_health({"qknorm": str(QK_LOG)}, tmp_path / "health.png", split="valid")
    )
    with pytest.raises(plots_common.PlotInputError, match="qknorm_g_"):
        plots_training.plot_g({"baseline": str(BASE_LOG)}, tmp_path / "none.png")


def test_heatmap_png(tmp_path):
    rng = np.random.default_rng(0)
    a = rng.random((4, 5))
    a /= a.sum(1, keepdims=True)
    np.save(tmp_path / "attn.npy", a)
    assert (
        plots.main(
            [
                "heatmap",
                "--attn",
                str(tmp_path / "attn.npy"),
                "--src",
                "o gato come peixe </s>",
                "--tgt",
                "the cat eats fish",
                "--out",
                str(tmp_path / "h.png"),
            ]
        )
        == 0
    )
    _png_ok(tmp_path / "h.png")
    (tmp_path / "attn.json").write_text(
        json.dumps(
            {
                "attn": a.tolist(),
                "src": "o gato come peixe </s>",
                "tgt": ["the", "cat", "eats", "fish"],
            }
        )
    )
    m, src, tgt = plots_attention.load_attention(tmp_path / "attn.json")
    assert m.shape == (4, 5) and len(src) == 5 and tgt[1] == "cat"
    with pytest.raises(plots_common.PlotInputError, match="3 source tokens"):
        plots_attention.plot_heatmap(a, ["a", "b", "c"], None, tmp_path / "bad.png")


def test_bleu_bars_png(tmp_path):
    compare = {
        "metric": "bleu_tok",
        "baseline": "base",
        "systems": [
            {"name": "base", "score": 20.0, "ci_low": 19.0, "ci_high": 21.1, "p_ar": None},
            {"name": "qknorm", "score": 21.5, "ci_low": 20.4, "ci_high": 22.6, "p_ar": 0.003},
        ],
    }
    (tmp_path / "cmp.json").write_text(json.dumps(compare))
    _png_ok(plots_bleu.plot_bleu_bars(tmp_path / "cmp.json", tmp_path / "bars.png"))
    agg = {
        "metric": "bleu_tok",
        "avg_delta": {"base": {}, "qk": {}},
        "pairs": {
            p: {
                "systems": {
                    s: {"bleu_tok": {"mean": m, "sd": 0.3}, "concat": None}
                    for s, m in (("base", 20), ("qk", 21))
                }
            }
            for p in ("gl-en", "en-vi")
        },
    }
    (tmp_path / "agg.json").write_text(json.dumps(agg))
    _png_ok(plots_bleu.plot_bleu_bars(tmp_path / "agg.json", tmp_path / "bars2.png"))
    (tmp_path / "other.json").write_text("{}")
    with pytest.raises(plots_common.PlotInputError):
        plots_bleu.plot_bleu_bars(tmp_path / "other.json", tmp_path / "x.png")


@pytest.mark.slow
def test_cli_module(tmp_path):
    env = dict(os.environ, PYTHONPATH=str(REPO) + os.pathsep + os.environ.get("PYTHONPATH", ""))
    out = tmp_path / "c.png"
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "qknorm_tools.plots",
            "curves",
            "--log",
            f"base={BASE_LOG}",
            f"qk={QK_LOG}",
            "--out",
            str(out),
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=FAR_BOUND,
    )
    assert p.returncode == 0, p.stderr
    _png_ok(out)
    assert (
        plots.main(
            ["curves", "--log", f"x={tmp_path / 'missing.log'}", "--out", str(tmp_path / "m.png")]
        )
        == 1
    )


def test_repeated_log_flags_accumulate():
    """`--log A=x --log B=y` keeps both runs (argparse would keep only the last)."""
    from qknorm_tools.plots import build_parser

    for cmd in ("curves", "g", "health"):
        a = build_parser().parse_args(
            [cmd, "--log", "a=x.log", "--log", "b=y.log", "c=z.log", "--out", "o.png"]
        )
        assert a.log == ["a=x.log", "b=y.log", "c=z.log"]


def test_calibration_figure_from_dev_curves(tmp_path):
    log = tmp_path / "train.log"
    lines = []
    for epoch, (nu, wall, loss) in enumerate(((264, 80, 7.363), (528, 160, 6.877)), start=1):
        lines += [
            f"2026-12-01 20:07:32 | INFO | train | epoch {epoch:03d} | loss 9.1 | lr 0.002 | "
            f"num_updates {nu} | train_wall {wall - 5} | wall {wall}",
            f"2026-12-01 20:07:33 | INFO | valid | epoch {epoch:03d} | valid on 'valid' subset | "
            f"loss {loss} | nll_loss 6.1 | num_updates {nu} | best_loss {loss}",
        ]
    log.write_text("\n".join(lines) + "\n")
    assert [
        (p["updates"], p["wall"], p["loss"]) for p in trainlog.dev_curve(trainlog.parse_log(log))
    ] == [
        (264, 80.0, 7.363),
        (528, 160.0, 6.877),
    ]
    _png_ok(
        plots_training.plot_calibration({"d128": str(log), "qk": str(QK_LOG)}, tmp_path / "c.png")
    )
    no_valid = tmp_path / "train_only.log"
    no_valid.write_text(lines[0] + "\n")
    with pytest.raises(plots_common.PlotInputError, match="no dev loss"):
        plots_training.plot_calibration({"d128": str(no_valid)}, tmp_path / "d.png")


@pytest.mark.slow
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
