"""Plans of the example stacks, each run once under the mocks and shared by the tests."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

from gpucluster.plan import Plan, Resource, plan_stack

ROOT = Path(__file__).resolve().parents[3]


@functools.cache
def plan_of(stack: str) -> Plan:
    return plan_stack(ROOT / f"Pulumi.{stack}.yaml")


@pytest.fixture(scope="session")
def aws_plan() -> Plan:
    return plan_of("aws-h100")


@pytest.fixture(scope="session")
def azure_plan() -> Plan:
    return plan_of("azure-h100")


@pytest.fixture(scope="session")
def oci_plan() -> Plan:
    return plan_of("oci-h100")


@pytest.fixture(scope="session")
def ib_plan() -> Plan:
    return plan_of("onprem-h100-ib")


@pytest.fixture(scope="session")
def roce_plan() -> Plan:
    return plan_of("onprem-h100-roce")


def one(plan: Plan, type_: str, name: str) -> Resource:
    found = [r for r in plan.resources if r.type == type_ and r.name == name]
    assert len(found) == 1, f"{type_} {name}: {len(found)} found"
    return found[0]


def write_stack(tmp_path: Path, stack: str, edit: dict[str, object]) -> Path:
    """A copy of an example stack file with some ``gpucluster:`` keys' sub-fields replaced."""
    import yaml

    doc = yaml.safe_load((ROOT / f"Pulumi.{stack}.yaml").read_text())
    for dotted, value in edit.items():
        key, _, sub = dotted.partition(".")
        if sub:
            doc["config"][f"gpucluster:{key}"][sub] = value
        else:
            doc["config"][f"gpucluster:{key}"] = value
    path = tmp_path / f"Pulumi.{stack}-edited.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
