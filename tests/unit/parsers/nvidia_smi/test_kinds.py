"""nvidia-smi parser: which output a capture is, and nvidia-smi's own error lines, alone or beside any output."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpucluster.parsers import NotToolOutput
from gpucluster.parsers.nvidia_smi import parse

Sample = Callable[[str], str]


HANDLE_ERROR = "Unable to determine the device handle for GPU0000:1B:00.0: Unknown Error\n"


@pytest.mark.parametrize("name", ["nvidia_smi_10.txt", "nvidia_smi_01.txt", "nvidia_smi_02.txt"])
def test_device_handle_error_fails(sample: Sample, name: str) -> None:
    r = parse(HANDLE_ERROR + sample(name))
    assert r.status == "failed"
    assert any("could not reach a GPU" in n for n in r.notes)


@pytest.mark.parametrize(
    "text",
    [
        HANDLE_ERROR,
        "Unable to determine the device handle for gpu 0000:3B:00.0: GPU is lost.  "
        "Reboot the system to recover this GPU\n",
        "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. Make sure that the latest "
        "NVIDIA driver is installed and running.\n",
        "No devices were found\n",
    ],
)
def test_only_an_error_is_failed_not_bad_input(text: str) -> None:
    r = parse(text)
    assert (r.kind, r.status) == ("error", "failed")


def test_not_nvidia_smi() -> None:
    with pytest.raises(NotToolOutput):
        parse("| Diagnostic | Result |\n")
