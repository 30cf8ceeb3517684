"""The stages hand off through artifacts, never back: each stage's code imports only stages before it.

ARCHITECTURE.md draws the same graph. Imports are read from the source (module level and inside
functions), so a lazy import is an edge too.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.unit.test_imports import imported_names, module_name

PKG = Path(__file__).resolve().parents[2] / "gpucluster"

# Stage of each part of the package, in the order the chain runs. Shared helpers (errors, runs,
# hostkeys, parsers, paths, render, mitogen, the typed inventory contract) belong to no stage.
STAGE_OF = {
    "gpucluster.spec": 1,
    "gpucluster.outputs": 2,
    "gpucluster.lab": 2,
    "gpucluster.stacks": 2,
    "gpucluster.plan": 2,
    "gpucluster.cloud": 2,
    "gpucluster.inventory": 3,
    "gpucluster.converge": 4,
    "gpucluster.verify": 5,
    "gpucluster.conformance": 5,
}
STAGES = {1: "spec", 2: "provision", 3: "inventory", 4: "converge", 5: "verify"}


def _stage(module: str) -> int | None:
    best = None
    for prefix, stage in STAGE_OF.items():
        if (module == prefix or module.startswith(prefix + ".")) and (best is None or len(prefix) > len(best[0])):
            best = (prefix, stage)
    return None if best is None else best[1]


def _module_name(path: Path) -> str:
    return module_name(path, PKG)


def _imports(path: Path) -> set[str]:
    return {m for m in imported_names(path, PKG) if m.startswith("gpucluster")}


def _back_edges() -> list[str]:
    edges = []
    for path in sorted(PKG.rglob("*.py")):
        if "cli" in path.relative_to(PKG).parts or path.name == "up.py":
            continue  # the command line and `up` drive every stage: they sit above the chain
        src = _stage(_module_name(path))
        if src is None:
            continue
        for imported in sorted(_imports(path)):
            dst = _stage(imported)
            if dst is not None and dst > src:
                edges.append(f"{_module_name(path)} ({STAGES[src]}) imports {imported} ({STAGES[dst]})")
    return edges


def test_no_stage_imports_a_later_stage() -> None:
    assert _back_edges() == []


def test_the_graph_check_finds_a_back_edge(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "gpucluster"
    (fake / "spec").mkdir(parents=True)
    (fake / "spec" / "bad.py").write_text("def f():\n    from gpucluster.converge import converge\n")
    monkeypatch.setattr(sys.modules[__name__], "PKG", fake)
    assert _back_edges() == ["gpucluster.spec.bad (spec) imports gpucluster.converge (converge)",
                             "gpucluster.spec.bad (spec) imports gpucluster.converge.converge (converge)"]


def test_converge_and_verify_read_no_lab_layout() -> None:
    # converge and verify read the inventory: nothing of the lab's own layout.
    for name in ("converge.py", "verify.py"):
        assert not [m for m in _imports(PKG / name) if m.startswith("gpucluster.lab")], name
