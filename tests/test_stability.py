"""The stability methods (docs/stability.md) in the full model and in training.

Attention-level references of each new type are in tests/test_attention.py (``VARIANTS`` of
tests/conftest.py); here: the flags build the documented modules, full == incremental decoding
with beam reordering, beam search scores, fp16/bf16 finiteness, usage errors, QK-clip's
rescaling, the z-loss criterion against a float64 reference, and one real fairseq-train run
with soft cap + z-loss + QK-clip decoded through the hub interface.
"""

import math
import re

import pytest
import torch

from conftest import (
    PLUGIN_DIR,
    TINY,
    assert_beam_scores_equal_full_forward,
    assert_incremental_equals_full_with_reorders,
    build_model,
    make,
    run_cli,
    tiny_model,
    tiny_training,
)

# PreNorm + FixNorm (+ LayerNorm) test models of each new flag, 2 heads of 8
STABILITY_FLAGS = {
    "lp": ["--qk-norm", "--qk-norm-type", "lp", "--qk-norm-p", "4", "--qk-norm-scale", "5"],
    "rmsnorm_full": ["--qk-norm", "--qk-norm-type", "rmsnorm_full"],
    "rmsnorm_zc": ["--qk-norm", "--qk-norm-type", "rmsnorm_zc"],
    "softcap": ["--attn-logit-softcap", "0.5"],
    "l2_softcap": ["--qk-norm", "--qk-norm-scale", "5", "--attn-logit-softcap", "2"],
    "nap": ["--attn-normalization", "nap"],
    "qk_clip": ["--qk-clip", "0.5"],
}


def _model(toy_task, variant):
    qk = "--qk-norm" in STABILITY_FLAGS[variant]
    arch = "transformer_qknorm_paper_proxy" if qk else "transformer_twt_proxy"
    return build_model(toy_task, arch, TINY + STABILITY_FLAGS[variant])[0]


def _randomize(model):
    # non-trivial norm weights, NAP gains and biases (their initial values hide bugs)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for m in model.attention_modules().values():
            for p in (m.q_norm, m.k_norm):
                if p is not None:
                    p.weight.copy_(torch.rand(p.weight.shape, generator=g) + 0.5)
            if m.nap_gain is not None:
                m.nap_gain.copy_(torch.rand(m.nap_gain.shape, generator=g) + 0.5)
                m.nap_bias.copy_(torch.rand(m.nap_bias.shape, generator=g) - 0.5)
    return model


def test_flags_build_the_documented_modules(toy_task):
    m = _model(toy_task, "lp").attention_modules()["dec0_cross"]
    assert m.qk_norm_type == "lp" and m.qk_norm_p == 4.0 and float(m.qk_norm_g.detach()) == 5.0
    m = _model(toy_task, "rmsnorm_full").attention_modules()["enc0_self"]
    assert type(m.q_norm) is torch.nn.RMSNorm and m.q_norm.weight.shape == (16,)  # d_model
    m = _model(toy_task, "rmsnorm_zc").attention_modules()["dec1_self"]
    assert m.q_norm.weight.shape == (8,) and torch.equal(m.q_norm.weight.detach(), torch.zeros(8))
    m = _model(toy_task, "l2_softcap").attention_modules()["dec1_cross"]
    assert m.attn_logit_softcap == 2.0 and m.qk_norm_type == "l2"
    m = _model(toy_task, "nap").attention_modules()["enc1_self"]
    assert m.attn_normalization == "nap" and torch.equal(m.nap_gain.detach(), torch.ones(2))
    assert all(x.qk_clip == 0.5 for x in _model(toy_task, "qk_clip").attention_modules().values())


@pytest.mark.parametrize("variant", sorted(STABILITY_FLAGS))
def test_incremental_decoding_with_beam_reorders_equals_full(toy_task, variant):
    """Beam-shared encoder keys, the cache reordered after every step: each step equals the
    full forward of the reordered prefixes."""
    model = _randomize(_model(toy_task, variant)).eval()
    orders = [torch.tensor([1, 0, 3, 3])]
    assert_incremental_equals_full_with_reorders(model, toy_task.target_dictionary, orders)


@pytest.mark.parametrize("variant", sorted(STABILITY_FLAGS))
def test_beam_search_scores_equal_full_forward(toy_task, variant):
    model = _randomize(_model(toy_task, variant)).eval()
    assert_beam_scores_equal_full_forward(model, toy_task.target_dictionary, 2)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("variant", sorted(STABILITY_FLAGS))
@pytest.mark.slow
def test_low_precision_padded_batch_is_finite(toy_task, variant, dtype):
    model = _randomize(_model(toy_task, variant)).eval().to(dtype)
    with torch.no_grad():  # large activations: dot-product logits far from 1
        for m in model.attention_modules().values():
            m.q_proj.weight.mul_(30.0)
    d = toy_task.target_dictionary
    src = torch.randint(d.nspecial, len(d), (2, 6))
    src[1, :3] = d.pad()
    src[:, -1] = d.eos()
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=(src != d.pad()).sum(1))
        out, _ = model.decoder(torch.full((2, 3), d.eos()), encoder_out=enc)
    assert out.dtype == dtype and torch.isfinite(out.float()).all()


def test_softcap_bounds_the_logged_max_logit(toy_task):
    """--attn-stats-interval reports the logits as they enter the softmax: after capping."""
    model = _model(toy_task, "softcap").eval()
    with torch.no_grad():
        for m in model.attention_modules().values():
            m.q_proj.weight.mul_(100.0)  # uncapped logits >> 0.5
            m.record_stats = True
    d = toy_task.target_dictionary
    src = torch.randint(d.nspecial, len(d), (2, 6))
    with torch.no_grad():
        model(src, torch.full((2,), 6), torch.randint(d.nspecial, len(d), (2, 4)))
    for name, m in model.attention_modules().items():
        assert 0.4 < float(m.last_stats["max_logit"]) <= 0.5, name  # tanh saturates at 1


# ------------------------------------------------------------------------------ usage errors
BAD_FLAGS = [
    (
        ["--qk-norm", "--qk-norm-type", "lp", "--qk-norm-scale", "5"],
        "--qk-norm-type lp needs --qk-norm-p P",
    ),
    (["--qk-norm-p", "3"], "--qk-norm-p 3 would be ignored: it needs --qk-norm --qk-norm-type lp"),
    (
        ["--qk-norm", "--qk-norm-type", "lp", "--qk-norm-p", "0.5", "--qk-norm-scale", "5"],
        "--qk-norm-p must be finite and >= 1, got 0.5",
    ),
    (["--attn-logit-softcap", "0"], "--attn-logit-softcap must be finite and > 0, got 0.0"),
    (["--qk-clip", "-1"], "--qk-clip must be finite and > 0, got -1.0"),
    (
        ["--qk-norm", "--qk-norm-scale", "5", "--attn-normalization", "nap"],
        "--attn-normalization nap with --qk-norm-type l2: NAP standardizes",
    ),
    (
        ["--attn-normalization", "nap", "--attn-logit-softcap", "5"],
        "--attn-logit-softcap with --attn-normalization nap: NAP has no softmax to cap",
    ),
    (
        ["--qk-norm", "--qk-norm-type", "layernorm", "--qk-clip", "100"],
        "--qk-clip with --qk-norm-type layernorm: QK-clip rescales W_q and W_k",
    ),
    (
        ["--qk-norm", "--qk-norm-type", "rmsnorm_zc", "--qk-norm-scale", "5"],
        "--qk-norm-scale only applies to --qk-norm-type l2 (QKNorm's scale g); "
        "--qk-norm-type rmsnorm_zc has no g",
    ),
]


@pytest.mark.parametrize("flags, message", BAD_FLAGS)
def test_bad_stability_flags_are_usage_errors(toy_task, capsys, flags, message):
    with pytest.raises(SystemExit) as exc:
        build_model(toy_task, "transformer_qknorm", TINY + flags)
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert ": error: " + message in err and "Traceback" not in err


def test_qk_clip_trains_only_with_the_plugin_task(toy_task):
    """Built (and decoded) with any task, but a training forward outside the plugin task, whose
    optimizer_step applies the clip, is refused."""
    model = _model(toy_task, "qk_clip").train()
    d = toy_task.target_dictionary
    src = torch.randint(d.nspecial, len(d), (2, 5))
    prev = torch.randint(d.nspecial, len(d), (2, 4))
    with pytest.raises(RuntimeError, match="--qk-clip needs --task translation_word_dropout"):
        model(src, torch.full((2,), 5), prev)
    model.qk_clip_hooked = True  # what TranslationWordDropoutTask.train_step sets
    model(src, torch.full((2,), 5), prev)
    assert model.apply_qk_clip() > 0  # every head's max logit passed 0.5 (random init)


# ----------------------------------------------------------------------------------- QK-clip
def test_qk_clip_rescales_exactly_the_heads_over_the_threshold():
    """Kimi K2's per-head QK-clip: after qk_clip_, the same input gives max logit TAU in every
    head that exceeded it, and the other heads' logits are unchanged."""
    mha = make("off", self_attention=True, qk_clip=1.0)
    with torch.no_grad():
        mha.q_proj.weight[:4].mul_(20.0)  # head 0: large logits
        mha.q_proj.weight[4:8].mul_(0.01)  # head 1: tiny logits
    x = torch.randn(6, 2, 16, generator=torch.Generator().manual_seed(0))

    def head_max():
        logits, _ = mha(x, x, x, before_softmax=True)  # (B * H, T, S)
        return logits.view(2, 4, 6, 6).amax(dim=(0, 2, 3))

    mha.train()
    before = head_max().detach()
    torch.testing.assert_close(mha.qk_clip_max_logit, before)  # recorded in training
    mha(x, x, x, need_weights=False)  # a second forward: running max (same input here)
    over = before > 1.0
    assert bool(over[0]) and not bool(over[1])
    assert mha.qk_clip_() == int(over.sum())
    assert mha.qk_clip_max_logit is None  # reset after the clip
    mha.eval()  # not recorded outside training
    after = head_max().detach()
    assert mha.qk_clip_max_logit is None
    torch.testing.assert_close(after[over], torch.ones(int(over.sum())), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(after[~over], before[~over])
    assert mha.qk_clip_() == 0  # nothing recorded since


# ------------------------------------------------------------------------------------ z-loss
def _criterion(toy_task, z_loss):
    from fairseq_qknorm.criterions.label_smoothed_cross_entropy_zloss import (
        LabelSmoothedCrossEntropyZLossCriterion,
    )

    return LabelSmoothedCrossEntropyZLossCriterion(toy_task, False, 0.1, z_loss=z_loss)


@pytest.mark.slow
def test_z_loss_adds_w_times_sum_of_squared_log_z(toy_task):
    """loss(W) - loss(0) = W * sum_t (log Z_t)^2 over non-pad targets, log Z by a float64 loop."""
    model = build_model(toy_task, "transformer_twt_proxy", TINY)[0].eval()
    d = toy_task.target_dictionary
    g = torch.Generator().manual_seed(4)
    target = torch.randint(d.nspecial, len(d), (3, 5), generator=g)
    target[2, 3:] = d.pad()
    sample = {
        "net_input": {
            "src_tokens": torch.randint(d.nspecial, len(d), (3, 6), generator=g),
            "src_lengths": torch.full((3,), 6),
            "prev_output_tokens": torch.randint(d.nspecial, len(d), (3, 5), generator=g),
        },
        "target": target,
        "ntokens": int((target != d.pad()).sum()),
    }
    w = 0.01
    with torch.no_grad():
        loss0, _, log0 = _criterion(toy_task, 0.0)(model, sample)
        loss_w, size, log_w = _criterion(toy_task, w)(model, sample)
        logits = model(**sample["net_input"])[0].double()  # (B, T, V)
    expected, log_z_sum = 0.0, 0.0
    for b in range(3):
        for t in range(5):
            if target[b, t] == d.pad():
                continue
            row = logits[b, t]
            m = float(row.max())
            log_z = m + math.log(sum(math.exp(float(v) - m) for v in row))
            expected += w * log_z**2
            log_z_sum += log_z
    assert float(loss_w - loss0) == pytest.approx(expected, rel=1e-4)
    assert float(log_w["z_loss"]) == pytest.approx(expected, rel=1e-4)
    assert float(log_w["log_z"]) == pytest.approx(log_z_sum, rel=1e-4)
    assert float(log_w["nll_loss"]) == pytest.approx(float(log0["nll_loss"]), rel=1e-6)
    assert size == sample["ntokens"] == 13


def test_z_loss_must_be_finite_and_non_negative(toy_task):
    with pytest.raises(ValueError, match="--z-loss must be finite and >= 0"):
        _criterion(toy_task, -1e-4)


# ----------------------------------------------------------------- end to end: train, decode
@pytest.mark.slow
def test_fairseq_train_with_softcap_zloss_and_qk_clip_then_hub_translates(toy_data, tmp_path):
    """One real fairseq-train run (4 updates): soft cap + z-loss criterion + QK-clip at a
    threshold every head passes (so it fires and is logged), then the hub decodes it."""
    _, bin_dir = toy_data
    save = tmp_path / "ckpt"
    training = tiny_training(lr="1e-3", max_tokens="500")
    training[training.index("label_smoothed_cross_entropy")] += "_zloss"
    proc = run_cli(
        ["fairseq-train", bin_dir, "--user-dir", PLUGIN_DIR,
         "--task", "translation_word_dropout", "--arch", "transformer_twt",
         *tiny_model(dropout=None), *training, "--z-loss", "1e-3",
         "--attn-logit-softcap", "30", "--qk-clip", "1e-3",
         "--max-update", "4", "--required-batch-size-multiple", "1", "--no-epoch-checkpoints",
         "--log-format", "simple", "--log-interval", "1", "--save-dir", save]
    )  # fmt: skip
    log = proc.stdout + proc.stderr
    assert re.search(r"num_updates[ =]4\b", log)
    assert re.search(r"\| z_loss [0-9.]+ ", log) and re.search(r"\| log_z -?[0-9.]+ ", log)
    # heads rescaled per update: at most 2 layers x (enc self, dec self, dec cross) x 2 heads
    clipped = [int(n) for n in re.findall(r"train_inner .* qk_clip=(\d+),", log)]
    assert len(clipped) == 4 and all(1 <= n <= 12 for n in clipped), log[-3000:]
    from fairseq_qknorm.models.transformer_qknorm import TransformerQKNormModel

    hub = TransformerQKNormModel.from_pretrained(
        str(save), checkpoint_file="checkpoint_last.pt", data_name_or_path=str(bin_dir)
    ).eval()
    out = hub.translate(["w1 w2 w3", "w7 w8"], beam=2)
    assert len(out) == 2 and all(isinstance(o, str) and o for o in out)
    cross = hub.models[0].decoder.layers[0].encoder_attn
    assert cross.attn_logit_softcap == 30.0 and cross.qk_clip == 1e-3


# --------------------------------------------------------------------------- named systems
NEW_SYSTEMS = {
    # system: (arch family, what the built model has)
    "twt_softcap": ("transformer_twt_softcap", dict(attn_logit_softcap=50.0, qk_norm=False)),
    "twt_zloss": ("transformer_twt", dict(attn_logit_softcap=None, qk_norm=False)),
    "qk_rmsnorm_full": ("transformer_qk_rmsnorm_full", dict(qk_norm_type="rmsnorm_full")),
    "qk_rmsnorm_zc": ("transformer_qk_rmsnorm_zc", dict(qk_norm_type="rmsnorm_zc")),
}


@pytest.mark.parametrize("system", sorted(NEW_SYSTEMS))
def test_new_systems_train_the_described_model(system, toy_data, tmp_path):
    """train.sh's dry-run plan of each new system: its arch (and for twt_zloss the z-loss criterion
    with W = 1e-4) on the command line, and that command builds the described model."""
    from fairseq import options, tasks
    from test_grid import _toy_argv, dry_run_cmd

    family, attrs = NEW_SYSTEMS[system]
    cmd = dry_run_cmd("gl-en", system, "cpu-proxy", tmp_path)
    assert cmd[cmd.index("--arch") + 1] == family + "_proxy"
    criterion = cmd[cmd.index("--criterion") + 1]
    if system == "twt_zloss":
        assert criterion == "label_smoothed_cross_entropy_zloss"
        assert cmd[cmd.index("--z-loss") + 1] == "1e-4"
    else:
        assert criterion == "label_smoothed_cross_entropy" and "--z-loss" not in cmd
    args = options.parse_args_and_arch(options.get_training_parser(), _toy_argv(cmd, toy_data[1]))
    task = tasks.setup_task(args)
    model = task.build_model(args)
    for m in model.attention_modules().values():
        for name, value in attrs.items():
            assert getattr(m, name) == value, (name, getattr(m, name))
    crit = task.build_criterion(args)
    assert getattr(crit, "z_loss", 0.0) == (1e-4 if system == "twt_zloss" else 0.0)
