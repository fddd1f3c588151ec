r"""An interactive, self-contained HTML report of one results directory.

::

    python -m qknorm_tools.report results/cpu-proxy-fast/gl-en [MORE_DIRS...] [-o OUT.html]
        [--attention attention.json]
    python -m qknorm_tools.report --all results   # = make report: one page per
        # results/<profile>/<pair>/ with something to show, a line for each one skipped

Each page (``DIR/report.html`` by default) opens offline: plotly.js (from the ``plotly``
package, ``pip install -e .[report]``) and every style and script are inlined, nothing is
fetched at view time. The page is built from the JSON the results directory holds (up to two
levels below it, e.g. ``lr-sweep/``):

* ``runs.json`` / ``demo.json`` (run records, :mod:`qknorm_tools.records`): the runs table;
  the training and dev curves, ``g`` per module over training and the max attention logit over
  training are read from each run's ``train.log`` (:mod:`qknorm_tools.trainlog`) *when the run
  directory exists*; a fresh clone has no ``runs/``, and the page then says which curves are
  missing and shows what the records hold (final ``g`` per module against ``g0``);
* ``aggregate.json``: mean ± sd over seeds, BLEU of the concatenated outputs with its 95%
  paired-bootstrap CI and the p-values against the baseline (paired bootstrap, Koehn 2004;
  approximate randomization, Riezler & Maxwell 2005);
* ``demo_compare.json``: BLEU with 95% CI and p-values of ``evaluate compare``;
* ``ablation.json``: the 2x2 cells {LayerNorm, ScaleNorm} x {dot product, QKNorm} and their
  effects (:mod:`qknorm_tools.ablation`) as a forest plot: each estimate with its 95% CI over
  seeds (:func:`~qknorm_tools.report_ablation.seed_interval`), the minimum detectable effect
  where the file has it, and two p-values named by what they test (seeds; approximate
  randomization over sentences);
* ``lr_sweep.json``: final dev loss and max attention logit against the peak learning rate
  per system and seed, the max attention logit over training per run, LR sensitivity
  (Wortsman et al. 2023, arXiv:2309.14322, Sec. 2.2 and Fig. 1);
* ``attention.json`` (``python -m qknorm_model_tools.attention_dump``, checked against its schema
  by :func:`~qknorm_tools.report_sources.validate_attention`): a heatmap viewer of the logits /
  probabilities of every layer and head, models side by side, entropy in the hover.

A system has one colour in every figure of every page
(:data:`~qknorm_tools.report_style.SYSTEM_COLORS`); a series of one point is a marker; BLEU axes
span the data, not 0 to the data; a directory with several records files (an LR sweep per model
size) gets its run charts once per file.

Systems and seeds are toggled in each figure's legend (double-click: only that one); hovering a
point shows its run. Every number the figures and tables show is also embedded in the page as
JSON (``<script type="application/json" id="qknorm-report-data">``: the source files as read,
under ``sources``, and each figure's plotly spec under ``figures``), so that a test or a reader
can check the page against the results.

The page is assembled here from its parts: reading and validating the sources
(:mod:`~qknorm_tools.report_sources`), colours and figure helpers
(:mod:`~qknorm_tools.report_style`), the figures per source kind
(:mod:`~qknorm_tools.report_bleu`, :mod:`~qknorm_tools.report_ablation`,
:mod:`~qknorm_tools.report_lr`, :mod:`~qknorm_tools.report_runs`) and the tables
(:mod:`~qknorm_tools.report_tables`); this module holds the HTML assembly and the command line.

plotly is imported only when a page is written; torch and fairseq never are.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from collections.abc import Mapping, Sequence
from importlib import resources
from pathlib import Path

from .exits import die_usage, fail
from .report_ablation import _ablation_figures
from .report_bleu import _bleu_ci_figures
from .report_lr import _lr_figures
from .report_runs import _run_figures
from .report_sources import (
    KNOWN,
    ReportInputError,
    _clean,
    collect_sources,
    not_a_directory,
    report_dirs,
    validate_attention,
)
from .report_tables import _tables
from .textio import OutputError, write_text_atomic

__all__ = ["build_report", "main", "render_html", "write_report"]

DATA_ID = "qknorm-report-data"


# ----------------------------------------------------------------------------- the page
def build_report(results_dir, attention=None) -> dict:
    """Everything a page shows, as JSON-safe data.

    Args:
        results_dir: a results directory (e.g. ``results/cpu-proxy-fast/gl-en``).
        attention: an ``attention.json`` of ``qknorm_model_tools.attention_dump`` to show (default:
            the one in the directory, if any).

    Returns:
        ``{"title", "results_dir", "sources": {rel: JSON}, "figures": [{"id", "title",
        "caption", "spec": plotly figure}], "tables": [(title, html)], "notes": [str],
        "attention": JSON or None}``.

    Raises:
        ReportInputError: see :func:`collect_sources`; an unreadable ``attention`` file.
    """
    root = Path(results_dir)
    sources = collect_sources(root)
    att = None
    if attention is not None:
        try:
            att = json.loads(Path(attention).read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise ReportInputError(
                f"cannot read attention file {str(attention)!r}: {exc}"
            ) from None
        validate_attention(att, attention)
    else:
        found = [(k, v) for k, v in sources.items() if k.endswith("attention.json")]
        for k, v in found:
            validate_attention(v, root / k)
        att = found[0][1] if found else None
    sources = {k: v for k, v in sources.items() if not k.endswith("attention.json")}
    run_figs, notes = _run_figures(root, sources)
    figures = (
        _bleu_ci_figures(sources) + _ablation_figures(sources) + run_figs + _lr_figures(sources)
    )
    present = {k.rsplit("/", 1)[-1] for k in sources}
    if not present & {"aggregate.json", "demo_compare.json", "ablation.json"}:
        notes.append(
            "no aggregate.json / demo_compare.json / ablation.json here: no BLEU CIs or p-values."
        )
    if att is None:
        notes.append(
            "no attention.json here: the attention viewer is empty. Make one from two checkpoints "
            "with: python -m qknorm_model_tools.attention_dump QKNORM.pt BASELINE.pt "
            f"--data BIN_DIR --sentences 0,1,2 -o {root.as_posix()}/attention.json "
            "(docs/report.md)."
        )
    title = f"fairseq_qknorm results: {root.as_posix().rstrip('/')}"
    return _clean(
        {
            "title": title,
            "results_dir": root.as_posix(),
            "sources": sources,
            "figures": figures,
            "tables": _tables(sources),
            "notes": notes,
            "attention": att,
        }
    )


_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Helvetica,Arial,sans-serif;margin:0 auto;
max-width:1250px;padding:0 16px 40px;color:#222}
h1{font-size:1.5em}h2{border-bottom:1px solid #ccc;padding-bottom:4px;margin-top:2em}
table{border-collapse:collapse;margin:8px 0 16px;font-size:13px}
td,th{border:1px solid #ddd;padding:3px 7px;text-align:left}th{background:#f3f3f3}
td.num{text-align:right;font-variant-numeric:tabular-nums}.fig{min-height:420px}
.caption{color:#555;font-size:13px;margin:6px 0 22px}.notes li{color:#8a4b00}
.att-controls{margin:8px 0;font-size:14px}.att-controls label{margin-right:12px}
.att-row{display:flex;gap:8px;flex-wrap:wrap}.att-row>div{flex:1 1 560px;min-height:460px}
nav a{margin-right:12px}
"""


def _page_js() -> str:
    """The page's own script (``qknorm_tools/report.js``, shipped as package data)."""
    return resources.files("qknorm_tools").joinpath("report.js").read_text(encoding="utf-8")


def _json_for_script(obj) -> str:
    """JSON to place inside ``<script>``: ``</`` escaped so no string can close the tag."""
    return json.dumps(obj, separators=(",", ":"), allow_nan=False).replace("</", "<\\/")


def render_html(report: Mapping, plotlyjs: str | None = None) -> str:
    """The page (a complete HTML document) of :func:`build_report`'s data.

    Args:
        report: the data of :func:`build_report`.
        plotlyjs: the plotly.js source to inline (default: the ``plotly`` package's bundle).

    Raises:
        ReportInputError: plotly is not installed (``pip install -e .[report]``).
    """
    if plotlyjs is None:
        try:
            from plotly.offline import get_plotlyjs
        except ImportError:
            raise ReportInputError(
                "the report needs the plotly package: pip install -e '.[report]' (or make install)"
            ) from None
        plotlyjs = get_plotlyjs()
    esc = html.escape
    figs = {f["id"]: f for f in report["figures"]}
    sections = []

    def figure_block(f):
        cap = f'<p class="caption">{esc(f["caption"])}</p>' if f.get("caption") else ""
        return f'<div class="fig" id="fig-{esc(f["id"])}"></div>{cap}'

    if report.get("figures_only"):  # write_report(figure=...): the figures, nothing else
        return _document(
            report,
            plotlyjs,
            [f"<h1>{esc(report['title'])}</h1>"] + [figure_block(f) for f in figs.values()],
        )
    groups = [
        ("results", "Results tables", None),
        ("bleu", "BLEU with confidence intervals and p-values", ("bleu-",)),
        ("ablation", "The 2x2 ablation", ("ablation-",)),
        (
            "curves",
            "Training and dev curves, g per module, max attention logit",
            ("curves", "g-", "maxlogit-"),
        ),
        ("lr", "LR sweep", ("lr-",)),
        ("attention", "Attention viewer", None),
    ]
    shown = [(g, t, p) for g, t, p in groups if p is None or any(fid.startswith(p) for fid in figs)]
    nav = " ".join(f'<a href="#{g}">{esc(t)}</a>' for g, t, _ in shown)
    notes = "".join(f"<li>{esc(n)}</li>" for n in report["notes"])
    sections.append(f"<h1>{esc(report['title'])}</h1><nav>{nav}</nav>")
    sections.append(
        "<p>Sources: " + ", ".join(f"<code>{esc(k)}</code>" for k in report["sources"]) + ". "
        "Click a legend entry to hide or show a system, seed or run (double-click: only it); "
        "hover a point for its run.</p>"
    )
    if notes:
        sections.append(
            f'<h2 id="missing">What this page cannot show</h2><ul class="notes">{notes}</ul>'
        )
    summary = [(t, h) for t, h in report["tables"] if not t.startswith("Runs")]
    runs = [(t, h) for t, h in report["tables"] if t.startswith("Runs")]
    tables = "".join(f"<h3>{esc(t)}</h3>{h}" for t, h in summary)
    sections.append(
        f'<h2 id="results">Results tables</h2>{tables or "<p>No summary tables.</p>"}'
        + ('<p>Every run: <a href="#runs">the records</a>.</p>' if runs else "")
    )
    for gid, title, prefixes in shown:
        if prefixes is not None:  # sections without figures are left out (notes say why)
            blocks = [figure_block(f) for fid, f in figs.items() if fid.startswith(prefixes)]
            sections.append(f'<h2 id="{gid}">{esc(title)}</h2>' + "".join(blocks))
    att = report.get("attention")
    if att:
        sections.append(
            '<h2 id="attention">Attention viewer</h2>'
            f"<p>{esc(str(att.get('target', '')))} of "
            f"<code>{esc(str(att.get('subset', '')))}</code> "
            "sentences; logits are the pre-softmax values each model's attention computed (QKNorm: "
            "g cos(q, k), bounded by g; dot product: q.k/sqrt(d)).</p>"
            '<div class="att-controls"><label>sentence <select id="att-sentence"></select></label>'
            '<label>module <select id="att-module"></select></label>'
            '<label>head <select id="att-head"></select></label>'
            '<label>show <select id="att-value"></select></label>'
            '<label>left <select id="att-model-a"></select></label>'
            '<label>right <select id="att-model-b"></select></label></div>'
            '<div class="att-row"><div id="att-a"></div><div id="att-b"></div></div>'
        )
    else:
        sections.append(
            '<h2 id="attention">Attention viewer</h2><p>No attention.json (see above).</p>'
        )
    for t, h in runs:
        sections.append(f'<h2 id="runs">{esc(t)}</h2>{h}')
    return _document(report, plotlyjs, sections)


def _document(report: Mapping, plotlyjs: str, sections: Sequence[str]) -> str:
    """The HTML document: style, scripts, ``sections`` and the page's data as JSON."""
    esc = html.escape
    page_data = {
        k: report[k] for k in ("title", "results_dir", "sources", "figures", "notes", "attention")
    }
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{esc(report['title'])}</title><style>{_CSS}</style>"
        f"<script>{_page_js()}</script>"
        f'<script type="text/javascript">{plotlyjs}</script></head><body>'
        + "\n".join(sections)
        + f'<script type="application/json" id="{DATA_ID}">{_json_for_script(page_data)}</script>'
        "</body></html>\n"
    )


def write_report(results_dir, out=None, attention=None, figure=None) -> Path:
    """Build and write the page of ``results_dir`` (default ``results_dir/report.html``).

    Written to a temporary name first, then renamed: a failure leaves the previous page.
    ``figure``: a figure id prefix (e.g. ``ablation-effects``): the page then holds only those
    figures under its title (no tables, notes or attention viewer), for a screenshot.

    Raises:
        ReportInputError: see :func:`build_report` and :func:`render_html`; no figure id starts
            with ``figure``.
    """
    report = build_report(results_dir, attention)
    if figure is not None:
        picked = [f for f in report["figures"] if f["id"].startswith(figure)]
        if not picked:
            raise ReportInputError(
                f"no figure of the page of {str(results_dir)!r} has an id starting with "
                f"{figure!r}; its figures: {', '.join(f['id'] for f in report['figures'])}"
            )
        report = {
            **report,
            "figures": picked,
            "tables": [],
            "notes": [],
            "attention": None,
            "figures_only": True,
        }
    try:
        import plotly.graph_objects as go
    except ImportError:
        go = None
    if go is not None:
        for f in report["figures"]:
            go.Figure(f["spec"])  # plotly validates every property (ValueError on a typo)
    page = render_html(report)
    out = Path(out) if out is not None else Path(results_dir) / "report.html"
    try:
        write_text_atomic(out, page)
    except OutputError as exc:
        raise ReportInputError(str(exc)) from None
    return out


def build_parser() -> argparse.ArgumentParser:
    """The command line's parser (``--help`` lists every option)."""
    p = argparse.ArgumentParser(
        prog="python -m qknorm_tools.report",
        description="Write a self-contained interactive HTML report per results directory.",
    )
    p.add_argument("results_dirs", nargs="*", metavar="RESULTS_DIR")
    p.add_argument(
        "--all",
        metavar="RESULTS_ROOT",
        help="a page for every RESULTS_ROOT/<label>/<pair>/ with something to show; one line "
        "on stderr for each one skipped, with why (make report: --all results)",
    )
    p.add_argument(
        "-o", "--output", help="the page to write (one RESULTS_DIR only; default DIR/report.html)"
    )
    p.add_argument(
        "--attention", help="an attention_dump JSON to show (default DIR/attention.json)"
    )
    p.add_argument(
        "--figure",
        metavar="ID_PREFIX",
        help="only the figures whose id starts with ID_PREFIX (e.g. ablation-effects), without "
        "tables, notes or attention viewer: a page for a screenshot",
    )
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (:mod:`~.exits`): 0 done, 1 bad input (a missing results dir too), 2 usage."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if bool(args.all) == bool(args.results_dirs):
        die_usage(parser, "give RESULTS_DIR... or --all RESULTS_ROOT (one of the two)")
    if args.output and (args.all or len(args.results_dirs) > 1):
        die_usage(
            parser,
            "-o/--output takes one RESULTS_DIR; without it each page goes to DIR/report.html",
        )
    dirs = args.results_dirs
    if args.all:
        why = not_a_directory(args.all, "results root")
        if why:
            return fail(why)
        dirs, skipped = report_dirs(args.all)
        for d, why in skipped:
            print(f"skipped {d.as_posix()}: {why}", file=sys.stderr)
        if not dirs:
            return fail(
                f"no page to build under {args.all}: a page is built for RESULTS_ROOT/LABEL/PAIR/ "
                f"holding one of {', '.join(KNOWN)} (e.g. results/cpu-proxy/gl-en/)"
            )
    status = 0
    for d in dirs:
        try:
            out = write_report(d, args.output, args.attention, args.figure)
        except ReportInputError as exc:
            status = fail(exc)
            continue
        size = out.stat().st_size / 2**20
        print(f"wrote {out} ({size:.1f} MiB)", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
