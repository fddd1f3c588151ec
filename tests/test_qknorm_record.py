"""g0 and L in a file the model writes (issue 21, item 2): ``SAVE_DIR/qknorm.json``.

The model writes what it was built with when fairseq builds it with a ``--save-dir``; the tools
read g0 from there (``qknorm_tools.records.qk_norm_g0_of_run``), the log line only for runs made
before the file.
"""

from __future__ import annotations

import json
import math

import pytest

from qknorm_tools import records
from qknorm_tools.textio import ResultsError

from conftest import TINY, build_model


def test_the_model_writes_g0_and_L_into_its_save_dir(toy_task, tmp_path):
    save = tmp_path / "checkpoints"
    save.mkdir()
    flags = [*TINY, "--qk-norm-length", "92", "--save-dir", str(save)]
    model, _ = build_model(toy_task, "transformer_qknorm_paper", flags)
    rec = json.loads((save / "qknorm.json").read_text())
    g0 = math.log2(92 * 92 - 92)  # Henry et al. 2020, Eq. 4
    assert rec["qk_norm_g0"] == pytest.approx(g0, abs=1e-12)
    assert rec["qk_norm_length"] == 92 and rec["qk_norm_type"] == "l2"
    assert rec["g0_source"] == "qk_norm_length"
    assert rec["qk_norm_scale_per_head"] is False and rec["qk_norm_freeze_scale"] is False
    # TINY: 2 + 2 layers; the names the attention statistics log their g under
    names = ["enc0_self", "enc1_self", "dec0_self", "dec0_cross", "dec1_self", "dec1_cross"]
    assert rec["modules"] == names
    # what the file says is what the model holds
    for name, mha in model.attention_modules().items():
        assert float(mha.qk_norm_g.detach()) == pytest.approx(rec["qk_norm_g0"], rel=1e-6), name
    # built again (as fairseq-generate does from the checkpoint): the same record, not rewritten
    before = (save / "qknorm.json").stat().st_mtime_ns
    build_model(toy_task, "transformer_qknorm_paper", flags)
    assert (save / "qknorm.json").stat().st_mtime_ns == before
    # another g0 is written over it
    build_model(toy_task, "transformer_qknorm_paper", [*TINY, "--qk-norm-scale", "12.5",
                                                       "--save-dir", str(save)])  # fmt: skip
    rec = json.loads((save / "qknorm.json").read_text())
    got = (rec["qk_norm_g0"], rec["qk_norm_length"], rec["g0_source"])
    assert got == (12.5, None, "qk_norm_scale")


def test_no_file_without_qknorm_or_without_a_save_dir(toy_task, tmp_path):
    save = tmp_path / "checkpoints"
    save.mkdir()
    build_model(toy_task, "transformer_twt", [*TINY, "--save-dir", str(save)])
    assert not (save / "qknorm.json").exists()  # dot-product attention: nothing to record
    build_model(toy_task, "transformer_qk_layernorm", [*TINY, "--save-dir", str(save)])
    rec = json.loads((save / "qknorm.json").read_text())
    assert rec["qk_norm_type"] == "layernorm" and rec["qk_norm_g0"] is None
    missing = tmp_path / "not-made"
    build_model(toy_task, "transformer_qknorm_paper", [*TINY, "--qk-norm-length", "92",
                                                       "--save-dir", str(missing)])  # fmt: skip
    assert not missing.exists()  # never creates a directory (a checkpoint's old save dir)


LOG_G0 = (
    "2026-12-01 | INFO | fairseq_qknorm.models | QKNorm g0 = 13.028489 (qk_norm_length L = 92)\n"
)


def test_tools_read_g0_from_the_file_and_the_log_only_for_old_runs(tmp_path):
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "train.log").write_text(LOG_G0)  # the log says 13.028489, the file 13.5
    assert records.qk_norm_g0_of_run(run, LOG_G0) == 13.028489  # an old run: the log line
    (run / "checkpoints/qknorm.json").write_text(json.dumps({"qk_norm_g0": 13.5}))
    assert records.qk_norm_g0_of_run(run, LOG_G0) == 13.5
    rec = records.write_train_json(run, {"pair": "gl-en", "system": "qknorm_paper", "seed": 1})
    assert rec.qk_norm_g0 == 13.5
    assert json.loads((run / "train.json").read_text())["qk_norm_g0"] == 13.5
    (run / "checkpoints/qknorm.json").write_text(json.dumps({"qk_norm_g0": None}))
    assert records.qk_norm_g0_of_run(run, LOG_G0) is None  # the file decides: no l2 QKNorm
    (run / "checkpoints/qknorm.json").write_text(json.dumps({"qk_norm_g0": "13"}))
    with pytest.raises(ResultsError, match="qk_norm_g0 is '13', expected a number or null"):
        records.qk_norm_g0_of_run(run, LOG_G0)
