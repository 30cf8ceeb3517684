"""Jinja filters the Kubernetes roles use, so role templates render through the same code
as the unit tests and the Pulumi layer (the roles' ``filter_plugins`` re-export these)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import yaml

from gpucluster.kube.kubeadm import KubeadmSettings, render_init_documents, render_join_document

KUBE_ROLES = ("gpu", "control_plane")


def kube_nodes(nodes: list[Mapping[str, Any]], hostvars: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The Kubernetes nodes (gpu and control_plane roles) of ``gpucluster_nodes``, in order."""
    out = []
    for n in nodes:
        roles = list(n.get("roles") or [])
        if not any(r in roles for r in KUBE_ROLES):
            continue
        hv = hostvars.get(n["name"]) or {}
        out.append(
            {
                "name": n["name"],
                "address": n["management_ip"],
                "control_plane": "control_plane" in roles,
                "gpu": "gpu" in roles,
                "pool": hv.get("gpucluster_pool", ""),
                "profile": hv.get("gpucluster_profile", ""),
            }
        )
    return out


def _dump(docs: list[dict[str, Any]]) -> str:
    return "---\n".join(yaml.safe_dump(d, sort_keys=False, default_flow_style=False) for d in docs)


def kubeadm_init_yaml(plan: Mapping[str, Any], node: str) -> str:
    return _dump(render_init_documents(KubeadmSettings.from_mapping(plan), node))


def kubeadm_join_yaml(
    plan: Mapping[str, Any], node: str, token: str, ca_cert_hash: str, certificate_key: str | None = None
) -> str:
    doc = render_join_document(
        KubeadmSettings.from_mapping(plan), node, token=token, ca_cert_hash=ca_cert_hash,
        certificate_key=certificate_key or None,
    )
    return _dump([doc])


def kubeadm_endpoint(plan: Mapping[str, Any]) -> str:
    return KubeadmSettings.from_mapping(plan).endpoint


FILTERS: dict[str, Any] = {
    "gpucluster_kube_nodes": kube_nodes,
    "gpucluster_kubeadm_init_yaml": kubeadm_init_yaml,
    "gpucluster_kubeadm_join_yaml": kubeadm_join_yaml,
    "gpucluster_kubeadm_endpoint": kubeadm_endpoint,
}
