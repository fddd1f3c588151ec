"""The interactive report (qknorm_tools.report) and the attention dump it shows
(fairseq_qknorm.attention_dump): dumped attention against the module's own weights and an
independent float64 reference, the page's embedded numbers against the results JSON, and the
page in a real headless Chromium (skipped, saying why, where there is none)."""

import json
import math
import sys

import pytest

from conftest import (
    PLUGIN_DIR,
    head_norm_reference,
    run_cli,
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
    proc = run_cli([sys.executable, "-m", "fairseq_qknorm.attention_dump", *checkpoints.values(),
                    "--data", bin_dir, "--sentences", ",".join(map(str, SENTENCES)),
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

    from fairseq_qknorm.attention_dump import load_model

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


def test_dump_refuses_an_index_past_the_end_naming_the_size(checkpoints, toy_data, tmp_path):
    _, bin_dir = toy_data
    proc = run_cli([sys.executable, "-m", "fairseq_qknorm.attention_dump", checkpoints["twt"],
                    "--data", bin_dir, "--sentences", "0,21", "-o", tmp_path / "a.json"],
                   check=False)  # fmt: skip
    assert proc.returncode == 1
    assert "sentence(s) [21] out of range" in proc.stderr and "has 21 sentences" in proc.stderr
    assert not (tmp_path / "a.json").exists()
