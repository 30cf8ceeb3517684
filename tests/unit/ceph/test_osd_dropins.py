"""ceph_osd's one files task for the OSDs' drop-ins: the folder and file list Ansible renders from
the task's own variables holds, for each OSD, byte for byte what the template action writes from
osd-device.conf.j2 (the task replaced a file loop and a template loop; a byte of difference
would restart nothing but report a change at every converge)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.loading import run_local_play

# Starts processes (subprocess): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
ROLE = REPO / "roles" / "ceph_osd"
OSDS = [[0, "/dev/loop3"], [12, "/dev/disk/by-id/nvme-eui.0025388b01234567"]]


def _task() -> dict[str, Any]:
    tasks = yaml.safe_load((ROLE / "tasks" / "service.yml").read_text())
    task: dict[str, Any] = next(t for t in tasks if "gpucluster.cluster.files" in t)
    return task


def _expression(value: str) -> str:
    assert value.startswith("{{ ") and value.endswith(" }}"), value
    return value[3:-3]


def test_the_dropin_list_holds_what_the_template_action_writes(tmp_path: Path) -> None:
    task = _task()
    assert task["register"] == "__ceph_osd_dropin"  # the OSD start's daemon_reload reads it
    (tmp_path / "templates").symlink_to(ROLE / "templates")
    play = [{
        "hosts": "localhost", "gather_facts": False,
        "vars": {**task["vars"], "__ceph_osds": OSDS},
        "tasks": [
            {"ansible.builtin.copy": {
                "content": "{{ {'directories': " + _expression(task["gpucluster.cluster.files"]["directories"])
                           + ", 'files': " + _expression(task["gpucluster.cluster.files"]["files"]) + "} | to_json }}",
                "dest": str(tmp_path / "out.json"), "mode": "0600"}},
            {"ansible.builtin.template": {"src": "osd-device.conf.j2", "dest": str(tmp_path / "osd-{{ item[0] }}.conf"),
                                          "mode": "0600"},
             "loop": "{{ __ceph_osds }}"},
        ],
    }]
    (tmp_path / "play.yml").write_text(yaml.safe_dump(play))
    run_local_play(tmp_path / "play.yml", tmp_path)
    got = json.loads((tmp_path / "out.json").read_text())
    assert got["directories"] == [
        {"path": "/etc/systemd/system/ceph-osd@0.service.d", "owner": "root", "group": "root", "mode": "0755"},
        {"path": "/etc/systemd/system/ceph-osd@12.service.d", "owner": "root", "group": "root", "mode": "0755"}]
    assert [f["dest"] for f in got["files"]] == [
        "/etc/systemd/system/ceph-osd@0.service.d/gpucluster-device.conf",
        "/etc/systemd/system/ceph-osd@12.service.d/gpucluster-device.conf"]
    for entry, (osd, device) in zip(got["files"], OSDS, strict=True):
        assert entry["content"] == (tmp_path / f"osd-{osd}.conf").read_text()
        assert f"ExecStartPre=+/bin/chown ceph:ceph {device}\n" in entry["content"]
        assert (entry["owner"], entry["group"], entry["mode"]) == ("root", "root", "0644")
