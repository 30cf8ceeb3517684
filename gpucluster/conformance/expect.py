"""What the acceptance checks expect, read defensively from the node's platform and inventory.

Every reader returns the expected value, or raises :class:`Unstated` naming what the platform or
inventory does not state: the check then skips with that reason, never passes. The profile is the
spec's model (``node.info.profile``, gpucluster.spec.models.HardwareProfile): a figure it leaves
unset is None there, and the check skips with :func:`stated`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import ValidationError

from gpucluster.render.platform import platform_rail_count
from gpucluster.spec.facts import DCGM_DIAG_LEVELS
from gpucluster.spec.models import Conformance, Rail

# The rails the checks judge are the spec's (the inventory carries them as the spec dumped them).
__all__ = ["Rail", "Unstated", "compute_rails", "dcgm_level", "efa_count", "rails", "stated"]


class Unstated(LookupError):
    """The profile, platform or inventory states no value for what a check compares with."""


def _dig(data: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def stated(value: float | None, what: str) -> float:
    """A figure of the profile (``what`` names it: ``gpu.pcie_width``, ``floor host_device_copy_gbps``),
    Unstated where the profile leaves it unset."""
    if value is None:
        raise Unstated(f"the profile states no {what}")
    return float(value)


def dcgm_level(host_vars: Mapping[str, Any], conformance: Conformance) -> int:
    """``gpucluster_conformance.dcgm_diag_level``: a host variable of that name (which no model
    types: a host's own, added by hand) over the cluster's, which the inventory model read with
    the spec's default; a bad host value raises ValueError."""
    level = _dig(host_vars, "gpucluster_conformance", "dcgm_diag_level")
    if level is None:
        return conformance.dcgm_diag_level
    if isinstance(level, bool) or not isinstance(level, int) or level not in DCGM_DIAG_LEVELS:
        raise ValueError(f"gpucluster_conformance.dcgm_diag_level: {level!r} is not one of "
                         f"{', '.join(map(str, DCGM_DIAG_LEVELS))}")
    return level


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

