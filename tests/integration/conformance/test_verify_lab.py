"""`gpucluster verify` on a lab of its own (conf-lab.yaml: 3 GPU-role nodes, no GPU): healthy nodes
pass with GPU checks skipped-with-reason; each injected fault fails its check on that node only."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
STACK = HERE / "conf-lab.yaml"
INVENTORY = Path("/var/lib/gpucluster/lab/conf/inventory.yml")
GC = [sys.executable, "-m", "gpucluster"]

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (systemd-nspawn, network namespaces)"),
    pytest.mark.skipif(shutil.which("systemd-nspawn") is None, reason="systemd-nspawn is not installed"),
]


def gc(*args: str, timeout: int = 1200) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GC, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False)


def ssh(node: str, command: str) -> subprocess.CompletedProcess[str]:
    return gc("lab", "ssh", "--stack", str(STACK), node, "--", "sh", "-c", command, timeout=120)


@pytest.fixture(scope="module")
def lab():
    up = gc("lab", "up", "--stack", str(STACK))
    assert up.returncode == 0, up.stderr
    conv = gc("converge", "--stack", str(STACK), timeout=1800)
    assert conv.returncode == 0, conv.stdout[-2000:] + conv.stderr[-2000:]
    yield INVENTORY
    if os.environ.get("GPUCLUSTER_KEEP_LAB") != "1":
        gc("lab", "down", "--stack", str(STACK))


def verify(tmp_path: Path, name: str) -> tuple[int, dict]:
    run_dir = tmp_path / name
    res = gc("verify", "--inventory", str(INVENTORY), "--no-burn", "--run-dir", str(run_dir), "--json")
    assert res.returncode in (0, 1), res.stderr[-2000:]
    return res.returncode, json.loads((run_dir / "results.json").read_text())


def failing(data: dict) -> dict[str, list[str]]:
    return {v["node"]: [f["check"] for f in v["failed"]] for v in data["verdicts"] if v["verdict"] == "fail"}


def test_healthy_lab_passes_with_gpu_checks_skipped(lab, tmp_path):
    rc, data = verify(tmp_path, "healthy")
    assert failing(data) == {} and rc == 0
    for v in data["verdicts"]:
        skipped = {s["check"]: s["reason"] for s in v["skipped"]}
        assert "no GPU" in skipped["GC-GPU-001"] and "no HCA" in skipped["GC-RDMA-001"]
        assert {"GC-AR-002", "GC-AR-003", "GC-NET-002", "GC-SYS-002"} <= set(v["passed"])
    assert (tmp_path / "healthy" / "junit.xml").exists()
    assert "<svg" in (tmp_path / "healthy" / "summary.html").read_text()


def test_throttled_fabric_link_is_named_slow(lab, tmp_path):
    iface = "eth1"
    assert ssh("gpu-2", f"tc qdisc replace dev {iface} root tbf rate 200mbit burst 64kb latency 50ms").returncode == 0
    try:
        rc, data = verify(tmp_path, "throttled")
    finally:
        ssh("gpu-2", f"tc qdisc del dev {iface} root")
    assert rc == 1
    fails = failing(data)
    assert list(fails) == ["gpu-2"] and "GC-AR-003" in fails["gpu-2"]
    pairs = json.loads((tmp_path / "throttled" / "fabric" / "pair_search.json").read_text())
    assert pairs["search"]["slow"] == ["gpu-2"]


def test_wrong_mtu_fails_that_node_only(lab, tmp_path):
    assert ssh("gpu-3", "ip link set dev eth1 mtu 1500").returncode == 0
    try:
        rc, data = verify(tmp_path, "mtu")
    finally:
        ssh("gpu-3", "ip link set dev eth1 mtu 9000")
    assert rc == 1 and failing(data) == {"gpu-3": ["GC-NET-002"]}


def test_stopped_service_fails_its_check_only(lab, tmp_path):
    assert ssh("gpu-1", "systemctl stop prometheus-node-exporter").returncode == 0
    try:
        rc, data = verify(tmp_path, "service")
    finally:
        ssh("gpu-1", "systemctl start prometheus-node-exporter")
    assert rc == 1
    assert failing(data) == {"gpu-1": ["GC-SYS-003[prometheus-node-exporter]", "GC-SYS-004"]}
