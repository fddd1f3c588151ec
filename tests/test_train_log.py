"""What a real fairseq-train log of the plugin shows (a tiny run through the CLI): no
"detected shared parameter" lines for parameters that are None, attention statistics only in the
intervals where they were recorded (never ``None``), and the ETA that scripts/train.sh adds to
progress lines on the terminal (qknorm_tools.progress)."""

from __future__ import annotations

import re

import pytest

from qknorm_tools import progress

from conftest import PLUGIN_DIR, build_model, run_cli, tiny_model

TINY = [
    *tiny_model(layers=2, heads=None, dropout=None),
    "--optimizer", "adam", "--lr", "1e-3", "--max-tokens", "800", "--max-update", "12",
    "--criterion", "label_smoothed_cross_entropy", "--seed", "1",
    "--required-batch-size-multiple", "1", "--num-workers", "0", "--no-save",
    "--log-format", "simple", "--log-interval", "2", "--attn-stats-interval", "4",
    "--validate-interval-updates", "6",
]  # fmt: skip
ARCHS = {
    "twt": ["--arch", "transformer_twt_proxy"],
    "qknorm": ["--arch", "transformer_qknorm_paper_proxy", "--qk-norm-length", "12"],
    "qk_layernorm": [
        "--arch", "transformer_prenorm_fixnorm_layernorm_proxy", "--qk-norm",
        "--qk-norm-type", "layernorm",
    ],
}  # fmt: skip
STAT = re.compile(r"(attn_entropy|attn_maxlogit|qknorm_g)_\w+")


@pytest.fixture(scope="module", params=sorted(ARCHS))
def train_log(request, toy_data, tmp_path_factory):
    _, bin_dir = toy_data
    save = tmp_path_factory.mktemp("ck")
    p = run_cli(
        ["fairseq-train", bin_dir, "--user-dir", PLUGIN_DIR, *ARCHS[request.param], *TINY,
         "--save-dir", save]
    )  # fmt: skip
    return request.param, (p.stdout + p.stderr).splitlines()


@pytest.mark.slow
def test_no_shared_parameter_lines_for_none_parameters(train_log):
    _, lines = train_log
    shared = [x.split("detected shared parameter: ")[1] for x in lines if "detected shared" in x]
    # the real sharing (all embeddings tied), nothing else: qk_norm_g, biases are None
    assert shared == [
        "encoder.embed_tokens.weight <- decoder.embed_tokens.weight",
        "encoder.embed_tokens.weight <- decoder.output_projection.weight",
    ]


@pytest.mark.slow
def test_attention_statistics_only_where_recorded(train_log):
    arch, lines = train_log
    inner = [x for x in lines if "| train_inner |" in x]
    assert len(inner) == 6 and not [x for x in inner if "None" in x]
    # the statistics come first, fairseq's keys in their order after them, on every line
    tails = {re.sub(r"^.*?(loss=)", r"\1", x) for x in inner}
    assert all(re.match(r"loss=[^,]+, nll_loss=[^,]+, ppl=", t) for t in tails), tails
    with_stats = [x for x in inner if STAT.search(x)]
    assert with_stats and len(with_stats) < len(inner)  # recorded every 4 updates, logged every 2
    for line in with_stats:
        values = re.findall(r"(?:attn_entropy|attn_maxlogit|qknorm_g)_\w+=([^,]+)", line)
        assert values and all(float(v) == float(v) for v in values)  # numbers, never None
        assert ("qknorm_g_enc0_self=" in line) == (arch == "qknorm")
    valid = [x for x in lines if "| valid |" in x and "valid on 'valid' subset" in x]
    assert valid and all("attn_entropy_enc0_self " in x for x in valid)


@pytest.mark.parametrize("arch", sorted(ARCHS))
def test_none_parameters_are_plain_attributes(toy_task, arch):
    model, _ = build_model(toy_task, ARCHS[arch][1], ARCHS[arch][2:] + TINY[:16])
    assert [n for m in model.modules() for n, p in m._parameters.items() if p is None] == []
    assert model.decoder.output_projection.bias is None
    attn = model.encoder.layers[0].self_attn
    assert (attn.qk_norm_g is None) == (arch != "qknorm")
    keys = set(model.state_dict())
    assert all(not k.endswith(".bias") or "output_projection" not in k for k in keys)
    assert any(k.endswith("qk_norm_g") for k in keys) == (arch == "qknorm")


def test_unrecorded_meters_are_dropped_and_come_back():
    from fairseq import metrics

    from fairseq_qknorm.models.transformer_qknorm import STAT_PRIORITY, drop_unrecorded_stat_meters

    def log_stats(entropy):
        metrics.log_scalar("attn_entropy_enc0_self", entropy, round=3, priority=STAT_PRIORITY)
        metrics.log_scalar("qknorm_g_enc0_self", 12.0, weight=0, round=3, priority=STAT_PRIORITY)

    with metrics.aggregate(new_root=True) as agg:
        log_stats(1.5)
        metrics.log_scalar("loss", 2.0)
        drop_unrecorded_stat_meters()  # recorded: kept
        assert agg.get_smoothed_values() == {
            "loss": 2.0,
            "attn_entropy_enc0_self": 1.5,
            "qknorm_g_enc0_self": 12.0,
        }
        agg.reset()  # what fairseq does after each train_inner line
        drop_unrecorded_stat_meters()
        assert list(agg.get_smoothed_values()) == ["loss"]  # loss is fairseq's: untouched
        assert [key for _, _, key in agg.priorities] == ["loss"]
        metrics.log_scalar("loss", 3.0)
        log_stats(1.25)  # added again: the line keeps its order, statistics first
        assert list(agg.get_smoothed_values().items()) == [
            ("attn_entropy_enc0_self", 1.25),
            ("qknorm_g_enc0_self", 12.0),
            ("loss", 3.0),
        ]
        assert agg.state_dict()  # still serializable into a checkpoint


# ------------------------------------------------------------------------------ ETA
def _inner(epoch, i, n, **kv):
    body = ", ".join(f"{k}={v}" for k, v in kv.items())
    return f"2026-12-01 00:00:00 | INFO | train_inner | epoch {epoch:03d}: {i:6d} / {n} {body}"


def test_train_eta_from_the_logged_rate():
    eta = progress.TrainEta(max_update=100)
    # first line: fairseq's own ups (0.5 updates/s): 90 updates left = 180 s
    assert eta.eta(_inner(1, 10, 50, loss=5, ups=0.5, num_updates=10, wall=20)) == (
        "10/100 updates, ETA 0:03"
    )
    # then the rate between lines on fairseq's wall clock: 10 updates in 10 s -> 80 s left
    assert eta.eta(_inner(1, 20, 50, loss=5, ups=9.0, num_updates=20, wall=30)) == (
        "20/100 updates, ETA 0:02"
    )
    assert eta.eta("2026 | INFO | valid | epoch 001 | loss 5 | num_updates 20") is None
    # epoch limit: 2 epochs of 50 batches, one update per batch -> 100 updates
    by_epoch = progress.TrainEta(max_update=0, max_epoch=2)
    assert by_epoch.eta(_inner(1, 10, 50, ups=1.0, num_updates=10, wall=10)) == (
        "10/100 updates, ETA 0:02 (at most: max-epoch 2)"
    )
    with pytest.raises(ValueError):
        progress.TrainEta(0, 0)


def test_train_filter_passes_every_line_through(tmp_path):
    import io

    lines = [
        b"2026 | INFO | fairseq_cli.train | model: x\n",
        _inner(1, 5, 10, ups=1.0, num_updates=5, wall=5).encode() + b"\n",
        b"\xff\xfe not utf-8\n",
    ]
    buf = io.BytesIO()
    progress.TrainEta(10).filter(lines, buf)
    got = buf.getvalue().split(b"\n")
    assert got[0] + b"\n" == lines[0] and got[2] + b"\n" == lines[2]
    assert (
        got[1]
        == b"2026-12-01 00:00:00 | 5/10 updates, ETA 0:01 | epoch 001: 5 / 10 | ups=1.0, wall=5"
    )


def test_durations_and_decoding_progress():
    assert [progress.format_duration(s) for s in (0, 1, 60, 61, 3600, 5400)] == [
        "0:00",
        "0:01",
        "0:01",
        "0:02",
        "1:00",
        "1:30",
    ]
    # 300 of 1112 in 60 s: (1112 - 300) / 5 per s = 162 s left
    assert progress.decode_progress_line(300, 1112, 60.0) == (
        "decoded 300/1112 sentences (26%), ETA 0:03"
    )
    assert progress.decode_progress_line(0, 10, 5.0) == "decoded 0/10 sentences (0%), ETA ?"
