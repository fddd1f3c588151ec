"""qknorm_tools: the experiment tooling around the ``fairseq_qknorm`` plugin.

Everything here runs without torch or fairseq (scoring needs only sacrebleu and sacremoses;
figures import numpy and matplotlib when drawn), the way fairseq's own examples keep their
scoring tools outside the ``*_src`` plugin package. The plugin itself is ``fairseq_qknorm``
(``--user-dir fairseq_qknorm``); nothing here imports it.

Modules, one role each:

* :mod:`.textio` - errors, reading and writing text, hypotheses from ``fairseq-generate`` output
* :mod:`.scoring` - tokenized BLEU, detokenized sacreBLEU and chrF with their signatures
* :mod:`.significance` - paired bootstrap resampling and approximate randomization
* :mod:`.records` - :class:`~.records.RunRecord` and the run-directory reader
* :mod:`.trainlog` - statistics from ``fairseq-train`` logs
* :mod:`.aggregate` - mean and sd over seeds, paired tests on seed-concatenated outputs
* :mod:`.tables` - Markdown, LaTeX and CSV tables
* :mod:`.ablation` - the 2x2 {LayerNorm, ScaleNorm} x {dot product, QKNorm} report
* :mod:`.lr_sweep` - the learning-rate sweep: LR sensitivity, divergence, loss and BLEU per LR
* :mod:`.corpus` - the corpus command line of the data pipeline (``python -m qknorm_tools.corpus``)
* :mod:`.corpus_check` - raw-corpus checks (pair alignment, characters, overlap) and their errors
* :mod:`.archives` - checksums of downloads and safe tar extraction
* :mod:`.corpus_extract` - a pair from the TED TSVs or a pair folder; what a data dir holds
* :mod:`.lengths` - sentence lengths and their percentile, QKNorm's ``L``
* :mod:`.spm` - joint sentencepiece BPE of a pair
* :mod:`.progress` - time estimates (ETA) of training and decoding for the scripts
* :mod:`.freshness` - made-by records: an output is reused only if what made it is unchanged

Command lines: ``python -m qknorm_tools.evaluate {extract,score,compare,aggregate,ablation,
  lr-sensitivity}``,
``python -m qknorm_tools.collect``, ``python -m qknorm_tools.plots``,
``python -m qknorm_tools.corpus``, ``python -m qknorm_tools.progress``,
``python -m qknorm_tools.freshness {check,write}``.
"""

__version__ = "0.1.0"
