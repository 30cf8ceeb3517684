"""Converge a lab of its own twice: failed=0 on every host, then changed=0 on every host.

Needs root (the lab is systemd-nspawn containers) and the Debian mirror through the lab's
apt proxy. The lab (`rolelab`, 10.81.x) is brought up here and taken down afterwards.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpucluster.converge import ConvergeOptions, converge, lab_inventory

HERE = Path(__file__).resolve().parent
STACK = HERE / "Pulumi.rolelab.yaml"
GPUCLUSTER = [sys.executable, "-m", "gpucluster"]

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def lab() -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("the lab needs root (systemd-nspawn nodes, bridges, namespaces)")
    up = subprocess.run([*GPUCLUSTER, "lab", "up", "--stack", str(STACK)], capture_output=True, text=True)
    if up.returncode != 0:
        pytest.fail(f"gpucluster lab up failed:\n{up.stderr[-3000:]}")
    try:
        yield lab_inventory(str(STACK))
    finally:
        subprocess.run([*GPUCLUSTER, "lab", "down", "--stack", str(STACK)], capture_output=True, text=True)


def test_converge_twice_second_changes_nothing(lab: Path, tmp_path: Path) -> None:
    first = converge(ConvergeOptions(inventory=lab, runs_dir=tmp_path), progress_out=io.StringIO())
    assert first.exit_code() == 0, f"first converge failed: {first.failures} ({first.run_dir})"
    second = converge(ConvergeOptions(inventory=lab, runs_dir=tmp_path), progress_out=io.StringIO())
    assert second.exit_code() == 0, f"second converge failed: {second.failures}"
    changed = {h.host: h.changed for h in second.hosts if h.changed}
    assert changed == {}, f"a converged rerun changed something: {changed} ({second.run_dir})"
    check = converge(ConvergeOptions(inventory=lab, check=True, runs_dir=tmp_path), progress_out=io.StringIO())
    assert check.exit_code() == 0, f"--check failed: {check.failures}"
