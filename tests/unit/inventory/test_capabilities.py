"""What a target's nodes can do: exported with the stack outputs, stated by the inventory
(``gpucluster_capabilities``), read by the roles' defaults. The target's kind decides nothing in a role."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.errors import InputError
from gpucluster.inventory import build_inventory, parse_inventory_text
from gpucluster.inventory_model import SCHEMA_VERSION, read_inventory, validate_inventory
from gpucluster.outputs import LAB_CAPABILITIES, Capabilities, build_outputs, load_outputs, parse_outputs
from gpucluster.spec import load_spec
from gpucluster.spec.models import TwinRef
from tests.unit.roles.render import host_context, role_vars

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "golden"


def _inventory(stack: str, capabilities: Capabilities | None = None) -> dict[str, Any]:
    cluster = load_spec(REPO / stack)
    if capabilities is not None and (not capabilities.gpu_devices or not capabilities.rdma_devices
                                     or capabilities.runs_os or capabilities.link_floors):
        # What only lab nodes and twins may state (a real target's outputs saying so are refused,
        # tests/unit/test_twin.py): the same machines booted as a twin.
        cluster = cluster.__class__(**{**{f: getattr(cluster, f) for f in ("bom", "profiles", "platforms", "nodes",
                                                                            "source")},
                                       "spec": cluster.spec.model_copy(update={"twin": TwinRef(file="dgx-h100-ib")})})
    outputs = build_outputs(cluster, ssh_user="root", capabilities=capabilities)
    return build_inventory(cluster, parse_outputs(outputs, "outputs"))


def _golden(name: str) -> dict[str, Any]:
    data: dict[str, Any] = parse_inventory_text((GOLDEN / "inventory" / f"{name}.yml").read_text())
    return data


def test_targets_state_their_capabilities_and_the_inventory_carries_them() -> None:
    assert _golden("lab")["all"]["vars"]["gpucluster_capabilities"] == LAB_CAPABILITIES.model_dump()
    for name in ("aws-h100", "onprem-h100-ib", "onprem-h100-roce"):
        assert _golden(name)["all"]["vars"]["gpucluster_capabilities"] == Capabilities().model_dump(), name


def test_outputs_without_capabilities_describe_real_machines() -> None:
    raw = json.loads((GOLDEN / "outputs" / "aws-h100.json").read_text())
    del raw["capabilities"]
    assert parse_outputs(raw, "outputs.json").capabilities == Capabilities()


def test_a_capability_the_outputs_name_wrongly_is_refused() -> None:
    raw = json.loads((GOLDEN / "outputs" / "lab.json").read_text())
    raw["capabilities"]["heavy_packages"] = "no"
    with pytest.raises(InputError, match=r"outputs\.capabilities\.heavy_packages"):
        parse_outputs(raw, "outputs.json")


def test_the_model_names_every_capability_problem_at_once() -> None:
    data = _golden("lab")
    caps = data["all"]["vars"]["gpucluster_capabilities"]
    del caps["fuse_device"]
    caps["nvidia_repo"] = "yes"
    caps["gpu_direct"] = True
    with pytest.raises(InputError) as err:
        validate_inventory(data, "inv.yml")
    text = "\n".join(err.value.problems)
    assert "all.vars.gpucluster_capabilities.fuse_device: is required" in text
    assert "all.vars.gpucluster_capabilities.nvidia_repo" in text
    assert "all.vars.gpucluster_capabilities.gpu_direct" in text


def test_the_inventory_reads_the_outputs_capabilities_back_as_written() -> None:
    """The outputs' own model, without its defaults or its tolerance: every field, nested ones too."""
    data = _golden("lab")
    caps = data["all"]["vars"]["gpucluster_capabilities"]
    assert validate_inventory(copy.deepcopy(data), "inv.yml").vars.gpucluster_capabilities == LAB_CAPABILITIES
    caps["link_floors"] = {"allreduce_inter_busbw_gbps": "0.05", "verdict_bytes": 1}
    caps["small_disks"] = 1
    with pytest.raises(InputError) as err:
        validate_inventory(data, "inv.yml")
    assert sorted(err.value.problems) == [
        "all.vars.gpucluster_capabilities.link_floors.allreduce_inter_busbw_gbps: must be a finite number (got '0.05')",
        "all.vars.gpucluster_capabilities.link_floors.allreduce_inter_verdict_bytes: is required",
        "all.vars.gpucluster_capabilities.link_floors.verdict_bytes: unknown key "
        "(did you mean 'allreduce_inter_verdict_bytes'?)",
        "all.vars.gpucluster_capabilities.small_disks: must be true or false (got 1)"]


def test_an_inventory_without_capabilities_is_refused() -> None:
    data = _golden("aws-h100")
    del data["all"]["vars"]["gpucluster_capabilities"]
    with pytest.raises(InputError, match=r"all\.vars\.gpucluster_capabilities: is required"):
        validate_inventory(data, "inv.yml")


def test_an_inventory_of_the_schema_before_capabilities_is_refused_with_the_remedy(tmp_path: Path) -> None:
    assert SCHEMA_VERSION == 6
    data = _golden("lab")
    data["all"]["vars"]["gpucluster_inventory_schema"] = 1
    del data["all"]["vars"]["gpucluster_capabilities"]
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError) as err:
        read_inventory(path)
    assert err.value.problems == [
        "all.vars.gpucluster_inventory_schema: 1, but this gpucluster reads version 6; write the inventory again "
        "with `gpucluster inventory` (or `gpucluster lab up`)"]


def _decisions(inventory: dict[str, Any], host: str, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    ctx = host_context(inventory, host)
    keys = {
        "nvidia_driver": ("nvidia_driver_install_method", "nvidia_driver_userspace_enabled",
                          "nvidia_driver_debian_nonfree_enabled"),
        "cuda_toolkit": ("cuda_toolkit_install_method", "cuda_toolkit_enabled", "cuda_toolkit_debian_nonfree_enabled"),
        "nccl": ("nccl_enabled",),
        "gpu_validation": ("gpu_validation_gpu_burn_enabled",),
        "ceph_client": ("ceph_client_fuse_device_enabled",),
        "ceph_mon": ("ceph_mon_central_config",),
        "container_runtime": ("container_runtime_gpu_count",),
    }
    out: dict[str, Any] = {}
    for role, names in keys.items():
        resolved = role_vars(role, ctx, extra)
        out.update({name: resolved[name] for name in names})
    return out


LAB_DECISIONS = {
    "nvidia_driver_install_method": "distro",
    "nvidia_driver_userspace_enabled": False,
    "nvidia_driver_debian_nonfree_enabled": False,
    "cuda_toolkit_install_method": "distro",
    "cuda_toolkit_enabled": False,
    "cuda_toolkit_debian_nonfree_enabled": False,
    "nccl_enabled": False,
    "gpu_validation_gpu_burn_enabled": False,
    "ceph_client_fuse_device_enabled": True,
    "ceph_mon_central_config": {"mon_data_avail_warn": "5"},
    "container_runtime_gpu_count": 0,
}
FULL_DECISIONS = {
    "nvidia_driver_install_method": "cuda_repo",
    "nvidia_driver_userspace_enabled": True,
    "nvidia_driver_debian_nonfree_enabled": True,
    "cuda_toolkit_install_method": "cuda_repo",
    "cuda_toolkit_enabled": True,
    "cuda_toolkit_debian_nonfree_enabled": True,
    "nccl_enabled": True,
    "gpu_validation_gpu_burn_enabled": True,
    "ceph_client_fuse_device_enabled": False,
    "ceph_mon_central_config": {},
    "container_runtime_gpu_count": 8,
}


def test_roles_decide_from_the_capabilities_on_the_lab_and_on_a_real_target() -> None:
    assert _decisions(_inventory("Pulumi.lab.yaml"), "gpu-1") == LAB_DECISIONS
    assert _decisions(_inventory("Pulumi.onprem-h100-ib.yaml"), "hgx-01") == FULL_DECISIONS


def test_roles_follow_the_capabilities_not_the_target() -> None:
    """A bare-metal cluster whose nodes can do what a lab node can is treated as such, and a lab whose
    outputs say otherwise is not: the target's name changes nothing."""
    bare = _inventory("Pulumi.onprem-h100-ib.yaml", capabilities=LAB_CAPABILITIES)
    assert bare["all"]["vars"]["gpucluster_target"] == "baremetal"
    assert _decisions(bare, "hgx-01") == LAB_DECISIONS
    lab = _inventory("Pulumi.lab.yaml", capabilities=Capabilities())
    assert lab["all"]["vars"]["gpucluster_target"] == "lab"
    # The lab's profile (cpu-lab) lists no GPU: the toolkit's GPU count follows the profile there.
    assert _decisions(lab, "gpu-1") == {**FULL_DECISIONS, "container_runtime_gpu_count": 0}


def test_each_capability_moves_only_its_own_decisions() -> None:
    moved_by = {
        "heavy_packages": {"nvidia_driver_userspace_enabled", "cuda_toolkit_enabled", "nccl_enabled",
                           "gpu_validation_gpu_burn_enabled"},
        "nvidia_repo": {"nvidia_driver_install_method", "cuda_toolkit_install_method"},
        "debian_nonfree_sources": {"nvidia_driver_debian_nonfree_enabled", "cuda_toolkit_debian_nonfree_enabled"},
        "fuse_device": {"ceph_client_fuse_device_enabled"},
        "small_disks": {"ceph_mon_central_config"},
        "gpu_devices": {"container_runtime_gpu_count"},
        # Read by the conformance suite alone (tests/unit/conformance/test_node_capabilities.py).
        "rdma_devices": set(),
        # Read by up's kubernetes stage (tests/unit/test_up.py).
        "kubernetes_nodes": set(),
    }
    suite_only = {"runs_os": "debian-12", "link_floors": {"allreduce_inter_busbw_gbps": 0.05,
                                                          "allreduce_inter_verdict_bytes": 16777216}}
    assert set(moved_by) | set(suite_only) == set(Capabilities.model_fields)
    for capability, value in suite_only.items():
        got = _decisions(_inventory("Pulumi.onprem-h100-ib.yaml", capabilities=Capabilities(**{capability: value})),
                         "hgx-01")
        assert got == FULL_DECISIONS, capability
    for capability, decisions in moved_by.items():
        caps = Capabilities(**{capability: not getattr(Capabilities(), capability)})
        got = _decisions(_inventory("Pulumi.onprem-h100-ib.yaml", capabilities=caps), "hgx-01")
        changed = {k for k in FULL_DECISIONS if got[k] != FULL_DECISIONS[k]}
        assert changed == decisions, capability
        assert all(got[k] == LAB_DECISIONS[k] for k in decisions), capability


def test_heavy_packages_asked_for_win_over_the_capability() -> None:
    inventory = copy.deepcopy(_inventory("Pulumi.lab.yaml"))
    got = _decisions(inventory, "gpu-1", {"gpucluster_heavy_packages": True})
    assert got["cuda_toolkit_enabled"] is True and got["nccl_enabled"] is True
    assert got["nvidia_driver_userspace_enabled"] is True and got["gpu_validation_gpu_burn_enabled"] is True
    assert got["cuda_toolkit_install_method"] == "distro"  # the repository is still out of reach


def test_the_lab_outputs_golden_carries_the_labs_capabilities() -> None:
    assert load_outputs(GOLDEN / "outputs" / "lab.json").capabilities == LAB_CAPABILITIES
