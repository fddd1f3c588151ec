"""The experiment grid: every (pair, system, profile) cell resolves to the papers' settings and
builds the intended model; scripts/reproduce.sh and scripts/ablation.sh drive it.

Expected values are the papers', not the configs' (TWT = Nguyen & Salazar 2019, Table 1, Sec. 4
and code; QKNorm = Henry et al. 2020; gathered in ../shared/reference.md). Every script runs with
QKNORM_WORK_DIR set to an empty temporary directory, so no data/BPE exists: QKNorm systems show
the authors' L, and nothing may be written there by a dry run.
"""

import contextlib
import io
import json
import math
import re
import shlex
import subprocess
from pathlib import Path

import pytest

from qknorm_tools import config, run
from qknorm_tools.scoring import score_lines

from conftest import REPO, cli_env, flags, shell_assignments, train_commands

SCRIPTS = REPO / "scripts"

# TWT Table 1 (layers = encoder and decoder layers) and the QKNorm authors' L per pair
PAPER = {
    "gl-en": dict(
        src="gl", tgt="en", layers=4, heads=4, dropout=0.4, merges=3000, L=79, max_epoch=1000
    ),
    "sk-en": dict(
        src="sk", tgt="en", layers=6, heads=8, dropout=0.3, merges=8000, L=75, max_epoch=200
    ),
    "en-vi": dict(
        src="en", tgt="vi", layers=6, heads=8, dropout=0.3, merges=8000, L=72, max_epoch=200
    ),
    "he-en": dict(
        src="en", tgt="he", layers=6, heads=8, dropout=0.3, merges=8000, L=72, max_epoch=200
    ),
    "ar-en": dict(
        src="ar", tgt="en", layers=6, heads=8, dropout=0.3, merges=8000, L=75, max_epoch=200
    ),
}
PROFILES = ("cpu-proxy", "paper")

# system -> (PreNorm, norm type, FixNorm, QK norm on): TWT Table 3 rows, the QKNorm paper's model,
# the missing ablation cell and QK-LayerNorm (ViT-22B)
SYSTEMS = {
    "postnorm_layernorm": (False, "layernorm", False, False),  # TWT Table 3 (1)
    "prenorm_layernorm": (True, "layernorm", False, False),  # TWT Table 3 (2)
    "prenorm_fixnorm_layernorm": (True, "layernorm", True, False),  # TWT Table 3 (3)
    "twt": (True, "scalenorm", True, False),  # TWT Table 3 (4)
    "qknorm_paper": (True, "layernorm", True, True),  # Henry et al. 2020
    "scalenorm_qknorm": (True, "scalenorm", True, True),  # ablation cell
    "qk_layernorm": (True, "layernorm", True, True),  # QK-LayerNorm (Dehghani et al. 2023)
    "prenorm_fixnorm_rmsnorm": (True, "rmsnorm", True, False),  # RMSNorm (Zhang & Sennrich)
}
# the member of the QK-norm family of the systems with QK norm on (l2 = QKNorm, Henry et al.)
QK_NORM_TYPE = {"qk_layernorm": "layernorm"}
# every system has a named arch family (fairseq_qknorm/models/transformer_qknorm.py), whose
# sizes the profiles pick: *_proxy (CPU), the paper size (gl-en: *_small, others: the base arch)
FAMILY = {s: f"transformer_{s}" for s in SYSTEMS}
ABLATION = {
    "layernorm_dot": "prenorm_fixnorm_layernorm",
    "layernorm_qknorm": "qknorm_paper",
    "scalenorm_dot": "twt",
    "scalenorm_qknorm": "scalenorm_qknorm",
}


# ------------------------------------------------------------------------------------ helpers
@pytest.fixture(scope="module")
def work(tmp_path_factory):
    """An empty QKNORM_WORK_DIR (no data, runs or results)."""
    return tmp_path_factory.mktemp("work")


def script(name, *args, work_dir, check=True):
    """Run scripts/NAME with QKNORM_WORK_DIR=work_dir and without environment overrides."""
    env = cli_env()
    env["QKNORM_WORK_DIR"] = str(work_dir)
    for var in ("QKNORM_MAX_UPDATE", "QKNORM_THREADS", "QKNORM_DATA_DIR"):
        env.pop(var, None)
    proc = subprocess.run(
        ["bash", str(SCRIPTS / name), *map(str, args)], env=env, capture_output=True, text=True
    )
    if check and proc.returncode != 0:
        raise AssertionError(
            f"{name} {args} failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n"
            f"{proc.stderr[-3000:]}"
        )
    return proc


def dry_run_cmd(pair, system, profile, work_dir, seed=1):
    """The command ``train.sh PAIR SYSTEM --profile PROFILE --seed SEED --dry-run`` prints, from
    its plan in process (``python -m qknorm_tools.run train-plan``, as train.sh calls it, fp32:
    QKNORM_BF16=0), ``env OMP_NUM_THREADS=N`` first; tests/test_golden.py checks, token by token,
    that train.sh prints exactly this plan."""
    argv = ["train-plan", "--pair", pair, "--system", system, "--profile", profile,
            "--seed", str(seed), "--precision", "fp32", f"--work-dir={work_dir}",
            f"--data-root={work_dir}/data", "--dry-run"]  # fmt: skip
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        rc = run.main(argv)
    assert rc == 0, buf.getvalue()
    values = shell_assignments(buf.getvalue())
    return ["env", f"OMP_NUM_THREADS={values['THREADS'][0]}", *values["CMD"]]


def pair_config(pair):
    """BPE_MERGES and PAPER_L as the scripts see them (scripts/lib.sh:load_pair_config)."""
    out = subprocess.run(
        [
            "bash",
            "-c",
            f'source "{SCRIPTS}/lib.sh"; load_pair_config {pair}; echo "$BPE_MERGES $PAPER_L"',
        ],
        env=cli_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    return int(out[0]), int(out[1])


def resolved_args(cmd):
    """The hyperparameters fairseq resolves from a dry-run command (its real argument parsing,
    the named arch's defaults applied)."""
    from fairseq import options

    import fairseq_qknorm  # noqa: F401

    argv = cmd[cmd.index("fairseq-train") + 1 :]
    return options.parse_args_and_arch(options.get_training_parser(), argv)


# --------------------------------------------------------- (a) every cell resolves correctly
SIZE_FLAGS = (
    "--encoder-layers",
    "--decoder-layers",
    "--encoder-attention-heads",
    "--decoder-attention-heads",
    "--encoder-embed-dim",
    "--decoder-embed-dim",
    "--encoder-ffn-embed-dim",
    "--decoder-ffn-embed-dim",
)


# paper: every pair (layers, heads, dropout, epochs and L differ by pair); cpu-proxy: one size for
# every pair, so two pairs (one per direction: the pair-specific flags come from the same code)
CELLS = [(pair, "paper") for pair in PAPER] + [("gl-en", "cpu-proxy"), ("en-vi", "cpu-proxy")]
assert {profile for _, profile in CELLS} == set(PROFILES)


@pytest.mark.parametrize(("pair", "profile"), CELLS)
def test_every_cell_resolves_to_the_papers_settings(pair, profile, work):
    exp = PAPER[pair]
    for system, (prenorm, norm, fix, qk) in SYSTEMS.items():
        cmd = dry_run_cmd(pair, system, profile, work, seed=3)
        f = flags(cmd)
        assert cmd[0] == "env" and cmd[2] == "fairseq-train"
        assert cmd[3] == str(work / "data" / "bin" / pair)
        assert f["--source-lang"] == exp["src"] and f["--target-lang"] == exp["tgt"]
        assert f["--user-dir"] == str(REPO / "fairseq_qknorm")
        assert f["--seed"] == "3"
        assert f["--save-dir"] == str(
            work / "runs" / pair / profile / system / "seed3" / "checkpoints"
        )
        # TWT Sec. 4 (both profiles): clip 1.0, label smoothing 0.1, 4096-token batches
        assert f["--clip-norm"] == "1.0" and f["--label-smoothing"] == "0.1"
        assert f["--criterion"] == "label_smoothed_cross_entropy"
        assert f["--max-tokens"] == "4096" and f["--optimizer"] == "adam"
        # sizes come from the named arch only: no size flag on the command line
        assert not set(SIZE_FLAGS) & set(f), (system, f)
        a = resolved_args(cmd)
        assert (a.encoder_normalize_before, a.decoder_normalize_before) == (prenorm, prenorm)
        assert (a.norm_type, bool(a.fix_norm), bool(a.qk_norm)) == (norm, fix, qk)
        assert a.share_all_embeddings is True  # TWT: tied source/target/output embeddings
        if profile == "paper":
            size = "_small" if exp["layers"] == 4 else ""
            assert f["--arch"] == FAMILY[system] + size
            assert a.encoder_layers == a.decoder_layers == exp["layers"]
            assert a.encoder_attention_heads == a.decoder_attention_heads == exp["heads"]
            assert a.dropout == exp["dropout"] and "--dropout" not in f
            assert a.encoder_embed_dim == a.decoder_embed_dim == 512
            assert a.encoder_ffn_embed_dim == a.decoder_ffn_embed_dim == 2048
            assert f["--adam-betas"] == "(0.9,0.999)" and f["--adam-eps"] == "1e-8"
            assert f["--warmup-updates"] == "8000"
            assert f["--lr-scheduler"] == "reduce_lr_on_plateau"
            assert f["--lr-shrink"] == "0.8" and f["--lr-patience"] == "3"
            assert f["--eval-bleu"] is True and f["--eval-tokenized-bleu"] is True
            # the data's BPE tool (no data/bpe here: the pair's default, subword-nmt)
            assert f["--eval-bleu-remove-bpe"] == "subword_nmt"
            assert f["--stop-min-lr"] == "1e-9" and f["--warmup-init-lr"] == "1e-7"
            assert json.loads(f["--eval-bleu-args"]) == {"beam": 4}  # TWT code: beam 4
            assert f["--best-checkpoint-metric"] == "bleu"
            assert f["--maximize-best-checkpoint-metric"] is True
            assert f["--max-epoch"] == str(exp["max_epoch"]) and f["--max-update"] == "0"
        else:
            assert f["--arch"] == FAMILY[system] + "_proxy"
            assert a.encoder_layers == a.decoder_layers == 3
            assert a.encoder_attention_heads == a.decoder_attention_heads == 4
            assert a.encoder_embed_dim == a.decoder_embed_dim == 256
            assert a.encoder_ffn_embed_dim == a.decoder_ffn_embed_dim == 1024
            assert a.dropout == 0.3
            assert f["--max-update"] == "1200"
        if qk and QK_NORM_TYPE.get(system, "l2") == "l2":  # no data/bpe: the authors' L
            assert f["--qk-norm-length"] == str(exp["L"]), (system, f)
            assert a.qk_norm_length == exp["L"] and a.qk_norm_type == "l2"
        elif qk:  # QK-LayerNorm: no g, so no L
            assert "--qk-norm-length" not in f and a.qk_norm_length is None, (system, f)
            assert a.qk_norm_type == QK_NORM_TYPE[system]
        else:
            assert "--qk-norm-length" not in f and "--qk-norm" not in f, (system, f)


@pytest.mark.parametrize("pair", list(PAPER))
def test_pair_configs_match_the_papers(pair):
    merges, L = pair_config(pair)
    assert merges == PAPER[pair]["merges"]  # TWT Table 1: joint BPE 3k (gl-en) / 8k
    assert L == PAPER[pair]["L"]  # QKNorm authors' 97.5th-percentile length
    # g0 = log2(L^2 - L): 12.59 (gl), 12.44 (sk, ar), 12.32 (vi, he)
    assert round(math.log2(L * L - L), 2) == {79: 12.59, 75: 12.44, 72: 12.32}[L]


# ---------------------------------------------- (b) each system's resolved args build its model
def _toy_argv(cmd, bin_dir):
    """A dry-run command as fairseq-train argv on the toy data: data path and languages replaced,
    --tensorboard-logdir dropped; sizes untouched."""
    argv = cmd[cmd.index("fairseq-train") + 1 :]
    argv[0] = str(bin_dir)
    out, i = [], 0
    while i < len(argv):
        tok = argv[i]
        if tok == "--tensorboard-logdir":
            i += 2
            continue
        if tok in ("--source-lang", "--target-lang"):
            out += [tok, "src" if tok == "--source-lang" else "tgt"]
            i += 2
            continue
        out.append(tok)
        i += 1
    return out


@pytest.fixture(scope="module")
def system_models(toy_data, work):
    """system -> (args, model) built from the cpu-proxy gl-en dry-run command, and the paper
    profile's parsed args per system."""
    from fairseq import options, tasks

    import fairseq_qknorm  # noqa: F401

    _, bin_dir = toy_data
    built, paper_args = {}, {}
    for system in SYSTEMS:
        argv = _toy_argv(dry_run_cmd("gl-en", system, "cpu-proxy", work), bin_dir)
        args = options.parse_args_and_arch(options.get_training_parser(), argv)
        task = tasks.setup_task(args)
        built[system] = (args, task.build_model(args))
        argv = _toy_argv(dry_run_cmd("gl-en", system, "paper", work), bin_dir)
        paper_args[system] = options.parse_args_and_arch(options.get_training_parser(), argv)
    return built, paper_args


@pytest.mark.parametrize("system", list(SYSTEMS))
@pytest.mark.slow
def test_system_builds_the_described_model(system, system_models):
    import torch.nn as nn

    from fairseq_qknorm.modules import FixNormEmbedding, FixNormLinear, RMSNorm, ScaleNorm

    prenorm, norm, fix, qk = SYSTEMS[system]
    args, model = system_models[0][system]
    enc, dec = model.encoder, model.decoder
    # PreNorm = fairseq's normalize_before; with it, a final norm after each stack
    assert args.encoder_normalize_before is prenorm and args.decoder_normalize_before is prenorm
    assert enc.layers[0].normalize_before is prenorm and dec.layers[0].normalize_before is prenorm
    assert (enc.layer_norm is not None) is prenorm and (dec.layer_norm is not None) is prenorm
    # LayerNorm vs ScaleNorm vs RMSNorm in every norm of every layer (and the final norms)
    assert args.norm_type == norm
    norms = [
        m
        for layer in list(enc.layers) + list(dec.layers)
        for m in (layer.self_attn_layer_norm, layer.final_layer_norm)
    ]
    norms += [layer.encoder_attn_layer_norm for layer in dec.layers]
    norms += [m for m in (enc.layer_norm, dec.layer_norm) if m is not None]
    want = {"scalenorm": ScaleNorm, "rmsnorm": RMSNorm}.get(norm, nn.LayerNorm)
    assert len(norms) == 3 * 2 + 3 * 3 + (2 if prenorm else 0)
    assert all(isinstance(m, want) for m in norms), [type(m).__name__ for m in norms]
    # FixNorm: l2-normalized tied embeddings and output projection
    assert bool(args.fix_norm) is fix
    assert isinstance(enc.embed_tokens, FixNormEmbedding) is fix
    assert isinstance(dec.output_projection, FixNormLinear) is fix
    assert enc.embed_tokens is dec.embed_tokens  # --share-all-embeddings (TWT)
    assert dec.output_projection.weight is dec.embed_tokens.weight
    # QKNorm in every attention module, g0 = log2(L^2 - L) with the authors' L = 79 for gl-en
    attn = model.attention_modules()
    assert len(attn) == 3 + 3 + 3
    assert all(m.qk_norm is qk for m in attn.values())
    if qk and QK_NORM_TYPE.get(system, "l2") == "l2":
        assert all(abs(m.qk_norm_g.item() - math.log2(79 * 79 - 79)) < 1e-5 for m in attn.values())
    elif qk:  # per-head LayerNorm of q and k over d_head = 256 / 4, no g
        assert all(m.qk_norm_type == QK_NORM_TYPE[system] for m in attn.values())
        assert all(m.qk_norm_g is None for m in attn.values())
        assert all(isinstance(m.q_norm, nn.LayerNorm) for m in attn.values())
        assert all(m.q_norm.normalized_shape == (64,) for m in attn.values())
    else:
        assert all(m.qk_norm_g is None for m in attn.values())
    # cpu-proxy size: 3+3 layers, d 256, FFN 1024, 4 heads
    assert len(enc.layers) == len(dec.layers) == 3
    assert enc.embed_tokens.embedding_dim == 256
    assert enc.layers[0].fc1.out_features == dec.layers[0].fc1.out_features == 1024
    assert enc.layers[0].self_attn.num_heads == dec.layers[0].encoder_attn.num_heads == 4


@pytest.mark.parametrize("system", list(SYSTEMS))
def test_paper_profile_args_parse_with_the_described_flags(system, system_models):
    prenorm, norm, fix, qk = SYSTEMS[system]
    a = system_models[1][system]
    assert (a.encoder_normalize_before, a.norm_type, bool(a.fix_norm), bool(a.qk_norm)) == (
        prenorm,
        norm,
        fix,
        qk,
    )
    assert a.share_all_embeddings is True
    assert (
        a.encoder_layers,
        a.encoder_attention_heads,
        a.encoder_embed_dim,
        a.encoder_ffn_embed_dim,
    ) == (4, 4, 512, 2048)
    assert (
        a.dropout == 0.4
        and a.adam_betas == "(0.9,0.999)"
        and a.lr_shrink == 0.8
        and a.lr_patience == 3
    )
    assert a.eval_bleu and a.best_checkpoint_metric == "bleu" and a.maximize_best_checkpoint_metric


def test_paper_profile_word_dropout(work):
    """TWT Sec. 4: word dropout 0.1 (fairseq_qknorm/tasks/translation_word_dropout.py)."""
    f = flags(dry_run_cmd("sk-en", "twt", "paper", work))
    if "--word-dropout" not in f:
        pytest.skip("configs/profiles/paper.toml does not enable word dropout yet (DEVIATION)")
    assert f["--task"] == "translation_word_dropout" and f["--word-dropout"] == "0.1"
    assert "--word-dropout" not in flags(dry_run_cmd("sk-en", "twt", "cpu-proxy", work))


# ------------------------------------------------------------- (c) reproduce.sh over the grid
@pytest.mark.parametrize("profile", PROFILES)
@pytest.mark.slow
def test_reproduce_dry_run_prints_the_whole_grid(profile, work):
    proc = script(
        "reproduce.sh",
        "--pairs",
        "all",
        "--systems",
        ",".join(SYSTEMS),  # "all" is the papers' six (test_launcher); qk_layernorm by name
        "--seeds",
        "1,2",
        "--profile",
        profile,
        "--dry-run",
        work_dir=work,
    )
    cmds = train_commands(proc.stdout)
    assert len(cmds) == 5 * len(SYSTEMS) * 2
    cells = {tuple(Path(flags(c)["--save-dir"]).parts[-5:-1]) for c in cmds}
    assert cells == {(p, profile, s, f"seed{n}") for p in PAPER for s in SYSTEMS for n in (1, 2)}
    assert all(
        flags(c)["--seed"] == c_dir[-1][4:]
        for c, c_dir in ((c, Path(flags(c)["--save-dir"]).parts[-5:-1]) for c in cmds)
    )
    assert (
        len(re.findall(r"^bash \S+/evaluate\.sh ", proc.stdout, flags=re.M)) == 5 * len(SYSTEMS) * 2
    )
    for p in PAPER:
        assert re.search(rf"^bash \S+/prepare_data\.sh {p}$", proc.stdout, flags=re.M)
        assert re.search(rf"^bash \S+/binarize\.sh {p}$", proc.stdout, flags=re.M)
    agg = [
        shlex.split(line)
        for line in proc.stdout.splitlines()
        if "qknorm_tools.collect runs" in line
    ]
    assert len(agg) == 1
    af = flags(agg[0])
    # results/PROFILE/PAIRS: the pairs of the grid joined by "+"
    assert af["--baseline"] == "twt" and af["--aggregate"] is True
    assert af["--out-dir"] == str(work / "results" / profile / "+".join(sorted(PAPER)))
    refs = [agg[0][i + 1] for i, t in enumerate(agg[0]) if t == "--ref"]
    assert sorted(refs) == sorted(f"{p}={work}/data/raw/{p}/test.{PAPER[p]['tgt']}" for p in PAPER)
    run_dirs = {agg[0][i + 1] for i, t in enumerate(agg[0]) if t == "--run"}
    assert run_dirs == {str(Path(flags(c)["--save-dir"]).parent) for c in cmds}
    assert not any(work.iterdir()), "a dry run must not write anything"


@pytest.mark.slow
def test_reproduce_jobs_2_gives_each_cell_one_thread(work):
    proc = script(
        "reproduce.sh",
        "--pairs",
        "gl-en",
        "--systems",
        "twt,qknorm_paper",
        "--seeds",
        "1",
        "--jobs",
        "2",
        "--max-update",
        "77",
        "--dry-run",
        work_dir=work,
    )
    cmds = train_commands(proc.stdout)
    assert len(cmds) == 2 and all(c[1] == "OMP_NUM_THREADS=1" for c in cmds)
    assert all(flags(c)["--max-update"] == "77" for c in cmds)
    # another budget than the profile's: its own runs and results, never the profile's
    assert all(Path(flags(c)["--save-dir"]).parts[-4] == "cpu-proxy-max-update-77" for c in cmds)
    assert f"--out-dir {work}/results/cpu-proxy-max-update-77/gl-en " in proc.stdout


@pytest.mark.parametrize(
    "args, rc, message",
    [
        (
            ["--pairs", "xx-en", "--systems", "twt"],
            2,  # a usage error: the message and the usage line
            "unknown pair 'xx-en' (known pairs: ar-en en-vi gl-en he-en sk-en",
        ),
        (
            ["--pairs", "gl-en", "--systems", "twt,bogus"],
            2,  # a usage error: the message and the usage line
            # every configs/systems/*.toml, in order
            "unknown system 'bogus' (known systems: "
            + " ".join(sorted(p.stem for p in (REPO / "configs" / "systems").glob("*.toml")))
            + "; or 'all')",
        ),
        (
            ["--pairs", "gl-en", "--systems", "twt", "--profile", "gpu"],
            2,  # a usage error: the message and the usage line
            # every configs/profiles/*.toml, in the order of qknorm_tools.config.names
            f"unknown profile 'gpu' (known profiles: {' '.join(config.names('profiles'))})",
        ),
        (["--pairs", "gl-en", "--systems", "twt", "--seeds", "1,x"], 2, "bad --seeds list '1,x'"),
        (["--pairs", "gl-en", "--systems", "twt", "--seeds", "1,,2"], 2, "bad --seeds list '1,,2'"),
        (["--pairs", "gl-en", "--systems", "twt", "--seeds", "1,"], 2, "bad --seeds list '1,'"),
        # white space inside an item: "1 2" is neither seed 12 nor seeds 1 and 2 (a trial ran 12)
        (
            ["--pairs", "gl-en", "--systems", "twt", "--seeds", "1 2"],
            2,
            "bad list '1 2': item '1 2' holds white space; the items are separated by commas",
        ),
        (["--pairs", "gl-en mini", "--systems", "twt"], 2, "item 'gl-en mini' holds white space"),
        # seed01 and seed1 would be the same fairseq seed counted twice
        (["--pairs", "gl-en", "--systems", "twt", "--seeds", "01,1"], 2, "bad --seeds list '01,1'"),
        # a repeat is a typo (of 1,2 or twt,qknorm_paper), not silently one cell
        (
            ["--pairs", "gl-en", "--systems", "twt", "--seeds", "1, 2,1"],
            2,
            "bad --seeds list '1, 2,1': 1 is given twice",
        ),
        (
            ["--pairs", "gl-en", "--systems", "twt,qknorm_paper,twt"],
            2,
            "bad --systems list 'twt,qknorm_paper,twt': twt is given twice",
        ),
        # "00" is the budget 0 (never stops) in disguise; an option is not a value
        (["--pairs", "gl-en", "--systems", "twt", "--max-update", "00"], 2, "--max-update must be"),
        (
            ["--pairs", "gl-en", "--systems", "twt", "--results-dir", "--dry-run"],
            2,
            "--results-dir needs a value",
        ),
        (["--pairs", "gl-en"], 2, "--systems is required"),
        (
            ["--pairs", "gl-en", "--systems", "twt", "--jobs", "0"],
            2,
            "--jobs must be a positive integer",
        ),
    ],
)
@pytest.mark.slow
def test_reproduce_rejects_bad_arguments(args, rc, message, work):
    proc = script("reproduce.sh", *args, "--dry-run", work_dir=work, check=False)
    assert proc.returncode == rc, proc.stderr
    assert message in proc.stderr
    assert "fairseq-train" not in proc.stdout


@pytest.mark.slow
def test_reproduce_list_shows_pairs_systems_rows_and_profiles(work):
    out = script("reproduce.sh", "--list", work_dir=work).stdout
    # the paper sizes (layers, heads, dropout) are the archs' (test_every_cell_resolves...)
    assert re.search(r"gl-en\s+gl->en.*BPE\s+3000 merges\s+paper size small\s+QKNorm L 79", out)
    assert re.search(r"he-en\s+en->he.*BPE\s+8000 merges\s+paper size base\s+QKNorm L 72", out)
    assert re.search(
        r"postnorm_layernorm\s+PostNorm \+ LayerNorm\s+TWT Table 3 \(1\)\s+"
        r"transformer_postnorm_layernorm\n",
        out,
    )
    assert re.search(
        r"twt\s+PreNorm \+ FixNorm \+ ScaleNorm\s+TWT Table 3 \(4\).*transformer_twt\n", out
    )
    assert re.search(
        r"paper\s+sk-en\s+arch transformer_twt\s+dropout arch\s+max-update 0\s+max-epoch 200", out
    )
    assert re.search(r"paper\s+gl-en\s+arch transformer_twt_small\s", out)
    assert re.search(
        r"cpu-proxy\s+sk-en\s+arch transformer_twt_proxy\s+dropout arch\s+max-update 1200", out
    )
    assert re.search(
        r"cpu-proxy-fast\s+sk-en\s+arch transformer_twt_proxy\s+dropout 0.1\s+max-update 1000", out
    )


def _fake_cell(work, pair, system, seed, hyps, refs):
    """A finished cell as train.sh + evaluate.sh leave it (scores from the real scorer)."""
    run = work / "runs" / pair / "cpu-proxy" / system / f"seed{seed}"
    run.mkdir(parents=True)
    (run / "test.hyp").write_text("\n".join(hyps) + "\n", encoding="utf-8")
    (run / "test.score.json").write_text(json.dumps(score_lines(hyps, refs)), encoding="utf-8")
    train = {
        "pair": pair,
        "profile": "cpu-proxy",
        "system": system,
        "seed": seed,
        "arch": f"transformer_{system}_proxy",
        "updates": 10 + seed,
        "wall_seconds": 5,
    }
    (run / "train.json").write_text(json.dumps(train), encoding="utf-8")
    return run


@pytest.mark.slow
def test_ablation_without_a_finished_cell_reports_nothing_and_keeps_the_earlier_results(tmp_path):
    """ablation.sh --aggregate-only with no finished cell (runs/ deleted, another machine) fails
    and leaves the earlier collection's runs.json as it was, instead of reporting on it as if it
    were this grid's, or replacing it with an empty one."""
    res = tmp_path / "results" / "cpu-proxy" / "gl-en"
    res.mkdir(parents=True)
    earlier = '{"runs": [{"pair": "gl-en", "system": "twt"}]}'
    (res / "runs.json").write_text(earlier)
    args = ("gl-en", "--profile", "cpu-proxy", "--aggregate-only")
    proc = script("ablation.sh", *args, work_dir=tmp_path, check=False)
    assert proc.returncode == 1, proc.stderr
    # the collection's own precise message, then only what applies (issue 37, item 3)
    assert f"nothing to report; {res}/runs.json left as it was" in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "error: collecting the finished cells failed (above): no report written"
    )
    assert "rerun" not in proc.stderr
    # the failure is said once (was a warning, 'failed: aggregation (above)' and this line)
    assert proc.stderr.count("collecting the finished cells failed") == 1, proc.stderr
    assert "failed: aggregation" not in proc.stderr and "warning" not in proc.stderr
    # the collection (scripts/reproduce.sh, a step of this script) speaks as the script run
    assert "[ablation] profile cpu-proxy: pairs gl-en;" in proc.stderr
    assert "[reproduce]" not in proc.stderr
    assert (res / "runs.json").read_text() == earlier
    assert not (res / "ablation.md").exists()


@pytest.mark.slow
def test_ablation_with_a_cell_of_no_record_writes_nothing_and_names_the_cells(tmp_path):
    """``ablation.sh --aggregate-only`` where two of the 2x2's cells have no finished run nor
    committed record (cpu-fixed-d128: records of twt and qknorm_paper only) used to write
    runs.json and aggregate.*, then fail on the report: now the collection refuses first, naming
    the cells, and the results directory holds only its records."""
    import shutil

    res = tmp_path / "results" / "cpu-fixed-d128" / "gl-en"
    shutil.copytree(REPO / "results/cpu-fixed-d128/gl-en/records/twt/seed1",
                    res / "records/twt/seed1")  # fmt: skip
    shutil.copytree(REPO / "results/cpu-fixed-d128/gl-en/records/qknorm_paper/seed1",
                    res / "records/qknorm_paper/seed1")  # fmt: skip
    before = sorted(p.relative_to(res) for p in res.rglob("*"))
    args = ("gl-en", "--profile", "cpu-fixed-d128", "--seeds", "1", "--aggregate-only")
    proc = script("ablation.sh", *args, work_dir=tmp_path, check=False)
    assert proc.returncode == 1, proc.stderr
    assert (
        "error: gl-en/prenorm_fixnorm_layernorm, gl-en/scalenorm_qknorm: no finished run or "
        "committed record among the 4 runs given"
    ) in proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "error: collecting the finished cells failed (above): no report written"
    )
    assert proc.stderr.count("collecting the finished cells failed") == 1, proc.stderr
    assert sorted(p.relative_to(res) for p in res.rglob("*")) == before


@pytest.mark.slow
def test_ablation_of_the_declared_design_reports_only_the_whole_grid(tmp_path):
    """``ablation.sh --aggregate-only`` without --seeds on a profile with a declared design
    (cpu-converge-d128: 10 seeds per cell, no effect read before all 40 cells) while cells are
    unfinished (a new user's trial: it rewrote the committed runs.json and aggregate.* with
    interim means, then stopped): the collection refuses first, naming how many are unfinished,
    and the results directory is left as it was."""
    import shutil

    res = tmp_path / "results" / "cpu-converge-d128" / "gl-en"
    for system in ("twt", "qknorm_paper", "prenorm_fixnorm_layernorm", "scalenorm_qknorm"):
        shutil.copytree(REPO / f"results/cpu-converge-d128/gl-en/records/{system}/seed1",
                        res / f"records/{system}/seed1")  # fmt: skip
    (res / "runs.json").write_text("{}")  # an earlier collection
    before = {p.relative_to(res): p.read_bytes() for p in res.rglob("*") if p.is_file()}
    args = ("gl-en", "--profile", "cpu-converge-d128", "--aggregate-only")
    proc = script("ablation.sh", *args, work_dir=tmp_path, check=False)
    assert proc.returncode == 1, proc.stderr
    assert "error: unfinished runs, 36 of 40 (--require-all: nothing written; " in proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "error: collecting the finished cells failed (above): no report written"
    )
    assert {p.relative_to(res): p.read_bytes() for p in res.rglob("*") if p.is_file()} == before


@pytest.mark.slow
def test_reproduce_with_an_invalid_committed_record_says_its_failure_once(tmp_path):
    """``reproduce.sh --aggregate-only`` over an invalid committed record (issue 37): the
    collection's message naming the record, then one line saying the collection failed (it was
    said three times: a warning, 'failed: aggregation (above)' and ablation.sh's line)."""
    import shutil

    res = tmp_path / "results" / "cpu-fixed-d128" / "gl-en"
    shutil.copytree(REPO / "results/cpu-fixed-d128/gl-en/records/twt/seed1",
                    res / "records/twt/seed1")  # fmt: skip
    bad = res / "records/twt/seed1/record.json"
    bad.write_text('{"format": 1, "record": \n', encoding="utf-8")
    args = ("--pairs", "gl-en", "--systems", "twt", "--seeds", "1", "--profile", "cpu-fixed-d128")
    proc = script("reproduce.sh", *args, "--aggregate-only", work_dir=tmp_path, check=False)
    assert proc.returncode == 1, proc.stderr
    assert [line for line in proc.stderr.splitlines() if "error" in line] == [
        f"error: {str(bad)!r} is not valid UTF-8 JSON: Expecting value: line 2 column 1 (char 25)",
        "error: collecting the finished cells failed (above): no report written",
    ]
    assert "warning" not in proc.stderr and "rerun" not in proc.stderr


@pytest.mark.parametrize(
    "name, args, runs",
    [
        ("reproduce.sh", ("--pairs", "gl-en", "--systems", "twt", "--profile", "cpu-proxy"),
         "runs/gl-en/cpu-proxy/twt/seed1 "),
        # a GPU profile with auto: the line said it trains at the papers' size
        ("reproduce.sh", ("--pairs", "gl-en", "--systems", "twt", "--profile", "paper",
                          "--precision", "auto"), "runs/gl-en/paper/twt/seed1 "),
        ("ablation.sh", ("gl-en", "--profile", "cpu-proxy", "--seeds", "1"),
         "runs/gl-en/cpu-proxy/twt/seed1 "),
    ],
)  # fmt: skip
@pytest.mark.slow
def test_aggregate_only_says_no_precision(tmp_path, name, args, runs):
    """``--aggregate-only`` trains nothing (issue 37, leftover 3): no '[bf16 auto]' line (it
    said 'fp32: this CPU has no native bf16 ...' before the collection); it still looks for the
    runs of the cached precision (fp32 here: the seedN runs), and a dry run, which shows the
    cells' commands, still says the precision it gives them."""
    proc = script(name, *args, "--aggregate-only", work_dir=tmp_path, check=False)
    assert proc.returncode == 1, proc.stderr  # no finished cell
    assert "[bf16 auto]" not in proc.stderr, proc.stderr
    assert f"left out: {tmp_path}/{runs}" in proc.stderr, proc.stderr
    assert proc.stderr.splitlines()[-1] == (
        "error: collecting the finished cells failed (above): no report written"
    )
    dry = script(name, *args, "--dry-run", work_dir=tmp_path)
    assert "[bf16 auto] fp32: " in dry.stderr, dry.stderr


@pytest.mark.slow
def test_reproduce_aggregates_finished_cells(tmp_path):
    refs = [f"the cat number {i} sat on the mat ." for i in range(12)]
    raw = tmp_path / "data" / "raw" / "gl-en"
    raw.mkdir(parents=True)
    (raw / "test.en").write_text("\n".join(refs) + "\n", encoding="utf-8")
    good = [r.replace("sat", "sits") if i % 3 else r for i, r in enumerate(refs)]
    bad = [r.replace("mat", "hat").replace("cat", "dog") for r in refs]
    for seed in (1, 2):
        _fake_cell(tmp_path, "gl-en", "twt", seed, bad, refs)
        _fake_cell(tmp_path, "gl-en", "qknorm_paper", seed, good, refs)
    # unfinished cell (no test.hyp) and a pair without the baseline: left out of the tables
    (tmp_path / "runs" / "gl-en" / "cpu-proxy" / "prenorm_layernorm" / "seed1").mkdir(parents=True)
    _fake_cell(tmp_path, "sk-en", "qknorm_paper", 1, good, refs)
    proc = script(
        "reproduce.sh",
        "--pairs",
        "gl-en,sk-en",
        "--systems",
        "twt,qknorm_paper,prenorm_layernorm",
        "--seeds",
        "1,2",
        "--aggregate-only",
        work_dir=tmp_path,
    )
    assert "sk-en: no finished cell of the baseline 'twt'" in proc.stderr
    assert "[reproduce] profile cpu-proxy: pairs gl-en sk-en;" in proc.stderr  # run by itself
    res = tmp_path / "results" / "cpu-proxy" / "gl-en+sk-en"
    doc = json.loads((res / "runs.json").read_text())
    assert doc["work_dir"] == "../../.."  # paths below are relative to the work dir
    runs = doc["runs"]
    assert sorted((r["pair"], r["system"], r["seed"]) for r in runs) == [
        ("gl-en", "qknorm_paper", 1),
        ("gl-en", "qknorm_paper", 2),
        ("gl-en", "twt", 1),
        ("gl-en", "twt", 2),
        ("sk-en", "qknorm_paper", 1),
    ]
    r = next(r for r in runs if r["system"] == "twt" and r["seed"] == 2)
    score = json.loads((tmp_path / "runs/gl-en/cpu-proxy/twt/seed2/test.score.json").read_text())
    assert (r["bleu_tok"], r["bleu"], r["chrf"]) == (
        score["bleu_tok"],
        score["bleu"],
        score["chrf"],
    )
    assert r["hyp_path"] == "runs/gl-en/cpu-proxy/twt/seed2/test.hyp"
    assert r["ref_path"] == "data/raw/gl-en/test.en" and r["updates"] == 12
    assert r["run_dir"] == "runs/gl-en/cpu-proxy/twt/seed2" and r["profile"] == "cpu-proxy"
    assert str(tmp_path) not in (res / "runs.json").read_text()  # no absolute path
    agg = json.loads((res / "aggregate.json").read_text())
    assert list(agg["pairs"]) == ["gl-en"] and agg["baseline"] == "twt"
    qk = agg["pairs"]["gl-en"]["systems"]["qknorm_paper"]
    assert qk["n_seeds"] == 2 and qk["delta"]["bleu_tok"] > 10
    assert qk["concat"]["p_ar"] < 0.05  # paired test ran on the 2x12 concatenated lines
    assert agg["pairs"]["gl-en"]["n_lines_concat"] == 24
    assert (res / "aggregate.md").exists() and not list(res.glob("*.tmp"))


# ------------------------------------------------------------------------ (d) ablation.sh
@pytest.mark.slow
def test_ablation_dry_run_names_the_four_cells(work):
    proc = script("ablation.sh", "gl-en", "--seeds", "1,2", "--dry-run", work_dir=work)
    for cell, system in ABLATION.items():
        assert re.search(rf"^#\s+{cell}\s+= {system}\s", proc.stdout, flags=re.M), cell
    cmds = train_commands(proc.stdout)
    assert len(cmds) == 4 * 2
    assert {Path(flags(c)["--save-dir"]).parts[-3] for c in cmds} == set(ABLATION.values())
    abl = [
        shlex.split(line)
        for line in proc.stdout.splitlines()
        if "qknorm_tools.evaluate ablation" in line
    ]
    assert len(abl) == 1
    cells = [abl[0][i + 1] for i, t in enumerate(abl[0]) if t == "--cell"]
    assert cells == [f"{c}={s}" for c, s in ABLATION.items()]
    # default profile cpu-proxy-fast: the cpu-proxy model with the one-hour grid's budget
    for c in cmds:
        f, a = flags(c), resolved_args(c)
        assert a.encoder_layers == a.decoder_layers == 3
        assert a.encoder_embed_dim == 256 and a.dropout == 0.1 and f["--dropout"] == "0.1"
        assert (f["--max-tokens"], f["--max-update"], f["--lr"]) == ("1024", "1000", "1e-3")
        assert Path(f["--save-dir"]).parts[-4] == "cpu-proxy-fast"
    out = work / "results" / "cpu-proxy-fast" / "gl-en"
    # run from the work dir: the reference is stored relative to it
    assert flags(abl[0])["--out-dir"] == str(out)
    assert flags(abl[0])["--ref"] == "data/raw/gl-en/test.en"
    assert "plots bleu-bars --json " + str(out / "aggregate.json") in proc.stdout
    assert "plots curves" in proc.stdout
    assert not any(work.iterdir())


@pytest.mark.slow
def test_ablation_status_without_seeds_shows_the_declared_seeds(work):
    """Without --seeds, ``ablation.sh --status`` lists the profile's [design] seeds and says
    where they come from (qknorm_tools.pilot.default_seeds): cpu-converge-d128, the decisive
    grid, declares 10 per cell; it used to list seeds 1,2 without a word."""
    proc = script("ablation.sh", "gl-en", "--status", "--profile", "cpu-converge-d128",
                  work_dir=work)  # fmt: skip
    lines = proc.stdout.splitlines()
    assert lines[0] == "# seeds 1-10: the profile's [design] seeds = 10"
    cells = {m.group(1) for m in re.finditer(r"gl-en/\w+/seed(\d+)", proc.stdout)}
    assert cells == {str(s) for s in range(1, 11)}
    assert "40 cells:" in proc.stdout
    # a profile that declares nothing: seeds 1,2 and no note
    proc = script("ablation.sh", "gl-en", "--status", work_dir=work)
    assert proc.stdout.startswith("state ") and "[ablation]" not in proc.stderr, proc.stderr
    assert {m.group(1) for m in re.finditer(r"gl-en/\w+/seed(\d+)", proc.stdout)} == {"1", "2"}


@pytest.mark.slow
def test_status_names_the_repositorys_records_a_work_dir_elsewhere_lacks(tmp_path):
    """A new user's trial: QKNORM_WORK_DIR elsewhere hid the repository's committed records of
    the decisive grid (40 todo, and they would train again, without a word): said, with the
    copy that counts them."""
    repo = REPO / "results/cpu-converge-d128/gl-en"
    n = len(list(repo.glob("records/*/seed*/record.json")))
    to = tmp_path / "results/cpu-converge-d128/gl-en"
    args = ("ablation.sh", "gl-en", "--status", "--profile", "cpu-converge-d128")
    proc = script(*args, work_dir=tmp_path)
    warning = (
        f"[ablation] warning: {n} cells of this grid have committed records in the repository "
        f"({REPO}: results/cpu-converge-d128/gl-en/records) that QKNORM_WORK_DIR={tmp_path} "
        "does not hold: they count as todo and would train again; to count them: (cd "
        f"'{REPO}' && cp -r --parents results/cpu-converge-d128/gl-en/records '{tmp_path}/') "
        "(or unset QKNORM_WORK_DIR)"
    )
    assert warning in proc.stderr.splitlines(), proc.stderr
    assert "0 failed, 40 todo" in proc.stdout
    # --aggregate-only says it too (a second trial: only 'no finished run')
    agg = script("ablation.sh", "gl-en", "--profile", "cpu-converge-d128", "--seeds", "1,2,3",
                 "--aggregate-only", work_dir=tmp_path, check=False)  # fmt: skip
    twelve = warning.replace(f"warning: {n} cells", "warning: 12 cells")  # seeds 1-3
    assert agg.returncode == 1 and twelve in agg.stderr.splitlines(), agg.stderr
    assert agg.stderr.count("committed records in the repository") == 1  # not again by reproduce.sh
    assert not (tmp_path / "results").exists()  # "no report written", and no empty folder
    # and reproduce.sh --aggregate-only (new-user trial 2: only its collection's refusal)
    systems = "twt,qknorm_paper,prenorm_fixnorm_layernorm,scalenorm_qknorm"
    agg = script("reproduce.sh", "--pairs", "gl-en", "--systems", systems, "--seeds", "1,2,3",
                 "--profile", "cpu-converge-d128", "--aggregate-only", work_dir=tmp_path,
                 check=False)  # fmt: skip
    assert twelve.replace("[ablation]", "[reproduce]") in agg.stderr.splitlines(), agg.stderr
    assert agg.returncode == 1 and agg.stderr.count("committed records in the repository") == 1
    subprocess.run(
        ["cp", "-r", "--parents", "results/cpu-converge-d128/gl-en/records", f"{tmp_path}/"],
        cwd=REPO,
        check=True,
    )  # fmt: skip (the warning's copy)
    assert (to / "records").is_dir()
    proc = script(*args, work_dir=tmp_path)
    assert f"0 failed, {40 - n} todo, {n} committed records" in proc.stdout
    assert "warning" not in proc.stderr, proc.stderr


def test_ablation_rejects_unknown_pair(work):
    proc = script("ablation.sh", "xx-yy", "--dry-run", work_dir=work, check=False)
    assert proc.returncode == 2 and "known pairs: ar-en en-vi gl-en he-en sk-en" in proc.stderr
    assert "usage: scripts/ablation.sh" in proc.stderr
