"""GC-NET-006 fails a node whose /etc/nccl.conf names a socket interface the node lacks (NCCL then
finds none to bootstrap over), naming the value and the node's interfaces, and passes every healthy
lab and twin node: their links are the ones the lab boots them with (gpucluster.twin.inputs' plan,
which the lab builds the nodes' links from), their nccl.conf the role's rendering from the
inventory the stack's own outputs give."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpucluster import twin
from gpucluster.conformance.nodes import ClusterInventory, NodeInfo, parse_inventory
from gpucluster.inventory import build_inventory, dump_inventory, parse_inventory_text
from gpucluster.outputs import StackOutputs
from gpucluster.render import nccl as render_nccl
from gpucluster.spec import load_spec
from tests.unit.render.test_nccl import IP_ADDR_SHOW
from tests.unit.roles.test_nccl_conf import CHECK, REPO, _Result, ip_addr_show, render_nccl_conf

LAB_STACKS = [REPO / "Pulumi.lab.yaml", *sorted(REPO.glob("Pulumi.twin-*.yaml"))]


@dataclass
class _Node:
    """The part of the suite's ``node`` fixture GC-NET-006 uses: one file, and the links ``ip`` shows."""

    info: NodeInfo
    inv: ClusterInventory
    conf: str
    ip_addr_show: str
    ran: list[str] = field(default_factory=list)

    def run(self, command: str) -> _Result:
        self.ran.append(command)
        if command == f"cat {render_nccl.NCCL_CONF_PATH}":
            return _Result(0, self.conf)
        if command == "ip -j addr show":
            return _Result(0, self.ip_addr_show)
        return _Result(127, "", f"unexpected command: {command}")


def _lab(stack: Path) -> tuple[dict[str, Any], ClusterInventory, dict[str, list[str]]]:
    """The stack's inventory as its lab or twin gives it, and each node's links as the lab boots them."""
    cluster = load_spec(stack)
    inputs = twin.inputs(cluster)
    outputs = StackOutputs.model_validate(inputs.outputs)
    data: dict[str, Any] = parse_inventory_text(dump_inventory(build_inventory(cluster, outputs)))
    links = {n.name: ["lo", n.management_interface, *([n.fabric_interface] if n.fabric_interface else []),
                      *(r.interface for r in n.rails)] for n in inputs.plan.nodes}
    return data, parse_inventory(data, str(stack)), links


@pytest.mark.parametrize("stack", LAB_STACKS, ids=lambda p: p.stem.removeprefix("Pulumi."))
def test_a_healthy_lab_or_twin_node_passes_and_one_without_the_interface_fails(stack: Path) -> None:
    data, inv, links = _lab(stack)
    gpu_nodes = inv.in_groups(("gpu",))
    assert gpu_nodes
    for info in gpu_nodes:
        conf = render_nccl_conf(data, info.name)
        value = render_nccl.parse_nccl_conf(conf).get("NCCL_SOCKET_IFNAME")
        node = _Node(info, inv, conf, ip_addr_show(links[info.name]))
        CHECK.test_nccl_conf(node)
        if value is None:
            # EFA (the AWS twin): NCCL's sockets are left to NCCL, nothing to look for.
            assert inv.fabric.type == "efa", (stack.name, info.name)
            assert node.ran == [f"cat {render_nccl.NCCL_CONF_PATH}"]
            continue
        assert node.ran == [f"cat {render_nccl.NCCL_CONF_PATH}", "ip -j addr show"]
        # The same node without the interfaces the value names: the file is still the spec's.
        named = render_nccl.socket_ifname_selects(value, links[info.name])
        assert named
        left = [n for n in links[info.name] if n not in named]
        with pytest.raises(AssertionError) as failed:
            CHECK.test_nccl_conf(_Node(info, inv, conf, ip_addr_show(left)))
        assert str(failed.value).splitlines()[0] == (
            f"NCCL_SOCKET_IFNAME={value} matches no interface of the node's ({', '.join(left)})")


def test_the_lab_passes_on_the_links_ip_really_prints() -> None:
    """iproute2's own output of a lab GPU node's namespace (lo, eth0 and its two rails): the lab's
    rails match; an Azure node's file (ib0) names none of them."""
    data, inv, _ = _lab(REPO / "Pulumi.lab.yaml")
    info = inv.node("gpu-1")
    CHECK.test_nccl_conf(_Node(info, inv, render_nccl_conf(data, "gpu-1"), IP_ADDR_SHOW))

    azure_data, azure_inv, _ = _lab(REPO / "Pulumi.twin-azure-nd-h100-v5.yaml")
    azure = azure_inv.in_groups(("gpu",))[0]
    conf = render_nccl_conf(azure_data, azure.name)
    with pytest.raises(AssertionError, match=r"^NCCL_SOCKET_IFNAME==ib0 matches no interface of the node's "
                                             r"\(lo, eth0, enp32s0np0, enp16s0np0\)$"):
        CHECK.test_nccl_conf(_Node(azure, azure_inv, conf, IP_ADDR_SHOW))


def test_a_setting_that_differs_and_a_missing_interface_are_both_named() -> None:
    """A file someone rewrote to name eth5: the setting differs from the spec's, and no eth5 exists."""
    data, inv, links = _lab(REPO / "Pulumi.twin-oci-h100.yaml")
    info = inv.in_groups(("gpu",))[0]
    conf = render_nccl_conf(data, info.name).replace("NCCL_SOCKET_IFNAME==eth0", "NCCL_SOCKET_IFNAME==eth5")
    with pytest.raises(AssertionError) as failed:
        CHECK.test_nccl_conf(_Node(info, inv, conf, ip_addr_show(links[info.name])))
    assert str(failed.value).splitlines()[0] == (
        "NCCL_SOCKET_IFNAME='=eth5', expected '=eth0'; NCCL_SOCKET_IFNAME==eth5 matches no interface of the "
        f"node's ({', '.join(links[info.name])})")


def test_ip_that_fails_fails_the_check_saying_so() -> None:
    data, inv, _ = _lab(REPO / "Pulumi.lab.yaml")
    info = inv.node("gpu-1")
    node = _Node(info, inv, render_nccl_conf(data, "gpu-1"), "")
    node.run = lambda command: (_Result(0, node.conf) if command.startswith("cat ")  # type: ignore[method-assign]
                                else _Result(255, "", "Cannot open netlink socket: Permission denied"))
    with pytest.raises(AssertionError, match="ip addr: Cannot open netlink socket: Permission denied"):
        CHECK.test_nccl_conf(node)
