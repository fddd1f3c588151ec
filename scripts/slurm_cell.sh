#!/usr/bin/env bash
# scripts/slurm_cell.sh: the body of one task of a grid's Slurm array job (the batch script that
# scripts/lib.sh:qk_launch writes runs it): cell INDEX of CELLS, a cells file (one cell per line:
# NAME, RUN, then the arguments of lib.sh:qk_cell, tab-separated; INDEX 0 = the first line).
#   - waits (up to 2 minutes) until no process holds RUN/.lock: after a requeue the previous
#     start may still be stopping;
#   - runs the cell (scripts/train.sh, then scripts/evaluate.sh; both skip finished work, and
#     train.sh resumes from RUN/checkpoints/checkpoint_last.pt), its threads = the job's CPUs;
#   - on USR1 (Slurm's warning before the time limit: sbatch --signal=B:USR1@SECONDS) it requeues
#     the job (scontrol requeue) when a checkpoint was saved since it started, so the next start
#     resumes from it; without a new checkpoint it lets the time limit end the job (a requeue
#     would start over from the same point forever);
#   - a failure is recorded in RUN/cell.failed (exit status, host, time, job, log).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"

usage() {
    cat <<EOF_USAGE
usage: scripts/slurm_cell.sh CELLS INDEX
  CELLS   a cells file written by scripts/lib.sh:qk_launch (SUBMIT_DIR/cells.tsv)
  INDEX   0-based line of CELLS (the array task id, \$SLURM_ARRAY_TASK_ID)
Runs inside a Slurm job; started by the batch script SUBMIT_DIR/cells.sbatch.
EOF_USAGE
}

qk_parse_args "@CELLS_ARG INDEX_ARG" -- "$@"
[[ -f "$CELLS_ARG" ]] || die "cells file $CELLS_ARG not found"
qk_check_options "uint:INDEX=$INDEX_ARG"
LINE="$(sed -n "$((INDEX_ARG + 1))p" -- "$CELLS_ARG")"
[[ -n "$LINE" ]] || die "$CELLS_ARG has no line $((INDEX_ARG + 1)) (task $INDEX_ARG)"
IFS=$'\t' read -r -a FIELDS <<<"$LINE"
((${#FIELDS[@]} >= 4)) || die "$CELLS_ARG line $((INDEX_ARG + 1)): expected NAME, RUN, PAIR, SYSTEM [OPTION...] separated by tabs, got '$LINE'"
NAME="${FIELDS[0]}" RUN="${FIELDS[1]}"
ARGS=("${FIELDS[@]:2}")

QK_SLURM_JOB="${SLURM_JOB_ID:-}"
[[ -z "${SLURM_ARRAY_JOB_ID:-}" ]] || QK_SLURM_JOB="${SLURM_ARRAY_JOB_ID}_${SLURM_ARRAY_TASK_ID}"
LOG="$(dirname -- "$CELLS_ARG")/logs/$QK_SLURM_JOB.out"
# one training thread per CPU of the job (scripts/train.sh --nproc N divides them)
[[ -n "${QKNORM_THREADS:-}" || -z "${SLURM_CPUS_PER_TASK:-}" ]] || export QKNORM_THREADS="$SLURM_CPUS_PER_TASK"
qk_log "cell $NAME -> $RUN (job ${QK_SLURM_JOB:-none}, start $((${SLURM_RESTART_COUNT:-0} + 1)), host ${HOSTNAME%%.*}, $(date '+%Y-%m-%d %H:%M:%S'))"
mkdir -p -- "$RUN"
if ! flock -w 120 "$RUN/.lock" true; then
    die "$RUN is still held after 2 minutes ($(head -n 1 "$RUN/.lock" 2>/dev/null || true)): not starting a second process on it"
fi

CKPT="$RUN/checkpoints/checkpoint_last.pt"
ckpt_time() { stat -c %Y -- "$CKPT" 2>/dev/null || echo 0; }
CKPT_AT_START="$(ckpt_time)"
on_time_limit() {
    if (($(ckpt_time) > CKPT_AT_START)); then
        qk_log "time limit in ${QK_SLURM_SIGNAL_SECONDS}s: requeueing job $QK_SLURM_JOB; the next start resumes from $CKPT"
        scontrol requeue "$SLURM_JOB_ID" || qk_warn "scontrol requeue $SLURM_JOB_ID failed: the cell stops at the time limit; resubmit it to resume"
    else
        qk_warn "time limit in ${QK_SLURM_SIGNAL_SECONDS}s and no checkpoint saved since this start: not requeued (it would start over from the same point); raise the time limit (--sbatch-args=\"--time=...\") or save more often"
    fi
}
trap on_time_limit USR1

RC=0
_qk_spawn plain "" qk_run_cell "$RUN" "$LOG" "${ARGS[@]}"
PID="$QK_SPAWNED"
_qk_wait_child "$PID" || RC=$?
_qk_forget_child "$PID"
((RC == 0)) || die "cell $NAME failed (exit $RC); see $LOG and $RUN/train.log"
qk_log "cell $NAME done"
