# shellcheck shell=bash
# configs/profiles/cpu-converge.sh: CPU training to convergence (the papers' stopping rule,
# scaled), sourced by scripts/train.sh and scripts/evaluate.sh after configs/base.sh and
# configs/pairs/<PAIR>.sh. Sized so that one gl-en run stops by its stopping rule within about
# 80 minutes at one thread, two runs side by side on 2 cores (docs/convergence.md).
# NOT the papers' setting: a CPU-sized model; numbers are never comparable to the papers'.

# Model size: the systems' *_proxy named archs (3+3 layers, 4 heads) at width 256 / FFN 1024,
# dropout 0.3. PROFILE_MODEL_FLAGS: size flags that train.sh passes after the arch (the arch's
# own values are defaults, so these win); cpu-converge-d128.sh narrows them.
PROFILE_ARCH=proxy
PROFILE_MODEL_FLAGS=()
TRAIN_DROPOUT=0.3

# Adam (0.9, 0.98), clip 1.0 (TWT Sec. 4). Linear warmup over 500 updates from 1e-4 to lr 1e-3,
# then the papers' validation-based decay (fairseq's reduce_lr_on_plateau): lr x0.5 after each
# validation without a better dev loss (--lr-patience 0).
OPTIM_FLAGS=(--optimizer adam --adam-betas "(0.9,0.98)" --adam-eps 1e-8 --clip-norm 1.0
    --lr 1e-3 --lr-scheduler reduce_lr_on_plateau --lr-shrink 0.5 --lr-patience 0
    --warmup-updates 500 --warmup-init-lr 1e-4)
LABEL_SMOOTHING=0.1        # TWT / QKNorm papers
MAX_TOKENS=2048            # about 1,640 target tokens per batch, about 235 updates per gl-en epoch

# No update budget: the stopping rule ends the run. --max-epoch is a safety net only (a run
# that reaches it did not converge; its record says so).
PROFILE_MAX_UPDATE=0
MAX_EPOCH=150

# Validation by dev loss once per epoch (seconds on a CPU; dev BLEU with beam search would cost
# minutes per validation), best checkpoint by dev loss. Two stopping rules, the papers' scaled:
# an lr floor (TWT stops when lr decays below a floor): lr <= 3e-5, i.e. after 6 halvings from
# 1e-3 (7 from cpu-converge-d128's 2e-3); and early stopping after 3 validations without a
# lower dev loss (our paper profile: 20 BLEU validations). The floor is needed: after a few
# halvings the dev loss still improves by 0.001 now and then, which resets the patience (the
# d128 calibration run was still going after 36 epochs and 5 halvings without it; README
# "Convergence"). --stop-min-lr stays below the warmup's first lr (1e-4): fairseq checks it at
# the start of every epoch, the first included (qknorm_tools/train_check.py).
# checkpoint_best.pt and checkpoint_last.pt only.
VALID_FLAGS=(--validate-interval 1 --save-interval 1 --no-epoch-checkpoints
    --best-checkpoint-metric loss --patience 3 --stop-min-lr 3e-5)

# Decoding as the other CPU profiles: beam 4, fairseq's length normalization, length cap
BEAM=4
LENPEN=1.0
GEN_MAX_TOKENS=6000
GEN_FLAGS=(--max-len-a 1.5 --max-len-b 10)

# One thread per run: a grid trains two cells side by side on 2 cores (JOBS=2).
THREADS="${QKNORM_THREADS:-1}"

# fp32, pinned: a grid built over several sittings may meet machines with and without native
# bf16, and records of both precisions would not mix (collect refuses them). QKNORM_BF16=1
# still forces bf16 autocast (runs filed as seedN-bf16).
PROFILE_BF16=0

JOB_GPUS=0
JOB_CPUS=1
JOB_MEM=4G
JOB_TIME=4:00:00
