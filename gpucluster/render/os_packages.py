"""Packages and repositories per role and per OS: the one table the roles resolve through.

A role asks ``gpucluster.cluster.os_packages`` (this module's :func:`os_packages`) with the host's
``gpucluster_os`` and the inventory's bill of materials, and gets its apt repositories, its
package names with the BOM's versions pinned, the kernel headers and the kernel packages to hold,
and (for Ceph) where Ceph comes from. Versions come only from the BOM; names and URLs from here.

:func:`preinstalled_action` decides what a role does with a component the image already ships
(the driver, CUDA, NCCL, EFA, OFED, containerd, the NVIDIA container toolkit): adopt it where it
equals the pin (for a component the BOM gives a floor, where it is at least the floor; for the
container toolkit, where it is at least the pin), else follow the pool's ``preinstalled`` policy,
and never layer repository packages over a runfile install.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    # Types only: the roles' filters import this module in every Ansible worker (render/devices.py).
    from gpucluster.spec.models import Bom, _OsRelease

ROLES = ("common", "nvidia_cuda_repo", "nvidia_driver", "cuda_toolkit", "nccl", "gpu_validation", "container_runtime",
         "rdma_fabric", "monitoring", "kubernetes_node", "kubernetes_control_plane", "ceph_common")

CUDA_REPO_URL = "https://developer.download.nvidia.com/compute/cuda/repos"
# NVIDIA's CUDA repository signing key (3bf863cc.pub beside each repository folder).
# https://docs.nvidia.com/cuda/cuda-installation-guide-linux/ (Network Repository Installation)
CUDA_REPO_KEY_ID = "3bf863cc"
TOOLKIT_REPO_URL = "https://nvidia.github.io/libnvidia-container/stable/deb"
# The apt source container_runtime adds for the toolkit (deb822_repository writes
# /etc/apt/sources.list.d/<name>.sources): where it exists, the toolkit installed is the role's own.
TOOLKIT_REPO_NAME = "gpucluster-nvidia-container-toolkit"
DOCA_REPO_URL = "https://linux.mellanox.com/public/repo/doca"
KUBERNETES_REPO_URL = "https://pkgs.k8s.io/core:/stable:"
# DCGM 4 from NVIDIA's CUDA repository: `datacenter-gpu-manager-4-core` (nv-hostengine and the
# CUDA-agnostic assets) plus `datacenter-gpu-manager-4-cuda<major>` for the node's CUDA major
# (https://docs.nvidia.com/datacenter/dcgm/latest/installation.html; the DCGM 4.0 release notes'
# package split, https://docs.nvidia.com/datacenter/dcgm/latest/release-notes/changelog.html, quoted in
# https://github.com/aws/aws-parallelcluster-cookbook/pull/2998). The packages' versions carry epoch 1
# ("Version: 1:3.3.6" in https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/Packages;
# "1:4.5.2-1" for datacenter-gpu-manager-4-core in https://github.com/Azure/AgentBaker/pull/7971).
DCGM_CORE_PACKAGE = "datacenter-gpu-manager-4-core"
DCGM_CUDA_PACKAGE = "datacenter-gpu-manager-4-cuda{major}"
DCGM_EPOCH = "1"
# The host engine's unit: "A typical DCGM installation runs nv-hostengine as nvidia-dcgm.service"
# (https://docs.nvidia.com/datacenter/dcgm/latest/learn/getting-started-for-system-administrators/systemd-service.html).
DCGM_SERVICE = "nvidia-dcgm"
# Where that host engine listens: "With no options, it daemonizes and opens a TCP listener on
# 127.0.0.1:5555" (https://docs.nvidia.com/datacenter/dcgm/latest/reference/command-line-reference/nv-hostengine.html).
# A dcgm-exporter on the node connects to it instead of starting one of its own: "Without
# --remote-hostengine-info, the exporter initializes an embedded DCGM host engine inside its process"
# (https://docs.nvidia.com/datacenter/dcgm/latest/reference/command-line-reference/dcgm-exporter.html).
# The monitoring role's exporter passes it as --remote-hostengine-info; the GPU Operator's as
# DCGM_REMOTE_HOSTENGINE_INFO, and the Operator runs its exporter on the host's network where that value
# starts with "localhost" ("case for DCGM running on the host itself", TransformDCGMExporter in
# NVIDIA/gpu-operator controllers/object_controls.go at v25.3.2, commit 616690d88d86bb4e88897b6775dfe76a6c15c741).
DCGM_HOSTENGINE = "localhost:5555"
# NVSwitch Configuration and Query library, "used by DCGM for monitoring NVSwitch devices";
# libnvidia-nscq-<branch>, "the version of libnvidia-nscq must match the NVIDIA driver installed"
# (https://github.com/NVIDIA/apt-packaging-libnvidia-nscq; e.g. libnvidia-nscq-570 570.172.08,
# https://packages.ubuntu.com/ja/questing/libs/libnvidia-nscq-570).
NSCQ_PACKAGE = "libnvidia-nscq-{branch}"
# The containerd packages an image may carry in place of the OS archive's `containerd`, each with the
# packages of its family that go with it when the role replaces it (those installed, in this order).
# Installing the archive's `containerd` over either makes apt remove it, and what depends on it:
# - moby-containerd (Microsoft's Moby, what Azure's HPC images install with moby-engine): Debian
#   package "Conflicts: containerd, containerd.io, moby-engine (<= 3.0.12)", "Replaces: containerd,
#   containerd.io", "Provides: containerd, containerd.io", "Depends: moby-runc (>= 1.0.2)"
#   (Azure/moby-packaging moby-containerd/package.yml and mapping.go); moby-engine depends on it:
#   "moby-containerd (>= 1.4.3)", "moby-runc (>= 1.0.2)", "moby-tini (>= 0.19.0)" (moby-engine/mapping.go
#   at 0bfc1fc19cbbec4df8746802bd127782adfaeb66). AKS's own node setup removes the same packages with
#   `apt_get_purge moby-engine moby-cli` and `apt_get_purge moby-containerd` (Azure/AgentBaker
#   cse_install_ubuntu.sh, removeMoby/removeContainerd).
# - containerd.io (Docker's): "Provides: containerd, runc", "Conflicts: containerd, runc", "Replaces:
#   containerd, runc" (docker/containerd-packaging debian/control at 0e59ba52e2f6b9c446cee09158d2b1fa26493944);
#   docker-ce "Depends: containerd.io (>= 1.7.27), docker-ce-cli" (docker/docker-ce-packaging
#   deb/common/control at 01a9b285e6bcf488fd587046931d574919371bd7).
IMAGE_CONTAINERD: dict[str, tuple[str, ...]] = {
    "moby-containerd": ("moby-engine", "moby-cli", "moby-containerd", "moby-runc"),
    "containerd.io": ("docker-ce", "docker-ce-cli", "containerd.io"),
}
# The NVIDIA container toolkit's Debian packages, as NVIDIA's repository ships them (1.18.x):
# nvidia-container-toolkit "Depends: nvidia-container-toolkit-base (= ${binary:Version}),
# libnvidia-container-tools (>= ${libnvidia-container-tools-version}), libnvidia-container-tools (<< 2.0.0)"
# (NVIDIA/nvidia-container-toolkit packaging/debian/control), and libnvidia-container-tools depends on
# libnvidia-container1 (NVIDIA/libnvidia-container pkg/deb/control); the four are released at one version.
# The first two are the toolkit itself: the image's toolkit is what dpkg has of them, and the lowest of
# the four installed is its version. An image may ship them newer than the pin (AWS's DLAMI states
# nvidia_container_toolkit_version; Azure's HPC recipe installs the newest and holds it,
# azhpc-images components/install_nvidia_container_toolkit.sh): installing the pin would be a
# downgrade apt refuses, so the role adopts it (preinstalled_action, component "container-toolkit").
TOOLKIT_PACKAGES = ("nvidia-container-toolkit", "nvidia-container-toolkit-base")
IMAGE_TOOLKIT_PACKAGES = (*TOOLKIT_PACKAGES, "libnvidia-container-tools", "libnvidia-container1")


@dataclass(frozen=True)
class OsTraits:
    """What differs between the supported OS releases, beyond the BOM's id/version/codename."""

    # NVIDIA's CUDA repository folder (https://developer.download.nvidia.com/compute/cuda/repos/).
    nvidia_repo_dist: str
    # DOCA-OFED's repository folder (<DOCA_REPO_URL>/<version>/<folder>/<arch>/); None: not offered here.
    doca_dist: str | None
    # Debian's non-free NVIDIA driver and CUDA toolkit exist on Debian only.
    distro_nvidia: bool


OS_TRAITS: dict[str, OsTraits] = {
    "ubuntu-22.04": OsTraits(nvidia_repo_dist="ubuntu2204", doca_dist="ubuntu22.04", distro_nvidia=False),
    "ubuntu-24.04": OsTraits(nvidia_repo_dist="ubuntu2404", doca_dist="ubuntu24.04", distro_nvidia=False),
    "debian-12": OsTraits(nvidia_repo_dist="debian12", doca_dist=None, distro_nvidia=True),
}


def cuda_major(bom: Bom) -> str:
    """The BOM's CUDA major version ("12.8.1" -> "12"): which DCGM CUDA package a node gets."""
    major = str(bom.cuda.version).split(".", 1)[0]
    if not major.isdigit():
        raise ValueError(f"cuda.version: {bom.cuda.version!r} does not start with a major version number")
    return major


def _release(bom: Bom, os_id: str) -> _OsRelease:
    release = next((rel for key, rel in bom.os.items() if key == os_id), None)
    if release is None or os_id not in OS_TRAITS:
        known = ", ".join(sorted(OS_TRAITS))
        raise ValueError(f"gpucluster_os: {os_id!r} is not a supported OS (one of {known}); "
                         "set target.os or node_pools[].os in the stack file and run `gpucluster inventory`")
    return release


def _repo(name: str, uri: str, suites: Sequence[str], signed_by: str,
          components: Sequence[str] = ()) -> dict[str, Any]:
    return {"name": name, "uris": [uri], "suites": list(suites), "components": list(components),
            "signed_by": signed_by}


def _deb_arch(arch: str) -> str:
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(arch, arch)


def _nvidia_arch(arch: str) -> str:
    return "sbsa" if arch == "aarch64" else "x86_64"


def kernel_hold(os_id: str, kernel: str, arch: str) -> list[str]:
    """The running kernel's packages and the meta packages that would pull a newer one (held, so
    DKMS modules keep matching the kernel they were built for)."""
    if os_id.startswith("ubuntu"):
        # 6.8.0-1015-aws -> flavour aws; 5.15.0-119-generic -> generic; 6.8.0-1015-nvidia-64k ->
        # nvidia-64k (Grace: everything after the ABI number).
        m = re.match(r"^\d+\.\d+\.\d+-\d+-(.+)$", kernel)
        flavour = m.group(1) if m else (kernel.rsplit("-", 1)[-1] if "-" in kernel else "generic")
        release = os_id.removeprefix("ubuntu-")
        metas = [f"linux-{flavour}", f"linux-image-{flavour}", f"linux-headers-{flavour}"]
        # The hardware enablement stack's metas move an LTS to the next release's kernel
        # (linux-generic-hwe-22.04, linux-image-generic-hwe-22.04, ...: "LTS Enablement Stacks",
        # https://wiki.ubuntu.com/Kernel/LTSEnablementStack), and the cloud kernels' -lts- ones
        # keep the GA line (linux-aws-lts-22.04); whichever the image installed is held.
        return [f"linux-image-{kernel}", f"linux-headers-{kernel}", *metas,
                *(f"{m}-hwe-{release}" for m in metas), *(f"{m}-lts-{release}" for m in metas)]
    return [f"linux-image-{kernel}", f"linux-headers-{kernel}", f"linux-image-{_deb_arch(arch)}",
            f"linux-headers-{_deb_arch(arch)}"]


def ceph_release(bom: Bom, os_id: str, source: str) -> dict[str, str]:
    """The Ceph release and version a node of ``os_id`` installs from ``source`` (upstream | distro)."""
    ceph = bom.ceph
    if source == "upstream":
        return {"release": ceph.release, "version": ceph.version}
    distro = next((rel for key, rel in ceph.distro.items() if key == os_id), None)
    if distro is None:
        raise ValueError(f"ceph.distro: the bill of materials names no {os_id} archive Ceph; "
                         "this OS installs Ceph from download.ceph.com (ceph source upstream)")
    return {"release": distro.release, "version": distro.version}


def os_packages(os_id: str, role: str, bom: Bom, kernel: str = "", arch: str = "x86_64",
                ceph_source: str = "upstream", ceph_mirror_url: str = "",
                names: Sequence[str] | None = None) -> dict[str, Any]:
    """One role's repositories, pinned packages, kernel headers and held kernel packages on ``os_id``.

    ``names`` replaces the role's default package names where the role computes them (Ceph's
    per-host daemons); versions are pinned from the BOM either way.
    """
    rel = _release(bom, os_id)
    traits = OS_TRAITS[os_id]
    if role not in ROLES:
        raise ValueError(f"os_packages: no table for role {role!r} (one of {', '.join(ROLES)})")
    cuda_uri = f"{CUDA_REPO_URL}/{traits.nvidia_repo_dist}/{_nvidia_arch(arch)}/"
    cuda_repo = _repo("gpucluster-cuda", cuda_uri, ["/"], f"{cuda_uri}{CUDA_REPO_KEY_ID}.pub")
    out: dict[str, Any] = {
        "os": {"id": rel.id, "version_id": rel.version_id, "codename": rel.codename},
        "repositories": [],
        "packages": [],
        "kernel_headers": [f"linux-headers-{kernel}"] if kernel else [],
        "kernel_hold": kernel_hold(os_id, kernel, arch) if kernel else [],
        "nvidia_repo_dist": traits.nvidia_repo_dist,
    }
    if role == "nvidia_cuda_repo":
        # The one role that adds NVIDIA's CUDA repository, for nvidia_driver, cuda_toolkit, nccl and
        # gpu_validation (DCGM): they install from it and list no repository of their own.
        out["repositories"] = [cuda_repo]
    elif role == "common":
        # The common role owns the kernel: it holds out["kernel_hold"] (common_kernel_hold_enabled).
        out["packages"] = list(names or ("chrony", "nftables", "openssh-server"))
    elif role == "nvidia_driver":
        drv = bom.nvidia_driver
        out["packages"] = [f"nvidia-open-{drv.branch}={drv.version}-*", "dkms", *out["kernel_headers"]]
        out["distro_method"] = traits.distro_nvidia
        out["distro_version"] = drv.debian_version if traits.distro_nvidia else None
    elif role == "cuda_toolkit":
        cuda = bom.cuda
        out["packages"] = [f"cuda-toolkit-{cuda.package_suffix}={cuda.version}-*"]
        out["distro_method"] = traits.distro_nvidia
    elif role == "nccl":
        nccl = bom.nccl
        pin = f"{nccl.version}-1+cuda{nccl.cuda_build}"
        out["packages"] = [f"libnccl2={pin}", f"libnccl-dev={pin}"]
    elif role == "gpu_validation":
        # DCGM 4 splits into a CUDA-agnostic core (nv-hostengine, dcgmi) and one package per CUDA
        # major (the diagnostic's CUDA plugins); the major is the BOM's CUDA, the one the driver
        # branch serves. Both carry the epoch DCGM_EPOCH. NSCQ is for NVSwitch systems only; its
        # branch and version are the driver's.
        dcgm = f"{DCGM_EPOCH}:{bom.dcgm.version}-*"
        drv = bom.nvidia_driver
        out["dcgm_packages"] = [f"{DCGM_CORE_PACKAGE}={dcgm}",
                                f"{DCGM_CUDA_PACKAGE.format(major=cuda_major(bom))}={dcgm}"]
        out["nscq_packages"] = [f"{NSCQ_PACKAGE.format(branch=drv.branch)}={drv.version}-*"]
        out["dcgm_service"] = DCGM_SERVICE
        out["packages"] = [*out["dcgm_packages"], *out["nscq_packages"]]
    elif role == "container_runtime":
        v = bom.container_toolkit.version
        out["repositories"] = [_repo(TOOLKIT_REPO_NAME, f"{TOOLKIT_REPO_URL}/$(ARCH)", ["/"],
                                     TOOLKIT_REPO_URL.removesuffix("/stable/deb") + "/gpgkey")]
        # containerd from the OS archive (Debian 12 and both Ubuntu releases name it `containerd`).
        out["runtime_packages"] = list(names or ("containerd",))
        # What counts as the image's containerd (IMAGE_CONTAINERD): the role's probe asks dpkg for
        # exactly these, and replaces the installed ones of a family below the floor.
        out["image_runtimes"] = {name: list(family) for name, family in IMAGE_CONTAINERD.items()}
        out["image_runtime_packages"] = sorted({p for family in IMAGE_CONTAINERD.values() for p in family})
        out["toolkit_repo_url"] = TOOLKIT_REPO_URL
        out["toolkit_repo_name"] = TOOLKIT_REPO_NAME
        # What counts as the image's toolkit (IMAGE_TOOLKIT_PACKAGES): the same probe asks dpkg for these.
        out["image_toolkit_packages"] = list(IMAGE_TOOLKIT_PACKAGES)
        out["toolkit_packages"] = [f"{name}={v}-*" for name in TOOLKIT_PACKAGES]
        out["packages"] = [*out["runtime_packages"], *out["toolkit_packages"]]
    elif role == "rdma_fabric":
        out["packages"] = list(names or ("rdma-core", "ibverbs-providers", "ibverbs-utils", "perftest",
                                         "infiniband-diags", "iproute2"))
        doca = bom.doca_ofed.version
        out["doca_version"] = doca
        out["doca_dist"] = traits.doca_dist
        if traits.doca_dist and doca:
            uri = f"{DOCA_REPO_URL}/{doca}/{traits.doca_dist}/{_nvidia_arch(arch).replace('sbsa', 'arm64-sbsa')}/"
            # The key sits at the repository's root for every version (DOCA-Host guide, "Upgrading
            # Software on Host": https://docs.nvidia.com/doca/sdk/DOCA-Host+Installation+and+Upgrade).
            out["doca_repositories"] = [_repo("gpucluster-doca", uri, ["./"], f"{DOCA_REPO_URL}/GPG-KEY-Mellanox.pub")]
        else:
            out["doca_repositories"] = []
    elif role == "monitoring":
        out["packages"] = ["prometheus-node-exporter"]
        out["dcgm_hostengine"] = DCGM_HOSTENGINE
    elif role == "kubernetes_node":
        kube = bom.kubernetes
        uri = f"{KUBERNETES_REPO_URL}/v{kube.minor}/deb/"
        # pkgs.k8s.io: one repository per minor, the same line on every OS
        # (https://kubernetes.io/docs/setup/production-environment/tools/kubeadm/install-kubeadm/).
        out["repositories"] = [_repo("gpucluster-kubernetes", uri, ["/"], f"{uri}Release.key")]
        out["hold"] = ["kubelet", "kubeadm", "kubectl"]
        out["packages"] = [*(f"{p}={kube.version}-*" for p in out["hold"]), "cri-tools", "kubernetes-cni"]
        # What kubeadm's preflight and kube-proxy need, from the OS archive.
        out["prerequisites"] = list(names or ("conntrack", "socat", "ebtables", "ethtool", "iptables", "ipset",
                                              "curl", "ca-certificates"))
    elif role == "kubernetes_control_plane":
        # The API server's virtual IP with more than one control-plane node.
        out["packages"] = ["keepalived"]
    elif role == "ceph_common":
        ceph = ceph_release(bom, os_id, ceph_source)
        mirror = (ceph_mirror_url or bom.ceph.mirror_url).rstrip("/")
        if ceph_source == "upstream":
            out["repositories"] = [_repo("gpucluster-ceph", f"{mirror}/debian-{ceph['release']}/", [rel.codename],
                                         f"{mirror}/keys/release.asc", ["main"])]
        out["ceph"] = {"source": ceph_source, **ceph}
        out["packages"] = [f"{n}={ceph['version']}*" for n in (names or ("ceph-common",))]
    return out


# --- components the image may already ship ------------------------------------------------------

ACTIONS = ("install", "adopt", "replace", "fail")


# Components whose bill-of-materials entry is a floor, not a pin: the image's is adopted where it is
# at least the floor (Debian's version order), since the role configures it and installs nothing.
FLOOR_COMPONENTS = ("containerd",)
# Components whose pin the role installs, but whose image version is adopted where it is at least the
# pin: installing an older pin over it is a downgrade apt refuses (and the image may hold the package).
# Below the pin the image's is upgraded to the pin in place (adopt_or_replace) or the run stops.
AT_LEAST_COMPONENTS = ("container-toolkit",)


def _order(c: str) -> int:
    """dpkg's weight of one character of a non-digit run: '~' first, then the end, letters, the rest."""
    if c == "~":
        return -1
    if c.isalpha():
        return ord(c)
    return ord(c) + 256


def _compare_part(a: str, b: str) -> int:
    """dpkg's verrevcmp over an upstream version or a revision: non-digit runs, then numbers."""
    i = j = 0
    while i < len(a) or j < len(b):
        first_diff = 0
        while (i < len(a) and not a[i].isdigit()) or (j < len(b) and not b[j].isdigit()):
            ac = _order(a[i]) if i < len(a) and not a[i].isdigit() else 0
            bc = _order(b[j]) if j < len(b) and not b[j].isdigit() else 0
            if ac != bc:
                return -1 if ac < bc else 1
            i, j = i + 1, j + 1
        while i < len(a) and a[i] == "0":
            i += 1
        while j < len(b) and b[j] == "0":
            j += 1
        while i < len(a) and a[i].isdigit() and j < len(b) and b[j].isdigit():
            if not first_diff:
                first_diff = ord(a[i]) - ord(b[j])
            i, j = i + 1, j + 1
        if i < len(a) and a[i].isdigit():
            return 1
        if j < len(b) and b[j].isdigit():
            return -1
        if first_diff:
            return -1 if first_diff < 0 else 1
    return 0


def deb_version_compare(a: str, b: str) -> int:
    """-1, 0 or 1 as Debian version ``a`` sorts before, with or after ``b`` (``dpkg --compare-versions``:
    epoch, then upstream version, then revision; https://www.debian.org/doc/debian-policy/ch-controlfields.html#version)."""
    def split(v: str) -> tuple[int, str, str]:
        epoch, _, rest = v.partition(":") if ":" in v else ("0", "", v)
        upstream, _, revision = rest.rpartition("-") if "-" in rest else (rest, "", "")
        return int(epoch or 0), upstream, revision

    ea, ua, ra = split(a.strip())
    eb, ub, rb = split(b.strip())
    if ea != eb:
        return -1 if ea < eb else 1
    return _compare_part(ua, ub) or _compare_part(ra, rb)


def version_matches(found: str, pin: str) -> bool:
    """``found`` is the pin, or the pin with a package revision (570.172.08-1, 2.27.3-1+cuda12.8)."""
    found = found.split(":", 1)[-1]
    return found == pin or (found.startswith(pin) and found[len(pin):len(pin) + 1] in ("-", "+", "~"))


def preinstalled_action(component: str, pin: str, found: str, runfile: bool, policy: str,
                        method: str = "package", floor: bool = False, package: str = "",
                        removes: Sequence[str] = (), own: bool = False) -> dict[str, str]:
    """What a role does with ``component`` found at ``found`` ('' if absent), given the pin and policy.

    ``runfile``: the component was installed by NVIDIA's .run installer (/usr/bin/nvidia-uninstall
    or /var/log/nvidia-installer.log), whose files packages would overwrite without owning them.
    ``method``: how the role installs it (``package`` or ``runfile``).
    ``floor``: ``pin`` is the lowest version adopted (FLOOR_COMPONENTS), not the one version; then
    ``package`` names the image's package found at ``found`` and ``removes`` the packages a replace
    removes before the role installs its own.
    A component of AT_LEAST_COMPONENTS (the container toolkit) is adopted at the pin or above; ``own``:
    what is installed came from the role's own repository (an earlier converge), so below the pin it is
    upgraded to it whatever the policy, as before the image's toolkit was told apart.
    """
    if policy not in ("adopt_or_replace", "adopt_or_fail"):
        raise ValueError(f"preinstalled: {policy!r} is not adopt_or_replace or adopt_or_fail")
    if floor:
        return _floor_action(component, pin, found, policy, package, removes)
    if component in AT_LEAST_COMPONENTS:
        return _at_least_action(component, pin, found, policy, package, own)
    if not found and not runfile:
        return {"action": "install", "message": f"{component}: none installed, installing {pin}"}
    if found and version_matches(found, pin):
        how = " (runfile install)" if runfile else ""
        return {"action": "adopt", "message": f"{component}: {found}{how} equals the pin {pin}, adopted"}
    shown = found or "an unknown version"
    if runfile and method != "runfile":
        return {"action": "fail", "message": (
            f"{component}: {shown} was installed by NVIDIA's runfile and differs from the pin {pin}; "
            "packages are never layered over a runfile install. Run /usr/bin/nvidia-uninstall on the node, "
            "or install by runfile (nvidia_driver_install_method: runfile), then converge again")}
    return _replace_or_fail(
        policy, f"{component}: {shown} differs from the pin {pin}, replacing it (preinstalled: adopt_or_replace)",
        f"{component}: the image ships {shown}, the bill of materials pins {pin} and the pool's policy is "
        "preinstalled: adopt_or_fail. Pin the image's version in a bill-of-materials overlay (the stack's "
        "gpucluster:bom), boot an image that ships the pin, or set the pool's preinstalled: adopt_or_replace "
        "to replace it")


def _replace_or_fail(policy: str, replace: str, fail: str) -> dict[str, str]:
    """What the pool's policy does with what the image ships and the role does not adopt."""
    if policy == "adopt_or_replace":
        return {"action": "replace", "message": replace}
    return {"action": "fail", "message": fail}


def _floor_action(component: str, floor: str, found: str, policy: str, package: str,
                  removes: Sequence[str]) -> dict[str, str]:
    if not found:
        return {"action": "install", "message": f"{component}: the image ships none of its own, installing the "
                                                f"bill of materials' (floor {floor})"}
    what = f"{package} {found}" if package else found
    if deb_version_compare(found, floor) >= 0:
        return {"action": "adopt", "message": f"{component}: the image's {what} meets the floor {floor}, adopted: "
                                              "configured in place, not replaced"}
    gone = ", ".join(removes or ([package] if package else []))
    return _replace_or_fail(
        policy,
        f"{component}: the image's {what} is below the floor {floor}, replacing it (preinstalled: "
        f"adopt_or_replace): removing {gone}, then installing the bill of materials' {component}",
        f"{component}: the image ships {what}, below the bill of materials' {component} floor {floor}, and "
        "the pool's policy is preinstalled: adopt_or_fail. Two ways out: lower the floor in a "
        f'bill-of-materials overlay (the stack\'s gpucluster:bom holding {component}: {{floor: "{found}"}}), '
        f"or set the pool's preinstalled: adopt_or_replace to remove {gone} and install the bill of "
        f"materials' {component}")


def upstream_version(version: str) -> str:
    """A Debian version without its epoch and revision ("1:1.18.1-1" -> "1.18.1"): what the bill of
    materials pins, the repository's package revision added by the role (``=<pin>-*``)."""
    rest = version.split(":", 1)[-1]
    return rest.rpartition("-")[0] if "-" in rest else rest


def _at_least_action(component: str, pin: str, found: str, policy: str, package: str,
                     own: bool) -> dict[str, str]:
    if not found:
        return {"action": "install", "message": f"{component}: none installed, installing {pin}"}
    what = f"{package} {found}" if package else found
    if deb_version_compare(found, pin) >= 0:
        whose = "the role's" if own else "the image's"
        return {"action": "adopt", "message": f"{component}: {whose} {what} is at or above the pin {pin}, adopted: "
                                              "nothing installed over it, never downgraded"}
    if own:
        return {"action": "install", "message": f"{component}: {what} from the role's repository is below the pin "
                                                f"{pin}, upgrading it to the pin"}
    return _replace_or_fail(
        policy,
        f"{component}: the image's {what} is below the pin {pin}, upgrading it to the pin in place "
        "(preinstalled: adopt_or_replace)",
        f"{component}: the image ships {what}, below the bill of materials' pin {pin}, and the pool's policy is "
        "preinstalled: adopt_or_fail (container_runtime_preinstalled). Pin the image's version in a "
        "bill-of-materials overlay (the stack's gpucluster:bom holding container_toolkit: "
        f'{{version: "{upstream_version(found)}"}}), boot an image that ships {pin} or later, or set the pool\'s '
        "preinstalled: adopt_or_replace to upgrade it to the pin")


# --- what the image ships: one probe's outputs read into versions -------------------------------

# The EFA installer records itself here ("# EFA installer version: <v>" then the packages it
# installed; efa_installer.sh, write_package_file) and puts libfabric under /opt/amazon/efa.
# https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-start.html
EFA_INSTALLED_PACKAGES = "/opt/amazon/efa_installed_packages"
EFA_PREFIX = "/opt/amazon/efa"
_EFA_VERSION = re.compile(r"^# EFA installer version: ([0-9][0-9A-Za-z.+~-]*)\s*$", re.MULTILINE)
# `ofed_info -s`: "MLNX_OFED_LINUX-23.10-1.1.9.0:" (MLNX_OFED) or "OFED-internal-23.07-0.5.0:"
# (DOCA-Host's OFED); the version is what follows the prefix, without the colon.
_OFED_VERSION = re.compile(r"^(?:MLNX_OFED_LINUX|OFED-internal)-([0-9][0-9A-Za-z.-]*?):?$")
PREINSTALLED_COMPONENTS = ("nvidia-driver", "efa", "ofed", "containerd", "container-toolkit")


def efa_installer_version(installed_packages: str) -> str:
    """The EFA installer's version from /opt/amazon/efa_installed_packages ('' when absent)."""
    found = _EFA_VERSION.search(installed_packages)
    return found.group(1) if found else ""


def ofed_version(ofed_info_s: str) -> str:
    """The OFED version from ``ofed_info -s`` ('' when the tool is absent or says something else)."""
    lines = [line.strip() for line in ofed_info_s.splitlines() if line.strip()]
    found = _OFED_VERSION.match(lines[0]) if lines else None
    return found.group(1) if found else ""


def detect_preinstalled(probe: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """What the image ships, per component, from one probe's raw outputs.

    ``probe`` keys (each optional; absent or empty means not found):
    ``driver_module`` (/sys/module/nvidia/version), ``driver_package`` (dpkg's version),
    ``driver_runfile`` (NVIDIA's uninstaller or installer log exists),
    ``efa_installed_packages`` (the text of /opt/amazon/efa_installed_packages),
    ``efa_prefix`` (/opt/amazon/efa exists), ``ofed_info`` (the output of ``ofed_info -s``),
    ``containerd_packages`` (``dpkg-query -W -f '${Package}\\t${db:Status-Abbrev}\\t${Version}\\n'`` over
    the IMAGE_CONTAINERD families), ``toolkit_packages`` (the same over IMAGE_TOOLKIT_PACKAGES; one
    dpkg-query may answer both), ``toolkit_repository`` (the role's own toolkit repository exists).
    Returns ``{component: {"found": version or "", "present": bool, "runfile": bool}}``; an EFA
    prefix without the installer's record is present at an unknown version (``found`` ''). The
    containerd entry also names the image's ``package`` and what a replace ``removes``; the
    container-toolkit entry its ``package`` and whether it is the role's ``own``.
    """
    driver = str(probe.get("driver_module") or "").strip() or str(probe.get("driver_package") or "").strip()
    driver = driver.split(":", 1)[-1]
    runfile = bool(probe.get("driver_runfile"))
    efa = efa_installer_version(str(probe.get("efa_installed_packages") or ""))
    ofed = ofed_version(str(probe.get("ofed_info") or ""))
    return {
        "nvidia-driver": {"found": driver, "present": bool(driver) or runfile, "runfile": runfile},
        "efa": {"found": efa, "present": bool(efa) or bool(probe.get("efa_prefix")), "runfile": False},
        "ofed": {"found": ofed, "present": bool(ofed), "runfile": False},
        "containerd": image_containerd(str(probe.get("containerd_packages") or "")),
        "container-toolkit": image_toolkit(str(probe.get("toolkit_packages") or ""),
                                           bool(probe.get("toolkit_repository"))),
    }


def _dpkg_installed(dpkg_query: str) -> dict[str, str]:
    """Package -> version from ``${Package}\\t${db:Status-Abbrev}\\t${Version}`` lines, for the installed
    ones: dpkg's state (the status' second letter) is ``i`` (``ii``, ``hi`` held); ``rc``, ``un`` are not."""
    installed: dict[str, str] = {}
    for line in dpkg_query.splitlines():
        fields = line.split("\t")
        if len(fields) == 3 and len(fields[1]) >= 2 and fields[1][1] == "i" and fields[2].strip():
            installed[fields[0].strip()] = fields[2].strip()
    return installed


def image_toolkit(dpkg_query: str, own: bool = False) -> dict[str, Any]:
    """The NVIDIA container toolkit dpkg has installed (TOOLKIT_PACKAGES), from dpkg-query's lines:
    ``found`` is the lowest version of IMAGE_TOOLKIT_PACKAGES installed (its libnvidia-container pieces
    included), ``package`` the toolkit package found; libnvidia-container alone is no toolkit.
    ``own``: the role's repository exists, so the toolkit is the role's, not the image's."""
    installed = {name: version for name, version in _dpkg_installed(dpkg_query).items()
                 if name in IMAGE_TOOLKIT_PACKAGES}
    package = next((name for name in TOOLKIT_PACKAGES if name in installed), "")
    if not package:
        return {"found": "", "present": False, "runfile": False, "package": "", "own": own}
    lowest = installed[package]
    for version in installed.values():
        if deb_version_compare(version, lowest) < 0:
            lowest = version
    return {"found": lowest, "present": True, "runfile": False, "package": package, "own": own}


def image_containerd(dpkg_query: str) -> dict[str, Any]:
    """The image's own containerd (IMAGE_CONTAINERD) from dpkg-query's lines, and what a replace
    removes: the installed packages of its family. Packages dpkg knows but has removed (status
    ``rc``, ``un``) are not installed."""
    installed = _dpkg_installed(dpkg_query)
    for package, family in IMAGE_CONTAINERD.items():
        if package in installed:
            return {"found": installed[package], "present": True, "runfile": False, "package": package,
                    "removes": [p for p in family if p in installed]}
    return {"found": "", "present": False, "runfile": False, "package": "", "removes": []}


def preinstalled_plan(probe: Mapping[str, Any], pins: Mapping[str, str], policy: str) -> dict[str, dict[str, str]]:
    """:func:`preinstalled_action` for every component the pool pins (``pins``: component -> version)."""
    unknown = sorted(set(pins) - set(PREINSTALLED_COMPONENTS))
    if unknown:
        raise ValueError(f"preinstalled: no detection for {', '.join(unknown)} "
                         f"(one of {', '.join(PREINSTALLED_COMPONENTS)})")
    found = detect_preinstalled(probe)
    out = {}
    for component, pin in pins.items():
        seen = found[component]
        # Present at an unknown version (an EFA prefix without the installer's record) is not "none".
        version = seen["found"] or ("unknown" if seen["present"] else "")
        if component in FLOOR_COMPONENTS:
            out[component] = {**preinstalled_action(component, pin, seen["found"], False, policy, floor=True,
                                                    package=seen["package"], removes=seen["removes"]),
                              "package": seen["package"], "found": seen["found"], "removes": list(seen["removes"])}
        elif component in AT_LEAST_COMPONENTS:
            out[component] = {**preinstalled_action(component, pin, seen["found"], False, policy,
                                                    package=seen["package"], own=seen["own"]),
                              "package": seen["package"], "found": seen["found"], "own": seen["own"]}
        else:
            out[component] = preinstalled_action(component, pin, version, seen["runfile"], policy)
    return out
