#!/usr/bin/env bash
# scripts/demo.sh: the main job. One pair from raw text to a BLEU table on CPU:
#   prepare_data -> bpe -> binarize -> train the TWT baseline (transformer_twt_proxy) and the
#   QKNorm paper model (transformer_qknorm_paper_proxy) with the same budget and seed, side by
#   side (one thread each) -> decode test (beam 4) -> score -> results/LABEL/PAIR/:
#     demo.md, demo.json    one row per system (python -m qknorm_tools.collect runs --runs-table)
#     runs.json             the run records
#     demo_compare.json     paired bootstrap + approximate randomization, QKNorm vs TWT
#     demo_curves.png       train/dev loss; demo_g.png: QKNorm g per module;
#     demo_health.png       attention entropy / max logit per module; demo_bleu.png: BLEU bars
# LABEL is cpu-proxy, or cpu-proxy-max-update-N for another budget (never over the default's).
# Every step skips finished outputs, so a rerun after an interruption continues where it
# stopped; Ctrl-C stops both trainings.
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"

usage() {
    cat <<EOF
usage: scripts/demo.sh [PAIR] [--seed N] [--max-update N] [--data-dir DIR] [--dry-run]
  PAIR          default gl-en (the pair whose data ships in ../shared/data); any pair, the
                reverse direction of one (en-gl) or your own configs/pairs/PAIR.toml
  --seed N      seed for both systems (default 1)
  --max-update N  update budget per system (default: the cpu-proxy profile's, 1200); runs and
                results of another budget go to runs/PAIR/cpu-proxy-max-update-N/ and
                results/cpu-proxy-max-update-N/PAIR/
  --data-dir D  local corpus directory (default: \$QKNORM_DATA_DIR or ../shared/data)
  --dry-run     print every step (the data steps, each system's fairseq-train and
                fairseq-generate commands, the report's) without running any
environment: QKNORM_WORK_DIR, QKNORM_MAX_UPDATE, QKNORM_DATA_DIR, QKNORM_BF16 (default auto:
  bf16 autocast where measured faster on this CPU, measured once before training, about a
  minute, cached; 0 fp32, 1 bf16; docs/bf16.md)
EOF
}

# the demo's total wall time counts from here: the checks, the data steps, the bf16 measurement
# (about 2 minutes where it runs), both trainings, decoding and the report
T0="$(date +%s)"
PAIR_ARG=gl-en SEED=1 MAX_UPDATE_ARG="" DATA_DIR_ARG="" DRY_RUN=0
qk_parse_args "@PAIR_ARG?" "--seed SEED" "--max-update MAX_UPDATE_ARG" "--data-dir DATA_DIR_ARG" \
    "--dry-run DRY_RUN=1" -- "$@"
# every option and setting is checked before the first data step (a typo never costs the
# data preparation first)
OPTS=("uint:--seed=$SEED")
[[ -z "${QKNORM_THREADS:-}" ]] || OPTS+=("posint:QKNORM_THREADS=$QKNORM_THREADS")
qk_check_options "${OPTS[@]}"
if [[ -n "$DATA_DIR_ARG" ]]; then
    [[ -d "$DATA_DIR_ARG" ]] || qk_usage_error "--data-dir '$DATA_DIR_ARG' is not a directory"
elif [[ -n "${QKNORM_DATA_DIR:-}" ]]; then
    [[ -d "$QKNORM_DATA_DIR" ]] || qk_usage_error "QKNORM_DATA_DIR='$QKNORM_DATA_DIR' is not a directory"
fi
load_pair_config "$PAIR_ARG"
load_profile_config cpu-proxy --max-update "$MAX_UPDATE_ARG" --check-stops  # (no epoch limit)
LABEL="$(qk_run_label)"
THREADS=1  # each training's: the two run at once (CELL_OPTS); the bf16 measurement uses it too
# bf16 autocast where measured faster on this CPU (cpu-proxy: PROFILE_BF16=auto); a dry run
# measures nothing (a cached verdict, else fp32)
if ((DRY_RUN)); then qk_resolve_bf16 --cached-only; else qk_resolve_bf16; fi
BASELINE=twt
SYSTEMS=(twt qknorm_paper)
OUT="$QK_WORK_DIR/results/$LABEL/$PAIR"
REF="$QK_DATA/raw/$PAIR/test.$TGT"
CELL_OPTS=(--profile cpu-proxy --seed "$SEED" --max-update "$MAX_UPDATE" --threads "$THREADS" --precision "$QK_PRECISION")

for tool in subword-nmt fairseq-preprocess fairseq-train fairseq-generate; do
    qk_tool "$tool" >/dev/null
done
for system in "${SYSTEMS[@]}"; do  # train.sh's own checks (budget, threads, ...), nothing run
    err="$(bash "$SCRIPT_DIR/train.sh" "$PAIR" "$system" "${CELL_OPTS[@]}" --dry-run 2>&1 >/dev/null)" \
        || { rc=$?; printf '%s\n' "$err" >&2; exit "$rc"; }
done

# run_or_print CMD...: runs CMD, or with --dry-run prints it
run_or_print() {
    if ((DRY_RUN)); then qk_print_cmd "$@"; else "$@"; fi
}

# report: the results of both runs -> OUT (run_or_print: what --dry-run prints is what runs)
report() {
    local system run
    local -a run_args=() logs=() qk_logs=() hyps=()
    local -A run_dir=()
    qk_run_dirs run_dir "$LABEL" "$PAIR" "$(IFS=,; echo "${SYSTEMS[*]}")" "$SEED"
    for system in "${SYSTEMS[@]}"; do
        run="${run_dir[$PAIR/$system/$SEED]}"
        run_args+=(--run "$run")
        logs+=("$system=$run/train.log")
        [[ "$(load_system_config "$system" && echo "$SYSTEM_QKNORM")" == 0 ]] || qk_logs+=("$system=$run/train.log")
        hyps+=("$system=${run#"$QK_WORK_DIR"/}/test.hyp")  # relative to the work dir (the JSON's paths)
    done
    run_or_print "$QK_PY" -m qknorm_tools.collect runs "${run_args[@]}" --work-dir "$QK_WORK_DIR" \
        --out-dir "$OUT" --ref "$PAIR=$REF" --require-all --runs-table demo --baseline "$BASELINE"
    # run from the work dir, so that the JSON holds paths relative to it; --allow-few-lines: the
    # demo also runs on own (small) test sets; paired tests on fewer than 300 sentences are then
    # flagged (few_lines, a warning) instead of refused
    local -a compare=("$QK_PY" -m qknorm_tools.evaluate compare --ref "${REF#"$QK_WORK_DIR"/}"
        --baseline "${hyps[0]}" --system "${hyps[@]:1}" --json --allow-few-lines
        --out "$OUT/demo_compare.json")
    if ((DRY_RUN)); then
        printf '(cd %q && %s)\n' "$QK_WORK_DIR" "$(qk_print_cmd "${compare[@]}")"
    else
        (cd "$QK_WORK_DIR" && "${compare[@]}")
    fi
    run_or_print "$QK_PY" -m qknorm_tools.plots curves --log "${logs[@]}" --out "$OUT/demo_curves.png"
    run_or_print "$QK_PY" -m qknorm_tools.plots g --log "${qk_logs[@]}" --out "$OUT/demo_g.png"
    run_or_print "$QK_PY" -m qknorm_tools.plots health --log "${logs[@]}" --out "$OUT/demo_health.png"
    run_or_print "$QK_PY" -m qknorm_tools.plots bleu-bars --json "$OUT/demo_compare.json" \
        --out "$OUT/demo_bleu.png" --title "$PAIR ($LABEL, seed $SEED): tokenized BLEU, 95% bootstrap CI"
}

# data_steps RUNNER: the data steps (each skips finished outputs), each as RUNNER CMD...
data_steps() {
    "$1" bash "$SCRIPT_DIR/prepare_data.sh" "$PAIR" ${DATA_DIR_ARG:+--data-dir "$DATA_DIR_ARG"}
    "$1" bash "$SCRIPT_DIR/bpe.sh" "$PAIR"
    "$1" bash "$SCRIPT_DIR/binarize.sh" "$PAIR"
}

if ((DRY_RUN)); then
    echo "# 1. data (each step skips finished outputs)"
    data_steps qk_print_cmd
    echo "# 2. both systems side by side, one thread each: train, then decode and score test"
    for system in "${SYSTEMS[@]}"; do
        echo "# $system"
        bash "$SCRIPT_DIR/train.sh" "$PAIR" "$system" "${CELL_OPTS[@]}" --dry-run
        bash "$SCRIPT_DIR/evaluate.sh" "$PAIR" "$system" "${CELL_OPTS[@]}" --dry-run
    done
    echo "# 3. the report -> $OUT/"
    report
    exit 0
fi

data_steps qk_run

# both systems at once, one thread each (same machine conditions for both; more total
# throughput on 2 cores than two 2-thread runs in a row); output lines prefixed by the system
qk_pool_init "${#SYSTEMS[@]}"
for system in "${SYSTEMS[@]}"; do
    qk_pool_submit "$system" "" qk_cell "$PAIR" "$system" "${CELL_OPTS[@]}"
done
qk_pool_wait
((${#QK_POOL_FAILED[@]} == 0)) \
    || die "failed: ${QK_POOL_FAILED[*]} (logs in $QK_WORK_DIR/runs/$PAIR/$LABEL/*/seed$SEED/); rerun to resume"

report
WALL=$(($(date +%s) - T0))
qk_log "wrote $OUT/{demo.md,demo.json,runs.json,demo_compare.json,demo_curves.png,demo_g.png,demo_health.png,demo_bleu.png}; total wall time $((WALL / 60)) min $((WALL % 60)) s (from the start of scripts/demo.sh: data, bf16 measurement, training, decoding, report)"
qk_log "CPU proxy (3+3 layers, d 256, short budget): not comparable to the papers' full-size numbers"
