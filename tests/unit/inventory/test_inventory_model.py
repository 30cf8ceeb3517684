"""The inventory's typed contract: what the writer writes, every reader validates the same way."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucluster.errors import InputError
from gpucluster.inventory import build_inventory, dump_inventory, parse_inventory_text
from gpucluster.inventory_model import (
    HAND_SET_HOST_VARS,
    SCHEMA_VERSION,
    InventoryHost,
    read_inventory,
    spec_vars,
    validate_inventory,
)
from gpucluster.outputs import parse_outputs
from gpucluster.spec import load_spec
from gpucluster.spec.cluster import platform_data
from tests.unit.example_outputs import example_outputs

REPO = Path(__file__).resolve().parents[3]


@pytest.mark.parametrize("stack", sorted(p.name for p in REPO.glob("Pulumi.*.yaml")))
def test_what_the_writer_writes_the_contract_reads(stack: str, tmp_path: Path) -> None:
    cluster = load_spec(REPO / stack)
    inventory = build_inventory(cluster, __import__("gpucluster.outputs").outputs.parse_outputs(
        example_outputs(cluster, ssh_user="ubuntu"), "outputs"))
    path = tmp_path / "inventory.yml"
    path.write_text(dump_inventory(inventory))
    model, data = read_inventory(path)
    assert model.vars.gpucluster_inventory_schema == SCHEMA_VERSION
    assert set(model.hosts) == {n.name for n in cluster.nodes}
    assert model.groups()["gpu"] == tuple(n.name for n in cluster.nodes_with_role("gpu"))
    assert data["all"]["vars"]["gpucluster_cluster_name"] == cluster.name
    # The spec's sections come back as the spec's own models, equal to the ones the writer dumped,
    # and their dumps (what the suite's checks read) are what the file holds.
    assert model.vars.gpucluster_fabric == cluster.spec.fabric
    assert model.vars.gpucluster_storage == cluster.spec.storage
    assert model.vars.gpucluster_kubernetes == cluster.spec.kubernetes
    assert model.vars.gpucluster_bom == cluster.bom
    assert model.vars.gpucluster_profiles == cluster.profiles
    # The platforms, resolved (device ranges expanded), come back as the spec's own model: the same
    # devices and floors, and resolved again they are what the file holds.
    assert set(model.vars.gpucluster_platforms) == set(cluster.platforms)
    for name, platform in model.vars.gpucluster_platforms.items():
        assert [r.device_names() for r in platform.rails] == [r.device_names() for r in cluster.platforms[name].rails]
        assert platform.floors == cluster.platforms[name].floors
        assert platform_data(platform) == data["all"]["vars"]["gpucluster_platforms"][name]
    # Written again from the models read back (the writer's own dump), they are what the file holds.
    v = model.vars
    again = spec_vars(v.gpucluster_fabric, v.gpucluster_storage, v.gpucluster_kubernetes, v.gpucluster_bom,
                      v.gpucluster_profiles)
    assert again == {key: data["all"]["vars"][key] for key in again}


def test_the_writer_writes_each_host_as_the_model_names_it() -> None:
    # build_inventory builds every host from InventoryHost: a variable written beside the model
    # would come back as an extra, and a field of the model no writer fills would be written nowhere
    # (but the ones a person adds by hand, HAND_SET_HOST_VARS).
    written: set[str] = set()
    for stack in sorted(REPO.glob("Pulumi.*.yaml")):
        cluster = load_spec(stack)
        # The optional host variables, so that each is written for some stack: a key file and failure
        # domains for all, a bastion (aws, azure) and OSD disks (the stacks with storage) where set.
        outputs = example_outputs(cluster, ssh_user="ubuntu", ssh_private_key_file="~/.ssh/id_ed25519",
                                  failure_domains={n.name: "rack-1" for n in cluster.nodes})
        inventory = build_inventory(cluster, parse_outputs(outputs, "outputs"))
        model = validate_inventory(parse_inventory_text(dump_inventory(inventory)), stack.name)
        for name, host in model.hosts.items():
            assert host.model_extra == {}, (stack.name, name)
            written |= set(inventory["all"]["hosts"][name])
    assert written == set(InventoryHost.model_fields) - HAND_SET_HOST_VARS


def _golden() -> dict:
    return parse_inventory_text((REPO / "tests" / "golden" / "inventory" / "lab.yml").read_text())


def test_every_problem_is_named_at_once() -> None:
    data = _golden()
    data["all"]["hosts"]["gpu-1"]["ansible_port"] = "22"
    data["all"]["hosts"]["gpu-2"]["gpucluster_profile"] = "nope"
    data["all"]["children"]["gpu"]["hosts"]["ghost-9"] = None
    del data["all"]["vars"]["gpucluster_bom"]
    with pytest.raises(InputError) as err:
        validate_inventory(data, "inv.yml")
    text = "\n".join(err.value.problems)
    assert "all.hosts.gpu-1.ansible_port" in text
    assert "all.hosts.gpu-2.gpucluster_profile: 'nope' is not in all.vars.gpucluster_profiles" in text
    assert "all.children.gpu.hosts: ghost-9 not in all.hosts" in text
    assert "all.vars.gpucluster_bom: is required" in text


def test_roles_extra_variables_are_kept() -> None:
    data = _golden()
    data["all"]["vars"]["monitoring_textfile_dir"] = "/srv/textfiles"
    data["all"]["hosts"]["gpu-1"]["ansible_connection"] = "local"
    model = validate_inventory(data, "inv.yml")
    assert model.vars.model_extra == {"monitoring_textfile_dir": "/srv/textfiles"}
    assert model.hosts["gpu-1"].model_extra == {"ansible_connection": "local"}


def test_a_platform_is_read_through_the_specs_platform() -> None:
    data = parse_inventory_text((REPO / "tests" / "golden" / "inventory" / "onprem-h100-ib.yml").read_text())
    platforms = data["all"]["vars"]["gpucluster_platforms"]
    dgx = platforms["dgx-h100"]
    del dgx["floors"]
    dgx["rails"][0]["count"] = 7
    platforms["server-ethernet"]["gpu_direct"] = True
    with pytest.raises(InputError) as err:
        validate_inventory(data, "inv.yml")
    problems = err.value.problems
    assert "all.vars.gpucluster_platforms.dgx-h100.floors: is required" in problems
    assert any(p.startswith("all.vars.gpucluster_platforms.dgx-h100.rails: ") and "count 7 but devices name 8" in p
               for p in problems), problems
    assert "all.vars.gpucluster_platforms.server-ethernet.gpu_direct: unknown key" in problems


def test_a_platforms_rails_are_read_through_the_specs_rail() -> None:
    data = _golden()
    platform = next(iter(data["all"]["vars"]["gpucluster_platforms"]))
    rails = data["all"]["vars"]["gpucluster_platforms"][platform]["rails"]
    assert rails, platform
    rails[0]["kind"] = "ib"
    with pytest.raises(InputError) as err:
        validate_inventory(data, "inv.yml")
    assert any(p.startswith(f"all.vars.gpucluster_platforms.{platform}.rails[0].kind: must be one of")
               for p in err.value.problems), \
        err.value.problems


def test_the_node_list_is_read_through_its_model() -> None:
    data = _golden()
    nodes = data["all"]["vars"]["gpucluster_nodes"]
    nodes[0]["management_ip"] = "10.0.0.300"
    nodes[1]["rack"] = "r1"
    nodes[2]["roles"] = ["gpus"]
    with pytest.raises(InputError) as err:
        validate_inventory(data, "inv.yml")
    assert err.value.problems == ["all.vars.gpucluster_nodes[0].management_ip: malformed IPv4 address '10.0.0.300'",
                                  "all.vars.gpucluster_nodes[1].rack: unknown key",
                                  "all.vars.gpucluster_nodes[2].roles[0]: must be one of 'gpu', 'storage' or "
                                  "'control_plane'"]
