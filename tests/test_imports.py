"""Imports run one way: the library never imports the classroom tooling, and no module
imports itself back through others (no circles).

The library (``comm``, ``launch``, ``dp``, ``ddp``, ``nn``, ``trace``, ``zero``, ``fsdp``,
``identity``) sits below the ``python -m minidp ...`` tooling (``bench``, ``demo``,
``diagrams``, ``exercise``, ``classroom``, ``__main__``), so a learner can read a library
package without meeting a benchmark, and the tooling can change without touching what it
measures. The
graph is read from the source with ``ast`` (imports inside functions count too), not from
``sys.modules``, so a lazy import cannot hide a back edge.

Test: ``pytest tests/test_imports.py``
"""

from __future__ import annotations

import ast
import pathlib

import minidp

# minidp.<these> and below
TOOLING = ("bench", "classroom", "demo", "diagrams", "exercise", "__main__")


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


def is_tooling(module: str) -> bool:
    parts = module.split(".")
    return len(parts) > 1 and parts[1] in TOOLING


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """Every ``library -> tooling`` edge, as ``"a -> b"``."""
    return [
        f"{m} -> {t}"
        for m, targets in sorted(graph.items())
        if not is_tooling(m)
        for t in sorted(targets)
        if is_tooling(t)
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


def test_the_library_never_imports_the_classroom_tooling():
    graph = import_graph(PACKAGE)
    assert len(graph) > 50 and "minidp.comm.ring" in graph  # the scan saw the real package
    assert upward_imports(graph) == [], (
        "library modules import classroom tooling (move the shared piece into the library)"
    )


def test_no_module_imports_itself_back():
    cycle = find_cycle(import_graph(PACKAGE))
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_the_checks_catch_a_back_edge(tmp_path):
    """Mutation: a library module that imports a benchmark, which imports it back (once
    with an absolute import inside a function, once with a relative one)."""
    root = tmp_path / "minidp"
    for package in ("comm", "bench"):
        (root / package).mkdir(parents=True)
        (root / package / "__init__.py").write_text("")
    (root / "__init__.py").write_text("")
    (root / "comm" / "ring.py").write_text("def f():\n    from minidp.bench import timing\n")
    (root / "bench" / "timing.py").write_text("from minidp.comm import ring\n")
    graph = import_graph(root)
    assert upward_imports(graph) == ["minidp.comm.ring -> minidp.bench.timing"]
    assert find_cycle(graph) == ["minidp.bench.timing", "minidp.comm.ring", "minidp.bench.timing"]
    (root / "comm" / "ring.py").write_text("import torch\n")  # the fix: no back edge
    graph = import_graph(root)
    assert upward_imports(graph) == [] and find_cycle(graph) is None
    (root / "comm" / "ops.py").write_text("from ..bench.timing import best\n")
    assert upward_imports(import_graph(root)) == ["minidp.comm.ops -> minidp.bench.timing"]
