"""Kubernetes on the cluster: kubeadm configuration, add-on manifests, pinned artifacts.

Pure functions of the resolved cluster spec. The Ansible roles call the kubeadm renderers
through their filter plugins (so the role template and these functions cannot drift), and
the Kubernetes Pulumi program (``stacks/kubernetes``) builds its resources from the
manifest renderers; the tests validate every rendered manifest against the OpenAPI schema
of the pinned Kubernetes version (:mod:`gpucluster.kube.schema`).
"""

from gpucluster.kube.artifacts import KubeArtifacts, ResolvedArtifact, load_artifacts, resolve_artifacts
from gpucluster.kube.kubeadm import (
    KubeadmSettings,
    kubeadm_plan,
    render_init_documents,
    render_join_document,
)

__all__ = [
    "KubeArtifacts",
    "KubeadmSettings",
    "ResolvedArtifact",
    "kubeadm_plan",
    "load_artifacts",
    "render_init_documents",
    "render_join_document",
    "resolve_artifacts",
]
