"""Workloads the conformance suite runs on the cluster: an nvidia-smi pod, an all-reduce Job.

The all-reduce runs as an Indexed Job (one pod per GPU node, completion index = node rank)
behind a headless Service, with torchrun's c10d rendezvous on pod 0. Each rank runs the
script below; rank 0 prints one ``GPUCLUSTER_ALLREDUCE {json}`` line that
:func:`parse_allreduce_verdict` reads, so the verdict feeds the conformance report.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from gpucluster.errors import InputError
from gpucluster.kube.manifests import GPU_RESOURCE, GPU_TOLERATIONS

VERDICT_PREFIX = "GPUCLUSTER_ALLREDUCE "
CUDA_IMAGE = "nvcr.io/nvidia/cuda:13.0.1-base-ubuntu22.04"  # CUDA from bom.yaml's cuda.version
TORCH_IMAGE = "nvcr.io/nvidia/pytorch:25.06-py3"

ALLREDUCE_SCRIPT = r'''
import json, os, time
import torch
import torch.distributed as dist

dist.init_process_group("nccl")
rank, world = dist.get_rank(), dist.get_world_size()
local = int(os.environ["LOCAL_RANK"])
torch.cuda.set_device(local)
size = int(os.environ.get("ALLREDUCE_BYTES", str(1 << 30)))
buf = torch.ones(size // 4, dtype=torch.float32, device="cuda")
for _ in range(5):
    dist.all_reduce(buf)
torch.cuda.synchronize()
iters = int(os.environ.get("ALLREDUCE_ITERS", "20"))
start = time.perf_counter()
for _ in range(iters):
    dist.all_reduce(buf)
torch.cuda.synchronize()
elapsed = (time.perf_counter() - start) / iters
algbw = size / elapsed / 1e9
busbw = algbw * 2 * (world - 1) / world
check = torch.full((1024,), float(rank + 1), device="cuda")
dist.all_reduce(check)
ok = bool(torch.all(check == world * (world + 1) / 2).item())
if rank == 0:
    print("GPUCLUSTER_ALLREDUCE " + json.dumps({"world_size": world, "bytes": size, "algbw_gbps": algbw,
                                                "busbw_gbps": busbw, "correct": ok}), flush=True)
dist.destroy_process_group()
'''


def nvidia_smi_pod(name: str, namespace: str, node: str | None = None, image: str = CUDA_IMAGE) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "tolerations": [dict(t) for t in GPU_TOLERATIONS],
        "containers": [
            {
                "name": "nvidia-smi",
                "image": image,
                "command": ["nvidia-smi", "-L"],
                "resources": {"limits": {GPU_RESOURCE: "1"}},
            }
        ],
    }
    if node is not None:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace}, "spec": spec}


def allreduce_job(
    name: str, namespace: str, nodes: int, gpus_per_node: int, image: str = TORCH_IMAGE,
    message_bytes: int = 1 << 30,
) -> list[dict[str, Any]]:
    """The headless Service, ConfigMap and Indexed Job of the cross-node all-reduce check."""
    if nodes < 1 or gpus_per_node < 1:
        raise InputError(f"all-reduce job needs at least one node and one GPU (got {nodes} x {gpus_per_node})")
    labels = {"app.kubernetes.io/name": name}
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"clusterIP": "None", "selector": labels, "ports": [{"name": "c10d", "port": 29500}]},
    }
    cm = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": name, "namespace": namespace},
        "data": {"allreduce.py": ALLREDUCE_SCRIPT.lstrip()},
    }
    cmd = (
        f"torchrun --nnodes={nodes} --nproc-per-node={gpus_per_node} --node-rank=$JOB_COMPLETION_INDEX "
        f"--rdzv-backend=c10d --rdzv-endpoint={name}-0.{name}:29500 --rdzv-id={name} /work/allreduce.py"
    )
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "completionMode": "Indexed",
            "completions": nodes,
            "parallelism": nodes,
            "backoffLimit": 0,
            "ttlSecondsAfterFinished": 3600,
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "subdomain": name,
                    "restartPolicy": "Never",
                    "tolerations": [dict(t) for t in GPU_TOLERATIONS],
                    # One pod per node: spread the ranks across distinct nodes.
                    "topologySpreadConstraints": [
                        {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
                         "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": labels}}
                    ],
                    "containers": [
                        {
                            "name": "allreduce",
                            "image": image,
                            "command": ["bash", "-c", cmd],
                            "env": [{"name": "ALLREDUCE_BYTES", "value": str(message_bytes)}],
                            "resources": {"limits": {GPU_RESOURCE: str(gpus_per_node)}},
                            "volumeMounts": [{"name": "script", "mountPath": "/work"},
                                             {"name": "shm", "mountPath": "/dev/shm"}],
                        }
                    ],
                    "volumes": [
                        {"name": "script", "configMap": {"name": name}},
                        {"name": "shm", "emptyDir": {"medium": "Memory"}},
                    ],
                },
            },
        },
    }
    return [svc, cm, job]


@dataclass(frozen=True)
class AllreduceVerdict:
    world_size: int
    message_bytes: int
    busbw_gbps: float
    correct: bool

    def passes(self, floor_gbps: float | None) -> bool:
        return self.correct and (floor_gbps is None or self.busbw_gbps >= floor_gbps)


def parse_allreduce_verdict(log: str) -> AllreduceVerdict:
    """Read rank 0's verdict line from the job's log; InputError when there is none."""
    lines = [ln for ln in log.splitlines() if ln.startswith(VERDICT_PREFIX)]
    if not lines:
        raise InputError("all-reduce log has no GPUCLUSTER_ALLREDUCE line: the job did not finish its run")
    try:
        data = json.loads(lines[-1][len(VERDICT_PREFIX):])
        return AllreduceVerdict(
            world_size=int(data["world_size"]),
            message_bytes=int(data["bytes"]),
            busbw_gbps=float(data["busbw_gbps"]),
            correct=bool(data["correct"]),
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise InputError(f"all-reduce verdict line does not parse: {exc}") from None
