"""A node's addressed compute rails: what the fabric_rails role writes and GC-RAIL-001 expects.

Input: the node's ``gpucluster_rails`` (interface, address, cidr per rail, from the stack outputs)
and the spec's fabric MTU. Per rail the role writes one systemd-networkd file and the check reads
the same values back from the node:

- the interface up, at the fabric MTU, with the rail's address;
- source routing: the rail's own table holds its subnet's route with the rail's address as
  source, and a rule sends traffic from that address to the table. A node with several rails
  then answers and sends on the rail a peer used, whichever interface the main table would pick;
- the ARP and reverse-path settings a host with several RDMA NICs needs. librdmacm's README
  ("Using multiple interfaces": Linux may otherwise answer ARP for an address on another
  interface; https://github.com/ofiwg/librdmacm/blob/master/README) and libfabric's verbs
  provider notes (https://github.com/ofiwg/libfabric/wiki/Verbs-Provider-on-Multi%E2%80%90NIC-Systems:
  accept_local=1, arp_ignore=2, rp_filter=2 per RDMA netdev) give them; arp_announce=2 makes the
  kernel source its ARP requests from the address of the interface they leave by
  (Documentation/networking/ip-sysctl.rst, arp_announce).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from gpucluster.spec.facts import MTU_MAX, MTU_MIN

# Rail i's routing table and its rule's priority: above the kernel's local table (priority 0) and
# below main (32766), clear of the tables numbered by name in /etc/iproute2/rt_tables (253-255).
RAIL_TABLE_BASE = 1000
# Per-interface IPv4 settings of a rail (net.ipv4.conf.<interface>.<key>), sources above.
RAIL_SYSCTLS: dict[str, str] = {"accept_local": "1", "arp_announce": "2", "arp_ignore": "2", "rp_filter": "2"}
# The most rails a node's rail list may hold (a platform rail has at most 64 ports).
MAX_RAILS = 64



class AddressedRail(Protocol):
    """An addressed compute rail: the outputs' OutputRail (the inventory's ``gpucluster_rails``), or
    the spec's planned NodeRail on a bare-metal target."""

    @property
    def interface(self) -> str: ...
    @property
    def address(self) -> str: ...
    @property
    def cidr(self) -> str: ...


# A Linux interface name (at most 15 bytes); dots allowed: VLAN rails (enp16s0np0.100) are named so.
_IFNAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,14}$")


def rail_settings(rails: Sequence[AddressedRail] | None, mtu: int) -> list[dict[str, Any]]:
    """Per rail, in order: interface, address, prefix length, subnet, MTU, table and rule priority,
    and the per-interface sysctls. Raises ValueError on a rail that cannot be configured."""
    out: list[dict[str, Any]] = []
    items = list(rails or [])
    if len(items) > MAX_RAILS:
        raise ValueError(f"{len(items)} rails; a node has at most {MAX_RAILS}")
    if not MTU_MIN <= int(mtu) <= MTU_MAX:
        raise ValueError(f"MTU {mtu} is outside {MTU_MIN}-{MTU_MAX}")
    seen: set[str] = set()
    for i, rail in enumerate(items):
        name = str(rail.interface)
        if not _IFNAME.match(name):
            raise ValueError(f"rail {i}: not an interface name: {name!r}")
        if name in seen:
            raise ValueError(f"rail {i}: interface {name} is named twice")
        seen.add(name)
        net = ipaddress.IPv4Network(str(rail.cidr))
        address = ipaddress.IPv4Address(str(rail.address))
        if address not in net or address in (net.network_address, net.broadcast_address):
            raise ValueError(f"rail {i} ({name}): {address} is not a host address of {net}")
        out.append({
            "interface": name,
            "address": str(address),
            "prefixlen": net.prefixlen,
            "cidr": str(net),
            "mtu": int(mtu),
            "table": RAIL_TABLE_BASE + i,
            "priority": RAIL_TABLE_BASE + i,
            "sysctls": dict(RAIL_SYSCTLS),
            # An address on the rail's subnet that is not the node's own: where GC-RAIL-001 asks
            # the kernel which way traffic from the rail's address goes (`ip route get`).
            "probe": str(next(h for h in net.hosts() if h != address)),
        })
    return out


def rail_sysctl_lines(rails: Sequence[AddressedRail] | None, mtu: int) -> list[str]:
    """The sysctl.d lines for every rail, ``net/ipv4/conf/<interface>/<key> = <value>``: the slash
    form, in which a dot in an interface name (a VLAN's) stays part of the name (sysctl.d(5): when
    the first separator is a slash, remaining dots are left intact)."""
    return [f"net/ipv4/conf/{r['interface']}/{key} = {value}"
            for r in rail_settings(rails, mtu) for key, value in sorted(r["sysctls"].items())]


def rail_problems(want: Mapping[str, Any], link: Mapping[str, Any] | None, rules: Sequence[Mapping[str, Any]],
                  routes: Sequence[Mapping[str, Any]], sysctls: Mapping[str, str],
                  route_get: Sequence[Mapping[str, Any]] | None = None) -> list[str]:
    """What differs on one rail from :func:`rail_settings`' entry ``want``: ``link`` is the
    interface's ``ip -j addr show`` entry (None: absent), ``rules`` ``ip -j -4 rule show``,
    ``routes`` ``ip -j -4 route show table <table>``, ``sysctls`` key to value as read, and
    ``route_get`` ``ip -j -4 route get <probe> from <address>``: the way the kernel really sends
    from the rail's address (a rule of another tool at a lower priority would win over the rail's)."""
    name = want["interface"]
    if not link:
        return [f"{name}: no such interface"]
    problems = []
    state = link.get("operstate")
    if state not in ("UP", "UNKNOWN") or "UP" not in (link.get("flags") or []):
        problems.append(f"{name}: link {state or 'state unknown'}")
    if int(link.get("mtu") or 0) != want["mtu"]:
        problems.append(f"{name}: MTU {link.get('mtu')}, the spec says {want['mtu']}")
    addrs = {(a.get("local"), a.get("prefixlen")) for a in link.get("addr_info") or [] if a.get("family") == "inet"}
    if (want["address"], want["prefixlen"]) not in addrs:
        have = ", ".join(f"{a}/{p}" for a, p in sorted(addrs, key=str)) or "none"
        problems.append(f"{name}: no address {want['address']}/{want['prefixlen']} (has {have})")
    rule_ok = any(str(r.get("table")) == str(want["table"]) and r.get("src") == want["address"]
                  and int(r.get("srclen", 32)) == 32 and int(r.get("priority", -1)) == want["priority"]
                  for r in rules)
    if not rule_ok:
        problems.append(f"{name}: no rule 'from {want['address']} lookup {want['table']}' "
                        f"at priority {want['priority']}")
    route_ok = any(r.get("dst") == want["cidr"] and r.get("dev") == name and r.get("prefsrc") == want["address"]
                   for r in routes)
    if not route_ok:
        problems.append(f"{name}: table {want['table']} has no route to {want['cidr']} on {name} "
                        f"from {want['address']}")
    if route_get is not None:
        dev = route_get[0].get("dev") if route_get else None
        if dev != name:
            problems.append(f"{name}: traffic from {want['address']} to {want['probe']} leaves by "
                            f"{dev or 'no route'}, not {name}")
    for key, value in sorted(want["sysctls"].items()):
        if sysctls.get(key) != value:
            problems.append(f"{name}: net.ipv4.conf.{name}.{key} = {sysctls.get(key, 'unreadable')}, expected {value}")
    return problems
