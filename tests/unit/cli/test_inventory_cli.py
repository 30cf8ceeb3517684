"""`gpucluster inventory --json`: a report on the file -o wrote."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpucluster.cli import main

REPO = Path(__file__).resolve().parents[3]


def test_json_reports_the_hosts_and_groups_written(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "inventory.yml"
    assert main(["inventory", "--stack", str(REPO / "Pulumi.lab.yaml"),
                 "--outputs", str(REPO / "tests/golden/outputs/lab.json"), "-o", str(out), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["inventory"] == str(out) and out.is_file()
    assert report["hosts"] == ["gpu-1", "gpu-2", "stor-1"]
    assert report["groups"]["gpu"] == ["gpu-1", "gpu-2"]


def test_json_without_a_file_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inventory", "--stack", str(REPO / "Pulumi.lab.yaml"),
                 "--outputs", str(REPO / "tests/golden/outputs/lab.json"), "--json"]) == 2
    assert "add -o FILE" in capsys.readouterr().err
