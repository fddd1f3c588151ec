# shellcheck shell=bash disable=SC2034  # sourced by scripts/lib.sh:load_system_config
# The confound's missing cell: PreNorm + FixNorm + ScaleNorm + QKNorm (ablation cell
# "ScaleNorm x QKNorm"): the TWT baseline with QKNorm added and nothing else changed.
SYSTEM_DESC="PreNorm + FixNorm + ScaleNorm + QKNorm"
PAPER_ROW="(not in the papers: ablation cell)"
SYSTEM_ARCH=transformer_scalenorm_qknorm  # named arch family: base, _small, _proxy sizes
SYSTEM_QKNORM=1                           # train.sh passes the data's L (--qk-norm-length)
