"""The Ceph lab acceptance on the shared lab (`itest_lab`: lab `itest`, 10.89.x, converged once
by the session fixture through site.yml, which imports deploy-ceph.yml): a second converge with
zero changes, GC-CEPH-* passing, then an OSD stopped and a monitor killed, which the suite must
name, and the cluster back to HEALTH_OK after each (faults undone in `finally`)."""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from gpucluster.ceph.parse import parse_osd_tree
from tests.integration.waiting import wait_for

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.lab


def sh(argv: list[str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=timeout, check=False)


@pytest.fixture(scope="module")
def lab(itest_lab):  # type: ignore[no-untyped-def]
    return itest_lab


def suite(lab, select: str = "") -> subprocess.CompletedProcess[str]:  # type: ignore[no-untyped-def]
    # A short run folder: the suite's SSH control sockets live there (108-byte socket path limit).
    run_dir = tempfile.mkdtemp(prefix="gc-ceph-", dir="/tmp")
    env_args = ["env", f"GPUCLUSTER_INVENTORY={lab.inventory}", f"GPUCLUSTER_RUN_DIR={run_dir}"]
    extra = ["-k", select] if select else []
    return sh([*env_args, str(BIN / "python"), "-m", "pytest", "-q", "-p", "no:cacheprovider",
               "tests/conformance/ceph", *extra], timeout=600)


def health(lab, node: str = "node-1") -> dict:  # type: ignore[no-untyped-def]
    return json.loads(lab.ssh(node, "ceph health detail -f json").stdout or "{}")


def test_second_converge_changes_nothing(lab, itest_second_converge) -> None:  # type: ignore[no-untyped-def]
    # The second full converge (site.yml, deploy-ceph.yml included), shared with the roles test.
    again = itest_second_converge.result
    assert again.exit_code() == 0, f"second converge failed: {again.failures} ({again.run_dir})"
    changes = {h.host: h.changed for h in again.hosts}
    assert {"node-1", "node-2", "node-3"} <= set(changes), f"hosts missing from the recap: {changes}"
    assert changes and all(n == 0 for n in changes.values()), f"second converge changed: {changes}"


SAY_CLIENT_TASK = "Say which CephFS client mounts here and why"  # roles/ceph_client/tasks/detect.yml


def test_lab_mounts_with_ceph_fuse_and_says_why(lab) -> None:  # type: ignore[no-untyped-def]
    # Lab nodes are systemd-nspawn containers: auto must pick ceph-fuse and say so, per node.
    said: dict[str, str] = {}
    with (lab.first_converge_run_dir / "events.jsonl").open(encoding="utf-8") as events:
        for line in events:
            event = json.loads(line)
            data = event.get("event_data", {})
            if event.get("event") == "runner_on_ok" and data.get("task") == SAY_CLIENT_TASK:
                said[data["host"]] = data["res"]["msg"]
    assert {"node-1", "node-2", "node-3"} <= set(said), said
    for host, msg in said.items():
        assert "ceph-fuse because ceph is not in /proc/filesystems and this node is a container (systemd-nspawn)" \
            in msg, f"{host}: {msg}"
    fstype = lab.ssh("node-2", "findmnt -n -o FSTYPE --mountpoint /mnt/cephfs")
    assert fstype.stdout.strip() == "fuse.ceph-fuse", fstype.stdout + fstype.stderr


def test_conformance_passes(lab) -> None:  # type: ignore[no-untyped-def]
    wait_for(lambda: health(lab).get("status") == "HEALTH_OK", "HEALTH_OK")
    res = suite(lab)
    assert res.returncode == 0, res.stdout[-4000:]
    assert "failed" not in res.stdout.splitlines()[-1], res.stdout[-2000:]


def test_osd_down_is_named_and_data_stays_readable(lab) -> None:  # type: ignore[no-untyped-def]
    written = lab.ssh("node-1", "head -c 4194304 /dev/urandom > /mnt/cephfs/itest && sha256sum /mnt/cephfs/itest")
    assert written.returncode == 0, written.stderr
    osds = parse_osd_tree(lab.ssh("node-1", "ceph osd tree -f json").stdout)
    osd_id = next(o.id for o in osds if o.host == "node-2")
    assert lab.ssh("node-2", f"systemctl stop ceph-osd@{osd_id}").returncode == 0
    try:
        wait_for(lambda: "OSD_DOWN" in health(lab).get("checks", {}), "OSD_DOWN reported")
        read = lab.ssh("node-3", "sha256sum /mnt/cephfs/itest", timeout=60)
        assert read.returncode == 0 and read.stdout.split()[0] == written.stdout.split()[0], read.stderr
        res = suite(lab, "osds_up_and_in")
        assert res.returncode == 1, res.stdout[-2000:]
        assert f"osd.{osd_id} on node-2 is DOWN" in res.stdout, res.stdout[-2000:]
    finally:
        lab.ssh("node-2", f"systemctl start ceph-osd@{osd_id}")
        lab.ssh("node-1", "rm -f /mnt/cephfs/itest")
    wait_for(lambda: health(lab).get("status") == "HEALTH_OK", "HEALTH_OK after the OSD came back")


def test_monitor_killed_quorum_holds_and_is_named(lab) -> None:  # type: ignore[no-untyped-def]
    assert lab.ssh("node-3", "systemctl kill -s KILL ceph-mon@node-3 && systemctl stop ceph-mon@node-3"
                   ).returncode == 0
    try:
        wait_for(lambda: "MON_DOWN" in health(lab).get("checks", {}), "MON_DOWN reported")
        quorum = json.loads(lab.ssh("node-1", "ceph quorum_status -f json").stdout)
        assert quorum["quorum_names"] == ["node-1", "node-2"]
        res = suite(lab, "monitor_quorum")
        assert res.returncode == 1, res.stdout[-2000:]
        assert "2 of 3 monitors in quorum, expected 3: node-3 out of quorum (quorum holds with node-1, node-2)" \
            in res.stdout, res.stdout[-2000:]
    finally:
        lab.ssh("node-3", "systemctl start ceph-mon@node-3")
    wait_for(lambda: health(lab).get("status") == "HEALTH_OK", "HEALTH_OK after the monitor came back")
