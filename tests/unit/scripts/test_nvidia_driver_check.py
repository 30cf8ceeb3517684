"""scripts/nvidia-driver-check.sh: the nvidia_driver role in check mode against this machine.

On a GPU machine it records what docs/validation/ needs. Here it runs the same way against this
host (local connection, check mode, driver packages off so that nothing is even planned for
download) and must report what the host really has: the GPU count is compared with the NVIDIA
display devices this test counts in sysfs itself.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "nvidia-driver-check.sh"


def _nvidia_gpus() -> int:
    count = 0
    for dev in Path("/sys/bus/pci/devices").glob("*"):
        try:
            if (dev / "vendor").read_text().strip() == "0x10de" and (dev / "class").read_text().startswith("0x03"):
                count += 1
        except OSError:
            continue
    return count


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHON": sys.executable}
    return subprocess.run(["bash", str(SCRIPT), *args], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=300)


def test_check_mode_reports_what_this_host_has_and_changes_nothing(tmp_path: Path) -> None:
    if not Path("/usr/bin/python3").is_file():
        pytest.skip("no system Python at /usr/bin/python3 to run the role's modules with")
    out = tmp_path / "out"
    res = _run(str(out), "h100-sxm-8", "--", "-e", "nvidia_driver_userspace_enabled=false",
               "--runs-dir", str(tmp_path / "runs"))
    assert res.returncode == 0, res.stderr[-3000:]
    summary = json.loads((out / "converge.json").read_text())
    assert summary["exit_code"] == 0 and summary["changed_total"] == 0
    assert summary["hosts"]["gpu-host"]["failed"] == 0
    findings = (out / "findings.txt").read_text()
    report = "Report the driver found on this node and the steps it skips"
    assert f"{report}: ['{_nvidia_gpus()} NVIDIA GPU(s); " in findings
    pin = yaml.safe_load((REPO / "gpucluster/data/bom.yaml").read_text())["nvidia_driver"]["version"]
    assert f"pin {pin}" in findings
    inventory = (out / "inventory.yml").read_text()
    assert "ansible_connection" in inventory and "gpucluster_bom" in inventory


def test_an_unknown_profile_is_a_one_line_error(tmp_path: Path) -> None:
    res = _run(str(tmp_path / "out"), "no-such-profile")
    assert res.returncode == 2
    assert res.stderr.strip() == ("error: profile no-such-profile: no such file "
                                  "gpucluster/data/profiles/no-such-profile.yaml")
