"""Compute rails (GC-RAIL): each addressed rail configured as the fabric_rails role renders it, and
every rail carrying full-size frames to every peer. Bandwidth per rail is GC-AR-003's pair search,
run once per rail where the platform sets a per-rail floor."""

from __future__ import annotations

import json

import pytest

from gpucluster.conformance.fabric import rail_netdev
from gpucluster.conformance.pairs import PairSearch, node_on_rails, rail_status_text
from gpucluster.render.rails import rail_problems, rail_settings


def _no_rails(node) -> str:
    return (f"the inventory lists no addressed compute rails for this node (platform {node.info.platform_name}: "
            "its rails are addressed by the provider or the site)")


@pytest.mark.check("GC-RAIL-001")
@pytest.mark.gpu
def test_rails_configured(node):
    """Every addressed compute rail MUST be up at the fabric MTU with its address, its own routing table and source rule, and the multi-NIC ARP and reverse-path settings."""  # noqa: E501
    if not node.info.rails:
        pytest.skip(_no_rails(node))
    want = rail_settings(node.info.rails, node.inv.fabric.mtu)
    rules = node.run("ip -j -4 rule show")
    assert rules.rc == 0, f"ip rule: {rules.stderr.strip()}"
    problems = []
    failed = []
    for rail in want:
        name = rail["interface"]
        link = node.run(f"ip -j addr show dev {name}")
        routes = node.run(f"ip -j -4 route show table {rail['table']}")
        way = node.run(f"ip -j -4 route get {rail['probe']} from {rail['address']}")
        keys = " ".join(sorted(rail["sysctls"]))
        sysctl = node.run(f"cd /proc/sys/net/ipv4/conf/{name} 2>/dev/null && "
                          f"for k in {keys}; do echo \"$k $(cat $k)\"; done")
        values = dict(line.split(" ", 1) for line in sysctl.stdout.splitlines() if " " in line)
        entry = json.loads(link.stdout)[0] if link.rc == 0 and link.stdout.strip() else None
        if entry is not None:
            node.figure(f"mtu_{name}", entry.get("mtu"))
        # A table that does not exist yet is "no route", not an error of the check.
        found = rail_problems(rail, entry, json.loads(rules.stdout or "[]"),
                              json.loads(routes.stdout or "[]") if routes.rc == 0 else [], values,
                              json.loads(way.stdout or "[]") if way.rc == 0 else [])
        problems += found
        if found:
            failed.append(name)
    node.figure("rails", len(want))
    if failed:
        node.figure("failed_rails", failed)  # what the report's next steps name (remedies.subject)
    assert not problems, "; ".join(problems)


@pytest.mark.check("GC-RAIL-002")
@pytest.mark.gpu
def test_rails_reach_every_peer(node, fabric):
    """A do-not-fragment ping at the fabric MTU MUST pass to and from every peer on every compute rail, or the failure is another node's."""  # noqa: E501
    if not node.info.rails:
        pytest.skip(_no_rails(node))
    data = fabric.rail_reachability()
    if "skip" in data:
        pytest.skip(data["skip"])
    search = PairSearch.from_json(data["search"])
    mine = search.nodes.get(node.name)
    if mine is None:
        pytest.skip("this node shares no rail with the other nodes")
    on_rails = node_on_rails(data["rails"], node.name)
    node.figure("rail_status", rail_status_text(on_rails))
    if mine.status == "untested":
        pytest.skip(mine.message)
    if mine.status == "ok":
        return
    lost = "; ".join(p["message"] for p in mine.pairs if not p["ok"])
    on = sorted(rail for rail, m in on_rails.items() if m.status not in ("ok", "untested"))
    # The node's own netdev on each: a rail is named by its index where the nodes name it apart.
    if on:
        node.figure("failed_rails", [rail_netdev(node.info, list(data["rails"]), rail) for rail in on])
    why = {
        "slow": "lost to and from every peer, while the peers reach each other",
        "pair_slow": "lost between the only two nodes: cannot tell which end (neither is blamed alone)",
        "suspect": "lost with some peers that reach the others: the path between them",
        "undetermined": "lost with every peer, and no peer is proven good: cannot single out a node",
    }.get(mine.status, mine.message)
    pytest.fail(f"full-size frames ({data['mtu']} bytes, don't fragment) on rail(s) {', '.join(on)} {why} ({lost})",
                pytrace=False)
