"""No import circles in autotune/ or benchmarks/ (a module-level or a function-level import alike): the layering
cli -> study -> runners/executors -> estimate -> ... holds only while nothing imports back up."""

from __future__ import annotations

import ast
from pathlib import Path

from tests.conftest import REPO


def module_name(root: Path, f: Path) -> str:
    parts = list(f.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def import_graph(root: Path, packages: tuple[str, ...]) -> dict[str, set[str]]:
    """Module -> the modules of `packages` it imports (`from pkg import mod` counts as importing pkg.mod)."""
    files = {module_name(root, f): f for pkg in packages for f in (root / pkg).rglob("*.py")}
    graph: dict[str, set[str]] = {}
    for name, f in files.items():
        here = name.split(".") if f.name == "__init__.py" else name.split(".")[:-1]
        deps: set[str] = set()
        for node in ast.walk(ast.parse(f.read_text(), str(f))):
            if isinstance(node, ast.Import):
                deps.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = ".".join(here[: len(here) - node.level + 1] + [node.module or ""]).strip(".") \
                    if node.level else node.module or ""
                deps.update(f"{base}.{a.name}" if f"{base}.{a.name}" in files else base for a in node.names)
        graph[name] = {d for d in deps if d in files and d != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = len(index)
                    stack.append(w)
                    on_stack.add(w)
                    work.append((w, iter(sorted(graph[w]))))
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
                    out.append(sorted(comp))
    return out


def test_no_import_cycles_in_autotune_and_benchmarks() -> None:
    graph = import_graph(REPO, ("autotune", "benchmarks"))
    assert len(graph) > 80 and "autotune.estimate.batching" in graph["autotune.estimate.memory"]
    assert cycles(graph) == []


def test_the_detector_finds_the_circles_this_repository_had(tmp_path: Path) -> None:
    """The three shapes issue 17 found: a package's module importing its siblings back (function-level), a chain
    through a package __init__, and two scripts importing each other; relative imports too."""
    files = {
        "p/__init__.py": "",
        "p/data.py": "def forget():\n    from p import history\n",
        "p/history.py": "from p.data import forget\n",
        "p/ok.py": "from . import data\n",
        "q/__init__.py": "from q.runner import X\n",
        "q/runner.py": "def f():\n    from q.executor import NS\n",
        "q/executor.py": "from q import X\n",
        "b/__init__.py": "",
        "b/fit.py": "def fit():\n    from b.err import mape\n",
        "b/err.py": "from .fit import fit\n",
    }
    for path, text in files.items():
        (tmp_path / path).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / path).write_text(text)
    graph = import_graph(tmp_path, ("p", "q", "b"))
    assert graph["p.ok"] == {"p.data"}
    assert sorted(cycles(graph)) == [["b.err", "b.fit"], ["p.data", "p.history"], ["q", "q.executor", "q.runner"]]
