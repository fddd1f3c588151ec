"""``fairseq-train`` that also counts word dropout: a test hook for the profiles' real trainings.

Runs fairseq's own ``fairseq_cli.train.cli_main`` with every argument; in addition it wraps
the plugin's ``word_dropout`` (what ``translation_word_dropout`` applies in ``train_step``) and
fairseq's ``TranslationTask.valid_step`` (validation loss and ``--eval-bleu`` decoding), and
on exit writes ``$QKNORM_TEST_WORD_DROPOUT_COUNTS`` (JSON): for training and for validation,
the number of ``word_dropout`` calls, of tokens that may be replaced (not special symbols) and
of tokens replaced by ``<unk>``.

Use: put an executable ``fairseq-train`` that runs ``python tests/fairseq_train_counting.py
"$@"`` first on ``PATH`` (``tests/test_profiles.py`` does).
"""

import atexit
import json
import os

# isort: off
# fairseq_cli.train first: importing it sets up logging as fairseq-train does (logging.basicConfig
# with fairseq's format); an earlier fairseq import would leave Python's default format, which
# qknorm_tools.trainlog does not parse
from fairseq_cli import train as fairseq_train
from fairseq.tasks.translation import TranslationTask

# isort: on

from fairseq_qknorm.tasks import translation_word_dropout as wd_task

COUNTS = {phase: {"calls": 0, "tokens": 0, "replaced": 0} for phase in ("train", "valid")}
_phase = ["train"]
_word_dropout = wd_task.word_dropout
_valid_step = TranslationTask.valid_step


def counting_word_dropout(tokens, p, unk, nspecial, generator=None):
    out = _word_dropout(tokens, p, unk, nspecial, generator)
    c = COUNTS[_phase[0]]
    c["calls"] += 1
    c["tokens"] += int((tokens >= nspecial).sum())
    c["replaced"] += int(((out == unk) & (tokens != unk)).sum())
    return out


def valid_step(self, sample, model, criterion):
    _phase[0] = "valid"
    try:
        return _valid_step(self, sample, model, criterion)
    finally:
        _phase[0] = "train"


def _write():
    with open(os.environ["QKNORM_TEST_WORD_DROPOUT_COUNTS"], "w", encoding="utf-8") as f:
        json.dump(COUNTS, f)


if __name__ == "__main__":
    wd_task.word_dropout = counting_word_dropout  # apply_word_dropout looks it up per call
    TranslationTask.valid_step = valid_step  # the word-dropout task inherits it
    atexit.register(_write)
    fairseq_train.cli_main()
