"""`gpucluster verify --no-burn` wall time on 3 and 8 lab nodes (target: under 60 s for 8), and the
CPU all-reduce bus bandwidth on the lab fabric next to iperf3's throughput on the same fabric.

Needs root (it boots labs `bench3`/`bench8`, CIDRs 10.84.x/10.85.x, and removes them after;
GPUCLUSTER_BENCH_KEEP_LAB=1 leaves them up for profiling). Each lab is converged once, then
verified twice: the first run opens every SSH connection cold, the second is the steady state;
the target is held against the slower of the two. The figures are taken on a shared host: the
load average and the other labs up at the time are recorded next to them. Stack files and verify
run folders stay in ``runs/bench-verify-<UTC time>/`` for a look at where the time went.
"""

from __future__ import annotations

import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import yaml

from gpucluster.inventory import parse_inventory_text

# run.py loads each benchmark by its path: the shared helper is imported from the folder beside it.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gccli import REPO, gc, tail

LAB_ROOT = Path("/var/lib/gpucluster/lab")
TARGET_8_S = 60.0
VERIFY_RUNS = 2
IPERF_SECONDS = 5


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


def _host_load() -> dict[str, Any]:
    others = sorted(p.name for p in LAB_ROOT.iterdir() if p.is_dir() and (p / "state.json").exists()) \
        if LAB_ROOT.is_dir() else []
    return {"load_avg_1_5_15": [round(x, 2) for x in os.getloadavg()], "labs_up": others}


def _iperf(stack: Path, inv: dict[str, Any]) -> dict[str, Any]:
    """iperf3 (TCP, one stream) from the first node to the second, over their fabric addresses."""
    hosts = inv["all"]["hosts"]
    client, server = list(hosts)[:2]
    server_ip = str(hosts[server]["gpucluster_fabric_ip"])
    client_ip = str(hosts[client]["gpucluster_fabric_ip"])
    ssh = ("lab", "ssh", "--stack", str(stack))
    # `lab ssh` hands the command to ssh, which joins its words unquoted: one string per command.
    started = gc(*ssh, server, "--", f"iperf3 -s -D -1 -B {server_ip}", timeout=60)
    if started.returncode != 0:
        return {"error": f"iperf3 server on {server}: {tail(started, 5)}"}
    time.sleep(1)
    res = gc(*ssh, client, "--", f"iperf3 -c {server_ip} -B {client_ip} -t {IPERF_SECONDS} -J", timeout=120)
    try:
        data = json.loads(res.stdout[res.stdout.index("{"):])
        bps = float(data["end"]["sum_received"]["bits_per_second"])
    except (ValueError, KeyError, TypeError):
        return {"error": f"iperf3 client on {client} (exit {res.returncode}): {tail(res, 5)}"}
    return {"from": client, "to": server, "seconds": IPERF_SECONDS, "gbytes_per_s": round(bps / 8e9, 3),
            "gbits_per_s": round(bps / 1e9, 2)}


def _allreduce(run_dir: Path) -> dict[str, Any]:
    inter = json.loads((run_dir / "fabric" / "inter_node.json").read_text())
    run = inter.get("run") or {}
    pts = run.get("points") or []
    large = int(inter.get("large_bytes") or 0)
    big = [p["busbw_gbps"] for p in pts if p["size_bytes"] >= large]
    return {
        "engine": inter.get("engine"),
        "ranks": run.get("ranks"),
        "busbw_gbytes_per_s_large_mean": round(sum(big) / len(big), 3) if big else None,
        "large_message_bytes": large,
        "largest_bytes": pts[-1]["size_bytes"] if pts else None,
        "busbw_gbytes_per_s_largest": round(pts[-1]["busbw_gbps"], 3) if pts else None,
        "inter_node_wall_s": inter.get("wall_s"),
    }


def _verify(stack: Path, run_dir: Path) -> dict[str, Any]:
    started = time.perf_counter()
    v = gc("verify", "--stack", str(stack), "--no-burn", "--run-dir", str(run_dir), "--json", timeout=1200)
    out: dict[str, Any] = {"wall_s": round(time.perf_counter() - started, 2), "exit": v.returncode}
    try:
        summary = json.loads(v.stdout)
    except json.JSONDecodeError:
        out["error"] = tail(v, 5)
        return out
    meta = summary.get("meta", {})
    out["suite_s"] = meta.get("duration_s")
    out["publish_s"] = meta.get("textfile_publish_s")
    out["published"] = sum(1 for p in (meta.get("textfile_publish") or {}).values() if p.get("ok"))
    out["verdicts"] = {x["node"]: x["verdict"] for x in summary.get("verdicts", [])}
    out["failing"] = {x["node"]: [f["check"] for f in x["failed"]] for x in summary.get("verdicts", [])
                      if x["verdict"] not in ("pass", "skipped")}
    fabric = run_dir / "fabric"
    out["fabric_wall_s"] = {p.stem: json.loads(p.read_text()).get("wall_s") for p in sorted(fabric.glob("*.json"))}
    return out


def measure(count: int, octet: int, folder: Path) -> dict[str, Any]:
    name = f"bench{count}"
    stack = _stack(name, count, octet, folder)
    out: dict[str, Any] = {"nodes": count, "host_at_start": _host_load()}
    try:
        t0 = time.perf_counter()
        up = gc("lab", "up", "--stack", str(stack))
        if up.returncode != 0:
            # On a loaded shared host a container now and then exits during boot; `lab up` is
            # idempotent and restarts only what is not running.
            out["lab_up_retried"] = tail(up, 3)
            up = gc("lab", "up", "--stack", str(stack))
        out["lab_up_s"] = round(time.perf_counter() - t0, 1)
        if up.returncode != 0:
            out["error"] = ["lab up failed", *tail(up, 5)]
            return out
        t0 = time.perf_counter()
        # The stack has no storage section: nothing tagged ceph has anything to do. Skipping the tag
        # also keeps ceph_client's delegate_to (templated before the import's `when`) from failing.
        conv = gc("converge", "--stack", str(stack), "--skip-tags", "ceph", "--json")
        out["converge_s"] = round(time.perf_counter() - t0, 1)
        if conv.returncode != 0:
            out["error"] = ["converge failed", *tail(conv, 10)]
            return out
        runs = []
        for i in range(VERIFY_RUNS):
            out[f"host_before_verify_{i + 1}"] = _host_load()["load_avg_1_5_15"]
            runs.append(_verify(stack, folder / f"run{count}-{i + 1}"))
        out["verify"] = runs
        walls = [r["wall_s"] for r in runs]
        out["verify_wall_s"] = max(walls)
        try:
            out["allreduce"] = _allreduce(folder / f"run{count}-1")
        except (OSError, ValueError, KeyError) as exc:
            out["allreduce"] = {"error": str(exc)}
        inv = parse_inventory_text((LAB_ROOT / name / "inventory.yml").read_text())
        out["iperf3"] = _iperf(stack, inv)
        out["host_at_end"] = _host_load()
    finally:
        if os.environ.get("GPUCLUSTER_BENCH_KEEP_LAB") != "1":
            gc("lab", "down", "--stack", str(stack))
    return out


def run() -> dict[str, Any]:
    target = f"verify --no-burn < {TARGET_8_S:.0f} s on 8 lab nodes"
    if os.geteuid() != 0:
        return {"target": target, "met": False, "skipped": "needs root"}
    folder = REPO / "runs" / f"bench-verify-{datetime.now(UTC).strftime('%Y%m%dT%H%M%SZ')}"
    folder.mkdir(parents=True, exist_ok=True)
    sizes = [int(x) for x in os.environ.get("GPUCLUSTER_BENCH_VERIFY_SIZES", "3,8").split(",")]
    results = {n: measure(n, {3: 84, 8: 85}[n], folder) for n in sizes}
    wall8 = results.get(8, {}).get("verify_wall_s")
    return {"target": target, "met": isinstance(wall8, float) and wall8 < TARGET_8_S,
            "three": results.get(3), "eight": results.get(8), "run_folder": str(folder)}
