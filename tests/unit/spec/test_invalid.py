"""Bad stack files: every problem is reported with its field path and reason, exit code 2.

Each case mutates a valid example and names the field path (and a piece of the reason)
the error line must carry. The command line is run in-process for speed; one test
runs it as a real process to show there is no traceback.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpucluster.cli import main
from gpucluster.errors import InputError
from gpucluster.spec import load_spec

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

Mutate = Callable[[dict[str, Any]], None]


def _set(path: str, value: Any) -> Mutate:
    """Set ``config[gpucluster:<first>]...`` addressed by a dotted path with [i] indexes."""

    def mutate(config: dict[str, Any]) -> None:
        parts = path.replace("[", ".").replace("]", "").split(".")
        node: Any = config
        key: Any = f"gpucluster:{parts[0]}"
        for part in parts[1:]:
            node = node[key]
            key = int(part) if part.isdigit() else part
        node[key] = value

    return mutate


def _do(*mutations: Mutate) -> Mutate:
    def mutate(config: dict[str, Any]) -> None:
        for m in mutations:
            m(config)

    return mutate


def _rename_top(old: str, new: str) -> Mutate:
    def mutate(config: dict[str, Any]) -> None:
        config[f"gpucluster:{new}"] = config.pop(f"gpucluster:{old}")

    return mutate


def _delete_top(key: str) -> Mutate:
    return lambda config: config.pop(f"gpucluster:{key}")


def _add_pool(pool: dict[str, Any]) -> Mutate:
    return lambda config: config["gpucluster:node_pools"].append(pool)


LAB = "Pulumi.lab.yaml"
AWS = "Pulumi.aws-h100.yaml"
IB = "Pulumi.onprem-h100-ib.yaml"
OCI = "Pulumi.oci-h100.yaml"
ROCE = "Pulumi.onprem-h100-roce.yaml"

# (id, example, mutation, expected field path, expected piece of the reason)
CASES: list[tuple[str, str, Mutate, str, str]] = [
    ("count-wrong-type", LAB, _set("node_pools[0].count", "two"), "gpucluster.node_pools[0].count", "integer"),
    ("count-zero", LAB, _set("node_pools[1].count", 0), "gpucluster.node_pools[1].count", "must be at least 1"),
    ("mtu-too-small", LAB, _set("fabric.mtu", 1000), "gpucluster.fabric.mtu", "must be at least 1280"),
    ("mtu-too-large", LAB, _set("fabric.mtu", 9500), "gpucluster.fabric.mtu", "must be at most 9216"),
    (
        "cidr-malformed",
        LAB,
        _set("fabric.management_cidr", "10.77.0.0/33"),
        "gpucluster.fabric.management_cidr",
        "malformed CIDR",
    ),
    (
        "cidr-host-bits",
        LAB,
        _set("fabric.fabric_cidr", "10.77.1.5/24"),
        "gpucluster.fabric.fabric_cidr",
        "host bits set",
    ),
    (
        "cidr-overlap-mgmt-fabric",
        LAB,
        _set("fabric.fabric_cidr", "10.77.0.0/16"),
        "gpucluster.fabric.fabric_cidr",
        "overlaps fabric.management_cidr",
    ),
    (
        "cidr-overlap-pod",
        AWS,
        _set("kubernetes.pod_cidr", "10.40.0.0/18"),
        "gpucluster.kubernetes.pod_cidr",
        "overlaps fabric.management_cidr",
    ),
    (
        "cidr-overlap-service",
        AWS,
        _set("kubernetes.service_cidr", "10.244.128.0/20"),
        "gpucluster.kubernetes.service_cidr",
        "overlaps kubernetes.pod_cidr",
    ),
    (
        # Calico's well-known default pod network over OCI's RDMA range (the image addresses the
        # GPU nodes' 16 ports from 192.168.0.0/16): the pods' routes would collide with the ports'.
        "cidr-overlap-provider-range",
        OCI,
        _set("kubernetes.pod_cidr", "192.168.0.0/16"),
        "gpucluster.kubernetes.pod_cidr",
        "overlaps 192.168.0.0/16, a range platform 'oci-bm-gpu-h100-8''s image addresses its compute ports from",
    ),
    (
        "subnet-too-small",
        IB,
        _set("fabric.management_cidr", "10.10.0.0/28"),
        "gpucluster.fabric.management_cidr",
        "holds 5 node address(es), the spec has 8",
    ),
    (
        "duplicate-pool",
        LAB,
        _add_pool({"name": "gpu", "count": 1, "roles": ["gpu"], "profile": "cpu-lab"}),
        "gpucluster.node_pools[2].name",
        "duplicate pool name 'gpu'",
    ),
    (
        "duplicate-node",
        IB,
        _set("target.nodes[1].name", "hgx-01"),
        "gpucluster.target.nodes[1].name",
        "duplicate node name 'hgx-01'",
    ),
    (
        "unknown-profile",
        LAB,
        _set("node_pools[0].profile", "h100-pcie"),
        "gpucluster.node_pools[0].profile",
        "unknown hardware profile 'h100-pcie'",
    ),
    (
        "unknown-top-key",
        LAB,
        _rename_top("node_pools", "node_pool"),
        "gpucluster.node_pool",
        "unknown key (did you mean 'node_pools'?)",
    ),
    (
        "unknown-nested-key",
        LAB,
        lambda c: c["gpucluster:node_pools"][0].update({"cout": 2}),
        "gpucluster.node_pools[0].cout",
        "unknown key (did you mean 'count'?)",
    ),
    (
        "unknown-target-key",
        AWS,
        _set("target.regoin", "us-east-1"),
        "gpucluster.target.regoin",
        "unknown key (did you mean 'region'?)",
    ),
    (
        "even-monitors",
        AWS,
        _set("storage.monitors", ["ceph-1", "ceph-2"]),
        "gpucluster.storage.monitors",
        "odd number",
    ),
    (
        "replication-too-large",
        LAB,
        _set("storage.pools[0].size", 3),
        "gpucluster.storage.pools[0].size",
        "replication 3 is larger than the 1 storage host(s)",
    ),
    (
        "infiniband-on-aws",
        AWS,
        _set("fabric.type", "infiniband"),
        "gpucluster.fabric.type",
        "infiniband is not available on target aws",
    ),
    (
        "efa-outside-aws",
        ROCE,
        _do(_set("fabric.type", "efa"), lambda c: c["gpucluster:fabric"].pop("roce_qos")),
        "gpucluster.fabric.type",
        "efa is not available on target baremetal",
    ),
    ("unknown-target", LAB, _set("target.kind", "gcp"), "gpucluster.target", "unknown kind 'gcp'"),
    ("bad-role", LAB, _set("node_pools[0].roles", ["gpus"]), "gpucluster.node_pools[0].roles[0]", "must be one of"),
    (
        "duplicate-role",
        LAB,
        _set("node_pools[0].roles", ["gpu", "gpu"]),
        "gpucluster.node_pools[0].roles",
        "listed twice",
    ),
    (
        "monitor-not-a-node",
        LAB,
        _set("storage.monitors", ["stor-9"]),
        "gpucluster.storage.monitors[0]",
        "no node named 'stor-9'",
    ),
    (
        "cephfs-pool-missing",
        LAB,
        _set("storage.cephfs.data_pool", "nope"),
        "gpucluster.storage.cephfs.data_pool",
        "no Ceph pool named 'nope'",
    ),
    ("pg-num-not-pow2", LAB, _set("storage.pools[0].pg_num", 48), "gpucluster.storage.pools[0].pg_num", "power of two"),
    (
        "baremetal-count-mismatch",
        IB,
        _set("node_pools[0].count", 5),
        "gpucluster.node_pools[0].count",
        "5 but target.nodes declares 4",
    ),
    (
        "bad-mac",
        IB,
        _set("target.nodes[0].management_mac", "3c:ec:ef:00:00"),
        "gpucluster.target.nodes[0].management_mac",
        "does not match",
    ),
    (
        "bad-bmc",
        IB,
        _set("target.nodes[2].bmc_address", "10.9.0.300"),
        "gpucluster.target.nodes[2].bmc_address",
        "IPv4",
    ),
    (
        "ib-without-subnet-manager",
        IB,
        _set("fabric.subnet_managers", []),
        "gpucluster.fabric.subnet_managers",
        "needs at least one subnet-manager",
    ),
    (
        "roce-qos-on-ethernet",
        ROCE,
        _set("fabric.type", "ethernet"),
        "gpucluster.fabric.roce_qos",
        "only a roce fabric",
    ),
    (
        "pfc-priority-range",
        ROCE,
        _set("fabric.roce_qos.pfc_priority", 9),
        "gpucluster.fabric.roce_qos.pfc_priority",
        "must be at most 7",
    ),
    (
        "gpu-profile-in-lab",
        LAB,
        _set("node_pools[0].profile", "h100-sxm-8"),
        "gpucluster.node_pools[0].profile",
        "lab nodes have no GPU",
    ),
    (
        "kubernetes-version-not-bom",
        AWS,
        _set("kubernetes.version", "1.29"),
        "gpucluster.kubernetes.version",
        "differs from the bill of materials",
    ),
    (
        "ha-without-vip",
        AWS,
        _set("kubernetes.control_plane_ha", True),
        "gpucluster.kubernetes.api_vip",
        "required when control_plane_ha",
    ),
    ("missing-fabric", LAB, _delete_top("fabric"), "gpucluster.fabric", "is required"),
    ("bad-region", AWS, _set("target.region", "US East"), "gpucluster.target.region", "does not match"),
    ("bad-cluster-name", LAB, _set("name", "Lab_1"), "gpucluster.name", "does not match"),
    (
        "lab-storage-without-disks",
        LAB,
        lambda c: c["gpucluster:node_pools"][1].pop("data_disks"),
        "gpucluster.node_pools[1].data_disks",
        "file-backed data disks",
    ),
    (
        "cloud-pool-without-instance-type",
        AWS,
        lambda c: c["gpucluster:node_pools"][1].pop("instance_type"),
        "gpucluster.node_pools[1].instance_type",
        "names no aws instance type",
    ),
    (
        "monitors-share-a-rack",
        IB,
        _set("storage.monitors", ["stor-01", "stor-02", "hgx-01"]),
        "gpucluster.storage.monitors",
        "2 of the 3 monitors (stor-01, hgx-01) are in rack 'r1'; with 3 rack failure domain(s) at most 1",
    ),
    (
        "replication-over-racks",
        IB,
        _set("target.nodes[6].rack", "r2"),
        "gpucluster.storage.pools[0].size",
        "replication 3 is larger than the 2 rack failure domain(s) of the storage hosts (r1, r2)",
    ),
    (
        "storage-host-without-location",
        LAB,
        _set("storage.failure_domain", "rack"),
        "gpucluster.storage.locations",
        "storage host 'stor-1' has no rack (name it in storage.locations)",
    ),
    (
        "location-of-unknown-node",
        LAB,
        _do(_set("storage.failure_domain", "row"), _set("storage.locations", {"stor-1": "row1", "gpu-9": "row2"})),
        "gpucluster.storage.locations.gpu-9",
        "no node named 'gpu-9'",
    ),
    (
        "locations-with-host-failure-domain",
        LAB,
        _set("storage.locations", {"stor-1": "r1"}),
        "gpucluster.storage.locations",
        "only used when storage.failure_domain is not host",
    ),
    ("bad-failure-domain", LAB, _set("storage.failure_domain", "shelf"), "gpucluster.storage.failure_domain",
     "'host', 'chassis', 'rack'"),
    ("bad-location-name", LAB,
     _do(_set("storage.failure_domain", "rack"), _set("storage.locations", {"stor-1": "r 1"})),
     "gpucluster.storage.locations.stor-1", "does not match"),
    ("bad-cephfs-client", LAB, _set("storage.cephfs.client", "nfs"), "gpucluster.storage.cephfs.client",
     "'auto', 'kernel' or 'fuse'"),
    (
        "bad-osd-device",
        IB,
        _set("node_pools[1].osd_devices", ["nvme0n1"]),
        "gpucluster.node_pools[1].osd_devices[0]",
        "must be a /dev/ path",
    ),
]


@pytest.mark.parametrize(("example", "mutate", "path", "reason"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_invalid_spec_names_field_and_exits_2(
    stack_file: Callable[[str, Mutate], Path],
    capsys: pytest.CaptureFixture[str],
    example: str,
    mutate: Mutate,
    path: str,
    reason: str,
) -> None:
    bad = stack_file(example, mutate)
    with pytest.raises(InputError) as err:
        load_spec(bad)
    matching = [p for p in err.value.problems if p.startswith(f"{path}: ")]
    assert matching, f"no problem names {path}: {err.value.problems}"
    assert any(reason in p for p in matching), f"{reason!r} not in {matching}"

    assert main(["spec", "validate", str(bad)]) == 2
    out, errtext = capsys.readouterr()
    assert out == ""
    lines = errtext.splitlines()
    assert all(line.startswith(f"error: {bad}: ") for line in lines)
    assert any(f"{path}: " in line and reason in line for line in lines)


def test_there_are_at_least_25_distinct_cases() -> None:
    assert len({c[0] for c in CASES}) >= 25
    assert len({c[3] for c in CASES}) >= 25


def test_every_problem_is_reported_together(stack_file: Callable[[str, Mutate], Path]) -> None:
    bad = stack_file(
        LAB,
        _do(_set("node_pools[0].count", 0), _set("fabric.mtu", 99999), _set("node_pools[1].profile", 7)),
    )
    with pytest.raises(InputError) as err:
        load_spec(bad)
    paths = sorted(p.split(": ")[0] for p in err.value.problems)
    assert paths == [
        "gpucluster.fabric.mtu",
        "gpucluster.node_pools[0].count",
        "gpucluster.node_pools[1].profile",
    ]


def test_semantic_problems_are_reported_together(stack_file: Callable[[str, Mutate], Path]) -> None:
    bad = stack_file(
        AWS,
        _do(_set("fabric.type", "infiniband"), _set("storage.monitors", ["ceph-1", "ceph-2"])),
    )
    with pytest.raises(InputError) as err:
        load_spec(bad)
    assert {p.split(": ")[0] for p in err.value.problems} == {"gpucluster.fabric.type", "gpucluster.storage.monitors"}


FILE_CASES = [
    ("missing", None, "stack file not found"),
    ("not-yaml", "config: [unclosed\n", "YAML does not parse"),
    ("not-a-mapping", "- just\n- a list\n", "must be a mapping with a 'config:' key"),
    ("no-config", "name: x\n", "config: must be a mapping"),
    ("no-namespace", "config:\n  aws:region: us-east-1\n", "has no 'gpucluster:' keys"),
]


@pytest.mark.parametrize(("content", "reason"), [c[1:] for c in FILE_CASES], ids=[c[0] for c in FILE_CASES])
def test_bad_files_name_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, reason: str
) -> None:
    path = tmp_path / "Pulumi.bad.yaml"
    if content is not None:
        path.write_text(content)
    assert main(["spec", "validate", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: ")
    assert reason in err
    assert len(err.splitlines()) == 1


def test_unreadable_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # A directory where a file is expected: read fails with an OS error.
    assert main(["spec", "validate", str(tmp_path)]) == 2
    assert f"error: {tmp_path}: cannot read stack file" in capsys.readouterr().err


def test_yaml_error_gives_line_and_column(tmp_path: Path) -> None:
    path = tmp_path / "Pulumi.x.yaml"
    path.write_text("config:\n  gpucluster:name: lab\n  gpucluster:fabric: {type: ethernet\n")
    with pytest.raises(InputError) as err:
        load_spec(path)
    assert "line " in err.value.problems[0] and "column " in err.value.problems[0]


def test_real_process_prints_no_traceback(stack_file: Callable[[str, Mutate], Path]) -> None:
    bad = stack_file(LAB, _set("node_pools[0].count", 0))
    proc = subprocess.run(
        [sys.executable, "-m", "gpucluster", "spec", "validate", str(bad)], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert proc.stderr.strip() == f"error: {bad}: gpucluster.node_pools[0].count: must be at least 1"
