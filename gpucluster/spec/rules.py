"""Rules that span fields, profiles and the bill of materials.

Each check appends ``"<field path>: <reason>"`` lines; all of them run, so a user
sees every problem of a stack file at once.
"""

from __future__ import annotations

import ipaddress
import math
import os
from collections import Counter
from collections.abc import Mapping
from pathlib import Path

from gpucluster.render.devices import RDMA_KINDS
from gpucluster.render.platform import provider_cidrs
from gpucluster.render.sources import Needs, needed_sources
from gpucluster.spec.cluster import (
    FIRST_HOST_OFFSET,
    MAX_NODES,
    aws_vpc_cidr,
    fabric_interface,
    node_names,
    pool_platform,
    rail_cidrs,
    rail_host,
    spec_addressed,
    spec_addressed_ports,
)
from gpucluster.spec.models import (
    AwsTarget,
    AzureTarget,
    Bom,
    ClusterSpec,
    Egress,
    HardwareProfile,
    NodePool,
    OciTarget,
    Platform,
    TwinFile,
)
from gpucluster.spec.os import ceph_source, pool_os

NS = "gpucluster"

# Which fabrics each target can have. EFA exists only on AWS; AWS and OCI offer no
# InfiniBand to tenants; Azure's ND VMs have InfiniBand, not tenant RoCE. The lab has no
# RDMA at all: roce and infiniband there render their configuration without applying it.
FABRICS_BY_TARGET: dict[str, tuple[str, ...]] = {
    "aws": ("efa", "ethernet"),
    "azure": ("infiniband", "ethernet"),
    "oci": ("roce", "ethernet"),
    "baremetal": ("infiniband", "roce", "ethernet"),
    "lab": ("ethernet", "roce", "infiniband"),
}


def semantic_problems(spec: ClusterSpec, bom: Bom, profiles: dict[str, HardwareProfile],
                      platforms: dict[str, Platform], twins: Mapping[str, TwinFile] | None = None) -> list[str]:
    """Every rule that spans fields; ``twins`` (the shipped twin files, by name) is needed only for a
    spec with a ``twin:`` block, and the loader passes it in (this module reads no files)."""
    problems = _size(spec)
    if problems:
        # Every other check walks the nodes: a spec past the limit is not expanded at all.
        return problems
    placed = node_names(spec)
    if spec.target.kind == "lab" and spec.name == "cache":
        # <state_dir>/cache is the labs' shared rootfs and apt cache, which `lab down` keeps.
        problems.append(f"{NS}.name: 'cache' is reserved on the lab target (its shared cache folder)")
    _pools(spec, profiles, problems)
    _platforms(spec, profiles, platforms, problems)
    names = _nodes(spec, placed, problems)
    _networks(spec, len(names), platforms, problems)
    _fabric(spec, set(names), problems)
    _subnet_managers(spec, placed, platforms, problems)
    _storage(spec, placed, problems)
    _kubernetes(spec, bom, placed, problems)
    _twin(spec, twins or {}, problems)
    _reach(spec, problems)
    return problems


def _size(spec: ClusterSpec) -> list[str]:
    """The node count against MAX_NODES, from the pool counts (and bare-metal declarations) alone."""
    problems = []
    total = sum(pool.count for pool in spec.node_pools)
    if total > MAX_NODES:
        problems.append(
            f"{NS}.node_pools: the pools' counts add up to {total:,} nodes; a cluster has at most {MAX_NODES:,}"
        )
    if spec.target.kind == "baremetal" and len(spec.target.nodes) > MAX_NODES:
        problems.append(
            f"{NS}.target.nodes: {len(spec.target.nodes):,} nodes declared; a cluster has at most {MAX_NODES:,}"
        )
    return problems


def _pools(spec: ClusterSpec, profiles: dict[str, HardwareProfile], problems: list[str]) -> None:
    seen: dict[str, int] = {}
    target = spec.target.kind
    for i, pool in enumerate(spec.node_pools):
        where = f"{NS}.node_pools[{i}]"
        if pool.name in seen:
            problems.append(f"{where}.name: duplicate pool name {pool.name!r} (also node_pools[{seen[pool.name]}])")
        seen.setdefault(pool.name, i)
        profile = profiles.get(pool.profile)
        if profile is None:
            known = ", ".join(sorted(profiles))
            problems.append(f"{where}.profile: unknown hardware profile {pool.profile!r} (known: {known})")
        elif target == "lab" and profile.gpu.count > 0:
            problems.append(
                f"{where}.profile: lab nodes have no GPU; use a GPU-less profile such as 'cpu-lab' "
                f"(got {pool.profile!r})"
            )
        if pool.data_disks is not None and target != "lab":
            problems.append(f"{where}.data_disks: file-backed disks exist only on the lab target; use osd_devices")
        if pool.osd_devices and "storage" not in pool.roles:
            problems.append(f"{where}.osd_devices: only pools with the storage role carry OSD devices")
        if pool.data_disks is not None and "storage" not in pool.roles:
            problems.append(f"{where}.data_disks: only pools with the storage role carry OSD disks")


def _platforms(spec: ClusterSpec, profiles: dict[str, HardwareProfile], platforms: dict[str, Platform],
               problems: list[str]) -> None:
    """Each pool's platform: known, offered on the target, carrying the pool's GPUs, on the spec's fabric."""
    target = spec.target.kind
    for i, pool in enumerate(spec.node_pools):
        where = f"{NS}.node_pools[{i}]"
        name = pool_platform(spec, pool)
        platform = platforms.get(name)
        if platform is None:
            known = ", ".join(sorted(platforms))
            problems.append(f"{where}.platform: unknown platform {name!r} (known: {known})")
            continue
        said = f"platform {name!r}" + ("" if pool.platform else f" (the {target} default)")
        if target not in platform.targets:
            problems.append(f"{where}.platform: {said} is not offered on target {target} "
                            f"(it is on {', '.join(platform.targets)})")
            continue
        profile = profiles.get(pool.profile)
        if profile is not None:
            if platform.profiles and pool.profile not in platform.profiles:
                problems.append(f"{where}.profile: {said} carries {', '.join(platform.profiles)}, "
                                f"not {pool.profile!r}")
            elif not platform.profiles and profile.gpu.count > 0:
                problems.append(f"{where}.platform: {said} has no GPUs; profile {pool.profile!r} has "
                                f"{profile.gpu.count}: name the platform of the GPU shape")
        if target in ("aws", "azure", "oci"):
            shape = platform.instance_types.get(target)
            if not pool.instance_type and not shape:
                problems.append(f"{where}.instance_type: {said} names no {target} instance type; set one")
            elif pool.instance_type and shape and pool.instance_type != shape:
                problems.append(f"{where}.instance_type: {pool.instance_type} but {said} is {shape}; "
                                "name the platform of that instance type")
        if target == "baremetal" and {"gpu", "storage"} & set(pool.roles) and not _fabric_interface_known(
                spec, pool, platform):
            # Its nodes get a fabric address (planned from fabric_cidr); something must carry it.
            if any(r.kind == "infiniband" for r in platform.rails):
                problems.append(f"{where}.fabric_interface: {said} names no interface for its InfiniBand port "
                                "(IPoIB interfaces are named by PCI path, ibp<bus>s<slot>, not ib0); set the "
                                "pool's fabric_interface")
            else:
                problems.append(f"{where}.fabric_interface: {said} names no interface for its nodes' fabric address "
                                f"on the {spec.fabric.type} fabric; set the pool's fabric_interface (the name "
                                "`ip link` shows), or the nodes' fabric_macs")
        if target != "lab":
            _rail_subnets(spec, i, pool, platform, said, problems)
        provider = platform.provider_qos
        if provider is not None and spec.fabric.type == "roce":
            if spec.fabric.roce_qos is not None:
                problems.append(f"{NS}.fabric.roce_qos: {said}'s network QoS is the provider's (traffic class "
                                f"{provider.traffic_class}, service level {provider.service_level}); leave roce_qos "
                                "unset: NCCL takes the provider's settings and the nodes set no DCB of their own")
            if spec.fabric.gid_index is not None and spec.fabric.gid_index != provider.gid_index:
                problems.append(f"{NS}.fabric.gid_index: {spec.fabric.gid_index}, but {said}'s provider publishes "
                                f"GID index {provider.gid_index}; leave it unset")
        kinds = sorted({r.kind for r in platform.compute_rails() if r.kind in RDMA_KINDS})
        # A fabric the target cannot have is reported once, by _fabric, not again per pool. An
        # Ethernet fabric runs NCCL over sockets on any platform; an RDMA one needs its own rails.
        fabric = spec.fabric.type
        if kinds and fabric in FABRICS_BY_TARGET[target] and fabric in RDMA_KINDS and fabric not in kinds:
            problems.append(f"{where}.platform: {said} computes over {' and '.join(kinds)}, but fabric.type is "
                            f"{spec.fabric.type}")


def _rail_subnets(spec: ClusterSpec, i: int, pool: NodePool, platform: Platform, said: str,
                  problems: list[str]) -> None:
    """A platform whose compute ports the spec addresses one subnet each (subnet_per_rail) off the
    lab: each rail names its netdevs (the interfaces the addresses go on), fabric_cidr splits into
    a subnet per port, and each of the pool's nodes has a host address on every one of them."""
    where = f"{NS}.node_pools[{i}]"
    if any(spec_addressed(r) and r.netdevs is None for r in platform.rails):
        problems.append(f"{where}.platform: {said} addresses its compute ports one subnet each, but names no "
                        "netdevs for them (the interfaces the addresses go on)")
        return
    ports = len(spec_addressed_ports(platform))
    if not ports:
        return
    try:
        subnets = rail_cidrs(spec, ports)
        last = max((index for index, (p, _) in enumerate(node_names(spec)) if p.name == pool.name), default=None)
        if last is not None:
            rail_host(subnets[-1], last)
    except ValueError as exc:
        problems.append(f"{NS}.fabric.fabric_cidr: {said} has {ports} compute ports, each in its own subnet of "
                        f"fabric_cidr: {exc}")


def _fabric_interface_known(spec: ClusterSpec, pool: NodePool, platform: Platform) -> bool:
    """Whether the bare-metal target can name the interface of the pool's fabric address
    (gpucluster.spec.cluster.fabric_interface, with the MACs only when every node of the pool declares them)."""
    target = spec.target
    declared = [n for n in target.nodes if n.pool == pool.name] if target.kind == "baremetal" else []
    return fabric_interface(spec, pool, platform, bool(declared) and all(n.fabric_macs for n in declared)) is not None


def _subnet_managers(spec: ClusterSpec, placed: list[tuple[NodePool, str]], platforms: dict[str, Platform],
                     problems: list[str]) -> None:
    """Who runs the InfiniBand subnet manager: the provider (Azure) or nodes with an InfiniBand port."""
    fabric = spec.fabric
    if fabric.type != "infiniband":
        return
    shape = {name: platforms.get(pool_platform(spec, pool)) for pool, name in placed}
    gpu_shapes = {p.name: p for pool, name in placed if "gpu" in pool.roles and (p := shape[name]) is not None}
    by_provider = sorted(n for n, p in gpu_shapes.items() if p.subnet_manager == "provider")
    if by_provider and fabric.subnet_managers:
        problems.append(f"{NS}.fabric.subnet_managers: platform {by_provider[0]} runs on a fabric whose subnet "
                        "manager the provider runs; list none")
    needs_own = sorted(n for n, p in gpu_shapes.items() if p.subnet_manager == "cluster")
    if needs_own and not fabric.subnet_managers:
        problems.append(f"{NS}.fabric.subnet_managers: platform {needs_own[0]} needs at least one "
                        "subnet-manager node on its InfiniBand fabric")
    for k, sm in enumerate(fabric.subnet_managers):
        platform = shape.get(sm)
        # The lab renders an InfiniBand fabric's settings without one: its nodes have no port at all.
        lab = spec.target.kind == "lab"
        if platform is not None and not lab and not any(r.kind == "infiniband" for r in platform.rails):
            problems.append(f"{NS}.fabric.subnet_managers[{k}]: {sm!r} is a {platform.name} node, which has "
                            "no InfiniBand port to run a subnet manager on")


def _nodes(spec: ClusterSpec, placed: list[tuple[NodePool, str]], problems: list[str]) -> list[str]:
    target = spec.target
    if target.kind == "baremetal":
        pools = {p.name: p for p in spec.node_pools}
        per_pool = Counter(n.pool for n in target.nodes)
        for j, bm in enumerate(target.nodes):
            if bm.pool not in pools:
                problems.append(f"{NS}.target.nodes[{j}].pool: no node pool named {bm.pool!r}")
        for i, pool in enumerate(spec.node_pools):
            if per_pool[pool.name] != pool.count:
                problems.append(
                    f"{NS}.node_pools[{i}].count: {pool.count} but target.nodes declares "
                    f"{per_pool[pool.name]} node(s) in pool {pool.name!r}"
                )
        macs = Counter(n.management_mac for n in target.nodes)
        for j, bm in enumerate(target.nodes):
            if macs[bm.management_mac] > 1:
                problems.append(f"{NS}.target.nodes[{j}].management_mac: {bm.management_mac} is used twice")
    names = [name for _, name in placed]
    # Declared names are checked in declaration order, so the path points at the repeat.
    declared = [bm.name for bm in target.nodes] if target.kind == "baremetal" else names
    first: dict[str, int] = {}
    for j, name in enumerate(declared):
        if name not in first:
            first[name] = j
        elif target.kind == "baremetal":
            problems.append(f"{NS}.target.nodes[{j}].name: duplicate node name {name!r} (also nodes[{first[name]}])")
        else:
            problems.append(f"{NS}.node_pools: duplicate node name {name!r}")
    return names


def _networks(spec: ClusterSpec, node_count: int, platforms: dict[str, Platform], problems: list[str]) -> None:
    nets: dict[str, ipaddress.IPv4Network] = {
        "fabric.management_cidr": ipaddress.IPv4Network(spec.fabric.management_cidr),
        "fabric.fabric_cidr": ipaddress.IPv4Network(spec.fabric.fabric_cidr),
    }
    if spec.kubernetes is not None and spec.kubernetes.enabled:
        nets["kubernetes.pod_cidr"] = ipaddress.IPv4Network(spec.kubernetes.pod_cidr)
        nets["kubernetes.service_cidr"] = ipaddress.IPv4Network(spec.kubernetes.service_cidr)
    public = getattr(spec.target, "public_cidr", None)
    if public:
        nets["target.public_cidr"] = ipaddress.IPv4Network(public)
    try:
        for i, cidr in enumerate(rail_cidrs(spec)):
            nets[f"target.rails (rail {i}, after fabric.fabric_cidr)"] = ipaddress.IPv4Network(cidr)
    except ValueError as exc:
        problems.append(f"{NS}.target.rails: {exc}")
    keys = list(nets)
    for a_i, a in enumerate(keys):
        for b in keys[a_i + 1 :]:
            if nets[a].overlaps(nets[b]):
                problems.append(f"{NS}.{b}: {nets[b]} overlaps {a} {nets[a]}")
    # The ranges a platform's image addresses its compute ports from (OCI's RDMA network): the
    # nodes route them over those ports and their firewall admits them there, so none of the
    # cluster's own networks may overlap them.
    ranges: dict[str, str] = {}
    for pool in spec.node_pools:
        name = pool_platform(spec, pool)
        for cidr in provider_cidrs(platforms.get(name)):
            ranges.setdefault(cidr, name)
    for cidr, name in ranges.items():
        for key in keys:
            if nets[key].overlaps(ipaddress.IPv4Network(cidr)):
                problems.append(f"{NS}.{key}: {nets[key]} overlaps {cidr}, a range platform {name!r}'s image "
                                "addresses its compute ports from")
    for key in ("fabric.management_cidr", "fabric.fabric_cidr"):
        usable = nets[key].num_addresses - FIRST_HOST_OFFSET - 1
        if usable < node_count:
            problems.append(
                f"{NS}.{key}: {nets[key]} holds {max(usable, 0)} node address(es), the spec has {node_count} nodes"
            )
    if spec.target.kind == "aws" and spec.target.vpc_cidr:
        vpc = ipaddress.IPv4Network(spec.target.vpc_cidr)
        for key in ("fabric.management_cidr", "fabric.fabric_cidr"):
            if not nets[key].subnet_of(vpc):
                problems.append(f"{NS}.{key}: {nets[key]} is not inside target.vpc_cidr {vpc}")


def _fabric(spec: ClusterSpec, names: set[str], problems: list[str]) -> None:
    fabric = spec.fabric
    allowed = FABRICS_BY_TARGET[spec.target.kind]
    if fabric.type not in allowed:
        problems.append(
            f"{NS}.fabric.type: {fabric.type} is not available on target {spec.target.kind} "
            f"(use {' or '.join(allowed)})"
        )
    if fabric.type != "infiniband":
        if fabric.subnet_managers:
            problems.append(f"{NS}.fabric.subnet_managers: only an infiniband fabric has subnet managers")
        if fabric.partitions:
            problems.append(f"{NS}.fabric.partitions: only an infiniband fabric has partitions")
    if fabric.type != "roce" and fabric.roce_qos is not None:
        problems.append(f"{NS}.fabric.roce_qos: only a roce fabric takes RoCE QoS settings")
    if fabric.type == "infiniband" and spec.target.kind in ("baremetal", "lab") and not fabric.subnet_managers:
        problems.append(f"{NS}.fabric.subnet_managers: an infiniband fabric needs at least one subnet-manager node")
    for k, sm in enumerate(fabric.subnet_managers):
        if sm not in names:
            problems.append(f"{NS}.fabric.subnet_managers[{k}]: no node named {sm!r}")
    pkeys = Counter(p.pkey.lower() for p in fabric.partitions)
    for k, part in enumerate(fabric.partitions):
        if pkeys[part.pkey.lower()] > 1:
            problems.append(f"{NS}.fabric.partitions[{k}].pkey: {part.pkey} is used twice")
    target = spec.target
    if target.kind == "aws" and target.capacity_block and not target.capacity_reservation_id:
        problems.append(f"{NS}.target.capacity_block: a Capacity Block is launched into by its reservation ID; "
                        "set target.capacity_reservation_id")
    if target.kind == "aws" and target.placement_group and not target.capacity_reservation_id:
        problems.append(f"{NS}.target.placement_group: names the group a capacity reservation was created in; "
                        "set target.capacity_reservation_id, or drop it and let each GPU pool make its own")
    if fabric.type == "efa" and fabric.mtu > 9001:
        problems.append(f"{NS}.fabric.mtu: EFA's maximum MTU is 9001 (got {fabric.mtu})")


def _storage(spec: ClusterSpec, placed: list[tuple[NodePool, str]], problems: list[str]) -> None:
    storage = spec.storage
    if storage is None:
        return
    where = f"{NS}.storage"
    known = {name for _, name in placed}
    hosts = {name for pool, name in placed if "storage" in pool.roles}
    if not hosts:
        problems.append(f"{where}: a storage section needs at least one node pool with the storage role")
    if len(storage.monitors) % 2 == 0:
        problems.append(
            f"{where}.monitors: must be an odd number of monitors for a quorum (got {len(storage.monitors)})"
        )
    for field_name in ("monitors", "managers", "mds"):
        listed = getattr(storage, field_name)
        for k, name in enumerate(listed):
            if name not in known:
                problems.append(f"{where}.{field_name}[{k}]: no node named {name!r}")
        dup = sorted(n for n, times in Counter(listed).items() if times > 1)
        if dup:
            problems.append(f"{where}.{field_name}: node {dup[0]!r} is listed twice")
    domains = _failure_domains(spec, placed, problems)
    host_domains = sorted({domains[h] for h in hosts if h in domains})
    pool_names = Counter(p.name for p in storage.pools)
    for k, pool in enumerate(storage.pools):
        if pool_names[pool.name] > 1:
            problems.append(f"{where}.pools[{k}].name: duplicate Ceph pool name {pool.name!r}")
        if hosts and storage.failure_domain == "host" and pool.size > len(hosts):
            problems.append(
                f"{where}.pools[{k}].size: replication {pool.size} is larger than the {len(hosts)} storage host(s)"
            )
        elif host_domains and storage.failure_domain != "host" and pool.size > len(host_domains):
            problems.append(
                f"{where}.pools[{k}].size: replication {pool.size} is larger than the {len(host_domains)} "
                f"{storage.failure_domain} failure domain(s) of the storage hosts ({', '.join(host_domains)}); "
                f"storage.failure_domain is {storage.failure_domain}"
            )
        if pool.min_size is not None and pool.min_size > pool.size:
            problems.append(f"{where}.pools[{k}].min_size: {pool.min_size} is larger than size {pool.size}")
    if spec.target.kind == "lab":
        for i, np in enumerate(spec.node_pools):
            if "storage" in np.roles and np.data_disks is None:
                problems.append(f"{NS}.node_pools[{i}].data_disks: lab storage nodes need file-backed data disks")
    elif spec.target.kind == "baremetal":
        for i, np in enumerate(spec.node_pools):
            if "storage" in np.roles and not np.osd_devices:
                problems.append(f"{NS}.node_pools[{i}].osd_devices: storage nodes need at least one OSD device")
    fs = storage.cephfs
    if fs is not None:
        by_name = {p.name: p for p in storage.pools}
        for key in ("metadata_pool", "data_pool"):
            ref = getattr(fs, key)
            ceph_pool = by_name.get(ref)
            if ceph_pool is None:
                problems.append(f"{where}.cephfs.{key}: no Ceph pool named {ref!r}")
            elif ceph_pool.application != "cephfs":
                problems.append(
                    f"{where}.cephfs.{key}: pool {ref!r} has application {ceph_pool.application}, not cephfs"
                )
        if fs.metadata_pool == fs.data_pool:
            problems.append(f"{where}.cephfs.data_pool: must differ from metadata_pool")
        if not storage.mds:
            problems.append(f"{where}.mds: CephFS needs at least one MDS node")


def failure_domains(spec: ClusterSpec) -> dict[str, str]:
    """Each node's CRUSH bucket of type ``storage.failure_domain``, where the spec names one.

    With ``host`` every node is its own domain. Otherwise ``storage.locations`` names it, and a
    bare-metal node's ``rack`` stands in where the failure domain is ``rack``.
    """
    storage = spec.storage
    names = [name for _, name in node_names(spec)]
    if storage is None or storage.failure_domain == "host":
        return {name: name for name in names}
    racks: dict[str, str] = {}
    if spec.target.kind == "baremetal" and storage.failure_domain == "rack":
        racks = {bm.name: bm.rack for bm in spec.target.nodes if bm.rack}
    out: dict[str, str] = {}
    for name in names:
        where = storage.locations.get(name) or racks.get(name)
        if where:
            out[name] = where
    return out


def _failure_domains(spec: ClusterSpec, placed: list[tuple[NodePool, str]], problems: list[str]) -> dict[str, str]:
    """Check the locations and the monitors' spread; return node -> failure domain."""
    storage = spec.storage
    assert storage is not None
    where = f"{NS}.storage"
    fd = storage.failure_domain
    known = {name for _, name in placed}
    for name in storage.locations:
        if name not in known:
            problems.append(f"{where}.locations.{name}: no node named {name!r}")
    if fd == "host" and storage.locations:
        problems.append(
            f"{where}.locations: only used when storage.failure_domain is not host "
            f"(set failure_domain, e.g. rack, or drop locations)"
        )
    domains = failure_domains(spec)
    hosts = [name for pool, name in placed if "storage" in pool.roles]
    host_set = set(hosts)
    hint = "name it in storage.locations" + (" or set its rack in target.nodes" if (
        spec.target.kind == "baremetal" and fd == "rack") else "")
    for name in dict.fromkeys([*hosts, *storage.monitors]):
        if name in known and name not in domains:
            what = "storage host" if name in host_set else "monitor"
            problems.append(f"{where}.locations: {what} {name!r} has no {fd} ({hint}); "
                            f"storage.failure_domain is {fd}")
    monitors = [m for m in dict.fromkeys(storage.monitors) if m in known]
    if monitors and all(m in domains for m in monitors):
        # Every domain the cluster has: the storage hosts' and the monitors' own.
        count = len({domains[n] for n in [*hosts, *monitors] if n in domains})
        most = math.ceil(len(monitors) / min(len(monitors), count))
        per_domain: dict[str, list[str]] = {}
        for m in monitors:
            per_domain.setdefault(domains[m], []).append(m)
        for domain, members in sorted(per_domain.items()):
            if len(members) > most:
                named = ", ".join(members[:10]) + (f" and {len(members) - 10:,} more" if len(members) > 10 else "")
                problems.append(
                    f"{where}.monitors: {len(members)} of the {len(monitors)} monitors ({named}) "
                    f"are in {fd} {domain!r}; with {count} {fd} failure domain(s) at most {most} may share one: "
                    "spread the monitors across failure domains"
                )
    return domains


def _kubernetes(spec: ClusterSpec, bom: Bom, placed: list[tuple[NodePool, str]], problems: list[str]) -> None:
    kube = spec.kubernetes
    if kube is None or not kube.enabled:
        return
    where = f"{NS}.kubernetes"
    if kube.version is not None:
        pinned = bom.kubernetes.version
        if not (pinned == kube.version or pinned.startswith(kube.version + ".")):
            problems.append(
                f"{where}.version: {kube.version} differs from the bill of materials ({pinned}); "
                "versions are pinned in bom.yaml only"
            )
    planes = [name for pool, name in placed if "control_plane" in pool.roles]
    if not planes:
        problems.append(f"{where}: needs a node pool with the control_plane role")
    if kube.control_plane_ha:
        if len(planes) < 3 or len(planes) % 2 == 0:
            problems.append(
                f"{where}.control_plane_ha: needs an odd number (3 or more) of control-plane nodes (got {len(planes)})"
            )
        if kube.api_vip is None:
            problems.append(f"{where}.api_vip: required when control_plane_ha is true")
    if kube.api_vip is not None:
        vip = ipaddress.IPv4Address(kube.api_vip)
        if vip not in ipaddress.IPv4Network(spec.fabric.management_cidr):
            problems.append(f"{where}.api_vip: {vip} is not in fabric.management_cidr {spec.fabric.management_cidr}")


# --- reach and egress ------------------------------------------------------------------------

# The IDs a joined network's fields take on each cloud (gpucluster.spec.models.ExistingNetwork).
_NETWORK_IDS: dict[str, tuple[str, str, str]] = {
    "aws": ("vpc-", "subnet-", "a VPC ID (vpc-...)"),
    "azure": ("/subscriptions/", "/subscriptions/", "a VNet resource ID (/subscriptions/.../virtualNetworks/...)"),
    "oci": ("ocid1.vcn.", "ocid1.subnet.", "a VCN OCID (ocid1.vcn...)"),
}
# A created bastion, or AWS's NAT gateway, needs a subnet that routes to the internet.
_PUBLIC_WHY = {"bastion": "the bastion the stack creates", "nat": "the NAT gateway (AWS puts it in a public subnet)"}


def cluster_needs(spec: ClusterSpec) -> Needs:
    """What of the spec decides which sources the roles download from (gpucluster.render.sources)."""
    kube = spec.kubernetes is not None and spec.kubernetes.enabled
    return Needs(gpu_nodes=any("gpu" in p.roles for p in spec.node_pools), fabric=spec.fabric.type,
                 ofed=spec.fabric.ofed, kubernetes=kube,
                 ceph_upstream=spec.storage is not None and ceph_source(spec) == "upstream")


def _reach(spec: ClusterSpec, problems: list[str]) -> None:
    """A joined network named as its cloud names it; a public subnet wherever something must face
    the internet; an egress that can work; an access path that leads somewhere."""
    target = spec.target
    if not isinstance(target, AwsTarget | AzureTarget | OciTarget):
        return
    where = f"{NS}.target"
    kind = target.kind
    net = target.network
    if net is not None:
        vpc, subnet, what = _NETWORK_IDS[kind]
        if not net.id.startswith(vpc):
            problems.append(f"{where}.network.id: {net.id!r} is not {what}")
        for key in ("management_subnet_id", "fabric_subnet_id", "public_subnet_id"):
            value = getattr(net, key)
            if value is None:
                continue
            if not value.startswith(subnet) or (kind == "azure" and not value.startswith(net.id + "/subnets/")):
                shown = f"a subnet of {net.id}" if kind == "azure" else f"a {kind} subnet ID ({subnet}...)"
                problems.append(f"{where}.network.{key}: {value!r} is not {shown}")
        if net.fabric_subnet_id is not None and kind != "aws":
            problems.append(f"{where}.network.fabric_subnet_id: only AWS puts the fabric (EFA) in a subnet; "
                            f"{kind}'s fabric is the provider's")
        if isinstance(target, AwsTarget) and target.vpc_cidr:
            problems.append(f"{where}.vpc_cidr: the stack joins network.id {net.id} and creates no VPC; drop vpc_cidr")
        if target.public_cidr:
            problems.append(f"{where}.public_cidr: the stack joins network.id {net.id} and creates no subnet; "
                            "name an existing public subnet in network.public_subnet_id")
    public_for = []
    bastion = target.access.bastion
    if target.access.mode == "bastion" and bastion is not None and bastion.create:
        public_for.append("bastion")
    if kind == "aws" and target.egress.mode == "nat" and net is None:
        public_for.append("nat")
    for why in public_for:
        if net is None and not target.public_cidr:
            problems.append(f"{where}.public_cidr: {_PUBLIC_WHY[why]} needs a public subnet; name a CIDR for it "
                            "inside the network, apart from management_cidr and fabric_cidr (a /28 is enough)")
        elif net is not None and why == "bastion" and not net.public_subnet_id:
            problems.append(f"{where}.network.public_subnet_id: {_PUBLIC_WHY[why]} needs a public subnet of "
                            f"{net.id} (one that routes to the internet)")
    if target.public_cidr and not public_for and net is None:
        problems.append(f"{where}.public_cidr: nothing the stack creates needs a public subnet (no created "
                        "bastion" + (", no NAT gateway" if kind == "aws" else "") + "); drop it")
    if target.public_cidr and isinstance(target, AwsTarget) and net is None:
        vpc_net = ipaddress.IPv4Network(aws_vpc_cidr(spec))
        if target.vpc_cidr and not ipaddress.IPv4Network(target.public_cidr).subnet_of(vpc_net):
            problems.append(f"{where}.public_cidr: {target.public_cidr} is not inside target.vpc_cidr {vpc_net}")
        elif not target.vpc_cidr and vpc_net.prefixlen < 16:
            problems.append(f"{where}.public_cidr: management, fabric and public CIDRs only fit in {vpc_net}, "
                            "wider than the /16 an AWS VPC allows; set vpc_cidr or move the CIDRs closer")
    _egress(spec, target.egress, problems)
    _access(target, problems)


def _egress(spec: ClusterSpec, egress: Egress, problems: list[str]) -> None:
    where = f"{NS}.target.egress"
    if egress.mode == "proxy":
        for key in ("http_proxy", "https_proxy"):
            if getattr(egress, key) is None:
                problems.append(f"{where}.{key}: egress.mode proxy needs the proxy's URL for {key.split('_')[0]} "
                                "(http://host:port; the same URL for both is fine)")
    else:
        for key in ("http_proxy", "https_proxy", "no_proxy"):
            if getattr(egress, key):
                problems.append(f"{where}.{key}: set, but egress.mode is {egress.mode}; the nodes take no proxy "
                                "(set mode: proxy, or drop it)")
    if egress.mode == "none":
        missing = [s for s in needed_sources(cluster_needs(spec)) if s.key not in egress.mirrors]
        for source in missing:
            problems.append(f"{where}.mirrors.{source.key}: egress.mode none leaves the nodes no way out, and "
                            f"the roles download {source.serves} from {source.upstream}; name a mirror inside "
                            "the network")


def _access(target: AwsTarget | AzureTarget | OciTarget, problems: list[str]) -> None:
    where = f"{NS}.target.access"
    access = target.access
    bastion = access.bastion
    if access.mode == "direct":
        if bastion is not None:
            problems.append(f"{where}.bastion: set, but access.mode is direct; set mode: bastion, or drop it")
        return
    if bastion is None:
        problems.append(f"{where}.bastion: access.mode bastion needs one: {{create: true}} for a bastion the stack "
                        "makes, or {host, user, port} of an existing one")
        return
    if bastion.create:
        for key in ("host", "user", "source_cidr"):
            if getattr(bastion, key) is not None:
                problems.append(f"{where}.bastion.{key}: the stack creates this bastion and knows its address and "
                                "user; drop it")
        if not target.admin_cidrs:
            problems.append(f"{NS}.target.admin_cidrs: empty, so the bastion the stack creates admits SSH from "
                            "nowhere; list the ranges the controller connects from")
        return
    if bastion.instance_type is not None:
        problems.append(f"{where}.bastion.instance_type: only a bastion the stack creates (create: true) has one")
    for key in ("host", "user"):
        if getattr(bastion, key) is None:
            problems.append(f"{where}.bastion.{key}: an existing bastion needs its {key} (or create: true)")
    if bastion.host is not None and bastion.source_cidr is None and not _is_ipv4(bastion.host):
        problems.append(f"{where}.bastion.source_cidr: bastion {bastion.host} is named, not addressed; name the "
                        "network its connections to the nodes come from (the nodes' firewall admits SSH from it)")


def _is_ipv4(text: str) -> bool:
    try:
        ipaddress.IPv4Address(text)
    except ValueError:
        return False
    return True


# RFC 5737 and RFC 3849 set these aside for documentation: no real administrator is there.
DOCUMENTATION_NETS = tuple(ipaddress.ip_network(n) for n in
                           ("192.0.2.0/24", "198.51.100.0/24", "203.0.113.0/24", "2001:db8::/32"))


def _key_warnings(key_file: str | None, env: Mapping[str, str]) -> list[str]:
    """The private key converge and verify log in with: the named file, else the SSH agent's keys."""
    where = f"{NS}.target.ssh_private_key_file"
    if key_file is None:
        if not env.get("SSH_AUTH_SOCK"):
            return [f"{where}: not set and no SSH agent here (SSH_AUTH_SOCK is empty), so converge and verify "
                    "have no key to log in with; name the key file, or load the key into an agent (ssh-add)"]
        return []
    path = Path(key_file).expanduser()
    try:
        mode = path.stat().st_mode
    except OSError:
        return [f"{where}: {key_file} does not exist on this machine; converge and verify log in with it"]
    if mode & 0o077:
        return [f"{where}: {key_file} is readable by others (mode {mode & 0o777:o}); ssh refuses such a key "
                f"(chmod 600 {key_file})"]
    return []


def reachability_warnings(spec: ClusterSpec, env: Mapping[str, str] | None = None) -> list[str]:
    """What would leave the nodes of a valid spec unreachable over SSH from the controller.

    Warnings, not problems: a key can also come from the image or a cloud key pair, the controller
    may sit inside the network, and the key may be loaded later (a CI job's agent). ``env``: this
    process's environment by default. ``gpucluster spec validate`` prints them.
    """
    target = spec.target
    if target.kind == "lab":
        return []
    out: list[str] = []
    if target.ssh_public_key is None:
        out.append(f"{NS}.target.ssh_public_key: not set, so no key of yours is installed on the nodes; "
                   "converge and verify log in over SSH (set it, or make sure the image carries your key)")
    out += _key_warnings(target.ssh_private_key_file, os.environ if env is None else env)
    if target.kind == "baremetal":
        return out
    bastion = target.access.bastion
    if target.access.mode == "bastion" and bastion is not None and not bastion.create:
        # An existing bastion: the controller reaches it from wherever it may; admin_cidrs play no part.
        return out
    if not target.admin_cidrs:
        out.append(f"{NS}.target.admin_cidrs: empty, so SSH reaches the nodes only from inside the "
                   f"network ({target.kind}); run the controller there or list your address range")
    for i, cidr in enumerate(target.admin_cidrs):
        net = ipaddress.ip_network(cidr, strict=False)
        if any(net.version == doc.version and net.overlaps(doc) for doc in DOCUMENTATION_NETS):
            out.append(f"{NS}.target.admin_cidrs[{i}]: {cidr} is a documentation range (RFC 5737/3849), "
                       "not a real network: replace it with the range the controller connects from")
    return out


def _twin(spec: ClusterSpec, twins: Mapping[str, TwinFile], problems: list[str]) -> None:
    """A twin's data file: known, of the stack's target, of its GPU pools' platform and their OS."""
    if spec.twin is None:
        return
    if not spec.name.startswith("twin-"):
        # A twin's host keys and run records live where its real target's would (the cluster's
        # folder, by name): a twin named like a real cluster would replace that cluster's.
        problems.append(f"{NS}.name: {spec.name!r}; a twin's name starts with 'twin-', so that it never shares "
                        "the host keys and records of a real cluster of the same name")
    _twin_outside(spec, problems)
    where = f"{NS}.twin.file"
    twin = twins.get(spec.twin.file)
    if twin is None:
        problems.append(f"{where}: unknown twin {spec.twin.file!r} (known: {', '.join(sorted(twins))})")
        return
    if twin.target != spec.target.kind:
        problems.append(f"{where}: twin {twin.name!r} is of target {twin.target!r}, "
                        f"the stack's is {spec.target.kind!r}")
    for i, pool in enumerate(spec.node_pools):
        if "gpu" not in pool.roles:
            continue
        if pool_platform(spec, pool) != twin.platform:
            problems.append(f"{NS}.node_pools[{i}].platform: {pool_platform(spec, pool)!r}; twin {twin.name!r} "
                            f"models platform {twin.platform!r}")
        if pool_os(spec, pool) != twin.image.os:
            problems.append(f"{NS}.node_pools[{i}]: runs {pool_os(spec, pool)}; twin {twin.name!r} models the "
                            f"image's {twin.image.os}")


def _twin_outside(spec: ClusterSpec, problems: list[str]) -> None:
    """The network outside the cluster's, where a twin's controller is: required through a bastion
    (the bastion's public address is there too), optional reached directly (the controller then
    connects from it, not from the management network); apart from the cluster's networks, and
    the controller inside the admin_cidrs that admit it (the bastion's the stack creates, or the
    nodes' own firewall where it reaches them directly)."""
    assert spec.twin is not None
    where = f"{NS}.twin.outside_cidr"
    access = getattr(spec.target, "access", None)
    bastion = access.bastion if access is not None and access.mode == "bastion" else None
    outside = spec.twin.outside_cidr
    if bastion is None:
        if outside is not None:
            _outside_network(spec, ipaddress.IPv4Network(outside), where, problems, direct=True)
        return
    if outside is None:
        problems.append(f"{where}: the stack is reached through a bastion; name the network outside the "
                        "cluster's where the controller and the bastion's public address are (a /30 or larger)")
        return
    net = ipaddress.IPv4Network(outside)
    if not _outside_network(spec, net, where, problems, direct=False):
        return
    b = f"{NS}.target.access.bastion"
    if bastion.create:
        if not getattr(spec.target, "public_cidr", None):
            problems.append(f"{NS}.target.public_cidr: unset; the twin boots the bastion the stack creates in the "
                            "public subnet, from which the nodes admit its SSH")
        return
    # The site's bastion, booted by the twin's lab: where, how and as whom the stack says it answers.
    public = twin_bastion_address(net)
    if bastion.host != str(public):
        problems.append(f"{b}.host: {bastion.host}; the twin's lab boots the site's bastion at {public}, the second "
                        f"address of twin.outside_cidr {net}: name it")
    if bastion.port != 22 or bastion.user != "root":
        problems.append(f"{b}: {bastion.user}@...:{bastion.port}; the twin's bastion is a lab machine answering root "
                        "on port 22: name user root and port 22")
    if not bastion.source_cidr:
        problems.append(f"{b}.source_cidr: unset; the twin's bastion reaches the nodes from the subnet it names")
        return
    leg = ipaddress.IPv4Network(bastion.source_cidr)
    others = {"fabric.management_cidr": spec.fabric.management_cidr, "fabric.fabric_cidr": spec.fabric.fabric_cidr,
              "twin.outside_cidr": outside}
    for key, cidr in others.items():
        if leg.overlaps(ipaddress.IPv4Network(cidr)):
            problems.append(f"{b}.source_cidr: {leg} overlaps {key} {cidr}; on the twin it is a subnet of its own, "
                            "as the site's bastion's is")


def _outside_network(spec: ClusterSpec, net: ipaddress.IPv4Network, where: str, problems: list[str], *,
                     direct: bool) -> bool:
    """The controller's network's own rules; False where its size stops the others."""
    if not 16 <= net.prefixlen <= 30:
        problems.append(f"{where}: {net}: the controller's network is a /16 to a /30")
        return False
    for key in ("management_cidr", "fabric_cidr"):
        other = ipaddress.IPv4Network(getattr(spec.fabric, key))
        if net.overlaps(other):
            problems.append(f"{where}: {net} overlaps fabric.{key} {other}; the controller is outside the cluster's "
                            "networks")
    for key in ("vpc_cidr", "public_cidr"):
        theirs = getattr(spec.target, key, None)
        if theirs and net.overlaps(ipaddress.IPv4Network(theirs)):
            problems.append(f"{where}: {net} overlaps target.{key} {theirs}; the controller is outside the cluster's "
                            "network")
    controller = next(net.hosts())
    admin = [ipaddress.IPv4Network(c) for c in getattr(spec.target, "admin_cidrs", [])]
    access = getattr(spec.target, "access", None)
    created = access is not None and access.bastion is not None and access.bastion.create
    if (direct or created) and not any(controller in c for c in admin):
        whose = "the nodes' firewall" if direct else "the bastion the stack creates"
        problems.append(f"{where}: the controller's address {controller} is in none of target.admin_cidrs, the "
                        f"only sources {whose} admits SSH from")
    return True


def twin_bastion_address(outside: ipaddress.IPv4Network) -> ipaddress.IPv4Address:
    """Where a twin's lab boots the bastion: the outside network's second address (the host, as the
    controller, holds the first)."""
    return outside.network_address + 2

