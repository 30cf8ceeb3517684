"""What a node's platform (``gpucluster_platforms[gpucluster_platform]`` in the inventory) says about
its RDMA devices: the one reading the roles (through the ``gpucluster.cluster.platform_devices`` and
``gpucluster.cluster.platform_rdma_addressed`` filters) and the conformance checks share, so that
nvidia-peermem, the RoCE QoS script, GC-NET-003 and GC-NET-005 name the same devices.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from gpucluster.render.devices import RDMA_KINDS, expand_devices

if TYPE_CHECKING:
    # Types only: the roles' filters import this module in every Ansible worker (render/devices.py).
    from gpucluster.spec.models import Platform, Rail

__all__ = ["RDMA_KINDS", "fabric_netdev", "platform_devices", "platform_rail_count", "platform_rdma_addressed",
           "provider_cidrs",
           "provider_ports"]

# The addressing of a rail whose addresses the cluster plans (the spec's fabric_cidr, the lab's rail
# subnets) and the roles or the site's network config put on the port; ``provider`` is the
# provider image's, adopted as the port carries it, and ``none`` no address at all.
CLUSTER_ADDRESSED = ("shared_subnet", "subnet_per_rail")


def _rails(platform: Platform | None) -> list[Rail]:
    return list(platform.rails) if platform is not None else []


def platform_devices(platform: Platform | None, kinds: Sequence[str] = ("infiniband", "roce"),
                     role: str = "compute") -> list[str]:
    """The exact RDMA device names (mlx5_0, ...) of the platform's ``role`` rails of ``kinds``, in
    rail order. EFA rails name no devices (the OS numbers them), so they add none."""
    out: list[str] = []
    for rail in _rails(platform):
        if rail.role == role and rail.kind in kinds:
            out += expand_devices(rail.devices or [])
    return out


def platform_rail_count(platform: Platform | None, kinds: Sequence[str],
                        role: str | None = "compute") -> int:
    """Ports on the platform's rails of ``kinds`` (of ``role``; any role when None): the sum of the
    rails' ``count``."""
    return sum(r.count for r in _rails(platform) if r.kind in kinds and (role is None or r.role == role))


def platform_rdma_addressed(platform: Platform | None) -> bool:
    """Whether a node of the platform carries the cluster's fabric address: it has an RDMA rail
    (InfiniBand, RoCE, EFA) the cluster addresses. A storage VM with no RDMA rail, EFA (addressing
    none: libfabric needs no IP on it) and ports the provider addresses (OCI) carry none of it."""
    return any(r.kind in RDMA_KINDS and r.addressing in CLUSTER_ADDRESSED for r in _rails(platform))


def provider_ports(platform: Platform | None) -> list[tuple[str, list[str]]]:
    """(netdev, the provider's ranges) of every port of the platform's compute RDMA rails whose
    addresses the provider's image sets (``addressing: provider``: OCI's 16 RDMA ports), in rail
    order: the node adopts what they carry, GC-NET-001/002 judge each and the all-reduce's data
    goes over those ranges. Empty where the cluster, or nobody, addresses the fabric."""
    out: list[tuple[str, list[str]]] = []
    for rail in _rails(platform):
        if rail.role == "compute" and rail.kind in RDMA_KINDS and rail.addressing == "provider":
            cidrs = [str(c) for c in rail.provider_cidrs]
            out += [(str(d), cidrs) for d in expand_devices(rail.netdevs or [])]
    return out


def provider_cidrs(platform: Platform | None) -> list[str]:
    """The provider's ranges of the compute ports it addresses (provider_ports), each once, in
    order (OCI's: the oci-hpc images' 192.168.0.0/16, the OKE images' 10.224.0.0/12; a node's image
    uses one of them): the nodes' firewall admits them on those ports alone, and no network of the
    spec's may overlap them."""
    return list(dict.fromkeys(c for _, cidrs in provider_ports(platform) for c in cidrs))


def fabric_netdev(platform: Platform | None) -> str | None:
    """The interface that carries a node's fabric address, as its platform names it: the first
    netdev of its first addressed RDMA rail, compute rails before storage ones (DGX H100: ibp24s0,
    mlx5_0's IPoIB port). None where the platform names no netdev (EFA, a generic server)."""
    for role in ("compute", "storage"):
        for rail in _rails(platform):
            if (rail.role == role and rail.kind in RDMA_KINDS and rail.addressing in CLUSTER_ADDRESSED
                    and rail.netdevs):
                return expand_devices(rail.netdevs)[0]
    return None
