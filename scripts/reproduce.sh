#!/usr/bin/env bash
# scripts/reproduce.sh: run a grid of (pair, system, seed) cells under one profile, resumably, and
# collect the finished cells into result tables.
#   1. for each pair: scripts/prepare_data.sh -> scripts/bpe.sh -> scripts/binarize.sh
#      (each skips finished outputs; on this machine, with either launcher);
#   2. for each pair, seed, system (seed-major: after seed 1 every system has a result): a cell
#      (unless it has a committed record, results/LABEL/PAIR/records/SYSTEM/seedN, and no live
#      run: then it is never trained again; qknorm_tools.committed checks that it belongs),
#      scripts/train.sh then scripts/evaluate.sh (lib.sh:qk_cell; both skip finished work, a
#      killed cell resumes from its checkpoints/checkpoint_last.pt), launched by lib.sh:qk_launch:
#      --launcher local (default): --jobs N cells at once with --threads 1 each (CPU) or one GPU
#        each, their output prefixed with the cell's name and copied to the run's cell.log; a
#        failed cell does not stop the others;
#      --launcher slurm: the cells that are neither done nor queued go to Slurm as one array job
#        (requeue-safe: a requeued, preempted or timed-out cell resumes), step 3 as a job after
#        them; the script returns once they are submitted (--status follows them);
#   3. python -m qknorm_tools.collect runs --run RUN... --aggregate --baseline B writes
#      RESULTS/runs.json (one record per finished cell) and RESULTS/aggregate.{md,tex,csv,json}
#      (mean ± sd over seeds, deltas vs the baseline, paired bootstrap / approximate
#      randomization on seed-concatenated outputs; pairs without a finished baseline are left
#      out, paired tests are skipped for unequal numbers of seeds).
# RESULTS defaults to results/LABEL/PAIRS (LABEL: the profile, or PROFILE-max-update-N for
# another budget; PAIRS: the pair, or the pairs joined by "+"). Scores are tokenized BLEU
# (bleu_tok, as in the papers), detokenized sacreBLEU and chrF (scripts/evaluate.sh). Exit
# status 1 if any step failed (the finished cells are collected anyway); rerunning the same
# command continues the grid; Ctrl-C stops every cell it started.
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"

usage() {
    cat <<EOF
usage: scripts/reproduce.sh --pairs P1,P2,...|all --systems S1,S2,...|all [--seeds 1,2,3]
                            [--profile P] [--max-update N] [--baseline SYSTEM]
                            [--precision bf16|fp32|auto]
                            [--results-dir DIR] [--data-dir DIR] [--no-significance]
                            [--aggregate-only | --no-aggregate] [--dry-run | --status]
                            [--launcher local|slurm] [--jobs N] [--gpus LIST] [--nproc N]
                            [--nodes M] [--partition P] [--account A] [--sbatch-args="OPTS"]
                            [-- EXTRA_FAIRSEQ_TRAIN_ARGS...]
       scripts/reproduce.sh --list
  --pairs L      comma-separated pairs ($(qk_known_pairs)), or all: the papers' pairs
                 ($(qk_config_names pairs --in-all); own pairs only by name)
  --systems L    comma-separated systems, or all (the papers' systems; qk_layernorm only by name):
                 $(qk_known_systems)
  --seeds L      comma-separated non-negative integer seeds (default 1)
  --profile P    one of: $(qk_known_profiles) (default: cpu-proxy)
  --max-update N update budget instead of the profile's (runs and results then go to
                 PROFILE-max-update-N/, never over the profile's)
  --baseline S   baseline system of the aggregate tables and paired tests (default twt)
  --results-dir D  where runs.json and aggregate.* go (default: results/LABEL/PAIRS)
  --data-dir D   passed to scripts/prepare_data.sh (local corpus copy)
  --no-significance  aggregate without the paired tests (faster)
  --aggregate-only   skip data preparation and training: only collect finished cells, aggregate
  --require-every-system  the collection needs a finished cell (any seed) of every system in
                 every pair, else it fails naming the others and writes nothing (scripts/ablation.sh)
  --require-every-run  the collection needs every cell finished, else it fails naming the
                 unfinished ones and writes nothing
  --no-aggregate     run the grid only
  --dry-run      print every step (each cell's full fairseq-train command; with --launcher
                 slurm also the cells file and the batch scripts) without running any
  --list         list pairs, systems (with their paper rows and arch families) and profiles
  -- ARGS        passed on to every cell's fairseq-train (e.g. -- --fp16); a run made with other
                 ARGS is never reused (scripts/train.sh stops, naming it)
$(qk_precision_usage)
$(qk_launch_usage)
environment: QKNORM_WORK_DIR (data/, runs/, results/, slurm/ below it), QKNORM_MAX_UPDATE,
  QKNORM_DATA_DIR, QKNORM_SLURM_PARTITION, QKNORM_SLURM_ACCOUNT, QKNORM_SBATCH_ARGS
EOF
}

PAIRS_ARG="" SYSTEMS_ARG="" SEEDS_ARG=1 PROFILE_ARG=cpu-proxy MAX_UPDATE_ARG=""
BASELINE=twt RESULTS_DIR_ARG="" DATA_DIR_ARG="" NO_SIG=0 AGG_ONLY=0 NO_AGG=0 DRY_RUN=0 LIST=0
REQUIRE_EVERY=0 REQUIRE_ALL=0
qk_parse_args "--pairs PAIRS_ARG" "--systems SYSTEMS_ARG" "--seeds SEEDS_ARG" \
    "--profile PROFILE_ARG" "--max-update MAX_UPDATE_ARG" "--baseline BASELINE" \
    "--results-dir RESULTS_DIR_ARG" "--data-dir DATA_DIR_ARG" "--no-significance NO_SIG=1" \
    "--aggregate-only AGG_ONLY=1" "--no-aggregate NO_AGG=1" "--dry-run DRY_RUN=1" "--list LIST=1" \
    "--require-every-system REQUIRE_EVERY=1" "--require-every-run REQUIRE_ALL=1" \
    "$QK_PRECISION_SPEC" "${QK_LAUNCH_SPECS[@]}" "@" -- "$@"
EXTRA=("${QK_REST[@]+"${QK_REST[@]}"}")

# ---------------------------------------------------------------------------------------------
# --list

list_all() {
    local p s f
    echo "pairs (configs/pairs; the papers' model size, TWT Table 1):"
    for p in $(qk_known_pairs); do
        (
            load_pair_config "$p"
            printf '  %-6s %s->%s  %-7s BPE %5s merges  paper size %-5s  QKNorm L %s  max-epoch %s\n' \
                "$p" "$SRC" "$TGT" "$CORPUS" "$BPE_MERGES" "$PAPER_ARCH_SIZE" "$PAPER_L" "$PAPER_MAX_EPOCH"
        )
    done
    echo "systems (configs/systems; arch family, sizes in fairseq_qknorm/models/transformer_qknorm.py):"
    for s in $(qk_known_systems); do
        (
            load_system_config "$s"
            printf '  %-26s %-40s %-40s %s\n' "$s" "$SYSTEM_DESC" "$PAPER_ROW" "$SYSTEM_ARCH"
        )
    done
    echo "profiles (configs/profiles; the arch each uses, shown for each pair and the twt system):"
    for f in $(qk_known_profiles); do
        for p in $(qk_known_pairs); do
            (
                load_cell_config "$p" twt "$f"
                printf '  %-14s %-6s arch %-22s dropout %-5s max-update %-5s max-epoch %s\n' \
                    "$f" "$p" "$QK_ARCH" "${TRAIN_DROPOUT:-arch}" "$MAX_UPDATE" "$MAX_EPOCH"
            )
        done
    done
}

if ((LIST)); then
    list_all
    exit 0
fi

# ---------------------------------------------------------------------------------------------
# argument checks (everything is checked before anything runs)

[[ -n "$PAIRS_ARG" ]] || qk_usage_error "--pairs is required (a comma-separated list or 'all')"
[[ -n "$SYSTEMS_ARG" ]] || qk_usage_error "--systems is required (a comma-separated list or 'all')"
((AGG_ONLY == 0 || NO_AGG == 0)) || qk_usage_error "--aggregate-only and --no-aggregate exclude each other"
((DRY_RUN == 0 || QK_STATUS == 0)) || qk_usage_error "--dry-run and --status exclude each other"
OPTS=()
[[ -z "$MAX_UPDATE_ARG" ]] || OPTS+=("uint:--max-update=$MAX_UPDATE_ARG")
# PAIRS, SYSTEMS ("all": the papers' pairs and systems), SEEDS
qk_launch_check "${OPTS[@]+"${OPTS[@]}"}" "names:pairs:PAIRS=$PAIRS_ARG" \
    "names:systems:SYSTEMS=$SYSTEMS_ARG" "seeds:SEEDS=$SEEDS_ARG"
qk_require_name systems "$BASELINE"
qk_require_name profiles "$PROFILE_ARG"
PROFILE="$PROFILE_ARG"
LABEL="$(qk_run_label "$PROFILE" "$MAX_UPDATE_ARG")"
for _pair in "${PAIRS[@]}"; do  # a budget that never stops is refused before any cell (dry runs too)
    (load_pair_config "$_pair"; load_profile_config "$PROFILE" --max-update "$MAX_UPDATE_ARG" --check-stops) \
        || exit 2
done
# bf16 autocast or fp32 (the profile's PROFILE_BF16, QKNORM_BF16): decided once, here, for every cell
# (--aggregate-only trains nothing: it only finds the runs, and says no precision)
if ((AGG_ONLY)); then qk_resolve_bf16_of "$PROFILE" --cached-only --quiet
elif ((DRY_RUN || QK_STATUS)); then qk_resolve_bf16_of "$PROFILE" --cached-only; else qk_resolve_bf16_of "$PROFILE"; fi
# a budget other than the profile's reports to its own folder (never over the profile's results)
RESULTS_DIR="${RESULTS_DIR_ARG:-$QK_WORK_DIR/results/$LABEL/$(IFS=+; echo "${PAIRS[*]}")}"
if [[ " ${SYSTEMS[*]} " != *" $BASELINE "* ]] && ((NO_AGG == 0)); then
    qk_warn "baseline '$BASELINE' is not among --systems: the aggregation needs its finished cells (--baseline)"
fi

CELL_OPTS=(--profile "$PROFILE" --precision "$QK_PRECISION")
[[ -z "$MAX_UPDATE_ARG" ]] || CELL_OPTS+=(--max-update "$MAX_UPDATE_ARG")
((${#EXTRA[@]} == 0)) || CELL_OPTS+=(-- "${EXTRA[@]}")
DATA_OPT=()
[[ -z "$DATA_DIR_ARG" ]] || DATA_OPT=(--data-dir "$DATA_DIR_ARG")

# committed records (results/LABEL/PAIR/records/): read for cells without a live run, written
# for finished cells that have none (qknorm_tools.committed)
declare -A RUN_DIR=()  # PAIR/SYSTEM/SEED -> the run directory
qk_run_dirs RUN_DIR "$LABEL" "$(IFS=,; echo "${PAIRS[*]}")" "$(IFS=,; echo "${SYSTEMS[*]}")" \
    "$(IFS=,; echo "${SEEDS[*]}")"
COLLECT=("$QK_PY" -m qknorm_tools.collect runs --work-dir "$QK_WORK_DIR" --out-dir "$RESULTS_DIR"
    --aggregate --baseline "$BASELINE" --records-root "$QK_WORK_DIR/results/$LABEL" --write-records
    --profile "$LABEL")
((NO_SIG == 0)) || COLLECT+=(--no-significance)
((REQUIRE_EVERY == 0)) || COLLECT+=(--require-systems "$(IFS=,; echo "${SYSTEMS[*]}")")
((REQUIRE_ALL == 0)) || COLLECT+=(--require-all)
for p in "${PAIRS[@]}"; do
    COLLECT+=(--ref "$p=$QK_DATA/raw/$p/test.$(load_pair_config "$p" && printf '%s' "$TGT")")
    for seed in "${SEEDS[@]}"; do
        for s in "${SYSTEMS[@]}"; do
            COLLECT+=(--run "${RUN_DIR[$p/$s/$seed]}")
        done
    done
done
# the aggregation as a Slurm job: this script again, collecting only
AGGREGATE=()
if ((NO_AGG == 0)); then
    AGGREGATE=(bash "$SCRIPT_DIR/reproduce.sh" --pairs "$PAIRS_ARG" --systems "$SYSTEMS_ARG"
        --seeds "$SEEDS_ARG" --profile "$PROFILE" --precision "$QK_PRECISION" ${MAX_UPDATE_ARG:+--max-update "$MAX_UPDATE_ARG"}
        --baseline "$BASELINE" --results-dir "$RESULTS_DIR" --aggregate-only)
    ((NO_SIG == 0)) || AGGREGATE+=(--no-significance)
    ((REQUIRE_EVERY == 0)) || AGGREGATE+=(--require-every-system)
    ((REQUIRE_ALL == 0)) || AGGREGATE+=(--require-every-run)
fi

# add_cells PAIR...: the cells of these pairs, seed-major
add_cells() {
    local p seed s run
    for p in "$@"; do
        for seed in "${SEEDS[@]}"; do
            for s in "${SYSTEMS[@]}"; do
                run="${RUN_DIR[$p/$s/$seed]}"
                qk_grid_cell "$p/$s/seed$seed" "$run" "$(qk_record_dir "$LABEL" "$run")" \
                    "$p" "$s" --seed "$seed" "${CELL_OPTS[@]}"
            done
        done
    done
}

N_CELLS=$((${#PAIRS[@]} * ${#SYSTEMS[@]} * ${#SEEDS[@]}))
if ((QK_STATUS)); then
    add_cells "${PAIRS[@]}"
    qk_launch_status
    exit 0
fi
qk_log "profile $LABEL: pairs ${PAIRS[*]}; systems ${SYSTEMS[*]}; seeds ${SEEDS[*]}; $N_CELLS cells, launcher $QK_LAUNCHER${QK_JOBS:+, $QK_JOBS at a time}"
# --aggregate-only collects what the work dir holds: committed records it lacks (QKNORM_WORK_DIR
# elsewhere) are said, with the copy that counts them, as a grid that trains says them
if ((AGG_ONLY)); then
    add_cells "${PAIRS[@]}"
    qk_note_repo_records
fi

# ---------------------------------------------------------------------------------------------
# --dry-run: print every step

if ((DRY_RUN)); then
    echo "# reproduce.sh dry run: profile $LABEL, $N_CELLS cells (pairs ${PAIRS[*]}; systems ${SYSTEMS[*]}; seeds ${SEEDS[*]}), launcher $QK_LAUNCHER${QK_JOBS:+, $QK_JOBS at a time}"
    if ((AGG_ONLY == 0)); then
        for p in "${PAIRS[@]}"; do
            echo "# pair $p: data, on this machine (each step skips finished outputs)"
            qk_prepare_data 1 "$p" "${DATA_OPT[@]+"${DATA_OPT[@]}"}"
        done
        add_cells "${PAIRS[@]}"
        qk_check_records
        qk_launch --dry-run "$PROFILE" "${AGGREGATE[@]+"${AGGREGATE[@]}"}"
    fi
    if ((NO_AGG == 0)) && [[ "$QK_LAUNCHER" == local || "$AGG_ONLY" == 1 ]]; then
        echo "# collection of the finished cells -> $RESULTS_DIR/{runs.json,aggregate.*}"
        qk_print_cmd "${COLLECT[@]}"
    fi
    exit 0
fi

# ---------------------------------------------------------------------------------------------
# the grid

FAILED=()
if ((AGG_ONLY == 0)); then
    READY_PAIRS=()
    for p in "${PAIRS[@]}"; do
        qk_log "pair $p: data preparation (finished steps are skipped)"
        if qk_prepare_data 0 "$p" "${DATA_OPT[@]+"${DATA_OPT[@]}"}"; then
            READY_PAIRS+=("$p")
        else
            qk_warn "data preparation of $p failed: its cells are skipped"
            FAILED+=("$p (data)")
        fi
    done
    add_cells "${READY_PAIRS[@]+"${READY_PAIRS[@]}"}"
    qk_check_records
    qk_launch "$PROFILE" "${AGGREGATE[@]+"${AGGREGATE[@]}"}"
    FAILED+=("${QK_LAUNCH_FAILED[@]+"${QK_LAUNCH_FAILED[@]}"}")
    if [[ "$QK_LAUNCHER" == slurm ]]; then  # the aggregation is a job
        ((${#FAILED[@]} == 0)) || die "failed: ${FAILED[*]} (the other cells are submitted)"
        exit 0
    fi
fi

# ---------------------------------------------------------------------------------------------
# collection of the finished cells

if ((NO_AGG == 0)); then
    if "${COLLECT[@]}"; then
        qk_log "results in $RESULTS_DIR"
    else
        FAILED+=("aggregation")  # said once, below
    fi
fi

if ((${#FAILED[@]} > 0)); then
    # a rerun resumes failed cells; a failed collection says itself why (above), and a rerun
    # cannot mend what it refused (scripts/ablation.sh, whose step this is, adds nothing)
    [[ "${FAILED[*]}" == aggregation ]] && die "collecting the finished cells failed (above): no report written"
    die "failed: ${FAILED[*]} (rerun the same command to resume)"
fi
qk_log "done"
