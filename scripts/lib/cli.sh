#!/usr/bin/env bash
# scripts/lib/cli.sh: messages and command-line parsing of the scripts. Sourced by scripts/lib.sh
# (which sets QK_SCRIPT_NAME); scripts/gpu_grid.sh alone sources it by itself (setting
# QK_SCRIPT_NAME), for its parsing and messages (and scripts/lib/config.sh for the names).
#
# Offers
#   die MSG                        error on stderr, exit 1
#   qk_log MSG                     progress message on stderr, "[SCRIPT] MSG"
#   qk_warn MSG                    warning on stderr, "[SCRIPT] warning: MSG"
#   qk_usage_error MSG             error and the script's usage (function `usage`) on stderr, exit 2
#   need_value OPTION [VALUE...]   usage error unless OPTION is followed by a value
#   qk_parse_args SPEC... -- ARGS  options and positionals of a script (QK_REST: after a bare --)
#   qk_print_cmd CMD...            a command line, shell-quoted, on stdout (what --dry-run shows)
# (integer options and comma-separated lists: scripts/lib/config.sh's qk_check_options, whose
# rules are python -m qknorm_tools.run options)

# ---------------------------------------------------------------------------------------------
# messages

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

# qk_usage_error MESSAGE...: a usage error, as argparse writes one: the synopsis of the calling
# script's usage (its "usage:" line and their indented continuations), then the error, once and
# last, naming --help for the whole usage; exit status 2.
qk_usage_error() {
    local text line synopsis="" prog=""
    if declare -F usage >/dev/null; then
        text="$(usage)"
        while IFS= read -r line; do
            if [[ -z "$synopsis" ]]; then
                [[ "$line" == "usage: "* ]] || break
                synopsis="$line"
                prog="${line#usage: }"
                prog="${prog%% *}"
            elif [[ "$line" == "    "* ]]; then
                synopsis+=$'\n'"$line"
            else
                break
            fi
        done <<<"$text"
    fi
    [[ -z "$synopsis" ]] || printf '%s\n' "$synopsis" >&2
    printf 'error: %s%s\n' "$*" "${prog:+ ($prog --help lists every option)}" >&2
    exit 2
}

# ---------------------------------------------------------------------------------------------
# command lines

# need_value OPTION [VALUE ...]: OPTION must be followed by a value that is neither empty nor
# the next option (so "--results-dir --dry-run" is an error, not a path).
need_value() { [[ $# -ge 2 && -n "$2" && "$2" != --* ]] || qk_usage_error "$1 needs a value"; }

# qk_parse_args SPEC... -- ARGS...: parse a script's command line.
#   SPEC "--opt VAR"            --opt VALUE or --opt=VALUE sets VAR (need_value rules)
#   SPEC "--opt|--alias VAR"    the same under two names
#   SPEC "--opt VAR=VALUE"      a switch: --opt sets VAR to VALUE
#   SPEC "@POS1 POS2? ..."      positional arguments in order, VAR? optional (keeps its value);
#                               a missing one is "missing POS" (POS = VAR without _ARG), an
#                               extra one "unexpected argument"
# -h/--help prints `usage` and exits 0; an unknown option is a usage error (exit 2); after a
# bare "--" the remaining arguments go to the array QK_REST.
qk_parse_args() {
    local -a specs=() positional=() given=()
    local spec arg name value inline var i
    while (($#)) && [[ "$1" != -- ]]; do
        if [[ "$1" == @* ]]; then read -r -a positional <<<"${1#@}"; else specs+=("$1"); fi
        shift
    done
    (($#)) && shift
    QK_REST=()
    while (($#)); do
        arg="$1"
        case "$arg" in
            -h | --help) usage; exit 0 ;;
            --) shift; QK_REST=("$@"); break ;;
            -?*)
                name="${arg%%=*}" inline=0 value=""
                [[ "$arg" != *=* ]] || { inline=1; value="${arg#*=}"; }
                var=""
                for spec in "${specs[@]}"; do
                    if [[ "|${spec%% *}|" == *"|$name|"* ]]; then var="${spec#* }"; break; fi
                done
                [[ -n "$var" ]] || qk_usage_error "unknown option '$arg'"
                if [[ "$var" == *=* ]]; then
                    ((inline == 0)) || qk_usage_error "$name takes no value"
                    printf -v "${var%%=*}" '%s' "${var#*=}"
                    shift
                elif ((inline)); then
                    [[ -n "$value" ]] || qk_usage_error "$name needs a value"
                    printf -v "$var" '%s' "$value"
                    shift
                else
                    need_value "$@"
                    printf -v "$var" '%s' "$2"
                    shift 2
                fi
                ;;
            *) given+=("$arg"); shift ;;
        esac
    done
    for i in "${!positional[@]}"; do
        var="${positional[$i]%\?}"
        if ((i < ${#given[@]})); then
            printf -v "$var" '%s' "${given[$i]}"
        elif [[ "${positional[$i]}" != *\? ]]; then
            qk_usage_error "missing ${var%_ARG}"
        fi
    done
    ((${#given[@]} <= ${#positional[@]})) || qk_usage_error "unexpected argument '${given[${#positional[@]}]}'"
}

# qk_print_cmd CMD...: print CMD shell-quoted on one line (what --dry-run shows).
qk_print_cmd() {
    local line
    printf -v line '%q ' "$@"
    printf '%s\n' "${line% }"
}

