#!/usr/bin/env bash
# scripts/train.sh: train one system (configs/systems/SYSTEM.sh) on one binarized pair with
# fairseq-train --user-dir <abs>/fairseq_qknorm, under a profile (configs/profiles/PROFILE.sh).
#   data/bin/PAIR  ->  runs/PAIR/LABEL/SYSTEM/seedN/{checkpoints/,train.log,train.json,command.txt}
# LABEL is the profile, or PROFILE-max-update-N for another budget than the profile's.
# The arch is the system's named arch family at the profile's size (scripts/lib.sh:qk_arch); no
# size flag is passed. For QKNorm systems the data's L (data/bpe/PAIR/length_stats.json, the
# 97.5th percentile of BPE'd training lengths from scripts/bpe.sh) goes to --qk-norm-length; the
# model computes g0 = log2(L^2 - L) from it and logs it in train.log.
# A finished run (train.json present) is skipped; a killed run resumes from
# checkpoints/checkpoint_last.pt (fairseq's own resume); wall_seconds accumulates over resumes,
# interrupted parts included. RUN/.lock keeps a second process off the run.
# --lr LR trains at another peak learning rate than the profile's (warmup and schedule stay):
# the run is RUN = .../seedN-lrLR (scripts/lib.sh:qk_run_dir), LR recorded in train.json.
# A training that diverges (fairseq-train stops with FloatingPointError: non-finite gradients
# or loss) is a finished result, not a failure to retry: RUN/diverged holds the reason,
# train.json is written, the exit status is 3, and a rerun skips it (--force retrains).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"

usage() {
    cat <<EOF
usage: scripts/train.sh PAIR SYSTEM [--profile P] [--seed N] [--max-update N] [--lr LR]
                        [--threads N] [--dry-run] [--force] [-- EXTRA_FAIRSEQ_TRAIN_ARGS...]
  PAIR         one of: $(qk_known_pairs)
  SYSTEM       one of: $(qk_known_systems)
  --profile P  one of: $(qk_known_profiles) (default: cpu-proxy)
  --seed N     random seed (default 1)
  --max-update N  update budget instead of the profile's (the run goes to
               runs/PAIR/PROFILE-max-update-N/, never over the profile's runs)
  --lr LR      peak learning rate instead of the profile's --lr (warmup and schedule stay; the
               run goes to runs/PAIR/LABEL/SYSTEM/seedN-lrLR/)
  --threads N  intra-op CPU threads (default: the profile's THREADS)
  --dry-run    print the resolved fairseq-train command and exit
  --force      retrain even if the run is finished (its directory is emptied)
  -- ARGS      passed on to fairseq-train (a run made with other ARGS is never reused)
environment: QKNORM_WORK_DIR (outputs under \$QKNORM_WORK_DIR/runs), QKNORM_MAX_UPDATE,
  QKNORM_THREADS
exit status: 0 trained (or finished before), 3 the training diverged (RUN/diverged; a finished
  result that a rerun skips), 1 other failures, 2 usage errors
EOF
}

PROFILE_ARG=cpu-proxy SEED=1 MAX_UPDATE_ARG="" LR_ARG="" THREADS_ARG="" DRY_RUN=0 FORCE=0
qk_parse_args "@PAIR_ARG SYSTEM_ARG" "--profile PROFILE_ARG" "--seed SEED" \
    "--max-update MAX_UPDATE_ARG" "--lr LR_ARG" "--threads THREADS_ARG" "--dry-run DRY_RUN=1" \
    "--force FORCE=1" -- "$@"
EXTRA=("${QK_REST[@]+"${QK_REST[@]}"}")
qk_check_uint --seed "$SEED"

load_pair_config "$PAIR_ARG"
load_system_config "$SYSTEM_ARG"
load_profile_config "$PROFILE_ARG"
QK_LR_OVERRIDE=""
[[ -z "$LR_ARG" ]] || qk_set_lr "$LR_ARG"
[[ -z "$MAX_UPDATE_ARG" ]] || MAX_UPDATE="$MAX_UPDATE_ARG"
[[ -z "$THREADS_ARG" ]] || THREADS="$THREADS_ARG"
qk_check_uint --max-update "$MAX_UPDATE"
qk_check_posint --threads "$THREADS"
if [[ "$MAX_UPDATE" == 0 && "${MAX_EPOCH:-0}" == 0 ]]; then
    qk_usage_error "--max-update 0 with profile $PROFILE (max-epoch 0) would never stop training"
fi

BIN="$QK_DATA/bin/$PAIR"
BPE_DIR="$QK_DATA/bpe/$PAIR"
LABEL="$(qk_run_label)"
RUN="$(qk_run_dir "$PAIR" "$LABEL" "$SYSTEM" "$SEED" "$QK_LR_OVERRIDE")"
ARCH="$(qk_arch)"

QKNORM_FLAGS=()
L=""
L_NOTE=""
if [[ "$SYSTEM_QKNORM" == 1 ]]; then
    if [[ -f "$BPE_DIR/length_stats.json" ]]; then
        L="$(corpus_py length-stats --stats "$BPE_DIR/length_stats.json" --get L)" \
            || die "cannot read L from $BPE_DIR/length_stats.json"
    elif ((DRY_RUN)); then
        L="$PAPER_L"  # dry run before BPE: show the command with the authors' L
        L_NOTE=" (dry run without data/bpe/$PAIR: authors' L shown)"
    else
        die "$BPE_DIR/length_stats.json not found: run scripts/bpe.sh $PAIR first (QKNorm needs the data's L)"
    fi
    QKNORM_FLAGS=(--qk-norm-length "$L")
    L_NOTE="QKNorm L = $L (authors' L for $PAIR: $PAPER_L); the model logs its g0 = log2(L^2 - L)$L_NOTE"
fi
DROPOUT_FLAGS=()
[[ -z "${TRAIN_DROPOUT:-}" ]] || DROPOUT_FLAGS=(--dropout "$TRAIN_DROPOUT")  # a profile's training setting

CMD=(fairseq-train "$BIN"
    --user-dir "$QK_REPO_ROOT/fairseq_qknorm"
    --task "${TRAIN_TASK:-translation}" "${TASK_FLAGS[@]+"${TASK_FLAGS[@]}"}"
    --source-lang "$SRC" --target-lang "$TGT"
    --arch "$ARCH" "${SYSTEM_FLAGS[@]+"${SYSTEM_FLAGS[@]}"}" "${QKNORM_FLAGS[@]+"${QKNORM_FLAGS[@]}"}"
    "${DROPOUT_FLAGS[@]+"${DROPOUT_FLAGS[@]}"}"
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

if ((DRY_RUN)); then
    [[ -z "$L_NOTE" ]] || qk_log "$L_NOTE"
    qk_print_cmd env "OMP_NUM_THREADS=$THREADS" "${CMD[@]}"
    exit 0
fi

[[ -f "$BIN/.done" ]] || die "$BIN is not binarized: run scripts/binarize.sh $PAIR first"
qk_lock_run "$RUN"
NEW_COMMAND="$(CMD[0]=fairseq-train; qk_print_cmd "${CMD[@]}")"
if [[ "$FORCE" == 0 && -f "$RUN/command.txt" ]] \
    && [[ "$(sed '1s/^[^ ]*fairseq-train /fairseq-train /' "$RUN/command.txt")" != "$NEW_COMMAND" ]]; then
    # a finished (or resumable) run made with other settings is never reused silently
    die "$RUN was trained with another command (see $RUN/command.txt): retrain it with scripts/train.sh $PAIR $SYSTEM --profile $PROFILE --seed $SEED${MAX_UPDATE_ARG:+ --max-update $MAX_UPDATE_ARG}${QK_LR_OVERRIDE:+ --lr $QK_LR_OVERRIDE} --force, or remove $RUN"
fi
if [[ -f "$RUN/train.json" && "$FORCE" == 0 ]]; then
    if [[ -f "$RUN/diverged" ]]; then
        qk_warn "skip: $RUN diverged ($(head -n 1 "$RUN/diverged")): a finished result; --force to retrain"
        exit 3
    fi
    qk_log "skip: $RUN is finished; --force to retrain"
    exit 0
fi
if ((FORCE)); then  # empty the run directory, keeping the lock this script holds
    find "$RUN" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf -- {} +
fi
FAIRSEQ_TRAIN="$(qk_tool fairseq-train)"
CMD[0]="$FAIRSEQ_TRAIN"
qk_print_cmd "${CMD[@]}" >"$RUN/command.txt"
qk_log "training $SYSTEM ($SYSTEM_DESC; $PAPER_ROW) on $PAIR, profile $LABEL, arch $ARCH, seed $SEED -> $RUN"
[[ -z "$L_NOTE" ]] || qk_log "$L_NOTE"
[[ ! -f "$RUN/checkpoints/checkpoint_last.pt" ]] || qk_log "resuming from $RUN/checkpoints/checkpoint_last.pt"

# add_wall_time: wall_seconds accumulates the training time over resumes, also when this
# script is interrupted (an exit hook: it runs after fairseq-train is stopped)
START="$(date +%s)"
LOG_START="$(stat -c %s -- "$RUN/train.log" 2>/dev/null || echo 0)"  # this attempt's part of the log
add_wall_time() {
    [[ -n "$START" ]] || return 0
    local prev=0
    [[ ! -f "$RUN/wall_seconds" ]] || prev="$(cat -- "$RUN/wall_seconds")"
    echo $((prev + $(date +%s) - START)) >"$RUN/wall_seconds"
    START=""
}
qk_on_exit add_wall_time
RC=0
OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" qk_run_tee "$RUN/train.log" "${CMD[@]}" || RC=$?
add_wall_time
TRAIN_JSON=("$QK_PY" -m qknorm_tools.collect train-json "$RUN" --pair "$PAIR" --profile "$LABEL"
    --system "$SYSTEM" --seed "$SEED" --arch "$ARCH" ${L:+--qk-norm-length "$L"}
    --paper-qk-norm-length "$PAPER_L" ${QK_LR_OVERRIDE:+--variant "lr=$QK_LR_OVERRIDE"})
if ((RC != 0)); then
    # divergence: fairseq (fp32) raises FloatingPointError on non-finite gradients (a NaN/inf
    # loss makes them so; fairseq/trainer.py train_step) and exits non-zero
    DIVERGED="$(tail -c "+$((LOG_START + 1))" -- "$RUN/train.log" | grep -m 1 -o 'FloatingPointError: .*' || true)"
    [[ -n "$DIVERGED" ]] || die "fairseq-train failed (exit $RC) for $RUN; see $RUN/train.log (rerun to resume)"
    printf '%s\n' "$DIVERGED" >"$RUN/diverged"
    SUMMARY="$("${TRAIN_JSON[@]}")" || die "could not write $RUN/train.json"
    qk_warn "$RUN diverged ($DIVERGED) after $SUMMARY: recorded in $RUN/diverged, a finished result (nothing to decode; --force retrains)"
    exit 3
fi
[[ -f "$RUN/checkpoints/checkpoint_last.pt" ]] || die "fairseq-train wrote no checkpoint in $RUN/checkpoints"

SUMMARY="$("${TRAIN_JSON[@]}")" || die "could not write $RUN/train.json"
qk_log "finished $RUN: $SUMMARY"
