"""Hostile input: huge numbers, huge fields, binary junk and lines built to make a regex backtrack.

Every parser must return a verdict (or raise NotToolOutput) and a JSON-safe dict, and must
take time linear in its input. Time is not asserted here (the 5-second target for 50 MB lives
in bench/bench_parse.py); the linear-time tests only kill a child process after 20 s, which
only pathological (quadratic or worse) behaviour reaches on these inputs.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from gpucluster.parsers import PARSERS, NotToolOutput, parse
from gpucluster.parsers.common import ParseResult

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

Sample = Callable[[str], str]

REPO = Path(__file__).resolve().parents[3]

# One real sample per shape each parser reads.
SAMPLES = {
    "nccl-tests": ["nccl_allreduce_01.txt", "nccl_allreduce_06.txt", "nccl_allreduce_08.txt"],
    "gpu-burn": ["gpu_burn_01.txt"],
    "ib_write_bw": ["ib_write_bw_02.txt", "ib_write_bw_04.txt"],
    "nvidia-smi": ["nvidia_smi_01.txt", "nvidia_smi_02.txt", "nvidia_smi_05.txt", "nvidia_smi_08.txt",
                   "nvidia_smi_10.txt", "nvidia_smi_11.txt", "nvidia_smi_12.txt"],
    "dcgmi": ["dcgmi_diag_01.txt"],
    "nvbandwidth": ["nvbandwidth_01.txt"],
}  # fmt: skip

BIG = "9" * 5000  # more digits than int() accepts (4300)
JUNK = bytes(range(256)).decode("latin-1") * 40 + "\x00\ufffd\u202e"

# Lines each tool's own vocabulary makes dangerous: keywords followed by numbers that overflow.
HOSTILE_LINES = {
    "nccl-tests": [
        f"{BIG}  {BIG}  float  sum  -1  1.0  1.0  1.0  0  1.0  1.0  1.0  0",
        "1e999  8  float  sum  -1  1e999  1e999  1e999  1e999  1e999  1e999  1e999  1e999",
        f"# nccl-tests version {BIG} nccl-headers=1 nccl-library={BIG}",
        f"# Out of bounds values : {BIG} OK",
        "# Avg bus bandwidth    : 1e999",
        f"#  Rank {BIG} Group  0 Pid 1 on h device  0 [0000:1b:00] X",
        f"NCCL version {BIG}.{BIG}.{BIG}",
    ],
    "gpu-burn": [
        f"Burning for {BIG} seconds.",
        f"Tested {BIG} GPUs:",
        f"\tGPU {BIG}: OK",
        f"100.0%  proc'd: {BIG} ({BIG} Gflop/s)   errors: {BIG}   temps: {BIG} C ",
        "1e999%  proc'd: 1e999 (1e999 Gflop/s)   errors: 1e999   temps: 1e999 C ",
        f"Initialized device {BIG} with 1 MB of memory (1 MB available, using 1 MB of it), using FLOATS",
        f"GPU {BIG}: X (UUID: GPU-1)",
        f"cuInit returned {BIG} (x)",
    ],
    "ib_write_bw": [
        f" {BIG}    {BIG}     {BIG}   {BIG}   {BIG}",
        " 65536    1000     1e999   1e999   1e999",
        f" Mtu             : {BIG}[B]",
        f" Number of qps   : {BIG}",
    ],
    "nvidia-smi": [
        f"Attached GPUs                             : {BIG}",
        f"        DRAM Uncorrectable                : {BIG}",
        "        DRAM Uncorrectable                : 1e999",
        f"|   {BIG}  NVIDIA H200     On  |   00000000:83:00.0 Off |   {BIG} |",
        f"| N/A   {BIG}C    P0     1e999W /  {BIG}W |  {BIG}MiB / 1e999MiB |  {BIG}%  Default |",
        f"GPU {BIG}: NVIDIA A100 (UUID: GPU-1)",
        f"\t Link {BIG}: {BIG}.{BIG} GB/s",
        f"\t Link {BIG}: Replay Errors: {BIG}",
        f"GPU{BIG}\t X \t0-19",
    ],
    "dcgmi": [
        f"| GPU Memory                | Fail - GPU: {BIG}                            |",
        f"|                           | GPU{BIG}: Fail                                 |",
        f"| Driver Version Detected   | {BIG}.{BIG}                                    |",
    ],
    "nvbandwidth": [
        f"{BIG}     {BIG}     1e999",
        f"SUM host_to_device_memcpy_ce {BIG}",
        "memcpy CE CPU(row) -> GPU(column) bandwidth (GB/s)" + " " * 50_000,
    ],
}
GENERIC_LINES = ["x" * 131_072 + " " + "y" * 131_072, "a," * 70_000, JUNK, "\x00" * 1000, "\r" * 1000 + "ok"]


def _cases() -> list[tuple[str, str, str]]:
    return [
        (tool, name, line)
        for tool, names in SAMPLES.items()
        for name in names
        for line in HOSTILE_LINES[tool] + GENERIC_LINES
    ]


def _insert(text: str, line: str, where: float) -> str:
    at = text.index("\n", int(len(text) * where)) + 1 if "\n" in text[int(len(text) * where) :] else len(text)
    return text[:at] + line + "\n" + text[at:]


@pytest.mark.parametrize(("tool", "name", "line"), _cases(), ids=lambda v: str(v)[:30])
def test_hostile_line_gives_a_verdict_never_an_exception(sample: Sample, tool: str, name: str, line: str) -> None:
    for where in (0.0, 0.5, 1.0):
        text = _insert(sample(name), line, where)
        try:
            result = parse(tool, text)
        except NotToolOutput:
            continue
        assert result["status"] in ("ok", "failed", "incomplete")
        json.dumps(result, allow_nan=False)  # no NaN, no Infinity, nothing unserialisable


@pytest.mark.parametrize("tool", list(PARSERS))
@pytest.mark.parametrize("text", [JUNK, "\x00" * 10_000, "x" * 200_000, "1e999\n" * 100, "\n" * 10_000, "\r\n" * 100])
def test_junk_alone_is_not_tool_output_or_not_ok(tool: str, text: str) -> None:
    try:
        result = parse(tool, text)
    except NotToolOutput:
        return
    assert result["status"] != "ok"


def test_a_huge_number_never_reaches_the_result_as_infinity() -> None:
    result = parse("nccl-tests", _insert(Path(REPO, "tests/data/samples/nccl_allreduce_08.txt").read_text(),
                                          "# Avg bus bandwidth    : 1e999", 1.0))  # fmt: skip
    json.dumps(result, allow_nan=False)


@dataclass
class _Row:
    x: float | None
    name: str


@dataclass
class _Result(ParseResult):
    rows: list[_Row] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)


def test_non_finite_floats_become_null_with_a_note() -> None:
    # No parser should produce one; to_json is the last guard before `--json` prints NaN.
    result = _Result(status="ok", rows=[_Row(1.0, "a"), _Row(float("nan"), "b")], extra={"z": [float("-inf")]})
    doc = result.to_json()
    assert [r["x"] for r in doc["rows"]] == [1.0, None] and doc["extra"] == {"z": [None]}
    assert any("non-finite" in n and "x" in n and "z" in n for n in doc["notes"])
    json.dumps(doc, allow_nan=False)


# ---- linear time ----------------------------------------------------------------------------

# Each line targets a pattern that backtracked before: a lazy group before a run of blanks
# (dcgmi rows and section rules, nvidia-smi table rows, gpu-burn's "proc'd: (.*?) errors:"),
# an unanchored search that starts with \d+ (gpu-burn's progress percentage, dcgmi versions),
# "\d+\.?\d*" (numbers), and the same keyword repeated (UUID and "Initialized device" lines).
_N = 100_000
ADVERSARIAL = [
    " " * _N + "x",
    "9" * _N,
    "9" * _N + "x%",
    "proc'd: " + "9" * _N,
    "1% proc'd: 1 " + " " * _N + "x",
    "| x" + " " * _N + "x",
    "|---  x" + " " * _N + "--+-|x",
    "|" + "-" * _N + "x",
    "|   0  " + "x " * (_N // 2) + " On  | 0:0.0 Off | 0 |",
    "a " * (_N // 2),
    "\t" * _N + "x",
    "0." + "0" * _N + "x",
    "9." * (_N // 2),
    "GPU 0: " + " (UUID: " * (_N // 8),
    "Initialized device 0 with " * (_N // 26),
    "NVIDIA-SMI x" * (_N // 12),
    "a" + " " * _N + "b",
    "#" + " " * _N + "x",
    "ib_write_bw -D" + " " * _N,
    "| Driver Version Detected   | " + "9" * _N + " |",
]

_CHILD = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from gpucluster.parsers import NotToolOutput, parse
    tool, names, lines = json.loads(sys.stdin.read())
    for name in names:
        text = Path("tests/data/samples", name).read_text(encoding="utf-8")
        mid = text.index("\\n", len(text) // 2) + 1
        for line in lines:
            try:
                parse(tool, text[:mid] + line + "\\n" + text[mid:])
            except NotToolOutput:
                pass
    print("done")
    """
)


@pytest.mark.parametrize("tool", list(PARSERS))
def test_adversarial_lines_are_parsed_in_linear_time(tool: str) -> None:
    """Kills the child after 20 s: these inputs take milliseconds in linear time, hours in quadratic."""
    payload = json.dumps([tool, SAMPLES[tool], ADVERSARIAL])
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD], input=payload, capture_output=True, text=True, cwd=REPO, timeout=20
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"{tool}: parsing adversarial lines took over 20 s (super-linear backtracking?)")
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "done"


def test_many_distinct_notes_stay_bounded(sample: Sample) -> None:
    # 20,000 unreadable rows: one verdict, a bounded list of notes, no quadratic dedupe.
    text = sample("nccl_allreduce_08.txt")
    bad = "".join(f"  {i}  {i}  float  sum  -1  nan  nan  nan  0  nan  nan  nan  0\n" for i in range(20_000))
    result = parse("nccl-tests", _insert(text, bad, 0.6))
    assert result["status"] == "incomplete"
    assert len(result["notes"]) <= 50
