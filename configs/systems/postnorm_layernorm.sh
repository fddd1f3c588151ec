# shellcheck shell=bash
# TWT Table 3 row (1): PostNorm + LayerNorm, dot-product attention (fairseq's classic transformer).
SYSTEM_DESC="PostNorm + LayerNorm"
PAPER_ROW="TWT Table 3 (1)"
SYSTEM_ARCH_PAPER=transformer_qknorm
SYSTEM_ARCH_PROXY=transformer_qknorm
SYSTEM_FLAGS=(--share-all-embeddings)   # all TWT systems tie source/target/output embeddings
SYSTEM_QKNORM=0
