"""The package's shape, checked on its source (pure AST, nothing is imported).

The rules, explained in ARCHITECTURE.md:

- the import graph of posviz's modules has no cycle, imports inside functions and
  under ``TYPE_CHECKING`` included;
- imports point down the layer order :data:`LAYERS` or stay within one package
  (``posviz/__init__.py``, the lazy public API, and ``posviz/__main__.py`` are
  exempt as importers; no module may import the public API);
- no module over :data:`MAX_MODULE_LINES` lines, no function over
  :data:`MAX_FUNCTION_LINES` (the whole ``def``, docstring included);
- no text points to a design file that is not in the repository.

The checkers take the package folder as an argument, so that the tests at the end
can run them on small synthetic packages and see each rule fail.
"""

from __future__ import annotations

import ast
import re
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "posviz"
#: Top to bottom: a module may import modules of its own package or of a package further down.
LAYERS = ("cli", "report", "explorer", "plots", "series", "reference", "measures", "finetuning", "extrapolation", "observe", "train", "tasks",
          "scoring", "extract", "models", "toeplitz", "positional_scores", "schemes", "read", "hub", "util", "errors")
#: Modules exempt as importers: the lazy public API and ``python -m posviz``.
EXEMPT = frozenset({"posviz", "posviz.__main__"})
MAX_MODULE_LINES = 500
MAX_FUNCTION_LINES = 100
MISSING_DOC = "DESIGN" + ".md"  # spelled in two parts so that this file does not mention it


# ---- the checkers ------------------------------------------------------------
def modules(package: Path) -> dict[str, Path]:
    """``{dotted module name: file}`` of every module under ``package`` (a package's name maps to its ``__init__.py``)."""
    out = {}
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package.parent).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _imported_names(module: str, path: Path, node: ast.AST) -> list[str]:
    """Dotted names an import statement (or ``importlib.import_module("...")`` call) may load."""
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        if node.level:
            package = module.split(".") if path.name == "__init__.py" else module.split(".")[:-1]
            base = package[: len(package) - node.level + 1]
            target = ".".join(base + ([node.module] if node.module else []))
        else:
            target = node.module or ""
        names = [a.name for a in node.names if a.name != "__version__"]  # package metadata, not a dependency
        return [f"{target}.{a}" for a in names] + [target] if names else []
    if (isinstance(node, ast.Call) and isinstance(node.func, (ast.Attribute, ast.Name))
            and (node.func.attr if isinstance(node.func, ast.Attribute) else node.func.id) == "import_module"
            and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
        return [node.args[0].value]
    return []


def import_graph(package: Path) -> dict[str, dict[str, int]]:
    """``{module: {imported module: first line}}``, counting every import anywhere in the file.

    ``from a import b`` counts as importing the module ``a.b`` when there is one, else ``a``;
    an unknown dotted name counts as its longest known prefix.
    """
    mods = modules(package)
    graph: dict[str, dict[str, int]] = {}
    for name, path in mods.items():
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            names = _imported_names(name, path, node)
            if isinstance(node, ast.ImportFrom) and names:
                # ``from a import b``: the submodule if it exists, else ``a`` itself (listed last).
                found = [n for n in names[:-1] if n in mods]
                names = found if len(found) == len(names) - 1 else found + [names[-1]]
            for target in names:
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    edges.setdefault(target, node.lineno)
        graph[name] = dict(sorted(edges.items()))
    return graph


def _strongly_connected(graph: dict[str, dict[str, int]]) -> list[list[str]]:
    """Tarjan's components (iterative), each with more than one module."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(graph[start]))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, children = work[-1]
            w = next(children, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(graph.get(w, {}))))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    comp.append(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    found.append(sorted(comp))
    return sorted(found)


def _one_cycle(graph: dict[str, dict[str, int]], component: list[str]) -> list[str]:
    """A shortest cycle through the first module of a component: ``[a, b, ..., a]``."""
    members, start = set(component), component[0]
    previous: dict[str, str] = {}
    frontier = [start]
    while frontier:
        nxt = []
        for v in frontier:
            for w in graph[v]:
                if w == start:
                    path = [v]
                    while path[-1] != start:
                        path.append(previous[path[-1]])
                    return [start, *reversed(path[:-1]), start]
                if w in members and w not in previous:
                    previous[w] = v
                    nxt.append(w)
        frontier = nxt
    raise AssertionError(f"no cycle through {start}")  # unreachable for a strongly connected component


def import_cycles(package: Path) -> list[str]:
    """One line per cycle of the import graph: the modules and a cycle through them, with lines."""
    graph, mods = import_graph(package), modules(package)
    out = []
    for comp in _strongly_connected(graph):
        cycle = _one_cycle(graph, comp)
        steps = ", ".join(f"{mods[a].relative_to(package.parent)}:{graph[a][b]} imports {b}" for a, b in zip(cycle[:-1], cycle[1:], strict=True))
        out.append(f"cycle among {', '.join(comp)}: {' -> '.join(cycle)} ({steps})")
    return out


def layer_of(module: str) -> str | None:
    """The layer of a module (its first component after ``posviz``), or ``None`` if it is in none."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in LAYERS else None


def layer_violations(package: Path) -> list[str]:
    """Modules in no layer, and imports that point up the layer order or at the public API."""
    graph, mods = import_graph(package), modules(package)
    out = []
    for module, edges in graph.items():
        if module in EXEMPT:
            continue
        here = layer_of(module)
        if here is None:
            out.append(f"{module} ({mods[module].relative_to(package.parent)}) is in no layer of {LAYERS}")
            continue
        for target, line in edges.items():
            where = f"{mods[module].relative_to(package.parent)}:{line}"
            there = layer_of(target)
            if target in EXEMPT:
                out.append(f"{where}: {module} imports {target}, the public API (import the defining module)")
            elif there is not None and LAYERS.index(there) < LAYERS.index(here):
                out.append(f"{where}: {module} ({here}) imports {target} ({there}), which is above it")
    return out


def long_modules(package: Path, limit: int = MAX_MODULE_LINES) -> list[str]:
    """Modules with more than ``limit`` lines."""
    out = []
    for name, path in modules(package).items():
        n = len(path.read_text(encoding="utf-8").splitlines())
        if n > limit:
            out.append(f"{name} ({path.relative_to(package.parent)}): {n} lines > {limit}")
    return out


def long_functions(package: Path, limit: int = MAX_FUNCTION_LINES) -> list[str]:
    """Functions and methods (nested ones too) whose ``def`` spans more than ``limit`` lines."""
    out = []

    def visit(node: ast.AST, prefix: str, module: str, path: Path) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                qual = f"{prefix}{child.name}"
                if not isinstance(child, ast.ClassDef):
                    n = child.end_lineno - child.lineno + 1
                    if n > limit:
                        out.append(f"{module}.{qual} ({path.relative_to(package.parent)}:{child.lineno}): {n} lines > {limit}")
                visit(child, f"{qual}.", module, path)
            else:
                visit(child, prefix, module, path)

    for name, path in modules(package).items():
        visit(ast.parse(path.read_text(encoding="utf-8"), str(path)), "", name, path)
    return out


def missing_doc_mentions(paths: list[Path], root: Path) -> list[str]:
    """Lines (docstrings, comments, any text) of ``paths`` that cite the design file absent from the repository."""
    out = []
    for path in paths:
        for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if MISSING_DOC in line:
                out.append(f"{path.relative_to(root)}:{i}: {line.strip()}")
    return out


def _repository_texts() -> list[Path]:
    found = [*PACKAGE.rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py"),
             *(ROOT / "scripts").rglob("*.py"), *ROOT.glob("*.md"), *(ROOT / "docs").rglob("*.md")]
    return sorted(p for p in found if p.is_file())


def _report(problems: list[str], what: str) -> str:
    return f"{len(problems)} {what}:\n  " + "\n  ".join(problems)


# ---- the rules, on posviz itself ---------------------------------------------
def test_no_import_cycle():
    problems = import_cycles(PACKAGE)
    assert not problems, _report(problems, "import cycles (lazy imports count)")


def test_imports_point_down_the_layers():
    problems = layer_violations(PACKAGE)
    assert not problems, _report(problems, f"imports against the layer order {' > '.join(LAYERS)}")


def test_no_module_over_the_line_limit():
    problems = long_modules(PACKAGE)
    assert not problems, _report(problems, "modules too long")


def test_no_function_over_the_line_limit():
    problems = long_functions(PACKAGE)
    assert not problems, _report(problems, "functions too long")


def test_no_reference_to_a_missing_design_file():
    assert not (ROOT / MISSING_DOC).exists()  # if it is ever added, this rule can go
    problems = missing_doc_mentions(_repository_texts(), ROOT)
    assert not problems, _report(problems, f"mentions of {MISSING_DOC}, which is not in the repository (cite ARCHITECTURE.md)")



def test_architecture_module_map_lists_every_module():
    """ARCHITECTURE.md's module map names every module, so a newcomer finds each file there; a measure in a folder of its
    own (``measures/NAME/``) is one line of the map for them all (adding a measure is its folder and its entry point)."""
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    modules = [p.relative_to(PACKAGE).as_posix() for p in sorted(PACKAGE.rglob("*.py"))]
    assert "measures/NAME/" in text
    missing = [m for m in modules if not m.endswith("__init__.py") and m not in text
               and not re.fullmatch(r"measures/[a-z0-9_]+/[a-z0-9_]+\.py", m)]
    assert len(modules) > 50
    assert not missing, "modules missing from ARCHITECTURE.md's module map: " + ", ".join(missing)

def test_the_checkers_see_the_real_package():
    """Guards against a checker that passes because it sees nothing."""
    graph = import_graph(PACKAGE)
    assert len(graph) > 30 and "posviz.cli.app" in graph and "posviz.errors" in graph
    assert sum(len(e) for e in graph.values()) > 50


# ---- the checkers, on synthetic packages -------------------------------------
def _tree(tmp_path: Path, files: dict[str, str]) -> Path:
    """A package ``posviz`` under ``tmp_path`` with these files (``__init__.py`` added to every folder)."""
    package = tmp_path / "posviz"
    for rel, text in {"__init__.py": "", **files}.items():
        path = package / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        for parent in path.relative_to(package).parents:
            (package / parent / "__init__.py").touch()
        path.write_text(textwrap.dedent(text), encoding="utf-8")
    return package


def test_cycle_through_a_lazy_import_is_found(tmp_path):
    package = _tree(tmp_path, {
        "toeplitz/core.py": "from posviz.positional_scores import Stack\n",
        "positional_scores.py": "def f():\n    from posviz.toeplitz import core\n    return core\n",
        "read/sources.py": "import posviz.errors\n",
        "errors.py": "",
    })
    problems = import_cycles(package)
    assert len(problems) == 1
    assert problems[0].startswith("cycle among posviz.positional_scores, posviz.toeplitz.core: ")
    assert "posviz/positional_scores.py:2 imports posviz.toeplitz.core" in problems[0]
    assert "posviz/toeplitz/core.py:1 imports posviz.positional_scores" in problems[0]


def test_relative_and_type_checking_imports_count(tmp_path):
    package = _tree(tmp_path, {
        "extract/absolute.py": "from . import relative\n",
        "extract/relative.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .absolute import Heads\n",
        "report/context.py": "from ..report import runs\n",
        "report/runs.py": "import importlib\ndef g():\n    return importlib.import_module('posviz.report.context')\n",
    })
    problems = import_cycles(package)
    assert len(problems) == 2
    assert "posviz.extract.absolute, posviz.extract.relative" in problems[0]
    assert "posviz.report.context, posviz.report.runs" in problems[1]


def test_a_dag_has_no_cycle(tmp_path):
    package = _tree(tmp_path, {
        "cli/app.py": "from posviz.cli import heads\nfrom posviz.toeplitz.core import score\n",
        "cli/heads.py": "def f():\n    from posviz.toeplitz import core\n",
        "toeplitz/core.py": "from posviz.errors import E\n",
        "errors.py": "",
    })
    assert import_cycles(package) == []
    assert import_graph(package)["posviz.cli.app"] == {"posviz.cli.heads": 1, "posviz.toeplitz.core": 2}


def test_upward_imports_and_modules_outside_the_layers_are_named(tmp_path):
    package = _tree(tmp_path, {
        "__main__.py": "from posviz.cli.app import main\n",
        "cli/app.py": "from posviz.scoring import batch\nfrom posviz.cli import common\n",
        "cli/common.py": "",
        "scoring/batch.py": "def go():\n    from posviz.cli.common import progress\n    import posviz.util.atomic\n",
        "util/atomic.py": "from posviz import errors\nfrom posviz import __version__\n",
        "errors.py": "",
        "trend.py": "",
        "report/sections/heads.py": "from posviz import PositionalScores\n",
    })
    problems = layer_violations(package)
    assert problems == [
        "posviz/report/sections/heads.py:1: posviz.report.sections.heads imports posviz, the public API (import the defining module)",
        "posviz/scoring/batch.py:2: posviz.scoring.batch (scoring) imports posviz.cli.common (cli), which is above it",
        "posviz.trend (posviz/trend.py) is in no layer of " + str(LAYERS),
    ]


def test_long_modules_and_functions_are_named(tmp_path):
    body = "\n".join(f"    x{i} = {i}" for i in range(MAX_FUNCTION_LINES - 1))
    package = _tree(tmp_path, {
        "toeplitz/core.py": f"def ok():\n{body}\n\n\nclass C:\n    def long(self):\n{textwrap.indent(body, '    ')}\n        return 1\n",
        "train/loop.py": "\n" * MAX_MODULE_LINES + "x = 1\n",
        "train/log.py": "\n" * (MAX_MODULE_LINES - 1) + "x = 1\n",
    })
    assert long_modules(package) == [f"posviz.train.loop (posviz/train/loop.py): {MAX_MODULE_LINES + 1} lines > {MAX_MODULE_LINES}"]
    assert long_functions(package) == [
        f"posviz.toeplitz.core.C.long (posviz/toeplitz/core.py:{MAX_FUNCTION_LINES + 4}): {MAX_FUNCTION_LINES + 1} lines > {MAX_FUNCTION_LINES}"
    ]


def test_nested_functions_are_measured_on_their_own(tmp_path):
    body = "\n".join(f"        y{i} = {i}" for i in range(MAX_FUNCTION_LINES + 1))
    package = _tree(tmp_path, {"plots/heads.py": f"def outer():\n    def inner():\n{body}\n    return inner\n"})
    names = [p.split(" ")[0] for p in long_functions(package)]
    assert names == ["posviz.plots.heads.outer", "posviz.plots.heads.outer.inner"]


def test_mentions_of_the_missing_design_file_are_named(tmp_path):
    package = _tree(tmp_path, {
        "toeplitz/core.py": f'"""Scores.\n\nSee {MISSING_DOC}.\n"""\n# ({MISSING_DOC}: definitions)\nx = 1\n',
        "toeplitz/null.py": '"""See ARCHITECTURE.md."""\n',
    })
    problems = missing_doc_mentions(sorted(package.rglob("*.py")), tmp_path)
    assert problems == [f"posviz/toeplitz/core.py:3: See {MISSING_DOC}.", f"posviz/toeplitz/core.py:5: # ({MISSING_DOC}: definitions)"]


@pytest.mark.parametrize("module, layer", [("posviz.cli.app", "cli"), ("posviz.positional_scores", "positional_scores"),
                                           ("posviz.errors", "errors"), ("posviz.extract.registry", "extract"),
                                           ("posviz", None), ("posviz.trend.fit", None)])
def test_layer_of(module, layer):
    assert layer_of(module) == layer


def test_public_api_has_one_style():
    """Every public name of ``posviz`` is a plain function, class or constant defined in a module below it: no
    package made callable by swapping its module class, and importing any subpackage never replaces a public name."""
    import importlib
    import types

    import posviz

    for sub in ("explorer", "finetuning", "extrapolation", "series", "scoring", "hub", "reference"):
        importlib.import_module(f"posviz.{sub}")  # importing a subpackage sets posviz.<sub>, never a public name
    for name in posviz.__all__:
        if name == "__version__":
            continue
        value = getattr(posviz, name)
        assert not isinstance(value, types.ModuleType), f"posviz.{name} is a module"
        assert value.__module__.startswith("posviz."), (name, value.__module__)
    for name in ("explore", "finetune", "extrapolate", "trajectory", "attention", "hidden", "observe_text"):
        assert isinstance(getattr(posviz, name), types.FunctionType), name
    for path in PACKAGE.rglob("__init__.py"):
        assert "__class__ = " not in path.read_text(encoding="utf-8"), f"{path}: a package made callable"
