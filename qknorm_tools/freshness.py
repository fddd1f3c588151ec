"""What made an output, and whether it may be reused: one rule for every pipeline step.

An output (BPE'd data, binarized data, a decode's hypotheses and scores) is reused only when
everything that made it is unchanged; otherwise it is made again, and the log names each
setting that changed (issue 21, item 3). The rule, in one place (:func:`changes`): the stored
*made-by record* of the output, a flat ``{setting: value}`` mapping of strings, equals the
record of what would make it now, key for key. A setting that is new or gone counts as a
change; an output without a record is never reused.

Records are stored next to their output:

* ``STEM.made_by.json`` next to ``STEM.hyp`` / ``STEM.score.json`` (``scripts/evaluate.sh``):
  ``{"made_by": {...}}``, written last, after the score;
* a data step's ``.settings`` (``key=value`` lines, ``scripts/lib.sh:qk_write_done``;
  ``scripts/prepare_data.sh`` for a source given explicitly, ``scripts/bpe.sh``,
  ``scripts/binarize.sh``; read by :mod:`.provenance` as well).

What a decode is made by (:func:`decode_record`): the checkpoint file (path, size and
modification time: :func:`file_identity`), the checkpoint choice (best, last, avgN), the split,
every setting of the fairseq-generate command that changes its output (beam, length penalty,
length cap ``--max-len-a``/``--max-len-b`` with fairseq's defaults filled in, batch size, seed,
...: :func:`generate_settings`), the BPE removal, the data identity, and the scorer (sacreBLEU
and sacremoses versions, and the sacreBLEU signatures of the metrics: :func:`scorer_settings`).

Command line (for the scripts; no torch, no fairseq)::

    python -m qknorm_tools.freshness check RECORD [SETTINGS]   # exit 0: fresh; 1: stale, the
                                                               # changed settings on stdout;
                                                               # 3: unreadable record or file
    python -m qknorm_tools.freshness write RECORD [SETTINGS]   # store the record (2: usage)
    SETTINGS: --set KEY=VALUE ... --file KEY=PATH ... --settings-lines TEXT
              --scorer SRC TGT --generate FAIRSEQ_GENERATE_ARGS... (last)
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path

from .exits import NO, OK, fail
from .textio import OutputError, output_error_message, write_text_atomic

#: fairseq-generate arguments that do not change what it writes (where the plugin is, how many
#: data-loader workers read the data)
GENERATE_IGNORED = ("--user-dir", "--num-workers")
#: fairseq's defaults of the decoding settings that are always recorded (fairseq/dataclass/
#: configs.py GenerationConfig: beam 5, lenpen 1, max_len_a 0, max_len_b 200), so that a
#: profile that writes a default out, or stops writing it, decodes nothing again
GENERATE_DEFAULTS = {"beam": "5", "lenpen": "1", "max-len-a": "0", "max-len-b": "200"}
#: shown for a setting absent from one of two records
ABSENT = "(none)"


def file_identity(path) -> str:
    """The identity of a (large) file for a made-by record: path, size, modification time.

    E.g. ``/w/runs/.../checkpoint_best.pt size=1234 mtime_ns=1700000000000000000`` (absolute
    path, bytes, nanoseconds). Cheaper than a checksum of a checkpoint; a checkpoint that is
    written again (fairseq saves a new best, avgN is averaged again) changes it.

    Raises:
        FileNotFoundError: ``path`` does not exist.
    """
    p = Path(path).absolute()
    st = p.stat()
    return f"{p} size={st.st_size} mtime_ns={st.st_mtime_ns}"


def generate_settings(argv: Sequence[str]) -> dict[str, str]:
    """The settings of a fairseq-generate command line that determine its output.

    Args:
        argv: the arguments after the program name: the data dir (positional), then
            ``--flag value`` / ``--switch`` tokens as ``scripts/evaluate.sh`` builds them.

    Returns:
        ``{"data_dir": DIR, "beam": "4", "lenpen": "1.0", "max-len-a": "1.5", ...}``: every flag
        without its dashes (a switch: ``"true"``), except :data:`GENERATE_IGNORED`, with the
        defaults of :data:`GENERATE_DEFAULTS` where a flag is absent.

    Raises:
        ValueError: a token that is neither a flag, a flag's value nor the first positional.
    """
    out: dict[str, str] = dict(GENERATE_DEFAULTS)
    i = 0
    argv = list(argv)
    if argv and not argv[0].startswith("-"):
        out["data_dir"] = argv[0]
        i = 1
    while i < len(argv):
        tok = argv[i]
        if not tok.startswith("--"):
            raise ValueError(f"fairseq-generate argument {tok!r} is not a --flag or its value")
        name, eq, value = tok.partition("=")
        if eq:
            i += 1
        elif i + 1 < len(argv) and not argv[i + 1].startswith("--"):
            value = argv[i + 1]
            i += 2
        else:
            value = "true"
            i += 1
        if name not in GENERATE_IGNORED:
            out[name[2:]] = value
    return out


def scorer_settings(src_lang: str | None, tgt_lang: str | None) -> dict[str, str]:
    """What the scores of :func:`qknorm_tools.scoring.score_lines` are made by.

    The sacreBLEU and sacremoses versions and the metrics' sacreBLEU signatures (Post 2018, "A
    Call for Clarity in Reporting BLEU Scores", Sec. 4).

    Args:
        src_lang: the source language (the signatures' ``lang:``), or None.
        tgt_lang: the target language (the detokenizer's rules, ``lang:``).

    Returns:
        ``{"scorer": "sacrebleu 2.6.0, sacremoses 0.2.0", "scorer_signature": "bleu_tok: ...
        | bleu: ... | chrf: ..."}``.
    """
    from importlib.metadata import version

    from .scoring import scorer_signatures

    sigs = scorer_signatures(src_lang, tgt_lang)
    return {
        "scorer": f"sacrebleu {version('sacrebleu')}, sacremoses {version('sacremoses')}",
        "scorer_signature": " | ".join(f"{k}: {v}" for k, v in sigs.items()),
    }


def decode_record(
    checkpoint,
    generate_argv: Sequence[str],
    extra: Mapping[str, str] | None = None,
    scorer: tuple[str | None, str | None] | None = None,
) -> dict[str, str]:
    """The made-by record of a decode (what ``scripts/evaluate.sh`` records, as a function).

    :func:`file_identity` of ``checkpoint`` as ``checkpoint``, :func:`generate_settings` of
    ``generate_argv`` (its ``path`` dropped: the checkpoint's identity holds it), ``extra``
    (checkpoint choice, split, BPE removal, data identity) and :func:`scorer_settings` of
    ``scorer = (src, tgt)``.

    Raises:
        FileNotFoundError: no ``checkpoint``. ValueError: see :func:`generate_settings`.
    """
    rec = {"checkpoint": file_identity(checkpoint)}
    gen = generate_settings(generate_argv)
    gen.pop("path", None)
    rec.update(gen)
    rec.update(extra or {})
    if scorer is not None:
        rec.update(scorer_settings(*scorer))
    return rec


def changes(stored: Mapping[str, str] | None, current: Mapping[str, str]) -> list[str]:
    """The rule: which settings of ``current`` differ from the ``stored`` record.

    Args:
        stored: the record the output was made with (``None``: the output has none).
        current: the record of what would make it now.

    Returns:
        One ``"KEY OLD -> NEW"`` per changed, new (OLD ``(none)``) or gone (NEW ``(none)``)
        setting, in ``current``'s order then ``stored``'s; ``["no record of what made it"]``
        without a stored record; ``[]``: the output may be reused.
    """
    if stored is None:
        return ["no record of what made it"]
    out = []
    for key in [*current, *(k for k in stored if k not in current)]:
        old, new = stored.get(key, ABSENT), current.get(key, ABSENT)
        if old != new:
            out.append(f"{key} {old} -> {new}")
    return out


def parse_lines(text: str, what: str = "settings") -> dict[str, str]:
    """``key=value`` lines (a data step's ``.settings``) -> dict; blank lines skipped.

    Raises:
        ValueError: a line without ``=`` (naming ``what`` and the line number), a key twice.
    """
    out: dict[str, str] = {}
    for n, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        key, eq, value = line.partition("=")
        if not eq or not key:
            raise ValueError(f"{what}:{n}: expected key=value, got {line!r}")
        if key in out:
            raise ValueError(f"{what}:{n}: {key} given twice")
        out[key] = value
    return out


def read_record(path) -> dict[str, str] | None:
    """The made-by record stored at ``path``, ``None`` if there is no such file.

    A ``*.json`` file's ``made_by`` object; any other file is read as ``key=value`` lines.

    Raises:
        ValueError: a file that is not a record (naming it).
    """
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    if p.suffix != ".json":
        return parse_lines(text, str(p))
    try:
        rec = json.loads(text)["made_by"]
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{p} is not a made-by record ({e})") from None
    if not isinstance(rec, dict) or not all(isinstance(v, str) for v in rec.values()):
        raise ValueError(f"{p} is not a made-by record (made_by must map names to strings)")
    return rec


def write_record(path, record: Mapping[str, str]) -> None:
    """Store ``record`` at ``path`` (JSON ``{"made_by": ...}``), atomically.

    Through :func:`~.textio.write_text_atomic`: an interrupted write leaves the old record or
    none.

    Raises:
        OutputError: it cannot be written (the record's own path named).
    """
    write_text_atomic(path, json.dumps({"made_by": dict(record)}, indent=1) + "\n")


def current_settings(a: argparse.Namespace) -> dict[str, str]:
    """The settings a ``check`` / ``write`` command line names (its parsed arguments).

    Raises:
        OSError: a ``--file`` that cannot be read.
        ValueError: a malformed ``--set`` or ``--settings-lines``.
    """
    rec: dict[str, str] = {}
    if a.settings_lines is not None:
        rec.update(parse_lines(a.settings_lines, "--settings-lines"))
    for item in a.file or []:
        key, _, path = item.partition("=")
        rec[key] = file_identity(path)
    for item in a.set or []:
        key, eq, value = item.partition("=")
        if not eq or not key:
            raise ValueError(f"--set expects KEY=VALUE, got {item!r}")
        rec[key] = value
    if a.generate is not None:
        gen = generate_settings(a.generate)
        gen.pop("path", None)  # a --file checkpoint=PATH holds the checkpoint's identity
        rec.update(gen)
    if a.scorer:
        rec.update(scorer_settings(*a.scorer))
    return rec


def build_parser() -> argparse.ArgumentParser:
    """The command line (``check`` / ``write``, see the module docstring)."""
    ap = argparse.ArgumentParser(
        prog="python -m qknorm_tools.freshness",
        description="Made-by records: may an output be reused (check) / store one (write).",
    )
    sub = ap.add_subparsers(dest="cmd", required=True)
    for name, help_ in (
        ("check", "exit 0 if RECORD equals the current settings, else 1 and the changes"),
        ("write", "store the current settings as RECORD (JSON)"),
    ):
        s = sub.add_parser(name, help=help_)
        s.add_argument("record", help="the stored record (*.json, or key=value lines)")
        s.add_argument("--set", action="append", metavar="KEY=VALUE", help="a setting")
        s.add_argument("--file", action="append", metavar="KEY=PATH",
                       help="a file's identity (path, size, mtime) as setting KEY")  # fmt: skip
        s.add_argument("--settings-lines", metavar="TEXT", help="key=value lines (a .settings)")
        s.add_argument("--scorer", nargs=2, metavar=("SRC", "TGT"),
                       help="the scorer's versions and signatures for SRC-TGT")  # fmt: skip
        s.add_argument("--generate", nargs=argparse.REMAINDER,
                       help="(last) fairseq-generate's arguments, no program name")  # fmt: skip
    return ap


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m qknorm_tools.freshness``.

    Exit status (:mod:`~.exits`): 0 fresh (check) or written (write), 3 stale (check: the
    answer no; the changes on stdout), 1 an unreadable record or file, or a record that cannot
    be written (write), 2 usage error.
    """
    a = build_parser().parse_args(argv)
    try:
        current = current_settings(a)
        if a.cmd == "write":
            write_record(a.record, current)
            return OK
        changed = changes(read_record(a.record), current)
    except OutputError as e:
        return fail(output_error_message(e))
    except (OSError, ValueError) as e:
        return fail(e)
    if changed:
        print("; ".join(changed))
        return NO
    return OK


if __name__ == "__main__":
    sys.exit(main())
