"""Converge the shared lab twice: failed=0 on every host, then changed=0 on every host, then
`--check` with no failures.

The first converge (site.yml, Ceph included) is the session fixture `itest_lab`'s
(tests/integration/conftest.py: lab `itest`, 10.89.x); the second is `itest_second_converge`,
shared with the Ceph test. Needs root (the lab is systemd-nspawn containers) and the Debian
mirror through the lab's apt proxy.
"""

from __future__ import annotations

import io
import time
from pathlib import Path

import pytest

from gpucluster.converge import ConvergeOptions, converge

pytestmark = pytest.mark.lab


def test_converge_twice_second_changes_nothing(itest_lab, itest_second_converge, tmp_path: Path) -> None:
    first = itest_lab.first_converge
    assert first["exit_code"] == 0, f"first converge failed: {first['failures']} ({first['run_dir']})"
    assert first["hosts"] and not first["failed_hosts"], f"first converge: {first['hosts']}"
    second = itest_second_converge.result
    assert second.exit_code() == 0, f"second converge failed: {second.failures} ({second.run_dir})"
    assert {h.host for h in second.hosts} >= {"node-1", "node-2", "node-3"}, second.hosts
    changed = {h.host: h.changed for h in second.hosts if h.changed}
    assert changed == {}, f"a converged rerun changed something: {changed} ({second.run_dir})"
    t0 = time.monotonic()
    check = converge(ConvergeOptions(inventory=itest_lab.inventory, check=True, runs_dir=tmp_path),
                     progress_out=io.StringIO())
    itest_lab.record("check_converge_s", time.monotonic() - t0)
    assert check.exit_code() == 0, f"--check failed: {check.failures} ({check.run_dir})"


def test_a_rail_node_does_not_wait_for_networkd_at_boot(itest_lab) -> None:
    """The lab's nodes keep their management links on ifupdown: networkd manages the rails alone,
    and its wait-online (enabled with networkd) would time out at every boot, so the role turns it
    off; the waiter, run by hand, indeed finds nothing it must wait for."""
    res = itest_lab.ssh("node-1", "networkctl list --no-legend --no-pager; "
                                  "echo enabled=$(systemctl is-enabled systemd-networkd-wait-online.service)")
    assert res.returncode == 0, res.stderr
    assert "enp16s0np0" in res.stdout and "configured" in res.stdout, res.stdout
    assert "enabled=disabled" in res.stdout, res.stdout
