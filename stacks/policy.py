"""Policy rules over the resources a program registers.

Each rule is a function ``(resources) -> PolicyResult``: ``pass``, ``fail`` with the offending
resources named, or ``n/a`` where the stack has nothing the rule is about. Three callers run the
same functions:

* the program itself, through :class:`stacks.gate.PolicyGate`, during ``pulumi preview`` and
  ``pulumi up`` (a rule that fails stops the program; see ``docs/policy.md``);
* ``gpucluster plan``, over the resources recorded under Pulumi's mocks;
* the unit tests, which also feed them resources built by hand to prove each rule fails when
  it is broken.

Rules read what the providers would receive (instance inputs, security rules, subnet CIDRs)
and the facts our components carry as props (``StorageNodes``: Ceph pools and how many failure
domains the target offers; ``Fabric``: networks that have no cloud resource, such as an
InfiniBand or RoCE fabric, and the nodes attached to it).

What a rule may rely on: input properties, in the wire form the engine hands a stack transform
(camelCase names). Cloud-assigned ids are known only under the mocks: while the program runs, a
reference to another resource's id is unknown (``pulumi preview``) or an id the gate cannot
match (``pulumi up``), so a rule that links resources by id also judges the link by structure.
Parents are likewise unknown to the gate; storage hosts are found by role as well as by parent.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from pulumi import UNKNOWN

from gpucluster.plan import PolicyResult, Resource

from .components.common import (
    MANAGEMENT_PORT_RANGES,
    MANAGEMENT_PORTS,
    TAG_DISK_ENCRYPTION,
    TAG_IMAGE,
    TAG_PURPOSE,
    TAG_ROLES,
)

AWS_INSTANCE = "aws:ec2/instance:Instance"
AWS_LAUNCH_TEMPLATE = "aws:ec2/launchTemplate:LaunchTemplate"
AWS_EBS_VOLUME = "aws:ebs/volume:Volume"
AWS_SUBNET = "aws:ec2/subnet:Subnet"
AWS_PG = "aws:ec2/placementGroup:PlacementGroup"
AZURE_VM = "azure:compute/linuxVirtualMachine:LinuxVirtualMachine"
AZURE_VMSS = "azure:compute/orchestratedVirtualMachineScaleSet:OrchestratedVirtualMachineScaleSet"
AZURE_NIC = "azure:network/networkInterface:NetworkInterface"
AZURE_MANAGED_DISK = "azure:compute/managedDisk:ManagedDisk"
OCI_INSTANCE = "oci:Core/instance:Instance"
OCI_SUBNET = "oci:Core/subnet:Subnet"
OCI_CLUSTER = "oci:Core/computeCluster:ComputeCluster"
OCI_VOLUME_ATTACHMENT = "oci:Core/volumeAttachment:VolumeAttachment"
BM_MACHINE = "gpucluster:baremetal:Machine"
NODE_TYPES = (AWS_INSTANCE, AZURE_VM, OCI_INSTANCE, BM_MACHINE)

# The statement our Azure VMs carry: their managed disks rely on server-side encryption with
# platform-managed keys, which Azure applies to every managed disk by default ("By default,
# managed disks use platform-managed encryption keys. All managed disks, snapshots, images, and
# data written to existing managed disks are automatically encrypted-at-rest":
# https://docs.microsoft.com/en-us/azure/virtual-machines/linux/disk-encryption). It does not
# cover the temp disk or host caches; encryption at host does (Microsoft Learn, "Choose the
# right disk encryption option for Azure VMs": https://learn.microsoft.com/en-us/training/
# modules/implement-disk-encryption-azure-virtual-machines/2-choose-disk-encryption-option).
PLATFORM_MANAGED_KEY = "platform-managed-key"


def _roles(r: Resource) -> list[str]:
    if r.type == BM_MACHINE:
        return [str(x) for x in r.inputs.get("roles") or []]
    tag = r.tag(TAG_ROLES)
    return tag.split(",") if tag else []


def _gpu_or_storage(r: Resource) -> bool:
    return bool({"gpu", "storage"} & set(_roles(r)))


def _label(r: Resource) -> str:
    return f"{r.type.split(':')[-1]} {r.name}"


def _true(value: Any) -> bool:
    """A boolean input; some providers type booleans as strings ("true")."""
    return value is True or (isinstance(value, str) and value.strip().lower() == "true")


def _false(value: Any) -> bool:
    return value is False or (isinstance(value, str) and value.strip().lower() == "false")


def _mapping(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def gpu_nodes(resources: Sequence[Resource]) -> list[Resource]:
    return [r for r in resources if r.type in NODE_TYPES and "gpu" in _roles(r)]


# --- every GPU node in the placement group or cluster network -------------------------------


def _linked(value: Any, candidates: Sequence[Resource], qualifies: Callable[[Resource], bool]) -> bool:
    """Whether ``value`` (a reference to another resource's id) names a qualifying candidate.

    Where the candidates' ids are known (under the mocks) the id must match one that qualifies.
    Where they are not (the program's own gate), the node must name *something* (a value, or one
    unknown until the candidate exists) and every candidate in the stack must qualify.
    """
    if value is None or value == "":
        return False
    if any(c.id for c in candidates):
        return value in {c.id for c in candidates if qualifies(c)}
    return bool(candidates) and all(qualifies(c) for c in candidates)


def gpu_placement(resources: Sequence[Resource]) -> PolicyResult:
    rule = "gpu-placement"
    nodes = gpu_nodes(resources)
    if not nodes:
        return PolicyResult(rule, "n/a", "no GPU nodes this rule knows how to place")
    cluster_pgs = {
        str(r.inputs.get("name")) for r in resources if r.type == AWS_PG and r.inputs.get("strategy") == "cluster"
    }
    scale_sets = [r for r in resources if r.type == AZURE_VMSS]
    clusters = [r for r in resources if r.type == OCI_CLUSTER]
    fabrics = {
        str(r.name): set(r.inputs.get("members") or []) for r in resources if r.type == "gpucluster:baremetal:Fabric"
    }
    offenders = []
    for node in nodes:
        if node.type == AWS_INSTANCE:
            group = node.inputs.get("placementGroup")
            # The group's name is an input, normally known in a preview; if it is not, naming one
            # while the stack has a cluster group is what can be judged.
            ok = group in cluster_pgs if isinstance(group, str) else group is not None and bool(cluster_pgs)
        elif node.type == AZURE_VM:
            ok = _linked(
                node.inputs.get("virtualMachineScaleSetId"),
                scale_sets,
                lambda s: s.inputs.get("singlePlacementGroup") is True,
            )
        elif node.type == OCI_INSTANCE:
            ok = _linked(node.inputs.get("computeClusterId"), clusters, lambda c: True)
        else:
            fabric = fabrics.get(str(node.inputs.get("fabric")))
            ok = fabric is not None and node.inputs.get("hostname") in fabric
        if not ok:
            offenders.append(_label(node))
    if offenders:
        return PolicyResult(
            rule,
            "fail",
            f"{len(offenders)} GPU node(s) outside a cluster placement group / single-placement-group "
            "scale set / compute cluster / fabric",
            tuple(offenders),
        )
    return PolicyResult(rule, "pass", f"all {len(nodes)} GPU node(s) share a placement group or cluster network")


# --- no management port open to the world -------------------------------------------------
#
# "Open to the world" is judged by how much of the internet a port's sources cover, not by how
# they are spelled: 0.0.0.0/1 plus 128.0.0.0/1 (in one rule or two) is the world, so is any
# public block larger than one organisation's (a /16, a /48), and so is ::/0. For each management
# port, and for each port of a management range, the sources of every inbound allow rule that
# reaches it (over the whole stack: what one rule opens, another cannot close) are united, space
# that is not routed on the internet is taken out, and the rest is counted. A source the rule
# cannot count (a value unknown until another resource exists, a prefix list or service tag it
# cannot expand, a rule naming no source) fails the rule where it reaches a management port: what
# cannot be counted cannot be shown closed.

# IANA IPv4 Special-Purpose Address Registry (RFC 6890 and successors): not reachable from the
# internet, so a rule admitting them admits nobody from outside.
_NOT_INTERNET_V4 = tuple(
    ipaddress.IPv4Network(n)
    for n in (
        "0.0.0.0/8",
        "10.0.0.0/8",
        "100.64.0.0/10",
        "127.0.0.0/8",
        "169.254.0.0/16",
        "172.16.0.0/12",
        "192.0.0.0/24",
        "192.0.2.0/24",
        "192.168.0.0/16",
        "198.18.0.0/15",
        "198.51.100.0/24",
        "203.0.113.0/24",
        "224.0.0.0/4",
        "240.0.0.0/4",
    )
)
# IPv6 global unicast space (IANA IPv6 Address Space registry).
_INTERNET_V6 = ipaddress.IPv6Network("2000::/3")
# A port is open to the world when its sources cover more internet addresses than one
# organisation holds: more than a /16's worth of IPv4 (65,536 addresses; a /15, a /9, 0.0.0.0/0
# all fail) or more than a /48's worth of global IPv6 (a site's allocation, RFC 6177). An office's
# /24 or a site's /48 passes; a provider's or a country's range does not.
WORLD_V4 = 2**16
WORLD_V6 = 2**80
_ALL_V4 = ipaddress.IPv4Network("0.0.0.0/0")
_ALL_V6 = ipaddress.IPv6Network("::/0")
# Source names that mean "anyone": Azure NSG wildcards and service tags ("*", "Any", "Internet";
# "AzureCloud" is every Azure datacenter's public range, i.e. anyone with an Azure VM).
_WORLD_NAMES = {"*", "any", "internet", "azurecloud"}
# Azure service tags that name no internet address: the virtual network's own space and the
# platform's load-balancer probe address (Microsoft Learn, "Virtual network service tags").
# Every other tag names public ranges the rule cannot count, and fails where it reaches a
# management port.
_AZURE_PRIVATE_TAGS = {"virtualnetwork", "azureloadbalancer"}
# OCI source types that name no internet address: another NSG's VNICs, and the Oracle Services
# Network's service CIDR labels (Oracle's own services, not other tenants).
_OCI_NAMED_SOURCES = {"NETWORK_SECURITY_GROUP", "SERVICE_CIDR_BLOCK"}

_AWS_NO_PORTS = {"icmp", "icmpv6", "1", "58"}
_AZURE_NO_PORTS = {"icmp"}

AWS_SG = "aws:ec2/securityGroup:SecurityGroup"
AWS_DEFAULT_SG = "aws:ec2/defaultSecurityGroup:DefaultSecurityGroup"
AWS_SG_RULE = "aws:ec2/securityGroupRule:SecurityGroupRule"
AWS_INGRESS_RULE = "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule"
AWS_PREFIX_LIST = "aws:ec2/managedPrefixList:ManagedPrefixList"
AWS_PREFIX_LIST_ENTRY = "aws:ec2/managedPrefixListEntry:ManagedPrefixListEntry"
AZURE_NSG = "azure:network/networkSecurityGroup:NetworkSecurityGroup"
AZURE_NSG_RULE = "azure:network/networkSecurityRule:NetworkSecurityRule"
OCI_NSG_RULE = "oci:Core/networkSecurityGroupSecurityRule:NetworkSecurityGroupSecurityRule"
OCI_SECURITY_LIST = "oci:Core/securityList:SecurityList"
OCI_DEFAULT_SECURITY_LIST = "oci:Core/defaultSecurityList:DefaultSecurityList"


def _azure_native(type_: str, noun: str) -> bool:
    """``azure-native:network:<noun>``, or ``azure-native:network/<API version>:<noun>``."""
    package, _, rest = type_.partition(":")
    module, _, name = rest.partition(":")
    return package == "azure-native" and module.split("/")[0] == "network" and name == noun


@dataclass(frozen=True)
class _Ingress:
    """One inbound allow rule: who (sources: CIDRs, or names meaning anyone), to which ports, and
    the sources it names that cannot be counted, each with why."""

    resource: Resource
    sources: tuple[str, ...]
    low: int
    high: int
    unresolved: tuple[str, ...] = ()


@dataclass
class _Sources:
    """Sources of one rule as they are read: counted ones, named sets with no internet address
    (security groups, the virtual network), and the ones that cannot be counted."""

    cidrs: list[str] = field(default_factory=list)
    named: int = 0
    unresolved: list[str] = field(default_factory=list)

    def given(self) -> bool:
        return bool(self.cidrs or self.named or self.unresolved)

    def cidr(self, value: Any, field_name: str) -> None:
        if value is None or value == "":
            return
        if value == UNKNOWN:
            self.unresolved.append(f"{field_name} is not known until another resource exists")
        elif not isinstance(value, str):
            self.unresolved.append(f"{field_name} {value!r} is not an address block")
        else:
            try:
                ipaddress.ip_network(value.strip(), strict=False)
            except ValueError:
                self.unresolved.append(f"{field_name} {value!r} is not an address block")
            else:
                self.cidrs.append(value.strip())

    def ingress(self, r: Resource, low: int, high: int) -> _Ingress:
        unresolved = list(self.unresolved)
        if not self.given():
            unresolved.append("the rule names no source")
        return _Ingress(r, tuple(self.cidrs), low, high, tuple(unresolved))


class _PrefixLists:
    """AWS managed prefix lists of the stack, by id, with the CIDRs of their entries (inline, and
    ``ManagedPrefixListEntry`` resources). A reference is matched by id where ids are known (the
    mocks); where they are not (the program's gate, where a list's id is unknown or only known
    once created) it stands for every list of the stack, so a list that opens a port to the
    world is found whichever rule names it. A list the stack does not hold cannot be counted."""

    def __init__(self, resources: Sequence[Resource]) -> None:
        lists = [r for r in resources if r.type == AWS_PREFIX_LIST]
        entries = [r for r in resources if r.type == AWS_PREFIX_LIST_ENTRY]
        self.ids_known = bool(lists) and all(r.id for r in lists)
        self.by_id: dict[str, list[Any]] = {}
        self.every: list[Any] = []
        for r in lists:
            cidrs = [_mapping(e).get("cidr") for e in _list(r.inputs.get("entries"))]
            cidrs += [e.inputs.get("cidr") for e in entries if r.id and e.inputs.get("prefixListId") == r.id]
            self.by_id[r.id] = cidrs
            self.every += cidrs
        self.every += [e.inputs.get("cidr") for e in entries]
        self.held = bool(lists or entries)

    def add(self, value: Any, out: _Sources) -> None:
        if value is None or value == "":
            return
        if self.ids_known and value in self.by_id:
            cidrs = self.by_id[value]
        elif not self.ids_known and self.held:
            cidrs = self.every
        else:
            out.unresolved.append(f"prefix list {value!r} is not one of the stack's, so its entries cannot be counted")
            return
        for cidr in cidrs:
            out.cidr(cidr, f"prefix list {value!r} entry")
        out.named += 1


def _ingress(resources: Sequence[Resource]) -> Iterable[_Ingress]:
    prefix_lists = _PrefixLists(resources)
    for r in resources:
        inp = r.inputs
        if r.type in (AWS_SG, AWS_DEFAULT_SG):
            for rule in _list(inp.get("ingress")):
                yield from _aws_rule(r, _mapping(rule), _mapping(rule).get("protocol"), prefix_lists)
        elif r.type == AWS_SG_RULE and inp.get("type") == "ingress":
            yield from _aws_rule(r, inp, inp.get("protocol"), prefix_lists)
        elif r.type == AWS_INGRESS_RULE:
            rule = {
                "cidrBlocks": [inp.get("cidrIpv4")],
                "ipv6CidrBlocks": [inp.get("cidrIpv6")],
                "prefixListIds": [inp.get("prefixListId")],
                "sourceSecurityGroupId": inp.get("referencedSecurityGroupId"),
                "fromPort": inp.get("fromPort"),
                "toPort": inp.get("toPort"),
            }
            yield from _aws_rule(r, rule, inp.get("ipProtocol"), prefix_lists)
        elif r.type == AZURE_NSG or _azure_native(r.type, "NetworkSecurityGroup"):
            for rule in _list(inp.get("securityRules")):
                yield from _azure_rule(r, _mapping(rule))
        elif r.type == AZURE_NSG_RULE or _azure_native(r.type, "SecurityRule"):
            yield from _azure_rule(r, inp)
        elif r.type == OCI_NSG_RULE:
            if str(inp.get("direction", "")).upper() == "INGRESS":
                yield from _oci_rule(r, inp)
        elif r.type in (OCI_SECURITY_LIST, OCI_DEFAULT_SECURITY_LIST):
            for rule in _list(inp.get("ingressSecurityRules")):
                yield from _oci_rule(r, _mapping(rule))


def _strings(values: Iterable[Any]) -> tuple[str, ...]:
    return tuple(v for v in values if isinstance(v, str) and v)


def _port(value: Any, default: int) -> int:
    try:
        return int(value)
    except (TypeError, ValueError):
        return default


def _aws_rule(r: Resource, rule: Mapping[str, Any], protocol: Any, prefix_lists: _PrefixLists) -> Iterable[_Ingress]:
    proto = str(protocol).lower()
    if proto in _AWS_NO_PORTS:  # for ICMP, from/to_port are a type and a code
        return
    found = _Sources()
    for key in ("cidrBlocks", "ipv6CidrBlocks"):
        for value in _list(rule.get(key)):
            found.cidr(value, key)
    for value in _list(rule.get("prefixListIds")):
        prefix_lists.add(value, found)
    # Another group's members, or the group's own: instances inside the VPC, no internet address.
    groups = [*_list(rule.get("securityGroups")), rule.get("sourceSecurityGroupId")]
    found.named += sum(1 for g in groups if g not in (None, "")) + (1 if _true(rule.get("self")) else 0)
    if proto in ("-1", "all"):
        yield found.ingress(r, 0, 65535)
    else:
        yield found.ingress(r, _port(rule.get("fromPort"), 0), _port(rule.get("toPort"), 65535))


def _azure_ports(spec: Any) -> tuple[int, int]:
    text = str(spec).strip()
    if text in ("*", ""):
        return 0, 65535
    low, _, high = text.partition("-")
    return int(low), int(high or low)


def _azure_rule(r: Resource, rule: Mapping[str, Any]) -> Iterable[_Ingress]:
    if str(rule.get("direction", "")).lower() != "inbound" or str(rule.get("access", "")).lower() != "allow":
        return
    if str(rule.get("protocol", "*")).lower() in _AZURE_NO_PORTS:
        return
    found = _Sources()
    for value in [rule.get("sourceAddressPrefix"), *_list(rule.get("sourceAddressPrefixes"))]:
        name = value.strip().lower() if isinstance(value, str) else ""
        if name in _WORLD_NAMES or name.startswith("azurecloud."):
            found.cidrs.append(value)
        elif name in _AZURE_PRIVATE_TAGS:
            found.named += 1
        elif isinstance(value, str) and value and value != UNKNOWN and not any(c.isdigit() for c in value[:1]) \
                and ":" not in value:
            found.unresolved.append(f"service tag {value!r} names public ranges the rule cannot count")
        else:
            found.cidr(value, "sourceAddressPrefix")
    # Application security groups: the network's own VMs.
    found.named += len(_list(rule.get("sourceApplicationSecurityGroupIds")))
    found.named += len(_list(rule.get("sourceApplicationSecurityGroups")))
    for spec in [rule.get("destinationPortRange"), *_list(rule.get("destinationPortRanges"))]:
        if isinstance(spec, str | int):
            low, high = _azure_ports(spec)
            yield found.ingress(r, low, high)


def _oci_rule(r: Resource, rule: Mapping[str, Any]) -> Iterable[_Ingress]:
    protocol = str(rule.get("protocol")).lower()
    if protocol not in ("all", "6", "17"):  # ICMP (1) and ICMPv6 (58) reach no port
        return
    found = _Sources()
    if str(rule.get("sourceType") or "CIDR_BLOCK").upper() in _OCI_NAMED_SOURCES:
        found.named += 1 if rule.get("source") not in (None, "") else 0
    else:
        found.cidr(rule.get("source"), "source")
    if protocol == "all":
        yield found.ingress(r, 0, 65535)
        return
    opts = _mapping(rule.get("tcpOptions") if protocol == "6" else rule.get("udpOptions"))
    ports = _mapping(opts.get("destinationPortRange"))
    if not ports:
        yield found.ingress(r, 0, 65535)
        return
    yield found.ingress(r, _port(ports.get("min"), 0), _port(ports.get("max"), 65535))


def _networks_of(sources: Iterable[str]) -> tuple[list[ipaddress.IPv4Network], list[ipaddress.IPv6Network]]:
    v4: list[ipaddress.IPv4Network] = []
    v6: list[ipaddress.IPv6Network] = []
    for source in sources:
        text = source.strip()
        if text.lower() in _WORLD_NAMES or text.lower().startswith("azurecloud."):
            v4.append(_ALL_V4)
            v6.append(_ALL_V6)
            continue
        try:
            net = ipaddress.ip_network(text, strict=False)
        except ValueError:
            continue  # counted as unresolved where it was read
        if isinstance(net, ipaddress.IPv4Network):
            v4.append(net)
        else:
            v6.append(net)
    return v4, v6


def _overlap(a: ipaddress.IPv4Network | ipaddress.IPv6Network, b: ipaddress.IPv4Network | ipaddress.IPv6Network) -> int:
    # Two CIDR blocks either nest or are disjoint.
    if a.version != b.version:
        return 0
    if a.subnet_of(b):  # type: ignore[arg-type]
        return a.num_addresses
    if b.subnet_of(a):  # type: ignore[arg-type]
        return b.num_addresses
    return 0


def internet_coverage(sources: Iterable[str]) -> tuple[int, int]:
    """How many internet-routed IPv4 and IPv6 addresses ``sources`` admit, overlaps counted once."""
    v4, v6 = _networks_of(sources)
    count4 = 0
    for net4 in ipaddress.collapse_addresses(v4):
        count4 += net4.num_addresses - sum(_overlap(net4, special) for special in _NOT_INTERNET_V4)
    count6 = sum(_overlap(net6, _INTERNET_V6) for net6 in ipaddress.collapse_addresses(v6))
    return count4, count6


def is_world(sources: Iterable[str]) -> bool:
    count4, count6 = internet_coverage(sources)
    return count4 > WORLD_V4 or count6 > WORLD_V6


def _management_ports() -> list[tuple[int, int, str]]:
    """(first port, last port, what listens) of every management port and range."""
    single = [(port, port, service) for port, service in MANAGEMENT_PORTS.items()]
    ranges = [(low, high, service) for (low, high), service in MANAGEMENT_PORT_RANGES.items()]
    return sorted(single + ranges)


def _ports_name(low: int, high: int) -> str:
    return f"port {low}" if low == high else f"ports {low}-{high}"


def _port_offenders(rules: list[_Ingress], low: int, high: int, service: str) -> list[str]:
    reaching = [i for i in rules if i.low <= high and i.high >= low]
    out = [f"{_ports_name(low, high)} ({service}) via {_label(i.resource)}: {why}"
           for i in reaching for why in i.unresolved]
    # Which rules reach a port changes only where one starts: the widest union of sources over the
    # range is found at the range's first port or at a rule's first port inside it.
    for port in sorted({low} | {i.low for i in reaching if low <= i.low <= high}):
        here = [i for i in reaching if i.low <= port <= i.high]
        sources = sorted({s for i in here for s in i.sources})
        count4, count6 = internet_coverage(sources)
        if count4 <= WORLD_V4 and count6 <= WORLD_V6:
            continue
        via = sorted({_label(i.resource) for i in here if any(internet_coverage(i.sources))})
        public = [s for s in sources if any(internet_coverage([s]))]
        if count4 > WORLD_V4:
            share = f"{count4:,} internet IPv4 addresses ({count4 / 2**32:.1%} of IPv4)"
        else:
            share = f"over 2^{count6.bit_length() - 1} global IPv6 addresses"
        at = "" if low == high else f" (port {port} and on)"
        out.append(f"{_ports_name(low, high)} ({service}){at} reachable from {share} via {', '.join(via)}: "
                   f"{', '.join(public)}")
        break
    return out


def no_public_management_ports(resources: Sequence[Resource]) -> PolicyResult:
    rule = "no-public-management-port"
    rules = list(_ingress(resources))
    if not rules:
        return PolicyResult(rule, "n/a", "no inbound security rules")
    offenders = [o for low, high, service in _management_ports() for o in _port_offenders(rules, low, high, service)]
    if offenders:
        return PolicyResult(
            rule,
            "fail",
            "management port(s) open to the internet (more than a /16's or a /48's worth of addresses) "
            "or reached from a source the rule cannot count",
            tuple(offenders),
        )
    return PolicyResult(
        rule, "pass", f"{len(rules)} inbound rule(s); no management port reachable from more than a /16's worth "
        "of the internet, every source counted"
    )


# --- the instance metadata service answers only session-token (v2) requests -------------------


def imds_v2_only(resources: Sequence[Resource]) -> PolicyResult:
    """AWS: ``metadata_options.http_tokens = "required"`` on every instance and launch template.
    With "optional" IMDSv1 answers and hands out role credentials ("optional - IMDSv2 is optional
    ... If you retrieve IAM role credentials without a session token, you receive the IMDSv1 role
    credentials": AWS EC2 API, InstanceMetadataOptionsRequest / LaunchTemplateInstanceMetadata
    OptionsRequest, https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_LaunchTemplate
    InstanceMetadataOptionsRequest.html). Left unset, the default depends on the AMI's
    ImdsSupport and the account default, so the rule wants it stated. An instance launched from a
    template states it too: the gate sees each resource's inputs alone and cannot follow the
    template's id.

    OCI: ``instance_options.are_legacy_imds_endpoints_disabled = true`` on every instance ("Whether
    to disable the legacy (/v1) instance metadata service endpoints ... Default is false": OCI API,
    InstanceOptions, https://docs.oracle.com/en-us/iaas/tools/python/latest/api/core/models/
    oci.core.models.InstanceOptions.html).
    """
    rule = "imds-v2-only"
    judged = 0
    offenders = []
    for r in resources:
        if r.type in (AWS_INSTANCE, AWS_LAUNCH_TEMPLATE):
            judged += 1
            tokens = _mapping(r.inputs.get("metadataOptions")).get("httpTokens")
            if tokens != "required":
                offenders.append(f"{_label(r)}: metadata_options.http_tokens is {tokens!r}, not 'required'")
        elif r.type == OCI_INSTANCE:
            judged += 1
            disabled = _mapping(r.inputs.get("instanceOptions")).get("areLegacyImdsEndpointsDisabled")
            if not _true(disabled):
                offenders.append(f"{_label(r)}: instance_options.are_legacy_imds_endpoints_disabled is {disabled!r}")
    if not judged:
        return PolicyResult(rule, "n/a", "no AWS or OCI instances")
    if offenders:
        return PolicyResult(rule, "fail", "instance metadata reachable without a session token", tuple(offenders))
    return PolicyResult(rule, "pass", f"{judged} instance(s)/template(s) answer only IMDSv2 / OCI /v2")


# --- images pinned -----------------------------------------------------------------------------

CLOUD_NODE_TYPES = (AWS_INSTANCE, AZURE_VM, OCI_INSTANCE)


def image_pinned(resources: Sequence[Resource]) -> PolicyResult:
    """Every cloud node boots an image the stack file pins. A node whose image was looked up
    (``ami_lookup`` / ``image_lookup``) gets whatever was newest at ``pulumi up``, so two nodes of
    one pool can differ: a warning, not a failure, since the stack file asked for it. A node that
    does not say how its image was chosen (tag ``gpucluster-image``), or an Azure VM on the
    ``latest`` version, fails."""
    rule = "image-pinned"
    judged, lookups, offenders = 0, [], []
    for r in resources:
        if r.type not in CLOUD_NODE_TYPES:
            continue
        judged += 1
        source = r.tag(TAG_IMAGE)
        version = _mapping(r.inputs.get("sourceImageReference")).get("version")
        if r.type == AZURE_VM and str(version).lower() == "latest":
            offenders.append(f"{_label(r)}: source_image_reference.version is 'latest'")
        elif source == "lookup":
            lookups.append(_label(r))
        elif source != "pinned":
            offenders.append(f"{_label(r)}: tag {TAG_IMAGE} is {source!r}, neither 'pinned' nor 'lookup'")
    if not judged:
        return PolicyResult(rule, "n/a", "no cloud instances")
    if offenders:
        return PolicyResult(rule, "fail", "image not pinned", tuple(offenders))
    if lookups:
        return PolicyResult(rule, "warn", "image looked up by name (ami_lookup / image_lookup), not pinned: "
                            "nodes boot whatever image is newest at `pulumi up`", tuple(lookups))
    return PolicyResult(rule, "pass", f"{judged} node(s) boot a pinned image")


# --- disks encrypted ---------------------------------------------------------------------------


def _aws_disk_offenders(r: Resource) -> list[str]:
    """AWS: ``encrypted`` on the root volume, every EBS data volume and every template mapping. The
    provider's default is false ("encrypted - Whether to enable volume encryption. Defaults to
    false": pulumi_aws InstanceRootBlockDevice / InstanceEbsBlockDevice, https://pub.dev/
    documentation/pulumi_aws/latest/ec2/InstanceEbsBlockDevice/encrypted.html), so an instance
    that says nothing relies on the account's encryption-by-default setting, which the stack
    cannot see."""
    inp = r.inputs
    out = []
    if r.type == AWS_INSTANCE:
        root = _mapping(inp.get("rootBlockDevice"))
        if not _true(root.get("encrypted")):
            out.append(
                f"{_label(r)}: root volume not encrypted (root_block_device.encrypted is {root.get('encrypted')!r})"
            )
        for dev in _list(inp.get("ebsBlockDevices")):
            dev = _mapping(dev)
            if not _true(dev.get("encrypted")):
                out.append(f"{_label(r)}: EBS volume {dev.get('deviceName')} not encrypted")
    elif r.type == AWS_LAUNCH_TEMPLATE:
        for mapping in _list(inp.get("blockDeviceMappings")):
            ebs = _mapping(_mapping(mapping).get("ebs"))
            if ebs and not _true(ebs.get("encrypted")):
                out.append(f"{_label(r)}: EBS mapping {_mapping(mapping).get('deviceName')} not encrypted")
    elif r.type == AWS_EBS_VOLUME and not _true(inp.get("encrypted")):
        out.append(f"{_label(r)}: volume not encrypted")
    return out


def _azure_disk_offenders(r: Resource) -> list[str]:
    """Azure: every managed disk is encrypted at rest with platform-managed keys whatever the VM
    says (see PLATFORM_MANAGED_KEY); the rule wants that reliance stated (the VM's
    TAG_DISK_ENCRYPTION tag), or encryption at host ("encryption_at_host_enabled - Should all of
    the disks (including the temp disk) attached to this Virtual Machine be encrypted by enabling
    Encryption at Host?": pulumi_azure LinuxVirtualMachine), or a customer-managed key (a disk
    encryption set on the OS disk)."""
    inp = r.inputs
    if r.type not in (AZURE_VM, AZURE_MANAGED_DISK):
        return []
    os_disk = _mapping(inp.get("osDisk"))
    if _false(inp.get("encryptionAtHostEnabled")):
        return [f"{_label(r)}: encryption at host explicitly off"]
    stated = (
        _true(inp.get("encryptionAtHostEnabled"))
        or bool(os_disk.get("diskEncryptionSetId") or os_disk.get("secureVmDiskEncryptionSetId"))
        or bool(inp.get("diskEncryptionSetId"))
        or r.tag(TAG_DISK_ENCRYPTION) == PLATFORM_MANAGED_KEY
    )
    if stated:
        return []
    return [
        f"{_label(r)}: disk encryption not stated (encryption_at_host_enabled, a disk encryption set, "
        f"or tag {TAG_DISK_ENCRYPTION}={PLATFORM_MANAGED_KEY})"
    ]


def _oci_disk_offenders(r: Resource) -> list[str]:
    """OCI: volumes are always encrypted at rest ("No option exists for unencrypted volumes
    at-rest": OCI Block Volume Encryption, https://docs.oracle.com/en-us/iaas/Content/Block/
    Concepts/blockvolumeencryption.htm). What the API leaves optional is in-transit encryption of
    paravirtualized attachments, which VM shapes use ("is_pv_encryption_in_transit_enabled -
    Whether to enable in-transit encryption for the data volume's paravirtualized attachment. The
    default value is false": pulumi_oci Instance; launch_options are "Options for tuning the
    compatibility and performance of VM shapes"). The rule wants it on VM shapes (top level at
    create, or under launch_options) and on paravirtualized volume attachments; for bare-metal
    shapes the instance API offers no such option, and at-rest encryption is what applies."""
    inp = r.inputs
    if r.type == OCI_INSTANCE and str(inp.get("shape", "")).startswith("VM."):
        launch = _mapping(inp.get("launchOptions"))
        if not (
            _true(inp.get("isPvEncryptionInTransitEnabled")) or _true(launch.get("isPvEncryptionInTransitEnabled"))
        ):
            return [f"{_label(r)}: VM shape without in-transit encryption of its paravirtualized volumes"]
    if r.type == OCI_VOLUME_ATTACHMENT and str(inp.get("attachmentType", "")).lower() == "paravirtualized":
        if not _true(inp.get("isPvEncryptionInTransitEnabled")):
            return [f"{_label(r)}: paravirtualized attachment without in-transit encryption"]
    return []


_DISK_TYPES = (
    AWS_INSTANCE,
    AWS_LAUNCH_TEMPLATE,
    AWS_EBS_VOLUME,
    AZURE_VM,
    AZURE_MANAGED_DISK,
    OCI_INSTANCE,
    OCI_VOLUME_ATTACHMENT,
)


def disks_encrypted(resources: Sequence[Resource]) -> PolicyResult:
    rule = "disks-encrypted"
    judged = [r for r in resources if r.type in _DISK_TYPES]
    if not judged:
        return PolicyResult(rule, "n/a", "no cloud disks (bare metal: the site encrypts, or not)")
    offenders = [
        o for r in judged for o in (*_aws_disk_offenders(r), *_azure_disk_offenders(r), *_oci_disk_offenders(r))
    ]
    if offenders:
        return PolicyResult(rule, "fail", "disk(s) whose encryption is off or not stated", tuple(offenders))
    return PolicyResult(rule, "pass", f"{len(judged)} instance(s)/template(s)/volume(s): disks encrypted")


# --- no public IP on GPU or storage nodes --------------------------------------------------------


def _public_ip_offenders(r: Resource) -> list[str]:
    """Where a GPU or storage node could get a public address, and why it must not:

    * AWS instance ``associate_public_ip_address``; launch template interfaces'
      ``associate_public_ip_address`` (AWS Config rule ec2-launch-template-public-ip-disabled
      judges the same field: https://docs.aws.amazon.com/config/latest/developerguide/
      ec2-launch-template-public-ip-disabled.html); a GPU or storage subnet's
      ``map_public_ip_on_launch`` ("Specify true to indicate that instances launched into the
      subnet should be assigned a public IP address. Default is false": pulumi_aws Subnet).
    * Azure: a public IP is attached through the NIC's ``ip_configuration.public_ip_address_id``
      ("Reference to a Public IP Address to associate with this NIC": pulumi_azure
      NetworkInterface).
    * OCI: ``create_vnic_details.assign_public_ip`` "Defaults to whether the subnet is public or
      private" (OCI API, CreateVnicDetails: https://docs.oracle.com/en-us/iaas/tools/dotnet/latest/
      api/Oci.CloudmigrationsService.Models.CreateVnicDetails.html), and a subnet's
      ``prohibit_public_ip_on_vnic`` "Defaults to false, which means VNICs created in this subnet
      will automatically be assigned public IP addresses" (pulumi_oci Subnet): the instance says
      false, and a GPU or storage subnet is private.
    """
    inp = r.inputs
    if r.type in (AWS_SUBNET, OCI_SUBNET):
        purpose = set((r.tag(TAG_PURPOSE) or "").split(","))
        if not {"gpu", "storage"} & purpose:
            return []
        if r.type == AWS_SUBNET and _true(inp.get("mapPublicIpOnLaunch")):
            return [f"{_label(r)}: a {'/'.join(sorted(purpose))} subnet maps public IPs on launch"]
        if r.type == OCI_SUBNET and not _true(inp.get("prohibitPublicIpOnVnic")):
            return [f"{_label(r)}: a {'/'.join(sorted(purpose))} subnet allows public IPs on VNICs"]
        return []
    if not _gpu_or_storage(r):
        return []
    if r.type == AWS_INSTANCE and _true(inp.get("associatePublicIpAddress")):
        return [f"{_label(r)}: associate_public_ip_address is true"]
    if r.type == AWS_LAUNCH_TEMPLATE:
        return [
            f"{_label(r)}: interface {_mapping(nic).get('deviceIndex')}/{_mapping(nic).get('networkCardIndex')} "
            "associates a public IP"
            for nic in _list(inp.get("networkInterfaces"))
            if _true(_mapping(nic).get("associatePublicIpAddress"))
        ]
    if r.type == AZURE_NIC:
        configs = [_mapping(cfg) for cfg in _list(inp.get("ipConfigurations"))]
        return [
            f"{_label(r)}: ip configuration {cfg.get('name')} has public IP {cfg.get('publicIpAddressId')}"
            for cfg in configs
            if cfg.get("publicIpAddressId") not in (None, "")
        ]
    if r.type == OCI_INSTANCE:
        assign = _mapping(inp.get("createVnicDetails")).get("assignPublicIp")
        if not _false(assign):
            return [f"{_label(r)}: create_vnic_details.assign_public_ip is {assign!r}, not false"]
    return []


_PUBLIC_IP_TYPES = (AWS_INSTANCE, AWS_LAUNCH_TEMPLATE, AWS_SUBNET, AZURE_NIC, OCI_INSTANCE, OCI_SUBNET)


def no_public_ips(resources: Sequence[Resource]) -> PolicyResult:
    rule = "no-public-ip-on-gpu-storage"
    judged = [r for r in resources if r.type in _PUBLIC_IP_TYPES]
    if not judged:
        return PolicyResult(rule, "n/a", "no cloud instances, interfaces or subnets")
    offenders = [o for r in judged for o in _public_ip_offenders(r)]
    if offenders:
        return PolicyResult(rule, "fail", "GPU or storage node(s) that could get a public IP", tuple(offenders))
    return PolicyResult(
        rule, "pass", f"{len(judged)} instance(s)/interface(s)/subnet(s): no public IP on GPU or storage"
    )


# --- Ceph replication and failure domains ------------------------------------------------------


def _storage_components(resources: Sequence[Resource]) -> list[Resource]:
    return [r for r in resources if r.type.startswith("gpucluster:") and r.type.endswith(":StorageNodes")]


def _storage_hosts(resources: Sequence[Resource]) -> list[Resource]:
    """Nodes in a StorageNodes component, or (where parents are unknown) carrying the storage role."""
    components = {c.urn for c in _storage_components(resources) if c.urn}
    return [r for r in resources if r.type in NODE_TYPES and (r.parent in components or "storage" in _roles(r))]


def ceph_replication(resources: Sequence[Resource]) -> PolicyResult:
    rule = "ceph-replication"
    pools: dict[str, int] = {}
    for comp in _storage_components(resources):
        for pool in _list(comp.inputs.get("cephPools")):
            pools[str(pool["name"])] = max(pools.get(str(pool["name"]), 0), int(pool["size"]))
    if not pools:
        return PolicyResult(rule, "n/a", "no Ceph pools")
    hosts = len(_storage_hosts(resources))
    offenders = [f"pool {name}: size {size} > {hosts} storage host(s)" for name, size in pools.items() if size > hosts]
    if offenders:
        return PolicyResult(rule, "fail", "Ceph replication larger than the number of storage hosts", tuple(offenders))
    return PolicyResult(
        rule, "pass", f"{len(pools)} pool(s), largest size {max(pools.values())}, {hosts} storage host(s)"
    )


def failure_domain(r: Resource) -> str | None:
    inp = r.inputs
    if r.type == AWS_INSTANCE:
        part = inp.get("placementPartitionNumber")
        return f"{inp.get('placementGroup')}/{part}" if part else None
    if r.type == AZURE_VM:
        return str(inp["zone"]) if inp.get("zone") else None
    if r.type == OCI_INSTANCE:
        return str(inp["faultDomain"]) if inp.get("faultDomain") else None
    if r.type == BM_MACHINE:
        return str(inp["rack"]) if inp.get("rack") else None
    return None


def storage_spread(resources: Sequence[Resource]) -> PolicyResult:
    rule = "storage-failure-domains"
    hosts = _storage_hosts(resources)
    offered = max((int(c.inputs.get("failureDomainCount") or 0) for c in _storage_components(resources)), default=0)
    if len(hosts) < 2 or offered < 2:
        return PolicyResult(rule, "n/a", f"{len(hosts)} storage host(s), {offered} failure domain(s) offered")
    domains = {h.name: failure_domain(h) for h in hosts}
    missing = tuple(f"{name}: no failure domain" for name, d in domains.items() if d is None)
    used = {d for d in domains.values() if d is not None}
    want = min(len(hosts), offered)
    if missing or len(used) < want:
        msg = f"storage hosts use {len(used)} failure domain(s); want {want} of the {offered} offered"
        return PolicyResult(rule, "fail", msg, missing or tuple(f"{n}: {d}" for n, d in sorted(domains.items())))
    return PolicyResult(rule, "pass", f"{len(hosts)} storage host(s) over {len(used)} failure domain(s)")


# --- GPU and storage subnets -------------------------------------------------------------------------


def _networks(resources: Sequence[Resource]) -> list[tuple[str, str, set[str]]]:
    """(where, cidr, purposes) for every subnet resource and every network a Fabric component declares."""
    out: list[tuple[str, str, set[str]]] = []
    for r in resources:
        if r.type in (AWS_SUBNET, OCI_SUBNET) and isinstance(r.inputs.get("cidrBlock"), str):
            purpose = r.tag(TAG_PURPOSE)
            if purpose:
                out.append((_label(r), str(r.inputs["cidrBlock"]), set(purpose.split(","))))
        elif r.type.startswith("gpucluster:") and r.type.endswith(":Fabric"):
            for net in _list(r.inputs.get("networks")):
                out.append((f"{_label(r)} {net['name']}", str(net["cidr"]), set(str(net["purpose"]).split(","))))
    return out


def subnets_disjoint(resources: Sequence[Resource]) -> PolicyResult:
    rule = "gpu-storage-subnets-disjoint"
    nets = _networks(resources)
    gpu = [(w, ipaddress.ip_network(c)) for w, c, p in nets if "gpu" in p]
    storage = [(w, ipaddress.ip_network(c)) for w, c, p in nets if "storage" in p]
    if not gpu or not storage:
        return PolicyResult(rule, "n/a", "no GPU or no storage subnet declared")
    offenders = tuple(f"{gw} {gn} overlaps {sw} {sn}" for gw, gn in gpu for sw, sn in storage if gn.overlaps(sn))
    if offenders:
        return PolicyResult(rule, "fail", "GPU and storage subnets overlap", offenders)
    return PolicyResult(rule, "pass", f"{len(gpu)} GPU and {len(storage)} storage subnet(s), none overlapping")


# --- behind a bastion, the bastion is the only way in --------------------------------------------


def _bastions(resources: Sequence[Resource]) -> list[Resource]:
    return [r for r in resources if r.type.startswith("gpucluster:") and r.type.endswith(":Bastion")]


def _from_outside(source: str, admin: Sequence[str]) -> bool:
    """Whether an ingress source lies outside the cluster's private networks: a public block, or
    one of the ranges the bastion admits from (admin_cidrs may be any range, a documentation one too)."""
    try:
        net = ipaddress.ip_network(source.strip(), strict=False)
    except ValueError:
        return source.strip().lower() in _WORLD_NAMES
    for cidr in admin:
        try:
            if net.overlaps(ipaddress.ip_network(cidr, strict=False)):  # type: ignore[arg-type]
                return True
        except (ValueError, TypeError):
            continue
    return not net.is_private


def bastion_only_entry(resources: Sequence[Resource]) -> PolicyResult:
    """Where the stack creates a bastion (a ``gpucluster:<cloud>:Bastion`` component, whose props name
    its ``adminCidrs``), no rule admits a management port from outside the private networks except
    the bastion's own, and that one admits port 22 alone, from admin_cidrs alone. The bastion's rules
    are its children, named ``<bastion>-...``."""
    rule = "bastion-only-entry"
    bastions = _bastions(resources)
    if not bastions:
        return PolicyResult(rule, "n/a", "no bastion in the stack: the nodes are reached directly")
    offenders = []
    judged = 0
    for ingress in _ingress(resources):
        ports = sorted(p for p in MANAGEMENT_PORTS if ingress.low <= p <= ingress.high)
        if not ports:
            continue
        own = next((b for b in bastions if ingress.resource.name.startswith(f"{b.name}-")), None)
        admin = [str(c) for b in ([own] if own else bastions) for c in _list(b.inputs.get("adminCidrs"))]
        outside = [s for s in ingress.sources if _from_outside(s, admin)]
        if not outside:
            continue
        judged += 1
        shown = ", ".join(f"{p} ({MANAGEMENT_PORTS[p]})" for p in ports[:4]) + (" ..." if len(ports) > 4 else "")
        if own is None:
            offenders.append(f"{_label(ingress.resource)}: port {shown} from {', '.join(outside)}: behind a bastion "
                             "only the bastion admits anyone from outside")
            continue
        if (ingress.low, ingress.high) != (22, 22):
            offenders.append(f"{_label(ingress.resource)}: the bastion admits port {shown} from outside; SSH (22) only")
        stray = [s for s in outside if s not in admin]
        if stray:
            offenders.append(f"{_label(ingress.resource)}: the bastion admits SSH from {', '.join(stray)}, "
                             "not in admin_cidrs")
    if offenders:
        return PolicyResult(rule, "fail", "a management port reachable from outside other than the bastion's SSH "
                            "from admin_cidrs", tuple(offenders))
    return PolicyResult(rule, "pass", f"{len(bastions)} bastion(s); {judged} rule(s) admit anyone from outside, "
                        "each the bastion's SSH from admin_cidrs")


# --- the rule set ---------------------------------------------------------------------------------

# When the program's gate can judge a rule:
#   "resource": from each resource's own inputs, as the engine registers it (before it is created);
#   "stack":    over every resource registered so far; a violation can only grow as resources are
#               added, so the resource that completes one is refused before it is created;
#   "complete": only over the whole program (something may be missing until the end).
Scope = Literal["resource", "stack", "complete"]


@dataclass(frozen=True)
class Rule:
    id: str
    must: str
    check: Callable[[Sequence[Resource]], PolicyResult]
    scope: Scope
    reads: tuple[str, ...] = ()  # types (or ":Suffix" of component types) a "stack" rule reads

    def reads_type(self, type_: str) -> bool:
        return any(type_ == t or (t.startswith(":") and type_.endswith(t)) for t in self.reads)


_INGRESS_TYPES = (
    AWS_SG,
    AWS_DEFAULT_SG,
    AWS_SG_RULE,
    AWS_INGRESS_RULE,
    AWS_PREFIX_LIST,
    AWS_PREFIX_LIST_ENTRY,
    AZURE_NSG,
    AZURE_NSG_RULE,
    # azure-native's NetworkSecurityGroup and SecurityRule, whatever API version the token names.
    ":NetworkSecurityGroup",
    ":SecurityRule",
    OCI_NSG_RULE,
    OCI_SECURITY_LIST,
    OCI_DEFAULT_SECURITY_LIST,
)

RULES: tuple[Rule, ...] = (
    Rule(
        "gpu-placement",
        "Every GPU node MUST be in one cluster placement group, single-placement-group scale set, "
        "compute cluster or fabric.",
        gpu_placement,
        "complete",
    ),
    Rule(
        "no-public-management-port",
        "No management port or range (Ceph's daemons, Kubernetes NodePorts) MAY be reachable from more "
        "than a /16's worth of the internet (or a /48's worth of IPv6), whatever rules, CIDRs and prefix "
        "lists combine to open it; a source the rule cannot count fails it.",
        no_public_management_ports,
        "stack",
        _INGRESS_TYPES,
    ),
    Rule(
        "ceph-replication", "No Ceph pool's size MAY exceed the number of storage hosts.", ceph_replication, "complete"
    ),
    Rule(
        "storage-failure-domains",
        "Storage hosts MUST use as many failure domains as the target offers, up to their number.",
        storage_spread,
        "complete",
    ),
    Rule(
        "gpu-storage-subnets-disjoint",
        "GPU and storage networks MUST NOT overlap.",
        subnets_disjoint,
        "stack",
        (AWS_SUBNET, OCI_SUBNET, ":Fabric"),
    ),
    Rule(
        "imds-v2-only",
        "Instances MUST answer metadata requests only with a session token (AWS IMDSv2 "
        "required; OCI legacy /v1 endpoints disabled).",
        imds_v2_only,
        "resource",
    ),
    Rule(
        "disks-encrypted",
        "Every cloud disk MUST be encrypted, and where the cloud encrypts by default the "
        "stack MUST say it relies on that.",
        disks_encrypted,
        "resource",
    ),
    Rule("no-public-ip-on-gpu-storage", "GPU and storage nodes MUST NOT get a public IP.", no_public_ips, "resource"),
    Rule(
        "image-pinned",
        "Every cloud node SHOULD boot an image the stack file pins by ID; a looked-up image is a warning, "
        "Azure's `latest` a failure.",
        image_pinned,
        "resource",
    ),
    Rule(
        "bastion-only-entry",
        "Where the stack creates a bastion, no management port MAY be reachable from outside the private "
        "networks except the bastion's SSH (port 22), and that only from admin_cidrs.",
        bastion_only_entry,
        "complete",
    ),
)


def evaluate(resources: Sequence[Resource], target: str = "") -> list[PolicyResult]:
    """Every rule over ``resources``; ``target`` is accepted for rules that may need it."""
    del target
    return [rule.check(resources) for rule in RULES]
