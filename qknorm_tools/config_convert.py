"""Convert a bash pair config (``configs/pairs/NAME.sh``, the old format) into TOML.

The only place bash runs for configuration: the file is sourced in a clean ``bash`` and the
variables it sets are written as the TOML keys of :data:`qknorm_tools.config_schema.PAIR_KEYS`,
their comments kept next to them. Command line: ``python -m qknorm_tools.config convert FILE.sh``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
from pathlib import Path
from typing import Any

from qknorm_tools.config import _read
from qknorm_tools.config_schema import BASE_KEYS, PAIR_KEYS, ConfigError, _flatten

_SH_ALIASES = {var: key for key, _, var, _ in BASE_KEYS + PAIR_KEYS}


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(value)


def _typed(key: str, text: str) -> Any:
    """A bash string value as the TOML value of ``key`` (numbers for numeric keys)."""
    kind = {k: kind for k, _, _, kind in BASE_KEYS + PAIR_KEYS}[key]
    if kind in ("posint", "uint", "L") and re.fullmatch(r"[0-9]+", text):
        return int(text)
    if kind == "num" and re.fullmatch(r"[0-9]+(\.[0-9]*)?([eE][-+]?[0-9]+)?", text):
        return int(text) if text.isdigit() else float(text)
    if kind == "files":
        rows = [line.split() for line in text.splitlines() if line.strip()]
        if all(len(r) == 3 and r[1].isdigit() for r in rows):
            return [{"name": r[0], "bytes": int(r[1]), "sha256": r[2]} for r in rows]
    return text


def _sh_values(path: Path) -> dict:
    """{VAR: value} of what sourcing the bash file ``path`` sets (strings; arrays as lists)."""
    script = (
        'before="$(compgen -v)"; source "$1" >/dev/null || exit 1; '
        'for v in $(compgen -v); do grep -qx -- "$v" <<<"$before" && continue; '
        '[[ "$v" == before ]] && continue; declare -p "$v"; done'
    )
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": os.environ.get("HOME", "/")}
    p = subprocess.run(["bash", "--noprofile", "--norc", "-c", script, "convert", str(path)],
                       capture_output=True, text=True, env=env)  # fmt: skip
    if p.returncode != 0:
        raise ConfigError(f"{path}: bash could not source it:\n{p.stderr.strip()}")
    values = {}
    for line in p.stdout.splitlines():
        m = re.match(r"declare -(\S*) ([A-Za-z_][A-Za-z0-9_]*)(?:=(.*))?$", line)
        if not m:
            continue
        flags, var, rest = m.groups()
        if rest is None or var in ("PIPESTATUS", "_", "before", "v") or var.startswith("BASH"):
            continue
        if "a" in flags:  # declare -a X=([0]="a" [1]="b")
            items = shlex.split(rest[1:-1]) if rest.startswith("(") else []
            values[var] = [i.split("=", 1)[1] for i in items]
        else:
            values[var] = shlex.split(rest)[0] if rest not in ('""', "") else ""
    return values


def _sh_comments(path: Path) -> tuple:
    """The comments of a bash config.

    (header comment lines, {VAR: comment lines above it + its trailing comment}) of a bash
    config: comments are kept next to the key they describe.
    """
    header, above, found = [], [], {}
    seen_assignment = False
    for raw in path.read_text(encoding="utf-8").splitlines():
        line = raw.strip()
        if line.startswith("#"):
            if line.startswith("# shellcheck"):
                continue
            above.append(line)
            continue
        if not line:
            if not seen_assignment and above:
                header += above + [""]
                above = []
            elif above:
                above.append("")
            continue
        m = re.match(r"([A-Z_][A-Z0-9_]*)=", line)
        trailing = re.search(r"\s#\s?(.*)$", line)
        if m:
            seen_assignment = True
            notes = [a for a in above]
            while notes and notes[-1] == "":
                notes.pop()
            if trailing:
                notes.append("# " + trailing.group(1))
            found.setdefault(m.group(1), []).extend(notes)
            above = []
    return header, found


def convert(path: Path, out: Path | None = None) -> tuple:
    """Convert a bash pair config into TOML.

    Convert the bash pair config ``path`` (configs/pairs/NAME.sh) into TOML next to it.
    Returns (the TOML file written, [unknown variables, kept as comments]).

    Raises:
        ConfigError: ``path`` is missing or not a ``.sh`` file, the TOML file exists already
            (it is never overwritten), or bash cannot source ``path``.
    """
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{path}: no such file (expected a bash pair config FILE.sh)")
    if path.suffix != ".sh":
        raise ConfigError(f"{path}: expected a bash pair config FILE.sh")
    out = out or path.with_suffix(".toml")
    if out.exists():  # a TOML config the user may have edited since: never written over
        raise ConfigError(f"{out} exists: remove it first to convert {path.name} again")
    values = _sh_values(path)
    header, comments = _sh_comments(path)
    known_vals, unknown = {}, []
    for var, value in values.items():
        if var in _SH_ALIASES:
            if value == "" or value == []:
                continue  # empty = not set (the scripts treat both alike)
            known_vals[_SH_ALIASES[var]] = (var, _typed(_SH_ALIASES[var], value))
        else:
            unknown.append(var)
    lines = [c if c else "" for c in header]
    if lines and lines[-1] != "":
        lines.append("")
    lines[0:0] = [
        f"# {out.name}: converted from {path.name} by python -m qknorm_tools.config convert"
    ]
    tables: dict = {}
    for key, _, var, _ in BASE_KEYS + PAIR_KEYS:
        if key not in known_vals:
            continue
        table, _, leaf = key.rpartition(".")
        tables.setdefault(table, []).append((leaf, known_vals[key][1], comments.get(var, [])))
    for table in sorted(tables, key=lambda t: (t != "", t)):
        if table:
            lines.append(f"\n[{table}]")
        for leaf, value, notes in tables[table]:
            lines += notes
            lines.append(f"{leaf} = {_toml_value(value)}")
    if unknown:
        lines.append("")
        lines.append("# not pair settings (the converter does not know them; kept here, not read):")
        lines += [f"# {var}={values[var]!r}" for var in unknown]
    out.write_text("\n".join(lines).strip("\n") + "\n", encoding="utf-8")
    return out, unknown


def _compare_converted(sh_path: Path, toml_path: Path, name: str) -> list:
    """Differences between what the bash file set and what the TOML file gives (empty: none)."""
    sh = {k: v for k, v in _sh_values(sh_path).items() if k in _SH_ALIASES}
    flat = _flatten(str(toml_path), _read(toml_path), [k for k, *_ in BASE_KEYS + PAIR_KEYS])
    diffs = []
    for var, value in sh.items():
        key = _SH_ALIASES[var]
        want = value
        got = flat.get(key)
        if isinstance(got, list) and got and isinstance(got[0], dict):
            got = "\n".join(f"{f['name']} {f['bytes']} {f['sha256']}" for f in got)
        got = "" if got is None else str(got) if not isinstance(got, list) else got
        if str(want) != str(got) and not (want in ("", []) and got in ("", [])):
            diffs.append(f"-{var}={want!r}\n+{key} = {got!r}")
    return diffs


def convert_command(file: Path) -> int:
    """``python -m qknorm_tools.config convert FILE``: FILE.sh's settings as FILE.toml.

    Prints what to check by hand; returns the exit status (1: the two files differ).
    """
    out, unknown = convert(file)
    diffs = _compare_converted(file, out, file.stem)
    print(f"wrote {out}")
    if unknown:
        print(f"not pair settings, kept as comments at the end: {' '.join(unknown)}")
    if diffs:
        print("differences (check them by hand):\n" + "\n".join(diffs))
        return 1
    print(f"same settings as {file}; remove it once checked: rm {file}")
    return 0
