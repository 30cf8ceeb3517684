"""rados bench throughput next to a raw sequential write to the same backing storage, as a ratio.

Runs on the Ceph lab (tests/integration/ceph/Pulumi.ceph.yaml, lab `ceph`) when it is up and
converged; otherwise reports why it did not run (met: false, no figures invented).
The raw figure is `dd oflag=direct` of 256 MiB to a scratch file beside the lab's OSD disk
images (the host filesystem that backs every OSD); the Ceph figure is `rados bench` 4 MiB
writes with 3 replicas, so a ratio near 1/3 means Ceph costs nothing beyond replication.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from gpucluster.ceph.parse import CephOutputError, parse_rados_bench  # noqa: E402

STACK = ROOT / "tests/integration/ceph/Pulumi.ceph.yaml"
LAB_DIR = Path("/var/lib/gpucluster/lab/ceph")
TARGET = "rados bench write >= 0.2 x raw sequential write (3 replicas on one host disk: 1/3 is the ceiling)"


def _on(node: str, command: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    exe = Path(sys.executable).parent / "gpucluster"
    return subprocess.run([str(exe), "lab", "ssh", "--stack", str(STACK), node, "--", command],
                          capture_output=True, text=True, timeout=timeout, check=False)


def _raw_write_mib_s(directory: Path, size_mib: int = 256) -> float:
    scratch = directory / "bench-raw.img"
    try:
        proc = subprocess.run(["dd", "if=/dev/zero", f"of={scratch}", "bs=4M", f"count={size_mib // 4}",
                               "oflag=direct", "conv=fsync"], capture_output=True, text=True, check=True)
    finally:
        scratch.unlink(missing_ok=True)
    m = re.search(r"(\d+) bytes .* copied, ([\d.]+) s", proc.stderr)
    if not m:
        raise RuntimeError(f"cannot read dd's summary: {proc.stderr.strip()[-200:]}")
    return int(m.group(1)) / float(m.group(2)) / 1048576


def run() -> dict[str, Any]:
    result: dict[str, Any] = {"target": TARGET, "met": False}
    if os.geteuid() != 0 or not (LAB_DIR / "inventory.yml").exists():
        result["skipped"] = f"the Ceph lab is not up ({LAB_DIR}); run tests/integration/ceph first, as root"
        return result
    disks = sorted(LAB_DIR.glob("nodes/*/disk-*.img"))
    if not disks:
        result["skipped"] = "no lab OSD disk images found"
        return result
    try:
        write = _on("node-1", "rados bench -p rbd 10 write -b 4M -t 16 --no-cleanup --run-name bench")
        read = _on("node-1", "rados bench -p rbd 10 seq -t 16 --run-name bench")
        _on("node-1", "rados -p rbd cleanup --run-name bench")
        w, r = parse_rados_bench(write.stdout), parse_rados_bench(read.stdout)
    except (CephOutputError, subprocess.TimeoutExpired) as exc:
        result["error"] = f"rados bench failed: {exc}"
        return result
    raw = _raw_write_mib_s(disks[0].parent)
    ratio = w.bandwidth_mb_s / raw if raw else 0.0
    result.update({
        "rados_write_mib_s": w.bandwidth_mb_s, "rados_read_mib_s": r.bandwidth_mb_s,
        "rados_write_latency_s": w.average_latency_s, "raw_seq_write_mib_s": round(raw, 1),
        "write_ratio": round(ratio, 3), "replicas": 3, "osds": len(disks),
        "met": ratio >= 0.2,
    })
    return result


if __name__ == "__main__":
    import json

    print(json.dumps(run(), indent=2))
