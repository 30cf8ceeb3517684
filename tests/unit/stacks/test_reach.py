"""Reach and egress under Pulumi's mocks: what each cloud target creates for a NAT, a bastion or a
joined network, what it exports, and the policy rule that keeps the bastion the only way in."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from gpucluster.plan import Plan, Resource, plan_stack
from stacks import policy
from tests.unit.stacks.conftest import one, write_stack

AWS_SUBNET = "aws:ec2/subnet:Subnet"
AWS_RT = "aws:ec2/routeTable:RouteTable"
AWS_RTA = "aws:ec2/routeTableAssociation:RouteTableAssociation"
AWS_SG = "aws:ec2/securityGroup:SecurityGroup"
AZURE_NSG = "azure:network/networkSecurityGroup:NetworkSecurityGroup"
OCI_RULE = "oci:Core/networkSecurityGroupSecurityRule:NetworkSecurityGroupSecurityRule"
PROXY = {"mode": "proxy", "http_proxy": "http://proxy.example.internal:3128",
         "https_proxy": "http://proxy.example.internal:3128"}


def _types(plan: Plan) -> set[str]:
    return {r.type for r in plan.resources}


# --- AWS --------------------------------------------------------------------------------------


def test_aws_nat_is_a_gateway_in_the_public_subnet_the_nodes_route_to(aws_plan: Plan) -> None:
    public = one(aws_plan, AWS_SUBNET, "aws-h100-public")
    assert (public.inputs["cidrBlock"], public.inputs["mapPublicIpOnLaunch"]) == ("10.40.32.0/24", False)
    nat = one(aws_plan, "aws:ec2/natGateway:NatGateway", "aws-h100-nat")
    eip = one(aws_plan, "aws:ec2/eip:Eip", "aws-h100-nat-eip")
    assert (nat.inputs["subnetId"], nat.inputs["allocationId"], eip.inputs["domain"]) == (public.id, eip.id, "vpc")
    igw = one(aws_plan, "aws:ec2/internetGateway:InternetGateway", "aws-h100-igw")
    public_rt = one(aws_plan, AWS_RT, "aws-h100-public-rt")
    assert public_rt.inputs["routes"] == [{"cidrBlock": "0.0.0.0/0", "gatewayId": igw.id}]
    nodes_rt = one(aws_plan, AWS_RT, "aws-h100-rt")
    assert nodes_rt.inputs["routes"] == [{"cidrBlock": "0.0.0.0/0", "natGatewayId": nat.id}]
    # Both of the nodes' subnets route through the NAT, the public one through the internet gateway.
    routed = {r.inputs["subnetId"]: r.inputs["routeTableId"] for r in aws_plan.by_type(AWS_RTA)}
    assert routed == {one(aws_plan, AWS_SUBNET, "aws-h100-mgmt").id: nodes_rt.id,
                      one(aws_plan, AWS_SUBNET, "aws-h100-efa").id: nodes_rt.id, public.id: public_rt.id}


def test_aws_without_nat_creates_no_gateway_and_no_way_out(tmp_path: Path) -> None:
    plan = plan_stack(write_stack(tmp_path, "aws-h100", {"target.egress": PROXY, "target.access": {"mode": "direct"},
                                                         "target.public_cidr": None}))
    assert not {"aws:ec2/natGateway:NatGateway", "aws:ec2/eip:Eip", "aws:ec2/internetGateway:InternetGateway"} \
        & _types(plan)
    assert one(plan, AWS_RT, "aws-h100-rt").inputs["routes"] == []
    assert plan.outputs["egress"]["mode"] == "proxy"


def test_aws_bastion_is_small_public_and_admits_ssh_from_admin_cidrs_alone(aws_plan: Plan) -> None:
    vm = one(aws_plan, policy.AWS_INSTANCE, "aws-h100-bastion-vm")
    assert (vm.inputs["instanceType"], vm.inputs["associatePublicIpAddress"]) == ("t3.micro", True)
    assert vm.inputs["subnetId"] == one(aws_plan, AWS_SUBNET, "aws-h100-public").id
    assert vm.inputs["metadataOptions"]["httpTokens"] == "required" and vm.inputs["rootBlockDevice"]["encrypted"]
    sg = one(aws_plan, AWS_SG, "aws-h100-bastion-sg")
    assert vm.inputs["vpcSecurityGroupIds"] == [sg.id]
    assert [(r["fromPort"], r["toPort"], r["cidrBlocks"]) for r in sg.inputs["ingress"]] == [
        (22, 22, ["203.0.113.0/24"])]
    assert [(r["fromPort"], r["cidrBlocks"]) for r in sg.inputs["egress"]] == [(22, ["10.40.0.0/20"])]
    # No node has a public address: the bastion is the only one.
    public = [r.name for r in aws_plan.by_type(policy.AWS_INSTANCE) if r.inputs.get("associatePublicIpAddress")]
    assert public == ["aws-h100-bastion-vm"]


def test_the_outputs_carry_the_bastion_the_stack_made(aws_plan: Plan) -> None:
    vm = one(aws_plan, policy.AWS_INSTANCE, "aws-h100-bastion-vm")
    bastion = aws_plan.outputs["access"]["bastion"]
    assert aws_plan.outputs["access"]["mode"] == "bastion"
    assert (bastion["host"], bastion["user"], bastion["port"]) == (vm.state["publicIp"], "ubuntu", 22)
    assert bastion["source_cidr"] == f"{vm.state['privateIp']}/32"


def test_aws_joining_a_vpc_creates_no_network(tmp_path: Path) -> None:
    network = {"id": "vpc-0123456789abcdef0", "management_subnet_id": "subnet-0123456789abcdef0",
               "fabric_subnet_id": "subnet-0123456789abcdef1", "public_subnet_id": "subnet-0123456789abcdef2"}
    plan = plan_stack(write_stack(tmp_path, "aws-h100", {"target.network": network, "target.vpc_cidr": None,
                                                         "target.public_cidr": None}))
    assert not {"aws:ec2/vpc:Vpc", AWS_SUBNET, AWS_RT, AWS_RTA, "aws:ec2/natGateway:NatGateway",
                "aws:ec2/internetGateway:InternetGateway"} & _types(plan)
    assert one(plan, AWS_SG, "aws-h100-sg").inputs["vpcId"] == network["id"]
    assert one(plan, policy.AWS_INSTANCE, "aws-h100-bastion-vm").inputs["subnetId"] == network["public_subnet_id"]
    nics = one(plan, "aws:ec2/launchTemplate:LaunchTemplate", "gpu-lt").inputs["networkInterfaces"]
    assert {n["subnetId"] for n in nics} == {network["management_subnet_id"], network["fabric_subnet_id"]}
    assert {r.inputs["subnetId"] for r in plan.by_type(policy.AWS_INSTANCE) if r.inputs.get("subnetId")
            and r.name != "aws-h100-bastion-vm"} == {network["management_subnet_id"]}


def test_aws_behind_an_existing_bastion_the_nodes_admit_its_source(tmp_path: Path) -> None:
    access = {"mode": "bastion", "bastion": {"host": "bastion.example.com", "user": "ops", "port": 2222,
                                             "source_cidr": "10.40.250.0/28"}}
    plan = plan_stack(write_stack(tmp_path, "aws-h100", {"target.access": access}))
    assert "gpucluster:aws:Bastion" not in _types(plan)
    admin = [r for r in one(plan, AWS_SG, "aws-h100-sg").inputs["ingress"] if not r.get("self")]
    assert [(r["fromPort"], r["cidrBlocks"]) for r in admin] == [(22, ["10.40.250.0/28"])]
    assert plan.outputs["access"] == {"mode": "bastion", "created": False, "bastion": {
        "host": "bastion.example.com", "user": "ops", "port": 2222, "source_cidr": "10.40.250.0/28"}}


# --- Azure ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def azure_created(tmp_path_factory: pytest.TempPathFactory) -> Plan:
    edit = {"target.network": None, "target.egress": {"mode": "nat"}, "target.public_cidr": "10.50.240.0/24",
            "target.access": {"mode": "bastion", "bastion": {"create": True}}}
    return plan_stack(_without_nones(write_stack(tmp_path_factory.mktemp("azure"), "azure-h100", edit)))


def _without_nones(path: Path) -> Path:
    import yaml

    doc = yaml.safe_load(path.read_text())
    target = doc["config"]["gpucluster:target"]
    doc["config"]["gpucluster:target"] = {k: v for k, v in target.items() if v is not None}
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def test_azure_nat_is_a_gateway_on_the_management_subnet(azure_created: Plan) -> None:
    nat = one(azure_created, "azure:network/natGateway:NatGateway", "azure-h100-nat")
    ip = one(azure_created, "azure:network/publicIp:PublicIp", "azure-h100-nat-ip")
    assert (ip.inputs["sku"], ip.inputs["allocationMethod"]) == ("Standard", "Static")
    assert nat.inputs["skuName"] == "Standard"
    assoc = one(azure_created, "azure:network/natGatewayPublicIpAssociation:NatGatewayPublicIpAssociation",
                "azure-h100-nat-ip")
    assert (assoc.inputs["natGatewayId"], assoc.inputs["publicIpAddressId"]) == (nat.id, ip.id)
    subnet = one(azure_created, "azure:network/subnetNatGatewayAssociation:SubnetNatGatewayAssociation",
                 "azure-h100-mgmt-nat")
    assert subnet.inputs == {"subnetId": one(azure_created, "azure:network/subnet:Subnet", "azure-h100-mgmt").id,
                             "natGatewayId": nat.id}


def test_azure_bastion_in_its_own_subnet_and_the_nodes_admit_only_it(azure_created: Plan) -> None:
    nic = one(azure_created, "azure:network/networkInterface:NetworkInterface", "azure-h100-bastion-nic")
    ip = one(azure_created, "azure:network/publicIp:PublicIp", "azure-h100-bastion-ip")
    (config,) = nic.inputs["ipConfigurations"]
    assert config["publicIpAddressId"] == ip.id
    assert config["subnetId"] == one(azure_created, "azure:network/subnet:Subnet", "azure-h100-public").id
    vm = one(azure_created, policy.AZURE_VM, "azure-h100-bastion-vm")
    assert vm.inputs["size"] == "Standard_B1s"
    bastion_rules = one(azure_created, AZURE_NSG, "azure-h100-bastion-nsg").inputs["securityRules"]
    assert [(r["destinationPortRange"], r["sourceAddressPrefixes"]) for r in bastion_rules] == [
        ("22", ["203.0.113.0/24"])]
    nodes = {r["name"]: r for r in one(azure_created, AZURE_NSG, "azure-h100-nsg").inputs["securityRules"]}
    assert sorted(nodes) == ["ssh-from-bastion", "within-vnet"]  # no admin port from admin_cidrs
    assert nodes["ssh-from-bastion"]["sourceAddressPrefixes"] == ["10.50.240.0/24"]
    assert azure_created.outputs["access"]["bastion"]["source_cidr"] == \
        f"{nic.state['privateIpAddress']}/32"


def test_azure_joining_a_vnet_puts_the_nsg_on_the_nodes_interfaces(azure_plan: Plan) -> None:
    assert not {"azure:network/virtualNetwork:VirtualNetwork", "azure:network/subnet:Subnet",
                "azure:network/natGateway:NatGateway",
                "azure:network/subnetNetworkSecurityGroupAssociation:SubnetNetworkSecurityGroupAssociation"} \
        & _types(azure_plan)
    nsg = one(azure_plan, AZURE_NSG, "azure-h100-nsg")
    nics = azure_plan.by_type("azure:network/networkInterface:NetworkInterface")
    assert {c["subnetId"] for n in nics for c in n.inputs["ipConfigurations"]} == {
        _target(azure_plan)["network"]["management_subnet_id"]}
    assoc = azure_plan.by_type(
        "azure:network/networkInterfaceSecurityGroupAssociation:NetworkInterfaceSecurityGroupAssociation")
    assert {a.inputs["networkInterfaceId"] for a in assoc} == {n.id for n in nics}
    assert {a.inputs["networkSecurityGroupId"] for a in assoc} == {nsg.id}
    rules = {r["name"]: r for r in nsg.inputs["securityRules"]}
    assert rules["ssh-from-bastion"]["sourceAddressPrefixes"] == ["10.60.0.0/28"]
    assert not [n for n in rules if n.startswith("admin-")]


def _target(plan: Plan) -> dict[str, Any]:
    from gpucluster.spec import load_spec
    from tests.unit.stacks.conftest import ROOT

    return load_spec(ROOT / f"Pulumi.{plan.stack}.yaml").spec.target.model_dump()


# --- OCI --------------------------------------------------------------------------------------


def test_oci_nat_and_service_gateways_are_the_management_subnets_routes(oci_plan: Plan) -> None:
    nat = one(oci_plan, "oci:Core/natGateway:NatGateway", "oci-h100-nat")
    sgw = one(oci_plan, "oci:Core/serviceGateway:ServiceGateway", "oci-h100-sgw")
    assert sgw.inputs["services"] == [{"serviceId": "ocid1.service.oc1..mockall"}]
    rt = one(oci_plan, "oci:Core/routeTable:RouteTable", "oci-h100-rt")
    assert [(r["destination"], r["destinationType"], r["networkEntityId"]) for r in rt.inputs["routeRules"]] == [
        ("0.0.0.0/0", "CIDR_BLOCK", nat.id),
        ("all-mock-services-in-oracle-services-network", "SERVICE_CIDR_BLOCK", sgw.id)]
    assert one(oci_plan, "oci:Core/subnet:Subnet", "oci-h100-mgmt").inputs["routeTableId"] == rt.id


def test_oci_bastion_public_subnet_and_the_nodes_admit_its_nsg(tmp_path: Path) -> None:
    plan = plan_stack(write_stack(tmp_path, "oci-h100", {
        "target.access": {"mode": "bastion", "bastion": {"create": True}}, "target.public_cidr": "10.60.64.0/28"}))
    public = one(plan, "oci:Core/subnet:Subnet", "oci-h100-public")
    assert (public.inputs["prohibitPublicIpOnVnic"], public.inputs["cidrBlock"]) == (False, "10.60.64.0/28")
    igw = one(plan, "oci:Core/internetGateway:InternetGateway", "oci-h100-igw")
    assert one(plan, "oci:Core/routeTable:RouteTable", "oci-h100-public-rt").inputs["routeRules"][0][
        "networkEntityId"] == igw.id
    assert one(plan, "oci:Core/vcn:Vcn", "oci-h100-vcn").inputs["cidrBlocks"] == ["10.60.0.0/20", "10.60.64.0/28"]
    vm = one(plan, policy.OCI_INSTANCE, "oci-h100-bastion-vm")
    assert vm.inputs["createVnicDetails"]["assignPublicIp"] == "true"
    assert vm.inputs["shapeConfig"] == {"ocpus": 1, "memoryInGbs": 4}
    bastion_nsg = one(plan, "oci:Core/networkSecurityGroup:NetworkSecurityGroup", "oci-h100-bastion-nsg")
    to_nodes = one(plan, OCI_RULE, "oci-h100-bastion-ssh")
    assert (to_nodes.inputs["source"], to_nodes.inputs["sourceType"]) == (bastion_nsg.id, "NETWORK_SECURITY_GROUP")
    assert to_nodes.inputs["networkSecurityGroupId"] == one(
        plan, "oci:Core/networkSecurityGroup:NetworkSecurityGroup", "oci-h100-nsg").id
    # Behind the bastion the nodes admit nothing from admin_cidrs.
    assert not [r.name for r in plan.by_type(OCI_RULE) if r.name.startswith("oci-h100-nsg-admin")]
    assert [r.inputs["source"] for r in plan.by_type(OCI_RULE) if r.name.startswith("oci-h100-bastion-nsg-admin")] \
        == ["203.0.113.0/24"]


def test_oci_joining_a_vcn_creates_no_network(tmp_path: Path) -> None:
    network = {"id": "ocid1.vcn.oc1.iad.aaaa", "management_subnet_id": "ocid1.subnet.oc1.iad.bbbb"}
    plan = plan_stack(write_stack(tmp_path, "oci-h100", {"target.network": network}))
    assert not {"oci:Core/vcn:Vcn", "oci:Core/subnet:Subnet", "oci:Core/natGateway:NatGateway",
                "oci:Core/routeTable:RouteTable", "oci:Core/serviceGateway:ServiceGateway"} & _types(plan)
    assert {r.inputs["createVnicDetails"]["subnetId"] for r in plan.by_type(policy.OCI_INSTANCE)} == {
        network["management_subnet_id"]}


# --- the policy: behind a bastion, the bastion is the only way in ---------------------------------


def _replace(plan: Plan, name: str, **inputs: Any) -> list[Resource]:
    return [dataclasses.replace(r, inputs={**r.inputs, **inputs}) if r.name == name else r for r in plan.resources]


def test_bastion_only_entry_passes_the_example_and_is_na_without_a_bastion(aws_plan: Plan, oci_plan: Plan) -> None:
    assert policy.bastion_only_entry(aws_plan.resources).status == "pass"
    assert policy.bastion_only_entry(oci_plan.resources).status == "n/a"


def test_a_node_rule_from_admin_cidrs_behind_a_bastion_fails(aws_plan: Plan) -> None:
    sg = one(aws_plan, AWS_SG, "aws-h100-sg")
    ingress = [*sg.inputs["ingress"], {"protocol": "tcp", "fromPort": 6443, "toPort": 6443,
                                       "cidrBlocks": ["203.0.113.0/24"]}]
    result = policy.bastion_only_entry(_replace(aws_plan, "aws-h100-sg", ingress=ingress))
    assert result.status == "fail"
    assert result.offenders == ("SecurityGroup aws-h100-sg: port 6443 (Kubernetes API) from 203.0.113.0/24: behind "
                                "a bastion only the bastion admits anyone from outside",)


@pytest.mark.parametrize(("rule", "why"), [
    ({"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["11.1.0.0/16"]},
     "the bastion admits SSH from 11.1.0.0/16, not in admin_cidrs"),
    ({"protocol": "tcp", "fromPort": 0, "toPort": 65535, "cidrBlocks": ["203.0.113.0/24"]},
     "the bastion admits port 22 (SSH)"),
])
def test_the_bastion_admits_ssh_from_admin_cidrs_alone(aws_plan: Plan, rule: dict[str, Any], why: str) -> None:
    result = policy.bastion_only_entry(_replace(aws_plan, "aws-h100-bastion-sg", ingress=[rule]))
    assert result.status == "fail"
    assert any(why in o for o in result.offenders), result.offenders


def test_azure_and_oci_bastions_pass_the_rule(azure_created: Plan, tmp_path: Path) -> None:
    assert policy.bastion_only_entry(azure_created.resources).status == "pass"
    assert not azure_created.failed
    oci = plan_stack(write_stack(tmp_path, "oci-h100", {
        "target.access": {"mode": "bastion", "bastion": {"create": True}}, "target.public_cidr": "10.60.64.0/28"}))
    assert policy.bastion_only_entry(oci.resources).status == "pass"
    assert not oci.failed
