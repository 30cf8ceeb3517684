"""The OS is part of the spec: per target with a per-pool override, carried to the inventory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from pydantic import ValidationError

from gpucluster.errors import InputError
from gpucluster.inventory import build_inventory
from gpucluster.outputs import parse_outputs
from gpucluster.spec import load_spec
from gpucluster.spec.models import AwsTarget, AzureTarget, BaremetalTarget, CephPool, Fabric, LabTarget, OciTarget
from gpucluster.spec.os import ceph_source, pool_os
from tests.unit.example_outputs import example_outputs

REPO = Path(__file__).resolve().parents[3]


def test_default_os_per_target() -> None:
    assert LabTarget(kind="lab").os == "debian-12"
    assert AwsTarget(kind="aws", region="us-east-1", availability_zone="us-east-1a",
                     ami_id="ami-0123456789abcdef0").os == "ubuntu-22.04"
    assert AzureTarget(kind="azure", location="eastus", resource_group="rg",
                       image="microsoft-dsvm:ubuntu-hpc:2204:22.04.2025010101").os == "ubuntu-22.04"
    assert OciTarget(kind="oci", region="us-ashburn-1", compartment_id="ocid1.compartment.oc1..x",
                     availability_domain="AD-1", image_id="ocid1.image.oc1..x").os == "ubuntu-22.04"
    bm = BaremetalTarget.model_validate({"kind": "baremetal", "nodes": [
        {"name": "n1", "pool": "p", "bmc_address": "10.0.0.1", "management_mac": "aa:bb:cc:dd:ee:ff"}]})
    assert bm.os == "ubuntu-22.04"


def test_the_lab_builds_debian_only_and_clouds_ubuntu_only() -> None:
    with pytest.raises(ValidationError, match="os"):
        LabTarget.model_validate({"kind": "lab", "os": "ubuntu-22.04"})
    with pytest.raises(ValidationError, match="os"):
        AwsTarget.model_validate({"kind": "aws", "region": "us-east-1", "availability_zone": "us-east-1a",
                                  "ami_id": "ami-0123456789abcdef0", "os": "debian-12"})


def _stack(tmp_path: Path, pools: list[dict[str, Any]], target: dict[str, Any] | None = None) -> Path:
    config = {
        "gpucluster:name": "ostest",
        "gpucluster:target": target or {"kind": "lab", "state_dir": str(tmp_path / "state")},
        "gpucluster:node_pools": pools,
        "gpucluster:fabric": {"type": "ethernet", "mtu": 9000, "management_cidr": "10.90.0.0/24",
                              "fabric_cidr": "10.90.1.0/24", "ofed": "inbox"},
    }
    path = tmp_path / "Pulumi.ostest.yaml"
    path.write_text(yaml.safe_dump({"config": config}))
    return path


def test_pool_os_overrides_the_targets_and_the_inventory_carries_it(tmp_path: Path) -> None:
    stack = _stack(tmp_path, [{"name": "gpu", "count": 1, "roles": ["gpu"], "profile": "cpu-server",
                               "os": "ubuntu-24.04", "preinstalled": "adopt_or_replace", "platform": "server-ethernet",
                               "fabric_interface": "eno2"},
                              {"name": "svc", "count": 1, "roles": ["storage"], "profile": "cpu-server",
                               "platform": "server-ethernet", "fabric_interface": "eno2"}],
                   target={"kind": "baremetal", "nodes": [
                       {"name": "g1", "pool": "gpu", "bmc_address": "10.0.0.1", "management_mac": "aa:bb:cc:dd:ee:01"},
                       {"name": "s1", "pool": "svc", "bmc_address": "10.0.0.2",
                        "management_mac": "aa:bb:cc:dd:ee:02"}]})
    cluster = load_spec(stack)
    assert [pool_os(cluster.spec, p) for p in cluster.spec.node_pools] == ["ubuntu-24.04", "ubuntu-22.04"]
    inv = build_inventory(cluster, parse_outputs(example_outputs(cluster, ssh_user="ubuntu"), "outputs.json"))
    hosts = inv["all"]["hosts"]
    assert hosts["g1"]["gpucluster_os"] == "ubuntu-24.04" and hosts["s1"]["gpucluster_os"] == "ubuntu-22.04"
    assert hosts["g1"]["gpucluster_preinstalled"] == "adopt_or_replace"
    assert hosts["s1"]["gpucluster_preinstalled"] == "adopt_or_fail"
    assert inv["all"]["vars"]["gpucluster_ofed_flavour"] == "inbox"
    assert inv["all"]["vars"]["gpucluster_ceph_source"] == "upstream"


def test_a_pool_os_the_bom_does_not_know_is_refused(tmp_path: Path) -> None:
    stack = _stack(tmp_path, [{"name": "gpu", "count": 1, "roles": ["gpu"], "profile": "cpu-lab", "os": "rhel-9"}])
    with pytest.raises(InputError, match=r"node_pools\[0\]\.os"):
        load_spec(stack)


def test_the_lab_takes_debians_own_ceph() -> None:
    lab = load_spec(REPO / "Pulumi.lab.yaml")
    assert ceph_source(lab.spec) == "distro"
    assert ceph_source(load_spec(REPO / "Pulumi.onprem-h100-ib.yaml").spec) == "upstream"


def test_fabric_ofed_defaults_to_inbox_and_takes_doca() -> None:
    base = {"type": "infiniband", "mtu": 4092, "management_cidr": "10.0.0.0/24", "fabric_cidr": "10.0.1.0/24"}
    assert Fabric.model_validate(base).ofed == "inbox"
    assert Fabric.model_validate({**base, "ofed": "doca"}).ofed == "doca"
    with pytest.raises(ValidationError):
        Fabric.model_validate({**base, "ofed": "mlnx"})


def test_pg_num_is_optional_and_still_a_power_of_two() -> None:
    assert CephPool(name="rbd", application="rbd").pg_num is None
    assert CephPool(name="rbd", application="rbd", pg_num=64).pg_num == 64
    with pytest.raises(ValidationError, match="power of two"):
        CephPool(name="rbd", application="rbd", pg_num=48)


def test_the_bom_pins_doca_ofed_and_names_every_os() -> None:
    from gpucluster.spec import load_bom
    bom = load_bom()
    assert bom.doca_ofed.version
    assert {k: (v.id, v.version_id, v.codename) for k, v in bom.os.items()} == {
        "ubuntu-22.04": ("ubuntu", "22.04", "jammy"),
        "ubuntu-24.04": ("ubuntu", "24.04", "noble"),
        "debian-12": ("debian", "12", "bookworm"),
    }


def test_the_bom_pins_the_efa_installer_the_role_reads() -> None:
    """The EFA installer AWS's release notes list (1.51.0: the OFI NCCL plugin 1.22.0), cited beside
    the pin, and the value rdma_fabric's default reads."""
    from gpucluster.spec import load_bom
    from gpucluster.spec.loader import DATA_DIR

    assert load_bom().efa.version == "1.51.0"
    text = (DATA_DIR / "bom.yaml").read_text()
    assert "efa-changelog" in text and "OFI NCCL plugin 1.22.0" in text
    root = Path(__file__).resolve().parents[3]
    defaults = yaml.safe_load((root / "roles" / "rdma_fabric" / "defaults" / "main.yml").read_text())
    assert "gpucluster_bom.efa" in defaults["rdma_fabric_efa_version"]
