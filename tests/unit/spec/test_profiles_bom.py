"""The shipped data files: hardware profiles and the bill of materials."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpucluster.errors import InputError
from gpucluster.spec import load_bom, load_profiles
from gpucluster.spec.loader import PROFILE_DIR

REQUIRED = {"h100-sxm-8", "h200-sxm-8", "a100-sxm-8", "l40s-pcie", "cpu-lab"}


def test_required_profiles_ship() -> None:
    assert REQUIRED <= set(load_profiles())


@pytest.mark.parametrize("name", sorted(REQUIRED - {"cpu-lab"}))
def test_gpu_profiles_have_floors_and_cite_sources(name: str) -> None:
    profile = load_profiles()[name]
    assert profile.gpu.count == 8
    floors = profile.floors
    assert floors.allreduce_intra_busbw_gbps and floors.allreduce_intra_verdict_bytes
    assert set(floors.burn_tflops) >= {"fp32", "tf32", "bf16"}
    # Each floor line carries its source in a comment (same line or the lines above).
    text = (PROFILE_DIR / f"{name}.yaml").read_text()
    for key in ("allreduce_intra_busbw_gbps", "burn_tflops", "pcie_generation"):
        block = text.split(f"  {key}:")[0].rsplit("\n  ", 3)[-3:]
        same_line = re.search(rf"{key}:[^\n]*#", text)
        assert same_line or any("#" in b for b in block), f"{name}: {key} has no source comment"


# The GPU figures each profile states, from NVIDIA's datasheets (the URL is beside each in the file):
# PCIe generation and width, and one NVLink's speed as nvidia-smi nvlink -s prints it.
GPU_FIGURES = {
    "h100-sxm-8": (5, 16, 26.562, "https://www.nvidia.com/en-us/data-center/h100/"),
    "h200-sxm-8": (5, 16, 26.562, "https://www.nvidia.com/en-us/data-center/h200/"),
    "a100-sxm-8": (4, 16, 25.0, "https://www.nvidia.com/en-us/data-center/a100/"),
    "a100-40gb-sxm-8": (4, 16, 25.0, "https://www.nvidia.com/en-us/data-center/a100/"),
    "l40s-pcie": (4, 16, None, "https://resources.nvidia.com/en-us-l40s/l40s-datasheet-28413"),
}


@pytest.mark.parametrize("name", sorted(GPU_FIGURES))
def test_gpu_figures_are_the_datasheets(name: str) -> None:
    gen, width, link, url = GPU_FIGURES[name]
    gpu = load_profiles()[name].gpu
    assert (gpu.pcie_generation, gpu.pcie_width, gpu.nvlink_gbps_per_link) == (gen, width, link)
    assert url in (PROFILE_DIR / f"{name}.yaml").read_text()
    assert (gpu.nvlink_gbps_per_link is None) == (not gpu.nvlink)


def test_nvswitch_profiles_judge_intra_node_all_reduce_at_8_to_16_gib() -> None:
    for profile in load_profiles().values():
        if profile.gpu.nvswitch and profile.gpu.count == 8:
            assert 8 << 30 <= (profile.floors.allreduce_intra_verdict_bytes or 0) <= 16 << 30, profile.name


def test_a100_memory_matches_the_part() -> None:
    """p4d carries the 40GB A100, p4de the 80GB one: each profile's memory is its part's."""
    profiles = load_profiles()
    assert (profiles["a100-40gb-sxm-8"].gpu.model, profiles["a100-40gb-sxm-8"].gpu.memory_mib) == (
        "NVIDIA A100-SXM4-40GB", 40960)
    assert (profiles["a100-sxm-8"].gpu.model, profiles["a100-sxm-8"].gpu.memory_mib) == ("NVIDIA A100-SXM4-80GB", 81920)


def test_nvswitch_profiles_need_fabric_manager() -> None:
    for profile in load_profiles().values():
        assert profile.gpu.fabric_manager == profile.gpu.nvswitch


def test_bom_pins_every_component() -> None:
    bom = load_bom()
    for version in (
        bom.nvidia_driver.version,
        bom.cuda.version,
        bom.nccl.version,
        bom.nccl_tests.version,
        bom.ceph.version,
        bom.kubernetes.version,
    ):
        assert re.fullmatch(r"\d+(\.\d+)+", version)
    assert bom.nvidia_driver.version.startswith(bom.nvidia_driver.branch + ".")
    # Helm chart versions (the GPU Operator's chart adds a leading "v" itself).
    for chart in (bom.gpu_operator, bom.device_plugin, bom.network_operator, bom.ceph_csi):
        assert re.fullmatch(r"\d+\.\d+\.\d+", chart.version)
    assert bom.kubernetes.version.startswith(bom.kubernetes.minor + ".")


def test_bad_bom_is_reported_with_its_path(tmp_path: Path) -> None:
    bad = tmp_path / "bom.yaml"
    bad.write_text("schema: 1\nnvidia_driver: {branch: '570'}\n")
    with pytest.raises(InputError) as err:
        load_bom(bad)
    assert err.value.source == str(bad)
    assert any(p.startswith("bom.nvidia_driver.version: is required") for p in err.value.problems)


def test_profile_name_must_match_file(tmp_path: Path) -> None:
    src = (PROFILE_DIR / "cpu-lab.yaml").read_text()
    (tmp_path / "other.yaml").write_text(src)
    with pytest.raises(InputError) as err:
        load_profiles.__wrapped__(tmp_path)
    assert "must equal the file name" in err.value.problems[0]


# Dense datasheet peaks (TFLOP/s: fp32, tf32, bf16), each beside its URL in the profile file.
BURN_PEAKS = {
    "h100-sxm-8": (67.0, 494.5, 989.5),
    "h200-sxm-8": (67.0, 494.5, 989.5),
    "a100-sxm-8": (19.5, 156.0, 312.0),
    "a100-40gb-sxm-8": (19.5, 156.0, 312.0),
    "l40s-pcie": (91.6, 183.0, 362.05),
}


@pytest.mark.parametrize("name", sorted(BURN_PEAKS))
def test_a_gpu_at_60_percent_of_its_peak_fails_the_burn_and_a_healthy_one_can_pass(name: str) -> None:
    profile = load_profiles()[name]
    peaks = dict(zip(("fp32", "tf32", "bf16"), BURN_PEAKS[name], strict=True))
    assert profile.gpu.burn_peak_tflops == peaks
    for precision, floor in profile.floors.burn_tflops.items():
        peak = peaks[precision]
        # A power- or thermal-capped GPU at 60% of peak is below the floor; a healthy one (cuBLAS
        # sustains about 70-80% of the dense peak) is above it.
        assert 0.60 * peak < floor <= 0.75 * peak, (name, precision, floor, peak)


def test_a_burn_floor_at_or_above_the_peak_is_refused() -> None:
    from gpucluster.spec.models import HardwareProfile

    data = load_profiles()["h100-sxm-8"].model_dump()
    data["floors"]["burn_tflops"]["bf16"] = 1000.0
    with pytest.raises(ValueError, match=r"floors.burn_tflops.bf16 \(1000\) is not below gpu.burn_peak_tflops.bf16"):
        HardwareProfile.model_validate(data)
