"""Shared test helpers and fixtures.

* tiny generated corpora, binarized with the real fairseq-preprocess (``toy_data``, ``toy_task``);
* running the pipeline's scripts and tools as subprocesses (``make_env``, ``run_script``,
  ``run_cli``, ``run_without_torch``);
* a tiny TED-like pair laid out like the shared data (``make_tiny_ted``);
* a fake ``fairseq-train`` for the scripts' process handling (``fake_fairseq_train``);
* tiny model flags (``TINY``) and the float64 reference of QKNorm attention and its variants
  (``VARIANTS``, ``make``, ``reference_attention``);
* a private single-node Slurm cluster (``slurm_cluster``).

Tests marked ``slow`` run the scripts end to end (seconds to minutes); ``pytest -m "not slow"``
is the quick loop.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import random
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

# The Ctrl-C tests send SIGINT to a script's process group, as a terminal does. A suite started
# in the background of a non-interactive shell (`cmd &`, nohup, some CI runners) inherits
# SIGINT ignored, and so would every script it starts: bash cannot trap a signal ignored on
# entry, so those scripts would never see the Ctrl-C. A handled signal is reset to the default
# in a child at exec, so handling it here gives the scripts a terminal's SIGINT.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

REPO = Path(__file__).resolve().parents[1]
PLUGIN_DIR = REPO / "fairseq_qknorm"
SCRIPTS = REPO / "scripts"
FIXTURES = Path(__file__).parent / "fixtures"
#: the real corpora: $QKNORM_DATA_DIR, else ../shared/data next to this clone (else tests skip)
SHARED = Path(os.environ.get("QKNORM_DATA_DIR") or REPO.parent / "shared" / "data").resolve()
VENV_BIN = Path(sys.executable).parent
SPLITS = ("train", "dev", "test")
#: The far bound (seconds) of every subprocess and wait in the suite: a guard against a hang,
#: never a timing assertion. A test waits for its event (a process's exit, a line, a file, a
#: pid); a busy machine makes it slower, never failing. 15 minutes (the longest script a test
#: runs takes under 2 minutes on 2 idle cores; a hang costs CI 15 minutes, not 30), times
#: $QKNORM_TEST_TIMEOUT_SCALE (default 1; e.g. 4 on an emulated or heavily shared machine).
FAR_BOUND = 900 * float(os.environ.get("QKNORM_TEST_TIMEOUT_SCALE") or 1)


# ------------------------------------------------------------------------------ subprocesses
def cli_env():
    """Environment for subprocess CLIs: the venv's bin first, the repo importable."""
    env = dict(os.environ)
    env["PATH"] = f"{VENV_BIN}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
    env.setdefault("OMP_NUM_THREADS", "1")
    return env


def run_cli(args, cwd=None, check=True, input=None):
    """Run a command; on failure show its output in the assertion message."""
    proc = subprocess.run(
        [str(a) for a in args], cwd=cwd, env=cli_env(), input=input, capture_output=True, text=True
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{args[0]} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        )
    return proc


#: the test files that take longest (measured, 2026-12-07 and 12-08, whole suite), run first:
#: pytest-xdist's ``--dist loadfile`` hands whole files to its processes in collection order, so
#: the longest starting first keeps both processes busy to the end (longest processing time
#: first) instead of leaving one file running alone at the end
LONGEST_FIRST = (
    "test_slurm",
    "test_benchmarks",
    "test_grid",
    "test_bf16",
    "test_profiles",
    "test_records",
    "test_lr_sweep",
    "test_inference_bpe",
    "test_pipeline_train",
    "test_provenance",
    "test_launcher",
    "test_bf16_auto",
    "test_lr_sweep_sizes",
    "test_golden",
    "test_own_data",
)


def pytest_collection_modifyitems(config, items):
    """Files of :data:`LONGEST_FIRST` first, in its order; within a file, and for the other
    files, the collection order is kept (a stable sort)."""
    rank = {name: i for i, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.stem, len(rank)))


def count_python_starts(env: dict, tmp_path: Path, python: str = "") -> Path:
    """Makes ``env``'s scripts start Python through a wrapper that logs each start's module.

    ``QKNORM_PYTHON`` becomes a wrapper (in ``tmp_path``) that appends its ``-m`` module
    (``qknorm_tools.serve``, ``qknorm_tools.progress``, ...) to the returned log file, one line
    a start, then runs ``python`` (default: this interpreter's) with its arguments.
    """
    log, wrapper = tmp_path / "python_starts", tmp_path / "python_wrapper"
    exe = shlex.quote(python or str(VENV_BIN / "python"))
    wrapper.write_text(
        f'#!/usr/bin/env bash\necho "$2" >>{shlex.quote(str(log))}\nexec {exe} "$@"\n'
    )
    wrapper.chmod(0o755)
    env["QKNORM_PYTHON"] = str(wrapper)
    return log


def make_env(work: Path, **extra) -> dict:
    """Environment of a pipeline script: QKNORM_WORK_DIR=work, offline, fp32, no overrides.

    ``extra`` sets variables (``None`` removes one).
    """
    env = cli_env()
    env["QKNORM_WORK_DIR"] = str(work)
    env["QKNORM_OFFLINE"] = "1"  # never touch the network unless a test says so
    # fp32 unless a test says so (the CPU profiles' PROFILE_BF16=auto would measure bf16 against
    # fp32 once per work dir, about a minute, and pick by CPU: tests/test_bf16_auto.py)
    env["QKNORM_BF16"] = "0"
    for key in (
        "QKNORM_DATA_DIR",
        "QKNORM_QI18_URL",
        "QKNORM_TED_TALKS_URL",
        "QKNORM_IWSLT15_URL",
        "QKNORM_MAX_UPDATE",
        "QKNORM_THREADS",
        "QKNORM_DEV_BLEU",
    ):
        env.pop(key, None)
    for k, v in extra.items():
        if v is None:
            env.pop(k, None)
        else:
            env[k] = str(v)
    return env


def run_script(
    name: str, *args, env: dict, timeout: float = FAR_BOUND
) -> subprocess.CompletedProcess:
    """``bash scripts/NAME ARGS`` from the repository root."""
    return subprocess.run(
        ["bash", str(SCRIPTS / name), *map(str, args)],
        env=env,
        cwd=str(REPO),
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def out(p: subprocess.CompletedProcess) -> str:
    """stdout + stderr of a finished process."""
    return p.stdout + p.stderr


def prepare_pair(env: dict, *bpe_args, pair: str = "gl-en") -> None:
    """``prepare_data.sh PAIR``, ``bpe.sh PAIR BPE_ARGS``, ``binarize.sh PAIR`` in ``env``'s work
    dir, each asserted to succeed (its output in the message)."""
    for step, args in (("prepare_data.sh", [pair]), ("bpe.sh", [pair, *bpe_args]),
                       ("binarize.sh", [pair])):  # fmt: skip
        p = run_script(step, *args, env=env)
        assert p.returncode == 0, out(p)


def train_commands(stdout):
    """The fairseq-train command lines printed by train.sh --dry-run, as token lists."""
    return [
        shlex.split(line)
        for line in stdout.splitlines()
        if line.startswith("env ") and " fairseq-train " in line
    ]


def shell_assignments(text: str) -> dict:
    """``VAR=value`` and ``VAR=(...)`` lines (as python -m qknorm_tools.run prints them for
    bash's eval) read back as bash would: {VAR: [words]}."""
    values = {}
    for line in text.splitlines():
        var, _, value = line.partition("=")
        values[var] = shlex.split(value[1:-1]) if value.startswith("(") else shlex.split(value)
    return values


def flags(tokens):
    """``--flag value`` / ``--switch`` tokens of a command -> {flag: value or True}."""
    out = {}
    for i, tok in enumerate(tokens):
        if tok.startswith("--"):
            nxt = tokens[i + 1] if i + 1 < len(tokens) else None
            out[tok] = nxt if nxt is not None and not nxt.startswith("--") else True
    return out


_BLOCKER = r"""
import runpy, sys
class _NoTorchFairseq:
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in ("torch", "fairseq", "fairseq_qknorm", "qknorm_model_tools"):
            raise ImportError(f"blocked import of {name}: the tools must run without torch/fairseq")
        return None
sys.meta_path.insert(0, _NoTorchFairseq())
sys.argv = sys.argv[1:]
runpy.run_module(sys.argv[0], run_name="__main__", alter_sys=True)
"""


def run_without_torch(module: str, *args, cwd=None) -> subprocess.CompletedProcess:
    """``python -m MODULE ARGS`` in a subprocess where importing torch, fairseq,
    fairseq_qknorm or qknorm_model_tools raises ImportError."""
    return subprocess.run(
        [sys.executable, "-c", _BLOCKER, module, *map(str, args)],
        cwd=str(cwd or REPO),
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=FAR_BOUND,
    )


# ------------------------------------------------------------------------------ small files
def count_lines(path: Path) -> int:
    """Lines of a file (``\\n``-terminated, as ``wc -l``)."""
    with open(path, "rb") as f:
        return sum(1 for _ in f)


def doc_files() -> list:
    """README.md and every docs/*.md (the documentation a user reads), README first."""
    return [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]


def doc_text() -> str:
    """The text of README.md and docs/*.md joined (README's sections moved to docs/ in issue 21)."""
    return "\n\n".join(p.read_text(encoding="utf-8") for p in doc_files())


def sha256(path: Path) -> str:
    """sha256 hex digest of a file."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def write_sums(data_dir: Path) -> None:
    """SHA256SUMS over every file below data_dir (like the shared data dir's)."""
    lines = []
    for p in sorted(data_dir.rglob("*")):
        if p.is_file() and p.name != "SHA256SUMS":
            lines.append(f"{sha256(p)}  {p.relative_to(data_dir).as_posix()}")
    (data_dir / "SHA256SUMS").write_text("\n".join(lines) + "\n", encoding="utf-8")


GL_WORDS = (
    "o a os as de que en un unha para con por non se como máis pero isto iso cando "
    "casa mundo tempo vida xente cousa día ano traballo historia cidade auga "
).split()
EN_WORDS = (
    "the a of to and in that is it for with on not as but this was what when people "
    "house world time life thing day year work story city water we they"
).split()


def tiny_sentences(n: int, seed: int, words) -> list:
    """``n`` random sentences of 3-18 words and a final period."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(words) for _ in range(rng.randint(3, 18))) + " ." for _ in range(n)]


def make_tiny_ted(
    data_dir: Path, src: str = "gl", tgt: str = "en", folder: str = "ted-gl-en", sizes=(300, 30, 40)
) -> dict:
    """A tiny pre-extracted TED pair laid out like <shared>/data/ted-gl-en, with SHA256SUMS."""
    d = data_dir / folder
    d.mkdir(parents=True, exist_ok=True)
    for i, (split, n) in enumerate(zip(SPLITS, sizes)):
        (d / f"{split}.{src}").write_text(
            "\n".join(tiny_sentences(n, 10 + i, GL_WORDS)) + "\n", encoding="utf-8"
        )
        (d / f"{split}.{tgt}").write_text(
            "\n".join(tiny_sentences(n, 20 + i, EN_WORDS)) + "\n", encoding="utf-8"
        )
    write_sums(data_dir)
    return dict(zip(SPLITS, sizes))


def write_toy_corpus(
    directory: Path,
    sizes=(("train", 300), ("valid", 30), ("test", 21)),
    seed=0,
    src="src",
    tgt="tgt",
):
    """A learnable toy translation task: target = reversed source, upper-cased.

    The test split size (21) is deliberately not a multiple of 8, to catch fairseq dropping
    the last partial batch (see scripts/lib.sh).
    """
    rng = random.Random(seed)
    words = [f"w{i}" for i in range(24)]
    directory.mkdir(parents=True, exist_ok=True)
    for split, n in sizes:
        with (
            open(directory / f"{split}.{src}", "w") as fs,
            open(directory / f"{split}.{tgt}", "w") as ft,
        ):
            for _ in range(n):
                sent = [rng.choice(words) for _ in range(rng.randint(3, 10))]
                fs.write(" ".join(sent) + "\n")
                ft.write(" ".join(reversed(sent)).upper() + "\n")
    return directory


def fresh_copy(src: Path, dst: Path) -> Path:
    """A copy of the directory ``src`` at ``dst``."""
    shutil.copytree(src, dst)
    return dst


def make_data_chain(work: Path, pair: str = "gl-en", tool: str = "subword-nmt") -> str:
    """A consistent but fake data/{raw,bpe,bin}/PAIR chain in ``work`` (placeholder files with
    the markers, fingerprints, ``bpe.json`` and ``identity.json`` of the real steps), for
    script tests whose ``fairseq-train`` reads nothing. Returns the data identity."""
    from qknorm_tools.provenance import write_identity

    data = work / "data"
    prev = None
    for step, files in (("raw", ["train.gl"]), ("bpe", ["train.gl", "bpe.json"]),
                        ("bin", ["dict.gl.txt"])):  # fmt: skip
        d = data / step / pair
        d.mkdir(parents=True)
        for name in files:
            text = json.dumps({"tool": tool}) if name == "bpe.json" else f"{step} {name}\n"
            (d / name).write_text(text, encoding="utf-8")
        if step == "bin":
            write_identity(data, pair, d, files)
            files = [*files, "identity.json"]
        key = {"bpe": "raw", "bin": "bpe"}.get(step)
        (d / ".settings").write_text(f"{key}={prev}\n" if key else "pair\n", encoding="utf-8")
        (d / ".done").write_text("".join(f"{sha256(d / n)}  {n}\n" for n in files))
        prev = sha256(d / ".done")
    return json.loads((data / "bin" / pair / "identity.json").read_text())["data_id"]


# ------------------------------------------------------------------------------ fake trainer
FAKE_TRAIN = r"""#!/usr/bin/env bash
# A stand-in for fairseq-train: logs num_updates, writes checkpoint_last.pt, records its pid,
# runs for $FAKE_TRAIN_SECONDS (default 300) unless stopped.
save=""
prev=""
for a in "$@"; do
    [[ "$prev" == --save-dir ]] && save="$a"
    prev="$a"
done
mkdir -p "$save"
echo $$ >>"${FAKE_TRAIN_PIDS:?}"
echo "2026-01-01 00:00:00 | INFO | train_inner | epoch 001:      1 / 10 loss=9.0, num_updates=1"
echo "2026-01-01 00:00:00 | INFO | fairseq_qknorm | QKNorm g0 = 12.5 (qk_norm_scale)"
: >"$save/checkpoint_last.pt"
sleep "${FAKE_TRAIN_SECONDS:-300}" &
wait $!
echo "2026-01-01 00:00:01 | INFO | train_inner | epoch 001:      2 / 10 loss=8.0, num_updates=2"
"""


@pytest.fixture
def fake_fairseq_train(tmp_path):
    """``(bin_dir, pid_file)``: a directory holding a fake ``fairseq-train`` to put first on
    PATH, and the file where each fake training appends its pid."""
    bin_dir = tmp_path / "fake_bin"
    bin_dir.mkdir()
    exe = bin_dir / "fairseq-train"
    exe.write_text(FAKE_TRAIN)
    exe.chmod(0o755)
    return bin_dir, tmp_path / "fake_train.pids"


def alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1][0] != "Z"
    except OSError:
        return False


# ------------------------------------------------------------------------------ toy data
@pytest.fixture(scope="session")
def toy_data(tmp_path_factory):
    """Binarized toy corpus (joined dictionary): returns (raw_dir, bin_dir)."""
    root = tmp_path_factory.mktemp("toy")
    raw = write_toy_corpus(root / "raw")
    bin_dir = root / "bin"
    run_cli(
        [
            "fairseq-preprocess",
            "--source-lang",
            "src",
            "--target-lang",
            "tgt",
            "--trainpref",
            raw / "train",
            "--validpref",
            raw / "valid",
            "--testpref",
            raw / "test",
            "--destdir",
            bin_dir,
            "--joined-dictionary",
            "--workers",
            "1",
        ]
    )
    return raw, bin_dir


@pytest.fixture(scope="session")
def toy_task(toy_data):
    """A fairseq TranslationTask on the toy data (for building models in-process)."""
    from fairseq import options, tasks

    import fairseq_qknorm  # noqa: F401

    _, bin_dir = toy_data
    parser = options.get_training_parser()
    args = options.parse_args_and_arch(parser, [str(bin_dir), "--arch", "transformer_qknorm"])
    return tasks.setup_task(args)


def build_model(task, arch, extra=()):
    """Build ``arch`` for ``task`` through fairseq's real argument parsing.

    Returns ``(model, args)``; ``args`` holds the resolved hyperparameters.
    """
    from fairseq import options

    parser = options.get_training_parser()
    data = task.cfg.data if hasattr(task.cfg, "data") else task.args.data
    args = options.parse_args_and_arch(parser, [str(data), "--arch", arch, *extra])
    model = task.build_model(args)
    return model, args


# ------------------------------------------------------------------------------ tiny models
def tiny_model(
    layers: int = 1, dim: int = 16, heads: int | None = 2, dropout: float | None = 0
) -> list:
    """fairseq-train size flags of a tiny Transformer (seconds on CPU).

    ``layers`` encoder and decoder layers of width ``dim`` with FFN width ``2 * dim``,
    ``heads`` attention heads and ``dropout``; ``None`` leaves that flag to the arch.
    Returns a list of strings for a fairseq-train or ``train.sh -- ...`` command line.
    """
    f = ["--encoder-layers", layers, "--decoder-layers", layers,
         "--encoder-embed-dim", dim, "--decoder-embed-dim", dim,
         "--encoder-ffn-embed-dim", 2 * dim, "--decoder-ffn-embed-dim", 2 * dim]  # fmt: skip
    if heads is not None:
        f += ["--encoder-attention-heads", heads, "--decoder-attention-heads", heads]
    if dropout is not None:
        f += ["--dropout", dropout]
    return [str(x) for x in f]


def tiny_training(lr: str, max_tokens: str, seed: str = "1") -> list:
    """fairseq-train training flags shared by the tests' tiny runs (strings).

    Adam at ``lr``, label-smoothed cross-entropy (smoothing 0.1, as the profiles),
    ``--max-tokens`` per batch, ``--seed`` and no data-loader workers.
    """
    return ["--optimizer", "adam", "--lr", lr, "--criterion", "label_smoothed_cross_entropy",
            "--label-smoothing", "0.1", "--max-tokens", max_tokens, "--seed", seed,
            "--num-workers", "0"]  # fmt: skip


#: 2+2 layers, d 16, FFN 32, 2 heads, dropout 0
TINY = tiny_model(layers=2)


# ------------------------------------------------------------------------------ attention reference
# A QKNormMultiheadAttention of each QK-norm variant (``make``) and a float64 reference of it
# written from the papers' formulas (``reference_attention``): tests/test_attention.py checks
# each attention path against it, tests/test_fused_paths.py the fused against the explicit one.
# torch and the plugin are imported inside the functions, so tests that need neither do not
# pay for them.
E, H = 16, 4
D = E // H
#: eps of the per-head LayerNorm/RMSNorm as documented (flax / Gemma 3 / OLMo 2 value)
HEAD_NORM_EPS = 1e-6
#: l2 norm clamp as documented
L2_EPS = 1e-6

VARIANTS = {
    "off": dict(qk_norm=False),
    "l2": dict(qk_norm=True, qk_norm_scale=3.0),
    "l2_per_head": dict(qk_norm=True, qk_norm_scale=3.0, qk_norm_scale_per_head=True),
    "l2_frozen": dict(qk_norm=True, qk_norm_scale=3.0, qk_norm_freeze_scale=True),
    "layernorm": dict(qk_norm=True, qk_norm_type="layernorm"),
    "rmsnorm": dict(qk_norm=True, qk_norm_type="rmsnorm"),
    # the stability methods (docs/stability.md): Lp QKNorm, OLMo 2's full-width RMSNorm, Gemma
    # 3's zero-centred RMSNorm, Gemma 2's soft cap (alone and on QKNorm, whose g = 3 > cap 2),
    # NAP (alone and on per-head LayerNorm)
    "lp3": dict(qk_norm=True, qk_norm_type="lp", qk_norm_scale=3.0, qk_norm_p=3.0),
    "rmsnorm_full": dict(qk_norm=True, qk_norm_type="rmsnorm_full"),
    "rmsnorm_zc": dict(qk_norm=True, qk_norm_type="rmsnorm_zc"),
    "softcap": dict(qk_norm=False, attn_logit_softcap=1.5),
    "l2_softcap": dict(qk_norm=True, qk_norm_scale=3.0, attn_logit_softcap=2.0),
    "nap": dict(qk_norm=False, attn_normalization="nap"),
    "nap_layernorm": dict(qk_norm=True, qk_norm_type="layernorm", attn_normalization="nap"),
}
#: the variants with a QK-norm (soft cap and NAP alone are dot-product attention)
QK_VARIANTS = [v for v, options in VARIANTS.items() if options.get("qk_norm")]


def make(variant="l2", g0=None, **kw):
    """A module of ``variant`` with non-trivial QK-norm parameters: per-head g all
    different, LayerNorm/RMSNorm weights random (not the initial ones)."""
    import torch

    from fairseq_qknorm.modules import QKNormMultiheadAttention

    torch.manual_seed(0)
    options = dict(VARIANTS[variant])
    if g0 is not None and "qk_norm_scale" in options:
        options["qk_norm_scale"] = g0
    mha = QKNormMultiheadAttention(E, H, **options, **kw)
    with torch.no_grad():
        if variant == "l2_per_head":
            mha.qk_norm_g.copy_(options["qk_norm_scale"] * torch.tensor([1.0, 0.5, 1.5, 2.0]))
        for norm in (mha.q_norm, mha.k_norm):
            if norm is not None:
                norm.weight.uniform_(0.5, 1.5)
        if mha.nap_gain is not None:
            mha.nap_gain.uniform_(0.5, 1.5)
            mha.nap_bias.uniform_(-0.5, 0.5)
    return mha


def head_norm_reference(kind, x, w):
    """Per-head LayerNorm or RMSNorm of ``x`` ``(..., D)`` with weight ``w`` ``(D,)``, eps
    :data:`HEAD_NORM_EPS`; written from the formulas, not from F.layer_norm / F.rms_norm."""
    import torch

    if kind == "layernorm":
        c = x - x.mean(-1, keepdim=True)
        return c / torch.sqrt((c * c).mean(-1, keepdim=True) + HEAD_NORM_EPS) * w
    return x / torch.sqrt((x * x).mean(-1, keepdim=True) + HEAD_NORM_EPS) * w


def reference_logits(mha, qh, kh, h):
    """float64 logits of head ``h`` for ``qh`` ``(T, D)``, ``kh`` ``(S, D)``:
    ``g_h cos(q, k)`` (l2), ``N_q(q).N_k(k) / sqrt(D)`` (layernorm/rmsnorm), ``q.k / sqrt(D)``."""
    kind = mha.qk_norm_type
    # NAP standardizes the scores: no 1/sqrt(D) there (the authors' code)
    d_scale = 1.0 if mha.attn_normalization == "nap" else math.sqrt(D)
    if kind is None or kind == "rmsnorm_full":  # rmsnorm_full: q, k normalized before the split
        return qh @ kh.T / d_scale
    if kind in ("l2", "lp"):
        g = mha.qk_norm_g.detach().double()
        g = g[h] if g.dim() else g
        p = 2.0 if kind == "l2" else mha.qk_norm_p

        def norm_p(x):  # (sum |x|^p)^(1/p), written out
            return (x.abs() ** p).sum(-1, keepdim=True) ** (1.0 / p)

        # clamp: a zero vector has zero cosine with everything (documented eps)
        qn = qh / norm_p(qh).clamp_min(L2_EPS)
        kn = kh / norm_p(kh).clamp_min(L2_EPS)
        return g * qn @ kn.T
    wq, wk = mha.q_norm.weight.detach().double(), mha.k_norm.weight.detach().double()
    if kind == "rmsnorm_zc":  # Gemma 3: weight applied as 1 + w
        kind, wq, wk = "rmsnorm", 1.0 + wq, 1.0 + wk
    return head_norm_reference(kind, qh, wq) @ head_norm_reference(kind, kh, wk).T / d_scale


def nap_reference(mha, scores, valid, h):
    """NAP weights of head ``h`` (Richter & Wattenhofer 2020, Sec. 5) for float64 ``scores``
    ``(T, S)`` and a bool ``valid`` ``(T, S)`` (True = attend), one query row at a time."""
    import torch

    gain = float(mha.nap_gain.detach()[h])
    bias = float(mha.nap_bias.detach()[h])
    out = torch.zeros_like(scores)
    for t in range(scores.shape[0]):
        keep = valid[t]
        if not keep.any():
            continue
        row = scores[t][keep]
        mean = row.sum() / row.numel()
        std = math.sqrt(float(((row - mean) ** 2).sum()) / row.numel())  # population std
        out[t][keep] = gain * (row - mean) / (std + 1e-3) + bias
    return out


def reference_attention(mha, query, key, key_padding_mask=None, attn_mask=None, logits_out=None):
    """Straightforward per-head attention written from the papers' formulas: loops over batch
    and heads, bmm-free, float64 (weights upcast from whatever dtype the module has).
    ``logits_out``: a list that receives the masked (B, H, T, S) logits."""
    import torch
    import torch.nn.functional as F

    W = {n: getattr(mha, f"{n}_proj") for n in ("q", "k", "v", "out")}
    lin = {n: (W[n].weight.detach().double(), W[n].bias.detach().double()) for n in W}
    q = F.linear(query.double(), *lin["q"])
    k = F.linear(key.double(), *lin["k"])
    v = F.linear(key.double(), *lin["v"])
    if mha.qk_norm_type == "rmsnorm_full":  # OLMo 2: over the whole width, before the head split
        q = head_norm_reference("rmsnorm", q, mha.q_norm.weight.detach().double())
        k = head_norm_reference("rmsnorm", k, mha.k_norm.weight.detach().double())
    T, B, _ = q.shape
    S = k.shape[0]
    out = torch.zeros(T, B, E, dtype=torch.float64)
    all_logits = torch.zeros(B, H, T, S, dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            sl = slice(h * D, (h + 1) * D)
            qh, kh, vh = q[:, b, sl], k[:, b, sl], v[:, b, sl]  # (T, D), (S, D)
            logits = reference_logits(mha, qh, kh, h)
            cap = mha.attn_logit_softcap
            if cap is not None:  # Gemma 2: cap * tanh(logits / cap), before masking
                logits = cap * torch.tanh(logits / cap)
            if attn_mask is not None:
                logits = logits + attn_mask.double()
            if key_padding_mask is not None:
                logits = logits.masked_fill(key_padding_mask[b][None, :], float("-inf"))
            all_logits[b, h] = logits
            if mha.attn_normalization == "nap":
                weights = nap_reference(mha, logits, torch.isfinite(logits), h)
            else:
                # a query whose keys are all masked attends to nothing (zeros, not NaN)
                weights = torch.nan_to_num(torch.softmax(logits, dim=-1), nan=0.0)
            out[:, b, sl] = weights @ vh
    if logits_out is not None:
        logits_out.append(all_logits)
    return F.linear(out, *lin["out"]).float()


# ------------------------------------------------------------------------------ Slurm
SLURM_COMMANDS = (
    "munged",
    "slurmctld",
    "slurmd",
    "sbatch",
    "squeue",
    "scontrol",
    "scancel",
    "sinfo",
)


def slurm_unavailable() -> str | None:
    """Why a private Slurm cluster cannot run here (None: it can)."""
    if os.geteuid() != 0:
        return "the single-node Slurm test cluster runs munged/slurmctld/slurmd as root"
    path = os.pathsep.join([os.environ.get("PATH", ""), "/usr/sbin", "/sbin"])
    missing = [c for c in SLURM_COMMANDS if shutil.which(c, path=path) is None]
    if missing:
        return (
            f"Slurm is not installed ({', '.join(missing)} not found): "
            "apt-get install slurm-wlm munge"
        )
    return None


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _stop_pid_file(pid_file: Path) -> None:
    """TERM the process named in pid_file (one of our daemons), KILL it after 10 s."""
    try:
        pid = int(pid_file.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return
    for sig, wait in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 2.0)):
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        t0 = time.time()
        while alive(pid) and time.time() - t0 < wait:
            time.sleep(0.1)
        if not alive(pid):
            return


@pytest.fixture(scope="session")
def slurm_cluster(tmp_path_factory):
    """A private single-node Slurm cluster for the session; yields its ``SLURM_CONF`` path.

    munged (own key and socket), slurmctld and slurmd (own ports, state, spool and logs in a
    temporary directory; this node's CPUs and memory from ``slurmd -C``;
    ``proctrack/linuxproc``, ``task/none``, ``select/cons_tres``; no accounting: squeue and
    scontrol show finished jobs for MinJobAge = 600 s). Started when a test asks for it,
    stopped at the end of the session: its jobs are cancelled, then the three daemons are
    stopped by the pids in their pid files. Skips when Slurm is not installed or this is not
    root; a cluster that does not come up is an error (logs in the message).
    """
    reason = slurm_unavailable()
    if reason:
        pytest.skip(reason)
    d = tmp_path_factory.mktemp("slurm")
    for sub in ("state", "spool", "log", "munge"):
        (d / sub).mkdir()
    key = d / "munge" / "munge.key"
    key.write_bytes(os.urandom(1024))
    key.chmod(0o400)
    env = dict(os.environ)
    env["PATH"] = os.pathsep.join([env.get("PATH", ""), "/usr/sbin", "/sbin"])
    node = subprocess.run(["slurmd", "-C"], env=env, capture_output=True, text=True, check=True)
    hw = dict(kv.split("=", 1) for kv in node.stdout.split()[:8] if "=" in kv)
    conf = d / "slurm.conf"
    conf.write_text(
        "\n".join(
            [
                "ClusterName=qktest",
                f"SlurmctldHost={hw['NodeName']}",
                "SlurmUser=root",
                "SlurmdUser=root",
                f"SlurmctldPort={_free_port()}",
                f"SlurmdPort={_free_port()}",
                "AuthType=auth/munge",
                "CredType=cred/munge",
                f"AuthInfo=socket={d / 'munge' / 'munge.socket'}",
                f"StateSaveLocation={d / 'state'}",
                f"SlurmdSpoolDir={d / 'spool'}",
                f"SlurmctldPidFile={d / 'slurmctld.pid'}",
                f"SlurmdPidFile={d / 'slurmd.pid'}",
                f"SlurmctldLogFile={d / 'log' / 'slurmctld.log'}",
                f"SlurmdLogFile={d / 'log' / 'slurmd.log'}",
                "ProctrackType=proctrack/linuxproc",
                "TaskPlugin=task/none",
                "SelectType=select/cons_tres",
                "SelectTypeParameters=CR_Core_Memory",
                "SchedulerType=sched/backfill",
                "ReturnToService=2",
                "MpiDefault=none",
                "MailProg=/bin/true",
                "JobAcctGatherType=jobacct_gather/none",
                "AccountingStorageType=accounting_storage/none",
                "MinJobAge=600",
                "KillWait=5",
                "DefMemPerCPU=500",
                f"NodeName={hw['NodeName']} CPUs={hw['CPUs']} RealMemory={hw['RealMemory']} "
                "State=UNKNOWN",
                f"PartitionName=debug Nodes={hw['NodeName']} Default=YES MaxTime=INFINITE State=UP",
            ]
        )
        + "\n"
    )
    env["SLURM_CONF"] = str(conf)
    pid_files = [d / "slurmd.pid", d / "slurmctld.pid", d / "munge" / "munged.pid"]
    try:
        subprocess.run(
            [
                "munged",
                "-f",
                f"--socket={d / 'munge' / 'munge.socket'}",
                f"--key-file={key}",
                f"--pid-file={pid_files[2]}",
                f"--log-file={d / 'log' / 'munged.log'}",
                f"--seed-file={d / 'munge' / 'seed'}",
            ],
            env=env,
            check=True,
            capture_output=True,
            timeout=FAR_BOUND,
        )
        subprocess.run(["slurmctld", "-f", conf], env=env, check=True, timeout=FAR_BOUND)
        subprocess.run(["slurmd", "-f", conf], env=env, check=True, timeout=FAR_BOUND)
        t0 = time.time()
        while True:
            state = subprocess.run(
                ["sinfo", "-h", "-o", "%t"], env=env, capture_output=True, text=True
            ).stdout.strip()
            if state == "idle":
                break
            if time.time() - t0 > FAR_BOUND:
                logs = "\n".join(p.read_text()[-1500:] for p in (d / "log").iterdir())
                raise RuntimeError(
                    f"test Slurm cluster not idle after {FAR_BOUND:.0f} s ({state!r}):\n{logs}"
                )
            time.sleep(0.2)
        yield conf
    finally:
        subprocess.run(
            ["scancel", "--user", "root"], env=env, capture_output=True, timeout=FAR_BOUND
        )
        t0 = time.time()
        while time.time() - t0 < 60:
            q = subprocess.run(
                ["squeue", "-h", "-o", "%i"], env=env, capture_output=True, text=True
            )
            if q.returncode != 0 or not q.stdout.strip():
                break
            time.sleep(0.5)
        for pid_file in pid_files:
            _stop_pid_file(pid_file)


def assert_incremental_equals_full_with_reorders(model, d, orders) -> dict:
    """Beam-search-like decoding of an eval-mode ``model`` with dictionary ``d``: 2 random
    sources of length 6 (the second one padded), encoder states expanded per beam (2) and
    shared by the encoder-decoder attention (``set_beam_size``), 5 incremental steps with the
    cache reordered after every step by ``orders[t % len(orders)]`` (index tensors over the
    4 beams: swaps, copies over others); each step's output equals the full forward of the
    reordered prefixes. Returns the incremental state (for checks of the cache)."""
    import torch

    torch.manual_seed(0)
    B, beam, S, T = 2, 2, 6, 5
    src = torch.randint(d.nspecial, len(d), (B, S))
    src[1, :2] = d.pad()
    src[:, -1] = d.eos()
    prev = torch.randint(d.nspecial, len(d), (B * beam, T))
    prev[:, 0] = d.eos()
    state: dict = {}
    with torch.no_grad():
        enc = model.encoder(src, src_lengths=(src != d.pad()).sum(1))
        enc = model.encoder.reorder_encoder_out(enc, torch.arange(B).repeat_interleave(beam))
        model.decoder.set_beam_size(beam)
        for t in range(T):
            step, _ = model.decoder(prev[:, : t + 1], encoder_out=enc, incremental_state=state)
            full, _ = model.decoder(prev[:, : t + 1], encoder_out=enc)
            torch.testing.assert_close(step[:, -1], full[:, -1], atol=1e-5, rtol=1e-4)
            order = orders[t % len(orders)]
            prev = prev[order]
            model.decoder.reorder_incremental_state_scripting(state, order)
    return state


def assert_beam_scores_equal_full_forward(model, d, n_sentences: int) -> None:
    """fairseq's SequenceGenerator (beam 3: incremental decoding, beam-shared encoder keys,
    reordering) on ``n_sentences`` random sources of length 7 (the second one padded): every
    hypothesis' positional scores equal the full (non-incremental) forward's log-probabilities."""
    import torch
    from fairseq.sequence_generator import SequenceGenerator

    g = torch.Generator().manual_seed(1)
    src = torch.randint(d.nspecial, len(d), (n_sentences, 7), generator=g)
    src[1, :3] = d.pad()
    src[:, -1] = d.eos()
    lengths = (src != d.pad()).sum(1)
    generator = SequenceGenerator([model], d, beam_size=3, max_len_b=6)
    with torch.no_grad():
        hypos = generator.generate(
            [model], {"net_input": {"src_tokens": src, "src_lengths": lengths}}
        )
        for i, sentence in enumerate(hypos):
            assert len(sentence) == 3
            for hypo in sentence:
                tokens = hypo["tokens"]
                prev = torch.cat([tokens.new_tensor([d.eos()]), tokens[:-1]])[None]
                out = model(src[i : i + 1], lengths[i : i + 1], prev)
                lprobs = model.get_normalized_probs(out, log_probs=True)[0]
                scores = lprobs.gather(-1, tokens[:, None]).squeeze(-1)
                torch.testing.assert_close(hypo["positional_scores"], scores, atol=1e-4, rtol=1e-4)


def run_progress_filter(filt, heartbeat: float):
    """Run a ``qknorm_tools.progress`` filter (``filt.filter(lines, out, heartbeat=...)``) in a
    thread, fed line by line.

    Returns ``(lines, text, thread)``: put ``bytes`` lines on the queue ``lines`` (``None``
    ends the input), ``text()`` is what the filter wrote so far (thread-safe), join ``thread``.
    """
    import io
    import queue
    import threading

    lines: queue.Queue = queue.Queue()
    buf, lock = io.BytesIO(), threading.Lock()

    class Out:
        def write(self, b):
            with lock:
                buf.write(b)

        def flush(self):
            pass

    def text():
        with lock:
            return buf.getvalue().decode()

    def feed():
        while (line := lines.get()) is not None:
            yield line

    t = threading.Thread(target=filt.filter, args=(feed(), Out()), kwargs={"heartbeat": heartbeat})
    t.start()
    return lines, text, t
