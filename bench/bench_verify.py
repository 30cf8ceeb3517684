"""`gpucluster verify --no-burn` wall time on 3 and 8 lab nodes (target: under 60 s for 8), and the
CPU all-reduce bus bandwidth on the lab fabric next to iperf3's throughput on the same fabric.

Needs root (it boots labs `bench3`/`bench8`, CIDRs 10.84.x/10.85.x, and removes them after).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
GC = [sys.executable, "-m", "gpucluster"]


def _stack(name: str, count: int, octet: int, folder: Path) -> Path:
    doc = {"config": {
        "gpucluster:name": name,
        "gpucluster:target": {"kind": "lab", "boot_timeout_s": 300},
        "gpucluster:node_pools": [{"name": "gpu", "count": count, "roles": ["gpu"], "profile": "cpu-lab"}],
        "gpucluster:fabric": {"type": "ethernet", "mtu": 9000, "management_cidr": f"10.{octet}.0.0/24",
                              "fabric_cidr": f"10.{octet}.1.0/24"},
    }}
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _gc(*args: str, timeout: int = 3600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GC, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False)


def _iperf(stack: Path, inv: dict[str, object]) -> float | None:
    hosts = inv["all"]["hosts"]  # type: ignore[index]
    names = list(hosts)[:2]
    server_ip = hosts[names[1]]["gpucluster_fabric_ip"]
    ssh = ["lab", "ssh", "--stack", str(stack)]
    _gc(*ssh, names[1], "--", "sh", "-c", "iperf3 -s -D -1", timeout=60)
    time.sleep(1)
    res = _gc(*ssh, names[0], "--", "iperf3", "-c", server_ip, "-t", "5", "-J", timeout=120)
    try:
        return float(json.loads(res.stdout)["end"]["sum_received"]["bits_per_second"]) / 8e9
    except (ValueError, KeyError):
        return None


def measure(count: int, octet: int, folder: Path) -> dict[str, object]:
    stack = _stack(f"bench{count}", count, octet, folder)
    out: dict[str, object] = {"nodes": count}
    try:
        up = _gc("lab", "up", "--stack", str(stack))
        conv = _gc("converge", "--stack", str(stack)) if up.returncode == 0 else up
        if conv.returncode != 0:
            out["error"] = (conv.stderr or conv.stdout).strip().splitlines()[-1:]
            return out
        run_dir = folder / f"run{count}"
        started = time.perf_counter()
        v = _gc("verify", "--stack", str(stack), "--no-burn", "--run-dir", str(run_dir), "--json")
        out["verify_wall_s"] = round(time.perf_counter() - started, 2)
        out["verify_exit"] = v.returncode
        data = json.loads((run_dir / "results.json").read_text())
        inter = json.loads((run_dir / "fabric" / "inter_node.json").read_text())
        pts = inter.get("run", {}).get("points", [])
        out["allreduce_busbw_gbps_largest"] = pts[-1]["busbw_gbps"] if pts else None
        out["verdicts"] = {v["node"]: v["verdict"] for v in data["verdicts"]}
        inv = yaml.safe_load(Path(f"/var/lib/gpucluster/lab/bench{count}/inventory.yml").read_text())
        out["iperf3_gbytes_per_s"] = _iperf(stack, inv)
    finally:
        _gc("lab", "down", "--stack", str(stack))
    return out


def run() -> dict[str, object]:
    if os.geteuid() != 0:
        return {"target": "verify < 60 s on 8 lab nodes", "met": False, "skipped": "needs root"}
    with tempfile.TemporaryDirectory() as tmp:
        r3 = measure(3, 84, Path(tmp))
        r8 = measure(8, 85, Path(tmp))
    wall8 = r8.get("verify_wall_s")
    return {"target": "verify --no-burn < 60 s on 8 lab nodes", "met": isinstance(wall8, float) and wall8 < 60,
            "three": r3, "eight": r8}
