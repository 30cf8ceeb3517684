"""Every example stack validates, and resolves to the nodes and addresses it describes."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucluster.spec import load_spec

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = sorted(p.name for p in REPO.glob("Pulumi.*.yaml"))


def test_the_issue_names_these_examples() -> None:
    for name in (
        "Pulumi.lab.yaml",
        "Pulumi.aws-h100.yaml",
        "Pulumi.onprem-h100-ib.yaml",
        "Pulumi.onprem-h100-roce.yaml",
    ):
        assert name in EXAMPLES


@pytest.mark.parametrize("name", EXAMPLES)
def test_example_validates(name: str) -> None:
    cluster = load_spec(REPO / name)
    assert cluster.nodes
    assert cluster.stack == name.removeprefix("Pulumi.").removesuffix(".yaml")
    # Every node's profile is resolved and every address is unique.
    mgmt = [n.management_ip for n in cluster.nodes]
    assert len(set(mgmt)) == len(mgmt)
    for node in cluster.nodes:
        assert cluster.profile_of(node).name == node.profile


def test_lab_example_is_two_gpu_and_one_storage_node() -> None:
    cluster = load_spec(REPO / "Pulumi.lab.yaml")
    assert [(n.name, n.roles, n.profile) for n in cluster.nodes] == [
        ("gpu-1", ("gpu",), "cpu-lab"),
        ("gpu-2", ("gpu",), "cpu-lab"),
        ("stor-1", ("storage",), "cpu-lab"),
    ]
    assert [n.management_ip for n in cluster.nodes] == ["10.77.0.10", "10.77.0.11", "10.77.0.12"]
    assert [n.fabric_ip for n in cluster.nodes] == ["10.77.1.10", "10.77.1.11", "10.77.1.12"]
    assert cluster.spec.fabric.mtu == 9000


def test_versions_come_from_the_bill_of_materials() -> None:
    cluster = load_spec(REPO / "Pulumi.aws-h100.yaml")
    assert cluster.kubernetes_version == cluster.bom.kubernetes.version
    assert cluster.as_dict()["software"]["nccl"]["version"] == cluster.bom.nccl.version


def test_baremetal_nodes_keep_their_declared_names() -> None:
    cluster = load_spec(REPO / "Pulumi.onprem-h100-ib.yaml")
    assert [n.name for n in cluster.nodes][:2] == ["hgx-01", "hgx-02"]
    assert {n.name for n in cluster.nodes_with_role("storage")} == {"stor-01", "stor-02", "stor-03"}


@pytest.mark.parametrize("name", EXAMPLES)
def test_a_stack_that_says_hgx_names_no_dgx_platform(name: str) -> None:
    """Issue 24: the on-premises examples described OEM "HGX H100" nodes on the dgx-h100 platforms,
    whose RDMA devices and netdevs are the DGX H100's numbering (DGX H100 User Guide); an HGX
    server's differ. A stack's own words name the machine its platforms describe."""
    cluster = load_spec(REPO / name)
    words = " ".join(line.split("#", 1)[1] for line in (REPO / name).read_text().splitlines() if "#" in line)
    dgx = sorted({p for p in cluster.platforms if p.startswith("dgx-")})
    assert not (dgx and "HGX" in words), f"{name} says HGX but its pools use {', '.join(dgx)}"
