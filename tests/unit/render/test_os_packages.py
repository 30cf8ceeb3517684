"""The per-role OS table: every (target, OS) pair resolves every role, with the BOM's versions."""

from __future__ import annotations

import functools
import re
import typing
from pathlib import Path

import pytest

from gpucluster.render.os_packages import (
    IMAGE_CONTAINERD,
    OS_TRAITS,
    ROLES,
    ceph_release,
    deb_version_compare,
    detect_preinstalled,
    efa_installer_version,
    image_containerd,
    image_toolkit,
    kernel_hold,
    ofed_version,
    os_packages,
    preinstalled_action,
    preinstalled_plan,
    upstream_version,
    version_matches,
)
from gpucluster.spec import load_bom
from gpucluster.spec.models import OS_IDS, TARGET_KINDS, AwsTarget, AzureTarget, BaremetalTarget, LabTarget, OciTarget
from tests.unit.example_outputs import example_outputs

# Ansible's import asks ldconfig for a library (ansible.utils.display): done here, at collection,
# so that no in-process test below starts that process, whichever tests a worker ran before.
from tests.unit.roles.render import FACTS, REPO, host_context, role_vars

BOM_MODEL = load_bom()
BOM = BOM_MODEL.model_dump(by_alias=True)
TARGET_CLASSES = {"lab": LabTarget, "aws": AwsTarget, "azure": AzureTarget, "oci": OciTarget,
                  "baremetal": BaremetalTarget}


def _target_oses(kind: str) -> tuple[str, ...]:
    """The OS values the target's `os` field accepts (from the model itself, not a copy)."""
    return typing.get_args(TARGET_CLASSES[kind].model_fields["os"].annotation)


PAIRS = [(kind, os_id) for kind in TARGET_KINDS for os_id in _target_oses(kind)]


def test_pairs_cover_every_os_and_target() -> None:
    assert {k for k, _ in PAIRS} == set(TARGET_KINDS)
    assert {o for _, o in PAIRS} == set(OS_IDS) == set(OS_TRAITS) == set(BOM["os"])


# What a pinned package's version must equal, per BOM entry.
def _expected_pins() -> dict[str, str]:
    nccl = f"{BOM['nccl']['version']}-1+cuda{BOM['nccl']['cuda_build']}"
    return {
        f"cuda-toolkit-{BOM['cuda']['package_suffix']}": f"{BOM['cuda']['version']}-*",
        "libnccl2": nccl,
        "libnccl-dev": nccl,
        # DCGM's packages carry epoch 1; the CUDA package is the BOM's CUDA major; NSCQ is the driver's.
        "datacenter-gpu-manager-4-core": f"1:{BOM['dcgm']['version']}-*",
        f"datacenter-gpu-manager-4-cuda{BOM['cuda']['version'].split('.')[0]}": f"1:{BOM['dcgm']['version']}-*",
        f"libnvidia-nscq-{BOM['nvidia_driver']['branch']}": f"{BOM['nvidia_driver']['version']}-*",
        "nvidia-container-toolkit": f"{BOM['container_toolkit']['version']}-*",
        "nvidia-container-toolkit-base": f"{BOM['container_toolkit']['version']}-*",
        f"nvidia-open-{BOM['nvidia_driver']['branch']}": f"{BOM['nvidia_driver']['version']}-*",
        "kubelet": f"{BOM['kubernetes']['version']}-*",
        "kubeadm": f"{BOM['kubernetes']['version']}-*",
        "kubectl": f"{BOM['kubernetes']['version']}-*",
    }


@pytest.mark.parametrize(("kind", "os_id"), PAIRS)
@pytest.mark.parametrize("role", ROLES)
def test_every_role_resolves_with_the_boms_versions(kind: str, os_id: str, role: str) -> None:
    source = "distro" if kind == "lab" else "upstream"
    out = os_packages(os_id, role, BOM_MODEL, kernel="6.1.0-28-amd64", ceph_source=source,
                      names=["ceph-common", "ceph-mon"] if role == "ceph_common" else None)
    rel = BOM["os"][os_id]
    assert out["os"] == {"id": rel["id"], "version_id": rel["version_id"], "codename": rel["codename"]}
    assert out["kernel_headers"] == ["linux-headers-6.1.0-28-amd64"]
    pins = _expected_pins()
    for pkg in out["packages"]:
        name, _, version = pkg.partition("=")
        assert re.fullmatch(r"[a-z0-9][a-z0-9.+-]*", name), pkg
        if role == "ceph_common":
            assert version == ceph_release(BOM_MODEL, os_id, source)["version"] + "*", pkg
        elif version:
            assert pins[name] == version, f"{pkg}: the BOM pins {name} at {pins[name]}"
    for repo in out["repositories"] + out.get("doca_repositories", []):
        assert all(u.startswith("https://") for u in repo["uris"]), repo
        assert repo["signed_by"].startswith("https://"), repo
    if role == "nvidia_cuda_repo":
        assert out["repositories"][0]["uris"] == [
            f"https://developer.download.nvidia.com/compute/cuda/repos/{OS_TRAITS[os_id].nvidia_repo_dist}/x86_64/"]
    elif role in ("nvidia_driver", "cuda_toolkit", "nccl", "gpu_validation"):
        # They install from NVIDIA's CUDA repository, which nvidia_cuda_repo alone adds.
        assert out["repositories"] == []


@pytest.mark.parametrize("os_id", ["ubuntu-22.04", "ubuntu-24.04", "debian-12"])
def test_upstream_ceph_is_the_boms_release_for_the_os_codename(os_id: str) -> None:
    out = os_packages(os_id, "ceph_common", BOM_MODEL, ceph_source="upstream")
    codename = BOM["os"][os_id]["codename"]
    assert out["ceph"] == {"source": "upstream", "release": BOM["ceph"]["release"], "version": BOM["ceph"]["version"]}
    assert out["repositories"] == [{
        "name": "gpucluster-ceph", "uris": [f"https://download.ceph.com/debian-{BOM['ceph']['release']}/"],
        "suites": [codename], "components": ["main"], "signed_by": "https://download.ceph.com/keys/release.asc"}]
    assert out["packages"] == [f"ceph-common={BOM['ceph']['version']}*"]


def test_ceph_is_a_supported_release_not_pacific() -> None:
    # Pacific (16.2) and Reef are end of life (https://docs.ceph.com/en/latest/releases/).
    assert BOM["ceph"]["release"] == "squid" and BOM["ceph"]["version"].startswith("19.2.")


def test_ubuntu_never_gets_debians_ceph() -> None:
    for os_id in ("ubuntu-22.04", "ubuntu-24.04"):
        with pytest.raises(ValueError, match=r"ceph\.distro"):
            os_packages(os_id, "ceph_common", BOM_MODEL, ceph_source="distro")
        assert "16.2" not in str(os_packages(os_id, "ceph_common", BOM_MODEL, ceph_source="upstream"))


def test_the_lab_exception_is_bookworms_own_ceph_without_a_repository() -> None:
    out = os_packages("debian-12", "ceph_common", BOM_MODEL, ceph_source="distro")
    assert out["ceph"] == {"source": "distro", "release": "pacific", "version": "16.2.15"}
    assert out["repositories"] == []


def test_the_ceph_mirror_is_configurable() -> None:
    out = os_packages("ubuntu-24.04", "ceph_common", BOM_MODEL, ceph_mirror_url="http://mirror.example:8080/ceph/")
    assert out["repositories"][0]["uris"] == [f"http://mirror.example:8080/ceph/debian-{BOM['ceph']['release']}/"]
    assert out["repositories"][0]["signed_by"] == "http://mirror.example:8080/ceph/keys/release.asc"


def test_doca_follows_the_bom_pin_and_the_os() -> None:
    out = os_packages("ubuntu-22.04", "rdma_fabric", BOM_MODEL)
    v = BOM["doca_ofed"]["version"]
    assert out["doca_version"] == v
    assert out["doca_repositories"][0]["uris"] == [f"https://linux.mellanox.com/public/repo/doca/{v}/ubuntu22.04/x86_64/"]
    assert os_packages("debian-12", "rdma_fabric", BOM_MODEL)["doca_repositories"] == []


def test_distro_nvidia_packages_are_debian_only() -> None:
    assert os_packages("debian-12", "nvidia_driver", BOM_MODEL)["distro_method"] is True
    assert os_packages("ubuntu-22.04", "nvidia_driver", BOM_MODEL)["distro_method"] is False


def test_unknown_os_and_role_are_one_line_errors() -> None:
    with pytest.raises(ValueError, match="gpucluster_os: 'rhel-9'"):
        os_packages("rhel-9", "common", BOM_MODEL)
    with pytest.raises(ValueError, match="no table for role 'nope'"):
        os_packages("debian-12", "nope", BOM_MODEL)


def test_kernel_hold_per_os() -> None:
    assert kernel_hold("ubuntu-22.04", "6.8.0-1015-aws", "x86_64")[:5] == [
        "linux-image-6.8.0-1015-aws", "linux-headers-6.8.0-1015-aws",
        "linux-aws", "linux-image-aws", "linux-headers-aws"]
    # An LTS on the hardware enablement stack (22.04 running 24.04's 6.8 kernel): its HWE metas
    # would pull the next kernel past the DKMS modules built for this one.
    hwe = kernel_hold("ubuntu-22.04", "6.8.0-49-generic", "x86_64")
    assert {"linux-generic-hwe-22.04", "linux-image-generic-hwe-22.04", "linux-headers-generic-hwe-22.04"} <= set(hwe)
    assert "linux-image-aws-lts-22.04" in kernel_hold("ubuntu-22.04", "6.8.0-1015-aws", "x86_64")
    assert "linux-generic-hwe-24.04" in kernel_hold("ubuntu-24.04", "6.11.0-29-generic", "x86_64")
    assert kernel_hold("debian-12", "6.1.0-28-amd64", "x86_64") == [
        "linux-image-6.1.0-28-amd64", "linux-headers-6.1.0-28-amd64", "linux-image-amd64", "linux-headers-amd64"]


# --- preinstalled components ---------------------------------------------------------------------


def test_version_matches_the_pin_with_a_revision_only() -> None:
    assert version_matches("570.172.08", "570.172.08")
    assert version_matches("570.172.08-0ubuntu1", "570.172.08")
    assert version_matches("1:2.27.3-1+cuda12.8", "2.27.3")
    assert not version_matches("570.172.080", "570.172.08")
    assert not version_matches("570.133.20", "570.172.08")


@pytest.mark.parametrize(("found", "runfile", "policy", "method", "action"), [
    ("", False, "adopt_or_fail", "package", "install"),
    ("570.172.08", False, "adopt_or_fail", "package", "adopt"),
    ("570.172.08-1", False, "adopt_or_replace", "package", "adopt"),
    ("570.172.08", True, "adopt_or_fail", "package", "adopt"),
    ("570.133.20", False, "adopt_or_replace", "package", "replace"),
    ("570.133.20", False, "adopt_or_fail", "package", "fail"),
    ("570.133.20", True, "adopt_or_replace", "package", "fail"),
    ("", True, "adopt_or_replace", "package", "fail"),
    ("570.133.20", True, "adopt_or_replace", "runfile", "replace"),
    ("570.133.20", True, "adopt_or_fail", "runfile", "fail"),
])
def test_preinstalled_action(found: str, runfile: bool, policy: str, method: str, action: str) -> None:
    out = preinstalled_action("nvidia-driver", "570.172.08", found, runfile, policy, method=method)
    assert out["action"] == action
    assert out["message"].startswith("nvidia-driver: ")
    if action == "fail" and runfile and method == "package":
        assert "nvidia-uninstall" in out["message"]
    elif action == "fail":
        assert "adopt_or_replace" in out["message"] and "gpucluster:bom" in out["message"]


def test_preinstalled_policy_is_checked() -> None:
    with pytest.raises(ValueError, match=r"preinstalled: 'always'"):
        preinstalled_action("nccl", "2.27.3", "", False, "always")


# --- the roles resolve through the table (their real defaults and vars, per target and OS) -----

ROLE_STACKS = {"lab": "Pulumi.lab.yaml", "aws": "Pulumi.aws-h100.yaml", "azure": "Pulumi.azure-h100.yaml",
               "oci": "Pulumi.oci-h100.yaml", "baremetal": "Pulumi.onprem-h100-ib.yaml"}
# A running kernel per OS family, as `uname -r` prints it on each.
KERNELS = {"ubuntu": "6.8.0-1015-aws", "debian": "6.1.0-37-amd64"}
# The roles this table feeds that carry no OS knowledge of their own.
TABLE_ROLES = ("common", "container_runtime", "kubernetes_node", "kubernetes_control_plane", "kubernetes_worker")


@functools.cache
def _inventory(kind: str) -> dict[str, typing.Any]:
    from gpucluster.inventory import build_inventory
    from gpucluster.outputs import StackOutputs
    from gpucluster.spec import load_spec
    cluster = load_spec(REPO / ROLE_STACKS[kind])
    outputs = StackOutputs.model_validate(example_outputs(cluster, ssh_user="root", fabric_interface=None))
    return build_inventory(cluster, outputs)


def _role_vars(kind: str, os_id: str, role: str, extra: dict[str, typing.Any] | None = None) -> dict[str, typing.Any]:
    inventory = _inventory(kind)
    host = next(iter(inventory["all"]["hosts"]))
    ctx = host_context(inventory, host)
    ctx["gpucluster_os"] = os_id
    ctx["ansible_facts"] = dict(FACTS, kernel=KERNELS[os_id.split("-")[0]])
    return role_vars(role, ctx, extra)


@pytest.mark.parametrize(("kind", "os_id"), PAIRS)
def test_common_installs_and_holds_what_the_table_names(kind: str, os_id: str) -> None:
    v = _role_vars(kind, os_id, "common")
    assert v["__common_packages"] == ["chrony", "nftables", "openssh-server"]
    kernel = KERNELS[os_id.split("-")[0]]
    if os_id.startswith("ubuntu"):
        metas = ["linux-aws", "linux-image-aws", "linux-headers-aws"]
        release = os_id.removeprefix("ubuntu-")
        expected = [f"linux-image-{kernel}", f"linux-headers-{kernel}", *metas,
                    *(f"{m}-hwe-{release}" for m in metas), *(f"{m}-lts-{release}" for m in metas)]
    else:
        expected = [f"linux-image-{kernel}", f"linux-headers-{kernel}", "linux-image-amd64", "linux-headers-amd64"]
    assert v["__common_os"]["kernel_hold"] == expected
    assert v["__common_os"]["kernel_headers"] == [f"linux-headers-{kernel}"]
    assert v["common_kernel_hold_enabled"] is True  # FACTS: a KVM guest, not a container


def test_common_leaves_the_kernel_of_a_container_node_alone() -> None:
    v = _role_vars("lab", "debian-12", "common", {"__common_is_container": True})
    assert v["common_kernel_hold_enabled"] is False


@pytest.mark.parametrize(("kind", "os_id"), PAIRS)
def test_container_runtime_takes_containerd_and_the_pinned_toolkit_from_the_table(kind: str, os_id: str) -> None:
    v = _role_vars(kind, os_id, "container_runtime")
    tk = BOM["container_toolkit"]["version"]
    assert v["container_runtime_packages"] == ["containerd"]
    # What the role's probe asks dpkg about: the image-runtime families, one table for every OS.
    assert v["__container_runtime_os"]["image_runtime_packages"] == sorted(
        {p for family in IMAGE_CONTAINERD.values() for p in family})
    assert v["container_runtime_containerd_floor"] == BOM["containerd"]["floor"]
    assert v["container_runtime_nvidia_toolkit_repo_url"] == "https://nvidia.github.io/libnvidia-container/stable/deb"
    assert v["__container_runtime_os"]["toolkit_packages"] == [
        f"nvidia-container-toolkit={tk}-*", f"nvidia-container-toolkit-base={tk}-*"]


def test_the_container_toolkit_version_input_overrides_the_bom() -> None:
    v = _role_vars("aws", "ubuntu-22.04", "container_runtime", {"container_runtime_nvidia_toolkit_version": "1.2.3"})
    assert v["__container_runtime_os"]["toolkit_packages"][0] == "nvidia-container-toolkit=1.2.3-*"


@pytest.mark.parametrize(("kind", "os_id"), PAIRS)
def test_kubernetes_node_takes_its_repository_pins_and_holds_from_the_table(kind: str, os_id: str) -> None:
    v = _role_vars(kind, os_id, "kubernetes_node")
    kube = BOM["kubernetes"]
    assert v["kubernetes_node_apt_repo_url"] == f"https://pkgs.k8s.io/core:/stable:/v{kube['minor']}/deb/"
    assert v["kubernetes_node_apt_key_url"] == f"https://pkgs.k8s.io/core:/stable:/v{kube['minor']}/deb/Release.key"
    assert v["__kubernetes_node_os"]["packages"] == [
        f"kubelet={kube['version']}-*", f"kubeadm={kube['version']}-*", f"kubectl={kube['version']}-*",
        "cri-tools", "kubernetes-cni"]
    assert v["__kubernetes_node_os"]["hold"] == ["kubelet", "kubeadm", "kubectl"]
    assert "conntrack" in v["kubernetes_node_packages"] and "socat" in v["kubernetes_node_packages"]


@pytest.mark.parametrize("os_id", OS_IDS)
def test_kubernetes_control_plane_takes_keepalived_from_the_table(os_id: str) -> None:
    assert os_packages(os_id, "kubernetes_control_plane", BOM_MODEL)["packages"] == ["keepalived"]
    vip = (Path(__file__).resolve().parents[3] / "roles/kubernetes_control_plane/tasks/vip.yml").read_text()
    assert "os_packages('kubernetes_control_plane'" in vip


@pytest.mark.parametrize("role", TABLE_ROLES)
def test_no_role_keeps_an_os_table_of_its_own(role: str) -> None:
    """One table: the roles name no OS release, codename or OS-specific repository themselves."""
    root = Path(__file__).resolve().parents[3] / "roles" / role
    words = [*OS_IDS, "jammy", "noble", "bookworm", "ubuntu2204", "ubuntu2404", "debian12", "https://pkgs.k8s.io",
             "nvidia.github.io/libnvidia-container", "linux-image-"]
    # meta/main.yml lists the platforms for Galaxy: a statement of support, not a table.
    for path in [p for p in sorted(root.rglob("*.yml")) + sorted(root.rglob("*.j2")) if p != root / "meta/main.yml"]:
        text = path.read_text()
        hits = [w for w in words if w in text]
        assert not hits, f"{path.relative_to(root.parent)} names {hits}: resolve it through os_packages"


# --- what the image ships: the driver, EFA and OFED, from real outputs ---------------------------

SAMPLES = Path(__file__).resolve().parents[2] / "data" / "samples"


def test_efa_installer_version_is_read_from_the_installers_record() -> None:
    assert efa_installer_version((SAMPLES / "efa_installed_packages_01.txt").read_text()) == "1.47.0"
    assert efa_installer_version("") == ""
    # The package list alone (an older record) says nothing about the version.
    assert efa_installer_version("efa-config efa-profile libfabric1-aws\n") == ""


@pytest.mark.parametrize(("sample", "version"), [("ofed_info_01.txt", "23.07-0.5.1.2"),
                                                  ("ofed_info_02.txt", "23.07-0.5.0")])
def test_ofed_version_reads_mlnx_ofed_and_doca_hosts_ofed(sample: str, version: str) -> None:
    assert ofed_version((SAMPLES / sample).read_text()) == version


@pytest.mark.parametrize("text", ["", "bash: ofed_info: command not found\n", "23.07-0.5.1.2\n"])
def test_ofed_version_is_empty_when_ofed_info_says_no_version(text: str) -> None:
    assert ofed_version(text) == ""


def test_detect_preinstalled_reads_every_component_from_one_probe() -> None:
    probe = {
        "driver_module": "570.172.08", "driver_package": "", "driver_runfile": False,
        "efa_installed_packages": (SAMPLES / "efa_installed_packages_01.txt").read_text(), "efa_prefix": True,
        "ofed_info": (SAMPLES / "ofed_info_01.txt").read_text(),
    }
    found = detect_preinstalled(probe)
    assert found == {
        "nvidia-driver": {"found": "570.172.08", "present": True, "runfile": False},
        "efa": {"found": "1.47.0", "present": True, "runfile": False},
        "ofed": {"found": "23.07-0.5.1.2", "present": True, "runfile": False},
        "containerd": {"found": "", "present": False, "runfile": False, "package": "", "removes": []},
        "container-toolkit": {"found": "", "present": False, "runfile": False, "package": "", "own": False},
    }
    assert {c: v["present"] for c, v in detect_preinstalled({}).items()} == {
        "nvidia-driver": False, "efa": False, "ofed": False, "containerd": False, "container-toolkit": False}
    # dpkg's epoch is not part of the version.
    assert detect_preinstalled({"driver_package": "1:570.172.08-1"})["nvidia-driver"]["found"] == "570.172.08-1"


@pytest.mark.parametrize(("probe", "pins", "policy", "actions"), [
    ({}, {"efa": "1.47.0", "ofed": "23.07-0.5.1.2"}, "adopt_or_fail", {"efa": "install", "ofed": "install"}),
    ({"efa_installed_packages": "# EFA installer version: 1.47.0\n"}, {"efa": "1.47.0"}, "adopt_or_fail",
     {"efa": "adopt"}),
    ({"efa_installed_packages": "# EFA installer version: 1.45.0\n"}, {"efa": "1.47.0"}, "adopt_or_fail",
     {"efa": "fail"}),
    ({"efa_installed_packages": "# EFA installer version: 1.45.0\n"}, {"efa": "1.47.0"}, "adopt_or_replace",
     {"efa": "replace"}),
    # /opt/amazon/efa without the installer's record: present at an unknown version, never "none".
    ({"efa_prefix": True}, {"efa": "1.47.0"}, "adopt_or_fail", {"efa": "fail"}),
    ({"ofed_info": "OFED-internal-23.07-0.5.0:\n"}, {"ofed": "23.07-0.5.0"}, "adopt_or_fail", {"ofed": "adopt"}),
    ({"ofed_info": "MLNX_OFED_LINUX-23.07-0.5.1.2:\n"}, {"ofed": "24.10-1.1.4.0"}, "adopt_or_fail",
     {"ofed": "fail"}),
    ({"driver_runfile": True}, {"nvidia-driver": "570.172.08"}, "adopt_or_replace", {"nvidia-driver": "fail"}),
])
def test_preinstalled_plan_decides_per_component(probe: dict[str, typing.Any], pins: dict[str, str], policy: str,
                                                 actions: dict[str, str]) -> None:
    plan = preinstalled_plan(probe, pins, policy)
    assert {c: d["action"] for c, d in plan.items()} == actions
    for component, decision in plan.items():
        assert decision["message"].startswith(f"{component}: ")


def test_preinstalled_plan_refuses_a_component_it_cannot_detect() -> None:
    with pytest.raises(ValueError, match="no detection for cuda"):
        preinstalled_plan({}, {"cuda": "12.8"}, "adopt_or_fail")


# --- containerd: an image's own, adopted at or above the bill of materials' floor ----------------


@pytest.mark.parametrize(("a", "b", "order"), [
    ("1.7.27-0ubuntu1~22.04.1", "1.7.2", 1),      # 27 > 2 as numbers, not as text
    ("1.7.2", "1.7.2", 0),
    ("1.7.2-1", "1.7.2", 1),                      # a revision sorts after none
    ("1.7.2~rc.1", "1.7.2", -1),                  # ~ sorts before the end
    ("1.6.20~ds1-1+deb12u3", "1.7.2", -1),        # bookworm's archive containerd
    ("1:1.0", "2.0", 1),                          # the epoch first
    ("2.0.5-ubuntu22.04u1", "1.7.2", 1),
    ("1.7.10", "1.7.9", 1),
    ("1.7a", "1.7", 1),                           # letters after the end
    ("1.7+x", "1.7.1", -1),                       # '+' sorts after letters, '.' too, 1 > x here: "+x" < ".1"
])
def test_deb_version_compare_is_dpkgs_order(a: str, b: str, order: int) -> None:
    assert deb_version_compare(a, b) == order
    assert deb_version_compare(b, a) == -order


@pytest.mark.process
def test_deb_version_compare_agrees_with_dpkg_where_it_runs() -> None:
    import shutil
    import subprocess
    if shutil.which("dpkg") is None:
        pytest.skip("no dpkg on this host")
    versions = ["1.7.27-0ubuntu1~22.04.1", "1.7.2", "1.7.2-1", "1.7.2~rc.1", "1.6.20~ds1-1+deb12u3", "1:1.0",
                "1.7.10", "1.7a", "1.7+x", "1.7.1", "2.0.0~beta.0", "1.7.2+dfsg-1", "0.9"]
    for a in versions:
        for b in versions:
            lt = subprocess.run(["dpkg", "--compare-versions", a, "lt", b], check=False).returncode == 0
            eq = subprocess.run(["dpkg", "--compare-versions", a, "eq", b], check=False).returncode == 0
            assert deb_version_compare(a, b) == (-1 if lt else 0 if eq else 1), (a, b)


def test_image_containerd_reads_dpkg_querys_lines() -> None:
    lines = ("moby-cli\tii \t24.0.9-ubuntu22.04u1\n"
             "moby-containerd\tii \t1.7.27-ubuntu22.04u1\n"
             "moby-engine\tii \t24.0.9-ubuntu22.04u1\n"
             "moby-runc\tii \t1.1.12-ubuntu22.04u1\n"
             "containerd.io\trc \t1.6.33-1\n")
    assert image_containerd(lines) == {
        "found": "1.7.27-ubuntu22.04u1", "present": True, "runfile": False, "package": "moby-containerd",
        "removes": ["moby-engine", "moby-cli", "moby-containerd", "moby-runc"]}
    # Removed (rc), unknown, or only the engine without its containerd: nothing of the image's.
    assert image_containerd("containerd.io\trc \t1.6.33-1\n")["present"] is False
    assert image_containerd("moby-engine\tii \t24.0\n")["present"] is False
    assert image_containerd("")["present"] is False
    # The OS archive's own containerd is the role's, never the image's.
    assert image_containerd("containerd\tii \t1.7.27-0ubuntu1~22.04.1\n")["present"] is False


@pytest.mark.parametrize(("lines", "policy", "action"), [
    ("", "adopt_or_fail", "install"),
    ("moby-containerd\tii \t1.7.2-ubuntu22.04u1\n", "adopt_or_fail", "adopt"),
    ("moby-containerd\tii \t2.0.5-ubuntu22.04u1\n", "adopt_or_replace", "adopt"),
    ("containerd.io\tii \t1.7.2-1\n", "adopt_or_fail", "adopt"),
    ("moby-containerd\tii \t1.7.2~rc.1\n", "adopt_or_fail", "fail"),
    ("containerd.io\tii \t1.6.33-1\ndocker-ce\tii \t5:24.0.7-1~ubuntu.22.04~jammy\n", "adopt_or_fail", "fail"),
    ("containerd.io\tii \t1.6.33-1\ndocker-ce\tii \t5:24.0.7-1~ubuntu.22.04~jammy\n", "adopt_or_replace",
     "replace"),
])
def test_preinstalled_plan_holds_containerd_to_its_floor(lines: str, policy: str, action: str) -> None:
    plan = preinstalled_plan({"containerd_packages": lines}, {"containerd": "1.7.2"}, policy)["containerd"]
    assert plan["action"] == action and plan["message"].startswith("containerd: ")
    if action == "fail":
        # The package, both versions and the two ways out.
        assert f"the image ships {plan['package']} {plan['found']}, below the bill of materials' containerd " \
               "floor 1.7.2" in plan["message"]
        assert f'gpucluster:bom holding containerd: {{floor: "{plan["found"]}"}}' in plan["message"]
        assert f"preinstalled: adopt_or_replace to remove {', '.join(plan['removes'])}" in plan["message"]
    if action == "replace":
        assert plan["removes"] == ["docker-ce", "containerd.io"]
        assert "removing docker-ce, containerd.io, then installing" in plan["message"]
    if action in ("adopt", "install"):
        assert "remov" not in plan["message"]


def test_the_floor_never_applies_to_an_exact_pin() -> None:
    # The driver's pin stays exact: a newer driver is not "at least" the pin.
    assert preinstalled_action("nvidia-driver", "580.126.16", "580.200.01", False, "adopt_or_fail")["action"] == "fail"


# --- the NVIDIA container toolkit: an image's own, adopted at or above the pin -------------------

TOOLKIT = ("nvidia-container-toolkit\tii \t{v}\nnvidia-container-toolkit-base\tii \t{v}\n"
           "libnvidia-container-tools\tii \t{v}\nlibnvidia-container1\tii \t{v}\n")


def test_image_toolkit_reads_dpkg_querys_lines() -> None:
    assert image_toolkit(TOOLKIT.format(v="1.18.3-1")) == {
        "found": "1.18.3-1", "present": True, "runfile": False, "package": "nvidia-container-toolkit", "own": False}
    # Held (Azure's recipe holds it) is installed; the lowest piece is the toolkit's version.
    held = "nvidia-container-toolkit\thi \t1.18.3-1\nlibnvidia-container1\tii \t1.18.0-1\n"
    assert image_toolkit(held)["found"] == "1.18.0-1"
    # libnvidia-container alone is no toolkit; removed (rc) is not installed; containerd's lines are not its.
    assert image_toolkit("libnvidia-container1\tii \t1.18.3-1\n")["present"] is False
    assert image_toolkit("nvidia-container-toolkit\trc \t1.18.3-1\n")["present"] is False
    assert image_toolkit("moby-containerd\tii \t1.7.27-ubuntu22.04u1\nrepository /x.sources\n")["present"] is False
    assert image_toolkit("nvidia-container-toolkit-base\tii \t1.17.8-1\n", own=True) == {
        "found": "1.17.8-1", "present": True, "runfile": False, "package": "nvidia-container-toolkit-base",
        "own": True}


@pytest.mark.parametrize(("lines", "own", "policy", "action"), [
    ("", False, "adopt_or_fail", "install"),
    (TOOLKIT.format(v="1.18.2-1"), False, "adopt_or_fail", "adopt"),      # the pin itself
    (TOOLKIT.format(v="1.18.3-1"), False, "adopt_or_fail", "adopt"),      # newer: never downgraded
    (TOOLKIT.format(v="1:1.17.0-1"), False, "adopt_or_replace", "adopt"),  # an epoch sorts first
    (TOOLKIT.format(v="1.18.1-1"), False, "adopt_or_fail", "fail"),
    (TOOLKIT.format(v="1.18.2~rc.1-1"), False, "adopt_or_fail", "fail"),
    (TOOLKIT.format(v="1.18.1-1"), False, "adopt_or_replace", "replace"),
    # The role's own toolkit (its repository exists) below a bumped pin: upgraded, whatever the policy.
    (TOOLKIT.format(v="1.18.1-1"), True, "adopt_or_fail", "install"),
    (TOOLKIT.format(v="1.18.3-1"), True, "adopt_or_fail", "adopt"),
])
def test_preinstalled_plan_adopts_a_toolkit_at_or_above_the_pin(lines: str, own: bool, policy: str,
                                                                action: str) -> None:
    plan = preinstalled_plan({"toolkit_packages": lines, "toolkit_repository": own}, {"container-toolkit": "1.18.2"},
                             policy)["container-toolkit"]
    assert plan["action"] == action and plan["message"].startswith("container-toolkit: ")
    assert plan["own"] is own
    if action == "fail":
        # The installed version, the pin, the policy and its input, and the ways out.
        found = plan["found"]
        assert plan["message"] == (
            f"container-toolkit: the image ships nvidia-container-toolkit {found}, below the bill of materials' "
            "pin 1.18.2, and the pool's policy is preinstalled: adopt_or_fail (container_runtime_preinstalled). "
            "Pin the image's version in a bill-of-materials overlay (the stack's gpucluster:bom holding "
            f'container_toolkit: {{version: "{upstream_version(found)}"}}), boot an image that ships 1.18.2 or '
            "later, or set the pool's preinstalled: adopt_or_replace to upgrade it to the pin")
    if action == "adopt":
        assert "never downgraded" in plan["message"]


def test_the_overlay_a_toolkit_failure_names_adopts_it() -> None:
    found = "1.18.1-1"
    failed = preinstalled_plan({"toolkit_packages": TOOLKIT.format(v=found)}, {"container-toolkit": "1.18.2"},
                               "adopt_or_fail")["container-toolkit"]
    pin = upstream_version(failed["found"])
    assert pin == "1.18.1"
    adopted = preinstalled_plan({"toolkit_packages": TOOLKIT.format(v=found)}, {"container-toolkit": pin},
                                "adopt_or_fail")["container-toolkit"]
    assert adopted["action"] == "adopt"


@pytest.mark.parametrize(("version", "upstream"), [("1.18.1-1", "1.18.1"), ("1:1.18.1-1", "1.18.1"),
                                                    ("1.18.1", "1.18.1"), ("1.6.20~ds1-1+deb12u3", "1.6.20~ds1")])
def test_upstream_version_drops_epoch_and_revision(version: str, upstream: str) -> None:
    assert upstream_version(version) == upstream


def test_the_container_runtime_table_names_the_toolkit_and_its_probe() -> None:
    table = os_packages("ubuntu-22.04", "container_runtime", load_bom())
    pin = load_bom().container_toolkit.version
    assert table["toolkit_packages"] == [f"nvidia-container-toolkit={pin}-*", f"nvidia-container-toolkit-base={pin}-*"]
    assert table["image_toolkit_packages"] == ["nvidia-container-toolkit", "nvidia-container-toolkit-base",
                                               "libnvidia-container-tools", "libnvidia-container1"]
    assert table["repositories"][0]["name"] == table["toolkit_repo_name"] == "gpucluster-nvidia-container-toolkit"
