from __future__ import annotations

from gpucluster.conformance.gpu_checks import gpu_burn_rows, gpu_health_problems, nvlink_problems
from gpucluster.conformance.run_gpu_burn import parse_samples
from gpucluster.parsers import parse, parse_run


def test_healthy_h100_has_no_health_problems(sample_text):
    parsed = parse_run("nvidia-smi", sample_text("nvidia_smi_01.txt"), 0)
    assert parsed["gpus"] and gpu_health_problems(parsed) == []


def test_ecc_mode_is_the_checks_own_and_health_is_the_parsers(sample_text):
    parsed = parse_run("nvidia-smi", sample_text("nvidia_smi_01.txt"), 0)
    parsed["gpus"][0]["ecc_mode_current"] = "Disabled"
    assert gpu_health_problems(parsed) == ["GPU 0: ECC mode Disabled"]


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
