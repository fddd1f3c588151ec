# shellcheck shell=bash disable=SC2034  # sourced by scripts/lib.sh:load_system_config
# TWT Table 3 row (1): PostNorm + LayerNorm, dot-product attention (fairseq's classic transformer
# with all embeddings shared, as in every TWT system).
SYSTEM_DESC="PostNorm + LayerNorm"
PAPER_ROW="TWT Table 3 (1)"
SYSTEM_ARCH=transformer_postnorm_layernorm  # named arch family: base, _small, _proxy sizes
SYSTEM_QKNORM=0                             # 1: train.sh passes the data's L (--qk-norm-length)
