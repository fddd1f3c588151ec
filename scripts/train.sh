#!/usr/bin/env bash
# scripts/train.sh: train one system (configs/systems/SYSTEM.toml) on one binarized pair with
# fairseq-train --user-dir <abs>/fairseq_qknorm, under a profile (configs/profiles/PROFILE.toml).
#   data/bin/PAIR  ->  runs/PAIR/LABEL/SYSTEM/seedN/{checkpoints/,train.log,train.json,command.txt}
# LABEL is the profile, or PROFILE-max-update-N for another budget than the profile's.
# The arch is the system's named arch family at the profile's size (qknorm_tools/run_spec.py); no
# size flag is passed. For QKNorm systems the data's L (data/bpe/PAIR/length_stats.json, the
# 97.5th percentile of BPE'd training lengths from scripts/bpe.sh) goes to --qk-norm-length; the
# model computes g0 = log2(L^2 - L) from it and logs it in train.log.
# A finished run (train.json present) is skipped; a killed run resumes from
# checkpoints/checkpoint_last.pt (fairseq's own resume); wall_seconds accumulates over resumes,
# interrupted parts included. RUN/.lock keeps a second process off the run.
# The run records the identity of the data it trains on (RUN/data_identity.json, train.json:
# raw corpus, BPE and binarized data checksums, python -m qknorm_tools.provenance); a run made
# on other data than the current data/bin/PAIR is refused, finished or not, naming both.
# Settings that cannot work together (profile values, -- EXTRA arguments, the data's BPE tool)
# are refused before anything runs (python -m qknorm_tools.train_check).
# --lr LR trains at another peak learning rate than the profile's (warmup and schedule stay):
# the run is RUN = .../seedN-lrLR (qknorm_tools/run_spec.py: Run.dir), LR recorded in train.json.
# A training that diverges (fairseq-train stops with FloatingPointError: non-finite gradients
# or loss) is a finished result, not a failure to retry: RUN/diverged holds the reason,
# train.json is written, the exit status is 3, and a rerun skips it (--force retrains).
set -euo pipefail
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd -P)"
# shellcheck source=scripts/lib.sh
source "$SCRIPT_DIR/lib.sh"

usage() {
    cat <<EOF
usage: scripts/train.sh PAIR SYSTEM [--profile P] [--seed N] [--max-update N] [--lr LR]
                        [--size d128|d384] [--threads N] [--nproc N [--launch auto|torchrun|srun]]
                        [--bf16-autocast | --precision bf16|fp32|auto]
                        [--dry-run] [--force] [-- EXTRA_FAIRSEQ_TRAIN_ARGS...]
  PAIR         $(qk_pair_usage 15)
  SYSTEM       one of: $(qk_known_systems)
  --profile P  one of: $(qk_known_profiles) (default: cpu-proxy)
  --seed N     random seed (default 1)
  --max-update N  update budget instead of the profile's (the run goes to
               runs/PAIR/PROFILE-max-update-N/, never over the profile's runs)
  --lr LR      peak learning rate instead of the profile's --lr (warmup and schedule stay; the
               run goes to runs/PAIR/LABEL/SYSTEM/seedN-lrLR/); 0 is allowed and learns
               nothing (the LR sweep's initial model, scripts/lr_sweep.sh)
  --size S     a CPU profile's model at another size of the LR sweep's size axis: d128
               (2+2 layers, d 128) or d384 (4+4, d 384) instead of the proxy's 3+3, d 256 (arch
               FAMILY_S); the run goes to runs/PAIR/LABEL-S/ (scripts/lr_sweep.sh --sizes)
  --threads N  intra-op CPU threads (default: the profile's threads; --nproc N: shared out)
  --nproc N    N training processes (torch.distributed DDP; default 1). The profile's tokens
               per update are kept: each process batches max_tokens/N tokens. CPU: torchrun,
               gloo, --cpu; GPU (CUDA_VISIBLE_DEVICES or nvidia-smi): torchrun, NCCL, one GPU
               per process
  --launch L   how --nproc starts the processes: auto (default: srun inside a Slurm job with N
               GPU tasks, else torchrun), torchrun (torchrun --standalone, one machine) or srun
               (one Slurm task per GPU, several nodes possible: fairseq's Slurm support)
  --bf16-autocast  forward pass and loss in bf16 on CPU (the plugin task
               translation_word_dropout's --bf16-autocast; a profile without word dropout
               gets --word-dropout 0); the run is seedN-bf16, next to its fp32 twin
               (scripts/evaluate.sh decodes it in fp32); refused (exit 1, before the run
               exists) on a CPU without native bf16 unless -- --bf16-autocast-allow-emulated.
               Without it the profile decides:
               the CPU profiles (PROFILE_BF16=auto) use bf16 where it was measured faster
               on this CPU (measured once, about a minute; docs/bf16.md)
  --precision P  bf16 (as --bf16-autocast), fp32, or auto (bf16 where measured faster); the
               grids pass each cell the precision they decided (default: QKNORM_BF16, else
               the profile's bf16 key)
  --dry-run    print the resolved fairseq-train command and exit (the arguments after --
               are fairseq-train's: it checks them when training starts)
  --force      retrain even if the run is finished (its directory is emptied)
  -- ARGS      passed on to fairseq-train (a run made with other ARGS is never reused)
environment: QKNORM_WORK_DIR (outputs under \$QKNORM_WORK_DIR/runs), QKNORM_MAX_UPDATE,
  QKNORM_THREADS, QKNORM_BF16 (1 bf16 autocast, 0 fp32, auto; --precision wins; default: the profile's)
exit status: 0 trained (or finished before), 3 the training diverged (RUN/diverged; a finished
  result that a rerun skips), 1 other failures, 2 usage errors
EOF
}

PROFILE_ARG=cpu-proxy SEED=1 MAX_UPDATE_ARG="" LR_ARG="" THREADS_ARG="" DRY_RUN=0 FORCE=0 BF16=0
NPROC=1 LAUNCH_ARG=auto SIZE_ARG=""
qk_parse_args "@PAIR_ARG SYSTEM_ARG" "--profile PROFILE_ARG" "--seed SEED" \
    "--max-update MAX_UPDATE_ARG" "--lr LR_ARG" "--size SIZE_ARG" "--threads THREADS_ARG" "--nproc NPROC" \
    "--launch LAUNCH_ARG" "--bf16-autocast BF16=1" "$QK_PRECISION_SPEC" "--dry-run DRY_RUN=1" "--force FORCE=1" -- "$@"
EXTRA=("${QK_REST[@]+"${QK_REST[@]}"}")
# The `--` guard: extra fairseq-train arguments may add settings, never replace the ones this
# script manages (argparse would let the last occurrence win silently).
for ((i = 0; i < ${#EXTRA[@]}; i++)); do
    arg="${EXTRA[$i]}"
    case "${arg%%=*}" in
        --seed) use="train.sh --seed N" ;;
        --save-dir) use="the run directory runs/PAIR/LABEL/SYSTEM/seedN (QKNORM_WORK_DIR moves it)" ;;
        --user-dir) use="nothing: train.sh always loads this repository's plugin" ;;
        --arch) use="a system (configs/systems: its arch family) and a profile (its size)" ;;
        --task) use="a profile (train_task, task_flags in configs/profiles), or train.sh --bf16-autocast" ;;
        --bf16-autocast) use="train.sh --bf16-autocast (it also selects the plugin task)" ;;
        --source-lang | --target-lang | -s | -t) use="the pair's direction (configs/pairs; the reverse direction of gl-en is en-gl)" ;;
        --max-update) use="train.sh --max-update N (its runs go to PROFILE-max-update-N)" ;;
        --lr) use="train.sh --lr LR (its runs go to seedN-lrLR; the last --lr would win unrecorded)" ;;
        --qk-norm | --qk-norm-type | --qk-norm-p | --qk-norm-scale | --qk-norm-scale-per-head \
            | --qk-norm-freeze-scale | --norm-type | --fix-norm | --sigma-reparam \
            | --attn-logit-softcap | --attn-normalization | --qk-clip | --z-loss \
            | --encoder-normalize-before | --decoder-normalize-before)
            use="a system (configs/systems: each sets these flags through its arch or criterion): another model filed under this system's name would mislabel it" ;;
        --tensorboard-logdir) use="nothing: the run's tensorboard/ folder" ;;
        --qk-norm-length) use="nothing: train.sh passes the data's L (data/bpe/PAIR/length_stats.json) to QKNorm systems; another g0 is another system (configs/systems)" ;;
        -*) continue ;;
        *)
            prev="${EXTRA[$((i - 1))]-}"
            [[ "$i" == 0 || "$prev" != -* || "$prev" == *=* ]] || continue
            qk_usage_error "unexpected argument '$arg' after --: fairseq-train's data dir is data/bin/PAIR (scripts/binarize.sh), options come as --name value"
            ;;
    esac
    qk_usage_error "$arg after -- would override a setting train.sh manages: use $use"
done
# What the run is and everything decided before its lock, in one process (python -m
# qknorm_tools.run train-plan; qknorm_tools/run_spec.py: the typed Run): the options and the
# configuration checked (usage errors: exit 2 there), the run's label, directory and arch; the
# processes (--nproc: the profile's tokens per update kept, each process batching
# max_tokens/N; CPU: torchrun + gloo + --cpu, threads shared out; GPU: NCCL, one GPU per
# process, through torchrun or srun); the precision, decided once (QK_BF16_RUN: --precision,
# else QKNORM_BF16, else the profile's bf16 key; auto measures once per machine, never for a
# dry run); REMOVE_BPE, the symbol that undoes the data's BPE (bpe.json) for validation BLEU;
# for QKNorm systems L, the data's (length_stats.json), and L_NOTE, the line saying it; CMD,
# the fairseq-train command (qknorm_tools.commands, EXTRA last), refused with settings that
# cannot work together (qknorm_tools.train_check); and, but for a dry run, DATA_ID: the data
# binarized, one consistent chain raw -> BPE -> binarized (qknorm_tools.provenance).
mapfile -t GPUS < <(qk_gpu_list)
qk_spine_start  # the plan, the claim and train.json: one Python process (qk_py)
PLAN_ARGS=(train-plan "--repo=$QK_REPO_ROOT" "--work-dir=$QK_WORK_DIR" "--data-root=$QK_DATA"
    "--pair=$PAIR_ARG" "--system=$SYSTEM_ARG" "--profile=$PROFILE_ARG" "--seed=$SEED"
    "--max-update=$MAX_UPDATE_ARG" "--lr=$LR_ARG" "--size=$SIZE_ARG" "--threads=$THREADS_ARG"
    "--nproc=$NPROC" "--launch=$LAUNCH_ARG" "--gpus=$(IFS=,; echo "${GPUS[*]}")"
    "--precision=$QK_PRECISION_ARG")
((BF16 == 0)) || PLAN_ARGS+=(--bf16-autocast)
((DRY_RUN == 0)) || PLAN_ARGS+=(--dry-run)
qk_run_py "${PLAN_ARGS[@]}" -- "${EXTRA[@]+"${EXTRA[@]}"}"

# the launcher of --nproc N processes (LAUNCH_KIND, from train-plan): torchrun --standalone on
# one machine, or srun (one Slurm task per GPU, several nodes possible: fairseq's Slurm support
# reads SLURM_PROCID/SLURM_LOCALID/SLURM_NNODES; the rendezvous port, from the job id, is not
# part of the run's command.txt)
LAUNCH=() PORT_FLAGS=()
case "$LAUNCH_KIND" in
    srun)
        # srun does not take the job's --cpus-per-task from the environment in every version
        LAUNCH=(srun --ntasks "$NPROC" ${SLURM_CPUS_PER_TASK:+--cpus-per-task "$SLURM_CPUS_PER_TASK"}
            --kill-on-bad-exit=1)
        PORT_FLAGS=(--distributed-port "$((10000 + ${SLURM_JOB_ID:-0} % 50000))")
        ;;
    torchrun) LAUNCH=(torchrun --standalone --nproc_per_node "$NPROC") ;;
esac
# one process per GPU: with more GPUs visible than processes, fairseq would start a process on
# each of them (its default --distributed-world-size is the GPU count) and change the batch
if [[ "$LAUNCH_KIND" != srun ]] && ((${#GPUS[@]} > NPROC)); then
    export CUDA_VISIBLE_DEVICES="$(IFS=,; echo "${GPUS[*]:0:NPROC}")"
fi

if ((DRY_RUN)); then
    [[ -z "$L_NOTE" ]] || qk_log "$L_NOTE"
    if ((FORCE)) && [[ -n "$(find "$RUN" -mindepth 1 -maxdepth 1 ! -name .lock -print -quit 2>/dev/null)" ]]; then
        qk_log "--force: the real run first empties $RUN (its checkpoints, logs and scores are deleted)"
    fi
    [[ -z "${PORT_FLAGS[*]}" || -n "${SLURM_JOB_ID:-}" ]] \
        || qk_log "dry run outside Slurm: the job uses --distributed-port 10000 + (its job id % 50000)"
    qk_print_cmd env "OMP_NUM_THREADS=$THREADS" "${LAUNCH[@]+"${LAUNCH[@]}"}" "${CMD[@]}" \
        "${PORT_FLAGS[@]+"${PORT_FLAGS[@]}"}"
    exit 0
fi

qk_lock_run "$RUN"
NEW_COMMAND="$(CMD[0]=fairseq-train; qk_print_cmd "${CMD[@]}")"
if [[ "$FORCE" == 0 && -f "$RUN/command.txt" ]] \
    && [[ "$(sed '1s/^[^ ]*fairseq-train /fairseq-train /' "$RUN/command.txt")" != "$NEW_COMMAND" ]]; then
    # a finished (or resumable) run made with other settings is never reused silently
    die "$RUN was trained with another command (see $RUN/command.txt): retrain it with $RETRAIN, or remove $RUN"
fi
# empty_run_dir: remove everything in $RUN but the lock this script holds
empty_run_dir() { find "$RUN" -mindepth 1 -maxdepth 1 ! -name .lock -exec rm -rf -- {} +; }
((FORCE == 0)) || empty_run_dir
# one process (python -m qknorm_tools.run train-claim): a run (finished or resumable) made on
# other data is never reused, a new run records the data; a finished run is the one asked for
qk_run_py train-claim --run "$RUN" --identity "$BIN/identity.json" --pair "$PAIR" \
    --label "$LABEL" --system "$SYSTEM" --seed "$SEED" --precision "${QK_BF16_RUN:-fp32}" \
    ${QK_LR_OVERRIDE:+--variant "lr=$QK_LR_OVERRIDE"} --train-cmd "$TRAIN_CMD"
if [[ -f "$RUN/train.json" ]]; then
    if [[ -f "$RUN/diverged" ]]; then
        qk_warn "skip: $RUN diverged ($(head -n 1 "$RUN/diverged")): a finished result; --force to retrain"
        exit 3
    fi
    qk_log "skip: $RUN is finished (data ${DATA_ID:0:12}); --force to retrain"
    exit 0
fi
FAIRSEQ_TRAIN="$(qk_tool fairseq-train)"
CMD[0]="$FAIRSEQ_TRAIN"
if ((${#LAUNCH[@]})); then
    LAUNCH[0]="$(qk_tool "${LAUNCH[0]}")"
    qk_log "$NPROC processes: $(qk_print_cmd "${LAUNCH[@]}") (--max-tokens $MAX_TOKENS each, $THREADS threads each${CUDA_VISIBLE_DEVICES:+, GPUs $CUDA_VISIBLE_DEVICES})"
fi
qk_print_cmd "${CMD[@]}" >"$RUN/command.txt"
qk_log "training $SYSTEM ($SYSTEM_DESC; $PAPER_ROW) on $PAIR, profile $LABEL, arch $ARCH, ${QK_BF16_RUN:-fp32}, seed $SEED -> $RUN"
[[ -z "$L_NOTE" ]] || qk_log "$L_NOTE"
# where an interruption leaves the run: fairseq saves after validating, as the profile says
SAVE_UPDATES=0 SAVE_EPOCHS=1
for ((i = 0; i + 1 < ${#CMD[@]}; i++)); do
    case "${CMD[$i]}" in
        --save-interval-updates) SAVE_UPDATES="${CMD[$((i + 1))]}" ;;
        --save-interval) SAVE_EPOCHS="${CMD[$((i + 1))]}" ;;
    esac
done
if ((SAVE_UPDATES > 0)); then SAVE_NOTE="every $SAVE_UPDATES updates"; else SAVE_NOTE="every $SAVE_EPOCHS epoch(s)"; fi
if [[ -f "$RUN/checkpoints/checkpoint_last.pt" ]]; then
    qk_log "resuming from $RUN/checkpoints/checkpoint_last.pt"
elif [[ -s "$RUN/train.log" ]]; then
    qk_log "no checkpoint from the earlier attempt ($RUN/train.log): it stopped before the first save ($SAVE_NOTE); training starts at update 0"
fi
qk_log "checkpoints $SAVE_NOTE in $RUN/checkpoints: an interrupted run resumes from the last one (rerun the same command)"

# add_wall_time: wall_seconds accumulates the training time over resumes, also when this
# script is interrupted (an exit hook: it runs after fairseq-train is stopped)
START="$(date +%s)"
LOG_START="$(stat -c %s -- "$RUN/train.log" 2>/dev/null || echo 0)"  # this attempt's part of the log
add_wall_time() {
    [[ -n "$START" ]] || return 0
    local prev=0
    [[ ! -f "$RUN/wall_seconds" ]] || prev="$(cat -- "$RUN/wall_seconds")"
    echo $((prev + $(date +%s) - START)) >"$RUN/wall_seconds"
    START=""
}
qk_on_exit add_wall_time
# train_with_eta: fairseq-train's output goes unchanged to train.log; what is shown gets an ETA
# on each progress line and leaves out dependency warnings and the model's repr (--quiet;
# qknorm_tools.progress; tee -p keeps logging should the display end). Run as its own process
# (qk_run), so bash's `times` then holds the CPU time (user + system) of this attempt's training
# processes (fairseq-train and its workers, plus the display's): added to RUN/cpu_seconds
# (train.json's cpu_seconds; an attempt that is killed is not counted).
train_with_eta() {
    local rc=0 prev=0
    "${LAUNCH[@]+"${LAUNCH[@]}"}" "${CMD[@]}" "${PORT_FLAGS[@]+"${PORT_FLAGS[@]}"}" 2>&1 \
        | tee -p -a -- "$RUN/train.log" \
        | "$QK_PY" -m qknorm_tools.progress train --max-update "$MAX_UPDATE" --max-epoch "${MAX_EPOCH:-0}" --quiet \
        || rc="${PIPESTATUS[0]}"
    times >"$RUN/cpu_times.tmp"  # line 2: the children's user and system time, e.g. 1m2.500s
    [[ ! -f "$RUN/cpu_seconds" ]] || prev="$(cat -- "$RUN/cpu_seconds")"
    LC_ALL=C awk -v prev="$prev" 'function sec(t, a) { gsub(",", ".", t); sub("s$", "", t);
        split(t, a, "m"); return a[1] * 60 + a[2] }
        NR == 2 { printf "%.2f\n", prev + sec($1) + sec($2) }' "$RUN/cpu_times.tmp" >"$RUN/cpu_seconds" \
        || qk_warn "could not record the CPU time of $RUN"
    rm -f -- "$RUN/cpu_times.tmp"
    return "$rc"
}
RC=0
OMP_NUM_THREADS="$THREADS" MKL_NUM_THREADS="$THREADS" qk_run train_with_eta || RC=$?
add_wall_time
TRAIN_JSON=(collect train-json "$RUN" --pair "$PAIR" --profile "$LABEL"
    --system "$SYSTEM" --seed "$SEED" --arch "$ARCH" --precision "${QK_BF16_RUN:-fp32}" ${L:+--qk-norm-length "$L"}
    ${PAPER_L:+--paper-qk-norm-length "$PAPER_L"} ${QK_LR_OVERRIDE:+--variant "lr=$QK_LR_OVERRIDE"})
if ((RC != 0)); then
    # divergence: fairseq (fp32) raises FloatingPointError on non-finite gradients (a NaN/inf
    # loss makes them so; fairseq/trainer.py train_step) and exits non-zero
    ATTEMPT_LOG="$(tail -c "+$((LOG_START + 1))" -- "$RUN/train.log" || true)"  # this attempt's part
    DIVERGED="$(grep -m 1 -o 'FloatingPointError: .*' <<<"$ATTEMPT_LOG" || true)"
    # fairseq-train's argparse refused the arguments (exit 2, e.g. a flag after -- that the
    # system's own flags exclude): a usage error, not a run to resume; a run directory that
    # holds no checkpoint is emptied (and, holding only the lock then, removed on exit:
    # qk_lock_run), so that the corrected command is not refused as "trained with another command"
    REFUSED="$(grep -m 1 -o 'fairseq-train: error: .*' <<<"$ATTEMPT_LOG" || true)"
    if [[ "$RC" == 2 && -n "$REFUSED" ]]; then
        if [[ ! -f "$RUN/checkpoints/checkpoint_last.pt" ]]; then
            empty_run_dir
            printf 'error: %s; nothing was trained (%s removed; the arguments after -- are fairseq-train'"'"'s)\n' \
                "$REFUSED" "$RUN" >&2
        else
            printf 'error: %s; nothing was trained in this attempt (%s kept)\n' "$REFUSED" "$RUN" >&2
        fi
        exit 2
    fi
    [[ -n "$DIVERGED" ]] || die "fairseq-train failed (exit $RC) for $RUN; see $RUN/train.log (rerun to resume)"
    printf '%s\n' "$DIVERGED" >"$RUN/diverged"
    qk_py "${TRAIN_JSON[@]}" || die "could not write $RUN/train.json"
    qk_warn "$RUN diverged ($DIVERGED) after $QK_PY_OUT: recorded in $RUN/diverged, a finished result (nothing to decode; --force retrains)"
    exit 3
fi
[[ -f "$RUN/checkpoints/checkpoint_last.pt" ]] || die "fairseq-train wrote no checkpoint in $RUN/checkpoints"

qk_py "${TRAIN_JSON[@]}" || die "could not write $RUN/train.json"
qk_log "finished $RUN: $QK_PY_OUT"
