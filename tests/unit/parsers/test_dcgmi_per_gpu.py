"""dcgmi diag judged per GPU (issue 26): a GPU that every test past the deployment checks skipped or
did not run was diagnosed by nothing, so the run is ``incomplete`` naming it, never ``ok``.

No published run shows one GPU skipped while the others ran, so the cases are derived from the real
outputs in tests/data/samples (kept there unedited; the edits are made here, as the other dcgmi tests
do): the DCGM 3.3.3 table (dcgmi_diag_01.txt) rewritten the way dcgmi/Diag.cpp's
HelperDisplayGpuResults prints GPUs that disagree (``Pass - GPUs: 0, 1, ...`` then ``Skip - GPU: 7``
on a row without a name; a GPU whose result is "not run" left out of every list; a list longer than
the 46-character column cut to end in ``...``), and the DCGM 3.1.0 JSON (dcgmi_diag_json_01.txt)
given per-GPU hardware entries. The DCGM 4.x table is the constructed one test_dcgmi.py uses.
"""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from gpucluster.parsers.dcgmi import parse
from tests.unit.parsers.test_dcgmi import DCGM2_PASS, DCGM3_FAIL, DCGM4_PASS
from tests.unit.parsers.test_dcgmi_json import DCGM4

Sample = Callable[[str], str]

ALL_SAMPLES = ["dcgmi_diag_01.txt", "dcgmi_diag_json_01.txt"]


def _row(name: str, value: str) -> str:
    """One ``| name | value |`` row as dcgmi prints it: a value past the column is cut to end in ``...``."""
    if len(value) > 46:
        value = value[:43] + "..."
    return f"| {name:<25} | {value:<46} |\n"


def _gpus(word: str, gpus: list[int]) -> str:
    return f"{word} - GPU{'s' if len(gpus) > 1 else ''}: {', '.join(map(str, gpus))}"


def _split(name: str, rows: list[str]) -> str:
    """A test whose GPUs disagree: its name on the first row, the other results on rows without one."""
    return "".join(_row(name if i == 0 else "", r) for i, r in enumerate(rows))


def _dcgm3(sample: Sample, pcie: list[str], memory: list[str]) -> str:
    text = sample("dcgmi_diag_01.txt")
    for name, rows in (("PCIe", pcie), ("GPU Memory", memory)):
        old = _row(name, "Pass - All")
        assert old in text
        text = text.replace(old, _split(name, rows))
    return text


PASS_0_6 = _gpus("Pass", list(range(7)))


@pytest.mark.parametrize("name", ALL_SAMPLES)
def test_every_real_sample_still_passes(sample: Sample, name: str) -> None:
    r = parse(sample(name))
    assert r.status == "ok" and r.notes == []


def test_all_gpus_agreeing_give_no_breakdown_and_the_whole_run_rule_stands(sample: Sample) -> None:
    r = parse(sample("dcgmi_diag_01.txt"))  # "Pass - All": no per-GPU results, as DCGM printed none
    assert all(t.gpu_results == {} for t in r.tests)
    assert parse(DCGM2_PASS).status == "ok"


def test_json_records_each_gpu(sample: Sample) -> None:
    r = parse(sample("dcgmi_diag_json_01.txt"))
    assert r.tests[0].gpu_results == {str(g): "pass" for g in range(8)}  # Denylist, "0,1,...,7"
    assert r.tests[-1].gpu_results == {str(g): "pass" for g in range(8)}  # software, one entry per GPU


def test_gpu_every_hardware_test_skipped_makes_the_run_incomplete_naming_it(sample: Sample) -> None:
    r = parse(_dcgm3(sample, [PASS_0_6, "Skip - GPU: 7"], [PASS_0_6, "Skip - GPU: 7"]))
    assert r.status == "incomplete"
    memory = next(t for t in r.tests if t.name == "GPU Memory")
    assert memory.result == "pass"  # the test as a whole passed on the GPUs it ran on
    assert memory.gpu_results == {**{str(g): "pass" for g in range(7)}, "7": "skip"}
    assert r.notes == ["every test past the deployment checks was skipped or not run on GPU 7: PCIe, GPU Memory"]


def test_gpu_left_out_of_every_list_did_not_run(sample: Sample) -> None:
    """DCGM 3.x counts a GPU whose result is "not run" in none of its lists: GPU 7 is named only where
    PCIe skipped it, and GPU Memory, which names GPUs 0-6, did not run on it."""
    r = parse(_dcgm3(sample, [PASS_0_6, "Skip - GPU: 7"], [PASS_0_6]))
    assert r.status == "incomplete"
    assert r.notes == ["every test past the deployment checks was skipped or not run on GPU 7: PCIe, GPU Memory"]


def test_several_gpus_are_named_together(sample: Sample) -> None:
    r = parse(_dcgm3(sample, [_gpus("Pass", [0, 1, 2, 3, 4, 5]), _gpus("Skip", [6, 7])],
                     [_gpus("Pass", [0, 1, 2, 3, 4, 5]), _gpus("Skip", [6, 7])]))
    assert r.notes == ["every test past the deployment checks was skipped or not run on GPUs 6, 7: PCIe, GPU Memory"]


def test_one_hardware_test_that_ran_on_the_gpu_diagnosed_it(sample: Sample) -> None:
    r = parse(_dcgm3(sample, ["Pass - All"], [PASS_0_6, "Skip - GPU: 7"]))
    assert r.status == "ok" and r.notes == []


def test_a_failed_gpu_still_fails_the_run(sample: Sample) -> None:
    r = parse(_dcgm3(sample, [PASS_0_6, "Skip - GPU: 7"],
                     [_gpus("Pass", [0, 1, 2, 4, 5, 6]), "Fail - GPU: 3", "Skip - GPU: 7"]))
    assert r.status == "failed"
    assert r.notes == ["failed: GPU Memory"]
    assert next(t for t in r.tests if t.name == "GPU Memory").failed_gpus == [3]
    assert parse(DCGM3_FAIL).status == "failed"  # Targeted Stress "Skip - GPU 1", GPU Memory "Fail - GPU 1"


def test_a_gpu_list_cut_at_the_column_edge_is_no_evidence_of_a_skip(sample: Sample) -> None:
    """16 GPUs: "Pass - GPUs: 0, 1, ..., 14" is longer than the column and dcgmi cuts it to end in "...";
    the GPUs cut off ran the test, so they are not undiagnosed."""
    passed = _gpus("Pass", list(range(15)))
    assert len(passed) > 46
    text = _dcgm3(sample, [passed, "Skip - GPU: 15"], [passed, "Warn - GPU: 15"])
    assert "..." in text
    r = parse(text)
    assert r.status == "ok"
    memory = next(t for t in r.tests if t.name == "GPU Memory")
    assert memory.gpu_results_partial and memory.gpu_results["15"] == "warn" and "11" not in memory.gpu_results
    # GPU 15 skipped by both tests, the lists cut: GPU 15 is still named as undiagnosed.
    r = parse(_dcgm3(sample, [passed, "Skip - GPU: 15"], [passed, "Skip - GPU: 15"]))
    assert r.status == "incomplete" and "on GPU 15: PCIe, GPU Memory" in r.notes[0]


def _dcgm4_memory(gpu1: str) -> str:
    old = "|                           | GPU1: Pass                                     |\n+-------"
    assert DCGM4_PASS.count(old) == 1
    return DCGM4_PASS.replace(old, f"|                           | GPU1: {gpu1:<40} |\n+-------")


@pytest.mark.parametrize("word", ["Skip", "Not Run"])
def test_dcgm4_gpu_row_skipped_by_every_hardware_test(word: str) -> None:
    r = parse(_dcgm4_memory(word))
    memory = r.tests[1]
    assert memory.result == "pass" and memory.gpu_results == {"0": "pass", "1": "skip"}
    assert r.status == "incomplete"
    assert r.notes == ["every test past the deployment checks was skipped or not run on GPU 1: memory"]


def test_dcgm4_gpu_with_no_row_in_the_hardware_test_did_not_run_it() -> None:
    old = "|                           | GPU1: Pass                                     |\n+-------"
    r = parse(DCGM4_PASS.replace(old, "+-------"))  # software names GPU 1; memory names only GPU 0
    assert r.status == "incomplete" and "on GPU 1: memory" in r.notes[0]


def test_dcgm4_every_gpu_ran_is_ok() -> None:
    r = parse(DCGM4_PASS)
    assert r.status == "ok" and r.tests[1].gpu_results == {"0": "pass", "1": "pass"}


def _json_with_hardware(sample: Sample, status_of: Callable[[str, int], str]) -> str:
    """The real DCGM 3.1.0 JSON given Integration and Hardware tests with one entry per GPU (as its
    ``software`` test has), each GPU's status from ``status_of(test, gpu)``."""
    text = sample("dcgmi_diag_json_01.txt")
    doc = json.loads(text[text.index("{"):])

    def test(name: str) -> dict[str, object]:
        return {"name": name, "results": [{"gpu_ids": g, "status": status_of(name, g)} for g in range(8)]}

    doc["DCGM GPU Diagnostic"]["test_categories"] += [
        {"category": "Integration", "tests": [test("PCIe")]},
        {"category": "Hardware", "tests": [test("GPU Memory"), test("Diagnostic")]},
    ]
    return json.dumps(doc, indent="\t")


def test_json_gpu_skipped_by_every_hardware_test(sample: Sample) -> None:
    r = parse(_json_with_hardware(sample, lambda name, g: "SKIPPED" if g == 7 else "PASS"))
    assert r.status == "incomplete"
    assert r.notes == ["every test past the deployment checks was skipped or not run on GPU 7: PCIe, GPU Memory, "
                       "Diagnostic"]


def test_json_all_gpus_ran_and_a_failed_gpu(sample: Sample) -> None:
    assert parse(_json_with_hardware(sample, lambda name, g: "PASS")).status == "ok"
    ran_once = parse(_json_with_hardware(sample, lambda name, g: "PASS" if g != 7 or name == "PCIe" else "SKIPPED"))
    assert ran_once.status == "ok"
    failed = parse(_json_with_hardware(
        sample, lambda name, g: "FAIL" if (name, g) == ("GPU Memory", 3) else "SKIPPED" if g == 7 else "PASS"))
    assert failed.status == "failed" and failed.notes == ["failed: GPU Memory"]


def test_json_dcgm4_entity_missing_from_the_hardware_test() -> None:
    """DCGM 4.x's ``entity_id`` entries: GPU 1 ran the software checks, and memory has no entry for it."""
    doc = json.loads(json.dumps(DCGM4))
    memory = doc["DCGM Diagnostic"]["test_categories"][1]["tests"][0]
    memory["results"] = memory["results"][:1]
    memory["test_summary"]["status"] = "Pass"
    r = parse(json.dumps(doc))
    assert r.status == "incomplete"
    assert r.notes == ["every test past the deployment checks was skipped or not run on GPU 1: memory"]
    memory["results"].append({"entity_group": "GPU", "entity_group_id": 1, "entity_id": 1, "status": "Skip"})
    assert parse(json.dumps(doc)).notes == r.notes
    memory["results"][1]["status"] = "Pass"
    assert parse(json.dumps(doc)).status == "ok"
