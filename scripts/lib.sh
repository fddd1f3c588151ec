#!/usr/bin/env bash
# scripts/lib.sh: shared bash functions of the data pipeline. Source it, do not run it:
#   SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"; source "$SCRIPT_DIR/lib.sh"
#
# Provides
#   QK_REPO_ROOT      repository root (found from this file's location, not from $PWD)
#   QK_WORK_DIR       $QKNORM_WORK_DIR or the repository root; outputs go to $QK_WORK_DIR/data/
#   QK_DATA           $QK_WORK_DIR/data  (raw/, bpe/, bin/, download/ below it)
#   QK_PY             python interpreter: $QKNORM_PYTHON, else <repo>/.venv/bin/python, else python3
#   die MSG                       print "error: MSG" on stderr and exit 1
#   qk_usage_error MSG            print MSG and the usage line (function `usage`) and exit 2
#   qk_log MSG / qk_warn MSG      progress / warning messages on stderr
#   qk_known_pairs                the pair names with a configs/pairs/<PAIR>.sh
#   load_pair_config PAIR         source configs/base.sh + configs/pairs/PAIR.sh (dies on unknown PAIR)
#   qk_tool NAME                  path of a command-line tool (PATH, then the repo venv), or die
#   corpus_py ARGS...             run fairseq_qknorm/corpus.py (no package import, no fairseq import)
#   qk_mktemp_dir VAR PARENT NAME make a temp dir PARENT/.NAME.tmp.XXXXXX, removed on exit
#   qk_replace_dir TMP FINAL      move a finished TMP dir to FINAL, replacing an older FINAL
#   qk_write_done DIR SETTINGS FILE...  write DIR/.done (sha256 of FILEs) and DIR/.settings
#   qk_is_done DIR [SETTINGS]     true if DIR/.done verifies (and DIR/.settings == SETTINGS)
#   qk_download URL DEST BYTES SHA256 HINT  download with size/sha256/HTML checks, no partial file

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    echo "usage: source scripts/lib.sh (from another script); it is not meant to be run" >&2
    exit 2
fi
set -euo pipefail
if [[ -n "${QK_LIB_LOADED:-}" ]]; then
    return 0
fi
QK_LIB_LOADED=1

QK_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
QK_SCRIPT_NAME="$(basename "${BASH_SOURCE[1]:-$0}" .sh)"
QK_WORK_DIR="${QKNORM_WORK_DIR:-$QK_REPO_ROOT}"
QK_DATA="$QK_WORK_DIR/data"
# `python -m fairseq_qknorm.*` works from any directory, installed or not
export PYTHONPATH="$QK_REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"

die() {
    printf 'error: %s\n' "$*" >&2
    exit 1
}

qk_log() {
    printf '[%s] %s\n' "$QK_SCRIPT_NAME" "$*" >&2
}

qk_warn() {
    printf '[%s] warning: %s\n' "$QK_SCRIPT_NAME" "$*" >&2
}

qk_usage_error() {
    printf 'error: %s\n' "$*" >&2
    if declare -F usage >/dev/null; then
        usage >&2
    fi
    exit 2
}

# need_value OPTION [VALUE ...]: inside an option loop, OPTION must be followed by a value that
# is neither empty nor the next option (so "--results-dir --dry-run" is an error, not a path).
need_value() { [[ $# -ge 2 && -n "$2" && "$2" != --* ]] || qk_usage_error "$1 needs a value"; }

# qk_is_uint N: N is a non-negative integer below 10^9 written without leading zeros, as the
# scripts accept seeds and update budgets (seed01 and seed1 can never be one fairseq seed counted
# twice, and "--max-update 00" is the 0 that the never-stop check refuses).
qk_is_uint() { [[ "${1-}" =~ ^(0|[1-9][0-9]{0,8})$ ]]; }

# split_list OUT_ARRAY LIST: comma-separated LIST -> array OUT_ARRAY (order kept, duplicates
# dropped); returns 1 on an empty item.
split_list() {
    local -n __list_out="$1"
    local list="$2" item seen=" " items=()
    [[ "$list" != *, ]] || return 1
    IFS=',' read -r -a items <<<"$list"
    __list_out=()
    for item in "${items[@]}"; do
        item="${item//[[:space:]]/}"
        [[ -n "$item" ]] || return 1
        if [[ "$seen" != *" $item "* ]]; then
            seen+="$item "
            __list_out+=("$item")
        fi
    done
}

# qk_parse_seeds OUT_ARRAY LIST: --seeds LIST -> array OUT_ARRAY of distinct seeds; a usage error
# (exit 2) naming LIST on an empty item or an item that is not a seed (qk_is_uint).
qk_parse_seeds() {
    local -n __seeds_out="$1"
    local s
    split_list __seeds_out "$2" \
        || qk_usage_error "bad --seeds list '$2' (comma-separated non-negative integers, e.g. 1,2,3)"
    for s in "${__seeds_out[@]}"; do
        qk_is_uint "$s" \
            || qk_usage_error "bad --seeds list '$2': '$s' is not a non-negative integer (no leading zeros, below 10^9; e.g. --seeds 1,2,3)"
    done
}

# ---------------------------------------------------------------------------------------------
# temporary files, cleaned up on every exit path

QK_CLEANUP=()

qk_cleanup() {
    local p
    for p in "${QK_CLEANUP[@]+"${QK_CLEANUP[@]}"}"; do
        if [[ -n "$p" && -e "$p" ]]; then
            rm -rf -- "$p"
        fi
    done
}
trap qk_cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# qk_mktemp_dir VAR PARENT NAME: create PARENT/.NAME.tmp.XXXXXX (same file system as the final
# output, so that the final `mv` is a rename), store its path in VAR, remove it on exit unless
# it was moved into place by qk_replace_dir.
qk_mktemp_dir() {
    local __var="$1" parent="$2" name="$3" __d
    mkdir -p -- "$parent"
    __d="$(mktemp -d "$parent/.$name.tmp.XXXXXX")" || die "cannot create a temporary directory in $parent"
    chmod "$(printf '%o' $((0777 & ~$(umask))))" "$__d"  # mktemp makes it 0700; use the umask
    QK_CLEANUP+=("$__d")
    printf -v "$__var" '%s' "$__d"
}

# qk_replace_dir TMP FINAL: put the completed directory TMP in place as FINAL. An existing FINAL
# is moved aside first and deleted only after TMP is in place, so no failure leaves FINAL
# half-written (a crash between the two renames leaves the old copy as FINAL.old.PID).
qk_replace_dir() {
    local tmp="$1" final="$2" old
    if [[ -e "$final" ]]; then
        old="$final.old.$$"
        mv -- "$final" "$old" || die "cannot move $final aside"
        if ! mv -- "$tmp" "$final"; then
            mv -- "$old" "$final"
            die "cannot move $tmp to $final (previous $final restored)"
        fi
        rm -rf -- "$old"
    else
        mkdir -p -- "$(dirname "$final")"
        mv -- "$tmp" "$final" || die "cannot move $tmp to $final"
    fi
}

# ---------------------------------------------------------------------------------------------
# completion markers

# qk_write_done DIR SETTINGS FILE...: DIR/.settings holds SETTINGS (the options and input
# fingerprints the outputs were made with), DIR/.done the sha256 of each FILE (relative to DIR).
# Write them last, in the temporary directory, before qk_replace_dir.
qk_write_done() {
    local dir="$1" settings="$2"
    shift 2
    printf '%s\n' "$settings" >"$dir/.settings"
    (cd "$dir" && sha256sum -- "$@") >"$dir/.done.tmp" || die "cannot checksum outputs in $dir"
    mv -- "$dir/.done.tmp" "$dir/.done"
}

# qk_is_done DIR [SETTINGS]: true if DIR/.done exists and every listed file still has its
# checksum and, when SETTINGS is given, DIR/.settings equals it. Sets QK_DONE_REASON otherwise.
qk_is_done() {
    local dir="$1" settings="${2-}"
    QK_DONE_REASON=""
    if [[ ! -f "$dir/.done" ]]; then
        QK_DONE_REASON="no $dir/.done"
        return 1
    fi
    if ! (cd "$dir" && sha256sum --check --status --strict -- .done) 2>/dev/null; then
        QK_DONE_REASON="files in $dir do not match $dir/.done (missing or modified)"
        return 1
    fi
    if [[ $# -ge 2 ]]; then
        if [[ ! -f "$dir/.settings" ]] || [[ "$(cat -- "$dir/.settings")" != "$settings" ]]; then
            QK_DONE_REASON="$dir was made with other settings or inputs ($(tr '\n' ' ' <"$dir/.settings" 2>/dev/null || true))"
            return 1
        fi
    fi
    return 0
}

# qk_fingerprint FILE: sha256 of one file (used to chain markers: bpe records raw/.done, ...)
qk_fingerprint() {
    sha256sum -- "$1" | cut -d' ' -f1
}

qk_count_lines() {
    local n
    n="$(wc -l <"$1")"
    printf '%s\n' "${n//[[:space:]]/}"
}

# ---------------------------------------------------------------------------------------------
# tools

if [[ -n "${QKNORM_PYTHON:-}" ]]; then
    QK_PY="$QKNORM_PYTHON"
elif [[ -x "$QK_REPO_ROOT/.venv/bin/python" ]]; then
    QK_PY="$QK_REPO_ROOT/.venv/bin/python"
else
    QK_PY="$(command -v python3 || command -v python || true)"
fi

# qk_tool NAME: print the path of NAME (from PATH, else from the repository venv) or die.
qk_tool() {
    local name="$1" path
    path="$(command -v "$name" 2>/dev/null || true)"
    if [[ -z "$path" && -x "$QK_REPO_ROOT/.venv/bin/$name" ]]; then
        path="$QK_REPO_ROOT/.venv/bin/$name"
    fi
    [[ -n "$path" ]] || die "'$name' not found: run \`make install\` and put $QK_REPO_ROOT/.venv/bin on PATH"
    printf '%s\n' "$path"
}

# corpus_py ARGS...: the corpus helpers (fairseq_qknorm/corpus.py, standard library only), run
# by path so that neither the package __init__ nor fairseq is imported.
corpus_py() {
    [[ -n "$QK_PY" ]] || die "no python interpreter found (set QKNORM_PYTHON)"
    "$QK_PY" "$QK_REPO_ROOT/fairseq_qknorm/corpus.py" "$@"
}

# ---------------------------------------------------------------------------------------------
# pair configuration

# qk_config_names KIND: the names of configs/KIND/*.sh (pairs, systems, profiles), space-separated.
qk_config_names() {
    local f out=()
    for f in "$QK_REPO_ROOT/configs/$1"/*.sh; do
        [[ -e "$f" ]] || continue
        f="$(basename "$f")"
        out+=("${f%.sh}")
    done
    printf '%s\n' "${out[*]}"
}

qk_known_pairs() { qk_config_names pairs; }

# load_pair_config PAIR: source configs/base.sh then configs/pairs/PAIR.sh (globals), set PAIR,
# and check that the required variables are set. Dies listing the known pairs if PAIR is unknown.
load_pair_config() {
    local pair="${1-}" v
    if [[ ! "$pair" =~ ^[a-z]{2,3}-[a-z]{2,3}$ ]] || [[ ! -f "$QK_REPO_ROOT/configs/pairs/$pair.sh" ]]; then
        die "unknown pair '$pair' (known pairs: $(qk_known_pairs))"
    fi
    # shellcheck source=configs/base.sh
    source "$QK_REPO_ROOT/configs/base.sh"
    # shellcheck disable=SC1090
    source "$QK_REPO_ROOT/configs/pairs/$pair.sh"
    PAIR="$pair"
    for v in SRC TGT CORPUS BPE_MERGES SPM_VOCAB_SIZE PAPER_L PAPER_LAYERS PAPER_HEADS PAPER_DROPOUT \
        MAX_TOKENS_CHECK BPE_VOCAB_THRESHOLD LENGTH_PERCENTILE PREPROCESS_WORKERS; do
        [[ -n "${!v:-}" ]] || die "configs/pairs/$pair.sh (or configs/base.sh) does not set $v"
    done
    case "$CORPUS" in
        ted | iwslt15) ;;
        *) die "configs/pairs/$pair.sh: unknown CORPUS '$CORPUS' (ted|iwslt15)" ;;
    esac
}

# ---------------------------------------------------------------------------------------------
# downloads

# qk_download URL DEST BYTES SHA256 HINT: download URL to DEST via DEST.part.PID, verify size,
# sha256 and that it is not an HTML page, then rename to DEST. Any failure removes the partial
# file and dies with a message ending in HINT (what to do instead). QKNORM_OFFLINE=1 disables
# downloads (same failure path, no network access).
qk_download() {
    local url="$1" dest="$2" bytes="$3" sha="$4" hint="$5" part errf rc
    if [[ "${QKNORM_OFFLINE:-0}" == 1 ]]; then
        die "download of $url disabled (QKNORM_OFFLINE=1). $hint"
    fi
    mkdir -p -- "$(dirname "$dest")"
    part="$dest.part.$$"
    errf="$dest.err.$$"
    QK_CLEANUP+=("$part" "$errf")
    qk_log "downloading $url ($bytes bytes) -> $dest"
    rc=0
    if command -v curl >/dev/null 2>&1; then
        curl --fail --location --silent --show-error --connect-timeout 20 --retry 2 \
            --output "$part" -- "$url" 2>"$errf" || rc=$?
    elif command -v wget >/dev/null 2>&1; then
        wget --quiet --tries=2 --timeout=20 --output-document="$part" -- "$url" 2>"$errf" || rc=$?
    else
        die "cannot download $url: neither curl nor wget is installed. $hint"
    fi
    if ((rc != 0)); then
        local why
        why="$(tail -n 1 "$errf" 2>/dev/null || true)"
        rm -f -- "$part" "$errf"
        die "download of $url failed (exit $rc${why:+: $why}); no network access? $hint"
    fi
    if ! corpus_py sha256 --file "$part" --expected "$sha" --size "$bytes" --name "$url" >&2; then
        rm -f -- "$part" "$errf"
        die "downloaded file from $url rejected (see above); nothing kept. $hint"
    fi
    mv -- "$part" "$dest"
    rm -f -- "$errf"
}

# ---------------------------------------------------------------------------------------------
# systems, profiles and runs (scripts/train.sh, scripts/evaluate.sh, scripts/reproduce.sh)

qk_known_systems() { qk_config_names systems; }
qk_known_profiles() { qk_config_names profiles; }

# load_system_config SYSTEM: source configs/systems/SYSTEM.sh (dies listing known systems).
load_system_config() {
    local system="${1-}"
    if [[ ! "$system" =~ ^[a-z0-9_]+$ ]] || [[ ! -f "$QK_REPO_ROOT/configs/systems/$system.sh" ]]; then
        die "unknown system '$system' (known systems: $(qk_known_systems))"
    fi
    SYSTEM_FLAGS=()
    # shellcheck disable=SC1090
    source "$QK_REPO_ROOT/configs/systems/$system.sh"
    SYSTEM="$system"
}

# load_profile_config PROFILE: source configs/profiles/PROFILE.sh (after load_pair_config).
load_profile_config() {
    local profile="${1-}"
    if [[ ! "$profile" =~ ^[a-z0-9-]+$ ]] || [[ ! -f "$QK_REPO_ROOT/configs/profiles/$profile.sh" ]]; then
        die "unknown profile '$profile' (known profiles: $(qk_known_profiles))"
    fi
    unset PROFILE_ARCH  # set by the profile only, never inherited from the environment
    # shellcheck disable=SC1090
    source "$QK_REPO_ROOT/configs/profiles/$profile.sh"
    PROFILE="$profile"
}

# qk_run_dir PAIR PROFILE SYSTEM SEED: where a training run keeps checkpoints, logs and scores.
qk_run_dir() {
    printf '%s\n' "$QK_WORK_DIR/runs/$1/$2/$3/seed$4"
}

# qk_json_field FILE KEY: one top-level field of a JSON file.
qk_json_field() {
    "$QK_PY" -c 'import json, sys; print(json.load(open(sys.argv[1]))[sys.argv[2]])' "$1" "$2" \
        || die "cannot read '$2' from $1"
}
