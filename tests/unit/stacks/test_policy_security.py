"""The security rules: open management ports judged by address coverage, IMDSv2 only,
encrypted disks, no public IPs on GPU and storage nodes. Each rule passes on the example stacks
and FAILS on a resource that breaks it, built by hand or taken from a plan with one input changed."""

from __future__ import annotations

import dataclasses
from typing import Any

import pulumi
import pytest

from gpucluster.plan import Plan, Resource
from stacks import policy
from stacks.components.common import MANAGEMENT_PORT_RANGES, MANAGEMENT_PORTS, TAG_DISK_ENCRYPTION
from tests.unit.stacks.conftest import plan_of

AWS_SG = "aws:ec2/securityGroup:SecurityGroup"
AWS_SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
AWS_INGRESS = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
AZURE_NSG = "azure:network/networkSecurityGroup:NetworkSecurityGroup"
AZURE_NSG_RULE = "azure:network/networkSecurityRule:NetworkSecurityRule"
OCI_NSG_RULE = "oci:Core/networkSecurityGroupSecurityRule:NetworkSecurityGroupSecurityRule"
OCI_SECURITY_LIST = "oci:Core/securityList:SecurityList"


def res(type_: str, name: str, inputs: dict[str, Any]) -> Resource:
    return Resource(
        type=type_, name=name, id=f"{name}-id", urn=f"urn:{type_}::{name}", parent=None, custom=True, inputs=inputs
    )


def aws_rule(name: str, cidrs: list[str], port: int, v6: bool = False) -> Resource:
    key = "ipv6CidrBlocks" if v6 else "cidrBlocks"
    return res(AWS_SG_RULE, name, {"type": "ingress", "protocol": "tcp", "fromPort": port, "toPort": port, key: cidrs})


def azure_rule(name: str, prefixes: list[str], port: int | str, protocol: str = "Tcp") -> dict[str, Any]:
    return {
        "name": name,
        "direction": "Inbound",
        "access": "Allow",
        "protocol": protocol,
        "sourceAddressPrefixes": prefixes,
        "destinationPortRange": str(port),
    }


def oci_rule(name: str, source: str, port: int, protocol: str = "6") -> Resource:
    return res(
        OCI_NSG_RULE,
        name,
        {
            "direction": "INGRESS",
            "protocol": protocol,
            "source": source,
            "sourceType": "CIDR_BLOCK",
            "tcpOptions": {"destinationPortRange": {"min": port, "max": port}},
        },
    )


def replace(plan: Plan, name: str, **inputs: Any) -> list[Resource]:
    return [dataclasses.replace(r, inputs={**r.inputs, **inputs}) if r.name == name else r for r in plan.resources]


def edit(plan: Plan, name: str, change: Any) -> list[Resource]:
    """The plan's resources with ``change(inputs)`` applied to a deep copy of one resource's inputs."""
    import copy

    out = []
    for r in plan.resources:
        if r.name == name:
            inputs = copy.deepcopy(dict(r.inputs))
            change(inputs)
            r = dataclasses.replace(r, inputs=inputs)
        out.append(r)
    return out


def first(plan: Plan, type_: str, **tags: str) -> Resource:
    for r in plan.resources:
        if r.type == type_ and all(r.tag(k) == v for k, v in tags.items()):
            return r
    raise AssertionError(f"no {type_} with {tags}")


# --- no-public-management-port: coverage, not strings --------------------------------------


def test_two_halves_of_the_internet_fail_together_across_two_rules() -> None:
    lower, upper = aws_rule("lower", ["0.0.0.0/1"], 22), aws_rule("upper", ["128.0.0.0/1"], 22)
    result = policy.no_public_management_ports([lower, upper])
    assert result.status == "fail"
    assert "port 22" in result.offenders[0]
    assert "SecurityGroupRule lower" in result.offenders[0] and "SecurityGroupRule upper" in result.offenders[0]


def test_coverage_is_a_union_two_public_slash_sixteens_make_a_slash_fifteen() -> None:
    # Neither /16 alone passes the threshold (more than a /16's worth of internet addresses); together they do.
    low, high = aws_rule("low", ["11.0.0.0/16"], 6443), aws_rule("high", ["11.1.0.0/16"], 6443)
    assert policy.no_public_management_ports([low]).status == "pass"
    assert policy.no_public_management_ports([high]).status == "pass"
    assert policy.no_public_management_ports([low, high]).status == "fail"


def test_a_public_slash_nine_is_the_world() -> None:
    """The threshold was a /8: SSH from a public /9 (8 million addresses) passed."""
    result = policy.no_public_management_ports([aws_rule("nine", ["11.0.0.0/9"], 22)])
    assert result.status == "fail" and "port 22 (SSH) reachable from 8,388,608" in result.offenders[0]
    assert policy.no_public_management_ports([aws_rule("v6", ["2a00::/48"], 22, v6=True)]).status == "pass"
    assert policy.no_public_management_ports([aws_rule("v6", ["2a00::/47"], 22, v6=True)]).status == "fail"


def test_any_public_slash_eight_fails_and_private_space_does_not() -> None:
    assert policy.no_public_management_ports([aws_rule("a", ["11.0.0.0/8"], 22)]).status == "fail"
    assert policy.no_public_management_ports([aws_rule("b", ["0.0.0.0/7"], 22)]).status == "fail"
    # RFC 1918 space is not the internet: a VPN's 10/8 may reach SSH.
    assert policy.no_public_management_ports([aws_rule("c", ["10.0.0.0/8"], 22)]).status == "pass"
    assert policy.no_public_management_ports([aws_rule("d", ["203.0.113.0/24", "198.51.100.7"], 22)]).status == "pass"


def test_ipv6_world_fails() -> None:
    assert policy.no_public_management_ports([aws_rule("six", ["::/0"], 22, v6=True)]).status == "fail"
    assert policy.no_public_management_ports([aws_rule("g", ["2000::/3"], 22, v6=True)]).status == "fail"
    ingress = res(AWS_INGRESS, "k", {"ipProtocol": "tcp", "fromPort": 6443, "toPort": 6443, "cidrIpv6": "::/0"})
    assert policy.no_public_management_ports([ingress]).status == "fail"
    office = aws_rule("office", ["2001:db8:1::/48"], 22, v6=True)
    assert policy.no_public_management_ports([office]).status == "pass"


@pytest.mark.parametrize("port", sorted(MANAGEMENT_PORTS))
def test_every_management_port_open_to_the_world_fails_on_every_cloud(port: int) -> None:
    aws = aws_rule("aws", ["0.0.0.0/0"], port)
    azure = res(AZURE_NSG, "nsg", {"securityRules": [azure_rule("r", ["*"], port)]})
    oci = oci_rule("oci", "0.0.0.0/0", port)
    oci_list = res(
        OCI_SECURITY_LIST,
        "sl",
        {
            "ingressSecurityRules": [
                {
                    "protocol": "17",
                    "source": "0.0.0.0/0",
                    "udpOptions": {"destinationPortRange": {"min": port, "max": port}},
                }
            ]
        },
    )
    for r in (aws, azure, oci, oci_list):
        result = policy.no_public_management_ports([r])
        assert result.status == "fail", (r.type, port)
        assert f"port {port} " in result.offenders[0]


@pytest.mark.parametrize(("low", "high", "probe"), [(6800, 7300, 7000), (30000, 32767, 31080)])
def test_ceph_daemon_ports_and_node_ports_are_management_ports(low: int, high: int, probe: int) -> None:
    """Ceph's OSD, manager and MDS ports and Kubernetes' NodePorts were not management ports to it."""
    assert MANAGEMENT_PORT_RANGES[(low, high)]
    one = policy.no_public_management_ports([aws_rule("one", ["0.0.0.0/0"], probe)])
    assert one.status == "fail" and f"ports {low}-{high}" in one.offenders[0]
    whole = res(AWS_SG_RULE, "whole", {"type": "ingress", "protocol": "tcp", "fromPort": low - 10, "toPort": high + 10,
                                       "cidrBlocks": ["0.0.0.0/0"]})
    assert policy.no_public_management_ports([whole]).status == "fail"
    # Two halves of the internet on different ports of the range never meet at one port.
    apart = [aws_rule("a", ["0.0.0.0/1"], low + 1), aws_rule("b", ["128.0.0.0/1"], low + 2)]
    result = policy.no_public_management_ports(apart)
    assert result.status == "fail" and len([o for o in result.offenders if f"ports {low}-{high}" in o]) == 1
    office = policy.no_public_management_ports([aws_rule("office", ["198.51.100.0/24", "10.0.0.0/8"], probe)])
    assert office.status == "pass"


def test_default_security_groups_and_lists_are_read() -> None:
    aws = res(policy.AWS_DEFAULT_SG, "default",
              {"ingress": [{"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/0"]}]})
    oci = res(policy.OCI_DEFAULT_SECURITY_LIST, "default",
              {"ingressSecurityRules": [{"protocol": "6", "source": "0.0.0.0/0",
                                         "tcpOptions": {"destinationPortRange": {"min": 22, "max": 22}}}]})
    for r in (aws, oci):
        result = policy.no_public_management_ports([r])
        assert result.status == "fail" and "port 22 (SSH)" in result.offenders[0], r.type
        assert policy.RULES[1].reads_type(r.type)
    # AWS's own default: the group admits its members only.
    members = res(policy.AWS_DEFAULT_SG, "default", {"ingress": [{"protocol": "-1", "fromPort": 0, "toPort": 0,
                                                                   "self": True}]})
    assert policy.no_public_management_ports([members]).status == "pass"


@pytest.mark.parametrize("token", ["azure-native:network:NetworkSecurityGroup",
                                   "azure-native:network/v20230901:NetworkSecurityGroup"])
def test_azure_native_security_groups_and_rules_are_read(token: str) -> None:
    nsg = res(token, "nsg", {"securityRules": [azure_rule("ssh", ["*"], 22)]})
    assert policy.no_public_management_ports([nsg]).status == "fail"
    rule_token = token.replace("NetworkSecurityGroup", "SecurityRule")
    rule = res(rule_token, "r", {"direction": "Inbound", "access": "Allow", "protocol": "Tcp",
                                 "sourceAddressPrefix": "Internet", "destinationPortRanges": ["6443", "30000-32767"]})
    result = policy.no_public_management_ports([rule])
    assert result.status == "fail" and len(result.offenders) == 2
    rule_reads = policy.RULES[1]
    assert rule_reads.reads_type(token) and rule_reads.reads_type(rule_token)
    vnet = res(token, "v", {"securityRules": [azure_rule("v", ["VirtualNetwork"], "*", protocol="*")]})
    assert policy.no_public_management_ports([vnet]).status == "pass"


def _prefix_list(name: str, cidrs: list[str], id_: str = "") -> Resource:
    return Resource(type=policy.AWS_PREFIX_LIST, name=name, id=id_, urn="", parent=None, custom=True,
                    inputs={"addressFamily": "IPv4", "maxEntries": 5, "entries": [{"cidr": c} for c in cidrs]})


def test_a_prefix_list_holding_the_world_fails() -> None:
    """Prefix lists holding 0.0.0.0/0 passed: a reference was a named set the rule did not count."""
    by_list = res(AWS_SG_RULE, "pl", {"type": "ingress", "protocol": "tcp", "fromPort": 22, "toPort": 22,
                                      "prefixListIds": ["pl-world"]})
    world, office = _prefix_list("world", ["0.0.0.0/0"], "pl-world"), _prefix_list("office", ["198.51.100.0/24"],
                                                                                   "pl-office")
    # Under the mocks ids are known: the reference is matched by id.
    result = policy.no_public_management_ports([world, office, by_list])
    assert result.status == "fail" and "0.0.0.0/0" in result.offenders[0]
    to_office = res(AWS_INGRESS, "o", {"ipProtocol": "tcp", "fromPort": 22, "toPort": 22, "prefixListId": "pl-office"})
    assert policy.no_public_management_ports([world, office, to_office]).status == "pass"
    # A separate entry resource opens the list to the world.
    entry = res(policy.AWS_PREFIX_LIST_ENTRY, "e", {"prefixListId": "pl-office", "cidr": "0.0.0.0/0"})
    assert policy.no_public_management_ports([world, office, entry, to_office]).status == "fail"
    # In the program's gate, ids are unknown: a reference stands for every list of the stack.
    unknown_id = res(AWS_INGRESS, "u", {"ipProtocol": "tcp", "fromPort": 22, "toPort": 22,
                                        "prefixListId": pulumi.UNKNOWN})
    assert policy.no_public_management_ports([_prefix_list("w", ["0.0.0.0/0"]), unknown_id]).status == "fail"
    assert policy.no_public_management_ports([_prefix_list("o", ["198.51.100.0/24"]), unknown_id]).status == "pass"


@pytest.mark.parametrize(("rule", "why"), [
    (aws_rule("unknown", [pulumi.UNKNOWN], 22), "not known until another resource exists"),
    (aws_rule("typo", ["0.0.0.0/O"], 22), "is not an address block"),
    (res(AWS_SG_RULE, "outside", {"type": "ingress", "protocol": "tcp", "fromPort": 22, "toPort": 22,
                                  "prefixListIds": ["pl-0123456789abcdef0"]}), "not one of the stack's"),
    (res(AZURE_NSG, "tag", {"securityRules": [azure_rule("t", ["Storage"], 22)]}), "service tag 'Storage'"),
    (res(AZURE_NSG_RULE, "none", {"direction": "Inbound", "access": "Allow", "protocol": "Tcp",
                                  "destinationPortRange": "22"}), "names no source"),
    (oci_rule("unknown", pulumi.UNKNOWN, 6443), "not known until another resource exists"),
])
def test_a_source_the_rule_cannot_count_fails(rule: Resource, why: str) -> None:
    """A source it could not resolve was skipped, so the rule passed."""
    result = policy.no_public_management_ports([rule])
    assert result.status == "fail", result
    assert why in result.offenders[0]
    # Where it reaches no management port, it does not matter.
    elsewhere = dataclasses.replace(rule, inputs=_moved(rule.inputs, 8080))
    assert policy.no_public_management_ports([elsewhere]).status == "pass"


def _moved(inputs: dict[str, Any], port: int) -> dict[str, Any]:
    out = dict(inputs)
    if "fromPort" in out:
        out.update(fromPort=port, toPort=port)
    if "tcpOptions" in out:
        out["tcpOptions"] = {"destinationPortRange": {"min": port, "max": port}}
    if "destinationPortRange" in out:
        out["destinationPortRange"] = str(port)
    if "securityRules" in out:
        out["securityRules"] = [dict(r, destinationPortRange=str(port)) for r in out["securityRules"]]
    return out


def test_sources_that_name_no_internet_address_pass() -> None:
    groups = res(AWS_SG_RULE, "g", {"type": "ingress", "protocol": "tcp", "fromPort": 22, "toPort": 22,
                                    "sourceSecurityGroupId": "sg-123"})
    oci_nsg = res(OCI_NSG_RULE, "n", {"direction": "INGRESS", "protocol": "6", "source": "ocid1.nsg.oc1..x",
                                      "sourceType": "NETWORK_SECURITY_GROUP",
                                      "tcpOptions": {"destinationPortRange": {"min": 22, "max": 22}}})
    asg = res(AZURE_NSG_RULE, "a", {"direction": "Inbound", "access": "Allow", "protocol": "Tcp",
                                    "sourceApplicationSecurityGroupIds": ["/subscriptions/x/asg"],
                                    "destinationPortRange": "22"})
    assert policy.no_public_management_ports([groups, oci_nsg, asg]).status == "pass"


def test_the_stacks_management_ports_include_what_the_roles_listen_on() -> None:
    # SSH, the Kubernetes API and kubelet, etcd, IPMI, node_exporter, DCGM exporter, Ceph dashboard,
    # Ceph manager metrics, Ceph monitors.
    assert {22, 6443, 10250, 2379, 2380, 623, 9100, 9400, 8443, 9283, 3300, 6789} <= set(MANAGEMENT_PORTS)


def test_azure_halves_in_one_rule_and_internet_tag_fail() -> None:
    halves = res(AZURE_NSG, "nsg", {"securityRules": [azure_rule("h", ["0.0.0.0/1", "128.0.0.0/1"], 22)]})
    assert policy.no_public_management_ports([halves]).status == "fail"
    tag = res(
        AZURE_NSG_RULE,
        "t",
        {
            "direction": "Inbound",
            "access": "Allow",
            "protocol": "Tcp",
            "sourceAddressPrefix": "Internet",
            "destinationPortRange": "6443",
        },
    )
    assert policy.no_public_management_ports([tag]).status == "fail"
    vnet = res(AZURE_NSG, "v", {"securityRules": [azure_rule("v", ["VirtualNetwork"], "*", protocol="*")]})
    assert policy.no_public_management_ports([vnet]).status == "pass"


def test_oci_halves_split_over_two_nsg_rules_fail() -> None:
    rules = [oci_rule("a", "0.0.0.0/1", 22), oci_rule("b", "128.0.0.0/1", 22)]
    result = policy.no_public_management_ports(rules)
    assert result.status == "fail"
    assert "NetworkSecurityGroupSecurityRule a" in result.offenders[0]


def test_icmp_from_the_world_opens_no_port() -> None:
    aws = res(
        AWS_SG, "sg", {"ingress": [{"protocol": "icmp", "fromPort": 8, "toPort": 0, "cidrBlocks": ["0.0.0.0/0"]}]}
    )
    oci = res(OCI_NSG_RULE, "ping", {"direction": "INGRESS", "protocol": "1", "source": "0.0.0.0/0"})
    azure = res(AZURE_NSG, "p", {"securityRules": [azure_rule("p", ["*"], "*", protocol="Icmp")]})
    for r in (aws, oci, azure):
        assert policy.no_public_management_ports([r]).status != "fail", r.type


@pytest.mark.parametrize("stack", ["aws-h100", "azure-h100", "oci-h100"])
def test_admin_cidrs_covering_the_world_fail_in_each_cloud_plan(stack: str) -> None:
    plan = plan_of(stack)
    assert policy.no_public_management_ports(plan.resources).status == "pass"
    if stack == "aws-h100":
        sg = first(plan, AWS_SG)
        ingress = [
            *sg.inputs["ingress"],
            {"protocol": "tcp", "fromPort": 22, "toPort": 22, "cidrBlocks": ["0.0.0.0/1", "128.0.0.0/1"]},
        ]
        broken = replace(plan, sg.name, ingress=ingress)
    elif stack == "azure-h100":
        nsg = first(plan, AZURE_NSG)
        broken = replace(plan, nsg.name, securityRules=[*nsg.inputs["securityRules"], azure_rule("x", ["::/0"], 22)])
    else:
        broken = [*plan.resources, oci_rule("extra", "128.0.0.0/1", 6443), oci_rule("extra2", "0.0.0.0/1", 6443)]
    assert policy.no_public_management_ports(broken).status == "fail"


# --- imds-v2-only -------------------------------------------------------------------------------


def test_aws_instances_and_templates_require_imdsv2(aws_plan: Plan) -> None:
    assert policy.imds_v2_only(aws_plan.resources).status == "pass"
    gpu = first(aws_plan, policy.AWS_INSTANCE, **{"gpucluster-roles": "gpu"})
    optional = replace(aws_plan, gpu.name, metadataOptions={"httpTokens": "optional", "httpEndpoint": "enabled"})
    result = policy.imds_v2_only(optional)
    assert result.status == "fail"
    assert result.offenders[0].startswith(f"Instance {gpu.name}")
    unstated = edit(aws_plan, gpu.name, lambda i: i.pop("metadataOptions"))
    assert policy.imds_v2_only(unstated).status == "fail"
    template = first(aws_plan, policy.AWS_LAUNCH_TEMPLATE)
    loose = replace(aws_plan, template.name, metadataOptions={"httpTokens": "optional"})
    assert policy.imds_v2_only(loose).offenders[0].startswith(f"LaunchTemplate {template.name}")


def test_oci_instances_turn_the_legacy_metadata_endpoint_off(oci_plan: Plan) -> None:
    assert policy.imds_v2_only(oci_plan.resources).status == "pass"
    node = first(oci_plan, policy.OCI_INSTANCE, **{"gpucluster-roles": "storage"})
    legacy = replace(oci_plan, node.name, instanceOptions={"areLegacyImdsEndpointsDisabled": False})
    assert policy.imds_v2_only(legacy).status == "fail"
    unstated = edit(oci_plan, node.name, lambda i: i.pop("instanceOptions"))
    assert "are_legacy_imds_endpoints_disabled" in policy.imds_v2_only(unstated).offenders[0]


def test_imds_rule_is_not_applicable_where_no_cloud_instance_exists(ib_plan: Plan) -> None:
    assert policy.imds_v2_only(ib_plan.resources).status == "n/a"


# --- disks-encrypted ------------------------------------------------------------------------------


def test_aws_root_and_data_volumes_must_be_encrypted(aws_plan: Plan) -> None:
    assert policy.disks_encrypted(aws_plan.resources).status == "pass"
    node = first(aws_plan, policy.AWS_INSTANCE, **{"gpucluster-roles": "storage"})
    plain_root = edit(aws_plan, node.name, lambda i: i["rootBlockDevice"].update(encrypted=False))
    assert policy.disks_encrypted(plain_root).status == "fail"
    no_root = edit(aws_plan, node.name, lambda i: i.pop("rootBlockDevice"))
    assert policy.disks_encrypted(no_root).status == "fail"
    data = edit(
        aws_plan, node.name, lambda i: i.update(ebsBlockDevices=[{"deviceName": "/dev/sdf", "volumeSize": 100}])
    )
    assert "/dev/sdf" in policy.disks_encrypted(data).offenders[0]
    template = res(
        policy.AWS_LAUNCH_TEMPLATE,
        "lt",
        {"blockDeviceMappings": [{"deviceName": "/dev/sda1", "ebs": {"volumeSize": 50, "encrypted": "false"}}]},
    )
    volume = res(policy.AWS_EBS_VOLUME, "vol", {"size": 100})
    assert policy.disks_encrypted([template]).status == "fail"
    assert policy.disks_encrypted([volume]).status == "fail"
    assert policy.disks_encrypted([res(policy.AWS_EBS_VOLUME, "ok", {"encrypted": True})]).status == "pass"


def test_azure_vms_state_encryption_at_host_or_the_platform_default(azure_plan: Plan) -> None:
    assert policy.disks_encrypted(azure_plan.resources).status == "pass"
    vm = first(azure_plan, policy.AZURE_VM, **{"gpucluster-roles": "gpu"})
    unstated = edit(azure_plan, vm.name, lambda i: i["tags"].pop(TAG_DISK_ENCRYPTION))
    result = policy.disks_encrypted(unstated)
    assert result.status == "fail"
    assert result.offenders[0].startswith(f"LinuxVirtualMachine {vm.name}")
    at_host = edit(
        azure_plan, vm.name, lambda i: (i["tags"].pop(TAG_DISK_ENCRYPTION), i.update(encryptionAtHostEnabled=True))
    )
    assert policy.disks_encrypted(at_host).status == "pass"
    at_host_off = edit(azure_plan, vm.name, lambda i: i.update(encryptionAtHostEnabled=False))
    assert policy.disks_encrypted(at_host_off).status == "fail"


def test_oci_vm_shapes_encrypt_volume_traffic_in_transit(oci_plan: Plan) -> None:
    assert policy.disks_encrypted(oci_plan.resources).status == "pass"
    vm = next(r for r in oci_plan.resources if r.type == policy.OCI_INSTANCE and r.inputs["shape"].startswith("VM."))
    off = edit(oci_plan, vm.name, lambda i: i.pop("isPvEncryptionInTransitEnabled"))
    assert policy.disks_encrypted(off).status == "fail"
    via_launch_options = edit(
        oci_plan,
        vm.name,
        lambda i: (
            i.pop("isPvEncryptionInTransitEnabled"),
            i.update(launchOptions={"isPvEncryptionInTransitEnabled": True}),
        ),
    )
    assert policy.disks_encrypted(via_launch_options).status == "pass"
    # Bare-metal shapes: volumes are encrypted at rest with no way to turn it off; the
    # paravirtualized in-transit option belongs to VM shapes' launch options.
    bm = res(policy.OCI_INSTANCE, "bm", {"shape": "BM.GPU.H100.8"})
    assert policy.disks_encrypted([bm]).status == "pass"


# --- no-public-ip-on-gpu-storage ------------------------------------------------------------


def test_aws_gpu_and_storage_nodes_get_no_public_ip(aws_plan: Plan) -> None:
    assert policy.no_public_ips(aws_plan.resources).status == "pass"
    storage = first(aws_plan, policy.AWS_INSTANCE, **{"gpucluster-roles": "storage"})
    public = replace(aws_plan, storage.name, associatePublicIpAddress=True)
    assert policy.no_public_ips(public).offenders[0].startswith(f"Instance {storage.name}")
    template = first(aws_plan, policy.AWS_LAUNCH_TEMPLATE)
    nic_public = edit(
        aws_plan, template.name, lambda i: i["networkInterfaces"][0].update(associatePublicIpAddress="true")
    )
    assert policy.no_public_ips(nic_public).status == "fail"
    subnet = next(
        r for r in aws_plan.resources if r.type == "aws:ec2/subnet:Subnet" and r.tag("gpucluster-purpose") == "gpu"
    )
    mapping = replace(aws_plan, subnet.name, mapPublicIpOnLaunch=True)
    assert policy.no_public_ips(mapping).status == "fail"


def test_a_service_node_may_have_a_public_ip(aws_plan: Plan) -> None:
    cp = first(aws_plan, policy.AWS_INSTANCE, **{"gpucluster-roles": "control_plane"})
    assert policy.no_public_ips(replace(aws_plan, cp.name, associatePublicIpAddress=True)).status == "pass"


def test_azure_gpu_nic_with_a_public_ip_fails(azure_plan: Plan) -> None:
    assert policy.no_public_ips(azure_plan.resources).status == "pass"
    nic = first(azure_plan, policy.AZURE_NIC, **{"gpucluster-roles": "gpu"})
    public = edit(azure_plan, nic.name, lambda i: i["ipConfigurations"][0].update(publicIpAddressId="/pip/x"))
    assert policy.no_public_ips(public).offenders[0].startswith(f"NetworkInterface {nic.name}")


def test_oci_gpu_and_storage_instances_say_no_public_ip(oci_plan: Plan) -> None:
    assert policy.no_public_ips(oci_plan.resources).status == "pass"
    gpu = first(oci_plan, policy.OCI_INSTANCE, **{"gpucluster-roles": "gpu"})
    public = edit(oci_plan, gpu.name, lambda i: i["createVnicDetails"].update(assignPublicIp="true"))
    assert policy.no_public_ips(public).status == "fail"
    # Unset, OCI gives a public IP whenever the subnet allows one: the instance must say false.
    unset = edit(oci_plan, gpu.name, lambda i: i["createVnicDetails"].pop("assignPublicIp"))
    assert policy.no_public_ips(unset).status == "fail"
    subnet = next(r for r in oci_plan.resources if r.type == "oci:Core/subnet:Subnet")
    public_subnet = replace(oci_plan, subnet.name, prohibitPublicIpOnVnic=False)
    assert policy.no_public_ips(public_subnet).status == "fail"


# --- every example stack satisfies every rule -----------------------------------------------


@pytest.mark.parametrize("stack", ["aws-h100", "azure-h100", "oci-h100", "onprem-h100-ib", "onprem-h100-roce"])
def test_every_rule_holds_on_every_example_stack(stack: str) -> None:
    failed = [r for r in policy.evaluate(plan_of(stack).resources) if r.status == "fail"]
    assert failed == []
