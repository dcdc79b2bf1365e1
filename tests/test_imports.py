"""No import circles in autotune/ or benchmarks/ (a module-level or a function-level import alike), and the house's
arrows run one way: each of autotune's packages imports only the packages below it (LAYERS, written once here), from
the CLI down to the values. And the house stays readable: few flat modules, small packages, no module over 600 lines."""

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


# autotune's packages and flat modules, bottom to top: a module may import its own package and the layers below its
# own, never a layer above nor another package of its own layer. `autotune` is the package's __init__ (its version).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("autotune", "model", "cluster", "units", "faults"),  # the flat values: no autotune imports
    ("verl",),  # verl itself: config keys, metrics, logs, launch scripts, runs read back, shims, doctor
    ("candidate",),  # one setting of every tuned knob
    ("job",),  # the user's verl overrides (its baseline is a candidate)
    ("estimate",),  # pure predictions and the static rules; the safer near-equals
    ("store",),  # autotune's tables beside Optuna's, the live tuners, database access
    ("search",),  # space, setup, ranking, plan, learning, samplers
    ("results",),  # labels, report, timeline, noise, export
    ("runners",),  # one runner per backend (mcore/: the Megatron-core probe), stopping
    ("executors",),  # place runners on local GPUs or a Ray cluster
    ("study",),  # the Tuner, recovery, the live line
    ("profile", "dashboard"),
    ("cli",),
    ("__main__",),
)
MAX_FLAT = 8  # modules directly in autotune/ (__init__ and __main__ included)
MAX_PER_PACKAGE = 12  # modules and sub-packages at one level of a package
MAX_LINES = 600


def unit(module: str) -> str:
    """The entry of LAYERS a module of autotune belongs to: its top package or flat module."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def layer_violations(graph: dict[str, set[str]], layers: tuple[tuple[str, ...], ...]) -> list[str]:
    rank = {u: i for i, layer in enumerate(layers) for u in layer}
    out = [f"{m}: its package is in no layer" for m in sorted(graph) if unit(m) not in rank]
    for m in sorted(graph):
        for d in sorted(graph[m]):
            if unit(m) in rank and unit(d) in rank and unit(d) != unit(m) and rank[unit(d)] >= rank[unit(m)]:
                out.append(f"{m} imports {d}")
    return out


def test_autotune_imports_only_downward() -> None:
    graph = import_graph(REPO, ("autotune",))
    assert layer_violations(graph, LAYERS) == []


def test_the_layer_check_finds_an_upward_and_a_sideways_import() -> None:
    graph = {"autotune.model": {"autotune.job"}, "autotune.job": {"autotune.model"},
             "autotune.profile.runs": {"autotune.dashboard.data", "autotune.profile.kinds"},
             "autotune.profile.kinds": set(), "autotune.dashboard.data": set(), "autotune.new": set()}
    layers = (("model",), ("job",), ("profile", "dashboard"))
    assert layer_violations(graph, layers) == ["autotune.new: its package is in no layer",
                                               "autotune.model imports autotune.job",
                                               "autotune.profile.runs imports autotune.dashboard.data"]


def test_the_house_is_small_and_says_what_each_package_owns() -> None:
    root = REPO / "autotune"
    assert len(list(root.glob("*.py"))) <= MAX_FLAT
    packages = [d for d in root.rglob("*") if d.is_dir() and (d / "__init__.py").is_file()]
    assert {unit(module_name(REPO, d / "__init__.py")) for d in packages if d.parent == root} \
        == {u for layer in LAYERS for u in layer} - {"autotune", "__main__"} - {f.stem for f in root.glob("*.py")}
    for d in packages:
        entries = [p for p in d.iterdir() if p.suffix == ".py" or (p / "__init__.py").is_file()]
        assert len(entries) <= MAX_PER_PACKAGE, d
        doc = ast.get_docstring(ast.parse((d / "__init__.py").read_text())) or ""
        assert "May import" in doc or d.parent != root, f"{d}/__init__.py: say what it owns and may import"
    lines = {str(f.relative_to(REPO)): len(f.read_text().splitlines()) for f in root.rglob("*.py")}
    assert {f: n for f, n in lines.items() if n > MAX_LINES} == {}


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
