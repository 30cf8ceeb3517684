"""Fabric interface, HCAs, RoCE QoS and NCCL configuration (GC-NET)."""

from __future__ import annotations

import json
import re

import pytest

from gpucluster.render.nccl import NCCL_CONF_PATH, nccl_settings, parse_nccl_conf


def _iface(node):
    iface = node.info.fabric_interface
    if not iface:
        pytest.fail("the inventory names no fabric interface for this node")
    return iface


def _link(node, iface):
    res = node.run(f"ip -j addr show dev {iface}")
    assert res.rc == 0, f"no interface {iface}: {res.stderr.strip()}"
    return json.loads(res.stdout)[0]


@pytest.mark.check("GC-NET-001")
@pytest.mark.gpu
@pytest.mark.storage
def test_fabric_interface(node):
    """The fabric interface MUST be up and carry the node's fabric address."""
    iface = _iface(node)
    link = _link(node, iface)
    addrs = [a.get("local") for a in link.get("addr_info", [])]
    node.figure("operstate", link.get("operstate"))
    assert node.info.fabric_ip in addrs, f"{iface} does not carry {node.info.fabric_ip} (has {addrs})"
    assert link.get("operstate") in ("UP", "UNKNOWN"), f"{iface} is {link.get('operstate')}"


@pytest.mark.check("GC-NET-002")
@pytest.mark.gpu
@pytest.mark.storage
def test_fabric_mtu(node):
    """The fabric interface MTU MUST equal the spec's fabric MTU."""
    iface = _iface(node)
    want = int(node.inv.fabric["mtu"])
    # ip, not /sys/class/net: a container's /sys may show another network namespace.
    mtu = int(_link(node, iface)["mtu"])
    node.figure("mtu", mtu)
    assert mtu == want, f"{iface} MTU {mtu}, the spec says {want}"


@pytest.mark.check("GC-NET-003")
@pytest.mark.gpu
def test_hcas_present(node):
    """The node MUST show as many RDMA HCAs as its hardware profile lists."""
    node.require_hcas()
    hcas = node.run("ls /sys/class/infiniband 2>/dev/null").stdout.split()
    node.figure("hcas", len(hcas))
    assert len(hcas) == node.info.hca_count, f"{len(hcas)} HCAs ({' '.join(hcas)}), profile lists {node.info.hca_count}"


@pytest.mark.check("GC-NET-004")
@pytest.mark.gpu
def test_hca_ports_active(node):
    """Every HCA port MUST be ACTIVE at the profile's rate."""
    node.require_hcas()
    want = int(node.profile["hca"]["rate_gbps"])
    res = node.run("for p in /sys/class/infiniband/*/ports/*; do echo \"$p $(cat $p/state) $(cat $p/rate)\"; done")
    ports = [x for x in res.stdout.splitlines() if x.strip()]
    assert ports, "no HCA ports under /sys/class/infiniband"
    problems = []
    for line in ports:
        m = re.match(r"(\S+) \d+: (\w+) (\d+)", line)
        if not m:
            problems.append(f"unreadable: {line}")
        elif m.group(2) != "ACTIVE" or int(m.group(3)) != want:
            problems.append(f"{m.group(1).split('/infiniband/')[1]}: {m.group(2)} {m.group(3)} Gb/s")
    assert not problems, f"not ACTIVE at {want} Gb/s: " + "; ".join(problems)


@pytest.mark.check("GC-NET-005")
@pytest.mark.gpu
def test_roce_qos(node):
    """On RoCE fabrics with QoS specified, the fabric interface MUST trust DSCP and have PFC on exactly the specified priority."""  # noqa: E501
    fabric = node.inv.fabric
    if fabric.get("type") != "roce" or not fabric.get("roce_qos"):
        pytest.skip(f"fabric type {fabric.get('type')} without RoCE QoS in the spec")
    qos = fabric["roce_qos"]
    res = node.run(f"mlnx_qos -i {_iface(node)} 2>&1")
    assert res.rc == 0, f"mlnx_qos failed: {res.stdout.strip()}"
    trust = re.search(r"Priority trust state:\s*(\w+)", res.stdout)
    if qos.get("dscp_trust"):
        assert trust and trust.group(1) == "dscp", f"trust state {trust.group(1) if trust else 'unknown'}, not dscp"
    pfc = re.search(r"enabled\s+((?:\d\s+){7}\d)", res.stdout)
    assert pfc, "mlnx_qos shows no PFC line"
    on = [i for i, v in enumerate(pfc.group(1).split()) if v == "1"]
    assert on == [int(qos["pfc_priority"])], f"PFC on priorities {on}, the spec says [{qos['pfc_priority']}]"


@pytest.mark.check("GC-NET-006")
@pytest.mark.gpu
def test_nccl_conf(node):
    """/etc/nccl.conf MUST hold exactly the settings the spec renders for the node."""
    # The nccl role writes the file on every node it runs on, GPUs or not (the lab's nodes have
    # none), from the same function: what is expected here is what the role wrote.
    want = nccl_settings(node.inv.fabric, node.info.profile, node.info.fabric_interface)
    res = node.run(f"cat {NCCL_CONF_PATH}")
    assert res.rc == 0, f"{NCCL_CONF_PATH} is missing"
    got = parse_nccl_conf(res.stdout)
    diff = {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
    assert not diff, "; ".join(f"{k}={a!r}, expected {b!r}" for k, (a, b) in sorted(diff.items()))
