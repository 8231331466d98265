"""The layer diagram (docs/layers.md) is enforced, not just declared.

* ``lint-imports`` checks the contracts in pyproject.toml's
  ``[tool.importlinter]``: the layers (every import statement counts, inside
  functions too), private modules imported only from their parent package, and
  matplotlib imported only by ``numlab.plots``.
* Imports sit at module top level.  A function-level import is allowed for an
  optional heavy dependency (torch, dask, matplotlib, ipywidgets, IPython,
  scipy) or when a comment on the import line, or the line just above it,
  says why it has to be there.
* Notebooks take experiment code from library modules, never from CLI
  modules (``numlab.cli`` and ``cli_*`` modules).
* No import cycle between numlab's modules (module granularity, every
  import statement counted, as grimp builds the graph).
* docs/layers.md shows the same rows as the contracts (numlab's layers and
  the rooms inside numlab.kernels).
* No function or method in numlab/ is over 100 lines (``def`` line to last
  line, docstring included) unless its docstring says why, with the words
  "Longer than 100 lines because".
"""

from __future__ import annotations

import ast
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "src" / "numlab"
OPTIONAL_HEAVY = {"torch", "dask", "distributed", "matplotlib", "ipywidgets", "IPython", "scipy"}


def _contract_layers(contract_id: str = "layers") -> list[str]:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]
    (layers,) = [c["layers"] for c in cfg["contracts"] if c["id"] == contract_id]
    return layers


# Remove these marks when the listed modules are fixed (strict: an unexpected
# pass fails, so the mark cannot outlive the violations).


def test_import_contracts_hold():
    """Run ``lint-imports`` on this checkout (not an installed copy of numlab)."""
    pytest.importorskip("importlinter", reason="import-linter is in the dev extra")
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    proc = subprocess.run(
        [sys.executable, "-c",
         "import sys; from importlinter.cli import lint_imports_command; "
         "sys.exit(lint_imports_command())",
         "--no-cache", "--no-logo", str(ROOT / "pyproject.toml")],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300,
    )
    report = proc.stdout + proc.stderr
    broken = report[report.find("Broken contracts"):] if "Broken contracts" in report else report
    assert proc.returncode == 0, "import contracts broken:\n" + broken


def _import_cycles(graph) -> list[list[str]]:
    """The import cycles of a grimp graph: its strongly connected components of
    more than one module (or of one module importing itself), each sorted,
    found by Tarjan's algorithm without recursion."""
    adj = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    index: dict = {}
    low: dict = {}
    stack: list = []
    on_stack: set = set()
    cycles = []

    def enter(v):
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        return v, iter(adj[v])

    for root in adj:
        if root in index:
            continue
        work = [enter(root)]
        while work:
            v, children = work[-1]
            for w in children:
                if w not in index:
                    work.append(enter(w))
                    break
                if w in on_stack:
                    low[v] = min(low[v], index[w])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[v])
                if low[v] == index[v]:
                    comp = []
                    while not comp or comp[-1] != v:
                        comp.append(stack.pop())
                        on_stack.discard(comp[-1])
                    if len(comp) > 1 or v in adj[v]:
                        cycles.append(sorted(comp))
    return sorted(cycles)


def test_no_import_cycles():
    """No two numlab modules import each other, directly or through others.
    grimp counts every import statement (inside functions and under
    ``TYPE_CHECKING`` too); a package's ``__init__`` is its own module."""
    grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (dev extra)")
    import numlab

    assert Path(numlab.__file__).resolve().is_relative_to(PACKAGE), (
        f"numlab is imported from {numlab.__file__}, not this checkout: run with PYTHONPATH=src")
    cycles = _import_cycles(grimp.build_graph("numlab"))
    assert not cycles, "import cycles (module granularity):\n" + "\n".join(" <-> ".join(c) for c in cycles)


def test_cycle_finder_can_fail():
    """The cycle finder reports each cycle once, whole, and nothing else."""
    grimp = pytest.importorskip("grimp", reason="grimp comes with import-linter (dev extra)")
    g = grimp.ImportGraph()
    for importer, imported in (("p.a", "p.b"), ("p.b", "p.c"), ("p.c", "p.a"),  # a 3-cycle
                               ("p.c", "p.d"), ("p.d", "p.e"),                   # a chain out of it
                               ("p.f", "p.g"), ("p.g", "p.f"),                   # a 2-cycle
                               ("p.h", "p.h"), ("p.e", "p.i")):                  # a self-import
        g.add_import(importer=importer, imported=imported)
    assert _import_cycles(g) == [["p.a", "p.b", "p.c"], ["p.f", "p.g"], ["p.h"]]
    g.remove_import(importer="p.g", imported="p.f")
    g.remove_import(importer="p.h", imported="p.h")
    assert _import_cycles(g) == [["p.a", "p.b", "p.c"]]


def _function_level_imports(path: Path) -> list[tuple[int, str]]:
    """(line, module) of every import inside a function body of ``path``
    that is neither an optional heavy dependency nor explained by a comment."""
    src = path.read_text()
    lines = src.splitlines()
    found = []

    def commented(lineno: int) -> bool:
        line = lines[lineno - 1]
        above = lines[lineno - 2].strip() if lineno >= 2 else ""
        return "#" in line or above.startswith("#")

    def visit(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                if isinstance(child, ast.Import):
                    mods = [a.name for a in child.names]
                elif child.module:
                    mods = ["." * child.level + child.module]
                else:  # from . import ops
                    mods = ["." * child.level + a.name for a in child.names]
                heavy = all(m.split(".")[0] in OPTIONAL_HEAVY for m in mods)
                if not heavy and not commented(child.lineno):
                    found.append((child.lineno, ", ".join(mods)))
            visit(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    visit(ast.parse(src), False)
    return found


def test_imports_at_module_top_level():
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        for lineno, mod in _function_level_imports(path):
            bad.append(f"{path.relative_to(ROOT)}:{lineno}: {mod}")
    assert not bad, (f"{len(bad)} function-level imports without a reason "
                     "(move them to the top, or comment why not):\n" + "\n".join(bad))


def test_function_level_import_check_can_fail(tmp_path):
    """The checker above flags what it should and nothing else."""
    p = tmp_path / "m.py"
    p.write_text(
        "import numpy\n"
        "def f():\n"
        "    from . import ops\n"
        "    import torch\n"
        "    # needs the planner, which imports this module\n"
        "    from .fusion import plan\n"
        "    from .graph import trace  # cycle: graph imports m\n"
        "    import csv\n"
    )
    assert _function_level_imports(p) == [(3, ".ops"), (8, "csv")]


MAX_FUNCTION_LINES = 100
LONG_REASON = re.compile(r"longer than 100 lines because\s+\S", re.IGNORECASE)


def _long_functions(path: Path) -> list[tuple[int, str, int]]:
    """(line, name, length) of every function or method of ``path`` (nested
    ones too) over :data:`MAX_FUNCTION_LINES` lines whose docstring gives no
    reason ("Longer than 100 lines because ...")."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            length = node.end_lineno - node.lineno + 1
            if length > MAX_FUNCTION_LINES and not LONG_REASON.search(ast.get_docstring(node) or ""):
                found.append((node.lineno, node.name, length))
    return found


def test_no_long_function_without_a_reason():
    bad = [f"{path.relative_to(ROOT)}:{lineno}: {name} ({length} lines)"
           for path in sorted(PACKAGE.rglob("*.py")) for lineno, name, length in _long_functions(path)]
    assert not bad, (f"{len(bad)} functions over {MAX_FUNCTION_LINES} lines without a reason in their "
                     "docstring (split them, or say 'Longer than 100 lines because ...'):\n" + "\n".join(bad))


def test_long_function_check_can_fail(tmp_path):
    """The checker above flags a long function without the reason, and only it."""
    body = "".join(f"    x{i} = {i}\n" for i in range(MAX_FUNCTION_LINES))
    p = tmp_path / "m.py"
    p.write_text(
        "def long_no_reason():\n    \"\"\"Just long.\"\"\"\n" + body
        + "def long_with_reason():\n    \"\"\"Does it.\n\n    Longer than 100 lines because the steps\n"
          "    read top to bottom.\"\"\"\n" + body
        + "class C:\n    def method(self):\n" + body.replace("    ", "        ")
        + "def short():\n" + "".join(f"    y{i} = {i}\n" for i in range(MAX_FUNCTION_LINES - 1))
    )
    n = MAX_FUNCTION_LINES
    assert _long_functions(p) == [(1, "long_no_reason", n + 2), (2 * n + 9, "method", n + 1)]


@pytest.mark.parametrize("contract_id,block_no", [("layers", 0), ("kernels", 1)])
def test_layers_doc_matches_contract(contract_id, block_no):
    """docs/layers.md lists each layers contract's rows, top row first, one per
    line: numlab's layers in its first ```text block, the rooms of
    numlab.kernels in its second."""
    doc = (ROOT / "docs" / "layers.md").read_text()
    blocks = re.findall(r"```text\n(.*?)```", doc, re.S)
    assert len(blocks) > block_no, f"docs/layers.md has no ```text block for the {contract_id!r} contract"
    rows = [ln for ln in blocks[block_no].splitlines() if ln.strip()]
    layers = _contract_layers(contract_id)
    assert len(rows) == len(layers)
    for row, layer in zip(rows, layers, strict=True):
        # a row reads "9  cli" or "8  experiments : plots : ..."; compare the module names
        names = re.sub(r"^\s*\d+\s+", "", row).split("#")[0]
        norm = lambda s: re.sub(r"[()\s]", "", s)  # noqa: E731
        assert norm(names) == norm(layer), (row, layer)


_CLI_MODULE = re.compile(r"^numlab(\.\w+)*\.(cli|cli_\w+)(\.|$)")


def _cli_imports_of_notebook(path: Path) -> list[str]:
    """``numlab`` CLI modules imported by the code cells of a notebook."""
    found = []
    for cell in json.loads(path.read_text())["cells"]:
        if cell["cell_type"] != "code":
            continue
        src = "".join(cell["source"])
        # IPython magics and shell escapes are not Python
        src = "\n".join("" if ln.lstrip().startswith(("%", "!")) else ln for ln in src.splitlines())
        for node in ast.walk(ast.parse(src)):
            if isinstance(node, ast.Import):
                mods = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module:
                # "from numlab.cli_demo import x" or "from numlab import cli"
                mods = ([node.module] if _CLI_MODULE.match(node.module)
                        else [f"{node.module}.{a.name}" for a in node.names])
            else:
                continue
            found += [m for m in mods if _CLI_MODULE.match(m) and m not in found]
    return found


def test_notebooks_do_not_import_cli_modules():
    bad = {p.name: mods for p in sorted((ROOT / "notebooks").glob("*.ipynb"))
           if (mods := _cli_imports_of_notebook(p))}
    assert not bad, f"notebooks import CLI modules (move that code to a library module): {bad}"


def test_cli_module_pattern():
    hits = [m for m in ("numlab.cli", "numlab.cli.demo", "numlab.cli_demo", "numlab.compare.cli_run",
                        "numlab.client", "numlab.experiments", "numlab.compare.compare")
            if _CLI_MODULE.match(m)]
    assert hits == ["numlab.cli", "numlab.cli.demo", "numlab.cli_demo", "numlab.compare.cli_run"]
