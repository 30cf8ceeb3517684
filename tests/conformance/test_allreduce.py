"""All-reduce bus bandwidth (GC-AR): intra-node, inter-node (ring), and node pairs."""

from __future__ import annotations

import json

import pytest

from gpucluster.conformance import run_nccl_tests
from gpucluster.conformance.bandwidth import AllReduceRun, BandwidthVerdict, judge
from gpucluster.conformance.fabric import (
    PAIR_STATUS_REASON,
    fault_key,
    interface_on,
    rail_netdev,
    unaddressed_ports,
    verdict_sentence,
    verdict_size,
)
from gpucluster.conformance.pairs import PairSearch, node_on_rails, rail_status_text
from gpucluster.conformance.remote import quote

pytestmark = pytest.mark.gpu


def _series(run: AllReduceRun, v: BandwidthVerdict) -> dict:
    """The run's points, with the size its verdict reads from and, where its budget cut it, the
    largest size it reached."""
    return {"label": run.label, "points": [[p.size_bytes, p.busbw_gbps] for p in run.points],
            "verdict_bytes": v.verdict_bytes, "reached_bytes": v.reached_bytes, "budget_s": run.budget_s}


def _pinned(node, run: AllReduceRun) -> None:
    """Record what an NCCL figure was measured under beside the node's nccl.conf (an MPI run over CPU
    buffers, the lab's, takes no NCCL setting at all)."""
    if run.engine == "nccl-tests":
        node.figure("nccl_pinned", run_nccl_tests.pinned_text(run_nccl_tests.INTER_ENV, run_nccl_tests.INTER_PINNED))


def _measured_interface(node, data: dict, on: list[str]) -> str | None:
    """The node's interface its pair runs went over: its own netdev on the first rail that fell short
    where they ran rail by rail; where they ran over the ports the provider addresses, by name,
    those of the node's without an address in the provider's ranges (none: no one port to name);
    else the one holding its address on the network they ran on (read from the node; where it holds
    none there, the fabric interface that should, on the fabric's)."""
    if on:
        return rail_netdev(node.info, list(data["rails"]), on[0])
    networks = data.get("networks")
    if not networks:
        return None
    res = node.run("ip -j -4 addr show")
    links = json.loads(res.stdout or "[]") if res.rc == 0 else None
    if data.get("ports"):
        if links is None:
            return None
        return ",".join(unaddressed_ports(links, data["ports"], networks)) or None
    found = interface_on(links, networks) if links is not None else None
    if found is None and networks == node.inv.fabric.fabric_cidr:
        return node.info.fabric_interface
    return found


@pytest.mark.check("GC-AR-001")
def test_allreduce_intra(node, fabric):
    """The all-reduce bus bandwidth across all GPUs of the node MUST reach the profile's intra-node floor at large message sizes, with no wrong results."""  # noqa: E501
    node.require_gpus()
    floor = node.info.floor("allreduce_intra_busbw_gbps")
    if floor is None:
        pytest.skip(f"profile {node.info.profile_name} sets no intra-node all-reduce floor")
    bin_dir = node.info.contract.nccl_tests_bin_dir
    if node.run(f"test -x {quote([run_nccl_tests.binary(bin_dir)])}").rc != 0:
        pytest.fail(f"nccl-tests is not installed ({run_nccl_tests.binary(bin_dir)} missing)")
    large = verdict_size(node.info, "intra")
    with fabric.gpus_held([node.name]):  # no burn, DCGM or peer's GPUDirect run on these GPUs meanwhile
        run, _ = run_nccl_tests.run_intra(node.remote(), node.info.gpu_count, 2 * large, bin_dir)
    v = judge(run, float(floor), large)
    node.figure("busbw_gbps", v.busbw_gbps)
    node.figure("floor_gbps", v.floor_gbps)
    node.figure("series", [_series(run, v)])
    assert v.ok, verdict_sentence(f"the all-reduce across the node's {node.info.gpu_count} GPUs", run, v, large)


@pytest.mark.check("GC-AR-002")
def test_allreduce_inter(node, fabric):
    """The ring all-reduce bus bandwidth across all nodes, under each node's /etc/nccl.conf with NCCL_ALGO=Ring pinned (the algorithm the floor holds for), MUST reach the profile's inter-node floor at large message sizes, with no wrong results."""  # noqa: E501
    floor = node.info.floor("allreduce_inter_busbw_gbps")
    if floor is None:
        pytest.skip(f"profile {node.info.profile_name} sets no inter-node all-reduce floor")
    data = fabric.inter_node()
    if "skip" in data:
        pytest.skip(data["skip"])
    run = AllReduceRun.from_json(data["run"])
    verdict = int(data.get("verdict_bytes") or data["large_bytes"])
    v = judge(run, float(floor), verdict)
    node.figure("engine", run.engine)
    _pinned(node, run)
    node.figure("ranks", run.ranks)
    node.figure("busbw_gbps", v.busbw_gbps)
    node.figure("floor_gbps", v.floor_gbps)
    node.figure("series", [_series(run, v)])
    if data.get("log"):
        node.attach(data["log"])
    message = verdict_sentence(f"the ring all-reduce across {len(run.nodes)} nodes ({run.engine}, {run.ranks} ranks)",
                               run, v, verdict)
    if not v.ok:
        search = fabric.pair_search()
        found = PairSearch.from_json(search["search"]) if "search" in search else None
        slow = found.slow if found else []
        if slow and node.name not in slow:
            pytest.skip(f"{message}; attributed to the slow node(s) {', '.join(slow)} named by the pair search")
        node.cause(fault_key(found, node.name) if found else "fabric-ring")
        if found and node.name in slow:
            # The pair search's words for this node, which name the rail where it measured rail by rail.
            message += f"; pair search: {found.nodes[node.name].message}"
    assert v.ok, message


@pytest.mark.check("GC-AR-003")
def test_allreduce_pairs(node, fabric):
    """The node MUST NOT be the one its pair all-reduce results name slow: every pair it is in reaches the inter-node floor (under each node's /etc/nccl.conf with NCCL_ALGO=Ring pinned), or the shortfall is another node's."""  # noqa: E501
    if node.info.floor("allreduce_inter_busbw_gbps") is None:
        pytest.skip(f"profile {node.info.profile_name} sets no inter-node all-reduce floor")
    data = fabric.pair_search()
    if "skip" in data:
        pytest.skip(data["skip"])
    search = PairSearch.from_json(data["search"])
    mine = search.nodes[node.name]
    node.figure("pair_status", mine.status)
    for r in data["runs"][:1]:
        _pinned(node, AllReduceRun.from_json(r))
    # The pairs' floor: one rail's where the pairs ran rail by rail, else the inter-node floor.
    floor = float(node.info.floor(data.get("floor_key") or "allreduce_inter_busbw_gbps"))
    node.figure("floor_gbps", floor)
    for p in mine.pairs:
        node.figure(f"pair_busbw_gbps_{p['peer']}", p["busbw_gbps"])
    verdict = int(data.get("verdict_bytes") or verdict_size(node.info, "inter"))
    node.figure("series", [_series(run, judge(run, floor, verdict))
                           for run in (AllReduceRun.from_json(r) for r in data["runs"]) if node.name in run.nodes])
    for r in data["runs"]:
        if node.name in r["nodes"] and r["label"] in data.get("logs", {}):
            node.attach(data["logs"][r["label"]])
    if mine.status == "untested":
        pytest.skip(mine.message)
    # Measured rail by rail: which rails, and what each pair reached on them.
    rails = node_on_rails(data.get("rails"), node.name)
    if rails:
        node.figure("rail_status", rail_status_text(rails))
    on = [rail for rail, m in rails.items() if m.status != "ok" or any(not p["ok"] for p in m.pairs)]
    if mine.status != "ok":
        node.cause(fault_key(search, node.name))
        interface = _measured_interface(node, data, on)
        if interface:
            node.figure("interface", interface)  # what the report's next steps name (remedies.subject)
    if mine.status == "pair_slow":
        pytest.fail(mine.message, pytrace=False)

    def figure(p: dict) -> str:
        if p["busbw_gbps"] is None:
            return f"{p['peer']} not measured"
        at = f" at {p['reached_bytes']} B, its budget ended there" if p.get("reached_bytes") else ""
        return f"{p['peer']} {p['busbw_gbps']:.3g} GB/s{at}"

    low = ", ".join(figure(p) for p in mine.pairs if not p["ok"])
    where = f" on rail(s) {', '.join(on)}" if on else ""
    assert mine.status == "ok", (f"pair all-reduce busbw{where} with {low} < floor {floor:g} GB/s at >= {verdict} B: "
                                 f"{PAIR_STATUS_REASON.get(mine.status, mine.message)}")
