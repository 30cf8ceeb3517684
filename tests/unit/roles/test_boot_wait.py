"""The common role's wait for a booting node, run by Ansible on localhost against a stand-in
systemctl: a finished boot (running, degraded) passes; one that does not finish is named, with the
jobs it waits for and the setting that lifts the wait."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"
NAMES = ("Wait for the node's boot to finish", "Check that the node finished its boot")


def _run(tmp_path: Path, state: str) -> subprocess.CompletedProcess[str]:
    tasks: list[dict[str, Any]] = yaml.safe_load((REPO / "roles/common/tasks/preflight.yml").read_text())
    chosen = [t for t in tasks if t.get("name") in NAMES]
    assert [t["name"] for t in chosen] == list(NAMES)
    fake = tmp_path / "bin"
    fake.mkdir()
    # `timeout N cmd...` ends what never finishes: here, `starting` prints nothing, as the real one does.
    (fake / "timeout").write_text('#!/bin/sh\nshift\n[ "$STATE" = starting ] && exit 124\nexec "$@"\n')
    (fake / "systemctl").write_text(
        '#!/bin/sh\ncase "$1" in is-system-running) echo "$STATE" ;; '
        'list-jobs) echo "12 cloud-final.service start running" ;; esac\n')
    for f in fake.iterdir():
        f.chmod(0o755)
    play = [{"hosts": "localhost", "gather_facts": False, "environment": {"PATH": f"{fake}:/usr/bin:/bin",
                                                                          "STATE": state},
             "vars": {"common_boot_wait_timeout_s": 5, "ansible_facts": {"service_mgr": "systemd"}},
             "tasks": chosen}]
    playbook = tmp_path / "boot.yml"
    playbook.write_text(yaml.safe_dump(play))
    env = {**os.environ, "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false"}
    return subprocess.run([str(PLAYBOOK_BIN), str(playbook)], text=True, capture_output=True, timeout=120,
                          env=env, cwd=tmp_path)


@pytest.mark.parametrize("state", ["running", "degraded"])
def test_a_finished_boot_passes(tmp_path: Path, state: str) -> None:
    proc = _run(tmp_path, state)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_a_boot_that_does_not_finish_is_named_with_its_jobs(tmp_path: Path) -> None:
    proc = _run(tmp_path, "starting")
    out = " ".join((proc.stdout + proc.stderr).split())
    assert proc.returncode != 0
    assert "The node's boot has not finished after 5 s (systemd: still starting)" in out, out
    assert "12 cloud-final.service start running" in out and "common_boot_wait_timeout_s" in out, out


def test_rescue_mode_is_said(tmp_path: Path) -> None:
    out = " ".join((lambda p: p.stdout + p.stderr)(_run(tmp_path, "maintenance")).split())
    assert "(systemd: maintenance; the node is in rescue or emergency mode)" in out, out
