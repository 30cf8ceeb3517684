from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucluster.cli import main
from tests.unit.stacks.conftest import ROOT, write_stack


def test_plan_prints_resources_policy_and_says_it_is_not_a_diff(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(ROOT / "Pulumi.onprem-h100-ib.yaml")]) == 0
    out = capsys.readouterr().out
    assert "not a diff against live state" in out
    assert "`pulumi preview` is the real one" in out
    assert "+ gpucluster:baremetal:Machine  hgx-hgx-01" in out
    assert "PASS gpu-placement" in out


def test_plan_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", "--json", str(ROOT / "Pulumi.aws-h100.yaml")]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["target"] == "aws"
    assert {p["status"] for p in doc["policy"]} == {"pass"}
    assert len(doc["outputs"]["nodes"]) == 6
    assert any(r["properties"].get("instanceType") == "p5.48xlarge" for r in doc["resources"])


def test_plan_exits_1_when_a_policy_fails(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = write_stack(tmp_path, "aws-h100", {"target.admin_cidrs": ["0.0.0.0/0"]})
    assert main(["plan", str(path)]) == 1
    assert "FAIL no-public-management-port" in capsys.readouterr().out


def test_plan_fails_admin_cidrs_that_cover_the_internet_in_two_halves(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write_stack(tmp_path, "aws-h100", {"target.admin_cidrs": ["0.0.0.0/1", "128.0.0.0/1"]})
    assert main(["plan", str(path)]) == 1
    out = capsys.readouterr().out
    assert "FAIL no-public-management-port" in out
    assert "port 22 (SSH) reachable from" in out


def test_plan_exits_2_on_bad_input(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["plan", str(tmp_path / "Pulumi.missing.yaml")]) == 2
    assert capsys.readouterr().err.startswith("error: ")


def test_plan_of_the_lab_stack(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["plan", str(ROOT / "Pulumi.lab.yaml")])
    if (ROOT / "stacks" / "targets" / "lab.py").exists():
        assert code in (0, 1)
        assert "plan: stack 'lab' (lab)" in capsys.readouterr().out
    else:
        assert code == 2
        assert "target 'lab' has no Pulumi program yet" in capsys.readouterr().err
