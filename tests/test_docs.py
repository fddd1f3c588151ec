"""The documentation's links resolve and README.md stays short (issue 21, item 5).

Every relative link ``[text](target)`` and image ``![alt](target)`` in README.md and docs/*.md
must point to an existing file of the repository; a ``#anchor`` on a Markdown target must name
one of that file's headings (GitHub's heading slugs). README.md has at most 300 lines.
"""

from __future__ import annotations

import json
import re
from decimal import ROUND_HALF_UP, Decimal

import pytest

from conftest import REPO, doc_files

README_MAX_LINES = 300
LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", flags=re.M | re.S)


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to '-'."""
    s = heading.strip().lower()
    s = re.sub(r"[^\w\- ]", "", s)
    return s.replace(" ", "-")


def anchors(path) -> set:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    return {slug(m) for m in re.findall(r"^#+ (.+)$", text, flags=re.M)}


def links(path) -> list:
    """(line number, target) of every link outside code blocks and inline code."""
    text = path.read_text(encoding="utf-8")
    out = []
    in_fence = False
    for n, line in enumerate(text.split("\n"), 1):
        if line.startswith("```"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
        line = re.sub(r"`[^`]*`", "", line)
        out += [(n, t) for t in LINK.findall(line)]
    return out


def test_slug_matches_githubs_anchors():
    assert slug("How much of the gain is QKNorm's? The 2x2 ablation") == (
        "how-much-of-the-gain-is-qknorms-the-2x2-ablation"
    )
    assert slug("bf16 training on CPU") == "bf16-training-on-cpu"
    assert slug("Main job: gl-en on CPU (`make demo`)") == "main-job-gl-en-on-cpu-make-demo"


def test_readme_is_short():
    n = len((REPO / "README.md").read_text(encoding="utf-8").splitlines())
    assert n <= README_MAX_LINES, f"README.md has {n} lines (at most {README_MAX_LINES})"


@pytest.mark.parametrize("doc", doc_files(), ids=lambda p: p.relative_to(REPO).as_posix())
def test_relative_links_resolve(doc):
    bad = []
    for n, target in links(doc):
        if re.match(r"^[a-z]+:", target):  # https:, mailto:
            continue
        file, _, anchor = target.partition("#")
        dest = (doc.parent / file).resolve() if file else doc
        if not dest.exists():
            bad.append(f"{doc.name}:{n}: {target} (no file {dest})")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            bad.append(f"{doc.name}:{n}: {target} (no heading #{anchor} in {dest.name})")
    assert not bad, "\n".join(bad)


def test_every_docs_file_is_linked_from_readme():
    readme = {t.partition("#")[0] for _, t in links(REPO / "README.md")}
    missing = [
        p.name for p in sorted((REPO / "docs").glob("*.md")) if f"docs/{p.name}" not in readme
    ]
    assert not missing, f"docs not linked from README.md: {missing}"


#: the earlier 2x2 table's rows (docs/ablation.md) -> the effect they quote (ablation.json's key)
EARLIER_EFFECT_ROWS = {
    "QKNorm effect with LayerNorm": "qknorm_effect_at_layernorm",
    "QKNorm effect with ScaleNorm": "qknorm_effect_at_scalenorm",
    "ScaleNorm effect with dot product": "norm_effect_at_dot",
    "**the paper's comparison**": "paper_comparison",
}


def _quoted(quoted: str, value: float) -> bool:
    """Whether ``quoted`` is ``value`` as ablation.md shows it (4 decimals), then rounded to
    the digits quoted (half up)."""
    shown = Decimal(f"{value:.4f}")
    step = Decimal(1).scaleb(-len(quoted.split(".")[1]))
    return Decimal(quoted.replace("−", "-")) == shown.quantize(step, ROUND_HALF_UP)


def test_the_earlier_ablation_numbers_are_in_the_files_docs_cite():
    """Every effect and p-value of docs/ablation.md's earlier 2x2 table (seeds 1-3 of the
    converged grid | 1,000 updates) is the value of the report it cites (issue 37, item 6)."""
    doc = (REPO / "docs/ablation.md").read_text(encoding="utf-8")
    results = REPO / "results"
    sources = [results / "cpu-converge-d128/gl-en/ablation-seeds-1-3.json",
               results / "cpu-proxy-fast/gl-en/ablation.json"]  # fmt: skip
    assert "(../results/cpu-converge-d128/gl-en/ablation-seeds-1-3.md)" in doc
    assert "(../results/cpu-proxy-fast/gl-en/ablation.md)" in doc
    reports = [json.loads(p.read_text(encoding="utf-8")) for p in sources]
    assert [r["cells"]["scalenorm_dot"]["n_seeds"] for r in reports] == [3, 3]
    checked = 0
    for line in doc.splitlines():
        row = next((k for r, k in EARLIER_EFFECT_ROWS.items() if line.startswith(f"| {r}")), None)
        if row is None:
            continue
        cols = [c.strip().strip("*") for c in line.strip("|").split("|")[1:]]
        for col, rep in zip(cols, reports):
            m = re.fullmatch(r"\*?\*?([+−-][0-9.]+)\*?\*? \(([0-9.]+) / ([0-9.]+)\)", col)
            assert m, (row, col)
            delta, p_ar, p_seeds = m.groups()
            for quoted, value in ((delta, rep["effects"][row]),
                                  (p_ar, rep["significance"][row]["p_ar"]),
                                  (p_seeds, rep["seed_tests"][row]["p"])):  # fmt: skip
                assert _quoted(quoted, value), (row, quoted, value)
            checked += 1
    assert checked == 2 * len(EARLIER_EFFECT_ROWS)


#: README's decisive 2x2 rows -> the effect they quote (ablation.json's key)
README_EFFECT_ROWS = {
    "QKNorm, with LayerNorm (b − a)": "qknorm_effect_at_layernorm",
    "QKNorm, with ScaleNorm (d − c)": "qknorm_effect_at_scalenorm",
    "ScaleNorm, with dot product (c − a)": "norm_effect_at_dot",
    "QKNorm, main effect": "qknorm_main_effect",
    "interaction (b − a) − (d − c)": "interaction",
    "**the paper's comparison** (b − c)": "paper_comparison",
}
#: README's cell rows -> ablation.json's cell
README_CELL_ROWS = {"a: ": "layernorm_dot", "b: ": "layernorm_qknorm", "c: ": "scalenorm_dot",
                    "d: ": "scalenorm_qknorm"}  # fmt: skip


def test_readme_decisive_2x2_numbers_are_the_reports():
    """README's decisive 2x2 (40 runs): every cell mean and sd, and per effect the estimate,
    95% CI, seed-level p, MDE and TOST (p and verdict) are those of the report it cites
    (results/cpu-converge-d128/gl-en/ablation.json, 10 seeds per cell), as README rounds them;
    and the reading quotes the paper's comparison and QKNorm with LayerNorm as the table does."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert "[Report](results/cpu-converge-d128/gl-en/ablation.md)" in readme
    rep = json.loads((REPO / "results/cpu-converge-d128/gl-en/ablation.json").read_text())
    assert {c["n_seeds"] for c in rep["cells"].values()} == {10}
    cells = effects = 0
    for line in readme.splitlines():
        cell = next((k for r, k in README_CELL_ROWS.items() if line.startswith(f"| {r}")), None)
        if cell is not None:
            mean, sd = re.fullmatch(
                r"([0-9.]+) ± ([0-9.]+)", line.strip("|").split("|")[1].strip()
            ).groups()
            assert _quoted(mean, rep["cells"][cell]["mean"]) and _quoted(
                sd, rep["cells"][cell]["sd"]
            ), line
            cells += 1
            continue
        row = next((k for r, k in README_EFFECT_ROWS.items() if line.startswith(f"| {r}")), None)
        if row is None:
            continue
        est, ci, p, mde, tost = [c.strip().strip("*") for c in line.strip("|").split("|")[1:]]
        t = rep["seed_tests"][row]
        lo, hi = re.fullmatch(r"\[([+−-][0-9.]+), ([+−-][0-9.]+)\]", ci).groups()
        verdict, tost_p = re.fullmatch(r"(yes|no) \(([0-9.]+)\)", tost).groups()
        assert _quoted(est, t["estimate"]) and _quoted(p, t["p"]) and _quoted(mde, t["mde"]), line
        assert _quoted(lo, t["ci95"][0]) and _quoted(hi, t["ci95"][1]), line
        assert _quoted(tost_p, t["tost"]["p"]) and (verdict == "yes") == t["tost"]["equivalent"]
        effects += 1
    assert (cells, effects) == (4, len(README_EFFECT_ROWS))
    assert "pooled sd 0.45" in readme and _quoted(
        "0.45", rep["seed_tests"]["paper_comparison"]["sd"]
    )
    assert "+0.04\n  [−0.34, +0.42] (TOST p 0.010)" in readme
    assert "+0.69 [+0.22, +1.16]" in readme and "12.82 ± 0.30" in readme
