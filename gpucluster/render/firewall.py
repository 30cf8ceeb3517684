"""Who may reach a node's SSH port, as the common role's nftables set ``management_v4`` admits
it and the conformance suite (GC-SYS-002) reads it back: one function for both.

The management network (the other nodes, and a controller inside it), and the target's
``admin_cidrs``: the addresses the stack's security rules already admit SSH from, where the
controller (a CI runner, an operator's desk) sits. Without them a controller in ``admin_cidrs``
passes the cloud's rules and is then dropped by the node's own firewall in the middle of a run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["ssh_sources"]


def ssh_sources(fabric: Mapping[str, Any], admin_cidrs: Sequence[str] | None = None) -> list[str]:
    """The CIDRs admitted to SSH, in order, each once: the management network, then ``admin_cidrs``."""
    out: list[str] = []
    for cidr in [str(fabric["management_cidr"]), *(str(c) for c in admin_cidrs or [])]:
        if cidr not in out:
            out.append(cidr)
    return out
