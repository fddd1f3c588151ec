# shellcheck shell=bash disable=SC2034  # sourced: the variables are used by the scripts
# configs/pairs/en-vi.sh: English -> Vietnamese, IWSLT'15 (Stanford NLP release): train from
# train.{en,vi}, dev = tst2012, test = tst2013 (as in TWT and QKNorm). Sourced after
# configs/base.sh. Sources: TWT = Nguyen & Salazar 2019 (Table 1), QKNorm = Henry et al. 2020,
# sizes/checksums/line counts from the project data README (match the published checksums).

SRC="en"                # source language (papers' direction en->vi)
TGT="vi"                # target language
CORPUS=iwslt15          # ted | iwslt15
IWSLT15_LOCAL_DIR=iwslt15-en-vi  # folder inside a data dir holding the files below
IWSLT15_DEV=tst2012     # dev set file prefix
IWSLT15_TEST=tst2013    # test set file prefix

BPE_MERGES=8000         # joint BPE merges (TWT Table 1: 8k)
SPM_VOCAB_SIZE=8000     # sentencepiece BPE vocab size for --tool sentencepiece (ours: ~ merges)

PAPER_L=72              # QKNorm authors' 97.5th-percentile BPE length L (g0 ~ 12.32)
PAPER_ARCH_SIZE=base    # the papers' model size: 6+6 layers, 8 heads, dropout 0.3 (TWT Table 1) =
                        # the named archs' base size (d 512 / FFN 2048 everywhere)
PAPER_MAX_EPOCH=200     # max training epochs (TWT Table 1)
PAPER_TRAIN_PAIRS=133k  # training pairs as stated in TWT Table 1

# Expected line counts (data README: train 133,317, tst2012 1,553, tst2013 1,268).
LINES_TRAIN=133317
LINES_DEV=1553
LINES_TEST=1268

# Files of the release: "name bytes sha256", one per line (data README, canonical checksums).
IWSLT15_FILES="train.en 13603614 c26dfeed74b6bf3752f5ca552f2412456f0de153f7c804df8717931fb3a5c78a
train.vi 18074646 707206edf2dc0280273952c7b70544ea8a1363aa69aaeb9d70514b888dc3067d
tst2012.en 140250 b8fbcd0d4199d41276421d1f7228298df67dd9e2c5c134c2ee8cdf3ec27801e2
tst2012.vi 188396 01004078b3f36b0c46e81b65fc6851230b3c823405c76d1d82ef3b786b512ff0
tst2013.en 132264 3860ce60bc5b85d96cc2d3d580cf1bc9d62440e939c1b964676d3607c4e8f1df
tst2013.vi 183855 29af16842808da2812b8fd4d47fc05d082ba870e60ab7755090ad04b380994cd"
