from __future__ import annotations

from pathlib import Path

from gpucluster.plan import Plan, plan_stack
from tests.unit.stacks.conftest import one, write_stack

INSTANCE = "aws:ec2/instance:Instance"


def _instances(plan: Plan, pool: str) -> list:
    return [r for r in plan.by_type(INSTANCE) if r.tag("gpucluster-pool") == pool]


def test_gpu_nodes_are_p5_with_32_efa_interfaces_in_a_cluster_placement_group(aws_plan: Plan) -> None:
    gpus = _instances(aws_plan, "gpu")
    assert [r.name for r in gpus] == ["gpu-gpu-1", "gpu-gpu-2"]
    pg = one(aws_plan, "aws:ec2/placementGroup:PlacementGroup", "gpu-pg")
    assert pg.inputs["strategy"] == "cluster"
    lt = one(aws_plan, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt")
    efa = [n for n in lt.inputs["networkInterfaces"] if n["interfaceType"] in ("efa", "efa-only")]
    assert len(efa) == 32
    assert sorted(n["networkCardIndex"] for n in efa) == list(range(32))
    assert lt.inputs["metadataOptions"]["httpTokens"] == "required"
    for r in gpus:
        assert r.inputs["instanceType"] == "p5.48xlarge"
        assert r.inputs["placementGroup"] == pg.inputs["name"]
        assert r.inputs["launchTemplate"]["id"] == lt.id
        assert r.inputs["rootBlockDevice"]["volumeSize"] == 500
        assert r.inputs["userData"].startswith("#cloud-config\n")
        assert "capacityReservationSpecification" not in r.inputs


def test_efa_interfaces_sit_in_the_gpu_subnet_and_the_primary_in_management(aws_plan: Plan) -> None:
    mgmt = one(aws_plan, "aws:ec2/subnet:Subnet", "aws-h100-mgmt")
    efa_subnet = one(aws_plan, "aws:ec2/subnet:Subnet", "aws-h100-efa")
    assert (mgmt.inputs["cidrBlock"], efa_subnet.inputs["cidrBlock"]) == ("10.40.0.0/20", "10.40.16.0/20")
    nics = one(aws_plan, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt").inputs["networkInterfaces"]
    primary = [n for n in nics if n["interfaceType"] == "interface"]
    assert [(n["networkCardIndex"], n["deviceIndex"], n["subnetId"]) for n in primary] == [(0, 0, mgmt.id)]
    assert {n["subnetId"] for n in nics if n["interfaceType"] != "interface"} == {efa_subnet.id}


def test_efa_layout_is_the_one_aws_documents_for_p5(aws_plan: Plan) -> None:
    """Card 0: the ENA primary at device 0 and an EFA-only at device 1; every other card: one
    EFA-only at device 0 (docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html)."""
    nics = one(aws_plan, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt").inputs["networkInterfaces"]
    layout = sorted((n["networkCardIndex"], n["deviceIndex"], n["interfaceType"]) for n in nics)
    want = [(0, 0, "interface"), (0, 1, "efa-only"), *((card, 0, "efa-only") for card in range(1, 32))]
    assert layout == want
    # EFA-only interfaces take no address: nothing asks for one.
    assert not any("privateIpAddress" in n or "ipv4AddressCount" in n for n in nics if n["interfaceType"] == "efa-only")


def test_an_efa_platform_with_addresses_gets_efa_with_ena_interfaces() -> None:
    from stacks.components.aws import efa_network_interfaces

    nics = efa_network_interfaces(4, efa_only=False, management_subnet_id="m", fabric_subnet_id="f",
                                  security_group_id="sg")
    assert [(n["network_card_index"], n["device_index"], n["interface_type"]) for n in nics] == [
        (0, 0, "interface"), (0, 1, "efa"), (1, 0, "efa"), (2, 0, "efa"), (3, 0, "efa")]


def test_the_platform_sets_the_efa_count(tmp_path: Path) -> None:
    import yaml

    from tests.unit.stacks.conftest import ROOT

    pools = yaml.safe_load((ROOT / "Pulumi.aws-h100.yaml").read_text())["config"]["gpucluster:node_pools"]
    pools[0].update(platform="aws-p5en-48xlarge", profile="h200-sxm-8")
    plan = plan_stack(write_stack(tmp_path, "aws-h100", {"node_pools": pools}))
    lt = one(plan, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt")
    assert sum(n["interfaceType"] == "efa-only" for n in lt.inputs["networkInterfaces"]) == 16
    assert {r.inputs["instanceType"] for r in _instances(plan, "gpu")} == {"p5en.48xlarge"}


def test_behind_the_bastion_the_nodes_group_admits_itself_and_no_admin_range(aws_plan: Plan) -> None:
    sg = one(aws_plan, "aws:ec2/securityGroup:SecurityGroup", "aws-h100-sg")
    ingress = sg.inputs["ingress"]
    assert {"self": True, "protocol": "-1"}.items() <= ingress[0].items()
    assert [r for r in ingress if not r.get("self")] == []
    assert any(r.get("self") and r["protocol"] == "-1" for r in sg.inputs["egress"])
    # SSH from the bastion's group alone, a rule of the bastion's own.
    rule = one(aws_plan, "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule", "aws-h100-bastion-ssh")
    bastion_sg = one(aws_plan, "aws:ec2/securityGroup:SecurityGroup", "aws-h100-bastion-sg")
    assert (rule.inputs["securityGroupId"], rule.inputs["referencedSecurityGroupId"]) == (sg.id, bastion_sg.id)
    assert (rule.inputs["fromPort"], rule.inputs["toPort"], rule.inputs["ipProtocol"]) == (22, 22, "tcp")


def test_reached_directly_the_group_admits_ssh_and_the_api_only_from_admin_cidrs(tmp_path: Path) -> None:
    plan = plan_stack(write_stack(tmp_path, "aws-h100", {"target.access": {"mode": "direct"}}))
    ingress = one(plan, "aws:ec2/securityGroup:SecurityGroup", "aws-h100-sg").inputs["ingress"]
    admin = [r for r in ingress if not r.get("self")]
    assert {(r["fromPort"], tuple(r["cidrBlocks"])) for r in admin} == {
        (22, ("203.0.113.0/24",)),
        (6443, ("203.0.113.0/24",)),
    }
    assert not plan.by_type("gpucluster:aws:Bastion")


def test_storage_nodes_spread_over_partitions_on_nvme_instances(aws_plan: Plan) -> None:
    ceph = _instances(aws_plan, "ceph")
    assert {r.inputs["instanceType"] for r in ceph} == {"i4i.8xlarge"}
    assert sorted(r.inputs["placementPartitionNumber"] for r in ceph) == [1, 2, 3]
    assert sorted(r.inputs["privateIp"] for r in ceph) == ["10.40.0.12", "10.40.0.13", "10.40.0.14"]
    pg = one(aws_plan, "aws:ec2/placementGroup:PlacementGroup", "ceph-pg")
    assert (pg.inputs["strategy"], pg.inputs["partitionCount"]) == ("partition", 3)
    comp = one(aws_plan, "gpucluster:aws:StorageNodes", "ceph")
    assert comp.inputs["osdDevices"] == ["/dev/nvme1n1", "/dev/nvme2n1"]
    assert all(r.parent == comp.urn for r in ceph)


def test_the_pinned_amis_reach_the_instances_per_node_kind(aws_plan: Plan) -> None:
    gpu_ami = {r.inputs["ami"] for r in _instances(aws_plan, "gpu")}
    cpu_ami = {r.inputs["ami"] for r in _instances(aws_plan, "ceph") + _instances(aws_plan, "cp")}
    # The stack file's ami_id (Deep Learning Base AMI) and service_ami_id (Canonical's Ubuntu).
    assert gpu_ami == {"ami-0123456789abcdef0"}
    assert cpu_ami == {"ami-0fedcba9876543210"}


def test_outputs_carry_instance_ids_and_partitions(aws_plan: Plan) -> None:
    nodes = {n["name"]: n for n in aws_plan.outputs["nodes"]}
    ids = {r.tag("Name"): r.id for r in aws_plan.by_type(INSTANCE) if r.tag("gpucluster-roles") != "bastion"}
    assert {n: v["instance_id"] for n, v in nodes.items()} == ids
    assert nodes["ceph-2"]["failure_domain"] == "partition-2"
    assert nodes["gpu-1"]["fabric_ip"] is None  # EFA carries no IP traffic
    assert aws_plan.outputs["fabric"] == {
        "type": "efa", "mtu": 9001, "management_cidr": "10.40.0.0/20", "fabric_cidr": "10.40.16.0/20",
    }


def test_capacity_reservation_and_key_pair_when_the_spec_names_them(tmp_path: Path) -> None:
    path = write_stack(
        tmp_path, "aws-h100",
        {"target.capacity_reservation_id": "cr-0123456789abcdef0", "target.ssh_public_key": "ssh-ed25519 AAAAtest x"},
    )
    plan = plan_stack(path)
    for r in _instances(plan, "gpu"):
        spec = r.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
        assert spec["capacityReservationId"] == "cr-0123456789abcdef0"
        assert "instanceMarketOptions" not in r.inputs  # an On-Demand Capacity Reservation, not a block
    key = plan.by_type("aws:ec2/keyPair:KeyPair")
    assert [k.inputs["publicKey"] for k in key] == ["ssh-ed25519 AAAAtest x"]
    assert {r.inputs["keyName"] for r in plan.by_type(INSTANCE)} == {key[0].inputs["keyName"]}
    assert all('"ssh-ed25519 AAAAtest x"' in r.inputs["userData"] for r in plan.by_type(INSTANCE))


def test_components_use_typed_tokens_and_parent_their_children(aws_plan: Plan) -> None:
    comps = {r.urn: r for r in aws_plan.resources if not r.custom}
    assert {r.type for r in comps.values()} == {
        "gpucluster:aws:Fabric", "gpucluster:aws:GpuNodePool", "gpucluster:aws:StorageNodes",
        "gpucluster:aws:ServiceNodes", "gpucluster:aws:Bastion",
    }
    for r in aws_plan.resources:
        if r.custom and r.type != "aws:ec2/keyPair:KeyPair":
            parent = comps[r.parent]  # type: ignore[index]
            assert r.name.startswith(f"{parent.name}-")


def test_a_capacity_block_launches_with_the_capacity_block_market_type(tmp_path: Path) -> None:
    path = write_stack(tmp_path, "aws-h100", {"target.capacity_reservation_id": "cr-0123456789abcdef0",
                                              "target.capacity_block": True})
    gpus = _instances(plan_stack(path), "gpu")
    assert gpus
    for r in gpus:
        assert r.inputs["instanceMarketOptions"] == {"marketType": "capacity-block"}
        target = r.inputs["capacityReservationSpecification"]["capacityReservationTarget"]
        assert target["capacityReservationId"] == "cr-0123456789abcdef0"


def test_a_reservation_in_a_cluster_placement_group_launches_into_that_group(tmp_path: Path) -> None:
    path = write_stack(tmp_path, "aws-h100", {"target.capacity_reservation_id": "cr-0123456789abcdef0",
                                              "target.placement_group": "reserved-p5-group"})
    plan = plan_stack(path)
    assert [r.name for r in plan.by_type("aws:ec2/placementGroup:PlacementGroup")] == ["ceph-pg"]
    assert {r.inputs["placementGroup"] for r in _instances(plan, "gpu")} == {"reserved-p5-group"}
