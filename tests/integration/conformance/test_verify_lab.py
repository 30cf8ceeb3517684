"""`gpucluster verify` on the shared lab (`itest_lab`: 3 nodes, each a GPU-role node with no GPU
and a Ceph storage host): healthy nodes pass with GPU checks skipped-with-reason; each injected
fault fails its check on that node only, and is undone in `finally` before the next test.
Every run also publishes each node's textfile to node_exporter: the verdict metric is read back
from a node's own /metrics after the runs the tests make anyway (no extra verify run)."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from gpucluster.conformance.nodes import load_inventory

pytestmark = pytest.mark.lab


def verify(lab, tmp_path: Path, name: str) -> tuple[int, dict]:
    run_dir = tmp_path / name
    t0 = time.monotonic()
    res = lab.gc("verify", "--inventory", str(lab.inventory), "--no-burn", "--run-dir", str(run_dir), "--json",
                 timeout=1200)
    lab.record(f"verify_{name}_s", time.monotonic() - t0)
    assert res.returncode in (0, 1), res.stderr[-2000:]
    # --json: stdout is the JSON alone; what each long measurement does goes to stderr as it starts.
    json.loads(res.stdout)
    assert re.search(r"^verify: all-reduce pair node-\d/node-\d on enp\d+s0np0 \(mpi-cpu, sizes up to .*"
                     r"\(budget \d+ s\)$", res.stderr, re.M), res.stderr[-2000:]
    return res.returncode, json.loads((run_dir / "results.json").read_text())


def node_metrics(lab, node: str) -> str:
    """node_exporter's /metrics as the node itself reads it (it listens on the management address, on
    the port of the node's contract as the suite reads it: GC-SYS-004's)."""
    info = load_inventory(lab.inventory).node(node)
    url = f"http://{info.address}:{info.contract.node_exporter_port}/metrics"
    res = lab.ssh(node, "python3 -c \"import urllib.request as u; "
                        f"print(u.urlopen('{url}', timeout=5).read().decode())\"")
    assert res.returncode == 0, res.stderr[-1000:]
    return res.stdout


def assert_published_verdict(lab, data: dict, node: str, value: int) -> None:
    published = data["meta"]["textfile_publish"][node]
    assert published["ok"] and published["path"].endswith("/gpucluster_conformance.prom"), published
    metrics = node_metrics(lab, node)
    found = re.findall(rf'^gpucluster_conformance_pass{{cluster="itest",node="{node}"}} (\S+)$', metrics, re.M)
    assert found == [str(value)], f"verdict metric on {node}: {found}"
    assert re.search(r"^node_textfile_scrape_error 0$", metrics, re.M), "node_exporter could not read a textfile"


def failing(data: dict) -> dict[str, list[str]]:
    return {v["node"]: [f["check"] for f in v["failed"]] for v in data["verdicts"] if v["verdict"] == "fail"}


def test_healthy_lab_passes_with_gpu_checks_skipped(itest_lab, tmp_path):
    rc, data = verify(itest_lab, tmp_path, "healthy")
    assert failing(data) == {} and rc == 0
    assert {v["node"] for v in data["verdicts"]} == {"node-1", "node-2", "node-3", "(cluster)"}
    cluster = next(v for v in data["verdicts"] if v["node"] == "(cluster)")
    # No kubeconfig in the lab: the Kubernetes checks are the cluster's row, skipped with the reason.
    assert not cluster["failed"] and all("kubeconfig" in s["reason"] for s in cluster["skipped"]), cluster
    for v in data["verdicts"]:
        if v["node"] == "(cluster)":
            continue
        skipped = {s["check"]: s["reason"] for s in v["skipped"]}
        assert "no GPU" in skipped["GC-GPU-001"] and "no HCA" in skipped["GC-RDMA-001"]
        assert {"GC-AR-002", "GC-AR-003", "GC-NET-002", "GC-SYS-002", "GC-RAIL-001", "GC-RAIL-002"} <= set(v["passed"])
    assert (tmp_path / "healthy" / "junit.xml").exists()
    assert "<svg" in (tmp_path / "healthy" / "summary.html").read_text()
    assert_published_verdict(itest_lab, data, "node-1", 1)


# The lab's GPU nodes have two compute rails (Pulumi.itest.yaml leaves target.rails at its default).
RAIL = "enp32s0np0"


def test_throttled_rail_is_named_slow_on_that_node_and_rail(itest_lab, tmp_path):
    # A burst larger than the rail's 9000-byte frames: tbf drops a packet bigger than its burst.
    assert itest_lab.ssh("node-2", f"tc qdisc replace dev {RAIL} root tbf rate 200mbit burst 64kb latency 50ms"
                         ).returncode == 0
    try:
        rc, data = verify(itest_lab, tmp_path, "throttled")
    finally:
        itest_lab.ssh("node-2", f"tc qdisc del dev {RAIL} root")
    assert rc == 1
    fails = failing(data)
    assert list(fails) == ["node-2"] and "GC-AR-003" in fails["node-2"], fails
    assert not {"GC-RAIL-001", "GC-RAIL-002"} & set(fails["node-2"])
    pairs = json.loads((tmp_path / "throttled" / "fabric" / "pair_search.json").read_text())
    assert pairs["search"]["slow"] == ["node-2"]
    assert pairs["rails"][RAIL]["slow"] == ["node-2"] and pairs["rails"]["enp16s0np0"]["slow"] == []
    message = next(f["message"] for v in data["verdicts"] if v["node"] == "node-2"
                   for f in v["failed"] if f["check"] == "GC-AR-003")
    assert f"rail(s) {RAIL}" in message, message


def test_a_strongly_throttled_node_is_named_and_verify_stays_bounded(itest_lab, tmp_path):
    """20 Mbit/s on every compute rail of node-2 (its whole fabric): each measurement is bounded by its
    budget, so verify ends (its wall time is recorded with the session's timings; the <90 s target is
    bench/bench_slow_fabric.py's), and the verdict names node-2 alone, on both rails."""
    rails = ("enp16s0np0", RAIL)
    shape = "; ".join(f"tc qdisc replace dev {d} root tbf rate 20mbit burst 64kb latency 50ms" for d in rails)
    assert itest_lab.ssh("node-2", shape).returncode == 0
    try:
        rc, data = verify(itest_lab, tmp_path, "strong_throttle")
    finally:
        itest_lab.ssh("node-2", "; ".join(f"tc qdisc del dev {d} root" for d in rails))
    fails = failing(data)
    assert rc == 1 and list(fails) == ["node-2"] and "GC-AR-003" in fails["node-2"], fails
    pairs = json.loads((tmp_path / "strong_throttle" / "fabric" / "pair_search.json").read_text())
    assert pairs["search"]["slow"] == ["node-2"]
    assert all(pairs["rails"][r]["slow"] == ["node-2"] for r in rails), pairs["rails"]


def test_a_wrong_mtu_and_a_stopped_service_each_fail_their_own_checks_on_their_own_node_only(itest_lab, tmp_path):
    """Two faults on two nodes in one run: one rail of node-3 at MTU 1500 fails that node's rail
    checks, on that rail only; node_exporter stopped on node-1 fails its service check and its
    metrics check. The verdict must be exactly those, each on its node, so a fault that hid the
    other's findings, or raised any of its own elsewhere (the all-reduce and the rail pings read
    every node), fails the test."""
    assert itest_lab.ssh("node-3", f"ip link set dev {RAIL} mtu 1500").returncode == 0
    try:
        assert itest_lab.ssh("node-1", "systemctl stop prometheus-node-exporter").returncode == 0
        try:
            rc, data = verify(itest_lab, tmp_path, "mtu_service")
        finally:
            itest_lab.ssh("node-1", "systemctl start prometheus-node-exporter")
    finally:
        itest_lab.ssh("node-3", f"ip link set dev {RAIL} mtu 9000")
    assert rc == 1 and failing(data) == {"node-1": ["GC-SYS-003[prometheus-node-exporter]", "GC-SYS-004"],
                                         "node-3": ["GC-RAIL-001", "GC-RAIL-002"]}, failing(data)
    messages = {f["check"]: f["message"] for v in data["verdicts"] if v["node"] == "node-3" for f in v["failed"]}
    assert f"{RAIL}: MTU 1500, the spec says 9000" in messages["GC-RAIL-001"]
    assert "enp16s0np0" not in messages["GC-RAIL-001"] and f"rail(s) {RAIL}" in messages["GC-RAIL-002"]
    assert_published_verdict(itest_lab, data, "node-3", 0)
