# shellcheck shell=bash disable=SC2034  # sourced by scripts/lib.sh:load_system_config
# TWT Table 3 row (3) with RMSNorm (Zhang & Sennrich 2019, Eq. 4: x / RMS(x) * g, no mean
# subtraction, no bias) in place of every LayerNorm: PreNorm + FixNorm + RMSNorm, dot-product
# attention. In neither paper.
SYSTEM_DESC="PreNorm + FixNorm + RMSNorm"
PAPER_ROW="(not in the papers: RMSNorm, Zhang & Sennrich 2019)"
SYSTEM_ARCH=transformer_prenorm_fixnorm_rmsnorm  # named arch family: base, _small, _proxy sizes
SYSTEM_QKNORM=0                                  # dot-product attention: no --qk-norm-length
SYSTEM_IN_ALL=0                                  # not in the papers' tables: --systems all leaves it out
