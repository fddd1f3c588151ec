# shellcheck shell=bash
# TWT Table 3 row (4): PreNorm + FixNorm + ScaleNorm, the baseline of the QKNorm paper
# (ablation cell "ScaleNorm x dot-product"). Named archs transformer_twt / transformer_twt_proxy.
SYSTEM_DESC="PreNorm + FixNorm + ScaleNorm"
PAPER_ROW="TWT Table 3 (4); QKNorm paper baseline"
SYSTEM_ARCH_PAPER=transformer_twt
SYSTEM_ARCH_PROXY=transformer_twt_proxy
SYSTEM_FLAGS=()
SYSTEM_QKNORM=0
