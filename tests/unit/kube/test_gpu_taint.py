"""GPU workers carry a taint; everything that must run on them tolerates exactly that taint."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gpucluster.kube.manifests import GPU_TOLERATIONS
from gpucluster.kube.workloads import allreduce_job, nvidia_smi_pod

REPO = Path(__file__).resolve().parents[3]


def _role_taints(role: str, var: str) -> list[dict[str, Any]]:
    return yaml.safe_load((REPO / "roles" / role / "defaults" / "main.yml").read_text())[var]


def _tolerates(tolerations: list[dict[str, str]], taint: dict[str, Any]) -> bool:
    for t in tolerations:
        if t.get("key") != taint["key"] or t.get("effect", taint["effect"]) != taint["effect"]:
            continue
        if t.get("operator") == "Exists" or t.get("value") == taint.get("value"):
            return True
    return False


def test_the_suites_workloads_tolerate_the_taint_the_roles_register() -> None:
    taints = _role_taints("kubernetes_node", "kubernetes_node_gpu_taints")
    assert taints and taints == _role_taints("kubernetes_worker", "kubernetes_worker_taints")
    pod = nvidia_smi_pod("smi", "gpucluster-conformance")
    job = next(d for d in allreduce_job("ar", "gpucluster-conformance", 2, 8) if d["kind"] == "Job")
    for spec in (pod["spec"], job["spec"]["template"]["spec"]):
        assert all(_tolerates(spec["tolerations"], t) for t in taints), spec.get("tolerations")


def test_a_toleration_of_another_key_would_not_do() -> None:
    taint = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
    assert _tolerates(GPU_TOLERATIONS, taint)
    assert not _tolerates([{"key": "nvidia.com/mig", "operator": "Exists", "effect": "NoSchedule"}], taint)
    assert not _tolerates([{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoExecute"}], taint)


def test_the_operator_and_the_device_plugin_daemonsets_tolerate_it() -> None:
    from gpucluster.kube.manifests import device_plugin_release, gpu_operator_release
    from gpucluster.spec import load_spec

    cluster = load_spec(REPO / "Pulumi.onprem-h100-roce.yaml")
    taints = _role_taints("kubernetes_node", "kubernetes_node_gpu_taints")
    operator = gpu_operator_release(cluster).values["daemonsets"]["tolerations"]
    plugin = device_plugin_release(cluster).values["tolerations"]
    assert all(_tolerates(operator, t) and _tolerates(plugin, t) for t in taints)
