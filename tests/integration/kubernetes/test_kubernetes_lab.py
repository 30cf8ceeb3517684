"""Kubernetes roles on a lab of their own (Pulumi.kube.yaml): the kubernetes_node prerequisite
tasks (packages, kernel modules, sysctl, swap) converge for real and a rerun changes nothing;
the kubeadm tasks (binaries, init, join) run in check mode, since neither dl.k8s.io nor the
container registries are reachable from the lab."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
STACK = HERE / "Pulumi.kube.yaml"
INVENTORY = Path("/var/lib/gpucluster/lab/kube/inventory.yml")
GC = [sys.executable, "-m", "gpucluster"]
PLAYBOOK = [str(REPO / ".venv" / "bin" / "ansible-playbook"), "-i", str(INVENTORY)]
PREREQ_TAGS = "kubernetes_node_preflight,kubernetes_node_packages,kubernetes_node_kernel,kubernetes_node_swap"

pytestmark = [
    pytest.mark.lab,
    pytest.mark.skipif(os.geteuid() != 0, reason="the lab needs root (systemd-nspawn, network namespaces)"),
    pytest.mark.skipif(shutil.which("systemd-nspawn") is None, reason="systemd-nspawn is not installed"),
]


def run(argv: list[str], timeout: int = 1800) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False)


def recap(out: str) -> dict[str, dict[str, int]]:
    hosts: dict[str, dict[str, int]] = {}
    for m in re.finditer(r"^(\S+)\s+:\s+(.*)$", out, re.M):
        hosts[m.group(1)] = {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
    return hosts


@pytest.fixture(scope="module")
def lab() -> Iterator[Path]:
    up = run([*GC, "lab", "up", "--stack", str(STACK)])
    assert up.returncode == 0, up.stderr[-3000:]
    yield INVENTORY
    if os.environ.get("GPUCLUSTER_KEEP_LAB") != "1":
        run([*GC, "lab", "down", "--stack", str(STACK)])


def _prereq_playbook(tmp_path: Path) -> Path:
    # The prerequisites alone: containerd (container_runtime) is another role's concern, so the
    # socket check is off here; deploy-kubernetes.yml runs container_runtime first.
    pb = tmp_path / "prereq.yml"
    pb.write_text(
        f"- hosts: control_plane:gpu\n  gather_facts: true\n  roles:\n"
        f"    - role: {REPO}/roles/kubernetes_node\n      vars: {{kubernetes_node_containerd_required: false}}\n"
    )
    return pb


def test_prerequisites_converge_and_rerun_changes_nothing(lab: Path, tmp_path: Path) -> None:
    pb = _prereq_playbook(tmp_path)
    first = run([*PLAYBOOK, str(pb), "--tags", PREREQ_TAGS])
    assert first.returncode == 0, first.stdout[-4000:]
    second = run([*PLAYBOOK, str(pb), "--tags", PREREQ_TAGS])
    assert second.returncode == 0, second.stdout[-4000:]
    for host, counts in recap(second.stdout).items():
        assert counts.get("changed", -1) == 0, f"{host}: {counts}"


@pytest.fixture
def fake_airgap(tmp_path: Path) -> Path:
    """An air-gapped folder with the right layout and the wrong contents."""
    from gpucluster.kube import load_artifacts, resolve_artifacts

    root = tmp_path / "airgap"
    for arch in ("amd64", "arm64"):
        for art in resolve_artifacts(load_artifacts(), arch, "calico", "3.30.2"):
            path = root / art.path
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text("not the published file\n")
    return root


def test_install_refuses_an_artifact_whose_checksum_differs(lab: Path, tmp_path: Path, fake_airgap: Path) -> None:
    res = run([*PLAYBOOK, str(_prereq_playbook(tmp_path)), "--tags", "kubernetes_node_install",
               "-e", f"kubernetes_node_artifact_dir={fake_airgap}"])
    assert res.returncode != 0
    assert "is not the pinned 109bd2607b054a477ede31c55ae814eae8e75543126dc4cea40b04424d843489" in res.stdout
    ls = run([*GC, "lab", "ssh", "--stack", str(STACK), "cp-1", "--", "ls", "/usr/local/bin"], timeout=120)
    assert "kubelet" not in ls.stdout  # nothing unverified was installed


def test_kubeadm_tasks_in_check_mode(lab: Path, fake_airgap: Path) -> None:
    res = run([*PLAYBOOK, str(REPO / "playbooks" / "deploy-kubernetes.yml"), "--check",
               "--skip-tags", "container_runtime,kubernetes_node",
               "-e", "kubernetes_control_plane_checksum_required=false",
               "-e", f"kubernetes_control_plane_cni_artifact_dir={fake_airgap}"])
    assert res.returncode == 0, res.stdout[-4000:]
    assert "would create a bootstrap token" in res.stdout
    assert re.search(r"TASK \[kubernetes_control_plane : Run kubeadm init\][^\n]*\n(changed|ok): \[cp-1\]", res.stdout)
