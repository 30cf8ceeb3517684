"""The parser registry: every tool's parser rejects the other tools' output."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpucluster.parsers import PARSERS, NotToolOutput, parse

Sample = Callable[[str], str]

OWNER = {
    "nccl_allreduce_": "nccl-tests",
    "gpu_burn_": "gpu-burn",
    "ib_write_bw_": "ib_write_bw",
    "nvidia_smi_": "nvidia-smi",
    "dcgmi_diag_": "dcgmi",
    "nvbandwidth_": "nvbandwidth",
}
# Samples read by helpers outside the registry (a log without events is valid, so no NotToolOutput),
# or by the roles' own readings (tests/unit/roles/test_role_readings.py).
UNREGISTERED = ("fi_info_", "kernel_xid_", "kernel_sxid_", "ofed_info_", "efa_installed_packages_",
                "networkctl_status_", "udevadm_property_")


def _owner(name: str) -> str:
    return next(tool for prefix, tool in OWNER.items() if name.startswith(prefix))


def test_registry_keys() -> None:
    assert set(PARSERS) == {"nccl-tests", "gpu-burn", "ib_write_bw", "nvidia-smi", "dcgmi", "nvbandwidth"}
    with pytest.raises(KeyError):
        parse("rados-bench", "")


def test_every_sample_parses_with_its_own_parser(samples: Path, sample: Sample) -> None:
    names = sorted(p.name for p in samples.glob("*.txt") if not p.name.startswith(UNREGISTERED))
    assert len(names) >= 22
    for name in names:
        result = parse(_owner(name), sample(name))
        assert result["status"] in ("ok", "failed", "incomplete"), name
        assert isinstance(result["notes"], list)


def test_other_tools_output_is_rejected(samples: Path, sample: Sample) -> None:
    for path in sorted(samples.glob("*.txt")):
        if path.name.startswith(UNREGISTERED):
            continue
        text = sample(path.name)
        for tool in PARSERS:
            if tool == _owner(path.name):
                continue
            with pytest.raises(NotToolOutput):
                parse(tool, text)
                pytest.fail(f"{tool} parser accepted {path.name}")


@pytest.mark.parametrize("tool", list(PARSERS))
def test_empty_text_is_not_tool_output(tool: str) -> None:
    with pytest.raises(NotToolOutput):
        parse(tool, "")


# Text built from the tools' own vocabulary reaches deeper than random characters.
_FRAGMENTS = st.sampled_from(
    [
        "#  Rank  0 Group  0 Pid 1 on h device  0 [0000:1b:00] X",
        "# size count type redop root time algbw busbw #wrong time algbw busbw #wrong",
        "  8  2  float  sum  -1  1.0  0.00  0.00  N/A  1.0  0.00  0.00  1e+06",
        "# Out of bounds values : 0 OK",
        "# Avg bus bandwidth    : x",
        "\r50.0%  proc'd: 1 (2 Gflop/s) - -1 (0 Gflop/s)   errors: 0  (DIED!) - 3   temps: -- - 40 C",
        "Tested 2 GPUs:",
        "\tGPU 0: FAULTY",
        "Initialized device 0 with 1 MB of memory (1 MB available, using 1 MB of it), using DOUBLES",
        "                    RDMA_Write BW Test",
        " #bytes     #iterations    BW peak[MB/sec]    BW average[MB/sec]   MsgRate[Mpps]",
        " 65536      10         0.00               181.46 \t\t     0.346100",
        "==============NVSMI LOG==============",
        "GPU 00000000:07:00.0",
        "    Remapped Rows",
        "        Pending                           : Yes",
        "index, memory.total [MiB], remapped_rows.failure",
        "0, 1 MiB, Yes",
        "GPU 0: NVIDIA A100 (UUID: GPU-1)",
        "\t Link 0: <inactive>",
        "\tGPU0\tCPU Affinity",
        "GPU0\t X \t0-1",
        "| NVIDIA-SMI 1.2    Driver Version: 1.2      CUDA Version: 1 |",
        "|   0  NVIDIA H200                    On  |   00000000:83:00.0 Off |                    7 |",
        "| Diagnostic                | Result                                         |",
        "+===========================+================================================+",
        "|-----  Deployment  --------+------------------------------------------------|",
        "| Blacklist                 | Fail - GPU: 0, 1                               |",
        "|                           | Warn                                           |",
        "| Warning                   | x                                              |",
        "{",
        '{"results": [{"size": 1, "count": 1, "out_of_place": {"nwrong": 2}}]}',
        "0: ",
        "[1,0]<stdout>:",
        "\x1b[4m",
        "...",
    ]
)
_TEXT = st.lists(st.one_of(_FRAGMENTS, st.text(max_size=40)), max_size=25).map("\n".join)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(text=_TEXT, tool=st.sampled_from(sorted(PARSERS)))
def test_arbitrary_text_never_crashes(text: str, tool: str) -> None:
    try:
        result = parse(tool, text)
    except NotToolOutput:
        return
    assert result["status"] in ("ok", "failed", "incomplete")
