# shellcheck shell=bash
# configs/profiles/cpu-proxy.sh: CPU-sized training (2 cores; fp32, or bf16 where faster),
# sourced by scripts/train.sh and scripts/evaluate.sh after configs/base.sh and
# configs/pairs/<PAIR>.sh.
# Calibrated on real gl-en on this project's 2-core machines (stock fairseq transformer, same
# sizes and optimizer: about 1 update/s with 2 threads; 1,500 updates -> about 8.5 tokenized BLEU).
# NOT the papers' setting: numbers from this profile are a proxy, never comparable to the papers.

# Model size: the systems' *_proxy named archs (3+3 layers, d 256, FFN 1024, 4 heads, dropout
# 0.3 = the calibration run's value); train.sh passes no size flag.
PROFILE_ARCH=proxy

# Optimizer: Adam (0.9, 0.98) with inverse-sqrt schedule, peak lr 2e-3 after 300 warmup updates
# (calibration run; a short warmup suits a short budget). Clip 1.0 as in TWT.
OPTIM_FLAGS=(--optimizer adam --adam-betas "(0.9,0.98)" --adam-eps 1e-8 --clip-norm 1.0
    --lr 2e-3 --lr-scheduler inverse_sqrt --warmup-updates 300 --warmup-init-lr 1e-7)
LABEL_SMOOTHING=0.1        # TWT / QKNorm papers
MAX_TOKENS=4096            # tokens per batch (TWT: 4096)

# Budget in updates (reproducible, unlike wall time). --max-update N or QKNORM_MAX_UPDATE
# overrides it; runs and results of another budget go to cpu-proxy-max-update-N/.
PROFILE_MAX_UPDATE=1200
MAX_EPOCH=0                # 0 = no epoch limit: the update budget decides

# Validation on dev by loss every 400 updates (cheap); best checkpoint by dev loss. Checkpoints
# by updates only (no checkpointE.pt); the last 5 checkpoint_E_U.pt stay for checkpoint averaging
# (scripts/evaluate.sh --checkpoint avgN; 1,200 updates write 3 of them).
VALID_FLAGS=(--validate-interval 1000000 --validate-interval-updates 400
    --save-interval 1000000 --save-interval-updates 400 --keep-interval-updates 5
    --no-epoch-checkpoints --best-checkpoint-metric loss)

# Decoding (TWT code: beam 4). fairseq's lenpen divides the score by length^lenpen; 1.0 is
# fairseq's default (TWT's GNMT-style alpha 0.6 is a different formula).
BEAM=4
LENPEN=1.0
GEN_MAX_TOKENS=6000
# Output length cap a*src_len + b (fairseq default 0*src + 200): an undertrained model that
# never emits EOS would otherwise decode 200 tokens per sentence with beam 4 on CPU.
GEN_FLAGS=(--max-len-a 1.5 --max-len-b 10)

# Intra-op threads per training job. The demo trains its two systems side by side with one
# thread each (better total throughput on 2 cores than one 2-thread job after the other).
THREADS="${QKNORM_THREADS:-2}"

# Precision: auto = bf16 autocast (the plugin task's --bf16-autocast, fp32 weights and Adam)
# only where the CPU has native bf16 AND a training step of this model was measured faster in
# bf16 than in fp32 (the 95% interval of the median speed-up over 7 repetitions at or above 1;
# benchmarks/bf16_auto.py: measured once per machine, about a minute, cached in
# $QKNORM_WORK_DIR/bf16-auto/); fp32 elsewhere. bf16 runs are filed
# as seedN-bf16 and decoded in fp32. On real gl-en (AMD EPYC Zen 4, cpu-proxy-fast, TWT, 3
# seeds) it trained 1.15x faster end to end with BLEU and dev loss within the seed spread
# (docs/bf16.md). QKNORM_BF16=0 (fp32) or 1 decides instead.
PROFILE_BF16=auto

# One cell as a cluster job (scripts/reproduce.sh --launcher slurm; flags and --sbatch-args
# override them). Not SLURM_*: Slurm reads such variables from the environment. JOB_GPUS: GPUs
# per training process (0 or 1); JOB_CPUS and JOB_MEM: per training process; JOB_TIME: the
# time limit of one start (a cell that reaches it requeues itself and resumes).
JOB_GPUS=0
JOB_CPUS=2
JOB_MEM=4G
JOB_TIME=2:00:00
