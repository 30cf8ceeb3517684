"""gpu-burn parser: the published 2022-era log, plus fixtures in the newer format.

The fixtures are constructed from the printf formats in wilicc/gpu-burn ``gpu_burn-drv.cpp``
(progress ``"\\r%.1f%%  proc'd: %d (%.0f Gflop/s) ...  errors: %d [ (WARNING!)]  temps: %d C"``,
``"Killing processes with SIGTERM (soft kill)"``, ``"Tested %d GPUs:"``, ``"\\tGPU %d: %s"``)
and checked against published runs of that version.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpucluster.parsers import NotToolOutput
from gpucluster.parsers.gpu_burn import parse

Sample = Callable[[str], str]


def test_2022_log_8x_a100_fp64_tensor_cores(sample: Sample) -> None:
    text = sample("gpu_burn_01.txt")
    assert "\r" in text  # the fixture must keep the CR rewrites
    r = parse(text)
    assert r.status == "ok"
    assert r.format == "2022"
    assert r.precision == "fp64" and r.tensor_cores is True
    assert r.tested_gpus == 8
    assert [g.index for g in r.gpus] == list(range(8))
    assert all(g.verdict == "ok" and g.errors == 0 for g in r.gpus)
    assert all(16_800 <= (g.gflops or 0) <= 17_200 for g in r.gpus)
    assert r.gpus[1].gflops == 17093  # the last CR rewrite, not the earlier 17177
    assert r.gpus[0].name == "NVIDIA A100-SXM4-80GB"
    assert r.gpus[7].temperature_c == 61
    assert r.progress_pct == 100.0
    assert r.duration_s is None  # this version does not print "Burning for"


def test_2022_log_read_with_universal_newlines(sample: Sample) -> None:
    # A caller that opened the file in text mode turned every CR into a line break.
    r = parse(sample("gpu_burn_01.txt").replace("\r", "\n"))
    assert r.status == "ok" and r.gpus[1].gflops == 17093


NEW_OK = (
    "GPU 0: NVIDIA H100 80GB HBM3 (UUID: GPU-c6b0ca29-53c0-326e-8aaa-cfa1653e18d1)\n"
    "Using compare file: compare.ptx\n"
    "Burning for 10 seconds.\n"
    "Initialized device 0 with 81079 MB of memory (80484 MB available, using 72436 MB of it), using FLOATS\n"
    "Results are 268435456 bytes each, thus performing 280 iterations\n"
    "\r10.0%  proc'd: 6468 (17130 Gflop/s)   errors: 0   temps: 45 C "
    "\r100.0%  proc'd: 56000 (51402 Gflop/s)   errors: 0   temps: 56 C \n"
    "\tSummary at:   Mon Apr 28 01:27:49 EDT 2025\n"
    "\n"
    "\n"
    "Killing processes with SIGTERM (soft kill)\n"
    "Freed memory for dev 0\n"
    "Uninitted cublas\n"
    "done\n"
    "\n"
    "Tested 1 GPUs:\n"
    "\tGPU 0: OK\n"
)


def test_new_format_ok() -> None:
    r = parse(NEW_OK)
    assert r.status == "ok"
    assert r.format == "sigterm"
    assert r.duration_s == 10
    assert r.precision == "fp32" and r.tensor_cores is False
    g = r.gpus[0]
    assert (g.verdict, g.gflops, g.errors, g.temperature_c, g.processed) == ("ok", 51402, 0, 56, 56000)
    assert g.uuid == "GPU-c6b0ca29-53c0-326e-8aaa-cfa1653e18d1"


FAULTY = (
    "Burning for 20 seconds.\n"
    "GPU 0: NVIDIA A100-SXM4-80GB (UUID: GPU-1)\n"
    "GPU 1: NVIDIA A100-SXM4-80GB (UUID: GPU-2)\n"
    "Initialized device 1 with 81251 MB of memory (80493 MB available, using 72443 MB of it), using FLOATS\n"
    "Initialized device 0 with 81251 MB of memory (80493 MB available, using 72443 MB of it), using FLOATS\n"
    "\r50.0%  proc'd: 1400 (18900 Gflop/s) - 1400 (18850 Gflop/s)   errors: 0 - 30511521  (WARNING!)"
    "  temps: 60 C - 69 C \n"
    "\tSummary at:   Mon Apr 14 04:41:30 PM CST 2025\n"
    "\n"
    "\r100.0%  proc'd: 2800 (18910 Gflop/s) - 2800 (18845 Gflop/s)   errors: 0 - 0   temps: 61 C - 70 C \n"
    "Killing processes with SIGTERM (soft kill)\n"
    "done\n"
    "\n"
    "Tested 2 GPUs:\n"
    "\tGPU 0: OK\n"
    "\tGPU 1: FAULTY\n"
)


def test_faulty_gpu_fails_although_gpu_burn_exits_0() -> None:
    r = parse(FAULTY)
    assert r.status == "failed"
    assert [g.verdict for g in r.gpus] == ["ok", "faulty"]
    # errors reset after each summary: the last line shows 0, the run had 30511521
    assert r.gpus[1].errors == 0 and r.gpus[1].errors_max == 30511521
    assert any("FAULTY: GPU 1" in n for n in r.notes)


def test_errors_without_faulty_verdict_fail() -> None:
    text = FAULTY.replace("\tGPU 1: FAULTY", "\tGPU 1: OK")
    assert parse(text).status == "failed"


def test_died_worker_fails() -> None:
    text = NEW_OK.replace("56000 (51402 Gflop/s)   errors: 0 ", "-1 (0 Gflop/s)   errors: 0  (DIED!) ")
    r = parse(text)
    assert r.gpus[0].died is True
    assert r.status == "failed"


def test_cut_short_is_incomplete() -> None:
    text = NEW_OK.split("Killing")[0]
    r = parse(text)
    assert r.status == "incomplete"
    assert any("summary" in n for n in r.notes)


def test_no_work_is_incomplete() -> None:
    text = (
        "Burning for 10 seconds.\n"
        "\r10.0%  proc'd: 0 (0 Gflop/s) - 0 (0 Gflop/s)   errors: 0 - 0   temps: 40 C - 41 C \n"
        "Killing processes with SIGTERM (soft kill)\ndone\n\nTested 2 GPUs:\n\tGPU 0: OK\n\tGPU 1: OK\n"
    )
    r = parse(text)
    assert r.status == "incomplete"
    assert any("no work" in n for n in r.notes)


def test_no_progress_lines_is_incomplete() -> None:
    text = NEW_OK.replace(NEW_OK[NEW_OK.index("\r10.0%") : NEW_OK.index("\tSummary")], "")
    assert parse(text).status == "incomplete"


def test_nvlink_status_is_not_gpu_burn(sample: Sample) -> None:
    # `nvidia-smi nvlink -s` starts with the same "GPU 0: NAME (UUID: ...)" line gpu-burn prints.
    with pytest.raises(NotToolOutput):
        parse(sample("nvidia_smi_05.txt"))


# gpu_burn-drv.cpp prints each error count with "%d": plain digits. An int that overflowed
# reads negative; "1e3" or "1.5" is no count at all.
@pytest.mark.parametrize("count", ["nan", "-3", "1e3", "1.5", "x", "9" * 50])
def test_error_count_that_is_not_a_count_is_never_ok(count: str) -> None:
    r = parse(NEW_OK.replace("errors: 0   temps: 56 C", f"errors: {count}   temps: 56 C"))
    assert r.status in ("failed", "incomplete")
    assert any("not a count" in n or "calculation errors" in n for n in r.notes)


@pytest.mark.parametrize("count", ["-3", "1e3"])
def test_negative_or_exponent_error_count_fails(count: str) -> None:
    assert parse(NEW_OK.replace("errors: 0   temps: 56 C", f"errors: {count}   temps: 56 C")).status == "failed"


def _two_gpu_ok() -> str:
    return FAULTY.replace("0 - 30511521  (WARNING!)", "0 - 0").replace("GPU 1: FAULTY", "GPU 1: OK")


def test_two_gpu_ok_fixture_is_ok() -> None:
    assert parse(_two_gpu_ok()).status == "ok"


@pytest.mark.parametrize("faulty_first", [True, False])
def test_a_later_ok_does_not_clear_faulty(faulty_first: bool) -> None:
    # The FAULTY verdict alone (its errors shown only in a rewritten-away progress line).
    faulty = FAULTY.replace("0 - 30511521  (WARNING!)", "0 - 0")
    r = parse(faulty + _two_gpu_ok() if faulty_first else _two_gpu_ok() + faulty)
    assert r.status == "failed"
    assert r.gpus[1].verdict == "faulty"


def test_a_worker_that_died_in_an_earlier_run_fails() -> None:
    died = _two_gpu_ok().replace("1400 (18850 Gflop/s)   errors: 0 - 0", "-1 (0 Gflop/s)   errors: 0 - 0  (DIED!)")
    r = parse(died + _two_gpu_ok())
    assert r.status == "failed" and r.gpus[1].died is True


def test_run_after_the_last_summary_without_its_own_is_incomplete() -> None:
    r = parse(NEW_OK + NEW_OK.split("Killing")[0])
    assert r.status == "incomplete"
    assert any("later run has no summary" in n for n in r.notes)


def test_summary_cut_short_is_incomplete() -> None:
    text = FAULTY.replace("GPU 1: FAULTY", "GPU 1: OK").replace("0 - 30511521  (WARNING!)", "0 - 0")
    r = parse(text.rsplit("\tGPU 1: OK", 1)[0])
    assert r.status == "incomplete"


@pytest.mark.parametrize(
    "error",
    [
        "Couldn't init a GPU test: Error in load module (gpu_burn-drv.cpp:239): file not found",
        "Failure during compute: Error in Read faultyelemdata (gpu_burn-drv.cpp:265): an illegal memory access",
        "No clients are alive!  Aborting",
        "cuInit returned 100 (no CUDA-capable device is detected)",
    ],
)
def test_gpu_burn_error_lines_fail(error: str) -> None:
    at = NEW_OK.index("Killing")
    assert parse(NEW_OK[:at] + error + "\n" + NEW_OK[at:]).status == "failed"


def test_cuinit_success_line_is_benign() -> None:
    assert parse("cuInit returned 0 (no error)\n" + NEW_OK).status == "ok"
