"""Tests of the run collector: qknorm_tools.{trainlog,records,collect} (run directories ->
RunRecords -> runs.json and tables), and that the tools run without torch or fairseq."""

import json
import subprocess
import sys

import pytest

from qknorm_tools import collect, records, trainlog
from qknorm_tools.records import RunRecord
from qknorm_tools.scoring import score_lines

from conftest import FIXTURES, cli_env, out, run_without_torch

# valid records as fairseq logs them: best_loss = min(best so far, loss), and the model's
# qknorm_g_<module> on every validation
LOG = """\
2026-11-30 10:00:00 | INFO | fairseq_qknorm.models.transformer_qknorm | QKNorm g0 = 13.028489 (qk_norm_length L = 92)
2026-11-30 10:00:05 | INFO | train_inner | epoch 001:     50 / 468 loss=9.1, num_updates=50, qknorm_g_enc0_self=13.02
2026-11-30 10:01:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 7.5 | num_updates 100 | best_loss 7.5 | qknorm_g_enc0_self 12.9 | qknorm_g_dec0_self 12.8 | qknorm_g_dec0_cross 13.0
2026-11-30 10:02:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 7.2 | num_updates 200 | best_loss 7.2 | qknorm_g_enc0_self 12.7 | qknorm_g_dec0_self 12.6 | qknorm_g_dec0_cross 12.9
2026-11-30 10:03:00 | INFO | valid | epoch 001 | valid on 'valid' subset | loss 7.4 | num_updates 300 | best_loss 7.2 | qknorm_g_enc0_self 12.5 | qknorm_g_dec0_self 12.4 | qknorm_g_dec0_cross 12.8
2026-11-30 10:03:01 | INFO | train | epoch 001 | loss 8.0 | num_updates 300
"""  # noqa: E501


# ----------------------------------------------------------------------------- trainlog
def test_g0_is_read_from_the_models_log_line():
    assert trainlog.qk_norm_g0(LOG) == 13.028489
    assert (
        trainlog.qk_norm_g0("x | INFO | fairseq_qknorm | QKNorm g0 = 12.5 (qk_norm_scale)") == 12.5
    )
    # the model's earlier wording
    assert (
        trainlog.qk_norm_g0("| INFO | fairseq_qknorm.models | QKNorm: g0 = 7.0444 (L = 12)")
        == 7.0444
    )
    # a build logged twice (resume): the last one
    assert trainlog.qk_norm_g0(LOG + "| QKNorm g0 = 11.0 (qk_norm_scale)\n") == 11.0
    assert trainlog.qk_norm_g0("no such line\n") is None
    assert trainlog.last_num_updates(LOG) == 300 and trainlog.last_num_updates("") == 0


def test_final_g_is_the_best_checkpoints():
    recs = trainlog.parse_log_text(LOG)
    best = trainlog.best_valid_record(recs)
    assert best["metrics"]["num_updates"] == 200  # loss 7.2 = best_loss; 300 is worse
    assert trainlog.final_qk_norm_g(recs) == {
        "enc0_self": 12.7,
        "dec0_self": 12.6,
        "dec0_cross": 12.9,
    }
    assert trainlog.final_qk_norm_g(trainlog.parse_log(FIXTURES / "train_baseline.log")) == {}
    # a tie goes to the later record, as fairseq's is_better (<=) saves it as best
    tie = LOG.replace("loss 7.4 | num_updates 300", "loss 7.2 | num_updates 300")
    assert trainlog.best_valid_record(trainlog.parse_log_text(tie))["metrics"]["num_updates"] == 300


# ----------------------------------------------------------------------------- records
def _finished_run(work, pair="gl-en", system="qknorm_paper", seed=1, log=LOG, profile="cpu-proxy"):
    """A run directory as scripts/train.sh and scripts/evaluate.sh leave it."""
    run = work / "runs" / pair / profile / system / f"seed{seed}"
    run.mkdir(parents=True)
    (run / "train.log").write_text(log, encoding="utf-8")
    (run / "wall_seconds").write_text("125\n")
    ident = {
        "pair": pair,
        "profile": profile,
        "system": system,
        "seed": seed,
        "arch": f"transformer_{system}_proxy",
        "qk_norm_length": 92,
        "paper_qk_norm_length": 79,
    }
    records.write_train_json(run, ident)
    refs = [f"the cat number {i} sat on the mat ." for i in range(10)]
    hyps = [r.replace("mat", "hat") if i % 2 else r for i, r in enumerate(refs)]
    (run / "test.hyp").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    (run / "test.score.json").write_text(json.dumps(score_lines(hyps, refs)), encoding="utf-8")
    ref = work / "data" / "raw" / pair / "test.en"
    ref.parent.mkdir(parents=True, exist_ok=True)
    ref.write_text("\n".join(refs) + "\n", encoding="utf-8")
    return run


def test_train_json_and_read_run(tmp_path):
    run = _finished_run(tmp_path)
    train = json.loads((run / "train.json").read_text())
    assert train == {
        "pair": "gl-en",
        "profile": "cpu-proxy",
        "system": "qknorm_paper",
        "seed": 1,
        "variant": {},
        "arch": "transformer_qknorm_paper_proxy",
        "precision": None,  # not given (train.sh passes fp32 or bf16); tables show fp32
        "updates": 300,
        "wall_seconds": 125,
        "cpu_seconds": None,  # no cpu_seconds file: made without scripts/train.sh
        "qk_norm_length": 92,
        "paper_qk_norm_length": 79,
        "qk_norm_g0": 13.028489,
        "data_id": None,  # no data_identity.json: made without scripts/train.sh
    }
    rec = records.read_run(run)
    assert isinstance(rec, RunRecord)
    assert rec.key == ("gl-en", "cpu-proxy", "qknorm_paper", 1, ())
    assert rec.qk_norm_g_final == {"enc0_self": 12.7, "dec0_self": 12.6, "dec0_cross": 12.9}
    assert rec.qk_norm_g_final_mean == pytest.approx((12.7 + 12.6 + 12.9) / 3)
    score = json.loads((run / "test.score.json").read_text())
    assert (rec.bleu_tok, rec.bleu, rec.chrf, rec.n_lines) == (
        score["bleu_tok"],
        score["bleu"],
        score["chrf"],
        10,
    )
    assert rec.hyp_path == str(run / "test.hyp") and rec.train_log == str(run / "train.log")
    # a model that logged no g0 (dot-product systems): None, not a recomputed value
    run2 = _finished_run(tmp_path, system="twt", log=LOG.splitlines(True)[1])
    assert records.read_run(run2).qk_norm_g0 is None
    (run2 / "test.hyp").unlink()
    assert records.run_status(run2) == ["test.hyp"]
    with pytest.raises(records.ResultsError, match="not a finished run: no test.hyp"):
        records.read_run(run2)


def test_record_round_trip_relative_paths_and_variants(tmp_path):
    rec = RunRecord(
        pair="gl-en",
        system="twt",
        seed=2,
        profile="cpu-proxy",
        variant={"lr": "1e-3"},
        bleu_tok=7.5,
        hyp_path=str(tmp_path / "runs/x/test.hyp"),
        ref_path="/elsewhere/test.en",
        extra={"provenance": {"commit": "abc"}},
    )
    assert rec.name == "twt[lr=1e-3]"
    d = rec.to_json(str(tmp_path))
    assert d["hyp_path"] == "runs/x/test.hyp" and d["ref_path"] == "/elsewhere/test.en"
    assert d["provenance"] == {"commit": "abc"}  # unknown fields survive a round trip
    (tmp_path / "runs/x").mkdir(parents=True)
    (tmp_path / "runs/x/test.hyp").write_text("a\n")
    back = RunRecord.from_json(d, str(tmp_path))
    assert back == rec
    records.save_records([rec], tmp_path / "results/cpu-proxy/gl-en/runs.json", work_dir=tmp_path)
    doc = json.loads((tmp_path / "results/cpu-proxy/gl-en/runs.json").read_text())
    assert doc["work_dir"] == "../../.." and doc["runs"][0]["hyp_path"] == "runs/x/test.hyp"
    loaded = records.load_records(tmp_path / "results/cpu-proxy/gl-en/runs.json")
    assert loaded == [rec]
    # one identity twice is an error naming both files
    records.save_records([rec], tmp_path / "other/runs.json", work_dir=tmp_path)
    both = tmp_path / "both"
    both.mkdir()
    for name in ("a.json", "b.json"):
        (both / name).write_text((tmp_path / "other/runs.json").read_text())
    with pytest.raises(
        records.ResultsError, match="duplicate record pair='gl-en' system='twt\\[lr=1e-3\\]'"
    ):
        records.load_records(both)
    with pytest.raises(records.ResultsError, match="lacks fields"):
        RunRecord.from_json({"pair": "gl-en", "seed": 1})


# ----------------------------------------------------------------------------- collect CLI
def test_collect_runs_writes_records_and_tables(tmp_path, capsys):
    work = tmp_path
    runs = [
        _finished_run(work, system=s, seed=seed) for s in ("twt", "qknorm_paper") for seed in (1, 2)
    ]
    unfinished = work / "runs/gl-en/cpu-proxy/prenorm_layernorm/seed1"
    unfinished.mkdir(parents=True)
    out_dir = work / "results/cpu-proxy/gl-en"
    args = [
        "runs",
        "--work-dir",
        str(work),
        "--out-dir",
        str(out_dir),
        "--ref",
        f"gl-en={work}/data/raw/gl-en/test.en",
        "--baseline",
        "twt",
    ]
    args += sum((["--run", str(r)] for r in [*runs, unfinished]), [])
    assert collect.main(args + ["--require-all"]) == 1
    assert "unfinished runs" in capsys.readouterr().err
    assert collect.main(args + ["--runs-table", "demo", "--aggregate", "--no-significance"]) == 0
    err = capsys.readouterr().err
    assert f"not finished, left out: {unfinished} (no train.json, test.score.json, test.hyp)" in err
    doc = json.loads((out_dir / "runs.json").read_text())
    assert len(doc["runs"]) == 4 and doc["runs"][0]["ref_path"] == "data/raw/gl-en/test.en"
    assert (out_dir / "demo.md").read_text().count(
        "| qknorm_paper | transformer_qknorm_paper_proxy |"
    ) == 2
    assert "13.03 (92)" in (out_dir / "demo.md").read_text()  # g0 as logged, with the data's L
    agg = json.loads((out_dir / "aggregate.json").read_text())
    assert agg["pairs"]["gl-en"]["systems"]["qknorm_paper"]["n_seeds"] == 2
    # the records feed the evaluate CLI too
    from qknorm_tools import evaluate

    assert (
        evaluate.main(
            [
                "aggregate",
                "--results",
                str(out_dir / "runs.json"),
                "--baseline",
                "twt",
                "--out-dir",
                str(tmp_path / "agg2"),
                "--n-bootstrap",
                "10",
                "--n-ar",
                "10",
            ]
        )
        == 0
    )
    concat = json.loads((tmp_path / "agg2/aggregate.json").read_text())["pairs"]["gl-en"]
    assert concat["n_lines_concat"] == 20  # 2 seeds x 10 lines, read through the relative paths


def test_a_data_dir_that_is_a_symlink_keeps_reference_paths_in_the_checkout(tmp_path):
    """data/ linked to a shared corpus copy (usual on clusters): runs.json names the reference
    as data/raw/PAIR/test.en, the path in the checkout, not the link's target."""
    work, shared = tmp_path / "clone", tmp_path / "shared"
    run = _finished_run(work)
    (work / "data").rename(shared)
    (work / "data").symlink_to(shared)
    out_dir = work / "results/cpu-proxy/gl-en"
    args = ["runs", "--work-dir", str(work), "--out-dir", str(out_dir), "--run", str(run)]
    args += ["--ref", f"gl-en={work}/data/raw/gl-en/test.en", "--no-significance"]
    assert collect.main(args) == 0
    (rec,) = json.loads((out_dir / "runs.json").read_text())["runs"]
    assert rec["ref_path"] == "data/raw/gl-en/test.en"


def test_references_of_the_aggregate_are_named(tmp_path, capsys):
    """--ref of a pair no run has is a warning naming it; a pair without --ref, or whose reference
    file is missing, skips the paired tests with a warning naming what is missing; a reference
    of another length is an error naming the reference file (not 'reference')."""
    runs = [_finished_run(tmp_path, system=s) for s in ("twt", "qknorm_paper")]
    ref = tmp_path / "data/raw/gl-en/test.en"
    out_dir = tmp_path / "results"
    args = ["runs", "--work-dir", str(tmp_path), "--out-dir", str(out_dir), "--aggregate"]
    args += ["--baseline", "twt", *sum((["--run", str(r)] for r in runs), [])]
    assert collect.main([*args, "--ref", f"gl-enn={ref}"]) == 0
    err = capsys.readouterr().err
    assert "warning: --ref gl-enn=...: no run of pair 'gl-enn' is given (pairs: gl-en)" in err
    assert "gl-en: no reference (--ref gl-en=PATH): paired tests skipped" in err
    missing = tmp_path / "no/test.en"
    assert collect.main([*args, "--ref", f"gl-en={missing}"]) == 0
    assert (
        f"gl-en: reference file {missing} not found: paired tests skipped"
        in capsys.readouterr().err
    )
    short = tmp_path / "short.en"
    short.write_text("".join(ref.read_text().splitlines(keepends=True)[:9]))
    assert collect.main([*args, "--ref", f"gl-en={short}"]) == 1
    err = capsys.readouterr().err.splitlines()[-1]
    assert err.startswith("error: ") and str(short) in err and "10" in err and "9" in err, err


def test_no_finished_run_leaves_the_earlier_runs_json_as_it_was(tmp_path, capsys):
    """A collection that finds no finished run (runs deleted, a wrong --run) is an error, and the
    results of an earlier collection stay: an empty runs.json never replaces them."""
    out_dir = tmp_path / "results"
    out_dir.mkdir()
    earlier = '{"runs": [{"pair": "gl-en"}]}'
    (out_dir / "runs.json").write_text(earlier)
    unfinished = tmp_path / "runs/gl-en/cpu-proxy/twt/seed1"
    unfinished.mkdir(parents=True)
    args = [
        "runs",
        "--work-dir",
        str(tmp_path),
        "--out-dir",
        str(out_dir),
        "--run",
        str(unfinished),
    ]
    assert collect.main(args) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: no finished run among the 1 given (each needs train.json, test.score.json and "
        "test.hyp, or a committed record, of which there is none): nothing to report; "
        f"{out_dir}/runs.json left as it was"
    )
    assert (out_dir / "runs.json").read_text() == earlier
    # with the records looked for (--records-root): the message names where (a work dir
    # elsewhere than the repository, whose records are not there: issue 37's last rough edge)
    assert collect.main([*args, "--records-root", str(tmp_path / "results/cpu-proxy")]) == 1
    last = capsys.readouterr().err.splitlines()[-1]
    assert last.startswith(
        "error: no finished run among the 1 given (each needs train.json, test.score.json and "
        f"test.hyp, or a committed record in {tmp_path}/results/cpu-proxy/gl-en/records, of "
        "which there is none): nothing to report"
    )


def test_a_required_system_without_a_finished_run_refuses_the_collection_writing_nothing(
    tmp_path, capsys
):
    """``--require-systems`` (scripts/ablation.sh's 2x2, through reproduce.sh): a system with no
    finished run or committed record among the runs given refuses the collection before any
    write; ``ablation.sh --aggregate-only`` of cpu-fixed-d128 (records of twt and qknorm_paper
    only) used to write runs.json and aggregate.* and then fail."""
    runs = [_finished_run(tmp_path, system=s) for s in ("twt", "qknorm_paper")]
    without = ("prenorm_fixnorm_layernorm", "scalenorm_qknorm")
    missing = [tmp_path / f"runs/gl-en/cpu-proxy/{s}/seed1" for s in without]
    out_dir = tmp_path / "results/cpu-proxy/gl-en"
    args = ["runs", "--work-dir", str(tmp_path), "--out-dir", str(out_dir), "--aggregate",
            "--baseline", "twt", "--ref", f"gl-en={tmp_path}/data/raw/gl-en/test.en",
            "--records-root", str(tmp_path / "results/cpu-proxy"), "--write-records"]  # fmt: skip
    args += [x for r in [*runs, *missing] for x in ("--run", str(r))]
    systems = "prenorm_fixnorm_layernorm,qknorm_paper,twt,scalenorm_qknorm"
    assert collect.main([*args, "--require-systems", systems]) == 1
    assert capsys.readouterr().err.splitlines()[-1] == (
        "error: gl-en/prenorm_fixnorm_layernorm, gl-en/scalenorm_qknorm: no finished run or "
        "committed record among the 4 runs given (each needs train.json, test.score.json and "
        f"test.hyp, or a committed record); every system of {systems} needs one: nothing was "
        "written"
    )
    assert not (tmp_path / "results").exists()  # no runs.json, table or committed record
    # the systems that have runs are collected when they are all that is asked for
    assert collect.main([*args, "--require-systems", "twt,qknorm_paper"]) == 0
    assert len(json.loads((out_dir / "runs.json").read_text())["runs"]) == 2


def test_collect_train_json_cli(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / "train.log").write_text(LOG)
    (run / "wall_seconds").write_text("60\n")
    p = subprocess.run(
        [
            sys.executable,
            "-m",
            "qknorm_tools.collect",
            "train-json",
            str(run),
            "--pair",
            "gl-en",
            "--profile",
            "cpu-proxy",
            "--system",
            "qknorm_paper",
            "--seed",
            "1",
            "--arch",
            "a",
            "--qk-norm-length",
            "92",
        ],
        env=cli_env(),
        capture_output=True,
        text=True,
    )
    assert p.returncode == 0, out(p)
    assert (
        p.stdout.strip()
        == "300 updates, 60 s of training, QKNorm g0 = 13.0285 (logged by the model)"
    )
    assert json.loads((run / "train.json").read_text())["qk_norm_g0"] == 13.028489


# ----------------------------------------------------------------------------- no torch/fairseq
@pytest.mark.slow
def test_tools_run_without_torch_or_fairseq(tmp_path):
    """Scoring, collecting and plotting with torch, fairseq and the plugin unimportable."""
    p = run_without_torch(
        "qknorm_tools.evaluate",
        "score",
        "--hyp",
        FIXTURES / "hyp_small.tok.en",
        "--ref",
        FIXTURES / "ref_small.tok.en",
        "--json",
    )
    assert p.returncode == 0, out(p)
    assert round(json.loads(p.stdout)["bleu_tok"], 2) == 47.09  # test_evaluate: hand-computed BLEU
    run = _finished_run(tmp_path)
    p = run_without_torch(
        "qknorm_tools.collect",
        "runs",
        "--run",
        run,
        "--work-dir",
        tmp_path,
        "--out-dir",
        tmp_path / "res",
        "--runs-table",
        "demo",
        "--baseline",
        "twt",
    )
    assert p.returncode == 0 and (tmp_path / "res/demo.md").is_file(), out(p)
    p = run_without_torch(
        "qknorm_tools.plots", "g", "--log", f"qk={run / 'train.log'}", "--out", tmp_path / "g.png"
    )
    assert p.returncode == 0 and (tmp_path / "g.png").stat().st_size > 1000, out(p)
    assert "tensorboardX" not in p.stderr
