# shellcheck shell=bash disable=SC2034  # sourced by scripts/lib.sh:load_system_config
# Gemma 3's QK-norm on the QKNorm paper's model: PreNorm + FixNorm + LayerNorm, per-head RMSNorm
# of q and k with the weight initialised at 0 and applied as 1 + w (Gemma Team 2025), logits
# q.k/sqrt(d_head). The arch sets --qk-norm --qk-norm-type rmsnorm_zc; no g.
SYSTEM_DESC="PreNorm + FixNorm + LayerNorm + zero-centred per-head QK-RMSNorm"
PAPER_ROW="(not in the papers: Gemma 3 QK-norm)"
SYSTEM_ARCH=transformer_qk_rmsnorm_zc  # named arch family: base, _small, _proxy sizes
SYSTEM_QKNORM=0                        # no g: train.sh passes no --qk-norm-length
SYSTEM_IN_ALL=0                        # not in the papers' tables: --systems all leaves it out
