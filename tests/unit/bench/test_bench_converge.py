"""The converge benchmark measures the lab example's own shape (issue 25: the lighter RBD-only stack
it measured before hid the CephFS mounts' cost), scaled to 8 and 16 nodes."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from bench import bench_converge
from gpucluster.spec import load_spec

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("size", [8, 16])
def test_the_bench_stack_is_the_lab_example_scaled(tmp_path: Path, size: int) -> None:
    path = tmp_path / f"Pulumi.benchconv{size}.yaml"
    bench_converge._stack(size, path)
    mine = yaml.safe_load(path.read_text())["config"]
    example = yaml.safe_load((REPO / "Pulumi.lab.yaml").read_text())["config"]
    # Only its name, the GPU pool's count, its networks and the boot timeout differ.
    assert {k for k in example if mine[k] != example[k]} == {"gpucluster:name", "gpucluster:target",
                                                             "gpucluster:node_pools", "gpucluster:fabric"}
    assert mine["gpucluster:storage"] == example["gpucluster:storage"] and "cephfs" in mine["gpucluster:storage"]
    cluster = load_spec(path)
    assert len(cluster.nodes) == size
    assert [n.name for n in cluster.nodes if "storage" in n.roles] == ["stor-1"]
    # Apart from the example's lab and every other size's, so they can be up at once.
    assert cluster.spec.fabric.management_cidr == f"10.{bench_converge.NETS[size]}.0.0/24"
    assert len(set(bench_converge.NETS.values())) == len(bench_converge.NETS)


def test_the_host_cpu_reading_counts_busy_time() -> None:
    """The no-op's CPU figure is /proc/stat's busy time: it grows while a processor works."""
    import time

    before = bench_converge._host_busy_s()
    end = time.process_time() + 0.3
    while time.process_time() < end:
        pass
    assert bench_converge._host_busy_s() - before >= 0.2
