#!/usr/bin/env bash
# scripts/evaluate.sh: decode a split with a trained run's checkpoint and score it.
#   runs/PAIR/LABEL/SYSTEM/seedN/checkpoints/checkpoint_best.pt
#     -> {test}.gen.out  fairseq-generate output (BPE'd, batch order)
#     -> {test}.hyp      hypotheses in source order, BPE removed (python -m qknorm_tools.evaluate extract)
#     -> {test}.score.json  tokenized BLEU (sacrebleu --tokenize none, comparable to multi-bleu.perl
#                        and the papers), detokenized sacreBLEU and chrF, each with its signature,
#                        scored against the raw reference file data/raw/PAIR/{test}.TGT (never T- lines)
# (--checkpoint last writes {test}.last.gen.out, .hyp, .score.json instead; --checkpoint avgN
# decodes checkpoints/checkpoint_avgN.pt, the parameter average of the last N checkpoints the
# profile keeps (python -m qknorm_model_tools.average_checkpoints), into {test}.avgN.*.)
# BPE is removed the way the tool recorded in data/bpe/PAIR/bpe.json requires.
# The run is evaluated only on the data it was trained on (its data identity,
# RUN/data_identity.json, equals the current data/bin/PAIR/identity.json; python -m
# qknorm_tools.provenance), also with --force; the score records that identity.
# Outputs are reused only when everything that made them is unchanged (SPLIT.made_by.json:
# python -m qknorm_tools.freshness), else decoded again, the log naming what changed. The
# run's lock (RUN/.lock) is held while decoding, so a run being trained is never evaluated.
# A run whose training diverged (RUN/diverged, scripts/train.sh) has nothing to decode: exit
# status 3.
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"

usage() {
    cat <<EOF
usage: scripts/evaluate.sh PAIR SYSTEM [--profile P] [--seed N] [--max-update N] [--lr LR]
                           [--bf16-autocast | --precision P] [--split test|dev] [--checkpoint best|last|avgN]
                           [--threads N] [--force] [--dry-run]
  PAIR         $(qk_pair_usage 15)
  SYSTEM       one of: $(qk_known_systems)
  --profile P  one of: $(qk_known_profiles) (default: cpu-proxy)
  --seed N     seed of the run (default 1)
  --max-update N  the run's budget, if not the profile's (as given to scripts/train.sh)
  --lr LR      the run's peak learning rate, if not the profile's (as given to scripts/train.sh)
  --bf16-autocast  the run trained with scripts/train.sh --bf16-autocast (seedN-bf16);
               without it the profile decides as train.sh did (the CPU profiles: bf16 where
               measured faster on this CPU, cached in the work dir); decoding stays fp32
  --precision P  the run's precision as train.sh's --precision: bf16 (as --bf16-autocast),
               fp32 or auto (the cached verdict; never measured here)
  --split S    test (default) or dev
  --checkpoint C  best (checkpoint_best.pt, the best on dev), last, or avgN: the average of the
               last N checkpoints the profile keeps; default: the profile's decode.checkpoint
               (best unless it says), whose outputs are SPLIT.*; another one's are SPLIT.C.*
  --threads N  intra-op CPU threads of fairseq-generate (default: the profile's threads)
  --force      decode and score again even if the outputs are up to date (never with other
               data than the run was trained on)
  --dry-run    print the fairseq-generate command (and for avgN the averaging one) and the
               output files, and exit (no run, data or checkpoint needed)
environment: QKNORM_WORK_DIR, QKNORM_MAX_UPDATE, QKNORM_THREADS, QKNORM_BF16 (as train.sh)
EOF
}

PROFILE_ARG=cpu-proxy SEED=1 MAX_UPDATE_ARG="" LR_ARG="" SPLIT=test CKPT="" THREADS_ARG="" FORCE=0
BF16=0 DRY_RUN=0
qk_parse_args "@PAIR_ARG SYSTEM_ARG" "--profile PROFILE_ARG" "--seed SEED" \
    "--max-update MAX_UPDATE_ARG" "--lr LR_ARG" "--bf16-autocast BF16=1" "$QK_PRECISION_SPEC" "--split SPLIT" "--checkpoint CKPT" "--threads THREADS_ARG" \
    "--force FORCE=1" "--dry-run DRY_RUN=1" -- "$@"
# the run train.sh made with these options, its checkpoint (--checkpoint, else the profile's
# decode.checkpoint: best unless it says), outputs (SPLIT.* for the profile's checkpoint,
# SPLIT.C.* for another one C; never mixed) and commands, in one process (python -m
# qknorm_tools.run evaluate-plan; qknorm_tools/run_spec.py: the run, its precision decided as
# train.sh decides it, never measured here): AVG_CMD (the last N checkpoints the profile keeps:
# update checkpoints checkpoint_E_U.pt, --keep-interval-updates, else epoch ones checkpointE.pt,
# --keep-last-epochs) and GEN_CMD (qknorm_tools.commands: what --dry-run prints is what runs).
# Exit 2 there is a usage error. TWIN_HINT names the run of the other precision (seedN <->
# seedN-bf16) when this one is not there and that one is finished.
OPTS=("--repo=$QK_REPO_ROOT" "--work-dir=$QK_WORK_DIR" "--data-root=$QK_DATA" "--pair=$PAIR_ARG"
    "--system=$SYSTEM_ARG" "--profile=$PROFILE_ARG" "--seed=$SEED" "--max-update=$MAX_UPDATE_ARG"
    "--lr=$LR_ARG" "--threads=$THREADS_ARG" "--split=$SPLIT" "--checkpoint=$CKPT")
((BF16 == 0)) || OPTS+=(--bf16-autocast)
qk_spine_start  # the plan, the checks, freshness and scores: one Python process (qk_py)
qk_run_py evaluate-plan "${OPTS[@]}" "--precision=$QK_PRECISION_ARG"
if ((DRY_RUN)); then
    ((${#AVG_CMD[@]} == 0)) || qk_print_cmd "${AVG_CMD[@]}"
    qk_print_cmd env "OMP_NUM_THREADS=$THREADS" "${GEN_CMD[@]}"
    printf '# outputs: %s %s %s\n' "$GEN" "$HYP" "$SCORE"
    exit 0
fi
[[ ! -d "$RUN" ]] || qk_lock_run "$RUN"  # before anything else: a run in training is busy
[[ -f "$RUN/train.json" ]] || die "$RUN is not a finished run: run $TRAIN_CMD first$TWIN_HINT"
# under the run's lock, one process (python -m qknorm_tools.run evaluate-check, given the
# precision the plan decided) checks what train.sh checks, that the run is the one asked for
# (a diverged run: no model to decode, exit 3), the checkpoint and the reference, that the
# current data are consistent and the ones this run was trained on (DATA_ID), that every line
# of the split fits the model (or fairseq-generate stops at it; the model's max positions: the
# run's command.txt, else fairseq's 1024; each line named), and reads the data's BPE tool
# (REMOVE_BPE)
qk_run_py evaluate-check "${OPTS[@]}" "--precision=${QK_BF16_RUN:-fp32}"

if [[ -n "$N_AVERAGE" ]]; then
    # CHECKPOINT is checkpoint_avgN.pt, the average of the last N checkpoints the profile keeps
    if ((FORCE)) || [[ ! "$CHECKPOINT" -nt "$RUN/checkpoints/checkpoint_last.pt" ]]; then
        qk_log "averaging the last $N_AVERAGE checkpoints of $RUN/checkpoints (${AVG_CMD[5]}) -> $CHECKPOINT"
        AVG_CMD[0]="$QK_PY"
        qk_run "${AVG_CMD[@]}" \
            || die "cannot average $N_AVERAGE checkpoints of $RUN (above): the profile keeps the last ones with --keep-last-epochs / --keep-interval-updates (configs/profiles/$PROFILE.toml)"
    fi
fi

# the outputs are reused only if what made them is unchanged (python -m qknorm_tools.freshness:
# checkpoint file, checkpoint choice, split, every fairseq-generate setting, BPE removal, data,
# scorer versions and signatures), else decoded again saying what changed
MADE_BY="$RUN/$STEM.made_by.json"
MADE_BY_ARGS=("$MADE_BY" --file "checkpoint=$CHECKPOINT" --set "checkpoint_choice=$CKPT"
    --set "split=$SPLIT" --set "remove_bpe=$REMOVE_BPE" --set "data_id=$DATA_ID" --scorer "$SRC" "$TGT"
    --generate "${GEN_CMD[@]:1}")
if ((FORCE)); then
    [[ ! -f "$SCORE" ]] || qk_log "decoding again: --force"
elif [[ -s "$SCORE" && -f "$HYP" ]]; then
    FRESH=0
    qk_py freshness check "${MADE_BY_ARGS[@]}" || FRESH=$?
    CHANGED="$QK_PY_OUT"
    case "$FRESH" in
        0)
            qk_log "skip: $SCORE is up to date (data ${DATA_ID:0:12}), made by the same checkpoint and settings ($MADE_BY)"
            cat "$SCORE"
            exit 0
            ;;
        3) qk_log "decoding again: $SCORE was made with other settings: $CHANGED" ;;
        *) die "cannot tell what made $SCORE (above): remove $MADE_BY, or decode again with --force" ;;
    esac
fi

QK_CLEANUP+=("$GEN.tmp" "$(dirname -- "$HYP")/.$(basename -- "$HYP").partial" "$(dirname -- "$SCORE")/.$(basename -- "$SCORE").partial")  # an interrupted step leaves nothing half-written
N_REF="$(qk_count_lines "$REF")"
qk_log "decoding $PAIR $SPLIT with $CHECKPOINT (beam $BEAM, lenpen $LENPEN, $N_REF sentences)"
# progress with an ETA every 30 s while decoding (qknorm_tools.progress), stopped on exit
"$QK_PY" -m qknorm_tools.progress decode --output "$GEN.tmp" --total "$N_REF" --pid "$$" \
    --label "[evaluate] $PAIR $SYSTEM: " &
WATCH_PID=$!
stop_watch() { kill "$WATCH_PID" 2>/dev/null || true; wait "$WATCH_PID" 2>/dev/null || true; }
qk_on_exit stop_watch
GEN_CMD[0]="$(qk_tool fairseq-generate)"
OMP_NUM_THREADS="$THREADS" qk_run "${GEN_CMD[@]}" >"$GEN.tmp" 2>"$RUN/$STEM.gen.log" \
    || {
        rm -f -- "$GEN.tmp"
        qk_py evaluate explain-generate --log "$RUN/$STEM.gen.log" --checkpoint "$CHECKPOINT" \
            --data "$BIN" --split-files "$QK_DATA/bpe/$PAIR/$SPLIT".{"$SRC","$TGT"} \
            || QK_PY_OUT="fairseq-generate failed"
        die "$QK_PY_OUT; see $RUN/$STEM.gen.log"
    }
# from here the earlier outputs are being replaced: no record until all are written (a decode
# that fails or is interrupted before this line keeps the earlier outputs and their record)
rm -f -- "$MADE_BY"
mv -- "$GEN.tmp" "$GEN"
stop_watch
# hypotheses, scores and the made-by record in one process (python -m qknorm_tools.evaluate
# finish: each written whole or not at all, the record last; an error names its step and file)
qk_py evaluate finish --generate-output "$GEN" --hyp "$HYP" \
    --bpe-dir "$QK_DATA/bpe/$PAIR" --n-expected "$N_REF" --ref "$REF" --score "$SCORE" \
    --src-lang "$SRC" --tgt-lang "$TGT" --data-id "$DATA_ID" -- "${MADE_BY_ARGS[@]}" \
    || die "no score for $RUN $SPLIT (above): rerun the same command to decode again"
[[ -z "$QK_PY_OUT" ]] || printf '%s\n' "$QK_PY_OUT"
qk_log "read bleu_tok in $SCORE (words, against $REF; comparable to the papers), not the BLEU4 line at the end of $GEN (fairseq's scorer on BPE units: docs/pipeline.md, \"Which BLEU to read\")"
cat "$SCORE"
