"""Every target exports the same outputs, which the inventory consumes unchanged."""

from __future__ import annotations

import ipaddress

import pytest

from gpucluster.inventory import build_inventory
from gpucluster.outputs import parse_outputs
from gpucluster.spec import load_spec
from tests.unit.stacks.conftest import ROOT, plan_of

STACKS = ["aws-h100", "azure-h100", "oci-h100", "onprem-h100-ib", "onprem-h100-roce"]


@pytest.mark.parametrize("stack", STACKS)
def test_outputs_follow_the_contract_and_feed_the_inventory(stack: str) -> None:
    plan = plan_of(stack)
    cluster = load_spec(ROOT / f"Pulumi.{stack}.yaml")
    outputs = parse_outputs(plan.outputs, stack)
    assert outputs.target == cluster.spec.target.kind
    assert [n.name for n in outputs.nodes] == [n.name for n in cluster.nodes]
    assert [n.roles for n in outputs.nodes] == [list(n.roles) for n in cluster.nodes]
    mgmt = ipaddress.IPv4Network(cluster.spec.fabric.management_cidr)
    assert all(ipaddress.IPv4Address(n.management_ip) in mgmt for n in outputs.nodes)
    assert len({n.management_ip for n in outputs.nodes}) == len(outputs.nodes)
    assert outputs.storage is not None
    assert outputs.storage.osd_hosts == [n.name for n in cluster.nodes_with_role("storage")]
    inventory = build_inventory(cluster, outputs)
    assert inventory  # the inventory module accepts the outputs as they are


@pytest.mark.parametrize("stack", STACKS)
def test_example_stack_passes_every_policy_rule(stack: str) -> None:
    plan = plan_of(stack)
    assert plan.failed == []
    assert {p.rule for p in plan.policy if p.status == "pass"} >= {"gpu-placement", "ceph-replication"}


def test_planning_twice_in_one_process_gives_the_same_resources() -> None:
    from gpucluster.plan import plan_stack

    first = plan_stack(ROOT / "Pulumi.aws-h100.yaml")
    plan_stack(ROOT / "Pulumi.onprem-h100-ib.yaml")
    again = plan_stack(ROOT / "Pulumi.aws-h100.yaml")
    assert [(r.type, r.name) for r in first.resources] == [(r.type, r.name) for r in again.resources]
    assert first.outputs == again.outputs
