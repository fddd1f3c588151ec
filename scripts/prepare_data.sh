#!/usr/bin/env bash
# scripts/prepare_data.sh: put the raw (tokenized) splits of a pair under
# $QKNORM_WORK_DIR/data/raw/PAIR/{train,dev,test}.{SRC,TGT}, verified and checked.
#
# Source order for the input data:
#   1. --data-dir DIR, else $QKNORM_DATA_DIR, else <repo>/../shared/data if it exists:
#      a directory laid out like the project's shared data (ted-gl-en/, iwslt15-en-vi/, a
#      SHA256SUMS file), or holding the downloaded archives/files themselves
#      (qi18naacl-dataset.tar.gz, ted_talks.tar.gz, all_talks_*.tsv, train.en, tst2012.vi, ...);
#   2. archives/files already downloaded to data/download/;
#   3. a download from the canonical URL (configs/base.sh), checked for size and sha256.
# Local copies are verified against DIR/SHA256SUMS when it lists them (IWSLT'15 files without
# an entry: against the published checksums); every split goes through
# `python -m qknorm_tools.corpus check`. Everything is written to a temporary directory that
# replaces data/raw/PAIR only when complete; data/raw/PAIR/.done holds the checksums and a
# finished pair is skipped unless --force.
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"

usage() {
    cat <<EOF
usage: scripts/prepare_data.sh PAIR [--data-dir DIR] [--force]
  PAIR            one of: $(qk_known_pairs)
  --data-dir DIR  local copy/mirror of the corpora (default: \$QKNORM_DATA_DIR, else
                  <repo>/../shared/data if it exists, else download)
  --force         prepare again even if data/raw/PAIR/.done verifies
environment: QKNORM_WORK_DIR (output root, default repo root), QKNORM_DATA_DIR,
  QKNORM_OFFLINE=1 (never download), QKNORM_{QI18,TED_TALKS,IWSLT15}_URL (mirror URLs)
EOF
}

DATA_DIR_ARG="" FORCE=0
qk_parse_args "@PAIR_ARG" "--data-dir DATA_DIR_ARG" "--force FORCE=1" -- "$@"
load_pair_config "$PAIR_ARG"

RAW="$QK_DATA/raw/$PAIR"
DL="$QK_DATA/download"
SPLIT_NAMES=(train dev test)

if ((FORCE == 0)); then
    if qk_is_done "$RAW"; then
        echo "skip: $RAW already prepared (checksums in $RAW/.done verified); use --force to redo"
        exit 0
    elif [[ -e "$RAW/.done" ]]; then
        qk_log "$QK_DONE_REASON: preparing again"
    fi
fi

# ---------------------------------------------------------------------------------------------
# where the input comes from

DATA_DIR=""
DATA_DIR_FROM=""
if [[ -n "$DATA_DIR_ARG" ]]; then
    DATA_DIR="$DATA_DIR_ARG"; DATA_DIR_FROM="--data-dir"
elif [[ -n "${QKNORM_DATA_DIR:-}" ]]; then
    DATA_DIR="$QKNORM_DATA_DIR"; DATA_DIR_FROM="QKNORM_DATA_DIR"
elif [[ -d "$QK_REPO_ROOT/../shared/data" ]]; then
    DATA_DIR="$QK_REPO_ROOT/../shared/data"; DATA_DIR_FROM="default ../shared/data"
fi
if [[ -n "$DATA_DIR" ]]; then
    [[ -d "$DATA_DIR" ]] || die "data dir '$DATA_DIR' (from $DATA_DIR_FROM) is not a directory"
    DATA_DIR="$(cd "$DATA_DIR" && pwd -P)"
    qk_log "$PAIR ($SRC->$TGT): looking for local data in $DATA_DIR ($DATA_DIR_FROM)"
else
    qk_log "$PAIR ($SRC->$TGT): no local data dir (no --data-dir, QKNORM_DATA_DIR or ../shared/data)"
fi
if [[ -n "$DATA_DIR" ]]; then
    WHERE_TO_PUT="$DATA_DIR"
else
    WHERE_TO_PUT="a directory DIR (then pass --data-dir DIR or set QKNORM_DATA_DIR)"
fi
EXTRA_HINT=""

qk_mktemp_dir TMP "$QK_DATA/raw" "$PAIR"
SOURCE_DESC=""
WARNED_NO_SUMS=0

# find_input NAME...: first existing file among DATA_DIR/NAME and DL/NAME (for each NAME).
find_input() {
    local name d
    for name in "$@"; do
        for d in "$DATA_DIR" "$DL"; do
            if [[ -n "$d" && -f "$d/$name" ]]; then
                printf '%s\n' "$d/$name"
                return 0
            fi
        done
    done
    return 1
}

# verify_local FILE KEY [BYTES SHA256]: verify FILE against DATA_DIR/SHA256SUMS entry KEY when
# listed, else against BYTES/SHA256 when given (published checksums), else warn.
verify_local() {
    local file="$1" key="$2" bytes="${3-}" sha="${4-}" rc=0 sums=""
    if [[ -n "$DATA_DIR" && "$file" == "$DATA_DIR/"* && -f "$DATA_DIR/SHA256SUMS" ]]; then
        sums="$DATA_DIR/SHA256SUMS"
        corpus_py sha256 --file "$file" --sums "$sums" --key "$key" --name "$file" >&2 || rc=$?
        case "$rc" in
            0) return 0 ;;
            3) ;; # not listed: fall through to the published checksum, if any
            *) die "checksum verification of $file against $sums failed (see above); wrong or corrupted copy" ;;
        esac
    fi
    if [[ -n "$sha" ]]; then
        corpus_py sha256 --file "$file" --expected "$sha" --size "$bytes" --name "$file" >&2 \
            || die "verification of $file against the published size/sha256 failed (see above)"
        return 0
    fi
    if [[ -z "$sums" && "$WARNED_NO_SUMS" == 0 ]]; then
        qk_warn "no SHA256SUMS next to $file: local files not verified by checksum"
        WARNED_NO_SUMS=1
    fi
}

# check_split SPLIT SRC_FILE TGT_FILE: corpus check (alignment, UTF-8, empty/CRLF/long lines)
check_split() {
    local split="$1" s="$2" t="$3"
    corpus_py check --src "$s" --tgt "$t" --max-len "$MAX_TOKENS_CHECK" >/dev/null \
        || die "corpus check failed for $PAIR $split ($s / $t); see the messages above"
}

# get_archive FILE URL BYTES SHA256: path of a verified archive (local, cached or downloaded).
get_archive() {
    local file="$1" url="$2" bytes="$3" sha="$4" path
    if path="$(find_input "$file")"; then
        qk_log "verifying $path (size and sha256)"
        corpus_py sha256 --file "$path" --expected "$sha" --size "$bytes" --name "$path" >&2 \
            || die "$path is not the expected $file (see above); replace it with a good copy"
    else
        qk_download "$url" "$DL/$file" "$bytes" "$sha" \
            "Get $file ($bytes bytes, sha256 $sha) from $url or a mirror and put it in $WHERE_TO_PUT.$EXTRA_HINT"
        path="$DL/$file"
    fi
    printf '%s\n' "$path"
}

# extracted_dir FILE URL BYTES SHA256 DEST: DEST holding the safely extracted archive.
extracted_dir() {
    local file="$1" url="$2" bytes="$3" sha="$4" dest="$5" archive
    if [[ -f "$dest/.qknorm_extracted" ]]; then
        qk_log "using $dest (extracted earlier from a verified $file)"
    else
        archive="$(get_archive "$file" "$url" "$bytes" "$sha")"
        corpus_py untar --archive "$archive" --dest "$dest" || die "extraction of $archive failed"
    fi
}

copy_checked_splits() {
    # copy_checked_splits DIR LABEL: check then copy DIR/{split}.{SRC,TGT} into TMP
    local dir="$1" split
    for split in "${SPLIT_NAMES[@]}"; do
        check_split "$split" "$dir/$split.$SRC" "$dir/$split.$TGT"
    done
    for split in "${SPLIT_NAMES[@]}"; do
        cat -- "$dir/$split.$SRC" >"$TMP/$split.$SRC"
        cat -- "$dir/$split.$TGT" >"$TMP/$split.$TGT"
    done
}

find_tsv_dir() {
    local d
    for d in "$DATA_DIR" "$DATA_DIR/ted_talks" "$DL/ted_talks"; do
        if [[ -n "$DATA_DIR" || "$d" == "$DL/"* ]] && [[ -f "$d/all_talks_train.tsv" && -f "$d/all_talks_dev.tsv" && -f "$d/all_talks_test.tsv" ]]; then
            printf '%s\n' "$d"
            return 0
        fi
    done
    return 1
}

extract_from_tsv() {
    local tsvdir="$1" split
    local rel=""
    if [[ -n "$DATA_DIR" && "$tsvdir" == "$DATA_DIR/"* ]]; then
        rel="${tsvdir#"$DATA_DIR"/}/"
    fi
    for split in "${SPLIT_NAMES[@]}"; do
        if [[ -n "$DATA_DIR" && ( "$tsvdir" == "$DATA_DIR" || "$tsvdir" == "$DATA_DIR/"* ) ]]; then
            verify_local "$tsvdir/all_talks_$split.tsv" "${rel}all_talks_$split.tsv"
        fi
    done
    qk_log "extracting $SRC-$TGT from $tsvdir/all_talks_{train,dev,test}.tsv (dropping __NULL__ rows)"
    corpus_py extract-tsv --tsv-dir "$tsvdir" --src "$SRC" --tgt "$TGT" --out "$TMP/extracted" >"$TMP/extract.log" \
        || die "extraction of $SRC-$TGT from $tsvdir failed (see above)"
    grep -v '^{' "$TMP/extract.log" >&2 || true
    SOURCE_DESC="TED all-talks TSVs in $tsvdir"
}

# extract_from_qi18: the pair folder QI18_FOLDER of qi18naacl-dataset.tar.gz (safely extracted
# once to data/download/qi18naacl-dataset/), blank/NULL pairs dropped, into TMP/extracted.
extract_from_qi18() {
    local qi18dir="$DL/qi18naacl-dataset"
    extracted_dir "$QI18_FILE" "$QI18_URL" "$QI18_BYTES" "$QI18_SHA256" "$qi18dir"
    corpus_py extract-pair-folder --root "$qi18dir" --folder "$QI18_FOLDER" --src "$SRC" --tgt "$TGT" \
        --out "$TMP/extracted" >"$TMP/extract.log" || die "extraction of $QI18_FOLDER from $qi18dir failed"
    grep -v '^{' "$TMP/extract.log" >&2 || true
    SOURCE_DESC="$QI18_FOLDER of $QI18_FILE"
}

prepare_ted() {
    local local_dir="$DATA_DIR/$TED_LOCAL_DIR" split lang all=1 tsvdir
    EXTRA_HINT=" Alternatively put a pre-extracted copy $TED_LOCAL_DIR/{train,dev,test}.{$SRC,$TGT} (with a SHA256SUMS) or all_talks_{train,dev,test}.tsv there."
    # 1. a pre-extracted copy (like ../shared/data/ted-gl-en)
    if [[ -n "$DATA_DIR" && -d "$local_dir" ]]; then
        for split in "${SPLIT_NAMES[@]}"; do
            for lang in "$SRC" "$TGT"; do
                [[ -f "$local_dir/$split.$lang" ]] || { all=0; qk_warn "$local_dir/$split.$lang missing"; }
            done
        done
        if ((all)); then
            qk_log "using the local copy $local_dir"
            for split in "${SPLIT_NAMES[@]}"; do
                for lang in "$SRC" "$TGT"; do
                    verify_local "$local_dir/$split.$lang" "$TED_LOCAL_DIR/$split.$lang"
                done
            done
            copy_checked_splits "$local_dir"
            SOURCE_DESC="local copy $local_dir"
            return 0
        fi
    fi
    # 2. the papers' pair folder from qi18naacl-dataset.tar.gz (gl-en only)
    if [[ -n "${QI18_FOLDER:-}" ]] && { [[ -f "$DL/qi18naacl-dataset/.qknorm_extracted" ]] || find_input "$QI18_FILE" >/dev/null; }; then
        extract_from_qi18
    # 3. all-talks TSVs, already extracted
    elif tsvdir="$(find_tsv_dir)"; then
        extract_from_tsv "$tsvdir"
    # 4. ted_talks.tar.gz (local, cached, else downloaded); gl-en downloads the qi18 archive
    else
        if [[ -n "${QI18_FOLDER:-}" ]] && ! find_input "$TED_TALKS_FILE" >/dev/null; then
            qk_log "no local copy of $PAIR: fetching the papers' set ($QI18_FOLDER of $QI18_FILE)"
            extract_from_qi18
        else
            if [[ -n "$DATA_DIR" ]]; then
                qk_log "no $TED_LOCAL_DIR/, all_talks_*.tsv or archive for $PAIR in $DATA_DIR"
            fi
            extracted_dir "$TED_TALKS_FILE" "$TED_TALKS_URL" "$TED_TALKS_BYTES" "$TED_TALKS_SHA256" "$DL/ted_talks"
            tsvdir="$(find "$DL/ted_talks" -name all_talks_train.tsv -print -quit)"
            tsvdir="${tsvdir%/all_talks_train.tsv}"
            [[ -n "$tsvdir" ]] || die "$DL/ted_talks holds no all_talks_train.tsv: not the expected ted_talks.tar.gz"
            extract_from_tsv "$tsvdir"
        fi
    fi
    copy_checked_splits "$TMP/extracted"
    rm -rf -- "$TMP/extracted" "$TMP/extract.log"
}

# iwslt_file NAME: the verified local/cached/downloaded path of an IWSLT'15 release file.
iwslt_file() {
    local name="$1" bytes sha line path rel
    line="$(printf '%s\n' "$IWSLT15_FILES" | awk -v n="$name" '$1 == n')"
    [[ -n "$line" ]] || die "configs/pairs/en-vi.sh: no size/sha256 for $name in IWSLT15_FILES"
    read -r _ bytes sha <<<"$line"
    if path="$(find_input "$IWSLT15_LOCAL_DIR/$name" "$name")"; then
        rel="${path#"$DATA_DIR"/}"
        verify_local "$path" "$rel" "$bytes" "$sha" >&2
    else
        qk_download "$IWSLT15_URL/$name" "$DL/$IWSLT15_LOCAL_DIR/$name" "$bytes" "$sha" \
            "$name is missing: not found in ${DATA_DIR:+$DATA_DIR/$IWSLT15_LOCAL_DIR/, $DATA_DIR/ or }$DL/$IWSLT15_LOCAL_DIR/. Get $name ($bytes bytes, sha256 $sha) from $IWSLT15_URL/$name and put it in $IWSLT15_LOCAL_DIR/ of $WHERE_TO_PUT (or in $DL/$IWSLT15_LOCAL_DIR/).${VERIFIED_MSG:-}"
        path="$DL/$IWSLT15_LOCAL_DIR/$name"
    fi
    printf '%s\n' "$path"
}

prepare_iwslt15() {
    local split prefix s t
    VERIFIED_MSG=""
    # dev and test first, so that they are verified even when train has to be fetched
    for split in dev test; do
        if [[ "$split" == dev ]]; then prefix="$IWSLT15_DEV"; else prefix="$IWSLT15_TEST"; fi
        s="$(iwslt_file "$prefix.$SRC")"
        t="$(iwslt_file "$prefix.$TGT")"
        check_split "$split" "$s" "$t"
        cat -- "$s" >"$TMP/$split.$SRC"
        cat -- "$t" >"$TMP/$split.$TGT"
        qk_log "$split = $prefix: verified and checked ($(qk_count_lines "$s") lines)"
    done
    VERIFIED_MSG=" (dev $IWSLT15_DEV and test $IWSLT15_TEST were verified OK; nothing was written)"
    s="$(iwslt_file "train.$SRC")"
    t="$(iwslt_file "train.$TGT")"
    check_split train "$s" "$t"
    cat -- "$s" >"$TMP/train.$SRC"
    cat -- "$t" >"$TMP/train.$TGT"
    SOURCE_DESC="IWSLT'15 $SRC-$TGT release (train, dev=$IWSLT15_DEV, test=$IWSLT15_TEST) from $(dirname "$s")"
}

case "$CORPUS" in
    ted) prepare_ted ;;
    iwslt15) prepare_iwslt15 ;;
esac

# ---------------------------------------------------------------------------------------------
# expected line counts (warning only: the checksums are the guard), marker, install

files=()
counts=()
for split in "${SPLIT_NAMES[@]}"; do
    n="$(qk_count_lines "$TMP/$split.$SRC")"
    counts+=("$split $n")
    files+=("$split.$SRC" "$split.$TGT")
    var="LINES_${split^^}"
    if [[ "$SOURCE_DESC" == *"$QI18_FILE"* ]]; then var="QI18_$var"; fi
    if [[ -n "${!var:-}" && "${!var}" != "$n" ]]; then
        qk_warn "$PAIR $split has $n lines, expected ${!var} ($var in configs/pairs/$PAIR.sh) for the canonical data"
    fi
done

printf 'pair=%s\nsrc=%s\ntgt=%s\nsource=%s\nprepared=%s\n' "$PAIR" "$SRC" "$TGT" "$SOURCE_DESC" \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$TMP/SOURCE"
# .done covers the data files only, so that the fingerprint later steps record (sha256 of .done)
# changes only when the data change, not when SOURCE's timestamp does
qk_write_done "$TMP" "pair=$PAIR" "${files[@]}"
qk_replace_dir "$TMP" "$RAW"
echo "prepared $RAW: ${counts[*]} lines; source: $SOURCE_DESC"
