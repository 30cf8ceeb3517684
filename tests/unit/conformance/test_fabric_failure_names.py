"""A fabric check that fails records what failed by name (issue 26: the next steps name the real
device, rail and interface, not words): GC-NET-004 the device:ports not ACTIVE at the rail's rate,
GC-RAIL-001/002 the node's own netdev on each rail found wanting, GC-AR-003 the interface its pair
runs went over. remedies.subject reads them (tests/unit/conformance/test_remedy_subjects.py)."""

from __future__ import annotations

import importlib.util
import warnings
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpucluster.conformance import remedies
from gpucluster.conformance.fabric import interface_on, rail_netdev, unaddressed_ports
from gpucluster.conformance.pairs import PairResult, find_slow, rail_search
from gpucluster.conformance.verdict import CheckResult
from gpucluster.outputs import OutputRail
from gpucluster.spec.loader import load_platforms
from gpucluster.spec.models import Fabric as FabricSpec

REPO = Path(__file__).resolve().parents[3]

# `ip -j -4 addr show` (iproute2 6.1.0) in a network namespace shaped like an AWS twin's GPU node
# after a fabric address was added: lo, the ENA port enp71s0 (management) and an IPoIB-named port.
IP_4_ADDR_SHOW = (
    '[{"ifindex":1,"ifname":"lo","flags":["LOOPBACK","UP","LOWER_UP"],"mtu":65536,"qdisc":"noqueue",'
    '"operstate":"UNKNOWN","group":"default","txqlen":1000,"addr_info":[{"family":"inet","local":"127.0.0.1",'
    '"prefixlen":8,"scope":"host","label":"lo","valid_life_time":4294967295,"preferred_life_time":4294967295}]},'
    '{"ifindex":2,"link":"enp71s0","ifname":"ibp24s0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":1500,'
    '"qdisc":"noqueue","operstate":"UP","group":"default","txqlen":1000,"addr_info":[{"family":"inet",'
    '"local":"10.82.0.11","prefixlen":16,"scope":"global","label":"ibp24s0","valid_life_time":4294967295,'
    '"preferred_life_time":4294967295}]},{"ifindex":3,"link":"ibp24s0","ifname":"enp71s0","flags":["BROADCAST",'
    '"MULTICAST","UP","LOWER_UP"],"mtu":1500,"qdisc":"noqueue","operstate":"UP","group":"default","txqlen":1000,'
    '"addr_info":[{"family":"inet","local":"10.81.0.11","prefixlen":24,"scope":"global","label":"enp71s0",'
    '"valid_life_time":4294967295,"preferred_life_time":4294967295}]}]')


def _suite(name: str) -> Any:
    spec = importlib.util.spec_from_file_location(f"suite_{name}", REPO / "tests" / "conformance" / f"{name}.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
        spec.loader.exec_module(module)
    return module


class _Node:
    """The part of the suite's ``node`` fixture these checks use; ``outputs`` answers commands by prefix."""

    def __init__(self, name: str, info: Any, outputs: dict[str, str], fabric: FabricSpec | None = None) -> None:
        self.name, self.info, self.outputs = name, info, outputs
        self.inv = SimpleNamespace(fabric=fabric)
        self.figures: dict[str, Any] = {}
        self.ran: list[str] = []

    def figure(self, key: str, value: Any) -> None:
        self.figures[key] = value

    def cause(self, key: str) -> None:
        self.figures["_cause"] = key

    def attach(self, path: str) -> None:
        pass

    def run(self, command: str) -> SimpleNamespace:
        self.ran.append(command)
        for prefix, out in self.outputs.items():
            if command.startswith(prefix):
                return SimpleNamespace(rc=0, stdout=out, stderr="")
        return SimpleNamespace(rc=1, stdout="", stderr=f"unexpected: {command}")

    def steps(self, check_id: str) -> tuple[str, ...]:
        return remedies.steps_for(CheckResult(self.name, check_id, "failed", "x", self.figures))


# --- GC-NET-004 -----------------------------------------------------------------------------------


def test_ports_not_active_at_the_rails_rate_are_recorded_as_device_and_port() -> None:
    """The check's loop prints each port's path, then its sysfs state and rate files (the kernel's
    "4: ACTIVE" and "400 Gb/sec (4X NDR)"): a port down and one at half rate are named."""
    info = SimpleNamespace(hca_count=8, platform=load_platforms()["dgx-h100"], no_hca_reason=lambda: "")
    lines = [f"/sys/class/infiniband/mlx5_{i}/ports/1 4: ACTIVE 400 Gb/sec (4X NDR)" for i in (0, 4, 5, 6, 10, 11)]
    lines += ["/sys/class/infiniband/mlx5_3/ports/1 1: DOWN 10 Gb/sec (4X SDR)",
              "/sys/class/infiniband/mlx5_9/ports/1 4: ACTIVE 200 Gb/sec (2X NDR)"]
    node = _Node("dgx-01", info, {"for p in ": "\n".join(lines) + "\n"})
    with pytest.raises(AssertionError, match=r"not ACTIVE at 400 Gb/s: mlx5_3/ports/1: DOWN 10 Gb/s; "
                                             r"mlx5_9/ports/1: ACTIVE 200 Gb/s"):
        _suite("test_fabric").test_hca_ports_active(node)
    assert node.figures["failed_ports"] == ["mlx5_3:1", "mlx5_9:1"]
    assert node.steps("GC-NET-004")[0].startswith("Run `ibstat mlx5_3 1` (or `cat /sys/class/infiniband/mlx5_3/")

    healthy = _Node("dgx-02", info, {"for p in ": "\n".join(lines[:6]) + "\n"})
    _suite("test_fabric").test_hca_ports_active(healthy)
    assert "failed_ports" not in healthy.figures


# --- GC-RAIL-002 ----------------------------------------------------------------------------------


def _rails(*names: str) -> tuple[OutputRail, ...]:
    return tuple(OutputRail(interface=n, address=f"10.5.{i}.10", cidr=f"10.5.{i}.0/24") for i, n in enumerate(names))


def test_a_rail_lost_is_named_by_the_nodes_own_netdev() -> None:
    """gpu-1 names its second rail ens7 where its peers say enp32s0np0: the report calls the rail
    rail1, the next steps name gpu-1's own ens7."""
    names = ["gpu-1", "gpu-2", "gpu-3"]
    pairs = [("gpu-1", "gpu-2"), ("gpu-1", "gpu-3"), ("gpu-2", "gpu-3")]
    per_rail = {"enp16s0np0": [PairResult(a, b, True, None, "ok") for a, b in pairs],
                "rail1": [PairResult(a, b, "gpu-1" not in (a, b), None, f"{a} -> {b} lost") for a, b in pairs]}
    search, per = rail_search(names, per_rail)
    data = {"mtu": 9000, "search": search.to_json(), "rails": {k: v.to_json() for k, v in per.items()}}
    info = SimpleNamespace(rails=_rails("enp16s0np0", "ens7"))
    node = _Node("gpu-1", info, {})
    with pytest.raises(pytest.fail.Exception, match=r"on rail\(s\) rail1 lost to and from every peer"):
        _suite("test_rails").test_rails_reach_every_peer(node, SimpleNamespace(rail_reachability=lambda: data))
    assert node.figures["failed_rails"] == ["ens7"]
    assert "-I ens7 <the peer's address on the rail>` on gpu-1" in node.steps("GC-RAIL-002")[0]


def test_rail_netdev_maps_a_rail_name_to_the_nodes_interface_by_its_place() -> None:
    info = SimpleNamespace(rails=_rails("enp16s0np0", "ens7"))
    assert rail_netdev(info, ["enp16s0np0", "rail1"], "rail1") == "ens7"
    assert rail_netdev(info, ["enp16s0np0", "rail1"], "enp16s0np0") == "enp16s0np0"
    # A rail the node lists none at: the name as the measurement gave it.
    assert rail_netdev(info, ["a", "b", "rail2"], "rail2") == "rail2"
    assert rail_netdev(info, ["a"], "zzz") == "zzz"


# --- GC-AR-003 ------------------------------------------------------------------------------------


def _pair_data(networks: str, rails: dict[str, Any] | None = None) -> dict[str, Any]:
    names = ["gpu-1", "gpu-2", "gpu-3"]
    results = [PairResult(a, b, "gpu-1" not in (a, b), 0.002 if "gpu-1" in (a, b) else 0.3, "")
               for a, b in (("gpu-1", "gpu-2"), ("gpu-2", "gpu-3"), ("gpu-3", "gpu-1"))]
    return {"search": find_slow(names, results).to_json(), "rails": rails or {}, "runs": [],
            "floor_key": "allreduce_inter_busbw_gbps", "verdict_bytes": 16777216, "networks": networks}


def _ar_node(outputs: dict[str, str], rails: tuple[dict[str, str], ...] = (),
             fabric_interface: str | None = None) -> _Node:
    info = SimpleNamespace(floor=lambda key: 0.05, rails=rails, fabric_interface=fabric_interface,
                           profile_name="h100-sxm-8")
    return _Node("gpu-1", info, outputs, FabricSpec(type="ethernet", mtu=9000, fabric_cidr="10.82.0.0/16",
                                                    management_cidr="10.81.0.0/24"))


def test_a_slow_node_names_the_interface_holding_its_address_on_the_network_the_pairs_ran_on() -> None:
    """The AWS twin: EFA carries no address, so the pairs ran over the management network, where the
    node's ENA port enp71s0 holds its address (the port the twin's fault throttles)."""
    node = _ar_node({"ip -j -4 addr show": IP_4_ADDR_SHOW})
    with pytest.raises(AssertionError, match=r"pair all-reduce busbw with gpu-2 0\.002 GB/s"):
        _suite("test_allreduce").test_allreduce_pairs(node, SimpleNamespace(pair_search=lambda: _pair_data(
            "10.81.0.0/24")))
    assert node.figures["interface"] == "enp71s0"
    assert node.steps("GC-AR-003")[1].startswith("On gpu-1 look at `ip -s link show enp71s0`")


def test_a_node_that_lost_its_fabric_address_is_pointed_at_its_fabric_interface() -> None:
    node = _ar_node({"ip -j -4 addr show": "[]"}, fabric_interface="ibp24s0")
    with pytest.raises(AssertionError):
        _suite("test_allreduce").test_allreduce_pairs(node, SimpleNamespace(pair_search=lambda: _pair_data(
            "10.82.0.0/16")))
    assert node.figures["interface"] == "ibp24s0"
    # On another network, where it holds no address either, nothing is guessed.
    elsewhere = _ar_node({"ip -j -4 addr show": "[]"}, fabric_interface="ibp24s0")
    with pytest.raises(AssertionError):
        _suite("test_allreduce").test_allreduce_pairs(elsewhere, SimpleNamespace(pair_search=lambda: _pair_data(
            "10.81.0.0/24")))
    assert "interface" not in elsewhere.figures
    assert "`ip -s link show <the node's fabric interface" in elsewhere.steps("GC-AR-003")[1]


def _port(name: str, address: str | None) -> dict[str, Any]:
    """One link of ``ip -j -4 addr show`` (its shape as in IP_4_ADDR_SHOW); ``address`` None: no IPv4."""
    addr = [{"family": "inet", "local": address, "prefixlen": 24, "scope": "global", "label": name,
             "valid_life_time": 4294967295, "preferred_life_time": 4294967295}] if address else []
    return {"ifindex": 5, "ifname": name, "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"], "mtu": 4220,
            "qdisc": "noqueue", "operstate": "UP", "group": "default", "txqlen": 1000, "addr_info": addr}


def test_over_the_ports_the_provider_addresses_the_node_is_pointed_at_its_port_without_an_address() -> None:
    """The OCI twin's fault: the pairs ran over rdma0..rdma2 by name, and gpu-1's rdma0 lost OCI's
    address. The next steps name rdma0, not the first port that still holds one (rdma1)."""
    import json

    data = {**_pair_data("192.168.0.0/16,10.224.0.0/12"), "ports": "rdma0,rdma1,rdma2"}
    lost = json.dumps([_port("eth0", "10.81.0.10"), _port("rdma0", None), _port("rdma1", "192.168.1.10"),
                       _port("rdma2", "192.168.2.10")])
    node = _ar_node({"ip -j -4 addr show": lost})
    with pytest.raises(AssertionError):
        _suite("test_allreduce").test_allreduce_pairs(node, SimpleNamespace(pair_search=lambda: data))
    assert node.figures["interface"] == "rdma0"
    # Every port addressed (slow for another reason): no one port to name, nothing guessed.
    whole = json.dumps([_port("eth0", "10.81.0.10"), *(_port(f"rdma{i}", f"192.168.{i}.10") for i in range(3))])
    slow = _ar_node({"ip -j -4 addr show": whole})
    with pytest.raises(AssertionError):
        _suite("test_allreduce").test_allreduce_pairs(slow, SimpleNamespace(pair_search=lambda: data))
    assert "interface" not in slow.figures


def test_unaddressed_ports_reads_ip_output() -> None:
    links = [_port("rdma0", "10.0.0.1"), _port("rdma1", "192.168.1.10"), _port("rdma2", None)]
    assert unaddressed_ports(links, "rdma0,rdma1,rdma2,rdma3", "192.168.0.0/16") == ["rdma0", "rdma2", "rdma3"]
    assert unaddressed_ports(links, "rdma1", "192.168.0.0/16,10.224.0.0/12") == []


def test_pairs_run_rail_by_rail_name_the_nodes_netdev_on_the_failing_rail() -> None:
    names = ["gpu-1", "gpu-2", "gpu-3"]
    pairs = [("gpu-1", "gpu-2"), ("gpu-2", "gpu-3"), ("gpu-3", "gpu-1")]
    per_rail = {"enp16s0np0": [PairResult(a, b, True, 0.3) for a, b in pairs],
                "enp32s0np0": [PairResult(a, b, "gpu-1" not in (a, b), 0.3 if "gpu-1" not in (a, b) else 0.002)
                               for a, b in pairs]}
    search, per = rail_search(names, per_rail)
    data = {**_pair_data(""), "search": search.to_json(), "rails": {k: v.to_json() for k, v in per.items()},
            "floor_key": "allreduce_rail_busbw_gbps"}
    node = _ar_node({}, rails=_rails("enp16s0np0", "ens7"))
    with pytest.raises(AssertionError, match="on rail"):
        _suite("test_allreduce").test_allreduce_pairs(node, SimpleNamespace(pair_search=lambda: data))
    assert node.figures["interface"] == "ens7"
    assert node.ran == []  # the rail says it: no command


def test_a_healthy_node_records_no_interface_and_runs_nothing() -> None:
    node = _ar_node({"ip -j -4 addr show": IP_4_ADDR_SHOW})
    node.name = "gpu-2"
    _suite("test_allreduce").test_allreduce_pairs(node, SimpleNamespace(pair_search=lambda: _pair_data(
        "10.81.0.0/24")))
    assert "interface" not in node.figures and node.ran == []


def test_interface_on_reads_ip_output() -> None:
    import json

    links = json.loads(IP_4_ADDR_SHOW)
    assert interface_on(links, "10.81.0.0/24") == "enp71s0"
    assert interface_on(links, "10.5.2.0/24,10.82.0.0/16") == "ibp24s0"
    assert interface_on(links, "192.168.0.0/16") is None
