#!/usr/bin/env bash
# scripts/lib/config.sh: the bridge to qknorm_tools.config (configs/**/*.toml), runs, labels, the
# learning rate and the precision. Sourced by scripts/lib.sh (which sets QK_REPO_ROOT,
# QK_WORK_DIR and QK_PY), never on its own.
#
# Offers
#   _qk_config ARGS...             python -m qknorm_tools.config ARGS -> QK_CONFIG_OUT (exit 2: usage error)
#   qk_config_names KIND [--in-all]  the configured names of KIND (pairs, systems, profiles)
#   qk_known_pairs / qk_known_systems / qk_known_profiles   the same, per kind
#   qk_pair_usage COLUMN           the PAIR line of a usage: the configured pairs, their reverse, own pairs
#   qk_require_name KIND NAME [HINT]  usage error unless NAME is configured, listing the known names
#   QK_PAIR_VARS, QK_LOCAL_FILE_VARS  the variables of a pair's settings
#   load_pair_config PAIR          the pair's settings as globals (configs/base.toml, pairs/PAIR.toml)
#   load_system_config SYSTEM      the settings of configs/systems/SYSTEM.toml
#   load_profile_config PROFILE    the settings of configs/profiles/PROFILE.toml, MAX_UPDATE
#   load_cell_config PAIR SYSTEM PROFILE  the three above in one python call, and QK_ARCH
#   QK_PRECISION_SPEC, qk_precision_usage  a script's --precision option and its usage lines
#   qk_resolve_bf16 [--cached-only] [--quiet]  the loaded profile's precision: QK_BF16_RUN,
#                                  QK_PRECISION
#   qk_resolve_bf16_of PROFILE [--cached-only] [--quiet]  the same for PROFILE, not loaded here
#   qk_py MODULE ARGS...           python -m qknorm_tools.MODULE ARGS (QK_PY_OUT: its stdout), asked
#                                  of the script's one Python process where it has one (proc.sh)
#   qk_run_py COMMAND ARGS...      python -m qknorm_tools.run COMMAND, its assignments evaluated
#                                  (train.sh and evaluate.sh: the run, its label, directory, arch
#                                  and precision, qknorm_tools/run_spec.py)
#   qk_run_label [PROFILE [MAX_UPDATE]]  PROFILE, or PROFILE-max-update-N for another budget
#   qk_run_dirs OUT LABEL PAIRS SYSTEMS SEEDS [LR...]  where the runs of a grid live

# ---------------------------------------------------------------------------------------------
# pair configuration

# The configuration is data (configs/base.toml, configs/{pairs,systems,profiles}/*.toml; a
# researcher's own pairs also in $QK_WORK_DIR/configs/pairs, docs/own-data.md), read and checked
# by qknorm_tools.config; the loaders below eval what `python -m qknorm_tools.config shell`
# prints (docs/design/config-as-data.md). No configuration file is ever sourced.

# _qk_config ARGS...: python -m qknorm_tools.config ARGS (with the work dir) -> QK_CONFIG_OUT.
# Exit status 2 (a name that is not configured, a bad QKNORM_* value) is a usage error with the
# message it printed; any other failure exits 1 (the error naming file and key is printed).
_qk_config() {
    local rc=0
    [[ -n "$QK_PY" ]] || die "no python interpreter found (set QKNORM_PYTHON)"
    QK_CONFIG_OUT="$("$QK_PY" -m qknorm_tools.config "$@" --repo "$QK_REPO_ROOT" --work-dir "$QK_WORK_DIR")" \
        || rc=$?
    case "$rc" in
        0) ;;
        2) qk_usage_error "$QK_CONFIG_OUT" ;;
        *) exit 1 ;;
    esac
}

# qk_config_names KIND [--in-all]: the configured names of KIND (pairs, systems, profiles),
# space-separated (--in-all: only those `all` means: the papers' systems and pairs, not own pairs).
qk_config_names() {
    _qk_config names "$@"
    printf '%s\n' "$QK_CONFIG_OUT"
}

qk_known_pairs() { qk_config_names pairs; }
# qk_pair_usage COLUMN: the text of a usage's PAIR line after "  PAIR  ..." (COLUMN: where it
# starts, its continuation line indented to it): every pair a script takes, not only the
# configured ones (the reverse direction of one, an own configs/pairs/PAIR.toml)
qk_pair_usage() {
    printf 'one of: %s; or the reverse direction of one (e.g.\n%*sen-gl); or your own configs/pairs/PAIR.toml (docs/own-data.md)\n' \
        "$(qk_known_pairs)" "$1" ""
}
qk_known_systems() { qk_config_names systems; }
qk_known_profiles() { qk_config_names profiles; }

# qk_require_sizeable_profile WHAT: a usage error (naming WHAT, e.g. "--size d384" or "--sizes")
# unless the loaded profile can train at the LR sweep's other sizes: a CPU profile (proxy-size
# arch) that sets no model size of its own (model_flags, e.g. cpu-converge-d128's width 128,
# would override the size's widths and keep its layers and heads: no model of either size).
qk_require_sizeable_profile() {
    [[ "$PROFILE_ARCH" == proxy ]] || qk_usage_error "$1 needs a CPU profile (proxy size), not $PROFILE"
    ((${#PROFILE_MODEL_FLAGS[@]} == 0)) \
        || qk_usage_error "$1: profile $PROFILE sets its own model size (${PROFILE_MODEL_FLAGS[*]}); use a profile without model_flags (cpu-proxy, cpu-proxy-fast, ...)"
}

# qk_require_name KIND NAME [HINT]: a usage error (exit 2, with the script's usage) unless NAME
# is configured (configs/KIND/NAME.toml; a pair may also be the reverse direction of a
# configured one), listing the known names (and HINT).
qk_require_name() {
    local kind="$1" name="${2-}" more rc=0
    more="$("$QK_PY" -m qknorm_tools.config known "$kind" "$name" --repo "$QK_REPO_ROOT" \
        --work-dir "$QK_WORK_DIR")" || rc=$?
    case "$rc" in
        0) return 0 ;;
        3) qk_usage_error "unknown ${kind%s} '$name' (known $kind: $(qk_config_names "$kind")${3-}$more)" ;;
        *) exit 1 ;;
    esac
}

# Settings of a pair (qknorm_tools.config.PAIR_KEYS: TOML key -> variable). Every one is set or
# unset by load_pair_config, so that nothing leaks from another pair or from the environment.
QK_PAIR_VARS=(SRC TGT CORPUS REVERSE_OF TED_LOCAL_DIR QI18_FOLDER IWSLT15_LOCAL_DIR IWSLT15_DEV
    IWSLT15_TEST IWSLT15_FILES LOCAL_DIR LOCAL_TRAIN_SRC LOCAL_TRAIN_TGT LOCAL_DEV_SRC
    LOCAL_DEV_TGT LOCAL_TEST_SRC LOCAL_TEST_TGT BPE_MERGES SPM_VOCAB_SIZE PAPER_L
    PAPER_ARCH_SIZE PAPER_MAX_EPOCH PAPER_TRAIN_PAIRS LINES_TRAIN LINES_DEV LINES_TEST
    QI18_LINES_TRAIN QI18_LINES_DEV QI18_LINES_TEST)
# file fields of corpus = "local" ([local] train_src, ... in the TOML), per split and side
QK_LOCAL_FILE_VARS=(LOCAL_TRAIN_SRC LOCAL_TRAIN_TGT LOCAL_DEV_SRC LOCAL_DEV_TGT LOCAL_TEST_SRC
    LOCAL_TEST_TGT)

# load_pair_config PAIR: set the pair's settings as globals (configs/base.toml, then
# configs/pairs/PAIR.toml), PAIR, PAIR_CONFIG (the file, for messages), PAIR_DESC (direction and
# corpus, for messages) and, for a reverse direction, PAIR_REVERSE_OF. A reverse direction
# (reverse_of = "BASE" in its file, or a name A-B without a file when B-A is configured as
# B->A) is BASE's settings with SRC and TGT swapped: it reads the same corpus files. Every key is
# checked by qknorm_tools.config; an unknown PAIR is a usage error, a bad file an error naming
# file and key.
load_pair_config() {
    unset "${QK_PAIR_VARS[@]}" PAIR_REVERSE_OF
    _qk_config shell --pair "${1-}"
    eval "$QK_CONFIG_OUT"
}

# ---------------------------------------------------------------------------------------------
# systems, profiles and runs (scripts/train.sh, scripts/evaluate.sh, scripts/reproduce.sh)

# load_system_config SYSTEM: the settings of configs/systems/SYSTEM.toml (SYSTEM_ARCH,
# SYSTEM_QKNORM, SYSTEM_FLAGS, a system's own criterion SYSTEM_CRITERION (empty: train.sh's
# label_smoothed_cross_entropy) and SYSTEM_CRITERION_FLAGS, ...); an unknown SYSTEM is a usage
# error listing the known systems.
load_system_config() {
    _qk_config shell --system "${1-}"
    eval "$QK_CONFIG_OUT"
}

# load_cell_config PAIR SYSTEM PROFILE: load_pair_config, load_system_config and
# load_profile_config in one python call, and QK_ARCH: the system's named arch at the profile's
# size (qknorm_tools.run_spec.arch_name: FAMILY_proxy for the CPU profiles, the pair's paper
# size for the paper profile).
load_cell_config() {
    unset "${QK_PAIR_VARS[@]}" PAIR_REVERSE_OF
    _qk_config shell --pair "${1-}" --system "${2-}" --profile "${3-}"
    eval "$QK_CONFIG_OUT"
}

# load_profile_config PROFILE [--max-update N] [--check-stops]: the settings of
# configs/profiles/PROFILE.toml (its `extends` chain resolved; after load_pair_config: max_epoch
# = "paper" is the pair's PAPER_MAX_EPOCH), MAX_UPDATE: N (a script's --max-update; "": not
# given), else $QKNORM_MAX_UPDATE, else the profile's PROFILE_MAX_UPDATE (QKNORM_THREADS replaces
# THREADS; qknorm_tools.config.apply_env), and QK_RUN_LABEL, the label its runs are filed under
# (qk_run_label). --check-stops: a usage error unless a training with that budget stops
# (--max-update 0 is no update limit, which only a profile with an epoch limit allows). lr_sweep.sh adds --lrs-arg LRS_ARG --sweep-lr LR...:
# LRS, its learning rates in their one spelling, and LR_DIRS, each one's directory suffix ("" for
# the profile's own lr: seedN; qknorm_tools.config_schema.lr_override; a bad list is a usage
# error).
load_profile_config() {
    _qk_config shell --profile "${1-}" --paper-max-epoch "${PAPER_MAX_EPOCH:-}" "${@:2}"
    eval "$QK_CONFIG_OUT"
}

# The precision of a run is decided once, by the script the user called, and handed to every
# cell and child script as an explicit `--precision bf16|fp32` argument (issue 21): no child
# re-derives it and no environment variable is rewritten on the way. QK_PRECISION_ARG is a
# script's --precision (bf16, fp32 or auto; empty: not given).
QK_PRECISION_ARG=""
QK_PRECISION_SPEC="--precision QK_PRECISION_ARG"

# qk_precision_usage: the --precision option's lines of a script's usage.
qk_precision_usage() {
    cat <<'USAGE'
  --precision P  bf16 (bf16 autocast on CPU, runs filed as seedN-bf16), fp32, or auto (bf16 where
                 measured faster on this CPU); default: QKNORM_BF16 (1, 0 or auto), else the
                 profile's bf16 key. Decided once and passed to every cell as --precision
USAGE
}

# qk_resolve_bf16 [--cached-only] [--quiet]: whether the loaded profile's runs train with bf16
# autocast (the plugin task's --bf16-autocast on CPU) on this machine, decided in Python
# (python -m qknorm_tools.run precision: qknorm_tools/run_spec.py, the rule train.sh's plan
# uses). Sets QK_BF16_RUN to "bf16" or "" (the precision qk_run_dirs files runs under) and
# QK_PRECISION to bf16 or fp32 (the `--precision` that the calling script passes to each cell
# and child script). Decides by --precision (QK_PRECISION_ARG) if given, else QKNORM_BF16 if
# set (1, 0 or auto), else the profile's bf16 key (default 0). auto: bf16 only where the CPU has
# native bf16 and it was measured faster than fp32 (qknorm_model_tools/bf16_auto.py: a training
# step at the proxy size with the run's THREADS, measured once after a line saying what and
# roughly how long, cached under $QK_WORK_DIR/bf16-auto/); fp32 for a profile at the papers'
# size (a GPU profile: fairseq's --fp16 there). --cached-only: never measure (answers fp32 without a cached verdict); for steps
# that only find runs, and dry runs. --quiet: no '[bf16 auto]' line saying why (a step that
# trains nothing and only finds the runs, e.g. --aggregate-only; errors are still said). The
# environment is left as it was.
qk_resolve_bf16() {
    local opts=() opt
    for opt in "$@"; do
        case "$opt" in --cached-only | --quiet) opts+=("$opt") ;; *) die "qk_resolve_bf16: unknown option $opt" ;; esac
    done
    qk_run_py precision "--repo=$QK_REPO_ROOT" "--work-dir=$QK_WORK_DIR" "--profile=$PROFILE" \
        "--precision=$QK_PRECISION_ARG" ${THREADS:+"--threads=$THREADS"} \
        "${opts[@]+"${opts[@]}"}"
}

# qk_resolve_bf16_of PROFILE [--cached-only] [--quiet]: qk_resolve_bf16 for PROFILE without
# loading it into this shell (for scripts that load profiles in subshells only, e.g. reproduce.sh).
qk_resolve_bf16_of() {
    PROFILE="$1" qk_resolve_bf16 "${@:2}"
}

# qk_py MODULE ARGS...: what python -m qknorm_tools.MODULE ARGS prints on stdout, in QK_PY_OUT
# (trailing newlines removed, as $(...) does), and its exit status; asked of the script's
# coprocess where qk_spine_start (proc.sh) started one (qknorm_tools/serve.py: the protocol),
# else in a Python process of its own. Its stderr is the script's.
qk_py() {
    local status=0
    QK_PY_OUT=""
    if [[ -z "${QK_SPINE[1]:-}" ]]; then
        [[ -n "$QK_PY" ]] || die "no python interpreter found (set QKNORM_PYTHON)"
        QK_PY_OUT="$("$QK_PY" -m "qknorm_tools.$1" "${@:2}")" || status=$?
        return "$status"
    fi
    { printf '%s\n' "$#"; printf '%s\0' "$@"; } >&"${QK_SPINE[1]}"
    { IFS= read -r -d '' QK_PY_OUT && read -r status; } <&"${QK_SPINE[0]}" \
        || die "the script's Python process (python -m qknorm_tools.serve) ended (above)"
    while [[ "$QK_PY_OUT" == *$'\n' ]]; do QK_PY_OUT="${QK_PY_OUT%$'\n'}"; done
    return "$status"
}

# qk_run_py COMMAND ARGS...: python -m qknorm_tools.run COMMAND ARGS, through qk_py (train-plan,
# train-claim, evaluate-plan, options: docs of qknorm_tools/run.py), its assignments evaluated here
# (globals: REMOVE_BPE, CMD, DATA_ID, ...). Exit status 2 there is a usage error with the message
# it printed; any other failure exits with its status (its errors are on stderr; 3: diverged).
qk_run_py() {
    local rc=0
    qk_py run "$@" || rc=$?
    case "$rc" in
        0) eval "$QK_PY_OUT" ;;
        2) qk_usage_error "$QK_PY_OUT" ;;
        *) exit "$rc" ;;
    esac
}

# qk_check_options SPEC...: the command line's integers and comma-separated lists, each checked
# by its one rule in one python start (python -m qknorm_tools.run options: uint:OPTION=VALUE,
# posint:OPTION=VALUE, seeds:VAR=LIST, list:KIND:VAR=LIST, names:KIND:VAR=LIST), in order; the
# lists set as arrays (VAR); the first bad value is a usage error (exit 2).
qk_check_options() {
    qk_run_py options "--repo=$QK_REPO_ROOT" "--work-dir=$QK_WORK_DIR" "$@"
}

# qk_run_label [PROFILE [MAX_UPDATE]]: the name runs and results of a profile are filed under
# (qknorm_tools.config.run_label: PROFILE for the profile's own budget, PROFILE-max-update-N for
# any other, so that a short trial never writes over, or is mistaken for, the profile's runs and
# results). Without arguments: the loaded profile's QK_RUN_LABEL (load_profile_config
# [--max-update N]); with them: for PROFILE at MAX_UPDATE (default: its own budget or
# $QKNORM_MAX_UPDATE).
qk_run_label() {
    if (($#)); then
        (
            load_pair_config "$(qk_known_pairs | cut -d' ' -f1)"
            load_profile_config "$1" --max-update "${2-}"
            printf '%s\n' "$QK_RUN_LABEL"
        )
        return
    fi
    printf '%s\n' "$QK_RUN_LABEL"
}

# qk_run_dirs OUT LABEL PAIRS SYSTEMS SEEDS [LR...]: where the runs of a grid live, in one python
# call (python -m qknorm_tools.run dirs: qknorm_tools.config.run_dir names every run directory,
# WORK/runs/PAIR/LABEL/SYSTEM/seedN[-lrLR][-bf16]); PAIRS, SYSTEMS and SEEDS comma-separated.
# OUT, an associative array, gets one entry per cell, keyed PAIR/SYSTEM/SEED, or with LRs
# (LR_DIRS of load_profile_config --sweep-lr; "" is the profile's own lr, seedN)
# PAIR/SYSTEM/SEED/LR. The precision is $QK_BF16_RUN (qk_resolve_bf16).
qk_run_dirs() {
    local -n __dirs="$1"
    local key dir lr args=(dirs "--repo=$QK_REPO_ROOT" "--work-dir=$QK_WORK_DIR" "--label=$2"
        "--precision=${QK_BF16_RUN:-fp32}" "--pairs=$3" "--systems=$4" "--seeds=$5")
    for lr in "${@:6}"; do args+=("--lr=$lr"); done
    qk_py run "${args[@]}" || die "cannot name the run directories (above)"
    while IFS=$'\t' read -r key dir; do
        [[ -z "$key" ]] || __dirs[$key]="$dir"
    done <<<"$QK_PY_OUT"
}

