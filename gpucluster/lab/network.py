"""Bridges on the host, one network namespace per node, veth pairs between them.

Management: ``eth0`` in the node (a twin's: its platform's name), its host end on the management
bridge (the host and the apt proxy hold the subnet's first address). Fabric: ``eth1``, on the
fabric bridge, with the spec's MTU end to end (a twin has none: its fabric address is the roles'
to put on a rail's port). Compute rails (GPU nodes): one veth per rail onto the rail's own
bridge, which has the spec's MTU and no host address; the node end is left down, without an
address and at the kernel's default MTU, for the fabric_rails role to configure as on a real node.
Nothing is routed or NATed: nodes reach only each other and the proxy, which is the only thing
that talks to the Debian mirror. A twin reached through a bastion adds an outside bridge (the
host's address there is the controller's) and the bastion, whose leg on the management bridge is
in a subnet of its own: it and the nodes route to each other's subnet on that link (``onlink``),
where the platform's router would carry it.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import urllib.parse
from pathlib import Path
from typing import Any

from gpucluster.lab.host import run
from gpucluster.lab.layout import LabLayout, NodeLayout

NETNS_DIR = Path("/run/netns")


def link_exists(name: str, netns: str | None = None) -> bool:
    prefix = ["ip", "-n", netns] if netns else ["ip"]
    return run([*prefix, "link", "show", "dev", name], "ip link", check=False).returncode == 0


def _addresses(name: str, netns: str | None = None) -> list[str]:
    prefix = ["ip", "-n", netns] if netns else ["ip"]
    proc = run([*prefix, "-j", "addr", "show", "dev", name], "ip addr", check=False)
    if proc.returncode != 0:
        return []
    out: list[str] = []
    for link in json.loads(proc.stdout or "[]"):
        for info in link.get("addr_info", []):
            if info.get("family") == "inet":
                out.append(f"{info['local']}/{info['prefixlen']}")
    return out


def _link(name: str, netns: str | None = None) -> dict[str, Any]:
    prefix = ["ip", "-n", netns] if netns else ["ip"]
    proc = run([*prefix, "-j", "link", "show", "dev", name], "ip link", check=False)
    if proc.returncode != 0:
        return {}
    links: list[dict[str, Any]] = json.loads(proc.stdout or "[]")
    return links[0] if links else {}


def host_routes() -> list[dict[str, Any]]:
    routes: list[dict[str, Any]] = json.loads(run(["ip", "-j", "-4", "route", "show", "table", "all"],
                                                  "ip route").stdout or "[]")
    return routes


def resolve(url: str) -> list[str]:
    """The addresses this host resolves the URL's host to; none when it cannot."""
    host = urllib.parse.urlsplit(url).hostname
    if not host:
        return []
    try:
        infos = socket.getaddrinfo(host, None, proto=socket.IPPROTO_TCP)
    except (OSError, UnicodeError):
        return []
    return sorted({str(info[4][0]) for info in infos})


def _with_prefix(ip: str, cidr: str) -> str:
    return f"{ip}/{ipaddress.IPv4Network(cidr).prefixlen}"


def ensure_bridge(name: str, address: str | None, mtu: int) -> bool:
    """Create the bridge, with the host's address on it where one is given; return whether anything changed."""
    link = _link(name)
    if (link and link.get("mtu") == mtu and (address is None or address in _addresses(name))
            and "UP" in link.get("flags", [])):
        return False
    if not link:
        run(["ip", "link", "add", name, "type", "bridge", "stp_state", "0"], f"bridge {name}")
    run(["ip", "link", "set", name, "mtu", str(mtu)], f"bridge {name}")
    if address is not None and address not in _addresses(name):
        run(["ip", "addr", "add", address, "dev", name], f"bridge {name}")
    run(["ip", "link", "set", name, "up"], f"bridge {name}")
    return True


def ensure_bridges(plan: LabLayout) -> bool:
    # The management bridge keeps the default MTU: the fabric is where jumbo frames are tested.
    a = ensure_bridge(plan.management_bridge, _with_prefix(plan.management_host_ip, plan.management_cidr), 1500)
    b = ensure_bridge(plan.fabric_bridge, _with_prefix(plan.fabric_host_ip, plan.fabric_cidr), plan.mtu)
    # A bridge's MTU is its ports' smallest; set before any port joins, it holds the spec's.
    rails = [ensure_bridge(bridge, None, plan.mtu) for bridge in plan.rail_bridges]
    outside = False
    if plan.outside_bridge is not None and plan.outside_cidr is not None and plan.outside_host_ip is not None:
        # The controller's side: the host's address there is where it reaches the bastion from.
        outside = ensure_bridge(plan.outside_bridge, _with_prefix(plan.outside_host_ip, plan.outside_cidr), 1500)
    elif plan.outside_cidr is not None and plan.outside_host_ip is not None:
        outside = ensure_controller_source(plan, plan.outside_host_ip, plan.outside_cidr)
    return a or b or any(rails) or outside


def ensure_controller_source(plan: LabLayout, controller: str, cidr: str) -> bool:
    """A twin reached directly from outside the cluster's network: the controller's address on the
    management bridge, and the host's connections to the management network made from it (the
    route's preferred source), as from the admin_cidrs the nodes' firewall admits; the nodes route
    that network back on their management link. Return whether anything changed."""
    bridge, changed = plan.management_bridge, False
    if _with_prefix(controller, cidr) not in _addresses(bridge):
        run(["ip", "addr", "add", _with_prefix(controller, cidr), "dev", bridge], f"bridge {bridge}")
        changed = True
    proc = run(["ip", "-j", "-4", "route", "show", plan.management_cidr, "dev", bridge], "ip route", check=False)
    routes = json.loads(proc.stdout or "[]") if proc.returncode == 0 else []
    if not any(r.get("prefsrc") == controller for r in routes):
        run(["ip", "route", "replace", plan.management_cidr, "dev", bridge, "proto", "kernel", "scope", "link",
             "src", controller], f"bridge {bridge}: the controller's source address")
        changed = True
    return changed


def delete_link(name: str) -> bool:
    if not link_exists(name):
        return False
    run(["ip", "link", "delete", name], f"delete {name}")
    return True


def netns_exists(name: str) -> bool:
    return (NETNS_DIR / name).exists()


def delete_netns(name: str) -> bool:
    if not netns_exists(name):
        return False
    run(["ip", "netns", "delete", name], f"delete network namespace {name}")
    return True


def node_links_ok(plan: LabLayout, node: NodeLayout) -> bool:
    if not netns_exists(node.netns):
        return False
    want: dict[str, tuple[str, int, str, str | None]] = {
        node.management_interface: (_with_prefix(node.management_ip, node.management_subnet or plan.management_cidr),
                                    1500, node.veth_management, plan.management_bridge)}
    if node.fabric_interface is not None:
        want[node.fabric_interface] = (_with_prefix(node.fabric_ip, plan.fabric_cidr), plan.mtu, node.veth_fabric,
                                       plan.fabric_bridge)
    if node.outside is not None:
        want[node.outside.interface] = (node.outside.address, 1500, node.outside.veth, plan.outside_bridge)
    for ifname, (address, mtu, host_end, bridge) in want.items():
        inner = _link(ifname, node.netns)
        outer = _link(host_end)
        if not inner or not outer or inner.get("mtu") != mtu or outer.get("mtu") != mtu:
            return False
        if address not in _addresses(ifname, node.netns) or "UP" not in inner.get("flags", []):
            return False
        if outer.get("master") != bridge:
            return False
    if node.management_mac and _link(node.management_interface, node.netns).get("address") != node.management_mac:
        return False
    if node.onlink and not set(node.onlink) <= _onlink_routes(node.management_interface, node.netns):
        return False
    for rail in node.rails:
        # The node end's address, MTU and state are the fabric_rails role's: only the link is the lab's.
        outer = _link(rail.veth)
        if not _link(rail.interface, node.netns) or outer.get("mtu") != plan.mtu or outer.get("master") != rail.bridge:
            return False
    return True


def _onlink_routes(ifname: str, netns: str) -> set[str]:
    """The subnets routed on the link without a gateway in the namespace's main table."""
    proc = run(["ip", "-n", netns, "-j", "-4", "route", "show", "dev", ifname, "scope", "link"], "ip route",
               check=False)
    if proc.returncode != 0:
        return set()
    # ip prints a host route's destination without its /32.
    return {str(ipaddress.IPv4Network(str(r["dst"]), strict=False)) for r in json.loads(proc.stdout or "[]")
            if "gateway" not in r and r.get("dst") not in (None, "default")}


def ensure_node_links(plan: LabLayout, node: NodeLayout) -> bool:
    """The node's namespace with its management (and the lab's fabric) link addressed and bridged,
    and its rails' links made; return whether it changed."""
    if node_links_ok(plan, node):
        return False
    if not netns_exists(node.netns):
        run(["ip", "netns", "add", node.netns], f"{node.name}: network namespace")
    ns = ["ip", "-n", node.netns]
    run([*ns, "link", "set", "lo", "up"], f"{node.name}: loopback")
    pairs = [(node.veth_management, node.management_interface, plan.management_bridge, 1500,
              _with_prefix(node.management_ip, node.management_subnet or plan.management_cidr), node.management_mac)]
    if node.fabric_interface is not None:
        pairs.append((node.veth_fabric, node.fabric_interface, plan.fabric_bridge, plan.mtu,
                      _with_prefix(node.fabric_ip, plan.fabric_cidr), None))
    if node.outside is not None and plan.outside_bridge is not None:
        pairs.append((node.outside.veth, node.outside.interface, plan.outside_bridge, 1500, node.outside.address,
                      None))
    for host_end, inner, bridge, mtu, address, mac in pairs:
        # Start each pair afresh: a half-made one (after Ctrl-C) is simpler to replace than to mend.
        delete_link(host_end)
        run([*ns, "link", "delete", inner], f"{node.name}: {inner}", check=False)
        peer_mac = ["address", mac] if mac else []
        run(["ip", "link", "add", host_end, "mtu", str(mtu), "type", "veth", "peer", "name", inner,
             "mtu", str(mtu), *peer_mac, "netns", node.netns], f"{node.name}: veth {inner}")
        run(["ip", "link", "set", host_end, "master", bridge, "up"], f"{node.name}: veth {inner}")
        run([*ns, "addr", "add", address, "dev", inner], f"{node.name}: address on {inner}")
        run([*ns, "link", "set", inner, "up"], f"{node.name}: {inner} up")
    for cidr in node.onlink:
        run([*ns, "route", "replace", cidr, "dev", node.management_interface, "scope", "link"],
            f"{node.name}: route to {cidr} on {node.management_interface}")
    for rail in node.rails:
        delete_link(rail.veth)
        run([*ns, "link", "delete", rail.interface], f"{node.name}: {rail.interface}", check=False)
        # The node end keeps the kernel's default MTU and no address until the role configures it.
        run(["ip", "link", "add", rail.veth, "mtu", str(plan.mtu), "type", "veth", "peer", "name", rail.interface,
             "netns", node.netns], f"{node.name}: veth {rail.interface}")
        run(["ip", "link", "set", rail.veth, "master", rail.bridge, "up"], f"{node.name}: veth {rail.interface}")
    return True


def delete_node_links(node: NodeLayout) -> bool:
    changed = False
    outside = (node.outside.veth,) if node.outside is not None else ()
    for host_end in (node.veth_management, node.veth_fabric, *(r.veth for r in node.rails), *outside):
        changed = delete_link(host_end) or changed
    return delete_netns(node.netns) or changed
