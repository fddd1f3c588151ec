"""Result tables: the aggregate (Markdown, LaTeX booktabs, CSV, JSON) and the per-run table.

Numbers are BLEU / chrF points; the per-run table is what ``make demo`` reports.
"""

from __future__ import annotations

import csv
import io
import json
from collections.abc import Mapping, Sequence
from pathlib import Path

from .provenance import short_id
from .records import RunRecord
from .scoring import SCORE_FIELDS
from .significance import format_p
from .textio import ResultsError, write_text_atomic

__all__ = [
    "format_mean_sd",
    "runs_table",
    "write_aggregate_tables",
    "write_markdown_and_json",
    "write_runs_table",
]


def lost_values(old, new, path: str = "") -> list[str]:
    """The JSON paths where ``old`` holds a value (not null, not empty) and ``new`` none.

    Dicts are compared key by key, lists of the same length item by item; a list that was
    non-empty and is empty now is lost.
    """
    if isinstance(old, dict):
        new = new if isinstance(new, dict) else {}
        return [p for k, v in old.items() for p in lost_values(v, new.get(k), f"{path}.{k}")]
    if isinstance(old, list):
        if old and not new:
            return [path]
        if isinstance(new, list) and len(new) == len(old):
            return [
                p
                for i, (o, n) in enumerate(zip(old, new))
                for p in lost_values(o, n, f"{path}[{i}]")
            ]
        return []
    return [path] if old is not None and new is None else []


def refuse_lost_values(path: Path, obj) -> None:
    """Refuse to write ``obj`` over the JSON report ``path`` if it would lose values it holds.

    A report never degrades what is there (a committed report rebuilt without the runs or the
    reference it was made from): nothing is written, and the message names the first paths.

    Raises:
        ResultsError: naming ``path`` and what would be lost.
    """
    try:
        old = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # none, or unreadable: nothing to keep
    lost = lost_values(old, json.loads(json.dumps(obj, default=str)))
    if lost:
        more = f" and {len(lost) - 3} more" if len(lost) > 3 else ""
        raise ResultsError(
            f"{path}: this report would lose values the existing one holds "
            f"({', '.join(p.lstrip('.') for p in lost[:3])}{more}): the runs, records or "
            f"reference it was made from are missing here; nothing was written (remove {path} "
            "to write the smaller report)"
        )


def write_markdown_and_json(out_dir, stem: str, markdown: str, obj) -> dict[str, str]:
    """Write ``<stem>.md`` (``markdown``) and ``<stem>.json`` (``obj``) in ``out_dir``.

    Refused (:func:`refuse_lost_values`) if an existing ``<stem>.json`` holds values ``obj``
    lacks.

    Returns:
        ``{"md": path, "json": path}``.
    """
    out = Path(out_dir)
    md, js = out / f"{stem}.md", out / f"{stem}.json"
    refuse_lost_values(js, obj)
    write_text_atomic(md, markdown)
    write_text_atomic(js, json.dumps(obj, indent=2, ensure_ascii=False) + "\n")
    return {"md": str(md), "json": str(js)}


def format_mean_sd(entry: Mapping[str, object] | None) -> str:
    """``mean ± sd`` with 2 decimals (``± n/a`` for one seed, ``-`` for none)."""
    if not entry:
        return "-"
    sd = entry.get("sd")
    return f"{entry['mean']:.2f} ± {sd:.2f}" if sd is not None else f"{entry['mean']:.2f} ± n/a"


def _latex_escape(s: str) -> str:
    repl = {
        "\\": r"\textbackslash{}",
        "&": r"\&",
        "%": r"\%",
        "$": r"\$",
        "#": r"\#",
        "_": r"\_",
        "{": r"\{",
        "}": r"\}",
        "~": r"\textasciitilde{}",
        "^": r"\textasciicircum{}",
    }
    return "".join(repl.get(c, c) for c in s)


def _significant(concat: Mapping[str, object] | None, alpha: float = 0.05) -> bool:
    return bool(concat) and concat.get("p_ar") is not None and concat["p_ar"] < alpha


def _md_row(cells: Sequence[str]) -> str:
    return "| " + " | ".join(cells) + " |"


def _markdown_summary(agg: Mapping[str, object]) -> list[str]:
    metric, baseline, pairs = agg["metric"], agg["baseline"], agg["pairs"]
    head = ["System", *pairs, f"Avg Δ vs {baseline}"]
    md = [
        f"# Results ({metric}, BLEU points)",
        "",
        _md_row(head),
        "|" + "|".join(["---"] + ["---:"] * (len(head) - 1)) + "|",
    ]
    for s, avg in agg["avg_delta"].items():
        row = [s]
        for p in pairs.values():
            e = p["systems"].get(s)
            cell = format_mean_sd(e.get(metric)) if e else "-"
            if e and _significant(e.get("concat")) and s != baseline:
                cell += " †"
            row.append(cell)
        d = avg.get(metric)
        row.append("—" if s == baseline else (f"{d:+.2f}" if d is not None else "-"))
        md.append(_md_row(row))
    md += [
        "",
        f"Cells: mean ± sample sd (ddof=1) of {metric} over seeds (n/a: single seed). "
        f"Avg Δ: mean over pairs of (system mean − {baseline} mean).",
    ]
    if agg["significance"]["enabled"]:
        md.append(
            f"† p < 0.05, paired approximate randomization ({agg['significance']['n_ar']} trials, "
            f"sacreBLEU) against {baseline} on the concatenated outputs over seeds (hypotheses of "
            f"each seed concatenated in seed order, reference repeated once per seed)."
        )
    return md


def _details(agg: Mapping[str, object]) -> tuple[list[str], list[dict]]:
    """The Markdown details table and the CSV rows (one per pair and system)."""
    metric, baseline = agg["metric"], agg["baseline"]
    head = [
        "Pair",
        "System",
        "Seeds",
        "BLEU (tok)",
        "BLEU (detok)",
        "chrF",
        f"Δ {metric}",
        "concat score",
        "95% CI (bootstrap)",
        "p (bootstrap)",
        "p (AR)",
        "Data",
    ]
    md = [
        "",
        "## Details",
        "",
        _md_row(head),
        "|" + "|".join(["---"] * 3 + ["---:"] * (len(head) - 3)) + "|",
    ]
    rows = []
    for pname, p in agg["pairs"].items():
        data_id = p.get("data_id")
        for s, e in p["systems"].items():
            c, base = e.get("concat") or {}, s == baseline
            ci = f"[{c['ci_low']:.2f}, {c['ci_high']:.2f}]" if c.get("ci_low") is not None else "-"
            md.append(
                _md_row(
                    [
                        pname,
                        s,
                        str(e["n_seeds"]),
                        format_mean_sd(e.get("bleu_tok")),
                        format_mean_sd(e.get("bleu")),
                        format_mean_sd(e.get("chrf")),
                        "—" if base else f"{e['delta'][metric]:+.2f}",
                        f"{c['score']:.2f}" if c.get("score") is not None else "-",
                        ci,
                        "-" if base else format_p(c.get("p_bs")),
                        "-" if base else format_p(c.get("p_ar")),
                        short_id(data_id),
                    ]
                )
            )
            row = {
                "pair": pname,
                "system": s,
                "n_seeds": e["n_seeds"],
                "seeds": " ".join(str(x) for x in e["seeds"]),
            }
            for f in SCORE_FIELDS:
                row[f"{f}_mean"] = e[f]["mean"] if f in e else ""
                row[f"{f}_sd"] = (e[f]["sd"] if e[f]["sd"] is not None else "") if f in e else ""
                row[f"delta_{f}"] = e["delta"].get(f, "")
            for k in ("score", "ci_low", "ci_high", "p_bs", "p_ar"):
                v = c.get(k)
                row[f"concat_{k}"] = "" if v is None or (base and k.startswith("p_")) else v
            row["data_id"] = data_id or ""
            rows.append(row)
    return md, rows


def _latex(agg: Mapping[str, object]) -> list[str]:
    metric, baseline, pairs = agg["metric"], agg["baseline"], agg["pairs"]
    tex = [
        r"% requires \usepackage{booktabs}",
        r"\begin{tabular}{" + "l" + "r" * (len(pairs) + 1) + "}",
        r"\toprule",
        " & ".join(["System"] + [_latex_escape(p) for p in pairs] + [r"Avg.\ $\Delta$"]) + r" \\",
        r"\midrule",
    ]
    for s, avg in agg["avg_delta"].items():
        row = [_latex_escape(s)]
        for p in pairs.values():
            e = p["systems"].get(s)
            if not e or metric not in e:
                row.append("--")
                continue
            m, sd = e[metric]["mean"], e[metric]["sd"]
            cell = f"{m:.2f}" + (f" $\\pm$ {sd:.2f}" if sd is not None else "")
            if s != baseline and _significant(e.get("concat")):
                cell += r"$^\dagger$"
            row.append(cell)
        d = avg.get(metric)
        row.append("--" if s == baseline or d is None else f"{d:+.2f}")
        tex.append(" & ".join(row) + r" \\")
    sig = (
        f"$\\dagger$: p < 0.05, paired approximate randomization vs {_latex_escape(baseline)} "
        f"on seed-concatenated outputs"
        if agg["significance"]["enabled"]
        else "no significance test"
    )
    return tex + [
        r"\bottomrule",
        r"\end{tabular}",
        f"% mean $\\pm$ sample sd (ddof=1) of {metric} over seeds; {sig}",
    ]


def write_aggregate_tables(
    agg: Mapping[str, object], out_dir, stem: str = "aggregate"
) -> dict[str, str]:
    """Write :func:`~.aggregate.aggregate_results` output as tables.

    Files: ``<stem>.md``, ``<stem>.tex`` (booktabs), ``<stem>.csv`` (one row per pair and
    system), ``<stem>_avg_delta.csv`` and ``<stem>.json``.

    Returns:
        Mapping kind -> path written.
    """
    out = Path(out_dir)
    paths = {
        k: out / f"{stem}{suffix}"
        for k, suffix in (
            ("md", ".md"),
            ("tex", ".tex"),
            ("csv", ".csv"),
            ("avg_delta_csv", "_avg_delta.csv"),
            ("json", ".json"),
        )
    }
    details, csv_rows = _details(agg)
    write_text_atomic(paths["md"], "\n".join(_markdown_summary(agg) + details) + "\n")
    write_text_atomic(paths["tex"], "\n".join(_latex(agg)) + "\n")
    f = io.StringIO(newline="")
    w = csv.DictWriter(f, fieldnames=list(csv_rows[0].keys()))
    w.writeheader()
    w.writerows(csv_rows)
    write_text_atomic(paths["csv"], f.getvalue())
    f = io.StringIO(newline="")
    w = csv.writer(f)
    w.writerow(["system", "n_pairs"] + [f"avg_delta_{x}" for x in SCORE_FIELDS])
    for s, d in agg["avg_delta"].items():
        w.writerow([s, d["n_pairs"]] + [d.get(x, "") for x in SCORE_FIELDS])
    write_text_atomic(paths["avg_delta_csv"], f.getvalue())
    write_text_atomic(paths["json"], json.dumps(agg, indent=2, ensure_ascii=False) + "\n")
    return {k: str(v) for k, v in paths.items()}


# ---------------------------------------------------------------------------
# per-run table


def format_optional(value, spec: str = ".2f", none: str = "–") -> str:
    """``value`` formatted with ``spec``, or ``none`` for a value a record does not have."""
    return none if value is None else format(value, spec)


_fmt = format_optional


def runs_table(records: Sequence[RunRecord], baseline: str | None = None) -> str:
    """Markdown table with one row per run (BLEU in points, training wall time in minutes).

    Columns: system, arch, training precision (``fp32`` where not recorded), seed, tokenized
    BLEU and its delta to the ``baseline`` system's run, detokenized sacreBLEU, chrF, QKNorm
    ``g0`` with the data's ``L``, the mean final ``g`` over attention modules, updates,
    training wall time and the data identity (first 12 hex digits); then the signatures.
    """
    base = next((r for r in records if r.name == baseline), None)
    lines = [
        "| system | arch | precision | seed | BLEU tok | Δ vs base | sacreBLEU detok | chrF "
        "| g0 (L) | final mean g | updates | train wall (min) | data |",
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in records:
        delta = None if base is None or r is base else r.bleu_tok - base.bleu_tok
        g0 = "–"
        if r.qk_norm_g0 is not None:
            g0 = f"{r.qk_norm_g0:.2f}" + (f" ({r.qk_norm_length:g})" if r.qk_norm_length else "")
        wall = r.wall_seconds / 60 if r.wall_seconds is not None else None
        lines.append(
            f"| {r.name} | {r.arch} | {r.precision or 'fp32'} | {r.seed} | {_fmt(r.bleu_tok)} | "
            f"{_fmt(delta, '+.2f')} | "
            f"{_fmt(r.bleu)} | {_fmt(r.chrf)} | {g0} | {_fmt(r.qk_norm_g_final_mean)} | "
            f"{r.updates} | {_fmt(wall, '.1f')} | {short_id(r.data_id)} |"
        )
    lines += [
        "",
        "BLEU tok: tokenized BLEU on the Moses-tokenized reference (as multi-bleu.perl "
        "and the papers). sacreBLEU detok: detokenized, 13a. g0: the QKNorm model's logged "
        "initial scale, L: the data's 97.5th-percentile BPE length. data: the identity of the "
        "data the run trained on and was scored with (raw corpus, BPE, binarized data; "
        "python -m qknorm_tools.provenance). precision: training precision (bf16: bf16 "
        "autocast on CPU, decoded in fp32). Signatures:",
    ]
    sigs = records[0].signatures if records else {}
    lines += [f"- `{sigs[k]}`" for k in SCORE_FIELDS if k in sigs]
    return "\n".join(lines) + "\n"


def write_runs_table(
    records: Sequence[RunRecord], out_dir, stem: str, baseline: str | None, work_dir=None
) -> dict[str, str]:
    """Write :func:`runs_table` as ``<stem>.md`` and the records as ``<stem>.json``.

    Returns:
        Mapping kind -> path written.
    """
    base = str(work_dir) if work_dir is not None else None
    doc = {"baseline": baseline, "runs": [r.to_json(base) for r in records]}
    return write_markdown_and_json(out_dir, stem, runs_table(records, baseline), doc)
