"""The report's HTML tables: runs, aggregate, comparison, ablation cells and effects, LR sweep."""

from __future__ import annotations

import html
import re
from collections.abc import Sequence

from .report_ablation import _effect_rows, _seed_label
from .report_sources import _finite, _records
from .report_style import _fmt, _slug

#: table cells right-aligned as numbers ("6.31 ± 0.32", "+0.16", "[5.86, 6.52]", "–")
_NUM = re.compile(r"^[-+\[]{0,2}[0-9.–][0-9.,eE+\-± \[\]–]*$")


def _table(head: Sequence[str], rows: Sequence[Sequence[object]], tid: str) -> str:
    th = "".join(f"<th>{html.escape(str(h))}</th>" for h in head)
    body = "".join(
        "<tr>"
        + "".join(
            f'<td class="num">{html.escape(str(c))}</td>'
            if _NUM.match(str(c))
            else f"<td>{html.escape(str(c))}</td>"
            for c in row
        )
        + "</tr>"
        for row in rows
    )
    return f'<table id="{tid}"><thead><tr>{th}</tr></thead><tbody>{body}</tbody></table>'


def _tables(sources) -> list[tuple[str, str]]:
    out, runs_table = [], None
    recs = _records(sources)
    if recs:
        head = [
            "source",
            "system",
            "seed",
            "variant",
            "profile",
            "updates",
            "wall (min)",
            "dev loss",
            "BLEU tok",
            "sacreBLEU",
            "chrF",
            "max attn logit",
            "g0",
            "final mean g",
        ]
        rows = []
        for rel, _d, r in recs:
            rows.append(
                [
                    rel,
                    r.get("system"),
                    r.get("seed"),
                    " ".join(f"{k}={v}" for k, v in sorted((r.get("variant") or {}).items()))
                    or "–",
                    r.get("profile"),
                    r.get("updates"),
                    _fmt(r["wall_seconds"] / 60, ".1f") if _finite(r.get("wall_seconds")) else "–",
                    _fmt(r.get("dev_loss"), ".3f"),
                    _fmt(r.get("bleu_tok")),
                    _fmt(r.get("bleu")),
                    _fmt(r.get("chrf")),
                    _fmt(r.get("max_attn_logit"), ".1f"),
                    _fmt(r.get("qk_norm_g0")),
                    _fmt(r.get("qk_norm_g_final_mean")),
                ]
            )
        runs_table = ("Runs (the records)", _table(head, rows, "table-runs"))
    for rel, d in sources.items():
        if rel.endswith("aggregate.json"):
            metric = d.get("metric", "bleu_tok")
            for pair, p in (d.get("pairs") or {}).items():
                rows = []
                for n, s in (p.get("systems") or {}).items():
                    m, c = s.get(metric) or {}, s.get("concat") or {}
                    rows.append(
                        [
                            n,
                            s.get("n_seeds"),
                            f"{_fmt(m.get('mean'))} ± {_fmt(m.get('sd'))}",
                            _fmt((s.get("delta") or {}).get(metric), "+.2f"),
                            f"{_fmt(c.get('score'))} "
                            f"[{_fmt(c.get('ci_low'))}, {_fmt(c.get('ci_high'))}]",
                            _fmt(c.get("p_bs"), ".4f"),
                            _fmt(c.get("p_ar"), ".4f"),
                        ]
                    )
                out.append(
                    (
                        f"{pair}: mean ± sd over seeds and paired tests ({rel})",
                        _table(
                            [
                                "system",
                                "seeds",
                                f"{metric} mean ± sd",
                                "Δ vs baseline",
                                "concat [95% CI]",
                                "p(bs)",
                                "p(ar)",
                            ],
                            rows,
                            f"table-{_slug(rel)}-{pair}",
                        ),
                    )
                )
        elif rel.endswith("demo_compare.json"):
            rows = [
                [
                    s.get("name"),
                    _fmt(s.get("score")),
                    _fmt(s.get("delta"), "+.2f"),
                    f"[{_fmt(s.get('ci_low'))}, {_fmt(s.get('ci_high'))}]",
                    _fmt(s.get("p_bs"), ".4f"),
                    _fmt(s.get("p_ar"), ".4f"),
                ]
                for s in d.get("systems") or []
            ]
            out.append(
                (
                    f"BLEU and paired tests ({rel})",
                    _table(
                        ["system", d.get("metric", "score"), "Δ", "95% CI", "p(bs)", "p(ar)"],
                        rows,
                        f"table-{_slug(rel)}",
                    ),
                )
            )
        elif rel.endswith("ablation.json"):
            cells = d.get("cells") or {}
            rows = [
                [
                    c,
                    cells[c].get("system"),
                    cells[c].get("n_seeds"),
                    f"{_fmt(cells[c].get('mean'))} ± {_fmt(cells[c].get('sd'))}",
                    ", ".join(_fmt(v) for v in cells[c].get("values") or []),
                ]
                for c in cells
            ]
            out.append(
                (
                    f"2x2 cells ({rel})",
                    _table(
                        ["cell", "system", "seeds", "mean ± sd", "per seed"],
                        rows,
                        f"table-{_slug(rel)}-cells",
                    ),
                )
            )
            effects = _effect_rows(d)
            with_mde = any(r["mde"] is not None for r in effects)
            rows = [
                [
                    r["effect"],
                    _fmt(r["estimate"], "+.3f"),
                    r["description"],
                    f"[{r['ci'][0]:+.2f}, {r['ci'][1]:+.2f}]" if r["ci"] else "–",
                    _fmt(r["p_seeds"], ".3f", "not tested"),
                    _fmt(r["p_ar"], ".4f", "not tested"),
                    *([_fmt(r["mde"], ".2f")] if with_mde else []),
                ]
                for r in effects
            ]
            label = _seed_label(next((r["test"] for r in effects if r["test"]), None))
            out.append(
                (
                    f"2x2 effects ({rel})",
                    _table(
                        [
                            "effect",
                            "BLEU",
                            "comparison",
                            "95% CI over seeds",
                            f"p, seed-level ({label})",
                            "p, sentences (approximate randomization)",
                            *(["MDE (80% power)"] if with_mde else []),
                        ],
                        rows,
                        f"table-{_slug(rel)}-effects",
                    ),
                )
            )
        elif rel.endswith("lr_sweep.json"):
            rows = [
                [
                    s.get("system"),
                    _fmt(s.get("lr_sensitivity"), ".3f"),
                    s.get("best_lr"),
                    _fmt(s.get("best_loss"), ".3f"),
                    s.get("n_runs"),
                    s.get("n_diverged"),
                ]
                for s in d.get("systems") or []
            ]
            out.append(
                (
                    f"LR sensitivity ({rel})",
                    _table(
                        ["system", "LR sensitivity", "best lr", "best loss", "runs", "diverged"],
                        rows,
                        f"table-{_slug(rel)}",
                    ),
                )
            )
    return out + ([runs_table] if runs_table else [])
