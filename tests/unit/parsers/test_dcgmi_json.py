"""``dcgmi diag -r N -j``: the JSON NVIDIA/DCGM's own test calls real output (``dcgmi_diag_json_01.txt``),
and failures built on its shape: DCGM 3.x (``DCGM GPU Diagnostic``, ``gpu_ids``) and DCGM 4.x
(``DCGM Diagnostic``, ``entity_id``, warnings as objects, as NVIDIA/DCGM's NvvsJsonStrings.h names
the keys)."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from gpucluster.conformance.acceptance import dcgm_problems
from gpucluster.parsers import NotToolOutput, parse, parse_run
from gpucluster.parsers.dcgmi import parse as parse_dcgmi

Sample = Callable[[str], str]

SOFTWARE_GPU5 = '"gpu_ids" : 5,\n\t\t\t\t\t\t\t\t"status" : "PASS"'


def test_real_json_passes(sample: Sample) -> None:
    r = parse_dcgmi(sample("dcgmi_diag_json_01.txt"))  # a WARNING line and null entries before/among tests
    assert r.status == "ok" and r.dcgm_version == "3.1.0"
    assert [t.name for t in r.tests][:2] == ["Denylist", "NVML Library"] and len(r.tests) == 10
    assert {t.section for t in r.tests} == {"Deployment", "Custom"}
    software = r.tests[-1]
    assert software.result == "pass" and software.raw.count("PASS - GPU") == 8


def test_failure_after_passing_entries_fails_and_names_gpu_and_test(sample: Sample) -> None:
    text = sample("dcgmi_diag_json_01.txt")
    assert SOFTWARE_GPU5 in text
    bad = text.replace(SOFTWARE_GPU5, '"gpu_ids" : 5,\n\t\t\t\t\t\t\t\t"status" : "FAIL",\n'
                       '\t\t\t\t\t\t\t\t"warnings" : ["GPU 5 failed to create a CUDA context"]')
    parsed = parse("dcgmi", bad)
    assert parsed["status"] == "failed"
    assert dcgm_problems(parsed) == ["DCGM software: fail on GPU 5: GPU 5 failed to create a CUDA context"]


@pytest.mark.parametrize("cut", [0.3, 0.9, 0.999])
def test_truncated_json_is_not_a_pass(sample: Sample, cut: float) -> None:
    text = sample("dcgmi_diag_json_01.txt")
    r = parse_dcgmi(text[: int(len(text) * cut)])
    assert r.status == "incomplete"
    assert any("not complete JSON" in n for n in r.notes)
    assert parse_run("dcgmi", text[: int(len(text) * cut)], 0)["status"] != "ok"


DCGM4 = {
    "DCGM Diagnostic": {
        "test_categories": [
            {"category": "Deployment", "tests": [
                {"name": "software", "results": [
                    {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"},
                    {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 1, "status": "Pass"}],
                 "test_summary": {"status": "Pass"}}]},
            {"category": "Hardware", "tests": [
                {"name": "memory", "results": [
                    {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 0, "status": "Pass"},
                    {"entity_group": "GPU", "entity_group_id": 1, "entity_id": 1, "status": "Fail",
                     "warnings": [{"error_category": 2, "error_id": 28, "error_severity": 2,
                                   "warning": "Memory test failed on GPU 1: DBE detected"}]}],
                 "test_summary": {"status": "Fail"}}]},
        ],
        "metadata": {"version": "4.1.1"},  # DCGM 4 (NVIDIA/DCGM testing/python3/dcgm_diag_schema.json)
    }
}


def test_dcgm4_json_names_entity_and_warning() -> None:
    parsed = parse("dcgmi", json.dumps(DCGM4, indent=4))
    assert parsed["status"] == "failed" and parsed["dcgm_version"] == "4.1.1"
    assert dcgm_problems(parsed) == ["DCGM memory: fail on GPU 1: Memory test failed on GPU 1: DBE detected"]


def test_warning_entry_is_a_problem_and_unknown_status_is_not_a_pass() -> None:
    warn = json.loads(json.dumps(DCGM4))
    memory = warn["DCGM Diagnostic"]["test_categories"][1]["tests"][0]
    memory["results"][1]["status"] = "Warn"
    memory["test_summary"]["status"] = "Warn"
    parsed = parse("dcgmi", json.dumps(warn))
    assert parsed["status"] == "ok"  # DCGM passes on warnings; the check does not
    assert dcgm_problems(parsed) == [
        "DCGM memory: warn (Pass - GPU 0; Warn - GPU 1; Warn): Memory test failed on GPU 1: DBE detected"]
    memory["results"][1]["status"] = "Exploded"
    memory["test_summary"]["status"] = "Exploded"
    assert parse("dcgmi", json.dumps(warn))["status"] == "incomplete"


def test_runtime_error_and_no_tests() -> None:
    err = parse("dcgmi", json.dumps({"DCGM GPU Diagnostic": {"runtime_error": "Error: GPU 3 is unhealthy",
                                                             "version": "3.3.5"}}))
    assert err["status"] == "failed" and dcgm_problems(err) == ["DCGM error: Error: GPU 3 is unhealthy"]
    empty = parse("dcgmi", json.dumps({"DCGM GPU Diagnostic": {"test_categories": [], "version": "3.3.5"}}))
    assert empty["status"] == "incomplete"


def test_every_test_skipped_diagnoses_nothing_and_is_not_a_pass() -> None:
    skipped = json.loads(json.dumps(DCGM4))
    for category in skipped["DCGM Diagnostic"]["test_categories"]:
        for test in category["tests"]:
            for entry in test["results"]:
                entry["status"] = "Skip"
                entry.pop("warnings", None)
            test["test_summary"]["status"] = "Skip"
    parsed = parse("dcgmi", json.dumps(skipped))
    assert parsed["status"] == "incomplete"
    assert any("every test was skipped: software, memory" in n for n in parsed["notes"])


def test_table_output_is_still_read(sample: Sample) -> None:
    assert parse("dcgmi", sample("dcgmi_diag_01.txt"))["status"] == "ok"


def test_other_json_is_not_dcgmi() -> None:
    with pytest.raises(NotToolOutput):
        parse_dcgmi('{"nvbandwidth": {"testcases": []}}\n')
