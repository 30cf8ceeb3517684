"""One fault benchmark on its own lab: boot 3 GPU nodes, converge them (Ceph skipped), shape links of
one node with tc tbf, time `gpucluster verify --no-burn` and record whom the verdict names.

Shared by bench_slow_fabric.py (every compute rail of a node throttled) and bench_rail_fault.py
(one rail of one node). Needs root; run under the lab lock. The shaping is removed and the lab
brought down in ``finally``, also when a step fails; GPUCLUSTER_BENCH_KEEP_LAB=1 keeps the lab
(never the shaping). Run folders stay in ``runs/bench-<name>-<UTC time>/``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

# Loaded by path, as run.py loads the benchmarks: the shared runner sits beside it.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gccli import REPO, gc, tail

STATE_DIR = Path(os.environ.get("GPUCLUSTER_BENCH_STATE_DIR", "/tmp/gpucluster-bench-lab"))
THROTTLED = "gpu-2"
# The lab platform's compute rail interfaces (gpucluster/data/platforms/lab.yaml), two by default.
RAILS = ("enp16s0np0", "enp32s0np0")


@dataclass(frozen=True)
class Fault:
    name: str  # the lab's name and the run folder's
    octet: int  # the lab's networks: 10.<octet>.0.0/24 management, 10.<octet>.1.0/24 fabric, rails after
    devices: tuple[str, ...]  # the throttled node's links to shape
    rate: str
    target_s: float

    def stack(self, folder: Path) -> Path:
        doc = {"config": {
            "gpucluster:name": self.name,
            "gpucluster:target": {"kind": "lab", "boot_timeout_s": 300, "state_dir": str(STATE_DIR)},
            "gpucluster:node_pools": [{"name": "gpu", "count": 3, "roles": ["gpu"], "profile": "cpu-lab"}],
            "gpucluster:fabric": {"type": "ethernet", "mtu": 9000, "management_cidr": f"10.{self.octet}.0.0/24",
                                  "fabric_cidr": f"10.{self.octet}.1.0/24"},
        }}
        path = folder / f"Pulumi.{self.name}.yaml"
        path.write_text(yaml.safe_dump(doc))
        return path


def _ssh(stack: Path, node: str, command: str) -> subprocess.CompletedProcess[str]:
    # `lab ssh` hands the command to ssh, which joins its words unquoted: one string per command.
    return gc("lab", "ssh", "--stack", str(stack), node, "--", command, timeout=120)


def _shape(fault: Fault) -> str:
    # A burst above the rails' 9000-byte frames: tbf drops a packet larger than its burst.
    return "; ".join(f"tc qdisc replace dev {d} root tbf rate {fault.rate} burst 32kb latency 50ms"
                     for d in fault.devices)


def _unshape(fault: Fault) -> str:
    return "; ".join(f"tc qdisc del dev {d} root" for d in fault.devices)


def measure(fault: Fault, target: str) -> dict[str, Any]:
    """The benchmark's record: wall times, verdicts, the pair search's names per rail; ``met`` when
    verify ended within the target and named the throttled node, and only it, slow."""
    if os.geteuid() != 0:
        return {"target": target, "met": False, "skipped": "needs root"}
    folder = REPO / "runs" / f"bench-{fault.name}-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    folder.mkdir(parents=True, exist_ok=True)
    stack = fault.stack(folder)
    out: dict[str, Any] = {"target": target, "met": False, "throttled": THROTTLED, "devices": list(fault.devices),
                           "rate": fault.rate, "state_dir": str(STATE_DIR),
                           "load_avg_1_5_15_at_start": list(os.getloadavg())}
    shaped = False
    try:
        t0 = time.perf_counter()
        up = gc("lab", "up", "--stack", str(stack))
        out["lab_up_s"] = round(time.perf_counter() - t0, 1)
        if up.returncode != 0:
            out["error"] = ["lab up failed", *tail(up)]
            return out
        t0 = time.perf_counter()
        conv = gc("converge", "--stack", str(stack), "--skip-tags", "ceph", "--json")
        out["converge_s"] = round(time.perf_counter() - t0, 1)
        if conv.returncode != 0:
            out["error"] = ["converge failed", *tail(conv)]
            return out
        res = _ssh(stack, THROTTLED, _shape(fault))
        if res.returncode != 0:
            out["error"] = ["tc tbf failed", *tail(res)]
            return out
        shaped = True
        run_dir = folder / "verify"
        out["load_avg_1_5_15_before_verify"] = list(os.getloadavg())
        t0 = time.perf_counter()
        v = gc("verify", "--stack", str(stack), "--no-burn", "--run-dir", str(run_dir), "--json", timeout=1200)
        out["verify_wall_s"] = round(time.perf_counter() - t0, 2)
        out["verify_exit"] = v.returncode
        try:
            summary = json.loads(v.stdout)
        except json.JSONDecodeError:
            out["error"] = ["verify printed no JSON", *tail(v)]
            return out
        out["verdicts"] = {x["node"]: x["verdict"] for x in summary.get("verdicts", [])}
        out["failing"] = {x["node"]: [f["check"] for f in x["failed"]] for x in summary.get("verdicts", [])
                          if x["verdict"] == "fail"}
        fabric = run_dir / "fabric"
        out["fabric_wall_s"] = {p.stem: json.loads(p.read_text()).get("wall_s") for p in sorted(fabric.glob("*.json"))}
        pairs = json.loads((fabric / "pair_search.json").read_text())
        out["named_slow"] = pairs["search"]["slow"]
        out["named_slow_per_rail"] = {rail: s["slow"] for rail, s in (pairs.get("rails") or {}).items()}
        out["pairs"] = [{k: r[k] for k in ("a", "b", "ok", "busbw_gbps", "reached_bytes")}
                        for r in pairs["search"]["results"]]
        out["pair_runs"] = [{"label": r["label"], "status": r["status"], "budget_s": r.get("budget_s"),
                             "sizes_reached": [p["size_bytes"] for p in r["points"]]} for r in pairs["runs"]]
        out["met"] = (out["verify_wall_s"] < fault.target_s and out["named_slow"] == [THROTTLED]
                      and list(out["failing"]) == [THROTTLED])
        return out
    finally:
        if shaped:
            undo = _ssh(stack, THROTTLED, _unshape(fault))
            out["throttle_removed"] = undo.returncode == 0
        if os.environ.get("GPUCLUSTER_BENCH_KEEP_LAB") != "1":
            down = gc("lab", "down", "--stack", str(stack))
            out["lab_down"] = "ok" if down.returncode == 0 else tail(down, 3)
