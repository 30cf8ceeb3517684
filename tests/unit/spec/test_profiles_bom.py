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
    assert floors.allreduce_intra_busbw_gbps and floors.allreduce_inter_busbw_gbps and floors.ib_write_bw_gbps
    assert set(floors.burn_tflops) >= {"fp32", "tf32", "bf16"}
    # Each floor line carries its source in a comment (same line or the lines above).
    text = (PROFILE_DIR / f"{name}.yaml").read_text()
    for key in ("allreduce_intra_busbw_gbps", "allreduce_inter_busbw_gbps", "ib_write_bw_gbps", "burn_tflops"):
        block = text.split(f"  {key}:")[0].rsplit("\n  ", 3)[-3:]
        same_line = re.search(rf"{key}:[^\n]*#", text)
        assert same_line or any("#" in b for b in block), f"{name}: {key} has no source comment"


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
