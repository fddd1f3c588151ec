#!/usr/bin/env bash
# scripts/prepare_data.sh: put the raw (tokenized) splits of a pair under
# $QKNORM_WORK_DIR/data/raw/PAIR/{train,dev,test}.{SRC,TGT}, verified and checked.
#
# Where the input comes from:
#   * a data dir given with --data-dir DIR or $QKNORM_DATA_DIR is used, or refused: it must hold
#     a usable copy of the pair (below), else the script stops with an error naming what it
#     looked for and what it found (python -m qknorm_tools.corpus diagnose); it never falls back
#     to data/download/ or to a download of another corpus;
#   * without one, <repo>/../shared/data if it exists (the project's shared data), then archives
#     already downloaded to data/download/, then a download from the canonical URL
#     (configs/base.toml), checked for size and sha256; --download skips the local folders.
# A usable copy: for TED pairs (CORPUS=ted) the pair folder DIR/TED_LOCAL_DIR (e.g. ted-gl-en/)
# or DIR itself holding {train,dev,test}.{SRC,TGT}, qi18naacl-dataset.tar.gz (gl-en), the
# all-talks TSVs (DIR or DIR/ted_talks/) or ted_talks.tar.gz; for IWSLT'15 (en-vi) the release
# files in DIR/iwslt15-en-vi/ or DIR; for an own corpus (CORPUS=local) the six files named by
# its config. A reverse direction (en-gl) reads its base pair's files with the sides swapped.
# Local copies are verified against DIR/SHA256SUMS when it lists them (IWSLT'15 files without
# an entry: against the published checksums); every split goes through
# `python -m qknorm_tools.corpus check`. Everything is written to a temporary directory that
# replaces data/raw/PAIR only when complete; data/raw/PAIR/.done holds the checksums and
# .settings the source. A finished pair is skipped unless --force, or unless a data dir or an
# own corpus is given that is not the one it was prepared from.
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"

usage() {
    cat <<EOF
usage: scripts/prepare_data.sh PAIR [--data-dir DIR | --download] [--force]
  PAIR            $(qk_pair_usage 18)
  --data-dir DIR  the local copy of the corpora to use (default: \$QKNORM_DATA_DIR, else
                  <repo>/../shared/data if it exists); a given DIR is used or refused, never
                  replaced by a download
  --download      ignore local data dirs: use data/download/ or download the canonical files
  --force         prepare again even if data/raw/PAIR/.done verifies
environment: QKNORM_WORK_DIR (output root, default repo root), QKNORM_DATA_DIR,
  QKNORM_OFFLINE=1 (never download), QKNORM_{QI18,TED_TALKS,IWSLT15}_URL (mirror URLs)
EOF
}

DATA_DIR_ARG="" DOWNLOAD=0 FORCE=0
qk_parse_args "@PAIR_ARG" "--data-dir DATA_DIR_ARG" "--download DOWNLOAD=1" "--force FORCE=1" \
    -- "$@"
[[ -z "$DATA_DIR_ARG" || "$DOWNLOAD" == 0 ]] || qk_usage_error "--data-dir and --download exclude each other"
load_pair_config "$PAIR_ARG"

RAW="$QK_DATA/raw/$PAIR"
DL="$QK_DATA/download"
SPLIT_NAMES=(train dev test)

# ---------------------------------------------------------------------------------------------
# where the input comes from

DATA_DIR="" DATA_DIR_FROM="" EXPLICIT=0
if ((DOWNLOAD)); then
    [[ "$CORPUS" != local ]] || qk_usage_error "--download: $PAIR is an own corpus ($PAIR_CONFIG), there is nothing to download"
elif [[ -n "$DATA_DIR_ARG" ]]; then
    DATA_DIR="$DATA_DIR_ARG" DATA_DIR_FROM="--data-dir" EXPLICIT=1
elif [[ -n "${QKNORM_DATA_DIR:-}" ]]; then
    DATA_DIR="$QKNORM_DATA_DIR" DATA_DIR_FROM="QKNORM_DATA_DIR" EXPLICIT=1
elif [[ -d "$QK_REPO_ROOT/../shared/data" ]]; then
    DATA_DIR="$QK_REPO_ROOT/../shared/data" DATA_DIR_FROM="default ../shared/data"
fi
if [[ -n "$DATA_DIR" ]]; then
    [[ -d "$DATA_DIR" ]] || die "data dir '$DATA_DIR' (from $DATA_DIR_FROM) is not a directory"
    DATA_DIR="$(cd "$DATA_DIR" && pwd -P)"
fi

# LOCAL_FILES: an own corpus's six files (absolute), in the order train src, train tgt, dev ...
LOCAL_FILES=()
if [[ "$CORPUS" == local ]]; then
    if [[ "${LOCAL_DIR:-}" == /* ]]; then
        LOCAL_BASE="$LOCAL_DIR"
    else
        [[ -n "$DATA_DIR" ]] \
            || die "$PAIR_CONFIG: key 'local.dir' = '${LOCAL_DIR:-}' is ${LOCAL_DIR:+relative to }the data dir: give --data-dir DIR (or QKNORM_DATA_DIR), or make local.dir absolute"
        LOCAL_BASE="$DATA_DIR${LOCAL_DIR:+/$LOCAL_DIR}"
    fi
    [[ -d "$LOCAL_BASE" ]] || die "$PAIR_CONFIG: key 'local.dir': $LOCAL_BASE is not a directory"
    LOCAL_BASE="$(cd "$LOCAL_BASE" && pwd -P)"
    for v in "${QK_LOCAL_FILE_VARS[@]}"; do
        f="${!v}"
        [[ "$f" == /* ]] || f="$LOCAL_BASE/$f"
        LOCAL_FILES+=("$f")
    done
fi

# SOURCE_ID: what data/raw/PAIR is prepared from, recorded in its .settings. A data dir given
# explicitly (or an own corpus) that is not the recorded one is prepared again; a pair prepared
# from the default source is kept whatever that was.
SOURCE_SHOWN="${DATA_DIR:-the canonical files}"
if [[ "$CORPUS" == local ]]; then
    SOURCE_SHOWN="the unchanged files of $PAIR_CONFIG"
    SOURCE_ID="files=${LOCAL_FILES[*]}"
    for f in "${LOCAL_FILES[@]}"; do
        [[ ! -f "$f" ]] || SOURCE_ID+=" $(stat -c '%s:%Y' -- "$f")"
    done
    EXPLICIT=1
elif ((DOWNLOAD)); then
    SOURCE_ID="data_dir="
else
    SOURCE_ID="data_dir=$DATA_DIR"
fi
SETTINGS="pair=$PAIR
src=$SRC
tgt=$TGT
$SOURCE_ID"
# the Unicode normalization ([text] normalize): a line only when the text is changed, so that
# data prepared before the key existed stays valid
NORMALIZE_SETTING=""
[[ "$TEXT_NORMALIZE" == none ]] || NORMALIZE_SETTING="normalize=$TEXT_NORMALIZE"
[[ -z "$NORMALIZE_SETTING" ]] || SETTINGS+=$'\n'"$NORMALIZE_SETTING"
# normalized_as_wanted: data/raw/PAIR was prepared with the [text] normalize of now
normalized_as_wanted() {
    [[ "$(grep -x 'normalize=.*' "$RAW/.settings" 2>/dev/null || true)" == "$NORMALIZE_SETTING" ]]
}

# reused only if complete (.done checksums) and, for a source given explicitly, made from it with
# these settings (.settings, the one rule of python -m qknorm_tools.freshness); else prepared
# again, the log naming what changed (each setting as recorded -> as now)
if ((FORCE == 0)) && [[ -e "$RAW/.done" ]]; then
    if ! qk_is_done "$RAW"; then
        qk_log "$QK_DONE_REASON: preparing again"
    elif ((EXPLICIT)); then
        if CHANGED="$("$QK_PY" -m qknorm_tools.freshness check "$RAW/.settings" --settings-lines "$SETTINGS" 2>&1)"; then
            echo "skip: $RAW already prepared from $SOURCE_SHOWN (checksums in $RAW/.done verified); use --force to redo"
            exit 0
        fi
        qk_log "$RAW was made with other settings or inputs: $CHANGED: preparing again"
    elif normalized_as_wanted; then
        echo "skip: $RAW already prepared (checksums in $RAW/.done verified; source in $RAW/SOURCE); use --force to redo"
        exit 0
    else
        qk_log "$RAW was prepared with another [text] normalize than '$TEXT_NORMALIZE': preparing again"
    fi
fi

if [[ "$CORPUS" == local ]]; then
    qk_log "$PAIR ($PAIR_DESC): own corpus in $LOCAL_BASE"
elif [[ -n "$DATA_DIR" ]]; then
    qk_log "$PAIR ($PAIR_DESC): looking for local data in $DATA_DIR ($DATA_DIR_FROM)"
elif ((DOWNLOAD)); then
    qk_log "$PAIR ($PAIR_DESC): --download: data/download/ or the canonical files"
else
    qk_log "$PAIR ($PAIR_DESC): no local data dir (no --data-dir, no QKNORM_DATA_DIR, no $(cd "$QK_REPO_ROOT/.." && pwd)/shared/data next to this clone)"
fi
if [[ -n "$DATA_DIR" ]]; then
    WHERE_TO_PUT="$DATA_DIR"
else
    WHERE_TO_PUT="a directory DIR (then pass --data-dir DIR or set QKNORM_DATA_DIR)"
fi
EXTRA_HINT=""

# SEARCH_DIRS: where input files are looked up. A given data dir alone: never data/download/.
SEARCH_DIRS=()
[[ -z "$DATA_DIR" ]] || SEARCH_DIRS+=("$DATA_DIR")
((EXPLICIT)) || SEARCH_DIRS+=("$DL")

qk_mktemp_dir TMP "$QK_DATA/raw" "$PAIR"
SOURCE_DESC=""
WARNED_NO_SUMS=0

# find_input NAME...: first existing file among SEARCH_DIRS/NAME (for each NAME).
find_input() {
    local name d
    for name in "$@"; do
        for d in "${SEARCH_DIRS[@]+"${SEARCH_DIRS[@]}"}"; do
            if [[ -f "$d/$name" ]]; then
                printf '%s\n' "$d/$name"
                return 0
            fi
        done
    done
    return 1
}

# refuse_data_dir WHAT_WAS_LOOKED_FOR [FOLDER [SPLITS]]: a given data dir without a usable
# copy: die naming what was looked for and what the dir holds instead.
refuse_data_dir() {
    local looked="$1" folder="${2-}" splits="${3:-train,dev,test}" found
    found="$(corpus_py diagnose --dir "$DATA_DIR" --src "$SRC" --tgt "$TGT" --folder "$folder" \
        --splits "$splits" | sed 's/^/  - /')" || found="  (could not list $DATA_DIR)"
    die "data dir $DATA_DIR (from $DATA_DIR_FROM) holds no usable copy of $PAIR ($PAIR_DESC).
Looked for: $looked.
Found:
$found
A data dir that was given is used or refused, never replaced by a download: fix it, or run without --data-dir${QKNORM_DATA_DIR:+ and unset QKNORM_DATA_DIR} (or with --download) to download the canonical files."
}

# verify_with_sums FILE SUMS KEY: verify FILE against the SHA256SUMS file SUMS (entry KEY).
# Returns 0 (verified), 3 (not listed) or dies on a mismatch.
verify_with_sums() {
    local file="$1" sums="$2" key="$3" rc=0
    corpus_py sha256 --file "$file" --sums "$sums" --key "$key" --name "$file" >&2 || rc=$?
    case "$rc" in
        0 | 3) return "$rc" ;;
        *) die "checksum verification of $file against $sums failed (see above); wrong or corrupted copy" ;;
    esac
}

# verify_local FILE KEY [BYTES SHA256]: verify FILE against DATA_DIR/SHA256SUMS entry KEY when
# listed, else against BYTES/SHA256 when given (published checksums), else warn once.
verify_local() {
    local file="$1" key="$2" bytes="${3-}" sha="${4-}" rc=0 sums=""
    if [[ -n "$DATA_DIR" && "$file" == "$DATA_DIR/"* && -f "$DATA_DIR/SHA256SUMS" ]]; then
        sums="$DATA_DIR/SHA256SUMS"
        verify_with_sums "$file" "$sums" "$key" || rc=$?
        ((rc != 0)) || return 0
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

# check_split SPLIT SRC_FILE TGT_FILE: corpus check (alignment, UTF-8, empty/CRLF/NUL/long lines)
# (files extracted into the temporary dir are named as what they are, not by their .tmp path)
check_split() {
    local split="$1" s="$2" t="$3" sn tn
    sn="$(shown_name "$s")" tn="$(shown_name "$t")"
    corpus_py check --src "$s" --tgt "$t" --src-name "$sn" --tgt-name "$tn" \
        --max-len "$MAX_TOKENS_CHECK" --normalize "$TEXT_NORMALIZE" >/dev/null \
        || die "corpus check failed for $PAIR $split ($sn / $tn); see the messages above"
}
shown_name() {
    if [[ "$1" == "$TMP/"* ]]; then
        printf '%s (as extracted from the %s)\n' "${1##*/}" "${SOURCE_DESC:-source}"
    else
        printf '%s\n' "$1"
    fi
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

# check_distinct FILE...: no two of the files are one file (a symlink or hard link; with
# FILE_NAMES set, e.g. an own corpus's config fields, the messages name those)
FILE_NAMES=()
check_distinct() {
    corpus_py distinct "$@" ${FILE_NAMES[@]+--names "${FILE_NAMES[@]}"} \
        || die "the $PAIR corpus names one file twice (see above): every side and split needs its own file"
}

# copy_checked_splits SRC_TRAIN TGT_TRAIN SRC_DEV TGT_DEV SRC_TEST TGT_TEST: check the six are
# different files and each split, then copy the six files into TMP/{train,dev,test}.{SRC,TGT}.
# ORIGINS: for each copy of a file the user gave (not one extracted here), the line
# origin.SPLIT.LANG=FILE of SOURCE: the copy is that file line for line, and a later check
# (python -m qknorm_tools.seglen) names the line in it, the one to fix.
ORIGINS=()
copy_checked_splits() {
    local files=("$@") i split lang f
    check_distinct "${files[@]}"
    for i in 0 1 2; do
        check_split "${SPLIT_NAMES[$i]}" "${files[$((2 * i))]}" "${files[$((2 * i + 1))]}"
    done
    for i in 0 1 2 3 4 5; do
        split="${SPLIT_NAMES[$((i / 2))]}" lang="$SRC" f="${files[$i]}"
        ((i % 2 == 0)) || lang="$TGT"
        cat -- "$f" >"$TMP/$split.$lang"
        [[ "$f" == "$TMP/"* ]] || ORIGINS+=("origin.$split.$lang=$(realpath -- "$f")")
    done
}

# split_files DIR: DIR/{train,dev,test}.{SRC,TGT} in copy_checked_splits order.
split_files() {
    local split
    for split in "${SPLIT_NAMES[@]}"; do
        printf '%s\n%s\n' "$1/$split.$SRC" "$1/$split.$TGT"
    done
}

# use_pair_folder DIR KEY_PREFIX SUMS: a pre-extracted pair folder (like ted-gl-en/): every
# file present (else die naming the missing ones), verified against SUMS (entries
# KEY_PREFIX<file>) when it lists them, checked, copied.
use_pair_folder() {
    local dir="$1" prefix="$2" sums="$3" f missing=() files=() rc
    mapfile -t files < <(split_files "$dir")
    for f in "${files[@]}"; do
        [[ -f "$f" ]] || missing+=("${f##*/}")
    done
    ((${#missing[@]} == 0)) || {
        local found
        found="$(corpus_py diagnose --dir "$dir" --src "$SRC" --tgt "$TGT" | sed 's/^/  - /')" || true
        die "$dir lacks ${missing[*]} (a pair folder holds {train,dev,test}.{$SRC,$TGT}); found:
$found"
    }
    qk_log "using the local copy $dir"
    for f in "${files[@]}"; do
        rc=3
        if [[ -n "$sums" ]]; then
            rc=0
            verify_with_sums "$f" "$sums" "$prefix${f##*/}" || rc=$?
        fi
        if ((rc == 3)) && ((WARNED_NO_SUMS == 0)); then
            qk_warn "no SHA256SUMS entry for $f${sums:+ in $sums}: local files not verified by checksum"
            WARNED_NO_SUMS=1
        fi
    done
    copy_checked_splits "${files[@]}"
    SOURCE_DESC="local copy $dir"
}

# holds_split_files DIR: DIR holds some {split}.SRC and some {split}.TGT file (a pair folder).
holds_split_files() {
    local split s=0 t=0
    for split in "${SPLIT_NAMES[@]}" valid; do
        [[ ! -f "$1/$split.$SRC" ]] || s=1
        [[ ! -f "$1/$split.$TGT" ]] || t=1
    done
    ((s && t))
}

find_tsv_dir() {
    local d
    for d in "$DATA_DIR" "$DATA_DIR/ted_talks" "$DL/ted_talks"; do
        [[ -n "$DATA_DIR" || "$d" == "$DL/"* ]] || continue
        ((EXPLICIT == 0)) || [[ "$d" != "$DL/"* ]] || continue
        if [[ -f "$d/all_talks_train.tsv" && -f "$d/all_talks_dev.tsv" && -f "$d/all_talks_test.tsv" ]]; then
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

# counts_of PREFIX: "train / dev / test" line counts of LINES_* (PREFIX "") or QI18_LINES_*.
counts_of() {
    local v out=() n
    for v in TRAIN DEV TEST; do
        n="${1}LINES_$v"
        out+=("${!n:-?}")
    done
    printf '%s / %s / %s' "${out[@]}"
}

prepare_ted() {
    local local_dir="$DATA_DIR/$TED_LOCAL_DIR" tsvdir sums=""
    EXTRA_HINT=" Alternatively put a pre-extracted copy $TED_LOCAL_DIR/{train,dev,test}.{$SRC,$TGT} (with a SHA256SUMS) or all_talks_{train,dev,test}.tsv there."
    # 1. a pre-extracted pair folder: DATA_DIR/TED_LOCAL_DIR (like ../shared/data/ted-gl-en), or
    #    (given data dir) DATA_DIR itself, verified against its own or its parent's SHA256SUMS
    if [[ -n "$DATA_DIR" && -d "$local_dir" ]]; then
        [[ ! -f "$DATA_DIR/SHA256SUMS" ]] || sums="$DATA_DIR/SHA256SUMS"
        use_pair_folder "$local_dir" "$TED_LOCAL_DIR/" "$sums"
        return 0
    fi
    if ((EXPLICIT)) && holds_split_files "$DATA_DIR"; then
        if [[ -f "$DATA_DIR/SHA256SUMS" ]]; then
            use_pair_folder "$DATA_DIR" "" "$DATA_DIR/SHA256SUMS"
        elif [[ -f "$DATA_DIR/../SHA256SUMS" ]]; then
            use_pair_folder "$DATA_DIR" "${DATA_DIR##*/}/" "$(cd "$DATA_DIR/.." && pwd -P)/SHA256SUMS"
        else
            use_pair_folder "$DATA_DIR" "" ""
        fi
        return 0
    fi
    # 2. the papers' pair folder from qi18naacl-dataset.tar.gz (gl-en only)
    if [[ -n "${QI18_FOLDER:-}" ]] && { find_input "$QI18_FILE" >/dev/null \
        || { ((EXPLICIT == 0)) && [[ -f "$DL/qi18naacl-dataset/.qknorm_extracted" ]]; }; }; then
        extract_from_qi18
    # 3. all-talks TSVs, already extracted
    elif tsvdir="$(find_tsv_dir)"; then
        extract_from_tsv "$tsvdir"
    # 4. ted_talks.tar.gz (local, cached, else downloaded); gl-en downloads the qi18 archive
    elif find_input "$TED_TALKS_FILE" >/dev/null || { ((EXPLICIT == 0)) && [[ -z "${QI18_FOLDER:-}" ]]; }; then
        if [[ -n "$DATA_DIR" ]] && ! find_input "$TED_TALKS_FILE" >/dev/null; then
            qk_log "no $TED_LOCAL_DIR/, all_talks_*.tsv or archive for $PAIR in $DATA_DIR ($DATA_DIR_FROM)"
        fi
        extracted_dir "$TED_TALKS_FILE" "$TED_TALKS_URL" "$TED_TALKS_BYTES" "$TED_TALKS_SHA256" "$DL/ted_talks"
        tsvdir="$(find "$DL/ted_talks" -name all_talks_train.tsv -print -quit)"
        tsvdir="${tsvdir%/all_talks_train.tsv}"
        [[ -n "$tsvdir" ]] || die "$DL/ted_talks holds no all_talks_train.tsv: not the expected ted_talks.tar.gz"
        extract_from_tsv "$tsvdir"
    elif ((EXPLICIT)); then
        refuse_data_dir "$TED_LOCAL_DIR/{train,dev,test}.{$SRC,$TGT} (or those six files in the dir itself)${QI18_FOLDER:+, $QI18_FILE}, all_talks_{train,dev,test}.tsv (in the dir or ted_talks/), $TED_TALKS_FILE" \
            "$TED_LOCAL_DIR"
    else
        qk_log "no local copy of $PAIR${DATA_DIR:+ in $DATA_DIR} or data/download/: downloading the papers' set, the $QI18_FOLDER folder of $QI18_FILE ($QI18_BYTES bytes): $(counts_of QI18_) train / dev / test pairs, a different corpus from the $(counts_of "") all-talks extraction of ../shared/data/$TED_LOCAL_DIR"
        extract_from_qi18
    fi
    local extracted=()
    mapfile -t extracted < <(split_files "$TMP/extracted")
    copy_checked_splits "${extracted[@]}"
}

# iwslt_file NAME: the verified local/cached/downloaded path of an IWSLT'15 release file.
iwslt_file() {
    local name="$1" bytes sha line path rel
    line="$(printf '%s\n' "$IWSLT15_FILES" | awk -v n="$name" '$1 == n')"
    [[ -n "$line" ]] || die "$PAIR_CONFIG: no size/sha256 for $name in key 'iwslt15.files'"
    read -r _ bytes sha <<<"$line"
    if path="$(find_input "$IWSLT15_LOCAL_DIR/$name" "$name")"; then
        rel="${path#"$DATA_DIR"/}"
        verify_local "$path" "$rel" "$bytes" "$sha" >&2
    else
        local where="$DL/$IWSLT15_LOCAL_DIR/"
        if ((EXPLICIT)); then
            where="$DATA_DIR/$IWSLT15_LOCAL_DIR/ or $DATA_DIR/"
        elif [[ -n "$DATA_DIR" ]]; then
            where="$DATA_DIR/$IWSLT15_LOCAL_DIR/, $DATA_DIR/ or $where"
        fi
        local what="$name is missing: not found in $where."
        local get="Get $name ($bytes bytes, sha256 $sha) from $IWSLT15_URL/$name and put it in $IWSLT15_LOCAL_DIR/ of $WHERE_TO_PUT"
        if ((EXPLICIT)); then
            die "$what $get, or run without --data-dir${QKNORM_DATA_DIR:+ and unset QKNORM_DATA_DIR} to download it (a data dir that was given is never completed by downloads).${VERIFIED_MSG:-}"
        fi
        qk_download "$IWSLT15_URL/$name" "$DL/$IWSLT15_LOCAL_DIR/$name" "$bytes" "$sha" \
            "$what $get (or in $DL/$IWSLT15_LOCAL_DIR/).${VERIFIED_MSG:-}"
        path="$DL/$IWSLT15_LOCAL_DIR/$name"
    fi
    printf '%s\n' "$path"
}

prepare_iwslt15() {
    local split prefix s t inputs=()
    VERIFIED_MSG=""
    if ((EXPLICIT)) && ! find_input "$IWSLT15_LOCAL_DIR/$IWSLT15_DEV.$SRC" "$IWSLT15_DEV.$SRC" \
        "$IWSLT15_LOCAL_DIR/train.$SRC" "train.$SRC" >/dev/null; then
        refuse_data_dir "$IWSLT15_LOCAL_DIR/{train,$IWSLT15_DEV,$IWSLT15_TEST}.{$SRC,$TGT} (or those files in the dir itself)" \
            "$IWSLT15_LOCAL_DIR" "train,$IWSLT15_DEV,$IWSLT15_TEST"
    fi
    # dev and test first, so that they are verified even when train has to be fetched
    for split in dev test; do
        if [[ "$split" == dev ]]; then prefix="$IWSLT15_DEV"; else prefix="$IWSLT15_TEST"; fi
        s="$(iwslt_file "$prefix.$SRC")"
        t="$(iwslt_file "$prefix.$TGT")"
        inputs+=("$s" "$t")
        check_distinct "${inputs[@]}"
        check_split "$split" "$s" "$t"
        cat -- "$s" >"$TMP/$split.$SRC"
        cat -- "$t" >"$TMP/$split.$TGT"
        qk_log "$split = $prefix: verified and checked ($(qk_count_lines "$s") lines)"
    done
    VERIFIED_MSG=" (dev $IWSLT15_DEV and test $IWSLT15_TEST were verified OK; nothing was written)"
    s="$(iwslt_file "train.$SRC")"
    t="$(iwslt_file "train.$TGT")"
    check_distinct "${inputs[@]}" "$s" "$t"
    check_split train "$s" "$t"
    cat -- "$s" >"$TMP/train.$SRC"
    cat -- "$t" >"$TMP/train.$TGT"
    SOURCE_DESC="IWSLT'15 $SRC-$TGT release (train, dev=$IWSLT15_DEV, test=$IWSLT15_TEST) from $(dirname "$s")"
}

# prepare_local: an own corpus (CORPUS=local): the six files its config names, each present
# (else die naming the field), verified against LOCAL_BASE/SHA256SUMS when it lists them.
prepare_local() {
    local i f v k
    for i in "${!LOCAL_FILES[@]}"; do
        f="${LOCAL_FILES[$i]}" v="${QK_LOCAL_FILE_VARS[$i]}"
        k="local.${v#LOCAL_}" k="${k,,}"  # LOCAL_TEST_SRC: key local.test_src of the TOML file
        if [[ ! -f "$f" ]]; then
            # the config names its files itself: what the folder holds, not the naming hints
            # of a standard pair folder (corpus.py diagnose)
            local dir found
            dir="$(dirname -- "$f")"
            if [[ -d "$dir" ]]; then
                found="$(find "$dir" -maxdepth 1 -type f -printf '%f\n' 2>/dev/null | LC_ALL=C sort | head -n 12 | paste -sd ' ')"
                found="${dir} holds: ${found:-no files}"
            else
                found="${dir} does not exist"
            fi
            die "$PAIR_CONFIG: key '$k' = \"${!v}\": $f not found (local.dir: $LOCAL_BASE); $found"
        fi
    done
    if [[ -f "$LOCAL_BASE/SHA256SUMS" ]]; then
        for f in "${LOCAL_FILES[@]}"; do
            [[ "$f" != "$LOCAL_BASE/"* ]] || verify_with_sums "$f" "$LOCAL_BASE/SHA256SUMS" "${f#"$LOCAL_BASE"/}" || true
        done
    fi
    qk_log "own corpus of $PAIR_CONFIG: ${LOCAL_FILES[*]}"
    for i in "${!LOCAL_FILES[@]}"; do
        v="${QK_LOCAL_FILE_VARS[$i]}" k="local.${v#LOCAL_}" k="${k,,}"
        FILE_NAMES+=("$PAIR_CONFIG: $k = ${LOCAL_FILES[$i]}")
    done
    copy_checked_splits "${LOCAL_FILES[@]}"
    SOURCE_DESC="own corpus ($PAIR_CONFIG): ${LOCAL_FILES[*]}"
}

case "$CORPUS" in
    ted) prepare_ted ;;
    iwslt15) prepare_iwslt15 ;;
    local) prepare_local ;;
esac
rm -rf -- "$TMP/extracted" "$TMP/extract.log"

# [text] normalize = "NFC": every split composed (python -m qknorm_tools.unicode_forms; the
# check above reported the lines not in NFC)
if [[ "$TEXT_NORMALIZE" != none ]]; then
    mapfile -t NORM_FILES < <(split_files "$TMP")
    NORM_OUT="$("$QK_PY" -m qknorm_tools.unicode_forms normalize --form "$TEXT_NORMALIZE" \
        "${NORM_FILES[@]}")" || die "the $TEXT_NORMALIZE normalization of $PAIR failed (see above)"
    qk_log "$PAIR normalized to Unicode $TEXT_NORMALIZE ([text] normalize in $PAIR_CONFIG), lines changed: $(
        while IFS=$'\t' read -r f n; do printf '%s %s; ' "${f##*/}" "$n"; done <<<"$NORM_OUT")"
fi

# dev/test sentence pairs that also occur in the training data: a warning with counts (the
# counts are kept in overlap.json)
corpus_py overlap --dir "$TMP" --src "$SRC" --tgt "$TGT" --label "$PAIR" >"$TMP/overlap.json" \
    || die "the dev/test overlap check of $PAIR failed (see above)"

# ---------------------------------------------------------------------------------------------
# expected line counts (warning only: the checksums are the guard), marker, install

files=()
counts=()
for split in "${SPLIT_NAMES[@]}"; do
    n="$(qk_count_lines "$TMP/$split.$SRC")"
    counts+=("$split $n")
    files+=("$split.$SRC" "$split.$TGT")
    var="LINES_${split^^}" key="lines.$split"  # LINES_DEV: key [lines] dev of the TOML file
    if [[ "$SOURCE_DESC" == *"$QI18_FILE"* ]]; then var="QI18_$var" key="qi18_$key"; fi
    if [[ -n "${!var:-}" && "${!var}" != "$n" ]]; then
        qk_warn "$PAIR $split has $n lines, expected ${!var} (key '$key' in $PAIR_CONFIG) for the canonical data"
    fi
done

printf 'pair=%s\nsrc=%s\ntgt=%s\nsource=%s\nprepared=%s\n' "$PAIR" "$SRC" "$TGT" "$SOURCE_DESC" \
    "$(date -u +%Y-%m-%dT%H:%M:%SZ)" >"$TMP/SOURCE"
((${#ORIGINS[@]} == 0)) || printf '%s\n' "${ORIGINS[@]}" >>"$TMP/SOURCE"
# .done covers the data files only, so that the fingerprint later steps record (sha256 of .done)
# changes only when the data change, not when SOURCE's timestamp does
qk_write_done "$TMP" "$SETTINGS" "${files[@]}"
qk_replace_dir "$TMP" "$RAW"
echo "prepared $RAW: ${counts[*]} lines; source: $SOURCE_DESC"
