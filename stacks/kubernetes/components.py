"""ComponentResources of the Kubernetes layer, one per concern, each built from gpucluster.kube."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pulumi
import pulumi_kubernetes as k8s

from gpucluster.kube.manifests import HelmRelease


def _release(name: str, rel: HelmRelease, opts: pulumi.ResourceOptions) -> k8s.helm.v3.Release:
    return k8s.helm.v3.Release(
        name,
        k8s.helm.v3.ReleaseArgs(
            name=rel.name,
            chart=rel.chart,
            version=rel.version,
            namespace=rel.namespace,
            create_namespace=True,
            repository_opts=k8s.helm.v3.RepositoryOptsArgs(repo=rel.repo),
            values=rel.values,
            atomic=True,
            wait_for_jobs=True,
        ),
        opts=opts,
    )


def _meta(doc: dict[str, Any]) -> k8s.meta.v1.ObjectMetaArgs:
    m = doc["metadata"]
    return k8s.meta.v1.ObjectMetaArgs(
        name=m["name"], namespace=m.get("namespace"), labels=m.get("labels"), annotations=m.get("annotations")
    )


@dataclass(frozen=True)
class GpuPluginArgs:
    release: HelmRelease


class GpuPlugin(pulumi.ComponentResource):
    """The NVIDIA GPU Operator (driver and toolkit off) or the device plugin alone."""

    def __init__(self, name: str, args: GpuPluginArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:kubernetes:GpuPlugin", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.release = _release(f"{name}-release", args.release, child)
        self.register_outputs({"status": self.release.status})


@dataclass(frozen=True)
class RdmaDevicePluginArgs:
    release: HelmRelease
    nic_cluster_policy: dict[str, Any]


class RdmaDevicePlugin(pulumi.ComponentResource):
    """The NVIDIA Network Operator and a NicClusterPolicy running the RDMA shared device plugin.

    The policy is a custom resource whose CRD the operator's chart installs: it depends on
    the release, so it is created after the CRD exists and deleted before it goes.
    """

    def __init__(self, name: str, args: RdmaDevicePluginArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:kubernetes:RdmaDevicePlugin", name, None, opts)
        self.release = _release(f"{name}-release", args.release, pulumi.ResourceOptions(parent=self))
        doc = args.nic_cluster_policy
        self.policy = k8s.apiextensions.CustomResource(
            f"{name}-policy",
            api_version=doc["apiVersion"],
            kind=doc["kind"],
            metadata=_meta(doc),
            spec=doc["spec"],
            opts=pulumi.ResourceOptions(parent=self, depends_on=[self.release]),
        )
        self.register_outputs({"status": self.release.status})


@dataclass(frozen=True)
class CephCsiArgs:
    releases: list[HelmRelease]
    secret: dict[str, Any]
    storage_classes: list[dict[str, Any]]


class CephCsi(pulumi.ComponentResource):
    """Ceph CSI (RBD and/or CephFS charts), its secret and the storage classes."""

    def __init__(self, name: str, args: CephCsiArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:kubernetes:CephCsi", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        ns_name = args.secret["metadata"]["namespace"]
        self.namespace = k8s.core.v1.Namespace(
            f"{name}-namespace", metadata=k8s.meta.v1.ObjectMetaArgs(name=ns_name), opts=child
        )
        after_ns = pulumi.ResourceOptions(parent=self, depends_on=[self.namespace])
        self.secret = k8s.core.v1.Secret(
            f"{name}-secret",
            metadata=_meta(args.secret),
            type=args.secret["type"],
            string_data={k: pulumi.Output.secret(v) for k, v in args.secret["stringData"].items()},
            opts=after_ns,
        )
        self.releases = [_release(f"{name}-{r.name}", r, after_ns) for r in args.releases]
        self.storage_classes = [
            k8s.storage.v1.StorageClass(
                f"{name}-{sc['metadata']['name']}",
                metadata=_meta(sc),
                provisioner=sc["provisioner"],
                parameters=sc["parameters"],
                reclaim_policy=sc["reclaimPolicy"],
                allow_volume_expansion=sc["allowVolumeExpansion"],
                volume_binding_mode=sc["volumeBindingMode"],
                opts=pulumi.ResourceOptions(parent=self, depends_on=[self.secret, *self.releases]),
            )
            for sc in args.storage_classes
        ]
        self.register_outputs({"storage_classes": [sc.metadata.name for sc in self.storage_classes]})


@dataclass(frozen=True)
class SchedulingPolicyArgs:
    priority_classes: list[dict[str, Any]]
    namespaces_and_quotas: list[dict[str, Any]]


class SchedulingPolicy(pulumi.ComponentResource):
    """Priority classes (production above experiments) and per-namespace GPU quotas."""

    def __init__(self, name: str, args: SchedulingPolicyArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:kubernetes:SchedulingPolicy", name, None, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.priority_classes = [
            k8s.scheduling.v1.PriorityClass(
                f"{name}-{pc['metadata']['name']}",
                metadata=_meta(pc),
                value=pc["value"],
                global_default=pc["globalDefault"],
                preemption_policy=pc["preemptionPolicy"],
                description=pc["description"],
                opts=child,
            )
            for pc in args.priority_classes
        ]
        namespaces: dict[str, k8s.core.v1.Namespace] = {}
        self.quotas: list[k8s.core.v1.ResourceQuota] = []
        for doc in args.namespaces_and_quotas:
            if doc["kind"] == "Namespace":
                ns = doc["metadata"]["name"]
                namespaces[ns] = k8s.core.v1.Namespace(f"{name}-ns-{ns}", metadata=_meta(doc), opts=child)
            else:
                ns = doc["metadata"]["namespace"]
                self.quotas.append(
                    k8s.core.v1.ResourceQuota(
                        f"{name}-quota-{ns}",
                        metadata=_meta(doc),
                        spec=k8s.core.v1.ResourceQuotaSpecArgs(hard=doc["spec"]["hard"]),
                        opts=pulumi.ResourceOptions(parent=self, depends_on=[namespaces[ns]]),
                    )
                )
        self.register_outputs({"quotas": [q.metadata.name for q in self.quotas]})


@dataclass(frozen=True)
class NodeLabelsArgs:
    nodes: list[dict[str, Any]]


class NodeLabels(pulumi.ComponentResource):
    """Labels from the hardware profile on each node (server-side apply patches)."""

    def __init__(self, name: str, args: NodeLabelsArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:kubernetes:NodeLabels", name, None, opts)
        self.patches = [
            k8s.core.v1.NodePatch(
                f"{name}-{doc['metadata']['name']}",
                metadata=k8s.meta.v1.ObjectMetaPatchArgs(
                    name=doc["metadata"]["name"], labels=doc["metadata"]["labels"]
                ),
                opts=pulumi.ResourceOptions(parent=self),
            )
            for doc in args.nodes
        ]
        self.register_outputs({"nodes": [d["metadata"]["name"] for d in args.nodes]})
