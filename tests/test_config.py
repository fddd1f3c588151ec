"""qknorm_tools.config: configuration as data (configs/**/*.toml; docs/design/config-as-data.md).

Every file loads; a bad value, an unknown key and an ``extends`` cycle are errors naming the
file and the key; the QKNORM_* overrides; the CLI's ``shell`` output evaluated by bash gives the
variables the scripts read, for every pair x system x profile; the converter of a user's bash
pair config."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from qknorm_tools import config, config_schema, script_options

from conftest import FAR_BOUND, REPO, SCRIPTS, make_env

PAIRS = config.names("pairs")
SYSTEMS = config.names("systems")
PROFILES = config.names("profiles")


def cli(*args, env=None, cwd=None):
    return subprocess.run(
        [sys.executable, "-m", "qknorm_tools.config", *map(str, args)],
        capture_output=True, text=True, env=env, cwd=cwd, timeout=FAR_BOUND,
    )  # fmt: skip


def test_every_file_loads():
    assert PAIRS == ["ar-en", "en-vi", "gl-en", "he-en", "sk-en"]
    assert len(SYSTEMS) >= 12 and "qknorm_paper" in SYSTEMS
    assert {"cpu-proxy", "cpu-proxy-fast", "paper"} <= set(PROFILES)
    for name in PAIRS:
        pair = config.load_pair(name)
        assert pair.source == REPO / "configs/pairs" / f"{name}.toml"
        assert pair.name == name and pair.src != pair.tgt
    for name in SYSTEMS:
        system = config.load_system(name)
        assert system.source.name == f"{name}.toml" and system.arch.startswith("transformer_")
    for name in PROFILES:
        profile = config.load_profile(name, config.load_pair("gl-en"))
        assert profile.source.name == f"{name}.toml" and "--lr" in profile.optim_flags
        assert isinstance(profile.max_epoch, int)


def test_values_of_the_files():
    gl = config.load_pair("gl-en")
    assert (gl.src, gl.tgt, gl.bpe_merges, gl.paper_L, gl.paper_arch_size) == (
        "gl",
        "en",
        3000,
        79,
        "small",
    )
    assert (gl.lines_train, gl.qi18_lines_test, gl.bpe_vocab_threshold) == (11233, 1007, 50)
    en_gl = config.load_pair("en-gl")  # the reverse direction of gl-en
    assert (en_gl.src, en_gl.tgt, en_gl.reverse_of) == ("en", "gl", "gl-en")
    assert en_gl.config == "configs/pairs/gl-en.toml (reversed)"
    fast = config.load_profile("cpu-proxy-fast")
    assert [p.name for p in fast.chain] == ["cpu-proxy-fast.toml", "cpu-proxy.toml"]
    assert (fast.max_update, fast.max_tokens, fast.train_dropout, fast.beam) == (1000, 1024, 0.1, 4)
    assert fast.optim_flags[fast.optim_flags.index("--lr") + 1] == "1e-3"
    assert fast.job_cpus == 2 and fast.bf16 == "auto"  # cpu-proxy's, inherited
    assert config.load_profile("paper").max_epoch == "paper"
    assert config.load_profile("paper", gl).max_epoch == 1000
    assert config.load_system("twt_zloss").criterion_flags == ("--z-loss", "1e-4")


def _configs(tmp_path: Path, monkeypatch) -> Path:
    """A copy of configs/ that the test may edit, read by qknorm_tools.config."""
    import shutil

    shutil.copytree(REPO / "configs", tmp_path / "configs")
    monkeypatch.setattr(config, "REPO", tmp_path)
    return tmp_path / "configs"


def test_bad_value_names_file_key_and_allowed_values(tmp_path, monkeypatch):
    cfg = _configs(tmp_path, monkeypatch)
    path = cfg / "profiles/cpu-proxy.toml"
    path.write_text(path.read_text().replace('bf16 = "auto"', 'bf16 = "yes"'))
    with pytest.raises(config.ConfigError) as e:
        config.load_profile("cpu-proxy-fast")
    assert str(e.value) == (
        'configs/profiles/cpu-proxy-fast.toml: key \'bf16\' = "yes": allowed 0 (fp32), '
                            '1 (bf16 autocast) or "auto" (bf16 where measured faster)')  # fmt: skip
    path = cfg / "pairs/gl-en.toml"
    path.write_text(path.read_text().replace('corpus = "ted"', 'corpus = "files"'))
    with pytest.raises(
        config.ConfigError,
        match=r"configs/pairs/gl-en.toml: key 'corpus' = \"files\": allowed ted, iwslt15, local",
    ):
        config.load_pair("gl-en")


def test_unknown_key_names_the_closest_known_key(tmp_path, monkeypatch):
    cfg = _configs(tmp_path, monkeypatch)
    path = cfg / "systems/twt.toml"
    path.write_text(path.read_text() + "qk_norm = true\n")
    with pytest.raises(config.ConfigError) as e:
        config.load_system("twt")
    assert (
        str(e.value) == "configs/systems/twt.toml: unknown key 'qk_norm' (did you mean 'qknorm'?)"
    )
    path = cfg / "profiles/paper.toml"
    path.write_text(path.read_text().replace("[decode]\nbeam", "[decode]\nbeams"))
    with pytest.raises(
        config.ConfigError,
        match=r"paper.toml: unknown key 'decode.beams' \(did you mean 'decode.beam'\?\)",
    ):
        config.load_profile("paper")


def test_unknown_name_near_a_known_one_is_suggested():
    """A near miss of a pair, system or profile name got no suggestion (issue 37, leftover
    7): now 'did you mean', from the rule of the keys' (config_schema.did_you_mean), at the end
    of the hint every unknown name gets (config.known: the scripts' usage error and the
    loaders'); a name near none (xx-en is no nearer to sk-en than to any other -en pair) gets
    none."""
    profiles = " ".join(config.names("profiles"))
    with pytest.raises(config.UsageError) as e:
        config.load_profile("cpu-converge-d12")
    assert str(e.value) == (
        f"unknown profile 'cpu-converge-d12' (known profiles: {profiles}; did you mean "
        "'cpu-converge-d128'?)"
    )
    assert config.known("systems", "qknorm_papr") == (False, "; did you mean 'qknorm_paper'?")
    ok, hint = config.known("pairs", "gl-em")
    assert not ok and hint.startswith("; the reverse direction of one, e.g. en-gl; ")
    assert hint.endswith("docs/own-data.md; did you mean 'gl-en'?")
    assert config.known("profiles", "gpu") == (False, "")
    # case-only typos too (a new user's trial: TWT and GL-EN got no suggestion)
    assert config.known("systems", "TWT") == (False, "; did you mean 'twt'?")
    assert config.known("pairs", "GL-EN")[1].endswith("; did you mean 'gl-en'?")
    assert "did you mean" not in config.known("pairs", "xx-en")[1]
    assert config.known("pairs", "en-gl") == (True, "")


def test_extends_cycle_names_the_chain(tmp_path, monkeypatch):
    cfg = _configs(tmp_path, monkeypatch)
    path = cfg / "profiles/cpu-proxy.toml"
    path.write_text('extends = "cpu-proxy-fast"\n' + path.read_text())
    with pytest.raises(config.ConfigError) as e:
        config.load_profile("cpu-proxy-fast")
    assert str(e.value) == (
        "configs/profiles/cpu-proxy.toml: key 'extends' makes a cycle: "
        "cpu-proxy-fast -> cpu-proxy -> cpu-proxy-fast"
    )
    (cfg / "profiles/x.toml").write_text('extends = "nope"\n')
    with pytest.raises(
        config.ConfigError, match=r"x.toml: key 'extends' = \"nope\": no configs/profiles/nope.toml"
    ):
        config.load_profile("x")


def test_env_overrides_in_one_function():
    profile = config.load_profile("cpu-proxy")
    assert config.apply_env(profile, {}) == profile
    over = config.apply_env(profile, {"QKNORM_THREADS": "1", "QKNORM_MAX_UPDATE": "80"})
    assert (over.threads, over.max_update, over.run_max_update) == (1, 1200, 80)
    with pytest.raises(
        config.UsageError, match="QKNORM_MAX_UPDATE must be a non-negative integer .* got '08'"
    ):
        config.apply_env(profile, {"QKNORM_MAX_UPDATE": "08"})
    # decode.dev_bleu: on in the cpu-converge profiles (extends keeps it), off elsewhere;
    # QKNORM_DEV_BLEU overrides it either way
    assert config.load_profile("cpu-converge-d128").dev_bleu and not profile.dev_bleu
    assert config.apply_env(profile, {"QKNORM_DEV_BLEU": "1"}).dev_bleu
    d128 = config.load_profile("cpu-converge-d128")
    assert not config.apply_env(d128, {"QKNORM_DEV_BLEU": "0"}).dev_bleu
    with pytest.raises(config.UsageError, match="QKNORM_DEV_BLEU must be 0 or 1, got 'yes'"):
        config.apply_env(profile, {"QKNORM_DEV_BLEU": "yes"})
    pair = config.apply_env_pair(
        config.load_pair("gl-en"), {"QKNORM_QI18_URL": "http://mirror/q.tgz"}
    )
    qi18 = dict(pair.sources)["qi18"]
    assert (qi18.url, qi18.bytes) == ("http://mirror/q.tgz", 131005909)


#: the variables the scripts read after the three loaders
_DUMP = r"""
dump() {
    local v
    for v in "$@"; do
        if declare -p "$v" >/dev/null 2>&1; then declare -p "$v"; else echo "unset $v"; fi
    done
}
"""


def _vars(text: str) -> dict:
    """{VAR: value} of ``declare -p`` lines: an array as a tuple, unset and empty alike ''."""
    out = {}
    for line in text.splitlines():
        if line.startswith("unset "):
            out[line.split()[1]] = ""
            continue
        m = re.match(r"declare -(\S+) ([A-Za-z_0-9]+)(?:=(.*))?$", line, flags=re.S)
        if not m:
            continue
        flags, var, value = m.groups()
        out[var] = value if "a" in flags else (value or "").strip('"')
        if "a" not in flags and out[var] == "":
            out[var] = ""
    return out


def _shell_names(pair, system, profile) -> list:
    return [v for v, _ in pair.shell_vars() + system.shell_vars() + profile.shell_vars()]


def _bash(code: str, env: dict) -> str:
    p = subprocess.run(
        ["bash", "-s"], input=code, capture_output=True, text=True, env=env, timeout=FAR_BOUND
    )
    assert p.returncode == 0, p.stderr
    return p.stdout


_DUMP_RAW = r"""
dump_raw() {  # NAME US (s|a) US value, or the elements separated by RS; records end in NUL
    local v
    for v in "$@"; do
        if [[ "$(declare -p "$v" 2>/dev/null)" == "declare -a"* ]]; then
            local -n __a="$v"
            printf '%s\x1fa\x1f' "$v"; (IFS=$'\x1e'; printf '%s' "${__a[*]}"); printf '\0'
            unset -n __a
        elif declare -p "$v" >/dev/null 2>&1; then
            printf '%s\x1fs\x1f%s\0' "$v" "${!v}"
        else
            printf '%s\x1fu\x1f\0' "$v"
        fi
    done
}
"""


def _expected(value) -> tuple:
    if value is None:
        return ("u", "")
    if isinstance(value, bool):
        return ("s", "1" if value else "0")
    if isinstance(value, tuple) and value and isinstance(value[0], tuple):
        return ("s", "\n".join(" ".join(map(str, f)) for f in value))
    if isinstance(value, tuple):
        return ("a", "\x1e".join(map(str, value)))
    return ("s", str(value))


@pytest.mark.parametrize("pair", [*PAIRS, "en-gl"])
@pytest.mark.slow
def test_cli_shell_output_evaluated_by_bash_gives_the_config(pair, tmp_path):
    """`config shell` evaluated by bash == the typed values (every system with cpu-proxy, every
    profile with twt)."""
    env = make_env(tmp_path)
    for k in ("QKNORM_THREADS", "QKNORM_MAX_UPDATE"):
        env.pop(k, None)
    cells = [(s, "cpu-proxy") for s in SYSTEMS] + [("twt", f) for f in PROFILES]
    p = config.load_pair(pair)
    code = [_DUMP_RAW]
    for system, profile in cells:
        want = p.shell_vars() + config.load_system(system).shell_vars()
        want += config.load_profile(profile, p).shell_vars()
        code.append(
            f'( eval "$("{sys.executable}" -m qknorm_tools.config shell --pair {pair} '
            f'--system {system} --profile {profile})"; '
            f'dump_raw {" ".join(v for v, _ in want)}; printf "\\0" )'
        )
    text = _bash("\n".join(code), env)
    dumps = text.split("\0\0")
    assert len(dumps) == len(cells) + 1 and dumps[-1] == ""
    for (system, profile), dump in zip(cells, dumps):
        got = {}
        for record in dump.split("\0"):
            name, kind, value = record.split("\x1f")
            got[name] = (kind, value)
        want = p.shell_vars() + config.load_system(system).shell_vars()
        want += config.load_profile(profile, p).shell_vars()
        for var, value in want:
            assert got[var] == _expected(value), (system, profile, var)


@pytest.mark.slow
def test_cli_names_known_and_errors(tmp_path):
    env = make_env(tmp_path)
    p = cli("names", "systems", "--in-all", env=env)
    assert (
        p.returncode == 0 and "twt" in p.stdout.split() and "qk_layernorm" not in p.stdout.split()
    )
    assert cli("known", "pairs", "en-gl", env=env).returncode == 0
    p = cli("known", "pairs", "en-he", env=env)
    assert p.returncode == 3 and "note: he-en already is en->he" in p.stdout
    p = cli("shell", "--profile", "nope", env=env)
    assert p.returncode == 2 and p.stdout.startswith(
        "unknown profile 'nope' (known profiles: cpu-converge"
    )
    p = cli(
        "shell", "--pair", "gl-en", "--profile", "cpu-proxy", env={**env, "QKNORM_MAX_UPDATE": "x"}
    )
    assert p.returncode == 2 and "QKNORM_MAX_UPDATE must be a non-negative integer" in p.stdout


USER_SH = """# shellcheck shell=bash
# configs/pairs/de-en.sh: my own corpus

SRC=de                    # source language code
TGT=en
CORPUS=local              # your own files
LOCAL_DIR=/data/my-corpus # absolute, or relative to the data dir
LOCAL_TRAIN_SRC=train.src LOCAL_TRAIN_TGT=train.tgt
LOCAL_DEV_SRC=valid.src   LOCAL_DEV_TGT=valid.tgt
LOCAL_TEST_SRC=test.src   LOCAL_TEST_TGT=test.tgt
# merges of the joint BPE
BPE_MERGES=8000
LINES_TRAIN=
MY_NOTE="kept"
"""


@pytest.mark.slow
def test_converter_round_trip_of_a_user_bash_pair(tmp_path):
    work = tmp_path / "work"
    pairs = work / "configs" / "pairs"
    pairs.mkdir(parents=True)
    sh = pairs / "de-en.sh"
    sh.write_text(USER_SH)
    env = make_env(work)
    # a leftover .sh is listed, and loading it names the one convert command
    assert "de-en" in cli("names", "pairs", env=env).stdout.split()
    p = cli("shell", "--pair", "de-en", env=env)
    assert p.returncode == 1
    assert f"error: {sh} is a bash pair config; convert it once with" in p.stderr
    assert f"python -m qknorm_tools.config convert {sh}" in p.stderr
    p = cli("convert", sh, env=env)
    assert p.returncode == 0, p.stdout + p.stderr
    assert "same settings as" in p.stdout and "MY_NOTE" in p.stdout
    toml = (pairs / "de-en.toml").read_text()
    assert "# merges of the joint BPE\nbpe_merges = 8000" in toml  # comments kept above their key
    assert '# source language code\nsrc = "de"' in toml
    assert "MY_NOTE" in toml  # unknown variables listed, not dropped
    # converting again never writes over the TOML file (the user may have edited it)
    (pairs / "de-en.toml").write_text(toml + "# my edit\n")
    p = cli("convert", sh, env=env)
    assert p.returncode == 1 and f"{pairs / 'de-en.toml'} exists: remove it first" in p.stderr
    assert (pairs / "de-en.toml").read_text() == toml + "# my edit\n"
    p = cli("convert", pairs / "nope.sh", env=env)
    assert p.returncode == 1 and "nope.sh: no such file" in p.stderr
    (pairs / "de-en.toml").write_text(toml)
    sh.unlink()
    pair = config.load_pair("de-en", work)
    assert (pair.src, pair.tgt, pair.corpus, pair.local_dir, pair.local_dev_src) == (
        "de", "en", "local", "/data/my-corpus", "valid.src")  # fmt: skip
    assert (pair.spm_vocab_size, pair.paper_arch_size, pair.paper_max_epoch) == (8000, "base", 200)
    assert pair.lines_train is None
    # and the scripts' loader reads it
    p = subprocess.run(
        ["bash", "-c", f'source "{SCRIPTS}/lib.sh"; load_pair_config de-en; '
         'echo "$SRC $TGT $LOCAL_TEST_TGT $PAIR_CONFIG"'],
        capture_output=True, text=True, env=env, timeout=FAR_BOUND,
    )  # fmt: skip
    assert p.returncode == 0 and p.stdout == f"de en test.tgt {pairs / 'de-en.toml'}\n", p.stderr


OWN_PAIR = 'src = "de"\ntgt = "en"\ncorpus = "local"\nbpe_merges = 8000\n\n[local]\ndir = "x"\n'


def test_all_pairs_are_the_papers_pairs_never_an_own_pair(tmp_path):
    """``--pairs all`` (reproduce.sh) used to include a researcher's own pair of the work
    dir's configs/pairs: ``all`` is the papers' five pairs (config.PAPER_PAIRS), an own pair is
    known but run only when named."""
    work = tmp_path / "work"
    (work / "configs" / "pairs").mkdir(parents=True)
    (work / "configs" / "pairs" / "de-en.toml").write_text(OWN_PAIR)
    assert config.names("pairs", work) == ["ar-en", "de-en", "en-vi", "gl-en", "he-en", "sk-en"]
    assert config.names("pairs", work, in_all=True) == ["ar-en", "en-vi", "gl-en", "he-en", "sk-en"]
    # the scripts' "all" (qk_check_options names:pairs:VAR=all) asks the same question
    assert script_options.parse_names("pairs", "all", work) == config.names("pairs", work, True)
    assert script_options.parse_names("pairs", "de-en,gl-en", work) == ["de-en", "gl-en"]


@pytest.mark.slow
def test_the_scripts_file_runs_where_python_names_them(tmp_path):
    """Runs are named once, in Python (:func:`config.run_label`, :func:`config.run_dir`); the
    scripts read the names (``load_profile_config --max-update``: QK_RUN_LABEL; ``qk_run_dirs``).
    Every profile, its own and another budget, the profile's lr or another, fp32 or bf16, is
    filed where a name written out by hand says."""
    cases = [
        (profile, budget, lr, precision)
        for profile in config.names("profiles")
        for budget in ("", "60")
        for lr, precision in (("", ""), ("3e-3", ""), ("", "bf16"), ("1.5e-2", "bf16"))
    ]
    lines = ["load_pair_config gl-en"]
    for profile, budget, lr, precision in cases:
        lines += [
            f'load_profile_config {profile} --max-update "{budget}"',
            f'QK_BF16_RUN="{precision}"; declare -A D=()',
            f'qk_run_dirs D "$QK_RUN_LABEL" gl-en twt 3 "{lr}"',
            f'printf "%s %s\\n" "$QK_RUN_LABEL" "${{D[gl-en/twt/3/{lr}]}}"',
        ]
    p = subprocess.run(
        ["bash", "-c", f'source "{SCRIPTS}/lib.sh"\n' + "\n".join(lines)],
        env=make_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=FAR_BOUND,
    )
    assert p.returncode == 0, p.stderr
    got = p.stdout.splitlines()
    assert len(got) == len(cases)
    for (profile, budget, lr, precision), line in zip(cases, got):
        own = config.load_profile(profile).max_update
        label = profile if budget in ("", str(own)) else f"{profile}-max-update-{budget}"
        name = "seed3" + (f"-lr{lr}" if lr else "") + (f"-{precision}" if precision else "")
        assert line == f"{label} {tmp_path}/runs/gl-en/{label}/twt/{name}", (profile, budget)


@pytest.mark.parametrize(
    "line, message",
    [
        ('checkpoint = "avg0"', r"key 'decode.checkpoint' = \"avg0\": allowed \"best\", \"last\""),
        (
            'also = ["last", "final"]',
            r"key 'decode.also' = \[\"last\", \"final\"\]: allowed a list",
        ),
    ],
)
def test_decode_checkpoints_are_best_last_or_avgn(line, message, tmp_path, monkeypatch):
    cfg = _configs(tmp_path, monkeypatch)
    path = cfg / "profiles/cpu-fixed-d128.toml"
    text = path.read_text()
    key = line.split(" = ")[0]
    text = "\n".join(line if ln.startswith(key + " = ") else ln for ln in text.splitlines())
    path.write_text(text + "\n")
    with pytest.raises(config.ConfigError, match="cpu-fixed-d128.toml: " + message):
        config.load_profile("cpu-fixed-d128")


def test_design_keys_default_to_welch_and_the_two_targets():
    p = config.load_profile("cpu-converge-d128")
    assert p.design_seeds == 10
    assert (p.design_test, p.design_targets, p.design_tost_margin) == ("welch", (0.5, 0.93), 0.5)
    assert (p.checkpoint, p.also_checkpoints) == ("best", ())
    f = config.load_profile("gpu-fixed-d128")
    assert (f.design_test, f.design_tost_margin, f.checkpoint, f.job_gpus) == (
        "paired",
        0.5,
        "avg5",
        1,
    )


# ------------------------------------------------------------------------- key names in messages
#: bash variables that are also the words of messages (the files' own src/tgt placeholders)
_PLACEHOLDERS = {"SRC", "TGT"}
_MESSAGE = re.compile(r"\b(die|qk_warn|qk_log|qk_usage_error|echo|printf)\b")


def _message_lines(path: Path):
    """(line number, text) of the lines of a script that a person reads: its usage text and
    every message command (die, qk_warn, qk_log, qk_usage_error, echo, printf); comments and
    code are left out."""
    in_usage = False
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if re.match(r"\s*(qk_)?\w*usage\(\) \{", line):
            in_usage = True
        elif in_usage and line.strip() == "}":
            in_usage = False
        if line.lstrip().startswith("#"):
            continue
        m = _MESSAGE.search(line)
        if in_usage or m:  # the message from its command on, arithmetic $((...)) left out
            yield n, re.sub(r"\$\(\(.*?\)\)", "", line if in_usage else line[m.start() :])


def test_messages_name_toml_keys_not_bash_variables():
    """issue 37: a prepare_data warning named LINES_DEV, the bash name of the key [lines] dev.
    No message or usage line of a script names a configuration value by its bash variable."""
    variables = {
        var
        for keys in (config.BASE_KEYS, config.PAIR_KEYS, config.SYSTEM_KEYS, config.PROFILE_KEYS)
        for _, _, var, _ in keys
    } - _PLACEHOLDERS
    bare = re.compile(r"(?<![\w$!{])(" + "|".join(sorted(variables)) + r")\b(?![=\[])")
    found = [
        f"{path.relative_to(REPO)}:{n}: {m.group(1)}"
        for path in sorted(SCRIPTS.glob("**/*.sh"))
        for n, line in _message_lines(path)
        for m in bare.finditer(line)
    ]
    assert found == []


@pytest.mark.slow
def test_the_line_count_warning_names_the_toml_key(tmp_path):
    """The canonical line counts' warning names the key ([lines] dev -> 'lines.dev')."""
    from conftest import make_tiny_ted, out, run_script

    make_tiny_ted(tmp_path / "data")
    p = run_script("prepare_data.sh", "gl-en", "--data-dir", tmp_path / "data",
                   env=make_env(tmp_path / "work"))  # fmt: skip
    assert p.returncode == 0, out(p)
    warning = [line for line in p.stderr.splitlines() if "gl-en dev has" in line]
    assert warning == [
        "[prepare_data] warning: gl-en dev has 30 lines, expected 742 (key 'lines.dev' in "
        f"{REPO}/configs/pairs/gl-en.toml) for the canonical data"
    ], out(p)


# ------------------------------------------------------------------------- BPE-dropout's range
@pytest.mark.parametrize("text", ["1", "1.0", "1.5", "2", "-0.1", "abc", "", "0.1.2"])
def test_bpe_dropout_outside_the_open_unit_interval_is_refused(text):
    """issue 37: --bpe-dropout 1 turned the training split into single characters. Allowed: 0
    (off) or 0 < P < 1, in the files and as bpe.sh's option (one rule, config._check)."""
    with pytest.raises(config.UsageError) as e:
        config.check_option("bpe.dropout", text, "--bpe-dropout")
    assert str(e.value) == (
        f"--bpe-dropout must be 0 (off) or a number strictly between 0 and 1, got '{text}'"
    )


@pytest.mark.parametrize(
    "text, spelling",
    [("0", "0"), ("0.0", "0"), (".0", "0"), (".1", "0.1"), ("1e-1", "0.1"), ("0.999", "0.999")],
)
def test_bpe_dropout_of_zero_or_inside_the_interval_is_taken_in_one_spelling(
    text, spelling, capsys
):
    """The new-user trial: --bpe-dropout 0.0 rebuilt the BPE of --bpe-dropout 0 (another data
    identity for the same setting). The option's value is the key's one spelling, printed by
    ``config option`` for scripts/bpe.sh."""
    assert config.check_option("bpe.dropout", text, "--bpe-dropout") == float(spelling)
    argv = ["option", "bpe.dropout", f"--value={text}", "--option=--bpe-dropout"]
    assert config.main(argv) == 0
    assert capsys.readouterr().out == spelling + "\n"


def test_bpe_dropout_of_one_in_a_pair_file_names_file_and_key(tmp_path, monkeypatch):
    cfg = _configs(tmp_path, monkeypatch)
    path = cfg / "pairs/gl-en.toml"
    path.write_text(path.read_text() + "\n[bpe]\ndropout = 1\n")
    with pytest.raises(config.ConfigError) as e:
        config.load_pair("gl-en")
    assert str(e.value) == (
        f"{path}: key 'bpe.dropout' = 1: allowed 0 (off) or a number strictly between 0 and 1"
    )


@pytest.mark.parametrize("value", ["1", "1.5"])
@pytest.mark.slow
def test_bpe_sh_refuses_bpe_dropout_out_of_range_before_anything(tmp_path, value):
    """A usage error (exit 2) before the data are even looked at: nothing is rebuilt."""
    p = subprocess.run(
        ["bash", str(SCRIPTS / "bpe.sh"), "gl-en", "--bpe-dropout", value],
        env=make_env(tmp_path), capture_output=True, text=True, timeout=FAR_BOUND,
    )  # fmt: skip
    assert p.returncode == 2, p.stderr
    assert p.stderr.splitlines()[-1] == (
        f"error: --bpe-dropout must be 0 (off) or a number strictly between 0 and 1, got "
        f"'{value}' (scripts/bpe.sh --help lists every option)"
    )


def test_a_bash_pair_config_in_the_repository_names_the_converter(tmp_path, monkeypatch):
    """An old ``configs/pairs/NAME.sh`` left in the repository itself (not only the work dir) is
    listed and refused with the one convert command, not reported as an unknown pair."""
    repo = tmp_path / "repo"
    (repo / "configs" / "pairs").mkdir(parents=True)
    for shared in ("base.toml", "systems", "profiles"):
        (repo / "configs" / shared).symlink_to(REPO / "configs" / shared)
    (repo / "configs" / "pairs" / "gl-en.toml").symlink_to(REPO / "configs/pairs/gl-en.toml")
    sh = repo / "configs" / "pairs" / "de-en.sh"
    sh.write_text(USER_SH)
    monkeypatch.setattr(config, "REPO", repo)
    assert config.names("pairs", repo) == ["de-en", "gl-en"]
    with pytest.raises(config.ConfigError) as e:
        config.load_pair("de-en", repo)
    assert str(e.value).startswith(f"{sh} is a bash pair config; convert it once with")
    assert f"python -m qknorm_tools.config convert {sh}" in str(e.value)
    # both formats of one pair: refused, naming both files
    (repo / "configs" / "pairs" / "gl-en.sh").write_text(USER_SH)
    with pytest.raises(config.ConfigError, match="pair gl-en is defined twice"):
        config.load_pair("gl-en", repo)


@pytest.mark.parametrize(
    "content, message",
    [
        (b"\xff\xfe", "not UTF-8 text ('utf-8' codec can't decode byte 0xff in position 0"),
        (b'\xef\xbb\xbfsrc = "xx"\n', "(it starts with a byte order mark: remove it)"),
    ],
)
def test_own_pair_file_not_utf8_or_with_a_bom_is_named(tmp_path, content, message):
    """A trial's own configs/pairs/PAIR.toml that was not UTF-8 gave a traceback."""
    pairs = tmp_path / "configs" / "pairs"
    pairs.mkdir(parents=True)
    (pairs / "cfgx.toml").write_bytes(content)
    with pytest.raises(config.ConfigError) as e:
        config.load_pair("cfgx", tmp_path)
    assert str(e.value).startswith(str(pairs / "cfgx.toml")) and message in str(e.value)


# ---------------------------------------------------------------------------- learning rates
@pytest.mark.parametrize(
    "value, spelled",
    [("3e-3", "3e-3"), ("0.003", "3e-3"), ("3E-03", "3e-3"), ("1.5e-2", "1.5e-2"),
     ("0.00030", "3e-4"), ("1", "1e0"), ("100", "1e2"), ("0", "0"), ("0.0", "0"),
     (0.003, "3e-3"), (2.5e-7, "2.5e-7"), (0.0, "0")],
)  # fmt: skip
def test_one_learning_rate_is_one_spelling(value, spelled):
    """One lr is one run directory (seedN-lrLR): config_schema.lr_spelling is the one rule
    (train.sh/evaluate.sh --lr, lr_sweep.sh --lrs, the sweep's report; it was also in bash)."""
    assert config_schema.lr_spelling(value) == spelled


@pytest.mark.parametrize(
    "value", ["abc", "-1e-3", "1e", "3e-3x", "", "1,2", "1e400", "1e-400", -1.0, float("inf")]
)
def test_a_bad_learning_rate_is_refused(value):
    with pytest.raises(ValueError):
        config_schema.lr_spelling(value)


def test_lr_override_names_the_run_or_says_what_is_wrong():
    """The profile's own lr, spelled any way, is the profile's run (override ""); another is
    seedN-lrLR; the messages are train.sh's usage errors and the profile's error."""
    flags = ("--optimizer", "adam", "--lr", "0.002")
    assert config_schema.lr_override("p", flags, "2E-3") == ("2e-3", "")
    assert config_schema.lr_override("p", flags, "0.0030") == ("3e-3", "3e-3")
    with pytest.raises(config_schema.UsageError) as err:
        config_schema.lr_override("p", flags, "1e400")
    assert str(err.value) == (
        "--lr '1e400' overflows: fairseq reads it as a double, at most about 1.8e308 "
        "(infinite above)"
    )
    with pytest.raises(config_schema.UsageError) as err:
        config_schema.lr_override("p", flags, "fast")
    assert str(err.value) == (
        "--lr must be a non-negative decimal number (e.g. 3e-3, 0.003), got 'fast'"
    )
    for typo in ("01", "00.1", "01e-3"):  # a new user's trial: --lr 01 trained at lr 1
        with pytest.raises(config_schema.UsageError) as err:
            config_schema.lr_override("p", flags, typo)
        assert str(err.value) == (
            f"--lr '{typo}' has a leading zero (a typo? '01' may be 0.1 or 1): write it without "
            "(e.g. 3e-3, 0.003)"
        )
    assert config_schema.lr_override("p", flags, "0.5") == ("5e-1", "5e-1")
    with pytest.raises(config_schema.ConfigError) as err:
        config_schema.lr_override("p", ("--optimizer", "adam"), "1e-3")
    assert str(err.value) == (
        "configs/profiles/p.toml sets no --lr in key 'optim.flags': --lr cannot replace it"
    )


def test_sweep_lrs_are_spelled_once_and_refused_by_name():
    assert config_schema.sweep_lrs("x", ["0.001", "3E-3"]) == ["1e-3", "3e-3"]
    for items, message in [
        (["1e-3", "0.001"], "bad --lrs list 'x': '0.001' is lr 1e-3 again (given twice, "
         "written another way)"),
        (["0"], "bad --lrs list 'x': lr 0 is the loss at initialization, which the sweep "
         "measures itself"),
        (["abc"], "bad --lrs list 'x': 'abc' is not a non-negative decimal number (e.g. "
         "3e-4,1e-3)"),
    ]:  # fmt: skip
        with pytest.raises(config_schema.UsageError) as err:
            config_schema.sweep_lrs("x", items)
        assert str(err.value) == message
