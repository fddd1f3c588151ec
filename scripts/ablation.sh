#!/usr/bin/env bash
# scripts/ablation.sh: the 2x2 confound ablation of the QKNorm paper on one pair.
# The QKNorm paper (Henry et al. 2020) compares PreNorm + FixNorm + LayerNorm + QKNorm against the
# TWT baseline PreNorm + FixNorm + ScaleNorm (Nguyen & Salazar 2019): two changes at once. The
# four cells {LayerNorm, ScaleNorm} x {dot-product, QKNorm}, all PreNorm + FixNorm, separate them:
#   layernorm_dot    = prenorm_fixnorm_layernorm  (TWT Table 3 row 3)
#   layernorm_qknorm = qknorm_paper               (the QKNorm paper's model)
#   scalenorm_dot    = twt                        (TWT Table 3 row 4; the paper's baseline)
#   scalenorm_qknorm = scalenorm_qknorm           (not in the papers)
# Steps: scripts/reproduce.sh for the four systems (resumable; results/PROFILE/PAIR/runs.json and
# aggregate.*, baseline twt), then
#   python -m fairseq_qknorm.evaluate ablation  -> results/PROFILE/PAIR/ablation.{md,json}
#       (simple and main effects, interaction, the paper's comparison decomposed; paired
#       approximate randomization on seed-concatenated outputs)
#   python -m fairseq_qknorm.plots bleu-bars   -> results/PROFILE/PAIR/ablation_bleu.png
#       (from the evaluate-aggregate JSON of the four systems: ablation.json is not its format)
#   python -m fairseq_qknorm.plots curves      -> results/PROFILE/PAIR/ablation_curves.png
#       (train/valid loss of each cell's lowest finished seed, from its train.log)
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"

# cell -> system (order = evaluate.ABLATION_CELLS)
CELLS=(layernorm_dot layernorm_qknorm scalenorm_dot scalenorm_qknorm)
declare -A CELL_SYSTEM=(
    [layernorm_dot]=prenorm_fixnorm_layernorm
    [layernorm_qknorm]=qknorm_paper
    [scalenorm_dot]=twt
    [scalenorm_qknorm]=scalenorm_qknorm
)

usage() {
    cat <<EOF
usage: scripts/ablation.sh PAIR [--seeds 1,2] [--profile P] [--max-update N] [--jobs N]
                           [--data-dir DIR] [--no-significance] [--aggregate-only] [--dry-run]
  PAIR           one of: $(qk_known_pairs)
  --seeds L      comma-separated seeds (default 1,2)
  --profile P    one of: $(qk_known_profiles) (default: cpu-proxy-fast,
                 sized so that 4 cells x 2 seeds take about an hour on 2 cores with --jobs 2)
  --max-update N override the profile's update budget
  --jobs N       cells trained at once (default 1; N > 1: one thread each)
  --data-dir D   local corpus copy for scripts/prepare_data.sh
  --no-significance  skip the paired tests
  --aggregate-only   no training: report on the finished runs only
  --dry-run      print the four systems' training commands and the report steps
cells (all PreNorm + FixNorm): layernorm_dot=prenorm_fixnorm_layernorm,
  layernorm_qknorm=qknorm_paper, scalenorm_dot=twt, scalenorm_qknorm=scalenorm_qknorm
outputs: results/PROFILE/PAIR/{runs.json,aggregate.*,ablation.md,ablation.json,ablation_bleu.png,ablation_curves.png}
EOF
}

PAIR_ARG="" SEEDS_ARG=1,2 PROFILE_ARG=cpu-proxy-fast MAXU="" PASS=() NO_SIG=0 AGG_ONLY=0 DRY_RUN=0
while (($#)); do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --seeds) need_value "$@"; SEEDS_ARG="$2"; shift 2 ;;
        --profile) need_value "$@"; PROFILE_ARG="$2"; shift 2 ;;
        --max-update) need_value "$@"; MAXU="$2"; PASS+=("$1" "$2"); shift 2 ;;
        --jobs | --data-dir) need_value "$@"; PASS+=("$1" "$2"); shift 2 ;;
        --no-significance) NO_SIG=1; shift ;;
        --aggregate-only) AGG_ONLY=1; shift ;;
        --dry-run) DRY_RUN=1; shift ;;
        -*) qk_usage_error "unknown option '$1'" ;;
        *)
            [[ -z "$PAIR_ARG" ]] || qk_usage_error "only one PAIR allowed (got '$PAIR_ARG' and '$1')"
            PAIR_ARG="$1"; shift ;;
    esac
done
[[ -n "$PAIR_ARG" ]] || qk_usage_error "missing PAIR"
qk_parse_seeds SEED_LIST "$SEEDS_ARG"
load_pair_config "$PAIR_ARG"
load_profile_config "$PROFILE_ARG"

# a budget other than the profile's reports to its own folder: a short trial run never
# overwrites the profile's results
OUT="$QK_WORK_DIR/results/$PROFILE${MAXU:+-max-update-$MAXU}/$PAIR"
REF="$QK_DATA/raw/$PAIR/test.$TGT"
SYSTEMS=()
echo "# 2x2 ablation on $PAIR ($SRC->$TGT), profile $PROFILE, seeds $SEEDS_ARG; all cells PreNorm + FixNorm:"
for c in "${CELLS[@]}"; do
    s="${CELL_SYSTEM[$c]}"
    SYSTEMS+=("$s")
    desc="$(load_system_config "$s" && printf '%s; %s' "$SYSTEM_DESC" "$PAPER_ROW")"
    printf '#   %-16s = %-26s (%s)\n' "$c" "$s" "$desc"
done

REPRO=(bash "$SCRIPT_DIR/reproduce.sh" --pairs "$PAIR" --systems "$(IFS=,; echo "${SYSTEMS[*]}")"
    --seeds "$SEEDS_ARG" --profile "$PROFILE" --baseline twt --results-dir "$OUT"
    "${PASS[@]+"${PASS[@]}"}")
((NO_SIG == 0)) || REPRO+=(--no-significance)
((AGG_ONLY == 0)) || REPRO+=(--aggregate-only)

ABL=("$QK_PY" -m fairseq_qknorm.evaluate ablation --results "$OUT/runs.json" --pair "$PAIR"
    --ref "$REF" --out-dir "$OUT")
for c in "${CELLS[@]}"; do
    ABL+=(--cell "$c=${CELL_SYSTEM[$c]}")
done
((NO_SIG == 0)) || ABL+=(--no-significance)
BARS=("$QK_PY" -m fairseq_qknorm.plots bleu-bars --json "$OUT/aggregate.json" --out "$OUT/ablation_bleu.png"
    --title "$PAIR ($PROFILE): 2x2 ablation, PreNorm + FixNorm")

print_cmd() { printf '%q ' "$@" | sed 's/ $//'; printf '\n'; }

if ((DRY_RUN)); then
    "${REPRO[@]}" --dry-run
    echo "# ablation report"
    print_cmd "${ABL[@]}"
    echo "# figures"
    print_cmd "${BARS[@]}"
    CURVE_DRY=("$QK_PY" -m fairseq_qknorm.plots curves --out "$OUT/ablation_curves.png" --log)
    for c in "${CELLS[@]}"; do
        CURVE_DRY+=("$c=$(qk_run_dir "$PAIR" "$PROFILE" "${CELL_SYSTEM[$c]}" "${SEEDS_ARG%%,*}")/train.log")
    done
    print_cmd "${CURVE_DRY[@]}"
    exit 0
fi

RC=0
"${REPRO[@]}" || RC=$?
((RC != 2)) || exit 2  # usage error, already reported
((RC == 0)) || qk_warn "reproduce.sh failed (exit $RC): reporting on the finished cells"
[[ -f "$OUT/runs.json" ]] || die "no finished cell in $OUT/runs.json: nothing to report"

# finished seeds per cell, from runs.json (the ablation report needs every cell; its paired
# tests need equal numbers of seeds)
COUNTS="$("$QK_PY" - "$OUT/runs.json" "$PAIR" "${SYSTEMS[@]}" <<'PY'
import json, sys
runs, pair, systems = sys.argv[1], sys.argv[2], sys.argv[3:]
recs = [r for r in json.load(open(runs, encoding="utf-8")) if r["pair"] == pair]
for s in systems:
    seeds = sorted(r["seed"] for r in recs if r["system"] == s)
    print(s, len(seeds), ",".join(map(str, seeds)))
PY
)"
declare -A N_SEEDS=() FIRST_SEED=()
while read -r s n seeds; do
    N_SEEDS[$s]="$n"
    FIRST_SEED[$s]="${seeds%%,*}"
done <<<"$COUNTS"
MISSING=()
for c in "${CELLS[@]}"; do
    ((${N_SEEDS[${CELL_SYSTEM[$c]}]:-0} > 0)) || MISSING+=("$c (${CELL_SYSTEM[$c]})")
done
((${#MISSING[@]} == 0)) || die "cells without a finished run: ${MISSING[*]}; rerun to resume (exit of reproduce.sh: $RC)"
if ((NO_SIG == 0)); then
    if (($(printf '%s\n' "${N_SEEDS[@]}" | sort -u | wc -l) > 1)); then
        qk_warn "cells have different numbers of finished seeds ($(echo "$COUNTS" | cut -d' ' -f1,2 | tr '\n' ' ')): paired tests skipped"
        ABL+=(--no-significance)
    fi
fi
"${ABL[@]}" || die "ablation report failed"
qk_log "wrote $OUT/ablation.md and $OUT/ablation.json"

# figures: secondary outputs, a failure is a warning (matplotlib's messages go to plots.log)
CURVES=("$QK_PY" -m fairseq_qknorm.plots curves --out "$OUT/ablation_curves.png" --log)
for c in "${CELLS[@]}"; do
    s="${CELL_SYSTEM[$c]}"
    CURVES+=("$c=$(qk_run_dir "$PAIR" "$PROFILE" "$s" "${FIRST_SEED[$s]}")/train.log")
done
: >"$OUT/plots.log"
for fig in BARS CURVES; do
    [[ "$fig" != BARS || -f "$OUT/aggregate.json" ]] || continue
    declare -n FIG_CMD="$fig"
    if "${FIG_CMD[@]}" >>"$OUT/plots.log" 2>&1; then
        qk_log "wrote $(tail -n 1 "$OUT/plots.log" | sed 's/^wrote //')"
    else
        qk_warn "figure failed: $(tail -n 1 "$OUT/plots.log") (see $OUT/plots.log)"
    fi
    unset -n FIG_CMD
done
((RC == 0)) || die "some cells failed (see above); the report covers the finished ones"
