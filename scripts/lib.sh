#!/usr/bin/env bash
# scripts/lib.sh: shared bash functions of the pipeline. Source it, do not run it:
#   SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"; source "$SCRIPT_DIR/lib.sh"
#
# Provides
#   QK_REPO_ROOT      repository root (found from this file's location, not from $PWD)
#   QK_WORK_DIR       $QKNORM_WORK_DIR or the repository root; outputs go below it
#   QK_DATA           $QK_WORK_DIR/data  (raw/, bpe/, bin/, download/ below it)
#   QK_PY             python interpreter: $QKNORM_PYTHON, else <repo>/.venv/bin/python, else python3
#   die MSG / qk_usage_error MSG  error on stderr, exit 1 / print the usage (function `usage`), exit 2
#   qk_log MSG / qk_warn MSG      progress / warning messages on stderr
#   qk_parse_args SPEC... -- ARGS options and positionals of a script (see below)
#   qk_print_cmd CMD...           a command line, shell-quoted, on stdout
#   qk_is_uint / qk_is_posint N   validators; qk_parse_seeds, split_list: comma-separated lists
#   qk_require_name KIND NAME     NAME is a configs/KIND/NAME.sh (pairs, systems, profiles), or die
#   load_pair_config / load_system_config / load_profile_config NAME  source a config
#   qk_run_label PROFILE          the profile as runs and results are filed: PROFILE, or
#                                 PROFILE-max-update-N for a budget other than the profile's
#   qk_run_dir PAIR LABEL SYSTEM SEED [LR]   where a run lives (LR: an lr override, qk_set_lr)
#   qk_canonical_lr LR / qk_set_lr LR   one spelling of a learning rate / --lr over the profile's
#   qk_lock_run RUN               hold RUN/.lock (flock) while this script runs, or die naming the holder
#   qk_run CMD... / qk_run_tee LOG CMD...   run a child (own process group) and wait for it
#   qk_pool_init N, qk_pool_submit NAME LOG CMD..., qk_pool_wait   run up to N children at once
#   qk_on_exit FUNCTION           run FUNCTION when the script exits (also on Ctrl-C / TERM)
#   qk_tool NAME                  path of a command-line tool (PATH, then the repo venv), or die
#   corpus_py ARGS...             python -m qknorm_tools.corpus ARGS (no torch, no fairseq)
#   qk_mktemp_dir, qk_replace_dir, qk_write_done, qk_is_done   atomic outputs, .done markers
#   qk_download URL DEST BYTES SHA256 HINT  download with size/sha256/HTML checks, no partial file
#
# Every child a script starts through qk_run / qk_pool_submit runs in its own process group and
# is stopped (the whole group: TERM, then KILL after 10 s) when the script exits for any reason,
# Ctrl-C and TERM included: an interrupted script never leaves trainings behind.

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    echo "usage: source scripts/lib.sh (from another script); it is not meant to be run" >&2
    exit 2
fi
set -euo pipefail
if ((BASH_VERSINFO[0] < 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] < 1))); then
    echo "error: the scripts need bash >= 5.1 (wait -n -p), this is bash $BASH_VERSION" >&2
    exit 1
fi
if [[ -n "${QK_LIB_LOADED:-}" ]]; then
    return 0
fi
QK_LIB_LOADED=1

QK_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
QK_SCRIPT_NAME="$(basename "${BASH_SOURCE[1]:-$0}" .sh)"
# the script's command line (sourcing without arguments keeps the script's "$@" here)
printf -v QK_COMMAND_LINE '%q ' "scripts/$QK_SCRIPT_NAME.sh" "$@"
QK_COMMAND_LINE="${QK_COMMAND_LINE% }"
QK_WORK_DIR="${QKNORM_WORK_DIR:-$QK_REPO_ROOT}"
QK_DATA="$QK_WORK_DIR/data"
# `python -m qknorm_tools.*` works from any directory, installed or not
export PYTHONPATH="$QK_REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"

die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}

qk_log() {
    printf '[%s] %s\n' "$QK_SCRIPT_NAME" "$*" >&2
}

qk_warn() {
    printf '[%s] warning: %s\n' "$QK_SCRIPT_NAME" "$*" >&2
}

qk_usage_error() {
    printf 'error: %s\n' "$*" >&2
    if declare -F usage >/dev/null; then
        usage >&2
    fi
    exit 2
}

# ---------------------------------------------------------------------------------------------
# command lines

# need_value OPTION [VALUE ...]: OPTION must be followed by a value that is neither empty nor
# the next option (so "--results-dir --dry-run" is an error, not a path).
need_value() { [[ $# -ge 2 && -n "$2" && "$2" != --* ]] || qk_usage_error "$1 needs a value"; }

# qk_parse_args SPEC... -- ARGS...: parse a script's command line.
#   SPEC "--opt VAR"            --opt VALUE or --opt=VALUE sets VAR (need_value rules)
#   SPEC "--opt|--alias VAR"    the same under two names
#   SPEC "--opt VAR=VALUE"      a switch: --opt sets VAR to VALUE
#   SPEC "@POS1 POS2? ..."      positional arguments in order, VAR? optional (keeps its value);
#                               a missing one is "missing POS" (POS = VAR without _ARG), an
#                               extra one "unexpected argument"
# -h/--help prints `usage` and exits 0; an unknown option is a usage error (exit 2); after a
# bare "--" the remaining arguments go to the array QK_REST.
qk_parse_args() {
    local -a specs=() positional=() given=()
    local spec arg name value inline var i
    while (($#)) && [[ "$1" != -- ]]; do
        if [[ "$1" == @* ]]; then read -r -a positional <<<"${1#@}"; else specs+=("$1"); fi
        shift
    done
    (($#)) && shift
    QK_REST=()
    while (($#)); do
        arg="$1"
        case "$arg" in
            -h | --help) usage; exit 0 ;;
            --) shift; QK_REST=("$@"); break ;;
            -?*)
                name="${arg%%=*}" inline=0 value=""
                [[ "$arg" != *=* ]] || { inline=1; value="${arg#*=}"; }
                var=""
                for spec in "${specs[@]}"; do
                    if [[ "|${spec%% *}|" == *"|$name|"* ]]; then var="${spec#* }"; break; fi
                done
                [[ -n "$var" ]] || qk_usage_error "unknown option '$arg'"
                if [[ "$var" == *=* ]]; then
                    ((inline == 0)) || qk_usage_error "$name takes no value"
                    printf -v "${var%%=*}" '%s' "${var#*=}"
                    shift
                elif ((inline)); then
                    [[ -n "$value" ]] || qk_usage_error "$name needs a value"
                    printf -v "$var" '%s' "$value"
                    shift
                else
                    need_value "$@"
                    printf -v "$var" '%s' "$2"
                    shift 2
                fi
                ;;
            *) given+=("$arg"); shift ;;
        esac
    done
    for i in "${!positional[@]}"; do
        var="${positional[$i]%\?}"
        if ((i < ${#given[@]})); then
            printf -v "$var" '%s' "${given[$i]}"
        elif [[ "${positional[$i]}" != *\? ]]; then
            qk_usage_error "missing ${var%_ARG}"
        fi
    done
    ((${#given[@]} <= ${#positional[@]})) || qk_usage_error "unexpected argument '${given[${#positional[@]}]}'"
}

# qk_print_cmd CMD...: print CMD shell-quoted on one line (what --dry-run shows).
qk_print_cmd() {
    local line
    printf -v line '%q ' "$@"
    printf '%s\n' "${line% }"
}

# qk_is_uint N: N is a non-negative integer below 10^9 written without leading zeros, as the
# scripts accept seeds and update budgets (seed01 and seed1 can never be one fairseq seed counted
# twice, and "--max-update 00" is the 0 that the never-stop check refuses).
qk_is_uint() { [[ "${1-}" =~ ^(0|[1-9][0-9]{0,8})$ ]]; }

# qk_is_posint N: N is a positive integer (threads, jobs).
qk_is_posint() { [[ "${1-}" =~ ^[1-9][0-9]{0,5}$ ]]; }

# qk_check_uint OPTION VALUE / qk_check_posint OPTION VALUE: usage error unless VALUE fits.
qk_check_uint() {
    qk_is_uint "$2" || qk_usage_error "$1 must be a non-negative integer (no leading zeros, below 10^9), got '$2'"
}
qk_check_posint() {
    qk_is_posint "$2" || qk_usage_error "$1 must be a positive integer, got '$2'"
}

# split_list OUT_ARRAY LIST: comma-separated LIST -> array OUT_ARRAY (order kept, duplicates
# dropped); returns 1 on an empty item.
split_list() {
    local -n __list_out="$1"
    local list="$2" item seen=" " items=()
    [[ "$list" != *, ]] || return 1
    IFS=',' read -r -a items <<<"$list"
    __list_out=()
    for item in "${items[@]}"; do
        item="${item//[[:space:]]/}"
        [[ -n "$item" ]] || return 1
        if [[ "$seen" != *" $item "* ]]; then
            seen+="$item "
            __list_out+=("$item")
        fi
    done
}

# qk_parse_seeds OUT_ARRAY LIST: --seeds LIST -> array OUT_ARRAY of distinct seeds; a usage error
# (exit 2) naming LIST on an empty item or an item that is not a seed (qk_is_uint).
qk_parse_seeds() {
    local -n __seeds_out="$1"
    local s
    split_list __seeds_out "$2" \
        || qk_usage_error "bad --seeds list '$2' (comma-separated non-negative integers, e.g. 1,2,3)"
    for s in "${__seeds_out[@]}"; do
        qk_is_uint "$s" \
            || qk_usage_error "bad --seeds list '$2': '$s' is not a non-negative integer (no leading zeros, below 10^9; e.g. --seeds 1,2,3)"
    done
}

# qk_parse_names KIND OUT_ARRAY LIST: a comma-separated list of configs/KIND names, or "all".
qk_parse_names() {
    local kind="$1" list="$3" n
    local -n __names_out="$2"
    if [[ "$list" == all ]]; then
        read -r -a __names_out <<<"$(qk_config_names "$kind")"
        return 0
    fi
    split_list __names_out "$list" || qk_usage_error "bad --$kind list '$list' (empty item)"
    for n in "${__names_out[@]}"; do
        qk_require_name "$kind" "$n" "; or 'all'"
    done
}

# ---------------------------------------------------------------------------------------------
# exit: children stopped, exit hooks run, temporary files removed (every exit path)

QK_CLEANUP=()     # temporary paths, removed on exit
QK_CHILDREN=()    # process group ids of the running children (qk_run, qk_pool_submit)
QK_EXIT_HOOKS=()  # functions run on exit, after the children are stopped

# qk_on_exit FUNCTION: run FUNCTION (no arguments) when the script exits, whatever the reason.
qk_on_exit() { QK_EXIT_HOOKS+=("$1"); }

# _qk_stop_children: TERM every child's process group, wait up to 10 s, then KILL what is left.
_qk_stop_children() {
    local pid alive tries=0
    ((${#QK_CHILDREN[@]})) || return 0
    for pid in "${QK_CHILDREN[@]}"; do
        kill -TERM -- "-$pid" 2>/dev/null || true
    done
    for pid in "${QK_CHILDREN[@]}"; do
        wait "$pid" 2>/dev/null || true  # the group leader: a subshell, gone at once
    done
    while :; do
        alive=()
        for pid in "${QK_CHILDREN[@]}"; do
            if kill -0 -- "-$pid" 2>/dev/null; then alive+=("$pid"); fi
        done
        ((${#alive[@]})) || break
        if ((++tries > 50)); then
            for pid in "${alive[@]}"; do kill -KILL -- "-$pid" 2>/dev/null || true; done
            break
        fi
        sleep 0.2
    done
    QK_CHILDREN=()
}

qk_cleanup() {
    local p hook
    trap '' PIPE  # a reader that is gone (a prefixing pipe) must not kill the cleanup
    _qk_stop_children
    for hook in "${QK_EXIT_HOOKS[@]+"${QK_EXIT_HOOKS[@]}"}"; do
        "$hook" || true
    done
    QK_EXIT_HOOKS=()
    for p in "${QK_CLEANUP[@]+"${QK_CLEANUP[@]}"}"; do
        if [[ -n "$p" && -e "$p" ]]; then
            rm -rf -- "$p"
        fi
    done
}
trap qk_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# _qk_prefix PREFIX: copy stdin to stdout, each line prefixed with PREFIX (unbuffered).
_qk_prefix() {
    local line
    while IFS= read -r line || [[ -n "$line" ]]; do
        printf '%s%s\n' "$1" "$line"
    done
}

# _qk_spawn MODE ARG CMD...: start CMD in the background in its own process group (set -m) and
# register it in QK_CHILDREN; QK_SPAWNED = its pid (= process group id). MODE: plain (output as
# is), tee (stdout+stderr also appended to the file ARG), prefix (stdout+stderr, each line
# prefixed with ARG; "prefix-tee" does both, ARG = "PREFIX|LOG").
_qk_spawn() {
    local mode="$1" arg="$2"
    shift 2
    set -m  # the child gets its own process group; its stdin is /dev/null (never the terminal)
    case "$mode" in
        plain) ( set +m; "$@" ) </dev/null & ;;
        tee) ( set +m; "$@" 2>&1 | tee -a -- "$arg" ) </dev/null & ;;
        prefix) ( set +m; "$@" 2>&1 | _qk_prefix "$arg" ) </dev/null & ;;
        prefix-tee) ( set +m; "$@" 2>&1 | tee -a -- "${arg#*|}" | _qk_prefix "${arg%%|*}" ) </dev/null & ;;
    esac
    QK_SPAWNED=$!
    set +m
    QK_CHILDREN+=("$QK_SPAWNED")
}

_qk_forget_child() {
    local pid keep=()
    for pid in "${QK_CHILDREN[@]}"; do
        [[ "$pid" == "$1" ]] || keep+=("$pid")
    done
    QK_CHILDREN=("${keep[@]+"${keep[@]}"}")
}

# qk_run CMD...: run CMD as a child (own process group, stopped with this script) and return
# its exit status. Unlike a foreground command, it lets Ctrl-C / TERM stop this script at once.
qk_run() {
    local rc=0 pid
    _qk_spawn plain "" "$@"
    pid="$QK_SPAWNED"
    wait "$pid" || rc=$?
    _qk_forget_child "$pid"
    return "$rc"
}

# qk_run_tee LOG CMD...: qk_run, with stdout and stderr also appended to LOG.
qk_run_tee() {
    local rc=0 pid log="$1"
    shift
    _qk_spawn tee "$log" "$@"
    pid="$QK_SPAWNED"
    wait "$pid" || rc=$?
    _qk_forget_child "$pid"
    return "$rc"
}

# qk_pool_init N: a job pool running up to N commands at once (the one pool of the pipeline:
# demo.sh, reproduce.sh and ablation.sh run their cells through it).
qk_pool_init() {
    QK_POOL_MAX="$1"
    QK_POOL_PIDS=()
    QK_POOL_FAILED=()
    declare -gA QK_POOL_NAME=()
}

# qk_pool_submit NAME LOG CMD...: start CMD when a slot is free (waiting for a running job to
# finish first). With N > 1 its output lines are prefixed "[NAME] "; LOG (if not empty) gets a
# copy of its output.
qk_pool_submit() {
    local name="$1" log="$2"
    shift 2
    while ((${#QK_POOL_PIDS[@]} >= QK_POOL_MAX)); do
        _qk_pool_reap
    done
    if ((QK_POOL_MAX > 1)) && [[ -n "$log" ]]; then
        _qk_spawn prefix-tee "[$name] |$log" "$@"
    elif ((QK_POOL_MAX > 1)); then
        _qk_spawn prefix "[$name] " "$@"
    elif [[ -n "$log" ]]; then
        _qk_spawn tee "$log" "$@"
    else
        _qk_spawn plain "" "$@"
    fi
    QK_POOL_PIDS+=("$QK_SPAWNED")
    QK_POOL_NAME[$QK_SPAWNED]="$name"
}

# _qk_pool_reap: wait for one job; a failed one is added to QK_POOL_FAILED (by NAME).
_qk_pool_reap() {
    local pid="" rc=0 keep=() p
    wait -n -p pid "${QK_POOL_PIDS[@]}" || rc=$?
    [[ -n "$pid" ]] || return 0
    for p in "${QK_POOL_PIDS[@]}"; do
        [[ "$p" == "$pid" ]] || keep+=("$p")
    done
    QK_POOL_PIDS=("${keep[@]+"${keep[@]}"}")
    _qk_forget_child "$pid"
    if ((rc != 0)); then
        QK_POOL_FAILED+=("${QK_POOL_NAME[$pid]}")
        qk_warn "${QK_POOL_NAME[$pid]} failed (exit $rc)"
    fi
}

# qk_pool_wait: wait for every job of the pool; QK_POOL_FAILED lists the names that failed.
qk_pool_wait() {
    while ((${#QK_POOL_PIDS[@]})); do
        _qk_pool_reap
    done
}

# ---------------------------------------------------------------------------------------------
# temporary directories

# qk_mktemp_dir VAR PARENT NAME: create PARENT/.NAME.tmp.XXXXXX (same file system as the final
# output, so that the final `mv` is a rename), store its path in VAR, remove it on exit unless
# it was moved into place by qk_replace_dir.
qk_mktemp_dir() {
    local __var="$1" parent="$2" name="$3" __d
    mkdir -p -- "$parent"
    __d="$(mktemp -d "$parent/.$name.tmp.XXXXXX")" || die "cannot create a temporary directory in $parent"
    chmod "$(printf '%o' $((0777 & ~$(umask))))" "$__d"  # mktemp makes it 0700; use the umask
    QK_CLEANUP+=("$__d")
    printf -v "$__var" '%s' "$__d"
}

# qk_replace_dir TMP FINAL: put the completed directory TMP in place as FINAL. An existing FINAL
# is moved aside first and deleted only after TMP is in place, so no failure leaves FINAL
# half-written (a crash between the two renames leaves the old copy as FINAL.old.PID).
qk_replace_dir() {
    local tmp="$1" final="$2" old
    if [[ -e "$final" ]]; then
        old="$final.old.$$"
        mv -- "$final" "$old" || die "cannot move $final aside"
        if ! mv -- "$tmp" "$final"; then
            mv -- "$old" "$final"
            die "cannot move $tmp to $final (previous $final restored)"
        fi
        rm -rf -- "$old"
    else
        mkdir -p -- "$(dirname "$final")"
        mv -- "$tmp" "$final" || die "cannot move $tmp to $final"
    fi
}

# ---------------------------------------------------------------------------------------------
# completion markers

# qk_write_done DIR SETTINGS FILE...: DIR/.settings holds SETTINGS (the options and input
# fingerprints the outputs were made with), DIR/.done the sha256 of each FILE (relative to DIR).
# Write them last, in the temporary directory, before qk_replace_dir.
qk_write_done() {
    local dir="$1" settings="$2"
    shift 2
    printf '%s\n' "$settings" >"$dir/.settings"
    (cd "$dir" && sha256sum -- "$@") >"$dir/.done.tmp" || die "cannot checksum outputs in $dir"
    mv -- "$dir/.done.tmp" "$dir/.done"
}

# qk_is_done DIR [SETTINGS]: true if DIR/.done exists and every listed file still has its
# checksum and, when SETTINGS is given, DIR/.settings equals it. Sets QK_DONE_REASON otherwise.
qk_is_done() {
    local dir="$1" settings="${2-}"
    QK_DONE_REASON=""
    if [[ ! -f "$dir/.done" ]]; then
        QK_DONE_REASON="no $dir/.done"
        return 1
    fi
    if ! (cd "$dir" && sha256sum --check --status --strict -- .done) 2>/dev/null; then
        QK_DONE_REASON="files in $dir do not match $dir/.done (missing or modified)"
        return 1
    fi
    if [[ $# -ge 2 ]]; then
        if [[ ! -f "$dir/.settings" ]] || [[ "$(cat -- "$dir/.settings")" != "$settings" ]]; then
            QK_DONE_REASON="$dir was made with other settings or inputs ($(tr '\n' ' ' <"$dir/.settings" 2>/dev/null || true))"
            return 1
        fi
    fi
    return 0
}

# qk_fingerprint FILE: sha256 of one file (used to chain markers: bpe records raw/.done, ...)
qk_fingerprint() {
    sha256sum -- "$1" | cut -d' ' -f1
}

qk_count_lines() {
    local n
    n="$(wc -l <"$1")"
    printf '%s\n' "${n//[[:space:]]/}"
}

# ---------------------------------------------------------------------------------------------
# tools

if [[ -n "${QKNORM_PYTHON:-}" ]]; then
    QK_PY="$QKNORM_PYTHON"
elif [[ -x "$QK_REPO_ROOT/.venv/bin/python" ]]; then
    QK_PY="$QK_REPO_ROOT/.venv/bin/python"
else
    QK_PY="$(command -v python3 || command -v python || true)"
fi

# qk_tool NAME: print the path of NAME (from PATH, else from the repository venv) or die.
qk_tool() {
    local name="$1" path
    path="$(command -v "$name" 2>/dev/null || true)"
    if [[ -z "$path" && -x "$QK_REPO_ROOT/.venv/bin/$name" ]]; then
        path="$QK_REPO_ROOT/.venv/bin/$name"
    fi
    [[ -n "$path" ]] || die "'$name' not found: run \`make install\` and put $QK_REPO_ROOT/.venv/bin on PATH"
    printf '%s\n' "$path"
}

# corpus_py ARGS...: the corpus helpers, python -m qknorm_tools.corpus (no torch, no fairseq).
corpus_py() {
    [[ -n "$QK_PY" ]] || die "no python interpreter found (set QKNORM_PYTHON)"
    "$QK_PY" -m qknorm_tools.corpus "$@"
}

# ---------------------------------------------------------------------------------------------
# pair configuration

# qk_config_names KIND: the names of configs/KIND/*.sh (pairs, systems, profiles), space-separated.
qk_config_names() {
    local f out=()
    for f in "$QK_REPO_ROOT/configs/$1"/*.sh; do
        [[ -e "$f" ]] || continue
        f="$(basename "$f")"
        out+=("${f%.sh}")
    done
    printf '%s\n' "${out[*]}"
}

qk_known_pairs() { qk_config_names pairs; }
qk_known_systems() { qk_config_names systems; }
qk_known_profiles() { qk_config_names profiles; }

# qk_require_name KIND NAME [HINT]: die unless NAME has a configs/KIND/NAME.sh (KIND: pairs,
# systems, profiles), listing the known names (and HINT).
qk_require_name() {
    local kind="$1" name="${2-}"
    if [[ ! "$name" =~ ^[a-z0-9][a-z0-9_-]*$ ]] || [[ ! -f "$QK_REPO_ROOT/configs/$kind/$name.sh" ]]; then
        die "unknown ${kind%s} '$name' (known $kind: $(qk_config_names "$kind")${3-})"
    fi
}

# load_pair_config PAIR: source configs/base.sh then configs/pairs/PAIR.sh (globals), set PAIR,
# and check that the required variables are set. Dies listing the known pairs if PAIR is unknown.
load_pair_config() {
    local pair="${1-}" v
    qk_require_name pairs "$pair"
    # shellcheck source=configs/base.sh
    source "$QK_REPO_ROOT/configs/base.sh"
    # shellcheck disable=SC1090
    source "$QK_REPO_ROOT/configs/pairs/$pair.sh"
    PAIR="$pair"
    for v in SRC TGT CORPUS BPE_MERGES SPM_VOCAB_SIZE PAPER_L PAPER_ARCH_SIZE PAPER_MAX_EPOCH \
        MAX_TOKENS_CHECK BPE_VOCAB_THRESHOLD LENGTH_PERCENTILE PREPROCESS_WORKERS; do
        [[ -n "${!v:-}" ]] || die "configs/pairs/$pair.sh (or configs/base.sh) does not set $v"
    done
    case "$CORPUS" in
        ted | iwslt15) ;;
        *) die "configs/pairs/$pair.sh: unknown CORPUS '$CORPUS' (ted|iwslt15)" ;;
    esac
    case "$PAPER_ARCH_SIZE" in
        small | base) ;;
        *) die "configs/pairs/$pair.sh: PAPER_ARCH_SIZE must be small or base, got '$PAPER_ARCH_SIZE'" ;;
    esac
}

# ---------------------------------------------------------------------------------------------
# downloads

# qk_download URL DEST BYTES SHA256 HINT: download URL to DEST via DEST.part.PID, verify size,
# sha256 and that it is not an HTML page, then rename to DEST. Any failure removes the partial
# file and dies with a message ending in HINT (what to do instead). QKNORM_OFFLINE=1 disables
# downloads (same failure path, no network access).
qk_download() {
    local url="$1" dest="$2" bytes="$3" sha="$4" hint="$5" part errf rc
    if [[ "${QKNORM_OFFLINE:-0}" == 1 ]]; then
        die "download of $url disabled (QKNORM_OFFLINE=1). $hint"
    fi
    mkdir -p -- "$(dirname "$dest")"
    part="$dest.part.$$"
    errf="$dest.err.$$"
    QK_CLEANUP+=("$part" "$errf")
    qk_log "downloading $url ($bytes bytes) -> $dest"
    rc=0
    if command -v curl >/dev/null 2>&1; then
        curl --fail --location --silent --show-error --connect-timeout 20 --retry 2 \
            --output "$part" -- "$url" 2>"$errf" || rc=$?
    elif command -v wget >/dev/null 2>&1; then
        wget --quiet --tries=2 --timeout=20 --output-document="$part" -- "$url" 2>"$errf" || rc=$?
    else
        die "cannot download $url: neither curl nor wget is installed. $hint"
    fi
    if ((rc != 0)); then
        local why
        why="$(tail -n 1 "$errf" 2>/dev/null || true)"
        rm -f -- "$part" "$errf"
        die "download of $url failed (exit $rc${why:+: $why}); no network access? $hint"
    fi
    if ! corpus_py sha256 --file "$part" --expected "$sha" --size "$bytes" --name "$url" >&2; then
        rm -f -- "$part" "$errf"
        die "downloaded file from $url rejected (see above); nothing kept. $hint"
    fi
    mv -- "$part" "$dest"
    rm -f -- "$errf"
}

# ---------------------------------------------------------------------------------------------
# systems, profiles and runs (scripts/train.sh, scripts/evaluate.sh, scripts/reproduce.sh)

# load_system_config SYSTEM: source configs/systems/SYSTEM.sh (dies listing known systems).
load_system_config() {
    local system="${1-}"
    qk_require_name systems "$system"
    SYSTEM_FLAGS=()
    # shellcheck disable=SC1090
    source "$QK_REPO_ROOT/configs/systems/$system.sh"
    SYSTEM="$system"
    [[ -n "${SYSTEM_ARCH:-}" ]] || die "configs/systems/$system.sh does not set SYSTEM_ARCH"
}

# load_profile_config PROFILE: source configs/profiles/PROFILE.sh (after load_pair_config) and
# set MAX_UPDATE to $QKNORM_MAX_UPDATE or the profile's PROFILE_MAX_UPDATE.
load_profile_config() {
    local profile="${1-}"
    qk_require_name profiles "$profile"
    # set by the profile only, never inherited from the environment
    unset PROFILE_ARCH PROFILE_MAX_UPDATE TRAIN_DROPOUT TRAIN_TASK
    TASK_FLAGS=()
    # shellcheck disable=SC1090
    source "$QK_REPO_ROOT/configs/profiles/$profile.sh"
    PROFILE="$profile"
    case "${PROFILE_ARCH:-}" in
        proxy | paper) ;;
        *) die "configs/profiles/$profile.sh sets PROFILE_ARCH='${PROFILE_ARCH:-}', expected proxy or paper" ;;
    esac
    [[ -n "${PROFILE_MAX_UPDATE:-}" ]] || die "configs/profiles/$profile.sh does not set PROFILE_MAX_UPDATE"
    MAX_UPDATE="${QKNORM_MAX_UPDATE:-$PROFILE_MAX_UPDATE}"
}

# qk_arch: the named arch of the loaded system (SYSTEM_ARCH, a family registered by
# fairseq_qknorm/models/transformer_qknorm.py) at the loaded profile's size: FAMILY_proxy for
# the CPU profiles; the pair's paper size for the paper profile (FAMILY_small for gl-en's 4+4
# layers, FAMILY for the 6+6 base).
qk_arch() {
    if [[ "$PROFILE_ARCH" == proxy ]]; then
        printf '%s_proxy\n' "$SYSTEM_ARCH"
    elif [[ "$PAPER_ARCH_SIZE" == small ]]; then
        printf '%s_small\n' "$SYSTEM_ARCH"
    else
        printf '%s\n' "$SYSTEM_ARCH"
    fi
}

# qk_run_label [PROFILE [MAX_UPDATE]]: the name runs and results of a profile are filed under:
# PROFILE for the profile's own budget, PROFILE-max-update-N for any other (a short trial never
# writes over, or is mistaken for, the profile's runs and results). Without arguments: for the
# loaded profile and MAX_UPDATE; with them: for PROFILE at MAX_UPDATE (default: its own budget
# or $QKNORM_MAX_UPDATE).
qk_run_label() {
    if (($#)); then
        (
            load_pair_config "$(qk_known_pairs | cut -d' ' -f1)"
            load_profile_config "$1"
            [[ -z "${2-}" ]] || MAX_UPDATE="$2"
            qk_run_label
        )
        return
    fi
    if [[ "$MAX_UPDATE" == "$PROFILE_MAX_UPDATE" ]]; then
        printf '%s\n' "$PROFILE"
    else
        printf '%s-max-update-%s\n' "$PROFILE" "$MAX_UPDATE"
    fi
}

# qk_run_dir PAIR LABEL SYSTEM SEED [LR]: where a training run keeps checkpoints, logs and scores
# (LABEL from qk_run_label; LR: a peak learning rate other than the profile's, from qk_set_lr,
# filed as seedN-lrLR; empty or absent: the profile's own lr, seedN).
qk_run_dir() {
    printf '%s\n' "$QK_WORK_DIR/runs/$1/$2/$3/seed$4${5:+-lr$5}"
}

# qk_canonical_lr VALUE: VALUE (a non-negative decimal number such as 3e-3, 0.003, 3E-03) in one
# spelling, MANTISSAeEXPONENT without trailing zeros (3e-3, 1.5e-2, 1e0; 0 for zero), so that
# one learning rate is always one run directory. Returns 1 if VALUE is not such a number.
qk_canonical_lr() {
    local v="${1-}" e m x
    [[ "$v" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)([eE][-+]?[0-9]+)?$ ]] || return 1
    e="$(LC_ALL=C printf '%.6e' "$v")" || return 1  # 3.000000e-03
    m="${e%e*}" x="${e#*e}"
    if [[ "$m" == *.* ]]; then
        while [[ "$m" == *0 ]]; do m="${m%0}"; done
        m="${m%.}"
    fi
    [[ "$m" != 0 ]] || { printf '0\n'; return 0; }
    x="${x#+}"
    [[ "$x" != -* ]] || x="-$(printf '%d' "$((10#${x#-}))")"
    [[ "$x" == -* ]] || x="$((10#$x))"
    printf '%se%s\n' "$m" "$x"
}

# qk_set_lr LR: the loaded profile (load_profile_config) trained at peak learning rate LR: the
# value of --lr in OPTIM_FLAGS is replaced (the warmup and the schedule stay the profile's).
# Sets QK_LR_OVERRIDE to LR in canonical spelling (qk_canonical_lr), or to "" when LR is the
# profile's own lr (that run is the profile's, seedN). Usage error on a bad LR, dies if the
# profile sets no --lr.
qk_set_lr() {
    local lr i own=""
    lr="$(qk_canonical_lr "${1-}")" \
        || qk_usage_error "--lr must be a non-negative decimal number (e.g. 3e-3, 0.003), got '${1-}'"
    for i in "${!OPTIM_FLAGS[@]}"; do
        if [[ "${OPTIM_FLAGS[$i]}" == --lr ]]; then
            own="$(qk_canonical_lr "${OPTIM_FLAGS[$((i + 1))]}")" \
                || die "configs/profiles/$PROFILE.sh: --lr '${OPTIM_FLAGS[$((i + 1))]}' is not a number"
            OPTIM_FLAGS[$((i + 1))]="$lr"
        fi
    done
    [[ -n "$own" ]] || die "configs/profiles/$PROFILE.sh sets no --lr in OPTIM_FLAGS: --lr cannot replace it"
    QK_LR_OVERRIDE="$lr"
    [[ "$lr" != "$own" ]] || QK_LR_OVERRIDE=""
}

# qk_cell PAIR SYSTEM OPTION... [-- TRAIN_ARGS...]: one cell of an experiment grid:
# scripts/train.sh then scripts/evaluate.sh with the same OPTIONs (--profile, --seed,
# --max-update, --threads); TRAIN_ARGS go to fairseq-train only. Both skip finished work.
qk_cell() {
    local opts=() extra=()
    while (($#)) && [[ "$1" != -- ]]; do
        opts+=("$1")
        shift
    done
    if (($#)); then
        extra=("$@")
    fi
    bash "$QK_REPO_ROOT/scripts/train.sh" "${opts[@]}" "${extra[@]+"${extra[@]}"}" \
        && bash "$QK_REPO_ROOT/scripts/evaluate.sh" "${opts[@]}" >/dev/null
}

# qk_lock_run RUN: hold an exclusive lock on RUN/.lock (flock) until this script and its children
# exit; another process holding it is an error naming that holder. No run is ever trained or
# evaluated by two processes at once.
qk_lock_run() {
    local run="$1" holder
    mkdir -p -- "$run"
    exec {QK_LOCK_FD}<>"$run/.lock" || die "cannot open $run/.lock"
    if ! flock -n "$QK_LOCK_FD"; then
        holder="$(cat -- "$run/.lock" 2>/dev/null || true)"
        die "$run is in use by another process (${holder:-holder unknown}): a run is never trained or evaluated by two processes at once; wait for it to finish or stop it"
    fi
    printf 'pid %s, %s, started %s\n' "$$" "${QK_COMMAND_LINE:-scripts/$QK_SCRIPT_NAME.sh}" \
        "$(date '+%Y-%m-%d %H:%M:%S')" >"$run/.lock"
}
