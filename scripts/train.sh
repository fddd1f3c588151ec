#!/usr/bin/env bash
# scripts/train.sh: train one system (configs/systems/SYSTEM.sh) on one binarized pair with
# fairseq-train --user-dir <abs>/fairseq_qknorm, under a profile (configs/profiles/PROFILE.sh).
#   data/bin/PAIR  ->  runs/PAIR/PROFILE/SYSTEM/seedN/{checkpoints/,train.log,train.json}
# For QKNorm systems, g0 = log2(L^2 - L) uses L from data/bpe/PAIR/length_stats.json (97.5th
# percentile of BPE'd training lengths, written by scripts/bpe.sh).
# A finished run (train.json present) is skipped; a killed run resumes from
# checkpoints/checkpoint_last.pt (fairseq's own resume).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"

usage() {
    cat <<EOF
usage: scripts/train.sh PAIR SYSTEM [--profile P] [--seed N] [--max-update N] [--threads N]
                        [--dry-run] [--force] [-- EXTRA_FAIRSEQ_TRAIN_ARGS...]
  PAIR         one of: $(qk_known_pairs)
  SYSTEM       one of: $(qk_known_systems)
  --profile P  one of: $(qk_known_profiles) (default: cpu-proxy)
  --seed N     random seed (default 1)
  --max-update N  override the profile's update budget
  --threads N  intra-op CPU threads (default: the profile's THREADS)
  --dry-run    print the resolved fairseq-train command and exit
  --force      retrain even if the run is finished (its directory is replaced)
environment: QKNORM_WORK_DIR (outputs under \$QKNORM_WORK_DIR/runs), QKNORM_MAX_UPDATE
EOF
}

PAIR_ARG="" SYSTEM_ARG="" PROFILE_ARG=cpu-proxy SEED=1 MAX_UPDATE_ARG="" THREADS_ARG=""
DRY_RUN=0 FORCE=0 EXTRA=()
while (($#)); do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --profile) need_value "$@"; PROFILE_ARG="$2"; shift 2 ;;
        --seed) need_value "$@"; SEED="$2"; shift 2 ;;
        --max-update) need_value "$@"; MAX_UPDATE_ARG="$2"; shift 2 ;;
        --threads) need_value "$@"; THREADS_ARG="$2"; shift 2 ;;
        --dry-run) DRY_RUN=1; shift ;;
        --force) FORCE=1; shift ;;
        --) shift; EXTRA=("$@"); break ;;
        -*) qk_usage_error "unknown option '$1'" ;;
        *)
            if [[ -z "$PAIR_ARG" ]]; then PAIR_ARG="$1"
            elif [[ -z "$SYSTEM_ARG" ]]; then SYSTEM_ARG="$1"
            else qk_usage_error "unexpected argument '$1'"; fi
            shift ;;
    esac
done
[[ -n "$PAIR_ARG" && -n "$SYSTEM_ARG" ]] || qk_usage_error "PAIR and SYSTEM are required"
qk_is_uint "$SEED" || qk_usage_error "--seed must be a non-negative integer (no leading zeros, below 10^9), got '$SEED'"

load_pair_config "$PAIR_ARG"
load_system_config "$SYSTEM_ARG"
load_profile_config "$PROFILE_ARG"
[[ -z "$MAX_UPDATE_ARG" ]] || MAX_UPDATE="$MAX_UPDATE_ARG"
[[ -z "$THREADS_ARG" ]] || THREADS="$THREADS_ARG"
qk_is_uint "$MAX_UPDATE" \
    || qk_usage_error "--max-update must be a non-negative integer (no leading zeros, below 10^9), got '$MAX_UPDATE'"
[[ "$THREADS" =~ ^[1-9][0-9]*$ ]] || qk_usage_error "--threads must be a positive integer, got '$THREADS'"
if [[ "$MAX_UPDATE" == 0 && "${MAX_EPOCH:-0}" == 0 ]]; then
    qk_usage_error "--max-update 0 with profile $PROFILE (max-epoch 0) would never stop training"
fi

BIN="$QK_DATA/bin/$PAIR"
BPE_DIR="$QK_DATA/bpe/$PAIR"
RUN="$(qk_run_dir "$PAIR" "$PROFILE" "$SYSTEM" "$SEED")"
case "${PROFILE_ARCH:-}" in  # which of the system's named archs the profile's sizes belong to
    proxy) ARCH="$SYSTEM_ARCH_PROXY" ;;
    paper) ARCH="$SYSTEM_ARCH_PAPER" ;;
    *) die "profile $PROFILE sets PROFILE_ARCH='${PROFILE_ARCH:-}', expected proxy or paper" ;;
esac

QKNORM_FLAGS=()
G0_NOTE=""
if [[ "$SYSTEM_QKNORM" == 1 ]]; then
    if [[ -f "$BPE_DIR/length_stats.json" ]]; then
        L="$(qk_json_field "$BPE_DIR/length_stats.json" L)"
    elif ((DRY_RUN)); then
        L="$PAPER_L"  # dry run before BPE: show the command with the authors' L
        G0_NOTE=" (dry run without data/bpe/$PAIR: authors' L shown)"
    else
        die "$BPE_DIR/length_stats.json not found: run scripts/bpe.sh $PAIR first (QKNorm g0 needs L)"
    fi
    QKNORM_FLAGS=(--qk-norm-length "$L")
    G0_NOTE="QKNorm g0 = log2(L^2 - L) with L = $L (authors' L for $PAIR: $PAPER_L)$G0_NOTE"
fi

CMD=(fairseq-train "$BIN"
    --user-dir "$QK_REPO_ROOT/fairseq_qknorm"
    --task "${TRAIN_TASK:-translation}" "${TASK_FLAGS[@]+"${TASK_FLAGS[@]}"}"
    --source-lang "$SRC" --target-lang "$TGT"
    --arch "$ARCH" "${SYSTEM_FLAGS[@]}" "${QKNORM_FLAGS[@]}"
    --encoder-layers "$MODEL_LAYERS" --decoder-layers "$MODEL_LAYERS"
    --encoder-attention-heads "$MODEL_HEADS" --decoder-attention-heads "$MODEL_HEADS"
    --encoder-embed-dim "$MODEL_EMBED_DIM" --decoder-embed-dim "$MODEL_EMBED_DIM"
    --encoder-ffn-embed-dim "$MODEL_FFN_DIM" --decoder-ffn-embed-dim "$MODEL_FFN_DIM"
    --dropout "$MODEL_DROPOUT"
    "${OPTIM_FLAGS[@]}"
    --criterion label_smoothed_cross_entropy --label-smoothing "$LABEL_SMOOTHING"
    --max-tokens "$MAX_TOKENS" --max-update "$MAX_UPDATE" --max-epoch "$MAX_EPOCH"
    "${VALID_FLAGS[@]}"
    # fairseq (upstream main) drops a last batch that is not a multiple of this value, also in
    # validation: 1 keeps every sentence
    --required-batch-size-multiple 1
    --seed "$SEED" --save-dir "$RUN/checkpoints" --no-epoch-checkpoints
    --log-format simple --log-interval 50 --tensorboard-logdir "$RUN/tensorboard"
    --attn-stats-interval 100 --num-workers 0
    "${EXTRA[@]+"${EXTRA[@]}"}")

print_cmd() { printf '%q ' "$@"; printf '\n'; }

if ((DRY_RUN)); then
    [[ -z "$G0_NOTE" ]] || qk_log "$G0_NOTE"
    print_cmd env "OMP_NUM_THREADS=$THREADS" "${CMD[@]}"
    exit 0
fi

[[ -f "$BIN/.done" ]] || die "$BIN is not binarized: run scripts/binarize.sh $PAIR first"
NEW_COMMAND="$(CMD[0]=fairseq-train; print_cmd "${CMD[@]}")"
if [[ "$FORCE" == 0 && -f "$RUN/command.txt" ]] \
    && [[ "$(sed '1s/^[^ ]*fairseq-train /fairseq-train /' "$RUN/command.txt")" != "$NEW_COMMAND" ]]; then
    # a finished (or resumable) run made with other settings is never reused silently
    die "$RUN was trained with another command (see $RUN/command.txt); use --force to retrain it, or another --seed/--max-update"
fi
if [[ -f "$RUN/train.json" && "$FORCE" == 0 ]]; then
    qk_log "skip: $RUN is finished ($(qk_json_field "$RUN/train.json" updates) updates); --force to retrain"
    exit 0
fi
if ((FORCE)) && [[ -d "$RUN" ]]; then
    rm -rf -- "$RUN"
fi
mkdir -p -- "$RUN"
FAIRSEQ_TRAIN="$(qk_tool fairseq-train)"
CMD[0]="$FAIRSEQ_TRAIN"
print_cmd "${CMD[@]}" >"$RUN/command.txt"
qk_log "training $SYSTEM ($SYSTEM_DESC; $PAPER_ROW) on $PAIR, profile $PROFILE, seed $SEED -> $RUN"
[[ -z "$G0_NOTE" ]] || qk_log "$G0_NOTE"
[[ ! -f "$RUN/checkpoints/checkpoint_last.pt" ]] || qk_log "resuming from $RUN/checkpoints/checkpoint_last.pt"

START="$(date +%s)"
set +e
OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" "${CMD[@]}" 2>&1 | tee -a "$RUN/train.log"
RC="${PIPESTATUS[0]}"
set -e
WALL=$(($(date +%s) - START))
PREV_WALL=0
[[ ! -f "$RUN/wall_seconds" ]] || PREV_WALL="$(cat "$RUN/wall_seconds")"
echo $((PREV_WALL + WALL)) >"$RUN/wall_seconds"  # accumulated over resumes
((RC == 0)) || die "fairseq-train failed (exit $RC) for $RUN; see $RUN/train.log (rerun to resume)"
[[ -f "$RUN/checkpoints/checkpoint_last.pt" ]] || die "fairseq-train wrote no checkpoint in $RUN/checkpoints"

"$QK_PY" - "$RUN" "$PAIR" "$PROFILE" "$SYSTEM" "$SEED" "$ARCH" "${L:-}" "$PAPER_L" <<'PY'
import json, math, os, re, sys
run, pair, profile, system, seed, arch, L, paper_L = sys.argv[1:]
log = open(os.path.join(run, "train.log"), encoding="utf-8", errors="replace").read()
updates = [int(m) for m in re.findall(r"num_updates[ =](\d+)", log)]
info = {
    "pair": pair, "profile": profile, "system": system, "seed": int(seed), "arch": arch,
    "updates": max(updates) if updates else 0,
    "wall_seconds": int(open(os.path.join(run, "wall_seconds")).read()),
    "qknorm_L": int(L) if L else None, "paper_L": int(paper_L),
    "qknorm_g0": math.log2(int(L) ** 2 - int(L)) if L else None,
}
tmp = os.path.join(run, "train.json.tmp")
json.dump(info, open(tmp, "w"), indent=2)
os.replace(tmp, os.path.join(run, "train.json"))
PY
qk_log "finished $RUN ($(qk_json_field "$RUN/train.json" updates) updates, $(cat "$RUN/wall_seconds") s)"
