"""qknorm_tools.run_spec: the typed Run and the rules that make it (label, directory, arch,
precision, the scripts' integer options), against values written out by hand."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from qknorm_tools import config, run_spec
from qknorm_tools.config_schema import ConfigError, UsageError

UINT = "a non-negative integer (no leading zeros, below 10^9)"


def _run(work: Path, **kw) -> run_spec.Run:
    kw.setdefault("seed", "1")
    names = (
        kw.pop("pair", "gl-en"),
        kw.pop("system", "qknorm_paper"),
        kw.pop("profile", "cpu-proxy"),
    )
    return run_spec.build_run(*names, work=work, environ={}, **kw)


def test_label_directory_and_arch_of_a_run(tmp_path):
    r = _run(tmp_path)
    assert (r.label, r.arch, r.variant) == ("cpu-proxy", "transformer_qknorm_paper_proxy", {})
    assert r.dir == tmp_path / "runs/gl-en/cpu-proxy/qknorm_paper/seed1"
    r = _run(tmp_path, seed="3", max_update="50", lr="0.0030", size="d384")
    assert (r.label, r.arch, r.lr, r.lr_override) == (
        "cpu-proxy-max-update-50-d384",
        "transformer_qknorm_paper_d384",
        "3e-3",
        "3e-3",
    )
    assert r.dir == tmp_path / "runs/gl-en/cpu-proxy-max-update-50-d384/qknorm_paper/seed3-lr3e-3"
    assert run_spec.with_precision(r, "bf16").dir.name == "seed3-lr3e-3-bf16"
    assert r.variant == {"lr": "3e-3"}


def test_the_profiles_own_budget_and_lr_are_the_profiles_run(tmp_path):
    own = config.load_profile("cpu-proxy")
    lr = own.optim_flags[own.optim_flags.index("--lr") + 1]
    r = _run(tmp_path, max_update=str(own.max_update), lr=lr)
    assert (r.label, r.lr_override, r.dir.name) == ("cpu-proxy", "", "seed1")


def test_arch_at_the_papers_size_follows_the_pair(tmp_path):
    assert _run(tmp_path, profile="paper").arch == "transformer_qknorm_paper_small"  # 4+4
    assert _run(tmp_path, pair="sk-en", profile="paper").arch == "transformer_qknorm_paper"


def test_train_cmd_says_the_precision_only_where_the_profile_would_not(tmp_path):
    r = _run(tmp_path, profile="paper", seed="2", max_update="100")
    assert (
        r.train_cmd({})
        == "scripts/train.sh gl-en qknorm_paper --profile paper --seed 2 --max-update 100"
    )
    bf16 = run_spec.with_precision(r, "bf16").train_cmd({})
    assert bf16.endswith(" --max-update 100 --precision bf16")
    auto = _run(tmp_path, lr="1e-3", size="d128")  # cpu-proxy: bf16 = "auto"
    assert auto.train_cmd({}).endswith(" --seed 1 --lr 1e-3 --size d128 --precision fp32")


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"seed": "01"}, f"--seed must be {UINT}, got '01'"),
        ({"size": "d64"}, "--size must be d128 or d384 (the LR sweep's sizes besides the "
                          "proxy), got 'd64'"),
        ({"max_update": "-1"}, f"--max-update must be {UINT}, got '-1'"),
        ({"max_update": "0"}, "--max-update 0 with profile cpu-proxy (max-epoch 0) would never "
                              "stop training"),
        ({"profile": "nosuch"}, "unknown profile 'nosuch'"),
    ],
)  # fmt: skip
def test_bad_options_are_usage_errors_naming_the_option(tmp_path, kw, message):
    with pytest.raises(UsageError) as e:
        _run(tmp_path, **kw)
    assert str(e.value).startswith(message)


def test_integer_options():
    assert run_spec.check_uint("--seed", "0") == 0 and run_spec.check_posint("--nproc", "8") == 8
    with pytest.raises(UsageError, match=r"^--threads must be a positive integer, got '0'$"):
        run_spec.check_posint("--threads", "0")
    with pytest.raises(UsageError, match="got '1000000000'"):
        run_spec.check_uint("--seed", "1000000000")


def test_precision_mode_option_then_environment_then_profile():
    proxy = config.load_profile("cpu-proxy")  # bf16 = "auto"
    fp32 = dataclasses.replace(proxy, bf16=0)
    assert run_spec.precision_mode("", proxy, {}) == "auto"
    assert run_spec.precision_mode("", proxy, {"QKNORM_BF16": "0"}) == "fp32"
    assert run_spec.precision_mode("bf16", proxy, {"QKNORM_BF16": "0"}) == "bf16"
    assert run_spec.precision_mode("", fp32, {"QKNORM_BF16": "1"}) == "bf16"
    assert run_spec.precision_mode("", fp32, {}) == "fp32"
    with pytest.raises(UsageError, match=r"^--precision must be bf16, fp32 or auto, got 'fp16'$"):
        run_spec.precision_mode("fp16", proxy, {})
    with pytest.raises(UsageError, match=r"^QKNORM_BF16='yes': expected 1 "):
        run_spec.precision_mode("", proxy, {"QKNORM_BF16": "yes"})
    with pytest.raises(ConfigError, match=r"^configs/profiles/cpu-proxy.toml: key 'bf16' = '2'"):
        run_spec.precision_mode("", dataclasses.replace(proxy, bf16=2), {})


def test_auto_at_the_papers_size_is_fp32_without_measuring(tmp_path, capsys):
    paper = config.load_profile("paper")
    got = run_spec.decide_precision("auto", paper, work=tmp_path, threads=2, cached_only=False,
                                    repo=config.REPO)  # fmt: skip
    assert got == "fp32" and not (tmp_path / "bf16-auto").exists()
    assert capsys.readouterr().err.startswith(
        "[bf16 auto] fp32: profile paper trains at the papers' size"
    )
    assert run_spec.decide_precision("bf16", paper, work=tmp_path, threads=2, cached_only=True,
                                     repo=config.REPO) == "bf16"  # fmt: skip


def test_sizes_need_a_cpu_profile_without_its_own_model_size():
    run_spec.require_sizeable(config.load_profile("cpu-proxy"), "--size d384")
    with pytest.raises(
        UsageError, match=r"^--size d384 needs a CPU profile \(proxy size\), not paper$"
    ):
        run_spec.require_sizeable(config.load_profile("paper"), "--size d384")
    with pytest.raises(
        UsageError,
        match=r"^--sizes: profile cpu-converge-d128 sets its own model size \(--encoder-embed",
    ):
        run_spec.require_sizeable(config.load_profile("cpu-converge-d128"), "--sizes")


def test_a_grid_decides_the_precision_once_in_python(tmp_path, capsys):
    """python -m qknorm_tools.run precision: what scripts/lib/config.sh:qk_resolve_bf16 asks."""
    from qknorm_tools import run

    base = ["precision", f"--work-dir={tmp_path}"]
    assert run.main([*base, "--profile", "cpu-converge-d128"]) == 0  # bf16 = 0: fp32
    assert capsys.readouterr().out.split() == ["QK_BF16_RUN=''", "QK_PRECISION=fp32"]
    assert run.main([*base, "--profile", "paper", "--precision", "bf16"]) == 0
    assert capsys.readouterr().out.split() == ["QK_BF16_RUN=bf16", "QK_PRECISION=bf16"]
    assert run.main([*base, "--profile", "paper", "--precision", "auto", "--quiet"]) == 0
    cap = capsys.readouterr()
    assert cap.out.split()[-1] == "QK_PRECISION=fp32" and cap.err == ""  # --quiet: no line
    assert run.main([*base, "--profile", "paper", "--precision", "fp16"]) == 2
    assert capsys.readouterr().out.startswith("--precision must be bf16, fp32 or auto")


def test_precision_option_and_the_bf16_flag():
    assert run_spec.precision_arg("") == "" and run_spec.precision_arg("auto") == "auto"
    assert run_spec.precision_arg("", bf16_autocast=True) == "bf16"
    assert run_spec.precision_arg("bf16", bf16_autocast=True) == "bf16"
    with pytest.raises(UsageError, match=r"^--bf16-autocast and --precision fp32 exclude each"):
        run_spec.precision_arg("fp32", bf16_autocast=True)
    with pytest.raises(UsageError, match=r"^--precision must be bf16, fp32 or auto, got 'x'$"):
        run_spec.precision_arg("x", bf16_autocast=True)  # the value is checked first
