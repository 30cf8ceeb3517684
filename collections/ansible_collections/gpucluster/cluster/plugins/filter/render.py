"""Renderer filters: gpucluster.render's functions, so a role writes what a check expects.

The roles call them by fully qualified name (``gpucluster.cluster.nccl_settings``); the
conformance suite imports the same functions from the gpucluster package, which the controller's
virtualenv has installed (as for the Kubernetes filters in kube.py).

This file is the boundary between Ansible's data and the renderers, which take the spec's and the
outputs' typed models: each filter validates what a role hands it (the inventory's variables:
``gpucluster_fabric``, a platform of ``gpucluster_platforms``, ``gpucluster_bom``...) through the
model the inventory model read it with, so the roles and the suite render from one judge's values.
The models are imported when a filter is first called, never when Ansible loads this file (it loads
every filter file of the collection for any ``gpucluster.cluster.*`` filter): the vars plugin
``gpucluster.cluster.models`` has Ansible's main process import them before it forks a worker per
host-task, so a worker finds them in ``sys.modules`` (docs/roles.md, "Converge speed").
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from gpucluster.render.firewall import ssh_sources
from gpucluster.render.nccl import nccl_settings
from gpucluster.render.os_packages import detect_preinstalled, os_packages, preinstalled_action, preinstalled_plan
from gpucluster.render.platform import platform_devices, platform_rdma_addressed, provider_cidrs, provider_ports
from gpucluster.render.proxy import proxy_settings
from gpucluster.render.rails import rail_settings, rail_sysctl_lines
from gpucluster.render.services import required_services

if TYPE_CHECKING:
    from gpucluster.outputs import Capabilities, OutputAccess, OutputEgress, OutputRail
    from gpucluster.spec.models import Bom, Fabric, HardwareProfile, Kubernetes, Platform


def _plain(value: Any) -> Any:
    """Ansible's value as plain data: its tagged strings and numbers and lazy containers are
    subclasses the spec's strict models refuse (a ``str`` subclass is not a ``str`` to them)."""
    if value is None or type(value) in (str, int, float, bool):
        return value
    if isinstance(value, bool):
        return bool(value)
    if isinstance(value, str):
        return str.__str__(value)
    if isinstance(value, int):
        return int(value)
    if isinstance(value, float):
        return float(value)
    if isinstance(value, Mapping):
        return {_plain(k): _plain(v) for k, v in value.items()}
    if isinstance(value, Sequence):
        return [_plain(v) for v in value]
    return value


def _validate(model: Any, data: Any, what: str) -> Any:
    """``data`` as ``model``, or one AnsibleFilterError with a line per problem, each naming the field
    (``fabric.mtu: ...``), not pydantic's dump of the input."""
    from pydantic import ValidationError
    try:
        return model.model_validate(_plain(data))
    except ValidationError as exc:
        from ansible.errors import AnsibleFilterError

        from gpucluster.spec.loader import validation_problems
        raise AnsibleFilterError("; ".join(validation_problems(exc, model, what))) from None


def _fabric(data: Any) -> Fabric:
    from gpucluster.spec.models import Fabric
    return _validate(Fabric, data, "fabric")


def _platform(data: Any) -> Platform | None:
    """A node's platform, as ``gpucluster_platforms`` holds it (ranges expanded); None for a role's
    ``{}`` (no platform named)."""
    from gpucluster.spec.models import Platform
    return _validate(Platform, data, "platform") if data else None


def _bom(data: Any) -> Bom:
    from gpucluster.spec.models import Bom
    return _validate(Bom, data, "bom")


def _profile(data: Any) -> HardwareProfile | None:
    from gpucluster.spec.models import HardwareProfile
    return _validate(HardwareProfile, data, "profile") if data else None


def _kubernetes(data: Any) -> Kubernetes | None:
    from gpucluster.spec.models import Kubernetes
    return _validate(Kubernetes, data, "kubernetes") if data else None


def _capabilities(data: Any) -> Capabilities | None:
    from gpucluster.outputs import Capabilities
    return _validate(Capabilities, data, "capabilities") if data else None


def _access(data: Any) -> OutputAccess | None:
    from gpucluster.outputs import OutputAccess
    return _validate(OutputAccess, data, "access") if data else None


def _egress(data: Any) -> OutputEgress | None:
    from gpucluster.outputs import OutputEgress
    return _validate(OutputEgress, data, "egress") if data else None


def _rails(data: Any) -> list[OutputRail]:
    from gpucluster.outputs import OutputRail
    return [_validate(OutputRail, r, f"rails[{i}]") for i, r in enumerate(_plain(data) or [])]


def _nccl_settings(fabric: Any, platform: Any, fabric_interface: str | None) -> dict[str, str]:
    plat = _platform(platform)
    if plat is None:
        raise ValueError("nccl_settings: the node's platform (gpucluster_platforms[gpucluster_platform]) is empty")
    return nccl_settings(_fabric(fabric), plat, fabric_interface)


def _required_services(groups: Sequence[str], profile: Any, capabilities: Any = None) -> list[str]:
    return required_services([str(g) for g in groups], _profile(profile), _capabilities(capabilities))


def _os_packages(os_id: str, role: str, bom: Any, kernel: str = "", arch: str = "x86_64",
                 ceph_source: str = "upstream", ceph_mirror_url: str = "",
                 names: Sequence[str] | None = None) -> dict[str, Any]:
    return os_packages(os_id, role, _bom(bom), kernel, arch, ceph_source, ceph_mirror_url, names)


def _platform_devices(platform: Any, kinds: Sequence[str] = ("infiniband", "roce"), role: str = "compute") -> list[str]:
    return platform_devices(_platform(platform), kinds, role)


def _platform_rdma_addressed(platform: Any) -> bool:
    return platform_rdma_addressed(_platform(platform))


def _platform_provider_cidrs(platform: Any) -> list[str]:
    return provider_cidrs(_platform(platform))


def _platform_provider_ports(platform: Any) -> list[str]:
    return [netdev for netdev, _ in provider_ports(_platform(platform))]


def _rail_settings(rails: Any, mtu: int) -> list[dict[str, Any]]:
    return rail_settings(_rails(rails), mtu)


def _rail_sysctl_lines(rails: Any, mtu: int) -> list[str]:
    return rail_sysctl_lines(_rails(rails), mtu)


def _ssh_sources(fabric: Any, admin_cidrs: Sequence[str] | None = None, access: Any = None) -> list[str]:
    return ssh_sources(_fabric(fabric), admin_cidrs, _access(access))


def _proxy_settings(egress: Any, fabric: Any, kubernetes: Any = None) -> dict[str, Any]:
    return proxy_settings(_egress(egress), _fabric(fabric), _kubernetes(kubernetes))


class FilterModule:
    def filters(self) -> dict[str, Any]:
        return {"nccl_settings": _nccl_settings, "required_services": _required_services,
                "os_packages": _os_packages, "preinstalled_action": preinstalled_action,
                "detect_preinstalled": detect_preinstalled, "preinstalled_plan": preinstalled_plan,
                "platform_devices": _platform_devices, "platform_rdma_addressed": _platform_rdma_addressed,
                "platform_provider_cidrs": _platform_provider_cidrs,
                "platform_provider_ports": _platform_provider_ports,
                "rail_settings": _rail_settings, "rail_sysctl_lines": _rail_sysctl_lines, "ssh_sources": _ssh_sources,
                "proxy_settings": _proxy_settings}
