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
#   qk_is_uint N                   N is a non-negative integer (no leading zeros, below 10^9)
#   qk_is_posint N                 N is a positive integer (threads, jobs)
#   qk_check_uint OPTION VALUE     usage error unless qk_is_uint VALUE
#   qk_check_posint OPTION VALUE   usage error unless qk_is_posint VALUE
#   split_list OUT LIST            comma-separated LIST -> array OUT (duplicates dropped: QK_SPLIT_REPEAT)
#   qk_parse_seeds OUT LIST        --seeds LIST -> array OUT of distinct seeds, or usage error
#   qk_parse_names KIND OUT LIST   --pairs/--systems/--profiles LIST (or "all") -> array OUT
#                                  (checks the names with config.sh:qk_require_name)

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

# qk_is_uint N: N is a non-negative integer below 10^9 written without leading zeros, as the
# scripts accept seeds and update budgets (seed01 and seed1 can never be one fairseq seed counted
# twice, and "--max-update 00" is the 0 that the never-stop check refuses).
qk_is_uint() { [[ "${1-}" =~ ^(0|[1-9][0-9]{0,8})$ ]]; }

# qk_is_posint N: N is a positive integer (threads, jobs).
qk_is_posint() { [[ "${1-}" =~ ^[1-9][0-9]{0,5}$ ]]; }

# qk_check_uint OPTION VALUE / qk_check_posint OPTION VALUE: usage error unless VALUE fits.
qk_check_uint() {
    qk_is_uint "$2" || qk_usage_error "$1 must be a non-negative integer (no leading zeros, below 10^9), got '$2'"
}
qk_check_posint() {
    qk_is_posint "$2" || qk_usage_error "$1 must be a positive integer, got '$2'"
}

# split_list OUT_ARRAY LIST: comma-separated LIST -> array OUT_ARRAY (order kept, duplicates
# dropped; QK_SPLIT_REPEAT: the first item LIST gives twice, empty if none). Returns 1 on an empty
# item (e.g. "1,,2" or "1,"); white space inside an item ("1 2") is a usage error.
split_list() {
    local -n __list_out="$1"
    local list="$2" item seen=" " items=()
    QK_SPLIT_REPEAT=""
    [[ "$list" != *, ]] || return 1
    IFS=',' read -r -a items <<<"$list"
    __list_out=()
    for item in "${items[@]}"; do
        item="${item#"${item%%[![:space:]]*}"}"  # white space around an item is dropped
        item="${item%"${item##*[![:space:]]}"}"
        [[ -n "$item" ]] || return 1
        # inside an item it is a usage error ("1 2" is not the seed 12, nor seeds 1 and 2)
        [[ "$item" != *[[:space:]]* ]] \
            || qk_usage_error "bad list '$list': item '$item' holds white space; the items are separated by commas (e.g. 1,2)"
        if [[ "$seen" != *" $item "* ]]; then
            seen+="$item "
            __list_out+=("$item")
        elif [[ -z "$QK_SPLIT_REPEAT" ]]; then
            QK_SPLIT_REPEAT="$item"
        fi
    done
}

# qk_parse_seeds OUT_ARRAY LIST: --seeds LIST -> array OUT_ARRAY of distinct seeds; a usage error
# (exit 2) naming LIST on an empty item, an item that is not a seed (qk_is_uint) or a repeat.
qk_parse_seeds() {
    local -n __seeds_out="$1"
    local s repeat
    split_list __seeds_out "$2" \
        || qk_usage_error "bad --seeds list '$2' (comma-separated non-negative integers, e.g. 1,2,3)"
    repeat="$QK_SPLIT_REPEAT"
    for s in "${__seeds_out[@]}"; do
        qk_is_uint "$s" \
            || qk_usage_error "bad --seeds list '$2': '$s' is not a non-negative integer (no leading zeros, below 10^9; e.g. --seeds 1,2,3)"
    done
    _qk_refuse_repeats seeds "$2" "$repeat"
}

# _qk_refuse_repeats KIND LIST REPEAT: a usage error naming REPEAT, the item that split_list found
# twice in LIST (its QK_SPLIT_REPEAT) and dropped: "1,1" is a typo of "1,2" more often than a wish
_qk_refuse_repeats() {
    [[ -z "$3" ]] || qk_usage_error "bad --$1 list '$2': $3 is given twice"
}

# qk_parse_names KIND OUT_ARRAY LIST: a comma-separated list of configs/KIND names, or "all".
# For systems, "all" means the papers' systems: a system config with in_all = false (one that
# is not in the papers' tables, e.g. qk_layernorm) is run only when named; for pairs, the papers'
# pairs (config.PAPER_PAIRS): an own pair (docs/own-data.md) is run only when named.
qk_parse_names() {
    local kind="$1" list="$3" n repeat
    local -n __names_out="$2"
    if [[ "$list" == all ]]; then
        __names_out=()
        for n in $(qk_config_names "$kind" --in-all); do
            __names_out+=("$n")
        done
        return 0
    fi
    split_list __names_out "$list" || qk_usage_error "bad --$kind list '$list' (empty item)"
    repeat="$QK_SPLIT_REPEAT"
    for n in "${__names_out[@]}"; do
        qk_require_name "$kind" "$n" "; or 'all'"
    done
    _qk_refuse_repeats "$kind" "$list" "$repeat"
}
