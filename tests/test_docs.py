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


#: README's 2x2 table rows -> the effect they quote (ablation.json's key)
README_EFFECT_ROWS = {
    "QKNorm effect with LayerNorm": "qknorm_effect_at_layernorm",
    "QKNorm effect with ScaleNorm": "qknorm_effect_at_scalenorm",
    "ScaleNorm effect with dot product": "norm_effect_at_dot",
    "**the paper's comparison**": "paper_comparison",
}


def test_readme_ablation_numbers_are_in_the_files_it_cites():
    """Every effect and p-value of README's 2x2 table (converged | 1,000 updates) is the value
    of the ablation.json it cites, at the precision README quotes (issue 37, item 6)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    sources = [REPO / "results" / p / "gl-en/ablation.json" for p in
               ("cpu-converge-d128", "cpu-proxy-fast")]  # fmt: skip
    # the citations: README's converged report, and docs/ablation.md's for 1,000 updates
    assert "(results/cpu-converge-d128/gl-en/ablation.md)" in readme
    docs_ablation = (REPO / "docs/ablation.md").read_text(encoding="utf-8")
    assert "(../results/cpu-proxy-fast/gl-en/ablation.md)" in docs_ablation
    reports = [json.loads(p.read_text(encoding="utf-8")) for p in sources]
    checked = 0
    for line in readme.splitlines():
        row = next((k for r, k in README_EFFECT_ROWS.items() if line.startswith(f"| {r}")), None)
        if row is None:
            continue
        cols = [c.strip().strip("*") for c in line.strip("|").split("|")[1:]]
        for col, rep in zip(cols, reports):
            m = re.fullmatch(r"\*?\*?([+−-][0-9.]+)\*?\*? \(([0-9.]+) / ([0-9.]+)\)", col)
            assert m, (row, col)
            delta, p_ar, p_seeds = m.groups()
            pairs = [
                (delta.replace("−", "-"), rep["effects"][row]),
                (p_ar, rep["significance"][row]["p_ar"]),
                (p_seeds, rep["seed_tests"][row]["p"]),
            ]
            for quoted, value in pairs:  # as ablation.md shows it (4 decimals), then rounded
                shown = Decimal(f"{value:.4f}")
                step = Decimal(1).scaleb(-len(quoted.split(".")[1]))
                assert Decimal(quoted) == shown.quantize(step, ROUND_HALF_UP), (row, quoted, value)
            checked += 1
    assert checked == 2 * len(README_EFFECT_ROWS)
