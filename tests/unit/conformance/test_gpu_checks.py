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


def test_cuda_is_looked_for_where_the_role_installed_it() -> None:
    """GC-GPU-010 reads the toolkit by the node contract's install method, as roles/cuda_toolkit
    installs it: NVIDIA's version.json under /usr/local/cuda-<x.y>, or Debian's nvidia-cuda-toolkit
    (package versions as bookworm's and trixie's non-free archives list them, 2026-11-28)."""
    from gpucluster.conformance.gpu_checks import cuda_toolkit_command, cuda_toolkit_problem, cuda_toolkit_version

    assert "/usr/local/cuda-13.0/version.json" in cuda_toolkit_command("cuda_repo", "13.0.1")
    assert cuda_toolkit_command("distro", "13.0.1") == \
        "dpkg-query -W -f='${db:Status-Abbrev}${Version}' nvidia-cuda-toolkit 2>/dev/null"
    # NVIDIA's version.json (the layout cuda-toolkit-13-0 installs), abridged.
    version_json = ('{\n   "cuda" : {\n      "name" : "CUDA SDK",\n      "version" : "13.0.1"\n   },\n'
                    '   "cuda_cccl" : {\n      "name" : "CUDA C++ Core Compute Libraries",\n'
                    '      "version" : "13.0.50"\n   }\n}\n')
    assert cuda_toolkit_version("cuda_repo", version_json) == "13.0.1"
    assert cuda_toolkit_problem("cuda_repo", "13.0.1", "13.0.1") is None
    assert cuda_toolkit_version("cuda_repo", "cat: /usr/local/cuda/version.json: No such file or directory\n") is None
    assert cuda_toolkit_problem("cuda_repo", None, "13.0.1") == \
        "CUDA toolkit not found in /usr/local/cuda-13.0 or /usr/local/cuda, pinned 13.0.1"
    # dpkg-query's output for that format: the three-character status ("ii " installed, "hi " held,
    # "rc " removed with its configuration files kept, "un " known but never installed), then the version.
    assert cuda_toolkit_version("distro", "ii 11.8.89~11.8.0-5~deb12u1") == "11.8.0"
    assert cuda_toolkit_version("distro", "ii 12.4.131~12.4.1-2") == "12.4.1"
    assert cuda_toolkit_version("distro", "hi 12.4.131~12.4.1-2") == "12.4.1"
    assert cuda_toolkit_version("distro", "rc 11.8.89~11.8.0-5~deb12u1") is None
    assert cuda_toolkit_version("distro", "un ") is None
    assert cuda_toolkit_version("distro", "") is None
    problem = cuda_toolkit_problem("distro", "11.8.0", "13.0.1")
    assert problem is not None and problem.startswith(
        "Debian's nvidia-cuda-toolkit holds CUDA 11.8.0, not the pinned 13.0.1: the install method is distro")
    problem = cuda_toolkit_problem("distro", cuda_toolkit_version("distro", "rc 11.8.89~11.8.0-5~deb12u1"), "13.0.1")
    assert problem is not None and "is not installed (install method distro)" in problem


def test_a_package_counts_as_installed_by_dpkgs_state_alone() -> None:
    """GC-GPU-010's Debian toolkit and GC-GPU-011's libnccl2 are read with dpkg's abbreviated status
    (three characters, then the version: dpkg-query -W -f='${db:Status-Abbrev}${Version}')."""
    from gpucluster.conformance.gpu_checks import dpkg_installed_version, dpkg_version_command

    assert dpkg_version_command("libnccl2") == "dpkg-query -W -f='${db:Status-Abbrev}${Version}' libnccl2 2>/dev/null"
    assert dpkg_installed_version("ii 2.28.9-1+cuda13.0") == "2.28.9-1+cuda13.0"
    assert dpkg_installed_version("hi 2.28.9-1+cuda13.0") == "2.28.9-1+cuda13.0"  # held
    assert dpkg_installed_version("rc 2.27.3-1+cuda12.9") is None  # removed, configuration kept
    assert dpkg_installed_version("un ") is None
    assert dpkg_installed_version("") is None
