from __future__ import annotations

from pathlib import Path

import pytest

from gpucluster.conformance.nodes import load_inventory, parse_inventory
from gpucluster.errors import InputError
from gpucluster.inventory import parse_inventory_text
from gpucluster.spec.loader import load_bom, load_profiles
from gpucluster.spec.models import Conformance

GOLDEN = Path(__file__).resolve().parents[2] / "golden" / "inventory" / "lab.yml"


def test_lab_inventory_view():
    inv = load_inventory(GOLDEN)
    assert [n.name for n in inv.nodes] == ["gpu-1", "gpu-2", "stor-1"]
    gpu1 = inv.node("gpu-1")
    assert "gpu" in gpu1.groups and "pool_gpu" in gpu1.groups and gpu1.gpu_count == 0
    assert gpu1.floor("allreduce_inter_busbw_gbps") == 0.05
    assert [n.name for n in inv.in_groups(("storage",))] == ["stor-1"]
    assert len(inv.in_groups(())) == 3
    assert [n.name for n in inv.limited(["gpu-2"]).nodes] == ["gpu-2"]
    with pytest.raises(InputError, match="no such host or group in the inventory: nope"):
        inv.limited(["nope"])
    # As converge's --limit: groups too, comma- or colon-separated.
    assert [n.name for n in inv.limited(["gpu"]).nodes] == ["gpu-1", "gpu-2"]
    assert [n.name for n in inv.limited(["stor-1:gpu-2"]).nodes] == ["gpu-2", "stor-1"]
    assert [n.name for n in inv.limited(["pool_gpu,stor-1"]).nodes] == ["gpu-1", "gpu-2", "stor-1"]


def test_bad_inventories_list_every_problem(tmp_path):
    data = parse_inventory_text(GOLDEN.read_text())
    data["all"]["hosts"]["gpu-1"]["gpucluster_profile"] = "nope"
    del data["all"]["hosts"]["gpu-2"]["ansible_host"]
    with pytest.raises(InputError) as e:
        parse_inventory(data, "inv.yml")
    assert len(e.value.problems) == 2
    with pytest.raises(InputError, match="no top-level 'all'"):
        parse_inventory([], "x")
    with pytest.raises(InputError, match="cannot read"):
        load_inventory(tmp_path / "missing.yml")


ONPREM = Path(__file__).resolve().parents[2] / "golden" / "inventory" / "onprem-h100-ib.yml"


def _with_capabilities(**changes: object):
    data = parse_inventory_text(ONPREM.read_text())
    data["all"]["vars"]["gpucluster_capabilities"].update(changes)
    return parse_inventory(data, "inv.yml").node("hgx-01")


def test_a_real_node_is_expected_with_its_profiles_gpus_and_its_platforms_hcas():
    node = _with_capabilities()
    assert node.gpu_count == 8 and node.hca_count == 8
    assert node.floor("allreduce_inter_busbw_gbps") == 340.0


def test_a_node_the_target_states_without_gpus_or_hcas_is_expected_without_them_and_says_why():
    """A platform twin's node: the checks that need a GPU or an HCA skip with the target's statement,
    not with a claim about the profile or platform, and its links are judged by the stated floors."""
    floors = {"allreduce_inter_busbw_gbps": 0.05, "allreduce_inter_verdict_bytes": 16777216}
    node = _with_capabilities(gpu_devices=False, rdma_devices=False, link_floors=floors)
    assert node.gpu_count == 0 and node.hca_count == 0
    assert "capabilities.gpu_devices: false" in node.no_gpu_reason() and "lists 8" in node.no_gpu_reason()
    assert "capabilities.rdma_devices: false" in node.no_hca_reason()
    assert node.floor("allreduce_inter_busbw_gbps") == 0.05
    assert node.floor("allreduce_inter_verdict_bytes") == 16777216
    # A floor the stated link floors do not name is still the platform's.
    assert node.floor("rdma_write_bw_gbps") == 380.0


def test_the_checks_read_the_specs_models_the_inventory_model_read():
    """The suite holds the spec's own models past the inventory (issue 26, one judge per fact): the
    profile and the BOM are what the spec's loader reads from the data files, not their dumps."""
    inv = load_inventory(ONPREM)
    node = inv.node("hgx-01")
    assert node.profile == load_profiles()["h100-sxm-8"] and inv.bom == load_bom()
    assert (node.os, inv.stack, inv.fabric.type) == ("ubuntu-22.04", "onprem-h100-ib", "infiniband")
    assert inv.storage is not None and inv.storage.monitors and inv.kubernetes is not None
    assert inv.conformance == Conformance()
    # A profile floor (the GPUs') comes from the model's field; a name it lacks falls to the platform's.
    assert node.floor("allreduce_intra_busbw_gbps") == node.profile.floors.allreduce_intra_busbw_gbps
    assert node.floor("model_dump") is None
