"""Shared by the hostile-input tests and their benchmark: huge specs, and the CLI run bounded.

A regression (a segfault, a hang, an exponential blow-up, a read of /dev/zero) must fail the
test that meets it, never take pytest or the host down with it: the command runs as a child
process with a kill timeout and a memory limit.
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
KILL_AFTER_S = 60


def limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def cli(*args: str, timeout: float = KILL_AFTER_S) -> subprocess.CompletedProcess[str]:
    """Run `gpucluster ARGS` as a child process: a segfault or a hang fails the test, not pytest."""
    try:
        return subprocess.run(
            [sys.executable, "-m", "gpucluster", *args],
            capture_output=True, text=True, timeout=timeout, cwd=REPO, preexec_fn=limit_memory,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"gpucluster {' '.join(args)} ran past {timeout} s")


def big_aws_stack(directory: Path, pools: int, per_pool: int) -> Path:
    """An AWS stack of ``pools`` GPU pools of ``per_pool`` nodes each."""
    doc = {
        "config": {
            "gpucluster:name": "big",
            # /9 networks leave no room for a NAT gateway's public subnet: the nodes go out by a proxy.
            "gpucluster:target": {"kind": "aws", "region": "us-east-1", "availability_zone": "us-east-1a",
                                  "ami_id": "ami-0123456789abcdef0",
                                  "egress": {"mode": "proxy", "http_proxy": "http://proxy.example.internal:3128",
                                             "https_proxy": "http://proxy.example.internal:3128"}},
            "gpucluster:node_pools": [
                {"name": f"gpu{i}", "count": per_pool, "roles": ["gpu"], "profile": "h100-sxm-8"}
                for i in range(pools)
            ],
            "gpucluster:fabric": {
                "type": "efa", "mtu": 9001, "management_cidr": "10.0.0.0/9", "fabric_cidr": "10.128.0.0/9",
            },
        }
    }
    path = directory / "Pulumi.big.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
