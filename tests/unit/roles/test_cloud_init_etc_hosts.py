"""cloud-init must not undo the common role's /etc/hosts at the next boot: the project's own
cloud-init and autoinstall user-data set `manage_etc_hosts: false`, and the common role drops the
same setting into cloud.cfg.d on nodes that have cloud-init, sorting after the images' own files."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from stacks.components.userdata import (
    Interface,
    NodeData,
    render_autoinstall,
    render_cloud_init,
)
from tests.unit.roles.render import ANSIBLE_MANAGED, NATIVE, ROLES, render_template

NODES = {
    "cloud": NodeData(hostname="gpu-1", ssh_user="ubuntu"),
    "baremetal": NodeData(
        hostname="hgx-01",
        ssh_user="ubuntu",
        management=Interface("mgmt0", "10.10.0.10/22", None, mac="3c:ec:ef:00:00:11", gateway="10.10.0.1"),
        fabric=(Interface("ib0", "10.20.0.10/22", 4092, match_name="ib0", infiniband=True),),
    ),
}


@pytest.mark.parametrize("node", sorted(NODES))
def test_cloud_init_user_data_leaves_etc_hosts_alone(node: str) -> None:
    doc = yaml.safe_load(render_cloud_init(NODES[node]))
    assert doc["manage_etc_hosts"] is False


def test_autoinstall_user_data_leaves_etc_hosts_alone() -> None:
    doc = yaml.safe_load(render_autoinstall(NODES["baremetal"]))
    # autoinstall hands `user-data` to the installed system's cloud-init.
    assert doc["autoinstall"]["user-data"]["manage_etc_hosts"] is False


def _tasks() -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = yaml.safe_load((ROLES / "common" / "tasks" / "hosts.yml").read_text())
    return tasks


def _drop_in_task() -> dict[str, Any]:
    found = [t for t in _tasks() if str(t.get("ansible.builtin.template", {}).get("dest", ""))
             .startswith("/etc/cloud/cloud.cfg.d/")]
    assert len(found) == 1, "the common role writes exactly one cloud-init drop-in"
    return found[0]


def test_common_role_writes_a_drop_in_that_turns_manage_etc_hosts_off() -> None:
    task = _drop_in_task()["ansible.builtin.template"]
    text = render_template("common", task["src"], {"ansible_managed": ANSIBLE_MANAGED})
    assert yaml.safe_load(text) == {"manage_etc_hosts": False}
    assert task["mode"] == "0644"


def test_drop_in_sorts_after_the_images_own_files() -> None:
    # cloud-init reads cloud.cfg.d/*.cfg in sorted order and the last value of a key wins. These are
    # names Ubuntu's cloud-init package and the clouds' images use.
    name = _drop_in_task()["ansible.builtin.template"]["dest"].rsplit("/", 1)[1]
    assert name.endswith(".cfg")
    image_files = ["05_logging.cfg", "90_dpkg.cfg", "90-azure.cfg", "99-installer.cfg",
                   "99_walinuxagent.cfg", "99_zz_vendor.cfg", "99-disable-network-config.cfg"]
    assert sorted([*image_files, name])[-1] == name


def test_drop_in_is_written_only_where_cloud_init_is_installed() -> None:
    tasks = _tasks()
    drop_in = _drop_in_task()
    stats = [t for t in tasks if "ansible.builtin.stat" in t]
    assert len(stats) == 1 and stats[0]["ansible.builtin.stat"]["path"].startswith("/etc/cloud")
    assert tasks.index(stats[0]) < tasks.index(drop_in)
    register = stats[0]["register"]

    def applies(stat: dict[str, Any]) -> bool:
        return bool(NATIVE.from_string("{{ " + drop_in["when"] + " }}").render({register: stat}))

    assert applies({"stat": {"exists": True, "isdir": True}}) is True
    assert applies({"stat": {"exists": False}}) is False
    assert applies({"stat": {"exists": True, "isdir": False}}) is False
