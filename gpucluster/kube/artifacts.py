"""The pinned Kubernetes node artifacts (``data/kubernetes-artifacts.yaml``) and their URLs.

A file is fetched from one of three places, in this order of preference: an air-gapped
folder on the Ansible controller, a mirror that copies upstream's layout, or upstream.
An empty checksum means "not verified"; the role refuses such a file unless told otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpucluster.errors import InputError
from gpucluster.spec.loader import DATA_DIR, validation_problems

DEFAULT_ARTIFACTS = DATA_DIR / "kubernetes-artifacts.yaml"
Arch = Literal["amd64", "arm64"]
ARCHES: tuple[Arch, ...] = ("amd64", "arm64")
_SHA = r"^([0-9a-f]{64})?$"


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class NodeFile(_Model):
    version: str = Field(pattern=r"^\d+\.\d+\.\d+$")
    base: str = Field(pattern=r"^https://")
    path: str = Field(min_length=1)
    archive: bool
    sha256: dict[Arch, str]

    def checksum(self, arch: Arch) -> str:
        return self.sha256.get(arch, "")


class ManifestFile(_Model):
    base: str = Field(pattern=r"^https://")
    path: str = Field(min_length=1)
    sha256: str = Field(pattern=_SHA)


class KubeArtifacts(_Model):
    schema_: int = Field(alias="schema")
    kubernetes_version: str = Field(pattern=r"^\d+\.\d+\.\d+$")
    files: dict[Literal["kubelet", "kubeadm", "kubectl", "crictl", "cni_plugins"], NodeFile]
    cni_manifests: dict[Literal["calico", "cilium", "flannel"], ManifestFile]


@dataclass(frozen=True)
class ResolvedArtifact:
    """One file for one architecture, with where to get it and what it must hash to."""

    name: str
    version: str
    path: str  # relative: the same under a mirror URL and an air-gapped folder
    url: str
    sha256: str  # "" = not verified
    archive: bool


def load_artifacts(path: Path = DEFAULT_ARTIFACTS) -> KubeArtifacts:
    try:
        raw = yaml.safe_load(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError("Kubernetes artifacts file not found", source=str(path)) from None
    except yaml.YAMLError as exc:
        raise InputError(f"YAML does not parse: {exc}", source=str(path)) from None
    try:
        arts = KubeArtifacts.model_validate(raw)
    except ValidationError as exc:
        raise InputError(validation_problems(exc, KubeArtifacts, "artifacts"), source=str(path)) from None
    problems = [
        f"artifacts.files.{name}.sha256.{arch}: {sha!r} is not a lower-case SHA-256 (64 hex digits) or empty"
        for name, f in arts.files.items()
        for arch, sha in f.sha256.items()
        if not _is_sha(sha)
    ]
    for name in ("kubelet", "kubeadm", "kubectl"):
        f = arts.files.get(name)
        if f is not None and f.version != arts.kubernetes_version:
            problems.append(
                f"artifacts.files.{name}.version: {f.version} differs from kubernetes_version {arts.kubernetes_version}"
            )
    if problems:
        raise InputError(problems, source=str(path))
    return arts


def _is_sha(value: str) -> bool:
    return value == "" or (len(value) == 64 and all(c in "0123456789abcdef" for c in value))


def resolve_artifacts(
    arts: KubeArtifacts, arch: Arch, cni: Literal["calico", "cilium", "flannel"], cni_version: str,
    mirror: str | None = None,
) -> list[ResolvedArtifact]:
    """Every file a node of ``arch`` needs, with its URL (``mirror`` replaces each ``base``)."""
    out: list[ResolvedArtifact] = []
    for name, f in arts.files.items():
        rel = f.path.format(version=f.version, arch=arch)
        base = (mirror or f.base).rstrip("/")
        out.append(ResolvedArtifact(name, f.version, rel, f"{base}/{rel}", f.checksum(arch), f.archive))
    m = arts.cni_manifests[cni]
    rel = m.path.format(version=cni_version)
    base = (mirror or m.base).rstrip("/")
    out.append(ResolvedArtifact(f"cni_manifest_{cni}", cni_version, rel, f"{base}/{rel}", m.sha256, False))
    return out
