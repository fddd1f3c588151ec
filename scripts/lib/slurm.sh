#!/usr/bin/env bash
# scripts/lib/slurm.sh: the Slurm part of the launcher (scripts/lib/launch.sh: qk_launch,
# qk_launch_status): the cells' Slurm job states, the batch scripts, the cells file and the
# submission. Sourced by scripts/lib.sh, never on its own.
#
# Offers
#   _qk_squeue_load                QK_SQUEUE[JOB] = "STATE|REASON" of the cells' Slurm jobs
#   _qk_mem_times MEM N            MEM (e.g. 16G) times N
#   _qk_sbatch_common              the #SBATCH lines every job gets last
#   _qk_job_env                    export lines of the QKNORM_* variables, for a job
#   _qk_cells_script DIR N         the array job's batch script (scripts/slurm_cell.sh per task)
#   _qk_aggregate_script DIR DEP AGG_CMD...  the aggregation job's batch script
#   _qk_cells_tsv I...             the lines of a cells file
#   _qk_launch_slurm DRY_RUN [AGG_CMD...]  submit the unfinished cells, then the aggregation (qk_launch)

# ---------------------------------------------------------------------------------------------
# Slurm: job states, batch scripts, the cells file, submission

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
