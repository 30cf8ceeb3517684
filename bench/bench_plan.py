"""Plan an AWS stack of 10, 100, 1,000 and 5,000 GPU nodes under Pulumi's mocks (target: 1,000
under 30 s, 5,000 planned at all).

Each size runs the whole `gpucluster plan` path in-process: load and validate the spec, run
the program under the mocks, resolve the outputs, apply the policy rules. Until the runner took
the mock monitor off the event loop's thread, anything from about 100 GPU nodes up died with
RecursionError (tests/unit/test_plan.py holds that at 200).
"""

from __future__ import annotations

import itertools
import os
import tempfile
import time
from pathlib import Path

import yaml

from gpucluster.plan import plan_stack

TARGET_S = 30.0
SIZES = (10, 100, 1000, 5000)
TIMED = 1000  # the size held against TARGET_S; the others must plan without error


def _stack(gpu_nodes: int, directory: Path) -> Path:
    doc = {
        "config": {
            "gpucluster:name": "bench",
            "gpucluster:target": {
                "kind": "aws",
                "region": "us-east-1",
                "availability_zone": "us-east-1a",
                "ami_id": "ami-0123456789abcdef0",
                "admin_cidrs": ["203.0.113.0/24"],
                # The NAT gateway's public subnet (egress nat, the default).
                "public_cidr": "10.0.128.0/24",
            },
            "gpucluster:node_pools": [
                {"name": "gpu", "count": gpu_nodes, "roles": ["gpu"], "profile": "h100-sxm-8"},
                {
                    "name": "ceph",
                    "count": 3,
                    "roles": ["storage"],
                    "profile": "cpu-server",
                    "instance_type": "i4i.8xlarge",
                    "osd_devices": ["/dev/nvme1n1"],
                },
            ],
            "gpucluster:fabric": {
                "type": "efa",
                "mtu": 9001,
                # /18s: 5,000 nodes' planned addresses from the bottom and the mocks' made-up
                # ones from the top (AWS assigns GPU instances theirs) never meet.
                "management_cidr": "10.0.0.0/18",
                "fabric_cidr": "10.0.64.0/18",
            },
            "gpucluster:storage": {
                "monitors": ["ceph-1", "ceph-2", "ceph-3"],
                "pools": [{"name": "rbd", "application": "rbd", "size": 3}],
            },
        }
    }
    path = directory / f"Pulumi.bench-{gpu_nodes}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def run() -> dict[str, object]:
    cases: dict[str, dict[str, object]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for size in SIZES:
            path = _stack(size, Path(tmp))
            t0, c0 = time.perf_counter(), time.process_time()
            plan = plan_stack(path)
            seconds = time.perf_counter() - t0
            cpu = time.process_time() - c0
            assert not plan.failed, plan.failed
            cases[str(size)] = {
                "gpu_nodes": size,
                "resources": len(plan.resources),
                "seconds": round(seconds, 3),
                # CPU time of this process: the wall figure swings with other load on a shared host.
                "cpu_seconds": round(cpu, 3),
                "ms_per_resource": round(1000 * seconds / len(plan.resources), 3),
            }
    timed = cases[str(TIMED)]["seconds"]
    small = cases[str(SIZES[0])]
    growth = {
        f"{a}->{b}": round(float(cases[str(b)]["seconds"]) / max(float(cases[str(a)]["seconds"]), 1e-9), 2)  # type: ignore[arg-type]
        for a, b in itertools.pairwise(SIZES)
    }
    return {
        "what": "gpucluster plan (load spec, run the Pulumi program under mocks, resolve outputs, policy) on AWS",
        "cases": cases,
        "growth_ratio": growth,
        "smallest": small,
        "target": f"{TIMED:,} GPU nodes < {TARGET_S} s; {SIZES[-1]:,} planned",
        "load_average_1m": round(os.getloadavg()[0], 2),
        # Every size planned (a failure raises above); the timed one within the target.
        "met": float(timed) < TARGET_S,  # type: ignore[arg-type]
    }
