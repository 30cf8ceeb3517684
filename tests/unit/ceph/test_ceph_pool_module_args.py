"""ceph_pool under Ansible's own argument handling: the spec's pools reach it as the task passes them
(`pools: "{{ ceph_pools_pools }}"`: nulls for unset fields, numbers as Jinja renders them), and an
entry with a field the module does not know fails with Ansible's message. The module runs as a
process, as Ansible runs it, with a stand-in `ceph` first on PATH."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# Starts processes (subprocess): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

MODULE = Path(__file__).resolve().parents[3] / "roles/ceph_pools/library/ceph_pool.py"

# The stand-in: every call logged; the table holds `rbd` as asked, and a pool once created.
FAKE_CEPH = """#!{python}
import json, os, sys
args = sys.argv[1:]
with open(os.environ["CEPH_LOG"], "a") as log:
    log.write(" ".join(args) + "\\n")
made = os.environ["CEPH_LOG"] + ".created"
cmd = args[2:]  # past --connect-timeout 30
if cmd[:3] == ["osd", "pool", "create"]:
    with open(made, "a") as f:
        f.write(cmd[3] + "\\n")
elif cmd[:4] == ["osd", "crush", "rule", "dump"]:
    print(json.dumps({{"rule_id": 0, "rule_name": cmd[4]}}))
elif cmd[:4] == ["osd", "pool", "ls", "detail"]:
    pools = [{{"pool_name": "rbd", "size": 1, "min_size": 1, "pg_num": 32, "pg_autoscale_mode": "off",
              "crush_rule": 0, "application_metadata": {{"rbd": {{}}}}}}]
    names = open(made).read().split() if os.path.exists(made) else []
    pools += [{{"pool_name": n, "size": 1, "min_size": 1, "pg_num": 32, "pg_autoscale_mode": "on",
               "crush_rule": 0, "application_metadata": {{}}}} for n in names]
    print(json.dumps(pools))
"""


def _run(tmp_path: Path, args: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    ceph = bin_dir / "ceph"
    ceph.write_text(FAKE_CEPH.format(python=sys.executable))
    ceph.chmod(ceph.stat().st_mode | stat.S_IEXEC)
    log = tmp_path / "ceph.log"
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    env = {**os.environ, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "CEPH_LOG": str(log)}
    proc = subprocess.run([sys.executable, str(MODULE), str(args_file)], capture_output=True, text=True,
                          env=env, timeout=60)
    assert proc.stdout.strip(), proc.stderr
    result: dict[str, Any] = json.loads(proc.stdout)
    return result, log.read_text().splitlines() if log.exists() else []


def test_the_spec_pools_pass_as_they_are(tmp_path: Path) -> None:
    pools = [{"name": "rbd", "application": "rbd", "size": "1", "min_size": None, "pg_num": "32"},
             {"name": "cephfs-meta", "application": "cephfs", "size": 1, "min_size": None, "pg_num": None}]
    result, calls = _run(tmp_path, {"pools": pools, "crush_rule": "replicated_rule"})
    assert not result.get("failed"), result
    assert result["actions"] == {"rbd": [], "cephfs-meta": ["create", "application=cephfs"]}
    assert result["pools"]["rbd"] == "size 1, min_size 1, pg_num 32, rule replicated_rule, application rbd"
    creates = [c for c in calls if "osd pool create" in c]
    assert creates == ["--connect-timeout 30 osd pool create cephfs-meta replicated replicated_rule "
                       "--autoscale-mode=on"]


def test_an_unknown_pool_field_fails_before_any_command(tmp_path: Path) -> None:
    pools = [{"name": "rbd", "application": "rbd", "size": 1, "replicas": 3}]
    result, calls = _run(tmp_path, {"pools": pools})
    assert result["failed"] and "replicas" in result["msg"]
    assert calls == []
