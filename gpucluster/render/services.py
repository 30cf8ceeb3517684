"""The systemd services a node's roles must leave running: what GC-SYS-003 checks, per node.

A function of the node's inventory groups and hardware profile, so the roles that start the
services and the check that expects them read one answer (filter
``gpucluster.cluster.required_services``, called with ``group_names`` and the node's profile).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Types only: the roles' filters import this module in every Ansible worker (render/devices.py).
    from gpucluster.outputs import Capabilities
    from gpucluster.spec.models import HardwareProfile

# common: sshd, chrony (time), nftables (firewall); monitoring: node_exporter.
BASE_SERVICES = ("ssh", "chrony", "nftables", "prometheus-node-exporter")
# nvidia_driver on GPU nodes: the persistence daemon; the fabric manager where the profile's
# GPUs sit on NVSwitch and need it (profile gpu.fabric_manager).
# gpu_validation on GPU nodes: DCGM's host engine, where the target's nodes reach NVIDIA's
# repositories and have room for the heavy packages (gpucluster_capabilities), as the role installs it.
GPU_SERVICES = ("nvidia-persistenced", "nvidia-fabricmanager", "nvidia-dcgm")
ALL_SERVICES = BASE_SERVICES + GPU_SERVICES


def required_services(groups: Sequence[str], profile: HardwareProfile | None,
                      capabilities: Capabilities | None = None) -> list[str]:
    """The services a node in ``groups`` with ``profile`` (None: none named, so no GPU) must run, in
    ALL_SERVICES order. ``capabilities`` (the inventory's gpucluster_capabilities) decides DCGM's;
    without it, none."""
    services = list(BASE_SERVICES)
    gpu = profile.gpu if profile is not None else None
    if "gpu" in groups and gpu is not None and gpu.count > 0:
        services.append("nvidia-persistenced")
        if gpu.fabric_manager:
            services.append("nvidia-fabricmanager")
        if capabilities is not None and capabilities.nvidia_repo and capabilities.heavy_packages:
            services.append("nvidia-dcgm")
    return services
