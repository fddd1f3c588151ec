#!/usr/bin/env bash
# scripts/reproduce.sh: run a grid of (pair, system, seed) cells under one profile, resumably, and
# aggregate the finished cells into result tables.
#   1. for each pair: scripts/prepare_data.sh -> scripts/bpe.sh -> scripts/binarize.sh
#      (each skips finished outputs);
#   2. for each pair, seed, system (seed-major: after seed 1 every system has a result):
#      scripts/train.sh then scripts/evaluate.sh (both skip finished work; a killed cell resumes
#      from its checkpoints/checkpoint_last.pt because fairseq-train resumes by itself);
#      --jobs N runs N cells at once with --threads 1 each (CPU), output in each run's
#      reproduce.log; a failed cell does not stop the others;
#   3. every finished cell (runs/PAIR/PROFILE/SYSTEM/seedN/{train.json,test.score.json,test.hyp})
#      becomes a record {pair, system, seed, bleu_tok, bleu, chrf, hyp_path, ref_path, ...} in
#      RESULTS/runs.json, then
#        python -m fairseq_qknorm.evaluate aggregate --results RESULTS/runs.json --baseline B \
#            --out-dir RESULTS --ref PAIR=data/raw/PAIR/test.TGT ...
#      writes RESULTS/aggregate.{md,tex,csv,json} (mean ± sd over seeds, deltas vs the baseline,
#      paired bootstrap / approximate randomization on seed-concatenated outputs).
# RESULTS defaults to results/PROFILE. Scores are tokenized BLEU (bleu_tok, as in the papers),
# detokenized sacreBLEU and chrF (scripts/evaluate.sh). Exit status 1 if any step failed (the
# finished cells are aggregated anyway); rerunning the same command continues the grid.
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"

usage() {
    cat <<EOF
usage: scripts/reproduce.sh --pairs P1,P2,...|all --systems S1,S2,...|all [--seeds 1,2,3]
                            [--profile P] [--max-update N] [--jobs N] [--baseline SYSTEM]
                            [--results-dir DIR] [--data-dir DIR] [--no-significance]
                            [--aggregate-only | --no-aggregate] [--dry-run]
       scripts/reproduce.sh --list
  --pairs L      comma-separated pairs, or all: $(qk_known_pairs)
  --systems L    comma-separated systems, or all: $(qk_known_systems)
  --seeds L      comma-separated non-negative integer seeds (default 1)
  --profile P    one of: $(qk_known_profiles) (default: cpu-proxy)
  --max-update N override the profile's update budget (a finished cell is not retrained)
  --jobs N       cells run at once (default 1); N > 1 gives each cell --threads 1
  --baseline S   baseline system of the aggregate tables and paired tests (default twt)
  --results-dir D  where runs.json and aggregate.* go (default: results/PROFILE)
  --data-dir D   passed to scripts/prepare_data.sh (local corpus copy)
  --no-significance  aggregate without the paired tests (faster)
  --aggregate-only   skip data preparation and training: only collect finished cells, aggregate
  --no-aggregate     run the grid only
  --dry-run      print every step (each cell's full fairseq-train command) without running any
  --list         list pairs, systems (with their paper rows) and profiles
environment: QKNORM_WORK_DIR (data/, runs/, results/ below it), QKNORM_MAX_UPDATE, QKNORM_DATA_DIR
EOF
}

PAIRS_ARG="" SYSTEMS_ARG="" SEEDS_ARG=1 PROFILE_ARG=cpu-proxy MAX_UPDATE_ARG="" JOBS=1
BASELINE=twt RESULTS_DIR_ARG="" DATA_DIR_ARG="" NO_SIG=0 AGG_ONLY=0 NO_AGG=0 DRY_RUN=0 LIST=0
while (($#)); do
    case "$1" in
        -h | --help) usage; exit 0 ;;
        --pairs) need_value "$@"; PAIRS_ARG="$2"; shift 2 ;;
        --systems) need_value "$@"; SYSTEMS_ARG="$2"; shift 2 ;;
        --seeds) need_value "$@"; SEEDS_ARG="$2"; shift 2 ;;
        --profile) need_value "$@"; PROFILE_ARG="$2"; shift 2 ;;
        --max-update) need_value "$@"; MAX_UPDATE_ARG="$2"; shift 2 ;;
        --jobs) need_value "$@"; JOBS="$2"; shift 2 ;;
        --baseline) need_value "$@"; BASELINE="$2"; shift 2 ;;
        --results-dir) need_value "$@"; RESULTS_DIR_ARG="$2"; shift 2 ;;
        --data-dir) need_value "$@"; DATA_DIR_ARG="$2"; shift 2 ;;
        --no-significance) NO_SIG=1; shift ;;
        --aggregate-only) AGG_ONLY=1; shift ;;
        --no-aggregate) NO_AGG=1; shift ;;
        --dry-run) DRY_RUN=1; shift ;;
        --list) LIST=1; shift ;;
        -*) qk_usage_error "unknown option '$1'" ;;
        *) qk_usage_error "unexpected argument '$1' (pairs and systems go in --pairs/--systems)" ;;
    esac
done

# ---------------------------------------------------------------------------------------------
# --list

list_all() {
    local p s f
    echo "pairs (configs/pairs; papers' model: layers/heads/dropout, width $(
        source "$QK_REPO_ROOT/configs/base.sh"; echo "$PAPER_EMBED_DIM, FFN $PAPER_FFN_DIM"); TWT Table 1):"
    for p in $(qk_known_pairs); do
        (
            load_pair_config "$p"
            printf '  %-6s %s->%s  %-7s BPE %5s merges  layers %s  heads %s  dropout %s  QKNorm L %s  max-epoch %s\n' \
                "$p" "$SRC" "$TGT" "$CORPUS" "$BPE_MERGES" "$PAPER_LAYERS" "$PAPER_HEADS" \
                "$PAPER_DROPOUT" "$PAPER_L" "${PAPER_MAX_EPOCH:-?}"
        )
    done
    echo "systems (configs/systems):"
    for s in $(qk_known_systems); do
        (
            load_system_config "$s"
            printf '  %-26s %-40s %s\n' "$s" "$SYSTEM_DESC" "$PAPER_ROW"
        )
    done
    echo "profiles (configs/profiles; shown for each pair):"
    for f in $(qk_known_profiles); do
        for p in $(qk_known_pairs); do
            (
                load_pair_config "$p"
                load_profile_config "$f"
                printf '  %-10s %-6s layers %s  heads %s  d %s  FFN %s  dropout %s  max-update %s  max-epoch %s\n' \
                    "$f" "$p" "$MODEL_LAYERS" "$MODEL_HEADS" "$MODEL_EMBED_DIM" "$MODEL_FFN_DIM" \
                    "$MODEL_DROPOUT" "$MAX_UPDATE" "$MAX_EPOCH"
            )
        done
    done
}

if ((LIST)); then
    list_all
    exit 0
fi

# ---------------------------------------------------------------------------------------------
# argument checks (everything is checked before anything runs)

[[ -n "$PAIRS_ARG" ]] || qk_usage_error "--pairs is required (a comma-separated list or 'all')"
[[ -n "$SYSTEMS_ARG" ]] || qk_usage_error "--systems is required (a comma-separated list or 'all')"
((AGG_ONLY == 0 || NO_AGG == 0)) || qk_usage_error "--aggregate-only and --no-aggregate exclude each other"
[[ "$JOBS" =~ ^[1-9][0-9]*$ ]] || qk_usage_error "--jobs must be a positive integer, got '$JOBS'"
[[ -z "$MAX_UPDATE_ARG" ]] || qk_is_uint "$MAX_UPDATE_ARG" \
    || qk_usage_error "--max-update must be a non-negative integer (no leading zeros, below 10^9), got '$MAX_UPDATE_ARG'"

PAIRS=() SYSTEMS=() SEEDS=()
if [[ "$PAIRS_ARG" == all ]]; then
    read -r -a PAIRS <<<"$(qk_known_pairs)"
else
    split_list PAIRS "$PAIRS_ARG" || qk_usage_error "bad --pairs list '$PAIRS_ARG' (empty item)"
fi
for p in "${PAIRS[@]}"; do
    if [[ ! "$p" =~ ^[a-z]{2,3}-[a-z]{2,3}$ ]] || [[ ! -f "$QK_REPO_ROOT/configs/pairs/$p.sh" ]]; then
        die "unknown pair '$p' (known pairs: $(qk_known_pairs); or 'all')"
    fi
done
if [[ "$SYSTEMS_ARG" == all ]]; then
    read -r -a SYSTEMS <<<"$(qk_known_systems)"
else
    split_list SYSTEMS "$SYSTEMS_ARG" || qk_usage_error "bad --systems list '$SYSTEMS_ARG' (empty item)"
fi
for s in "${SYSTEMS[@]}" "$BASELINE"; do
    if [[ ! "$s" =~ ^[a-z0-9_]+$ ]] || [[ ! -f "$QK_REPO_ROOT/configs/systems/$s.sh" ]]; then
        die "unknown system '$s' (known systems: $(qk_known_systems); or 'all')"
    fi
done
qk_parse_seeds SEEDS "$SEEDS_ARG"
if [[ ! "$PROFILE_ARG" =~ ^[a-z0-9-]+$ ]] || [[ ! -f "$QK_REPO_ROOT/configs/profiles/$PROFILE_ARG.sh" ]]; then
    die "unknown profile '$PROFILE_ARG' (known profiles: $(qk_known_profiles))"
fi
PROFILE="$PROFILE_ARG"
# a budget other than the profile's reports to its own folder (never over the profile's results)
RESULTS_DIR="${RESULTS_DIR_ARG:-$QK_WORK_DIR/results/$PROFILE${MAX_UPDATE_ARG:+-max-update-$MAX_UPDATE_ARG}}"
if [[ " ${SYSTEMS[*]} " != *" $BASELINE "* ]] && ((NO_AGG == 0)); then
    qk_warn "baseline '$BASELINE' is not among --systems: the aggregation needs its finished cells (--baseline)"
fi

# pair -> target language (for data/raw/PAIR/test.TGT)
declare -A TGT_OF=()
for p in "${PAIRS[@]}"; do
    TGT_OF[$p]="$(load_pair_config "$p" && printf '%s' "$TGT")"
done

MAXU_OPT=()
[[ -z "$MAX_UPDATE_ARG" ]] || MAXU_OPT=(--max-update "$MAX_UPDATE_ARG")
THREAD_OPT=()
((JOBS == 1)) || THREAD_OPT=(--threads 1)
DATA_OPT=()
[[ -z "$DATA_DIR_ARG" ]] || DATA_OPT=(--data-dir "$DATA_DIR_ARG")

print_cmd() { printf '%q ' "$@" | sed 's/ $//'; printf '\n'; }

AGG_REFS=()
for p in "${PAIRS[@]}"; do
    AGG_REFS+=(--ref "$p=$QK_DATA/raw/$p/test.${TGT_OF[$p]}")
done
AGG_CMD=("$QK_PY" -m fairseq_qknorm.evaluate aggregate --results "$RESULTS_DIR/runs.json"
    --baseline "$BASELINE" --out-dir "$RESULTS_DIR" "${AGG_REFS[@]}")
((NO_SIG == 0)) || AGG_CMD+=(--no-significance)

N_CELLS=$((${#PAIRS[@]} * ${#SYSTEMS[@]} * ${#SEEDS[@]}))
qk_log "profile $PROFILE: pairs ${PAIRS[*]}; systems ${SYSTEMS[*]}; seeds ${SEEDS[*]}; $N_CELLS cells, $JOBS at a time"

# ---------------------------------------------------------------------------------------------
# --dry-run: print every step

if ((DRY_RUN)); then
    echo "# reproduce.sh dry run: profile $PROFILE, $N_CELLS cells (pairs ${PAIRS[*]}; systems ${SYSTEMS[*]}; seeds ${SEEDS[*]}), $JOBS at a time"
    if ((AGG_ONLY == 0)); then
        for p in "${PAIRS[@]}"; do
            echo "# pair $p: data (each step skips finished outputs)"
            print_cmd bash "$SCRIPT_DIR/prepare_data.sh" "$p" "${DATA_OPT[@]+"${DATA_OPT[@]}"}"
            print_cmd bash "$SCRIPT_DIR/bpe.sh" "$p"
            print_cmd bash "$SCRIPT_DIR/binarize.sh" "$p"
        done
        for p in "${PAIRS[@]}"; do
            for seed in "${SEEDS[@]}"; do
                for s in "${SYSTEMS[@]}"; do
                    desc="$(load_system_config "$s" && printf '%s; %s' "$SYSTEM_DESC" "$PAPER_ROW")"
                    echo "# cell $p $s seed $seed ($desc) -> $(qk_run_dir "$p" "$PROFILE" "$s" "$seed")"
                    bash "$SCRIPT_DIR/train.sh" "$p" "$s" --profile "$PROFILE" --seed "$seed" \
                        "${MAXU_OPT[@]+"${MAXU_OPT[@]}"}" "${THREAD_OPT[@]+"${THREAD_OPT[@]}"}" --dry-run \
                        || die "train.sh --dry-run failed for $p $s seed $seed"
                    print_cmd bash "$SCRIPT_DIR/evaluate.sh" "$p" "$s" --profile "$PROFILE" --seed "$seed" \
                        "${THREAD_OPT[@]+"${THREAD_OPT[@]}"}"
                done
            done
        done
    fi
    if ((NO_AGG == 0)); then
        echo "# aggregation: finished cells -> $RESULTS_DIR/runs.json, then"
        print_cmd "${AGG_CMD[@]}"
    fi
    exit 0
fi

# ---------------------------------------------------------------------------------------------
# the grid

FAILED=()

# run_cell PAIR SYSTEM SEED: train, then evaluate on test; returns non-zero on failure.
run_cell() {
    local p="$1" s="$2" seed="$3"
    bash "$SCRIPT_DIR/train.sh" "$p" "$s" --profile "$PROFILE" --seed "$seed" \
        "${MAXU_OPT[@]+"${MAXU_OPT[@]}"}" "${THREAD_OPT[@]+"${THREAD_OPT[@]}"}" || return 1
    bash "$SCRIPT_DIR/evaluate.sh" "$p" "$s" --profile "$PROFILE" --seed "$seed" \
        "${THREAD_OPT[@]+"${THREAD_OPT[@]}"}" || return 1
}

# background cells (--jobs > 1): each in its own process group (set -m) so that an interrupted
# grid stops its trainings too (they resume from checkpoint_last on the next run)
CELL_PIDS=()
reproduce_on_exit() {
    local pid
    set +m
    for pid in "${CELL_PIDS[@]+"${CELL_PIDS[@]}"}"; do
        if kill -0 "$pid" 2>/dev/null; then
            kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || true
        fi
    done
    qk_cleanup
}
trap reproduce_on_exit EXIT

if ((AGG_ONLY == 0)); then
    READY_PAIRS=()
    for p in "${PAIRS[@]}"; do
        qk_log "pair $p: data preparation (finished steps are skipped)"
        if bash "$SCRIPT_DIR/prepare_data.sh" "$p" "${DATA_OPT[@]+"${DATA_OPT[@]}"}" \
            && bash "$SCRIPT_DIR/bpe.sh" "$p" && bash "$SCRIPT_DIR/binarize.sh" "$p"; then
            READY_PAIRS+=("$p")
        else
            qk_warn "data preparation of $p failed: its cells are skipped"
            FAILED+=("$p (data)")
        fi
    done

    CELLS=()
    for p in "${READY_PAIRS[@]+"${READY_PAIRS[@]}"}"; do
        for seed in "${SEEDS[@]}"; do
            for s in "${SYSTEMS[@]}"; do
                CELLS+=("$p $s $seed")
            done
        done
    done

    if ((JOBS == 1)); then
        for cell in "${CELLS[@]+"${CELLS[@]}"}"; do
            read -r p s seed <<<"$cell"
            qk_log "cell $p $s seed $seed"
            run_cell "$p" "$s" "$seed" || { qk_warn "cell $p $s seed $seed failed"; FAILED+=("$p $s seed$seed"); }
        done
    elif ((${#CELLS[@]} > 0)); then
        qk_mktemp_dir STATUS_DIR "$QK_WORK_DIR/runs" reproduce-status
        set -m
        for i in "${!CELLS[@]}"; do
            while (($(jobs -rp | wc -l) >= JOBS)); do
                wait -n || true
            done
            read -r p s seed <<<"${CELLS[$i]}"
            RUN="$(qk_run_dir "$p" "$PROFILE" "$s" "$seed")"
            mkdir -p -- "$RUN"
            qk_log "cell $p $s seed $seed started (output: $RUN/reproduce.log)"
            (
                trap - EXIT INT TERM
                rc=0
                run_cell "$p" "$s" "$seed" >>"$RUN/reproduce.log" 2>&1 || rc=$?
                echo "$rc" >"$STATUS_DIR/$i"
                exit "$rc"
            ) &
            CELL_PIDS+=("$!")
        done
        while (($(jobs -rp | wc -l) > 0)); do
            wait -n || true
        done
        set +m
        for i in "${!CELLS[@]}"; do
            read -r p s seed <<<"${CELLS[$i]}"
            if [[ "$(cat "$STATUS_DIR/$i" 2>/dev/null || echo missing)" != 0 ]]; then
                qk_warn "cell $p $s seed $seed failed; see $(qk_run_dir "$p" "$PROFILE" "$s" "$seed")/reproduce.log"
                FAILED+=("$p $s seed$seed")
            else
                qk_log "cell $p $s seed $seed finished"
            fi
        done
    fi
fi

# ---------------------------------------------------------------------------------------------
# aggregation of the finished cells

if ((NO_AGG == 0)); then
    PAIR_SPECS=()
    for p in "${PAIRS[@]}"; do
        PAIR_SPECS+=("$p=${TGT_OF[$p]}")
    done
    mkdir -p -- "$RESULTS_DIR"
    qk_mktemp_dir AGG_TMP "$RESULTS_DIR" aggregate
    # collect records -> RESULTS/runs.json; AGG_TMP/input.json = the records of the pairs that
    # have the baseline (written only when some pair lacks it); AGG_TMP/plan = key=value lines
    # (n_records, pairs, significance)
    "$QK_PY" - "$QK_WORK_DIR" "$PROFILE" "$BASELINE" "$RESULTS_DIR/runs.json" "$AGG_TMP" "$NO_SIG" \
        "${SYSTEMS[*]}" "${SEEDS[*]}" "${PAIR_SPECS[@]}" <<'PY'
import json, os, sys

work, profile, baseline, runs_json, tmp, no_sig, systems, seeds = sys.argv[1:9]
pair_tgt = dict(spec.split("=", 1) for spec in sys.argv[9:])
systems, seeds = systems.split(), [int(s) for s in seeds.split()]


def warn(msg):
    print(f"[reproduce] warning: {msg}", file=sys.stderr)


records = []
for pair, tgt in pair_tgt.items():
    ref = os.path.join(work, "data", "raw", pair, f"test.{tgt}")
    for system in systems:
        for seed in seeds:
            run = os.path.join(work, "runs", pair, profile, system, f"seed{seed}")
            files = [os.path.join(run, f) for f in ("train.json", "test.score.json", "test.hyp")]
            if not all(os.path.isfile(f) for f in files):
                continue
            train = json.load(open(files[0], encoding="utf-8"))
            score = json.load(open(files[1], encoding="utf-8"))
            records.append({
                "pair": pair, "system": system, "seed": seed,
                "bleu_tok": score["bleu_tok"], "bleu": score["bleu"], "chrf": score["chrf"],
                "hyp_path": os.path.abspath(files[2]), "ref_path": os.path.abspath(ref),
                "profile": profile, "updates": train.get("updates"),
                "wall_seconds": train.get("wall_seconds"), "arch": train.get("arch"),
                "signatures": score.get("signatures"), "run_dir": os.path.abspath(run),
            })

plan = {"n_records": len(records), "pairs": [], "significance": 0}
# written even when empty, so that no earlier runs.json is taken for this grid's
with open(runs_json + ".tmp", "w", encoding="utf-8") as f:
    json.dump(records, f, indent=2, ensure_ascii=False)
    f.write("\n")
os.replace(runs_json + ".tmp", runs_json)
if records:
    by_pair = {}
    for r in records:
        by_pair.setdefault(r["pair"], {}).setdefault(r["system"], []).append(r)
    keep = []
    for pair, by_sys in by_pair.items():
        if baseline not in by_sys:
            warn(f"{pair}: no finished cell of the baseline {baseline!r} (finished: "
                 f"{', '.join(sorted(by_sys))}): left out of the aggregate tables")
        else:
            keep.append(pair)
    sig = no_sig != "1"
    for pair in keep:
        counts = {s: len(v) for s, v in by_pair[pair].items()}
        if sig and len(set(counts.values())) > 1:
            warn(f"{pair}: systems have different numbers of finished seeds {counts}: paired tests "
                 f"skipped (means are still reported)")
            sig = False
        ref = os.path.join(work, "data", "raw", pair, f"test.{pair_tgt[pair]}")
        if sig and not os.path.isfile(ref):
            warn(f"{pair}: reference {ref} not found: paired tests skipped")
            sig = False
    if len(keep) < len(by_pair):  # aggregate reads only the pairs that have the baseline
        with open(os.path.join(tmp, "input.json"), "w", encoding="utf-8") as f:
            json.dump([r for r in records if r["pair"] in keep], f, indent=2, ensure_ascii=False)
    plan.update(pairs=keep, significance=int(sig))
with open(os.path.join(tmp, "plan"), "w", encoding="utf-8") as f:
    f.write(f"n_records={plan['n_records']}\npairs={' '.join(plan['pairs'])}\n"
            f"significance={plan['significance']}\n")
PY
    N_REC="$(sed -n 's/^n_records=//p' "$AGG_TMP/plan")"
    read -r -a AGG_PAIRS <<<"$(sed -n 's/^pairs=//p' "$AGG_TMP/plan")"
    SIG="$(sed -n 's/^significance=//p' "$AGG_TMP/plan")"
    if ((N_REC == 0)); then
        qk_warn "no finished cell (train.json + test.score.json + test.hyp): nothing to aggregate ($RESULTS_DIR/runs.json is empty)"
    elif ((${#AGG_PAIRS[@]} == 0)); then
        qk_warn "wrote $RESULTS_DIR/runs.json ($N_REC runs); no pair has a finished '$BASELINE' cell: no aggregate tables (--baseline)"
    else
        qk_log "wrote $RESULTS_DIR/runs.json ($N_REC runs); aggregating ${AGG_PAIRS[*]} vs $BASELINE"
        AGG_INPUT="$RESULTS_DIR/runs.json"
        [[ ! -f "$AGG_TMP/input.json" ]] || AGG_INPUT="$AGG_TMP/input.json"
        AGG_CMD=("$QK_PY" -m fairseq_qknorm.evaluate aggregate --results "$AGG_INPUT"
            --baseline "$BASELINE" --out-dir "$RESULTS_DIR")
        for p in "${AGG_PAIRS[@]}"; do
            AGG_CMD+=(--ref "$p=$QK_DATA/raw/$p/test.${TGT_OF[$p]}")
        done
        ((SIG == 1)) || AGG_CMD+=(--no-significance)
        if "${AGG_CMD[@]}"; then
            qk_log "wrote $RESULTS_DIR/aggregate.{md,tex,csv,json}"
        else
            qk_warn "aggregation failed"
            FAILED+=("aggregation")
        fi
    fi
fi

if ((${#FAILED[@]} > 0)); then
    die "failed: ${FAILED[*]} (rerun the same command to resume)"
fi
qk_log "done"
