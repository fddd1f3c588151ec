"""The package layers (setup.py): what each may import.

* ``fairseq_qknorm`` (the plugin fairseq loads with ``--user-dir``) imports only torch, fairseq
  and itself: nothing from ``qknorm_model_tools``, ``qknorm_tools``, ``benchmarks``, ``scripts``;
* ``qknorm_tools`` (the experiment tooling) imports no torch, fairseq or the plugin at module
  import time (a lazy import inside a function is its own business: none exists today).

Checked twice: statically (every ``import`` statement of every file, function bodies included
for the plugin) and by importing the package in a fresh interpreter and reading ``sys.modules``.
The ``bpe.json`` contract the two layers share without an import is held equal here too.
"""

import ast
import json
import subprocess
import sys

import pytest

from conftest import FAR_BOUND, REPO, cli_env

#: top-level names the plugin must not import (anything of ours above it)
ABOVE_THE_PLUGIN = ("qknorm_model_tools", "qknorm_tools", "benchmarks", "scripts", "tests")
#: what the torch-free tooling must not import at module import time
TORCH_SIDE = ("torch", "fairseq", "fairseq_qknorm", "qknorm_model_tools", "fairseq_cli")


def _imports(path, module_level_only: bool):
    """``(line, top-level module name)`` of each import in ``path``; a relative import is
    ``"."``. ``module_level_only``: leave out imports inside functions and classes."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    if module_level_only:
        nodes, todo = [], list(tree.body)
        while todo:  # module level, with the bodies of if / try / with blocks
            node = todo.pop()
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                continue
            nodes.append(node)
            todo.extend(ast.iter_child_nodes(node))
    else:
        nodes = list(ast.walk(tree))
    for node in nodes:
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name.split(".")[0]
        elif isinstance(node, ast.ImportFrom):
            yield node.lineno, "." if node.level else node.module.split(".")[0]


def _files(package):
    files = sorted((REPO / package).rglob("*.py"))
    assert files, package
    return files


def _forbidden_imports(packages, forbidden, module_level_only):
    """``FILE:LINE: NAME`` of each import in ``packages`` of a top-level name in ``forbidden``."""
    return [
        f"{path.relative_to(REPO)}:{line}: {name}"
        for package in packages
        for path in _files(package)
        for line, name in _imports(path, module_level_only)
        if name in forbidden
    ]


def test_the_plugin_imports_nothing_of_ours_above_it():
    assert _forbidden_imports(["fairseq_qknorm"], ABOVE_THE_PLUGIN, False) == []


def test_no_package_imports_the_benchmarks():
    """benchmarks/ may depend on the packages, never the reverse (issue 21): no module of
    fairseq_qknorm, qknorm_model_tools or qknorm_tools imports ``benchmarks``, and no script
    runs it."""
    packages = ["fairseq_qknorm", "qknorm_model_tools", "qknorm_tools"]
    found = _forbidden_imports(packages, ["benchmarks"], False)
    found += [str(p) for p in (REPO / "scripts").rglob("*.sh") if "-m benchmarks" in p.read_text()]
    assert found == []


@pytest.mark.slow
def test_the_tooling_imports_no_torch_at_module_level():
    assert _forbidden_imports(["qknorm_tools"], TORCH_SIDE, True) == []


def _loaded_after_import(package):
    """Top-level names in ``sys.modules`` after ``import package, package.*`` in a fresh
    interpreter (every module of the package, not only what its ``__init__`` imports)."""
    modules = [package] + [
        ".".join(p.relative_to(REPO).with_suffix("").parts)
        for p in _files(package)
        if p.name not in ("__init__.py", "__main__.py")
    ]
    code = (
        "import importlib, json, sys\n"
        f"for m in {modules!r}:\n"
        "    importlib.import_module(m)\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})))\n"
    )
    p = subprocess.run(
        [sys.executable, "-c", code],
        cwd=REPO,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=FAR_BOUND,
    )
    assert p.returncode == 0, p.stderr
    return set(json.loads(p.stdout.splitlines()[-1]))


@pytest.mark.parametrize(
    "package, forbidden",
    [("fairseq_qknorm", ABOVE_THE_PLUGIN), ("qknorm_tools", TORCH_SIDE)],
)
@pytest.mark.slow
def test_importing_a_layer_loads_nothing_it_must_not(package, forbidden):
    loaded = _loaded_after_import(package)
    assert package in loaded
    assert not loaded & set(forbidden)


def test_the_bpe_manifest_contract_is_one_table_on_both_sides():
    """--bpe pipeline (plugin), --eval-bleu-remove-bpe (train.sh) and extract (evaluate.sh)
    read the same manifest file and remove each tool's segmentation with the same fairseq
    post_process symbol (the plugin cannot import the tooling's table: equal by this test)."""
    from fairseq.data.data_utils import post_process

    from fairseq_qknorm import bpe
    from qknorm_tools.textio import BPE_MANIFEST, BPE_TOOL_SYMBOL, remove_bpe

    assert bpe.MANIFEST == BPE_MANIFEST
    assert bpe.POST_PROCESS == BPE_TOOL_SYMBOL
    for text in ("a@@ b c@@", "\u2581a b \u2581c"):
        for symbol in BPE_TOOL_SYMBOL.values():
            assert remove_bpe(text, symbol) == post_process(text, symbol)


#: one role per file (issue 36): no module of the tooling or the benchmarks above this size
MAX_LINES = 800


def test_no_tooling_or_benchmark_file_over_800_lines():
    longer = [
        f"{path.relative_to(REPO)}: {n} lines"
        for package in ("qknorm_tools", "benchmarks")
        for path in _files(package)
        if (n := len(path.read_text(encoding="utf-8").splitlines())) > MAX_LINES
    ]
    assert longer == []
