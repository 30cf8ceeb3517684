"""Spec rules about platforms: each pool's network shape against its target, GPUs and fabric."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpucluster.errors import InputError
from gpucluster.spec import load_spec
from tests.unit.spec.test_invalid import AWS, IB, LAB, _set

AZURE = "Pulumi.azure-h100.yaml"
StackFile = Callable[[str, Callable[[dict[str, Any]], None]], Path]


def _problems(stack_file: StackFile, stack: str, *edits: tuple[str, Any]) -> list[str]:
    def mutate(config: dict[str, Any]) -> None:
        for path, value in edits:
            _set(path, value)(config)

    with pytest.raises(InputError) as err:
        load_spec(stack_file(stack, mutate))
    return list(err.value.problems)


def test_pools_get_their_targets_default_platform() -> None:
    root = Path(__file__).resolve().parents[3]
    aws = load_spec(root / AWS)
    assert [(n.name, n.platform) for n in aws.nodes if n.pool in ("gpu", "cp")] == [
        ("gpu-1", "aws-p5-48xlarge"), ("gpu-2", "aws-p5-48xlarge"), ("cp-1", "cloud-ethernet")]
    assert aws.instance_type("gpu") == "p5.48xlarge"
    lab = load_spec(root / LAB)
    assert {(n.pool, n.platform) for n in lab.nodes} == {("gpu", "lab"), ("stor", "lab-cpu")}


def test_the_conformance_section_defaults_and_ranges(stack_file: StackFile) -> None:
    root = Path(__file__).resolve().parents[3]
    conformance = load_spec(root / LAB).spec.conformance
    assert (conformance.dcgm_diag_level, conformance.fleet_margin) == (2, 0.10)
    problems = _problems(stack_file, LAB, ("conformance", {"dcgm_diag_level": 5, "fleet_margin": 0.6}))
    assert problems == ["gpucluster.conformance.dcgm_diag_level: must be at most 4",
                        "gpucluster.conformance.fleet_margin: must be at most 0.5"]


def test_a_platform_of_another_target_is_refused(stack_file: StackFile) -> None:
    problems = _problems(stack_file, AWS, ("node_pools[0].platform", "oci-bm-gpu-h100-8"))
    assert problems == ["gpucluster.node_pools[0].platform: platform 'oci-bm-gpu-h100-8' is not offered on "
                        "target aws (it is on oci)"]


def test_the_profile_must_be_the_shapes_gpus(stack_file: StackFile) -> None:
    """p4d carries A100 40GB: the 80GB profile on it is refused (and the 40GB one on p4de)."""
    problems = _problems(stack_file, AWS, ("node_pools[0].platform", "aws-p4d-24xlarge"),
                         ("node_pools[0].profile", "a100-sxm-8"))
    assert problems == ["gpucluster.node_pools[0].profile: platform 'aws-p4d-24xlarge' carries a100-40gb-sxm-8, "
                        "not 'a100-sxm-8'"]


def test_an_instance_type_that_contradicts_the_platform_is_refused(stack_file: StackFile) -> None:
    problems = _problems(stack_file, AWS, ("node_pools[0].instance_type", "p4d.24xlarge"))
    assert problems == ["gpucluster.node_pools[0].instance_type: p4d.24xlarge but platform 'aws-p5-48xlarge' "
                        "(the aws default) is p5.48xlarge; name the platform of that instance type"]


def test_azure_runs_the_subnet_manager(stack_file: StackFile) -> None:
    root = Path(__file__).resolve().parents[3]
    assert load_spec(root / AZURE).spec.fabric.subnet_managers == []  # no SM demanded
    problems = _problems(stack_file, AZURE, ("fabric.subnet_managers", ["ceph-1"]))
    assert problems == ["gpucluster.fabric.subnet_managers: platform azure-nd96isr-h100-v5 runs on a fabric whose "
                        "subnet manager the provider runs; list none",
                        "gpucluster.fabric.subnet_managers[0]: 'ceph-1' is a cloud-ethernet node, which has no "
                        "InfiniBand port to run a subnet manager on"]


def test_a_subnet_manager_needs_an_infiniband_port(stack_file: StackFile) -> None:
    problems = _problems(stack_file, IB, ("fabric.subnet_managers", ["cp-01"]))
    assert problems == ["gpucluster.fabric.subnet_managers[0]: 'cp-01' is a server-ethernet node, which has no "
                        "InfiniBand port to run a subnet manager on"]


def test_a_capacity_block_needs_its_reservation(stack_file: StackFile) -> None:
    problems = _problems(stack_file, AWS, ("target.capacity_block", True), ("target.placement_group", "pg"))
    assert problems == [
        "gpucluster.target.capacity_block: a Capacity Block is launched into by its reservation ID; "
        "set target.capacity_reservation_id",
        "gpucluster.target.placement_group: names the group a capacity reservation was created in; "
        "set target.capacity_reservation_id, or drop it and let each GPU pool make its own"]


def test_the_compute_rails_must_be_the_fabric(stack_file: StackFile) -> None:
    problems = _problems(stack_file, IB, ("node_pools[0].platform", "dgx-h100-roce"))
    assert problems == ["gpucluster.node_pools[0].platform: platform 'dgx-h100-roce' computes over roce, but "
                        "fabric.type is infiniband"]


def test_an_infiniband_pool_on_a_generic_server_names_its_ipoib_interface(stack_file: StackFile) -> None:
    """A generic server's IPoIB interface follows its PCI slot (ibp<bus>s<slot>): no platform can
    know it, and ib0 is a guess the image's naming does not make."""
    problems = _problems(stack_file, IB, ("node_pools[1].fabric_interface", None))
    assert problems == ["gpucluster.node_pools[1].fabric_interface: platform 'server-ib-storage' names no interface "
                        "for its InfiniBand port (IPoIB interfaces are named by PCI path, ibp<bus>s<slot>, not "
                        "ib0); set the pool's fabric_interface"]


def test_a_roce_qos_of_the_specs_own_on_ocis_network_is_refused(stack_file: StackFile) -> None:
    own = {"dscp_trust": True, "pfc_priority": 3, "ecn": True, "traffic_class": 106}
    problems = _problems(stack_file, "Pulumi.oci-h100.yaml", ("fabric.roce_qos", own), ("fabric.gid_index", 1))
    assert any(p.startswith("gpucluster.fabric.roce_qos: platform 'oci-bm-gpu-h100-8'") and "traffic class 41" in p
               for p in problems), problems
    assert any(p.startswith("gpucluster.fabric.gid_index: 1, but platform 'oci-bm-gpu-h100-8'") for p in problems)


def test_a_bare_metal_pool_whose_fabric_address_has_no_interface_is_refused(stack_file: StackFile) -> None:
    problems = _problems(stack_file, "Pulumi.onprem-h100-roce.yaml", ("node_pools[1].fabric_interface", None))
    assert problems == ["gpucluster.node_pools[1].fabric_interface: platform 'server-ethernet' (the baremetal "
                        "default) names no interface for its nodes' fabric address on the roce fabric; set the "
                        "pool's fabric_interface (the name `ip link` shows), or the nodes' fabric_macs"]
