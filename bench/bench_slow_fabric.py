"""`gpucluster verify --no-burn` on 3 lab GPU nodes, one of them throttled on its fabric link with
tc tbf to ~20 Mbit/s: the wall time (target: under 90 s, every measurement bounded by its budget)
and the verdict it gave (it must name the throttled node slow).

Needs root (it boots lab `benchslow`, CIDRs 10.86.x, state under /tmp). Run it under the lab lock:
``flock /tmp/gpucluster-lab.lock python bench/run.py slow_fabric``. The throttle is removed and the
lab brought down in ``finally``, also when a step fails; GPUCLUSTER_BENCH_KEEP_LAB=1 keeps the lab
(never the throttle). Run folders stay in ``runs/bench-slow-fabric-<UTC time>/``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[1]
GC = [sys.executable, "-m", "gpucluster"]
STATE_DIR = Path(os.environ.get("GPUCLUSTER_BENCH_STATE_DIR", "/tmp/gpucluster-bench-lab"))
NAME = "benchslow"
TARGET_S = 90.0
THROTTLED = "gpu-2"
FABRIC_IF = "eth1"
RATE = "20mbit"


def _stack(folder: Path) -> Path:
    doc = {"config": {
        "gpucluster:name": NAME,
        "gpucluster:target": {"kind": "lab", "boot_timeout_s": 300, "state_dir": str(STATE_DIR)},
        "gpucluster:node_pools": [{"name": "gpu", "count": 3, "roles": ["gpu"], "profile": "cpu-lab"}],
        "gpucluster:fabric": {"type": "ethernet", "mtu": 9000, "management_cidr": "10.86.0.0/24",
                              "fabric_cidr": "10.86.1.0/24"},
    }}
    path = folder / f"Pulumi.{NAME}.yaml"
    path.write_text(yaml.safe_dump(doc))
    return path


def _gc(*args: str, timeout: int = 3600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*GC, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False)


def _tail(proc: subprocess.CompletedProcess[str], n: int = 8) -> list[str]:
    return (proc.stderr or proc.stdout or "").strip().splitlines()[-n:]


def _ssh(stack: Path, node: str, command: str) -> subprocess.CompletedProcess[str]:
    # `lab ssh` hands the command to ssh, which joins its words unquoted: one string per command.
    return _gc("lab", "ssh", "--stack", str(stack), node, "--", command, timeout=120)


def run() -> dict[str, Any]:
    target = f"verify --no-burn < {TARGET_S:.0f} s on 3 lab nodes with {THROTTLED}'s fabric at {RATE}, naming it"
    if os.geteuid() != 0:
        return {"target": target, "met": False, "skipped": "needs root"}
    folder = REPO / "runs" / f"bench-slow-fabric-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    folder.mkdir(parents=True, exist_ok=True)
    stack = _stack(folder)
    out: dict[str, Any] = {"target": target, "met": False, "throttled": THROTTLED, "rate": RATE,
                           "state_dir": str(STATE_DIR), "load_avg_1_5_15_at_start": list(os.getloadavg())}
    throttled = False
    try:
        t0 = time.perf_counter()
        up = _gc("lab", "up", "--stack", str(stack))
        out["lab_up_s"] = round(time.perf_counter() - t0, 1)
        if up.returncode != 0:
            out["error"] = ["lab up failed", *_tail(up)]
            return out
        t0 = time.perf_counter()
        conv = _gc("converge", "--stack", str(stack), "--skip-tags", "ceph", "--json")
        out["converge_s"] = round(time.perf_counter() - t0, 1)
        if conv.returncode != 0:
            out["error"] = ["converge failed", *_tail(conv)]
            return out
        shaped = _ssh(stack, THROTTLED, f"tc qdisc replace dev {FABRIC_IF} root tbf rate {RATE} burst 32kb "
                                        "latency 50ms")
        if shaped.returncode != 0:
            out["error"] = ["tc tbf failed", *_tail(shaped)]
            return out
        throttled = True
        run_dir = folder / "verify"
        out["load_avg_1_5_15_before_verify"] = list(os.getloadavg())
        t0 = time.perf_counter()
        v = _gc("verify", "--stack", str(stack), "--no-burn", "--run-dir", str(run_dir), "--json", timeout=1200)
        out["verify_wall_s"] = round(time.perf_counter() - t0, 2)
        out["verify_exit"] = v.returncode
        try:
            summary = json.loads(v.stdout)
        except json.JSONDecodeError:
            out["error"] = ["verify printed no JSON", *_tail(v)]
            return out
        out["verdicts"] = {x["node"]: x["verdict"] for x in summary.get("verdicts", [])}
        out["failing"] = {x["node"]: [f["check"] for f in x["failed"]] for x in summary.get("verdicts", [])
                          if x["verdict"] == "fail"}
        fabric = run_dir / "fabric"
        out["fabric_wall_s"] = {p.stem: json.loads(p.read_text()).get("wall_s") for p in sorted(fabric.glob("*.json"))}
        pairs = json.loads((fabric / "pair_search.json").read_text())
        out["named_slow"] = pairs["search"]["slow"]
        out["pairs"] = [{k: r[k] for k in ("a", "b", "ok", "busbw_gbps", "reached_bytes")}
                        for r in pairs["search"]["results"]]
        out["pair_runs"] = [{"label": r["label"], "status": r["status"], "budget_s": r.get("budget_s"),
                             "sizes_reached": [p["size_bytes"] for p in r["points"]]} for r in pairs["runs"]]
        out["met"] = out["verify_wall_s"] < TARGET_S and out["named_slow"] == [THROTTLED]
        return out
    finally:
        if throttled:
            undo = _ssh(stack, THROTTLED, f"tc qdisc del dev {FABRIC_IF} root")
            out["throttle_removed"] = undo.returncode == 0
        if os.environ.get("GPUCLUSTER_BENCH_KEEP_LAB") != "1":
            down = _gc("lab", "down", "--stack", str(stack))
            out["lab_down"] = "ok" if down.returncode == 0 else _tail(down, 3)
