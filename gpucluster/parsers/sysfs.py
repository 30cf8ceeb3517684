"""Readings from sysfs, captured as ``<path>=<value>`` lines (the suite prints them with
``grep -H`` or a ``printf`` loop) and turned into InfiniBand ports, HCA firmware and PCIe links.

Formats are the kernel's (Documentation/ABI/stable/sysfs-class-infiniband; drivers/pci):
``ports/N/state`` is ``4: ACTIVE``, ``ports/N/rate`` is ``400 Gb/sec (4X NDR)``, counters are
decimal, ``fw_ver`` is ``28.39.1002``, ``current_link_speed`` is ``16.0 GT/s PCIe`` and
``current_link_width`` a lane count.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpucluster.parsers.common import clean_lines, parse_count, parse_number

_IB_PORT = re.compile(r"/sys/class/infiniband/([\w.-]{1,64})/ports/(\d{1,3})/(?:counters/)?(\w{1,64})")
_IB_DEV = re.compile(r"/sys/class/infiniband/([\w.-]{1,64})/(?:device/)?(\w{1,64})")
# drivers/pci/probe.c, pci_bus_speed_strings: "2.5 GT/s PCIe" ... "64.0 GT/s PCIe"
# (https://github.com/torvalds/linux/blob/master/drivers/pci/probe.c); the generation each
# transfer rate belongs to: PCIe 1.0 2.5 GT/s ... PCIe 6.0 64 GT/s.
GT_TO_GEN = {2.5: 1, 5.0: 2, 8.0: 3, 16.0: 4, 32.0: 5, 64.0: 6}
COUNTERS = ("symbol_error", "link_downed", "port_rcv_errors")


def readings(text: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in clean_lines(text):
        path, eq, value = line.partition("=")
        if eq and path.startswith("/sys/"):
            out[path[:300]] = value.strip()[:200]
    return out


@dataclass
class IbPort:
    hca: str
    port: int
    state: str | None = None  # "ACTIVE", "DOWN", ...
    rate_gbps: float | None = None
    counters: dict[str, int | None] = field(default_factory=dict)


def ib_ports(values: dict[str, str]) -> list[IbPort]:
    ports: dict[tuple[str, int], IbPort] = {}
    for path, value in values.items():
        m = _IB_PORT.fullmatch(path)
        if m is None:
            continue
        key = (m.group(1), int(m.group(2)))
        port = ports.setdefault(key, IbPort(hca=key[0], port=key[1]))
        what = m.group(3)
        if what == "state":
            port.state = value.partition(":")[2].strip() or value.strip() or None
        elif what == "rate":
            port.rate_gbps = parse_number(value.split()[0]) if value.split() else None
        elif "/counters/" in path:
            port.counters[what] = parse_count(value)
    return [ports[k] for k in sorted(ports)]


def hca_attr(values: dict[str, str], attr: str) -> dict[str, str]:
    """{hca: value} of ``/sys/class/infiniband/<hca>/<attr>`` (or ``device/<attr>``)."""
    out: dict[str, str] = {}
    for path, value in values.items():
        m = _IB_DEV.fullmatch(path)
        if m is not None and m.group(2) == attr:
            out[m.group(1)] = value
    return out


# PCI device IDs the mlx5 driver marks MLX5_PCI_DEV_IS_VF: ConnectX-4 .. ConnectX-6 VFs and the
# "ConnectX Family mlx5Gen Virtual Function" (0x101e) that ConnectX-6 Dx/7 VFs carry
# (mlx5_core_pci_table, https://github.com/torvalds/linux/blob/master/drivers/net/ethernet/mellanox/mlx5/core/main.c).
MLX5_VF_DEVICE_IDS = frozenset({"0x1012", "0x1014", "0x1016", "0x1018", "0x101a", "0x101c", "0x101e"})


def is_mlx5_vf(device_id: str | None) -> bool:
    """``device/device`` (``0x101e``) names an mlx5 SR-IOV virtual function. A VF's Link Status
    register is reserved (reads zero), so its ``current_link_speed`` reads ``Unknown`` (``Unknown
    speed`` before Linux 5.x) and ``current_link_width`` 0 (current_link_speed_show and
    current_link_width_show, https://github.com/torvalds/linux/blob/master/drivers/pci/pci-sysfs.c)."""
    return (device_id or "").strip().lower() in MLX5_VF_DEVICE_IDS


def pcie_gen(speed: str | None) -> int | None:
    """The PCIe generation of a ``current_link_speed`` reading; None when unknown."""
    if not speed:
        return None
    gts = parse_number(speed.split()[0])
    return GT_TO_GEN.get(gts) if gts is not None else None
