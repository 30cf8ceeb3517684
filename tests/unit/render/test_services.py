"""gpucluster.render.services: the services GC-SYS-003 requires, on every node of every example stack."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2
import pytest

from gpucluster.conformance import nodes as suite_nodes
from gpucluster.inventory import build_inventory, dump_inventory, parse_inventory_text
from gpucluster.outputs import Capabilities, StackOutputs
from gpucluster.render.services import ALL_SERVICES, BASE_SERVICES, required_services
from gpucluster.spec import load_spec
from gpucluster.spec.loader import load_profiles
from tests.unit.example_outputs import example_outputs
from tests.unit.loading import load_file

# Ansible's import asks ldconfig for a library (ansible.utils.display): done here, at collection,
# so that no in-process test below starts that process, whichever tests a worker ran before.
from tests.unit.roles.render import host_context, role_vars

REPO = Path(__file__).resolve().parents[3]
STACKS = sorted(REPO.glob("Pulumi.*.yaml"))
PLUGIN = load_file(REPO / "collections/ansible_collections/gpucluster/cluster/plugins/filter/render.py",
                   "gpucluster_cluster_render_filters_services")


def _inventory(stack: Path) -> dict[str, Any]:
    cluster = load_spec(stack)
    outputs = StackOutputs.model_validate(example_outputs(cluster, ssh_user="root"))
    data: dict[str, Any] = parse_inventory_text(dump_inventory(build_inventory(cluster, outputs)))
    return data


@pytest.mark.parametrize("stack", STACKS, ids=[s.stem.removeprefix("Pulumi.") for s in STACKS])
def test_the_filter_the_roles_call_and_the_check_agree(stack: Path) -> None:
    data = _inventory(stack)
    inv = suite_nodes.parse_inventory(data, str(stack))
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters.update({f"gpucluster.cluster.{k}": v for k, v in PLUGIN.FilterModule().filters().items()})
    expr = env.compile_expression(
        "group_names | gpucluster.cluster.required_services(gpucluster_profiles[gpucluster_profile])")
    for info in inv.nodes:
        want = required_services(info.groups, info.profile)
        roles_side = expr(group_names=list(info.groups), gpucluster_profiles=data["all"]["vars"]["gpucluster_profiles"],
                          gpucluster_profile=data["all"]["hosts"][info.name]["gpucluster_profile"])
        assert roles_side == want, info.name
        assert set(want) <= set(ALL_SERVICES)


@pytest.mark.parametrize("stack", STACKS, ids=[s.stem.removeprefix("Pulumi.") for s in STACKS])
def test_nvidia_driver_starts_the_fabric_manager_exactly_where_the_check_requires_it(stack: Path) -> None:
    import yaml

    default = yaml.safe_load((REPO / "roles/nvidia_driver/defaults/main.yml").read_text())[
        "nvidia_driver_fabricmanager_enabled"]
    data = _inventory(stack)
    inv = suite_nodes.parse_inventory(data, str(stack))
    env = jinja2.Environment(undefined=jinja2.StrictUndefined)
    env.filters.update({f"gpucluster.cluster.{k}": v for k, v in PLUGIN.FilterModule().filters().items()})
    template = env.from_string(default)
    for info in inv.nodes:
        if "gpu" not in info.groups:
            continue  # the role runs on GPU nodes only
        rendered = template.render(group_names=list(info.groups),
                                   gpucluster_profiles=data["all"]["vars"]["gpucluster_profiles"],
                                   gpucluster_profile=data["all"]["hosts"][info.name]["gpucluster_profile"])
        required = required_services(info.groups, info.profile)
        assert (rendered.strip() == "True") == ("nvidia-fabricmanager" in required)


def test_what_each_kind_of_node_runs() -> None:
    profiles = load_profiles()
    real = Capabilities(nvidia_repo=True, heavy_packages=True)
    assert required_services(["gpu", "pool_gpu"], profiles["h100-sxm-8"], real) == list(ALL_SERVICES)
    # Without the capabilities to install DCGM (the lab's, or none given), no host engine is required.
    assert "nvidia-dcgm" not in required_services(["gpu"], profiles["h100-sxm-8"])
    no_repo = real.model_copy(update={"nvidia_repo": False})
    assert "nvidia-dcgm" not in required_services(["gpu"], profiles["h100-sxm-8"], no_repo)
    assert required_services(["gpu"], profiles["l40s-pcie"]) == [*BASE_SERVICES, "nvidia-persistenced"]
    assert required_services(["gpu"], profiles["cpu-lab"]) == list(BASE_SERVICES)
    assert required_services(["storage", "ceph_osd"], profiles["cpu-server"]) == list(BASE_SERVICES)
    # A GPU profile outside the gpu group (a storage node with a GPU) runs no NVIDIA services.
    assert required_services(["storage"], profiles["h100-sxm-8"]) == list(BASE_SERVICES)


@pytest.mark.parametrize("stack", STACKS, ids=[s.stem.removeprefix("Pulumi.") for s in STACKS])
def test_gpu_validation_installs_dcgm_exactly_where_the_check_requires_its_service(stack: Path) -> None:
    data = _inventory(stack)
    inv = suite_nodes.parse_inventory(data, str(stack))
    caps = Capabilities.model_validate(data["all"]["vars"]["gpucluster_capabilities"])
    checked = 0
    for info in inv.nodes:
        if "gpu" not in info.groups or info.profile.gpu.count == 0:
            continue
        installed = role_vars("gpu_validation", host_context(data, info.name))["gpu_validation_dcgm_enabled"]
        checked += 1
        required = required_services(info.groups, info.profile, caps)
        assert installed == ("nvidia-dcgm" in required), info.name
    assert checked or "lab" in stack.name
