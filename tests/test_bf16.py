"""bf16 autocast on CPU (task options --bf16-autocast, --bf16-autocast-inference of the plugin's
task ``translation_word_dropout``): native-bf16 detection and refusal, what runs under
autocast, fp32 parameters and optimizer, loss close to fp32, finite training for every
system, and fp32 decoding of a bf16-trained checkpoint with the real CLIs."""

import json
import logging
import math
import platform
import re
import sys
from pathlib import Path

import pytest
import torch

from fairseq_qknorm.tasks import (
    cpu_bf16,
    translation_word_dropout,  # noqa: F401  (registers the task)
)

from conftest import PLUGIN_DIR, REPO, TINY, run_cli, tiny_training  # TINY: 2+2 layers, d 16

NATIVE, NATIVE_REASON = cpu_bf16.native_bf16_support()
#: what a test needs on a CPU without native bf16 to run the autocast path at all (slowly)
EMULATED_OK = [] if NATIVE else ["--bf16-autocast-allow-emulated"]

#: every system of the plugin: QKNorm (l2, g0 from L), ScaleNorm, FixNorm, and the papers' archs
SYSTEMS = {
    "qknorm_l2": ["--arch", "transformer_qknorm", "--qk-norm", "--qk-norm-length", "20"],
    "scalenorm": [
        "--arch",
        "transformer_qknorm",
        "--norm-type",
        "scalenorm",
        "--encoder-normalize-before",
        "--decoder-normalize-before",
    ],
    "fixnorm": ["--arch", "transformer_qknorm", "--fix-norm", "--share-all-embeddings"],
    "twt": ["--arch", "transformer_twt"],
    "qknorm_paper": ["--arch", "transformer_qknorm_paper", "--qk-norm-length", "20"],
}

FAKE_NO_BF16 = (
    False,
    "this CPU (Fake AVX2 CPU) has no native bf16 instructions (looked for "
    "avx512_bf16 or amx_bf16 on x86, bf16 on ARM)",
)


def parse(bin_dir, *extra):
    from fairseq import options

    return options.parse_args_and_arch(
        options.get_training_parser(),
        [
            str(bin_dir),
            "--user-dir",
            str(PLUGIN_DIR),
            "--task",
            "translation_word_dropout",
            "--cpu",
            "--seed",
            "1",
            *extra,
        ],
    )


def setup(bin_dir, *extra, system="qknorm_paper"):
    """(task, model, criterion, args) built through fairseq's real argument parsing."""
    from fairseq import tasks

    args = parse(
        bin_dir,
        *SYSTEMS[system],
        *TINY,
        "--criterion",
        "label_smoothed_cross_entropy",
        "--label-smoothing",
        "0.1",
        "--optimizer",
        "adam",
        "--lr",
        "3e-3",
        *extra,
    )
    task = tasks.setup_task(args)
    torch.manual_seed(1)
    model = task.build_model(args)
    return task, model, task.build_criterion(args), args


def build_optimizer(args, model):
    """fairseq's Adam (FairseqAdam) for ``model``, from the parsed ``--optimizer`` flags."""
    from fairseq import optim
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    return optim.build_optimizer(
        convert_namespace_to_omegaconf(args).optimizer, list(model.parameters())
    )


@pytest.fixture(scope="module")
def batch(toy_data):
    """One batch of the 60 shortest toy training sentences (~260 target tokens)."""
    from fairseq import tasks

    task = tasks.setup_task(parse(toy_data[1], "--arch", "transformer_qknorm"))
    task.load_dataset("train")
    itr = task.get_batch_iterator(
        task.dataset("train"),
        max_tokens=100000,
        max_sentences=60,
        seed=1,
        required_batch_size_multiple=1,
    )
    return next(iter(itr.next_epoch_itr(shuffle=False)))


# ------------------------------------------------------------------------ detection
AVX2_EPYC = "model name\t: AMD EPYC 7B12\nflags\t\t: fpu sse2 avx avx2 fma f16c bmi2\n"
ZEN4_EPYC = (
    "model name\t: AMD EPYC 9B14\nflags\t\t: fpu avx avx2 fma avx512f avx512bw avx512vl "
    "avx512_bf16 avx512_vnni\n"
)
SKYLAKE_X = "model name\t: Intel Xeon Gold 6148\nflags\t\t: avx2 fma avx512f avx512bw avx512vl\n"
SAPPHIRE_RAPIDS = (
    "model name\t: Intel Xeon Platinum 8480+\nflags\t\t: avx512f avx512_bf16 "
    "amx_bf16 amx_tile amx_int8\n"
)
GRAVITON3 = "processor\t: 0\nFeatures\t: fp asimd sve bf16 i8mm svebf16\nCPU part\t: 0xd40\n"
GRAVITON2 = "processor\t: 0\nFeatures\t: fp asimd evtstrm aes crc32 atomics\nCPU part\t: 0xd0c\n"


@pytest.mark.parametrize(
    "cpuinfo, native, features",
    [
        (AVX2_EPYC, False, []),
        (SKYLAKE_X, False, []),  # AVX-512 without AVX512-BF16: oneDNN converts bf16 in software
        (ZEN4_EPYC, True, ["avx512_bf16"]),
        (SAPPHIRE_RAPIDS, True, ["avx512_bf16", "amx_bf16"]),
        (GRAVITON3, True, ["bf16"]),
        (GRAVITON2, False, []),
    ],
)
def test_detection_from_cpuinfo(cpuinfo, native, features):
    assert cpu_bf16.bf16_features_from_cpuinfo(cpuinfo) == features
    got, reason = cpu_bf16.native_bf16_support(cpuinfo=cpuinfo)
    assert got is native
    if native:
        assert ", ".join(features) in reason
    else:
        assert "no native bf16" in reason
    name = re.search(r"model name\s*:\s*(.*)", cpuinfo)
    if name:
        assert name.group(1) in reason  # the message names the CPU


def test_detection_agrees_with_torch_on_this_machine():
    """Two independent sources on this machine: the kernel's /proc/cpuinfo flags and torch's
    cpuinfo-library check (CPUID plus OS support)."""
    check = getattr(torch.cpu, "_is_avx512_bf16_supported", None)
    text = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").is_file() else ""
    if check is None or platform.machine() not in ("x86_64", "AMD64") or "flags" not in text:
        pytest.skip("needs Linux x86 and torch.cpu._is_avx512_bf16_supported")
    from_kernel = "avx512_bf16" in cpu_bf16.bf16_features_from_cpuinfo(text)
    assert from_kernel == bool(check())
    assert NATIVE == (
        bool(cpu_bf16.bf16_features_from_cpuinfo(text))
        and torch.ops.mkldnn._is_mkldnn_bf16_supported()
    ), NATIVE_REASON


# ------------------------------------------------------------------------ refusal
@pytest.mark.parametrize("option", ["--bf16-autocast", "--bf16-autocast-inference"])
def test_refused_without_native_bf16(toy_data, monkeypatch, caplog, option):
    from fairseq import tasks

    monkeypatch.setattr(cpu_bf16, "native_bf16_support", lambda: FAKE_NO_BF16)
    args = parse(toy_data[1], "--arch", "transformer_qknorm", option)
    with pytest.raises(ValueError) as err:
        tasks.setup_task(args)
    msg = str(err.value)
    assert msg.startswith(f"{option}: this CPU (Fake AVX2 CPU) has no native bf16")
    assert "much slower than fp32" in msg and "--bf16-autocast-allow-emulated" in msg
    # the override: built, with a warning
    args = parse(
        toy_data[1], "--arch", "transformer_qknorm", option, "--bf16-autocast-allow-emulated"
    )
    with caplog.at_level(logging.WARNING):
        task = tasks.setup_task(args)
    assert "Running anyway (--bf16-autocast-allow-emulated)" in caplog.text
    assert (task.bf16_autocast, task.bf16_autocast_inference) == (
        option == "--bf16-autocast",
        option == "--bf16-autocast-inference",
    )


def test_off_by_default_and_detection_not_consulted(toy_data, monkeypatch):
    from fairseq import tasks

    def boom():
        raise AssertionError("detection consulted although no bf16 option is on")

    monkeypatch.setattr(cpu_bf16, "native_bf16_support", boom)
    task = tasks.setup_task(parse(toy_data[1], "--arch", "transformer_qknorm"))
    assert task.bf16_autocast is False and task.bf16_autocast_inference is False


def test_restored_from_checkpoint_is_never_refused(toy_data, monkeypatch, caplog):
    """The hub interface and fairseq-validate build the task from the checkpoint's config
    (``from_checkpoint=True``): kept with native bf16, switched off with a warning without."""
    from fairseq import tasks
    from fairseq.dataclass.utils import convert_namespace_to_omegaconf

    args = parse(
        toy_data[1],
        "--arch",
        "transformer_qknorm",
        "--bf16-autocast",
        "--bf16-autocast-inference",
        *EMULATED_OK,
    )
    stored = convert_namespace_to_omegaconf(args).task
    stored.bf16_autocast_allow_emulated = False
    monkeypatch.setattr(cpu_bf16, "native_bf16_support", lambda: (True, "fake native"))
    task = tasks.setup_task(stored.copy(), from_checkpoint=True)
    assert task.bf16_autocast and task.bf16_autocast_inference
    monkeypatch.setattr(cpu_bf16, "native_bf16_support", lambda: FAKE_NO_BF16)
    with caplog.at_level(logging.WARNING):
        task = tasks.setup_task(stored.copy(), from_checkpoint=True)
    assert not task.bf16_autocast and not task.bf16_autocast_inference
    assert (
        "--bf16-autocast and --bf16-autocast-inference stored in the checkpoint switched "
        "off: this CPU (Fake AVX2 CPU)" in caplog.text
    )


def test_refused_for_a_model_off_the_cpu():
    """CPU autocast does nothing for CUDA tensors: a model elsewhere is an error, not a silent
    fp32 run (``meta`` stands in for a GPU here)."""
    cpu_bf16.require_cpu([torch.nn.Linear(2, 2)])
    with pytest.raises(
        ValueError,
        match=r"--bf16-autocast is CPU autocast, but the model is "
        r"on meta: train with --cpu",
    ):
        cpu_bf16.require_cpu([torch.nn.Linear(2, 2, device="meta")])


# ------------------------------------------------------------------------ what runs under it
class Probe:
    """Records the output dtype of one Linear in the forward, and whether CPU autocast is on
    while that Linear's backward runs."""

    def __init__(self, module):
        self.forward_dtypes, self.backward_autocast = [], []
        module.register_forward_hook(lambda m, i, o: self.forward_dtypes.append(o.dtype))
        module.register_full_backward_hook(
            lambda m, gi, go: self.backward_autocast.append(torch.is_autocast_enabled("cpu"))
        )

    def take(self):
        out = (self.forward_dtypes, self.backward_autocast)
        self.forward_dtypes, self.backward_autocast = [], []
        return out


class Optimizer:
    """The optimizer interface FairseqTask.train_step uses."""

    def backward(self, loss):
        loss.backward()


@pytest.mark.slow
def test_autocast_covers_forward_and_loss_not_backward(toy_data, batch):
    from fairseq.sequence_generator import SequenceGenerator

    for flags, train, valid, infer in [
        ([], torch.float32, torch.float32, torch.float32),
        (["--bf16-autocast"], torch.bfloat16, torch.bfloat16, torch.float32),
        (["--bf16-autocast-inference"], torch.float32, torch.float32, torch.bfloat16),
    ]:
        task, model, criterion, _ = setup(toy_data[1], *flags, *EMULATED_OK)
        probe = Probe(model.decoder.layers[0].fc1)
        loss, _, _ = task.train_step(batch, model, criterion, Optimizer(), update_num=1)
        dtypes, backward_autocast = probe.take()
        assert dtypes == [train], flags
        assert backward_autocast == [False], flags  # backward outside autocast
        assert loss.dtype == torch.float32  # fairseq's log_softmax(dtype=float32) + fp32 loss
        task.valid_step(batch, model, criterion)
        assert probe.take()[0] == [valid], flags
        gen = SequenceGenerator([model], task.target_dictionary, beam_size=2, max_len_b=5)
        hyps = task.inference_step(gen, [model], batch)
        assert len(hyps) == batch["nsentences"]
        assert set(probe.take()[0]) == {infer}, flags
    # the probe can see autocast in a backward: the assertion above is not vacuous
    with torch.autocast("cpu", dtype=torch.bfloat16):
        criterion(model, batch)[0].backward()
    assert probe.take()[1] == [True]


@pytest.mark.parametrize("system", ["twt", "qknorm_paper"])
@pytest.mark.slow
def test_parameters_gradients_and_optimizer_stay_fp32_and_loss_close(toy_data, batch, system):
    """Same weights, same batch: the loss under autocast is within 0.5% of the fp32 loss and
    the gradient points the same way (cosine > 0.999). bf16 keeps 8 significant bits
    (relative rounding up to 2^-9 = 0.2% per value) and the loss averages ~260 target tokens
    whose rounding errors partly cancel: measured 0.01-0.04% and cosine >= 0.99997 for every
    system here. 0.5% leaves room for other CPUs' kernels, while lost fp32 arithmetic where it
    matters (a softmax or the loss in bf16) or a wrong mask moves the loss by more."""
    losses, grads = {}, {}
    for name, flags in (("fp32", []), ("bf16", ["--bf16-autocast", *EMULATED_OK])):
        task, model, criterion, args = setup(toy_data[1], *flags, system=system)
        optimizer = build_optimizer(args, model)
        loss, sample_size, _ = task.train_step(batch, model, criterion, optimizer, update_num=1)
        losses[name] = float(loss) / sample_size
        grads[name] = torch.cat([p.grad.flatten() for p in model.parameters()])
        assert all(p.grad.dtype == torch.float32 for p in model.parameters())
        optimizer.step()
        assert all(p.dtype == torch.float32 for p in model.parameters())
        states = [s for s in optimizer.optimizer.state.values()]
        assert states and all(
            v.dtype == torch.float32
            for s in states
            for v in s.values()
            if torch.is_tensor(v) and v.is_floating_point()
        )
        for m in model.modules():  # the learnable scalars stay float32 parameters
            for g in (getattr(m, "qk_norm_g", None), getattr(m, "scale", None)):
                if isinstance(g, torch.nn.Parameter):
                    assert g.dtype == torch.float32
    assert losses["bf16"] != losses["fp32"]  # autocast did change the arithmetic
    assert losses["bf16"] == pytest.approx(losses["fp32"], rel=5e-3)
    cosine = torch.nn.functional.cosine_similarity(grads["bf16"], grads["fp32"], dim=0)
    assert cosine > 0.999, float(cosine)


@pytest.mark.parametrize("system", sorted(SYSTEMS) + ["qknorm_paper_explicit"])
@pytest.mark.slow
def test_training_under_autocast_stays_finite_and_learns(toy_data, batch, system):
    """40 Adam updates on one batch under --bf16-autocast: every loss and gradient finite, the
    loss falls by more than a third. ``qknorm_paper_explicit``: the attention's explicit
    matmul/softmax path (attention statistics, need_weights) instead of SDPA."""
    task, model, criterion, args = setup(
        toy_data[1],
        "--bf16-autocast",
        *EMULATED_OK,
        system="qknorm_paper" if system == "qknorm_paper_explicit" else system,
    )
    if system == "qknorm_paper_explicit":
        for m in model.modules():
            if hasattr(m, "use_fused"):
                m.use_fused = False
    optimizer = build_optimizer(args, model)
    losses = []
    for update in range(40):
        optimizer.zero_grad()
        loss, sample_size, _ = task.train_step(batch, model, criterion, optimizer, update)
        assert all(
            torch.isfinite(p.grad).all() for p in model.parameters() if p.grad is not None
        ), (system, update)
        optimizer.step()
        losses.append(float(loss) / sample_size)
    assert all(math.isfinite(x) for x in losses), losses
    assert losses[-1] < 0.67 * losses[0], (system, losses[0], losses[-1])
    assert all(p.dtype == torch.float32 and torch.isfinite(p).all() for p in model.parameters())


# ------------------------------------------------------------------------ real CLIs
@pytest.mark.slow
def test_fairseq_train_bf16_then_generate_in_fp32(toy_data, tmp_path):
    """fairseq-train --cpu --bf16-autocast (no --bf16: TPU-only); fairseq-validate in fp32;
    fairseq-generate from the checkpoint in fp32 with the plain translation task and with the
    plugin task, and under --bf16-autocast-inference: every test sentence decoded each time."""
    _, bin_dir = toy_data
    save = tmp_path / "ckpt"
    proc = run_cli(
        [
            "fairseq-train",
            bin_dir,
            "--user-dir",
            PLUGIN_DIR,
            "--cpu",
            "--task",
            "translation_word_dropout",
            "--bf16-autocast",
            *EMULATED_OK,
            *SYSTEMS["qknorm_paper"],
            *TINY,
            *tiny_training(lr="3e-3", max_tokens="500"),
            "--max-update",
            "12",
            "--validate-interval-updates",
            "6",
            "--required-batch-size-multiple",
            "1",
            "--no-epoch-checkpoints",
            "--log-format",
            "simple",
            "--log-interval",
            "1",
            "--attn-stats-interval",
            "4",
            "--save-dir",
            save,
        ]
    )  # train.sh's attention statistics
    log = proc.stdout + proc.stderr
    assert "bf16 autocast: train_step forward + loss (backward outside) and valid_step" in log
    losses = [float(x) for x in re.findall(r"train_inner .* loss=([0-9.naif-]+),", log)]
    assert len(losses) == 12 and all(math.isfinite(x) for x in losses), losses
    valid = [
        float(x) for x in re.findall(r"valid on 'valid' subset .*?\| loss ([0-9.naif-]+)", log)
    ]
    assert len(valid) >= 2 and all(math.isfinite(x) for x in valid), valid  # + epoch ends
    assert losses[-1] < losses[0]
    stats = [float(x) for x in re.findall(r"attn_(?:entropy|maxlogit)_\w+=([0-9.naif-]+)", log)]
    assert stats and all(math.isfinite(x) for x in stats)  # the explicit path, under bf16

    state = torch.load(save / "checkpoint_last.pt", map_location="cpu", weights_only=False)
    assert state["cfg"]["task"]["bf16_autocast"] is True
    assert all(v.dtype == torch.float32 for v in state["model"].values() if v.is_floating_point())
    adam = state["last_optimizer_state"]["state"]
    assert adam and all(
        v.dtype == torch.float32
        for s in adam.values()
        for v in s.values()
        if torch.is_tensor(v) and v.is_floating_point()
    )

    # fairseq-validate restores the checkpoint's task with bf16 autocast; the override gives
    # the fp32 dev loss, within 0.5% of the bf16 one logged after the last update
    val = run_cli(
        [
            "fairseq-validate",
            bin_dir,
            "--user-dir",
            PLUGIN_DIR,
            "--cpu",
            "--task",
            "translation",
            "--model-overrides",
            "{'bf16_autocast': False}",
            "--path",
            save / "checkpoint_last.pt",
            "--max-tokens",
            "500",
            "--required-batch-size-multiple",
            "1",
            "--num-workers",
            "0",
        ]
    )
    assert "bf16 autocast:" not in val.stdout + val.stderr
    fp32_dev = float(
        re.search(r"valid on 'valid' subset .*?\| loss ([0-9.]+)", val.stdout + val.stderr).group(1)
    )
    assert fp32_dev == pytest.approx(valid[-1], rel=5e-3)

    def generate(*task_flags):
        gen = run_cli(
            [
                "fairseq-generate",
                bin_dir,
                "--user-dir",
                PLUGIN_DIR,
                "--cpu",
                *task_flags,
                "--path",
                save / "checkpoint_last.pt",
                "--beam",
                "2",
                "--batch-size",
                "8",
                "--required-batch-size-multiple",
                "1",
                "--num-workers",
                "0",
            ]
        )
        return sorted(
            re.findall(r"^H-(\d+)\t(\S+)\t(.*)$", gen.stdout, flags=re.M), key=lambda h: int(h[0])
        )

    plain = generate("--task", "translation")
    assert [int(h[0]) for h in plain] == list(range(21))  # every test sentence
    # the plugin task builds its config from generate's command line: fp32 unless asked
    assert generate("--task", "translation_word_dropout") == plain
    bf16 = generate("--task", "translation_word_dropout", "--bf16-autocast-inference", *EMULATED_OK)
    assert [int(h[0]) for h in bf16] == list(range(21))
    assert all(math.isfinite(float(h[1])) for h in bf16)


@pytest.mark.slow
def test_fairseq_train_refuses_without_native_bf16(toy_data, tmp_path):
    """The message reaches a fairseq-train user (detector patched, then fairseq's own CLI)."""
    code = (
        "import sys, fairseq_qknorm.tasks.cpu_bf16 as c; "
        f"c.native_bf16_support = lambda: {FAKE_NO_BF16!r}; "
        "from fairseq_cli.train import cli_main; sys.argv[0] = 'fairseq-train'; cli_main()"
    )
    proc = run_cli(
        [
            "python",
            "-c",
            code,
            toy_data[1],
            "--user-dir",
            PLUGIN_DIR,
            "--cpu",
            "--task",
            "translation_word_dropout",
            "--bf16-autocast",
            "--arch",
            "transformer_twt",
            *TINY,
            "--max-tokens",
            "500",
            "--max-update",
            "1",
            "--save-dir",
            tmp_path / "ckpt",
        ],
        check=False,
    )
    assert proc.returncode != 0
    assert (
        "ValueError: --bf16-autocast: this CPU (Fake AVX2 CPU) has no native bf16 instructions"
    ) in proc.stderr
    assert not (tmp_path / "ckpt" / "checkpoint_last.pt").exists()


# ------------------------------------------------------------------------ the benchmark
@pytest.mark.slow
def test_benchmark_runs_and_reports_both_modes(toy_data, tmp_path):
    """``python -m benchmarks.bf16_cpu`` on a tiny model and the toy data: every entry runs
    and reports positive figures (no timing assertion)."""
    if str(REPO) not in sys.path:  # benchmarks/ is not an installed package
        sys.path.insert(0, str(REPO))
    from benchmarks import bf16_cpu

    out = tmp_path / "bf16.json"
    rc = bf16_cpu.main(
        [
            "--size",
            "smoke",
            "--systems",
            "twt",
            "--reps",
            "1",
            "--threads",
            "1",
            "--batch",
            "4",
            "--len",
            "8",
            "--e2e-data",
            str(toy_data[1]),
            "--e2e-updates",
            "2",
            "--e2e-log-interval",
            "1",
            "--e2e-rounds",
            "1",
            "--e2e-max-tokens",
            "500",
            "--out",
            str(out),
            *([] if NATIVE else ["--allow-emulated"]),
        ]
    )
    res = json.loads(out.read_text())
    assert rc == 0 and res["errors"] == {}, res["errors"]
    assert res["native_bf16"] is NATIVE and res["bf16_detector"] == NATIVE_REASON
    assert res["machine"]["cpu_model"] and "load average" in res["uptime_start"]
    model = res["model"]["systems"]["twt"]
    assert set(model["speedup"]) == {"bf16", "bf16_explicit_attention"}
    assert all(
        model[m]["median_s"] > 0 and model["speedup"][m]["median_ratio"] > 0
        for m in model["speedup"]
    )
    assert res["e2e"]["systems"]["twt"]["speedup"]["bf16"]["median_ratio"] > 0
    assert all(
        run["rc"] == 0
        for mode in ("fp32", "bf16")
        for run in res["e2e"]["systems"]["twt"][mode]["runs"]
    )
    md = out.with_suffix(".md").read_text()
    assert md.startswith("# bf16 autocast vs fp32 on CPU") and "| twt |" in md


@pytest.mark.slow
def test_train_sh_recipe_with_bf16_autocast(tmp_path):
    """The README's recipe: scripts/train.sh ... --bf16-autocast (the plugin task with word
    dropout off), then scripts/evaluate.sh decodes in fp32."""
    from conftest import count_lines, make_env, make_tiny_ted, out, prepare_pair, run_script

    sizes = make_tiny_ted(tmp_path / "data_in", sizes=(200, 20, 23))
    env = make_env(tmp_path / "work", QKNORM_DATA_DIR=tmp_path / "data_in", OMP_NUM_THREADS=1)
    prepare_pair(env, "--merges", 60)
    p = run_script(
        "train.sh",
        "gl-en",
        "twt",
        "--max-update",
        2,
        "--threads",
        1,
        "--bf16-autocast",
        "--",
        *EMULATED_OK,
        env=env,
    )
    assert p.returncode == 0, out(p)
    # next to its fp32 twin (seed1), never in its directory
    run = tmp_path / "work/runs/gl-en/cpu-proxy-max-update-2/twt/seed1-bf16"
    assert "task: TranslationWordDropoutTask" in (run / "train.log").read_text()
    assert "bf16 autocast: train_step" in (run / "train.log").read_text()
    assert (
        "--task translation_word_dropout --word-dropout 0 --bf16-autocast"
        in (run / "command.txt").read_text()
    )
    assert json.loads((run / "train.json").read_text())["updates"] == 2
    p = run_script("evaluate.sh", "gl-en", "twt", "--max-update", 2, env=env)
    assert p.returncode == 1 and "twt/seed1 is not a finished run" in p.stderr, out(p)
    p = run_script(
        "evaluate.sh", "gl-en", "twt", "--max-update", 2, "--threads", 1, "--bf16-autocast",
        env=env,
    )  # fmt: skip
    assert p.returncode == 0, out(p)
    assert count_lines(run / "test.hyp") == sizes["test"]
