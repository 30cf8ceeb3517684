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
from tests.unit.roles.render import ANSIBLE_MANAGED, ROLES, file_entries, render_template

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


def _drop_in() -> dict[str, Any]:
    tasks = yaml.safe_load((ROLES / "common" / "tasks" / "files.yml").read_text())
    found = [e for e in file_entries(tasks) if str(e["dest"]).startswith("/etc/cloud/cloud.cfg.d/")]
    assert len(found) == 1, "the common role writes exactly one cloud-init drop-in"
    return found[0]


def test_common_role_writes_a_drop_in_that_turns_manage_etc_hosts_off() -> None:
    entry = _drop_in()
    text = render_template("common", entry["src"], {"ansible_managed": ANSIBLE_MANAGED})
    assert yaml.safe_load(text) == {"manage_etc_hosts": False}
    assert entry["mode"] == "0644"


def test_drop_in_sorts_after_the_images_own_files() -> None:
    # cloud-init reads cloud.cfg.d/*.cfg in sorted order and the last value of a key wins. These are
    # names Ubuntu's cloud-init package and the clouds' images use.
    name = _drop_in()["dest"].rsplit("/", 1)[1]
    assert name.endswith(".cfg")
    image_files = ["05_logging.cfg", "90_dpkg.cfg", "90-azure.cfg", "99-installer.cfg",
                   "99_walinuxagent.cfg", "99_zz_vendor.cfg", "99-disable-network-config.cfg"]
    assert sorted([*image_files, name])[-1] == name


def test_drop_in_is_written_only_where_cloud_init_is_installed() -> None:
    # A host without cloud-init has no cloud.cfg.d: the files module leaves the entry alone there
    # (tests/unit/plugins/test_files_module.py runs that on a real folder).
    assert _drop_in()["skip_without_parent"] is True
