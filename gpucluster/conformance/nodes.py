"""The conformance suite's view of an inventory: nodes with their groups and expectations.

Reads the inventory `gpucluster inventory` (or the lab) writes. Every expected value a
check compares against comes from here: the node's hardware profile (its GPUs), its platform
(its network: rails and their floors), the BOM pins and the spec's fabric, all carried in the
inventory's cluster-wide variables.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from gpucluster.conformance.checks import INTER_NODE
from gpucluster.errors import InputError
from gpucluster.hostkeys import Jump
from gpucluster.inventory_model import parse_inventory_text, validate_inventory
from gpucluster.outputs import Capabilities, LinkFloors, OutputAccess, OutputEgress, OutputRail
from gpucluster.spec.contract import ROLE_VARS, NodeContract
from gpucluster.spec.models import (
    Bom,
    Conformance,
    Fabric,
    Floors,
    HardwareProfile,
    Kubernetes,
    OsId,
    Platform,
    PlatformFloors,
    Storage,
)


@dataclass(frozen=True)
class NodeInfo:
    name: str
    address: str
    port: int
    user: str
    key_file: str | None
    groups: tuple[str, ...]
    profile_name: str
    # The node's hardware profile as the inventory model read it (gpucluster.spec.models).
    profile: HardwareProfile
    platform_name: str
    # The node's platform (its network: rails and their floors), as the inventory model read it.
    platform: Platform
    fabric_ip: str | None
    fabric_interface: str | None
    # The node's addressed compute rails (interface, address, cidr), as the inventory model read them.
    rails: tuple[OutputRail, ...] = ()
    # Where the other nodes reach it (mpirun's ssh), and the address its own logins to them come
    # from; ``address`` is how the controller reaches it (maybe through a bastion).
    management_ip: str = ""
    # What the target's nodes can do (gpucluster.outputs.Capabilities, the inventory's
    # gpucluster_capabilities): a node that cannot have its profile's GPUs or its platform's RDMA
    # devices (a lab, a platform twin) is expected without them, and the checks say why they skip.
    capabilities: Capabilities = field(default_factory=Capabilities)
    # The bastion the controller reaches the node through (the inventory's gpucluster_access), or None.
    jump: Jump | None = None
    # The OS the spec declares for the node (its host variable gpucluster_os).
    os: OsId | None = None
    # What the roles made where on the node (the inventory's gpucluster_contract), with the role
    # variables the inventory sets for it (the host's, then all's) applied as the roles apply them.
    contract: NodeContract = field(default_factory=lambda: NodeContract.for_capabilities(nvidia_repo=True))
    # How verify judges the node (GC-DCGM-001's level): the inventory's gpucluster_conformance, with
    # the host's own (InventoryHostConformance, added by hand) over it.
    conformance: Conformance = field(default_factory=Conformance)

    @property
    def gpu_count(self) -> int:
        """The GPUs the node has: its profile's, or none where the target states its nodes have none."""
        return self.profile.gpu.count if self.capabilities.gpu_devices else 0

    @property
    def hca_count(self) -> int:
        """RDMA devices on the platform's compute rails (EFA included); storage and frontend ports never;
        none where the target states its nodes have no RDMA device."""
        if not self.capabilities.rdma_devices:
            return 0
        return self.platform.hca_count

    def no_gpu_reason(self) -> str:
        """Why the node has no GPU to check."""
        listed = self.profile.gpu.count
        if listed and not self.capabilities.gpu_devices:
            return (f"the target states its nodes have no GPU devices (capabilities.gpu_devices: false), "
                    f"where profile {self.profile_name} lists {listed}")
        return f"profile {self.profile_name} has no GPU"

    def no_hca_reason(self) -> str:
        """Why the node has no RDMA device to check."""
        if self.platform.hca_count and not self.capabilities.rdma_devices:
            return (f"the target states its nodes have no RDMA devices (capabilities.rdma_devices: false), "
                    f"where platform {self.platform_name} lists them on its compute rails")
        return f"platform {self.platform_name} has no HCA on a compute rail"

    def floor(self, key: str) -> Any:
        """A floor from the profile's floors (the GPUs'), else the target's stated link floors (a twin's
        links are not the platform's), else the platform's (the network's); None if none."""
        own = getattr(self.profile.floors, key, None) if key in Floors.model_fields else None
        if own is not None:
            return own
        links = self.capabilities.link_floors
        if links is not None and key in LinkFloors.model_fields:
            return getattr(links, key)
        return getattr(self.platform.floors, key, None) if key in PlatformFloors.model_fields else None


@dataclass(frozen=True)
class ClusterInventory:
    path: str
    cluster_name: str
    target: str
    # The spec's sections as the inventory model read them (gpucluster.spec.models): the checks and
    # the renderers the roles share (gpucluster.render) read their attributes.
    fabric: Fabric
    bom: Bom
    nodes: tuple[NodeInfo, ...]
    groups: dict[str, tuple[str, ...]]
    # Where SSH is admitted from besides the management network, reached directly (the inventory's
    # gpucluster_admin_cidrs: the target's admin_cidrs).
    admin_cidrs: tuple[str, ...] = ()
    # The target's way in and out, as the inventory model read them (gpucluster.outputs).
    access: OutputAccess = field(default_factory=OutputAccess)
    egress: OutputEgress | None = None
    # How verify judges (``gpucluster_conformance``: dcgm_diag_level, fleet_margin).
    conformance: Conformance = field(default_factory=Conformance)
    storage: Storage | None = None
    kubernetes: Kubernetes | None = None
    stack: str = ""

    def node(self, name: str) -> NodeInfo:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def in_groups(self, groups: tuple[str, ...]) -> list[NodeInfo]:
        """Nodes in any of ``groups``; every node when ``groups`` is empty."""
        if not groups:
            return list(self.nodes)
        return [n for n in self.nodes if set(n.groups) & set(groups)]

    def allreduce_participants(self) -> list[NodeInfo]:
        """GPU-group nodes whose profile sets an inter-node floor: the nodes of the inter-node
        all-reduce (GC-AR-002) and of its pair runs (GC-AR-003)."""
        return [n for n in self.in_groups(("gpu",)) if n.floor("allreduce_inter_busbw_gbps") is not None]

    def inter_node_problems(self, selected: Collection[str] | None = None) -> list[str]:
        """Why the inter-node runs of the ``selected`` checks (None: every check) cannot measure these
        nodes as their inventory states them: one line, or none. Those runs are one mpirun command
        line, which names one nccl-tests binary for every rank, so a node whose nccl-tests folder
        (``nccl_tests_install_dir``, per host) differs from the others' would be run from theirs."""
        if selected is not None and not set(selected) & INTER_NODE:
            return []
        # nccl-tests runs where every node of a run has GPUs (else MPI on the CPUs, no binary of its own).
        split = nccl_tests_split([n for n in self.allreduce_participants() if n.gpu_count > 0])
        return [split] if split else []

    def limited(self, names: list[str]) -> ClusterInventory:
        """Only the named nodes (``--limit``), as converge's --limit reads them: host names or
        inventory groups (``gpu``, ``pool_gpu``), comma- or colon-separated; unknown ones are bad input."""
        hosts = {x.name for x in self.nodes}
        items = [i for name in names for i in name.replace(":", ",").split(",") if i]
        unknown = [i for i in items if i not in hosts and i not in self.groups]
        if unknown:
            raise InputError(f"--limit: no such host or group in the inventory: {', '.join(unknown)}",
                             source=self.path)
        names = sorted({h for i in items for h in ((i,) if i in hosts else self.groups[i]) if h in hosts})
        keep = tuple(n for n in self.nodes if n.name in names)
        groups = {g: tuple(h for h in hs if h in names) for g, hs in self.groups.items()}
        return dataclasses.replace(self, nodes=keep, groups=groups)


def nccl_tests_split(nodes: Sequence[NodeInfo]) -> str | None:
    """Where ``nodes`` (those of one mpirun) have nccl-tests in different folders, the line that names
    each folder with its hosts and the remedy; else None."""
    folders: dict[str, list[str]] = {}
    for n in nodes:
        folders.setdefault(n.contract.nccl_tests_dir, []).append(n.name)
    if len(folders) < 2:
        return None
    var = ROLE_VARS["nccl_tests_dir"]
    found = "; ".join(f"{folder} on {_first_hosts(hosts)}" for folder, hosts in folders.items())
    return (f"{var}: the inter-node all-reduce runs ({', '.join(sorted(INTER_NODE))}) run nccl-tests from one folder "
            f"on every node, but these nodes have it in different folders: {found}; set {var} once in "
            f"all.vars (and on none of these hosts alone), converge, and verify again")


# Hosts named per folder in that one line: a fleet's worth would bury the remedy.
_HOSTS_NAMED = 5


def _first_hosts(hosts: Sequence[str]) -> str:
    """The first hosts, then how many more: ``gpu-1, ..., gpu-5 and 3 more``."""
    named = ", ".join(hosts[:_HOSTS_NAMED])
    return f"{named} and {len(hosts) - _HOSTS_NAMED} more" if len(hosts) > _HOSTS_NAMED else named


def parse_inventory(data: Any, source: str) -> ClusterInventory:
    """The suite's view of an inventory, read through its typed contract (gpucluster.inventory_model)."""
    inv = validate_inventory(data, source)
    groups = inv.groups()
    raw_hosts = data["all"]["hosts"]
    nodes = [
        NodeInfo(
            name=str(name),
            address=hv.ansible_host,
            port=hv.ansible_port,
            user=hv.ansible_user,
            key_file=hv.ansible_ssh_private_key_file,
            groups=tuple(sorted(g for g, members in groups.items() if name in members)),
            profile_name=hv.gpucluster_profile,
            profile=inv.vars.gpucluster_profiles[hv.gpucluster_profile],
            platform_name=hv.gpucluster_platform,
            platform=inv.vars.gpucluster_platforms[hv.gpucluster_platform],
            fabric_ip=hv.gpucluster_fabric_ip,
            fabric_interface=hv.gpucluster_fabric_interface,
            rails=tuple(hv.gpucluster_rails),
            management_ip=hv.gpucluster_management_ip,
            capabilities=inv.vars.gpucluster_capabilities,
            jump=(Jump(bastion.host, bastion.user, bastion.port, hv.ansible_ssh_private_key_file)
                  if (bastion := inv.vars.gpucluster_access.bastion) is not None else None),
            os=hv.gpucluster_os,
            contract=inv.vars.gpucluster_contract.overridden(raw_hosts[name], data["all"]["vars"]),
            conformance=(inv.vars.gpucluster_conformance if hv.gpucluster_conformance is None
                         else hv.gpucluster_conformance.over(inv.vars.gpucluster_conformance)),
        )
        for name, hv in inv.hosts.items()
    ]
    return ClusterInventory(
        path=source,
        cluster_name=inv.vars.gpucluster_cluster_name,
        target=inv.vars.gpucluster_target,
        fabric=inv.vars.gpucluster_fabric,
        bom=inv.vars.gpucluster_bom,
        nodes=tuple(nodes),
        groups=groups,
        admin_cidrs=tuple(inv.vars.gpucluster_admin_cidrs),
        conformance=inv.vars.gpucluster_conformance,
        storage=inv.vars.gpucluster_storage,
        kubernetes=inv.vars.gpucluster_kubernetes,
        stack=inv.vars.gpucluster_stack,
        access=inv.vars.gpucluster_access,
        egress=inv.vars.gpucluster_egress,
    )


def load_inventory(path: str | Path) -> ClusterInventory:
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise InputError(f"cannot read inventory: {exc.strerror or exc}", source=str(p)) from exc
    try:
        data = parse_inventory_text(text)
    except yaml.YAMLError as exc:
        raise InputError(f"not YAML: {str(exc).splitlines()[0]}", source=str(p)) from exc
    return parse_inventory(data, str(p))
