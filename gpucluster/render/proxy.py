"""The egress proxy as each client on a node takes it: one renderer for the roles that write it
and the check that reads it back (GC-SYS-005).

``egress`` is the spec's ``target.egress`` as the inventory carries it (``gpucluster_egress``):
``mode``, ``http_proxy``, ``https_proxy``, ``no_proxy`` and ``mirrors``. Outside ``mode: proxy``
every answer is empty and the roles remove what they wrote.

What goes around the proxy (``no_proxy``): the cluster's own networks (management, fabric, the
addressed rails, Kubernetes' pod and service networks and names), localhost, the clouds' metadata
address and the spec's mirrors, which sit inside the network; then the spec's own entries. (The
lab's rails are no proxy's business: the lab has none.)

Who reads what:
- processes the roles run (apt, pip, get_url/uri, curl): the play's ``environment`` (``env``);
- apt outside them (unattended-upgrades, an operator's ``sudo apt``, which drops the caller's
  environment): ``/etc/apt/apt.conf.d/90gpucluster-proxy`` (``apt``);
- pip under sudo: the site-wide ``/etc/xdg/pip/pip.conf`` (``pip``);
- login shells: ``/etc/profile.d/gpucluster-proxy.sh`` (``env``);
- containerd's image pulls: a systemd drop-in's ``Environment=`` (``systemd_environment``).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Types only: the roles' filters import this module in every Ansible worker (render/devices.py).
    from gpucluster.outputs import OutputEgress
    from gpucluster.spec.models import Fabric, Kubernetes

__all__ = ["METADATA_ADDRESSES", "no_proxy", "proxy_env", "proxy_settings"]

# The instance metadata service's address on AWS, Azure and OCI (AWS "Instance metadata and user
# data": http://169.254.169.254; Azure Instance Metadata Service: 169.254.169.254; OCI "Getting
# Instance Metadata": http://169.254.169.254/opc/v2/), and Azure's platform (WireServer) address
# 168.63.129.16 ("What is IP address 168.63.129.16?", Microsoft Learn), which the VM agent reaches.
METADATA_ADDRESSES = ("169.254.169.254", "168.63.129.16")
# What kubeadm's clusters name services by (a pod's resolver search list).
KUBERNETES_NAMES = (".svc", ".cluster.local")
_HOST = re.compile(r"^https?://([A-Za-z0-9.-]+)")


def _active(egress: OutputEgress | None) -> bool:
    return egress is not None and egress.mode == "proxy"


def no_proxy(egress: OutputEgress | None, fabric: Fabric, kubernetes: Kubernetes | None = None) -> list[str]:
    """What goes around the proxy, each once, in order: localhost, the metadata addresses, the
    management and fabric networks, Kubernetes' networks and names, the mirrors' hosts, then the
    spec's entries."""
    if not _active(egress):
        return []
    assert egress is not None
    out: list[str] = ["localhost", "127.0.0.1", *METADATA_ADDRESSES,
                      str(fabric.management_cidr), str(fabric.fabric_cidr)]
    if kubernetes is not None and kubernetes.enabled:
        out += [str(kubernetes.pod_cidr), str(kubernetes.service_cidr), *KUBERNETES_NAMES]
    for url in egress.mirrors.values():
        found = _HOST.match(str(url))
        if found:
            out.append(found.group(1))
    out += [str(entry) for entry in egress.no_proxy]
    return list(dict.fromkeys(out))


def proxy_env(egress: OutputEgress | None, fabric: Fabric, kubernetes: Kubernetes | None = None) -> dict[str, str]:
    """The environment a process takes the proxy from, in both spellings (curl and apt read the
    lower-case names, Go programs such as containerd either); ``{}`` outside ``mode: proxy``."""
    if not _active(egress):
        return {}
    assert egress is not None
    values = {"http_proxy": str(egress.http_proxy), "https_proxy": str(egress.https_proxy),
              "no_proxy": ",".join(no_proxy(egress, fabric, kubernetes))}
    return {**values, **{k.upper(): v for k, v in values.items()}}


def _direct_hosts(entries: Sequence[str]) -> list[str]:
    """The no_proxy entries apt can go around its proxy for: plain host names (apt matches a
    repository's host exactly; it has no suffixes or networks)."""
    out = []
    for entry in entries:
        if entry.startswith(".") or "/" in entry or entry == "localhost":
            continue
        try:
            ipaddress.ip_address(entry)
        except ValueError:
            out.append(entry)
    return out


def proxy_settings(egress: OutputEgress | None, fabric: Fabric,
                   kubernetes: Kubernetes | None = None) -> dict[str, Any]:
    """Every client's form of the proxy: ``enabled``, ``env``, ``apt`` (option -> value, in
    order), ``pip`` (pip.conf's ``[global]`` keys) and ``systemd_environment`` (``KEY=value``)."""
    env = proxy_env(egress, fabric, kubernetes)
    if not env:
        return {"enabled": False, "env": {}, "apt": {}, "pip": {}, "systemd_environment": []}
    apt = {"Acquire::http::Proxy": env["http_proxy"], "Acquire::https::Proxy": env["https_proxy"]}
    for host in _direct_hosts(no_proxy(egress, fabric, kubernetes)):
        apt[f"Acquire::http::Proxy::{host}"] = "DIRECT"
        apt[f"Acquire::https::Proxy::{host}"] = "DIRECT"
    return {
        "enabled": True,
        "env": env,
        "apt": apt,
        # pip sends every request through its one `proxy` (pip's --proxy); https is what it fetches.
        "pip": {"proxy": env["https_proxy"]},
        "systemd_environment": [f"{k}={env[k]}" for k in ("HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY")],
    }
