"""`gpucluster converge`: which inventory a stack file means (gpucluster/paths.py, the same for every
target), and the inventory's model checked before Ansible is started."""

from __future__ import annotations

import io
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

import gpucluster.cli.converge as cli_converge
from gpucluster.cli import main
from gpucluster.converge import ConvergeOptions, ConvergeResult, converge
from gpucluster.errors import InputError
from gpucluster.inventory import parse_inventory_text
from gpucluster.paths import resolve

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "golden" / "inventory"
StackFile = Callable[[str, Callable[[dict[str, Any]], None]], Path]


def _record(monkeypatch: pytest.MonkeyPatch) -> list[ConvergeOptions]:
    seen: list[ConvergeOptions] = []

    def fake(options: ConvergeOptions, progress_out: Any) -> ConvergeResult:
        seen.append(options)
        return ConvergeResult(run_dir=options.runs_dir, status="successful", rc=0, seconds=0.0, hosts=[],
                              failures={})

    monkeypatch.setattr(cli_converge, "converge", fake)
    return seen


def test_a_real_targets_stack_converges_the_inventory_where_paths_names_it(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    stack = REPO / "Pulumi.aws-h100.yaml"
    where = resolve(stack)
    where.folder.mkdir(parents=True)
    shutil.copy(GOLDEN / "aws-h100.yml", where.inventory_file)
    seen = _record(monkeypatch)
    assert main(["converge", "--stack", str(stack), "--runs-dir", str(tmp_path / "runs")]) == 0
    assert [o.inventory for o in seen] == [where.inventory_file]


def test_a_labs_stack_converges_the_inventory_where_paths_names_it(
        stack_file: StackFile, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def mutate(config: dict[str, Any]) -> None:
        config["gpucluster:target"]["state_dir"] = str(tmp_path / "labs")

    stack = stack_file("Pulumi.lab.yaml", mutate)
    where = resolve(stack)
    where.folder.mkdir(parents=True)
    shutil.copy(GOLDEN / "lab.yml", where.inventory_file)
    seen = _record(monkeypatch)
    assert main(["converge", "--stack", str(stack), "--runs-dir", str(tmp_path / "runs")]) == 0
    assert [o.inventory for o in seen] == [where.inventory_file]


def test_a_stack_without_an_inventory_is_bad_input_naming_the_remedy(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    seen = _record(monkeypatch)
    assert main(["converge", "--stack", str(REPO / "Pulumi.aws-h100.yaml")]) == 2
    err = capsys.readouterr().err
    assert "no inventory at" in err and "gpucluster inventory --outputs" in err
    assert seen == []


class _Runner:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, **kwargs: Any) -> Any:
        self.calls += 1
        raise AssertionError("ansible-runner started on an inventory the model refuses")


@pytest.mark.parametrize("damage", [
    lambda v: v.pop("gpucluster_capabilities"),
    lambda v: v["gpucluster_capabilities"].update(heavy_packages="no"),
    lambda v: v.update(gpucluster_inventory_schema=1),
])
def test_converge_validates_through_the_model_before_ansible_runs(
        tmp_path: Path, damage: Callable[[dict[str, Any]], Any]) -> None:
    data = parse_inventory_text((GOLDEN / "lab.yml").read_text())
    damage(data["all"]["vars"])
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump(data))
    runner = _Runner()
    with pytest.raises(InputError):
        converge(ConvergeOptions(inventory=inventory, runs_dir=tmp_path / "runs"), progress_out=io.StringIO(),
                 runner=runner)
    assert runner.calls == 0
    assert not (tmp_path / "runs").exists(), "no run folder for a run that never started"


def test_a_valid_inventory_reaches_the_runner(tmp_path: Path) -> None:
    """The counterpart of the test above: the same path does start Ansible on a valid inventory."""
    inventory = tmp_path / "inventory.yml"
    shutil.copy(GOLDEN / "lab.yml", inventory)
    seen: list[dict[str, Any]] = []

    def runner(**kwargs: Any) -> Any:
        seen.append(kwargs)
        return type("R", (), {"rc": 0, "status": "successful", "stats": {}})()

    result = converge(ConvergeOptions(inventory=inventory, runs_dir=tmp_path / "runs"), progress_out=io.StringIO(),
                      runner=runner)
    assert len(seen) == 1 and seen[0]["inventory"] == str(inventory.resolve())
    assert result.rc == 0
