# shellcheck shell=bash disable=SC2034  # sourced by scripts/lib.sh:load_system_config
# TWT Table 3 row (4): PreNorm + FixNorm + ScaleNorm, the baseline of the QKNorm paper
# (ablation cell "ScaleNorm x dot-product").
SYSTEM_DESC="PreNorm + FixNorm + ScaleNorm"
PAPER_ROW="TWT Table 3 (4); QKNorm paper baseline"
SYSTEM_ARCH=transformer_twt  # named arch family: base, _small, _proxy sizes
SYSTEM_QKNORM=0              # 1: train.sh passes the data's L (--qk-norm-length)
