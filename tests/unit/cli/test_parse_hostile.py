"""`gpucluster parse` on hostile files: a verdict or one stderr line, never a traceback.

Most cases call the entry point in-process (an exception escaping it is what a traceback
would be); pipes and one hostile file run ``python -m gpucluster`` as a child process, because
there what is judged is what a shell sees: the exit code, stderr, and stdout when the reader
of a pipe goes away early.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from gpucluster.cli import main

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
SAMPLES = REPO / "tests" / "data" / "samples"
BIG = "9" * 5000


def _gpucluster(
    *args: str, stdout: int | None = subprocess.PIPE, timeout: float = 60
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "gpucluster", *args],
        cwd=REPO, stdout=stdout, stderr=subprocess.PIPE, text=True, timeout=timeout,
    )  # fmt: skip


def _strict_json(text: str) -> object:
    def refuse(constant: str) -> object:
        raise ValueError(f"non-standard JSON constant {constant}")

    return json.loads(text, parse_constant=refuse)


def _with_line(name: str, line: str) -> str:
    text = (SAMPLES / name).read_text(encoding="utf-8")
    mid = text.index("\n", len(text) // 2) + 1
    return text[:mid] + line + "\n" + text[mid:]


HOSTILE = {
    "nccl-tests": [
        _with_line("nccl_allreduce_08.txt", "1e999  8  float  sum  -1  1e999  1e999  1e999  0  1e999  1e999  1e999  0"),
        _with_line("nccl_allreduce_08.txt", f"{BIG}  {BIG}  float  sum  -1  1.0  1.0  1.0  0  1.0  1.0  1.0  0"),
        _with_line("nccl_allreduce_08.txt", "# Avg bus bandwidth    : 1e999"),
        _with_line("nccl_allreduce_01.txt", f"# nccl-tests version {BIG}"),
    ],
    "gpu-burn": [
        _with_line("gpu_burn_01.txt", f"Burning for {BIG} seconds."),
        _with_line("gpu_burn_01.txt", "9" * 50_000),
    ],
    "ib_write_bw": [
        _with_line("ib_write_bw_02.txt", f" Mtu             : {BIG}[B]"),
        _with_line("ib_write_bw_02.txt", f" {BIG}    {BIG}     1e999   1e999   1e999"),
    ],
    "nvidia-smi": [
        (SAMPLES / "nvidia_smi_02.txt").read_text(encoding="utf-8").replace("NVIDIA H100 80GB HBM3", "x" * 131_073),
        _with_line("nvidia_smi_10.txt", f"|   {BIG}  NVIDIA H200     On  |   00000000:83:00.0 Off |   {BIG} |"),
        _with_line("nvidia_smi_01.txt", f"Attached GPUs                             : {BIG}"),
    ],
    "dcgmi": [
        _with_line("dcgmi_diag_01.txt", "|" + " " * 20_000 + "|" + " " * 20_000 + "x"),
        _with_line("dcgmi_diag_01.txt", f"| GPU Memory                | Fail - GPU: {BIG} |"),
    ],
}


def _write(tmp_path: Path, name: str, data: str | bytes) -> Path:
    path = tmp_path / name
    path.write_bytes(data.encode("utf-8") if isinstance(data, str) else data)
    return path


@pytest.mark.parametrize(
    ("tool", "case"), [(tool, i) for tool, texts in HOSTILE.items() for i in range(len(texts))]
)
def test_hostile_file_gives_a_verdict_without_an_exception(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tool: str, case: int
) -> None:
    path = _write(tmp_path, "hostile.txt", HOSTILE[tool][case])
    for extra in ([], ["--json"]):
        code = main(["parse", tool, str(path), *extra])
        out, err = capsys.readouterr()
        assert code in (0, 1, 2)
        if code == 2:
            assert len(err.strip().splitlines()) == 1
        elif extra:
            doc = _strict_json(out)
            assert isinstance(doc, dict) and doc["status"] in ("ok", "failed", "incomplete")


def test_hostile_file_as_a_process_has_no_traceback(tmp_path: Path) -> None:
    path = _write(tmp_path, "big-field.txt", HOSTILE["nvidia-smi"][0])
    proc = _gpucluster("parse", "nvidia-smi", str(path), "--json")
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    _strict_json(proc.stdout)


@pytest.mark.parametrize("tool", list(HOSTILE))
@pytest.mark.parametrize(
    "data",
    [bytes(range(256)) * 64, b"\x00" * 65_536, b"\xff\xfe" + "x".encode("utf-16-le") * 1000, b"1e999\n" * 10],
    ids=["all-bytes", "nul", "utf16", "1e999"],
)
def test_binary_junk_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], tool: str, data: bytes
) -> None:
    code = main(["parse", tool, str(_write(tmp_path, "junk.bin", data)), "--json"])
    err = capsys.readouterr().err
    assert code in (1, 2)
    if code == 2:
        [line] = err.strip().splitlines()
        assert line.startswith("error: ")


def test_json_output_never_holds_nan_or_infinity(tmp_path: Path) -> None:
    # Before the fix this printed "peak_busbw_gbps": Infinity.
    row = "  1024  256  float  sum  -1  10.0  1e999  1e999  0  10.0  1e999  1e999  0"
    text = _with_line("nccl_allreduce_08.txt", row)
    proc = _gpucluster("parse", "nccl-tests", str(_write(tmp_path, "inf.txt", text)), "--json")
    assert proc.returncode == 1
    assert "Infinity" not in proc.stdout and "NaN" not in proc.stdout
    _strict_json(proc.stdout)


def _big_failing_log(tmp_path: Path) -> Path:
    # Large enough that the JSON (several MB) cannot sit in a pipe buffer: the writer meets EPIPE.
    return _write(tmp_path, "corrupt.txt", (SAMPLES / "nccl_allreduce_06.txt").read_text(encoding="utf-8") * 200)


def test_reader_gone_before_the_first_write_keeps_the_verdict_exit_code(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)  # every write by the child fails with EPIPE
    try:
        proc = _gpucluster("parse", "nccl-tests", str(_big_failing_log(tmp_path)), "--json", stdout=write_end)
    finally:
        os.close(write_end)
    assert proc.returncode == 1  # failed, as the log says; not 0, not 120
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


@pytest.mark.skipif(shutil.which("head") is None or shutil.which("bash") is None, reason="needs bash and head")
def test_piped_into_head_exits_with_the_verdict(tmp_path: Path) -> None:
    log = _big_failing_log(tmp_path)
    command = f'"{sys.executable}" -m gpucluster parse nccl-tests "{log}" --json'
    script = f"set -o pipefail; {command} | head -n 3 >/dev/null"
    proc = subprocess.run(["bash", "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr


def test_summary_into_a_closed_pipe_keeps_the_exit_code(tmp_path: Path) -> None:
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        proc = _gpucluster("parse", "nccl-tests", str(SAMPLES / "nccl_allreduce_08.txt"), stdout=write_end)
    finally:
        os.close(write_end)
    assert proc.returncode == 0 and "Traceback" not in proc.stderr
