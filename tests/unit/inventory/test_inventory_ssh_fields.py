"""What the SSH client is handed from a hand-edited inventory is typed: no option of its own
(ProxyCommand in verify's ssh_config through ansible_host) gets past the model (issue 27)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from gpucluster.errors import InputError
from gpucluster.inventory import parse_inventory_text
from gpucluster.inventory_model import validate_inventory

REPO = Path(__file__).resolve().parents[3]
PROXY = "-oProxyCommand=sh -c 'touch /tmp/owned'"


def _golden() -> dict[str, Any]:
    data: dict[str, Any] = parse_inventory_text((REPO / "tests" / "golden" / "inventory" / "lab.yml").read_text())
    return data


@pytest.mark.parametrize(("field", "value"), [
    ("ansible_host", "10.77.0.10\n  ProxyCommand sh -c 'touch /tmp/owned'"),
    ("ansible_host", PROXY),
    ("ansible_host", "10.77.0.10 -oProxyCommand=x"),
    ("ansible_user", "root -oProxyCommand=x"),
    ("ansible_user", "root\nProxyCommand x"),
    ("ansible_ssh_private_key_file", "/root/.ssh/id\n  ProxyCommand x"),
    ("ansible_ssh_private_key_file", "/root/key -oProxyCommand=x"),
    ("gpucluster_fabric_interface", "eth1; reboot"),
    ("gpucluster_node_name", "gpu-1\nHost *"),
    ("gpucluster_management_ip", "10.77.0.10 -oProxyCommand=x"),
])
def test_a_hand_edited_ssh_field_with_options_of_its_own_is_refused(field: str, value: str) -> None:
    data = _golden()
    data["all"]["hosts"]["gpu-1"][field] = value
    with pytest.raises(InputError) as err:
        validate_inventory(data, "inv.yml")
    assert f"all.hosts.gpu-1.{field}" in "\n".join(err.value.problems)


def test_a_host_name_that_would_open_a_block_of_its_own_is_refused() -> None:
    data = _golden()
    hosts = data["all"]["hosts"]
    hosts["gpu-1 *"] = hosts.pop("gpu-1")
    with pytest.raises(InputError) as err:
        validate_inventory(data, "inv.yml")
    assert "'gpu-1 *' does not match the pattern" in "\n".join(err.value.problems)


def test_names_and_addresses_as_people_write_them_pass() -> None:
    data = _golden()
    host = data["all"]["hosts"]["gpu-1"]
    host.update(ansible_host="gpu-1.cluster.example.com", ansible_user="ubuntu",
                ansible_ssh_private_key_file="~/.ssh/id_ed25519", gpucluster_fabric_interface="ibp24s0")
    validate_inventory(data, "inv.yml")
    host["ansible_host"] = "fd00::10"
    validate_inventory(data, "inv.yml")
