"""Kubernetes conformance (GC-K8S): nodes Ready, GPUs allocatable, a GPU pod, a cross-node all-reduce."""

from __future__ import annotations

import time

import pytest

from gpucluster.conformance import sentences
from gpucluster.kube.manifests import GPU_RESOURCE
from gpucluster.kube.suite import Kube
from gpucluster.kube.workloads import allreduce_job, nvidia_smi_pod, parse_allreduce_verdict


def _tail(text: str, lines: int = 3) -> str:
    """The last lines of a tool's output, whole: a message never starts mid-word."""
    return " | ".join(line.strip() for line in (text or "").strip().splitlines()[-lines:])



def _wait_pod(kube: Kube, name: str, timeout_s: int) -> str:
    deadline = time.monotonic() + timeout_s
    phase = "Unknown"
    while time.monotonic() < deadline:
        phase = kube.json("-n", kube.namespace, "get", "pod", name)["status"].get("phase", "Unknown")
        if phase in ("Succeeded", "Failed"):
            return str(phase)
        time.sleep(3)
    return f"{phase} after {timeout_s}s"


@pytest.mark.check("GC-K8S-001")
def test_every_node_ready(kube, inventory):
    """Every GPU and control-plane node of the inventory MUST be registered and report Ready."""
    want = {n.name for n in inventory.in_groups(("gpu", "control_plane"))}
    problem = sentences.k8s_nodes_ready(kube.json("get", "nodes")["items"], want)
    assert not problem, problem


@pytest.mark.gpu
@pytest.mark.check("GC-K8S-002")
def test_allocatable_gpus_equal_profile(node, kube):
    """A GPU node's allocatable nvidia.com/gpu MUST equal its hardware profile's GPU count."""
    if node.info.gpu_count == 0:
        pytest.skip(node.info.no_gpu_reason())
    alloc = kube.json("get", "node", node.name)["status"].get("allocatable", {})
    problem = sentences.k8s_allocatable(node.name, alloc, GPU_RESOURCE, node.info.gpu_count, node.info.profile_name)
    assert not problem, problem


@pytest.mark.check("GC-K8S-003")
def test_pod_runs_nvidia_smi(kube, inventory):
    """A pod that requests one nvidia.com/gpu MUST run nvidia-smi to completion and list a GPU."""
    gpu_nodes = [n for n in inventory.in_groups(("gpu",)) if n.gpu_count > 0]
    if not gpu_nodes:
        pytest.skip("no node of the inventory has a GPU")
    pod = nvidia_smi_pod("gc-k8s-003-nvidia-smi", kube.namespace)
    kube.delete([pod])
    kube.apply([pod])
    try:
        phase = _wait_pod(kube, pod["metadata"]["name"], 300)
        log = kube.run("-n", kube.namespace, "logs", pod["metadata"]["name"]).stdout
        listed = sum(1 for line in log.splitlines() if line.startswith("GPU ") and ": " in line)
        problem = sentences.k8s_pod(phase, listed, _tail(log))
        assert not problem, problem
    finally:
        kube.delete([pod])


@pytest.mark.check("GC-K8S-004")
def test_indexed_job_allreduce(kube, inventory):
    """An Indexed Job with one rank per GPU node MUST complete an all-reduce with correct results at or above the profile's inter-node bus bandwidth floor."""  # noqa: E501
    nodes = [n for n in inventory.in_groups(("gpu",)) if n.gpu_count > 0]
    if len(nodes) < 2:
        pytest.skip(f"a cross-node all-reduce needs 2 or more GPU nodes (inventory has {len(nodes)})")
    gpus = min(n.gpu_count for n in nodes)
    floors = [n.floor("allreduce_inter_busbw_gbps") for n in nodes]
    floor = min(f for f in floors if f is not None) if any(f is not None for f in floors) else None
    docs = allreduce_job("gc-k8s-004-allreduce", kube.namespace, len(nodes), gpus,
                         message_bytes=int(nodes[0].floor("allreduce_inter_verdict_bytes")))
    kube.delete(docs)
    kube.apply(docs)
    try:
        res = kube.run("-n", kube.namespace, "wait", "--for=condition=Complete", "job/gc-k8s-004-allreduce",
                       "--timeout=900s", timeout=960)
        log = kube.run("-n", kube.namespace, "logs", "job/gc-k8s-004-allreduce").stdout
        assert res.returncode == 0, f"the job did not complete within 900 s: {_tail(res.stderr)} {_tail(log)}"
        verdict = parse_allreduce_verdict(log)
        problem = sentences.k8s_allreduce(verdict.world_size, len(nodes) * gpus, verdict.busbw_gbps, floor,
                                          verdict.correct)
        assert not problem, problem
    finally:
        kube.delete(docs)

