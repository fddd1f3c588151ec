# shellcheck shell=bash disable=SC2034  # sourced by scripts/lib.sh:load_system_config
# OLMo 2's QK-norm on the QKNorm paper's model: PreNorm + FixNorm + LayerNorm, q and k
# RMS-normalized over the full width before the head split (Team OLMo 2024), logits
# q.k/sqrt(d_head). The arch sets --qk-norm --qk-norm-type rmsnorm_full; no g.
SYSTEM_DESC="PreNorm + FixNorm + LayerNorm + full-width QK-RMSNorm"
PAPER_ROW="(not in the papers: OLMo 2 QK-norm)"
SYSTEM_ARCH=transformer_qk_rmsnorm_full  # named arch family: base, _small, _proxy sizes
SYSTEM_QKNORM=0                          # no g: train.sh passes no --qk-norm-length
SYSTEM_IN_ALL=0                          # not in the papers' tables: --systems all leaves it out
