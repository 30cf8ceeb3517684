from __future__ import annotations

from gpucluster.conformance.gpu_burn import parse_samples
from gpucluster.conformance.gpu_checks import ecc_problems, gpu_burn_rows, nvlink_problems
from gpucluster.parsers import parse


def test_healthy_h100_has_no_ecc_problems(sample_text):
    gpus = parse("nvidia-smi", sample_text("nvidia_smi_01.txt"))["gpus"]
    assert gpus and ecc_problems(gpus) == []


def test_ecc_problems_named():
    g = {"index": 2, "ecc_mode_current": "Enabled", "ecc_volatile_uncorrectable": 3, "remapped_rows_pending": True}
    probs = ecc_problems([g, {"index": 0, "ecc_mode_current": "Disabled"}])
    assert any("GPU 2: 3 volatile uncorrectable" in p for p in probs)
    assert any("row remap pending" in p for p in probs) and any("GPU 0: ECC mode Disabled" in p for p in probs)


def test_nvlinks_from_real_output(sample_text):
    gpus = parse("nvidia-smi", sample_text("nvidia_smi_06.txt"))["gpus"]
    assert nvlink_problems(gpus, 18) == []
    assert nvlink_problems(gpus, 20)  # fewer links up than the profile lists fails
    gpus[0]["links"][3]["state"] = "inactive"
    assert nvlink_problems(gpus, 18) == ["GPU 0: 17/18 NVLinks up (down: 3)"]


def test_gpu_burn_summary_is_the_verdict(sample_text):
    rows, problems = gpu_burn_rows(parse("gpu-burn", sample_text("gpu_burn_01.txt")))
    assert problems == [] and len(rows) == 8 and all(r["tflops"] > 16 for r in rows)
    no_summary = "\n".join(sample_text("gpu_burn_01.txt").splitlines()[:5])
    try:
        parsed = parse("gpu-burn", no_summary)
    except ValueError:
        return
    _, problems = gpu_burn_rows(parsed)
    assert problems, "a gpu-burn run without its summary must not pass"


def test_telemetry_samples():
    tel = parse_samples("0, 61, 0x0000000000000000\n1, 85, 0x0000000000000040\n0, 66, 0x0000000000000001\n")
    assert tel.max_temp_c == {0: 66, 1: 85}
    assert tel.throttle == {0: [], 1: ["hw_thermal_slowdown"]}
