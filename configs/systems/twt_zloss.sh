# shellcheck shell=bash disable=SC2034  # sourced by scripts/lib.sh:load_system_config
# z-loss dot product: the TWT model (PreNorm + FixNorm + ScaleNorm, transformer_twt) trained with
# the output z-loss 1e-4 * log(Z)^2 per target token (PaLM; Wortsman et al. 2023 Sec. 3.2, the
# weight of both): the model is TWT's, only the criterion differs (SYSTEM_CRITERION*).
SYSTEM_DESC="PreNorm + FixNorm + ScaleNorm, z-loss 1e-4"
PAPER_ROW="(not in the papers: PaLM z-loss)"
SYSTEM_ARCH=transformer_twt  # named arch family: base, _small, _proxy sizes
SYSTEM_QKNORM=0              # no g: train.sh passes no --qk-norm-length
SYSTEM_IN_ALL=0              # not in the papers' tables: --systems all leaves it out
SYSTEM_CRITERION=label_smoothed_cross_entropy_zloss  # fairseq_qknorm/criterions
SYSTEM_CRITERION_FLAGS=(--z-loss 1e-4)
