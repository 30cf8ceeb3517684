"""`gpucluster verify` on the shared lab (`itest_lab`: 3 nodes, each a GPU-role node with no GPU
and a Ceph storage host): healthy nodes pass with GPU checks skipped-with-reason; each injected
fault fails its check on that node only, and is undone in `finally` before the next test."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.lab


def verify(lab, tmp_path: Path, name: str) -> tuple[int, dict]:
    run_dir = tmp_path / name
    t0 = time.monotonic()
    res = lab.gc("verify", "--inventory", str(lab.inventory), "--no-burn", "--run-dir", str(run_dir), "--json",
                 timeout=1200)
    lab.record(f"verify_{name}_s", time.monotonic() - t0)
    assert res.returncode in (0, 1), res.stderr[-2000:]
    return res.returncode, json.loads((run_dir / "results.json").read_text())


def failing(data: dict) -> dict[str, list[str]]:
    return {v["node"]: [f["check"] for f in v["failed"]] for v in data["verdicts"] if v["verdict"] == "fail"}


def test_healthy_lab_passes_with_gpu_checks_skipped(itest_lab, tmp_path):
    rc, data = verify(itest_lab, tmp_path, "healthy")
    assert failing(data) == {} and rc == 0
    assert {v["node"] for v in data["verdicts"]} == {"node-1", "node-2", "node-3"}
    for v in data["verdicts"]:
        skipped = {s["check"]: s["reason"] for s in v["skipped"]}
        assert "no GPU" in skipped["GC-GPU-001"] and "no HCA" in skipped["GC-RDMA-001"]
        assert {"GC-AR-002", "GC-AR-003", "GC-NET-002", "GC-SYS-002"} <= set(v["passed"])
    assert (tmp_path / "healthy" / "junit.xml").exists()
    assert "<svg" in (tmp_path / "healthy" / "summary.html").read_text()


def test_throttled_fabric_link_is_named_slow(itest_lab, tmp_path):
    iface = "eth1"
    assert itest_lab.ssh("node-2", f"tc qdisc replace dev {iface} root tbf rate 200mbit burst 64kb latency 50ms"
                         ).returncode == 0
    try:
        rc, data = verify(itest_lab, tmp_path, "throttled")
    finally:
        itest_lab.ssh("node-2", f"tc qdisc del dev {iface} root")
    assert rc == 1
    fails = failing(data)
    assert list(fails) == ["node-2"] and "GC-AR-003" in fails["node-2"]
    pairs = json.loads((tmp_path / "throttled" / "fabric" / "pair_search.json").read_text())
    assert pairs["search"]["slow"] == ["node-2"]


def test_wrong_mtu_fails_that_node_only(itest_lab, tmp_path):
    assert itest_lab.ssh("node-3", "ip link set dev eth1 mtu 1500").returncode == 0
    try:
        rc, data = verify(itest_lab, tmp_path, "mtu")
    finally:
        itest_lab.ssh("node-3", "ip link set dev eth1 mtu 9000")
    assert rc == 1 and failing(data) == {"node-3": ["GC-NET-002"]}


def test_stopped_service_fails_its_check_only(itest_lab, tmp_path):
    assert itest_lab.ssh("node-1", "systemctl stop prometheus-node-exporter").returncode == 0
    try:
        rc, data = verify(itest_lab, tmp_path, "service")
    finally:
        itest_lab.ssh("node-1", "systemctl start prometheus-node-exporter")
    assert rc == 1
    assert failing(data) == {"node-1": ["GC-SYS-003[prometheus-node-exporter]", "GC-SYS-004"]}
