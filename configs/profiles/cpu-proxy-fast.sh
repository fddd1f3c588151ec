# shellcheck shell=bash
# configs/profiles/cpu-proxy-fast.sh: the CPU-proxy profile sized for the one-hour 2x2 ablation
# grid (4 systems x 2 seeds on 2 cores, two runs side by side with one thread each), sourced by
# scripts/train.sh and scripts/evaluate.sh after configs/base.sh and configs/pairs/<PAIR>.sh.
# Same model (3+3 layers, d 256, FFN 1024, 4 heads), data, BPE, decoding and scoring as
# cpu-proxy; only the batch, dropout, schedule and budget differ. NOT the papers' setting.
#
# Measured here on real gl-en (TWT system, one thread each, two jobs side by side, 2026-11-29):
# cpu-proxy (4,096 tokens, dropout 0.3, lr 2e-3, warmup 300) reaches dev loss 6.76 after
# 400 updates, about 17 minutes; this profile (1,024 tokens, dropout 0.1, lr 1e-3, warmup
# 200) reaches 6.40 (ppl 47) after 750 updates, 9 minutes (2,048 tokens, lr 1.5e-3: 6.78
# after 375 updates, 9 minutes). Smaller batches give more updates per second of CPU, and low
# dropout suits a run that sees the data about twice.
# shellcheck source=configs/profiles/cpu-proxy.sh
source "$(dirname "${BASH_SOURCE[0]}")/cpu-proxy.sh"

# A training setting, passed as --dropout over the arch's 0.3: a short run (about 2 epochs)
# gains nothing from regularization, it only slows it down.
TRAIN_DROPOUT=0.1
OPTIM_FLAGS=(--optimizer adam --adam-betas "(0.9,0.98)" --adam-eps 1e-8 --clip-norm 1.0
    --lr 1e-3 --lr-scheduler inverse_sqrt --warmup-updates 200 --warmup-init-lr 1e-7)
MAX_TOKENS=1024            # about 820 target tokens per batch, 468 updates per gl-en epoch

# 1,000 updates: about 12.5 min per run with one thread next to another run, so the 8 runs of
# the 2x2 x 2-seed grid plus decoding take about an hour with --jobs 2. --max-update N or
# QKNORM_MAX_UPDATE overrides it (runs and results then go to cpu-proxy-fast-max-update-N/).
PROFILE_MAX_UPDATE=1000

# Dev loss every 250 updates (learning curves for the report); best checkpoint by dev loss; the
# last 5 checkpoint_E_U.pt stay for checkpoint averaging (1,000 updates write 4 of them).
VALID_FLAGS=(--validate-interval 1000000 --validate-interval-updates 250
    --save-interval 1000000 --save-interval-updates 250 --keep-interval-updates 5
    --no-epoch-checkpoints --best-checkpoint-metric loss)
