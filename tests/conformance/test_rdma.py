"""RDMA write bandwidth between node pairs, per HCA (GC-RDMA)."""

from __future__ import annotations

import pytest

from gpucluster.conformance.fabric import PAIR_STATUS_REASON, fault_key
from gpucluster.conformance.pairs import PairSearch

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
    for p in mine.pairs:
        node.figure(f"min_hca_gbps_{p['peer']}", p["busbw_gbps"])
    if mine.status == "untested":
        pytest.skip(mine.message)
    if mine.status != "ok":
        node.cause(fault_key(search, node.name))
    # Each failing pair's own message holds its per-HCA figures (Gb/s) and the floor.
    assert mine.status == "ok", ("ib_write_bw " + "; ".join(p["message"] for p in mine.pairs if not p["ok"])
                                 + f": {PAIR_STATUS_REASON.get(mine.status, mine.message)}")
