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


def rail_cidrs(spec: ClusterSpec) -> list[str]:
    """The subnets of the compute rails the spec addresses: on the lab, ``target.rails`` subnets of
    fabric_cidr's size, rail i the (i+1)-th after fabric_cidr (10.77.1.0/24: 10.77.2.0/24, 10.77.3.0/24);
    no other target plans rail addresses. Raises ValueError where a rail would leave IPv4."""
    if spec.target.kind != "lab":
        return []
    fab = ipaddress.IPv4Network(spec.fabric.fabric_cidr)
    out = []
    for i in range(1, spec.target.rails + 1):
        start = int(fab.network_address) + i * fab.num_addresses
        if start + fab.num_addresses > 1 << 32:
            raise ValueError(f"rail {i - 1} after fabric_cidr {fab} is past 255.255.255.255")
        out.append(str(ipaddress.IPv4Network((start, fab.prefixlen))))
    return out


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


def spec_addressed(rail: Rail) -> bool:
    """Whether the spec plans the rail's addresses: a compute Ethernet rail with a subnet per rail
    (the lab's; a provider or the site addresses every other kind)."""
    return rail.role == "compute" and rail.kind == "ethernet" and rail.addressing == "subnet_per_rail"


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
    subnets = rail_cidrs(spec)
    nodes = []
    for index, (pool, name) in enumerate(node_names(spec)):
        platform_name = pool_platform(spec, pool)
        rails: tuple[NodeRail, ...] = ()
        if subnets and platforms and platform_name in platforms:
            names = [d for r in platforms[platform_name].rails if spec_addressed(r) for d in r.device_names()]
            rails = tuple(
                NodeRail(ifname, _dotted(int(ipaddress.IPv4Network(cidr).network_address) + FIRST_HOST_OFFSET + index),
                         cidr)
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
    netdev = fabric_netdev(platform_data(platform))
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
