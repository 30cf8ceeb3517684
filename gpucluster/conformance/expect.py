"""What the acceptance checks expect, read defensively from the node's profile, platform and inventory.

Every reader returns the expected value, or raises :class:`Unstated` naming what the profile,
platform or inventory does not state: the check then skips with that reason, never passes.
The profile keys (``gpu.pcie_generation``, ``gpu.pcie_width``, ``gpu.nvlink_gbps_per_link``),
``node.info.platform`` (``rails``) and ``gpucluster_conformance.dcgm_diag_level`` may be absent
from an inventory written before they existed.
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError

from gpucluster.render.platform import platform_rail_count
from gpucluster.spec.facts import DCGM_DIAG_LEVEL_DEFAULT, DCGM_DIAG_LEVELS
from gpucluster.spec.models import Rail

# The rails the checks judge are the spec's (the inventory carries them as the spec dumped them).
__all__ = ["Rail", "Unstated", "compute_rails", "dcgm_level", "efa_count", "floor", "profile_number", "rails"]


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
    """``gpucluster_conformance.dcgm_diag_level`` (host over cluster), the spec's default when unset;
    bad values raise ValueError."""
    for scope in (host_vars, all_vars):
        level = _dig(scope, "gpucluster_conformance", "dcgm_diag_level")
        if level is not None:
            if isinstance(level, bool) or not isinstance(level, int) or level not in DCGM_DIAG_LEVELS:
                raise ValueError(f"gpucluster_conformance.dcgm_diag_level: {level!r} is not one of "
                                 f"{', '.join(map(str, DCGM_DIAG_LEVELS))}")
            return level
    return DCGM_DIAG_LEVEL_DEFAULT


def rails(info: Any) -> list[Rail]:
    """The platform's rails (``node.info.platform['rails']``) as the spec's model; Unstated when there are
    none. The inventory model has read them through the same model, so a rail it refused never gets here;
    one that is not a rail (a platform given by hand) is Unstated, with what is wrong."""
    platform = getattr(info, "platform", None)
    raw = _dig(platform, "rails") if isinstance(platform, dict) else None
    if not isinstance(raw, list) or not raw:
        raise Unstated("the platform states no rails")
    out = []
    for i, r in enumerate(raw):
        try:
            out.append(Rail.model_validate(r))
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"])
            raise Unstated(f"the platform's rail {i} is not a rail: {where + ': ' if where else ''}{first['msg']}") \
                from None
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

