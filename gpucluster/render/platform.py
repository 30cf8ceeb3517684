"""What a node's platform (``gpucluster_platforms[gpucluster_platform]`` in the inventory) says about
its RDMA devices: the one reading the roles (through the ``gpucluster.cluster.platform_devices`` and
``gpucluster.cluster.platform_rdma_addressed`` filters) and the conformance checks share, so that
nvidia-peermem, the RoCE QoS script, GC-NET-003 and GC-NET-005 name the same devices.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpucluster.render.devices import RDMA_KINDS, expand_devices

__all__ = ["RDMA_KINDS", "fabric_netdev", "platform_devices", "platform_rail_count", "platform_rdma_addressed",
           "provider_ports"]

# The addressing of a rail whose addresses the cluster plans (the spec's fabric_cidr, the lab's rail
# subnets) and the roles or the site's network config put on the port; ``provider`` is the
# provider image's, adopted as the port carries it, and ``none`` no address at all.
CLUSTER_ADDRESSED = ("shared_subnet", "subnet_per_rail")


def _rails(platform: Mapping[str, Any] | None) -> list[Mapping[str, Any]]:
    return list((platform or {}).get("rails") or [])


def platform_devices(platform: Mapping[str, Any] | None, kinds: Sequence[str] = ("infiniband", "roce"),
                     role: str = "compute") -> list[str]:
    """The exact RDMA device names (mlx5_0, ...) of the platform's ``role`` rails of ``kinds``, in
    rail order. EFA rails name no devices (the OS numbers them), so they add none."""
    out: list[str] = []
    for rail in _rails(platform):
        if rail.get("role") == role and rail.get("kind") in kinds:
            out += expand_devices(list(rail.get("devices") or []))
    return out


def platform_rail_count(platform: Mapping[str, Any] | None, kinds: Sequence[str],
                        role: str | None = "compute") -> int:
    """Ports on the platform's rails of ``kinds`` (of ``role``; any role when None): the sum of the
    rails' ``count``."""
    return sum(int(r.get("count") or 0) for r in _rails(platform)
               if r.get("kind") in kinds and (role is None or r.get("role") == role))


def platform_rdma_addressed(platform: Mapping[str, Any] | None) -> bool:
    """Whether a node of the platform carries the cluster's fabric address: it has an RDMA rail
    (InfiniBand, RoCE, EFA) the cluster addresses. A storage VM with no RDMA rail, EFA (addressing
    none: libfabric needs no IP on it) and ports the provider addresses (OCI) carry none of it."""
    return any(r.get("kind") in RDMA_KINDS and r.get("addressing", "none") in CLUSTER_ADDRESSED
               for r in _rails(platform))


def provider_ports(platform: Mapping[str, Any] | None) -> list[tuple[str, list[str]]]:
    """(netdev, the provider's ranges) of every port of the platform's compute RDMA rails whose
    addresses the provider's image sets (``addressing: provider``: OCI's 16 RDMA ports), in rail
    order: the node adopts what they carry, GC-NET-001/002 judge each and the all-reduce's data
    goes over those ranges. Empty where the cluster, or nobody, addresses the fabric."""
    out: list[tuple[str, list[str]]] = []
    for rail in _rails(platform):
        if rail.get("role") == "compute" and rail.get("kind") in RDMA_KINDS and rail.get("addressing") == "provider":
            cidrs = [str(c) for c in rail.get("provider_cidrs") or []]
            out += [(str(d), cidrs) for d in expand_devices(list(rail.get("netdevs") or []))]
    return out


def fabric_netdev(platform: Mapping[str, Any] | None) -> str | None:
    """The interface that carries a node's fabric address, as its platform names it: the first
    netdev of its first addressed RDMA rail, compute rails before storage ones (DGX H100: ibp24s0,
    mlx5_0's IPoIB port). None where the platform names no netdev (EFA, a generic server)."""
    for role in ("compute", "storage"):
        for rail in _rails(platform):
            if (rail.get("role") == role and rail.get("kind") in RDMA_KINDS
                    and rail.get("addressing", "none") in CLUSTER_ADDRESSED and rail.get("netdevs")):
                return expand_devices(list(rail["netdevs"]))[0]
    return None
