"""One mpirun command line names one nccl-tests binary for every rank (GC-AR-002's inter-node run,
GC-AR-003's pair runs), so nodes whose nccl-tests folders differ (a host's ``nccl_tests_install_dir``)
cannot be measured together as their inventory states them: verify refuses them before it starts
(exit 2, naming each folder and its hosts), and the measurement never runs them from the first
node's folder. gpu-burn runs on one node at a time, each from its own folder: nothing to refuse."""

from __future__ import annotations

import copy
import dataclasses
import functools
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster import hostkeys, runs, verify
from gpucluster.conformance import fabric as fabric_module
from gpucluster.conformance import run_nccl_tests
from gpucluster.conformance.checks import INTER_NODE
from gpucluster.conformance.fabric import Fabric
from gpucluster.conformance.nodes import ClusterInventory, nccl_tests_split, parse_inventory
from gpucluster.errors import InputError
from gpucluster.inventory import build_inventory, dump_inventory, parse_inventory_text
from gpucluster.outputs import parse_outputs
from gpucluster.spec import load_spec
from tests.unit.example_outputs import example_outputs

REPO = Path(__file__).resolve().parents[3]
# Two GPU nodes (8 GPUs each) with an inter-node floor: nccl-tests' inter-node and pair runs.
STACK = REPO / "Pulumi.aws-h100.yaml"
SPLIT = ("nccl_tests_install_dir: the inter-node all-reduce runs (GC-AR-002, GC-AR-003) run nccl-tests from one "
         "folder on every node, but these nodes have it in different folders: /opt/nccl-tests on gpu-1; "
         "/srv/nccl on gpu-2; set nccl_tests_install_dir once in all.vars (and on none of these hosts alone), "
         "converge, and verify again")


@functools.cache
def _written() -> str:
    cluster = load_spec(STACK)
    return dump_inventory(build_inventory(cluster, parse_outputs(example_outputs(cluster, ssh_user="ubuntu"),
                                                                 "outputs")))


def _data(**hosts: dict[str, Any]) -> dict[str, Any]:
    data: dict[str, Any] = copy.deepcopy(parse_inventory_text(_written()))
    for name, host_vars in hosts.items():
        data["all"]["hosts"][name].update(host_vars)
    return data


def _inv(**hosts: dict[str, Any]) -> ClusterInventory:
    return parse_inventory(_data(**hosts), "inventory.yml")


def test_the_stack_measures_two_gpu_nodes_with_nccl_tests() -> None:
    inv = _inv()
    assert [(n.name, n.gpu_count) for n in inv.allreduce_participants()] == [("gpu-1", 8), ("gpu-2", 8)]
    assert inv.inter_node_problems() == []


def test_a_host_with_its_own_nccl_tests_folder_is_named_with_every_folder() -> None:
    inv = _inv(**{"gpu-2": {"nccl_tests_install_dir": "/srv/nccl"}})
    assert inv.inter_node_problems() == [SPLIT]
    # Only where the selected checks run between nodes.
    assert inv.inter_node_problems(INTER_NODE) == [SPLIT]
    assert inv.inter_node_problems({"GC-AR-002"}) == [SPLIT]
    assert inv.inter_node_problems({"GC-AR-001", "GC-GPU-001"}) == []
    # --limit to one of them: no run between nodes.
    assert inv.limited(["gpu-1"]).inter_node_problems() == []


def test_a_fleets_line_names_five_hosts_a_folder_then_how_many_more() -> None:
    """The refusal is one line: a folder held by many hosts names its first five and counts the rest."""
    gpu = _inv().node("gpu-1")

    def nodes(folder: str, names: range) -> list[Any]:
        contract = gpu.contract.model_copy(update={"nccl_tests_dir": folder})
        return [dataclasses.replace(gpu, name=f"gpu-{i:02d}", contract=contract) for i in names]

    split = nccl_tests_split(nodes("/opt/nccl-tests", range(1, 9)) + nodes("/srv/nccl", range(9, 15)))
    assert split is not None and split.count("\n") == 0
    assert ("different folders: /opt/nccl-tests on gpu-01, gpu-02, gpu-03, gpu-04, gpu-05 and 3 more; "
            "/srv/nccl on gpu-09, gpu-10, gpu-11, gpu-12, gpu-13 and 1 more; set ") in split
    # Five are named as they are; one folder for all is no split.
    five = nccl_tests_split(nodes("/opt/nccl-tests", range(1, 6)) + nodes("/srv/nccl", range(6, 7)))
    assert five is not None
    assert "/opt/nccl-tests on gpu-01, gpu-02, gpu-03, gpu-04, gpu-05; /srv/nccl on gpu-06; set " in five
    assert nccl_tests_split(nodes("/srv/nccl", range(1, 30))) is None


def test_one_folder_for_all_is_no_problem_wherever_it_is_set() -> None:
    data = _data()
    data["all"]["vars"]["nccl_tests_install_dir"] = "/srv/nccl"
    inv = parse_inventory(data, "inventory.yml")
    assert {n.contract.nccl_tests_dir for n in inv.nodes} == {"/srv/nccl"}
    assert inv.inter_node_problems() == []
    # Each host setting the same folder is one folder too.
    same = _inv(**{n: {"nccl_tests_install_dir": "/srv/nccl"} for n in ("gpu-1", "gpu-2")})
    assert same.inter_node_problems() == []


def test_a_node_outside_the_inter_node_runs_may_keep_its_own_folder() -> None:
    # A node of no inter-node run (not in the gpu group, or with no inter-node floor) runs nccl-tests
    # alone, if at all (GC-AR-001, GC-EFA-002), from its own folder.
    inv = _inv(**{"gpu-2": {"nccl_tests_install_dir": "/srv/nccl"}})
    others = [n.name for n in inv.nodes if n.name not in ("gpu-1", "gpu-2")]
    assert others, "the stack has nodes besides its GPU nodes"
    odd = _inv(**{others[0]: {"nccl_tests_install_dir": "/srv/elsewhere"}})
    assert odd.node(others[0]).contract.nccl_tests_dir == "/srv/elsewhere"
    assert odd.inter_node_problems() == []


def test_verify_refuses_it_before_anything_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "inventory.yml"
    path.write_text(yaml.safe_dump(_data(**{"gpu-2": {"nccl_tests_install_dir": "/srv/nccl"}})))

    class Started(Exception):
        pass

    def lock(*args: Any, **kwargs: Any) -> Any:
        raise Started

    monkeypatch.setattr(runs, "cluster_lock", lock)
    with pytest.raises(InputError) as err:
        verify.run(verify.VerifyOptions(inventory=path, run_dir=tmp_path / "run"))
    assert err.value.lines() == [f"error: {path}: {SPLIT}"]
    assert not (tmp_path / "run").exists()
    # Checks that run on one node at a time go ahead (as far as the cluster's lock, here).
    with pytest.raises(Started):
        verify.run(verify.VerifyOptions(inventory=path, run_dir=tmp_path / "run", checks=("GC-AR-001",)))
    # A pattern that names no check is the suite's to refuse, with every check ID.
    with pytest.raises(Started):
        verify.run(verify.VerifyOptions(inventory=path, run_dir=tmp_path / "run", checks=("GC-NOPE-*",)))


def test_the_measurement_never_runs_the_first_nodes_folder_on_the_others(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    inv = _inv(**{"gpu-2": {"nccl_tests_install_dir": "/srv/nccl"}})
    fabric = Fabric(inv, tmp_path, tmp_path / "ssh_config", hostkeys.policy_for(inv.target, inv.cluster_name), "")

    def never(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("nothing reaches a node")

    monkeypatch.setattr(fabric_module, "make_folders", never)
    monkeypatch.setattr(run_nccl_tests, "run_inter", never)
    monkeypatch.setattr(fabric, "_grant", never)
    run = fabric._allreduce(inv.allreduce_participants(), "inter:gpu-1,gpu-2")
    assert (run.engine, run.status, run.notes) == ("nccl-tests", "incomplete", [SPLIT])
