"""Who may reach a node's SSH port, as the common role's nftables set ``management_v4`` admits
it and the conformance suite (GC-SYS-002) reads it back: one function for both.

The management network (the other nodes, and a controller inside it), then the way in the stack
gives the controller: reached directly, the target's ``admin_cidrs`` (the addresses the stack's
security rules already admit SSH from, where the controller sits: a CI runner, an operator's
desk); through a bastion, the bastion's source alone (``gpucluster_access.bastion.source_cidr``),
since the stack admits SSH to the nodes from nowhere else. Without them a controller the cloud's
rules let in is dropped by the node's own firewall in the middle of a run.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    # Types only: the roles' filters import this module in every Ansible worker (render/devices.py).
    from gpucluster.outputs import OutputAccess
    from gpucluster.spec.models import Fabric

__all__ = ["ssh_sources"]


def ssh_sources(fabric: Fabric, admin_cidrs: Sequence[str] | None = None,
                access: OutputAccess | None = None) -> list[str]:
    """The CIDRs admitted to SSH: the management network, and ``admin_cidrs`` (reached directly)
    or the bastion's source (``access``: the inventory's gpucluster_access), collapsed (a network
    inside another, or two adjacent halves, once), in address order: nftables refuses an interval
    set whose elements overlap ("conflicting intervals specified"), as a bastion's source inside
    the management network would."""
    bastion = access.bastion if access is not None and access.mode == "bastion" else None
    if bastion is not None:
        extra = [str(bastion.source_cidr)] if bastion.source_cidr else []
    else:
        extra = [str(c) for c in admin_cidrs or []]
    nets = [ipaddress.IPv4Network(c) for c in [str(fabric.management_cidr), *extra]]
    return [str(n) for n in ipaddress.collapse_addresses(nets)]
