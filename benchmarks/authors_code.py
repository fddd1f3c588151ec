r"""Time the QKNorm authors' reference code on our data, for ``benchmarks.run --authors-dir``.

Henry et al. (2020) released their QKNorm code as three files (``layers.py``,
``configurations.py``, ``controller.py`` in CyndxAI/QKNorm) over Nguyen & Salazar's
*Transformers without Tears* trainer (tnq177/transformers_without_tears). None of it is part
of this project: a user assembles it and passes its directory::

    git clone https://github.com/tnq177/transformers_without_tears authors
    git clone https://github.com/CyndxAI/QKNorm cyndx
    cp cyndx/QKNorm/layers.py cyndx/QKNorm/configurations.py cyndx/QKNorm/controller.py authors/
    python -m benchmarks.run --targets --sections e2e --authors-dir authors

This module only drives that code, unedited, in a child process:

* :func:`prepare` builds its data directory from our BPE'd text (``data/bpe/PAIR``) with its
  own ``preprocessing.py`` (its joint vocabulary, language masks and ``.npy`` files); the
  text is already segmented, so the ``fast`` (fastBPE) it calls is a stand-in whose
  ``applybpe`` copies its input (:data:`FAST_STAND_IN`).
* ``python -m benchmarks.authors_code train ...`` (:func:`train_cmd`) runs its ``main.py``
  with the authors' gl-en configuration (``configurations.gl2en``: PreNorm LayerNorm,
  FixNorm, QKNorm, 4,096-token batches, word dropout 0.1) at the dimensions of one of our
  sizes (``proxy``, ``small``; ``small`` is their gl-en model itself), stops after
  ``--updates`` updates (before its evaluation, BLEU and checkpoints) and prints fairseq-style
  ``train_inner`` lines: ``wps`` = real target tokens (their ``num_words``: non-pad targets,
  EOS included, as fairseq's ``ntokens``) per second of wall time from the end of one logged
  interval to the end of the next, as fairseq-train measures its ``wps``.

Their batching fills ``n * max(src, tgt) <= 4096`` tokens of sentences sorted by source length
only, so about 58% of the target positions are padding on gl-en (fairseq's: 42%): that is part
of what is timed, as the code ships.
"""

import argparse
import os
import runpy
import shutil
import subprocess
import sys
import time
from pathlib import Path

from qknorm_tools.exits import die_data

#: the files of the authors' code this module relies on (its ``main.py`` and the three of QKNorm)
REQUIRED_FILES = ("main.py", "preprocessing.py", "configurations.py", "controller.py", "layers.py")

#: fastBPE ``fast`` as the authors' ``preprocessing.py`` calls it, for text already segmented:
#: ``learnbpe`` writes no codes, ``applybpe OUT IN ...`` copies, ``getvocab IN`` counts types
FAST_STAND_IN = """#!/bin/sh
set -eu
case "$1" in
  learnbpe) echo "# no codes: the input is already BPE-segmented" ;;
  applybpe) cp "$3" "$2" ;;
  getvocab) awk '{for (i = 1; i <= NF; i++) c[$i]++} END {for (w in c) print w, c[w]}' "$2" ;;
  *) echo "fast stand-in: unknown command $1" >&2; exit 1 ;;
esac
"""


def check_authors_dir(authors_dir: Path) -> None:
    """Raise ``FileNotFoundError`` naming what is missing from an assembled authors' checkout.

    Raises:
        FileNotFoundError: ``authors_dir`` lacks one of :data:`REQUIRED_FILES`, or its
            ``configurations.py`` has no QKNorm switch (``mha_sup``: CyndxAI's files were not
            copied over the Transformers-without-Tears ones).
    """
    if not authors_dir.is_dir():
        raise FileNotFoundError(f"{authors_dir}: not a directory")
    missing = [f for f in REQUIRED_FILES if not (authors_dir / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"{authors_dir}: not the authors' code (missing {', '.join(missing)}); "
            "see benchmarks/authors_code.py for how to assemble it"
        )
    if "mha_sup" not in (authors_dir / "configurations.py").read_text(errors="replace"):
        raise FileNotFoundError(
            f"{authors_dir}/configurations.py has no 'mha_sup' (QKNorm): copy CyndxAI/QKNorm's "
            "QKNorm/layers.py, configurations.py and controller.py over "
            "transformers_without_tears"
        )


def pair_name(src: str, tgt: str) -> str:
    """The authors' name of a language pair: ``("gl", "en")`` -> ``"gl2en"``."""
    return f"{src}2{tgt}"


def missing_bpe_files(bpe_dir: Path, src: str, tgt: str) -> list[str]:
    """The ``{train,dev,test}.{src,tgt}`` files that :func:`prepare` needs and ``bpe_dir`` lacks."""
    names = [f"{split}.{lang}" for split in ("train", "dev", "test") for lang in (src, tgt)]
    return [n for n in names if not (bpe_dir / n).is_file()]


def prepare(authors_dir: Path, bpe_dir: Path, src: str, tgt: str, work: Path, python: str) -> Path:
    """The authors' data directory for ``bpe_dir``'s train/dev/test text, built in ``work``.

    Rebuilt on every call (about 5 s on gl-en): it depends on the BPE text and on the
    authors' code, both of which may change between benchmark runs.

    Args:
        authors_dir: the assembled authors' code (:func:`check_authors_dir`).
        bpe_dir: ``{train,dev,test}.{src,tgt}`` BPE-segmented text (``data/bpe/PAIR``).
        src: source language code (file suffix), e.g. ``gl``.
        tgt: target language code, e.g. ``en``.
        work: a scratch directory; ``work/data`` is replaced.
        python: the interpreter to run their ``preprocessing.py`` with.

    Returns:
        ``work/data``, holding ``vocab.joint``, ``lang.vocab`` and ``SRC2TGT/*.npy``.

    Raises:
        FileNotFoundError: a BPE file is missing (:func:`missing_bpe_files`).
        RuntimeError: their ``preprocessing.py`` failed; the message ends with its output's
            last lines (all of it in ``work/preprocessing.log``).
    """
    missing = missing_bpe_files(bpe_dir, src, tgt)
    if missing:
        raise FileNotFoundError(f"{bpe_dir}: missing {', '.join(missing)} (scripts/bpe.sh)")
    work = work.resolve()  # their preprocessing.py runs in authors_dir
    data = work / "data"
    shutil.rmtree(data, ignore_errors=True)
    pair_dir = data / pair_name(src, tgt)
    pair_dir.mkdir(parents=True)
    for split in ("train", "dev", "test"):
        for lang in (src, tgt):
            shutil.copyfile(bpe_dir / f"{split}.{lang}", pair_dir / f"{split}.{lang}")
    fast = work / "fast"
    fast.write_text(FAST_STAND_IN)
    fast.chmod(0o755)
    log_path = work / "preprocessing.log"
    with open(log_path, "w") as log:
        rc = subprocess.run(
            [python, "preprocessing.py", "--data-dir", data, "--num-ops", "0"]
            + ["--pairs", pair_name(src, tgt), "--fast", fast],
            cwd=authors_dir,
            stdout=log,
            stderr=subprocess.STDOUT,
        ).returncode
    if rc != 0:
        tail = " | ".join(log_path.read_text(errors="replace").strip().splitlines()[-3:])
        raise RuntimeError(f"{authors_dir}/preprocessing.py exited {rc} ({log_path}): {tail}")
    return data


def train_cmd(
    python: str,
    authors_dir: Path,
    data: Path,
    dump_dir: Path,
    pair: str,
    dims: dict,
    updates: int,
    log_interval: int,
    threads: int,
    qk_length: float,
) -> list:
    """The command of one bounded training run of the authors' code (``train`` below).

    ``dims``: ``layers``, ``dim``, ``ffn``, ``heads``, ``dropout`` of one of our sizes
    (:data:`qknorm_model_tools.bf16_timing.SIZES`); ``qk_length``: QKNorm's L (their
    ``seq_len_threshold``, which sets only g0 = log2(L^2 - L)).
    """
    return [
        python, "-m", "benchmarks.authors_code", "train",
        "--authors-dir", authors_dir, "--data-dir", data, "--dump-dir", dump_dir,
        "--pair", pair, "--updates", str(updates), "--log-interval", str(log_interval),
        "--threads", str(threads), "--qk-length", f"{qk_length:g}",
        "--layers", str(dims["layers"]), "--dim", str(dims["dim"]), "--ffn", str(dims["ffn"]),
        "--heads", str(dims["heads"]), "--dropout", str(dims["dropout"]),
    ]  # fmt: skip


def interval_lines(ends: list, words: list, start: float, log_interval: int) -> list[str]:
    """fairseq-style ``train_inner`` lines for updates timed as ``ends`` / ``words``.

    Args:
        ends: wall-clock end of each update (seconds, one clock).
        words: real target tokens of each update.
        start: wall-clock start of the first update.
        log_interval: updates per line; a last incomplete interval gets no line.

    Returns:
        One line per interval: ``wps`` = its tokens / (its last end - the previous interval's
        last end, or ``start``), ``wpb`` = its tokens per update, ``num_updates``.
    """
    return [
        interval_line(ends, words, start, log_interval, k)
        for k in range(log_interval, len(ends) + 1, log_interval)
    ]


def interval_line(ends: list, words: list, start: float, log_interval: int, k: int) -> str:
    """The line of the interval that ends with update ``k`` (a multiple of ``log_interval``).

    Arguments as :func:`interval_lines`; only updates ``k - log_interval`` to ``k`` are read,
    so a run prints each line as its interval ends at constant cost.
    """
    t0 = ends[k - log_interval - 1] if k > log_interval else start
    w = sum(words[k - log_interval : k])
    return (
        f"train_inner | epoch 001: {k:6d} | wps={w / (ends[k - 1] - t0):.1f}, "
        f"wpb={w / log_interval:.1f}, num_updates={k}"
    )


class _Stop(Exception):
    """Raised after the last timed update, to leave the authors' training loop."""


def train(a) -> int:
    """Run the authors' ``main.py`` for ``a.updates`` updates; print the ``train_inner`` lines."""
    import torch

    torch.set_num_threads(a.threads)
    sys.path.insert(0, str(a.authors_dir))
    os.chdir(a.authors_dir)  # their main.py looks for ./scripts/multi-bleu.perl
    import configurations
    import controller

    def config():
        cfg = configurations.gl2en()  # the authors' gl-en settings, at our size's dimensions
        cfg.update(
            num_enc_layers=a.layers, num_dec_layers=a.layers, embed_dim=a.dim, ff_dim=a.ffn,
            num_heads=a.heads, dropout=a.dropout, att_dropout=a.dropout, ff_dropout=a.dropout,
            seq_len_threshold=a.qk_length, epoch_size=a.updates + 1, max_epochs=1,
        )  # fmt: skip
        return cfg

    configurations.benchmark = config
    run_log = controller.Controller.run_log
    ends, words, start = [], [], []

    def timed_run_log(self, batch_num, epoch_num):
        if not start:
            start.append(time.perf_counter())
        before = self.stats["words"]
        out = run_log(self, batch_num, epoch_num)
        ends.append(time.perf_counter())
        words.append(self.stats["words"] - before)
        if len(ends) % a.log_interval == 0:
            print(interval_line(ends, words, start[0], a.log_interval, len(ends)), flush=True)
        if len(ends) >= a.updates:
            raise _Stop
        return out

    controller.Controller.run_log = timed_run_log
    sys.argv = ["main.py", "--mode", "train", "--data-dir", str(a.data_dir), "--dump-dir",
                str(a.dump_dir), "--pairs", a.pair, "--config", "benchmark",
                "--log-freq", str(10**9)]  # fmt: skip
    try:
        runpy.run_path("main.py", run_name="__main__")
    except _Stop:
        pass
    print(f"authors' code: {len(ends)} updates, {sum(words):.0f} target tokens", flush=True)
    return 0 if len(ends) == a.updates else 1


def main(argv=None) -> int:
    """``train``: one bounded run of the authors' code (:func:`train_cmd` writes the command)."""
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="run the authors' trainer for --updates updates")
    t.add_argument("--authors-dir", type=Path, required=True)
    t.add_argument("--data-dir", type=Path, required=True)
    t.add_argument("--dump-dir", type=Path, required=True)
    t.add_argument("--pair", required=True, help="the authors' pair name, e.g. gl2en")
    t.add_argument("--updates", type=int, required=True)
    t.add_argument("--log-interval", type=int, required=True)
    t.add_argument("--threads", type=int, required=True)
    t.add_argument("--qk-length", type=float, required=True)
    for name, type_ in (("layers", int), ("dim", int), ("ffn", int), ("heads", int)):
        t.add_argument(f"--{name}", type=type_, required=True)
    t.add_argument("--dropout", type=float, required=True)
    a = p.parse_args(argv)
    for opt, path in (("--authors-dir", a.authors_dir), ("--data-dir", a.data_dir)):
        if not path.is_dir():
            die_data(f"{opt} {path}: no such directory")
    a.authors_dir, a.data_dir, a.dump_dir = (
        a.authors_dir.resolve(), a.data_dir.resolve(), a.dump_dir.resolve())  # fmt: skip
    a.qk_length = int(a.qk_length) if a.qk_length == int(a.qk_length) else a.qk_length
    return train(a)


if __name__ == "__main__":
    sys.exit(main())
