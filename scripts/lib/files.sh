#!/usr/bin/env bash
# scripts/lib/files.sh: temporary directories, completion markers, locks, tools and downloads.
# Sourced by scripts/lib.sh (which sets QK_REPO_ROOT and QK_PY), never on its own.
#
# Offers
#   qk_mktemp_dir VAR PARENT NAME  a temporary directory next to the final output, removed on exit
#   qk_replace_dir TMP FINAL       put the completed TMP in place as FINAL (never half-written)
#   qk_write_done DIR SETTINGS FILE...  DIR/.settings and DIR/.done (sha256 of each FILE)
#   qk_is_done DIR                 DIR/.done holds and matches (QK_DONE_REASON otherwise)
#   qk_fingerprint FILE            sha256 of one file
#   qk_count_lines FILE            the number of lines of FILE
#   qk_tool NAME                   path of a command-line tool (PATH, then the repo venv), or die
#   corpus_py ARGS...              python -m qknorm_tools.corpus ARGS (no torch, no fairseq)
#   qk_download URL DEST BYTES SHA256 HINT  download with size/sha256/HTML checks, no partial file
#   qk_lock_run RUN                hold RUN/.lock (flock) while this script runs, or die naming the holder
#                                  (removed on exit, with parents left empty, if it holds only the lock)

# ---------------------------------------------------------------------------------------------
# temporary directories

# qk_mktemp_dir VAR PARENT NAME: create PARENT/.NAME.tmp.XXXXXX (same file system as the final
# output, so that the final `mv` is a rename), store its path in VAR, remove it on exit unless
# it was moved into place by qk_replace_dir. The folders made for PARENT are removed on exit if
# they are left empty (a refused step says "nothing written" and leaves no empty folder).
qk_mktemp_dir() {
    local __var="$1" parent="$2" name="$3" __d top="$2"
    while [[ ! -e "$(dirname -- "$top")" ]]; do top="$(dirname -- "$top")"; done
    [[ -e "$top" ]] || QK_EMPTY_DIRS+=("$top")
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

# qk_is_done DIR: true if DIR/.done exists and every listed file still has its checksum. Sets
# QK_DONE_REASON otherwise. (Whether DIR/.settings holds for what would make DIR now: python -m
# qknorm_tools.freshness check, the one rule, which names each setting that changed.)
qk_is_done() {
    local dir="$1"
    QK_DONE_REASON=""
    if [[ ! -f "$dir/.done" ]]; then
        QK_DONE_REASON="no $dir/.done"
        return 1
    fi
    if ! (cd "$dir" && sha256sum --check --status --strict -- .done) 2>/dev/null; then
        QK_DONE_REASON="files in $dir do not match $dir/.done (missing or modified)"
        return 1
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

# corpus_py ARGS...: the corpus helpers, python -m qknorm_tools.corpus (no torch, no fairseq).
corpus_py() {
    [[ -n "$QK_PY" ]] || die "no python interpreter found (set QKNORM_PYTHON)"
    "$QK_PY" -m qknorm_tools.corpus "$@"
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
# locks

# qk_lock_run RUN: hold an exclusive lock on RUN/.lock (flock) until this script and its children
# exit; another process holding it is an error naming that holder. No run is ever trained or
# evaluated by two processes at once. A run directory that holds nothing but the lock when the
# script exits (a start that failed before writing anything) is removed, lock included.
qk_lock_run() {
    local run="$1" holder
    mkdir -p -- "$run"
    QK_LOCKED_RUN="$run"
    exec {QK_LOCK_FD}<>"$run/.lock" || die "cannot open $run/.lock"
    if ! flock -n "$QK_LOCK_FD"; then
        holder="$(cat -- "$run/.lock" 2>/dev/null || true)"
        die "$run is in use by another process (${holder:-holder unknown}): a run is never trained or evaluated by two processes at once; wait for it to finish or stop it"
    fi
    printf 'pid %s, %s, started %s on %s\n' "$$" "${QK_COMMAND_LINE:-scripts/$QK_SCRIPT_NAME.sh}" \
        "$(date '+%Y-%m-%d %H:%M:%S')" "${HOSTNAME%%.*}" >"$run/.lock"
    qk_on_exit _qk_drop_empty_run
}

# _qk_drop_empty_run: the exit hook of qk_lock_run: RUN removed if the lock is all it holds
# (removed while still locked: a second process either held the lock first or opens a new one),
# and the folders above it that it leaves empty, up to QK_WORK_DIR/runs
_qk_drop_empty_run() {
    local d
    [[ -z "$(find "$QK_LOCKED_RUN" -mindepth 1 -maxdepth 1 ! -name .lock -print -quit 2>/dev/null)" ]] \
        || return 0
    rm -f -- "$QK_LOCKED_RUN/.lock" && rmdir -- "$QK_LOCKED_RUN" 2>/dev/null || return 0
    d="$(dirname -- "$QK_LOCKED_RUN")"
    while [[ "$d" == "$QK_WORK_DIR/runs/"* ]] && rmdir -- "$d" 2>/dev/null; do
        d="$(dirname -- "$d")"
    done
}
