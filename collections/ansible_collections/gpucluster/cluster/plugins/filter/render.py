"""Renderer filters: gpucluster.render's functions, so a role writes what a check expects.

The roles call them by fully qualified name (``gpucluster.cluster.nccl_settings``); the
conformance suite imports the same functions from the gpucluster package, which the controller's
virtualenv has installed (as for the Kubernetes filters in kube.py).
"""

from __future__ import annotations

from typing import Any

from gpucluster.render.firewall import ssh_sources
from gpucluster.render.nccl import nccl_settings
from gpucluster.render.os_packages import detect_preinstalled, os_packages, preinstalled_action, preinstalled_plan
from gpucluster.render.platform import platform_devices, platform_rdma_addressed
from gpucluster.render.proxy import proxy_settings
from gpucluster.render.rails import rail_settings, rail_sysctl_lines
from gpucluster.render.services import required_services


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"nccl_settings": nccl_settings, "required_services": required_services,
                "os_packages": os_packages, "preinstalled_action": preinstalled_action,
                "detect_preinstalled": detect_preinstalled, "preinstalled_plan": preinstalled_plan,
                "platform_devices": platform_devices, "platform_rdma_addressed": platform_rdma_addressed,
                "rail_settings": rail_settings, "rail_sysctl_lines": rail_sysctl_lines, "ssh_sources": ssh_sources,
                "proxy_settings": proxy_settings}
