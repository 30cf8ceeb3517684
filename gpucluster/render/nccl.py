"""NCCL's settings for one node: what the nccl role writes to /etc/nccl.conf and GC-NET-006 expects.

Inputs are a node's inventory variables: the spec's fabric (``gpucluster_fabric``), the node's
platform (``gpucluster_platforms[gpucluster_platform]``: its rails, their roles and device names)
and its fabric interface (``gpucluster_fabric_interface``). The role calls :func:`nccl_settings` through the filter
``gpucluster.cluster.nccl_settings``; the conformance check calls it directly.

What each fabric gets:

- InfiniBand and RoCE: NCCL's own IB verbs transport on the platform's compute rails, named
  exactly (``NCCL_IB_HCA==mlx5_0:1,...``), plus the spec's IB timeout, GID index and, with RoCE
  QoS, traffic class.
- EFA: the aws-ofi-nccl net plugin over libfabric's ``efa`` provider. No ``NCCL_IB_*``: EFA is
  not reached through NCCL's IB transport. ``FI_EFA_USE_DEVICE_RDMA=1`` only on instance types
  whose EFA does RDMA read.
- Ethernet (the lab, RDMA-less sites): NCCL's socket transport, ``NCCL_IB_DISABLE=1``; over the
  platform's compute Ethernet rails where it has them (``NCCL_SOCKET_IFNAME==<rail 0>,<rail 1>,...``,
  and ``NCCL_CROSS_NIC=0`` with more than one rail), else over the fabric interface.

NCCL sets every ``KEY=VALUE`` line of /etc/nccl.conf in its process environment, whatever the
prefix (``setEnvFile`` in https://github.com/NVIDIA/nccl/blob/master/src/misc/param.cc), so the
libfabric variables reach the plugin from the same file.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from gpucluster.render.devices import expand_devices
from gpucluster.spec.facts import FABRIC_TYPES

if TYPE_CHECKING:
    # Types only: the roles' filters import this module in every Ansible worker (render/devices.py).
    from gpucluster.spec.models import Fabric, Platform

NCCL_CONF_PATH = "/etc/nccl.conf"

# NCCL matches the names in NCCL_IB_HCA and NCCL_SOCKET_IFNAME as prefixes unless the list begins
# with "=": "using mlx5_1 without a preceding = will select mlx5_1 as well as mlx5_10 to mlx5_19,
# if they exist" (https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-ib-hca;
# "=eth0 : Use only interface eth0" under NCCL_SOCKET_IFNAME on the same page).
EXACT = "="
# The port NCCL uses on each rail: port 1, the form of NCCL's own example ("=mlx5_0:1,mlx5_1:1 :
# Use ports 1 of cards mlx5_0 and mlx5_1", same page). A platform whose rails use another port
# would need it named in the platform.
HCA_PORT = 1

# EFA instance types whose EFA supports RDMA read ("RDMA read support: Yes" in
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa.html#efa-instance-types), limited to
# the GPU instance types. FI_EFA_USE_DEVICE_RDMA=1 makes libfabric use the device's RDMA and abort
# the application where the device has none
# (https://ofiwg.github.io/libfabric/main/man/fi_efa.7.html, FI_EFA_USE_DEVICE_RDMA), so a node
# whose instance lacks it fails loudly instead of running without GPUDirect RDMA. AWS's NCCL guide
# sets it for p4d.24xlarge ("uses the device's RDMA functionality for one-sided and two-sided
# transfer", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start-nccl.html).
EFA_RDMA_READ_INSTANCE_TYPES = frozenset({
    "p4d.24xlarge",
    "p4de.24xlarge",
    "p5.4xlarge",
    "p5.48xlarge",
    "p5e.48xlarge",
    "p5en.48xlarge",
    "p6-b200.48xlarge",
    "p6-b300.48xlarge",
    "p6e-gb200.36xlarge",
    "g6.8xlarge",
    "g6.12xlarge",
    "g6.16xlarge",
    "g6.24xlarge",
    "g6.48xlarge",
    "g6e.8xlarge",
    "g6e.12xlarge",
    "g6e.16xlarge",
    "g6e.24xlarge",
    "g6e.48xlarge",
})

_DEVICE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_]{0,31}$")
_IFNAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,14}$")


def compute_hcas(platform: Platform) -> list[str]:
    """The RDMA devices NCCL uses on a node of ``platform``: its compute rails' devices, in order.

    Only InfiniBand and RoCE rails with the compute role: a storage or frontend port (a DGX's
    storage cards, Azure's accelerated-networking VF) never carries NCCL's traffic. The inventory
    carries each rail's devices as exact names (the platform's ranges expanded when it was written).
    """
    out: list[str] = []
    for rail in platform.rails:
        if rail.role != "compute" or rail.kind not in ("infiniband", "roce"):
            continue
        devices = expand_devices(rail.devices or [])
        if len(devices) != rail.count:
            raise ValueError(f"rail {rail.name!r}: {rail.count} ports but {len(devices)} device name(s)")
        out += [str(d) for d in devices]
    return out


def ib_hca_value(devices: Sequence[str], port: int = HCA_PORT) -> str:
    """``NCCL_IB_HCA`` naming exactly ``devices`` on ``port``: ``=mlx5_0:1,mlx5_1:1``."""
    if not devices:
        raise ValueError("NCCL_IB_HCA needs at least one device")
    bad = [d for d in devices if not _DEVICE.match(d)]
    if bad:
        raise ValueError(f"not an RDMA device name: {bad[0]!r}")
    if not 1 <= port <= 255:
        raise ValueError(f"not an HCA port: {port}")
    return EXACT + ",".join(f"{d}:{port}" for d in devices)


def socket_ifname_value(name: str | Sequence[str]) -> str:
    """``NCCL_SOCKET_IFNAME`` naming exactly the interface ``name`` (or each of a list:
    "=eth0,eth1 : Use only interfaces eth0 and eth1", same page)."""
    names = [name] if isinstance(name, str) else list(name)
    if not names:
        raise ValueError("NCCL_SOCKET_IFNAME needs at least one interface")
    for n in names:
        if not _IFNAME.match(n):
            raise ValueError(f"not an interface name: {n!r}")
    return EXACT + ",".join(names)


def socket_ifname_selects(value: str, interfaces: Iterable[str]) -> list[str]:
    """The interfaces of ``interfaces`` that ``NCCL_SOCKET_IFNAME=value`` leaves NCCL's sockets, by
    name, read as NCCL reads it (``ncclFindInterfaces`` in src/misc/socket.cc, ``ncclOsFindInterfaces``
    in src/os/linux.cc, ``parseStringList`` and ``matchIfList`` in src/misc/utils.cc,
    https://github.com/NVIDIA/nccl): a leading ``^`` excludes the entries, then a leading ``=``
    makes each entry an exact name instead of a prefix; an entry's ``:<port>`` is dropped; a list
    with no entry matches every interface; a value of one character is ignored (NCCL then picks
    an interface itself). NCCL also passes over an interface that is not running or has no
    address: that is GC-NET-001's and GC-RAIL-001's to judge, not the name's."""
    names = list(interfaces)
    if len(value) <= 1:
        return names
    exclude = value.startswith("^")
    rest = value[1:] if exclude else value
    exact = rest.startswith("=")
    rest = rest[1:] if exact else rest
    # parseStringList skips one more leading "^" or "=" itself ("=^eth0" is an exact eth0).
    rest = rest[1:] if rest[:1] in ("^", EXACT) else rest
    entries = [e for e in (part.split(":", 1)[0] for part in rest.split(",")) if e]

    def named(name: str) -> bool:
        if not entries:
            return True
        return any(name == e if exact else name.startswith(e) for e in entries)

    return [n for n in names if named(n) != exclude]


def socket_ifname_problem(value: str, interfaces: Sequence[str]) -> str | None:
    """Why ``NCCL_SOCKET_IFNAME=value`` leaves NCCL no socket interface on a node whose interfaces
    are ``interfaces`` (NCCL then fails at its bootstrap: "no socket interface found"), naming the
    value and the interfaces; None where it leaves one."""
    if socket_ifname_selects(value, interfaces):
        return None
    how = "excludes every interface" if value.startswith("^") else "matches no interface"
    return f"NCCL_SOCKET_IFNAME={value} {how} of the node's ({', '.join(interfaces) or 'none'})"


def socket_rails(platform: Platform) -> list[str]:
    """The interfaces of the platform's compute Ethernet rails (the lab's), in rail order: NCCL's
    socket transport carries its data over them. RDMA rails are reached through NCCL's IB or OFI
    transport instead, and a storage or frontend port never carries NCCL's traffic."""
    out: list[str] = []
    for rail in platform.rails:
        if rail.role == "compute" and rail.kind == "ethernet":
            out += [str(d) for d in expand_devices(rail.devices or [])]
    return out


def efa_device_rdma(platform: Platform) -> bool:
    """Whether the platform's AWS instance type has EFA RDMA read (see EFA_RDMA_READ_INSTANCE_TYPES)."""
    instance_type = platform.instance_types.get("aws")
    return instance_type in EFA_RDMA_READ_INSTANCE_TYPES


def gid_index(fabric: Fabric, platform: Platform | None = None) -> int | None:
    """The RoCE GID index NCCL is set to use (``NCCL_IB_GID_INDEX`` in /etc/nccl.conf): the
    provider's where the platform's QoS is the provider's (OCI: 3), else the spec's
    ``fabric.gid_index``; None where NCCL picks its own. The perftest runs (GC-RDMA-001,
    GC-RDMA-002) pass the same index (``-x``), so what they measure is the GID NCCL's traffic takes."""
    if fabric.type != "roce":
        # NCCL reads NCCL_IB_GID_INDEX in RoCE mode only (NCCL's environment variables, NCCL_IB_GID_INDEX:
        # "used in RoCE mode"); on InfiniBand it routes by LID, and perftest's -x would send it
        # through a GRH path NCCL never takes (an empty index fails outright).
        return None
    provider = platform.provider_qos if platform is not None else None
    if provider is not None:
        return provider.gid_index
    return fabric.gid_index


def nccl_settings(fabric: Fabric, platform: Platform, fabric_interface: str | None) -> dict[str, str]:
    """The NCCL settings, in file order, for a node of ``platform`` on ``fabric``.

    ``fabric_interface`` is the node's fabric interface from the inventory; the spec's
    ``fabric.socket_ifname`` takes its place when set, and where neither is, the platform's
    ``nccl_socket_interface`` (the provider's own choice: OCI's eth0). Socket traffic (NCCL's
    bootstrap, and the data path on Ethernet) is pinned to that interface where one is known.
    """
    kind = fabric.type
    if kind not in FABRIC_TYPES:
        raise ValueError(f"fabric type {kind!r} is not one of {', '.join(FABRIC_TYPES)}")
    settings: dict[str, str] = {}
    rails = socket_rails(platform) if kind == "ethernet" else []
    ifname = fabric.socket_ifname or fabric_interface or platform.nccl_socket_interface
    if fabric.socket_ifname or not rails:
        if ifname:
            settings["NCCL_SOCKET_IFNAME"] = socket_ifname_value(str(ifname))
    else:
        settings["NCCL_SOCKET_IFNAME"] = socket_ifname_value(rails)
    if kind in ("infiniband", "roce"):
        hcas = compute_hcas(platform)
        if hcas:
            settings["NCCL_IB_HCA"] = ib_hca_value(hcas)
        # A provider that owns the network's QoS (the platform's provider_qos: OCI) publishes the
        # timeout, GID, traffic class and service level its network expects; the spec's own
        # values serve elsewhere.
        provider = platform.provider_qos
        settings["NCCL_IB_TIMEOUT"] = str(provider.ib_timeout if provider is not None else fabric.ib_timeout)
        # Only when the spec (or the provider) names one: left unset, NCCL (2.21 and later; the
        # BOM pins 2.27) selects the GID itself for the address family NCCL_IB_ADDR_FAMILY,
        # default AF_INET (NCCL_IB_GID_INDEX "The default value is -1", NCCL_IB_ADDR_FAMILY,
        # https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-ib-gid-index).
        gid = gid_index(fabric, platform)
        if gid is not None:
            settings["NCCL_IB_GID_INDEX"] = str(gid)
        qos = fabric.roce_qos
        if kind == "roce" and provider is not None:
            settings["NCCL_IB_TC"] = str(provider.traffic_class)
            settings["NCCL_IB_SL"] = str(provider.service_level)
        elif kind == "roce" and qos is not None:
            settings["NCCL_IB_TC"] = str(qos.traffic_class)
    elif kind == "efa":
        # "FI_PROVIDER="efa" - specifies the fabric interface provider. This must be set to
        # "efa"" (AWS, Get started with EFA and NCCL, base AMI:
        # https://github.com/awsdocs/amazon-ec2-user-guide/blob/master/doc_source/efa-start-nccl-base.md).
        settings["FI_PROVIDER"] = "efa"
        if efa_device_rdma(platform):
            settings["FI_EFA_USE_DEVICE_RDMA"] = "1"
    else:
        # "Define and set to 1 to disable the use of InfiniBand Verbs for communication (and
        # force another method, e.g. IP sockets)" (NCCL_IB_DISABLE,
        # https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html).
        settings["NCCL_IB_DISABLE"] = "1"
        if len(rails) > 1:
            # Each rail is its own network with no path to the others (the lab's bridges), so a
            # ring must stay on one rail index across nodes: "0: Always use the same NIC for the
            # same ring/tree, to avoid crossing network rails. Suited for networks with per NIC
            # switches (rails), with a slow inter-rail connection" (NCCL_CROSS_NIC,
            # https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html#nccl-cross-nic).
            settings["NCCL_CROSS_NIC"] = "0"
    # What the provider's image writes for the shape (Azure's topology file...): kept beside ours,
    # so that its boot-time rewrite and this file agree (the nccl role restores this file after it).
    for key, value in platform.image_nccl.items():
        settings.setdefault(str(key), str(value))
    return settings


def parse_nccl_conf(text: str) -> dict[str, str]:
    """``KEY=VALUE`` lines of an nccl.conf as NCCL reads them: comment lines skipped, the value
    everything after the first ``=`` (``=mlx5_0:1`` keeps its leading ``=``)."""
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        out[key.strip()] = value.strip()
    return out
