"""The node contract (gpucluster.spec.contract): one statement of what the roles make where, which the
roles' defaults and the conformance suite both read from the inventory, a role variable set there
overriding both alike."""

from __future__ import annotations

import copy
from pathlib import Path, PurePosixPath
from typing import Any, get_args

import pytest
import yaml

from gpucluster import paths
from gpucluster.conformance.nodes import parse_inventory
from gpucluster.errors import InputError
from gpucluster.inventory import parse_inventory_text
from gpucluster.inventory_model import validate_inventory
from gpucluster.outputs import LAB_CAPABILITIES, Capabilities
from gpucluster.spec.contract import (
    KUBECONFIG_VAR,
    LISTEN_ADDRESS_VAR,
    OVERRIDE_VARS,
    ROLE_VARS,
    DriverInstallMethod,
    NodeContract,
    refuse_extra_vars,
)
from tests.unit.roles.render import host_context, role_vars

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "golden" / "inventory"
# Ansible's inventory_dir for the golden inventories' hosts, as if the file lay there.
INVENTORY_DIR = "/controller/clusters/c"

# Each contract field as a role's default makes it.
_ROLE_SIDE = {
    "nvidia_driver_install_method": ("nvidia_driver", lambda v: v["nvidia_driver_install_method"]),
    "textfile_dir": ("monitoring", lambda v: v["monitoring_textfile_dir"]),
    "node_exporter_port": ("monitoring",
                           lambda v: int(v["monitoring_node_exporter_listen_address"].rpartition(":")[2])),
    "gpu_burn_dir": ("gpu_validation", lambda v: v["gpu_validation_gpu_burn_install_dir"]),
    "nccl_tests_dir": ("nccl", lambda v: v["nccl_tests_install_dir"]),
    # On the controller, in the inventory's folder: the name there.
    "kubeconfig_name": ("kubernetes_control_plane",
                        lambda v: PurePosixPath(v["kubernetes_control_plane_kubeconfig_fetch_dest"]).relative_to(
                            v["inventory_dir"]).as_posix()),
}


def _golden(name: str) -> dict[str, Any]:
    data: dict[str, Any] = parse_inventory_text((GOLDEN / f"{name}.yml").read_text())
    return data


def _roles_made(data: dict[str, Any], host: str) -> dict[str, Any]:
    ctx = {**host_context(data, host), "inventory_dir": INVENTORY_DIR}
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
        "gpu_burn_dir": "/srv/burn", "nccl_tests_dir": "/srv/nccl", "kubeconfig_name": "admin.conf"}
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


# --- the fetched kubeconfig: the role, converge, up and paths read one place -----------------------


def _fetch_dest(data: dict[str, Any], host: str, inventory_dir: str) -> str:
    ctx = {**host_context(data, host), "inventory_dir": inventory_dir}
    extra = {k: v for k, v in ctx.items() if k.startswith("kubernetes_control_plane_")}
    dest: str = role_vars("kubernetes_control_plane", ctx, extra)["kubernetes_control_plane_kubeconfig_fetch_dest"]
    return dest


def test_the_kubeconfig_lies_beside_the_inventory_for_the_role_converge_up_and_paths(tmp_path: Path) -> None:
    """The role's default, the inventory model's answer (converge's fetched_secrets, up's verify
    stage) and gpucluster.paths name one file: admin.conf in the inventory's folder (the role once
    wrote it under the checkout's runs/<cluster>/ and up moved it with -e)."""
    data = _golden("onprem-h100-ib")
    inventory_file = tmp_path / "inventory.yml"
    model = validate_inventory(data, "golden")
    assert model.kubeconfig_file(inventory_file) == tmp_path / "admin.conf"
    assert _fetch_dest(data, "cp-01", str(tmp_path)) == str(tmp_path / "admin.conf")
    assert paths.KUBECONFIG_NAME == NodeContract.for_capabilities(True).kubeconfig_name == "admin.conf"
    stack = paths.resolve(REPO / "Pulumi.onprem-h100-ib.yaml")
    assert stack.kubeconfig_file == stack.inventory_file.parent / model.vars.gpucluster_contract.kubeconfig_name


def test_an_inventory_that_moves_the_kubeconfig_moves_every_reader(tmp_path: Path) -> None:
    """The role variable in all.vars, or on the first control-plane host (which fetches it, and whose
    value Ansible takes first), moves the role and the readers alike; a template keeps the contract's
    place (Ansible's to resolve); a relative path is refused, naming the variable."""
    inventory_file = tmp_path / "inventory.yml"
    data = copy.deepcopy(_golden("onprem-h100-ib"))
    data["all"]["vars"][KUBECONFIG_VAR] = "/srv/all/admin.conf"
    assert validate_inventory(data, "x").kubeconfig_file(inventory_file) == Path("/srv/all/admin.conf")
    assert _fetch_dest(data, "cp-01", str(tmp_path)) == "/srv/all/admin.conf"
    data["all"]["hosts"]["cp-01"][KUBECONFIG_VAR] = "/srv/cp/kube.conf"
    assert validate_inventory(data, "x").kubeconfig_file(inventory_file) == Path("/srv/cp/kube.conf")
    assert _fetch_dest(data, "cp-01", str(tmp_path)) == "/srv/cp/kube.conf"
    # A GPU node's value moves nothing: it fetches no kubeconfig.
    del data["all"]["hosts"]["cp-01"][KUBECONFIG_VAR]
    data["all"]["hosts"]["hgx-01"][KUBECONFIG_VAR] = "/srv/gpu/admin.conf"
    assert validate_inventory(data, "x").kubeconfig_file(inventory_file) == Path("/srv/all/admin.conf")
    data["all"]["vars"][KUBECONFIG_VAR] = "{{ some_dir }}/admin.conf"
    assert validate_inventory(data, "x").kubeconfig_file(inventory_file) == tmp_path / "admin.conf"
    data["all"]["vars"][KUBECONFIG_VAR] = "relative/admin.conf"
    with pytest.raises(InputError, match=rf"^{KUBECONFIG_VAR}: 'relative/admin.conf': an absolute path"):
        validate_inventory(data, "x").kubeconfig_file(inventory_file)


def test_the_kubeconfig_name_is_a_file_name() -> None:
    for bad in ("../admin.conf", "sub/admin.conf", "", ".hidden"):
        with pytest.raises(ValueError, match="kubeconfig_name"):
            NodeContract(nvidia_driver_install_method="distro", kubeconfig_name=bad)


# --- converge -e: what the roles would take and the suite never see --------------------------------


def test_every_override_is_refused_as_an_extra_var() -> None:
    assert OVERRIDE_VARS == {*ROLE_VARS.values(), LISTEN_ADDRESS_VAR, KUBECONFIG_VAR, "gpucluster_contract"}
    for var in sorted(OVERRIDE_VARS):
        with pytest.raises(InputError) as err:
            refuse_extra_vars({var: "x", "upgrade_rolling_components": ["driver"]})
        assert len(err.value.problems) == 1 and var in err.value.problems[0]
        assert "set it in the inventory" in err.value.problems[0]
        assert "upgrade_rolling_components" not in err.value.problems[0]
    refuse_extra_vars({"upgrade_rolling_components": ["driver"], "gpucluster_heavy_packages": True})


def test_cuda_comes_from_where_the_driver_comes_from_as_the_contract_says() -> None:
    """cuda_toolkit installs from the source the contract names for the driver (NVIDIA's CUDA
    repository or Debian's packages), not from a second reading of the capabilities; the contract's
    runfile, a driver method only, is refused by the role's argument spec rather than half-applied."""
    data = copy.deepcopy(_golden("onprem-h100-ib"))
    assert data["all"]["vars"]["gpucluster_capabilities"]["nvidia_repo"] is True
    for method in ("cuda_repo", "distro"):
        data["all"]["vars"]["gpucluster_contract"]["nvidia_driver_install_method"] = method
        ctx = host_context(data, "hgx-01")
        assert role_vars("cuda_toolkit", ctx)["cuda_toolkit_install_method"] == method
    specs = yaml.safe_load((REPO / "roles" / "cuda_toolkit" / "meta" / "argument_specs.yml").read_text())
    choices = specs["argument_specs"]["main"]["options"]["cuda_toolkit_install_method"]["choices"]
    assert "runfile" in get_args(DriverInstallMethod) and sorted(choices) == ["cuda_repo", "distro"]
