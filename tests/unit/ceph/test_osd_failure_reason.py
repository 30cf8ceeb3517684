"""A failed OSD creation names its device, step and exit code, and never prints the key.

The role's real task file (roles/ceph_osd/tasks/create.yml) runs under ansible-playbook on this
host, with stand-ins for ceph-authtool and ceph on PATH: `ceph osd new` fails and echoes the key
it was given on stderr, as a verbose tool might.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
KEY = "AQBhc2RmYXNkZmFzZGZhc2RmYXNkZmFzZGZhcw=="


def _run(tmp_path: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "ceph-authtool").write_text(f"#!/bin/sh\necho {KEY}\n")
    (bin_dir / "ceph").write_text(
        "#!/bin/sh\ncat >/dev/null\necho \"Error EINVAL: cephx_secret rejected: $(echo " + KEY + ")\" >&2\nexit 22\n"
    )
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    play = tmp_path / "play.yml"
    play.write_text(
        "- hosts: localhost\n  gather_facts: false\n"
        "  vars:\n    ceph_osd_fsid: 2a4f6c1e-0000-4000-8000-000000000001\n"
        f"    __ceph_osd_bootstrap_keyring: {tmp_path}/bootstrap.keyring\n"
        "    __ceph_osd_item: [/dev/fake-nvme0n1, {}]\n"
        "  tasks:\n"
        f"    - ansible.builtin.include_tasks: {REPO}/roles/ceph_osd/tasks/create.yml\n"
    )
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text(f"[defaults]\ncollections_path = {REPO}/collections\n")
    env = {**os.environ, "ANSIBLE_CONFIG": str(cfg), "PATH": f"{bin_dir}:{os.environ['PATH']}",
           "ANSIBLE_PYTHON_INTERPRETER": sys.executable}
    playbook = Path(sys.executable).parent / "ansible-playbook"
    return subprocess.run([str(playbook), "-i", "localhost,", "-c", "local", str(play), *extra],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=180)


def test_a_failed_osd_says_device_step_and_exit_without_the_key(tmp_path: Path) -> None:
    proc = _run(tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert "/dev/fake-nvme0n1: creating the OSD failed (exit 22)" in out, out
    assert "failed at: ceph osd new (register the OSD with the monitors) (exit 22)" in out, out
    assert "cephx_secret rejected: <redacted>" in out, out
    assert KEY not in out, "the key leaked into the converge output"


@pytest.mark.parametrize("debug", [False, True])
def test_the_debug_switch_lifts_no_log(tmp_path: Path, debug: bool) -> None:
    proc = _run(tmp_path, "-v", "-e", f"gpucluster_debug_no_log={str(debug).lower()}")
    out = proc.stdout + proc.stderr
    hidden = "the output has been hidden due to the fact that 'no_log: true' was specified" in out
    assert hidden is not debug, out
