# shellcheck shell=bash disable=SC2034  # sourced: the variables are used by the scripts
# configs/base.sh: settings common to every pair. Sourced first by
# scripts/lib.sh:load_pair_config, then configs/pairs/<PAIR>.sh, which may override any value.
# Plain VAR=value lines; "${QKNORM_...:-default}" marks values that may be overridden from the
# environment (mirrors, tests).

# ---------------------------------------------------------------------------------------------
# Raw-data sanity limits (scripts/prepare_data.sh -> `python -m qknorm_tools.corpus check`)

# Max whitespace tokens per raw line before a line is rejected as broken (bad sentence split,
# concatenated file). Our own sanity limit, not from the papers; raw TED/IWSLT lines are far
# shorter (a few hundred tokens at most).
MAX_TOKENS_CHECK=1024

# ---------------------------------------------------------------------------------------------
# Subword segmentation (scripts/bpe.sh)

# Default tool: subword-nmt joint BPE learned on the training data of both sides. The papers use
# joint BPE (TWT, Nguyen & Salazar 2019; QKNorm, Henry et al. 2020, same data and BPE setup);
# the authors' code ran fastBPE (same BPE algorithm), subword-nmt is its reference implementation.
BPE_TOOL=subword-nmt

# apply-bpe --vocabulary-threshold: a subword produced by a merge is kept only if it occurs at
# least this often on that language's side of the BPE'd training data (learn-joint-bpe-and-vocab
# --write-vocabulary), otherwise the merge is reverted. 50 is the value of the subword-nmt
# README's "best practice advice" (Sennrich et al.). The papers state no threshold; the
# authors' code (TWT preprocessing.py) used fastBPE applybpe with per-language vocabularies and
# no frequency threshold, i.e. closer to 1 (bpe.sh --vocab-threshold 1). The threshold makes
# segmentations longer: on the local gl-en copy, 3000 merges give L = 92 with 50, 82 without
# any vocabulary filter.
BPE_VOCAB_THRESHOLD=50

# BPE-dropout probability (Provilkov et al. 2020), applied to TRAINING data only
# (subword-nmt apply-bpe --dropout P). 0 = off, as in both papers; Provilkov et al. use 0.1.
BPE_DROPOUT=0

# Random seed of apply-bpe --seed (BPE-dropout) and of sentencepiece sampling. Ours.
BPE_DROPOUT_SEED=1

# Number K of BPE-dropout segmentations of the training split (subword-nmt): 1 = one static
# sample that every epoch sees; K > 1 = K samples (seeds BPE_DROPOUT_SEED..+K-1) trained as fairseq
# epoch shards, epoch e on sample ((e-1) % K) + 1: resampled per epoch (Provilkov et al. 2020
# resample every batch; K = the number of epochs gives every epoch its own sample).
BPE_DROPOUT_SAMPLES=1

# Percentile q of BPE-level training sentence lengths that defines L for QKNorm's
# g0 = log2(L^2 - L) (Henry et al. 2020: 97.5th percentile); the model computes g0 from L.
LENGTH_PERCENTILE=97.5

# ---------------------------------------------------------------------------------------------
# Binarization (scripts/binarize.sh)

# fairseq-preprocess --workers: worker processes (the development machine has 2 CPU cores).
PREPROCESS_WORKERS=2

# Model sizes are the named archs' (fairseq_qknorm/models/transformer_qknorm.py): a system
# picks an arch family (configs/systems), a profile its size (configs/profiles), and
# scripts/train.sh passes no size flag.

# ---------------------------------------------------------------------------------------------
# Canonical download sources (from the project data README, /work/shared/data/README.md).
# A download is accepted only if its size and sha256 match; an HTML page is rejected.
# The URL variables may point at a mirror (QKNORM_*_URL); sizes and checksums stay canonical.

# Qi et al. (NAACL 2018) pair folders (datasets/gl_to_en/, ...): the papers' gl->en set.
QI18_URL="${QKNORM_QI18_URL:-http://www.phontron.com/data/qi18naacl-dataset.tar.gz}"
QI18_FILE=qi18naacl-dataset.tar.gz
QI18_BYTES=131005909
QI18_SHA256=216a86c3df4d4f522856fe9b920ff5be6b394d769cc88974ae8f9f5546953bbc

# Qi et al. (NAACL 2018) all-talks TSVs all_talks_{train,dev,test}.tsv (~60 languages); the
# sk-en, ar-en and he-en pairs are extracted from them.
TED_TALKS_URL="${QKNORM_TED_TALKS_URL:-http://phontron.com/data/ted_talks.tar.gz}"
TED_TALKS_FILE=ted_talks.tar.gz
TED_TALKS_BYTES=352222045
TED_TALKS_SHA256=03457b9ebc6d60839f1a48c5a03c940266aff78b81fcda4c6d9e2a5a7fb670ae

# IWSLT'15 English-Vietnamese, Stanford NLP release (base URL; file names, sizes and checksums
# are in configs/pairs/en-vi.sh).
IWSLT15_URL="${QKNORM_IWSLT15_URL:-https://nlp.stanford.edu/projects/nmt/data/iwslt15.en-vi}"
