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
    KUBECONFIG_DEFAULT,
    KUBECONFIG_VAR,
    LISTEN_ADDRESS_VAR,
    OVERRIDE_VARS,
    ROLE_VARS,
    DriverInstallMethod,
    NodeContract,
    ToolkitInstallMethod,
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
    "cuda_toolkit_install_method": ("cuda_toolkit", lambda v: v["cuda_toolkit_install_method"]),
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
        "nvidia_driver_install_method": "runfile", "cuda_toolkit_install_method": "distro",
        "textfile_dir": "/srv/textfiles", "node_exporter_port": 19100,
        "gpu_burn_dir": "/srv/burn", "nccl_tests_dir": "/srv/nccl", "kubeconfig_name": "admin.conf"}
    # Another node keeps the contract but for what all.vars sets.
    other = inv.node("gpu-2").contract
    assert other.gpu_burn_dir == "/srv/burn" and other.textfile_dir == "/var/lib/prometheus/node-exporter"
    assert _roles_made(data, "gpu-2") == other.model_dump()


@pytest.mark.parametrize(("capabilities", "method"), [(LAB_CAPABILITIES, "distro"), (Capabilities(), "cuda_repo")])
def test_the_driver_method_follows_the_capabilities(capabilities: Capabilities, method: str) -> None:
    """The writer decides it from the outputs' capabilities; the role installs by it and GC-GPU-001
    expects that method's pin (the lab once expected the CUDA repository's pin of a Debian driver)."""
    contract = NodeContract.for_capabilities(capabilities.nvidia_repo)
    assert contract.nvidia_driver_install_method == contract.cuda_toolkit_install_method == method


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
    value Ansible takes first), moves the role and the readers alike; a relative path is refused,
    naming the variable (a template: the next test)."""
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
    data["all"]["vars"][KUBECONFIG_VAR] = "relative/admin.conf"
    with pytest.raises(InputError, match=rf"^{KUBECONFIG_VAR}: 'relative/admin.conf': an absolute path"):
        validate_inventory(data, "x").kubeconfig_file(inventory_file)


def test_the_kubeconfig_name_is_a_file_name() -> None:
    for bad in ("../admin.conf", "sub/admin.conf", "", ".hidden"):
        with pytest.raises(ValueError, match="kubeconfig_name"):
            NodeContract(nvidia_driver_install_method="distro", cuda_toolkit_install_method="distro",
                         kubeconfig_name=bad)


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


def test_a_templated_kubeconfig_place_is_refused_but_the_roles_own_default(tmp_path: Path) -> None:
    """Only Ansible resolves a template, and converge (which makes the file 0600) and up (which hands it
    to verify) must know the file: a templated value once silently gave the contract's place, so both
    looked at a file the role never wrote. The role's own default expression is that place, and stays."""
    inventory_file = tmp_path / "inventory.yml"
    defaults = yaml.safe_load((REPO / "roles" / "kubernetes_control_plane" / "defaults" / "main.yml").read_text())
    assert defaults[KUBECONFIG_VAR] == KUBECONFIG_DEFAULT
    data = copy.deepcopy(_golden("onprem-h100-ib"))
    for same in (KUBECONFIG_DEFAULT, "{{inventory_dir}}/{{gpucluster_contract.kubeconfig_name}}"):
        data["all"]["vars"][KUBECONFIG_VAR] = same
        assert validate_inventory(data, "x").kubeconfig_file(inventory_file) == tmp_path / "admin.conf"
        assert _fetch_dest(data, "cp-01", str(tmp_path)) == str(tmp_path / "admin.conf")
    for templated in ("{{ inventory_dir }}/kube/admin.conf", "/srv/{{ cluster }}/admin.conf",
                      "{% if x %}/a{% else %}/b{% endif %}"):
        data["all"]["vars"][KUBECONFIG_VAR] = templated
        with pytest.raises(InputError) as err:
            validate_inventory(data, "x").kubeconfig_file(inventory_file)
        assert err.value.problems == [
            f"{KUBECONFIG_VAR}: {templated!r}: a template, which only Ansible resolves; converge and up must know "
            "the file: give an absolute path on the controller, or leave it unset for admin.conf beside the inventory"]
    # The first control-plane host's template decides as Ansible would, over all.vars' path.
    data["all"]["vars"][KUBECONFIG_VAR] = "/srv/all/admin.conf"
    data["all"]["hosts"]["cp-01"][KUBECONFIG_VAR] = "{{ playbook_dir }}/admin.conf"
    with pytest.raises(InputError, match=rf"^{KUBECONFIG_VAR}: '\{{\{{ playbook_dir \}}\}}/admin.conf': a template"):
        validate_inventory(data, "x").kubeconfig_file(inventory_file)


# --- CUDA's source: the contract's own field, which the role and GC-GPU-010 read ------------------


def test_cuda_comes_from_the_contracts_toolkit_method() -> None:
    """cuda_toolkit installs from the contract's cuda_toolkit_install_method (decided from the same
    capability as the driver's method), not from the driver's field: the role once read the written
    driver method while GC-GPU-010 read the overridden one, so a host's nvidia_driver_install_method
    moved the check and not the role. The argument spec's choices are the field's."""
    data = copy.deepcopy(_golden("onprem-h100-ib"))
    assert data["all"]["vars"]["gpucluster_capabilities"]["nvidia_repo"] is True
    for method in ("cuda_repo", "distro"):
        data["all"]["vars"]["gpucluster_contract"]["cuda_toolkit_install_method"] = method
        ctx = host_context(data, "hgx-01")
        assert role_vars("cuda_toolkit", ctx)["cuda_toolkit_install_method"] == method
        assert parse_inventory(data, "x").node("hgx-01").contract.cuda_toolkit_install_method == method
    specs = yaml.safe_load((REPO / "roles" / "cuda_toolkit" / "meta" / "argument_specs.yml").read_text())
    choices = specs["argument_specs"]["main"]["options"]["cuda_toolkit_install_method"]["choices"]
    assert sorted(choices) == sorted(get_args(ToolkitInstallMethod))
    assert "runfile" in get_args(DriverInstallMethod) and "runfile" not in get_args(ToolkitInstallMethod)


def test_a_host_toolkit_method_moves_the_role_and_the_check_and_the_drivers_moves_neither() -> None:
    data = copy.deepcopy(_golden("onprem-h100-ib"))
    data["all"]["hosts"]["hgx-01"]["cuda_toolkit_install_method"] = "distro"
    inv = parse_inventory(data, "x")
    assert _roles_made(data, "hgx-01")["cuda_toolkit_install_method"] == "distro"
    assert _roles_made(data, "hgx-01") == inv.node("hgx-01").contract.model_dump()
    assert inv.node("hgx-01").contract.nvidia_driver_install_method == "cuda_repo"
    # The driver's method set on a host moves the driver's role and GC-GPU-001, not CUDA's.
    del data["all"]["hosts"]["hgx-01"]["cuda_toolkit_install_method"]
    data["all"]["hosts"]["hgx-01"]["nvidia_driver_install_method"] = "distro"
    inv = parse_inventory(data, "x")
    made = _roles_made(data, "hgx-01")
    assert made == inv.node("hgx-01").contract.model_dump()
    assert made["nvidia_driver_install_method"] == "distro" and made["cuda_toolkit_install_method"] == "cuda_repo"
    data["all"]["vars"]["cuda_toolkit_install_method"] = "runfile"
    with pytest.raises(InputError, match=r"cuda_toolkit_install_method: 'runfile': "):
        parse_inventory(data, "x")


def test_the_toolkit_method_as_an_extra_var_is_refused() -> None:
    assert ROLE_VARS["cuda_toolkit_install_method"] in OVERRIDE_VARS
    with pytest.raises(InputError, match=r"^--extra-vars cuda_toolkit_install_method: the node contract's override"):
        refuse_extra_vars({"cuda_toolkit_install_method": "distro"})
