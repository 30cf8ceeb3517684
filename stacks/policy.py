"""Policy rules over the resources a program registered (as recorded under Pulumi's mocks).

Each rule is a function ``(resources) -> PolicyResult``: ``pass``, ``fail`` with the
offending resources named, or ``n/a`` where the stack has nothing the rule is about. The
unit tests and ``gpucluster plan`` run the same functions; the tests also feed them
resources built by hand to prove each rule fails when it is broken.

Rules read what the providers would receive (instance inputs, security rules, subnet
CIDRs) and the facts our components carry as props (``StorageNodes``: Ceph pools and how
many failure domains the target offers; ``Fabric``: networks that have no cloud resource,
such as an InfiniBand or RoCE fabric, and the nodes attached to it).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

from gpucluster.plan import PolicyResult, Resource
from stacks.components.common import MANAGEMENT_PORTS, TAG_PURPOSE, TAG_ROLES

AWS_INSTANCE = "aws:ec2/instance:Instance"
AWS_PG = "aws:ec2/placementGroup:PlacementGroup"
AZURE_VM = "azure:compute/linuxVirtualMachine:LinuxVirtualMachine"
AZURE_VMSS = "azure:compute/orchestratedVirtualMachineScaleSet:OrchestratedVirtualMachineScaleSet"
OCI_INSTANCE = "oci:Core/instance:Instance"
OCI_CLUSTER = "oci:Core/computeCluster:ComputeCluster"
BM_MACHINE = "gpucluster:baremetal:Machine"
NODE_TYPES = (AWS_INSTANCE, AZURE_VM, OCI_INSTANCE, BM_MACHINE)
OPEN_WORLD = {"0.0.0.0/0", "::/0", "*", "internet", "any"}


def _roles(r: Resource) -> list[str]:
    if r.type == BM_MACHINE:
        return [str(x) for x in r.inputs.get("roles") or []]
    tag = r.tag(TAG_ROLES)
    return tag.split(",") if tag else []


def _label(r: Resource) -> str:
    return f"{r.type.split(':')[-1]} {r.name}"


def gpu_nodes(resources: Sequence[Resource]) -> list[Resource]:
    return [r for r in resources if r.type in NODE_TYPES and "gpu" in _roles(r)]


# --- every GPU node in the placement group or cluster network -------------------------------


def gpu_placement(resources: Sequence[Resource]) -> PolicyResult:
    rule = "gpu-placement"
    nodes = gpu_nodes(resources)
    if not nodes:
        return PolicyResult(rule, "n/a", "no GPU nodes this rule knows how to place")
    cluster_pgs = {
        str(r.inputs.get("name")) for r in resources if r.type == AWS_PG and r.inputs.get("strategy") == "cluster"
    }
    one_pg_sets = {r.id for r in resources if r.type == AZURE_VMSS and r.inputs.get("singlePlacementGroup") is True}
    clusters = {r.id for r in resources if r.type == OCI_CLUSTER}
    fabrics = {
        str(r.name): set(r.inputs.get("members") or []) for r in resources if r.type == "gpucluster:baremetal:Fabric"
    }
    offenders = []
    for node in nodes:
        if node.type == AWS_INSTANCE:
            ok = node.inputs.get("placementGroup") in cluster_pgs
        elif node.type == AZURE_VM:
            ok = node.inputs.get("virtualMachineScaleSetId") in one_pg_sets
        elif node.type == OCI_INSTANCE:
            ok = node.inputs.get("computeClusterId") in clusters
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


def _covers(low: int, high: int) -> list[int]:
    return [p for p in MANAGEMENT_PORTS if low <= p <= high]


def _azure_ports(spec: Any) -> tuple[int, int]:
    text = str(spec).strip()
    if text in ("*", ""):
        return 0, 65535
    low, _, high = text.partition("-")
    return int(low), int(high or low)


def _ingress(resources: Sequence[Resource]) -> Iterable[tuple[Resource, list[str], int, int]]:
    """Every inbound allow rule as (resource, sources, first port, last port)."""
    for r in resources:
        inp = r.inputs
        if r.type == "aws:ec2/securityGroup:SecurityGroup":
            for rule in inp.get("ingress") or []:
                yield from _aws_rule(r, rule, rule.get("protocol"))
        elif r.type == "aws:ec2/securityGroupRule:SecurityGroupRule" and inp.get("type") == "ingress":
            yield from _aws_rule(r, inp, inp.get("protocol"))
        elif r.type == "aws:vpc/securityGroupIngressRule:SecurityGroupIngressRule":
            rule = {
                "cidrBlocks": [inp.get("cidrIpv4"), inp.get("cidrIpv6")],
                "fromPort": inp.get("fromPort"),
                "toPort": inp.get("toPort"),
            }
            yield from _aws_rule(r, rule, inp.get("ipProtocol"))
        elif r.type == "azure:network/networkSecurityGroup:NetworkSecurityGroup":
            for rule in inp.get("securityRules") or []:
                yield from _azure_rule(r, rule)
        elif r.type == "azure:network/networkSecurityRule:NetworkSecurityRule":
            yield from _azure_rule(r, inp)
        elif r.type == "oci:Core/networkSecurityGroupSecurityRule:NetworkSecurityGroupSecurityRule":
            if str(inp.get("direction", "")).upper() == "INGRESS":
                yield from _oci_rule(r, inp)
        elif r.type == "oci:Core/securityList:SecurityList":
            for rule in inp.get("ingressSecurityRules") or []:
                yield from _oci_rule(r, rule)


def _aws_rule(r: Resource, rule: Mapping[str, Any], protocol: Any) -> Iterable[tuple[Resource, list[str], int, int]]:
    sources = [str(c) for c in [*(rule.get("cidrBlocks") or []), *(rule.get("ipv6CidrBlocks") or [])] if c]
    if str(protocol) in ("-1", "all"):
        yield r, sources, 0, 65535
    else:
        yield r, sources, int(rule.get("fromPort") or 0), int(rule.get("toPort") or 0)


def _azure_rule(r: Resource, rule: Mapping[str, Any]) -> Iterable[tuple[Resource, list[str], int, int]]:
    if str(rule.get("direction", "")).lower() != "inbound" or str(rule.get("access", "")).lower() != "allow":
        return
    sources = [str(s) for s in [rule.get("sourceAddressPrefix"), *(rule.get("sourceAddressPrefixes") or [])] if s]
    ranges = [rule.get("destinationPortRange"), *(rule.get("destinationPortRanges") or [])]
    for spec in ranges:
        if spec is not None:
            low, high = _azure_ports(spec)
            yield r, sources, low, high


def _oci_rule(r: Resource, rule: Mapping[str, Any]) -> Iterable[tuple[Resource, list[str], int, int]]:
    sources = [str(rule.get("source") or "")]
    opts = rule.get("tcpOptions") or rule.get("udpOptions")
    if str(rule.get("protocol")) == "all" or not opts:
        yield r, sources, 0, 65535
        return
    ports = opts.get("destinationPortRange") or {}
    yield r, sources, int(ports.get("min", 0)), int(ports.get("max", 65535))


def no_public_management_ports(resources: Sequence[Resource]) -> PolicyResult:
    rule = "no-public-management-port"
    seen = 0
    offenders = []
    for r, sources, low, high in _ingress(resources):
        seen += 1
        ports = _covers(low, high)
        if ports and any(s.lower() in OPEN_WORLD for s in sources):
            offenders.append(f"{_label(r)}: port(s) {', '.join(map(str, ports))} open to {', '.join(sources)}")
    if offenders:
        return PolicyResult(rule, "fail", "management port(s) open to the whole internet", tuple(offenders))
    if not seen:
        return PolicyResult(rule, "n/a", "no inbound security rules")
    return PolicyResult(rule, "pass", f"{seen} inbound rule(s); none opens {MANAGEMENT_PORTS} to 0.0.0.0/0")


# --- Ceph replication and failure domains ------------------------------------------------------


def _storage_groups(resources: Sequence[Resource]) -> list[tuple[Resource, list[Resource]]]:
    comps = [r for r in resources if r.type.startswith("gpucluster:") and r.type.endswith(":StorageNodes")]
    out = []
    for comp in comps:
        hosts = [r for r in resources if r.parent == comp.urn and r.type in NODE_TYPES]
        out.append((comp, hosts))
    return out


def ceph_replication(resources: Sequence[Resource]) -> PolicyResult:
    rule = "ceph-replication"
    groups = _storage_groups(resources)
    pools: dict[str, int] = {}
    for comp, _ in groups:
        for pool in comp.inputs.get("cephPools") or []:
            pools[str(pool["name"])] = max(pools.get(str(pool["name"]), 0), int(pool["size"]))
    if not pools:
        return PolicyResult(rule, "n/a", "no Ceph pools")
    hosts = sum(len(h) for _, h in groups)
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
    groups = _storage_groups(resources)
    hosts = [h for _, hs in groups for h in hs]
    offered = max((int(c.inputs.get("failureDomainCount") or 0) for c, _ in groups), default=0)
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
        if r.type in ("aws:ec2/subnet:Subnet", "oci:Core/subnet:Subnet") and r.inputs.get("cidrBlock"):
            purpose = r.tag(TAG_PURPOSE)
            if purpose:
                out.append((_label(r), str(r.inputs["cidrBlock"]), set(purpose.split(","))))
        elif r.type.startswith("gpucluster:") and r.type.endswith(":Fabric"):
            for net in r.inputs.get("networks") or []:
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


RULES: tuple[Callable[[Sequence[Resource]], PolicyResult], ...] = (
    gpu_placement,
    no_public_management_ports,
    ceph_replication,
    storage_spread,
    subnets_disjoint,
)


def evaluate(resources: Sequence[Resource], target: str = "") -> list[PolicyResult]:
    """Every rule over ``resources``; ``target`` is accepted for rules that may need it."""
    del target
    return [rule(resources) for rule in RULES]
