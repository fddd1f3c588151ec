#!/usr/bin/env bash
# scripts/evaluate.sh: decode a split with a trained run's checkpoint and score it.
#   runs/PAIR/PROFILE/SYSTEM/seedN/checkpoints/checkpoint_best.pt
#     -> {test}.gen.out  fairseq-generate output (BPE'd, batch order)
#     -> {test}.hyp      hypotheses in source order, BPE removed (python -m fairseq_qknorm.evaluate extract)
#     -> {test}.score.json  tokenized BLEU (sacrebleu --tokenize none, comparable to multi-bleu.perl
#                        and the papers), detokenized sacreBLEU and chrF, each with its signature,
#                        scored against the raw reference file data/raw/PAIR/{test}.TGT (never T- lines)
# (--checkpoint last writes {test}.last.gen.out, .hyp, .score.json instead.)
# Steps whose outputs are newer than the checkpoint are skipped.
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"

usage() {
    cat <<EOF
usage: scripts/evaluate.sh PAIR SYSTEM [--profile P] [--seed N] [--split test|dev]
                           [--checkpoint best|last] [--threads N] [--force]
  PAIR         one of: $(qk_known_pairs)
  SYSTEM       one of: $(qk_known_systems)
  --profile P  one of: $(qk_known_profiles) (default: cpu-proxy)
  --seed N     seed of the run (default 1)
  --split S    test (default) or dev
  --checkpoint C  best (default) or last
EOF
}

PAIR_ARG="" SYSTEM_ARG="" PROFILE_ARG=cpu-proxy SEED=1 SPLIT=test CKPT=best THREADS_ARG="" FORCE=0
while (($#)); do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --profile) need_value "$@"; PROFILE_ARG="$2"; shift 2 ;;
        --seed) need_value "$@"; SEED="$2"; shift 2 ;;
        --split) need_value "$@"; SPLIT="$2"; shift 2 ;;
        --checkpoint) need_value "$@"; CKPT="$2"; shift 2 ;;
        --threads) need_value "$@"; THREADS_ARG="$2"; shift 2 ;;
        --force) FORCE=1; shift ;;
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
[[ -z "$THREADS_ARG" || "$THREADS_ARG" =~ ^[1-9][0-9]*$ ]] \
    || qk_usage_error "--threads must be a positive integer, got '$THREADS_ARG'"
case "$SPLIT" in test) GEN_SUBSET=test ;; dev) GEN_SUBSET=valid ;; *) qk_usage_error "--split must be test or dev" ;; esac
case "$CKPT" in best | last) ;; *) qk_usage_error "--checkpoint must be best or last" ;; esac

load_pair_config "$PAIR_ARG"
load_system_config "$SYSTEM_ARG"
load_profile_config "$PROFILE_ARG"
[[ -z "$THREADS_ARG" ]] || THREADS="$THREADS_ARG"

RUN="$(qk_run_dir "$PAIR" "$PROFILE" "$SYSTEM" "$SEED")"
CHECKPOINT="$RUN/checkpoints/checkpoint_$CKPT.pt"
BIN="$QK_DATA/bin/$PAIR"
REF="$QK_DATA/raw/$PAIR/$SPLIT.$TGT"
[[ -f "$RUN/train.json" ]] || die "$RUN is not a finished run: run scripts/train.sh $PAIR $SYSTEM --profile $PROFILE --seed $SEED first"
[[ -f "$CHECKPOINT" ]] || die "checkpoint $CHECKPOINT not found"
[[ -f "$REF" ]] || die "reference $REF not found: run scripts/prepare_data.sh $PAIR"
REMOVE_BPE=subword_nmt
if [[ -f "$QK_DATA/bpe/$PAIR/length_stats.json" ]] \
    && [[ "$(qk_json_field "$QK_DATA/bpe/$PAIR/length_stats.json" tool)" == sentencepiece ]]; then
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

qk_log "decoding $PAIR $SPLIT with $CHECKPOINT (beam $BEAM, lenpen $LENPEN)"
FAIRSEQ_GENERATE="$(qk_tool fairseq-generate)"
OMP_NUM_THREADS="$THREADS" "$FAIRSEQ_GENERATE" "$BIN" \
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
"$QK_PY" -m fairseq_qknorm.evaluate extract --generate-output "$GEN" --output "$HYP.tmp" \
    --remove-bpe "$REMOVE_BPE" --n-expected "$N_REF" \
    || { rm -f -- "$HYP.tmp"; die "could not extract $N_REF hypotheses from $GEN"; }
mv -- "$HYP.tmp" "$HYP"
"$QK_PY" -m fairseq_qknorm.evaluate score --hyp "$HYP" --ref "$REF" --json \
    --src-lang "$SRC" --tgt-lang "$TGT" >"$SCORE.tmp" \
    || { rm -f -- "$SCORE.tmp"; die "scoring $HYP against $REF failed"; }
mv -- "$SCORE.tmp" "$SCORE"
cat "$SCORE"
