"""dcgmi diag parser: the published DCGM 3.3.3 run and constructed DCGM 2.x/3.x failures.

The fixtures follow the table layout of DCGM's ``dcgmi diag`` as shown in the DCGM user
guide and in published runs (stas00/ml-engineering quotes a real ``-r 2`` failure with the
``Pass - GPUs: ...`` / ``Fail - GPU: 0`` continuation and wrapped ``Warning`` text).
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from gpucluster.parsers import NotToolOutput
from gpucluster.parsers.dcgmi import parse

Sample = Callable[[str], str]


def test_dcgm_333_all_pass(sample: Sample) -> None:
    r = parse(sample("dcgmi_diag_01.txt"))
    assert r.status == "ok"
    assert r.dcgm_version == "3.3.3"
    assert r.driver_version == "535.104.12"
    assert r.gpu_device_ids == ["20b2"] * 8
    assert len(r.tests) == 11
    assert all(t.result == "pass" for t in r.tests)
    assert {t.section for t in r.tests} == {"Deployment", "Integration", "Hardware"}
    pcie = next(t for t in r.tests if t.name == "PCIe")
    assert (pcie.section, pcie.raw) == ("Integration", "Pass - All")


DCGM2_PASS = """\
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Deployment  --------+------------------------------------------------|
| Blacklist                 | Pass                                           |
| NVML Library              | Pass                                           |
| CUDA Main Library         | Pass                                           |
| Permissions and OS Blocks | Pass                                           |
| Persistence Mode          | Pass                                           |
| Environment Variables     | Pass                                           |
| Page Retirement           | Pass                                           |
| Graphics Processes        | Pass                                           |
| Inforom                   | Pass                                           |
+-----  Integration  -------+------------------------------------------------+
| PCIe                      | Pass - All                                     |
+-----  Hardware  ----------+------------------------------------------------+
| GPU Memory                | Pass - All                                     |
| Diagnostic                | Skip - All                                     |
+-----  Stress  ------------+------------------------------------------------+
| Targeted Stress           | Pass - All                                     |
+---------------------------+------------------------------------------------+
"""

DCGM2_FAIL = DCGM2_PASS.replace(
    "| Persistence Mode          | Pass                                           |\n",
    "| Persistence Mode          | Fail                                           |\n"
    "| Warning                   | Persistence mode for GPU 0 is disabled. Enabl  |\n"
    '|                           | e persistence mode by running "nvidia-smi -i   |\n'
    '|                           | <gpuId> -pm 1 " as root.                       |\n',
).replace(
    "| GPU Memory                | Pass - All                                     |\n",
    "| GPU Memory                | Pass - GPUs: 1, 2, 3, 4, 5, 6, 7               |\n"
    "|                           | Fail - GPU: 0                                  |\n"
    "| Warning                   | GPU 0 Thermal violations totaling 13.3 second  |\n"
    "|                           | s started at 9.7 seconds into the test for GP  |\n"
    "|                           | U 0 Verify that the cooling is functional.     |\n",
)


def test_dcgm2_pass_with_skip() -> None:
    r = parse(DCGM2_PASS)
    assert r.status == "ok"
    assert r.tests[0].name == "Blacklist" and r.tests[0].section == "Deployment"
    # "Diagnostic" is a Hardware test in 2.x, not the table header
    diag = next(t for t in r.tests if t.name == "Diagnostic")
    assert (diag.section, diag.result) == ("Hardware", "skip")
    assert r.dcgm_version is None and r.gpu_device_ids is None


def test_dcgm2_failures_with_wrapped_warnings() -> None:
    r = parse(DCGM2_FAIL)
    assert r.status == "failed"
    pm = next(t for t in r.tests if t.name == "Persistence Mode")
    assert pm.result == "fail"
    assert pm.details[0].kind == "warning"
    assert pm.details[0].text.startswith("Persistence mode for GPU 0 is disabled. Enable persistence mode")
    mem = next(t for t in r.tests if t.name == "GPU Memory")
    assert mem.result == "fail" and mem.failed_gpus == [0]
    assert "Thermal violations totaling 13.3 seconds started" in mem.details[0].text
    assert {t.name for t in r.tests if t.result == "fail"} == {"Persistence Mode", "GPU Memory"}


DCGM3_FAIL = """\
Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 3.3.5                                          |
| Driver Version Detected   | 535.161.08                                     |
| GPU Device IDs Detected   | 2330,2330                                      |
|-----  Deployment  --------+------------------------------------------------|
| Denylist                  | Pass                                           |
| Persistence Mode          | Pass                                           |
+-----  Integration  -------+------------------------------------------------+
| PCIe                      | Warn - GPU 1                                   |
| Warning                   | GPU 1 PCIe replay count exceeded               |
+-----  Hardware  ----------+------------------------------------------------+
| GPU Memory                | Fail - GPU 1                                   |
| Error                     | GPU 1 Memory error: ECC DBE detected           |
+-----  Stress  ------------+------------------------------------------------+
| Targeted Stress           | Skip - GPU 1                                   |
+---------------------------+------------------------------------------------+
"""


def test_dcgm3_failure() -> None:
    r = parse(DCGM3_FAIL)
    assert r.status == "failed"
    assert (r.dcgm_version, r.driver_version, r.gpu_device_ids) == ("3.3.5", "535.161.08", ["2330", "2330"])
    assert [(t.name, t.result) for t in r.tests] == [
        ("Denylist", "pass"),
        ("Persistence Mode", "pass"),
        ("PCIe", "warn"),
        ("GPU Memory", "fail"),
        ("Targeted Stress", "skip"),
    ]
    assert r.tests[3].failed_gpus == [1]
    assert r.tests[3].details[0].kind == "error"


def test_warnings_alone_pass() -> None:
    r = parse(
        DCGM3_FAIL.replace(
            "| GPU Memory                | Fail - GPU 1  ", "| GPU Memory                | Pass - All    "
        )
    )
    assert r.status == "ok"


def test_error_before_any_test_fails() -> None:
    text = """\
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Deployment  --------+------------------------------------------------|
| Error                     | GPU 3 has uncorrectable memory errors and row  |
|                           |  remappings are pending                        |
"""
    r = parse(text)
    assert r.status == "failed"
    assert r.tests == []
    assert r.errors == ["GPU 3 has uncorrectable memory errors and row remappings are pending"]


def test_header_without_tests_is_incomplete() -> None:
    assert parse(DCGM2_PASS.split("|-----  Deployment")[0]).status == "incomplete"


def test_not_dcgmi(sample: Sample) -> None:
    with pytest.raises(NotToolOutput):
        parse(sample("nvidia_smi_10.txt"))


@pytest.mark.parametrize("fixture", ["sample", "DCGM2_PASS"])
def test_table_cut_before_its_closing_border_is_incomplete(sample: Sample, fixture: str) -> None:
    text = sample("dcgmi_diag_01.txt") if fixture == "sample" else DCGM2_PASS
    cut = text.rstrip("\n").rsplit("\n", 1)[0]  # the closing +----+----+ border is gone
    r = parse(cut)
    assert r.status == "incomplete"
    assert any("closing border" in n for n in r.notes)


# DCGM 4.x (published `dcgmi diag -r 3` output, DCGM 4.0.0): lower-case test names, a row per GPU.
DCGM4_PASS = """\
Successfully ran diagnostic for group.
+---------------------------+------------------------------------------------+
| Diagnostic                | Result                                         |
+===========================+================================================+
|-----  Metadata  ----------+------------------------------------------------|
| DCGM Version              | 4.0.0                                          |
| Driver Version Detected   | 550.90.07                                      |
| GPU Device IDs Detected   | 25b6, 25b6                                     |
|-----  Deployment  --------+------------------------------------------------|
| software                  | Pass                                           |
|                           | GPU0: Pass                                     |
|                           | GPU1: Pass                                     |
+-----  Hardware  ----------+------------------------------------------------+
| memory                    | Pass                                           |
|                           | GPU0: Pass                                     |
|                           | GPU1: Pass                                     |
+---------------------------+------------------------------------------------+
"""


def test_dcgm4_pass() -> None:
    r = parse(DCGM4_PASS)
    assert r.status == "ok" and r.dcgm_version == "4.0.0"
    assert [(t.name, t.result) for t in r.tests] == [("software", "pass"), ("memory", "pass")]


def test_dcgm4_gpu_row_that_fails_fails() -> None:
    tail = "                                     |\n+---------------------------"
    r = parse(DCGM4_PASS.replace(f"| GPU1: Pass{tail}", f"| GPU1: Fail{tail}"))
    assert r.status == "failed"
    memory = r.tests[1]
    assert memory.result == "fail" and memory.failed_gpus == [1]


def test_dcgm4_gpu_row_after_a_warning_is_a_result_not_text() -> None:
    text = DCGM4_PASS.replace(
        "|                           | GPU0: Pass                                     |\n"
        "|                           | GPU1: Pass                                     |\n+----",
        "| Warning                   | GPU0 memory clock throttled                    |\n"
        "|                           | GPU1: Fail                                     |\n+----",
    )
    r = parse(text)
    assert r.status == "failed" and r.tests[1].details[0].text == "GPU0 memory clock throttled"


@pytest.mark.parametrize("failing_first", [True, False])
def test_a_passing_run_does_not_hide_a_failed_one(failing_first: bool) -> None:
    r = parse(DCGM3_FAIL + DCGM2_PASS if failing_first else DCGM2_PASS + DCGM3_FAIL)
    assert r.status == "failed"


# A diagnostic that diagnosed nothing past its deployment checks is never a pass: NVIDIA/DCGM#55
# (`dcgmi diag -r 3` on DCGM 3.0.4: every Deployment check Pass, every test "beyond the level 1
# tests" Skip), built from the real 3.3.3 run (dcgmi_diag_01.txt), whose Deployment rows are the same.
@pytest.mark.parametrize("word", ["Skip - All", "Not Run                    "])
def test_every_hardware_test_skipped_is_incomplete_never_ok(sample: Sample, word: str) -> None:
    text = sample("dcgmi_diag_01.txt").replace("Pass - All                 ", word[:27].ljust(27))
    assert text.count(word.strip()) == 2  # PCIe (Integration) and GPU Memory (Hardware)
    r = parse(text)
    assert r.status == "incomplete"
    assert [t.result for t in r.tests if t.section == "Deployment"] == ["pass"] * 9
    assert r.notes == ["every test past the deployment checks was skipped: PCIe, GPU Memory"]


def test_a_hardware_test_that_ran_is_a_diagnosis(sample: Sample) -> None:
    text = sample("dcgmi_diag_01.txt").replace(
        "| GPU Memory                | Pass - All      ", "| GPU Memory                | Skip - All      ")
    assert parse(text).status == "ok"  # PCIe ran and passed


def test_dcgm4_every_hardware_test_skipped_is_incomplete() -> None:
    r = parse(DCGM4_PASS.replace("| memory                    | Pass ", "| memory                    | Skip ")
              .replace("GPU0: Pass                                     |\n|                           | GPU1: Pass"
                       "                                     |\n+------",
                       "GPU0: Skip                                     |\n|                           | GPU1: Skip"
                       "                                     |\n+------"))
    assert [(t.name, t.result) for t in r.tests] == [("software", "pass"), ("memory", "skip")]
    assert r.status == "incomplete"


def test_json_level_3_whose_hardware_tests_all_skipped_is_incomplete(sample: Sample) -> None:
    """The categories NVIDIA/DCGM#139 posts for `dcgmi diag -r 3 -j` on a T400 (one GPU, every test
    past Deployment "Skip", ``gpu_id`` a string) added to the real DCGM 3.1.0 JSON's Deployment."""
    text = sample("dcgmi_diag_json_01.txt")
    doc = json.loads(text[text.index("{"):])
    skipped = [{"name": name, "results": [{"gpu_id": "0", "status": "Skip"}]}
               for name in ("GPU Memory", "Diagnostic", "EUD Test")]
    doc["DCGM GPU Diagnostic"]["test_categories"] += [
        {"category": "Integration", "tests": [{"name": "PCIe", "results": [{"gpu_id": "0", "status": "Skip"}]}]},
        {"category": "Hardware", "tests": skipped},
        {"category": "Stress", "tests": [{"name": "Targeted Stress", "results": [{"gpu_id": "0", "status": "Skip"}]}]},
    ]
    r = parse(json.dumps(doc, indent="\t"))
    assert r.status == "incomplete"
    assert r.notes == ["every test past the deployment checks was skipped: PCIe, GPU Memory, Diagnostic, EUD Test, "
                       "Targeted Stress"]


def test_dcgmi_without_its_host_engine_is_its_failed_run(sample: Sample) -> None:
    r = parse(sample("dcgmi_diag_02.txt"))
    assert r.status == "failed" and r.tests == []
    assert r.errors == ["unable to establish a connection to the specified host: localhost",
                        "Unable to connect to host engine. Host engine connection invalid/disconnected."]
