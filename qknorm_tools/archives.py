"""Downloaded archives: sha256 / download verification and safe tar extraction.

What ``python -m qknorm_tools.corpus`` (:mod:`.corpus`) runs for

sha256
    Print a file's sha256, or verify it (and its size) against an expected value or a
    ``SHA256SUMS`` file (:func:`verify_file`, :func:`read_sums`); detects an HTML page served
    in place of an archive (:func:`looks_like_html`).
untar
    Safely extract a (compressed) tar archive (:func:`safe_extract`): no absolute paths, no
    ``..``, no links or device files. Extracts into a temporary sibling directory that is
    renamed into place only once complete, so a partial extraction is never taken for a
    complete one.

Problems are raised as :class:`.corpus_check.CorpusError`.
"""

from __future__ import annotations

import fnmatch
import os
import shutil
import tarfile
import tempfile
import zlib
from collections.abc import Iterator, Sequence
from pathlib import Path

from .corpus_check import CorpusError, info
from .textio import sha256_file

#: Name of the marker file ``untar`` writes inside a completed extraction.
EXTRACTED_MARKER = ".qknorm_extracted"

# --------------------------------------------------------------------------------------------
# sha256 / download verification


def looks_like_html(path: str) -> bool:
    """True if the file starts like an HTML page (what dead download links serve)."""
    with open(path, "rb") as f:
        head = f.read(4096)
    if head.startswith(b"\x1f\x8b"):  # gzip magic: an archive, whatever follows
        return False
    text = head.lstrip(b"\xef\xbb\xbf \t\r\n").lower()
    if text.startswith((b"<!doctype html", b"<html", b"<head", b"<body")):
        return True
    return text.startswith((b"<?xml", b"<!--")) and b"<html" in text


def read_sums(sums_path: str) -> dict:
    """Parse a ``sha256sum``-format file into ``{relative_path: hexdigest}``."""
    out = {}
    with open(sums_path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            parts = line.split(None, 1)
            if len(parts) != 2 or len(parts[0]) != 64:
                raise CorpusError(sums_path, f"not a sha256sum line: {line[:60]!r}", lineno)
            name = parts[1].lstrip("*").strip()
            if name.startswith("./"):
                name = name[2:]
            out[name] = parts[0].lower()
    return out


def _html_error(path: str, name: str, expected_size: int | None) -> CorpusError:
    size = os.path.getsize(path)
    exp = f" instead of the expected {expected_size}-byte file" if expected_size else ""
    return CorpusError(
        name,
        f"got an HTML page ({size} bytes){exp}: the download link probably "
        "serves an error page or has moved; fetch the file from a mirror "
        "(e.g. a web-archive copy) and verify it",
    )


def verify_file(
    path: str,
    expected_sha256: str | None = None,
    expected_size: int | None = None,
    name: str | None = None,
) -> str:
    """Verify size and sha256 of ``path``; return its sha256 or raise :class:`CorpusError`.

    On a mismatch, an HTML page in place of the expected file (dead download links serve one)
    is reported as such instead of as a plain size/checksum mismatch.
    """
    name = name or path
    if not os.path.isfile(path):
        raise CorpusError(name, "no such file")
    size = os.path.getsize(path)
    if expected_size is not None and size != int(expected_size):
        if looks_like_html(path):
            raise _html_error(path, name, expected_size)
        raise CorpusError(
            name, f"size mismatch: expected {int(expected_size)} bytes, got {size} bytes"
        )
    got = sha256_file(path)
    if expected_sha256 is not None and got != expected_sha256.lower():
        if looks_like_html(path):
            raise _html_error(path, name, expected_size)
        raise CorpusError(name, f"sha256 mismatch: expected {expected_sha256.lower()}, got {got}")
    return got


# --------------------------------------------------------------------------------------------
# safe tar extraction


def _member_problem(m: tarfile.TarInfo) -> str | None:
    name = m.name
    if not name or "\x00" in name:
        return "empty or NUL-containing member name"
    if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        return "absolute path"
    parts = [p for p in name.replace("\\", "/").split("/") if p not in ("", ".")]
    if ".." in parts:
        return "path traversal ('..' component)"
    if m.issym() or m.islnk():
        return f"link member (-> {m.linkname!r}); links are not allowed"
    if not (m.isfile() or m.isdir()):
        return "special file (device, fifo or other); not allowed"
    return None


def _iter_safe_members(tf: tarfile.TarFile, archive: str) -> Iterator[tarfile.TarInfo]:
    for m in tf:
        problem = _member_problem(m)
        if problem:
            raise CorpusError(archive, f"unsafe archive member {m.name!r}: {problem}")
        yield m


_TAR_READ_ERRORS = (tarfile.TarError, EOFError, zlib.error, OSError)


def safe_extract(archive: str, dest: str, include: Sequence[str] = ()) -> str:
    """Extract ``archive`` into ``dest`` safely and atomically; return ``dest``.

    Members are checked one by one (absolute paths, ``..``, links and special files are
    refused, rejecting the whole archive). Extraction goes to a temporary directory next to
    ``dest`` which is renamed to ``dest`` only after the whole archive was read without error,
    together with a marker file; a leftover temporary directory is never used. ``include``:
    optional glob patterns (``fnmatch`` on member names) restricting what is extracted.
    If ``dest`` already is a completed extraction (marker present) nothing is done.
    """
    dest_p = Path(dest)
    if (dest_p / EXTRACTED_MARKER).is_file():
        info(f"skip: {dest} already extracted from {os.path.basename(archive)}")
        return dest
    if dest_p.exists():
        raise CorpusError(
            dest,
            "exists but is not a completed extraction (no "
            f"{EXTRACTED_MARKER} marker); remove it and retry",
        )
    if not os.path.isfile(archive):
        raise CorpusError(archive, "no such file")
    dest_p.parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{dest_p.name}.tmp.", dir=str(dest_p.parent))
    try:
        n = 0
        try:
            with tarfile.open(archive, mode="r:*") as tf:
                for m in _iter_safe_members(tf, archive):
                    if (
                        include
                        and not m.isdir()
                        and not any(fnmatch.fnmatch(m.name, p) for p in include)
                    ):
                        continue
                    if hasattr(tarfile, "data_filter"):
                        tf.extract(m, tmp, filter="data")
                    else:  # pragma: no cover - Python < 3.11.4; members already vetted above
                        tf.extract(m, tmp)
                    n += 1
        except CorpusError:
            raise
        except _TAR_READ_ERRORS as e:
            if looks_like_html(archive):
                raise _html_error(archive, archive, None) from None
            raise CorpusError(
                archive, f"corrupt or truncated archive ({type(e).__name__}: {e})"
            ) from None
        if n == 0:
            raise CorpusError(archive, "archive is empty (or nothing matched --include)")
        with open(os.path.join(tmp, EXTRACTED_MARKER), "w", encoding="utf-8") as f:
            f.write(f"{os.path.basename(archive)}\t{os.path.getsize(archive)}\t{n} members\n")
        os.rename(tmp, dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    info(f"extracted {n} members of {archive} into {dest}")
    return dest
