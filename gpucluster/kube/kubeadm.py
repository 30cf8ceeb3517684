"""kubeadm's InitConfiguration, ClusterConfiguration, KubeletConfiguration and JoinConfiguration.

Rendered as plain dicts (API ``kubeadm.k8s.io/v1beta4``, the current one for Kubernetes
1.31 and later) from a :class:`KubeadmSettings`. The control-plane and worker roles call these
through their filter plugins, so the file kubeadm reads on a node is exactly what the unit
tests check. Secrets (bootstrap token, discovery hash, certificate key) are arguments of
:func:`render_join_document` only; they are never part of the plan.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from gpucluster.errors import InputError
from gpucluster.spec.cluster import Cluster

KUBEADM_API = "kubeadm.k8s.io/v1beta4"
KUBELET_API = "kubelet.config.k8s.io/v1beta1"
API_PORT = 6443
DEFAULT_CRI_SOCKET = "unix:///run/containerd/containerd.sock"
LABEL_PREFIX = "gpucluster.io"
_TOKEN = re.compile(r"^[a-z0-9]{6}\.[a-z0-9]{16}$")
_CA_HASH = re.compile(r"^sha256:[0-9a-f]{64}$")
_CERT_KEY = re.compile(r"^[0-9a-f]{64}$")
_VERSION = re.compile(r"^v?\d+\.\d+\.\d+$")


@dataclass(frozen=True)
class KubeNode:
    name: str
    address: str
    control_plane: bool
    gpu: bool
    pool: str
    profile: str


@dataclass(frozen=True)
class KubeadmSettings:
    """Everything kubeadm's configuration depends on, for the whole cluster."""

    cluster_name: str
    kubernetes_version: str
    pod_cidr: str
    service_cidr: str
    nodes: tuple[KubeNode, ...]
    api_vip: str | None = None
    image_repository: str = "registry.k8s.io"
    cri_socket: str = DEFAULT_CRI_SOCKET
    dns_domain: str = "cluster.local"
    extra_cert_sans: tuple[str, ...] = field(default_factory=tuple)

    def __post_init__(self) -> None:
        problems = self.problems()
        if problems:
            raise InputError(problems, source="kubeadm settings")

    def problems(self) -> list[str]:
        out: list[str] = []
        if not _VERSION.match(self.kubernetes_version):
            out.append(f"kubernetes_version: {self.kubernetes_version!r} is not MAJOR.MINOR.PATCH")
        for key in ("pod_cidr", "service_cidr"):
            try:
                ipaddress.IPv4Network(getattr(self, key))
            except ValueError as exc:
                out.append(f"{key}: {exc}")
        planes = [n for n in self.nodes if n.control_plane]
        if not planes:
            out.append("nodes: no control-plane node; give a node pool the control_plane role")
        if len(planes) > 1 and self.api_vip is None:
            out.append(
                f"api_vip: {len(planes)} control-plane nodes need a virtual IP in front of them "
                "(set kubernetes.api_vip and kubernetes.control_plane_ha)"
            )
        names = [n.name for n in self.nodes]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            out.append(f"nodes: duplicate node name(s) {', '.join(dup)}")
        return out

    @property
    def ha(self) -> bool:
        return self.api_vip is not None

    @property
    def control_planes(self) -> tuple[KubeNode, ...]:
        return tuple(n for n in self.nodes if n.control_plane)

    @property
    def first_control_plane(self) -> KubeNode:
        return self.control_planes[0]

    @property
    def endpoint(self) -> str:
        host = self.api_vip if self.api_vip is not None else self.first_control_plane.address
        return f"{host}:{API_PORT}"

    def node(self, name: str) -> KubeNode:
        for n in self.nodes:
            if n.name == name:
                return n
        raise InputError(f"node {name!r} is not a kubeadm node (known: {', '.join(x.name for x in self.nodes)})")

    def as_dict(self) -> dict[str, Any]:
        return {
            "cluster_name": self.cluster_name,
            "kubernetes_version": self.kubernetes_version,
            "pod_cidr": self.pod_cidr,
            "service_cidr": self.service_cidr,
            "api_vip": self.api_vip,
            "image_repository": self.image_repository,
            "cri_socket": self.cri_socket,
            "dns_domain": self.dns_domain,
            "extra_cert_sans": list(self.extra_cert_sans),
            "nodes": [
                {"name": n.name, "address": n.address, "control_plane": n.control_plane, "gpu": n.gpu,
                 "pool": n.pool, "profile": n.profile}
                for n in self.nodes
            ],
        }

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any]) -> KubeadmSettings:
        """Build from plain data (the roles pass their variables); every problem at once."""
        required = ("cluster_name", "kubernetes_version", "pod_cidr", "service_cidr", "nodes")
        missing = [k for k in required if data.get(k) in (None, "")]
        if missing:
            raise InputError([f"{k}: is required" for k in missing], source="kubeadm settings")
        nodes: list[KubeNode] = []
        problems: list[str] = []
        for i, raw in enumerate(data["nodes"]):
            lacking = [k for k in ("name", "address") if not raw.get(k)]
            if lacking:
                problems.append(f"nodes[{i}]: needs {' and '.join(lacking)}")
                continue
            nodes.append(
                KubeNode(
                    name=str(raw["name"]),
                    address=str(raw["address"]),
                    control_plane=bool(raw.get("control_plane", False)),
                    gpu=bool(raw.get("gpu", False)),
                    pool=str(raw.get("pool", "")),
                    profile=str(raw.get("profile", "")),
                )
            )
        if problems:
            raise InputError(problems, source="kubeadm settings")
        return cls(
            cluster_name=str(data["cluster_name"]),
            kubernetes_version=str(data["kubernetes_version"]),
            pod_cidr=str(data["pod_cidr"]),
            service_cidr=str(data["service_cidr"]),
            nodes=tuple(nodes),
            api_vip=str(data["api_vip"]) if data.get("api_vip") else None,
            image_repository=str(data.get("image_repository") or "registry.k8s.io"),
            cri_socket=str(data.get("cri_socket") or DEFAULT_CRI_SOCKET),
            dns_domain=str(data.get("dns_domain") or "cluster.local"),
            extra_cert_sans=tuple(str(s) for s in data.get("extra_cert_sans") or ()),
        )


def kubeadm_plan(cluster: Cluster) -> KubeadmSettings:
    """The plan for a resolved cluster; raises InputError when Kubernetes is off."""
    kube = cluster.spec.kubernetes
    if kube is None or not kube.enabled:
        raise InputError(f"cluster {cluster.name!r}: Kubernetes is not enabled in the stack file")
    nodes = tuple(
        KubeNode(
            name=n.name,
            address=n.management_ip,
            control_plane="control_plane" in n.roles,
            gpu="gpu" in n.roles,
            pool=n.pool,
            profile=n.profile,
        )
        for n in cluster.nodes
        if "control_plane" in n.roles or "gpu" in n.roles
    )
    return KubeadmSettings(
        cluster_name=cluster.name,
        kubernetes_version=cluster.kubernetes_version,
        pod_cidr=kube.pod_cidr,
        service_cidr=kube.service_cidr,
        nodes=nodes,
        api_vip=kube.api_vip if kube.control_plane_ha or len([n for n in nodes if n.control_plane]) > 1 else None,
    )


def _version(v: str) -> str:
    return v if v.startswith("v") else f"v{v}"


def _registration(plan: KubeadmSettings, node: KubeNode) -> dict[str, Any]:
    labels = f"{LABEL_PREFIX}/pool={node.pool},{LABEL_PREFIX}/profile={node.profile}"
    reg: dict[str, Any] = {
        "name": node.name,
        "criSocket": plan.cri_socket,
        "kubeletExtraArgs": [
            {"name": "node-ip", "value": node.address},
            {"name": "node-labels", "value": labels},
        ],
    }
    if node.control_plane and node.gpu:
        # A control-plane node that is also a GPU node takes workloads: no NoSchedule taint.
        reg["taints"] = []
    return reg


def render_init_documents(plan: KubeadmSettings, node_name: str) -> list[dict[str, Any]]:
    """The ``kubeadm init --config`` documents for the first control-plane node."""
    node = plan.node(node_name)
    if node != plan.first_control_plane:
        raise InputError(
            f"{node_name}: kubeadm init runs on the first control-plane node "
            f"({plan.first_control_plane.name}); the others join with render_join_document"
        )
    planes = plan.control_planes
    sans = [plan.endpoint.rsplit(":", 1)[0], *(n.address for n in planes), *(n.name for n in planes)]
    sans += list(plan.extra_cert_sans)
    init: dict[str, Any] = {
        "apiVersion": KUBEADM_API,
        "kind": "InitConfiguration",
        "localAPIEndpoint": {"advertiseAddress": node.address, "bindPort": API_PORT},
        "nodeRegistration": _registration(plan, node),
    }
    cluster: dict[str, Any] = {
        "apiVersion": KUBEADM_API,
        "kind": "ClusterConfiguration",
        "clusterName": plan.cluster_name,
        "kubernetesVersion": _version(plan.kubernetes_version),
        "controlPlaneEndpoint": plan.endpoint,
        "imageRepository": plan.image_repository,
        "networking": {
            "podSubnet": plan.pod_cidr,
            "serviceSubnet": plan.service_cidr,
            "dnsDomain": plan.dns_domain,
        },
        "apiServer": {"certSANs": list(dict.fromkeys(sans))},
    }
    return [init, cluster, _kubelet_config()]


def _kubelet_config() -> dict[str, Any]:
    return {
        "apiVersion": KUBELET_API,
        "kind": "KubeletConfiguration",
        "cgroupDriver": "systemd",
        "failSwapOn": True,
        # GPU jobs pin CPUs and memory; the static policies keep them from being moved.
        "cpuManagerPolicy": "none",
        "serverTLSBootstrap": False,
        "rotateCertificates": True,
    }


def render_join_document(
    plan: KubeadmSettings,
    node_name: str,
    *,
    token: str,
    ca_cert_hash: str,
    certificate_key: str | None = None,
) -> dict[str, Any]:
    """The ``kubeadm join --config`` document for ``node_name`` (a worker or another control plane)."""
    node = plan.node(node_name)
    problems: list[str] = []
    if not _TOKEN.match(token):
        problems.append("token: not a kubeadm bootstrap token ([a-z0-9]{6}.[a-z0-9]{16})")
    if not _CA_HASH.match(ca_cert_hash):
        problems.append("ca_cert_hash: must be 'sha256:' and 64 hex digits")
    if node.control_plane:
        if node == plan.first_control_plane:
            problems.append(f"{node_name}: the first control-plane node runs kubeadm init, not join")
        if certificate_key is None or not _CERT_KEY.match(certificate_key):
            problems.append("certificate_key: a joining control-plane node needs the 64-hex key from upload-certs")
    if problems:
        # The messages name fields, never the secret values.
        raise InputError(problems, source=f"kubeadm join for {node_name}")
    doc: dict[str, Any] = {
        "apiVersion": KUBEADM_API,
        "kind": "JoinConfiguration",
        "discovery": {
            "bootstrapToken": {
                "apiServerEndpoint": plan.endpoint,
                "token": token,
                "caCertHashes": [ca_cert_hash],
            }
        },
        "nodeRegistration": _registration(plan, node),
    }
    if node.control_plane:
        doc["controlPlane"] = {
            "localAPIEndpoint": {"advertiseAddress": node.address, "bindPort": API_PORT},
            "certificateKey": certificate_key,
        }
    return doc
