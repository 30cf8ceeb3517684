"""GC-NET-001/002 read the fabric interface the inventory names; a node whose platform gives its
fabric no address (EFA-only interfaces, a storage VM without RDMA) is skipped with that reason,
and a node that should carry one but is named no interface fails, saying why."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpucluster.spec.loader import load_platforms
from gpucluster.spec.models import Fabric

REPO = Path(__file__).resolve().parents[3]
SUITE = REPO / "tests" / "conformance" / "test_fabric.py"


def _suite() -> Any:
    spec = importlib.util.spec_from_file_location("suite_fabric", SUITE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _node(platform: str, interface: str | None, fabric_ip: str | None) -> Any:
    info = SimpleNamespace(fabric_interface=interface, fabric_ip=fabric_ip, platform=load_platforms()[platform],
                           platform_name=platform)
    ran: list[str] = []
    return SimpleNamespace(info=info, ran=ran, run=lambda cmd: ran.append(cmd))


@pytest.mark.parametrize("check", ["test_fabric_interface", "test_fabric_mtu"])
def test_an_efa_node_has_no_fabric_interface_to_check(check: str) -> None:
    node = _node("aws-p5-48xlarge", None, None)
    with pytest.raises(pytest.skip.Exception, match="platform aws-p5-48xlarge gives this node's fabric no "
                                                    "interface address"):
        getattr(_suite(), check)(node)
    assert node.ran == []


def test_an_addressed_node_named_no_interface_fails_saying_why() -> None:
    node = _node("dgx-h100", None, "10.20.0.10")
    with pytest.raises(pytest.fail.Exception,
                       match=r"names no fabric interface for this node \(its platform names no netdev"):
        _suite().test_fabric_interface(node)


def test_a_storage_vm_named_an_interface_but_given_no_fabric_address_is_skipped() -> None:
    """Azure's storage VMs have no InfiniBand port: whatever interface an inventory names, a node
    without a fabric address on a platform without an addressed RDMA rail has nothing to check."""
    node = _node("cloud-ethernet", "ib0", None)
    with pytest.raises(pytest.skip.Exception, match="gives this node's fabric no interface address"):
        _suite().test_fabric_interface(node)
    assert node.ran == []


def _links(ports: int, drop: str | None = None, mtu: int = 4220) -> list[dict[str, Any]]:
    """``ip -j addr show`` of an OCI GPU node: eth0 and rdma0..rdma<ports-1>, 192.168.<i>.10/16 each."""
    out: list[dict[str, Any]] = [{"ifname": "eth0", "operstate": "UP", "mtu": 9000,
                                  "addr_info": [{"family": "inet", "local": "10.60.0.10"}]}]
    for i in range(ports):
        name = f"rdma{i}"
        addrs = [] if name == drop else [{"family": "inet", "local": f"192.168.{i}.10", "prefixlen": 16}]
        out.append({"ifname": name, "operstate": "UP", "mtu": mtu,
                    "addr_info": [*addrs, {"family": "inet6", "local": "fe80::1"}]})
    return out


def _oci_node(links: list[dict[str, Any]]) -> Any:
    import json

    node = _node("oci-bm-gpu-h100-8", None, None)
    node.inv = SimpleNamespace(fabric=Fabric(type="roce", mtu=4220, management_cidr="10.60.0.0/24",
                                             fabric_cidr="192.168.0.0/16"))
    node.figure = lambda *_: None
    node.run = lambda cmd: (node.ran.append(cmd), SimpleNamespace(rc=0, stdout=json.dumps(links), stderr=""))[1]
    return node


def test_ocis_ports_are_judged_by_the_providers_range_not_a_spec_address() -> None:
    """OCI's image addresses its 16 RDMA ports from its own range (192.168.0.0/16): the target exports
    no fabric address for them, and GC-NET-001/002 pass where every port is up in that range at the
    fabric MTU, and name the one port that is not."""
    suite = _suite()
    node = _oci_node(_links(16))
    suite.test_fabric_interface(node)
    suite.test_fabric_mtu(node)
    assert node.ran == ["ip -j addr show", "ip -j addr show"]
    lost = _oci_node(_links(16, drop="rdma0"))
    figures: dict[str, Any] = {}
    lost.figure = figures.__setitem__
    with pytest.raises(AssertionError, match=r"^rdma0: no address in the provider's 192\.168\.0\.0/16, "
                                             r"10\.224\.0\.0/12 \(has none\)"):
        suite.test_fabric_interface(lost)
    # The report's next steps name the port without its address (remedies.subject reads the figure).
    assert figures == {"provider_ports_addressed": 15, "interface": "rdma0"}
    with pytest.raises(AssertionError, match=r"rdma15: no such interface"):
        suite.test_fabric_interface(_oci_node(_links(15)))
    with pytest.raises(AssertionError, match=r"^rdma0: MTU 1500; rdma1: MTU 1500; .* \(the spec says 4220\)"):
        suite.test_fabric_mtu(_oci_node(_links(16, mtu=1500)))


def test_a_port_in_another_range_or_down_is_no_provider_address() -> None:
    from gpucluster.conformance.provider_ports import provider_port_problems

    ports = [("rdma0", ["192.168.0.0/16"])]
    spec_addressed = [{"ifname": "rdma0", "operstate": "UP", "addr_info": [{"family": "inet", "local": "10.61.0.10"}]}]
    assert provider_port_problems(spec_addressed, ports) == [
        "rdma0: no address in the provider's 192.168.0.0/16 (has ['10.61.0.10'])"]
    down = [{"ifname": "rdma0", "operstate": "DOWN", "addr_info": [{"family": "inet", "local": "192.168.0.10"}]}]
    assert provider_port_problems(down, ports) == ["rdma0: DOWN"]
