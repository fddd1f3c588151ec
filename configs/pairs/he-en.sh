# shellcheck shell=bash disable=SC2034  # sourced: the variables are used by the scripts
# configs/pairs/he-en.sh: English -> Hebrew (pair named he-en, direction en->he as in the
# papers), TED talks (Qi et al. 2018), extracted from the all-talks TSVs of ted_talks.tar.gz.
# Sourced after configs/base.sh. Sources: TWT = Nguyen & Salazar 2019 (Table 1), QKNorm.

SRC="en"                # source language (papers' direction en->he)
TGT="he"                # target language
CORPUS=ted              # ted | iwslt15
TED_LOCAL_DIR=ted-he-en # pre-extracted copy inside a data dir ({train,dev,test}.{en,he})
QI18_FOLDER=            # not in qi18naacl-dataset.tar.gz: extracted from the all-talks TSVs

BPE_MERGES=8000         # joint BPE merges (TWT Table 1: 8k)
SPM_VOCAB_SIZE=8000     # sentencepiece BPE vocab size for --tool sentencepiece (ours: ~ merges)

PAPER_L=72              # QKNorm authors' 97.5th-percentile BPE length L (g0 ~ 12.32)
PAPER_ARCH_SIZE=base    # the papers' model size: 6+6 layers, 8 heads, dropout 0.3 (TWT Table 1) =
                        # the named archs' base size (d 512 / FFN 2048 everywhere)
PAPER_MAX_EPOCH=200     # max training epochs (TWT Table 1)
PAPER_TRAIN_PAIRS=212k  # training pairs as stated in TWT Table 1

# Exact line counts of our TSV extraction are not known yet (no local copy): empty = unchecked.
LINES_TRAIN=
LINES_DEV=
LINES_TEST=
