"""What a lab is made of, derived from the spec once: names, addresses, paths.

A :class:`LabLayout` is plain data (it round-trips through JSON), so the same plan is
stored in the lab's state file, passed to the Pulumi dynamic provider as its inputs and
compared by its ``diff``. Every host object the lab makes is named here, deterministically,
so ``down`` can find and remove all of them from the plan alone, even after a crash.
"""

from __future__ import annotations

import hashlib
import ipaddress
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from gpucluster import paths
from gpucluster.errors import InputError
from gpucluster.lab.rootfs import DEFAULT_PACKAGES, rootfs_key
from gpucluster.spec.cluster import Cluster
from gpucluster.spec.models import LabTarget, TwinRef

FABRIC_INTERFACE = "eth1"
MANAGEMENT_INTERFACE = "eth0"
SSH_USER = "root"


def _short_hash(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


@dataclass(frozen=True)
class RailLink:
    """One compute rail of a node: a veth whose node end is ``interface`` and whose host end
    ``veth`` sits on the rail's bridge. The lab makes the link; the fabric_rails role addresses it,
    sets its MTU and brings it up, as on a real node."""

    interface: str
    veth: str
    bridge: str


@dataclass(frozen=True)
class OutsideLink:
    """A machine's leg on the lab's outside network, where the controller is: the bastion's public
    side. ``address`` carries its prefix."""

    interface: str
    veth: str
    address: str


@dataclass(frozen=True)
class NodeFile:
    """A file the lab writes into a node before it boots (a twin's image carries it)."""

    path: str  # absolute, under /etc
    content: str
    mode: int = 0o644


@dataclass(frozen=True)
class NodeLayout:
    name: str
    management_ip: str
    fabric_ip: str
    netns: str
    veth_management: str  # host end; the node end is management_interface
    veth_fabric: str  # host end; the node end is fabric_interface
    data_disks: int
    data_disk_gb: int
    rails: tuple[RailLink, ...] = ()
    # The node ends' names. A twin names management as its platform's image does, and has no
    # lab-addressed fabric link (None): its fabric address is the roles' to put on a rail's port.
    management_interface: str = MANAGEMENT_INTERFACE
    fabric_interface: str | None = FABRIC_INTERFACE
    # The management port's MAC where the target's network-config matches it by MAC (a twin).
    management_mac: str | None = None
    files: tuple[NodeFile, ...] = ()
    # A bastion's public side (on the lab's outside bridge); None for a node.
    outside: OutsideLink | None = None
    # The subnet of the management address where it is not the management network's: a twin's
    # bastion, whose leg on the management bridge is in its own subnet (AWS's public subnet, the
    # site's bastion's source), as on the platform. None: the management network's.
    management_subnet: str | None = None
    # Subnets reached on the management link without a router (the nodes' route to the bastion's
    # subnet and the bastion's to the management network, which the cloud's router carries).
    onlink: tuple[str, ...] = ()


@dataclass(frozen=True)
class LabLayout:
    name: str
    state_root: str  # the target's state_dir: labs side by side, plus cache/
    suite: str
    mirror: str
    boot_timeout_s: int
    proxy_port: int
    management_cidr: str
    fabric_cidr: str
    mtu: int
    management_bridge: str
    fabric_bridge: str
    packages: tuple[str, ...]
    rootfs_key: str
    nodes: tuple[NodeLayout, ...]
    # One bridge per compute rail (no host address: the rails join nodes only), and its subnet.
    rail_bridges: tuple[str, ...] = ()
    rail_cidrs: tuple[str, ...] = ()
    # The twin file this lab is shaped by (gpucluster/data/twins/), or None for the lab target.
    twin: str | None = None
    # Whether the lab writes its own apt proxy into every node (apt's only way out). Off where the
    # stack declares a proxy egress that is the lab's proxy (a twin): converge writes it, as on the
    # platform, and until then nothing on the node reaches a package.
    node_apt_proxy: bool = True
    # Where the stack is reached through a bastion (a twin): the network outside the cluster's
    # (the host, as the controller, holds its first address), its bridge, and the bastion, a
    # machine with a leg there and one on the management network. The host's own connections to
    # the cluster's networks are refused (gpucluster.lab.firewall): the bastion is the way in.
    outside_cidr: str | None = None
    outside_bridge: str | None = None
    bastion: NodeLayout | None = None
    # The bastion outlives the stack (the site's, which the stack names): its host key is kept in the
    # cache across `down`, as a real one's would be, so the cluster's known_hosts still holds it.
    site_bastion: bool = False

    # --- derived paths ------------------------------------------------------------
    @property
    def lab_dir(self) -> Path:
        return paths.lab_dir(self.state_root, self.name)

    @property
    def cache_dir(self) -> Path:
        return Path(self.state_root) / "cache"

    @property
    def rootfs_dir(self) -> Path:
        return self.cache_dir / "rootfs" / f"{self.suite}-{self.rootfs_key}"

    @property
    def apt_cache_dir(self) -> Path:
        # One apt-cacher-ng per lab, each with its own cache: two daemons must not share one
        # cache directory. It survives `down`, so the lab's next build downloads nothing.
        return self.cache_dir / "apt" / self.name

    @property
    def key_file(self) -> Path:
        return self.lab_dir / "ssh" / "id_ed25519"

    @property
    def known_hosts(self) -> Path:
        return self.lab_dir / "ssh" / "known_hosts"

    @property
    def outputs_file(self) -> Path:
        # What the lab exports, where gpucluster/paths.py names every stack's outputs.
        return self.lab_dir / paths.OUTPUTS_NAME

    def node_dir(self, node: str) -> Path:
        return self.lab_dir / "nodes" / node

    @property
    def management_host_ip(self) -> str:
        return str(next(ipaddress.IPv4Network(self.management_cidr).hosts()))

    @property
    def fabric_host_ip(self) -> str:
        return str(next(ipaddress.IPv4Network(self.fabric_cidr).hosts()))

    @property
    def bastion_cache_dir(self) -> Path:
        """Where a site's bastion's host key outlives the lab (`down` keeps the cache)."""
        return self.cache_dir / "bastions" / self.name

    @property
    def outside_host_ip(self) -> str | None:
        """The controller's address on the outside network, or None without one."""
        if self.outside_cidr is None:
            return None
        return str(next(ipaddress.IPv4Network(self.outside_cidr).hosts()))

    @property
    def machines(self) -> tuple[NodeLayout, ...]:
        """What the lab boots: the cluster's nodes, and its bastion where it has one."""
        return self.nodes + ((self.bastion,) if self.bastion is not None else ())

    @property
    def cluster_cidrs(self) -> tuple[str, ...]:
        """The cluster's own networks (not the outside one)."""
        return (self.management_cidr, self.fabric_cidr, *self.rail_cidrs)

    @property
    def bridges(self) -> tuple[str, ...]:
        """Every bridge the lab makes on the host."""
        outside = (self.outside_bridge,) if self.outside_bridge is not None else ()
        return (self.management_bridge, self.fabric_bridge, *self.rail_bridges, *outside)

    @property
    def proxy_url(self) -> str:
        return f"http://{self.management_host_ip}:{self.proxy_port}"

    def node(self, name: str) -> NodeLayout:
        for node in self.machines:
            if node.name == name:
                return node
        known = ", ".join(n.name for n in self.nodes)
        raise InputError(f"no node {name!r} in lab {self.name!r} (nodes: {known})", source="lab")

    # --- serialisation ------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["packages"] = list(self.packages)
        data["nodes"] = [_node_dict(n) for n in self.nodes]
        data["bastion"] = _node_dict(self.bastion) if self.bastion is not None else None
        data["rail_bridges"] = list(self.rail_bridges)
        data["rail_cidrs"] = list(self.rail_cidrs)
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> LabLayout:
        # Pulumi hands numbers back as floats: coerce the integer fields.
        fields = dict(data)
        for key in ("boot_timeout_s", "proxy_port", "mtu"):
            fields[key] = int(fields[key])
        fields["packages"] = tuple(fields["packages"])
        # A lab stored before it had rails has none.
        fields["rail_bridges"] = tuple(fields.get("rail_bridges") or ())
        fields["rail_cidrs"] = tuple(fields.get("rail_cidrs") or ())
        fields["nodes"] = tuple(_node_from(raw) for raw in fields["nodes"])
        # A lab stored before it had a bastion has none.
        fields["bastion"] = _node_from(fields["bastion"]) if fields.get("bastion") else None
        return cls(**fields)

    def lab_level(self) -> dict[str, Any]:
        """The fields a running lab cannot change in place (its networks and base image)."""
        data = self.to_dict()
        data.pop("nodes")
        data.pop("boot_timeout_s")
        return data


def _node_dict(n: NodeLayout) -> dict[str, Any]:
    return {**asdict(n), "rails": [asdict(r) for r in n.rails], "files": [asdict(f) for f in n.files],
            "outside": asdict(n.outside) if n.outside is not None else None, "onlink": list(n.onlink)}


def _node_from(raw: dict[str, Any]) -> NodeLayout:
    n = dict(raw)
    n["data_disks"], n["data_disk_gb"] = int(n["data_disks"]), int(n["data_disk_gb"])
    n["rails"] = tuple(RailLink(**dict(r)) for r in n.get("rails") or ())
    n["files"] = tuple(NodeFile(str(f["path"]), str(f["content"]), int(f["mode"])) for f in n.get("files") or ())
    n["outside"] = OutsideLink(**dict(n["outside"])) if n.get("outside") else None
    n["onlink"] = tuple(n.get("onlink") or ())
    return NodeLayout(**n)


def lab_settings(cluster: Cluster) -> LabTarget | TwinRef:
    """Where and how the stack's lab boots: the lab target's settings, or a twin's."""
    target = cluster.spec.target
    if isinstance(target, LabTarget):
        return target
    if cluster.spec.twin is not None:
        return cluster.spec.twin
    raise InputError(f"gpucluster.target.kind: {target.kind!r}; `gpucluster lab` needs kind: lab, or a "
                     "gpucluster:twin block (a platform twin of the stack)", source=str(cluster.source))


def layout_lab(cluster: Cluster, *, packages: tuple[str, ...] = DEFAULT_PACKAGES) -> LabLayout:
    target = lab_settings(cluster)
    source = str(cluster.source)
    fabric = cluster.spec.fabric
    problems = []
    mgmt = ipaddress.IPv4Network(fabric.management_cidr)
    fab = ipaddress.IPv4Network(fabric.fabric_cidr)
    if mgmt.overlaps(fab):
        problems.append(f"gpucluster.fabric: management_cidr {mgmt} and fabric_cidr {fab} overlap")
    for label, net in (("management_cidr", mgmt), ("fabric_cidr", fab)):
        if net.num_addresses < len(cluster.nodes) + 12:
            problems.append(f"gpucluster.fabric.{label}: {net} is too small for {len(cluster.nodes)} node(s)")
    if problems:
        raise InputError(problems, source=source)
    lab_hash = _short_hash(cluster.name)
    rail_cidrs = tuple(dict.fromkeys(r.cidr for n in cluster.nodes for r in n.rails))
    rail_bridges = tuple(f"gc{lab_hash}r{i}" for i in range(len(rail_cidrs)))
    bridge_of = dict(zip(rail_cidrs, rail_bridges, strict=True))
    nodes = []
    for node in cluster.nodes:
        node_hash = _short_hash(f"{cluster.name}/{node.name}")
        disks = cluster.pool(node.pool).data_disks
        nodes.append(
            NodeLayout(
                name=node.name,
                management_ip=node.management_ip,
                fabric_ip=node.fabric_ip,
                netns=f"gcl-{cluster.name}-{node.name}",
                veth_management=f"gv{node_hash}m",
                veth_fabric=f"gv{node_hash}f",
                data_disks=disks.count if disks else 0,
                data_disk_gb=disks.size_gb if disks else 0,
                rails=tuple(RailLink(r.interface, f"gv{node_hash}r{i}", bridge_of[r.cidr])
                            for i, r in enumerate(node.rails)),
            )
        )
    suite = cluster.bom.debian.suite
    return LabLayout(
        name=cluster.name,
        state_root=target.state_dir,
        suite=suite,
        mirror=target.debian_mirror.rstrip("/"),
        boot_timeout_s=target.boot_timeout_s,
        proxy_port=target.apt_proxy_port,
        management_cidr=str(mgmt),
        fabric_cidr=str(fab),
        mtu=fabric.mtu,
        management_bridge=f"gc{lab_hash}m",
        fabric_bridge=f"gc{lab_hash}f",
        packages=tuple(packages),
        rootfs_key=rootfs_key(suite, target.debian_mirror.rstrip("/"), packages),
        nodes=tuple(nodes),
        rail_bridges=rail_bridges,
        rail_cidrs=rail_cidrs,
    )


def _all_cidrs(plan: LabLayout) -> tuple[str, ...]:
    outside = (plan.outside_cidr,) if plan.outside_cidr is not None else ()
    leg = plan.bastion.management_subnet if plan.bastion is not None else None
    return plan.cluster_cidrs + outside + ((leg,) if leg else ())


def _field(plan: LabLayout, net: ipaddress.IPv4Network) -> str:
    """The stack field that names one of the lab's networks."""
    if str(net) == plan.outside_cidr:
        return "gpucluster.twin.outside_cidr"
    if plan.bastion is not None and str(net) == plan.bastion.management_subnet:
        return "gpucluster.target.access.bastion (the subnet the twin's bastion reaches the nodes from)"
    if str(net) == plan.management_cidr:
        return "gpucluster.fabric.management_cidr"
    if str(net) == plan.fabric_cidr:
        return "gpucluster.fabric.fabric_cidr"
    return "gpucluster.fabric"


def overlap_problems(plan: LabLayout, others: list[LabLayout]) -> list[str]:
    """Another lab whose networks overlap this one's: it cannot coexist on this host."""
    problems = []
    mine = [ipaddress.IPv4Network(c) for c in _all_cidrs(plan)]
    for other in others:
        if other.name == plan.name:
            continue
        for theirs in _all_cidrs(other):
            net = ipaddress.IPv4Network(theirs)
            for ours in mine:
                if ours.overlaps(net):
                    problems.append(
                        f"{_field(plan, ours)}: {ours} overlaps {net} of lab {other.name!r}, which is up on this "
                        f"host; give this lab other CIDRs or run `gpucluster lab down` for {other.name!r}"
                    )
    return problems


def route_problems(plan: LabLayout, routes: list[dict[str, Any]]) -> list[str]:
    """Host routes (``ip -j route`` entries) that overlap the lab's networks and are not its own."""
    problems = []
    ours = set(plan.bridges)
    for cidr in _all_cidrs(plan):
        net = ipaddress.IPv4Network(cidr)
        for route in routes:
            dst = str(route.get("dst", ""))
            if dst in ("", "default") or route.get("dev") in ours:
                continue
            try:
                other = ipaddress.IPv4Network(dst if "/" in dst else f"{dst}/32", strict=False)
            except ValueError:
                continue
            if net.overlaps(other):
                problems.append(
                    f"{_field(plan, net)}: {net} overlaps the host's route to {other} on {route.get('dev')}; "
                    "choose lab CIDRs this host does not use"
                )
    return problems


def mirror_problems(plan: LabLayout, mirror_addresses: list[str]) -> list[str]:
    """The Debian mirror's addresses (as this host resolves them) inside one of the lab's networks:
    the lab's bridge would take the host's route to it, and the proxy would fetch nothing."""
    problems = []
    for cidr in _all_cidrs(plan):
        net = ipaddress.IPv4Network(cidr)
        for address in mirror_addresses:
            try:
                inside = ipaddress.IPv4Address(address) in net
            except ValueError:  # an IPv6 address: the lab's networks are IPv4
                continue
            if inside:
                problems.append(f"{_field(plan, net)}: {net} holds {address}, the address of the Debian mirror "
                                f"{plan.mirror} on this host; choose lab CIDRs that leave it outside")
    return problems

