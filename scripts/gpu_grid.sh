#!/usr/bin/env bash
# scripts/gpu_grid.sh: the decisive 2x2 (scripts/ablation.sh) on one GPU machine, many cells at
# once, in waves of whole seeds, within a wall-clock budget; the records come back as one archive.
#
# A d-128 model leaves a GPU mostly idle, so --jobs cells share it (ablation.sh --cells-per-gpu).
# A wave is --seeds-per-wave seeds of all four systems (seed s gives every system the same batch
# order: the paired design of docs/decisive-2x2.md). A wave starts only while the budget leaves
# time for it (the first wave's wall time, measured, is the estimate); which seeds finish is
# decided by the clock, never by the results. Each wave is an ordinary ablation.sh run: it trains,
# decodes, and writes results/PROFILE/PAIR/records/ for its finished cells.
# Output (OUT): gpu-grid.tar.gz (results/PROFILE/PAIR/records/ and each run directory without
# checkpoints), gpu-grid.log (waves, times, the GPU, the packages), gpu-grid.json.
set -euo pipefail

usage() {
    cat <<USAGE
usage: scripts/gpu_grid.sh [--dry-run] [--wheels DIR] [--out DIR] [--profile P] [--pair PAIR]
                           [--first-seed N] [--seeds-per-wave K] [--max-waves W] [--jobs J]
                           [--budget-s S] [--hard-s H] [--probe N]
  --dry-run        print every command (install, data, each wave's ablation.sh, packing); run nothing
  --wheels DIR     install the Python packages in DIR (*.whl) into WORK/site first (pip --no-index)
  --out DIR        where the archive and log go (default WORK/results/gpu-grid-DATE); created
                   only after the pair, the profile and the GPU (nvidia-smi) are checked
  --profile P      the grid's profile (default gpu-fixed-d128)
  --pair PAIR      default gl-en
  --first-seed N   first seed of the first wave (default 1); wave w has seeds N+(w-1)K .. N+wK-1
  --seeds-per-wave K  seeds per wave, all four systems each (default 4: 16 cells)
  --max-waves W    at most W waves (default 10)
  --jobs J         cells at once on the GPU (default 16)
  --budget-s S     start no wave unless it is estimated to end S seconds after the start (default 500)
  --hard-s H       stop a wave still running H seconds after the start; its finished cells keep
                   their run directories (default 540)
  --probe N        no grid: time N updates of twt's fairseq-train alone, then --jobs of them at
                   once, and print the seconds per update of each (what one wave will take)
environment: QKNORM_WORK_DIR (runs/ and results/ go there; default the repository)
USAGE
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# the scripts' command-line parsing and messages (scripts/lib/cli.sh) and, below, the config
# names (scripts/lib/config.sh), not the rest of lib.sh: the waves are this script's own
# processes, ablation.sh's job pool runs inside each
QK_SCRIPT_NAME=gpu_grid
# shellcheck source=scripts/lib/cli.sh
source "$ROOT/scripts/lib/cli.sh"
DRY=0 WHEELS="" OUT="" PROFILE=gpu-fixed-d128 PAIR=gl-en FIRST=1 PER_WAVE=4 MAX_WAVES=10 JOBS=16
BUDGET=500 HARD=540 PROBE=0
qk_parse_args "--dry-run DRY=1" "--wheels WHEELS" "--out OUT" "--profile PROFILE" "--pair PAIR" \
    "--first-seed FIRST" "--seeds-per-wave PER_WAVE" "--max-waves MAX_WAVES" "--jobs JOBS" \
    "--budget-s BUDGET" "--hard-s HARD" "--probe PROBE" -- "$@"
((${#QK_REST[@]} == 0)) || qk_usage_error "unexpected argument after --: '${QK_REST[0]}'"
WORK="${QKNORM_WORK_DIR:-$ROOT}"
OUT="${OUT:-$WORK/results/gpu-grid-$(date -u +%Y%m%d-%H%M)}"
PY="${PYTHON:-python3}"
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

# the pair and the profile, by the project's config loader (scripts/lib/config.sh's
# qk_require_name: a usage error naming the value and the known names), before anything runs
QK_PY="$PY" QK_REPO_ROOT="$ROOT" QK_WORK_DIR="$WORK"
# shellcheck source=scripts/lib/config.sh
source "$ROOT/scripts/lib/config.sh"
qk_check_options "posint:--first-seed=$FIRST" "posint:--seeds-per-wave=$PER_WAVE" \
    "posint:--max-waves=$MAX_WAVES" "posint:--jobs=$JOBS" "posint:--budget-s=$BUDGET" \
    "posint:--hard-s=$HARD" "uint:--probe=$PROBE"
((BUDGET <= HARD)) || qk_usage_error "--budget-s $BUDGET must not exceed --hard-s $HARD"
qk_require_name pairs "$PAIR"
qk_require_name profiles "$PROFILE"

# the machine, before the data and before any output (a failed check leaves nothing behind)
if ((DRY)); then
    GPU="(dry run)"
else
    if ! GPU="$(nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader | head -n 1)" \
        || [[ -z "$GPU" ]]; then
        die "gpu_grid.sh: nvidia-smi failed: no NVIDIA GPU here (--dry-run prints the commands without one)"
    fi
fi
shopt -s nullglob
wheels=()
if [[ -n "$WHEELS" ]]; then
    wheels=("$WHEELS"/*.whl)
    ((${#wheels[@]} || DRY)) || die "gpu_grid.sh: no *.whl in $WHEELS"
fi
shopt -u nullglob

run() {  # print, and run unless --dry-run
    printf '+ %s\n' "$(printf '%q ' "$@")"
    ((DRY)) || "$@"
}
log() { printf '[gpu_grid %4ds] %s\n' "$SECONDS" "$*" | tee -a "$LOG"; }
LOG=/dev/null
if ((!DRY)); then
    mkdir -p "$OUT"
    LOG="$OUT/gpu-grid.log"
    : >"$LOG"
    log "GPU: $GPU; CPU: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2 | xargs), $(nproc) cores"
fi

# 1. packages (fairseq and what the image lacks) from the wheels brought along
if [[ -n "$WHEELS" ]]; then
    run "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
        --target "$WORK/site" "${wheels[@]:-$WHEELS/NAME.whl}"
    export PYTHONPATH="$PYTHONPATH:$WORK/site" PATH="$WORK/site/bin:$PATH"
fi
export QKNORM_PYTHON="$PY"

# 2. the data: carried (data/raw, data/bpe, data/bin) or prepared here (each step skips finished outputs)
if ((DRY)) || [[ ! -f "$WORK/data/bin/$PAIR/identity.json" ]]; then
    run scripts/prepare_data.sh "$PAIR"
    run scripts/bpe.sh "$PAIR"
    run scripts/binarize.sh "$PAIR"
fi

# 3. the packages the grid runs with
if ((!DRY)); then
    log "packages: $("$PY" -c 'import torch, fairseq, sacrebleu; print("torch", torch.__version__, "cuda", torch.version.cuda, "fairseq", fairseq.__version__, "sacrebleu", sacrebleu.__version__)')"
fi

# 4a. --probe: N updates of one training alone, then JOBS at once (each with its own seed)
if ((PROBE)); then
    for k in 1 "$JOBS"; do
        start=$SECONDS
        pids=()
        for ((i = 1; i <= k; i++)); do
            if ((DRY)); then
                run scripts/train.sh "$PAIR" twt --profile "$PROFILE" --seed "$((1000 + i))" --max-update "$PROBE" --threads 1
                continue
            fi
            scripts/train.sh "$PAIR" twt --profile "$PROFILE" --seed "$((1000 * k + i))" \
                --max-update "$PROBE" --threads 1 >"$OUT/probe-$k-$i.log" 2>&1 &
            pids+=($!)
        done
        fails=0
        for pid in "${pids[@]+"${pids[@]}"}"; do wait "$pid" || fails=$((fails + 1)); done
        ((DRY)) && break
        s=$((SECONDS - start))
        log "probe: $k training(s) of $PROBE updates at once: ${s}s wall ($fails failed; $(awk -v s="$s" -v n="$PROBE" 'BEGIN { printf "%.1f ms", 1000 * s / n }') per update, start-up included)"
    done
    ((DRY)) || nvidia-smi --query-gpu=utilization.gpu,memory.used --format=csv | tee -a "$LOG"
    exit 0
fi

# 4. the waves
wave_s=0 waves_done=0 seeds_started=()
for ((w = 0; w < MAX_WAVES; w++)); do
    lo=$((FIRST + w * PER_WAVE)) hi=$((FIRST + (w + 1) * PER_WAVE - 1))
    seeds="$(seq -s, "$lo" "$hi")"
    if ((!DRY && w > 0 && SECONDS + wave_s * 11 / 10 > BUDGET)); then
        log "no wave $((w + 1)) (seeds $seeds): ${SECONDS}s + the last wave's ${wave_s}s x 1.1 > budget ${BUDGET}s"
        break
    fi
    remaining=$((HARD - SECONDS))
    ((DRY || remaining > 0)) || break
    log "wave $((w + 1)): seeds $seeds, $JOBS cells at once on one GPU (stopped at ${HARD}s)"
    start=$SECONDS
    rc=0
    run timeout --signal=TERM --kill-after=20 "$((DRY ? HARD : remaining))" \
        scripts/ablation.sh "$PAIR" --profile "$PROFILE" --seeds "$seeds" --jobs "$JOBS" \
        --cells-per-gpu "$JOBS" --no-significance || rc=$?
    wave_s=$((SECONDS - start))
    seeds_started+=("$seeds")
    log "wave $((w + 1)) ended after ${wave_s}s (exit $rc)"
    ((DRY)) && ((w + 1 >= 2)) && { echo "# ... up to --max-waves $MAX_WAVES waves while the budget allows"; break; }
    ((rc == 0)) || break
    waves_done=$((waves_done + 1))
done

# 5. the archive: records and run directories without checkpoints or TensorBoard files
RUNS="runs/$PAIR/$PROFILE"
RECORDS="results/$PROFILE/$PAIR/records"
run tar -C "$WORK" -czf "$OUT/gpu-grid.tar.gz" --exclude=checkpoints --exclude=tensorboard \
    --ignore-failed-read "$RECORDS" "$RUNS"
if ((!DRY)); then
    "$PY" - "$OUT/gpu-grid.json" "$GPU" "$waves_done" "$SECONDS" "${seeds_started[@]}" <<'PYEOF'
import json, sys
out, gpu, waves, seconds, *seeds = sys.argv[1:]
json.dump({"gpu": gpu, "waves_completed": int(waves), "seconds": int(seconds),
           "seeds_started": seeds}, open(out, "w"), indent=2)
PYEOF
    log "archive: $OUT/gpu-grid.tar.gz ($(du -h "$OUT/gpu-grid.tar.gz" | cut -f1))"
fi
