"""ceph_client's probe (tasks/detect.yml), run in this host's shell against stand-in tools, and its
lines read by the role's own variables: the client chosen and the reason said."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.ceph.test_ceph_render import PROBE, client_vars
from tests.unit.roles.render import ROLES

# Starts processes (the probe's shell): outside `make unit-fast` (tests/unit/conftest.py).
pytestmark = pytest.mark.process

PROC_FS = "nodev\tsysfs\nnodev\tproc\nnodev\ttmpfs\n\text4\nnodev\tfuse\n\tfuseblk\nnodev\toverlay\n"
TOOL = '#!/bin/sh\n{body}\n'


def probe(tmp_path: Path, *, ceph_fs: bool, virt: str | None, modprobe: tuple[int, str] | None) -> dict[str, Any]:
    """The probe's registered result: virt None is not a container (exit 1, "none"); modprobe None is
    no modprobe at all on the PATH."""
    tasks = {t["name"]: t for t in yaml.safe_load((ROLES / "ceph_client/tasks/detect.yml").read_text())}
    script = tasks[PROBE]["ansible.builtin.raw"]
    filesystems = tmp_path / "filesystems"
    filesystems.write_text(PROC_FS + ("nodev\tceph\n" if ceph_fs else ""))
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    tools = {"systemd-detect-virt": f"echo {virt}" if virt else "echo none; exit 1"}
    if modprobe is not None:
        tools["modprobe"] = f"printf '%s' {modprobe[1]!r} >&2; exit {modprobe[0]}"
    for name, body in tools.items():
        (bin_dir / name).write_text(TOOL.format(body=body))
        (bin_dir / name).chmod(0o755)
    for name in ("grep", "tr", "printf"):
        (bin_dir / name).symlink_to(subprocess.run(["sh", "-c", f"command -v {name}"], capture_output=True,
                                                   text=True, check=True).stdout.strip() or f"/usr/bin/{name}")
    out = subprocess.run(["/bin/sh", "-c", script.replace("/proc/filesystems", str(filesystems))],
                         capture_output=True, text=True, check=False, env={"PATH": str(bin_dir)})
    return {"__ceph_client_detect": {"rc": out.returncode, "stdout": out.stdout,
                                     "stdout_lines": out.stdout.splitlines()}}


@pytest.mark.parametrize(("ceph_fs", "virt", "modprobe", "client", "reason"), [
    (True, "systemd-nspawn", (0, ""), "kernel", "the running kernel registers the ceph file system"),
    (False, "systemd-nspawn", (0, ""), "fuse", "this node is a container (systemd-nspawn), which cannot load"),
    (False, None, (0, ""), "kernel", "modprobe can load the ceph module"),
    (False, None, (1, "modprobe: FATAL: Module ceph not found in directory /lib/modules/6.1.0-37-amd64\n"),
     "fuse", "modprobe --dry-run ceph fails (rc 1: modprobe: FATAL: Module ceph not found in directory"),
    (False, None, None, "fuse", "modprobe --dry-run ceph fails (rc 127: "),
])
def test_the_probe_decides_with_the_roles_variables(tmp_path: Path, ceph_fs: bool, virt: str | None,
                                                    modprobe: tuple[int, str] | None, client: str,
                                                    reason: str) -> None:
    registered = probe(tmp_path, ceph_fs=ceph_fs, virt=virt, modprobe=modprobe)
    assert registered["__ceph_client_detect"]["rc"] == 0, registered
    v = client_vars("Pulumi.lab.yaml", **registered)
    assert v["__ceph_client_choice"] == client
    assert reason in v["__ceph_client_choice_reason"], v["__ceph_client_choice_reason"]
