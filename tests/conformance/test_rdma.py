"""RDMA write bandwidth between node pairs, per HCA (GC-RDMA-001) and per GPU/HCA pair from GPU memory
(GC-RDMA-002), then the HCA port counters over the fabric measurements (GC-IB-002, last: after the
GPUDirect RDMA, all-reduce and ib_write_bw checks)."""

from __future__ import annotations

import pytest

from gpucluster.conformance import acceptance as acc
from gpucluster.conformance import expect, run_ib_write_bw
from gpucluster.conformance.fabric import PAIR_STATUS_REASON, fault_key
from gpucluster.conformance.pairs import PairSearch
from gpucluster.conformance.rdma_checks import IB_COUNTER_DUMP, compute_hcas, gdr_pairs, gdr_peer, run_gdr_pair
from gpucluster.conformance.remote import TaggedRemote, kill_measurement, new_measurement_tag
from gpucluster.parsers import parse_run, sysfs
from gpucluster.render.nccl import gid_index

pytestmark = pytest.mark.gpu


@pytest.mark.check("GC-RDMA-001")
def test_ib_write_bw(node, fabric):
    """ib_write_bw between this node and a peer MUST reach the platform's floor on every compute HCA."""
    node.require_hcas()
    if node.info.floor("rdma_write_bw_gbps") is None:
        pytest.skip(f"platform {node.info.platform_name} sets no rdma_write_bw floor")
    data = fabric.rdma()
    if "skip" in data:
        pytest.skip(data["skip"])
    search = PairSearch.from_json(data["search"])
    mine = search.nodes[node.name]
    node.figure("rdma_floor_gbps", node.info.floor("rdma_write_bw_gbps"))
    for p in mine.pairs:
        node.figure(f"min_hca_gbps_{p['peer']}", p["busbw_gbps"])
    if mine.status == "untested":
        pytest.skip(mine.message)
    if mine.status != "ok":
        node.cause(fault_key(search, node.name))
    # Each failing pair's own message holds its per-HCA figures (Gb/s) and the floor.
    assert mine.status == "ok", ("ib_write_bw " + "; ".join(p["message"] for p in mine.pairs if not p["ok"])
                                 + f": {PAIR_STATUS_REASON.get(mine.status, mine.message)}")


GDR_SECONDS = 5


def _topology(remote) -> dict | None:
    """``nvidia-smi topo -m`` parsed (its matrix and NIC Legend), or None where it cannot be read:
    which compute HCA sits nearest each GPU."""
    res = remote.run("timeout 60 nvidia-smi topo -m 2>&1", timeout=90)
    parsed = parse_run("nvidia-smi", res.stdout, res.rc)
    return parsed if parsed.get("kind") == "topo" and parsed.get("status") == "ok" else None


def _gdr_ready(remote) -> tuple[str | None, bool]:
    """(why this node cannot run ib_write_bw from GPU memory, or None; whether it needs DMA-BUF)."""
    res = remote.run("command -v ib_write_bw >/dev/null 2>&1 || { echo missing; exit 0; }; "
                     "ib_write_bw --help 2>&1 | grep -q use_cuda && echo cuda; "
                     "test -d /sys/module/nvidia_peermem && echo peermem; true", timeout=30)
    if res.rc != 0:
        return f"{remote.name} could not be asked about ib_write_bw (exit {res.rc}): {res.stderr.strip()[-200:]}", False
    said = set(res.stdout.split())
    if "missing" in said:
        return f"{remote.name}: ib_write_bw is not installed", False
    if "cuda" not in said:
        return f"{remote.name}: ib_write_bw is built without CUDA (no --use_cuda): perftest with CUDA is needed", False
    return None, "peermem" not in said


@pytest.mark.check("GC-RDMA-002")
def test_gpudirect_rdma(node, fabric):
    """ib_write_bw with GPU memory (--use_cuda) MUST reach the platform's RDMA write floor for every GPU and HCA pair."""  # noqa: E501
    node.require_gpus()
    node.require_hcas()
    floor = node.info.floor("rdma_write_bw_gbps")
    if floor is None:
        pytest.skip(f"platform {node.info.platform_name} states no rdma_write_bw_gbps floor")
    # GC-RDMA-001's ring over the same nodes: GPU nodes with HCAs and an RDMA floor.
    # The nodes the fabric measures among: those that answered the session's probe.
    peers = [n for n in fabric.inv.in_groups(("gpu",)) if n.gpu_count and n.hca_count
             and n.floor("rdma_write_bw_gbps") is not None]
    peer_name = gdr_peer([n.name for n in peers], node.name)
    if peer_name is None:
        pytest.skip(f"{len(peers)} node(s) with GPUs, HCAs and an RDMA floor: GPUDirect RDMA needs a peer")
    peer = next(n for n in peers if n.name == peer_name)

    def measure() -> dict:
        here, there = fabric.remote(node.name), fabric.remote(peer.name)
        why, dmabuf = _gdr_ready(here)
        why_peer, dmabuf_peer = _gdr_ready(there)
        if why or why_peer:
            return {"skip": why or why_peer}
        pairs = gdr_pairs(min(node.info.gpu_count, peer.gpu_count),
                          compute_hcas(node.info.platform, run_ib_write_bw.list_hcas(here)),
                          compute_hcas(peer.platform, run_ib_write_bw.list_hcas(there)),
                          _topology(here), _topology(there))
        if not pairs:
            return {"skip": f"no compute HCA of platform {node.info.platform_name} under {_IB} on both nodes"}
        runs = []
        for gpu, hca, peer_hca in pairs:
            tag = new_measurement_tag()
            run = run_gdr_pair(TaggedRemote(there, tag), TaggedRemote(here, tag), str(peer.fabric_ip or peer.address),
                               gpu, hca, peer_hca, (dmabuf_peer, dmabuf), GDR_SECONDS,
                               gid_index(node.inv.fabric, node.info.platform))
            kill_measurement([here, there], tag)
            runs.append({**run, "peer": peer.name})
        return {"runs": runs}

    # Under the fabric lock, as every measurement between nodes: one at a time, so no other pair's
    # traffic shares these GPUs and HCAs; about (GDR_SECONDS + 5) s per GPU, each run bounded.
    # Both nodes' GPUs are held first: a burn or DCGM run on the peer (another worker's check)
    # would otherwise read as this pair's slow GPUDirect figure.
    data = fabric.cached(f"gdr-{node.name}", measure, hold=[node.name, peer.name])
    if "skip" in data:
        pytest.skip(data["skip"])
    node.figure("rdma_floor_gbps", float(floor))
    for run in data["runs"]:
        node.figure(f"gdr_gbps_gpu{run['gpu']}_{run['hca']}", run.get("peak_gbps"))
    problems = acc.gdr_problems(data["runs"], float(floor))
    assert not problems, "; ".join(problems)


_IB = "/sys/class/infiniband"


@pytest.mark.check("GC-IB-002")
def test_hca_port_counters(node, fabric):
    """Every HCA port MUST show zero symbol errors, link-downed events and receive errors, with none rising during the run."""  # noqa: E501
    node.require_hcas()
    try:
        compute = {d for r in expect.compute_rails(node.info) for d in r.device_names()}
    except expect.Unstated as exc:
        pytest.skip(str(exc))
    after = [p for p in sysfs.ib_ports(sysfs.readings(node.run(IB_COUNTER_DUMP, timeout=60).stdout))
             if not compute or p.hca in compute]
    if not after:
        pytest.skip(f"no compute HCA port counters under {_IB}")
    # The baseline: every HCA node's reading taken by the session's first measurement between nodes,
    # before it moved traffic (Fabric.counter_baseline); without one (no such measurement ran, e.g.
    # deselected) the ports are judged on this reading alone, and the message says so.
    first = fabric.counter_baseline(node.name)
    before = [p for p in sysfs.ib_ports(sysfs.readings(first)) if not compute or p.hca in compute] if first else []
    problems = acc.ib_counter_problems(before, after)
    window = "" if first else " (one reading: no baseline from before the fabric measurements this session)"
    assert not problems, "; ".join(problems) + window
