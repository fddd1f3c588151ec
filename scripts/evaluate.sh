#!/usr/bin/env bash
# scripts/evaluate.sh: decode a split with a trained run's checkpoint and score it.
#   runs/PAIR/LABEL/SYSTEM/seedN/checkpoints/checkpoint_best.pt
#     -> {test}.gen.out  fairseq-generate output (BPE'd, batch order)
#     -> {test}.hyp      hypotheses in source order, BPE removed (python -m qknorm_tools.evaluate extract)
#     -> {test}.score.json  tokenized BLEU (sacrebleu --tokenize none, comparable to multi-bleu.perl
#                        and the papers), detokenized sacreBLEU and chrF, each with its signature,
#                        scored against the raw reference file data/raw/PAIR/{test}.TGT (never T- lines)
# (--checkpoint last writes {test}.last.gen.out, .hyp, .score.json instead.)
# Steps whose outputs are newer than the checkpoint are skipped. The run's lock (RUN/.lock) is
# held while decoding, so a run being trained is never evaluated. A run whose training diverged
# (RUN/diverged, scripts/train.sh) has nothing to decode: exit status 3.
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"

usage() {
    cat <<EOF
usage: scripts/evaluate.sh PAIR SYSTEM [--profile P] [--seed N] [--max-update N] [--lr LR]
                           [--split test|dev] [--checkpoint best|last] [--threads N] [--force]
  PAIR         one of: $(qk_known_pairs)
  SYSTEM       one of: $(qk_known_systems)
  --profile P  one of: $(qk_known_profiles) (default: cpu-proxy)
  --seed N     seed of the run (default 1)
  --max-update N  the run's budget, if not the profile's (as given to scripts/train.sh)
  --lr LR      the run's peak learning rate, if not the profile's (as given to scripts/train.sh)
  --split S    test (default) or dev
  --checkpoint C  best (default) or last
  --threads N  intra-op CPU threads of fairseq-generate (default: the profile's THREADS)
  --force      decode and score again even if the outputs are up to date
environment: QKNORM_WORK_DIR, QKNORM_MAX_UPDATE, QKNORM_THREADS
EOF
}

PROFILE_ARG=cpu-proxy SEED=1 MAX_UPDATE_ARG="" LR_ARG="" SPLIT=test CKPT=best THREADS_ARG="" FORCE=0
qk_parse_args "@PAIR_ARG SYSTEM_ARG" "--profile PROFILE_ARG" "--seed SEED" \
    "--max-update MAX_UPDATE_ARG" "--lr LR_ARG" "--split SPLIT" "--checkpoint CKPT" "--threads THREADS_ARG" \
    "--force FORCE=1" -- "$@"
qk_check_uint --seed "$SEED"
[[ -z "$MAX_UPDATE_ARG" ]] || qk_check_uint --max-update "$MAX_UPDATE_ARG"
[[ -z "$THREADS_ARG" ]] || qk_check_posint --threads "$THREADS_ARG"
case "$SPLIT" in test) GEN_SUBSET=test ;; dev) GEN_SUBSET=valid ;; *) qk_usage_error "--split must be test or dev" ;; esac
case "$CKPT" in best | last) ;; *) qk_usage_error "--checkpoint must be best or last" ;; esac

load_pair_config "$PAIR_ARG"
load_system_config "$SYSTEM_ARG"
load_profile_config "$PROFILE_ARG"
QK_LR_OVERRIDE=""
[[ -z "$LR_ARG" ]] || qk_set_lr "$LR_ARG"
[[ -z "$THREADS_ARG" ]] || THREADS="$THREADS_ARG"
[[ -z "$MAX_UPDATE_ARG" ]] || MAX_UPDATE="$MAX_UPDATE_ARG"

LABEL="$(qk_run_label)"
RUN="$(qk_run_dir "$PAIR" "$LABEL" "$SYSTEM" "$SEED" "$QK_LR_OVERRIDE")"
CHECKPOINT="$RUN/checkpoints/checkpoint_$CKPT.pt"
BIN="$QK_DATA/bin/$PAIR"
REF="$QK_DATA/raw/$PAIR/$SPLIT.$TGT"
[[ ! -d "$RUN" ]] || qk_lock_run "$RUN"  # before anything else: a run in training is busy
[[ -f "$RUN/train.json" ]] || die "$RUN is not a finished run: run scripts/train.sh $PAIR $SYSTEM --profile $PROFILE --seed $SEED${MAX_UPDATE_ARG:+ --max-update $MAX_UPDATE_ARG}${QK_LR_OVERRIDE:+ --lr $QK_LR_OVERRIDE} first"
if [[ -f "$RUN/diverged" ]]; then
    qk_warn "$RUN diverged ($(head -n 1 "$RUN/diverged")): no model to decode"
    exit 3
fi
[[ -f "$CHECKPOINT" ]] || die "checkpoint $CHECKPOINT not found"
[[ -f "$REF" ]] || die "reference $REF not found: run scripts/prepare_data.sh $PAIR"
REMOVE_BPE=subword_nmt
if [[ -f "$QK_DATA/bpe/$PAIR/length_stats.json" ]] \
    && [[ "$(corpus_py length-stats --stats "$QK_DATA/bpe/$PAIR/length_stats.json" --get tool)" == sentencepiece ]]; then
    REMOVE_BPE=sentencepiece
fi

# outputs of checkpoint_best are SPLIT.*, those of checkpoint_last SPLIT.last.* (never mixed)
STEM="$SPLIT"
[[ "$CKPT" == best ]] || STEM="$SPLIT.$CKPT"
GEN="$RUN/$STEM.gen.out"
HYP="$RUN/$STEM.hyp"
SCORE="$RUN/$STEM.score.json"
if [[ "$FORCE" == 0 && -s "$SCORE" && "$SCORE" -nt "$CHECKPOINT" && "$HYP" -nt "$CHECKPOINT" ]]; then
    qk_log "skip: $SCORE is up to date"
    cat "$SCORE"
    exit 0
fi

QK_CLEANUP+=("$GEN.tmp" "$HYP.tmp" "$SCORE.tmp")  # an interrupted step leaves nothing half-written
qk_log "decoding $PAIR $SPLIT with $CHECKPOINT (beam $BEAM, lenpen $LENPEN)"
FAIRSEQ_GENERATE="$(qk_tool fairseq-generate)"
OMP_NUM_THREADS="$THREADS" qk_run "$FAIRSEQ_GENERATE" "$BIN" \
    --user-dir "$QK_REPO_ROOT/fairseq_qknorm" \
    --task translation --source-lang "$SRC" --target-lang "$TGT" \
    --path "$CHECKPOINT" --gen-subset "$GEN_SUBSET" \
    --beam "$BEAM" --lenpen "$LENPEN" --max-tokens "$GEN_MAX_TOKENS" \
    "${GEN_FLAGS[@]+"${GEN_FLAGS[@]}"}" \
    --required-batch-size-multiple 1 --num-workers 0 --seed "$SEED" \
    >"$GEN.tmp" 2>"$RUN/$STEM.gen.log" \
    || { rm -f -- "$GEN.tmp"; die "fairseq-generate failed; see $RUN/$STEM.gen.log"; }
mv -- "$GEN.tmp" "$GEN"

N_REF="$(qk_count_lines "$REF")"
"$QK_PY" -m qknorm_tools.evaluate extract --generate-output "$GEN" --output "$HYP.tmp" \
    --remove-bpe "$REMOVE_BPE" --n-expected "$N_REF" \
    || { rm -f -- "$HYP.tmp"; die "could not extract $N_REF hypotheses from $GEN"; }
mv -- "$HYP.tmp" "$HYP"
"$QK_PY" -m qknorm_tools.evaluate score --hyp "$HYP" --ref "$REF" --json \
    --src-lang "$SRC" --tgt-lang "$TGT" >"$SCORE.tmp" \
    || { rm -f -- "$SCORE.tmp"; die "scoring $HYP against $REF failed"; }
mv -- "$SCORE.tmp" "$SCORE"
cat "$SCORE"
