"""The lab is one more target: it exports stack outputs, the one hand-off makes its inventory, and
nothing downstream (converge, the roles, their templates) asks whether it runs on the lab."""

from __future__ import annotations

import ast
import dataclasses
import json
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpucluster.cli import main
from gpucluster.lab import lab
from gpucluster.lab.lab import LabInputs, LabResult, lab_inputs
from gpucluster.lab.provider import INPUT_KEYS, props_from_inputs
from gpucluster.paths import resolve
from gpucluster.spec import load_spec

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
StackFile = Callable[[str, Callable[[dict[str, Any]], None]], Path]

# `x == 'lab'`, `'lab' != x`, with either quote and any spacing.
_LAB_COMPARISON = re.compile(r"""[!=]=\s*(['"])lab\1|(['"])lab\2\s*[!=]=""")


def _lab_comparisons(root: Path) -> list[str]:
    found = []
    for path in sorted(p for p in root.rglob("*") if p.is_file()):
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            if _LAB_COMPARISON.search(line):
                found.append(f"{path.relative_to(REPO)}:{number}: {line.strip()}")
    return found


@pytest.mark.parametrize("line", [
    "x: \"{{ 'distro' if (gpucluster_target | default('')) == 'lab' else 'cuda_repo' }}\"",
    "x: \"{{ gpucluster_target | default('') != \\\"lab\\\" }}\"",
    "when: \"'lab'==gpucluster_target\"",
])
def test_the_pattern_catches_a_lab_comparison(line: str) -> None:
    assert _LAB_COMPARISON.search(line.replace('\\"', '"'))


@pytest.mark.parametrize("folder", ["roles", "templates"])
def test_no_role_or_template_compares_with_the_lab(folder: str) -> None:
    """What a node cannot do is a capability in the inventory (gpucluster_capabilities), never the target."""
    assert (REPO / folder).is_dir()
    assert _lab_comparisons(REPO / folder) == []


def _imports(path: Path) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names |= {f"{node.module}.{a.name}" for a in node.names}
    return names


@pytest.mark.parametrize("module", ["gpucluster/converge.py", "gpucluster/cli/converge.py"])
def test_converge_does_not_import_the_lab(module: str) -> None:
    imported = _imports(REPO / module)
    assert "gpucluster.converge" in _imports(REPO / "gpucluster/cli/converge.py")  # the walk sees imports
    assert sorted(n for n in imported if n == "gpucluster.lab" or n.startswith("gpucluster.lab.")) == []


def test_converging_loads_no_lab_module() -> None:
    code = ("import sys, gpucluster.cli.converge, gpucluster.converge; "
            "print(sorted(m for m in sys.modules if m == 'gpucluster.lab' or m.startswith('gpucluster.lab.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


def test_the_lab_exports_outputs_only() -> None:
    assert [f.name for f in dataclasses.fields(LabInputs)] == ["plan", "outputs"]
    assert INPUT_KEYS == ("plan", "outputs")
    props = props_from_inputs(lab_inputs(load_spec(REPO / "Pulumi.lab.yaml")))
    assert sorted(props) == ["outputs", "plan"]
    assert "inventory_file" not in {f.name for f in dataclasses.fields(LabResult)}


def _tmp_lab(stack_file: StackFile, state_dir: Path) -> Path:
    def mutate(config: dict[str, Any]) -> None:
        config["gpucluster:target"]["state_dir"] = str(state_dir)

    return stack_file("Pulumi.lab.yaml", mutate)


def test_lab_up_writes_the_inventory_gpucluster_inventory_makes(
        stack_file: StackFile, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        capsys: pytest.CaptureFixture[str]) -> None:
    """`lab up` writes its outputs; the inventory beside them is, byte for byte, what the hand-off
    every target takes (`gpucluster inventory --outputs ... --stack ...`) makes of them."""
    stack = _tmp_lab(stack_file, tmp_path / "labs")
    where = resolve(stack)

    def fake_up(inputs: LabInputs, **_: Any) -> LabResult:
        # What lab.up leaves behind, without booting anything: the outputs in the lab's folder.
        inputs.plan.outputs_file.parent.mkdir(parents=True)
        inputs.plan.outputs_file.write_text(json.dumps(inputs.outputs, indent=2) + "\n")
        return LabResult(inputs.plan.name, [], True, 0.0, False, str(inputs.plan.outputs_file), inputs.outputs)

    monkeypatch.setattr(lab, "up", fake_up)
    assert main(["lab", "up", "--stack", str(stack), "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["outputs_file"] == str(where.outputs_file)
    assert result["inventory_file"] == str(where.inventory_file)
    assert result["outputs"]["capabilities"]["heavy_packages"] is False

    assert main(["inventory", "--outputs", str(where.outputs_file), "--stack", str(stack)]) == 0
    assert capsys.readouterr().out == where.inventory_file.read_text()
    assert "gpucluster_capabilities:\n      heavy_packages: false" in where.inventory_file.read_text()
