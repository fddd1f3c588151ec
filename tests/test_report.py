"""The interactive report (qknorm_tools.report) and the attention dump it shows
(qknorm_model_tools.attention_dump): dumped attention against the module's own weights and an
independent float64 reference, the page's embedded numbers against the results JSON, and the
page in a real headless Chromium (skipped, saying why, where there is none)."""

import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import (
    PLUGIN_DIR,
    REPO,
    head_norm_reference,
    run_cli,
    run_without_torch,
    tiny_model,
    tiny_training,
)

#: per arch: the extra flags and the QK-norm type its attention computes
ARCHS = {
    "qknorm": (["--arch", "transformer_qknorm_paper", "--qk-norm-length", "12"], "l2"),
    "twt": (["--arch", "transformer_twt"], "none"),
    "qk_layernorm": (["--arch", "transformer_qk_layernorm"], "layernorm"),
}
SENTENCES = [0, 3]


@pytest.fixture(scope="module")
def checkpoints(toy_data, tmp_path_factory):
    """{name: checkpoint_last.pt} of 6 updates of a tiny model per arch (1+1 layers, 2 heads)."""
    _, bin_dir = toy_data
    root = tmp_path_factory.mktemp("attn_ckpt")
    out = {}
    for name, (arch, _) in ARCHS.items():
        save = root / name
        run_cli(["fairseq-train", bin_dir, "--user-dir", PLUGIN_DIR, *arch,
                 *tiny_model(layers=1), *tiny_training(lr="3e-3", max_tokens="400"),
                 "--max-update", "6", "--save-dir", save, "--no-epoch-checkpoints",
                 "--no-save-optimizer-state", "--disable-validation"])  # fmt: skip
        out[name] = save / "checkpoint_last.pt"
    return out


@pytest.fixture(scope="module")
def dump(checkpoints, toy_data, tmp_path_factory):
    """The command line's JSON for the three checkpoints."""
    _, bin_dir = toy_data
    path = tmp_path_factory.mktemp("attn_dump") / "attention.json"
    proc = run_cli([sys.executable, "-m", "qknorm_model_tools.attention_dump",
                    *checkpoints.values(), "--data", bin_dir,
                    "--sentences", ",".join(map(str, SENTENCES)),
                    "--names", ",".join(checkpoints), "-o", path], check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    return json.loads(path.read_text())


def _tensor(nested):
    import torch

    rows = [[[-math.inf if x is None else x for x in row] for row in h] for h in nested]
    return torch.tensor(rows, dtype=torch.float64)


def _module_inputs(model, net_input):
    """{name: (args, kwargs)} each attention module was called with in one forward."""
    seen, handles = {}, []
    for name, m in model.attention_modules().items():

        def hook(_m, args, kwargs, _name=name):
            seen[_name] = (args, dict(kwargs))

        handles.append(m.register_forward_pre_hook(hook, with_kwargs=True))
    try:
        model(**net_input)
    finally:
        for h in handles:
            h.remove()
    return seen


def _reference_logits(m, query, key, kind):
    """float64 (H, T, S) logits from the module's projections, written from the formulas:
    g cos(q, k) (Henry et al. 2020 Eq. 3), N(q).N(k)/sqrt(d) (ViT-22B), q.k/sqrt(d)."""
    import torch

    w = {n: getattr(m, f"{n}_proj") for n in ("q", "k")}
    q = query[:, 0].double() @ w["q"].weight.double().T + w["q"].bias.double()  # (T, E)
    k = key[:, 0].double() @ w["k"].weight.double().T + w["k"].bias.double()  # (S, E)
    H, D = m.num_heads, m.head_dim
    out = []
    for h in range(H):
        qh, kh = q[:, h * D : (h + 1) * D], k[:, h * D : (h + 1) * D]
        if kind == "l2":
            g = m.qk_norm_g.detach().double()
            out.append(
                g * (qh / qh.norm(dim=-1, keepdim=True)) @ (kh / kh.norm(dim=-1, keepdim=True)).T
            )
        elif kind == "layernorm":
            wq, wk = m.q_norm.weight.detach().double(), m.k_norm.weight.detach().double()
            qn, kn = head_norm_reference(kind, qh, wq), head_norm_reference(kind, kh, wk)
            out.append(qn @ kn.T / math.sqrt(D))
        else:
            out.append(qh @ kh.T / math.sqrt(D))
    return torch.stack(out)


def test_dump_has_every_module_head_and_token(dump):
    assert dump["format"] == "qknorm-attention/1"
    assert [m["name"] for m in dump["models"]] == list(ARCHS)
    for model in dump["models"]:
        assert [s["index"] for s in model["sentences"]] == SENTENCES
        for s in model["sentences"]:
            assert sorted(s["modules"]) == ["dec0_cross", "dec0_self", "enc0_self"]
            n_src, n_tgt = len(s["src_tokens"]), len(s["tgt_tokens"])
            assert s["src_tokens"][-1] == "</s>" and s["tgt_tokens"][0] == "</s>"
            assert s["tgt_output"][-1] == "</s>" and s["tgt_output"][:-1] == s["tgt_tokens"][1:]
            shapes = {"enc0_self": (n_src, n_src), "dec0_self": (n_tgt, n_tgt),
                      "dec0_cross": (n_tgt, n_src)}  # fmt: skip
            for name, mod in s["modules"].items():
                logits, probs = _tensor(mod["logits"]), _tensor(mod["probs"])
                assert tuple(logits.shape) == (2, *shapes[name]) == tuple(probs.shape), name
                assert len(mod["entropy"]) == 2 and len(mod["entropy"][0]) == shapes[name][0]
                assert mod["qk_norm_type"] == ARCHS[model["name"]][1]
            # causal decoder self-attention: the future is masked (null), the past is not
            dec = _tensor(s["modules"]["dec0_self"]["logits"])
            assert math.isinf(dec[0, 0, 1]) and math.isfinite(dec[0, 1, 0])


def test_dumped_probabilities_are_softmax_of_logits_and_entropy_of_probs(dump):
    import torch

    for model in dump["models"]:
        for s in model["sentences"]:
            for _name, mod in s["modules"].items():
                logits, probs = _tensor(mod["logits"]), _tensor(mod["probs"])
                torch.testing.assert_close(torch.softmax(logits, -1), probs, atol=2e-5, rtol=0)
                p = probs.clamp_min(1e-300)
                ref_h = -(probs * torch.log(p)).sum(-1)
                torch.testing.assert_close(_tensor([mod["entropy"]])[0], ref_h, atol=1e-3, rtol=0)


@pytest.mark.parametrize("name", list(ARCHS))
def test_dump_equals_the_models_own_weights_and_a_float64_reference(
    name, dump, checkpoints, toy_data
):
    """Per head: the dumped probabilities are the module's need_head_weights output, and the
    logits the QK-norm type's formula computed in float64 from the module's own inputs."""
    import torch

    from qknorm_model_tools.attention_dump import load_model

    _, bin_dir = toy_data
    model, task, arch = load_model(checkpoints[name], str(bin_dir))
    assert arch is not None
    task.load_dataset("test")
    ds = task.dataset("test")
    dumped = next(m for m in dump["models"] if m["name"] == name)
    kind = ARCHS[name][1]
    for s in dumped["sentences"]:
        net_input = ds.collater([ds[s["index"]]])["net_input"]
        inputs = _module_inputs(model, net_input)
        for mname, m in model.attention_modules().items():
            args, kwargs = inputs[mname]
            kwargs.update(need_weights=True, need_head_weights=True)
            with torch.no_grad():
                _, weights = m(*args, **kwargs)  # (H, B, T, S)
            probs = _tensor(s["modules"][mname]["probs"])
            torch.testing.assert_close(weights[:, 0].double(), probs, atol=2e-5, rtol=0)
            query = kwargs["query"] if "query" in kwargs else args[0]
            key = kwargs["key"] if "key" in kwargs else (args[1] if len(args) > 1 else None)
            key = query if key is None else key
            ref = _reference_logits(m, query.detach(), key.detach(), kind)
            logits = _tensor(s["modules"][mname]["logits"])
            finite = torch.isfinite(logits)
            assert finite.sum() > 0
            torch.testing.assert_close(logits[finite], ref[finite], atol=1e-4, rtol=1e-4)
            if kind == "l2":  # QKNorm's logits are bounded by g
                g = s["modules"][mname]["g"]
                assert logits[finite].abs().max() <= g + 1e-4


def test_dump_refuses_an_index_past_the_end_naming_the_size(
    checkpoints, toy_data, tmp_path, capsys
):
    from qknorm_model_tools.attention_dump import main

    _, bin_dir = toy_data
    out = tmp_path / "a.json"
    args = [str(checkpoints["twt"]), "--data", str(bin_dir), "--sentences", "0,21", "-o", str(out)]
    assert main(args) == 1
    err = capsys.readouterr().err
    assert "sentence(s) [21] out of range" in err and "has 21 sentences (0-20)" in err
    assert not out.exists()
    assert main([*args[:3], "--sentences", "1,x", "-o", str(out)]) == 1
    assert "--sentences '1,x': expected non-negative indices" in capsys.readouterr().err
    assert main([*args[:3], "--names", "a,b", "-o", str(out)]) == 2


# ----------------------------------------------------------------------------- the page
RESULTS = REPO / "results"


def page_data(page: Path) -> dict:
    """The JSON the page embeds (``<script type="application/json" id="qknorm-report-data">``)."""
    text = page.read_text(encoding="utf-8")
    start = text.index('<script type="application/json" id="qknorm-report-data">')
    start = text.index(">", start) + 1
    return json.loads(text[start : text.index("</script>", start)].replace("<\\/", "</"))


def build_page(src: Path, dst: Path, *extra) -> tuple[Path, dict]:
    """Copy a results directory and build its page with torch and fairseq blocked."""
    shutil.copytree(src, dst)
    proc = run_without_torch("qknorm_tools.report", dst, *extra)
    assert proc.returncode == 0, proc.stderr
    page = dst / "report.html"
    assert f"wrote {page}" in proc.stderr
    return page, page_data(page)


def figure(data: dict, prefix: str) -> dict:
    found = [f for f in data["figures"] if f["id"].startswith(prefix)]
    assert len(found) == 1, [f["id"] for f in data["figures"]]
    return found[0]["spec"]


def trace(spec: dict, **meta) -> dict:
    found = [t for t in spec["data"] if all(t.get("meta", {}).get(k) == v for k, v in meta.items())]
    assert len(found) == 1, meta
    return found[0]


def test_ablation_page_shows_the_numbers_of_its_json(tmp_path):
    src = RESULTS / "cpu-proxy-fast" / "gl-en"
    page, data = build_page(src, tmp_path / "gl-en")
    assert page.stat().st_size > 3_000_000  # plotly.js inlined: nothing fetched at view time
    html_text = page.read_text(encoding="utf-8")
    from plotly.offline import get_plotlyjs

    bundle = get_plotlyjs()
    assert html_text.count(bundle) == 1  # plotly.js inlined once
    ours = html_text.replace(bundle, "")
    assert "src=" not in ours and 'href="http' not in ours and "<link" not in ours
    for name in ("ablation.json", "aggregate.json", "runs.json"):
        assert data["sources"][name] == json.loads((src / name).read_text()), name
    ab = json.loads((src / "ablation.json").read_text())
    cells = ["layernorm_dot", "layernorm_qknorm", "scalenorm_dot", "scalenorm_qknorm"]
    means = trace(figure(data, "ablation-cells"), what="cell means")
    assert means["x"] == cells
    assert means["y"] == [ab["cells"][c]["mean"] for c in cells]
    assert means["error_y"]["array"] == [ab["cells"][c]["sd"] for c in cells]
    for seed in (1, 2, 3):
        t = trace(figure(data, "ablation-cells"), what="seed values", seed=seed)
        assert t["y"] == [ab["cells"][c]["values"][seed - 1] for c in cells]
    eff = trace(figure(data, "ablation-effects"), what="effects")
    assert dict(zip(eff["x"], eff["y"])) == {
        k: v for k, v in ab["effects"].items() if not isinstance(v, dict)
    }
    i = eff["x"].index("paper_comparison")
    assert eff["text"][i] == f"p={ab['significance']['paper_comparison']['p_ar']:.3f}" == "p=0.365"
    agg = json.loads((src / "aggregate.json").read_text())["pairs"]["gl-en"]["systems"]
    bars = trace(figure(data, "bleu-aggregate"), what="concat score, 95% CI")
    assert bars["y"] == [agg[s]["concat"]["score"] for s in bars["x"]]
    assert bars["error_y"]["array"] == pytest.approx(
        [agg[s]["concat"]["ci_high"] - agg[s]["concat"]["score"] for s in bars["x"]], abs=1e-12
    )
    per_seed = trace(figure(data, "bleu-aggregate"), what="per-seed values", system="qknorm_paper")
    assert per_seed["y"] == agg["qknorm_paper"]["bleu_tok"]["values"]
    # the tables (HTML) show the same numbers, rounded
    assert '<td>paper_comparison</td><td class="num">-0.196</td>' in html_text
    assert "6.19 [5.86, 6.52]" in html_text and '<td class="num">0.3654</td>' in html_text
    # and the page says what it lacks on a fresh clone: the run directories (train.log)
    assert any("12 run(s) of runs.json: train.log not found" in n for n in data["notes"])
    assert any("no attention.json here" in n for n in data["notes"])
    g = trace(figure(data, "g-final"), what="qk_norm_g_final", run="qknorm_paper seed1")
    runs = json.loads((src / "runs.json").read_text())["runs"]
    rec = next(r for r in runs if r["system"] == "qknorm_paper" and r["seed"] == 1)
    assert dict(zip(g["x"], g["y"])) == rec["qk_norm_g_final"]


def test_lr_sweep_page_shows_loss_vs_lr_and_max_logit_over_training(tmp_path):
    src = RESULTS / "cpu-proxy-fast-max-update-250" / "gl-en"
    _, data = build_page(src, tmp_path / "gl-en")
    sweep = json.loads((src / "lr-sweep" / "lr_sweep.json").read_text())
    assert data["sources"]["lr-sweep/lr_sweep.json"] == sweep
    # the one-size sweep (lr-sweep/) beside the size axis' per-size sweeps (lr-sweep/dD/)
    ids = [f["id"] for f in data["figures"]]
    for d in ("d128", "d256"):
        assert f"lr-loss-lr-sweep-{d}-lr-sweep" in ids
        assert f"lr-sweep/{d}/lr_sweep.json" in data["sources"]
    loss = figure(data, "lr-loss-lr-sweep-lr-sweep")
    for s in sweep["systems"]:
        t = trace(loss, system=s["system"], what="capped_loss_mean")
        assert t["x"] == sweep["lrs"] and t["y"] == [p["capped_loss_mean"] for p in s["points"]]
    logit = figure(data, "lr-maxlogit-lr-sweep-lr-sweep")
    series = figure(data, "lr-maxlogit-series-lr-sweep-lr-sweep")
    r = next(r for r in sweep["runs"] if r["system"] == "twt" and r["lr"] == 0.1 and r["seed"] == 2)
    t = trace(logit, system="twt", what="max_attn_logit per run")
    assert r["max_attn_logit"] in t["y"] and len(t["y"]) == 12
    t = trace(series, system="twt", lr=0.1, seed=2, what="max_attn_logit_series")
    assert [t["x"], t["y"]] == [[p[0] for p in r["max_attn_logit_series"]],
                                [p[1] for p in r["max_attn_logit_series"]]]  # fmt: skip
    assert t["visible"] == "legendonly" and r["run_dir"] in t["hovertext"][0]


def test_demo_page_shows_bleu_with_ci_and_p_values(tmp_path):
    src = RESULTS / "cpu-proxy" / "gl-en"
    page, data = build_page(src, tmp_path / "gl-en")
    cmp_ = json.loads((src / "demo_compare.json").read_text())
    t = trace(figure(data, "bleu-demo-compare"), what="score, 95% CI")
    assert t["x"] == ["twt", "qknorm_paper"]
    assert t["y"] == [s["score"] for s in cmp_["systems"]]
    assert t["error_y"]["arrayminus"] == pytest.approx(
        [s["score"] - s["ci_low"] for s in cmp_["systems"]], abs=1e-12
    )
    assert "p(bs) 0.0050, p(ar) 0.0128" in t["hovertext"][1]
    # runs.json and demo.json hold the same records: each run is listed once
    assert page.read_text().count("<td>runs.json</td>") == 2
    assert "<td>demo.json</td>" not in page.read_text()


def test_curves_and_g_over_training_come_from_train_log_when_present(tmp_path):
    """A run directory that exists: its train.log gives the training / dev curves and g."""
    from qknorm_tools.trainlog import parse_log, series

    fixture = REPO / "tests" / "fixtures" / "train_qknorm.log"
    rec = {"pair": "gl-en", "system": "qknorm_paper", "seed": 1, "profile": "p",
           "train_log": "run/train.log", "qk_norm_g_final": {"enc0_self": 12.0}}  # fmt: skip
    d = tmp_path / "res"
    (tmp_path / "run").mkdir()
    shutil.copy(fixture, tmp_path / "run" / "train.log")
    d.mkdir()
    (d / "runs.json").write_text(json.dumps({"work_dir": "..", "runs": [rec]}))
    _, data = build_page(d, tmp_path / "res2")  # copied: work_dir .. still points at tmp_path
    records = parse_log(fixture)
    curves = figure(data, "curves")
    t = trace(curves, what="valid loss")
    assert [t["x"], t["y"]] == list(map(list, series(records, "valid", "loss")))
    assert trace(curves, what="train_inner loss")["y"] == series(records, "train_inner", "loss")[1]
    g = figure(data, "g-curves")
    assert {t["meta"]["what"] for t in g["data"]} >= {"qknorm_g_enc0_self"}
    assert not any("train.log not found" in n for n in data["notes"])


def test_report_errors_name_the_input(tmp_path):
    proc = run_without_torch("qknorm_tools.report", tmp_path / "nope")
    assert (
        proc.returncode == 1 and f"results directory '{tmp_path / 'nope'}' not found" in proc.stderr
    )
    (tmp_path / "empty").mkdir()
    proc = run_without_torch("qknorm_tools.report", tmp_path / "empty")
    assert proc.returncode == 1 and "holds none of runs.json" in proc.stderr
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "ablation.json").write_text("{not json")
    proc = run_without_torch("qknorm_tools.report", tmp_path / "bad")
    assert proc.returncode == 1 and "ablation.json" in proc.stderr
    assert not (tmp_path / "bad" / "report.html").exists()
    proc = run_without_torch("qknorm_tools.report", tmp_path / "a", tmp_path / "b", "-o", "x.html")
    assert proc.returncode == 2 and "-o/--output takes one RESULTS_DIR" in proc.stderr


# ----------------------------------------------------------------------------- the browser
def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        if shutil.which(name):
            return shutil.which(name)
    return None


def run_chromium(page: Path, *flags) -> subprocess.CompletedProcess:
    """Headless Chromium on ``file://page``; the timeout only bounds a hang."""
    return subprocess.run(
        [chromium(), "--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
         "--enable-logging=stderr", "--v=0", "--virtual-time-budget=20000",
         "--window-size=1280,2400", *flags, page.resolve().as_uri()],
        capture_output=True, text=True, timeout=600,
    )  # fmt: skip


@pytest.mark.skipif(
    chromium() is None, reason="no chromium (Debian package: apt-get install chromium)"
)
def test_page_renders_in_headless_chromium_without_console_errors(dump, tmp_path):
    """The demo page with an attention viewer (the tiny models' dump) in a real browser."""
    d = tmp_path / "gl-en"
    shutil.copytree(RESULTS / "cpu-proxy" / "gl-en", d)
    (d / "attention.json").write_text(json.dumps(dump))
    page, data = build_page(d, tmp_path / "page")
    assert data["attention"] == dump
    proc = run_chromium(page, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-3000:]
    console = [line for line in proc.stderr.splitlines() if ":CONSOLE" in line]
    assert console == []
    dom = proc.stdout
    assert 'data-errors="[]"' in dom
    assert f'data-rendered="{len(data["figures"])}"' in dom and len(data["figures"]) >= 2
    # every figure and both attention heatmaps drawn by plotly.js
    assert dom.count('class="plot-container plotly"') == len(data["figures"]) + 2
    assert dom.count('class="hm"') >= 2 or dom.count("heatmaplayer") >= 2
    shot = tmp_path / "shot.png"
    proc = run_chromium(page, f"--screenshot={shot}")
    assert proc.returncode == 0 and shot.is_file(), proc.stderr[-3000:]
    assert [line for line in proc.stderr.splitlines() if ":CONSOLE" in line] == []
    from PIL import Image, ImageStat

    img = Image.open(shot).convert("L")
    assert img.size == (1280, 2400)
    stat = ImageStat.Stat(img)
    assert stat.stddev[0] > 20  # not blank: text, tables and plots on white
    assert len(img.getcolors(maxcolors=1 << 16) or range(1 << 16)) > 50
