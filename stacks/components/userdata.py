"""cloud-init and autoinstall data rendered with Jinja2 from ``templates/``.

Structured parts (netplan) are built here as dicts and dumped as YAML by the template, so
the templates hold layout only and never hand-write YAML nesting.
"""

from __future__ import annotations

import functools
import ipaddress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jinja2
import yaml

# templates/ sits beside the program's folder in a checkout (stacks/, templates/) and in the
# installed package alike (gpucluster/stacks/, gpucluster/templates/: see pyproject.toml).
TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


@dataclass(frozen=True)
class Interface:
    """A statically addressed interface, matched by MAC or by kernel name."""

    name: str
    address: str | None  # "10.20.0.10/22" or None for an interface without IP (EFA)
    mtu: int | None = None
    mac: str | None = None
    match_name: str | None = None
    infiniband: bool = False
    gateway: str | None = None
    dns: tuple[str, ...] = ()


@dataclass(frozen=True)
class NodeData:
    hostname: str
    ssh_user: str
    ssh_keys: tuple[str, ...] = ()
    management: Interface | None = None  # bare metal only; clouds use DHCP
    fabric: tuple[Interface, ...] = field(default_factory=tuple)
    root_disk: str | None = None
    # The OS archive's mirror (the spec's egress.mirrors.os_archive): apt's primary and security
    # sources from the first boot, as cloud-init's apt module writes them.
    apt_mirror: str | None = None


def _to_yaml(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=False, default_flow_style=False).rstrip("\n")


@functools.cache
def _env() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATES)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
        autoescape=False,  # YAML, not HTML: values are quoted with tojson where needed
    )
    env.filters["to_yaml"] = _to_yaml
    return env


def _ethernet(iface: Interface) -> dict[str, Any]:
    entry: dict[str, Any] = {}
    if iface.mac:
        entry["match"] = {"macaddress": iface.mac}
        entry["set-name"] = iface.name
    elif iface.match_name:
        entry["match"] = {"name": iface.match_name}
    if iface.infiniband:
        entry["infiniband-mode"] = "datagram"
    entry["dhcp4"] = iface.address is None and not iface.infiniband
    if iface.address:
        entry["addresses"] = [iface.address]
    if iface.mtu:
        entry["mtu"] = iface.mtu
    if iface.gateway:
        entry["routes"] = [{"to": "default", "via": iface.gateway}]
    if iface.dns:
        entry["nameservers"] = {"addresses": list(iface.dns)}
    return entry


def netplan(interfaces: list[Interface]) -> dict[str, Any] | None:
    if not interfaces:
        return None
    return {"network": {"version": 2, "ethernets": {i.name: _ethernet(i) for i in interfaces}}}


def _context(node: NodeData) -> dict[str, Any]:
    fabric = [i for i in node.fabric if i.address]
    full = ([node.management] if node.management else []) + fabric
    return {
        "hostname": node.hostname,
        "ssh_user": node.ssh_user,
        "ssh_keys": list(node.ssh_keys),
        "fabric_netplan": netplan(fabric),
        "network": (netplan(full) or {"network": {"version": 2}})["network"],
        "root_disk": node.root_disk,
        "apt_mirror": node.apt_mirror,
    }


def render_cloud_init(node: NodeData) -> str:
    return _env().get_template("cloud-init/user-data.yaml.j2").render(_context(node))


def render_network_config(node: NodeData) -> str:
    return _env().get_template("cloud-init/network-config.yaml.j2").render(_context(node))


def render_autoinstall(node: NodeData) -> str:
    return _env().get_template("autoinstall/user-data.yaml.j2").render(_context(node))


def with_prefix(address: str, cidr: str) -> str:
    return f"{address}/{ipaddress.IPv4Network(cidr).prefixlen}"
