# shellcheck shell=bash disable=SC2034  # sourced by scripts/lib.sh:load_system_config
# TWT Table 3 row (3): PreNorm + FixNorm + LayerNorm. The fair LayerNorm counterpart of the
# QKNorm paper's model (ablation cell "LayerNorm x dot-product").
SYSTEM_DESC="PreNorm + FixNorm + LayerNorm"
PAPER_ROW="TWT Table 3 (3)"
SYSTEM_ARCH=transformer_prenorm_fixnorm_layernorm  # named arch family: base, _small, _proxy sizes
SYSTEM_QKNORM=0                                    # 1: train.sh passes the data's L
