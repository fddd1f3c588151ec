"""The interactive report (qknorm_tools.report) and the attention dump it shows
(qknorm_model_tools.attention_dump): dumped attention against the module's own weights and an
independent float64 reference, the page's embedded numbers against the results JSON, and the
page in a real headless Chromium (skipped, saying why, where there is none)."""

import html
import json
import math
import re
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
from scipy import stats

from conftest import (
    FAR_BOUND,
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


def test_a_dump_stores_paths_relative_to_the_work_dir(tmp_path, monkeypatch):
    """attention.json's data and checkpoint paths used to be absolute (the committed
    calibration dump named /work/...): below the work dir they are stored relative to it."""
    from qknorm_model_tools.attention_dump import _portable

    monkeypatch.setenv("QKNORM_WORK_DIR", str(tmp_path))
    ckpt = tmp_path / "runs/gl-en/cpu-converge-d128/twt/seed1/checkpoints/checkpoint_best.pt"
    assert (
        _portable(ckpt) == "runs/gl-en/cpu-converge-d128/twt/seed1/checkpoints/checkpoint_best.pt"
    )
    assert _portable(tmp_path / "data/bin/gl-en") == "data/bin/gl-en"
    assert _portable("/elsewhere/bin") == "/elsewhere/bin"


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


@pytest.mark.slow
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


def build_in_place(src: Path, page: Path, *extra) -> dict:
    """Build the page of a results directory where it is (its train.log paths resolve) to
    ``page``, torch and fairseq blocked; the page's data."""
    proc = run_without_torch("qknorm_tools.report", src, "-o", page, *extra)
    assert proc.returncode == 0, proc.stderr
    return page_data(page)


def figure(data: dict, prefix: str) -> dict:
    found = [f for f in data["figures"] if f["id"].startswith(prefix)]
    assert len(found) == 1, [f["id"] for f in data["figures"]]
    return found[0]["spec"]


def trace(spec: dict, **meta) -> dict:
    found = [t for t in spec["data"] if all(t.get("meta", {}).get(k) == v for k, v in meta.items())]
    assert len(found) == 1, meta
    return found[0]


def welch(a, b) -> tuple[float, float, float]:
    """(estimate, se, df) of mean(a) - mean(b), Welch-Satterthwaite, by hand."""
    va, vb = statistics.variance(a) / len(a), statistics.variance(b) / len(b)
    se = math.sqrt(va + vb)
    df = (va + vb) ** 2 / (va**2 / (len(a) - 1) + vb**2 / (len(b) - 1))
    return statistics.mean(a) - statistics.mean(b), se, df


@pytest.mark.slow
def test_ablation_page_shows_the_numbers_of_its_json(tmp_path):
    # a copy whose ablation.json predates seed_tests (as the first committed ones did): the page
    # computes Welch's test from the cells; the committed file's own seed_tests are the next test's
    src = tmp_path / "src"
    shutil.copytree(RESULTS / "cpu-proxy-fast" / "gl-en", src)
    older = json.loads((src / "ablation.json").read_text())
    older.pop("seed_tests", None)
    (src / "ablation.json").write_text(json.dumps(older, indent=2) + "\n")
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
    cell_fig = figure(data, "ablation-cells")
    for c in cells:
        mean = trace(cell_fig, what="cell mean", cell=c)
        assert mean["x"] == [c] and mean["y"] == [ab["cells"][c]["mean"]]
        assert mean["error_y"]["array"] == [ab["cells"][c]["sd"]]
        assert trace(cell_fig, what="seed values", cell=c)["y"] == ab["cells"][c]["values"]
    # the axis shows the differences: not from 0, every seed inside
    lo, hi = cell_fig["layout"]["yaxis"]["range"]
    values = [v for c in cells for v in ab["cells"][c]["values"]]
    assert 0 < lo < min(values) and max(values) < hi < max(values) + 1
    # the effects as a forest plot: estimates, seed-level CIs (computed by the page from the
    # cells, this copy having no seed_tests), both p-values named
    effects = figure(data, "ablation-effects")
    eff = trace(effects, what="effects")
    assert dict(zip(eff["y"], eff["x"])) == {
        k: v for k, v in ab["effects"].items() if not isinstance(v, dict)
    }
    assert "computed by this page" in eff["meta"]["seed_tests"]
    b_, c_ = ab["cells"]["layernorm_qknorm"]["values"], ab["cells"]["scalenorm_dot"]["values"]
    est, se, df = welch(b_, c_)
    q = stats.t.ppf(0.975, df)
    i = eff["y"].index("paper_comparison")
    assert eff["x"][i] == pytest.approx(est, abs=1e-12)
    assert eff["meta"]["ci95"][i] == pytest.approx([est - q * se, est + q * se], abs=1e-9)
    assert eff["error_x"]["array"][i] == pytest.approx(q * se, abs=1e-9)
    p_seeds = stats.ttest_ind(b_, c_, equal_var=False).pvalue
    note = next(a for a in effects["layout"]["annotations"] if a["y"] == "paper_comparison")
    p_ar = ab["significance"]["paper_comparison"]["p_ar"]
    assert note["text"] == (
        f"seed-level (Welch t over seeds): p={p_seeds:.3f}<br>"
        f"sentences (approximate randomization): p={p_ar:.4f}"
    )
    assert note["text"].endswith("p=0.514<br>sentences (approximate randomization): p=0.3654")
    concat = trace(effects, what="delta_concat")
    assert (
        concat["x"][concat["y"].index("paper_comparison")]
        == (ab["significance"]["paper_comparison"]["delta_concat"])
    )
    agg = json.loads((src / "aggregate.json").read_text())["pairs"]["gl-en"]["systems"]
    bleu = figure(data, "bleu-aggregate")
    for s in agg:
        tick = trace(bleu, what="concat score, 95% CI", system=s)
        assert tick["x"] == [s] and tick["y"] == [agg[s]["concat"]["score"]]
        assert tick["error_y"]["array"] == pytest.approx(
            [agg[s]["concat"]["ci_high"] - agg[s]["concat"]["score"]], abs=1e-12
        )
        assert trace(bleu, what="per-seed values", system=s)["y"] == agg[s]["bleu_tok"]["values"]
    lo, hi = bleu["layout"]["yaxis"]["range"]
    assert 0 < lo <= min(min(agg[s]["bleu_tok"]["values"] + [agg[s]["concat"]["ci_low"]])
                         for s in agg)  # fmt: skip
    # the tables (HTML) show the same numbers, rounded
    assert '<td>paper_comparison</td><td class="num">-0.196</td>' in html_text
    assert f'<td class="num">[{est - q * se:+.2f}, {est + q * se:+.2f}]</td>' in html_text
    assert "6.19 [5.86, 6.52]" in html_text and '<td class="num">0.3654</td>' in html_text
    # and the page says what it lacks on a fresh clone: the run directories (train.log)
    assert any("12 run(s) of runs.json: train.log not found" in n for n in data["notes"])
    assert any("no attention.json here" in n for n in data["notes"])
    g = trace(figure(data, "g-final"), what="qk_norm_g_final", run="qknorm_paper seed1")
    runs = json.loads((src / "runs.json").read_text())["runs"]
    rec = next(r for r in runs if r["system"] == "qknorm_paper" and r["seed"] == 1)
    assert dict(zip(g["x"], g["y"])) == rec["qk_norm_g_final"]


@pytest.mark.slow
def test_effects_use_the_seed_tests_of_the_json_and_their_new_keys(tmp_path):
    """Converged 2x2: seed_tests from ablation.json (CI from estimate, se, df); ci95, mde,
    tost and test, where an ablation.json has them, are shown as they are."""
    src = RESULTS / "cpu-converge-d128" / "gl-en"
    ab = json.loads((src / "ablation.json").read_text())
    _, data = build_page(src, tmp_path / "plain")
    eff = trace(figure(data, "ablation-effects"), what="effects")
    assert eff["meta"]["seed_tests"] == "seed_tests of ablation.json"
    for i, k in enumerate(eff["y"]):
        t = ab["seed_tests"][k]
        q = stats.t.ppf(0.975, t["df"])
        assert eff["x"][i] == ab["effects"][k] == t["estimate"]
        # the committed ci95 is the t interval from estimate, se and df
        assert (
            eff["meta"]["ci95"][i]
            == t["ci95"]
            == pytest.approx([t["estimate"] - q * t["se"], t["estimate"] + q * t["se"]], abs=1e-9)
        )
    fig = figure(data, "ablation-effects")
    assert [t["meta"]["what"] for t in fig["data"]] == ["effects", "delta_concat", "mde"]
    mde = trace(fig, what="mde")
    assert sorted(mde["x"]) == sorted(
        x for k in eff["y"] for x in (-ab["seed_tests"][k]["mde"], ab["seed_tests"][k]["mde"])
    )
    # without mde and ci95 (an ablation.json of before them): CI from estimate, se, df; no MDE
    d = tmp_path / "older"
    shutil.copytree(src, d, ignore=shutil.ignore_patterns("records"))
    older = json.loads(json.dumps(ab))
    for t in older["seed_tests"].values():
        for key in ("ci95", "mde", "n_needed", "tost", "test", "n", "sd"):
            t.pop(key)
    (d / "ablation.json").write_text(json.dumps(older))
    _, data = build_page(d, tmp_path / "older-page")
    fig = figure(data, "ablation-effects")
    assert [t["meta"]["what"] for t in fig["data"]] == ["effects", "delta_concat"]
    assert trace(fig, what="effects")["meta"]["ci95"] == eff["meta"]["ci95"]
    d = tmp_path / "extended"
    shutil.copytree(src, d, ignore=shutil.ignore_patterns("records"))
    ext = json.loads(json.dumps(ab))
    for t in ext["seed_tests"].values():
        t.update(ci95=[-1.5, 2.5], mde=1.25, n_needed={"0.5": 40, "0.93": 12},
                 tost={"margin": 0.5, "p": 0.3, "equivalent": False},
                 test="paired t over shared seeds")  # fmt: skip
    (d / "ablation.json").write_text(json.dumps(ext))
    page, data = build_page(d, tmp_path / "extended-page")
    fig = figure(data, "ablation-effects")
    eff = trace(fig, what="effects")
    assert eff["meta"]["ci95"] == [[-1.5, 2.5]] * len(eff["y"])
    assert eff["error_x"]["array"][0] == pytest.approx(2.5 - eff["x"][0], abs=1e-12)
    mde = trace(fig, what="mde")
    assert sorted(set(mde["x"])) == [-1.25, 1.25] and len(mde["x"]) == 2 * len(eff["y"])
    assert "paired t over shared seeds" in fig["layout"]["annotations"][0]["text"]
    assert "TOST, margin ±0.50): p=0.300, not shown equivalent" in eff["hovertext"][0]
    assert "seeds per cell for 80% power: 0.5 BLEU: 40, 0.93 BLEU: 12" in eff["hovertext"][0]
    text = page.read_text()
    assert (
        "<th>MDE (80% power)</th>" in text and "p, seed-level (paired t over shared seeds)" in text
    )


@pytest.mark.slow
def test_lr_sweep_page_shows_loss_vs_lr_and_max_logit_over_training(tmp_path):
    src = RESULTS / "cpu-proxy-fast-max-update-250" / "gl-en"
    data = build_in_place(src, tmp_path / "report.html")  # the sizes' train.log are committed
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
    # the runs' charts: one per records file (model size), never sizes mixed on one axis
    for d, layers in (("d128", "2+2"), ("d256", "3+3"), ("d384", "4+4")):
        recs = json.loads((src / "lr-sweep" / d / "runs.json").read_text())["runs"]
        g = figure(data, f"g-final-lr-sweep-{d}-runs")
        assert f"(lr-sweep/{d}/runs.json, {layers} layers)" in g["layout"]["title"]["text"]
        runs = [t for t in g["data"] if t["meta"]["what"] == "qk_norm_g_final"]
        assert sorted(t["name"] for t in runs) == sorted(
            f"{r['system']} seed{r['seed']}" + "".join(f" {k}={v}" for k, v in r["variant"].items())
            for r in recs if r.get("qk_norm_g_final")
        )  # fmt: skip
        assert {len(t["x"]) for t in runs} == {3 * int(layers[0])}
        g = figure(data, f"g-curves-lr-sweep-{d}-runs")  # g logged once (250 updates): markers
        assert {t["mode"] for t in g["data"]} == {"markers"} and len(g["data"]) > 0
        names = [t["name"] for t in g["data"]]
        assert len(names) == len(set(names))


def test_demo_page_shows_bleu_with_ci_and_p_values(tmp_path):
    src = RESULTS / "cpu-proxy" / "gl-en"
    page, data = build_page(src, tmp_path / "gl-en")
    cmp_ = json.loads((src / "demo_compare.json").read_text())
    fig = figure(data, "bleu-demo-compare")
    for s in cmp_["systems"]:
        t = trace(fig, what="score, 95% CI", system=s["name"])
        assert t["x"] == [s["name"]] and t["y"] == [s["score"]]
        assert t["error_y"]["arrayminus"] == pytest.approx([s["score"] - s["ci_low"]], abs=1e-12)
    assert [t["meta"]["system"] for t in fig["data"]] == ["twt", "qknorm_paper"]
    assert "p(bs) 0.0050, p(ar) 0.0128" in trace(fig, system="qknorm_paper")["hovertext"][0]
    lo, hi = fig["layout"]["yaxis"]["range"]  # around the scores and CIs, not from 0
    ends = [s[k] for s in cmp_["systems"] for k in ("ci_low", "ci_high")]
    assert 0 < lo < min(ends) and max(ends) < hi and hi - lo < 2 * (max(ends) - min(ends))
    # the one dev loss of each run in the records: a marker, not an invisible line
    g = figure(data, "g-final")
    assert all(t["mode"] in ("markers", "lines+markers") for t in g["data"])
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


@pytest.mark.slow
def test_report_errors_name_the_input(tmp_path):
    proc = run_without_torch("qknorm_tools.report", tmp_path / "nope")
    assert (
        proc.returncode == 1 and f"results directory '{tmp_path / 'nope'}' not found" in proc.stderr
    )
    (tmp_path / "empty").mkdir()
    proc = run_without_torch("qknorm_tools.report", tmp_path / "empty")
    assert proc.returncode == 1 and "holds none of runs.json" in proc.stderr
    assert "run directory" not in proc.stderr
    (tmp_path / "empty" / "train.json").write_text("{}")  # a run directory (new-user trial 3)
    proc = run_without_torch("qknorm_tools.report", tmp_path / "empty")
    assert proc.returncode == 1 and proc.stderr.rstrip().endswith(
        "(up to two levels below it); it is a run directory: collect it first (python -m "
        f"qknorm_tools.collect runs --run {tmp_path / 'empty'} --work-dir WORK --out-dir OUT "
        "--keep-unscored), then report OUT"
    ), proc.stderr
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "ablation.json").write_text("{not json")
    proc = run_without_torch("qknorm_tools.report", tmp_path / "bad")
    assert proc.returncode == 1 and "ablation.json" in proc.stderr
    assert not (tmp_path / "bad" / "report.html").exists()
    proc = run_without_torch("qknorm_tools.report", tmp_path / "a", tmp_path / "b", "-o", "x.html")
    assert proc.returncode == 2 and "-o/--output takes one RESULTS_DIR" in proc.stderr


def test_report_says_a_file_given_as_a_directory_is_a_file(tmp_path, capsys):
    """A regular file as RESULTS_DIR (or as --all's RESULTS_ROOT) was 'not found' (issue 37,
    leftover 4): now said to be a file, exit 1 (a file named that is wrong: a data error), and
    nothing written next to it."""
    from qknorm_tools import report

    f = tmp_path / "runs.json"
    f.write_text("{}\n")
    assert report.main([str(f)]) == 1
    assert capsys.readouterr().err == (
        f"error: results directory '{f}' is a file, not a directory\n"
    )
    assert report.main(["--all", str(f)]) == 1
    assert capsys.readouterr().err == f"error: results root '{f}' is a file, not a directory\n"
    assert report.main([str(tmp_path / "nope")]) == 1
    assert capsys.readouterr().err == f"error: results directory '{tmp_path / 'nope'}' not found\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["runs.json"]


def test_report_refuses_a_result_file_of_another_shape_and_a_root_with_no_page(tmp_path, capsys):
    """A new user's trial: an ablation.json holding {"foo": 1} made a page (without the 2x2),
    and ``--all`` over a root of another layout (RESULTS_ROOT/PAIR/, one level short) wrote
    nothing and exited 0. Now each is an error naming the file or root, exit 1."""
    from qknorm_tools import report

    page = tmp_path / "results" / "cpu-converge-d128" / "gl-en"
    page.mkdir(parents=True)
    (page / "ablation.json").write_text('{"foo": 1}\n')
    assert report.main([str(page)]) == 1
    assert capsys.readouterr().err == (
        f"error: '{page}/ablation.json' is not this project's ablation.json (no keys "
        "'metric', 'cells', 'effects'; its writer always writes them)\n"
    )
    assert not (page / "report.html").exists()
    (page / "ablation.json").write_text('{"metric": "bleu", "cells": "x", "effects": 3}\n')
    assert report.main([str(page)]) == 1  # a second trial: a TypeError traceback
    assert capsys.readouterr().err == (
        f"error: '{page}/ablation.json' is not this project's ablation.json (key 'cells' holds a "
        "str, its writer writes a dict)\n"
    )
    short = tmp_path / "short" / "gl-en"
    short.mkdir(parents=True)
    shutil.copy(RESULTS / "cpu-converge-d128" / "gl-en" / "ablation.json", short)
    assert report.main(["--all", str(tmp_path / "short")]) == 1
    err = capsys.readouterr().err.splitlines()
    assert err[-1] == (
        f"error: no page to build under {tmp_path / 'short'}: a page is built for "
        "RESULTS_ROOT/LABEL/PAIR/ holding one of runs.json, demo.json, aggregate.json, "
        "demo_compare.json, ablation.json, lr_sweep.json, attention.json (e.g. "
        "results/cpu-proxy/gl-en/)"
    )


def report_dirs() -> list[Path]:
    """The results directories `make report` builds a page for (``report --all results``)."""
    from qknorm_tools.report_sources import report_dirs as pages_and_skipped

    return pages_and_skipped(RESULTS)[0]


def test_make_report_builds_each_results_dir_it_can_and_names_each_one_it_skips(tmp_path, capsys):
    """`make report` used to skip a results directory holding run records only (e.g.
    results/cpu-fixed-d128/gl-en before its runs are collected) without a word: it runs
    ``report --all results``, which builds a page wherever one of the page's files is and
    prints ``skipped DIR: why`` for every other results/<profile>/<pair>/."""
    from qknorm_tools import report

    # --no-print-directory: under CI's `make test` this make is a sub-make, which prints
    # "Entering directory" lines otherwise
    make = subprocess.run(["make", "--no-print-directory", "-n", "-o", "install", "report"],
                          cwd=REPO, capture_output=True, text=True, timeout=FAR_BOUND)  # fmt: skip
    assert make.stdout.strip().endswith("-m qknorm_tools.report --all results"), make.stdout
    root = tmp_path / "results"
    records = root / "cpu-fixed-d128" / "gl-en" / "records" / "twt" / "seed1"
    records.mkdir(parents=True)
    (records / "record.json").write_text("{}")
    (root / "empty-profile" / "gl-en").mkdir(parents=True)
    page = root / "cpu-converge-d128" / "gl-en"
    page.mkdir(parents=True)
    shutil.copy(RESULTS / "cpu-converge-d128" / "gl-en" / "ablation.json", page)
    assert report.main(["--all", str(root)]) == 0
    err = capsys.readouterr().err.splitlines()
    assert err[0] == (
        f"skipped {root}/cpu-fixed-d128/gl-en: run records only (records/), none of the files "
        "a page is built from (runs.json, demo.json, aggregate.json, demo_compare.json, "
        "ablation.json, lr_sweep.json, attention.json): collect the runs first "
        "(--aggregate-only of the script that trained them)"
    )
    assert err[1].startswith(f"skipped {root}/empty-profile/gl-en: none of runs.json, ")
    assert err[2].startswith(f"wrote {page}/report.html") and len(err) == 3
    assert (page / "report.html").is_file()
    assert not (root / "cpu-fixed-d128" / "gl-en" / "report.html").exists()
    with pytest.raises(SystemExit) as usage:  # neither directories nor --all
        report.main([])
    assert usage.value.code == 2 and "--all RESULTS_ROOT" in capsys.readouterr().err


def test_one_colour_per_system_in_every_figure_and_markers_where_lines_cannot_show():
    from qknorm_tools.report import build_report
    from qknorm_tools.report_style import SYSTEM_COLORS

    systems = sorted(p.stem for p in (REPO / "configs" / "systems").glob("*.toml"))
    assert len(systems) == 12 and set(systems) <= set(SYSTEM_COLORS)
    colours = [SYSTEM_COLORS[s].lower() for s in systems]
    assert len(set(colours)) == len(colours)  # no two systems share a colour
    seen = {}
    for d in report_dirs():
        for f in build_report(d)["figures"]:
            names = [t["name"] for t in f["spec"]["data"]]
            assert len(names) == len(set(names)), (d, f["id"])  # legend entries are unique
            for t in f["spec"]["data"]:
                n = sum(y is not None for y in t["y"])
                assert n >= 1, (d, f["id"], t["name"])
                if n < 2:  # a line needs two points: one point is a marker
                    assert "markers" in t["mode"], (d, f["id"], t["name"])
                system = t.get("meta", {}).get("system")
                if system is None:
                    continue
                seen.setdefault(system, set()).add(f["id"])
                assert t["marker"]["color"] == SYSTEM_COLORS[system], (d, f["id"], t["name"])
                if "lines" in t["mode"]:
                    assert t["line"]["color"] == SYSTEM_COLORS[system], (d, f["id"], t["name"])
    # the LR sweep's systems: qk_layernorm and twt_zloss used to share a colour
    assert {"qk_layernorm", "twt_zloss", "twt_softcap", "twt", "qknorm_paper"} <= set(seen)
    assert SYSTEM_COLORS["qk_layernorm"] != SYSTEM_COLORS["twt_zloss"]


@pytest.mark.slow
def test_attention_is_checked_against_the_dumps_schema(tmp_path):
    from qknorm_model_tools.attention_dump import FORMAT
    from qknorm_tools.report_sources import ATTENTION_FORMAT

    assert ATTENTION_FORMAT == FORMAT
    src = RESULTS / "calibration" / "gl-en" / "attention.json"
    good = json.loads(src.read_text())
    results = RESULTS / "cpu-proxy" / "gl-en"

    def report(att, name="att.json"):
        path = tmp_path / name
        path.write_text(json.dumps(att))
        return run_without_torch("qknorm_tools.report", results, "-o", tmp_path / "p.html",
                                 "--attention", path)  # fmt: skip

    proc = report({"foo": 1})
    assert proc.returncode == 1 and not (tmp_path / "p.html").exists()
    assert f"attention file '{tmp_path / 'att.json'}' is not an attention dump" in proc.stderr
    assert "format: expected 'qknorm-attention/1', got None" in proc.stderr
    (tmp_path / "bytes.json").write_bytes(b"\xff\xfe bad")  # not UTF-8: a message, no traceback
    proc = run_without_torch("qknorm_tools.report", results, "-o", tmp_path / "p.html",
                             "--attention", tmp_path / "bytes.json")  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert f"cannot read attention file '{tmp_path / 'bytes.json'}'" in proc.stderr
    bad = json.loads(json.dumps(good))
    del bad["models"][0]["sentences"][1]["modules"]["dec0_cross"]["probs"]
    proc = report(bad)
    assert proc.returncode == 1
    assert "models[0].sentences[1].modules.dec0_cross.probs: missing" in proc.stderr
    bad = json.loads(json.dumps(good))
    bad["models"][0]["sentences"][0]["modules"]["enc0_self"]["logits"][0].pop()
    proc = report(bad)
    assert (
        proc.returncode == 1
        and ("modules.enc0_self.logits: missing or not a rectangular [head][query][key] list")
        in proc.stderr
    )
    bad = json.loads(json.dumps(good))
    bad["models"][0]["sentences"][0]["tgt_tokens"].append("x")  # decoder rows no longer match
    assert "modules.dec0_self.probs: shape" in report(bad).stderr
    proc = report(good)
    assert proc.returncode == 0, proc.stderr
    assert page_data(tmp_path / "p.html")["attention"] == good
    # an attention.json in the directory is checked too
    d = tmp_path / "dir"
    shutil.copytree(results, d)
    (d / "attention.json").write_text(json.dumps({"format": FORMAT, "models": []}))
    proc = run_without_torch("qknorm_tools.report", d)
    assert proc.returncode == 1 and "attention.json" in proc.stderr
    assert "models: missing or empty" in proc.stderr


@pytest.mark.slow
def test_a_page_of_one_figure_for_a_screenshot(tmp_path):
    src = RESULTS / "cpu-converge-d128" / "gl-en"
    data = build_in_place(src, tmp_path / "e.html", "--figure", "ablation-effects")
    assert [f["id"] for f in data["figures"]] == ["ablation-effects-ablation"]
    body = (tmp_path / "e.html").read_text().split("</head><body>")[1]
    assert "<table" not in body and 'class="att-controls"' not in body and "<h2" not in body
    proc = run_without_torch("qknorm_tools.report", src, "-o", tmp_path / "x.html",
                             "--figure", "nope")  # fmt: skip
    assert proc.returncode == 1 and "no figure of the page" in proc.stderr
    assert "ablation-effects-ablation" in proc.stderr


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


#: the check run in the page: tests/report_visible.js, after the page's own script drew all
VISIBLE_JS = Path(__file__).with_name("report_visible.js")
needs_chromium = pytest.mark.skipif(
    chromium() is None, reason="no chromium (Debian package: apt-get install chromium)"
)


def load_and_check(page: Path, tmp_path: Path) -> tuple[dict, list]:
    """Load a copy of ``page`` with the visibility check in headless Chromium.

    Returns ``(page data, [{"id", "traces": [{"name", "visible", "n", "inside", "marker",
    "line"}], "points", "lines", "heatmaps"}] per plotly chart)``; asserts that the browser
    logged no console message and the page's script recorded no error. Chromium's virtual
    time runs until the page is idle; the check waits for the page's render promise.
    """
    text = page.read_text(encoding="utf-8")
    end = text.rindex("</body>")
    checked = tmp_path / f"checked-{page.name}"
    checked.write_text(text[:end] + f"<script>{VISIBLE_JS.read_text()}</script>" + text[end:])
    proc = run_chromium(checked, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert [line for line in proc.stderr.splitlines() if ":CONSOLE" in line] == []
    dom = proc.stdout
    data = page_data(page)
    assert 'data-errors="[]"' in dom
    assert f'data-rendered="{len(data["figures"])}"' in dom
    found = re.search(r'data-visible="([^"]*)"', dom)
    assert found, "the visibility check did not run"
    return data, json.loads(html.unescape(found.group(1)))


def assert_every_chart_shows_data(charts: list, data: dict, heatmaps: int = 0) -> None:
    """Every figure drawn, with points or lines on screen; every trace with at least one point
    and a marker or a line that can show it; the points of shown traces inside the axes."""
    assert sorted(c["id"] for c in charts) == sorted(
        [f"fig-{f['id']}" for f in data["figures"]] + ["att-a", "att-b"][:heatmaps]
    )
    for c in charts:
        if c["id"].startswith("att-"):
            assert c["heatmaps"] >= 1 and c["traces"][0]["n"] > 0, c["id"]
            continue
        assert c["points"] + c["lines"] > 0, c["id"]
        for t in c["traces"]:
            assert t["n"] >= 1, (c["id"], t["name"])
            assert t["marker"] or t["line"], (c["id"], t["name"])
            if t["visible"] is True:
                assert t["inside"] == t["n"], (c["id"], t["name"])


@needs_chromium
@pytest.mark.slow
def test_page_renders_in_headless_chromium_without_console_errors(dump, tmp_path):
    """The demo page with an attention viewer (the tiny models' dump) in a real browser."""
    d = tmp_path / "gl-en"
    shutil.copytree(RESULTS / "cpu-proxy" / "gl-en", d)
    (d / "attention.json").write_text(json.dumps(dump))
    page, data = build_page(d, tmp_path / "page")
    assert data["attention"] == dump
    data, charts = load_and_check(page, tmp_path)
    assert len(data["figures"]) >= 2
    # every figure and both attention heatmaps drawn by plotly.js, each showing data
    assert_every_chart_shows_data(charts, data, heatmaps=2)
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


@needs_chromium
@pytest.mark.slow
@pytest.mark.parametrize(
    "results_dir", report_dirs(), ids=lambda p: p.relative_to(RESULTS).as_posix()
)
def test_every_committed_results_page_shows_data_in_chromium(results_dir, tmp_path):
    """`make report`'s page of each committed results directory, built where it is (the
    committed train.log of its runs resolve): no console error, every chart shows data."""
    build_in_place(results_dir, tmp_path / "report.html")
    data, charts = load_and_check(tmp_path / "report.html", tmp_path)
    models = (data["attention"] or {}).get("models") or []
    assert_every_chart_shows_data(charts, data, heatmaps=min(2, len(models)))  # left, right
