# shellcheck shell=bash disable=SC2034  # sourced by scripts/lib.sh:load_system_config
# The QKNorm paper's model: PreNorm + FixNorm + LayerNorm + QKNorm (ablation cell
# "LayerNorm x QKNorm").
SYSTEM_DESC="PreNorm + FixNorm + LayerNorm + QKNorm"
PAPER_ROW="QKNorm paper (Henry et al. 2020)"
SYSTEM_ARCH=transformer_qknorm_paper  # named arch family: base, _small, _proxy sizes
SYSTEM_QKNORM=1                       # train.sh passes the data's L (--qk-norm-length)
