# shellcheck shell=bash
# TWT Table 3 row (3): PreNorm + FixNorm + LayerNorm. The fair LayerNorm counterpart of the
# QKNorm paper's model (ablation cell "LayerNorm x dot-product").
SYSTEM_DESC="PreNorm + FixNorm + LayerNorm"
PAPER_ROW="TWT Table 3 (3)"
SYSTEM_ARCH_PAPER=transformer_qknorm
SYSTEM_ARCH_PROXY=transformer_qknorm
SYSTEM_FLAGS=(--share-all-embeddings --encoder-normalize-before --decoder-normalize-before
    --fix-norm)
SYSTEM_QKNORM=0
