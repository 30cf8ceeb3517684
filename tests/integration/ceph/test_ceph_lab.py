"""Issue 7's lab acceptance on a lab of its own (Pulumi.ceph.yaml: lab `ceph`, 10.87.x):
converge Ceph, converge again with zero changes, pass GC-CEPH-*, then stop an OSD and kill a
monitor and require the suite to name them, and the cluster to come back to HEALTH_OK."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from gpucluster.ceph.parse import parse_osd_tree

ROOT = Path(__file__).resolve().parents[3]
STACK = Path(__file__).with_name("Pulumi.ceph.yaml")
INVENTORY = Path("/var/lib/gpucluster/lab/ceph/inventory.yml")
BIN = Path(sys.executable).parent

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (network namespaces, loop devices)"),
]


def sh(argv: list[str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)


def on(node: str, command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return sh([str(BIN / "gpucluster"), "lab", "ssh", "--stack", str(STACK), node, "--", command], timeout)


def converge() -> subprocess.CompletedProcess[str]:
    # ansible-playbook itself: its PLAY RECAP is what the zero-change check reads.
    return sh([str(BIN / "ansible-playbook"), "-i", str(INVENTORY), "playbooks/deploy-ceph.yml"])


def recap_changes(output: str) -> dict[str, int]:
    return {m.group(1): int(m.group(2)) for m in re.finditer(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)", output, re.M)}


def suite(select: str = "") -> subprocess.CompletedProcess[str]:
    # A short run folder: the suite's SSH control sockets live there (108-byte socket path limit).
    run_dir = tempfile.mkdtemp(prefix="gc-ceph-", dir="/tmp")
    env_args = ["env", f"GPUCLUSTER_INVENTORY={INVENTORY}", f"GPUCLUSTER_RUN_DIR={run_dir}"]
    extra = ["-k", select] if select else []
    return sh([*env_args, str(BIN / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "tests/conformance/ceph", *extra], timeout=600)


def health(node: str = "node-1") -> dict:
    return json.loads(on(node, "ceph health detail -f json").stdout or "{}")


def wait_for(predicate, what: str, timeout: float = 240) -> None:  # type: ignore[no-untyped-def]
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(3)
    pytest.fail(f"not within {timeout:.0f} s: {what}")


@pytest.fixture(scope="module")
def cluster() -> None:
    up = sh([str(BIN / "gpucluster"), "lab", "up", "--stack", str(STACK)], timeout=1200)
    assert up.returncode == 0, f"lab up failed:\n{up.stderr[-3000:]}"
    first = converge()
    assert first.returncode == 0, f"converge failed:\n{first.stdout[-4000:]}"


def test_second_converge_changes_nothing(cluster: None) -> None:
    again = converge()
    assert again.returncode == 0, again.stdout[-3000:]
    changes = recap_changes(again.stdout)
    assert changes and all(n == 0 for n in changes.values()), f"second converge changed: {changes}"


def test_conformance_passes(cluster: None) -> None:
    wait_for(lambda: health().get("status") == "HEALTH_OK", "HEALTH_OK")
    res = suite()
    assert res.returncode == 0, res.stdout[-4000:]
    assert "failed" not in res.stdout.splitlines()[-1], res.stdout[-2000:]


def test_osd_down_is_named_and_data_stays_readable(cluster: None) -> None:
    written = on("node-1", "head -c 4194304 /dev/urandom > /mnt/cephfs/itest && sha256sum /mnt/cephfs/itest")
    assert written.returncode == 0, written.stderr
    osds = parse_osd_tree(on("node-1", "ceph osd tree -f json").stdout)
    osd_id = next(o.id for o in osds if o.host == "node-2")
    assert on("node-2", f"systemctl stop ceph-osd@{osd_id}").returncode == 0
    try:
        wait_for(lambda: "OSD_DOWN" in health().get("checks", {}), "OSD_DOWN reported")
        read = on("node-3", "sha256sum /mnt/cephfs/itest", timeout=60)
        assert read.returncode == 0 and read.stdout.split()[0] == written.stdout.split()[0], read.stderr
        res = suite("osds_up_and_in")
        assert res.returncode == 1, res.stdout[-2000:]
        assert f"osd.{osd_id} on node-2 is DOWN" in res.stdout, res.stdout[-2000:]
    finally:
        on("node-2", f"systemctl start ceph-osd@{osd_id}")
        on("node-1", "rm -f /mnt/cephfs/itest")
    wait_for(lambda: health().get("status") == "HEALTH_OK", "HEALTH_OK after the OSD came back")


def test_monitor_killed_quorum_holds_and_is_named(cluster: None) -> None:
    assert on("node-3", "systemctl kill -s KILL ceph-mon@node-3 && systemctl stop ceph-mon@node-3").returncode == 0
    try:
        wait_for(lambda: "MON_DOWN" in health().get("checks", {}), "MON_DOWN reported")
        quorum = json.loads(on("node-1", "ceph quorum_status -f json").stdout)
        assert quorum["quorum_names"] == ["node-1", "node-2"]
        res = suite("monitor_quorum")
        assert res.returncode == 1, res.stdout[-2000:]
        assert "out of quorum: node-3" in res.stdout and "quorum holds with 2" in res.stdout, res.stdout[-2000:]
    finally:
        on("node-3", "systemctl start ceph-mon@node-3")
    wait_for(lambda: health().get("status") == "HEALTH_OK", "HEALTH_OK after the monitor came back")
