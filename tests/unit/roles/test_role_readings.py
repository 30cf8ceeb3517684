"""The roles' readings of tool output, evaluated by Ansible itself on real captures.

A regular expression in a YAML task is read twice, by YAML and by Ansible's templating, before it
reaches Python's ``re``; an escape that survives one of them differently reads nothing. The DGX
H100 twin found one: rdma_fabric's check of the IPoIB interface's network file read ``n/a`` on
every node, so converge stopped wherever an IPoIB interface exists. These tests take each reading's
expression from the task file and run it in a playbook on localhost over a captured output.
"""

from __future__ import annotations

import json
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
SAMPLES = REPO / "tests" / "data" / "samples"
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"


def _reading(task_file: str, task_name: str, var: str) -> str:
    tasks: list[dict[str, Any]] = yaml.safe_load((REPO / task_file).read_text())
    task = next(t for t in tasks if t.get("name") == task_name)
    expr: str = task["vars"][var]
    return expr


def _evaluate(cases: list[tuple[str, str, dict[str, Any]]], tmp: Path) -> list[str]:
    """Each (expression, registered name, registered value) evaluated by ansible-playbook on localhost."""
    out_file = tmp / "readings.json"
    tasks: list[dict[str, Any]] = [
        {"name": f"case {i}", "ansible.builtin.set_fact": {f"reading_{i}": expr.strip()}, "vars": {name: value}}
        for i, (expr, name, value) in enumerate(cases)]
    names = ", ".join(f"reading_{i}" for i in range(len(cases)))
    tasks.append({"name": "write", "ansible.builtin.copy": {"content": f"{{{{ [{names}] | to_json }}}}",
                                                            "dest": str(out_file), "mode": "0600"}})
    playbook = tmp / "readings.yml"
    playbook.write_text(yaml.safe_dump([{"hosts": "localhost", "gather_facts": False, "tasks": tasks}]))
    env = {**os.environ, "ANSIBLE_LOCALHOST_WARNING": "false", "ANSIBLE_INVENTORY_UNPARSED_WARNING": "false"}
    proc = subprocess.run([str(PLAYBOOK_BIN), str(playbook)], text=True, capture_output=True, timeout=120,
                          env=env, cwd=tmp)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    got: list[str] = json.loads(out_file.read_text())
    return got


def test_the_ipoib_check_reads_the_network_file_networkctl_names(tmp_path: Path) -> None:
    expr = _reading("roles/rdma_fabric/tasks/infiniband.yml",
                    "Check that the role's network file manages the IPoIB interface", "__rdma_fabric_network_applied")
    captured = (SAMPLES / "networkctl_status_01.txt").read_text()
    unmanaged = captured.replace("/etc/systemd/network/09-gpucluster-ibp24s0.network", "n/a")
    got = _evaluate([(expr, "__rdma_fabric_networkctl", {"stdout": captured}),
                     (expr, "__rdma_fabric_networkctl", {"stdout": unmanaged})], tmp_path)
    assert got == ["/etc/systemd/network/09-gpucluster-ibp24s0.network", "n/a"]


def test_the_roce_check_reads_the_link_file_udev_names(tmp_path: Path) -> None:
    expr = _reading("roles/rdma_fabric/tasks/roce.yml",
                    "Check that the role's link file configures the RoCE port", "__rdma_fabric_link_applied")
    captured = (SAMPLES / "udevadm_property_01.txt").read_text()
    # udevadm(8) --query=property prints KEY=value lines; a .link file that applied adds ID_NET_LINK_FILE.
    applied = captured + "ID_NET_LINK_FILE=/etc/systemd/network/09-gpucluster-enp24s0np0.link\n"
    got = _evaluate([(expr, "__rdma_fabric_udev_info", {"stdout": captured}),
                     (expr, "__rdma_fabric_udev_info", {"stdout": applied})], tmp_path)
    assert got == ["n/a", "/etc/systemd/network/09-gpucluster-enp24s0np0.link"]
