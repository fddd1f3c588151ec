# shellcheck shell=bash
# configs/profiles/paper.sh: the papers' setting (one GPU), sourced by scripts/train.sh and
# scripts/evaluate.sh after configs/base.sh and configs/pairs/<PAIR>.sh.
# Sources: TWT = Nguyen & Salazar 2019 (Sec. 3-4, Table 1, code); QKNorm = Henry et al. 2020
# (same training setup as TWT). Deviations are marked "DEVIATION".

# Model size: the pair's paper size (PAPER_ARCH_SIZE in configs/pairs/<PAIR>.sh): the systems'
# *_small named archs for gl-en (4+4 layers, 4 heads, dropout 0.4), their base archs for the
# other pairs (6+6 layers, 8 heads, dropout 0.3); width 512, FFN 2048 everywhere (TWT Table 1).
PROFILE_ARCH=paper

# Adam (0.9, 0.999, 1e-8), clip 1.0 (TWT Sec. 4). Linear warmup over 8k updates, then
# validation-based decay x0.8 with patience 3 on dev BLEU (fairseq's reduce_lr_on_plateau,
# which supports warmup). Peak lr 1e-3: DEVIATION/ours (the papers' text gives no value for this
# schedule; TWT's code scales lr with its own schedule).
OPTIM_FLAGS=(--optimizer adam --adam-betas "(0.9,0.999)" --adam-eps 1e-8 --clip-norm 1.0
    --lr 1e-3 --lr-scheduler reduce_lr_on_plateau --lr-shrink 0.8 --lr-patience 3
    --warmup-updates 8000 --warmup-init-lr 1e-7)
LABEL_SMOOTHING=0.1        # TWT Sec. 4
MAX_TOKENS=4096            # TWT: batches of 4096 tokens
# Word dropout 0.1 (TWT Sec. 4): source and decoder-input tokens -> <unk> with p 0.1, training
# only (the plugin's registered task translation_word_dropout; decoding uses --task translation).
TRAIN_TASK=translation_word_dropout
TASK_FLAGS=(--word-dropout 0.1)

PROFILE_MAX_UPDATE=0                   # 0 = no update limit (--max-update N overrides)
MAX_EPOCH="$PAPER_MAX_EPOCH"           # per pair: gl-en 1000, others 200 (TWT Table 1)

# Validate every epoch with dev BLEU (beam 4, tokenized; scripts/train.sh adds
# --eval-bleu-remove-bpe with the symbol of the data's BPE tool from data/bpe/PAIR/bpe.json:
# subword_nmt or sentencepiece); keep the best checkpoint by dev BLEU; stop after 20 validations
# without improvement (ours: TWT stops when lr decays below a floor). --stop-min-lr must stay
# below the warmup's first lr (1e-7 above): fairseq-train stops whenever lr <= --stop-min-lr at
# the start of an epoch, the first one included, so the former 1e-6 stopped every run before its
# first update. 1e-9 is the floor of fairseq's own recipes next to --warmup-init-lr 1e-7 (their
# --min-lr 1e-09); from the peak 1e-3 it takes 62 decays x0.8, so --patience 20 stops first.
# --keep-last-epochs 5: the last 5 checkpointE.pt stay for checkpoint averaging
# (scripts/evaluate.sh --checkpoint avg5). scripts/train.sh refuses values that cannot work
# together (qknorm_tools/train_check.py).
VALID_FLAGS=(--eval-bleu --eval-bleu-args '{"beam": 4}' --eval-tokenized-bleu
    --best-checkpoint-metric bleu --maximize-best-checkpoint-metric
    --patience 20 --stop-min-lr 1e-9 --keep-last-epochs 5)

BEAM=4                     # TWT code
LENPEN=1.0                 # fairseq's length normalization; TWT's GNMT alpha 0.6 differs
GEN_MAX_TOKENS=12000
GEN_FLAGS=()               # fairseq's default output length cap (200 tokens)

THREADS="${QKNORM_THREADS:-2}"

# One cell as a cluster job (scripts/reproduce.sh --launcher slurm; flags and --sbatch-args
# override them). Not SLURM_*: Slurm reads such variables from the environment. One GPU per
# training process, as the papers; 4 CPUs and 16G of host memory per process (data loading,
# dev-BLEU decoding); 24 hours per start: a cell that reaches the limit requeues itself and
# resumes from checkpoint_last.pt (a 200-epoch pair runs longer than one day on some GPUs).
JOB_GPUS=1
JOB_CPUS=4
JOB_MEM=16G
JOB_TIME=24:00:00
