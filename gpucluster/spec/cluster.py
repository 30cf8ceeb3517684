"""The resolved cluster: the validated spec plus what follows from it.

Node names, planned addresses and the bill of materials are derived here once, so the
lab, the Pulumi stacks, the inventory and the conformance suite all see the same values.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpucluster.render.platform import fabric_netdev
from gpucluster.spec.models import Bom, ClusterSpec, HardwareProfile, NodePool, Platform, Rail

# The first addresses of each subnet are left to gateways, bridges and services
# (the lab's bridge and apt proxy sit on .1); nodes start here.
FIRST_HOST_OFFSET = 10
# The most nodes a cluster may have. Four times the largest GPU clusters built so far, and
# a bound on everything that grows with the node count: the inventory, the stack outputs,
# the plan. Checked on the pool counts before any node is expanded.
MAX_NODES = 50_000

# The platform a pool gets when it names none: per target, for GPU pools and for the others.
DEFAULT_PLATFORMS: dict[str, dict[str, str]] = {
    "aws": {"gpu": "aws-p5-48xlarge", "cpu": "cloud-ethernet"},
    "azure": {"gpu": "azure-nd96isr-h100-v5", "cpu": "cloud-ethernet"},
    "oci": {"gpu": "oci-bm-gpu-h100-8", "cpu": "cloud-ethernet"},
    "baremetal": {"gpu": "dgx-h100", "cpu": "server-ethernet"},
    "lab": {"gpu": "lab", "cpu": "lab-cpu"},
}


def pool_platform(spec: ClusterSpec, pool: NodePool) -> str:
    """The platform a pool's nodes are: the pool's own, else its target's default for the pool's kind."""
    if pool.platform:
        return pool.platform
    return DEFAULT_PLATFORMS[spec.target.kind]["gpu" if "gpu" in pool.roles else "cpu"]


@dataclass(frozen=True)
class NodeRail:
    """One addressed compute rail of a node: its interface, its address and the rail's subnet."""

    interface: str
    address: str
    cidr: str

    def as_dict(self) -> dict[str, str]:
        return {"interface": self.interface, "address": self.address, "cidr": self.cidr}


@dataclass(frozen=True)
class Node:
    name: str
    pool: str
    roles: tuple[str, ...]
    profile: str
    platform: str
    index: int  # position in the whole cluster, 0-based
    management_ip: str
    fabric_ip: str
    # Addressed compute rails the spec plans (the lab's GPU nodes); elsewhere the platform's rails
    # are addressed by the provider or the site, and the tuple is empty.
    rails: tuple[NodeRail, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "pool": self.pool,
            "roles": list(self.roles),
            "profile": self.profile,
            "platform": self.platform,
            "management_ip": self.management_ip,
            "fabric_ip": self.fabric_ip,
            "rails": [r.as_dict() for r in self.rails],
        }


def node_names(spec: ClusterSpec) -> list[tuple[NodePool, str]]:
    """Every node's pool and name, in pool order: declared on bare metal, else ``<pool>-<n>``."""
    if spec.target.kind == "baremetal":
        declared: dict[str, list[str]] = {}
        for bm in spec.target.nodes:
            declared.setdefault(bm.pool, []).append(bm.name)
        return [(pool, name) for pool in spec.node_pools for name in declared.get(pool.name, [])]
    return [(pool, f"{pool.name}-{i}") for pool in spec.node_pools for i in range(1, pool.count + 1)]


def _dotted(value: int) -> str:
    return f"{value >> 24 & 255}.{value >> 16 & 255}.{value >> 8 & 255}.{value & 255}"


def rail_cidrs(spec: ClusterSpec, ports: int = 0) -> list[str]:
    """The subnets of the compute rails the spec addresses, one per port position. On the lab,
    ``target.rails`` subnets of fabric_cidr's size, rail i the (i+1)-th after fabric_cidr
    (10.77.1.0/24: 10.77.2.0/24, 10.77.3.0/24). Elsewhere, for a platform with ``ports`` ports the
    spec addresses (DGX H100 in Ethernet mode: 8), fabric_cidr split into the smallest power of two
    of equal subnets that holds them, port i the i-th (10.20.0.0/22, 8 ports: 10.20.0.0/25,
    10.20.0.128/25 ...): the fabric stays inside the range the site gave it, and port 0's subnet
    starts where fabric_cidr does, so port 0 carries the node's fabric address. Raises ValueError
    where a rail would leave IPv4 or fabric_cidr cannot be split so."""
    fab = ipaddress.IPv4Network(spec.fabric.fabric_cidr)
    if spec.target.kind != "lab":
        if ports <= 0:
            return []
        prefix = fab.prefixlen + (ports - 1).bit_length()
        if prefix > 30:
            raise ValueError(f"fabric_cidr {fab} cannot be split into {ports} rail subnets (each would be /{prefix})")
        return [str(net) for net, _ in zip(fab.subnets(new_prefix=prefix), range(ports), strict=False)]
    out = []
    for i in range(1, spec.target.rails + 1):
        start = int(fab.network_address) + i * fab.num_addresses
        if start + fab.num_addresses > 1 << 32:
            raise ValueError(f"rail {i - 1} after fabric_cidr {fab} is past 255.255.255.255")
        out.append(str(ipaddress.IPv4Network((start, fab.prefixlen))))
    return out


def rail_host(cidr: str, index: int) -> str:
    """Node ``index``'s address on a rail subnet: the subnet's FIRST_HOST_OFFSET + index-th address,
    as a fabric or management address is placed. Raises ValueError where the subnet has no such host."""
    net = ipaddress.IPv4Network(cidr)
    host = FIRST_HOST_OFFSET + index
    if host >= net.num_addresses - 1:
        raise ValueError(f"rail subnet {net} has no host {host} (node {index + 1}: at most "
                         f"{max(net.num_addresses - 1 - FIRST_HOST_OFFSET, 0)} nodes on it)")
    return _dotted(int(net.network_address) + host)


def aws_vpc_cidr(spec: ClusterSpec) -> str:
    """The VPC an AWS stack creates: ``target.vpc_cidr``, or the smallest network holding the
    management, fabric and public CIDRs (which may be wider than the /16 AWS allows: the spec rules
    say so)."""
    target = spec.target
    vpc = getattr(target, "vpc_cidr", None)
    if vpc:
        return str(vpc)
    nets = [ipaddress.IPv4Network(spec.fabric.management_cidr), ipaddress.IPv4Network(spec.fabric.fabric_cidr)]
    public = getattr(target, "public_cidr", None)
    if public:
        nets.append(ipaddress.IPv4Network(public))
    net = nets[0]
    while not all(n.subnet_of(net) for n in nets):
        net = net.supernet()
    return str(net)


# The kinds of compute rail whose ports the spec addresses with ``addressing: subnet_per_rail``: the
# lab's Ethernet rails, and RoCE ports (DGX H100 in Ethernet mode), where every port needs an IPv4
# address of its own: RoCEv2 GIDs are made from the port's IP addresses, the IPv4-mapped one at
# GID index 3 on ConnectX, and that is the GID NCCL_IB_GID_INDEX=3 names (the fabric's gid_index).
SPEC_ADDRESSED_KINDS = ("ethernet", "roce")


def spec_addressed(rail: Rail) -> bool:
    """Whether the spec plans the rail's addresses: a compute Ethernet or RoCE rail with a subnet
    per port (``addressing: subnet_per_rail``); a provider or the site addresses every other kind."""
    return rail.role == "compute" and rail.kind in SPEC_ADDRESSED_KINDS and rail.addressing == "subnet_per_rail"


def spec_addressed_ports(platform: Platform) -> list[str]:
    """The interfaces of the platform's ports the spec addresses, in rail order: the netdevs a rail
    names, else (the lab's rails) its device names, which are the lab node's interfaces."""
    return [d for r in platform.rails if spec_addressed(r)
            for d in (r.netdev_names() if r.netdevs is not None else r.device_names())]


def rail_platform(platform: Platform, rails: int) -> Platform:
    """A lab platform with ``rails`` compute rails: its rail the spec addresses keeps its first
    ``rails`` devices (the platform file lists the most a lab node may have)."""
    out = []
    for rail in platform.rails:
        if spec_addressed(rail):
            rail = rail.model_copy(update={"count": rails, "devices": rail.device_names()[:rails]})
        out.append(rail)
    return platform.model_copy(update={"rails": out})


def expand_nodes(spec: ClusterSpec, platforms: dict[str, Platform] | None = None) -> tuple[Node, ...]:
    """Every node with its planned addresses. ``platforms`` (name to platform, lab rails applied)
    names the interfaces of the rails the spec addresses; without it no node gets rails."""
    mgmt = ipaddress.IPv4Network(spec.fabric.management_cidr)
    fab = ipaddress.IPv4Network(spec.fabric.fabric_cidr)
    mgmt_base = int(mgmt.network_address) + FIRST_HOST_OFFSET
    fab_base = int(fab.network_address) + FIRST_HOST_OFFSET
    lab_subnets = rail_cidrs(spec) if spec.target.kind == "lab" else []
    nodes = []
    for index, (pool, name) in enumerate(node_names(spec)):
        platform_name = pool_platform(spec, pool)
        rails: tuple[NodeRail, ...] = ()
        if platforms and platform_name in platforms:
            names = spec_addressed_ports(platforms[platform_name])
            subnets = lab_subnets if spec.target.kind == "lab" else rail_cidrs(spec, len(names))
            rails = tuple(NodeRail(ifname, rail_host(cidr, index), cidr)
                          for ifname, cidr in zip(names, subnets, strict=False))
        nodes.append(
            Node(
                name=name,
                pool=pool.name,
                roles=tuple(pool.roles),
                profile=pool.profile,
                platform=platform_name,
                index=index,
                management_ip=_dotted(mgmt_base + index),
                fabric_ip=_dotted(fab_base + index),
                rails=rails,
            )
        )
    return tuple(nodes)


@dataclass(frozen=True)
class Cluster:
    """A validated stack file, resolved. Build it with :func:`gpucluster.spec.load_spec`."""

    spec: ClusterSpec
    bom: Bom
    profiles: dict[str, HardwareProfile]
    platforms: dict[str, Platform]
    nodes: tuple[Node, ...]
    source: Path
    _by_name: dict[str, Node] = field(init=False, repr=False, compare=False)
    _pools: dict[str, NodePool] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "_by_name", {n.name: n for n in self.nodes})
        # First pool of a name wins, as a linear search did (checks refuse repeated names).
        pools: dict[str, NodePool] = {}
        for pool in self.spec.node_pools:
            pools.setdefault(pool.name, pool)
        object.__setattr__(self, "_pools", pools)

    @property
    def name(self) -> str:
        return self.spec.name

    @property
    def stack(self) -> str:
        """The stack name, from the file name ``Pulumi.<stack>.yaml``."""
        stem = self.source.name
        return stem.removeprefix("Pulumi.").removesuffix(".yaml") or self.spec.name

    def node(self, name: str) -> Node:
        return self._by_name[name]

    def nodes_with_role(self, role: str) -> list[Node]:
        return [n for n in self.nodes if role in n.roles]

    def pool(self, name: str) -> NodePool:
        return self._pools[name]

    def instance_type(self, pool_name: str) -> str | None:
        """A cloud pool's instance type: the pool's own, else its platform's for the target."""
        pool = self.pool(pool_name)
        kind = self.spec.target.kind
        if pool.instance_type or kind not in ("aws", "azure", "oci"):
            return pool.instance_type
        return self.platform_of_pool(pool_name).instance_types.get(kind)

    def profile_of(self, node: Node) -> HardwareProfile:
        return self.profiles[node.profile]

    def platform_of(self, node: Node) -> Platform:
        return self.platforms[node.platform]

    def platform_of_pool(self, pool_name: str) -> Platform:
        return self.platforms[pool_platform(self.spec, self.pool(pool_name))]

    @property
    def kubernetes_version(self) -> str:
        return self.bom.kubernetes.version

    def summary(self) -> str:
        pools = len(self.spec.node_pools)
        return (
            f"cluster {self.name!r} on {self.spec.target.kind}: {len(self.nodes)} node(s) in "
            f"{pools} pool(s), fabric {self.spec.fabric.type} MTU {self.spec.fabric.mtu}"
        )

    def as_dict(self) -> dict[str, Any]:
        """The resolved spec as plain data (``spec show --json``, the inventory's vars)."""
        return {
            "name": self.name,
            "stack": self.stack,
            "spec": self.spec.model_dump(mode="json", by_alias=True),
            "software": self.bom.model_dump(mode="json", by_alias=True),
            "profiles": {k: v.model_dump(mode="json") for k, v in self.profiles.items()},
            "platforms": {k: platform_data(v) for k, v in self.platforms.items()},
            "nodes": [n.as_dict() for n in self.nodes],
        }


# The name the rendered bare-metal network config gives a fabric port it matches by MAC.
MAC_FABRIC_INTERFACE = "fabric0"


def fabric_interface(spec: ClusterSpec, pool: NodePool, platform: Platform, fabric_macs: bool) -> str | None:
    """The interface that carries a bare-metal node's fabric address (the target renders it, the
    spec's rules require it): the pool's ``fabric_interface``, else the netdev its platform names
    (DGX H100: ibp24s0), else the port the network config matches by MAC (``fabric_macs``; off
    InfiniBand, whose MACs are not portable), else the spec's ``socket_ifname``; None where
    nothing names one."""
    if pool.fabric_interface:
        return pool.fabric_interface
    netdev = fabric_netdev(platform)
    if netdev:
        return netdev
    if fabric_macs and spec.fabric.type != "infiniband":
        return MAC_FABRIC_INTERFACE
    return spec.fabric.socket_ifname


def platform_data(platform: Platform) -> dict[str, Any]:
    """A platform as plain data, each rail's devices expanded to exact names (what readers compare)."""
    data = platform.model_dump(mode="json")
    for rail, raw in zip(platform.rails, data["rails"], strict=True):
        raw["devices"] = rail.device_names() if rail.devices is not None else None
        raw["netdevs"] = rail.netdev_names() if rail.netdevs is not None else None
    return data
