#!/usr/bin/env bash
# scripts/demo.sh: the main job. One pair from raw text to a BLEU table on CPU:
#   prepare_data -> bpe -> binarize -> train the TWT baseline (transformer_twt_proxy) and the
#   QKNorm paper model (transformer_qknorm_paper_proxy) with the same budget and seed, side by
#   side (one thread each) -> decode test (beam 4) -> score -> results/PAIR/demo.{md,json}.
# Every step skips finished outputs, so a rerun after an interruption continues where it stopped.
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"

usage() {
    cat <<EOF
usage: scripts/demo.sh [PAIR] [--seed N] [--max-update N] [--data-dir DIR]
  PAIR          default gl-en (the pair whose data ships in ../shared/data)
  --seed N      seed for both systems (default 1)
  --max-update N  update budget per system (default: the cpu-proxy profile's, 1200)
  --data-dir D  local corpus directory (default: \$QKNORM_DATA_DIR or ../shared/data)
EOF
}

PAIR_ARG=gl-en SEED=1 MAX_UPDATE_OPT=() DATA_OPT=()
while (($#)); do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --seed) need_value "$@"; SEED="$2"; shift 2 ;;
        --max-update) need_value "$@"; MAX_UPDATE_OPT=(--max-update "$2"); shift 2 ;;
        --data-dir) need_value "$@"; DATA_OPT=(--data-dir "$2"); shift 2 ;;
        -*) qk_usage_error "unknown option '$1'" ;;
        *) PAIR_ARG="$1"; shift ;;
    esac
done
load_pair_config "$PAIR_ARG"

SYSTEMS=(twt qknorm_paper)
T0="$(date +%s)"
bash "$SCRIPT_DIR/prepare_data.sh" "$PAIR" "${DATA_OPT[@]+"${DATA_OPT[@]}"}"
bash "$SCRIPT_DIR/bpe.sh" "$PAIR"
bash "$SCRIPT_DIR/binarize.sh" "$PAIR"

# run_both STEP ARGS...: run scripts/STEP.sh for both systems at once, one thread each (same
# machine conditions for both; more total throughput on 2 cores than two 2-thread runs in a row).
run_both() {
    local step="$1" i failed=0 pids=()
    shift
    for system in "${SYSTEMS[@]}"; do
        bash "$SCRIPT_DIR/$step.sh" "$PAIR" "$system" --profile cpu-proxy --seed "$SEED" \
            --threads 1 "$@" &
        pids+=("$!")
    done
    for i in "${!pids[@]}"; do
        wait "${pids[$i]}" || { qk_warn "$step ${SYSTEMS[$i]} failed"; failed=1; }
    done
    ((failed == 0)) || die "$step failed (logs in $QK_WORK_DIR/runs/$PAIR/cpu-proxy/*/seed$SEED/); rerun to resume"
}

run_both train "${MAX_UPDATE_OPT[@]+"${MAX_UPDATE_OPT[@]}"}"
run_both evaluate >/dev/null

RUN_ARGS=()
for system in "${SYSTEMS[@]}"; do
    RUN_ARGS+=(--run "$(qk_run_dir "$PAIR" cpu-proxy "$system" "$SEED")")
done
OUT="$QK_WORK_DIR/results/$PAIR"
"$QK_PY" -m fairseq_qknorm.summarize "${RUN_ARGS[@]}" --out-dir "$OUT" --name demo --baseline twt
qk_log "wrote $OUT/demo.md and $OUT/demo.json; total wall time $((($(date +%s) - T0) / 60)) min"
qk_log "CPU proxy (3+3 layers, d 256, short budget): not comparable to the papers' full-size numbers"
