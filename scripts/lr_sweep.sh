#!/usr/bin/env bash
# scripts/lr_sweep.sh: a learning-rate sweep on one pair, one command (issue 12): final dev loss
# and test BLEU against the peak learning rate for several systems, LR sensitivity (Wortsman et
# al. 2023), diverged runs, attention-logit growth.
#   1. data: scripts/prepare_data.sh -> bpe.sh -> binarize.sh (each skips finished outputs);
#   2. the loss at initialization, per system and seed: scripts/train.sh --lr 0 --max-update 1
#      -- --warmup-init-lr 0: one update at learning rate 0 leaves every parameter as
#      initialized, and fairseq validates the model when it stops, so the run's dev loss is
#      the initial model's (the initialization does not depend on the lr: fairseq seeds torch
#      before building the model). Its checkpoint is that initial model. Not decoded: a
#      --train-only cell (lib.sh:qk_cell), launched with the others (only the report needs it);
#   3. the cells, seed-major then lr then system: scripts/train.sh + scripts/evaluate.sh with
#      --lr LR (lib.sh:qk_cell, the grid's cell as in scripts/reproduce.sh: resumable, skipped
#      when finished), launched by lib.sh:qk_launch: --launcher local (default) runs --jobs N at
#      once with one thread each; --launcher slurm submits the unfinished ones as one array job
#      and step 4 (this script with --report-only) as a job after them, and returns (--status
#      follows them). The lr replaces the profile's peak --lr; the warmup and schedule stay. A
#      run that diverges (fairseq stops on non-finite values, scripts/train.sh exit 3 and
#      RUN/diverged) is a finished result under both launchers: it is reported as diverged,
#      not as a failure, and never retried or decoded;
#   4. python -m qknorm_tools.collect runs --keep-unscored -> RESULTS/runs.json, then
#      python -m qknorm_tools.evaluate lr-sensitivity -> RESULTS/lr_sweep.{md,json} and
#      python -m qknorm_tools.plots lr-loss|lr-maxlogit|lr-bleu -> RESULTS/lr_sweep_*.png.
# Runs: runs/PAIR/LABEL/SYSTEM/seedN-lrLR (LABEL = PROFILE-max-update-N for the sweep's budget;
# the profile's own lr is the plain seedN run), initial models under PROFILE-max-update-1/...-lr0.
# RESULTS defaults to results/LABEL/PAIR/lr-sweep. Rerunning the same command continues the
# sweep; Ctrl-C stops every run it started.
#
# Budget (the defaults; docs/lr-sweep.md):
# see the comments at SWEEP_MAX_UPDATE below.
#
# The size axis (issue 23; Wortsman et al. 2023 Fig. 1): --sizes 128,256,384 repeats the whole
# grid at each model width (train.sh --size: 2+2 layers d 128, the proxy's 3+3 d 256, 4+4 d 384;
# heads of 64), runs under LABEL-dD (d 256: the profile's own LABEL), results under
# RESULTS/dD/, dev loss only (every size cell is --train-only: no test decoding), and
# python -m qknorm_tools.lr_sweep_sizes then writes RESULTS/lr_sweep_sizes.{md,json,png}: LR
# sensitivity against non-embedding parameters per system. Budget: docs/lr-sweep-sizes.md.
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"

# The default sweep: 4 systems x 6 learning rates x 2 seeds = 48 runs (+ 8 one-update runs for
# the loss at initialization) on the CPU proxy, about 1 h 50 min on 2 idle cores, two at a time.
# Calibrated on real gl-en (AMD EPYC Zen 4, 2 cores, fp32, one thread per run; measured as CPU
# time with /usr/bin/time because other jobs loaded the machine 3-5x, 2026-12-01):
#   training 0.61-0.67 CPU s per update (cpu-proxy-fast; the 2x2 ablation measured 0.75 s of
#   wall per update with two runs side by side on the idle machine), plus about 17 s per run to
#   start, validate the 742 dev sentences once and save; decoding the 1,112 test sentences with
#   beam 4 took 36-106 CPU s (models that repeat a token run to the length cap: the slowest).
#   Greedy decoding is no cheaper on those (every hypothesis ran to the cap, 34-36 s, BLEU 0),
#   so the sweep decodes as the profile does: beam 4, the whole test set.
#   Per run: about 25 s + 250 x 0.72 s + about 70 s of decoding = 275 s; 48 runs two at a time
#   = 110 min, the 8 initial-model runs 2 min more.
#   Checked on the idle machine (load 1.3; 2 runs of 60 updates side by side, 2026-12-01):
#   0.56 s of wall per update, 13 s to start, validate and save, 103 s to decode a 60-update
#   model: 1 h 30 min to 1 h 45 min predicted, so 110 min keeps a margin.
SWEEP_SYSTEMS=prenorm_fixnorm_layernorm,qknorm_paper,qk_layernorm,twt
# half-decade steps from 3e-4 (Wortsman et al. 2023 sweep 3e-4..3e-1 in such steps). The TWT
# baseline does not diverge (NaN or a dev loss above the initial one) at any lr tried: after 300
# updates its dev loss was 8.64 at 3e-2, 8.96 at 1e-1, 9.06 at 3e-1, 9.18 at 1 and 10.95 at 10,
# all below the 13.44 of the initial model; from 3e-2 on it collapses instead (at most two
# distinct outputs for the 1,112 test sentences, BLEU < 0.5, encoder self-attention entropy
# ~0, max attention logit from 2.6 at initialization to 1.7e4 at 3e-2 and 2.0e5 at 1e-1, where
# 1e-3 reaches 11). The grid ends at 1e-1, two steps into that collapse; --lrs ...,3e-1 adds
# Wortsman's upper end (8 more runs, about 20 min).
SWEEP_LRS=3e-4,1e-3,3e-3,1e-2,3e-2,1e-1
SWEEP_PROFILE=cpu-proxy-fast
# 250 updates per run: the profile's 200 warmup updates to the peak lr, then 50 near it (the
# collapse above is complete by update 250); one dev validation (the profile validates every
# 250 updates). The profile's own 1,000 updates would take about 7 hours for this grid.
SWEEP_MAX_UPDATE=250

usage() {
    cat <<EOF
usage: scripts/lr_sweep.sh PAIR [--systems S1,S2,...] [--lrs LR1,LR2,...] [--seeds 1,2]
                           [--sizes 128,256,384] [--profile P] [--max-update N] [--results-dir DIR]
                           [--precision bf16|fp32|auto]
                           [--data-dir DIR] [--report-only] [--dry-run | --status]
                           [--launcher local|slurm] [--jobs N] [--gpus LIST] [--nproc N]
                           [--nodes M] [--partition P] [--account A] [--sbatch-args="OPTS"]
  PAIR           $(qk_pair_usage 17)
  --systems L    comma-separated systems or all (default $SWEEP_SYSTEMS);
                 known: $(qk_known_systems)
  --lrs L        comma-separated peak learning rates > 0 (default $SWEEP_LRS); each replaces
                 the profile's --lr, the warmup stays
  --seeds L      comma-separated seeds (default 1,2)
  --sizes L      model widths among 128, 256 (the proxy), 384: the grid at each size, dev loss
                 only (no test decoding), plus LR sensitivity vs non-embedding parameters
                 (Wortsman et al. 2023 Fig. 1); default: the profile's one size, decoded
  --profile P    one of: $(qk_known_profiles) (default $SWEEP_PROFILE)
  --max-update N updates per run (default $SWEEP_MAX_UPDATE; runs and results go to
                 PROFILE-max-update-N/ unless N is the profile's budget)
  --results-dir D  where runs.json, lr_sweep.{md,json} and the figures go
                 (default: results/LABEL/PAIR/lr-sweep)
  --data-dir D   passed to scripts/prepare_data.sh (local corpus copy)
  --report-only  skip data and training: collect the finished runs, write the report
  --dry-run      print every step (each run's full fairseq-train command; on Slurm also the
                 cells file and the batch scripts) without running any
$(qk_precision_usage)
$(qk_launch_usage)
environment: QKNORM_WORK_DIR (data/, runs/, results/ below it), QKNORM_DATA_DIR
EOF
}

SYSTEMS_ARG="$SWEEP_SYSTEMS" LRS_ARG="$SWEEP_LRS" SEEDS_ARG=1,2 PROFILE_ARG="$SWEEP_PROFILE"
MAXU="$SWEEP_MAX_UPDATE" RESULTS_DIR_ARG="" DATA_DIR_ARG="" REPORT_ONLY=0 DRY_RUN=0 SIZES_ARG=""
qk_parse_args "@PAIR_ARG" "--systems SYSTEMS_ARG" "--lrs LRS_ARG" "--seeds SEEDS_ARG" "--sizes SIZES_ARG" \
    "--profile PROFILE_ARG" "--max-update MAXU" "--results-dir RESULTS_DIR_ARG" \
    "--data-dir DATA_DIR_ARG" "--report-only REPORT_ONLY=1" "--dry-run DRY_RUN=1" \
    "$QK_PRECISION_SPEC" "${QK_LAUNCH_SPECS[@]}" -- "$@"

# ---------------------------------------------------------------------------------------------
# argument checks (everything is checked before anything runs)

# "all" here is every system, QK-LayerNorm included (reproduce.sh's "all" is the papers' systems)
[[ "$SYSTEMS_ARG" != all ]] || SYSTEMS_ARG="$(qk_known_systems | tr ' ' ',')"
# SYSTEMS, SEEDS, LR_ITEMS (each lr is checked and spelled once by load_profile_config below:
# LRS, LR_DIRS), SIZE_ITEMS; a repeat in a list is a typo (1e-3,1e-3 as 1,1)
LIST_SPECS=("names:systems:SYSTEMS=$SYSTEMS_ARG" "seeds:SEEDS=$SEEDS_ARG" "list:lrs:LR_ITEMS=$LRS_ARG")
[[ -z "$SIZES_ARG" ]] || LIST_SPECS+=("list:sizes:SIZE_ITEMS=$SIZES_ARG")
qk_launch_check "${LIST_SPECS[@]}"
((DRY_RUN == 0 || QK_STATUS == 0)) || qk_usage_error "--dry-run and --status exclude each other"
JOBS="${QK_JOBS:-1}"
# SIZES: train.sh --size values ("" = the profile's own proxy size, d 256); one "" without --sizes
SIZES=("")
SIZE_WIDTHS=()
if [[ -n "$SIZES_ARG" ]]; then
    SIZES=()
    for w in "${SIZE_ITEMS[@]}"; do
        case "$w" in
            128 | 384) sz="d$w" ;;
            256) sz="" ;;
            *) qk_usage_error "bad --sizes list '$SIZES_ARG': '$w' is not one of 128, 256, 384 (model widths)" ;;
        esac
        SIZES+=("$sz") SIZE_WIDTHS+=("$w")
    done
fi
load_pair_config "$PAIR_ARG"
LRS_OPTS=(--lrs-arg "$LRS_ARG")
for lr in "${LR_ITEMS[@]}"; do LRS_OPTS+=(--sweep-lr "$lr"); done
# LRS, LR_DIRS (a bad --lrs: usage error); MAX_UPDATE and the label at the sweep's budget
load_profile_config "$PROFILE_ARG" "${LRS_OPTS[@]}" --max-update "$MAXU" --check-stops
[[ -z "$SIZES_ARG" ]] || qk_require_sizeable_profile --sizes
# bf16 autocast or fp32 (--precision, QKNORM_BF16, the profile's PROFILE_BF16): decided once, here,
# and passed to every cell and child script as --precision. The size axis pins fp32 unless told
# otherwise: it is built over several sittings, which may meet machines with and without native
# bf16, and the cells of both precisions are different cells (seedN-lrLR-bf16).
if [[ -n "$SIZES_ARG" && -z "$QK_PRECISION_ARG" && -z "${QKNORM_BF16:-}" ]]; then
    QK_PRECISION_ARG=fp32
    qk_log "size axis: fp32 pinned (a grid over several sittings; --precision or QKNORM_BF16 overrides)"
fi
# (--report-only trains nothing: it only finds the runs, and says no precision)
if ((REPORT_ONLY)); then qk_resolve_bf16 --cached-only --quiet
elif ((DRY_RUN || QK_STATUS)); then qk_resolve_bf16 --cached-only; else qk_resolve_bf16; fi
LABEL="$(qk_run_label)"
INIT_LABEL="$(qk_run_label "$PROFILE" 1)"
OUT="${RESULTS_DIR_ARG:-$QK_WORK_DIR/results/$LABEL/$PAIR/lr-sweep}"
REF="$QK_DATA/raw/$PAIR/test.$TGT"

# the launcher adds --threads 1 (local, --jobs N > 1) or the job's CPUs (Slurm) to every cell
CELL_OPTS=(--profile "$PROFILE" --max-update "$MAX_UPDATE" --precision "$QK_PRECISION")
DATA_OPT=()
[[ -z "$DATA_DIR_ARG" ]] || DATA_OPT=(--data-dir "$DATA_DIR_ARG")
# the initial model: one update at lr 0 from an lr-0 warmup start (no parameter moves), never
# decoded (a --train-only cell)
INIT_OPTS=(--profile "$PROFILE" --max-update 1 --lr 0 --train-only --precision "$QK_PRECISION")
INIT_EXTRA=(-- --warmup-init-lr 0 --no-save-optimizer-state)
# a profile with an lr floor (--stop-min-lr: paper, the converging ones) would stop, and
# train_check refuse, a run that starts at lr 0: the floor is off for this one update
[[ " ${VALID_FLAGS[*]} " != *" --stop-min-lr "* ]] || INIT_EXTRA+=(--stop-min-lr -1)

# run directories: qknorm_tools.config.run_dir is the one place that names them (qk_run_dirs;
# the profile's own lr: seedN)
declare -A LR_DIR=()
for i in "${!LRS[@]}"; do LR_DIR[${LRS[$i]}]="${LR_DIRS[$i]}"; done
RUN_NAMES=() INIT_NAMES=()
declare -A RUN_OF=() SIZE_OF=()
# size_tag SIZE: the cell-name part and results subfolder of a size ("" without --sizes)
size_tag() {
    if [[ -z "$SIZES_ARG" ]]; then printf ''; elif [[ -z "$1" ]]; then printf 'd256'; else printf '%s' "$1"; fi
}
for sz in "${SIZES[@]}"; do
    tag="$(size_tag "$sz")"
    declare -A INIT_DIR=() LR_RUN_DIR=()  # PAIR/SYSTEM/SEED/LR -> the run directory
    qk_run_dirs INIT_DIR "$INIT_LABEL${sz:+-$sz}" "$PAIR" "$(IFS=,; echo "${SYSTEMS[*]}")" \
        "$(IFS=,; echo "${SEEDS[*]}")" 0
    qk_run_dirs LR_RUN_DIR "$LABEL${sz:+-$sz}" "$PAIR" "$(IFS=,; echo "${SYSTEMS[*]}")" \
        "$(IFS=,; echo "${SEEDS[*]}")" "${LR_DIRS[@]}"
    for seed in "${SEEDS[@]}"; do
        for s in "${SYSTEMS[@]}"; do
            name="$PAIR/$s/${tag:+$tag/}seed$seed-init"
            INIT_NAMES+=("$name")
            SIZE_OF[$name]="$sz"
            RUN_OF[$name]="${INIT_DIR[$PAIR/$s/$seed/0]}"
        done
        for lr in "${LRS[@]}"; do
            for s in "${SYSTEMS[@]}"; do
                name="$PAIR/$s/${tag:+$tag/}seed$seed-lr$lr"
                RUN_NAMES+=("$name")
                SIZE_OF[$name]="$sz"
                RUN_OF[$name]="${LR_RUN_DIR[$PAIR/$s/$seed/${LR_DIR[$lr]}]}"
            done
        done
    done
done

# record_of RUN: the committed record of the run directory RUN (runs/PAIR/LABEL/SYSTEM/NAME ->
# results/LABEL/PAIR/records/SYSTEM/NAME): a finished cell leaves one (the collection writes it),
# and a cell with a record and no live run is never trained again (a sweep larger than one
# sitting, e.g. the size axis, is finished by running the same command again)
record_of() {
    qk_record_dir "$(basename -- "$(dirname -- "$(dirname -- "$1")")")" "$1"
}

# add_cells: per size, the initial models (train only), then the sweep's cells, each in
# seed-major order; with --sizes every cell is train-only (dev loss) and names its size
add_cells() {
    local seed s lr sz tag name size_opts
    for sz in "${SIZES[@]}"; do
        tag="$(size_tag "$sz")"
        size_opts=()
        [[ -z "$sz" ]] || size_opts=(--size "$sz")
        [[ -z "$SIZES_ARG" ]] || size_opts+=(--train-only)
        for seed in "${SEEDS[@]}"; do
            for s in "${SYSTEMS[@]}"; do
                name="$PAIR/$s/${tag:+$tag/}seed$seed-init"
                qk_grid_cell "$name" "${RUN_OF[$name]}" "$(record_of "${RUN_OF[$name]}")" "$PAIR" "$s" \
                    --seed "$seed" "${size_opts[@]+"${size_opts[@]}"}" "${INIT_OPTS[@]}" "${INIT_EXTRA[@]}"
            done
        done
        for seed in "${SEEDS[@]}"; do
            for lr in "${LRS[@]}"; do
                for s in "${SYSTEMS[@]}"; do
                    name="$PAIR/$s/${tag:+$tag/}seed$seed-lr$lr"
                    qk_grid_cell "$name" "${RUN_OF[$name]}" "$(record_of "${RUN_OF[$name]}")" "$PAIR" \
                        "$s" --seed "$seed" --lr "$lr" "${size_opts[@]+"${size_opts[@]}"}" "${CELL_OPTS[@]}"
                done
            done
        done
    done
}

# the report as a Slurm job after the cells: this script again, reporting only
REPORT_JOB=(bash "$SCRIPT_DIR/lr_sweep.sh" "$PAIR" --systems "$(IFS=,; echo "${SYSTEMS[*]}")"
    --lrs "$(IFS=,; echo "${LRS[*]}")" --seeds "$(IFS=,; echo "${SEEDS[*]}")" --profile "$PROFILE"
    --max-update "$MAX_UPDATE" --precision "$QK_PRECISION" --results-dir "$OUT" --report-only)
[[ -z "$SIZES_ARG" ]] || REPORT_JOB+=(--sizes "$(IFS=,; echo "${SIZE_WIDTHS[*]}")")

# report_cmds SIZE: COLLECT, REPORT and FIGURES for one size's runs, into SIZE_OUT (OUT itself
# without --sizes, OUT/dD with them; no test BLEU figure there: the size cells are not decoded)
report_cmds() {
    local sz="$1" tag name
    tag="$(size_tag "$sz")"
    SIZE_OUT="$OUT${tag:+/$tag}"
    SIZE_LABEL="$LABEL${sz:+-$sz}"
    COLLECT=("$QK_PY" -m qknorm_tools.collect runs --keep-unscored --work-dir "$QK_WORK_DIR"
        --out-dir "$SIZE_OUT" --ref "$PAIR=$REF" --records-base "$QK_WORK_DIR/results" --write-records)
    for name in "${INIT_NAMES[@]}" "${RUN_NAMES[@]}"; do
        [[ "${SIZE_OF[$name]}" != "$sz" ]] || COLLECT+=(--run "${RUN_OF[$name]}")
    done
    REPORT=("$QK_PY" -m qknorm_tools.evaluate lr-sensitivity --results "$SIZE_OUT/runs.json"
        --pair "$PAIR" --systems "$(IFS=,; echo "${SYSTEMS[*]}")" --out-dir "$SIZE_OUT")
    FIGURES=(loss maxlogit bleu)
    [[ -z "$SIZES_ARG" ]] || FIGURES=(loss maxlogit)
}
# the size axis' summary (--sizes): LR sensitivity against non-embedding parameters per system
SIZES_REPORT=("$QK_PY" -m qknorm_tools.lr_sweep_sizes --out-dir "$OUT" --pair "$PAIR"
    --title "$PAIR ($LABEL, CPU proxy sizes): LR sensitivity vs non-embedding parameters")
for i in "${!SIZE_WIDTHS[@]}"; do
    SIZES_REPORT+=(--size "${SIZE_WIDTHS[$i]}=$OUT/$(size_tag "${SIZES[$i]}")/lr_sweep.json")
done
PROXY_NOTE=""
[[ "$PROFILE_ARCH" != proxy ]] || PROXY_NOTE=", CPU proxy"  # on every figure of a proxy model
# figure_cmd FIG: FIG_CMD = the command drawing RESULTS/lr_sweep_FIG.png
figure_cmd() {
    local what
    case "$1" in
        loss) what="final dev loss vs peak learning rate" ;;
        maxlogit) what="max attention logit over training" ;;
        bleu) what="test BLEU vs peak learning rate" ;;
    esac
    FIG_CMD=("$QK_PY" -m qknorm_tools.plots "lr-$1" --json "$SIZE_OUT/lr_sweep.json"
        --out "$SIZE_OUT/lr_sweep_$1.png" --title "$PAIR ($SIZE_LABEL$PROXY_NOTE): $what")
}

N_RUNS=${#RUN_NAMES[@]}
if ((QK_STATUS)); then
    add_cells
    qk_launch_status
    exit 0
fi
qk_log "profile $LABEL on $PAIR: systems ${SYSTEMS[*]}; lrs ${LRS[*]}; seeds ${SEEDS[*]}; $N_RUNS runs + ${#INIT_NAMES[@]} initial-model runs, launcher $QK_LAUNCHER${QK_JOBS:+, $JOBS at a time}"

# ---------------------------------------------------------------------------------------------
# --dry-run: print every step

if ((DRY_RUN)); then
    echo "# lr_sweep.sh dry run: $PAIR, profile $LABEL, $N_RUNS runs (systems ${SYSTEMS[*]}; lrs ${LRS[*]}; seeds ${SEEDS[*]}), launcher $QK_LAUNCHER, $JOBS at a time"
    if ((REPORT_ONLY == 0)); then
        echo "# data (each step skips finished outputs)"
        qk_prepare_data 1 "$PAIR" "${DATA_OPT[@]+"${DATA_OPT[@]}"}"
        add_cells
        qk_check_records
        qk_launch --dry-run "$PROFILE" "${REPORT_JOB[@]}"
    fi
    if [[ "$QK_LAUNCHER" == local || "$REPORT_ONLY" == 1 ]]; then
        for sz in "${SIZES[@]}"; do
            report_cmds "$sz"
            echo "# report -> $SIZE_OUT/{runs.json,lr_sweep.md,lr_sweep.json,lr_sweep_*.png}"
            qk_print_cmd "${COLLECT[@]}"
            qk_print_cmd "${REPORT[@]}"
            for fig in "${FIGURES[@]}"; do
                figure_cmd "$fig"
                qk_print_cmd "${FIG_CMD[@]}"
            done
        done
        if [[ -n "$SIZES_ARG" ]]; then
            echo "# size axis -> $OUT/lr_sweep_sizes.{md,json,png}"
            qk_print_cmd "${SIZES_REPORT[@]}"
        fi
    fi
    exit 0
fi

# ---------------------------------------------------------------------------------------------
# data, initial models, cells

FAILED=() DIVERGED=()
if ((REPORT_ONLY == 0)); then
    qk_log "pair $PAIR: data preparation (finished steps are skipped)"
    qk_prepare_data 0 "$PAIR" "${DATA_OPT[@]+"${DATA_OPT[@]}"}" || die "data preparation of $PAIR failed"
    add_cells
    qk_check_records
    qk_launch "$PROFILE" "${REPORT_JOB[@]}"
    FAILED+=("${QK_LAUNCH_FAILED[@]+"${QK_LAUNCH_FAILED[@]}"}")
    if [[ "$QK_LAUNCHER" == slurm ]]; then  # the report is a job
        ((${#FAILED[@]} == 0)) || die "failed: ${FAILED[*]} (the other cells are submitted)"
        exit 0
    fi
    # a diverged run is a result (RUN/diverged, train.sh exit 3), not a failure
    for name in "${RUN_NAMES[@]}"; do
        [[ ! -f "${RUN_OF[$name]}/diverged" ]] || DIVERGED+=("$name")
    done
    ((${#DIVERGED[@]} == 0)) || qk_log "diverged (finished results): ${DIVERGED[*]}"
fi

# ---------------------------------------------------------------------------------------------
# report

for sz in "${SIZES[@]}"; do
    report_cmds "$sz"
    if "${COLLECT[@]}" && "${REPORT[@]}"; then
        : >"$SIZE_OUT/plots.log"
        for fig in "${FIGURES[@]}"; do  # secondary outputs: a failure is a warning
            figure_cmd "$fig"
            if "${FIG_CMD[@]}" >>"$SIZE_OUT/plots.log" 2>&1; then
                qk_log "$(tail -n 1 "$SIZE_OUT/plots.log")"
            else
                qk_warn "figure failed: $(tail -n 1 "$SIZE_OUT/plots.log") (see $SIZE_OUT/plots.log)"
            fi
        done
        qk_log "results in $SIZE_OUT"
    else
        FAILED+=("report${sz:+ $sz}")
    fi
done
if [[ -n "$SIZES_ARG" && ${#FAILED[@]} == 0 ]]; then
    "${SIZES_REPORT[@]}" || FAILED+=("size-axis report")
fi
((${#FAILED[@]} == 0)) || die "failed: ${FAILED[*]} (rerun the same command to resume)"
qk_log "done"
