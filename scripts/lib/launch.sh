#!/usr/bin/env bash
# scripts/lib/launch.sh: a grid's cells and their launcher, on this machine (the job pool of
# proc.sh) or on a Slurm cluster (sbatch; the Slurm part is scripts/lib/slurm.sh). Sourced by
# scripts/lib.sh, never on its own.
#
# Offers
#   _qk_cell_split ARGS...         a cell's arguments -> QK_CELL_OPTS, _TRAIN_OPTS, _EXTRA, _TRAIN_ONLY
#   qk_cell PAIR SYSTEM OPTION... [-- TRAIN_ARGS...]  scripts/train.sh, then scripts/evaluate.sh
#   QK_LAUNCH_SPECS                the launcher options, for a script's qk_parse_args
#   qk_launch_usage                the launcher options' lines of a script's usage
#   qk_launch_check                usage errors for bad launcher options
#   qk_gpu_list                    the GPU ids this machine offers, one per line
#   _qk_device_groups OUT JOBS     a group of QK_NPROC GPU ids per pool slot
#   qk_cpu_cores                   the CPU cores this process may run on
#   _qk_warn_cpu_jobs JOBS         a warning when the CPU cells at once x QK_NPROC exceed the cores
#   qk_prepare_data DRY_RUN PAIR [--data-dir DIR]  prepare_data.sh, bpe.sh, binarize.sh for PAIR
#   qk_record_dir LABEL RUN        the committed record of the run directory RUN
#   qk_grid_cell NAME RUN RECORD ARGS...  a grid's cell, or its committed record (QK_REC_*)
#   qk_check_records               each committed record belongs to this grid, or die
#   qk_cell_add NAME RUN ARGS...   register a cell
#   _qk_cell_argv OUT I            the qk_cell arguments of cell I, with the launcher's options
#   qk_run_cell RUN LOG ARGS...    qk_cell ARGS; a failure recorded in RUN/cell.failed
#   _qk_cell_state I               the state of cell I (QK_STATE, _JOB, _LOG, _NOTE)
#   qk_launch_status               one line per cell (state, job, log), and the counts; exit 1 on an invalid record
#   qk_launch [--dry-run] PROFILE [AGG_CMD...]  run the registered cells (QK_LAUNCHER)
#   _qk_job_resources PROFILE      QK_RES_{GPUS,CPUS,MEM,TIME} = the profile's job.*
#   _qk_print_cells [I...]         the commands of cells I... (dry run)
#   _qk_launch_local               the cells through the job pool

# ---------------------------------------------------------------------------------------------
# cells: one pair x system x seed of a grid (scripts/train.sh, then scripts/evaluate.sh)

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
# (RUN/diverged, scripts/train.sh), nothing decoded. A profile with decode.also (cpu-fixed-d128)
# also has the test set decoded with each of those checkpoints (evaluate.sh --checkpoint C), and
# one with decode.dev_bleu (the cpu-converge ones) the dev set (evaluate.sh --split dev: the
# record's dev BLEU).
qk_cell() {
    _qk_cell_split "$@"
    bash "$QK_REPO_ROOT/scripts/train.sh" "${QK_CELL_OPTS[@]}" \
        "${QK_CELL_TRAIN_OPTS[@]+"${QK_CELL_TRAIN_OPTS[@]}"}" "${QK_CELL_EXTRA[@]+"${QK_CELL_EXTRA[@]}"}" \
        || return
    ((QK_CELL_TRAIN_ONLY == 0)) || return 0
    bash "$QK_REPO_ROOT/scripts/evaluate.sh" "${QK_CELL_OPTS[@]}" >/dev/null || return
    _qk_cell_decode_settings
    local also
    for also in ${_QK_ALSO_OF[$_QK_CELL_PROFILE]}; do
        bash "$QK_REPO_ROOT/scripts/evaluate.sh" "${QK_CELL_OPTS[@]}" --checkpoint "$also" >/dev/null || return
    done
    if ((_QK_DEV_BLEU_OF[$_QK_CELL_PROFILE])); then
        bash "$QK_REPO_ROOT/scripts/evaluate.sh" "${QK_CELL_OPTS[@]}" --split dev >/dev/null
    fi
}

# _qk_cell_decode_settings: the decoding settings of the profile of the cell just split
# (_qk_cell_split: its --profile, default cpu-proxy as train.sh's), in _QK_CELL_PROFILE:
# _QK_DEV_BLEU_OF[profile] is 1 when it has decode.dev_bleu (QKNORM_DEV_BLEU overrides): the
# cell then also decodes the dev set (scripts/evaluate.sh --split dev; its record keeps the dev
# BLEU); _QK_ALSO_OF[profile] lists its decode.also checkpoints, each also decoded on the test
# set (SPLIT.C.score.json, kept in the record). The answers are kept per profile: a grid's
# cells share a few profiles, and each load is a Python start.
declare -gA _QK_DEV_BLEU_OF=() _QK_ALSO_OF=()
_QK_CELL_PROFILE=""
_qk_cell_decode_settings() {
    local i profile=cpu-proxy
    for i in "${!QK_CELL_OPTS[@]}"; do
        [[ "${QK_CELL_OPTS[$i]}" != --profile ]] || profile="${QK_CELL_OPTS[$((i + 1))]-}"
    done
    _QK_CELL_PROFILE="$profile"
    [[ -z "${_QK_DEV_BLEU_OF[$profile]+x}" ]] || return 0
    _QK_DEV_BLEU_OF[$profile]=0 _QK_ALSO_OF[$profile]=""
    if load_profile_config "$profile" >/dev/null 2>&1; then
        ((${DEV_BLEU:-0})) && _QK_DEV_BLEU_OF[$profile]=1
        _QK_ALSO_OF[$profile]="${DECODE_ALSO[*]-}"
    fi
    return 0
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

QK_LAUNCHER=local QK_JOBS="" QK_GPUS_ARG="" QK_NPROC=1 QK_NODES=1 QK_STATUS=0 QK_CELLS_PER_GPU=1
QK_GPU_IDS=()  # the --gpus list (qk_launch_check)
QK_PARTITION="${QKNORM_SLURM_PARTITION:-}" QK_ACCOUNT="${QKNORM_SLURM_ACCOUNT:-}"
QK_SBATCH_ARGS="${QKNORM_SBATCH_ARGS:-}"
QK_LAUNCH_SPECS=("--launcher QK_LAUNCHER" "--jobs QK_JOBS" "--gpus QK_GPUS_ARG" "--nproc QK_NPROC"
    "--nodes QK_NODES" "--partition QK_PARTITION" "--account QK_ACCOUNT"
    "--sbatch-args QK_SBATCH_ARGS" "--cells-per-gpu QK_CELLS_PER_GPU" "--status QK_STATUS=1")
# seconds before the time limit at which Slurm warns a cell (USR1): it requeues itself
QK_SLURM_SIGNAL_SECONDS=300

# qk_launch_usage: the launcher options' lines of a script's usage.
qk_launch_usage() {
    cat <<'USAGE'
  --launcher L   local (default: this machine, the job pool) or slurm (sbatch: one array job over
                 the unfinished cells, then the aggregation as a job after them)
  --jobs N       cells at once (local: default 1, N > 1 gives each cell --threads 1, a warning
                 when the CPU cells running at once (N, or the cells to run if fewer) x --nproc
                 exceed the cores; slurm: the array's limit of running tasks, default none)
  --gpus LIST    local: GPU ids shared out, one per running cell (--nproc N: N per cell); default
                 $CUDA_VISIBLE_DEVICES, else nvidia-smi's list, else none (CPU)
  --cells-per-gpu K  local: K running cells share each GPU (small models leave a GPU mostly
                 idle: --jobs up to K x the GPUs; default 1)
  --nproc N      training processes per cell (scripts/train.sh --nproc: torchrun; Slurm GPU
                 cells: srun), same tokens per update as the profile
  --nodes M      slurm: nodes per cell (--nproc N over M nodes; GPU profiles)
  --partition P  slurm: sbatch --partition ($QKNORM_SLURM_PARTITION)
  --account A    slurm: sbatch --account ($QKNORM_SLURM_ACCOUNT)
  --sbatch-args="OPTS"  slurm: more sbatch options for every job, whitespace-separated, after the
                 profile's JOB_* resources (they win): e.g. --sbatch-args="--qos=long --time=48:00:00"
                 ($QKNORM_SBATCH_ARGS)
  --status       list each cell as done, running, pending, failed or todo, with its Slurm job
                 and log (from the run's markers, its lock and squeue), or as record (a committed
                 record, no live run: never trained again) or invalid (a committed record that
                 would be refused, with the reason); exit status 1 when any record is invalid
USAGE
}

# qk_launch_check [SPEC...]: usage errors for bad launcher options (call after qk_parse_args);
# the script's own integers and lists (qk_check_options SPECs) checked in the same python start,
# after the launcher's. QK_GPU_IDS: the --gpus list.
qk_launch_check() {
    case "$QK_LAUNCHER" in
        local | slurm) ;;
        *) qk_usage_error "--launcher must be local or slurm, got '$QK_LAUNCHER'" ;;
    esac
    local specs=()
    [[ -z "$QK_JOBS" ]] || specs+=("posint:--jobs=$QK_JOBS")
    specs+=("posint:--nproc=$QK_NPROC" "posint:--nodes=$QK_NODES"
        "posint:--cells-per-gpu=$QK_CELLS_PER_GPU")
    QK_GPU_IDS=()
    [[ -z "$QK_GPUS_ARG" ]] || specs+=("list:gpus:QK_GPU_IDS=$QK_GPUS_ARG")
    qk_check_options "${specs[@]}" "$@"
    [[ "$QK_CELLS_PER_GPU" == 1 || "$QK_LAUNCHER" == local ]] \
        || qk_usage_error "--cells-per-gpu is for the local launcher (Slurm hands out the GPUs)"
    if ((QK_NODES > 1)); then
        [[ "$QK_LAUNCHER" == slurm ]] || qk_usage_error "--nodes needs --launcher slurm"
        ((QK_NPROC % QK_NODES == 0)) \
            || qk_usage_error "--nproc $QK_NPROC must be a multiple of --nodes $QK_NODES (the same number of processes on every node)"
    fi
    [[ -z "$QK_GPUS_ARG" || "$QK_LAUNCHER" == local ]] \
        || qk_usage_error "--gpus is for the local launcher (Slurm hands out the GPUs)"
    # sbatch's options given with the local launcher would be dropped without a word (their
    # environment defaults, QKNORM_SLURM_*, stay ambient and are not refused)
    local opt env value
    if [[ "$QK_LAUNCHER" == local ]]; then
        for opt in partition:QKNORM_SLURM_PARTITION:QK_PARTITION account:QKNORM_SLURM_ACCOUNT:QK_ACCOUNT \
            sbatch-args:QKNORM_SBATCH_ARGS:QK_SBATCH_ARGS; do
            IFS=: read -r opt env value <<<"$opt"
            [[ "${!value}" == "${!env:-}" ]] || qk_usage_error "--$opt needs --launcher slurm"
        done
    fi
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
# QK_NPROC GPU ids (from --gpus, else qk_gpu_list; each id offered QK_CELLS_PER_GPU times, to
# that many cells at once); none on a machine without GPUs. Dies when there are fewer GPU slots
# than JOBS x QK_NPROC.
_qk_device_groups() {
    local -n __groups="$1"
    local jobs="$2" ids=() i
    if [[ -n "$QK_GPUS_ARG" ]]; then
        ((${#QK_GPU_IDS[@]})) || die "--gpus $QK_GPUS_ARG was not checked (qk_launch_check)"
        ids=("${QK_GPU_IDS[@]}")
    else
        mapfile -t ids < <(qk_gpu_list)
    fi
    __groups=()
    ((${#ids[@]})) || return 0
    if ((QK_CELLS_PER_GPU > 1)); then
        local shared=() k
        for ((k = 0; k < QK_CELLS_PER_GPU; k++)); do shared+=("${ids[@]}"); done
        ids=("${shared[@]}")
    fi
    ((jobs * QK_NPROC <= ${#ids[@]})) \
        || die "--jobs $jobs x --nproc $QK_NPROC needs $((jobs * QK_NPROC)) GPUs, found ${#ids[@]} (${ids[*]}; --gpus LIST or CUDA_VISIBLE_DEVICES)"
    for ((i = 0; i < jobs; i++)); do
        __groups+=("$(IFS=,; echo "${ids[*]:i*QK_NPROC:QK_NPROC}")")
    done
}

# qk_cpu_cores: the CPU cores this process may run on (its affinity mask, as nproc counts them;
# OMP_NUM_THREADS, which nproc also reads, is a thread setting, not the machine's).
qk_cpu_cores() {
    env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc
}

# _qk_warn_cpu_jobs JOBS: CPU cells (no GPU here, no --gpus) of the local launcher: a warning
# when the cells that run at once (JOBS, or fewer: the registered cells not done,
# _qk_cell_state) x QK_NPROC processes each exceed the CPU cores (the processes then share the
# cores and every cell runs slower).
_qk_warn_cpu_jobs() {
    local jobs="$1" cores fix i todo=0 at_once
    [[ -z "$QK_GPUS_ARG" && -z "$(qk_gpu_list)" ]] || return 0
    cores="$(qk_cpu_cores)"
    ((jobs * QK_NPROC > cores)) || return 0
    declare -p QK_SQUEUE >/dev/null 2>&1 || declare -gA QK_SQUEUE=()  # local: no Slurm states
    for i in "${!QK_CELL_NAME[@]}"; do
        _qk_cell_state "$i"
        [[ "$QK_STATE" == done ]] || ((++todo))
    done
    at_once="--jobs $jobs"
    if ((todo < jobs)); then
        jobs="$todo"
        at_once+=" ($todo cells to run)"
    fi
    ((jobs * QK_NPROC > cores)) || return 0
    fix="--jobs $((cores / QK_NPROC))"
    ((cores >= QK_NPROC)) || fix="--jobs 1 --nproc $cores"
    qk_warn "$at_once x --nproc $QK_NPROC = $((jobs * QK_NPROC)) training processes at once on $cores CPU cores: they share the cores and every cell runs slower; $fix keeps a core for each process"
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
QK_REC_NAME=() QK_REC_DIR=() QK_REC_ARGS=() QK_REPO_RECORDS=()
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

# qk_grid_cell NAME RUN RECORD ARGS...: a cell of a grid (scripts/reproduce.sh, ablation.sh, lr_sweep.sh)
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
    # a work dir elsewhere (QKNORM_WORK_DIR) does not hold the repository's committed records
    local in_repo="$QK_REPO_ROOT/results/${rec#"$QK_WORK_DIR/results/"}"
    if [[ "$rec" == "$QK_WORK_DIR/results/"* && ! "$QK_WORK_DIR" -ef "$QK_REPO_ROOT" \
        && -f "$in_repo/record.json" && ! -f "$run/train.json" ]]; then
        QK_REPO_RECORDS+=("$in_repo")
    fi
    qk_cell_add "$name" "$run" "$@"
}

# qk_note_repo_records: a warning (once, in this script and the scripts it starts: a grid's
# collection is reproduce.sh --aggregate-only) when cells to train have committed records in the
# repository that the work dir (QKNORM_WORK_DIR elsewhere) does not hold: they would train again
# (hours each), and a report would leave them out; one copy of their folders counts them.
qk_note_repo_records() {
    ((${#QK_REPO_RECORDS[@]})) && [[ -z "${_QK_REPO_NOTED-}" ]] || return 0
    export _QK_REPO_NOTED=1
    local rec folders=() seen=""
    for rec in "${QK_REPO_RECORDS[@]}"; do
        rec="${rec#"$QK_REPO_ROOT/"}"
        rec="${rec%/records/*}/records"
        [[ "$seen" == *"|$rec|"* ]] || folders+=("$rec")
        seen+="|$rec|"
    done
    qk_warn "${#QK_REPO_RECORDS[@]} cells of this grid have committed records in the repository ($QK_REPO_ROOT: ${folders[*]}) that QKNORM_WORK_DIR=$QK_WORK_DIR does not hold: they count as todo and would train again; to count them: (cd '$QK_REPO_ROOT' && cp -r --parents ${folders[*]} '$QK_WORK_DIR/') (or unset QKNORM_WORK_DIR)"
}

# qk_check_records: each cell replaced by its committed record (qk_grid_cell) is checked
# against what it would train now (python -m qknorm_tools.committed check): the profile label
# of its folder (results/LABEL/PAIR/records/SYSTEM/RUN), the current data (data/bin/PAIR/identity.json) and the fairseq-train command
# (scripts/train.sh --dry-run of the cell, modulo paths and seed); in a dry run before the data
# are prepared, not yet. Dies on a record that does not belong, naming its record.json and the
# difference; says which cells it skips.
qk_check_records() {
    local label i args=() cmd ident
    qk_note_repo_records
    for i in "${!QK_REC_NAME[@]}"; do
        IFS=$'\t' read -r -a args <<<"${QK_REC_ARGS[$i]}"
        label="$(_qk_record_label "${QK_REC_DIR[$i]}")"
        ident="$QK_DATA/bin/${args[0]}/identity.json"
        if [[ ! -f "$ident" ]]; then  # a dry run before the data exist: its command would show the authors' L
            qk_log "skip: cell ${QK_REC_NAME[$i]} has a committed record (${QK_REC_DIR[$i]}), checked once the data of ${args[0]} are prepared"
            continue
        fi
        _qk_cell_split "${args[@]}"
        cmd="$(bash "$QK_REPO_ROOT/scripts/train.sh" "${QK_CELL_OPTS[@]}" \
            "${QK_CELL_TRAIN_OPTS[@]+"${QK_CELL_TRAIN_OPTS[@]}"}" --dry-run \
            "${QK_CELL_EXTRA[@]+"${QK_CELL_EXTRA[@]}"}" 2>/dev/null | tail -n 1)" \
            || die "scripts/train.sh --dry-run failed for cell ${QK_REC_NAME[$i]}"
        "$QK_PY" -m qknorm_tools.committed check "${QK_REC_DIR[$i]}" --profile "$label" \
            --data-identity "$ident" --command "$cmd" \
            || die "cell ${QK_REC_NAME[$i]}: its committed record does not belong to this grid (above); remove ${QK_REC_DIR[$i]} to train the cell again"
        qk_log "skip: cell ${QK_REC_NAME[$i]} has a committed record, not trained again: ${QK_REC_DIR[$i]}"
    done
}

# _qk_record_label RECORD: the profile label a committed record is filed under
# (results/LABEL/PAIR/records/SYSTEM/RUN)
_qk_record_label() {
    basename -- "$(dirname -- "$(dirname -- "$(dirname -- "$(dirname -- "$1")")")")"
}

# _qk_record_problem I: the problem of committed record I (QK_REC_*), empty when it is sound:
# what collect checks when it reads it (python -m qknorm_tools.committed check: record.json
# readable, its files giving the record it stores, filed under its own pair, system and seed,
# of the profile label it is filed under) and, once the data are prepared, their identity.
_qk_record_problem() {
    local rec="${QK_REC_DIR[$1]}" args=() data=()
    IFS=$'\t' read -r -a args <<<"${QK_REC_ARGS[$1]}"
    [[ ! -f "$QK_DATA/bin/${args[0]}/identity.json" ]] \
        || data=(--data-identity "$QK_DATA/bin/${args[0]}/identity.json")
    "$QK_PY" -m qknorm_tools.committed check "$rec" --profile "$(_qk_record_label "$rec")" \
        "${data[@]+"${data[@]}"}" 2>&1 >/dev/null | sed 's/^error: //' || true
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

# qk_launch_status: one line per registered cell, "STATE NAME JOB LOG [NOTE]", one per committed
# record (record or invalid), and the counts; then dies (exit 1) when any record is invalid.
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
    qk_note_repo_records
    local problem n_invalid=0
    for i in "${!QK_REC_NAME[@]}"; do
        problem="$(_qk_record_problem "$i")"
        if [[ -n "$problem" ]]; then
            ((++n_invalid))
            printf '%-8s %-40s %-12s %s\n' invalid "${QK_REC_NAME[$i]}" - "${QK_REC_DIR[$i]}/record.json  (refused: ${problem//$'\n'/; })"
        else
            printf '%-8s %-40s %-12s %s\n' record "${QK_REC_NAME[$i]}" - "${QK_REC_DIR[$i]}/record.json  (committed record; no live run: never trained again)"
        fi
    done
    if ((${#QK_REC_NAME[@]} == 0)); then
        printf '%s cells: %s done, %s running, %s pending, %s failed, %s todo\n' "${#QK_CELL_NAME[@]}" \
            "$n_done" "$n_running" "$n_pending" "$n_failed" "$n_todo"
    else
        local refused=""
        ((n_invalid == 0)) || refused=", $n_invalid refused records"
        printf '%s cells: %s done, %s running, %s pending, %s failed, %s todo, %s committed records%s\n' \
            "$((${#QK_CELL_NAME[@]} + ${#QK_REC_NAME[@]}))" "$n_done" "$n_running" "$n_pending" \
            "$n_failed" "$n_todo" "$((${#QK_REC_NAME[@]} - n_invalid))" "$refused"
    fi
    ((n_invalid == 0)) \
        || die "$n_invalid committed record(s) invalid (listed above with the reason): a run of this grid refuses them; remove one to train its cell again"
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
        _qk_warn_cpu_jobs "${QK_JOBS:-1}"
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
    [[ "$QK_RES_MEM" =~ ^[1-9][0-9]*[KMGT]?$ ]] || die "configs/profiles/$1.toml: job.mem must be like 4G or 4000M, got '$QK_RES_MEM'"
    [[ -n "$QK_RES_TIME" ]] || die "configs/profiles/$1.toml does not set job.time (a Slurm time limit, e.g. 24:00:00)"
    if ((QK_NODES > 1 && QK_RES_GPUS == 0)); then
        qk_usage_error "--nodes $QK_NODES: profile $1 trains on CPUs (job.gpus = 0); multi-node cells are for GPU profiles"
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
        ((QK_CELL_TRAIN_ONLY == 0)) || continue
        qk_print_cmd bash "$QK_REPO_ROOT/scripts/evaluate.sh" "${QK_CELL_OPTS[@]}"
        _qk_cell_decode_settings
        local also
        for also in ${_QK_ALSO_OF[$_QK_CELL_PROFILE]}; do
            qk_print_cmd bash "$QK_REPO_ROOT/scripts/evaluate.sh" "${QK_CELL_OPTS[@]}" --checkpoint "$also"
        done
        ((_QK_DEV_BLEU_OF[$_QK_CELL_PROFILE] == 0)) \
            || qk_print_cmd bash "$QK_REPO_ROOT/scripts/evaluate.sh" "${QK_CELL_OPTS[@]}" --split dev
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
