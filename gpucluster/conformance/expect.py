"""What the acceptance checks expect, read defensively from the node's profile, platform and inventory.

Every reader returns the expected value, or raises :class:`Unstated` naming what the profile,
platform or inventory does not state: the check then skips with that reason, never passes.
The profile keys (``gpu.pcie_generation``, ``gpu.pcie_width``, ``gpu.nvlink_gbps_per_link``),
``node.info.platform`` (``rails``) and ``gpucluster_conformance.dcgm_diag_level`` may be absent
from an inventory written before they existed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gpucluster.render.platform import platform_rail_count

DCGM_LEVELS = (1, 2, 3, 4)
DCGM_DEFAULT_LEVEL = 2


class Unstated(LookupError):
    """The profile, platform or inventory states no value for what a check compares with."""


def _dig(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def _number(value: Any, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or value <= 0:
        raise Unstated(f"the profile states no {what}")
    return float(value)


def profile_number(profile: dict[str, Any], *path: str) -> float:
    return _number(_dig(profile, *path), ".".join(path))


def floor(profile: dict[str, Any], key: str) -> float:
    return _number(_dig(profile, "floors", key), f"floor {key}")


def dcgm_level(host_vars: dict[str, Any], all_vars: dict[str, Any]) -> int:
    """``gpucluster_conformance.dcgm_diag_level`` (host over cluster), 2 when unset; bad values raise ValueError."""
    for scope in (host_vars, all_vars):
        level = _dig(scope, "gpucluster_conformance", "dcgm_diag_level")
        if level is not None:
            if isinstance(level, bool) or not isinstance(level, int) or level not in DCGM_LEVELS:
                raise ValueError(f"gpucluster_conformance.dcgm_diag_level: {level!r} is not one of 1, 2, 3, 4")
            return level
    return DCGM_DEFAULT_LEVEL


@dataclass(frozen=True)
class Rail:
    name: str
    kind: str
    role: str
    rate_gbps: float | None
    devices: tuple[str, ...]
    pcie_generation: int | None
    pcie_width: int | None


def rails(info: Any) -> list[Rail]:
    """The platform's rails (``node.info.platform['rails']``); Unstated when there are none."""
    platform = getattr(info, "platform", None)
    raw = _dig(platform, "rails") if isinstance(platform, dict) else None
    if not isinstance(raw, list) or not raw:
        raise Unstated("the platform states no rails")
    out = []
    for r in raw:
        if not isinstance(r, dict):
            continue
        devices = r.get("devices")
        out.append(Rail(
            name=str(r.get("name", "")), kind=str(r.get("kind", "")), role=str(r.get("role", "")),
            rate_gbps=_opt_number(r.get("rate_gbps")),
            devices=tuple(str(d) for d in devices) if isinstance(devices, list) else (),
            pcie_generation=_opt_int(r.get("pcie_generation")), pcie_width=_opt_int(r.get("pcie_width")),
        ))
    if not out:
        raise Unstated("the platform states no rails")
    return out


def compute_rails(info: Any) -> list[Rail]:
    """The rails the GPUs compute over. Storage and front-end ports are wired and run at whatever
    the site or the cloud chose (an in-band management port, an SR-IOV VF that reports its physical
    link's rate), so the acceptance checks judge only these; Unstated when there are none."""
    out = [r for r in rails(info) if r.role == "compute"]
    if not out:
        raise Unstated("the platform states no compute rails")
    return out


def efa_count(info: Any) -> int:
    """EFA interfaces of the platform: the ``count`` of its EFA rails (0 without)."""
    platform = getattr(info, "platform", None)
    return platform_rail_count(platform if isinstance(platform, dict) else None, ("efa",), role=None)


def _opt_number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) and value > 0 else None


def _opt_int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None
