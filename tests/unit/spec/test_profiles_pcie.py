"""GC-PCIE-003's floor in the shipped profiles: every H100/H200 profile states it, with its sources."""

from __future__ import annotations

import pytest

from gpucluster.spec import load_profiles
from gpucluster.spec.loader import PROFILE_DIR

# Azure's own H2D/D2H floor for ND H100 v5 / ND H200 v5 (`check_gpu_bw 48 335`), well under the
# ~55 GB/s a Gen5 x16 copy engine moves and over the ~26 GB/s of a link trained at Gen4.
SOURCES = {
    "h100-sxm-8": (48.0, "https://github.com/Azure/azurehpc-health-checks/blob/main/conf/nd96isr_h100_v5.conf"),
    "h200-sxm-8": (48.0, "https://github.com/Azure/azurehpc-health-checks/blob/main/conf/nd96isr_h200_v5.conf"),
}
HOPPER = ("H100", "H200")


def test_every_hopper_profile_states_a_host_device_copy_floor() -> None:
    hopper = {n for n, p in load_profiles().items() if any(m in (p.gpu.model or "") for m in HOPPER)}
    assert hopper >= {"h100-sxm-8"}
    missing = sorted(n for n in hopper if load_profiles()[n].floors.host_device_copy_gbps is None)
    assert not missing, f"no floors.host_device_copy_gbps in {missing}"
    assert hopper <= set(SOURCES), f"add the floor and its source for {sorted(hopper - set(SOURCES))}"


@pytest.mark.parametrize("name", sorted(SOURCES))
def test_host_device_copy_floor_is_the_cited_figure(name: str) -> None:
    figure, url = SOURCES[name]
    profile = load_profiles()[name]
    assert profile.floors.host_device_copy_gbps == figure
    # Below the Gen5 x16 line rate (64 GB/s each way) and above what a Gen4 link can move (32 GB/s).
    assert profile.gpu.pcie_generation == 5 and 32.0 < figure < 64.0
    text = (PROFILE_DIR / f"{name}.yaml").read_text()
    comment = text.split("  host_device_copy_gbps:")[0].rsplit("floors:", 1)[-1]
    assert url in comment and "https://www.nvidia.com/en-us/data-center/" in comment
