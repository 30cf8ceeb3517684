"""The package's import graph has no cycle, and a module's name means one thing.

Imports are read from the source with ast, wherever they are: at module level, inside functions
(a lazy import that dodges a cycle at import time is still a cycle in the design) and under
``if TYPE_CHECKING:``. An edge goes to the deepest module of the package a name resolves to
(``from gpucluster.conformance import checks`` is an edge to ``gpucluster.conformance.checks``).
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "gpucluster"

# Cycles known and owned elsewhere, each to be broken where it is owned; the test fails when one of
# them is gone (take it off) as well as on any other cycle.
KNOWN: tuple[frozenset[str], ...] = ()


def module_name(path: Path, root: Path) -> str:
    """The dotted name of a file of the package whose folder is ``root``."""
    parts = list(path.relative_to(root.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_names(path: Path, root: Path) -> set[str]:
    """Every dotted name a file imports, anywhere in it: ``from a.b import c`` gives ``a.b`` and
    ``a.b.c`` (c may be a module or a name), relative imports made absolute."""
    module = module_name(path, root)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                source = ".".join(base + ([node.module] if node.module else []))
            else:
                source = node.module or ""
            out.add(source)
            out.update(f"{source}.{a.name}" for a in node.names)
    return out


def import_graph(root: Path) -> dict[str, set[str]]:
    """module -> the modules of the package it imports: each name imported, taken to the deepest
    module of the package it falls in (``from x import name`` imports x itself only when name is
    not a module, so x is an edge only then)."""
    paths = {module_name(p, root): p for p in sorted(root.rglob("*.py"))}

    def resolve(name: str) -> str | None:
        while name and name not in paths:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for module, path in paths.items():
        names = imported_names(path, root)
        # ``from a import b``: both a and a.b are named; a counts only when a.b is not a module of its own.
        deepest = {n for n in names if not any(o.startswith(n + ".") and o in paths for o in names)}
        graph[module] = {m for m in map(resolve, deepest) if m is not None and m != module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.add(w)
                if w == v:
                    break
            if len(component) > 1:
                out.append(frozenset(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_no_import_cycle_in_the_package() -> None:
    found = cycles(import_graph(PKG))
    new = [sorted(c) for c in found if c not in KNOWN]
    assert new == [], f"import cycles: {new}"
    gone = [sorted(c) for c in KNOWN if c not in found]
    assert gone == [], f"no longer a cycle, take it off KNOWN: {gone}"


def test_the_walk_finds_a_cycle_through_a_lazy_and_a_type_checking_import(tmp_path: Path) -> None:
    fake = tmp_path / "gpucluster"
    (fake / "conformance").mkdir(parents=True)
    (fake / "__init__.py").write_text("")
    (fake / "conformance" / "__init__.py").write_text("")
    (fake / "conformance" / "a.py").write_text("def f():\n    from gpucluster.conformance import b\n")
    (fake / "conformance" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .c import Thing\n")
    (fake / "conformance" / "c.py").write_text("import gpucluster.conformance.a\n")
    (fake / "conformance" / "d.py").write_text("from gpucluster.conformance.a import f\n")
    assert cycles(import_graph(fake)) == [frozenset({f"gpucluster.conformance.{m}" for m in "abc"})]


def test_runners_and_parsers_do_not_share_a_module_name() -> None:
    # gpucluster.parsers.nccl_tests reads nccl-tests' output; the suite's module that runs it is
    # gpucluster.conformance.run_nccl_tests: one name, one meaning. Modules of subpackages count
    # (gpucluster.parsers.nvidia_smi.topo), and so does a subpackage's own name.
    def names(where: str) -> set[str]:
        found = {p.parent.name if p.name == "__init__.py" else p.stem for p in (PKG / where).rglob("*.py")}
        return found - {where}

    assert "topo" in names("parsers")
    assert names("conformance") & names("parsers") == set()
