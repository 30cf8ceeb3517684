"""The command line's contract: exit codes and machine-readable output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from gpucluster import __version__
from gpucluster.cli import build_parser, main

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]


def test_no_command_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
    assert capsys.readouterr().err.startswith("error: gpucluster: ")


def test_unknown_command_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["frobnicate"])
    assert exc.value.code == 2
    assert "invalid choice: 'frobnicate'" in capsys.readouterr().err


def test_missing_required_option_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["inventory", "--stack", "Pulumi.lab.yaml"])
    assert exc.value.code == 2
    assert "--outputs" in capsys.readouterr().err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out.strip() == f"gpucluster {__version__}"


def test_commands_offered() -> None:
    help_text = build_parser().format_help()
    for command in ("spec", "inventory"):
        assert command in help_text


def test_spec_validate_ok(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "validate", str(REPO / "Pulumi.lab.yaml")]) == 0
    assert "3 node(s) in 2 pool(s)" in capsys.readouterr().out


def test_spec_show_json_is_the_resolved_spec(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "show", str(REPO / "Pulumi.onprem-h100-roce.yaml"), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["stack"] == "onprem-h100-roce"
    assert data["spec"]["fabric"]["roce_qos"]["pfc_priority"] == 3
    node = data["nodes"][0]
    rails = node.pop("rails")
    assert node == {
        "name": "hgx-01",
        "pool": "hgx",
        "roles": ["gpu"],
        "profile": "h100-sxm-8",
        "platform": "dgx-h100-roce",
        "management_ip": "10.10.0.10",
        "fabric_ip": "10.20.0.10",
    }
    # Every RoCE compute port planned, each in its own subnet of fabric_cidr (platform
    # dgx-h100-roce: subnet_per_rail); the first carries the node's fabric address.
    assert len(rails) == 8 and len({r["cidr"] for r in rails}) == 8
    assert rails[0] == {"address": "10.20.0.10", "cidr": "10.20.0.0/25", "interface": "enp24s0np0"}
    assert set(data["profiles"]) == {"h100-sxm-8", "cpu-server"}
    assert data["software"]["kubernetes"]["version"]


def test_spec_show_yaml(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "show", str(REPO / "Pulumi.lab.yaml")]) == 0
    assert "name: lab" in capsys.readouterr().out


def test_installed_entry_point_runs() -> None:
    exe = Path(sys.executable).parent / "gpucluster"
    cmd = [str(exe)] if exe.exists() else [sys.executable, "-m", "gpucluster"]
    proc = subprocess.run([*cmd, "spec", "validate", str(REPO / "Pulumi.lab.yaml")], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
