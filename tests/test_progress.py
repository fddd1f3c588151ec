"""Progress lines a person can read (issue 37, qknorm_tools.progress): the update count and the
ETA first, the model's attention statistics left to train.log and TensorBoard; an update count
as soon as fairseq logs one (a budget below the log interval logs every ``budget`` updates; a
resumed run's checkpoint line gives the count before the first progress line)."""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from qknorm_tools import commands, committed, config, progress, trainlog

from conftest import (
    FAR_BOUND,
    REPO,
    run_progress_filter,
)

#: a progress line of the demo's QKNorm system as fairseq logs it (3+3 layers: 9 attention
#: modules, each with entropy, max logit and g; the model logs them before fairseq's own keys)
MODULES = [f"enc{i}_self" for i in range(3)] + [
    f"dec{i}_{k}" for i in range(3) for k in ("self", "cross")
]
STATS = ", ".join(
    f"{prefix}{m}={value}"
    for m in MODULES
    for prefix, value in (("attn_entropy_", 2.345), ("attn_maxlogit_", 12.345), ("qknorm_g_", 12.6))
)
DEMO_LINE = (
    f"2026-12-01 20:01:00 | INFO | train_inner | epoch 002:    130 / 370 {STATS}, loss=7.912, "
    "nll_loss=7.01, ppl=128.9, wps=1234.5, ups=0.98, wpb=1260.3, bsz=52.1, num_updates=500, "
    "lr=0.000707, gnorm=1.234, train_wall=51, gb_free=None, wall=512"
)


def test_a_progress_line_starts_with_updates_and_eta_and_leaves_out_attention_statistics():
    assert len(DEMO_LINE) > 1000  # the demo's terminal: about 1,400 characters before the ETA
    buf = io.BytesIO()
    progress.TrainEta(1200).filter([DEMO_LINE.encode() + b"\n"] * 2, buf, heartbeat=0, quiet=True)
    said, first, second = buf.getvalue().decode().splitlines()
    assert said == progress.STATS_LEFT_OUT  # once, not on every line
    # fairseq's ups (0.98 updates/s): 700 updates left = 714 s -> 0:12
    assert first == (
        "2026-12-01 20:01:00 | 500/1200 updates, ETA 0:12 | epoch 002: 130 / 370 | loss=7.912, "
        "nll_loss=7.01, ppl=128.9, wps=1234.5, ups=0.98, wpb=1260.3, bsz=52.1, lr=0.000707, "
        "gnorm=1.234, train_wall=51, gb_free=None, wall=512"
    )
    assert second == first
    assert not any(p in first for p in trainlog.ATTENTION_STAT_PREFIXES)


def test_a_line_without_attention_statistics_says_nothing_of_them():
    buf = io.BytesIO()
    line = "2026-12-01 20:01:00 | INFO | train_inner | epoch 001: 5 / 10 loss=9, num_updates=5"
    progress.TrainEta(10).filter([line.encode() + b"\n"], buf, heartbeat=0)
    assert buf.getvalue().decode().splitlines() == [
        "2026-12-01 20:01:00 | 5/10 updates, ETA ? | epoch 001: 5 / 10 | loss=9"
    ]


def test_epoch_and_validation_lines_leave_out_attention_statistics_too():
    """The new-user trial: the `| valid |` and `| train |` lines of train.sh's terminal opened
    with about 18 attention statistics (734 characters) before the loss."""
    stats = " | ".join(
        f"{prefix}{m} {value}"
        for m in MODULES
        for prefix, value in (
            ("attn_entropy_", 2.345),
            ("attn_maxlogit_", 12.3),
            ("qknorm_g_", 12.6),
        )
    )
    valid = (
        f"2026-12-01 20:05:00 | INFO | valid | epoch 001 | valid on 'valid' subset | {stats} | "
        "loss 8.5 | nll_loss 8.1 | ppl 274.4 | wps 5000 | wpb 1200 | bsz 40 | num_updates 45"
    )
    train = f"2026-12-01 20:05:01 | INFO | train | epoch 001 | {stats} | loss 8.9 | num_updates 45"
    buf = io.BytesIO()
    progress.TrainEta(90).filter([valid.encode() + b"\n", train.encode() + b"\n"], buf, heartbeat=0)
    said, v, t = buf.getvalue().decode().splitlines()
    assert said == progress.STATS_LEFT_OUT
    assert v == (
        "2026-12-01 20:05:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 8.5 | "
        "nll_loss 8.1 | ppl 274.4 | wps 5000 | wpb 1200 | bsz 40 | num_updates 45"
    )
    assert t == "2026-12-01 20:05:01 | INFO | train | epoch 001 | loss 8.9 | num_updates 45"
    assert progress.without_attention_stats("2026-12-01 | INFO | valid | loss 8.5") is None


def test_the_tools_leave_out_exactly_the_statistics_the_model_logs():
    """The model's STAT_PREFIXES (fairseq_qknorm, which the tools do not import) are the tools'."""
    from fairseq_qknorm.models.transformer_qknorm import STAT_PREFIXES

    assert set(trainlog.ATTENTION_STAT_PREFIXES) == set(STAT_PREFIXES)


def test_a_resumed_run_shows_its_update_count_before_the_first_progress_line():
    """fairseq's checkpoint line (``@ N updates``) is the first update count a resumed run
    logs; the heartbeat before the first progress line says it."""
    lines, text, t = run_progress_filter(progress.TrainEta(100), heartbeat=0.2)
    lines.put(
        b"2026-12-01 20:00:00 | INFO | fairseq.trainer | Loaded checkpoint "
        b"runs/x/checkpoint_last.pt (epoch 1 @ 40 updates)\n"
    )
    lines.put(b"2026-12-01 20:00:01 | INFO | fairseq_cli.train | Start iterating over samples\n")
    t0 = time.time()
    while text().count("| training for ") < 2:  # the event: two lines; a far bound only
        assert time.time() - t0 < FAR_BOUND, text()
        time.sleep(0.05)
    lines.put(None)
    t.join(FAR_BOUND)
    beats = [x for x in text().splitlines() if x.startswith("| training for ")]
    assert all(
        x.endswith(
            "s, at 40/100 updates by fairseq's last count; the ETA comes with its next progress "
            "line (every --log-interval updates)"
        )
        for x in beats
    ), beats


def _train_argv(max_update: int) -> list:
    return commands.train_argv(
        config.load_pair("gl-en"), config.load_system("twt"), config.load_profile("paper"),
        repo=REPO, data="BIN", run=Path("RUN"), label=f"paper-max-update-{max_update}",
        arch="transformer_twt_small", seed=1, max_update=max_update, max_tokens=4096,
        remove_bpe="subword_nmt",
    )  # fmt: skip


def test_a_budget_below_the_log_interval_logs_every_budget_updates():
    """The short paper try (--max-update 20) printed no progress line in 6.7 minutes: fairseq
    logs one every 50 updates. Below 50 the interval is the budget; a committed record made
    with 50 still belongs (the interval is no setting of the training)."""

    def interval(argv):
        return argv[argv.index("--log-interval") + 1]

    assert interval(_train_argv(20)) == "20"
    assert interval(_train_argv(1)) == "1"
    assert interval(_train_argv(1200)) == interval(_train_argv(50)) == "50"
    assert interval(_train_argv(0)) == "50"  # no update limit (the epoch limit stops it)
    short, before = (
        " ".join(_train_argv(20)),
        " ".join(_train_argv(20)).replace("--log-interval 20", "--log-interval 50"),
    )
    assert (
        committed.settings_difference(
            committed.command_settings(short), committed.command_settings(before)
        )
        is None
    )


TB = "| INFO | fairseq.tasks.text_to_speech | Please install tensorboardX: pip install tensorboardX"


LOG = f"""2026-12-01 20:37:15 {TB}
/venv/hydra/experimental/initialize.py:45: Hydra14MigrationWarning:
The version_base parameter is not specified.
  self.delegate = real_initialize(
sys:1: UserWarning:
'config' is validated against ConfigStore schema with the same name.
2026-12-01 20:37:25 | INFO | fairseq_cli.train | {{'_name': None, 'common': {{'seed': 1}}}}
2026-12-01 20:37:26 | INFO | fairseq.tasks.translation | [gl] dictionary: 80 types
2026-12-01 20:37:27 | INFO | fairseq_cli.train | TransformerQKNormModel(
  (encoder): TransformerQKNormEncoder(
  )
)
2026-12-01 20:37:27 | INFO | fairseq_cli.train | task: TranslationWordDropoutTask
/venv/fairseq/tasks/fairseq_task.py:531: FutureWarning: `torch.cuda.amp.autocast` is deprecated.
  with torch.cuda.amp.autocast(enabled=(isinstance(optimizer, AMPOptimizer))):
2026-12-01 20:38:12 | INFO | train_inner | epoch 001:      2 / 10 loss=8.0, num_updates=2
Traceback (most recent call last):
  File "x.py", line 1, in <module>
FloatingPointError: Minimum loss scale reached
"""


def test_terminal_leaves_out_fairseqs_noise_not_errors():
    from qknorm_tools import progress

    buf = io.BytesIO()
    lines = [x.encode() + b"\n" for x in LOG.splitlines()]
    progress.TrainEta(0, 1).filter(lines, buf, heartbeat=0, quiet=True)
    assert buf.getvalue().decode().splitlines() == [
        "(Python warnings of fairseq's dependencies: not shown, see train.log)",
        "2026-12-01 20:37:25 | INFO | fairseq_cli.train | (the full configuration: see train.log)",
        "2026-12-01 20:37:26 | INFO | fairseq.tasks.translation | [gl] dictionary: 80 types",
        "2026-12-01 20:37:27 | INFO | fairseq_cli.train | (the model's structure: see train.log)",
        "2026-12-01 20:37:27 | INFO | fairseq_cli.train | task: TranslationWordDropoutTask",
        "2026-12-01 20:38:12 | 2/10 updates, ETA ? (at most: max-epoch 1) | epoch 001: 2 / 10 | "
        "loss=8.0",
        "Traceback (most recent call last):",
        '  File "x.py", line 1, in <module>',
        "FloatingPointError: Minimum loss scale reached",
    ]
    buf = io.BytesIO()  # without quiet (train.log's copy): every line
    progress.TrainEta(0, 1).filter(lines, buf, heartbeat=0)
    assert len(buf.getvalue().splitlines()) == len(lines)


def test_in_process_fairseq_log_leaves_out_its_noise_not_its_warnings():
    """The translate helper's terminal (progress.TerminalLogHandler): fairseq's INFO records and
    its dependencies' Python warnings are left out as in train.sh's terminal; warnings and
    errors of fairseq are shown in its log format."""
    import logging
    import re
    import warnings

    from qknorm_tools import progress

    buf = io.StringIO()
    handler = progress.TerminalLogHandler("--verbose shows them", stream=buf)
    log = logging.getLogger("fairseq.test_terminal")
    log.propagate, py_log = False, logging.getLogger("py.warnings")
    log.addHandler(handler)
    py_log.addHandler(handler)
    # order-independent: a test before may have run quiet_fairseq_logging in this process
    # (bf16_auto), leaving Python warnings captured (captureWarnings(True) is then a no-op)
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        logging.captureWarnings(False)
        try:
            log.setLevel(logging.INFO)
            logging.captureWarnings(True)
            log.info("loading archive file /x")
            logging.getLogger("fairseq.tasks.text_to_speech").handle(
                log.makeRecord("fairseq.tasks.text_to_speech", logging.WARNING, "f", 1,
                               "Please install tensorboardX: pip install tensorboardX", (), None)
            )  # fmt: skip
            warnings.warn_explicit(
                "`torch.cuda.amp.autocast` is deprecated", FutureWarning, "x.py", 3
            )
            warnings.warn_explicit("another one", UserWarning, "y.py", 4)
            log.warning("the checkpoint has no %s", "optimizer state")
            try:
                raise ValueError("bad")
            except ValueError:
                log.exception("cannot load")
        finally:
            logging.captureWarnings(False)
            log.removeHandler(handler)
            py_log.removeHandler(handler)
    lines = [
        re.sub(r"^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d", "T", x) for x in buf.getvalue().splitlines()
    ]
    assert lines[:3] == [
        "(Python warnings of fairseq's dependencies: not shown, --verbose shows them)",
        "T | WARNING | fairseq.test_terminal | the checkpoint has no optimizer state",
        "T | ERROR | fairseq.test_terminal | cannot load",
    ]
    assert lines[3] == "Traceback (most recent call last):" and lines[-1] == "ValueError: bad"


@pytest.mark.slow
def test_a_line_before_the_first_progress_line():
    """Before fairseq's first train_inner line (every --log-interval updates) the terminal says
    training runs; it stops at the first progress line."""
    import re
    import time

    from qknorm_tools import progress

    lines, text, t = run_progress_filter(progress.TrainEta(100), heartbeat=0.2)
    lines.put(b"2026-12-01 20:00:00 | INFO | fairseq_cli.train | Start iterating over samples\n")
    t0 = time.time()
    while text().count("| training for ") < 2:  # the event: two lines; a far bound only
        assert time.time() - t0 < FAR_BOUND, text()
        time.sleep(0.05)
    lines.put(b"2026-12-01 20:01:00 | INFO | train_inner | epoch 001:     50 / 100 loss=9.0, "
              b"ups=1.0, num_updates=50, wall=60\n")  # fmt: skip
    while "ETA" not in text():
        assert time.time() - t0 < FAR_BOUND, text()
        time.sleep(0.05)
    shown = text().count("| training for ")
    time.sleep(0.5)  # more than two heartbeats: none may come after the progress line
    lines.put(None)
    t.join(FAR_BOUND)
    assert text().count("| training for ") == shown
    got = text().splitlines()
    assert all(
        re.fullmatch(
            r"\| training for \d+ s, no progress line yet: fairseq prints one every "
            r"--log-interval updates, the ETA comes with the first",
            x,
        )
        for x in got[1 : shown + 1]
    ), got
    assert got[-1].startswith("2026-12-01 20:01:00 | 50/100 updates, ETA 0:01 | epoch 001: 50")
