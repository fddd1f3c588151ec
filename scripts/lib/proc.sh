#!/usr/bin/env bash
# scripts/lib/proc.sh: exit hooks, children in their own process groups, the job pool. Sourced by
# scripts/lib.sh, never on its own; sourcing it sets the traps (EXIT: qk_cleanup; INT: exit 130;
# TERM: exit 143).
#
# Every child a script starts through qk_run / qk_pool_submit runs in its own process group and
# is stopped (the whole group: TERM, then KILL after 10 s) when the script exits for any reason,
# Ctrl-C and TERM included: an interrupted script never leaves trainings behind.
#
# Offers
#   QK_CLEANUP, QK_CHILDREN, QK_EXIT_HOOKS   paths removed, children stopped, hooks run on exit
#   QK_EMPTY_DIRS                  folders made for outputs, removed on exit where left empty
#   qk_on_exit FUNCTION            run FUNCTION when the script exits (also on Ctrl-C / TERM)
#   _qk_stop_children              TERM every child's process group, KILL what is left after 10 s
#   qk_cleanup                     the EXIT trap: children stopped, hooks run, QK_CLEANUP removed,
#                                  QK_EMPTY_DIRS removed where empty
#   _qk_prefix PREFIX              copy stdin to stdout, each line prefixed
#   _qk_spawn MODE ARG CMD...      start CMD in its own process group (QK_SPAWNED = its pid)
#   _qk_forget_child PID           PID is no longer a running child
#   _qk_wait_child PID             wait for PID (again after a trapped signal), its exit status
#   qk_run CMD...                  run a child (own process group) and wait for it
#   qk_pool_init N [DEVICES...]    a job pool running up to N commands at once (GPU groups)
#   _qk_with_devices DEVICES CMD   CMD with CUDA_VISIBLE_DEVICES=DEVICES
#   _qk_pool_job CMD...            a pool job: CMD, its exit status recorded
#   qk_pool_submit NAME LOG CMD... start CMD when a slot is free (output prefixed "[NAME] ")
#   _qk_pool_reap                  wait for one job to end (QK_POOL_FAILED: the failed names)
#   qk_pool_wait                   wait for every job of the pool
#   qk_spine_start                 the script's one Python process (a coprocess) for qk_py (config.sh)

# ---------------------------------------------------------------------------------------------
# exit: children stopped, exit hooks run, temporary files removed (every exit path)

QK_CLEANUP=()     # temporary paths, removed on exit
QK_CHILDREN=()    # process group ids of the running children (qk_run, qk_pool_submit)
QK_EXIT_HOOKS=()  # functions run on exit, after the children are stopped
QK_EMPTY_DIRS=()  # folders made for outputs: removed on exit, with their subfolders, if empty

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
    for p in "${QK_EMPTY_DIRS[@]+"${QK_EMPTY_DIRS[@]}"}"; do
        [[ ! -d "$p" ]] || find "$p" -depth -type d -empty -delete 2>/dev/null || true
    done
}
trap qk_cleanup EXIT
# an interruption says so (then the EXIT trap stops what the script started); a rerun of the
# same command goes on from what is finished
trap 'qk_log "interrupted (Ctrl-C): stopping what this script started; rerun the same command to go on"; exit 130' INT
trap 'qk_log "stopped (TERM): stopping what this script started; rerun the same command to go on"; exit 143' TERM

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
# the script's one Python process (train.sh, evaluate.sh: issue 36, Python starts at most twice)

# qk_spine_start: starts python -m qknorm_tools.serve as the script's coprocess (QK_SPINE): from
# then on qk_py asks it instead of starting Python each time. Ctrl-C is the script's to handle
# (the process lets SIGINT pass); the script's exit hook stops it and waits for it (so that
# nothing is left running once the script has ended, an interruption included).
qk_spine_start() {
    [[ -n "$QK_PY" ]] || die "no python interpreter found (set QKNORM_PYTHON)"
    coproc QK_SPINE { exec "$QK_PY" -m qknorm_tools.serve; }
    QK_SPINE_STARTED="$QK_SPINE_PID"
    qk_on_exit _qk_spine_stop
}

# _qk_spine_stop: the exit hook of qk_spine_start: the process stopped (TERM: what it may be
# doing is the interrupted script's) and waited for
_qk_spine_stop() {
    kill -TERM "$QK_SPINE_STARTED" 2>/dev/null || true
    wait "$QK_SPINE_STARTED" 2>/dev/null || true
}
