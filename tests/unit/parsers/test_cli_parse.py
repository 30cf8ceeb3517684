"""`gpucluster parse TOOL FILE [--json]` through the CLI entry point (gpucluster/cli/parse.py)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest

from gpucluster.cli import main


def test_ok_run_exits_0_with_a_summary(samples: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "nccl-tests", str(samples / "nccl_allreduce_01.txt")]) == 0
    out = capsys.readouterr().out
    assert ": ok" in out and "235.26" in out


def test_json_output_has_the_documented_keys(samples: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "nccl-tests", str(samples / "nccl_allreduce_01.txt"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert {
        "status",
        "notes",
        "format",
        "collective",
        "ranks",
        "rows",
        "peak_busbw_gbps",
        "avg_busbw_gbps",
        "out_of_bounds",
        "nccl_version",
    } <= set(doc)
    assert set(doc["rows"][0]) >= {
        "size_bytes", "count", "type", "redop", "root", "time_oop_us", "algbw_oop_gbps", "busbw_oop_gbps",
        "wrong_oop", "time_ip_us", "algbw_ip_gbps", "busbw_ip_gbps", "wrong_ip",
    }  # fmt: skip
    assert doc["ranks"] == 8


@pytest.mark.parametrize(
    ("tool", "name"),
    [
        ("nccl-tests", "nccl_allreduce_06.txt"),  # wrong data: failed
        ("nccl-tests", "nccl_allreduce_10.txt"),  # no footer: incomplete
    ],
)
def test_failed_or_incomplete_exits_1(samples: Path, tool: str, name: str) -> None:
    assert main(["parse", tool, str(samples / name)]) == 1


@pytest.mark.parametrize(
    ("tool", "name"),
    [
        ("gpu-burn", "gpu_burn_01.txt"),
        ("ib_write_bw", "ib_write_bw_02.txt"),
        ("nvidia-smi", "nvidia_smi_10.txt"),
        ("dcgmi", "dcgmi_diag_01.txt"),
    ],
)
def test_every_tool_json(samples: Path, capsys: pytest.CaptureFixture[str], tool: str, name: str) -> None:
    assert main(["parse", tool, str(samples / name), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["status"] == "ok"


def test_gpu_burn_file_keeps_carriage_returns(samples: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["parse", "gpu-burn", str(samples / "gpu_burn_01.txt"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["gpus"][1]["gflops"] == 17093
    assert (doc["precision"], doc["tensor_cores"]) == ("fp64", True)


def test_wrong_tool_exits_2_with_one_line(samples: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = str(samples / "dcgmi_diag_01.txt")
    assert main(["parse", "nccl-tests", path]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err == [f"error: {path}: not nccl-tests output (no '#  Rank'/size table found)"]


def test_missing_file_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "nope.txt"
    assert main(["parse", "dcgmi", str(path)]) == 2
    [line] = capsys.readouterr().err.strip().splitlines()
    assert line.startswith(f"error: {path}: cannot read:")


def test_unknown_tool_exits_2(samples: Path) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["parse", "rados-bench", str(samples / "dcgmi_diag_01.txt")])
    assert exc.value.code == 2


def test_stdin(samples: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    data = (samples / "ib_write_bw_01.txt").read_bytes()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert main(["parse", "ib_write_bw", "-", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["role"] == "both"
