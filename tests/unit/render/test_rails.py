"""gpucluster.render.rails: what the fabric_rails role writes and GC-RAIL-001 reads back.

The iproute2 JSON below is iproute2 6.1.0's own output (Debian 12, the lab's nodes), captured from
a veth addressed, ruled and routed as the role's network file configures a rail."""

from __future__ import annotations

import json

import pytest

from gpucluster.render.rails import RAIL_SYSCTLS, rail_problems, rail_settings, rail_sysctl_lines
from gpucluster.spec.cluster import NodeRail

RAILS = [NodeRail("enp16s0np0", "10.5.2.10", "10.5.2.0/24"), NodeRail("enp32s0np0", "10.5.3.10", "10.5.3.0/24")]


def _rail(interface: str = "enp16s0np0", address: str = "10.5.2.10", cidr: str = "10.5.2.0/24") -> NodeRail:
    """A rail the renderer gets unchecked (the spec's plain NodeRail), for its own refusals."""
    return NodeRail(interface, address, cidr)

# `ip -j -4 rule show`, `ip -j -4 route show table 1000`, `ip -j addr show dev enp16s0np0`.
RULES = json.loads('[{"priority":0,"src":"all","table":"local"},{"priority":1000,"src":"10.5.2.10","table":"1000",'
                   '"protocol":"static"},{"priority":1001,"src":"10.5.3.10","table":"1001","protocol":"static"},'
                   '{"priority":32766,"src":"all","table":"main"},{"priority":32767,"src":"all","table":"default"}]')
ROUTES = json.loads('[{"dst":"10.5.2.0/24","dev":"enp16s0np0","scope":"link","prefsrc":"10.5.2.10","flags":[]}]')
LINK = json.loads(
    '[{"ifindex":3,"link":"d1","ifname":"enp16s0np0","flags":["BROADCAST","MULTICAST","UP","LOWER_UP"],"mtu":9000,'
    '"qdisc":"noqueue","operstate":"UP","group":"default","txqlen":1000,"link_type":"ether",'
    '"address":"e2:2a:6f:56:a5:f6","broadcast":"ff:ff:ff:ff:ff:ff","addr_info":[{"family":"inet","local":"10.5.2.10",'
    '"prefixlen":24,"scope":"global","label":"enp16s0np0","valid_life_time":4294967295,'
    '"preferred_life_time":4294967295},{"family":"inet6","local":"fe80::e02a:6fff:fe56:a5f6","prefixlen":64,'
    '"scope":"link","tentative":true,"valid_life_time":4294967295,"preferred_life_time":4294967295}]}]')[0]


def test_each_rail_gets_its_own_table_and_rule_in_order() -> None:
    got = rail_settings(RAILS, 9000)
    assert [(r["interface"], r["address"], r["prefixlen"], r["table"], r["priority"], r["mtu"]) for r in got] == [
        ("enp16s0np0", "10.5.2.10", 24, 1000, 1000, 9000), ("enp32s0np0", "10.5.3.10", 24, 1001, 1001, 9000)]
    assert got[0]["sysctls"] == {"accept_local": "1", "arp_announce": "2", "arp_ignore": "2", "rp_filter": "2"}


def test_sysctl_lines_name_each_rail() -> None:
    lines = rail_sysctl_lines(RAILS, 9000)
    assert len(lines) == 2 * len(RAIL_SYSCTLS)
    assert "net/ipv4/conf/enp32s0np0/rp_filter = 2" in lines and "net/ipv4/conf/enp16s0np0/arp_ignore = 2" in lines
    # A VLAN rail keeps its dot: the slash form does not read it as a separator.
    vlan = rail_sysctl_lines([_rail(interface="enp16s0np0.100")], 9000)
    assert "net/ipv4/conf/enp16s0np0.100/rp_filter = 2" in vlan


@pytest.mark.parametrize(("rails", "match"), [
    ([_rail(interface="bad/name")], "not an interface name"),
    ([_rail(interface="enp16s0np0.1000x")], "not an interface name"),
    ([_rail(interface="r0", address="10.5.9.10")], "not a host address"),
    ([_rail(interface="r0", address="10.5.2.0")], "not a host address"),
    ([RAILS[0], _rail(address="10.5.3.10", cidr="10.5.3.0/24")], "named twice"),
])
def test_a_rail_that_cannot_be_configured_is_refused(rails, match) -> None:
    with pytest.raises(ValueError, match=match):
        rail_settings(rails, 9000)


def test_a_configured_rail_has_no_problems() -> None:
    want = rail_settings(RAILS, 9000)[0]
    assert rail_problems(want, LINK, RULES, ROUTES, dict(RAIL_SYSCTLS)) == []


@pytest.mark.parametrize(("change", "expect"), [
    (lambda link, rules, routes, sysctls: link.update(mtu=1500), "MTU 1500, the spec says 9000"),
    (lambda link, rules, routes, sysctls: link.update(operstate="DOWN", flags=["BROADCAST"]), "link DOWN"),
    (lambda link, rules, routes, sysctls: link["addr_info"].pop(0), "no address 10.5.2.10/24"),
    (lambda link, rules, routes, sysctls: rules.pop(1), "no rule 'from 10.5.2.10 lookup 1000'"),
    (lambda link, rules, routes, sysctls: routes.clear(), "table 1000 has no route to 10.5.2.0/24"),
    (lambda link, rules, routes, sysctls: sysctls.update(rp_filter="1"), "rp_filter = 1, expected 2"),
])
def test_each_difference_is_named(change, expect) -> None:
    link, rules, routes = json.loads(json.dumps(LINK)), json.loads(json.dumps(RULES)), json.loads(json.dumps(ROUTES))
    sysctls = dict(RAIL_SYSCTLS)
    change(link, rules, routes, sysctls)
    problems = rail_problems(rail_settings(RAILS, 9000)[0], link, rules, routes, sysctls)
    assert any(expect in p for p in problems), problems
    assert all(p.startswith("enp16s0np0: ") for p in problems)


# `ip -j -4 route get 10.5.2.1 from 10.5.2.10` (iproute2 6.1.0): by the rail's table, and the
# answer where an earlier rule sends the same traffic out by the main table's default route.
ROUTE_GET = json.loads('[{"dst":"10.5.2.1","from":"10.5.2.10","dev":"enp16s0np0","table":"1000","flags":[],"uid":0,'
                       '"cache":[]}]')
ROUTE_GET_ELSEWHERE = json.loads('[{"dst":"10.5.2.1","from":"10.5.2.10","gateway":"192.0.2.1","dev":"eth0","flags":[],'
                                 '"uid":0,"cache":[]}]')


def test_the_kernels_way_out_from_a_rail_address_is_the_rail() -> None:
    want = rail_settings(RAILS, 9000)[0]
    assert want["probe"] == "10.5.2.1"
    assert rail_problems(want, LINK, RULES, ROUTES, dict(RAIL_SYSCTLS), ROUTE_GET) == []
    assert rail_problems(want, LINK, RULES, ROUTES, dict(RAIL_SYSCTLS), ROUTE_GET_ELSEWHERE) == [
        "enp16s0np0: traffic from 10.5.2.10 to 10.5.2.1 leaves by eth0, not enp16s0np0"]
    assert rail_problems(want, LINK, RULES, ROUTES, dict(RAIL_SYSCTLS), []) == [
        "enp16s0np0: traffic from 10.5.2.10 to 10.5.2.1 leaves by no route, not enp16s0np0"]


def test_the_probe_is_never_the_nodes_own_address() -> None:
    assert rail_settings([_rail(address="10.5.2.1")], 9000)[0]["probe"] == "10.5.2.2"


def test_a_missing_interface_is_named() -> None:
    assert rail_problems(rail_settings(RAILS, 9000)[1], None, RULES, [], {}) == ["enp32s0np0: no such interface"]
