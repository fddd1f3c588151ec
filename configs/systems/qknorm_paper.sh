# shellcheck shell=bash
# The QKNorm paper's model: PreNorm + FixNorm + LayerNorm + QKNorm (ablation cell
# "LayerNorm x QKNorm"). Named archs transformer_qknorm_paper / transformer_qknorm_paper_proxy.
SYSTEM_DESC="PreNorm + FixNorm + LayerNorm + QKNorm"
PAPER_ROW="QKNorm paper (Henry et al. 2020)"
SYSTEM_ARCH_PAPER=transformer_qknorm_paper
SYSTEM_ARCH_PROXY=transformer_qknorm_paper_proxy
SYSTEM_FLAGS=()
SYSTEM_QKNORM=1
