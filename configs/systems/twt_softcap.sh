# shellcheck shell=bash disable=SC2034  # sourced by scripts/lib.sh:load_system_config
# Soft-capped dot product: TWT Table 3 row (4) (PreNorm + FixNorm + ScaleNorm) with every
# attention logit capped as 50 tanh(x / 50) before the softmax (Gemma 2's attention cap;
# Rybakov et al. 2024, arXiv 2410.16682). The arch sets --attn-logit-softcap 50.
SYSTEM_DESC="PreNorm + FixNorm + ScaleNorm + attention-logit soft cap 50"
PAPER_ROW="(not in the papers: Gemma 2 soft capping)"
SYSTEM_ARCH=transformer_twt_softcap  # named arch family: base, _small, _proxy sizes
SYSTEM_QKNORM=0                      # no g: train.sh passes no --qk-norm-length
SYSTEM_IN_ALL=0                      # not in the papers' tables: --systems all leaves it out
