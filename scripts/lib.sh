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
#   qk_require_name KIND NAME     NAME is a configs/KIND/NAME.toml (pairs, systems, profiles), or die
#   load_pair_config / load_system_config / load_profile_config NAME  load a config
#                                 (eval of `python -m qknorm_tools.config shell`)
#   qk_run_label PROFILE          the profile as runs and results are filed: PROFILE, or
#                                 PROFILE-max-update-N for a budget other than the profile's
#   qk_run_dir PAIR LABEL SYSTEM SEED [LR [bf16]]   where a run lives (LR: an lr override, qk_set_lr)
#   qk_canonical_lr LR / qk_set_lr LR   one spelling of a learning rate / --lr over the profile's
#   qk_lock_run RUN               hold RUN/.lock (flock) while this script runs, or die naming the holder
#   qk_check_run_identity RUN LABEL  RUN/train.json is the run asked for (train.sh, evaluate.sh)
#   qk_run CMD...                 run a child (own process group) and wait for it
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
# a relative QKNORM_WORK_DIR is taken from where the script started, and made absolute for the
# steps that run from inside the work dir and for the scripts this one starts
[[ "$QK_WORK_DIR" == /* ]] || QK_WORK_DIR="$PWD/$QK_WORK_DIR"
[[ -z "${QKNORM_WORK_DIR:-}" ]] || export QKNORM_WORK_DIR="$QK_WORK_DIR"
QK_DATA="$QK_WORK_DIR/data"
# the work dir is a directory, or a path that can be made one (not a file, nor below a file)
_qk_up="$QK_WORK_DIR"
while [[ ! -e "$_qk_up" && "$_qk_up" != / ]]; do _qk_up="$(dirname -- "$_qk_up")"; done
if [[ ! -d "$_qk_up" ]]; then
    printf 'error: QKNORM_WORK_DIR=%s: %s is not a directory (the work dir holds data/, runs/ and results/; point QKNORM_WORK_DIR at a directory)\n' \
        "$QK_WORK_DIR" "$_qk_up" >&2
    exit 1
fi
unset _qk_up
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
        printf 'error: %s (usage above)\n' "$*" >&2  # again, last: the usage may scroll it off
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
# For systems, "all" means the papers' systems: a system config with in_all = false (one that
# is not in the papers' tables, e.g. qk_layernorm) is run only when named.
qk_parse_names() {
    local kind="$1" list="$3" n
    local -n __names_out="$2"
    if [[ "$list" == all ]]; then
        __names_out=()
        for n in $(qk_config_names "$kind" --in-all); do
            __names_out+=("$n")
        done
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
    # QK_JOB_PID: the child's pid (= $!), also seen by CMD inside a pipeline's subshell
    case "$mode" in
        plain) ( set +m; QK_JOB_PID="$BASHPID"; "$@" ) </dev/null & ;;
        tee) ( set +m; QK_JOB_PID="$BASHPID"; "$@" 2>&1 | tee -a -- "$arg" ) </dev/null & ;;
        prefix) ( set +m; QK_JOB_PID="$BASHPID"; "$@" 2>&1 | _qk_prefix "$arg" ) </dev/null & ;;
        prefix-tee)
            ( set +m; QK_JOB_PID="$BASHPID"; "$@" 2>&1 | tee -a -- "${arg#*|}" | _qk_prefix "${arg%%|*}" ) </dev/null &
            ;;
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

# _qk_wait_child PID: wait for the child PID and return its exit status. A trapped signal (the
# Slurm worker's USR1) interrupts `wait` with a status > 128 while the child still runs: wait again.
_qk_wait_child() {
    local pid="$1" rc
    while :; do
        rc=0
        wait "$pid" || rc=$?
        if ((rc > 128)) && kill -0 "$pid" 2>/dev/null; then
            continue
        fi
        return "$rc"
    done
}

# qk_run CMD...: run CMD as a child (own process group, stopped with this script) and return
# its exit status. Unlike a foreground command, it lets Ctrl-C / TERM stop this script at once.
qk_run() {
    local rc=0 pid
    _qk_spawn plain "" "$@"
    pid="$QK_SPAWNED"
    _qk_wait_child "$pid" || rc=$?
    _qk_forget_child "$pid"
    return "$rc"
}

# qk_pool_init N [DEVICES...]: a job pool running up to N commands at once (the one pool of the
# pipeline: demo.sh and lib.sh:qk_launch run their cells through it). With DEVICES (N entries,
# each a comma-separated list of GPU ids), the job in slot i sees only DEVICES[i]
# (CUDA_VISIBLE_DEVICES): each running cell has its own GPU(s).
qk_pool_init() {
    QK_POOL_MAX="$1"
    shift
    QK_POOL_DEVICES=("$@")
    QK_POOL_STATUS="$(mktemp -d)" || die "cannot create a temporary directory"
    QK_CLEANUP+=("$QK_POOL_STATUS")
    QK_POOL_PIDS=()
    QK_POOL_FAILED=()
    QK_POOL_SLOTS=()  # slot -> pid of the job in it ("" = free)
    local i
    for ((i = 0; i < QK_POOL_MAX; i++)); do QK_POOL_SLOTS+=(""); done
    declare -gA QK_POOL_NAME=() QK_POOL_SLOT=()
}

# _qk_with_devices DEVICES CMD...: run CMD with CUDA_VISIBLE_DEVICES=DEVICES (in the job's subshell).
_qk_with_devices() {
    export CUDA_VISIBLE_DEVICES="$1"
    shift
    "$@"
}

# _qk_pool_job CMD...: a pool job: CMD, its exit status written to QK_POOL_STATUS/QK_JOB_PID
# (bash can lose the status of one of two jobs that end together to `wait -n`).
_qk_pool_job() {
    local rc=0
    "$@" || rc=$?
    echo "$rc" >"$QK_POOL_STATUS/$QK_JOB_PID"
    return "$rc"
}

# qk_pool_submit NAME LOG CMD...: start CMD when a slot is free (waiting for a running job to
# finish first). With N > 1 its output lines are prefixed "[NAME] "; LOG (if not empty) gets a
# copy of its output.
qk_pool_submit() {
    local name="$1" log="$2" slot=0
    shift 2
    while ((${#QK_POOL_PIDS[@]} >= QK_POOL_MAX)); do
        _qk_pool_reap
    done
    while [[ -n "${QK_POOL_SLOTS[$slot]}" ]]; do ((++slot)); done
    if ((${#QK_POOL_DEVICES[@]})); then
        set -- _qk_with_devices "${QK_POOL_DEVICES[$slot]}" "$@"
        qk_log "$name on GPU ${QK_POOL_DEVICES[$slot]}"
    fi
    set -- _qk_pool_job "$@"
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
    QK_POOL_SLOT[$QK_SPAWNED]="$slot"
    QK_POOL_SLOTS[slot]="$QK_SPAWNED"
}

# _qk_pool_reap: wait for one job to end; a failed one is added to QK_POOL_FAILED (by NAME).
# Its exit status is the one _qk_pool_job recorded (else `wait PID`'s).
_qk_pool_reap() {
    local pid="" rc=0 keep=() p
    while [[ -z "$pid" ]]; do
        for p in "${QK_POOL_PIDS[@]}"; do
            if [[ -f "$QK_POOL_STATUS/$p" ]] || ! kill -0 "$p" 2>/dev/null; then
                pid="$p"
                break
            fi
        done
        # returns when a job ends (or a trapped signal arrives; INT and TERM exit)
        [[ -n "$pid" ]] || wait -n "${QK_POOL_PIDS[@]}" 2>/dev/null || true
    done
    wait "$pid" 2>/dev/null || rc=$?  # the job's subshell has ended (or is ending)
    if [[ -f "$QK_POOL_STATUS/$pid" ]]; then
        rc="$(cat -- "$QK_POOL_STATUS/$pid")"
        rm -f -- "$QK_POOL_STATUS/$pid"  # a later job may get the same pid
    fi
    for p in "${QK_POOL_PIDS[@]}"; do
        [[ "$p" == "$pid" ]] || keep+=("$p")
    done
    QK_POOL_PIDS=("${keep[@]+"${keep[@]}"}")
    QK_POOL_SLOTS[${QK_POOL_SLOT[$pid]}]=""
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
# space-separated (--in-all: systems of `--systems all` only).
qk_config_names() {
    _qk_config names "$@"
    printf '%s\n' "$QK_CONFIG_OUT"
}

qk_known_pairs() { qk_config_names pairs; }
qk_known_systems() { qk_config_names systems; }
qk_known_profiles() { qk_config_names profiles; }

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

# load_system_config SYSTEM: the settings of configs/systems/SYSTEM.toml (SYSTEM_ARCH,
# SYSTEM_QKNORM, SYSTEM_FLAGS, a system's own criterion SYSTEM_CRITERION (empty: train.sh's
# label_smoothed_cross_entropy) and SYSTEM_CRITERION_FLAGS, ...); an unknown SYSTEM is a usage
# error listing the known systems.
load_system_config() {
    _qk_config shell --system "${1-}"
    eval "$QK_CONFIG_OUT"
}

# load_profile_config PROFILE: the settings of configs/profiles/PROFILE.toml (its `extends`
# chain resolved; after load_pair_config: max_epoch = "paper" is the pair's PAPER_MAX_EPOCH), and
# MAX_UPDATE: $QKNORM_MAX_UPDATE or the profile's PROFILE_MAX_UPDATE (QKNORM_THREADS replaces
# THREADS; qknorm_tools.config.apply_env).
load_profile_config() {
    _qk_config shell --profile "${1-}" --paper-max-epoch "${PAPER_MAX_EPOCH:-}"
    eval "$QK_CONFIG_OUT"
}

# qk_resolve_bf16 [--cached-only]: whether the loaded profile's runs train with bf16 autocast
# (the plugin task's --bf16-autocast on CPU) on this machine. Sets QK_BF16_RUN to "bf16" or ""
# (qk_run_dir's default sixth argument) and exports QKNORM_BF16=1 or 0, so that every child
# (train.sh, evaluate.sh, a Slurm cell) files and finds its runs the same way. QKNORM_BF16
# decides if set (1, 0 or auto), else the profile's PROFILE_BF16 (default 0). auto: bf16 only
# where the CPU has native bf16 and it was measured faster than fp32 (benchmarks/bf16_auto.py:
# a training step at the proxy size with the run's THREADS, measured once after a line saying
# what and roughly how long, cached under $QK_WORK_DIR/bf16-auto/); fp32 for a profile at the
# papers' size (a GPU profile: fairseq's --fp16 there). --cached-only: never measure (answers fp32 without a
# cached verdict); for steps that only find runs, and dry runs.
qk_resolve_bf16() {
    local mode="${QKNORM_BF16:-${PROFILE_BF16:-0}}" answer
    QK_BF16_GIVEN="${QKNORM_BF16:-}"  # what the environment (or a flag) asked for, for qk_train_cmd
    case "$mode" in
        0) QK_BF16_RUN="" ;;
        1) QK_BF16_RUN=bf16 ;;
        auto)
            if [[ "$PROFILE_ARCH" != proxy ]]; then
                QK_BF16_RUN=""
                printf '%s\n' "[bf16 auto] fp32: profile $PROFILE trains at the papers' size (a GPU profile); bf16 autocast on CPU is measured at the proxy size only (QKNORM_BF16=1 forces it)" >&2
            else
                [[ -n "$QK_PY" ]] || die "no python interpreter found (set QKNORM_PYTHON)"
                local threads="${THREADS:-${QKNORM_THREADS:-2}}"  # the run's (after --threads / --nproc)
                answer="$(cd "$QK_REPO_ROOT" && OMP_NUM_THREADS="$threads" "$QK_PY" -m benchmarks.bf16_auto \
                    "$QK_WORK_DIR/bf16-auto" --size proxy --threads "$threads" "$@")" \
                    || die "no bf16 decision (above; QKNORM_BF16=0 or 1 decides without one)"
                case "$answer" in
                    bf16) QK_BF16_RUN=bf16 ;;
                    fp32) QK_BF16_RUN="" ;;
                    *) die "python -m benchmarks.bf16_auto answered '$answer', expected bf16 or fp32" ;;
                esac
            fi
            ;;
        *)
            local what="expected 1 (bf16 autocast), 0 (fp32) or auto (bf16 where measured faster)"
            [[ -z "${QKNORM_BF16:-}" ]] || qk_usage_error "QKNORM_BF16='$mode': $what"
            die "configs/profiles/$PROFILE.toml: key 'bf16' = '$mode': $what"
            ;;
    esac
    if [[ -n "$QK_BF16_RUN" ]]; then export QKNORM_BF16=1; else export QKNORM_BF16=0; fi
}

# qk_resolve_bf16_of PROFILE [--cached-only]: qk_resolve_bf16 for PROFILE without loading it
# into this shell (for scripts that load profiles in subshells only, e.g. reproduce.sh).
qk_resolve_bf16_of() {
    local profile="$1" answer
    shift
    answer="$(load_pair_config "$(qk_known_pairs | cut -d' ' -f1)" && load_profile_config "$profile" \
        && qk_resolve_bf16 "$@" && printf '%s' "$QKNORM_BF16")" || exit $?
    QKNORM_BF16="$answer"
    qk_resolve_bf16  # 0 or 1 now: sets QK_BF16_RUN and exports it, nothing measured
}

# qk_train_cmd: the scripts/train.sh command that makes the run of the loaded pair, system and
# profile with SEED, MAX_UPDATE_ARG, QK_LR_OVERRIDE and the resolved precision (for messages)
qk_train_cmd() {
    local env=""
    [[ -n "${QK_BF16_RUN:-}" || "${QK_BF16_GIVEN:-}" != 0 ]] || env="QKNORM_BF16=0 "
    printf '%sscripts/train.sh %s %s --profile %s --seed %s%s%s%s%s\n' "$env" "$PAIR" "$SYSTEM" \
        "$PROFILE" "$SEED" "${MAX_UPDATE_ARG:+ --max-update $MAX_UPDATE_ARG}" \
        "${QK_LR_OVERRIDE:+ --lr $QK_LR_OVERRIDE}" "${SIZE_ARG:+ --size $SIZE_ARG}" \
        "${QK_BF16_RUN:+ --bf16-autocast}"
}

# qk_check_run_identity RUN LABEL: RUN's train.json records the run asked for (the loaded pair
# and system, profile label LABEL, SEED, the resolved precision, QK_LR_OVERRIDE), or die naming
# the difference: a run directory copied or renamed (runs/.../cpu-proxy/... copied under
# cpu-proxy-fast-max-update-60) is never reused, decoded or scored under another name. What
# train.sh and evaluate.sh both check (python -m qknorm_tools.evaluate check-run).
qk_check_run_identity() {
    [[ -f "$1/train.json" ]] || return 0
    "$QK_PY" -m qknorm_tools.evaluate check-run "$1" --pair "$PAIR" --profile "$2" \
        --system "$SYSTEM" --seed "$SEED" --precision "${QK_BF16_RUN:-fp32}" \
        ${QK_LR_OVERRIDE:+--variant "lr=$QK_LR_OVERRIDE"} \
        || die "$1 is not the run of $(qk_train_cmd) (above): train it there with that command, or remove $1"
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

# qk_run_dir PAIR LABEL SYSTEM SEED [LR [bf16]]: where a training run keeps checkpoints, logs and
# scores (LABEL from qk_run_label; LR: a peak learning rate other than the profile's, from
# qk_set_lr, filed as seedN-lrLR; empty or absent: the profile's own lr, seedN; bf16: trained
# with bf16 autocast, filed as seedN[-lrLR]-bf16, next to its fp32 twin; absent: $QK_BF16_RUN
# from qk_resolve_bf16).
qk_run_dir() {
    local precision="${6-${QK_BF16_RUN:-}}"
    printf '%s\n' "$QK_WORK_DIR/runs/$1/$2/$3/seed$4${5:+-lr$5}${precision:+-$precision}"
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
    ((${x#-} <= 307)) || return 1  # 1e400: infinite as a double (fairseq's float), not a rate
    printf '%se%s\n' "$m" "$x"
}

# qk_check_stops: usage error unless a training with the loaded profile and MAX_UPDATE stops
# (--max-update 0 is no update limit, which only a profile with an epoch limit allows): what
# train.sh, evaluate.sh, ablation.sh and reproduce.sh refuse up front, dry runs included.
qk_check_stops() {
    [[ "$MAX_UPDATE" != 0 || "${MAX_EPOCH:-0}" != 0 ]] \
        || qk_usage_error "--max-update 0 with profile $PROFILE (max-epoch 0) would never stop training"
}

# qk_set_lr LR: the loaded profile (load_profile_config) trained at peak learning rate LR: the
# value of --lr in OPTIM_FLAGS is replaced (the warmup and the schedule stay the profile's).
# Sets QK_LR_OVERRIDE to LR in canonical spelling (qk_canonical_lr), or to "" when LR is the
# profile's own lr (that run is the profile's, seedN). Usage error on a bad LR, dies if the
# profile sets no --lr.
qk_set_lr() {
    local lr i own=""
    if ! lr="$(qk_canonical_lr "${1-}")"; then
        [[ ! "${1-}" =~ ^([0-9]+\.?[0-9]*|\.[0-9]+)[eE]\+?[0-9]+$ ]] \
            || qk_usage_error "--lr '${1-}' overflows: fairseq reads it as a double, at most about 1.8e308 (infinite above)"
        qk_usage_error "--lr must be a non-negative decimal number (e.g. 3e-3, 0.003), got '${1-}'"
    fi
    for i in "${!OPTIM_FLAGS[@]}"; do
        if [[ "${OPTIM_FLAGS[$i]}" == --lr ]]; then
            own="$(qk_canonical_lr "${OPTIM_FLAGS[$((i + 1))]}")" \
                || die "configs/profiles/$PROFILE.toml: key 'optim.flags': --lr '${OPTIM_FLAGS[$((i + 1))]}' is not a number"
            OPTIM_FLAGS[$((i + 1))]="$lr"
        fi
    done
    [[ -n "$own" ]] || die "configs/profiles/$PROFILE.toml sets no --lr in key 'optim.flags': --lr cannot replace it"
    QK_LR_OVERRIDE="$lr"
    [[ "$lr" != "$own" ]] || QK_LR_OVERRIDE=""
}

# _qk_cell_split ARGS...: a cell's arguments (PAIR SYSTEM OPTION... [-- TRAIN_ARGS...]) ->
# QK_CELL_OPTS (PAIR, SYSTEM and the options of both scripts), QK_CELL_TRAIN_OPTS (--nproc N,
# --launch L: scripts/train.sh only), QK_CELL_EXTRA ("--" and TRAIN_ARGS, for fairseq-train)
# and QK_CELL_TRAIN_ONLY (1 for the cell option --train-only: no scripts/evaluate.sh).
_qk_cell_split() {
    QK_CELL_OPTS=() QK_CELL_TRAIN_OPTS=() QK_CELL_EXTRA=() QK_CELL_TRAIN_ONLY=0
    while (($#)) && [[ "$1" != -- ]]; do
        case "$1" in
            --nproc | --launch | --size) QK_CELL_TRAIN_OPTS+=("$1" "${2-}"); shift 2 ;;
            --train-only) QK_CELL_TRAIN_ONLY=1; shift ;;
            *) QK_CELL_OPTS+=("$1"); shift ;;
        esac
    done
    QK_CELL_EXTRA=("$@")
}

# qk_cell PAIR SYSTEM OPTION... [-- TRAIN_ARGS...]: one cell of an experiment grid:
# scripts/train.sh then scripts/evaluate.sh with the same OPTIONs (--profile, --seed,
# --max-update, --lr, --threads); --nproc N and --launch L go to train.sh only, TRAIN_ARGS to
# fairseq-train only; --train-only: train.sh only (a model that is never decoded, e.g. the LR
# sweep's initial model). Both scripts skip finished work. Exit status 3: the training diverged
# (RUN/diverged, scripts/train.sh), nothing decoded.
qk_cell() {
    _qk_cell_split "$@"
    bash "$QK_REPO_ROOT/scripts/train.sh" "${QK_CELL_OPTS[@]}" \
        "${QK_CELL_TRAIN_OPTS[@]+"${QK_CELL_TRAIN_OPTS[@]}"}" "${QK_CELL_EXTRA[@]+"${QK_CELL_EXTRA[@]}"}" \
        || return
    ((QK_CELL_TRAIN_ONLY)) || bash "$QK_REPO_ROOT/scripts/evaluate.sh" "${QK_CELL_OPTS[@]}" >/dev/null
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
    printf 'pid %s, %s, started %s on %s\n' "$$" "${QK_COMMAND_LINE:-scripts/$QK_SCRIPT_NAME.sh}" \
        "$(date '+%Y-%m-%d %H:%M:%S')" "${HOSTNAME%%.*}" >"$run/.lock"
}

# ---------------------------------------------------------------------------------------------
# launching a grid's cells: on this machine (the job pool) or on a Slurm cluster (sbatch)
#
# A script that runs cells (reproduce.sh, ablation.sh, ...) adds "${QK_LAUNCH_SPECS[@]}" to its
# qk_parse_args call and qk_launch_usage to its usage, registers its cells with qk_cell_add, then
# calls qk_launch (or qk_launch_status for --status). A cell is a NAME, its run directory RUN and
# the arguments of qk_cell. On Slurm the cells go to a tab-separated file, one cell per line:
#   NAME <TAB> RUN <TAB> PAIR <TAB> SYSTEM <TAB> OPTION ... [<TAB> -- <TAB> TRAIN_ARG ...]
# (no field may be empty or hold a tab or newline); task i of the array job runs line i + 1
# (scripts/slurm_cell.sh). Markers in RUN: train.json + test.score.json (done; train.json alone
# for a --train-only cell, or with RUN/diverged: a diverged training is a finished result),
# cell.failed (the last attempt failed: exit status, host, time, log), slurm.job (the cell's last
# Slurm job id and its log, tab-separated), .lock (the holder of the run, scripts/train.sh and
# evaluate.sh).

QK_LAUNCHER=local QK_JOBS="" QK_GPUS_ARG="" QK_NPROC=1 QK_NODES=1 QK_STATUS=0
QK_PARTITION="${QKNORM_SLURM_PARTITION:-}" QK_ACCOUNT="${QKNORM_SLURM_ACCOUNT:-}"
QK_SBATCH_ARGS="${QKNORM_SBATCH_ARGS:-}"
QK_LAUNCH_SPECS=("--launcher QK_LAUNCHER" "--jobs QK_JOBS" "--gpus QK_GPUS_ARG" "--nproc QK_NPROC"
    "--nodes QK_NODES" "--partition QK_PARTITION" "--account QK_ACCOUNT"
    "--sbatch-args QK_SBATCH_ARGS" "--status QK_STATUS=1")
# seconds before the time limit at which Slurm warns a cell (USR1): it requeues itself
QK_SLURM_SIGNAL_SECONDS=300

# qk_launch_usage: the launcher options' lines of a script's usage.
qk_launch_usage() {
    cat <<'USAGE'
  --launcher L   local (default: this machine, the job pool) or slurm (sbatch: one array job over
                 the unfinished cells, then the aggregation as a job after them)
  --jobs N       cells at once (local: default 1, N > 1 gives each cell --threads 1; slurm: the
                 array's limit of running tasks, default none)
  --gpus LIST    local: GPU ids shared out, one per running cell (--nproc N: N per cell); default
                 $CUDA_VISIBLE_DEVICES, else nvidia-smi's list, else none (CPU)
  --nproc N      training processes per cell (scripts/train.sh --nproc: torchrun; Slurm GPU
                 cells: srun), same tokens per update as the profile
  --nodes M      slurm: nodes per cell (--nproc N over M nodes; GPU profiles)
  --partition P  slurm: sbatch --partition ($QKNORM_SLURM_PARTITION)
  --account A    slurm: sbatch --account ($QKNORM_SLURM_ACCOUNT)
  --sbatch-args="OPTS"  slurm: more sbatch options for every job, whitespace-separated, after the
                 profile's JOB_* resources (they win): e.g. --sbatch-args="--qos=long --time=48:00:00"
                 ($QKNORM_SBATCH_ARGS)
  --status       list each cell as done, running, pending, failed or todo, with its Slurm job
                 and log (from the run's markers, its lock and squeue)
USAGE
}

# qk_launch_check: usage errors for bad launcher options (call after qk_parse_args).
qk_launch_check() {
    case "$QK_LAUNCHER" in
        local | slurm) ;;
        *) qk_usage_error "--launcher must be local or slurm, got '$QK_LAUNCHER'" ;;
    esac
    [[ -z "$QK_JOBS" ]] || qk_check_posint --jobs "$QK_JOBS"
    qk_check_posint --nproc "$QK_NPROC"
    qk_check_posint --nodes "$QK_NODES"
    if ((QK_NODES > 1)); then
        [[ "$QK_LAUNCHER" == slurm ]] || qk_usage_error "--nodes needs --launcher slurm"
        ((QK_NPROC % QK_NODES == 0)) \
            || qk_usage_error "--nproc $QK_NPROC must be a multiple of --nodes $QK_NODES (the same number of processes on every node)"
    fi
    [[ -z "$QK_GPUS_ARG" || "$QK_LAUNCHER" == local ]] \
        || qk_usage_error "--gpus is for the local launcher (Slurm hands out the GPUs)"
}

# qk_gpu_list: the GPU ids this machine offers, one per line: the entries of $CUDA_VISIBLE_DEVICES
# when it is set (up to the first empty or negative one, as CUDA reads it), else the indices
# nvidia-smi lists, else none.
qk_gpu_list() {
    local ids=() id
    if [[ -n "${CUDA_VISIBLE_DEVICES+set}" ]]; then
        IFS=',' read -r -a ids <<<"$CUDA_VISIBLE_DEVICES"
        for id in "${ids[@]+"${ids[@]}"}"; do
            id="${id//[[:space:]]/}"
            [[ -n "$id" && "$id" != -* ]] || break
            printf '%s\n' "$id"
        done
    elif command -v nvidia-smi >/dev/null 2>&1; then
        nvidia-smi --query-gpu=index --format=csv,noheader 2>/dev/null || true
    fi
}

# _qk_device_groups OUT_ARRAY JOBS: for each of JOBS pool slots, a comma-separated group of
# QK_NPROC GPU ids (from --gpus, else qk_gpu_list); none on a machine without GPUs. Dies when
# there are fewer GPUs than JOBS x QK_NPROC.
_qk_device_groups() {
    local -n __groups="$1"
    local jobs="$2" ids=() i
    if [[ -n "$QK_GPUS_ARG" ]]; then
        split_list ids "$QK_GPUS_ARG" || qk_usage_error "bad --gpus list '$QK_GPUS_ARG' (comma-separated GPU ids, e.g. 0,1)"
    else
        mapfile -t ids < <(qk_gpu_list)
    fi
    __groups=()
    ((${#ids[@]})) || return 0
    ((jobs * QK_NPROC <= ${#ids[@]})) \
        || die "--jobs $jobs x --nproc $QK_NPROC needs $((jobs * QK_NPROC)) GPUs, found ${#ids[@]} (${ids[*]}; --gpus LIST or CUDA_VISIBLE_DEVICES)"
    for ((i = 0; i < jobs; i++)); do
        __groups+=("$(IFS=,; echo "${ids[*]:i*QK_NPROC:QK_NPROC}")")
    done
}

# qk_prepare_data DRY_RUN PAIR [--data-dir DIR]: scripts/prepare_data.sh, bpe.sh and binarize.sh
# for PAIR on this machine (each skips finished outputs; prepare_data.sh may download, which
# compute nodes often cannot); DRY_RUN=1 prints them. Returns 1 when a step failed.
qk_prepare_data() {
    local dry="$1" pair="$2" step args
    shift 2
    for step in prepare_data bpe binarize; do
        args=("$pair")
        [[ "$step" != prepare_data ]] || args+=("$@")
        if ((dry)); then
            qk_print_cmd bash "$QK_REPO_ROOT/scripts/$step.sh" "${args[@]}"
        else
            qk_run bash "$QK_REPO_ROOT/scripts/$step.sh" "${args[@]}" || return 1
        fi
    done
}

QK_CELL_NAME=() QK_CELL_RUN=() QK_CELL_ARGS=()
# grid cells replaced by their committed record (qk_grid_cell): never trained again
QK_REC_NAME=() QK_REC_DIR=() QK_REC_ARGS=()
declare -A QK_CELL_RECORD_OF=()

# qk_record_dir LABEL RUN: the committed record of the run directory RUN
# (runs/PAIR/LABEL/SYSTEM/seedN[-...] -> results/LABEL/PAIR/records/SYSTEM/seedN[-...];
# qknorm_tools.committed.record_dir)
qk_record_dir() {
    local run="$2" system pair
    system="$(basename -- "$(dirname -- "$run")")"
    pair="$(basename -- "$(dirname -- "$(dirname -- "$(dirname -- "$run")")")")"
    printf '%s\n' "$QK_WORK_DIR/results/$1/$pair/records/$system/$(basename -- "$run")"
}

# qk_grid_cell NAME RUN RECORD ARGS...: a cell of a grid (scripts/reproduce.sh, ablation.sh)
# with its committed record directory RECORD: registered with qk_cell_add, unless RECORD holds a
# record.json and RUN no finished training (no live run): then the cell is never trained again
# and goes to QK_REC_* instead (qk_check_records refuses a record that does not belong).
qk_grid_cell() {
    local name="$1" run="$2" rec="$3" joined
    shift 3
    QK_CELL_RECORD_OF["$name"]="$rec"
    if [[ -f "$rec/record.json" && ! -f "$run/train.json" ]]; then
        QK_REC_NAME+=("$name")
        QK_REC_DIR+=("$rec")
        printf -v joined '%s\t' "$@"
        QK_REC_ARGS+=("${joined%$'\t'}")
        return 0
    fi
    qk_cell_add "$name" "$run" "$@"
}

# qk_check_records LABEL: each cell replaced by its committed record (qk_grid_cell) is checked
# against what it would train now (python -m qknorm_tools.committed check): the profile label
# LABEL, the current data (data/bin/PAIR/identity.json) and the fairseq-train command
# (scripts/train.sh --dry-run of the cell, modulo paths and seed); in a dry run before the data
# are prepared, not yet. Dies on a record that does not belong, naming its record.json and the
# difference; says which cells it skips.
qk_check_records() {
    local label="$1" i args=() cmd ident
    for i in "${!QK_REC_NAME[@]}"; do
        IFS=$'\t' read -r -a args <<<"${QK_REC_ARGS[$i]}"
        ident="$QK_DATA/bin/${args[0]}/identity.json"
        if [[ ! -f "$ident" ]]; then  # a dry run before the data exist: its command would show the authors' L
            qk_log "skip: cell ${QK_REC_NAME[$i]} has a committed record (${QK_REC_DIR[$i]}), checked once the data of ${args[0]} are prepared"
            continue
        fi
        _qk_cell_split "${args[@]}"
        cmd="$(bash "$QK_REPO_ROOT/scripts/train.sh" "${QK_CELL_OPTS[@]}" --dry-run \
            "${QK_CELL_EXTRA[@]+"${QK_CELL_EXTRA[@]}"}" 2>/dev/null | tail -n 1)" \
            || die "scripts/train.sh --dry-run failed for cell ${QK_REC_NAME[$i]}"
        "$QK_PY" -m qknorm_tools.committed check "${QK_REC_DIR[$i]}" --profile "$label" \
            --data-identity "$ident" --command "$cmd" \
            || die "cell ${QK_REC_NAME[$i]}: its committed record does not belong to this grid (above); remove ${QK_REC_DIR[$i]} to train the cell again"
        qk_log "skip: cell ${QK_REC_NAME[$i]} has a committed record, not trained again: ${QK_REC_DIR[$i]}"
    done
}

# qk_cell_add NAME RUN ARGS...: register a cell: NAME (how it is shown), its run directory RUN
# and ARGS for qk_cell (PAIR SYSTEM OPTION... [-- TRAIN_ARGS...]). Dies on an empty argument or
# one holding a tab or newline (the cells file cannot hold it).
qk_cell_add() {
    local a joined
    for a in "$@"; do
        [[ -n "$a" && "$a" != *$'\t'* && "$a" != *$'\n'* ]] \
            || die "cell ${1-}: argument '$a' is empty or holds a tab or newline (not allowed in a cells file)"
    done
    (($# >= 4)) || die "cell ${1-}: qk_cell_add NAME RUN PAIR SYSTEM [OPTION...]"
    QK_CELL_NAME+=("$1")
    QK_CELL_RUN+=("$2")
    shift 2
    printf -v joined '%s\t' "$@"
    QK_CELL_ARGS+=("${joined%$'\t'}")
}

# _qk_cell_argv OUT_ARRAY I: the qk_cell arguments of cell I, the launcher's per-cell options
# (QK_CELL_LAUNCH_OPTS) inserted after PAIR SYSTEM.
_qk_cell_argv() {
    local -n __argv="$1"
    local fields=()
    IFS=$'\t' read -r -a fields <<<"${QK_CELL_ARGS[$2]}"
    __argv=("${fields[@]:0:2}" "${QK_CELL_LAUNCH_OPTS[@]+"${QK_CELL_LAUNCH_OPTS[@]}"}" "${fields[@]:2}")
}

# qk_run_cell RUN LOG ARGS...: qk_cell ARGS; a failure is recorded in RUN/cell.failed (exit
# status, host, time, Slurm job, LOG), which the next attempt removes when it starts. A training
# that diverged (qk_cell exit 3 with RUN/diverged and RUN/train.json) is a finished result,
# not a failure: status 0, nothing recorded, never retried (scripts/train.sh skips it).
qk_run_cell() {
    local run="$1" log="$2" rc=0
    shift 2
    mkdir -p -- "$run"
    rm -f -- "$run/cell.failed"
    qk_cell "$@" || rc=$?
    if ((rc == 3)) && [[ -f "$run/diverged" && -f "$run/train.json" ]]; then
        qk_log "$run diverged: a finished result (nothing to decode)"
        rc=0
    elif ((rc != 0)); then
        printf 'exit %s on %s at %s%s; log %s\n' "$rc" "${HOSTNAME%%.*}" "$(date '+%Y-%m-%d %H:%M:%S')" \
            "${QK_SLURM_JOB:+ (Slurm job $QK_SLURM_JOB)}" "$log" >"$run/cell.failed"
    fi
    return "$rc"
}

# _qk_squeue_load: QK_SQUEUE[JOB] = "STATE|REASON" for the Slurm jobs the cells' slurm.job files
# name (squeue --states=all: finished jobs stay listed for Slurm's MinJobAge, 300 s by default);
# empty without squeue or recorded jobs.
_qk_squeue_load() {
    local run job log ids=() out err
    declare -gA QK_SQUEUE=()
    for run in "${QK_CELL_RUN[@]+"${QK_CELL_RUN[@]}"}"; do
        if [[ -f "$run/slurm.job" ]] && IFS=$'\t' read -r job log <"$run/slurm.job" && [[ -n "$job" ]]; then
            ids+=("$job")
        fi
    done
    ((${#ids[@]})) || return 0
    if ! command -v squeue >/dev/null 2>&1; then
        qk_warn "squeue not found: Slurm states unknown, cells shown from their markers only"
        return 0
    fi
    err="$(mktemp)"
    QK_CLEANUP+=("$err")
    out="$(squeue -h -r --states=all -o '%i|%T|%r' -j "$(IFS=,; echo "${ids[*]}")" 2>"$err")" || true
    if [[ -s "$err" ]] && ! grep -q 'Invalid job id' "$err"; then  # all purged: nothing to show
        qk_warn "squeue failed ($(head -n 1 "$err")): Slurm states unknown, cells shown from their markers only"
    fi
    while IFS='|' read -r job log; do
        [[ -z "$job" ]] || QK_SQUEUE[$job]="$log"
    done <<<"$out"
}

# _qk_cell_state I: the state of cell I from its markers, its lock and QK_SQUEUE
# (_qk_squeue_load): QK_STATE is done, running, pending (Slurm), failed or todo (not started, or
# stopped: it resumes); QK_STATE_JOB its Slurm job (or -), QK_STATE_LOG its log, QK_STATE_NOTE
# what else is known (Slurm's state and reason, the failure, the lock's holder).
_qk_cell_state() {
    local run="${QK_CELL_RUN[$1]}" job="" log="" sq holder pid host
    QK_STATE=todo QK_STATE_JOB=- QK_STATE_NOTE=""
    QK_STATE_LOG="$run/train.log"
    [[ ! -f "$run/cell.log" ]] || QK_STATE_LOG="$run/cell.log"
    if [[ -f "$run/slurm.job" ]] && IFS=$'\t' read -r job log <"$run/slurm.job" && [[ -n "$job" ]]; then
        QK_STATE_JOB="$job" QK_STATE_LOG="$log"
    fi
    if [[ -f "$run/train.json" && -f "$run/diverged" ]]; then
        QK_STATE=done QK_STATE_NOTE="diverged: $(head -n 1 -- "$run/diverged")"
        return 0
    fi
    local argv=()
    _qk_cell_argv argv "$1"
    _qk_cell_split "${argv[@]}"
    if [[ -f "$run/train.json" ]] && ((QK_CELL_TRAIN_ONLY)) \
        || [[ -f "$run/train.json" && -f "$run/test.score.json" \
            && "$run/test.score.json" -nt "$run/checkpoints/checkpoint_best.pt" ]]; then
        QK_STATE=done
        return 0
    fi
    sq="${QK_SQUEUE[$QK_STATE_JOB]-}"
    if [[ -n "$sq" ]]; then
        case "${sq%%|*}" in
            RUNNING | COMPLETING | CONFIGURING | STAGE_OUT | SIGNALING | RESIZING) QK_STATE=running ;;
            PENDING | REQUEUED | REQUEUE_HOLD | REQUEUE_FED | SUSPENDED | RESV_DEL_HOLD | SPECIAL_EXIT)
                QK_STATE=pending QK_STATE_NOTE="Slurm ${sq%%|*}, reason ${sq#*|}" ;;
            *) QK_STATE=failed QK_STATE_NOTE="Slurm ${sq%%|*}" ;;
        esac
    fi
    if [[ "$QK_STATE" == todo && -f "$run/.lock" ]]; then
        # a live holder on this host (the lock's line: "pid N, COMMAND, started DATE on HOST")
        holder="$(head -n 1 -- "$run/.lock" 2>/dev/null || true)"
        pid="${holder#pid }" pid="${pid%%,*}" host="${holder##* on }"
        if [[ "$pid" =~ ^[0-9]+$ && "$host" == "${HOSTNAME%%.*}" ]] && kill -0 "$pid" 2>/dev/null; then
            QK_STATE=running QK_STATE_NOTE="$holder"
        fi
    fi
    if [[ "$QK_STATE" == todo || "$QK_STATE" == failed ]] && [[ -f "$run/cell.failed" ]]; then
        QK_STATE=failed
        QK_STATE_NOTE="${QK_STATE_NOTE:+$QK_STATE_NOTE; }$(head -n 1 -- "$run/cell.failed")"
    fi
    if [[ "$QK_STATE" == todo && -f "$run/checkpoints/checkpoint_last.pt" ]]; then
        QK_STATE_NOTE="resumes from checkpoints/checkpoint_last.pt"
    fi
}

# qk_launch_status: one line per registered cell, "STATE NAME JOB LOG [NOTE]", and the counts.
qk_launch_status() {
    local i rec n_done=0 n_running=0 n_pending=0 n_failed=0 n_todo=0
    _qk_squeue_load
    printf '%-8s %-40s %-12s %s\n' state cell job log
    for i in "${!QK_CELL_NAME[@]}"; do
        _qk_cell_state "$i"
        rec="${QK_CELL_RECORD_OF[${QK_CELL_NAME[$i]}]-}"
        if [[ -n "$rec" && "$QK_STATE" == done ]]; then  # a grid cell (qk_grid_cell): its record
            if [[ -f "$rec/record.json" ]]; then
                QK_STATE_NOTE="${QK_STATE_NOTE:+$QK_STATE_NOTE; }live run, committed record $rec"
            else
                QK_STATE_NOTE="${QK_STATE_NOTE:+$QK_STATE_NOTE; }live run, no committed record yet (written when collected)"
            fi
        fi
        printf '%-8s %-40s %-12s %s%s\n' "$QK_STATE" "${QK_CELL_NAME[$i]}" "$QK_STATE_JOB" \
            "$QK_STATE_LOG" "${QK_STATE_NOTE:+  ($QK_STATE_NOTE)}"
        local -n __count="n_$QK_STATE"
        ((++__count))
        unset -n __count
    done
    for i in "${!QK_REC_NAME[@]}"; do
        printf '%-8s %-40s %-12s %s\n' record "${QK_REC_NAME[$i]}" - "${QK_REC_DIR[$i]}/record.json  (committed record; no live run: never trained again)"
    done
    if ((${#QK_REC_NAME[@]} == 0)); then
        printf '%s cells: %s done, %s running, %s pending, %s failed, %s todo\n' "${#QK_CELL_NAME[@]}" \
            "$n_done" "$n_running" "$n_pending" "$n_failed" "$n_todo"
    else
        printf '%s cells: %s done, %s running, %s pending, %s failed, %s todo, %s committed records\n' \
            "$((${#QK_CELL_NAME[@]} + ${#QK_REC_NAME[@]}))" "$n_done" "$n_running" "$n_pending" \
            "$n_failed" "$n_todo" "${#QK_REC_NAME[@]}"
    fi
}

# qk_launch [--dry-run] PROFILE [AGG_CMD...]: run the registered cells (under PROFILE, whose
# JOB_* variables size a Slurm job) with QK_LAUNCHER:
#   local  the job pool, QK_JOBS (default 1) cells at once, each with its own GPU group when the
#          machine has GPUs; QK_LAUNCH_FAILED lists the names of the failed cells. AGG_CMD is
#          not run (the caller aggregates).
#   slurm  submit the cells that are neither done nor queued/running as one array job
#          (scripts/slurm_cell.sh), then AGG_CMD as a job after it and after the cells queued
#          earlier (--dependency=afterany: it runs whatever the cells' outcome; none when no
#          cell is submitted but some are queued: their submission has its aggregation); print
#          the job ids and logs; return at once.
# --dry-run prints what would run (each cell's scripts/train.sh --dry-run; on Slurm also the
# cells file and both batch scripts) and writes nothing.
qk_launch() {
    local dry=0
    if [[ "${1-}" == --dry-run ]]; then
        dry=1
        shift
    fi
    local profile="$1"
    shift
    QK_LAUNCH_FAILED=()
    if ((${#QK_CELL_NAME[@]} == 0)); then
        qk_warn "no cell to launch"
        return 0
    fi
    QK_CELL_LAUNCH_OPTS=()
    _qk_job_resources "$profile"
    if [[ "$QK_LAUNCHER" == local ]]; then
        ((${QK_JOBS:-1} == 1)) || QK_CELL_LAUNCH_OPTS+=(--threads 1)
        ((QK_NPROC == 1)) || QK_CELL_LAUNCH_OPTS+=(--nproc "$QK_NPROC")
        if ((dry)); then
            _qk_print_cells
        else
            _qk_launch_local
        fi
    else
        if ((QK_NPROC > 1)); then
            QK_CELL_LAUNCH_OPTS+=(--nproc "$QK_NPROC")
            # GPU cells: one Slurm task per GPU, started by srun (fairseq's Slurm support);
            # CPU cells: one task, torchrun starts the processes
            ((QK_RES_GPUS == 0)) || QK_CELL_LAUNCH_OPTS+=(--launch srun)
        fi
        _qk_launch_slurm "$dry" "$@"
    fi
}

# _qk_job_resources PROFILE: QK_RES_{GPUS,CPUS,MEM,TIME} = the profile's JOB_* (GPUs per
# training process, 0 or 1; CPUs and memory per process; time limit of a cell).
_qk_job_resources() {
    local out
    out="$(
        load_pair_config "$(qk_known_pairs | cut -d' ' -f1)"
        load_profile_config "$1"
        printf '%s %s %s %s\n' "${JOB_GPUS-}" "${JOB_CPUS-}" "${JOB_MEM-}" "${JOB_TIME-}"
    )" || die "cannot load profile $1"
    read -r QK_RES_GPUS QK_RES_CPUS QK_RES_MEM QK_RES_TIME <<<"$out"
    [[ "$QK_RES_GPUS" =~ ^[01]$ ]] || die "configs/profiles/$1.toml: job.gpus must be 0 or 1 (GPUs per training process), got '$QK_RES_GPUS'"
    qk_is_posint "$QK_RES_CPUS" || die "configs/profiles/$1.toml: job.cpus must be a positive integer, got '$QK_RES_CPUS'"
    [[ "$QK_RES_MEM" =~ ^[1-9][0-9]*[KMGT]?$ ]] || die "configs/profiles/$1.toml: job.mem must be like 4G or 4000M, got '$QK_RES_MEM'"
    [[ -n "$QK_RES_TIME" ]] || die "configs/profiles/$1.toml does not set job.time (a Slurm time limit, e.g. 24:00:00)"
    if ((QK_NODES > 1 && QK_RES_GPUS == 0)); then
        qk_usage_error "--nodes $QK_NODES: profile $1 trains on CPUs (JOB_GPUS=0); multi-node cells are for GPU profiles"
    fi
}

# _qk_print_cells [I...]: the scripts/train.sh --dry-run output and scripts/evaluate.sh command
# of cells I... (default: every cell).
_qk_print_cells() {
    local i argv=()
    (($#)) || set -- "${!QK_CELL_NAME[@]}"
    for i in "$@"; do
        _qk_cell_argv argv "$i"
        _qk_cell_split "${argv[@]}"
        echo "# cell ${QK_CELL_NAME[$i]} -> ${QK_CELL_RUN[$i]}"
        bash "$QK_REPO_ROOT/scripts/train.sh" "${QK_CELL_OPTS[@]}" \
            "${QK_CELL_TRAIN_OPTS[@]+"${QK_CELL_TRAIN_OPTS[@]}"}" --dry-run \
            "${QK_CELL_EXTRA[@]+"${QK_CELL_EXTRA[@]}"}" \
            || die "scripts/train.sh --dry-run failed for cell ${QK_CELL_NAME[$i]}"
        ((QK_CELL_TRAIN_ONLY)) || qk_print_cmd bash "$QK_REPO_ROOT/scripts/evaluate.sh" "${QK_CELL_OPTS[@]}"
    done
}

# _qk_launch_local: the cells through the job pool (QK_JOBS at once; GPU groups from
# _qk_device_groups); with more than one at a time each cell's output also goes to RUN/cell.log.
_qk_launch_local() {
    local jobs="${QK_JOBS:-1}" i log argv=() groups=()
    _qk_device_groups groups "$jobs"
    qk_pool_init "$jobs" "${groups[@]+"${groups[@]}"}"
    for i in "${!QK_CELL_NAME[@]}"; do
        log=""
        if ((jobs > 1)); then
            log="${QK_CELL_RUN[$i]}/cell.log"
            mkdir -p -- "${QK_CELL_RUN[$i]}"
        fi
        _qk_cell_argv argv "$i"
        qk_log "cell ${QK_CELL_NAME[$i]}${log:+ (output also in $log)}"
        qk_pool_submit "${QK_CELL_NAME[$i]}" "$log" \
            qk_run_cell "${QK_CELL_RUN[$i]}" "${log:-${QK_CELL_RUN[$i]}/train.log}" "${argv[@]}"
    done
    qk_pool_wait
    QK_LAUNCH_FAILED=("${QK_POOL_FAILED[@]+"${QK_POOL_FAILED[@]}"}")
}

# _qk_mem_times MEM N: MEM (e.g. 16G) multiplied by N, same unit.
_qk_mem_times() {
    local num="${1%%[KMGT]}"
    printf '%s%s\n' "$((num * $2))" "${1#"$num"}"
}

# _qk_sbatch_common: the #SBATCH lines every job gets last: partition, account, --sbatch-args.
_qk_sbatch_common() {
    local extra=() a
    [[ -z "$QK_PARTITION" ]] || echo "#SBATCH --partition=$QK_PARTITION"
    [[ -z "$QK_ACCOUNT" ]] || echo "#SBATCH --account=$QK_ACCOUNT"
    read -r -a extra <<<"$QK_SBATCH_ARGS"
    for a in "${extra[@]+"${extra[@]}"}"; do
        [[ "$a" == -* ]] || die "--sbatch-args: '$a' is not an sbatch option (write options as --name=value)"
        echo "#SBATCH $a"
    done
}

# _qk_job_env: export lines for the exported QKNORM_* variables of this environment (a job sees
# the submission's settings even where sbatch does not pass the environment on).
_qk_job_env() {
    local v
    printf 'export QKNORM_WORK_DIR=%q\n' "$QK_WORK_DIR"
    for v in $(compgen -e | grep '^QKNORM_' || true); do
        case "$v" in QKNORM_WORK_DIR | QKNORM_SLURM_* | QKNORM_SBATCH_ARGS) continue ;; esac
        printf 'export %s=%q\n' "$v" "${!v}"
    done
}

# _qk_cells_script DIR N: the array job's batch script for N cells of DIR/cells.tsv.
_qk_cells_script() {
    local dir="$1" n="$2" tasks cpus mem
    # per node: GPU cells run one task (process) per GPU; CPU cells one task with every process
    if ((QK_RES_GPUS)); then
        tasks=$((QK_NPROC / QK_NODES)) cpus="$QK_RES_CPUS"
    else
        tasks=1 cpus=$((QK_RES_CPUS * QK_NPROC))
    fi
    mem="$(_qk_mem_times "$QK_RES_MEM" $((QK_NPROC / QK_NODES)))"
    cat <<SCRIPT
#!/usr/bin/env bash
# Slurm array job written by $QK_COMMAND_LINE
# Task i runs cell i + 1 of $dir/cells.tsv (NAME, RUN, then the arguments of
# scripts/lib.sh:qk_cell, tab-separated): scripts/train.sh, then scripts/evaluate.sh. A task
# that is requeued (scontrol requeue, preemption, node failure, or by itself $QK_SLURM_SIGNAL_SECONDS s before
# its time limit: USR1) resumes from RUN/checkpoints/checkpoint_last.pt.
#SBATCH --job-name=qk-$QK_SCRIPT_NAME
#SBATCH --array=0-$((n - 1))${QK_JOBS:+%$QK_JOBS}
#SBATCH --output=$dir/logs/%A_%a.out
#SBATCH --open-mode=append
#SBATCH --requeue
#SBATCH --signal=B:USR1@$QK_SLURM_SIGNAL_SECONDS
#SBATCH --time=$QK_RES_TIME
#SBATCH --nodes=$QK_NODES
#SBATCH --ntasks-per-node=$tasks
#SBATCH --cpus-per-task=$cpus
#SBATCH --mem=$mem
SCRIPT
    ((QK_RES_GPUS == 0)) || echo "#SBATCH --gres=gpu:$((QK_NPROC / QK_NODES))"
    _qk_sbatch_common
    _qk_job_env
    printf 'exec bash %q %q "$SLURM_ARRAY_TASK_ID"\n' "$QK_REPO_ROOT/scripts/slurm_cell.sh" "$dir/cells.tsv"
}

# _qk_aggregate_script DIR DEPENDENCY AGG_CMD...: the aggregation job's batch script; DEPENDENCY
# (job ids joined by ":", or empty) are the jobs it waits for.
_qk_aggregate_script() {
    local dir="$1" dep="$2"
    shift 2
    cat <<SCRIPT
#!/usr/bin/env bash
# Slurm job written by $QK_COMMAND_LINE
# The aggregation of the grid, after its cells whatever their outcome (afterany).
#SBATCH --job-name=qk-$QK_SCRIPT_NAME-aggregate
#SBATCH --output=$dir/logs/aggregate-%j.out
SCRIPT
    [[ -z "$dep" ]] || echo "#SBATCH --dependency=afterany:$dep"
    cat <<SCRIPT
#SBATCH --time=2:00:00
#SBATCH --ntasks=1
#SBATCH --cpus-per-task=1
#SBATCH --mem=4G
SCRIPT
    _qk_sbatch_common
    _qk_job_env
    printf 'exec %s\n' "$(qk_print_cmd "$@")"
}

# _qk_cells_tsv I...: the lines of a cells file for cells I... (NAME, RUN, qk_cell arguments).
_qk_cells_tsv() {
    local i line argv=()
    for i in "$@"; do
        _qk_cell_argv argv "$i"
        printf -v line '\t%s' "${QK_CELL_NAME[$i]}" "${QK_CELL_RUN[$i]}" "${argv[@]}"
        printf '%s\n' "${line#$'\t'}"
    done
}

# _qk_launch_slurm DRY_RUN [AGG_CMD...]: see qk_launch.
_qk_launch_slurm() {
    local dry="$1" i todo=() queued=() deps=() dir out array="" agg="" dep
    shift
    _qk_squeue_load
    for i in "${!QK_CELL_NAME[@]}"; do
        _qk_cell_state "$i"
        case "$QK_STATE" in
            done) qk_log "skip ${QK_CELL_NAME[$i]}: done" ;;
            running | pending)
                qk_log "skip ${QK_CELL_NAME[$i]}: $QK_STATE (job $QK_STATE_JOB${QK_STATE_NOTE:+; $QK_STATE_NOTE})"
                [[ "$QK_STATE_JOB" == - ]] || queued+=("$QK_STATE_JOB")
                ;;
            *) todo+=("$i") ;;
        esac
    done
    dir="$QK_WORK_DIR/slurm/$(date '+%Y%m%d-%H%M%S')-$QK_SCRIPT_NAME-$$"
    if ((dry)); then
        echo "# Slurm submission (dry run): ${#todo[@]} cells as one array job, then the aggregation job; files in $dir/"
        if ((${#todo[@]})); then
            echo "# $dir/cells.tsv (task i = line i + 1):"
            _qk_cells_tsv "${todo[@]}"
            echo "# $dir/cells.sbatch (submitted with: sbatch --parsable $dir/cells.sbatch):"
            _qk_cells_script "$dir" "${#todo[@]}"
            deps=(CELLS_JOB_ID)
        fi
        if (($#)) && ((${#todo[@]} || ${#queued[@]} == 0)); then
            deps+=("${queued[@]+"${queued[@]}"}")
            echo "# $dir/aggregate.sbatch (submitted next, CELLS_JOB_ID = the cells job's id):"
            _qk_aggregate_script "$dir" "$(IFS=:; echo "${deps[*]-}")" "$@"
        fi
        echo "# each cell's commands (scripts/train.sh --dry-run on this machine)"
        for i in "${todo[@]+"${todo[@]}"}"; do
            _qk_print_cells "$i"
        done
        return 0
    fi
    command -v sbatch >/dev/null 2>&1 \
        || die "sbatch not found: --launcher slurm needs the Slurm client commands (sbatch, squeue) here"
    if ((${#todo[@]})); then
        mkdir -p -- "$dir/logs"
        _qk_cells_tsv "${todo[@]}" >"$dir/cells.tsv"
        _qk_cells_script "$dir" "${#todo[@]}" >"$dir/cells.sbatch"
        out="$(sbatch --parsable "$dir/cells.sbatch")" || die "sbatch $dir/cells.sbatch failed (see above)"
        array="${out%%;*}"
        deps=("$array")
        for i in "${!todo[@]}"; do
            mkdir -p -- "${QK_CELL_RUN[${todo[$i]}]}"
            printf '%s\t%s\n' "${array}_$i" "$dir/logs/${array}_$i.out" \
                >"${QK_CELL_RUN[${todo[$i]}]}/slurm.job"
        done
        echo "cells: job $array (${#todo[@]} cells: $dir/cells.tsv), logs $dir/logs/${array}_TASK.out (TASK = line of cells.tsv - 1)"
    else
        qk_log "no cell to submit: every cell is done, running or queued"
    fi
    if (($#)) && ((${#todo[@]} == 0 && ${#queued[@]})); then
        # two aggregations must not write the same results at once
        qk_log "no aggregation job: the submission of the queued cells has its own"
    elif (($#)); then
        deps+=("${queued[@]+"${queued[@]}"}")
        dep="$(IFS=:; echo "${deps[*]-}")"
        mkdir -p -- "$dir/logs"
        _qk_aggregate_script "$dir" "$dep" "$@" >"$dir/aggregate.sbatch"
        out="$(sbatch --parsable "$dir/aggregate.sbatch")" || die "sbatch $dir/aggregate.sbatch failed (see above)"
        agg="${out%%;*}"
        echo "aggregation: job $agg${dep:+ after $dep}, log $dir/logs/aggregate-$agg.out"
    fi
    [[ ! -d "$dir" ]] || printf 'cells %s\naggregation %s\n' "${array:--}" "${agg:--}" >"$dir/jobs"
    local status_cmd="$QK_COMMAND_LINE --status"
    [[ " $QK_COMMAND_LINE " != *" -- "* ]] || status_cmd="${QK_COMMAND_LINE/ -- / --status -- }"
    qk_log "status: $status_cmd; cancel: scancel${array:+ $array}${agg:+ $agg}"
}
