"""Issue 24: every compute RoCE port of a DGX H100 in Ethernet mode carries its own IPv4 address
(its RoCEv2 GID at index 3 is made from it; data/platforms/dgx-h100-roce.yaml). One renderer
(gpucluster.render.rails) feeds the bare-metal network-config, the inventory's rails, the
fabric_rails role and GC-RAIL-001, so the site's netplan, the role and the check agree."""

from __future__ import annotations

import ipaddress
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.errors import InputError
from gpucluster.inventory import build_inventory
from gpucluster.outputs import OutputRail, parse_outputs
from gpucluster.render.rails import rail_problems, rail_settings
from gpucluster.seeds import node_seed
from gpucluster.spec import load_spec
from gpucluster.spec.cluster import rail_cidrs
from tests.unit.spec.test_invalid import _set

REPO = Path(__file__).resolve().parents[3]
ONPREM = REPO / "Pulumi.onprem-h100-roce.yaml"
TWIN = REPO / "Pulumi.twin-dgx-h100-roce.yaml"
PORTS = ["enp24s0np0", "enp64s0np0", "enp79s0np0", "enp94s0np0", "enp154s0np0", "enp192s0np0", "enp206s0np0",
         "enp220s0np0"]


def test_fabric_cidr_is_split_into_one_subnet_per_port() -> None:
    cluster = load_spec(ONPREM)
    assert rail_cidrs(cluster.spec, 8) == [f"10.20.{i // 2}.{128 * (i % 2)}/25" for i in range(8)]
    # Three ports take four subnets (a power of two); a port count fabric_cidr cannot hold is refused.
    assert rail_cidrs(cluster.spec, 3) == ["10.20.0.0/24", "10.20.1.0/24", "10.20.2.0/24"]
    with pytest.raises(ValueError, match="cannot be split into 512 rail subnets"):
        rail_cidrs(cluster.spec, 512)


@pytest.mark.parametrize("stack", [ONPREM, TWIN], ids=["onprem", "twin"])
def test_the_network_config_addresses_every_roce_port_in_its_own_subnet_at_the_mtu(stack: Path) -> None:
    cluster = load_spec(stack)
    for node in cluster.nodes_with_role("gpu"):
        config = yaml.safe_load(node_seed(cluster, node.name).files["network-config"])
        ports = {name: e for name, e in config["ethernets"].items() if name in PORTS}
        assert list(ports) == PORTS, node.name
        nets = set()
        for name, entry in ports.items():
            assert entry["match"] == {"name": name}
            assert entry["mtu"] == 9000
            (address,) = entry["addresses"]
            iface = ipaddress.IPv4Interface(address)
            assert iface.network.subnet_of(ipaddress.IPv4Network(cluster.spec.fabric.fabric_cidr))
            nets.add(iface.network)
        assert len(nets) == 8, node.name
        # Port 0 carries the node's fabric address (NCCL's socket interface, the all-reduce's oob).
        assert ports[PORTS[0]]["addresses"][0].split("/")[0] == node.fabric_ip


def test_the_inventory_rails_are_the_network_config_and_the_roles_rendering() -> None:
    cluster = load_spec(ONPREM)
    from gpucluster.plan import plan_cluster

    outputs = parse_outputs(plan_cluster(cluster).outputs, "plan")
    hosts = build_inventory(cluster, outputs)["all"]["hosts"]
    for node in cluster.nodes_with_role("gpu"):
        rails = hosts[node.name]["gpucluster_rails"]
        assert [r["interface"] for r in rails] == PORTS
        want = rail_settings([OutputRail.model_validate(r) for r in rails], cluster.spec.fabric.mtu)
        config = yaml.safe_load(node_seed(cluster, node.name).files["network-config"])
        rendered = {n: (e["addresses"][0], e["mtu"]) for n, e in config["ethernets"].items() if n in PORTS}
        assert rendered == {r["interface"]: (f"{r['address']}/{r['prefixlen']}", r["mtu"]) for r in want}
    for node in cluster.nodes_with_role("storage"):
        assert hosts[node.name]["gpucluster_rails"] == []


def _links(settings: list[dict[str, Any]], drop: str | None = None, mtu: int = 9000) -> list[dict[str, Any]]:
    out = [{"ifname": "mgmt0", "operstate": "UP", "flags": ["UP"], "mtu": 1500,
            "addr_info": [{"family": "inet", "local": "10.10.0.10", "prefixlen": 22}]}]
    for r in settings:
        addrs = [] if r["interface"] == drop else [{"family": "inet", "local": r["address"],
                                                     "prefixlen": r["prefixlen"]}]
        out.append({"ifname": r["interface"], "operstate": "UP", "flags": ["BROADCAST", "UP"], "mtu": mtu,
                    "addr_info": addrs})
    return out


def _judge(want: list[dict[str, Any]], links: list[dict[str, Any]]) -> list[str]:
    """GC-RAIL-001's verdict (gpucluster.render.rails.rail_problems, what the check runs per rail)
    over a node whose rules, routes and sysctls are as the fabric_rails role renders them, and
    whose links are ``links``: the one judge of every compute port's address and MTU."""
    by_name = {link["ifname"]: link for link in links}
    problems: list[str] = []
    for rail in want:
        name = rail["interface"]
        rules = [{"table": rail["table"], "src": rail["address"], "srclen": 32, "priority": rail["priority"]}]
        routes = [{"dst": rail["cidr"], "dev": name, "prefsrc": rail["address"]}]
        problems += rail_problems(rail, by_name.get(name), rules, routes, dict(rail["sysctls"]), [{"dev": name}])
    return problems


def test_gc_rail_001_fails_a_node_with_7_of_8_ports_addressed_naming_the_port() -> None:
    cluster = load_spec(ONPREM)
    node = cluster.node("hgx-02")
    want = rail_settings(node.rails, 9000)
    assert [r["interface"] for r in want] == PORTS
    assert _judge(want, _links(want)) == []
    assert _judge(want, _links(want, drop="enp154s0np0")) == ["enp154s0np0: no address 10.20.2.11/25 (has none)"]


def test_gc_rail_001_names_every_port_off_the_fabric_mtu() -> None:
    cluster = load_spec(ONPREM)
    want = rail_settings(cluster.node("hgx-01").rails, 9000)
    links = _links(want)
    links[3]["mtu"] = 1500
    assert _judge(want, links) == ["enp79s0np0: MTU 1500, the spec says 9000"]


StackFile = Callable[[str, Callable[[dict[str, Any]], None]], Path]


def test_a_fabric_cidr_too_small_for_a_subnet_per_port_is_refused(stack_file: StackFile) -> None:
    # /27 split 8 ways is /30: two hosts each, no room for host .10 of any node.
    with pytest.raises(InputError) as err:
        load_spec(stack_file("Pulumi.onprem-h100-roce.yaml", _set("fabric.fabric_cidr", "10.20.0.0/27")))
    assert any(p.startswith("gpucluster.fabric.fabric_cidr: platform 'dgx-h100-roce' has 8 compute ports, each in "
                            "its own subnet of fabric_cidr") for p in err.value.problems), err.value.problems
