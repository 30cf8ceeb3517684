"""Fabric interface, HCAs, RoCE QoS and NCCL configuration (GC-NET)."""

from __future__ import annotations

import json
import re

import pytest

from gpucluster.conformance.provider_ports import provider_mtu_problems, provider_port_problems
from gpucluster.conformance.rdma_checks import hca_problems, roce_qos_problems
from gpucluster.render.nccl import NCCL_CONF_PATH, nccl_settings, parse_nccl_conf, socket_ifname_problem
from gpucluster.render.platform import platform_devices, platform_rdma_addressed, provider_ports


def _iface(node):
    iface = node.info.fabric_interface
    if not node.info.fabric_ip and not platform_rdma_addressed(node.info.platform):
        # EFA-only interfaces carry no IP (libfabric needs none); a storage VM has no RDMA rail.
        pytest.skip(f"platform {node.info.platform_name} gives this node's fabric no interface address "
                    "(no addressed RDMA rail): nothing to check")
    if not iface:
        pytest.fail("the inventory names no fabric interface for this node (its platform names no netdev "
                    "and its pool no fabric_interface)")
    node.figure("interface", iface)  # what the report's next steps name (remedies.subject)
    return iface


def _link(node, iface):
    res = node.run(f"ip -j addr show dev {iface}")
    assert res.rc == 0, f"no interface {iface}: {res.stderr.strip()}"
    return json.loads(res.stdout)[0]


def _provider_links(node):
    """The node's links (``ip -j addr show``) where its platform's provider addresses its compute
    ports (OCI), with the ports; None where the cluster addresses the fabric."""
    ports = provider_ports(node.info.platform)
    if not ports:
        return None
    res = node.run("ip -j addr show")
    assert res.rc == 0, f"ip addr: {res.stderr.strip()}"
    return json.loads(res.stdout), ports


@pytest.mark.check("GC-NET-001")
@pytest.mark.gpu
@pytest.mark.storage
def test_fabric_interface(node):
    """The fabric interface MUST be up and carry the node's fabric address; where the provider addresses the compute ports, every one MUST be up with an address in the provider's range."""  # noqa: E501
    provided = _provider_links(node)
    if provided is not None:
        links, ports = provided
        problems = provider_port_problems(links, ports)
        wanting = list(dict.fromkeys(p.split(":")[0] for p in problems))
        node.figure("provider_ports_addressed", len(ports) - len(wanting))
        if wanting:
            node.figure("interface", ",".join(wanting))  # what the report's next steps name (remedies.subject)
        assert not problems, "; ".join(problems)
        return
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
    """The fabric interface MTU (every compute port's, where the provider addresses them) MUST equal the spec's fabric MTU."""  # noqa: E501
    provided = _provider_links(node)
    if provided is not None:
        links, ports = provided
        want = node.inv.fabric.mtu
        problems = provider_mtu_problems(links, ports, want)
        assert not problems, "; ".join(problems) + f" (the spec says {want})"
        return
    iface = _iface(node)
    want = node.inv.fabric.mtu
    # ip, not /sys/class/net: a container's /sys may show another network namespace.
    mtu = int(_link(node, iface)["mtu"])
    node.figure("mtu", mtu)
    assert mtu == want, f"{iface} MTU {mtu}, the spec says {want}"


@pytest.mark.check("GC-NET-003")
@pytest.mark.gpu
def test_hcas_present(node):
    """The node MUST show every RDMA device its platform lists on its compute rails, and none that no rail of the platform names."""  # noqa: E501
    if node.info.hca_count == 0:
        pytest.skip(node.info.no_hca_reason())
    found = node.run("ls /sys/class/infiniband 2>/dev/null").stdout.split()
    node.figure("hcas", len(found))
    problems = hca_problems(found, node.info.platform_name, node.info.platform)
    assert not problems, "; ".join(problems) + f" (found: {' '.join(found) or 'none'})"


@pytest.mark.check("GC-NET-004")
@pytest.mark.gpu
def test_hca_ports_active(node):
    """Every port of the platform's compute RDMA devices MUST be ACTIVE at its compute rail's rate."""
    if node.info.hca_count == 0:
        pytest.skip(node.info.no_hca_reason())
    want = max(r.rate_gbps for r in node.info.platform.compute_rails())
    # Storage and frontend ports run at their own rates: only the compute devices are judged
    # (all devices where the OS names them, EFA).
    named = platform_devices(node.info.platform, kinds=("infiniband", "roce"))
    glob = " ".join(f"/sys/class/infiniband/{d}/ports/*" for d in named) or "/sys/class/infiniband/*/ports/*"
    res = node.run(f"for p in {glob}; do [ -e \"$p\" ] && echo \"$p $(cat $p/state) $(cat $p/rate)\"; done; true")
    ports = [x for x in res.stdout.splitlines() if x.strip()]
    assert ports, "no compute RDMA device ports under /sys/class/infiniband"
    problems = []
    failed = []
    for line in ports:
        m = re.match(r"\S+/infiniband/([^/\s]+)/ports/(\d+) \d+: (\w+) (\d+)", line)
        if not m:
            problems.append(f"unreadable: {line}")
        elif m.group(3) != "ACTIVE" or int(m.group(4)) != want:
            problems.append(f"{m.group(1)}/ports/{m.group(2)}: {m.group(3)} {m.group(4)} Gb/s")
            failed.append(f"{m.group(1)}:{m.group(2)}")
    if failed:
        node.figure("failed_ports", failed)  # device:port, what the report's next steps name (remedies.subject)
    assert not problems, f"not ACTIVE at {want} Gb/s: " + "; ".join(problems)


@pytest.mark.check("GC-NET-005")
@pytest.mark.gpu
def test_roce_qos(node):
    """On RoCE fabrics with QoS specified, every compute RoCE rail MUST trust DSCP and have PFC on exactly the specified priority."""  # noqa: E501
    fabric = node.inv.fabric
    if node.info.hca_count == 0:
        pytest.skip(node.info.no_hca_reason())
    if node.info.platform.provider_qos is not None:
        pytest.skip(f"platform {node.info.platform_name}'s network QoS is the provider's: the node sets none")
    if fabric.type != "roce" or fabric.roce_qos is None:
        pytest.skip(f"fabric type {fabric.type} without RoCE QoS in the spec")
    devices = platform_devices(node.info.platform, kinds=("roce",))
    if not devices:
        pytest.skip(f"platform {node.info.platform_name} has no compute RoCE rail")
    problems = []
    for ibdev in devices:
        # The rdma_fabric role sets QoS on each device's netdev with iproute2's dcb; read it back the same way.
        nets = node.run(f"ls /sys/class/infiniband/{ibdev}/device/net 2>/dev/null").stdout.split()
        if not nets:
            problems.append(f"{ibdev}: no netdev (is the device present? GC-NET-003)")
            continue
        for dev in nets:
            app = node.run(f"dcb -j app show dev {dev} dscp-prio")
            pfc = node.run(f"dcb -j pfc show dev {dev} prio-pfc")
            if app.rc != 0 or pfc.rc != 0:
                problems.append(f"{ibdev} ({dev}): dcb failed: {(app.stderr or pfc.stderr).strip()}")
                continue
            try:
                problems += roce_qos_problems(f"{ibdev} ({dev})", app.stdout, pfc.stdout, fabric.roce_qos)
            except ValueError as exc:
                problems.append(f"{ibdev} ({dev}): {exc}")
    assert not problems, "; ".join(problems)


@pytest.mark.check("GC-NET-006")
@pytest.mark.gpu
def test_nccl_conf(node):
    """/etc/nccl.conf MUST hold exactly the settings the spec renders for the node, and its NCCL_SOCKET_IFNAME MUST name an interface the node has."""  # noqa: E501
    # The nccl role writes the file on every node it runs on, GPUs or not (the lab's nodes have
    # none), from the same function: what is expected here is what the role wrote.
    want = nccl_settings(node.inv.fabric, node.info.platform, node.info.fabric_interface)
    res = node.run(f"cat {NCCL_CONF_PATH}")
    assert res.rc == 0, f"{NCCL_CONF_PATH} is missing"
    got = parse_nccl_conf(res.stdout)
    diff = {k: (got.get(k), want.get(k)) for k in set(got) | set(want) if got.get(k) != want.get(k)}
    problems = [f"{k}={a!r}, expected {b!r}" for k, (a, b) in sorted(diff.items())]
    # The value NCCL reads (the file's): a name the node lacks leaves NCCL no bootstrap interface.
    ifname = got.get("NCCL_SOCKET_IFNAME")
    if ifname is not None:
        links = node.run("ip -j addr show")
        assert links.rc == 0, f"ip addr: {links.stderr.strip()}"
        problem = socket_ifname_problem(ifname, [str(link.get("ifname")) for link in json.loads(links.stdout)])
        if problem:
            problems.append(problem)
    assert not problems, "; ".join(problems)
