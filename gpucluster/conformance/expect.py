"""What the acceptance checks expect, read defensively from the node's platform and inventory.

Every reader returns the expected value, or raises :class:`Unstated` naming what the platform or
inventory does not state: the check then skips with that reason, never passes. The profile and the
platform are the spec's models (``node.info.profile``, ``node.info.platform``: HardwareProfile,
Platform): a profile figure left unset is None there, and the check skips with :func:`stated`.
"""

from __future__ import annotations

from typing import Any

from gpucluster.spec.models import Platform, Rail

# The rails the checks judge are the spec's (the inventory carries them as the spec dumped them).
__all__ = ["Rail", "Unstated", "compute_rails", "efa_count", "rails", "stated"]


class Unstated(LookupError):
    """The profile, platform or inventory states no value for what a check compares with."""


def stated(value: float | None, what: str) -> float:
    """A figure of the profile (``what`` names it: ``gpu.pcie_width``, ``floor host_device_copy_gbps``),
    Unstated where the profile leaves it unset."""
    if value is None:
        raise Unstated(f"the profile states no {what}")
    return float(value)


def rails(info: Any) -> list[Rail]:
    """The platform's rails (``node.info.platform``, the spec's model as the inventory model read it);
    Unstated when there are none."""
    platform = getattr(info, "platform", None)
    out = list(platform.rails) if isinstance(platform, Platform) else []
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
    """EFA interfaces of the platform: the ``count`` of its EFA rails, whatever their role (0 without)."""
    platform = getattr(info, "platform", None)
    return platform.efa_interfaces if isinstance(platform, Platform) else 0

