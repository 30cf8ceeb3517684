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
    def proxy_url(self) -> str:
        return f"http://{self.management_host_ip}:{self.proxy_port}"

    def node(self, name: str) -> NodeLayout:
        for node in self.nodes:
            if node.name == name:
                return node
        known = ", ".join(n.name for n in self.nodes)
        raise InputError(f"no node {name!r} in lab {self.name!r} (nodes: {known})", source="lab")

    # --- serialisation ------------------------------------------------------------
    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["packages"] = list(self.packages)
        data["nodes"] = [{**asdict(n), "rails": [asdict(r) for r in n.rails], "files": [asdict(f) for f in n.files]}
                         for n in self.nodes]
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
        nodes = []
        for raw in fields["nodes"]:
            n = dict(raw)
            n["data_disks"], n["data_disk_gb"] = int(n["data_disks"]), int(n["data_disk_gb"])
            n["rails"] = tuple(RailLink(**dict(r)) for r in n.get("rails") or ())
            n["files"] = tuple(NodeFile(str(f["path"]), str(f["content"]), int(f["mode"]))
                               for f in n.get("files") or ())
            nodes.append(NodeLayout(**n))
        fields["nodes"] = tuple(nodes)
        return cls(**fields)

    def lab_level(self) -> dict[str, Any]:
        """The fields a running lab cannot change in place (its networks and base image)."""
        data = self.to_dict()
        data.pop("nodes")
        data.pop("boot_timeout_s")
        return data


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


def overlap_problems(plan: LabLayout, others: list[LabLayout]) -> list[str]:
    """Another lab whose networks overlap this one's: it cannot coexist on this host."""
    problems = []
    mine = [ipaddress.IPv4Network(c) for c in (plan.management_cidr, plan.fabric_cidr, *plan.rail_cidrs)]
    for other in others:
        if other.name == plan.name:
            continue
        for theirs in (other.management_cidr, other.fabric_cidr, *other.rail_cidrs):
            net = ipaddress.IPv4Network(theirs)
            for ours in mine:
                if ours.overlaps(net):
                    problems.append(
                        f"gpucluster.fabric: {ours} overlaps {net} of lab {other.name!r}, which is up on this "
                        f"host; give this lab other CIDRs or run `gpucluster lab down` for {other.name!r}"
                    )
    return problems


def route_problems(plan: LabLayout, routes: list[dict[str, Any]]) -> list[str]:
    """Host routes (``ip -j route`` entries) that overlap the lab's networks and are not its own."""
    problems = []
    ours = {plan.management_bridge, plan.fabric_bridge, *plan.rail_bridges}
    for cidr in (plan.management_cidr, plan.fabric_cidr, *plan.rail_cidrs):
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
                    f"gpucluster.fabric: {net} overlaps the host's route to {other} on {route.get('dev')}; "
                    "choose lab CIDRs this host does not use"
                )
    return problems
