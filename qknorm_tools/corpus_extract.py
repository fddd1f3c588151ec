"""Extraction of a language pair from the TED corpora, and what a data directory holds.

What ``python -m qknorm_tools.corpus`` (:mod:`.corpus`) runs for

extract-tsv
    Extract a language pair from the TED all-talks TSVs (``all_talks_{train,dev,test}.tsv``;
    :func:`extract_tsv`).
extract-pair-folder
    Extract a language pair from a ``qi18naacl-dataset.tar.gz``-style pair folder
    (:func:`extract_pair_folder`).
diagnose
    Say what a data directory holds when it is not a usable copy of a pair (files one level
    too deep, ``train.src``/``train.tgt``, a dev split named ``valid.*``, ...;
    :func:`diagnose_pair_dir`).

Problems are raised as :class:`.corpus_check.CorpusError`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from .corpus_check import CorpusError, decode_line, misaligned_error

#: Missing-translation markers of the TED all-talks TSVs. ``__NULL__`` is the usual form;
#: ``_ _ NULL _ _`` is the same marker after Moses tokenization (both occur in the data;
#: TensorFlow Datasets' ted_multi loader drops both).
NULL_MARKERS = ("__NULL__", "_ _ NULL _ _")

#: Standard split names of the pipeline (TSV files are ``all_talks_<split>.tsv``).
SPLITS = ("train", "dev", "test")


# --------------------------------------------------------------------------------------------
# TED extraction


def is_missing(text: str | None) -> bool:
    """True for a missing translation: None, empty/blank or containing a NULL marker."""
    return text is None or not text.strip() or any(m in text for m in NULL_MARKERS)


def _add_pair(s: str, t: str, out_src: list[str], out_tgt: list[str], counts: dict) -> None:
    """Append a sentence pair with whitespace normalized, or count it as dropped.

    A pair is dropped whole when either side is missing (empty or a NULL marker, see
    :func:`is_missing`).
    """
    if is_missing(s) or is_missing(t):
        counts["dropped"] += 1
        counts["dropped_null"] += 1
        return
    out_src.append(" ".join(s.split()))
    out_tgt.append(" ".join(t.split()))
    counts["kept"] += 1


def _atomic_write_lines(path: Path, lines: Iterable[str]) -> None:
    tmp = path.with_name(f".{path.name}.tmp.{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8", newline="\n") as f:
            for line in lines:
                f.write(line)
                f.write("\n")
        os.replace(tmp, path)
    except BaseException:
        if tmp.exists():
            tmp.unlink()
        raise


def extract_tsv_split(tsv: str, src: str, tgt: str) -> tuple[list[str], list[str], dict]:
    """Read one ``all_talks_<split>.tsv``; return (src_lines, tgt_lines, counts).

    Format (Qi et al. 2018, ``ted_talks.tar.gz``): a header row naming the columns
    (``talk_name`` then one column per language code), then one sentence per row, fields
    separated by tabs, no quoting. A row is kept when both requested sides are present and
    not missing (see :func:`is_missing`); fields are stripped of surrounding whitespace.
    Rows with fewer fields than the header (truncated rows) count as missing.
    """
    with open(tsv, "rb") as f:
        header_raw = f.readline()
        if not header_raw:
            raise CorpusError(tsv, "empty file (no header row)", 1)
        header = decode_line(header_raw.rstrip(b"\r\n"), tsv, 1).split("\t")
        header = [h.strip() for h in header]
        for lang in (src, tgt):
            if lang not in header:
                raise CorpusError(
                    tsv, f"no column {lang!r} in header (columns: {' '.join(header)})", 1
                )
        i_src, i_tgt = header.index(src), header.index(tgt)
        out_src: list[str] = []
        out_tgt: list[str] = []
        counts = {"rows": 0, "kept": 0, "dropped": 0, "dropped_null": 0, "dropped_short_row": 0}
        for lineno, raw in enumerate(f, 2):
            line = decode_line(raw.rstrip(b"\r\n"), tsv, lineno)
            if not line.strip():
                continue  # blank separator line, not a row
            counts["rows"] += 1
            fields = line.split("\t")
            if len(fields) <= max(i_src, i_tgt):
                counts["dropped"] += 1
                counts["dropped_short_row"] += 1
                continue
            _add_pair(fields[i_src], fields[i_tgt], out_src, out_tgt, counts)
    return out_src, out_tgt, counts


def extract_tsv(tsv_dir: str, src: str, tgt: str, out: str, splits: Sequence[str] = SPLITS) -> dict:
    """Extract ``{split}.{src}``/``{split}.{tgt}`` into ``out`` from ``all_talks_{split}.tsv``.

    Whitespace inside a sentence is normalised to single spaces (the TSVs are already
    tokenized; this only matters for stray double spaces/tabs). Returns per-split counts.
    """
    out_p = Path(out)
    out_p.mkdir(parents=True, exist_ok=True)
    report = {}
    results = {}
    for split in splits:
        tsv = os.path.join(tsv_dir, f"all_talks_{split}.tsv")
        if not os.path.isfile(tsv):
            raise CorpusError(tsv, "no such file (expected the all-talks TSVs of ted_talks.tar.gz)")
        results[split] = extract_tsv_split(tsv, src, tgt)
    for split, (s_lines, t_lines, counts) in results.items():
        if not s_lines:
            raise CorpusError(
                os.path.join(tsv_dir, f"all_talks_{split}.tsv"),
                f"no {src}-{tgt} sentence pair left after dropping missing rows",
            )
        _atomic_write_lines(out_p / f"{split}.{src}", s_lines)
        _atomic_write_lines(out_p / f"{split}.{tgt}", t_lines)
        report[split] = counts
    return report


def _find_pair_folder(root: str, folder: str) -> str:
    hits = []
    for dirpath, dirnames, _ in os.walk(root):
        dirnames[:] = [d for d in dirnames if not d.startswith(".")]
        if os.path.basename(dirpath) == folder:
            hits.append(dirpath)
    if not hits:
        raise CorpusError(root, f"no folder named {folder!r} (expected e.g. datasets/{folder}/)")
    if len(hits) > 1:
        raise CorpusError(root, f"several folders named {folder!r}: {', '.join(sorted(hits))}")
    return hits[0]


def _pair_folder_files(folder: str, split: str, src: str, tgt: str) -> tuple[str, str]:
    """Locate the files of one split.

    The real qi18naacl-dataset layout is ``<lang>.<split>`` (``datasets/gl_to_en/gl.train``,
    as read by the TFDS/HuggingFace ``ted_hrlr`` loaders); ``<split>.<lang>`` (``train.gl``) is
    accepted too.
    """
    for pattern in ("{lang}.{split}", "{split}.{lang}"):
        s = os.path.join(folder, pattern.format(lang=src, split=split))
        t = os.path.join(folder, pattern.format(lang=tgt, split=split))
        if os.path.isfile(s) and os.path.isfile(t):
            return s, t
    raise CorpusError(
        folder,
        f"no {split} files for {src}/{tgt}: looked for {src}.{split} + {tgt}.{split} "
        f"and {split}.{src} + {split}.{tgt}",
    )


def _read_lines_checked(path: str) -> list[str]:
    lines = []
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            lines.append(decode_line(raw.rstrip(b"\r\n"), path, lineno))
    return lines


def extract_pair_folder(
    root: str, folder: str, src: str, tgt: str, out: str, splits: Sequence[str] = SPLITS
) -> dict:
    """Copy a pair folder (e.g. ``gl_to_en`` of ``qi18naacl-dataset.tar.gz``) to ``out``.

    Files are written as ``{split}.{lang}``, dropping pairs where either side is empty or a
    NULL marker.
    """
    pdir = _find_pair_folder(root, folder)
    out_p = Path(out)
    out_p.mkdir(parents=True, exist_ok=True)
    results = {}
    for split in splits:
        s_path, t_path = _pair_folder_files(pdir, split, src, tgt)
        s_lines, t_lines = _read_lines_checked(s_path), _read_lines_checked(t_path)
        if len(s_lines) != len(t_lines):
            raise misaligned_error(s_path, len(s_lines), t_path, len(t_lines))
        keep_s, keep_t = [], []
        counts = {"rows": len(s_lines), "kept": 0, "dropped": 0, "dropped_null": 0}
        for s, t in zip(s_lines, t_lines):
            _add_pair(s, t, keep_s, keep_t, counts)
        if not keep_s:
            raise CorpusError(s_path, "no sentence pair left after dropping empty/NULL lines")
        results[split] = (keep_s, keep_t, counts)
    report = {}
    for split, (keep_s, keep_t, counts) in results.items():
        _atomic_write_lines(out_p / f"{split}.{src}", keep_s)
        _atomic_write_lines(out_p / f"{split}.{tgt}", keep_t)
        report[split] = counts
    return report


# --------------------------------------------------------------------------------------------
# what a data directory holds (why it is not a usable copy of a pair)

#: Archives and TSVs ``prepare_data.sh`` reads from a data dir (besides pair folders).
KNOWN_INPUTS = (
    "qi18naacl-dataset.tar.gz",
    "ted_talks.tar.gz",
    "all_talks_train.tsv",
)
#: How deep below the data dir ``diagnose`` looks, and how many directories at most.
DIAGNOSE_DEPTH = 2
DIAGNOSE_MAX_DIRS = 500


def _walk_shallow(root: Path, depth: int, max_dirs: int) -> Iterator[tuple[Path, list[str]]]:
    """Yield (directory, sorted file names) for ``root`` and its subdirectories.

    Breadth first, down to ``depth`` levels, hidden entries skipped, at most ``max_dirs``
    directories.
    """
    queue = [(root, 0)]
    seen = 0
    while queue and seen < max_dirs:
        d, level = queue.pop(0)
        seen += 1
        try:
            entries = sorted(os.scandir(d), key=lambda e: e.name)
        except OSError:
            continue
        files = [e.name for e in entries if e.is_file() and not e.name.startswith(".")]
        yield d, files
        if level < depth:
            queue.extend(
                (Path(e.path), level + 1)
                for e in entries
                if e.is_dir() and not e.name.startswith(".")
            )


def diagnose_pair_dir(
    root: str, src: str, tgt: str, folder: str = "", splits: Sequence[str] = SPLITS
) -> list[str]:
    """Why ``root`` is not a usable copy of the pair ``src``-``tgt``: one hint per finding.

    ``prepare_data.sh`` reads ``root/folder/{split}.{lang}`` (or those files in ``root``
    itself) for every split in ``splits`` and both languages; it calls this when a data dir
    that was given holds neither them nor an archive, so that the error says what is there
    instead of downloading another corpus. Looks up to :data:`DIAGNOSE_DEPTH` levels down for:
    the six files one level too deep (a parent was given); some of them missing; a dev split
    named ``valid.*``; files with other side suffixes (``train.src``/``train.tgt``); the
    ``{lang}.{split}`` layout; archives or all-talks TSVs one level too deep; pair folders of
    other pairs.

    Args:
        root: the data directory.
        src: source language code (file suffix), e.g. ``gl``.
        tgt: target language code, e.g. ``en``.
        folder: the pair folder expected in ``root`` (e.g. ``ted-gl-en``), if any.
        splits: split names as file prefixes (IWSLT'15: ``train,tst2012,tst2013``).

    Returns:
        Hints such as ``"found train.src/train.tgt in DIR: name them train.gl/train.en, or
        write a pair config (CORPUS=local) naming them"``; ``[]`` if ``root`` is unreadable.
    """
    root_p = Path(root)
    langs = (src, tgt)
    wanted = [f"{sp}.{lang}" for sp in splits for lang in langs]
    hints: list[str] = []
    other_folders: list[str] = []
    first_entries: list[str] = []
    for d, files in _walk_shallow(root_p, DIAGNOSE_DEPTH, DIAGNOSE_MAX_DIRS):
        where = str(d)
        names = set(files)
        if d == root_p:
            try:
                first_entries = sorted(
                    e.name + ("/" if e.is_dir() else "")
                    for e in os.scandir(d)
                    if not e.name.startswith(".")
                )
            except OSError:
                return []
        elif d.parent == root_p and d.name.startswith(("ted-", "iwslt")) and d.name != folder:
            other_folders.append(d.name + "/")
        have = [w for w in wanted if w in names]
        if len(have) == len(wanted) and d != root_p:
            parent = f" (or its parent {d.parent})" if folder and d.name == folder else ""
            hints.append(
                f"{where} holds {{{','.join(splits)}}}.{{{src},{tgt}}}: pass --data-dir {d}{parent}"
            )
        elif (
            have
            and len(have) < len(wanted)
            # some of both sides (else it is another pair's folder), or the folder expected
            and (
                all(any(h.endswith(f".{lang}") for h in have) for lang in langs) or d.name == folder
            )
        ):
            missing = [w for w in wanted if w not in names]
            hints.append(f"{where} has {', '.join(have)} but lacks {', '.join(missing)}")
        valid = [f"valid.{lang}" for lang in langs if f"valid.{lang}" in names]
        if valid and "dev" in splits and not any(f"dev.{lang}" in names for lang in langs):
            hints.append(
                f"found {'/'.join(valid)} in {where}: the dev split must be named "
                f"dev.{src}/dev.{tgt} (rename or link them, or write a pair config with "
                "CORPUS=local naming your files)"
            )
        suffixes = sorted(
            {n.split(".", 1)[1] for n in names if n.startswith("train.")} - set(langs)
        )
        if suffixes and not have:
            shown = "/".join(f"train.{x}" for x in suffixes[:4])
            hints.append(
                f"found {shown} in {where}: this pair reads {src}->{tgt} from files named "
                f"{{{','.join(splits)}}}.{{{src},{tgt}}}; name them so, or write a pair config "
                '(configs/pairs/PAIR.toml with corpus = "local") naming your files'
            )
        swapped = [f"{lang}.train" for lang in langs if f"{lang}.train" in names]
        if swapped:
            hints.append(
                f"found {'/'.join(swapped)} in {where} (LANG.SPLIT names): name them "
                f"train.{src}/train.{tgt} (SPLIT.LANG), or write a pair config with CORPUS=local"
            )
        if d != root_p:
            for name in KNOWN_INPUTS:
                if name in names:
                    hints.append(f"{where} holds {name}: pass --data-dir {d}")
    if other_folders and folder:
        hints.append(f"{root} holds {', '.join(other_folders)} but no {folder}/")
    if not hints:
        shown = ", ".join(first_entries[:12]) + (" ..." if len(first_entries) > 12 else "")
        hints.append(f"{root} holds {shown}" if first_entries else f"{root} is empty")
    return hints
