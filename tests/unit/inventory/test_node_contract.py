"""The node contract (gpucluster.spec.contract): one statement of what the roles make where, which the
roles' defaults and the conformance suite both read from the inventory, a role variable set there
overriding both alike."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from gpucluster.conformance.nodes import parse_inventory
from gpucluster.errors import InputError
from gpucluster.inventory import parse_inventory_text
from gpucluster.outputs import LAB_CAPABILITIES, Capabilities
from gpucluster.spec.contract import NodeContract
from tests.unit.roles.render import host_context, role_vars

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "golden" / "inventory"

# Each contract field as a role's default makes it.
_ROLE_SIDE = {
    "nvidia_driver_install_method": ("nvidia_driver", lambda v: v["nvidia_driver_install_method"]),
    "textfile_dir": ("monitoring", lambda v: v["monitoring_textfile_dir"]),
    "node_exporter_port": ("monitoring",
                           lambda v: int(v["monitoring_node_exporter_listen_address"].rpartition(":")[2])),
    "gpu_burn_dir": ("gpu_validation", lambda v: v["gpu_validation_gpu_burn_install_dir"]),
    "nccl_tests_dir": ("nccl", lambda v: v["nccl_tests_install_dir"]),
}


def _golden(name: str) -> dict[str, Any]:
    data: dict[str, Any] = parse_inventory_text((GOLDEN / f"{name}.yml").read_text())
    return data


def _roles_made(data: dict[str, Any], host: str) -> dict[str, Any]:
    ctx = host_context(data, host)
    # The inventory's variables win over a role's defaults (render.role_vars lays the defaults over ctx).
    return {field: read(role_vars(role, ctx, {k: v for k, v in ctx.items() if k.startswith(role + "_")}))
            for field, (role, read) in _ROLE_SIDE.items()}


def test_every_field_has_its_role_side() -> None:
    assert set(_ROLE_SIDE) == set(NodeContract.model_fields)


@pytest.mark.parametrize("name", ["lab", "onprem-h100-ib", "aws-h100"])
def test_the_roles_make_what_the_suite_expects(name: str) -> None:
    data = _golden(name)
    inv = parse_inventory(data, name)
    for node in inv.nodes:
        assert _roles_made(data, node.name) == node.contract.model_dump(), node.name


def test_a_role_variable_in_the_inventory_moves_the_role_and_the_suite_alike() -> None:
    data = copy.deepcopy(_golden("lab"))
    data["all"]["hosts"]["gpu-1"].update(monitoring_textfile_dir="/srv/textfiles", nccl_tests_install_dir="/srv/nccl",
                                         nvidia_driver_install_method="runfile",
                                         monitoring_node_exporter_listen_address="10.0.0.1:19100")
    data["all"]["vars"]["gpu_validation_gpu_burn_install_dir"] = "/srv/burn"
    inv = parse_inventory(data, "lab")
    made = _roles_made(data, "gpu-1")
    assert made == inv.node("gpu-1").contract.model_dump() == {
        "nvidia_driver_install_method": "runfile", "textfile_dir": "/srv/textfiles", "node_exporter_port": 19100,
        "gpu_burn_dir": "/srv/burn", "nccl_tests_dir": "/srv/nccl"}
    # Another node keeps the contract but for what all.vars sets.
    other = inv.node("gpu-2").contract
    assert other.gpu_burn_dir == "/srv/burn" and other.textfile_dir == "/var/lib/prometheus/node-exporter"
    assert _roles_made(data, "gpu-2") == other.model_dump()


@pytest.mark.parametrize(("capabilities", "method"), [(LAB_CAPABILITIES, "distro"), (Capabilities(), "cuda_repo")])
def test_the_driver_method_follows_the_capabilities(capabilities: Capabilities, method: str) -> None:
    """The writer decides it from the outputs' capabilities; the role installs by it and GC-GPU-001
    expects that method's pin (the lab once expected the CUDA repository's pin of a Debian driver)."""
    assert NodeContract.for_capabilities(capabilities.nvidia_repo).nvidia_driver_install_method == method


def test_the_first_source_that_sets_a_variable_decides_as_in_ansible() -> None:
    """A host's value wins even where it is a template (Ansible's to resolve: the suite keeps the
    contract's value, never all.vars'); a templated listen address still gives its literal port
    (a review's findings on d15424a)."""
    contract = NodeContract.for_capabilities(True)
    host = {"monitoring_textfile_dir": "{{ my_dir }}",
            "monitoring_node_exporter_listen_address": "{{ gpucluster_management_ip }}:9200"}
    everyone = {"monitoring_textfile_dir": "/srv/all", "monitoring_node_exporter_listen_address": "0.0.0.0:9400"}
    got = contract.overridden(host, everyone)
    assert got.textfile_dir == contract.textfile_dir
    assert got.node_exporter_port == 9200
    assert contract.overridden({}, everyone).node_exporter_port == 9400
    assert contract.overridden({}, everyone).textfile_dir == "/srv/all"
    # Wholly templated: the suite cannot know the port and keeps the contract's.
    assert contract.overridden({"monitoring_node_exporter_listen_address": "{{ x }}"}).node_exporter_port == 9100


def test_an_override_the_contract_refuses_is_named() -> None:
    contract = NodeContract.for_capabilities(True)
    with pytest.raises(InputError) as err:
        contract.overridden({"nvidia_driver_install_method": "bogus", "nccl_tests_install_dir": "relative/x",
                             "monitoring_node_exporter_listen_address": "0.0.0.0:99999"})
    assert [p.split(":", 1)[0] for p in err.value.problems] == [
        "nvidia_driver_install_method", "monitoring_node_exporter_listen_address", "nccl_tests_install_dir"]
    with pytest.raises(InputError, match=r"monitoring_node_exporter_listen_address: '0.0.0.0' names no port"):
        contract.overridden({"monitoring_node_exporter_listen_address": "0.0.0.0"})
