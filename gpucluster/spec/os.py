"""Which operating system each node runs, and where its Ceph packages come from.

The spec names an OS per target (``target.os``) and per pool (``node_pools[].os``); a pool's own
wins. The inventory carries the answer per host as ``gpucluster_os``, and the roles resolve their
packages and repositories from it (``gpucluster.render.os_packages``).
"""

from __future__ import annotations

from typing import Literal

from gpucluster.spec.models import ClusterSpec, NodePool, OsId

CephSource = Literal["upstream", "distro"]


def pool_os(spec: ClusterSpec, pool: NodePool) -> OsId:
    """The OS a pool's nodes run: the pool's own, else its target's."""
    return pool.os or spec.target.os


def ceph_source(spec: ClusterSpec) -> CephSource:
    """``distro`` where the nodes reach only their distribution's archive, else ``upstream``.

    Lab nodes fetch packages through a proxy to the Debian mirror alone (LabTarget.debian_mirror),
    so they cannot reach download.ceph.com and install the Debian archive's Ceph (bom ceph.distro).
    Every other target reaches download.ceph.com (or the mirror the BOM's ceph.mirror_url names).
    """
    return "distro" if spec.target.kind == "lab" else "upstream"
