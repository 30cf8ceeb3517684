"""The egress the spec declares, as the roles honour it: one renderer (gpucluster.render.proxy)
for the play's environment (apt, pip, get_url/uri, curl under converge), apt's and pip's own files,
login shells, containerd's unit, and GC-SYS-005, which reads them back; the mirrors the spec names
reach each role's download URL (gpucluster.render.sources)."""

from __future__ import annotations

import copy
import dataclasses
import importlib.util
import re
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import yaml

from gpucluster.conformance.nodes import parse_inventory
from gpucluster.inventory import build_inventory
from gpucluster.outputs import OutputEgress, StackOutputs
from gpucluster.render.proxy import METADATA_ADDRESSES, no_proxy, proxy_env, proxy_settings
from gpucluster.spec import load_spec
from gpucluster.spec.models import Fabric, Kubernetes
from tests.unit.example_outputs import example_outputs
from tests.unit.roles.render import REPO, ROLES, file_entries, host_context, render_template, role_vars

PROXY = "http://proxy.example.internal:3128"
MIRROR = "http://mirror.example.internal"


def _inventory(stack: str = "Pulumi.azure-h100.yaml", **egress: Any) -> dict[str, Any]:
    cluster = load_spec(REPO / stack)
    if egress:
        target = cluster.spec.target
        edited = target.egress.model_copy(update=egress)  # type: ignore[union-attr]
        spec = cluster.spec.model_copy(update={"target": target.model_copy(update={"egress": edited})})
        cluster = dataclasses.replace(cluster, spec=spec)
    return build_inventory(cluster, StackOutputs.model_validate(example_outputs(cluster, ssh_user="root")))


def _gpu(inventory: dict[str, Any]) -> dict[str, Any]:
    return host_context(inventory, next(iter(inventory["all"]["children"]["gpu"]["hosts"])))


def test_no_proxy_keeps_the_cluster_and_its_mirrors_off_the_proxy() -> None:
    inv = _inventory(mirrors={"nvidia": f"{MIRROR}/cuda"})
    v = inv["all"]["vars"]
    egress, fabric = OutputEgress.model_validate(v["gpucluster_egress"]), Fabric.model_validate(v["gpucluster_fabric"])
    kubernetes = Kubernetes.model_validate(v["gpucluster_kubernetes"])
    bypass = no_proxy(egress, fabric, kubernetes)
    assert bypass == ["localhost", "127.0.0.1", *METADATA_ADDRESSES, "10.50.0.0/20", "10.51.0.0/20",
                      "10.244.0.0/16", "10.96.0.0/12", ".svc", ".cluster.local", "mirror.example.internal",
                      ".example.internal"]
    # The play's environment is the renderer's, in both spellings.
    env = v["gpucluster_proxy_env"]
    assert env == proxy_env(egress, fabric, kubernetes)
    assert env["http_proxy"] == env["HTTP_PROXY"] == PROXY and env["no_proxy"] == ",".join(bypass) == env["NO_PROXY"]


def test_without_a_proxy_nothing_is_written_and_the_files_are_removed() -> None:
    inv = _inventory("Pulumi.aws-h100.yaml")
    assert inv["all"]["vars"]["gpucluster_proxy_env"] == {}
    v = role_vars("common", _gpu(inv))
    assert v["__common_proxy"] == {"enabled": False, "env": {}, "apt": {}, "pip": {}, "systemd_environment": []}
    tasks = yaml.safe_load((ROLES / "common" / "tasks" / "files.yml").read_text())
    proxy_files = [e for e in file_entries(tasks) if e["src"] in ("apt-proxy.conf.j2", "pip.conf.j2",
                                                                  "profile-proxy.sh.j2")]
    assert len(proxy_files) == 3
    for entry in proxy_files:
        assert entry["state"] == "{{ 'present' if __common_proxy.enabled else 'absent' }}"


def test_the_common_role_writes_apt_pip_and_login_shell_settings() -> None:
    v = role_vars("common", _gpu(_inventory(mirrors={"ceph": f"{MIRROR}/ceph"})))
    apt = render_template("common", "apt-proxy.conf.j2", v)
    assert apt.startswith("//\n// Managed by gpucluster")
    assert f'Acquire::http::Proxy "{PROXY}";' in apt and f'Acquire::https::Proxy "{PROXY}";' in apt
    # apt matches a host exactly: the mirror goes around the proxy, a .suffix cannot.
    assert 'Acquire::http::Proxy::mirror.example.internal "DIRECT";' in apt
    assert "example.internal\" " not in apt and "::.example" not in apt
    pip = render_template("common", "pip.conf.j2", v)
    assert "[global]\nproxy = " + PROXY + "\n" in pip
    profile = render_template("common", "profile-proxy.sh.j2", v)
    assert f"export https_proxy={PROXY}\n" in profile and "export NO_PROXY=localhost,127.0.0.1," in profile


def test_containerd_pulls_through_the_proxy() -> None:
    v = role_vars("container_runtime", _gpu(_inventory()))
    text = render_template("container_runtime", "http-proxy.conf.j2", v)
    assert "[Service]\n" in text
    assert [line for line in text.splitlines() if line.startswith("Environment=")] == [
        f'Environment="HTTP_PROXY={PROXY}"', f'Environment="HTTPS_PROXY={PROXY}"',
        f'Environment="NO_PROXY={v["__container_runtime_proxy"]["env"]["NO_PROXY"]}"']
    handlers = yaml.safe_load((ROLES / "container_runtime" / "handlers" / "main.yml").read_text())
    restart = next(h for h in handlers if h["name"] == "Restart containerd")
    assert "__container_runtime_proxy_dropin" in restart["when"] and restart["ansible.builtin.systemd_service"][
        "daemon_reload"]


def test_a_registry_mirror_is_each_registrys_first_host() -> None:
    v = role_vars("container_runtime", _gpu(_inventory(mirrors={"container_registry": f"{MIRROR}:5000"})),
                  {"__container_runtime_nvidia_present": False})
    assert v["container_runtime_registry_mirror"] == f"{MIRROR}:5000"
    config = render_template("container_runtime", "config.toml.j2", v)
    assert '[plugins."io.containerd.grpc.v1.cri".registry]\n' in config
    assert 'config_path = "/etc/containerd/certs.d"' in config
    hosts = render_template("container_runtime", "hosts.toml.j2",
                            {**v, "__container_runtime_server": "https://registry-1.docker.io"})
    assert 'server = "https://registry-1.docker.io"' in hosts and f'[host."{MIRROR}:5000"]' in hosts
    assert set(v["__container_runtime_registries"]) == {"docker.io", "registry.k8s.io", "quay.io", "nvcr.io",
                                                        "ghcr.io"}
    # No mirror: containerd's config is what it was.
    plain = render_template("container_runtime", "config.toml.j2", role_vars(
        "container_runtime", _gpu(_inventory()), {"__container_runtime_nvidia_present": False}))
    assert "config_path" not in plain


def test_every_node_play_takes_the_proxy_environment() -> None:
    want = "{{ gpucluster_proxy_env | default({}) }}"
    for name in ("converge-nodes.yml", "deploy-ceph.yml", "deploy-kubernetes.yml", "check-nvidia-driver.yml"):
        plays = yaml.safe_load((REPO / "playbooks" / name).read_text())
        for play in plays:
            if play.get("hosts") == "localhost" or "import_playbook" in play:
                continue
            assert play.get("environment") == want, f"{name}: play {play['name']!r}"
    # The rolling upgrade's roles take it; its gate runs verify on the controller, without it.
    text = (REPO / "playbooks" / "upgrade-rolling.yml").read_text()
    assert text.count("environment: \"{{ gpucluster_proxy_env | default({}) }}\"") == 2


def test_mirrors_reach_every_roles_download_urls() -> None:
    mirrors = {"nvidia": f"{MIRROR}/cuda", "container_toolkit": f"{MIRROR}/libnvidia-container/stable/deb",
               "doca": f"{MIRROR}/doca", "efa_installer": f"{MIRROR}/efa", "kubernetes": f"{MIRROR}/k8s",
               "ceph": f"{MIRROR}/ceph", "sources": f"{MIRROR}/github"}
    ctx = _gpu(_inventory(mirrors=mirrors))
    got = {name: role_vars(role, ctx)[name] for role, name in [
        ("nvidia_cuda_repo", "nvidia_cuda_repo_url"),
        ("container_runtime", "container_runtime_nvidia_toolkit_repo_url"),
        ("rdma_fabric", "rdma_fabric_doca_repo_url"), ("rdma_fabric", "rdma_fabric_efa_installer_url"),
        ("kubernetes_node", "kubernetes_node_mirror_url"),
        ("kubernetes_control_plane", "kubernetes_control_plane_cni_mirror_url"),
        ("ceph_common", "ceph_common_mirror_url"), ("nccl", "nccl_tests_source_url"),
        ("gpu_validation", "gpu_validation_gpu_burn_source_url"),
        ("gpu_validation", "gpu_validation_nvbandwidth_source_url")]}
    assert {k: v for k, v in got.items() if not v.startswith(MIRROR)} == {}
    assert got["nccl_tests_source_url"].startswith(f"{MIRROR}/github/NVIDIA/nccl-tests/archive/")
    # Without mirrors, upstream, as before.
    plain = role_vars("nvidia_cuda_repo", _gpu(_inventory("Pulumi.aws-h100.yaml")))
    assert plain["nvidia_cuda_repo_url"] == "https://developer.download.nvidia.com/compute/cuda/repos"


def _suite() -> Any:
    spec = importlib.util.spec_from_file_location("suite_system_proxy", REPO / "tests" / "conformance" /
                                                  "test_system.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _node(inventory: dict[str, Any], apt_conf: str, containerd_env: str | None) -> Any:
    figures: dict[str, Any] = {}

    def run(cmd: str) -> Any:
        if cmd.startswith("apt-config dump"):
            return SimpleNamespace(stdout='APT "";\nAPT::Architecture "amd64";\n' + apt_conf, rc=0)
        if cmd.startswith("systemctl cat containerd"):
            return SimpleNamespace(stdout="", rc=0 if containerd_env is not None else 1)
        if cmd.startswith("systemctl show -p Environment"):
            return SimpleNamespace(stdout=(containerd_env or "") + "\n", rc=0)
        raise AssertionError(cmd)

    return SimpleNamespace(run=run, figure=lambda k, val: figures.__setitem__(k, val),
                           inv=parse_inventory(inventory, "inventory.yml"))


def _written(inventory: dict[str, Any]) -> tuple[str, str]:
    """What the roles write, as apt-config dump and systemctl show read it back."""
    v = role_vars("common", _gpu(inventory))
    apt = "".join(f"{line}\n" for line in render_template("common", "apt-proxy.conf.j2", v).splitlines()
                  if not line.startswith("//"))
    env = " ".join(role_vars("container_runtime", _gpu(inventory))["__container_runtime_proxy"]["systemd_environment"])
    return apt, env


def test_gc_sys_005_reads_back_what_the_roles_wrote() -> None:
    inventory = _inventory(mirrors={"ceph": f"{MIRROR}/ceph"})
    apt, env = _written(inventory)
    _suite().test_egress_proxy(_node(inventory, apt, env))
    _suite().test_egress_proxy(_node(inventory, apt, None))  # a node without containerd: apt alone
    stale = apt.replace(PROXY, "http://old-proxy:3128")
    with pytest.raises(AssertionError, match=re.escape(f"Acquire::http::Proxy is 'http://old-proxy:3128', not "
                                                       f"'{PROXY}'")):
        _suite().test_egress_proxy(_node(inventory, stale, env))
    with pytest.raises(AssertionError, match="containerd's environment lacks HTTPS_PROXY="):
        _suite().test_egress_proxy(_node(inventory, apt, env.replace("HTTPS_PROXY", "X")))


def test_gc_sys_005_skips_where_the_egress_is_no_proxy() -> None:
    inventory = _inventory("Pulumi.aws-h100.yaml")
    with pytest.raises(pytest.skip.Exception, match="the cluster's egress is nat, not a proxy"):
        _suite().test_egress_proxy(_node(inventory, "", None))


def test_the_renderer_is_empty_without_a_proxy() -> None:
    fabric = Fabric(type="ethernet", mtu=1500, management_cidr="10.0.0.0/24", fabric_cidr="10.0.1.0/24")
    assert proxy_settings(None, fabric)["enabled"] is False
    assert proxy_env(OutputEgress(mode="none"), fabric) == {}
    assert no_proxy(OutputEgress(mode="nat"), fabric) == []


def test_role_readmes_name_the_egress_inputs() -> None:
    for role, name in (("common", "common_egress"), ("container_runtime", "container_runtime_egress"),
                       ("container_runtime", "container_runtime_registry_mirror")):
        assert f"`{name}`" in (ROLES / role / "README.md").read_text()


def test_the_example_with_a_proxy_is_the_one_the_tests_read() -> None:
    egress = load_spec(REPO / "Pulumi.azure-h100.yaml").spec.target.egress  # type: ignore[union-attr]
    assert (egress.mode, egress.http_proxy) == ("proxy", PROXY)
    assert copy.deepcopy(egress).no_proxy == [".example.internal"]
    assert Path(REPO / "roles" / "common" / "templates" / "apt-proxy.conf.j2").is_file()
