# shellcheck shell=bash disable=SC2034  # sourced by scripts/lib.sh:load_system_config
# QK-LayerNorm: the QKNorm paper's model with QKNorm replaced by per-head LayerNorm of q and k
# (weight shared across heads, no bias) and the usual q.k/sqrt(d_head) logits (ViT-22B, Dehghani
# et al. 2023; the qk-layernorm of Wortsman et al. 2023): PreNorm + FixNorm + LayerNorm +
# QK-LayerNorm. No learnable scale g, so no --qk-norm-length (SYSTEM_QKNORM=0); the arch sets
# --qk-norm --qk-norm-type layernorm.
SYSTEM_DESC="PreNorm + FixNorm + LayerNorm + QK-LayerNorm"
PAPER_ROW="(not in the papers: QK-LayerNorm, ViT-22B)"
SYSTEM_ARCH=transformer_qk_layernorm  # named arch family: base, _small, _proxy sizes
SYSTEM_QKNORM=0                       # no g: train.sh passes no --qk-norm-length
SYSTEM_IN_ALL=0                       # not in the papers' tables: --systems all leaves it out
