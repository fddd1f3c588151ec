# shellcheck shell=bash
# TWT Table 3 row (2): PreNorm + LayerNorm.
SYSTEM_DESC="PreNorm + LayerNorm"
PAPER_ROW="TWT Table 3 (2)"
SYSTEM_ARCH_PAPER=transformer_qknorm
SYSTEM_ARCH_PROXY=transformer_qknorm
SYSTEM_FLAGS=(--share-all-embeddings --encoder-normalize-before --decoder-normalize-before)
SYSTEM_QKNORM=0
