# shellcheck shell=bash disable=SC2034  # sourced by scripts/lib.sh:load_system_config
# TWT Table 3 row (2): PreNorm + LayerNorm.
SYSTEM_DESC="PreNorm + LayerNorm"
PAPER_ROW="TWT Table 3 (2)"
SYSTEM_ARCH=transformer_prenorm_layernorm  # named arch family: base, _small, _proxy sizes
SYSTEM_QKNORM=0                            # 1: train.sh passes the data's L (--qk-norm-length)
