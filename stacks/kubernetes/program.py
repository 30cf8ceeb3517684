"""Compose the Kubernetes layer from a resolved cluster and the layer's config."""

from __future__ import annotations

import pulumi
import pulumi_kubernetes as k8s

from gpucluster.errors import InputError
from gpucluster.kube import manifests as m
from gpucluster.spec.cluster import Cluster
from stacks.kubernetes.components import (
    CephCsi,
    CephCsiArgs,
    GpuPlugin,
    GpuPluginArgs,
    NodeLabels,
    NodeLabelsArgs,
    RdmaDevicePlugin,
    RdmaDevicePluginArgs,
    SchedulingPolicy,
    SchedulingPolicyArgs,
)
from stacks.kubernetes.config import KubeStackConfig


def gpu_mode(cluster: Cluster, cfg: KubeStackConfig) -> str:
    """The layer's GPU mode: the cluster spec's, which the roles read too."""
    kube = cluster.spec.kubernetes
    return cfg.gpu_mode or (kube.gpu_mode if kube is not None else "operator")


def check(cluster: Cluster, cfg: KubeStackConfig) -> list[str]:
    """Every cross-field problem, collected: raised once by :func:`build`."""
    problems: list[str] = []
    kube = cluster.spec.kubernetes
    if kube is None or not kube.enabled:
        problems.append(f"{cfg.stack_file}: Kubernetes is not enabled in the cluster's stack file")
    elif cfg.gpu_mode is not None and cfg.gpu_mode != kube.gpu_mode:
        # The roles converged the nodes for the spec's mode (dcgm-exporter's owner, the toolkit):
        # installing the other one would leave a node without an exporter or with two.
        problems.append(f"gpuclusterKube:gpuMode: {cfg.gpu_mode!r}, but {cfg.stack_file} says "
                        f"kubernetes.gpu_mode {kube.gpu_mode!r}: set it in the cluster's stack file only")
    if cluster.spec.storage is not None:
        if not cfg.ceph_fsid:
            problems.append("gpuclusterKube:cephFsid: required: the cluster has Ceph storage (`ceph fsid` prints it)")
        if not cfg.ceph_user_key:
            problems.append("gpuclusterKube:cephUserKey: required (set it with `pulumi config set --secret`)")
    return problems


def build(cluster: Cluster, cfg: KubeStackConfig, provider: k8s.Provider | None = None) -> dict[str, pulumi.Resource]:
    problems = check(cluster, cfg)
    if problems:
        raise InputError(problems, source="stacks/kubernetes")
    opts = pulumi.ResourceOptions(provider=provider) if provider is not None else None
    out: dict[str, pulumi.Resource] = {}
    # Labels first: the GPU components select nodes by gpucluster.io/gpu.
    labels = NodeLabels("node-labels", NodeLabelsArgs(m.node_label_patches(cluster)), opts)
    out["labels"] = labels
    after_labels = pulumi.ResourceOptions(provider=provider, depends_on=[labels])
    release = (
        m.gpu_operator_release(cluster)
        if gpu_mode(cluster, cfg) == "operator"
        # The BOM pins the chart; devicePluginChartVersion, when set, overrides the pin.
        else m.device_plugin_release(cluster, cfg.device_plugin_chart_version)
    )
    out["gpu"] = GpuPlugin("gpu", GpuPluginArgs(release), after_labels)
    if m.rdma_enabled(cluster):
        out["rdma"] = RdmaDevicePlugin(
            "rdma",
            RdmaDevicePluginArgs(m.network_operator_release(cluster), m.nic_cluster_policy(cluster)),
            after_labels,
        )
    if cluster.spec.storage is not None:
        plan = m.ceph_csi_plan(cluster, cfg.ceph_fsid or "")
        out["ceph"] = CephCsi(
            "ceph-csi",
            CephCsiArgs(
                releases=m.ceph_csi_releases(cluster, plan),
                secret=m.ceph_secret(plan, cfg.ceph_user, cfg.ceph_user_key or ""),
                storage_classes=m.ceph_storage_classes(plan),
            ),
            opts,
        )
    quotas = cfg.gpu_quotas if cfg.gpu_quotas is not None else m.default_gpu_quotas(cluster)
    out["scheduling"] = SchedulingPolicy(
        "scheduling", SchedulingPolicyArgs(m.priority_classes(), m.namespaces_and_quotas(quotas)), opts
    )
    return out
