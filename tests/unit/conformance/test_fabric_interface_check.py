"""GC-NET-001/002 read the fabric interface the inventory names; a node whose platform gives its
fabric no address (EFA-only interfaces, a storage VM without RDMA) is skipped with that reason,
and a node that should carry one but is named no interface fails, saying why."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[3]
SUITE = REPO / "tests" / "conformance" / "test_fabric.py"
PLATFORMS = REPO / "gpucluster" / "data" / "platforms"


def _suite() -> Any:
    spec = importlib.util.spec_from_file_location("suite_fabric", SUITE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _node(platform: str, interface: str | None, fabric_ip: str | None) -> Any:
    data = yaml.safe_load((PLATFORMS / f"{platform}.yaml").read_text())
    info = SimpleNamespace(fabric_interface=interface, fabric_ip=fabric_ip, platform=data, platform_name=platform)
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
