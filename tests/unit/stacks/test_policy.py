"""Each policy rule passes on the example stacks and FAILS when its condition is broken,
shown on resources built by hand and on real plans with one property changed."""

from __future__ import annotations

import dataclasses
from typing import Any

from gpucluster.plan import Plan, Resource
from stacks import policy

STACK_URN = "urn:pulumi:t::gpucluster::pulumi:pulumi:Stack::gpucluster-t"


def res(type_: str, name: str, inputs: dict[str, Any], *, id_: str = "", parent: str | None = STACK_URN,
        custom: bool = True) -> Resource:
    return Resource(type=type_, name=name, id=id_ or f"{name}-id", urn=f"urn:{type_}::{name}", parent=parent,
                    custom=custom, inputs=inputs)


def gpu_instance(name: str, **extra: Any) -> Resource:
    return res(policy.AWS_INSTANCE, name, {"tags": {"gpucluster-roles": "gpu"}, **extra})


def replace(plan: Plan, name: str, **inputs: Any) -> list[Resource]:
    out = []
    for r in plan.resources:
        if r.name == name:
            r = dataclasses.replace(r, inputs={**r.inputs, **inputs})
        out.append(r)
    return out


# --- gpu-placement -------------------------------------------------------------------


def test_gpu_placement_fails_for_an_instance_outside_the_cluster_placement_group() -> None:
    pg = res(policy.AWS_PG, "pg", {"name": "c-gpu", "strategy": "cluster"})
    ok = gpu_instance("gpu-1", placementGroup="c-gpu")
    stray = gpu_instance("gpu-2")
    result = policy.gpu_placement([pg, ok, stray])
    assert result.status == "fail"
    assert result.offenders == ("Instance gpu-2",)
    assert policy.gpu_placement([pg, ok]).status == "pass"


def test_gpu_placement_fails_for_a_spread_group() -> None:
    pg = res(policy.AWS_PG, "pg", {"name": "c-gpu", "strategy": "spread"})
    assert policy.gpu_placement([pg, gpu_instance("gpu-1", placementGroup="c-gpu")]).status == "fail"


def test_gpu_placement_fails_when_an_aws_plan_loses_its_placement_group(aws_plan: Plan) -> None:
    assert policy.gpu_placement(aws_plan.resources).status == "pass"
    broken = replace(aws_plan, "gpu-gpu-2", placementGroup=None)
    assert policy.gpu_placement(broken).offenders == ("Instance gpu-gpu-2",)


def test_gpu_placement_fails_for_an_azure_vm_outside_the_single_placement_group(azure_plan: Plan) -> None:
    assert policy.gpu_placement(azure_plan.resources).status == "pass"
    broken = replace(azure_plan, "gpu-gpu-1", virtualMachineScaleSetId=None)
    assert policy.gpu_placement(broken).status == "fail"
    vmss = next(r for r in azure_plan.resources if r.type == policy.AZURE_VMSS)
    loose = replace(azure_plan, vmss.name, singlePlacementGroup=False)
    assert policy.gpu_placement(loose).status == "fail"


def test_gpu_placement_fails_for_an_oci_instance_outside_the_compute_cluster(oci_plan: Plan) -> None:
    assert policy.gpu_placement(oci_plan.resources).status == "pass"
    broken = replace(oci_plan, "gpu-gpu-2", computeClusterId=None)
    assert policy.gpu_placement(broken).offenders == ("Instance gpu-gpu-2",)


def test_gpu_placement_fails_for_a_bare_metal_node_missing_from_the_fabric(ib_plan: Plan) -> None:
    fabric = next(r for r in ib_plan.resources if r.type == "gpucluster:baremetal:Fabric")
    members = [m for m in fabric.inputs["members"] if m != "hgx-03"]
    broken = replace(ib_plan, fabric.name, members=members)
    assert policy.gpu_placement(broken).offenders == ("Machine hgx-hgx-03",)


def test_gpu_placement_is_not_applicable_without_gpu_nodes() -> None:
    assert policy.gpu_placement([res("lab:index:Node", "n1", {})]).status == "n/a"


# --- no-public-management-port -------------------------------------------------------------


def test_ssh_open_to_the_world_fails_in_an_inline_aws_rule() -> None:
    sg = res("aws:ec2/securityGroup:SecurityGroup", "sg", {"ingress": [
        {"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/0"]}]})
    result = policy.no_public_management_ports([sg])
    assert result.status == "fail"
    assert "22" in result.offenders[0]


def test_all_traffic_from_the_world_fails_and_https_does_not() -> None:
    everything = res("aws:ec2/securityGroupRule:SecurityGroupRule", "r", {
        "type": "ingress", "protocol": "-1", "fromPort": 0, "toPort": 0, "cidrBlocks": ["0.0.0.0/0"]})
    https = res("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "h", {
        "ipProtocol": "tcp", "fromPort": 443, "toPort": 443, "cidrIpv4": "0.0.0.0/0"})
    kube = res("aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "k", {
        "ipProtocol": "tcp", "fromPort": 6000, "toPort": 7000, "cidrIpv4": "0.0.0.0/0"})
    assert policy.no_public_management_ports([everything]).status == "fail"
    assert policy.no_public_management_ports([https]).status == "pass"
    assert policy.no_public_management_ports([kube]).status == "fail"  # the range covers 6443


def test_azure_rule_from_internet_fails(azure_plan: Plan) -> None:
    nsg = next(r for r in azure_plan.resources if r.type == "azure:network/networkSecurityGroup:NetworkSecurityGroup")
    rules = [*nsg.inputs["securityRules"], {"name": "bad", "direction": "Inbound", "access": "Allow",
             "sourceAddressPrefix": "*", "destinationPortRange": "20-25"}]
    assert policy.no_public_management_ports(replace(azure_plan, nsg.name, securityRules=rules)).status == "fail"
    deny = [*nsg.inputs["securityRules"], {"name": "deny", "direction": "Inbound", "access": "Deny",
            "sourceAddressPrefix": "*", "destinationPortRange": "22"}]
    assert policy.no_public_management_ports(replace(azure_plan, nsg.name, securityRules=deny)).status == "pass"


def test_oci_rule_from_the_world_fails(oci_plan: Plan) -> None:
    rule = next(r for r in oci_plan.resources if r.name.endswith("-nsg-admin-0-22"))
    assert policy.no_public_management_ports(replace(oci_plan, rule.name, source="0.0.0.0/0")).status == "fail"


# --- ceph-replication and storage-failure-domains --------------------------------------------


def _storage(pools: list[dict[str, Any]], domains: int, hosts: list[dict[str, Any]]) -> list[Resource]:
    comp = res("gpucluster:oci:StorageNodes", "ceph", {"cephPools": pools, "failureDomainCount": domains},
               custom=False)
    return [comp] + [res(policy.OCI_INSTANCE, f"ceph-{i}", h, parent=comp.urn) for i, h in enumerate(hosts)]


def test_replication_larger_than_the_storage_hosts_fails() -> None:
    three = [{"faultDomain": f"FD-{i}"} for i in range(3)]
    assert policy.ceph_replication(_storage([{"name": "rbd", "size": 3}], 3, three)).status == "pass"
    result = policy.ceph_replication(_storage([{"name": "rbd", "size": 3}], 3, three[:2]))
    assert result.status == "fail"
    assert result.offenders == ("pool rbd: size 3 > 2 storage host(s)",)


def test_storage_hosts_in_one_fault_domain_fail() -> None:
    same = [{"faultDomain": "FAULT-DOMAIN-1"}] * 3
    result = policy.storage_spread(_storage([], 3, same))
    assert result.status == "fail"
    assert policy.storage_spread(_storage([], 3, [{"faultDomain": f"FD-{i}"} for i in range(3)])).status == "pass"
    assert policy.storage_spread(_storage([], 1, same)).status == "n/a"  # the target offers one domain


def test_aws_storage_in_one_partition_fails(aws_plan: Plan) -> None:
    broken = replace(aws_plan, "ceph-ceph-2", placementPartitionNumber=1)
    broken = [dataclasses.replace(r, inputs={**r.inputs, "placementPartitionNumber": 1})
              if r.name == "ceph-ceph-3" else r for r in broken]
    assert policy.storage_spread(broken).status == "fail"


def test_bare_metal_storage_without_racks_fails(ib_plan: Plan) -> None:
    broken = replace(ib_plan, "stor-stor-01", rack=None)
    assert policy.storage_spread(broken).offenders == ("stor-stor-01: no failure domain",)


# --- gpu-storage-subnets-disjoint --------------------------------------------------------------


def test_overlapping_gpu_and_storage_subnets_fail() -> None:
    gpu = res("aws:ec2/subnet:Subnet", "efa", {"cidrBlock": "10.0.0.0/20", "tags": {"gpucluster-purpose": "gpu"}})
    stor = res("aws:ec2/subnet:Subnet", "mgmt", {"cidrBlock": "10.0.8.0/24",
                                                  "tags": {"gpucluster-purpose": "management,storage"}})
    apart = res("aws:ec2/subnet:Subnet", "mgmt", {"cidrBlock": "10.1.0.0/24",
                                                   "tags": {"gpucluster-purpose": "storage"}})
    result = policy.subnets_disjoint([gpu, stor])
    assert result.status == "fail"
    assert "10.0.0.0/20" in result.offenders[0]
    assert policy.subnets_disjoint([gpu, apart]).status == "pass"


def test_bare_metal_fabric_declared_over_the_management_network_fails(roce_plan: Plan) -> None:
    fabric = next(r for r in roce_plan.resources if r.type == "gpucluster:baremetal:Fabric")
    nets = [dict(n, cidr="10.10.0.0/16") if n["purpose"] == "gpu" else n for n in fabric.inputs["networks"]]
    assert policy.subnets_disjoint(replace(roce_plan, fabric.name, networks=nets)).status == "fail"


def test_evaluate_runs_every_rule_in_order(aws_plan: Plan) -> None:
    assert [r.rule for r in policy.evaluate(aws_plan.resources)] == [
        "gpu-placement", "no-public-management-port", "ceph-replication", "storage-failure-domains",
        "gpu-storage-subnets-disjoint", "imds-v2-only", "disks-encrypted", "no-public-ip-on-gpu-storage",
        "image-pinned", "bastion-only-entry",
    ]
