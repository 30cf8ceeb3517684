"""DCGM on GPU nodes (gpu_validation): the packages for the node's CUDA major at the BOM's pin,
NSCQ on NVSwitch profiles, the nvidia-dcgm service, and the lab skipped by its stated capability.

Each test renders the role's own defaults, vars and task files (tests/unit/roles/render.py) and
fails if a package name, the gating or the pin were wrong."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from gpucluster.render import os_packages as table
from gpucluster.spec import load_bom
from tests.unit.roles.render import NATIVE, REPO, ROLES, first_host, host_context, inventory_for, role_vars

BOM = yaml.safe_load((REPO / "gpucluster" / "data" / "bom.yaml").read_text())
# Spelled out, not imported: what NVIDIA's documentation names (sources in gpucluster/render/os_packages.py).
CORE = "datacenter-gpu-manager-4-core"
# R580 drivers are CUDA 13 user-mode drivers: DCGM's CUDA 13 package (NVIDIA's DCGM user guide,
# quoted in https://github.com/NVIDIA/DCGM/issues/255).
CUDA13 = "datacenter-gpu-manager-4-cuda13"
NSCQ_580 = "libnvidia-nscq-580"


def _vars(fabric: str, **extra: Any) -> dict[str, Any]:
    inventory = inventory_for(fabric)
    ctx = host_context(inventory, first_host(inventory, "gpu"))
    return role_vars("gpu_validation", ctx, extra)


def _tasks(name: str) -> list[dict[str, Any]]:
    return yaml.safe_load((ROLES / "gpu_validation" / name).read_text())


def test_the_boms_pins_are_the_ones_the_package_names_below_assume() -> None:
    # The literal names below hold for CUDA 13 and the 580 branch; a new pin must revisit them.
    assert BOM["cuda"]["version"].split(".")[0] == "13"
    assert BOM["nvidia_driver"]["branch"] == "580"
    assert BOM["dcgm"]["version"].split(".")[0] == "4", "the package names are DCGM 4's"


def test_an_nvswitch_node_gets_dcgm_for_its_cuda_major_and_nscq_for_its_driver_branch() -> None:
    v = _vars("infiniband")  # onprem H100 SXM (NVSwitch), Ubuntu 22.04
    assert v["gpucluster_capabilities"]["nvidia_repo"] is True
    assert v["gpu_validation_dcgm_enabled"] is True
    assert v["gpu_validation_dcgm_nscq_enabled"] is True
    dcgm = f"1:{BOM['dcgm']['version']}-*"
    assert v["__gpu_validation_dcgm_packages"] == [
        f"{CORE}={dcgm}", f"{CUDA13}={dcgm}", f"{NSCQ_580}={BOM['nvidia_driver']['version']}-*"]
    assert v["__gpu_validation_dcgm_service"] == "nvidia-dcgm"
    # From NVIDIA's CUDA repository, which the internal role nvidia_cuda_repo adds (dcgm.yml includes it).
    inventory = inventory_for("infiniband")
    repo = role_vars("nvidia_cuda_repo", host_context(inventory, first_host(inventory, "gpu")))
    assert repo["__nvidia_cuda_repo_uri"] == "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"


@pytest.mark.parametrize("fabric", ["roce", "efa"])
def test_every_real_gpu_target_installs_dcgm(fabric: str) -> None:
    v = _vars(fabric)
    assert v["gpu_validation_dcgm_enabled"] is True
    assert f"{CUDA13}=1:{BOM['dcgm']['version']}-*" in v["__gpu_validation_dcgm_packages"]


def test_a_pcie_profile_gets_no_nscq() -> None:
    profile = yaml.safe_load((REPO / "gpucluster" / "data" / "profiles" / "l40s-pcie.yaml").read_text())
    v = _vars("roce", gpucluster_profiles={"l40s-pcie": profile}, gpucluster_profile="l40s-pcie")
    assert v["gpu_validation_dcgm_nscq_enabled"] is False
    assert [p.split("=")[0] for p in v["__gpu_validation_dcgm_packages"]] == [CORE, CUDA13]


def test_the_lab_skips_dcgm_by_its_stated_capabilities() -> None:
    v = _vars("ethernet")
    caps = v["gpucluster_capabilities"]
    assert (caps["nvidia_repo"], caps["heavy_packages"]) == (False, False)
    assert v["gpu_validation_dcgm_enabled"] is False
    # `converge --heavy` alone does not reach NVIDIA's repositories.
    assert _vars("ethernet", gpucluster_heavy_packages=True)["gpu_validation_dcgm_enabled"] is False
    # The same lab node with NVIDIA's repositories in reach and room for the packages would install
    # it: the capabilities decide, not the target.
    reach = _vars("ethernet", gpucluster_capabilities={**caps, "nvidia_repo": True, "heavy_packages": True})
    assert reach["gpu_validation_dcgm_enabled"] is True
    assert _vars("ethernet", gpucluster_capabilities={**caps, "nvidia_repo": True},
                 gpucluster_heavy_packages=True)["gpu_validation_dcgm_enabled"] is True
    for path in (ROLES / "gpu_validation").rglob("*.yml"):
        text = path.read_text()
        assert "gpucluster_target" not in text and "'lab'" not in text, path


def test_the_version_input_overrides_the_boms_pin_for_every_dcgm_package() -> None:
    v = _vars("infiniband", gpu_validation_dcgm_version="4.3.1")
    assert v["__gpu_validation_dcgm_packages"][:2] == [f"{CORE}=1:4.3.1-*", f"{CUDA13}=1:4.3.1-*"]


def test_dcgm_tasks_install_the_table_packages_and_run_the_service() -> None:
    main = _tasks("tasks/main.yml")
    include = next(t for t in main if t.get("ansible.builtin.include_tasks", {}).get("file") == "dcgm.yml")
    assert include["when"] == "gpu_validation_dcgm_enabled | bool"
    report = next(t for t in main if t["name"] == "Report what this role leaves out here")
    assert "not (gpu_validation_dcgm_enabled | bool)" in report["when"]
    said = NATIVE.from_string(report["vars"]["__gpu_validation_skips"]).render(
        _vars("infiniband", gpu_validation_dcgm_enabled=False, gpu_validation_gpu_burn_enabled=True))
    assert len(said) == 1, said
    assert said[0].startswith("skipped: DCGM (gpu_validation_dcgm_enabled=false: this target's nodes"), said

    tasks = _tasks("tasks/dcgm.yml")
    apt = next(t for t in tasks if "gpucluster.cluster.apt" in t)
    assert apt["gpucluster.cluster.apt"]["name"] == "{{ __gpu_validation_dcgm_packages }}"
    assert apt["notify"] == "Restart DCGM"
    service = next(t for t in tasks if "gpucluster.cluster.service" in t)["gpucluster.cluster.service"]
    assert service["name"] == "{{ __gpu_validation_dcgm_service }}"
    assert service["enabled"] is True
    assert "'started' if __gpu_validation_driver_loaded.stat.exists" in service["state"]
    handlers = _tasks("handlers/main.yml")
    restart = next(h for h in handlers if h["name"] == "Restart DCGM")
    assert restart["ansible.builtin.systemd_service"] == {"name": "{{ __gpu_validation_dcgm_service }}",
                                                          "state": "restarted"}
    assert restart["notify"] == "Wait for DCGM's host engine"
    wait = next(h for h in handlers if h["name"] == "Wait for DCGM's host engine")
    assert wait["ansible.builtin.command"] == "dcgmi discovery -l" and wait["changed_when"] is False


def test_the_os_table_names_are_nvidias() -> None:
    # https://docs.nvidia.com/datacenter/dcgm/latest/installation.html (DCGM 4 package split),
    # .../learn/getting-started-for-system-administrators/systemd-service.html (nvidia-dcgm.service),
    # https://github.com/NVIDIA/apt-packaging-libnvidia-nscq (libnvidia-nscq-<branch>).
    assert (table.DCGM_CORE_PACKAGE, table.DCGM_CUDA_PACKAGE.format(major=13)) == (CORE, CUDA13)
    assert table.DCGM_SERVICE == "nvidia-dcgm"
    assert table.NSCQ_PACKAGE.format(branch="580") == NSCQ_580
    assert table.DCGM_EPOCH == "1"
    with pytest.raises(ValueError, match=r"cuda\.version"):
        bom = load_bom()
        table.cuda_major(bom.model_copy(update={"cuda": bom.cuda.model_copy(update={"version": "x.1"})}))


def test_nvbandwidth_is_built_at_the_boms_pin_against_the_nodes_cuda_where_gpu_burn_is() -> None:
    """GC-PCIE-003 needs nvbandwidth on the node: the role builds the BOM's release with cmake, for the
    named architectures, with the CUDA the BOM pins, and puts it on the PATH; not where gpu-burn is not."""
    from tests.unit.roles.render import TEXT

    v = _vars("infiniband")
    assert v["gpu_validation_nvbandwidth_enabled"] is True
    assert str(v["gpu_validation_nvbandwidth_version"]) == BOM["nvbandwidth"]["version"]
    tasks = {t["name"]: t for t in _tasks("tasks/nvbandwidth.yml")}
    get = tasks["Download the nvbandwidth source"]["ansible.builtin.get_url"]
    assert TEXT.from_string(get["url"]).render(v) == BOM["nvbandwidth"]["source_url"]
    build = tasks["Build nvbandwidth"]["ansible.builtin.shell"]
    cmd = TEXT.from_string(build["cmd"]).render(v)
    cuda = ".".join(BOM["cuda"]["version"].split(".")[:2])
    assert cmd == (f"cmake -DCMAKE_CUDA_COMPILER=/usr/local/cuda-{cuda}/bin/nvcc "
                   "-DCMAKE_CUDA_ARCHITECTURES='80;89;90' . && make")
    link = tasks["Put the pinned nvbandwidth on the PATH"]["ansible.builtin.file"]
    assert link["dest"] == "/usr/local/bin/nvbandwidth"  # what GC-PCIE-001/003 look for (`command -v`)
    main = {t["name"]: t for t in _tasks("tasks/main.yml")}
    assert main["Build nvbandwidth"]["when"] == "gpu_validation_nvbandwidth_enabled | bool"
    assert _vars("ethernet")["gpu_validation_nvbandwidth_enabled"] is False  # the lab: no CUDA


@pytest.mark.parametrize("tool", ["gpu-burn", "nvbandwidth"])
def test_an_air_gapped_source_is_checked_against_its_sha256_not_handed_to_copys_sha1(tool: str) -> None:
    """ansible.builtin.copy's `checksum` is SHA-1: given the BOM's SHA-256 it would refuse every good
    tarball. The copied file is read with stat's sha256 and asserted equal to the pin instead; in
    check mode (nothing downloaded) the unpack is skipped rather than failing."""
    tasks = {t["name"]: t for t in _tasks(f"tasks/{tool}.yml")}
    copy = tasks[f"Copy the {tool} source from the controller"]["ansible.builtin.copy"]
    assert "checksum" not in copy
    stat = tasks[f"Read the copied {tool} source's SHA-256"]
    assert stat["ansible.builtin.stat"]["checksum_algorithm"] == "sha256"
    check = tasks[f"Check the copied {tool} source against its pinned SHA-256"]["ansible.builtin.assert"]
    assert ".stat.checksum ==" in check["that"] and "_source_sha256" in check["that"]
    assert tasks[f"Unpack the {tool} source"]["when"] == "not ansible_check_mode"
