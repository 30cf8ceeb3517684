"""The bodies of GC-NET-001 and GC-NET-002 where the provider addresses the compute ports (OCI's
RDMA network: the platform's rail with ``addressing: provider``), apart from the node.

There is no address of the spec's to look for: the provider's image gives each port one from its
own range (gpucluster.render.platform.provider_ports names the ports and the ranges), and the node
adopts it. Each port must exist, be up and carry an IPv4 address in one of those ranges, at the
fabric MTU. Both read ``ip -j addr show`` (iproute2's JSON: one object per link with ``ifname``,
``operstate``, ``mtu`` and ``addr_info``, each address with ``family`` and ``local``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

__all__ = ["provider_address", "provider_mtu_problems", "provider_port_problems"]


def _each_port(links: Sequence[Mapping[str, Any]], ports: Sequence[tuple[str, Sequence[str]]],
               problems: list[str]) -> Iterator[tuple[str, Sequence[str], Mapping[str, Any]]]:
    """(netdev, ranges, its link) of every port the node shows; a missing one goes to ``problems``."""
    by_name = {str(link.get("ifname")): link for link in links}
    for name, cidrs in ports:
        link = by_name.get(name)
        if link is None:
            problems.append(f"{name}: no such interface")
        else:
            yield name, cidrs, link


def provider_address(link: Mapping[str, Any], cidrs: Sequence[str]) -> str | None:
    """The link's first IPv4 address inside one of ``cidrs`` (the provider's ranges), or None."""
    nets = [ipaddress.IPv4Network(c) for c in cidrs]
    for addr in link.get("addr_info") or []:
        if addr.get("family") != "inet" or not addr.get("local"):
            continue
        ip = ipaddress.IPv4Address(str(addr["local"]))
        if any(ip in net for net in nets):
            return str(ip)
    return None


def provider_port_problems(links: Sequence[Mapping[str, Any]], ports: Sequence[tuple[str, Sequence[str]]]) -> list[str]:
    """One problem per port of ``ports`` ((netdev, the provider's ranges)) that is missing, not up,
    or carries no IPv4 address in the provider's ranges."""
    problems: list[str] = []
    for name, cidrs, link in _each_port(links, ports, problems):
        if provider_address(link, cidrs) is None:
            have = [str(a.get("local")) for a in link.get("addr_info") or [] if a.get("family") == "inet"]
            problems.append(f"{name}: no address in the provider's {', '.join(cidrs)} (has {have or 'none'})")
        if link.get("operstate") not in ("UP", "UNKNOWN"):
            problems.append(f"{name}: {link.get('operstate')}")
    return problems


def provider_mtu_problems(links: Sequence[Mapping[str, Any]], ports: Sequence[tuple[str, Sequence[str]]],
                          mtu: int) -> list[str]:
    """One problem per port of ``ports`` that is missing or not at ``mtu``."""
    problems: list[str] = []
    for name, _, link in _each_port(links, ports, problems):
        if int(link.get("mtu") or 0) != mtu:
            problems.append(f"{name}: MTU {link.get('mtu')}")
    return problems
