"""What converge downloads for a cluster, and whether each download has a SHA-256 to be checked against.

Converge never downloads an artefact unverified. The bill of materials' source tarballs
(nccl-tests, gpu-burn, nvbandwidth) cannot be loaded without one (``Bom``'s own validation, also
for a stack's ``bom:`` overlay). What depends on the cluster is judged here, for ``spec validate``
and ``preflight``, before anything is created:

- AWS's EFA installer (``bom.efa.sha256``): needed where converge installs EFA, which is on an EFA
  pool whose image ships no EFA, or another version under ``preinstalled: adopt_or_replace`` (the
  roles' own decision, :func:`gpucluster.spec.images.decisions`). Where no image manifest tells,
  a warning: the rdma_fabric role then refuses to download it unverified.
- The Kubernetes artefacts (``gpucluster/data/kubernetes-artifacts.yaml``): every node file for
  both architectures, and the manifest of the CNI the spec names.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpucluster.kube.artifacts import DEFAULT_ARTIFACTS, KubeArtifacts, load_artifacts
from gpucluster.render.sources import EFA_INSTALLER_URL
from gpucluster.spec.cluster import Cluster
from gpucluster.spec.images import _components, decisions
from gpucluster.spec.models import ImageManifest

__all__ = ["download_findings", "efa_findings", "kubernetes_problems"]

ARTIFACTS_FILE = "gpucluster/data/kubernetes-artifacts.yaml"


def efa_findings(cluster: Cluster, manifests: Mapping[str, ImageManifest]) -> tuple[list[str], list[str]]:
    """Problems where converge would install EFA without ``bom.efa.sha256``; warnings where no
    manifest tells whether it would."""
    bom = cluster.bom
    if bom.efa.sha256:
        return [], []
    tarball = f"{EFA_INSTALLER_URL}/aws-efa-installer-{bom.efa.version}.tar.gz"
    found, _ = decisions(cluster, manifests)
    decided = {d.pool for d in found if d.component == "efa"}
    problems = [
        f"bom.efa.sha256: empty (no published SHA-256 for {tarball}), and converge would "
        f"{'install' if d.action == 'install' else 'replace its image EFA ' + d.found + ' with'} EFA {d.pin} "
        f"on pool {d.pool} ({d.where}, image {d.manifest}); pin the tarball's SHA-256 in a bill-of-materials "
        "overlay (gpucluster:bom) after checking AWS's signature, or boot an image that ships EFA "
        f"{bom.efa.version}"
        for d in found if d.component == "efa" and d.action in ("install", "replace")
    ]
    warnings = [f"gpucluster.node_pools[{i}] ({pool.name}): bom.efa.sha256 is empty (no published SHA-256 for "
                f"{tarball}); where the image lacks EFA {bom.efa.version}, converge stops rather than download "
                "the installer unverified"
                for i, pool in enumerate(cluster.spec.node_pools)
                if pool.name not in decided and "efa" in _components(cluster, pool)]
    return problems, warnings


def kubernetes_problems(cluster: Cluster, artifacts: KubeArtifacts | None = None) -> list[str]:
    """Every Kubernetes artefact the cluster's nodes download that has no SHA-256."""
    kube = cluster.spec.kubernetes
    if kube is None or not kube.enabled:
        return []
    arts = artifacts if artifacts is not None else load_artifacts(DEFAULT_ARTIFACTS)
    problems = [f"{ARTIFACTS_FILE} files.{name}.sha256.{arch}: empty; the kubernetes_node role downloads it "
                "and checks it against this SHA-256: pin the published one"
                for name, f in arts.files.items() for arch in ("amd64", "arm64") if not f.checksum(arch)]
    manifest = arts.cni_manifests[kube.cni]
    if not manifest.sha256:
        version = cluster.bom.cni[kube.cni]
        url = f"{manifest.base.rstrip('/')}/{manifest.path.format(version=version)}"
        problems.append(f"{ARTIFACTS_FILE} cni_manifests.{kube.cni}.sha256: empty (no published SHA-256 for {url}); "
                        f"gpucluster.kubernetes.cni {kube.cni} is fetched by the control plane and checked against "
                        "it: pin the file's SHA-256 after reviewing it, or choose a CNI whose manifest is pinned")
    return problems


def download_findings(cluster: Cluster, manifests: Mapping[str, ImageManifest],
                      artifacts: KubeArtifacts | None = None) -> tuple[list[str], list[str]]:
    """Lines where converge would download something without a SHA-256 (exit 2), and warnings."""
    problems, warnings = efa_findings(cluster, manifests)
    return problems + kubernetes_problems(cluster, artifacts), warnings
