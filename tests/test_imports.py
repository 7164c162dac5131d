"""Three shelves, and imports run one way: engine <- book <- tools; no circles.

``ls minidp/`` shows them:

* the **engine** — the torch-faithful library: ``comm``, ``launch``, ``dp``, ``ddp``,
  ``nn``, ``trace``, ``zero``, ``fsdp``, ``identity``;
* the **book** — ``textbook/``: each idea as one short page, built on the engine's
  point-to-point layer;
* the **tools** — ``tools/`` (bench, demo, diagrams, classroom, exercise, planner) and
  ``__main__``: the ``python -m minidp ...`` commands.

The engine imports neither the book nor the tools, the book does not import the tools, so
a learner can read a library package without meeting a benchmark, and the tooling can
change without touching what it measures. The graph is read from the source with ``ast``
(imports inside functions count too), not from ``sys.modules``, so a lazy import cannot
hide a back edge.

Test: ``pytest tests/test_imports.py``
"""

from __future__ import annotations

import ast
import pathlib

import minidp

# minidp.<these> and below: the shelf each belongs to, lowest first
SHELVES = {"textbook": 1, "tools": 2, "__main__": 2}  # anything else: 0, engine
NAMES = ("engine", "book", "tools")


def import_graph(package_dir: pathlib.Path) -> dict[str, set[str]]:
    """``{module: modules of this package it imports}``, e.g. ``minidp.comm.ring``.

    ``from minidp.comm import agree`` imports the module ``minidp.comm.agree`` (not the
    package's ``__init__``), as Python resolves it.
    """
    base = package_dir.parent
    files = {
        ".".join(f.relative_to(base).with_suffix("").parts).removesuffix(".__init__"): f
        for f in sorted(package_dir.rglob("*.py"))
    }
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                targets.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                source = node.module or ""
                if node.level:  # relative: "from ..bench import x" seen from its package
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(parts + ([node.module] if node.module else []))
                for alias in node.names:
                    child = f"{source}.{alias.name}"
                    targets.add(child if child in files else source)
        graph[module] = {t for t in targets if t in files and t != module}
    return graph


def shelf(module: str) -> int:
    """0 for the engine, 1 for the book, 2 for the tools (``minidp`` itself: the engine)."""
    parts = module.split(".")
    return SHELVES.get(parts[1], 0) if len(parts) > 1 else 0


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every edge to a higher shelf (engine -> book or tools, book -> tools), ``"a -> b"``."""
    return [
        f"{m} -> {t}"
        for m, targets in sorted(graph.items())
        for t in sorted(targets)
        if shelf(t) > shelf(m)
    ]


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as ``[a, b, ..., a]``, or ``None`` (depth-first search)."""
    state: dict[str, int] = {}  # 1: on the current path, 2: finished

    def visit(module: str, path: list[str]) -> list[str] | None:
        state[module] = 1
        path.append(module)
        for target in sorted(graph.get(module, ())):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (cycle := visit(target, path)):
                return cycle
        path.pop()
        state[module] = 2
        return None

    for module in sorted(graph):
        if module not in state and (cycle := visit(module, [])):
            return cycle
    return None


PACKAGE = pathlib.Path(minidp.__file__).parent


def test_imports_run_down_the_shelves_only():
    graph = import_graph(PACKAGE)
    assert len(graph) > 50 and "minidp.comm.ring" in graph  # the scan saw the real package
    assert upward_imports(graph) == [], (
        "the engine imports the book or the tools, or the book the tools (move the shared "
        "piece down a shelf)"
    )


def test_ls_minidp_shows_book_engine_and_tools():
    """Every top-level entry is on a known shelf, and each shelf has members."""
    entries = {p.stem for p in PACKAGE.iterdir() if p.name != "__pycache__"}
    by_shelf = {name: sorted(e for e in entries if shelf(f"minidp.{e}") == i) for i, name in
                enumerate(NAMES)}  # fmt: skip
    assert by_shelf["book"] == ["textbook"]
    assert by_shelf["tools"] == ["__main__", "tools"]
    assert {"comm", "ddp", "fsdp", "zero"} <= set(by_shelf["engine"])


def test_no_module_imports_itself_back():
    cycle = find_cycle(import_graph(PACKAGE))
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_the_checks_catch_a_back_edge(tmp_path):
    """Mutation: an engine module that imports a benchmark, which imports it back (once
    with an absolute import inside a function, once with a relative one); a book page
    that imports a tool; the engine importing the book."""
    root = tmp_path / "minidp"
    for package in ("comm", "tools", "tools/bench", "textbook"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "comm" / "ring.py").write_text("def f():\n    from minidp.tools.bench import timing\n")
    (root / "tools" / "bench" / "timing.py").write_text("from minidp.comm import ring\n")
    graph = import_graph(root)
    assert upward_imports(graph) == ["minidp.comm.ring -> minidp.tools.bench.timing"]
    assert find_cycle(graph) == [
        "minidp.comm.ring",
        "minidp.tools.bench.timing",
        "minidp.comm.ring",
    ]
    (root / "comm" / "ring.py").write_text("import torch\n")  # the fix: no back edge
    graph = import_graph(root)
    assert upward_imports(graph) == [] and find_cycle(graph) is None
    (root / "comm" / "ops.py").write_text("from ..tools.bench.timing import best\n")
    assert upward_imports(import_graph(root)) == ["minidp.comm.ops -> minidp.tools.bench.timing"]
    (root / "comm" / "ops.py").write_text("import torch\n")
    (root / "textbook" / "ring.py").write_text("from minidp.tools.bench import timing\n")
    (root / "comm" / "direct.py").write_text("from minidp.textbook import ring\n")
    assert upward_imports(import_graph(root)) == [
        "minidp.comm.direct -> minidp.textbook.ring",
        "minidp.textbook.ring -> minidp.tools.bench.timing",
    ]


# the tools must stay smaller than what they teach: lines of Python, every file counted
BUDGETS = {"tools": 10_000, "tools/exercise": 3_500}


def _lines(folder: pathlib.Path) -> int:
    return sum(len(p.read_text().splitlines()) for p in folder.rglob("*.py"))


def test_the_tools_and_the_grader_stay_within_their_line_budgets():
    root = pathlib.Path(minidp.__file__).parent
    sizes = {name: _lines(root / name) for name in BUDGETS}
    over = [f"minidp/{n}: {sizes[n]} lines, budget {b}" for n, b in BUDGETS.items() if sizes[n] > b]
    assert not over, "; ".join(over) + " — cut before adding: every line is one a reader reads"
