"""Load and validate a spec of 10,000 nodes and write its inventory (target: under 2 s)."""

from __future__ import annotations

import json
import statistics
import tempfile
import time
from pathlib import Path

import yaml

from gpucluster.inventory import build_inventory, write_inventory
from gpucluster.outputs import build_outputs, parse_outputs
from gpucluster.spec import load_spec

TARGET_S = 2.0


def _cloud_stack(nodes: int, directory: Path) -> Path:
    """AWS pools of p5 nodes: the common shape, a short file that expands to ``nodes``."""
    doc = {
        "config": {
            "gpucluster:name": "big",
            "gpucluster:target": {"kind": "aws", "region": "us-east-1", "availability_zone": "us-east-1a",
                                  "ami_id": "ami-0123456789abcdef0"},
            "gpucluster:node_pools": [
                {"name": f"gpu{i}", "count": nodes // 10, "roles": ["gpu"], "profile": "h100-sxm-8"}
                for i in range(10)
            ],
            "gpucluster:fabric": {
                "type": "efa",
                "mtu": 9001,
                "management_cidr": "10.0.0.0/16",
                "fabric_cidr": "10.1.0.0/16",
            },
        }
    }
    path = directory / "Pulumi.big-aws.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _baremetal_stack(nodes: int, directory: Path) -> Path:
    """Every node declared with its BMC and MAC: the largest file a spec can be."""
    pools = [
        {"name": f"gpu{i}", "count": nodes // 10, "roles": ["gpu"], "profile": "h100-sxm-8"}
        for i in range(10)
    ]
    doc = {
        "config": {
            "gpucluster:name": "big",
            "gpucluster:target": {"kind": "baremetal", "nodes": [], "ssh_user": "ubuntu"},
            "gpucluster:node_pools": pools,
            "gpucluster:fabric": {
                "type": "infiniband",
                "mtu": 4092,
                "management_cidr": "10.0.0.0/16",
                "fabric_cidr": "10.1.0.0/16",
                "subnet_managers": ["gpu0-1"],
            },
        }
    }
    bm = doc["config"]["gpucluster:target"]["nodes"]  # type: ignore[index]
    for p in pools:
        for k in range(1, p["count"] + 1):  # type: ignore[operator]
            n = len(bm)
            mac = ":".join(f"{b:02x}" for b in (0x3C, 0xEC, 0xEF, (n >> 16) & 255, (n >> 8) & 255, n & 255))
            bm.append(
                {
                    "name": f"{p['name']}-{k}",
                    "pool": p["name"],
                    "bmc_address": f"10.9.{n // 250}.{n % 250 + 1}",
                    "management_mac": mac,
                }
            )
    path = directory / "Pulumi.big.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def _measure(stack: Path, directory: Path) -> dict[str, object]:
    cluster0 = load_spec(stack)
    outputs_path = directory / "outputs.json"
    outputs_path.write_text(json.dumps(build_outputs(cluster0, ssh_user="ubuntu")))
    times = []
    for _ in range(3):
        t0 = time.perf_counter()
        cluster = load_spec(stack)
        outputs = parse_outputs(json.loads(outputs_path.read_text()), str(outputs_path))
        write_inventory(build_inventory(cluster, outputs), directory / "inventory.yml")
        times.append(time.perf_counter() - t0)
    return {
        "nodes": len(cluster0.nodes),
        "stack_file_bytes": stack.stat().st_size,
        "inventory_bytes": (directory / "inventory.yml").stat().st_size,
        "seconds": {
            "best": round(min(times), 3),
            "median": round(statistics.median(times), 3),
            "runs": len(times),
        },
    }


def run() -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        cloud = _measure(_cloud_stack(10_000, directory), directory)
        baremetal = _measure(_baremetal_stack(10_000, directory), directory)
    best = cloud["seconds"]["best"]  # type: ignore[index]
    return {
        "what": "load+validate a 10,000-node stack file, read its outputs JSON, write the inventory",
        "cases": {"aws_pools": cloud, "baremetal_every_node_declared": baremetal},
        "target": f"aws_pools best < {TARGET_S} s",
        "met": best < TARGET_S,
    }
