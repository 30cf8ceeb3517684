"""Stack outputs of an example stack as its target would export them, for tests that need no plan.

:func:`gpucluster.outputs.build_outputs` takes what the target assigned; a bastion the stack
creates gets its addresses from the cloud, so a test names them: a documentation address
(RFC 5737 TEST-NET-2) for its public one, and one of its public subnet for its private one.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from gpucluster.outputs import build_outputs
from gpucluster.spec import Cluster

BASTION_PUBLIC = "198.51.100.20"


def bastion_address(cluster: Cluster) -> tuple[str, str | None] | None:
    """The addresses a created bastion gets in these tests; None where the stack creates none."""
    target = cluster.spec.target
    access = getattr(target, "access", None)
    if access is None or access.mode != "bastion" or access.bastion is None or not access.bastion.create:
        return None
    public = getattr(target, "public_cidr", None)
    private = str(ipaddress.IPv4Network(public).network_address + 10) if public else None
    return BASTION_PUBLIC, private


def example_outputs(cluster: Cluster, **kwargs: Any) -> dict[str, Any]:
    """``build_outputs(cluster, **kwargs)``, a created bastion's addresses filled in."""
    kwargs.setdefault("bastion_address", bastion_address(cluster))
    return build_outputs(cluster, **kwargs)
