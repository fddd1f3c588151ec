# shellcheck shell=bash
# configs/profiles/cpu-converge-d128.sh: cpu-converge at width 128 / FFN 512 (4 heads of 32),
# dropout 0.2: about 3x cheaper per token (calibration candidate; docs/convergence.md).
source "$(dirname "${BASH_SOURCE[0]}")/cpu-converge.sh"

PROFILE_MODEL_FLAGS=(--encoder-embed-dim 128 --decoder-embed-dim 128
    --encoder-ffn-embed-dim 512 --decoder-ffn-embed-dim 512)
TRAIN_DROPOUT=0.2
OPTIM_FLAGS=(--optimizer adam --adam-betas "(0.9,0.98)" --adam-eps 1e-8 --clip-norm 1.0
    --lr 2e-3 --lr-scheduler reduce_lr_on_plateau --lr-shrink 0.5 --lr-patience 0
    --warmup-updates 500 --warmup-init-lr 1e-4)
