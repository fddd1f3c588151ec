# shellcheck shell=bash disable=SC2034  # sourced: the variables are used by the scripts
# configs/pairs/gl-en.sh: Galician -> English, TED talks (Qi et al. 2018).
# Sourced after configs/base.sh. Sources: TWT = Nguyen & Salazar 2019 (Table 1/3 and code),
# QKNorm = Henry et al. 2020; data counts from the project data README.

SRC="gl"                # source language (papers' direction gl->en)
TGT="en"                # target language
CORPUS=ted              # ted (Qi et al. 2018 TED talks) | iwslt15
TED_LOCAL_DIR=ted-gl-en # pre-extracted copy inside a data dir ({train,dev,test}.{gl,en})
QI18_FOLDER=gl_to_en    # pair folder in qi18naacl-dataset.tar.gz (the papers' "10k" gl->en set)

BPE_MERGES=3000         # joint BPE merges (TWT Table 1: 3k for gl->en)
SPM_VOCAB_SIZE=3000     # sentencepiece BPE vocab size for --tool sentencepiece (ours: ~ merges)

PAPER_L=79              # QKNorm authors' 97.5th-percentile BPE length L (g0 = log2(79^2-79) ~ 12.59)
PAPER_ARCH_SIZE=small   # the papers' model size: 4+4 layers, 4 heads, dropout 0.4 (TWT Table 1) =
                        # the named archs' *_small size (d 512 / FFN 2048 everywhere)
PAPER_MAX_EPOCH=1000    # max training epochs (TWT Table 1)
PAPER_TRAIN_PAIRS=10k   # training pairs as stated in TWT Table 1

# Expected line counts after preparation. LINES_*: local copy / extraction from the all-talks
# TSVs (data README: 11,233 / 742 / 1,112). QI18_LINES_*: the qi18naacl gl_to_en folder used by
# the papers (data README: 10,017 / 682 / 1,007).
LINES_TRAIN=11233
LINES_DEV=742
LINES_TEST=1112
QI18_LINES_TRAIN=10017
QI18_LINES_DEV=682
QI18_LINES_TEST=1007
