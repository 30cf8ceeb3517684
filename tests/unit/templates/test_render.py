"""cloud-init and autoinstall templates: golden files, valid YAML, the managed-by header."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from stacks.components.userdata import (
    TEMPLATES,
    Interface,
    NodeData,
    render_autoinstall,
    render_cloud_init,
    render_network_config,
)

GOLDEN = Path(__file__).resolve().parents[2] / "golden"
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIGolden admin@example"
BAREMETAL = NodeData(
    hostname="hgx-01",
    ssh_user="ubuntu",
    ssh_keys=(KEY,),
    management=Interface("mgmt0", "10.10.0.10/22", None, mac="3c:ec:ef:00:00:11", gateway="10.10.0.1",
                         dns=("10.10.0.2",)),
    fabric=(Interface("ib0", "10.20.0.10/22", 4092, match_name="ib0", infiniband=True),),
    root_disk="/dev/nvme0n1",
)
CLOUD = NodeData(hostname="gpu-1", ssh_user="ubuntu", ssh_keys=(KEY,))

CASES: dict[str, tuple[Callable[[NodeData], str], NodeData]] = {
    "cloud-init-user-data-baremetal.yaml": (render_cloud_init, BAREMETAL),
    "cloud-init-user-data-cloud.yaml": (render_cloud_init, CLOUD),
    "cloud-init-network-config-baremetal.yaml": (render_network_config, BAREMETAL),
    "autoinstall-user-data-baremetal.yaml": (render_autoinstall, BAREMETAL),
}


@pytest.mark.parametrize("golden", sorted(CASES))
def test_rendering_matches_the_golden_file(golden: str) -> None:
    render, data = CASES[golden]
    text = render(data)
    path = GOLDEN / golden
    if os.environ.get("UPDATE_GOLDEN"):
        path.write_text(text)
    assert text == path.read_text(), f"re-run with UPDATE_GOLDEN=1 if the change to {golden} is intended"
    yaml.safe_load(text)


def test_every_template_starts_with_the_managed_by_comment() -> None:
    templates = sorted(TEMPLATES.glob("*/*.j2"))
    assert len(templates) == 3
    for path in templates:
        head = path.read_text().splitlines()[:2]
        # cloud-init and autoinstall demand "#cloud-config" as line 1; the comment follows it.
        assert any(line.startswith("# Managed by gpucluster") for line in head), path


def test_user_data_has_no_timestamps_and_is_deterministic() -> None:
    import re

    assert render_cloud_init(BAREMETAL) == render_cloud_init(BAREMETAL)
    for path in TEMPLATES.glob("*/*.j2"):
        assert not re.search(r"now\(|timestamp|strftime", path.read_text()), path


def test_cloud_user_data_without_fabric_has_no_netplan() -> None:
    doc = yaml.safe_load(render_cloud_init(CLOUD))
    assert doc["hostname"] == "gpu-1"
    assert doc["users"][0]["ssh_authorized_keys"] == [KEY]
    assert "write_files" not in doc


def test_fabric_netplan_is_embedded_as_yaml() -> None:
    doc = yaml.safe_load(render_cloud_init(BAREMETAL))
    netplan = yaml.safe_load(doc["write_files"][0]["content"])
    assert netplan["network"]["ethernets"]["ib0"] == {
        "match": {"name": "ib0"}, "infiniband-mode": "datagram", "dhcp4": False,
        "addresses": ["10.20.0.10/22"], "mtu": 4092,
    }


def test_a_key_with_quotes_stays_one_yaml_string() -> None:
    odd = NodeData(hostname="n", ssh_user="u", ssh_keys=('ssh-ed25519 AAAA "quoted: comment"',))
    assert yaml.safe_load(render_cloud_init(odd))["users"][0]["ssh_authorized_keys"] == [odd.ssh_keys[0]]
