"""A run that failed is the tool's failed run, never "not its output": each parser on real failing
output (tests/data/samples, sources in SOURCES.md, "Failed runs"), with the tool's own error line
as the first reason, and `gpucluster parse` exiting 1, not 2.

Text that is no tool's output at all (a crash line alone, another program's "Error:") stays
NotToolOutput, exit 2.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from gpucluster.cli import main
from gpucluster.parsers import NotToolOutput, parse, parse_run
from gpucluster.parsers.common import crash

Sample = Callable[[str], str]

# (tool, sample, the error line the verdict must give as its reason, status)
FAILED_RUNS = [
    # NCCL could not initialise: a CUDA/NCCL error before the table.
    ("nccl-tests", "nccl_allreduce_15.txt", "Test NCCL failure common.cu:777 'unhandled system error'", "failed"),
    ("nccl-tests", "nccl_allreduce_16.txt", "Error while creating shared memory segment", "failed"),
    ("nccl-tests", "nccl_allreduce_17.txt", "HCA-63 pid 1883216: Test failure common.cu:915", "failed"),
    ("nccl-tests", "nccl_allreduce_18.txt", "Cuda failure 'named symbol not found'", "failed"),
    # A crash after the table header, before the first row.
    ("nccl-tests", "nccl_allreduce_19.txt", "==== backtrace (tid:    600) ====", "failed"),
    # A connection that never happens; a completion error; the option parser's refusal.
    ("ib_write_bw", "ib_write_bw_05.txt", "Couldn't connect to 192.168.125.211:18515", "failed"),
    ("ib_write_bw", "ib_write_bw_06.txt", "Completion with error at client", "failed"),
    ("ib_write_bw", "ib_write_bw_07.txt", "Parser function exited with Error", "failed"),
    # nvidia-smi that cannot reach a GPU, after a shell prompt; a lost GPU.
    ("nvidia-smi", "nvidia_smi_13.txt", "Unable to determine the device handle for GPU 0000:0B:00.0: Unknown Error",
     "failed"),
    ("nvidia-smi", "nvidia_smi_14.txt", "Unable to determine the device handle for GPU0000:07:00.0: Unknown Error",
     "failed"),
    ("nvidia-smi", "nvidia_smi_15.txt", "GPU is lost", "failed"),
    # dcgmi without its host engine.
    ("dcgmi", "dcgmi_diag_02.txt", "unable to establish a connection to the specified host: localhost", "failed"),
    # gpu-burn that could not start; nvbandwidth's CUDA error and assertion.
    ("gpu-burn", "gpu_burn_02.txt", "Couldn't init a GPU test: Error in \"couldn't find file \"compare.ptx",
     "failed"),
    ("nvbandwidth", "nvbandwidth_02.txt", "[cudaErrorUnsupportedPtxVersion] the provided PTX was compiled", "failed"),
    ("nvbandwidth", "nvbandwidth_03.txt", "ASSERT in expression h_errorFlag == 0", "failed"),
]


@pytest.mark.parametrize(("tool", "name", "reason", "status"), FAILED_RUNS, ids=[c[1] for c in FAILED_RUNS])
def test_a_failed_run_is_the_tools_failed_run_with_its_error_line(sample: Sample, tool: str, name: str, reason: str,
                                                                  status: str) -> None:
    result = parse(tool, sample(name))
    assert result["status"] == status
    first = next(n for n in result["notes"] if "noted, not judged" not in n)
    assert reason in first, result["notes"]


@pytest.mark.parametrize(("tool", "name", "reason", "status"), FAILED_RUNS, ids=[c[1] for c in FAILED_RUNS])
def test_gpucluster_parse_exits_1_for_a_failed_run(samples: Path, capsys: pytest.CaptureFixture[str], tool: str,
                                                   name: str, reason: str, status: str) -> None:
    assert main(["parse", tool, str(samples / name)]) == 1
    captured = capsys.readouterr()
    assert reason in captured.out and not captured.err


@pytest.mark.parametrize(("tool", "name", "reason", "status"), FAILED_RUNS, ids=[c[1] for c in FAILED_RUNS])
def test_a_check_reading_the_run_fails_with_the_reason(sample: Sample, tool: str, name: str, reason: str,
                                                       status: str) -> None:
    # What the conformance checks call: exit status 0 (a tool that exits 0 on failure) or not.
    for rc in (0, 1):
        result = parse_run(tool, sample(name), rc)
        assert result["status"] == "failed"
        assert any(reason in n for n in result["notes"])


def test_the_multi_host_log_is_recognised_by_its_error_lines_alone(sample: Sample) -> None:
    # nccl_allreduce_17 holds no nccl-tests header, table or NCCL log line: the grammar of
    # nccl-tests' own failure lines is what makes it nccl-tests output.
    text = sample("nccl_allreduce_17.txt")
    assert "# nThread" not in text and "NCCL INFO" not in text
    result = parse("nccl-tests", text)
    assert result["status"] == "failed" and result["rows"] == [] and result["format"] is None
    assert result["notes"][-1] == "no result table: the run stopped before its first size"


def test_a_run_cut_before_its_table_without_an_error_is_incomplete(sample: Sample) -> None:
    header = "\n".join(sample("nccl_allreduce_15.txt").splitlines()[:-1]) + "\n"
    result = parse("nccl-tests", header)
    assert result["status"] == "incomplete" and result["ranks"] == 4
    ib = parse("ib_write_bw", "\n".join(sample("ib_write_bw_05.txt").splitlines()[:1]) + "\n")
    assert ib["status"] == "incomplete" and ib["rows"] == []


# NCCL's own plugin lines, as NVIDIA/nccl#1292 quotes them (NCCL 2.20.3): healthy runs print them too.
PLUGIN_LINES = (
    "host:1:1 [0] NCCL INFO NET/Plugin: Failed to find ncclNetPlugin_v8 symbol.\n"
    "host:1:1 [0] NCCL INFO NET/Plugin: Failed to find ncclNetPlugin symbol (>= v5). ncclNetPlugin symbols v4 "
    "and lower are not supported.\n"
)


def test_plugin_lines_never_fail_a_run_that_printed_its_table(sample: Sample) -> None:
    text = sample("nccl_allreduce_08.txt")
    at = text.index("NCCL version")
    assert parse("nccl-tests", text[:at] + PLUGIN_LINES + text[at:])["status"] == "ok"


def test_a_plugin_nccl_could_not_use_is_the_reason_of_a_run_that_stopped_there(sample: Sample) -> None:
    header = "\n".join(sample("nccl_allreduce_15.txt").splitlines()[:-1]) + "\n"
    result = parse("nccl-tests", header + PLUGIN_LINES)
    assert result["status"] == "failed"
    assert result["notes"][0].startswith("NCCL could not use its network plugin: NET/Plugin: Failed to find "
                                         "ncclNetPlugin symbol (>= v5)")
    # aws-ofi-nccl that cannot start (aws/aws-ofi-nccl#1020), beside the failure that followed it.
    ofi = ("ip-172-31-3-90:1929:1937 [0] nccl_net_ofi_rdma_init:7978 NCCL WARN NET/OFI OFI fi_getinfo() call "
           "failed: No data available\n")
    result = parse("nccl-tests", header + ofi + sample("nccl_allreduce_15.txt").splitlines()[-1] + "\n")
    assert result["status"] == "failed"
    assert "Test NCCL failure" in result["notes"][1]
    assert any(n.startswith("NCCL could not use its network plugin (noted beside the failure): NET/OFI OFI "
                            "fi_getinfo() call failed") for n in result["notes"])
    # The ordinary "no plugin installed" lines (nccl_allreduce_18) are no plugin failure.
    assert not any("plugin" in n for n in parse("nccl-tests", sample("nccl_allreduce_18.txt"))["notes"])


CRASHES = [
    "Segmentation fault (core dumped)",
    "bash: line 1: 12345 Aborted                 (core dumped) ./build/all_reduce_perf -b 8",
    "all_reduce_perf: common.cu:123: void f(): Assertion `x == 0' failed.",
    "terminate called after throwing an instance of 'std::runtime_error'",
    "[nhri:08445] *** Process received signal ***",
    "[gpu-node09:332629:0:332629] Caught signal 11 (Segmentation fault: address not mapped to object at address 0x10)",
    "Aborted",
]


@pytest.mark.parametrize("line", CRASHES)
def test_crash_lines(line: str) -> None:
    assert crash(line)


@pytest.mark.parametrize("line", ["No clients are alive!  Aborting", "Test Aborted by user request? no",
                                  "Assertions pass", "# Out of bounds values : 0 OK"])
def test_not_crash_lines(line: str) -> None:
    assert not crash(line)


@pytest.mark.parametrize(("tool", "name", "marker"), [
    ("nccl-tests", "nccl_allreduce_08.txt", "     1048576"),
    ("ib_write_bw", "ib_write_bw_02.txt", " 65536 "),
    ("nvbandwidth", "nvbandwidth_01.txt", "SUM host_to_device_memcpy_ce"),
])
def test_a_crash_mid_run_fails_a_run_with_good_rows(sample: Sample, tool: str, name: str, marker: str) -> None:
    text = sample(name)
    cut = text.index("\n", text.index(marker)) + 1
    result = parse(tool, text[:cut] + "Segmentation fault (core dumped)\n")
    assert result["status"] == "failed"
    assert any("Segmentation fault (core dumped)" in n for n in result["notes"])


@pytest.mark.parametrize("tool", ["nccl-tests", "ib_write_bw", "nvidia-smi", "dcgmi", "gpu-burn", "nvbandwidth"])
@pytest.mark.parametrize("text", [
    "Segmentation fault (core dumped)\n",  # a crash names no tool
    "Error: could not open config file\n",  # another program's error
    "hello\nworld\n",
])
def test_no_tools_output_at_all_is_still_not_its_output(tool: str, text: str) -> None:
    with pytest.raises(NotToolOutput):
        parse(tool, text)


def test_gpucluster_parse_still_exits_2_for_no_tools_output(tmp_path: Path,
                                                           capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "crash.log"
    path.write_text("Segmentation fault (core dumped)\n")
    assert main(["parse", "ib_write_bw", str(path)]) == 2
    assert "not ib_write_bw output" in capsys.readouterr().err
