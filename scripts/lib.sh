#!/usr/bin/env bash
# scripts/lib.sh: shared bash functions of the pipeline. Source it, do not run it:
#   SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"; source "$SCRIPT_DIR/lib.sh"
#
# Sets what every library file shares, then sources them in order (each file's header lists
# what it offers):
#   scripts/lib/cli.sh      messages (die, qk_log, qk_warn, qk_usage_error), argument parsing
#   scripts/lib/proc.sh     exit hooks, children in process groups, the job pool (sets the traps)
#   scripts/lib/files.sh    temporary dirs, .done markers, locks, tools, downloads
#   scripts/lib/config.sh   the bridge to qknorm_tools.config: configs, runs, labels, lr, bf16
#   scripts/lib/launch.sh   a grid's cells, the launcher (local: the job pool), cell states
#   scripts/lib/slurm.sh    the launcher's Slurm part: job states, batch scripts, submission
#
# Sets
#   QK_REPO_ROOT      repository root (found from this file's location, not from $PWD)
#   QK_SCRIPT_NAME    the sourcing script's name (messages; $QK_STEP_OF when run as a step of
#                     that script); QK_COMMAND_LINE its command line
#   QK_WORK_DIR       $QKNORM_WORK_DIR or the repository root; outputs go below it
#   QK_DATA           $QK_WORK_DIR/data  (raw/, bpe/, bin/, download/ below it)
#   QK_PY             python interpreter: $QKNORM_PYTHON, else <repo>/.venv/bin/python, else python3

if [[ "${BASH_SOURCE[0]}" == "$0" ]]; then
    echo "usage: source scripts/lib.sh (from another script); it is not meant to be run" >&2
    exit 2
fi
set -euo pipefail
if ((BASH_VERSINFO[0] < 5 || (BASH_VERSINFO[0] == 5 && BASH_VERSINFO[1] < 1))); then
    echo "error: the scripts need bash >= 5.1 (wait -n -p), this is bash $BASH_VERSION" >&2
    exit 1
fi
if [[ -n "${QK_LIB_LOADED:-}" ]]; then
    return 0
fi
QK_LIB_LOADED=1

QK_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)"
QK_SCRIPT_NAME="$(basename "${BASH_SOURCE[1]:-$0}" .sh)"
# the script's command line (sourcing without arguments keeps the script's "$@" here)
printf -v QK_COMMAND_LINE '%q ' "scripts/$QK_SCRIPT_NAME.sh" "$@"
QK_COMMAND_LINE="${QK_COMMAND_LINE% }"
# a script run as a step of another (scripts/ablation.sh's collection runs scripts/reproduce.sh)
# writes its messages under the name of the script that was run, which sets QK_STEP_OF to its
# own name for that child only
[[ -z "${QK_STEP_OF:-}" ]] || QK_SCRIPT_NAME="$QK_STEP_OF"
unset QK_STEP_OF
QK_WORK_DIR="${QKNORM_WORK_DIR:-$QK_REPO_ROOT}"
# a relative QKNORM_WORK_DIR is taken from where the script started, and made absolute for the
# steps that run from inside the work dir and for the scripts this one starts
[[ "$QK_WORK_DIR" == /* ]] || QK_WORK_DIR="$PWD/$QK_WORK_DIR"
[[ -z "${QKNORM_WORK_DIR:-}" ]] || export QKNORM_WORK_DIR="$QK_WORK_DIR"
QK_DATA="$QK_WORK_DIR/data"
# the work dir is a directory, or a path that can be made one (not a file, nor below a file)
_qk_up="$QK_WORK_DIR"
while [[ ! -e "$_qk_up" && "$_qk_up" != / ]]; do _qk_up="$(dirname -- "$_qk_up")"; done
if [[ ! -d "$_qk_up" ]]; then
    printf 'error: QKNORM_WORK_DIR=%s: %s is not a directory (the work dir holds data/, runs/ and results/; point QKNORM_WORK_DIR at a directory)\n' \
        "$QK_WORK_DIR" "$_qk_up" >&2
    exit 1
fi
unset _qk_up
# `python -m qknorm_tools.*` works from any directory, installed or not
export PYTHONPATH="$QK_REPO_ROOT${PYTHONPATH:+:$PYTHONPATH}"

# the python interpreter of the helpers (qknorm_tools): files.sh, config.sh
if [[ -n "${QKNORM_PYTHON:-}" ]]; then
    QK_PY="$QKNORM_PYTHON"
elif [[ -x "$QK_REPO_ROOT/.venv/bin/python" ]]; then
    QK_PY="$QK_REPO_ROOT/.venv/bin/python"
else
    QK_PY="$(command -v python3 || command -v python || true)"
fi

# shellcheck source=scripts/lib/cli.sh
source "$QK_REPO_ROOT/scripts/lib/cli.sh"
# shellcheck source=scripts/lib/proc.sh
source "$QK_REPO_ROOT/scripts/lib/proc.sh"
# shellcheck source=scripts/lib/files.sh
source "$QK_REPO_ROOT/scripts/lib/files.sh"
# shellcheck source=scripts/lib/config.sh
source "$QK_REPO_ROOT/scripts/lib/config.sh"
# shellcheck source=scripts/lib/launch.sh
source "$QK_REPO_ROOT/scripts/lib/launch.sh"
# shellcheck source=scripts/lib/slurm.sh
source "$QK_REPO_ROOT/scripts/lib/slurm.sh"
