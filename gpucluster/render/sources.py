"""Where the roles download from: each source, what it serves, when a cluster needs it, and the
URL a node uses for it (the upstream one, or the spec's mirror).

One table for three readers: ``spec validate`` refuses ``egress.mode: none`` where a source the
cluster needs has no mirror (gpucluster.spec.rules), ``gpucluster inventory`` writes the resolved
URLs as ``gpucluster_sources``, and the roles' defaults read them from there (each role's own
``*_url`` input still overrides). Upstream URLs are the OS table's (gpucluster.render.os_packages)
or the bill of materials'; none is re-typed here.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from gpucluster.render.os_packages import CUDA_REPO_URL, DOCA_REPO_URL, TOOLKIT_REPO_URL

if TYPE_CHECKING:
    # Types only: the roles' filters import this module in every Ansible worker (render/devices.py).
    from gpucluster.spec.models import Bom

__all__ = ["EFA_INSTALLER_URL", "GITHUB", "SOURCES", "Needs", "Source", "needed_sources", "resolved_sources"]

# AWS's EFA installer tarballs (aws-efa-installer-<version>.tar.gz):
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html
EFA_INSTALLER_URL = "https://efa-installer.amazonaws.com"
# The bill of materials' source tarballs (nccl-tests, gpu-burn, nvbandwidth) are GitHub archives;
# a `sources` mirror keeps GitHub's paths under its own URL.
GITHUB = "https://github.com"
BOM_TARBALLS = ("nccl_tests", "gpu_burn", "nvbandwidth")


@dataclass(frozen=True)
class Source:
    key: str
    # What a mirror of it must serve, as the roles ask for it.
    serves: str
    upstream: str


SOURCES: tuple[Source, ...] = (
    Source("os_archive", "the OS's apt archive (every node's base packages; cloud-init points apt at it)",
           "the image's own apt sources"),
    Source("nvidia", "NVIDIA's CUDA repository (driver, CUDA, NCCL, DCGM), its layout kept", CUDA_REPO_URL),
    Source("container_toolkit", "NVIDIA's container toolkit repository (nvidia.github.io/libnvidia-container/"
           "stable/deb)", TOOLKIT_REPO_URL),
    Source("doca", "NVIDIA's DOCA-OFED repository", DOCA_REPO_URL),
    Source("efa_installer", "AWS's EFA installer tarballs", EFA_INSTALLER_URL),
    Source("kubernetes", "the Kubernetes binaries and CNI manifests, upstream's paths kept (dl.k8s.io, GitHub)",
           "dl.k8s.io, github.com, raw.githubusercontent.com"),
    Source("container_registry", "a registry mirror for the images Kubernetes pulls (registry.k8s.io, docker.io, "
           "quay.io, nvcr.io, ghcr.io)", "each image's own registry"),
    Source("ceph", "download.ceph.com's Ceph repository", "the bill of materials' ceph.mirror_url"),
    Source("sources", "GitHub's archive paths of the bill of materials' source tarballs (nccl-tests, gpu-burn, "
           "nvbandwidth)", GITHUB),
)
_BY_KEY = {s.key: s for s in SOURCES}


@dataclass(frozen=True)
class Needs:
    """What of the cluster decides which sources its roles download from."""

    gpu_nodes: bool
    fabric: str
    ofed: str
    kubernetes: bool
    # Ceph from upstream (download.ceph.com or its mirror); False without storage or from the distro.
    ceph_upstream: bool


def needed_sources(needs: Needs) -> list[Source]:
    """The sources the roles download from for a cluster like ``needs``, in SOURCES order."""
    keys = {"os_archive"}
    if needs.gpu_nodes:
        keys |= {"nvidia", "container_toolkit", "sources"}
    if needs.ofed == "doca":
        keys.add("doca")
    if needs.fabric == "efa":
        keys.add("efa_installer")
    if needs.kubernetes:
        keys |= {"kubernetes", "container_registry"}
    if needs.ceph_upstream:
        keys.add("ceph")
    return [s for s in SOURCES if s.key in keys]


def _github(url: str, mirror: str) -> str:
    return mirror.rstrip("/") + url[len(GITHUB):] if mirror and url.startswith(GITHUB + "/") else url


def resolved_sources(mirrors: Mapping[str, str], bom: Bom) -> dict[str, str]:
    """The URL each source is fetched from: the mirror where the spec names one, else upstream.

    ``""`` where the roles' own default is upstream's several places (``kubernetes``: each
    artifact's base), or there is no URL to give (``os_archive``: the image's sources;
    ``container_registry``: each image's registry). The BOM's tarballs get their full URLs, a
    ``sources`` mirror taking GitHub's place.
    """
    unknown = sorted(set(mirrors) - set(_BY_KEY))
    if unknown:
        raise ValueError(f"mirrors: no source named {', '.join(unknown)} (one of {', '.join(_BY_KEY)})")
    out = {
        "os_archive": mirrors.get("os_archive", ""),
        "nvidia": mirrors.get("nvidia", CUDA_REPO_URL),
        "container_toolkit": mirrors.get("container_toolkit", TOOLKIT_REPO_URL),
        "doca": mirrors.get("doca", DOCA_REPO_URL),
        "efa_installer": mirrors.get("efa_installer", EFA_INSTALLER_URL),
        "kubernetes": mirrors.get("kubernetes", ""),
        "container_registry": mirrors.get("container_registry", ""),
        "ceph": mirrors.get("ceph", str(bom.ceph.mirror_url)),
    }
    tarballs = {"nccl_tests": bom.nccl_tests, "gpu_burn": bom.gpu_burn, "nvbandwidth": bom.nvbandwidth}
    for name in BOM_TARBALLS:
        out[name] = _github(str(tarballs[name].source_url), mirrors.get("sources", ""))
    return {k: v.rstrip("/") for k, v in out.items()}
