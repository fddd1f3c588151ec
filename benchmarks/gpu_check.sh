#!/usr/bin/env bash
# benchmarks/gpu_check.sh: paper-size gl-en fairseq-train on one NVIDIA GPU, offline, < 9 min.
# Writes OUT/gpu-check.{json,md}: target tokens/s of twt, qknorm_paper and stock fairseq in fp16
# and bf16, fairseq's and bucketed batching, bf16 + torch.compile; the fraction of the GPU's
# bf16 peak, peak memory, and whether every logged loss is finite. The plan and the report are
# benchmarks/gpu_check.py (tested); this file is plumbing: wheels, data, the bounded runs.
set -euo pipefail

usage() {
    cat <<USAGE
usage: benchmarks/gpu_check.sh [--dry-run] [--wheels DIR] [--out DIR] [--updates N] [--budget-s S]
  --dry-run     print every command (install, data, each fairseq-train, report); run nothing
  --wheels DIR  install the missing Python packages from the wheels in DIR (pip --no-index)
  --out DIR     results folder (default benchmarks/results/gpu-check-DATE)
  --updates N   updates per measurement (default 100; the loss check uses the same runs)
  --budget-s S  start no run S seconds after the script started (default 400); each run is capped at 120 s
USAGE
}

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DRY=0 WHEELS="" OUT="" UPDATES=100 BUDGET=400 RUN_CAP=120
while (($#)); do
    case "$1" in
        --dry-run) DRY=1 ;;
        --wheels) WHEELS="${2:?}"; shift ;;
        --out) OUT="${2:?}"; shift ;;
        --updates) UPDATES="${2:?}"; shift ;;
        --budget-s) BUDGET="${2:?}"; shift ;;
        -h | --help) usage; exit 0 ;;
        *) echo "gpu_check.sh: unknown argument: $1" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
[[ "$UPDATES" =~ ^[1-9][0-9]*$ && "$BUDGET" =~ ^[0-9]+$ ]] || {
    echo "gpu_check.sh: --updates and --budget-s take positive integers" >&2; exit 2; }
OUT="${OUT:-$ROOT/benchmarks/results/gpu-check-$(date -u +%Y%m%d-%H%M)}"
WORK="${QKNORM_WORK_DIR:-$ROOT}"
DATA="$WORK/data/bin/gl-en"
PY="${PYTHON:-python}"
cd "$ROOT"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}"

run() {  # print, and run unless --dry-run
    printf '+ %s\n' "$(printf '%q ' "$@")"
    ((DRY)) || "$@"
}

# 1. packages: only those missing, from the wheels brought along
if [[ -n "$WHEELS" ]]; then
    missing=()
    for mod in fairseq:ve-fairseq sacrebleu:sacrebleu subword_nmt:subword-nmt; do
        "$PY" -c "import ${mod%%:*}" 2>/dev/null || missing+=("${mod#*:}")
    done
    if ((${#missing[@]})) || ((DRY)); then
        run "$PY" -m pip install --no-index --find-links "$WHEELS" "${missing[@]:-ve-fairseq}"
    fi
fi

# 2. data: prepared here from ../shared/data when missing
if [[ ! -f "$DATA/dict.en.txt" ]] || ((DRY)); then
    run scripts/prepare_data.sh gl-en
    run scripts/bpe.sh gl-en
    run scripts/binarize.sh gl-en
fi

# 3. the GPU
if ((DRY)); then
    GPU="(dry run)"
else
    GPU="$(nvidia-smi --query-gpu=name --format=csv,noheader | head -n 1)" || {
        echo "gpu_check.sh: nvidia-smi failed: no NVIDIA GPU here" >&2; exit 1; }
    mkdir -p "$OUT"
fi
echo "[gpu_check] GPU: $GPU; results: $OUT"

# 4. the measurements, each bounded (RUN_CAP s) and none started past the budget
while IFS=$'\t' read -r name args; do
    eval "argv=($args)"
    if ((!DRY && SECONDS > BUDGET)); then
        echo "skipped: time budget ($BUDGET s) spent" > "$OUT/$name.status"
        echo "[gpu_check] $name: skipped (budget)"
        continue
    fi
    if ((DRY)); then
        run timeout "$RUN_CAP" "$PY" -m benchmarks.gpu_train "${argv[@]}"
        continue
    fi
    echo "[gpu_check] $name"
    if timeout "$RUN_CAP" "$PY" -m benchmarks.gpu_train "${argv[@]}" > "$OUT/$name.log" 2>&1; then
        echo ok > "$OUT/$name.status"
    else
        echo "failed (exit $?): see $name.log" > "$OUT/$name.status"
    fi
done < <("$PY" -m benchmarks.gpu_check plan "$DATA" "$ROOT/fairseq_qknorm" --updates "$UPDATES")

# 5. the report
VOCAB="$( ((DRY)) && echo 2048 || wc -l < "$DATA/dict.en.txt")"
run "$PY" -m benchmarks.gpu_check report "$OUT" --gpu "$GPU" --vocab "$((VOCAB + 4))" \
    --updates "$UPDATES"
