#!/usr/bin/env bash
# scripts/bpe.sh: subword segmentation of a prepared pair.
#   data/raw/PAIR/{train,dev,test}.{SRC,TGT}  ->  data/bpe/PAIR/{train,dev,test}.{SRC,TGT}
#
# subword-nmt (default; the papers use joint BPE): joint BPE learned on the training data of both sides
#   subword-nmt learn-joint-bpe-and-vocab --input train.SRC train.TGT -s MERGES -o codes \
#       --write-vocabulary vocab.SRC vocab.TGT
# applied to every split with the same options, each language with its own vocabulary:
#   subword-nmt apply-bpe -c codes --vocabulary vocab.L --vocabulary-threshold BPE_VOCAB_THRESHOLD
# plus, on the training split only, --dropout P --seed S when BPE-dropout is on.
# sentencepiece (--tool sentencepiece): one joint BPE model (spm.model/spm.vocab) trained on
# both training sides, exactly SPM_VOCAB_SIZE pieces (a size sentencepiece cannot build is an
# error saying which sizes work), identity normalization (no NFKC: every segmented line decodes
# back to its raw line, as the raw references need); BPE-dropout = sampling with alpha=P.
# BPE-dropout with --bpe-dropout-samples 1 (BPE_DROPOUT_SAMPLES, the default) segments the training
# split ONCE: one static sample (seed BPE_DROPOUT_SEED) that every epoch sees. With K > 1
# (subword-nmt only) the training split is segmented K times (seeds BPE_DROPOUT_SEED ..
# BPE_DROPOUT_SEED+K-1): sample 1 in train.{SRC,TGT}, sample k in epochs/k/train.{SRC,TGT}, and the
# deterministic segmentation in deterministic/train.{SRC,TGT} (for the dictionary only);
# scripts/binarize.sh makes them fairseq epoch shards, so that epoch e trains on sample
# ((e-1) % K) + 1, resampled per epoch as in Provilkov et al. 2020 (docs/methods.md).
#
# Every segmented line must fit the model (python -m qknorm_tools.seglen: at most max positions
# - 1 = 1023 tokens, fairseq's 1024 positions less the end-of-sentence token): a dev or test line
# over it is an error naming the raw file and line (exit 1, data/bpe/PAIR unchanged); a training
# pair over it is dropped from every segmentation of the training split, the count and the first
# lines logged here and all listed in data/bpe/PAIR/too_long.json.
# Then L = ceil(97.5th percentile of BPE tokens per training line, both sides), QKNorm's L (the
# model computes its g0 = log2(L^2 - L) from it), is printed and stored in
# data/bpe/PAIR/length_stats.json; always from the deterministic segmentation of the training
# split (with BPE-dropout, sampled segmentations are longer and would inflate L).
# Outputs are built in a temporary directory and replace data/bpe/PAIR only when complete;
# data/bpe/PAIR/.done + .settings make a rerun with the same settings and inputs a no-op.
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"

usage() {
    cat <<EOF
usage: scripts/bpe.sh PAIR [--merges N] [--tool subword-nmt|sentencepiece] [--vocab-size N]
                      [--vocab-threshold N] [--bpe-dropout P] [--bpe-dropout-samples K] [--force]
  PAIR               $(qk_pair_usage 21)
  --merges N         joint BPE merges for subword-nmt (default: the pair config's bpe_merges)
  --tool T           subword-nmt (default; joint BPE as in the papers) or sentencepiece
  --vocab-size N     sentencepiece vocabulary size (default: the pair config's spm_vocab_size)
  --vocab-threshold N  subword-nmt apply-bpe --vocabulary-threshold (default: BPE_VOCAB_THRESHOLD=50)
  --bpe-dropout P    BPE-dropout probability on the training split only: 0 (default) = off,
                     else 0 < P < 1 (1 would split every word into characters)
  --bpe-dropout-samples K  K BPE-dropout segmentations of the training split, one per epoch in
                     turn (default: BPE_DROPOUT_SAMPLES=1, one static sample); subword-nmt only
  --force            rebuild even if data/bpe/PAIR is complete for these settings
needs data/raw/PAIR from scripts/prepare_data.sh; environment: QKNORM_WORK_DIR
EOF
}

MERGES_ARG="" TOOL_ARG="" VOCAB_ARG="" THRESHOLD_ARG="" DROPOUT_ARG="" SAMPLES_ARG="" FORCE=0
qk_parse_args "@PAIR_ARG" "--merges MERGES_ARG" "--tool TOOL_ARG" "--vocab-size VOCAB_ARG" \
    "--vocab-threshold THRESHOLD_ARG" "--bpe-dropout|--dropout DROPOUT_ARG" \
    "--bpe-dropout-samples SAMPLES_ARG" "--force FORCE=1" -- "$@"
load_pair_config "$PAIR_ARG"

TOOL="${TOOL_ARG:-$BPE_TOOL}"
MERGES="${MERGES_ARG:-$BPE_MERGES}"
VOCAB_SIZE="${VOCAB_ARG:-$SPM_VOCAB_SIZE}"
DROPOUT="${DROPOUT_ARG:-$BPE_DROPOUT}"
SAMPLES="${SAMPLES_ARG:-${BPE_DROPOUT_SAMPLES:-1}}"
BPE_VOCAB_THRESHOLD="${THRESHOLD_ARG:-$BPE_VOCAB_THRESHOLD}"
case "$TOOL" in
    subword-nmt | sentencepiece) ;;
    *) qk_usage_error "--tool must be subword-nmt or sentencepiece, got '$TOOL'" ;;
esac
# an option of the other tool would be dropped without a word
[[ -z "$VOCAB_ARG" || "$TOOL" == sentencepiece ]] \
    || qk_usage_error "--vocab-size is sentencepiece's (--tool sentencepiece); subword-nmt's size is --merges"
[[ -z "$MERGES_ARG" || "$TOOL" == subword-nmt ]] \
    || qk_usage_error "--merges is subword-nmt's; sentencepiece's size is --vocab-size"
[[ -z "$THRESHOLD_ARG" || "$TOOL" == subword-nmt ]] \
    || qk_usage_error "--vocab-threshold is subword-nmt's (apply-bpe --vocabulary-threshold); sentencepiece has none"
[[ "$MERGES" =~ ^[1-9][0-9]*$ ]] || qk_usage_error "--merges must be a positive integer, got '$MERGES'"
[[ "$BPE_VOCAB_THRESHOLD" =~ ^[0-9]+$ ]] || qk_usage_error "--vocab-threshold must be a non-negative integer, got '$BPE_VOCAB_THRESHOLD'"
[[ "$VOCAB_SIZE" =~ ^[1-9][0-9]*$ ]] || qk_usage_error "--vocab-size must be a positive integer, got '$VOCAB_SIZE'"
# the configuration's rule for bpe.dropout (0 = off, else 0 < P < 1), checked before anything
# and its one spelling (0.0 and 0 are one setting: no rebuild)
if [[ -n "$DROPOUT_ARG" ]]; then
    _qk_config option bpe.dropout --value="$DROPOUT_ARG" --option=--bpe-dropout
    DROPOUT="$QK_CONFIG_OUT"
fi
[[ "$SAMPLES" =~ ^[1-9][0-9]*$ ]] || qk_usage_error "--bpe-dropout-samples must be a positive integer, got '$SAMPLES'"
DROPOUT_ON=0
if awk -v p="$DROPOUT" 'BEGIN { exit !(p > 0) }'; then DROPOUT_ON=1; fi
if ((SAMPLES > 1)); then
    ((DROPOUT_ON)) || qk_usage_error "--bpe-dropout-samples $SAMPLES needs --bpe-dropout P > 0 (without dropout every sample is the same segmentation)"
    [[ "$TOOL" == subword-nmt ]] || qk_usage_error "--bpe-dropout-samples $SAMPLES is implemented for --tool subword-nmt only"
fi

RAW="$QK_DATA/raw/$PAIR"
OUT="$QK_DATA/bpe/$PAIR"
SPLIT_NAMES=(train dev test)

qk_is_done "$RAW" || die "$PAIR is not prepared ($QK_DONE_REASON): run scripts/prepare_data.sh $PAIR first"

SETTINGS="pair=$PAIR
tool=$TOOL"
if [[ "$TOOL" == subword-nmt ]]; then
    SETTINGS+="
merges=$MERGES
vocab_threshold=$BPE_VOCAB_THRESHOLD"
else
    SETTINGS+="
vocab_size=$VOCAB_SIZE
normalization=identity"
fi
SETTINGS+="
bpe_dropout=$DROPOUT"
if ((DROPOUT_ON)); then
    SETTINGS+="
seed=$BPE_DROPOUT_SEED
length_from=deterministic"
    # only when resampled: data made before the option keeps its settings (no rebuild)
    ((SAMPLES == 1)) || SETTINGS+="
bpe_dropout_samples=$SAMPLES"
fi
SETTINGS+="
length_percentile=$LENGTH_PERCENTILE
raw=$(qk_fingerprint "$RAW/.done")"

show_length_stats() {
    corpus_py length-stats --stats "$1" --paper-l "$PAPER_L"
}

# reused only if complete (.done checksums) and made by the same settings and inputs (.settings,
# the one rule of python -m qknorm_tools.freshness); else rebuilt, the log naming what changed
if ((FORCE == 0)) && [[ -e "$OUT/.done" ]]; then
    if ! qk_is_done "$OUT"; then
        qk_log "rebuilding: $QK_DONE_REASON"
    elif CHANGED="$("$QK_PY" -m qknorm_tools.freshness check "$OUT/.settings" --settings-lines "$SETTINGS" 2>&1)"; then
        echo "skip: $OUT already complete for these settings ($TOOL); use --force to rebuild"
        show_length_stats "$OUT/length_stats.json"
        exit 0
    else
        qk_log "rebuilding: $OUT was made with other settings or inputs: $CHANGED"
    fi
fi

qk_mktemp_dir TMP "$QK_DATA/bpe" "$PAIR"
# the raw data's checksums as read here (not data: when the raw data change later, the chain
# check of python -m qknorm_tools.provenance names the raw files that changed)
cp -- "$RAW/.done" "$TMP/.raw.done"
DETERMINISTIC="$TMP"  # the training split L is computed from: never a BPE-dropout sample
if ((DROPOUT_ON)); then
    DETERMINISTIC="$TMP/.deterministic"
    mkdir -p -- "$DETERMINISTIC"
    if ((SAMPLES == 1)); then
        qk_warn "BPE-dropout $DROPOUT: the training split is segmented once (one static sample, seed $BPE_DROPOUT_SEED) that every epoch sees, not resampled per epoch as in Provilkov et al. 2020 (--bpe-dropout-samples K does that); dev and test, and QKNorm's L, use the deterministic segmentation"
    else
        qk_log "BPE-dropout $DROPOUT resampled per epoch: $SAMPLES segmentations of the training split (seeds $BPE_DROPOUT_SEED..$((BPE_DROPOUT_SEED + SAMPLES - 1))), epoch e trains on sample ((e-1) % $SAMPLES) + 1; dev and test, and QKNorm's L, use the deterministic segmentation"
    fi
fi
outputs=()
for split in "${SPLIT_NAMES[@]}"; do
    outputs+=("$split.$SRC" "$split.$TGT")
done

if [[ "$TOOL" == subword-nmt ]]; then
    SUBWORD_NMT="$(qk_tool subword-nmt)"
    qk_log "learning $MERGES joint BPE merges on $RAW/train.{$SRC,$TGT}"
    qk_run "$SUBWORD_NMT" learn-joint-bpe-and-vocab --input "$RAW/train.$SRC" "$RAW/train.$TGT" \
        --symbols "$MERGES" --output "$TMP/codes" \
        --write-vocabulary "$TMP/vocab.$SRC" "$TMP/vocab.$TGT" 2>"$TMP/learn_bpe.log" \
        || { tail -n 20 "$TMP/learn_bpe.log" >&2; die "subword-nmt learn-joint-bpe-and-vocab failed"; }
    rm -f -- "$TMP/learn_bpe.log"
    for split in "${SPLIT_NAMES[@]}"; do
        for lang in "$SRC" "$TGT"; do
            opts=(--codes "$TMP/codes" --vocabulary "$TMP/vocab.$lang" --vocabulary-threshold "$BPE_VOCAB_THRESHOLD")
            if [[ "$split" == train ]] && ((DROPOUT_ON)); then
                opts+=(--dropout "$DROPOUT" --seed "$BPE_DROPOUT_SEED")
            fi
            "$SUBWORD_NMT" apply-bpe "${opts[@]}" <"$RAW/$split.$lang" >"$TMP/$split.$lang" \
                || die "subword-nmt apply-bpe failed on $RAW/$split.$lang"
        done
    done
    if ((DROPOUT_ON)); then
        for lang in "$SRC" "$TGT"; do
            "$SUBWORD_NMT" apply-bpe --codes "$TMP/codes" --vocabulary "$TMP/vocab.$lang" \
                --vocabulary-threshold "$BPE_VOCAB_THRESHOLD" <"$RAW/train.$lang" >"$DETERMINISTIC/train.$lang" \
                || die "subword-nmt apply-bpe failed on $RAW/train.$lang"
        done
    fi
    # samples 2..K of the per-epoch BPE-dropout (sample 1 is train.{SRC,TGT}), one seed each
    for ((k = 2; k <= SAMPLES; k++)); do
        mkdir -p -- "$TMP/epochs/$k"
        for lang in "$SRC" "$TGT"; do
            "$SUBWORD_NMT" apply-bpe --codes "$TMP/codes" --vocabulary "$TMP/vocab.$lang" \
                --vocabulary-threshold "$BPE_VOCAB_THRESHOLD" --dropout "$DROPOUT" \
                --seed "$((BPE_DROPOUT_SEED + k - 1))" <"$RAW/train.$lang" >"$TMP/epochs/$k/train.$lang" \
                || die "subword-nmt apply-bpe failed on $RAW/train.$lang (BPE-dropout sample $k)"
            [[ "$(qk_count_lines "$TMP/epochs/$k/train.$lang")" == "$(qk_count_lines "$RAW/train.$lang")" ]] \
                || die "subword-nmt changed the line count of train.$lang in BPE-dropout sample $k"
            outputs+=("epochs/$k/train.$lang")
        done
    done
    outputs+=(codes "vocab.$SRC" "vocab.$TGT")
else
    qk_log "training a joint sentencepiece BPE model (vocab size $VOCAB_SIZE) on $RAW/train.{$SRC,$TGT}"
    SPM_STATS="$(corpus_py spm --raw "$RAW" --out "$TMP" --src "$SRC" --tgt "$TGT" --vocab-size "$VOCAB_SIZE" \
        --dropout "$DROPOUT" --seed "$BPE_DROPOUT_SEED" --deterministic-dir "$DETERMINISTIC")" \
        || die "sentencepiece failed for $PAIR (see the error above); nothing in $OUT was changed"
    qk_log "sentencepiece: $SPM_STATS (pieces of the model; distinct pieces in the segmented training data)"
    outputs+=(spm.model spm.vocab)
fi

for split in "${SPLIT_NAMES[@]}"; do
    for lang in "$SRC" "$TGT"; do
        n_raw="$(qk_count_lines "$RAW/$split.$lang")"
        n_bpe="$(qk_count_lines "$TMP/$split.$lang")"
        [[ "$n_raw" == "$n_bpe" ]] || die "$TOOL changed the line count of $split.$lang: $n_raw -> $n_bpe"
    done
done

# segmented lengths against what the model takes (python -m qknorm_tools.seglen owns the limit
# and the rule): a dev or test line over it stops here (nothing in $OUT is changed); a training
# pair over it (in any of its segmentations) is dropped, counted and listed in too_long.json
COPIES=()
[[ "$DETERMINISTIC" == "$TMP" ]] || COPIES+=(--train-copy "$DETERMINISTIC")
for ((k = 2; k <= SAMPLES; k++)); do COPIES+=(--train-copy "$TMP/epochs/$k"); done
"$QK_PY" -m qknorm_tools.seglen check --raw "$RAW" --seg "$TMP" --src "$SRC" --tgt "$TGT" \
    --seg-name "$OUT" "${COPIES[@]+"${COPIES[@]}"}" \
    || die "the segmented lengths of $PAIR are refused (above); nothing in $OUT was changed"
[[ ! -f "$TMP/too_long.json" ]] || outputs+=(too_long.json)

(
    cd "$DETERMINISTIC"
    corpus_py length-percentile --file "train.$SRC" --file "train.$TGT" --q "$LENGTH_PERCENTILE" \
        --out "$TMP/length_stats.json" --meta "pair=$PAIR" --meta "src=$SRC" --meta "tgt=$TGT" \
        --meta "tool=$TOOL" --meta "merges=$MERGES" --meta "bpe_dropout=$DROPOUT" \
        --meta "segmentation=deterministic" --meta "paper_L=$PAPER_L" >/dev/null
) || die "length-percentile failed"
if ((SAMPLES > 1)); then  # kept: binarize.sh builds the one dictionary from it and every sample
    mv -- "$TMP/.deterministic" "$TMP/deterministic"
    outputs+=("deterministic/train.$SRC" "deterministic/train.$TGT")
fi
rm -rf -- "$TMP/.deterministic"
outputs+=(length_stats.json)

# bpe.json: how to segment new text exactly as here (qknorm_tools/textio.py:bpe_manifest; read by
# fairseq's --bpe pipeline --bpe-dir, fairseq_qknorm/bpe.py)
corpus_py bpe-manifest --out "$TMP/bpe.json" --pair "$PAIR" --src "$SRC" --tgt "$TGT" --tool "$TOOL" \
    --merges "$MERGES" --vocab-threshold "$BPE_VOCAB_THRESHOLD" --vocab-size "$VOCAB_SIZE" \
    --bpe-dropout "$DROPOUT" --seed "$BPE_DROPOUT_SEED" --samples "$SAMPLES" || die "cannot write bpe.json of $PAIR (above)"
outputs+=(bpe.json)

qk_write_done "$TMP" "$SETTINGS" "${outputs[@]}"
qk_replace_dir "$TMP" "$OUT"
echo "segmented $PAIR with $TOOL into $OUT"
show_length_stats "$OUT/length_stats.json"
