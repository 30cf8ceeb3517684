"""The roles' one-task input checks (each role's preflight is one assert whose message lists every
check that fails): rendered from the task's own expression with the role's variables."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.unit.roles.render import NATIVE, ROLES, first_host, host_context, inventory_for, role_vars


def preflight_errors(role: str, fabric: str = "infiniband", **extra: Any) -> list[str]:
    tasks = yaml.safe_load((ROLES / role / "tasks/preflight.yml").read_text())
    asserts = [t for t in tasks if "ansible.builtin.assert" in t]
    assert len(asserts) == 1, f"{role}: one assert for every input check"
    (name, expression), = asserts[0]["vars"].items()
    assert asserts[0]["ansible.builtin.assert"]["that"] == f"{name} | length == 0"
    inv = inventory_for(fabric)
    v = role_vars(role, host_context(inv, first_host(inv, "gpu")), extra)
    errors = NATIVE.from_string(expression).render(v)
    assert isinstance(errors, list)
    return errors


@pytest.mark.parametrize("fabric", ["infiniband", "roce", "efa", "ethernet"])
def test_nccl_inputs_of_every_example_pass(fabric: str) -> None:
    assert preflight_errors("nccl", fabric) == []


@pytest.mark.parametrize(("extra", "said"), [
    ({"nccl_install_method": "local", "nccl_local_artifact_dir": ""}, "Set nccl_local_artifact_dir"),
    ({"nccl_tests_enabled": True, "nccl_tests_source_url": "", "nccl_tests_source_tarball": ""},
     "nccl_tests_source_url or nccl_tests_source_tarball"),
    ({"nccl_tests_enabled": True, "nccl_tests_source_sha256": "abc"},
     'nccl_tests_source_sha256 is "abc", not a SHA-256: the source is never downloaded or copied unverified. Pin'
     " nccl_tests.sha256 in gpucluster/data/bom.yaml (or the stack's bom: overlay)."),
    ({"nccl_install_method": "cuda_repo", "__nccl_repo_dist": ""}, "NVIDIA's CUDA repository has no folder for Debian"),
    ({"nccl_fabric": {"type": "myrinet"}}, "nccl_fabric.type must be one of"),
    ({"nccl_platform": {"rails": "ib0"}}, "nccl_platform must carry rails"),
])
def test_nccl_each_failing_check_says_why(extra: dict[str, Any], said: str) -> None:
    errors = preflight_errors("nccl", **extra)
    assert len(errors) == 1 and said in errors[0], errors


def test_nccl_several_failing_checks_are_all_said() -> None:
    errors = preflight_errors("nccl", nccl_tests_enabled=True, nccl_tests_source_sha256="",
                              nccl_fabric={"type": "myrinet"})
    assert len(errors) == 2, errors


SHA = "0" * 64


@pytest.mark.parametrize("role", ["gpu_validation", "monitoring"])
@pytest.mark.parametrize("fabric", ["infiniband", "ethernet"])
def test_inputs_of_the_examples_pass(role: str, fabric: str) -> None:
    assert preflight_errors(role, fabric) == []


@pytest.mark.parametrize(("role", "extra", "said"), [
    ("gpu_validation", {"gpu_validation_gpu_burn_enabled": True, "gpu_validation_gpu_burn_source_url": "",
                        "gpu_validation_gpu_burn_source_tarball": "", "gpu_validation_gpu_burn_source_sha256": SHA},
     "gpu-burn needs gpu_validation_gpu_burn_source_url"),
    ("gpu_validation", {"gpu_validation_nvbandwidth_enabled": True, "gpu_validation_nvbandwidth_source_sha256": "x"},
     'gpu_validation_nvbandwidth_source_sha256 ("x") must be SHA-256s'),
    ("monitoring", {"monitoring_node_exporter_listen_address": "9100"}, "Listen addresses are HOST:PORT"),
    ("monitoring", {"monitoring_textfile_dir": "relative/dir"}, "the textfile folder an absolute path"),
    ("monitoring", {"monitoring_dcgm_exporter_owner": "gpu_operator", "monitoring_dcgm_exporter_enabled": True},
     "with monitoring_dcgm_exporter_owner gpu_operator the GPU Operator runs it"),
    ("monitoring", {"monitoring_dcgm_exporter_binary_url": "https://example.invalid/dcgm-exporter",
                    "monitoring_dcgm_exporter_binary_sha256": ""},
     "a dcgm-exporter binary (https://example.invalid/dcgm-exporter) is never downloaded"),
])
def test_each_failing_check_says_why(role: str, extra: dict[str, Any], said: str) -> None:
    errors = preflight_errors(role, **extra)
    assert len(errors) == 1 and said in errors[0], errors
