"""Every conformance test has a registered check ID and the check's MUST statement as its docstring."""

from __future__ import annotations

import ast
from pathlib import Path

from gpucluster.conformance import checks
from gpucluster.spec.facts import ROLES

SUITE = Path(__file__).resolve().parents[3] / "tests" / "conformance"


def _tests() -> list[tuple[str, str, str | None, list[str]]]:
    out = []
    for path in sorted(SUITE.rglob("test_*.py")):
        tree = ast.parse(path.read_text())
        module_marks = []
        for node in tree.body:
            if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                    for t in node.targets):
                module_marks.append(ast.unparse(node.value))
        for node in tree.body:
            if isinstance(node, ast.FunctionDef) and node.name.startswith("test_"):
                ids = [d.args[0].value for d in node.decorator_list
                       if isinstance(d, ast.Call) and ast.unparse(d.func) == "pytest.mark.check"]
                marks = module_marks + [ast.unparse(d) for d in node.decorator_list]
                name = f"{path.relative_to(SUITE)}::{node.name}"
                out.append((name, ids[0] if ids else "", ast.get_docstring(node), marks))
    return out


def test_every_test_names_a_registered_check_with_its_must_statement():
    tests = _tests()
    assert len(tests) >= 25
    for name, cid, doc, _ in tests:
        assert cid in checks.CHECKS, f"{name}: check id {cid!r} not registered"
        assert doc == checks.CHECKS[cid].must, f"{name}: docstring differs from {cid}'s MUST statement"
        assert " MUST" in doc


def test_every_registered_check_is_implemented_exactly_once():
    # A derived check (the fleet comparison) is the controller's, from the other checks' figures.
    ids = [cid for _, cid, _, _ in _tests()] + [c.id for c in checks.DERIVED_CHECKS]
    assert sorted(ids) == sorted(checks.CHECKS), set(ids) ^ set(checks.CHECKS)


def test_derived_checks_are_computed_from_checks_the_suite_runs():
    from gpucluster.conformance import fleet

    assert [c.id for c in checks.DERIVED_CHECKS] == [fleet.FLEET_CHECK]
    implemented = {cid for _, cid, _, _ in _tests()}
    assert set(fleet.SOURCES) <= implemented


def test_group_markers_match_the_registry():
    for name, cid, _, marks in _tests():
        groups = set(checks.CHECKS[cid].groups)
        marked = {g for g in ROLES if any(f"pytest.mark.{g}" == m for m in marks)}
        assert marked == groups, f"{name}: markers {marked}, registry says {groups}"


def test_ids_are_well_formed_and_docs_list_them():
    doc = (SUITE.parents[1] / "docs" / "conformance.md").read_text()
    for cid, c in checks.CHECKS.items():
        area = cid.split("-")[1]
        assert area == c.area and area in checks.AREAS
        assert cid in doc and c.must in doc, f"docs/conformance.md lacks {cid} or its MUST statement"
