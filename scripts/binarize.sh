#!/usr/bin/env bash
# scripts/binarize.sh: fairseq binarization of a segmented pair.
#   data/bpe/PAIR/{train,dev,test}.{SRC,TGT}  ->  data/bin/PAIR/
#     dict.SRC.txt, dict.TGT.txt (identical: one joined dictionary, for tied embeddings),
#     {train,valid,test}.SRC-TGT.{SRC,TGT}.{bin,idx}, preprocess.log,
#     identity.json (the data identity: raw corpus + BPE + binarized data checksums, which
#     scripts/train.sh records in every run; python -m qknorm_tools.provenance)
# with
#   fairseq-preprocess --source-lang SRC --target-lang TGT --joined-dictionary \
#       --trainpref data/bpe/PAIR/train --validpref data/bpe/PAIR/dev --testpref data/bpe/PAIR/test \
#       --destdir data/bin/PAIR --workers PREPROCESS_WORKERS
# (dev becomes fairseq's "valid" split). With per-epoch BPE-dropout (scripts/bpe.sh
# --bpe-dropout-samples K > 1: data/bpe/PAIR/epochs/K/) the joined dictionary is built first from
# the deterministic segmentation and all K samples (fairseq-preprocess --dict-only), so that it
# covers every sample; train/valid/test are binarized against it as above (train = sample 1) and
# sample k into data/bin/PAIR/shards/k/train.* (fairseq epoch shards: scripts/train.sh trains on
# data/bin/PAIR:data/bin/PAIR/shards/2:...). Built in a temporary directory that replaces
# data/bin/PAIR only when complete; data/bin/PAIR/.done + .settings make a rerun a no-op.
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"

usage() {
    cat <<EOF2
usage: scripts/binarize.sh PAIR [--force]
  PAIR      $(qk_pair_usage 12)
  --force   rebuild even if data/bin/PAIR is complete for the current data/bpe/PAIR
needs data/bpe/PAIR from scripts/bpe.sh; environment: QKNORM_WORK_DIR
EOF2
}

FORCE=0
qk_parse_args "@PAIR_ARG" "--force FORCE=1" -- "$@"
load_pair_config "$PAIR_ARG"

BPE="$QK_DATA/bpe/$PAIR"
OUT="$QK_DATA/bin/$PAIR"

qk_is_done "$BPE" || die "$PAIR has no complete BPE data ($QK_DONE_REASON): run scripts/bpe.sh $PAIR first"
# BPE data made from other raw data than the current ones are neither reused nor binarized: the
# chain rule that scripts/train.sh checks (python -m qknorm_tools.provenance), which names the
# raw files that changed and the step to rerun
"$QK_PY" -m qknorm_tools.provenance check-bpe --pair "$PAIR" --data "$QK_DATA" \
    || die "the data of $PAIR are not consistent (above); nothing was binarized"

SETTINGS="pair=$PAIR
source_lang=$SRC
target_lang=$TGT
joined_dictionary=1
bpe=$(qk_fingerprint "$BPE/.done")"

# reused only if complete (.done checksums, identity.json) and made by the same settings and
# BPE data (.settings, the one rule of python -m qknorm_tools.freshness); else rebuilt, the log
# naming what changed
if ((FORCE == 0)) && [[ -e "$OUT/.done" ]]; then
    if ! qk_is_done "$OUT"; then
        qk_log "rebuilding: $QK_DONE_REASON"
    elif ! CHANGED="$("$QK_PY" -m qknorm_tools.freshness check "$OUT/.settings" --settings-lines "$SETTINGS" 2>&1)"; then
        qk_log "rebuilding: $OUT was made with other settings or inputs: $CHANGED"
    elif [[ ! -f "$OUT/identity.json" ]]; then
        qk_log "rebuilding: $OUT has no identity.json (binarized before data identities)"
    else
        echo "skip: $OUT already binarized from the current $BPE; use --force to rebuild"
        exit 0
    fi
fi

PREPROCESS="$(qk_tool fairseq-preprocess)"
qk_mktemp_dir TMP "$QK_DATA/bin" "$PAIR"
# per-epoch BPE-dropout samples 2..K (scripts/bpe.sh --bpe-dropout-samples K)
SHARDS=()
if [[ -d "$BPE/epochs" ]]; then
    mapfile -t SHARDS < <(find "$BPE/epochs" -mindepth 1 -maxdepth 1 -type d -printf '%f\n' | sort -n)
fi
DICT_FLAGS=()
if ((${#SHARDS[@]})); then
    [[ -f "$BPE/deterministic/train.$SRC" && -f "$BPE/deterministic/train.$TGT" ]] \
        || die "$BPE has BPE-dropout samples but no deterministic/train.{$SRC,$TGT}: rerun scripts/bpe.sh $PAIR --force"
    qk_log "building the joined dictionary from the deterministic segmentation and all $((${#SHARDS[@]} + 1)) BPE-dropout samples"
    mkdir -p -- "$TMP/.dict"
    for lang in "$SRC" "$TGT"; do
        files=("$BPE/deterministic/train.$lang" "$BPE/train.$lang")
        for k in "${SHARDS[@]}"; do files+=("$BPE/epochs/$k/train.$lang"); done
        cat -- "${files[@]}" >"$TMP/.dict/all.$lang"
    done
    qk_run "$PREPROCESS" --source-lang "$SRC" --target-lang "$TGT" --joined-dictionary --dict-only \
        --trainpref "$TMP/.dict/all" --destdir "$TMP/.dict" --workers "$PREPROCESS_WORKERS" \
        >"$TMP/.dict/fairseq-preprocess.out" 2>&1 \
        || { tail -n 30 "$TMP/.dict/fairseq-preprocess.out" >&2; die "fairseq-preprocess --dict-only failed for $PAIR"; }
    DICT_FLAGS=(--srcdict "$TMP/.dict/dict.$SRC.txt")
fi
qk_log "binarizing $BPE with fairseq-preprocess ($SRC->$TGT, joined dictionary)"
qk_run "$PREPROCESS" --source-lang "$SRC" --target-lang "$TGT" --joined-dictionary \
    "${DICT_FLAGS[@]+"${DICT_FLAGS[@]}"}" \
    --trainpref "$BPE/train" --validpref "$BPE/dev" --testpref "$BPE/test" \
    --destdir "$TMP" --workers "$PREPROCESS_WORKERS" >"$TMP/fairseq-preprocess.out" 2>&1 \
    || { tail -n 30 "$TMP/fairseq-preprocess.out" >&2; die "fairseq-preprocess failed for $PAIR"; }

# every split and side must be binarized with as many sentences as the BPE file has lines
outputs=("dict.$SRC.txt" "dict.$TGT.txt")
for split in train dev test; do
    fsplit="$split"
    [[ "$split" == dev ]] && fsplit=valid
    for lang in "$SRC" "$TGT"; do
        for ext in bin idx; do
            f="$fsplit.$SRC-$TGT.$lang.$ext"
            [[ -s "$TMP/$f" ]] || die "fairseq-preprocess did not write $f"
            outputs+=("$f")
        done
        n="$(qk_count_lines "$BPE/$split.$lang")"
        grep -Eq "\\[$lang\\] $(printf '%s' "$BPE/$split.$lang" | sed 's/[][\.*^$/]/\\&/g'): $n sents" \
            "$TMP/fairseq-preprocess.out" \
            || die "fairseq-preprocess did not report $n sentences for $BPE/$split.$lang (see $OUT/fairseq-preprocess.out)"
    done
done
for k in "${SHARDS[@]+"${SHARDS[@]}"}"; do
    qk_log "binarizing BPE-dropout sample $k as epoch shard $k"
    mkdir -p -- "$TMP/shards/$k"
    qk_run "$PREPROCESS" --source-lang "$SRC" --target-lang "$TGT" --joined-dictionary \
        --srcdict "$TMP/dict.$SRC.txt" --trainpref "$BPE/epochs/$k/train" --destdir "$TMP/shards/$k" \
        --workers "$PREPROCESS_WORKERS" >"$TMP/shards/$k/fairseq-preprocess.out" 2>&1 \
        || { tail -n 30 "$TMP/shards/$k/fairseq-preprocess.out" >&2; die "fairseq-preprocess failed for $PAIR (BPE-dropout sample $k)"; }
    for lang in "$SRC" "$TGT"; do
        for ext in bin idx; do
            [[ -s "$TMP/shards/$k/train.$SRC-$TGT.$lang.$ext" ]] || die "fairseq-preprocess did not write shards/$k/train.$SRC-$TGT.$lang.$ext"
            outputs+=("shards/$k/train.$SRC-$TGT.$lang.$ext")
        done
        n="$(qk_count_lines "$BPE/epochs/$k/train.$lang")"
        grep -Eq "\[$lang\] .*: $n sents" "$TMP/shards/$k/fairseq-preprocess.out" \
            || die "fairseq-preprocess did not report $n sentences for $BPE/epochs/$k/train.$lang"
    done
    rm -f -- "$TMP/shards/$k/dict.$SRC.txt" "$TMP/shards/$k/dict.$TGT.txt" "$TMP/shards/$k/preprocess.log"
done
rm -rf -- "$TMP/.dict"
[[ -f "$TMP/preprocess.log" ]] && outputs+=(preprocess.log)
outputs+=(fairseq-preprocess.out)
DATA_ID="$("$QK_PY" -m qknorm_tools.provenance write --pair "$PAIR" --data "$QK_DATA" --bin-dir "$TMP" \
    --files "${outputs[@]}")" || die "cannot write the data identity of $PAIR"
outputs+=(identity.json)

qk_write_done "$TMP" "$SETTINGS" "${outputs[@]}"
qk_replace_dir "$TMP" "$OUT"
echo "binarized $PAIR into $OUT ($(qk_count_lines "$BPE/train.$SRC") training pairs, joined dictionary $(qk_count_lines "$OUT/dict.$SRC.txt") types; data identity ${DATA_ID:0:12})"
