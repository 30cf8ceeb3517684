"""Property: a log that reports a failure is never ``ok``, however it was mangled on the way.

Failing logs are built from the real samples (tests/data/samples): the corrupt nccl-tests run
as published, runs that failed before their table as published (a NCCL failure at start-up, a
perftest client that never connected, nvidia-smi that could not reach a GPU, dcgmi without its
host engine, an nvbandwidth assertion, gpu-burn that could not start), and passing runs given the
failure their tool prints (a perftest completion
error, a FAULTY gpu-burn verdict, ERR! readings in the nvidia-smi table, a NCCL failure line, a
failing DCGM test). Hypothesis then applies what happens to logs in practice: CRLF line
endings, lines printed twice, concatenation with a passing run of the same tool (before or
after), and truncation anywhere after the failure.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.parsers import parse

SAMPLES = Path(__file__).resolve().parents[3] / "tests" / "data" / "samples"


def _read(name: str) -> str:
    with open(SAMPLES / name, encoding="utf-8", newline="") as f:
        return f.read()


def _after_line(text: str, anchor: str, insert: str) -> str:
    at = text.index("\n", text.index(anchor)) + 1
    return text[:at] + insert + text[at:]


@dataclass(frozen=True)
class Case:
    tool: str
    build: Callable[[], str]
    marker: str  # the failure: truncation keeps at least the line that holds it
    passing: tuple[str, ...]  # passing samples of the same tool and shape


CASES = [
    Case("nccl-tests", lambda: _read("nccl_allreduce_06.txt"), "  18134  ",
         ("nccl_allreduce_08.txt", "nccl_allreduce_12.txt")),
    Case(
        "nccl-tests",
        lambda: _after_line(_read("nccl_allreduce_08.txt"), "     1048576",
                            "nvidiatools-dgx-2d-workload: Test NCCL failure common.cu:1012 'remote process exited'\n"),
        "Test NCCL failure",
        ("nccl_allreduce_08.txt", "nccl_allreduce_01.txt"),
    ),
    Case("ib_write_bw", lambda: _read("ib_write_bw_02.txt") + " Completion with error at client\n"
         " Failed to complete run_iter_bw function successfully\n", "Completion with error",
         ("ib_write_bw_03.txt", "ib_write_bw_01.txt")),
    Case("ib_write_bw", lambda: _after_line(_read("ib_write_bw_04.txt"), "\n65536", "Problems with warm up\n"),
         "Problems with warm up", ("ib_write_bw_04.txt",)),
    Case("gpu-burn", lambda: _read("gpu_burn_01.txt").replace("\tGPU 3: OK", "\tGPU 3: FAULTY"), "GPU 3: FAULTY",
         ("gpu_burn_01.txt",)),
    Case("nvidia-smi", lambda: _read("nvidia_smi_10.txt").replace("| N/A   28C    P0             77W /  700W |",
                                                                  "| ERR!  ERR!   ERR!         ERR! / ERR!  |"),
         "ERR!", ("nvidia_smi_10.txt",)),
    Case("nvidia-smi", lambda: _read("nvidia_smi_01.txt").replace(
        "DRAM Uncorrectable                         : 0", "DRAM Uncorrectable                         : 3", 1),
         "DRAM Uncorrectable                         : 3", ("nvidia_smi_01.txt",)),
    Case("dcgmi", lambda: _read("dcgmi_diag_01.txt").replace(
        "| GPU Memory                | Pass - All                                     |",
        "| GPU Memory                | Fail - GPU: 3                                  |"), "Fail - GPU: 3",
         ("dcgmi_diag_01.txt",)),
    # Runs that failed before their table (real output, "Failed runs" in SOURCES.md).
    Case("nccl-tests", lambda: _read("nccl_allreduce_15.txt"), "Test NCCL failure",
         ("nccl_allreduce_08.txt", "nccl_allreduce_01.txt")),
    Case("ib_write_bw", lambda: _read("ib_write_bw_05.txt"), "Couldn't connect to", ("ib_write_bw_03.txt",)),
    Case("nvidia-smi", lambda: _read("nvidia_smi_13.txt"), "Unable to determine the device handle",
         ("nvidia_smi_10.txt", "nvidia_smi_01.txt")),
    Case("dcgmi", lambda: _read("dcgmi_diag_02.txt"), "Unable to connect to host engine", ("dcgmi_diag_01.txt",)),
    Case("nvbandwidth", lambda: _read("nvbandwidth_03.txt"), "ASSERT in expression", ("nvbandwidth_01.txt",)),
    Case("gpu-burn", lambda: _read("gpu_burn_02.txt"), "Couldn't init a GPU test", ("gpu_burn_01.txt",)),
]  # fmt: skip


@st.composite
def mangled(draw: st.DrawFn) -> tuple[str, str]:
    case = draw(st.sampled_from(CASES))
    text = case.build()
    assert case.marker in text, case
    # Truncation anywhere from the end of the failure's line to the end of the log.
    first_keep = text.index("\n", text.index(case.marker)) + 1 if "\n" in text[text.index(case.marker) :] else len(text)
    cut = draw(st.integers(min_value=first_keep, max_value=len(text)))
    if draw(st.booleans()):
        text = text[:cut]
    lines = text.split("\n")
    for index in draw(st.lists(st.integers(min_value=0, max_value=max(0, len(lines) - 1)), max_size=4)):
        lines.insert(index, lines[index])  # a line printed twice (two ranks, a tee, a retry)
    text = "\n".join(lines)
    concat = draw(st.sampled_from(["none", "before", "after"]))
    if concat != "none":
        passing = _read(draw(st.sampled_from(case.passing)))
        text = passing + "\n" + text if concat == "before" else text + "\n" + passing
    if draw(st.booleans()):
        text = text.replace("\r\n", "\n").replace("\n", "\r\n")
    return case.tool, text


@settings(max_examples=250, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(mangled())
def test_a_failing_log_is_never_ok(log: tuple[str, str]) -> None:
    tool, text = log
    assert parse(tool, text)["status"] != "ok"


def test_the_failing_cases_fail_unmangled() -> None:
    for case in CASES:
        assert parse(case.tool, case.build())["status"] == "failed", case.marker
        for name in case.passing:
            assert parse(case.tool, _read(name))["status"] == "ok", name
