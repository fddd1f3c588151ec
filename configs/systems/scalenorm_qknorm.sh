# shellcheck shell=bash
# The confound's missing cell: PreNorm + FixNorm + ScaleNorm + QKNorm (ablation cell
# "ScaleNorm x QKNorm"): the TWT baseline with QKNorm added and nothing else changed.
SYSTEM_DESC="PreNorm + FixNorm + ScaleNorm + QKNorm"
PAPER_ROW="(not in the papers: ablation cell)"
SYSTEM_ARCH_PAPER=transformer_twt
SYSTEM_ARCH_PROXY=transformer_twt_proxy
SYSTEM_FLAGS=(--qk-norm)
SYSTEM_QKNORM=1
