"""Kubernetes add-ons as data: Helm releases, storage classes, scheduling policy, node labels.

Every function returns plain dicts (manifests) or a :class:`HelmRelease`, built from the
resolved cluster and the bill of materials only. ``stacks/kubernetes`` turns them into
Pulumi resources; the tests validate each manifest against the pinned version's schema.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from gpucluster.errors import InputError
from gpucluster.kube.kubeadm import LABEL_PREFIX
from gpucluster.render.os_packages import DCGM_HOSTENGINE
from gpucluster.spec.cluster import Cluster, Node

GPU_RESOURCE = "nvidia.com/gpu"
# GPU workers register with the taint nvidia.com/gpu=present:NoSchedule (roles/kubernetes_node's
# kubernetes_node_gpu_taints), so only pods that tolerate it land there: the operator's and the
# device plugin's daemonsets (set here rather than left to each chart's defaults) and the suite's
# own workloads. kubeadm does not enable the ExtendedResourceToleration admission plugin that would
# add it to GPU-requesting pods
# (https://kubernetes.io/docs/reference/access-authn-authz/admission-controllers/#extendedresourcetoleration).
GPU_TOLERATIONS: list[dict[str, str]] = [{"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"}]
NVIDIA_HELM_REPO = "https://helm.ngc.nvidia.com/nvidia"
DEVICE_PLUGIN_HELM_REPO = "https://nvidia.github.io/k8s-device-plugin"
CEPH_CSI_HELM_REPO = "https://ceph.github.io/csi-charts"
NETWORK_OPERATOR_IMAGE_REPO = "nvcr.io/nvidia/mellanox"
CEPH_MON_PORT = 6789
RDMA_RESOURCE_PREFIX = "rdma"
RDMA_RESOURCE_NAME = "shared_device"
GpuMode = Literal["operator", "device_plugin"]


@dataclass(frozen=True)
class HelmRelease:
    """A pinned Helm release: what ``helm install`` would be given."""

    name: str
    chart: str
    version: str
    repo: str
    namespace: str
    values: dict[str, Any] = field(default_factory=dict)


def _k8s_name(value: str) -> str:
    name = re.sub(r"[^a-z0-9.-]+", "-", value.lower()).strip("-.")
    return name[:63] or "unknown"


def _label_value(value: str) -> str:
    v = re.sub(r"[^A-Za-z0-9._-]+", "-", value).strip("-._")
    return v[:63]


# --- GPUs ------------------------------------------------------------------------------


def gpu_operator_release(cluster: Cluster) -> HelmRelease:
    """NVIDIA GPU Operator, driver and container toolkit off: the Ansible roles own both."""
    bom = cluster.bom
    return HelmRelease(
        name="gpu-operator",
        chart="gpu-operator",
        # NVIDIA's chart versions carry a leading "v" (v25.3.2).
        version=f"v{bom.gpu_operator.version.removeprefix('v')}",
        repo=NVIDIA_HELM_REPO,
        namespace="gpu-operator",
        values={
            "driver": {"enabled": False},
            "toolkit": {"enabled": False},
            "devicePlugin": {"enabled": True},
            # The node's own nvidia-dcgm (gpu_validation), never a second host engine embedded in the
            # exporter (gpucluster.render.os_packages.DCGM_HOSTENGINE, with its sources). The chart's
            # env list is replaced whole, so its three defaults (deployments/gpu-operator/values.yaml at
            # v25.3.2) are carried over; the Operator's own standalone DCGM pod stays off.
            "dcgm": {"enabled": False},
            "dcgmExporter": {"enabled": True, "env": [
                {"name": "DCGM_EXPORTER_LISTEN", "value": ":9400"},
                {"name": "DCGM_EXPORTER_KUBERNETES", "value": "true"},
                {"name": "DCGM_EXPORTER_COLLECTORS", "value": "/etc/dcgm-exporter/dcp-metrics-included.csv"},
                {"name": "DCGM_REMOTE_HOSTENGINE_INFO", "value": DCGM_HOSTENGINE},
            ]},
            "migManager": {"enabled": False},
            "operator": {"defaultRuntime": "containerd"},
            # Only nodes the spec gives the gpu role run the operator's node components.
            "daemonsets": {"nodeSelector": {f"{LABEL_PREFIX}/gpu": "true"},
                           "tolerations": [dict(x) for x in GPU_TOLERATIONS]},
        },
    )


def device_plugin_release(cluster: Cluster, chart_version: str | None = None) -> HelmRelease:
    """The NVIDIA device plugin alone (no operator), for clusters that want only the resource.

    The chart version is the bill of materials' ``device_plugin`` pin unless ``chart_version``
    (the stack's ``devicePluginChartVersion``) overrides it.
    """
    if chart_version is None:
        chart_version = cluster.bom.device_plugin.version
        where = "bom.device_plugin.version"
    else:
        where = "devicePluginChartVersion"
    if not re.match(r"^\d+\.\d+\.\d+$", chart_version):
        raise InputError(f"{where}: {chart_version!r} is not MAJOR.MINOR.PATCH")
    return HelmRelease(
        name="nvidia-device-plugin",
        chart="nvidia-device-plugin",
        version=chart_version,
        repo=DEVICE_PLUGIN_HELM_REPO,
        namespace="nvidia-device-plugin",
        values={"nodeSelector": {f"{LABEL_PREFIX}/gpu": "true"}, "gfd": {"enabled": True},
                "tolerations": [dict(x) for x in GPU_TOLERATIONS]},
    )


# --- RDMA ------------------------------------------------------------------------------


def rdma_enabled(cluster: Cluster) -> bool:
    return cluster.spec.fabric.type in ("infiniband", "roce")


def network_operator_release(cluster: Cluster) -> HelmRelease:
    return HelmRelease(
        name="network-operator",
        chart="network-operator",
        version=cluster.bom.network_operator.version,
        repo=NVIDIA_HELM_REPO,
        namespace="nvidia-network-operator",
        values={
            # The GPU Operator (or none) runs Node Feature Discovery; the roles own OFED/DOCA.
            "nfd": {"enabled": False},
            "sriovNetworkOperator": {"enabled": False},
        },
    )


def nic_cluster_policy(cluster: Cluster) -> dict[str, Any]:
    """The NicClusterPolicy that runs only the RDMA shared device plugin.

    Component images of a Network Operator release are tagged ``network-operator-v<release>``
    in NVIDIA's registry; the driver stays with the ``rdma_fabric`` role (no ``ofedDriver``).
    """
    link = "infiniband" if cluster.spec.fabric.type == "infiniband" else "ether"
    config = {
        "configList": [
            {
                "resourcePrefix": RDMA_RESOURCE_PREFIX,
                "resourceName": RDMA_RESOURCE_NAME,
                "rdmaHcaMax": 63,
                # 15b3: NVIDIA/Mellanox. Link type keeps management NICs of the same vendor out.
                "selectors": {"vendors": ["15b3"], "linkTypes": [link]},
            }
        ]
    }
    return {
        "apiVersion": "mellanox.com/v1alpha1",
        "kind": "NicClusterPolicy",
        "metadata": {"name": "nic-cluster-policy"},
        "spec": {
            "rdmaSharedDevicePlugin": {
                "image": "k8s-rdma-shared-dev-plugin",
                "repository": NETWORK_OPERATOR_IMAGE_REPO,
                "version": f"network-operator-v{cluster.bom.network_operator.version}",
                "config": json.dumps(config, indent=2, sort_keys=True),
                "nodeSelector": {f"{LABEL_PREFIX}/gpu": "true"},
            }
        },
    }


# --- Ceph ------------------------------------------------------------------------------


@dataclass(frozen=True)
class CephCsiPlan:
    cluster_id: str  # the Ceph fsid
    monitors: tuple[str, ...]
    rbd_pool: str | None
    cephfs_name: str | None
    namespace: str = "ceph-csi"
    secret_name: str = "ceph-csi-secret"


_FSID = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")


def ceph_csi_plan(cluster: Cluster, fsid: str) -> CephCsiPlan:
    storage = cluster.spec.storage
    if storage is None:
        raise InputError("storage: the stack file has no Ceph cluster; Ceph CSI needs one")
    if not _FSID.match(fsid):
        raise InputError(f"cephFsid: {fsid!r} is not a Ceph fsid (a lower-case UUID; `ceph fsid` prints it)")

    def address(node: Node) -> str:
        return node.management_ip if storage.public_network == "management" else node.fabric_ip

    monitors = tuple(f"{address(cluster.node(m))}:{CEPH_MON_PORT}" for m in storage.monitors)
    rbd = next((p.name for p in storage.pools if p.application == "rbd"), None)
    return CephCsiPlan(
        cluster_id=fsid,
        monitors=monitors,
        rbd_pool=rbd,
        cephfs_name=storage.cephfs.name if storage.cephfs is not None else None,
    )


def ceph_csi_releases(cluster: Cluster, plan: CephCsiPlan) -> list[HelmRelease]:
    version = cluster.bom.ceph_csi.version
    csi_config = [{"clusterID": plan.cluster_id, "monitors": list(plan.monitors)}]
    common = {
        "csiConfig": csi_config,
        # The storage classes and the secret are ours (stacks/kubernetes), not the chart's.
        "storageClass": {"create": False},
        "secret": {"create": False},
    }
    out = []
    if plan.rbd_pool is not None:
        out.append(
            HelmRelease("ceph-csi-rbd", "ceph-csi-rbd", version, CEPH_CSI_HELM_REPO, plan.namespace, dict(common))
        )
    if plan.cephfs_name is not None:
        out.append(
            HelmRelease("ceph-csi-cephfs", "ceph-csi-cephfs", version, CEPH_CSI_HELM_REPO, plan.namespace, dict(common))
        )
    return out


def ceph_storage_classes(plan: CephCsiPlan, default: Literal["rbd", "cephfs"] = "rbd") -> list[dict[str, Any]]:
    secret = {"name": plan.secret_name, "namespace": plan.namespace}

    def secrets(kinds: tuple[str, ...]) -> dict[str, str]:
        out: dict[str, str] = {}
        for kind in kinds:
            out[f"csi.storage.k8s.io/{kind}-secret-name"] = secret["name"]
            out[f"csi.storage.k8s.io/{kind}-secret-namespace"] = secret["namespace"]
        return out

    kinds = ("provisioner", "controller-expand", "node-stage")
    classes: list[dict[str, Any]] = []
    if plan.rbd_pool is not None:
        classes.append(
            _storage_class(
                "ceph-rbd",
                "rbd.csi.ceph.com",
                {"clusterID": plan.cluster_id, "pool": plan.rbd_pool, "imageFeatures": "layering",
                 "csi.storage.k8s.io/fstype": "ext4", **secrets(kinds)},
                default == "rbd",
            )
        )
    if plan.cephfs_name is not None:
        classes.append(
            _storage_class(
                "ceph-cephfs",
                "cephfs.csi.ceph.com",
                {"clusterID": plan.cluster_id, "fsName": plan.cephfs_name, **secrets(kinds)},
                default == "cephfs" or plan.rbd_pool is None,
            )
        )
    return classes


def _storage_class(name: str, provisioner: str, params: dict[str, str], default: bool) -> dict[str, Any]:
    return {
        "apiVersion": "storage.k8s.io/v1",
        "kind": "StorageClass",
        "metadata": {
            "name": name,
            "annotations": {"storageclass.kubernetes.io/is-default-class": "true" if default else "false"},
        },
        "provisioner": provisioner,
        "parameters": params,
        "reclaimPolicy": "Delete",
        "allowVolumeExpansion": True,
        "volumeBindingMode": "Immediate",
    }


def ceph_secret(plan: CephCsiPlan, user: str, key: str) -> dict[str, Any]:
    """The CSI secret. ``key`` is a secret: callers wrap it in pulumi.Output.secret."""
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": plan.secret_name, "namespace": plan.namespace},
        "type": "Opaque",
        # RBD reads userID/userKey; CephFS reads the admin/user pairs of the same name.
        "stringData": {"userID": user, "userKey": key, "adminID": user, "adminKey": key},
    }


# --- scheduling policy -----------------------------------------------------------------

PRIORITY_CLASSES: tuple[tuple[str, int, str], ...] = (
    ("gpucluster-production", 100000, "Production training and serving: preempts experiments."),
    ("gpucluster-experiments", 1000, "Experiments: run on idle GPUs, preempted by production."),
)


def priority_classes() -> list[dict[str, Any]]:
    return [
        {
            "apiVersion": "scheduling.k8s.io/v1",
            "kind": "PriorityClass",
            "metadata": {"name": name},
            "value": value,
            "globalDefault": False,
            "preemptionPolicy": "PreemptLowerPriority",
            "description": text,
        }
        for name, value, text in PRIORITY_CLASSES
    ]


def total_gpus(cluster: Cluster) -> int:
    return sum(cluster.profile_of(n).gpu.count for n in cluster.nodes_with_role("gpu"))


def default_gpu_quotas(cluster: Cluster) -> dict[str, int]:
    """production may use every GPU; experiments at most half of them."""
    total = total_gpus(cluster)
    return {"production": total, "experiments": total // 2}


def namespaces_and_quotas(quotas: dict[str, int]) -> list[dict[str, Any]]:
    problems = [f"gpuQuotas.{ns}: {n} must be 0 or more" for ns, n in quotas.items() if n < 0]
    problems += [f"gpuQuotas.{ns}: not a namespace name" for ns in quotas if _k8s_name(ns) != ns or "." in ns]
    if problems:
        raise InputError(problems)
    docs: list[dict[str, Any]] = []
    for ns, gpus in sorted(quotas.items()):
        docs.append({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        docs.append(
            {
                "apiVersion": "v1",
                "kind": "ResourceQuota",
                "metadata": {"name": "gpu-quota", "namespace": ns},
                # Extended resources take quota on requests only (no limits.nvidia.com/gpu).
                "spec": {"hard": {f"requests.{GPU_RESOURCE}": str(gpus)}},
            }
        )
    return docs


# --- node labels -----------------------------------------------------------------------


def node_labels(cluster: Cluster, node: Node) -> dict[str, str]:
    profile = cluster.profile_of(node)
    labels = {
        f"{LABEL_PREFIX}/pool": node.pool,
        f"{LABEL_PREFIX}/profile": profile.name,
        f"{LABEL_PREFIX}/gpu": "true" if "gpu" in node.roles and profile.gpu.count > 0 else "false",
        f"{LABEL_PREFIX}/gpu-count": str(profile.gpu.count),
        f"{LABEL_PREFIX}/nvlink": "true" if profile.gpu.nvlink else "false",
        f"{LABEL_PREFIX}/hca-count": str(cluster.platform_of(node).hca_count),
        f"{LABEL_PREFIX}/fabric": cluster.spec.fabric.type,
    }
    if profile.gpu.model:
        labels[f"{LABEL_PREFIX}/gpu-model"] = _label_value(profile.gpu.model)
    return labels


def node_label_patches(cluster: Cluster) -> list[dict[str, Any]]:
    """One Node document per Kubernetes node (GPU and control-plane roles), labels only."""
    return [
        {"apiVersion": "v1", "kind": "Node", "metadata": {"name": n.name, "labels": node_labels(cluster, n)}}
        for n in cluster.nodes
        if "gpu" in n.roles or "control_plane" in n.roles
    ]
