#!/usr/bin/env bash
# scripts/ablation.sh: the 2x2 confound ablation of the QKNorm paper on one pair.
# The QKNorm paper (Henry et al. 2020) compares PreNorm + FixNorm + LayerNorm + QKNorm against the
# TWT baseline PreNorm + FixNorm + ScaleNorm (Nguyen & Salazar 2019): two changes at once. The
# four cells {LayerNorm, ScaleNorm} x {dot-product, QKNorm}, all PreNorm + FixNorm, separate them:
#   layernorm_dot    = prenorm_fixnorm_layernorm  (TWT Table 3 row 3)
#   layernorm_qknorm = qknorm_paper               (the QKNorm paper's model)
#   scalenorm_dot    = twt                        (TWT Table 3 row 4; the paper's baseline)
#   scalenorm_qknorm = scalenorm_qknorm           (not in the papers)
# Steps: the data (scripts/prepare_data.sh, bpe.sh, binarize.sh), the cells of the four systems
# x seeds through scripts/lib.sh:qk_launch (resumable; --launcher local or slurm, as
# scripts/reproduce.sh; on Slurm the steps below are a job after the cells; a cell with a
# committed record in results/LABEL/PAIR/records/ and no live run is never trained again:
# docs/convergence.md "Committed records"), their collection
# (scripts/reproduce.sh --aggregate-only: results/LABEL/PAIR/runs.json and aggregate.*, baseline
# twt; LABEL = the profile, or PROFILE-max-update-N), then
#   python -m qknorm_tools.evaluate ablation  -> results/LABEL/PAIR/ablation.{md,json}
#       (simple and main effects, interaction, the paper's comparison decomposed; paired
#       approximate randomization on seed-concatenated outputs, skipped with a warning when the
#       cells have different numbers of finished seeds)
#   python -m qknorm_tools.plots bleu-bars   -> results/LABEL/PAIR/ablation_bleu.png
#       (from the aggregate JSON of the four systems: ablation.json is not its format)
#   python -m qknorm_tools.plots curves      -> results/LABEL/PAIR/ablation_curves.png
#       (train/valid loss of each cell's lowest finished seed, from its train.log)
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"

# cell -> system (order = qknorm_tools.ablation.ABLATION_CELLS)
CELLS=(layernorm_dot layernorm_qknorm scalenorm_dot scalenorm_qknorm)
declare -A CELL_SYSTEM=(
    [layernorm_dot]=prenorm_fixnorm_layernorm
    [layernorm_qknorm]=qknorm_paper
    [scalenorm_dot]=twt
    [scalenorm_qknorm]=scalenorm_qknorm
)

usage() {
    cat <<EOF
usage: scripts/ablation.sh PAIR [--seeds 1,2] [--profile P] [--max-update N] [--data-dir DIR]
                           [--precision bf16|fp32|auto]
                           [--no-significance] [--aggregate-only] [--dry-run | --status]
                           [--launcher local|slurm] [--jobs N] [--gpus LIST] [--nproc N]
                           [--nodes M] [--partition P] [--account A] [--sbatch-args="OPTS"]
                           [-- EXTRA_FAIRSEQ_TRAIN_ARGS...]
  PAIR           $(qk_pair_usage 17)
  --seeds L      comma-separated seeds (default: the profile's [design] seeds 1..N; without
                 them, a profile of the declared pilot (docs/decisive-2x2.md) its pilot's
                 seeds, e.g. cpu-fixed-d128 1,2,3,4; else 1,2: qknorm_tools.pilot.default_seeds)
  --profile P    one of: $(qk_known_profiles) (default: cpu-proxy-fast,
                 sized so that 4 cells x 2 seeds take about an hour on 2 cores with --jobs 2)
  --max-update N update budget instead of the profile's (runs and results then go to
                 PROFILE-max-update-N/)
  --data-dir D   local corpus copy for scripts/prepare_data.sh
  --no-significance  skip the paired tests
  --aggregate-only   no training: report on the finished runs only; each of the four cells
                     needs one (of any seed, or a committed record), else nothing is written;
                     without --seeds every run of the default seeds (the declared design: no
                     effect read before the whole grid), else nothing is written
  --dry-run      print the four systems' training commands and the report steps
  -- ARGS        passed on to every cell's fairseq-train (e.g. -- --fp16)
$(qk_precision_usage)
$(qk_launch_usage)
cells (all PreNorm + FixNorm): layernorm_dot=prenorm_fixnorm_layernorm,
  layernorm_qknorm=qknorm_paper, scalenorm_dot=twt, scalenorm_qknorm=scalenorm_qknorm
outputs: results/LABEL/PAIR/{runs.json,aggregate.*,ablation.md,ablation.json,ablation_bleu.png,ablation_curves.png}
  and results/LABEL/PAIR/records/SYSTEM/seedN/ per finished cell (committed records: a cell that has
  one is never trained again; --status lists them)
environment: QKNORM_WORK_DIR, QKNORM_MAX_UPDATE, QKNORM_DATA_DIR, QKNORM_SLURM_PARTITION,
  QKNORM_SLURM_ACCOUNT, QKNORM_SBATCH_ARGS
EOF
}

SEEDS_ARG="" PROFILE_ARG=cpu-proxy-fast MAXU="" DATA_DIR_ARG="" NO_SIG=0 AGG_ONLY=0 DRY_RUN=0
qk_parse_args "@PAIR_ARG" "--seeds SEEDS_ARG" "--profile PROFILE_ARG" "--max-update MAXU" \
    "--data-dir DATA_DIR_ARG" "--no-significance NO_SIG=1" "--aggregate-only AGG_ONLY=1" \
    "--dry-run DRY_RUN=1" "$QK_PRECISION_SPEC" "${QK_LAUNCH_SPECS[@]}" -- "$@"
EXTRA=("${QK_REST[@]+"${QK_REST[@]}"}")
((DRY_RUN == 0 || QK_STATUS == 0)) || qk_usage_error "--dry-run and --status exclude each other"
qk_launch_check
load_pair_config "$PAIR_ARG"
# --max-update: the budget (checked, and refused where training would never stop, before any
# cell: the cells' train.sh would refuse it) and the label its runs are filed under
load_profile_config "$PROFILE_ARG" --max-update "$MAXU" --check-stops
# no --seeds: the profile's declared seeds, or its declared pilot's, or 1,2 (the rule and why:
# qknorm_tools.pilot.default_seeds; line 1 the seeds, line 2 why)
SEEDS_WHY="" EVERY_RUN=()
if [[ -z "$SEEDS_ARG" ]]; then
    # a report of the default grid (the declared design) waits for all of it
    ((AGG_ONLY == 0)) || EVERY_RUN=(--require-every-run)
    seeds_out="$("$QK_PY" -m qknorm_tools.pilot --default-seeds "$PROFILE" --pair "$PAIR")" \
        || die "cannot read the declared seeds of profile $PROFILE (above)"
    SEEDS_ARG="${seeds_out%%$'\n'*}"
    [[ "$seeds_out" != *$'\n'* ]] || SEEDS_WHY="${seeds_out#*$'\n'}"
fi
qk_check_options "seeds:SEED_LIST=$SEEDS_ARG"

# bf16 autocast or fp32 (--precision, QKNORM_BF16, the profile's PROFILE_BF16): decided once, here,
# and passed to every cell and child script as --precision
# (--aggregate-only trains nothing: it only finds the runs, and says no precision)
if ((AGG_ONLY)); then qk_resolve_bf16 --cached-only --quiet
elif ((DRY_RUN || QK_STATUS)); then qk_resolve_bf16 --cached-only; else qk_resolve_bf16; fi
# a budget other than the profile's reports to its own folder: a short trial run never
# overwrites the profile's results
LABEL="$(qk_run_label)"
OUT="$QK_WORK_DIR/results/$LABEL/$PAIR"
REF="$QK_DATA/raw/$PAIR/test.$TGT"
SYSTEMS=()
CELL_OPTS=(--profile "$PROFILE" --precision "$QK_PRECISION")
[[ -z "$MAXU" ]] || CELL_OPTS+=(--max-update "$MAXU")
((${#EXTRA[@]} == 0)) || CELL_OPTS+=(-- "${EXTRA[@]}")
for c in "${CELLS[@]}"; do
    SYSTEMS+=("${CELL_SYSTEM[$c]}")
done
declare -A RUN_DIR=()  # PAIR/SYSTEM/SEED -> the run directory
qk_run_dirs RUN_DIR "$LABEL" "$PAIR" "$(IFS=,; echo "${SYSTEMS[*]}")" "$(IFS=,; echo "${SEED_LIST[*]}")"
for seed in "${SEED_LIST[@]}"; do  # seed-major, as scripts/reproduce.sh
    for c in "${CELLS[@]}"; do
        s="${CELL_SYSTEM[$c]}"
        run="${RUN_DIR[$PAIR/$s/$seed]}"
        qk_grid_cell "$PAIR/$s/seed$seed" "$run" "$(qk_record_dir "$LABEL" "$run")" \
            "$PAIR" "$s" --seed "$seed" "${CELL_OPTS[@]}"
    done
done
if ((QK_STATUS)); then
    [[ -z "$SEEDS_WHY" ]] || echo "# $SEEDS_WHY"
    qk_launch_status
    exit 0
fi
[[ -z "$SEEDS_WHY" ]] || qk_log "$SEEDS_WHY"
echo "# 2x2 ablation on $PAIR ($SRC->$TGT), profile $PROFILE, seeds $SEEDS_ARG; all cells PreNorm + FixNorm:"
for c in "${CELLS[@]}"; do
    s="${CELL_SYSTEM[$c]}"
    desc="$(load_system_config "$s" && printf '%s; %s' "$SYSTEM_DESC" "$PAPER_ROW")"
    printf '#   %-16s = %-26s (%s)\n' "$c" "$s" "$desc"
done

# collection of the finished cells (runs.json, aggregate.*): scripts/reproduce.sh --aggregate-only
REPRO=(bash "$SCRIPT_DIR/reproduce.sh" --pairs "$PAIR" --systems "$(IFS=,; echo "${SYSTEMS[*]}")"
    --seeds "$SEEDS_ARG" --profile "$PROFILE" --precision "$QK_PRECISION" --baseline twt --results-dir "$OUT" --aggregate-only
    --require-every-system "${EVERY_RUN[@]+"${EVERY_RUN[@]}"}"
    ${MAXU:+--max-update "$MAXU"})
((NO_SIG == 0)) || REPRO+=(--no-significance)
# the report as a Slurm job after the cells: this script again, reporting only
AGGREGATE=(bash "$SCRIPT_DIR/ablation.sh" "$PAIR" --seeds "$SEEDS_ARG" --profile "$PROFILE" --precision "$QK_PRECISION"
    ${MAXU:+--max-update "$MAXU"} --aggregate-only)
((NO_SIG == 0)) || AGGREGATE+=(--no-significance)

# run from the work dir with the reference relative to it: ablation.json records it as given
ABL=("$QK_PY" -m qknorm_tools.evaluate ablation --results "$OUT/runs.json" --pair "$PAIR"
    --ref "${REF#"$QK_WORK_DIR"/}" --out-dir "$OUT" --profile "$PROFILE")
for c in "${CELLS[@]}"; do
    ABL+=(--cell "$c=${CELL_SYSTEM[$c]}")
done
((NO_SIG == 0)) || ABL+=(--no-significance)
BARS=("$QK_PY" -m qknorm_tools.plots bleu-bars --json "$OUT/aggregate.json" --out "$OUT/ablation_bleu.png"
    --title "$PAIR ($LABEL): 2x2 ablation, PreNorm + FixNorm")

if ((DRY_RUN)); then
    if ((AGG_ONLY == 0)); then
        echo "# data, on this machine (each step skips finished outputs)"
        qk_prepare_data 1 "$PAIR" ${DATA_DIR_ARG:+--data-dir "$DATA_DIR_ARG"}
        qk_check_records
        qk_launch --dry-run "$PROFILE" "${AGGREGATE[@]}"
    fi
    if [[ "$QK_LAUNCHER" == local || "$AGG_ONLY" == 1 ]]; then
        echo "# collection of the finished cells -> $OUT/{runs.json,aggregate.*}"
        qk_print_cmd "${REPRO[@]}"
        echo "# ablation report (run from $QK_WORK_DIR)"
        qk_print_cmd "${ABL[@]}"
        echo "# figures"
        qk_print_cmd "${BARS[@]}"
        CURVE_DRY=("$QK_PY" -m qknorm_tools.plots curves --out "$OUT/ablation_curves.png" --log)
        for c in "${CELLS[@]}"; do
            CURVE_DRY+=("${CELL_SYSTEM[$c]}=${RUN_DIR[$PAIR/${CELL_SYSTEM[$c]}/${SEED_LIST[0]}]}/train.log")
        done
        qk_print_cmd "${CURVE_DRY[@]}"
    fi
    exit 0
fi

RC=0
if ((AGG_ONLY == 0)); then
    qk_prepare_data 0 "$PAIR" ${DATA_DIR_ARG:+--data-dir "$DATA_DIR_ARG"} \
        || die "data preparation of $PAIR failed (see above)"
    qk_check_records
    qk_launch "$PROFILE" "${AGGREGATE[@]}"
    [[ "$QK_LAUNCHER" == local ]] || exit 0  # the report is a Slurm job after the cells
    if ((${#QK_LAUNCH_FAILED[@]})); then
        RC=1
        qk_warn "failed cells: ${QK_LAUNCH_FAILED[*]}: reporting on the finished cells"
    fi
fi
((AGG_ONLY == 0)) || qk_note_repo_records  # records a work dir elsewhere lacks: said
# runs.json is written by this collection or not at all (no finished cell): an earlier one is
# left as it was, and never reported on as if it were this grid's
qk_mktemp_dir STAMP "$OUT" collect
touch "$STAMP/started"
# after an error, only what applies: the collection's own message says what it refused, and
# its last line that no report was written (its messages under this script's name: QK_STEP_OF);
# said once, so nothing is added here
QK_STEP_OF="$QK_SCRIPT_NAME" qk_run "${REPRO[@]}" || exit $?
if [[ ! "$OUT/runs.json" -nt "$STAMP/started" ]]; then
    [[ ! -f "$OUT/runs.json" ]] || die "no finished cell: nothing to report ($OUT/runs.json, of an earlier collection, is left as it was)"
    die "no finished cell: nothing to report"
fi
RESUME=""
((RC == 0)) || RESUME="; failed cells: ${QK_LAUNCH_FAILED[*]} (rerun the same command to resume them)"
(cd "$QK_WORK_DIR" && "${ABL[@]}") || die "ablation report failed (above)$RESUME"
qk_log "wrote $OUT/ablation.md and $OUT/ablation.json"

# figures: secondary outputs, a failure is a warning (matplotlib's messages go to plots.log).
# Curves: each cell's lowest seed whose training finished (train.json, as scripts/train.sh), or
# else that has a committed record (its train.log holds the statistics lines), named by its
# system as in aggregate.md and ablation_bleu.png.
CURVES=("$QK_PY" -m qknorm_tools.plots curves --out "$OUT/ablation_curves.png" --log)
for c in "${CELLS[@]}"; do
    for seed in "${SEED_LIST[@]}"; do
        run="${RUN_DIR[$PAIR/${CELL_SYSTEM[$c]}/$seed]}"
        rec="$(qk_record_dir "$LABEL" "$run")"
        if [[ -f "$run/train.json" ]]; then
            CURVES+=("${CELL_SYSTEM[$c]}=$run/train.log")
            break
        elif [[ -f "$rec/record.json" ]]; then
            CURVES+=("${CELL_SYSTEM[$c]}=$rec/train.log")
            break
        fi
    done
done
: >"$OUT/plots.log"
for fig in BARS CURVES; do
    [[ "$fig" != BARS || -f "$OUT/aggregate.json" ]] || continue
    declare -n FIG_CMD="$fig"
    if "${FIG_CMD[@]}" >>"$OUT/plots.log" 2>&1; then
        qk_log "wrote $(tail -n 1 "$OUT/plots.log" | sed 's/^wrote //')"
    else
        qk_warn "figure failed: $(tail -n 1 "$OUT/plots.log") (see $OUT/plots.log)"
    fi
    unset -n FIG_CMD
done
((RC == 0)) || die "some cells failed (see above); the report covers the finished ones"
