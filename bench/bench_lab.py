"""The lab: `up` of 3 nodes from the cached base (target under 60 s), the base build, 8 and 16 nodes, memory.

Needs root on Debian (it boots real nodes); elsewhere it reports why it did not run. Its labs
use their own names and 10.79.4x networks, and each is taken down after it is measured.
"""

from __future__ import annotations

import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import yaml

from gpucluster.lab import node as lab_node
from gpucluster.lab.host import host_problem, os_release, quiet
from gpucluster.lab.lab import LabInputs, down, lab_inputs, up
from gpucluster.lab.layout import LabLayout
from gpucluster.lab.rootfs import build_rootfs, marker
from gpucluster.spec import load_spec

REPO = Path(__file__).resolve().parents[1]
TARGET_S = 60.0


def _inputs(tmp: Path, nodes: int, third_octet: int) -> LabInputs:
    doc = yaml.safe_load((REPO / "Pulumi.lab.yaml").read_text())
    config = doc["config"]
    config["gpucluster:name"] = f"bench{nodes}"
    config["gpucluster:node_pools"] = [{"name": "gpu", "count": nodes, "roles": ["gpu"], "profile": "cpu-lab"}]
    config.pop("gpucluster:storage", None)
    config["gpucluster:fabric"]["management_cidr"] = f"10.79.{third_octet}.0/24"
    config["gpucluster:fabric"]["fabric_cidr"] = f"10.79.{third_octet + 1}.0/24"
    path = tmp / f"Pulumi.bench{nodes}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return lab_inputs(load_spec(path))


def _pss_kib(pid: int) -> int:
    try:
        for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines():
            if line.startswith("Pss:"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def _children(pid: int) -> list[int]:
    out = []
    for task in Path(f"/proc/{pid}/task").glob("*"):
        try:
            out += [int(c) for c in (task / "children").read_text().split()]
        except OSError:
            pass
    return out


def _node_pss_mib(plan: LabLayout) -> list[float]:
    """Proportional set size of every process of each node (nspawn and the container's tree)."""
    sizes = []
    for n in plan.nodes:
        todo, total = list(lab_node.pids(plan, n)), 0
        while todo:
            pid = todo.pop()
            total += _pss_kib(pid)
            todo += _children(pid)
        sizes.append(total / 1024)
    return sizes


def _mem_available_mib() -> float:
    for line in Path("/proc/meminfo").read_text().splitlines():
        if line.startswith("MemAvailable:"):
            return int(line.split()[1]) / 1024
    return 0.0


def _dir_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file()) if path.exists() else 0


def _up_case(tmp: Path, nodes: int, third_octet: int, measure_memory: bool = False) -> dict[str, Any]:
    inputs = _inputs(tmp, nodes, third_octet)
    plan = inputs.plan
    down(Path(plan.state_root), plan.name)
    before = _mem_available_mib()
    t0 = time.perf_counter()
    result = up(inputs, progress=quiet)
    seconds = time.perf_counter() - t0
    case: dict[str, Any] = {
        "nodes": nodes,
        "up_s": round(seconds, 2),
        "nodes_up": len(result.nodes) - len(result.failed),
        "failed": [f"{f.name}: {f.system_state}" for f in result.failed],
        "slowest_node_s": max(n.seconds for n in result.nodes),
    }
    t1 = time.perf_counter()
    again = up(inputs, progress=quiet)
    case["second_up_s"] = round(time.perf_counter() - t1, 2)
    case["second_up_changed"] = again.changed
    if measure_memory:
        time.sleep(10)  # let boot-time jobs finish: idle nodes
        pss = _node_pss_mib(plan)
        case["idle_node_pss_mib"] = {"mean": round(sum(pss) / len(pss), 1), "max": round(max(pss), 1)}
        case["mem_available_drop_per_node_mib"] = round((before - _mem_available_mib()) / nodes, 1)
    t2 = time.perf_counter()
    down(Path(plan.state_root), plan.name)
    case["down_s"] = round(time.perf_counter() - t2, 2)
    return case


def _build_case(tmp: Path) -> dict[str, Any]:
    """The recorded first build of the cache, and a fresh build now through the (warm) proxy."""
    inputs = _inputs(tmp, 1, 46)
    plan = inputs.plan
    first: Any = None
    if marker(plan.rootfs_dir).is_file():
        first = yaml.safe_load(marker(plan.rootfs_dir).read_text()).get("build_seconds")
    down(Path(plan.state_root), plan.name)
    up(inputs, progress=quiet)  # its proxy serves the build
    cache_before = _dir_bytes(plan.apt_cache_dir)
    dest = plan.cache_dir / "rootfs" / f"bench-{os.getpid()}"
    try:
        seconds = build_rootfs(dest, suite=plan.suite, mirror=plan.mirror, packages=plan.packages,
                               proxy_url=plan.proxy_url, progress=quiet)
    finally:
        shutil.rmtree(dest, ignore_errors=True)
        marker(dest).unlink(missing_ok=True)
        down(Path(plan.state_root), plan.name)
    return {
        "first_build_s_recorded": first,
        "rebuild_through_proxy_s": round(seconds, 1),
        "bytes_fetched_from_mirror_during_rebuild": _dir_bytes(plan.apt_cache_dir) - cache_before,
    }


def run() -> dict[str, Any]:
    why = host_problem(os.geteuid(), os_release())
    if why:
        return {"what": "lab up timings", "skipped": why, "target": f"up of 3 nodes < {TARGET_S} s", "met": False}
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        three = _up_case(tmp, 3, 40)
        build = _build_case(tmp)
        eight = _up_case(tmp, 8, 42)
        sixteen = _up_case(tmp, 16, 44, measure_memory=True)
    return {
        "what": "gpucluster lab up from the cached Debian base; the base build; growth; idle memory per node",
        "up_3_nodes": three,
        "rootfs_build": build,
        "up_8_nodes": eight,
        "up_16_nodes": sixteen,
        "target": f"up of 3 nodes from the cached base < {TARGET_S} s",
        "met": three["up_s"] < TARGET_S and not three["failed"],
    }
