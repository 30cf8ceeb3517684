"""scripts/gpu-validation.sh, the script a lent GPU machine runs, exercised here with stand-ins for the
GPU tools: it refuses a machine without a GPU (exit 2), and on one it records every acceptance input
(DCGM's JSON, nvbandwidth with the links sampled under it, Xid/SXid lines) and a summary whose burn
rows carry the products' rate and the whole loop's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpucluster.parsers import parse

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
SCRIPT = REPO / "scripts" / "gpu-validation.sh"
SAMPLES = REPO / "tests" / "data" / "samples"


def _tool(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text("#!/bin/sh\n" + body)
    path.chmod(0o755)


def test_a_machine_without_nvidia_smi_is_refused(tmp_path: Path) -> None:
    res = subprocess.run(["bash", str(SCRIPT), str(tmp_path / "out"), "1"], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin"}, timeout=60)
    assert res.returncode == 2 and "not a GPU machine" in res.stderr


def test_a_gpu_machine_records_each_acceptance_input_and_the_burn_summary(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    header = "index, pcie.link.gen.current, pcie.link.width.current, pcie.link.gen.max, pcie.link.width.max"
    _tool(bin_dir, "nvidia-smi", f'case "$*" in *-lms*) echo "{header}"; while :; do echo "0, 5, 16, 5, 16"; '
                                 'sleep 0.1; done ;; *) echo "nvidia-smi $*" ;; esac\n')
    _tool(bin_dir, "dcgmi", f"cat {SAMPLES / 'dcgmi_diag_json_01.txt'}\n")
    _tool(bin_dir, "nvbandwidth", f"sleep 0.5; cat {SAMPLES / 'nvbandwidth_01.txt'}\n")
    _tool(bin_dir, "journalctl", "echo 'kernel: NVRM: Xid (PCI:0000:18:00): 79, pid=1, GPU has fallen off the bus.'\n")
    row = {"device": "cuda:0", "name": "NVIDIA H100 80GB HBM3", "precision": "bf16", "tflops": 702.5,
           "wall_tflops": 431.0, "matmul_peak_tflops": 731.2, "errors": 0, "ok": True}
    # The script's Python: torch's questions answered yes, the burn's output canned, the rest real.
    _tool(bin_dir, "fakepy", 'case "$*" in\n'
                             '  *burn_torch.py*) echo \'' + json.dumps({"status": "ok", "results": [row]}) + '\' ;;\n'
                             '  *import\\ torch*|*"import torch"*) echo "2.5.0 12.4 True 1" ;;\n'
                             f'  *) exec {sys.executable} "$@" ;;\nesac\n')
    out = tmp_path / "out"
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin", "PYTHON": str(bin_dir / "fakepy"), "HOME": os.environ.get("HOME", "/")}
    res = subprocess.run(["bash", str(SCRIPT), str(out), "1"], capture_output=True, text=True, env=env, timeout=120)
    assert res.returncode == 0, res.stderr
    assert parse("dcgmi", (out / "dcgmi-diag-r2.json").read_text())["status"] == "ok"  # what GC-DCGM-001 reads
    assert "memcpy CE" in (out / "nvbandwidth.txt").read_text()
    samples = (out / "pcie-under-load.csv").read_text().splitlines()
    assert samples[0] == header and len(samples) >= 3  # sampled while nvbandwidth ran, then stopped
    assert "Xid (PCI:0000:18:00): 79" in (out / "xid.txt").read_text()
    summary = (out / "summary.md").read_text()
    assert "| cuda:0 | NVIDIA H100 80GB HBM3 | bf16 | 702.5 | 431.0 | 731.2 | 0 | True |" in summary
