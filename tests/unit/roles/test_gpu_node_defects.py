"""What a real H100 node would hit, checked without one: each test renders the role's own
defaults, vars and templates (tests/unit/roles/render.py) and fails if the defect came back."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.kube.manifests import gpu_operator_release
from gpucluster.spec import load_spec
from tests.unit.roles.render import (
    NATIVE,
    REPO,
    ROLES,
    first_host,
    host_context,
    inventory_for,
    render_template,
    role_vars,
)

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process


def _ctx(fabric: str, group: str = "gpu", **extra: Any) -> dict[str, Any]:
    inventory = inventory_for(fabric)
    ctx = host_context(inventory, first_host(inventory, group))
    ctx.update(extra)
    return ctx


def _tasks(role: str, name: str) -> list[dict[str, Any]]:
    return yaml.safe_load((ROLES / role / name).read_text())


# --- 1. nvidia-peermem only with DOCA-OFED -----------------------------------------------------


@pytest.mark.parametrize(("fabric", "flavour", "want"), [
    ("roce", None, False),          # inbox rdma-core: GPUDirect RDMA through DMA-BUF
    ("infiniband", "inbox", False),
    ("roce", "doca", True),
    ("infiniband", "doca", True),
    ("efa", "doca", False),         # EFA never uses peermem
    ("ethernet", "doca", False),
])
def test_peermem_loads_only_with_doca_ofed(fabric: str, flavour: str | None, want: bool) -> None:
    extra = {} if flavour is None else {"gpucluster_ofed_flavour": flavour}
    v = role_vars("nvidia_driver", _ctx(fabric, **extra))
    assert v["nvidia_driver_ofed_flavour"] == (flavour or "inbox")
    assert v["nvidia_driver_peermem_enabled"] is want


def test_a_node_loses_the_peermem_boot_entry_when_peermem_is_off() -> None:
    tasks = _tasks("nvidia_driver", "tasks/service.yml")
    absent = [t for t in tasks if t.get("ansible.builtin.file", {}).get("path")
              == "/etc/modules-load.d/gpucluster-nvidia-peermem.conf"]
    assert absent and absent[0]["ansible.builtin.file"]["state"] == "absent"
    assert absent[0]["when"] == "not (nvidia_driver_peermem_enabled | bool)"


def test_doca_ofed_needs_a_version_and_installs_only_where_asked() -> None:
    v = role_vars("rdma_fabric", _ctx("roce"))
    assert v["rdma_fabric_ofed_flavour"] == "inbox"
    # The version comes from the BOM's doca_ofed pin; preflight refuses `doca` without one.
    bom = yaml.safe_load((REPO / "gpucluster" / "data" / "bom.yaml").read_text())
    assert v["rdma_fabric_doca_version"] == bom["doca_ofed"]["version"] != ""
    pre = _tasks("rdma_fabric", "tasks/preflight.yml")[0]["ansible.builtin.assert"]["that"]
    assert "rdma_fabric_ofed_flavour == 'inbox' or rdma_fabric_doca_version | length > 0" in pre
    main = _tasks("rdma_fabric", "tasks/main.yml")
    doca = next(t for t in main if t.get("ansible.builtin.include_tasks", {}).get("file") == "doca.yml")
    assert doca["when"] == "rdma_fabric_ofed_flavour == 'doca'"
    repo = next(t for t in _tasks("rdma_fabric", "tasks/doca.yml") if "ansible.builtin.deb822_repository" in t)
    uri = NATIVE.from_string(repo["vars"]["__rdma_fabric_doca_uri"]).render(
        rdma_fabric_doca_local_dir="", __rdma_fabric_doca_repo_dir="/x", rdma_fabric_doca_repo_url="https://mirror/doca/",
        rdma_fabric_doca_version="2.9.1", rdma_fabric_doca_distro="ubuntu22.04", __rdma_fabric_doca_arch="x86_64")
    assert uri == "https://mirror/doca/2.9.1/ubuntu22.04/x86_64/"


# --- 2. RoCE QoS on every rail, with commands mlx5 and the OS have ------------------------------


def _roce_script(**extra: Any) -> str:
    v = role_vars("rdma_fabric", _ctx("roce"), extra)
    return render_template("rdma_fabric", "roce-qos.sh.j2", v)


def test_roce_qos_uses_dcb_app_dscp_prio_or_mlnx_qos_never_apptrust() -> None:
    text = _roce_script()
    assert "apptrust" not in text.replace("`dcb apptrust`", "")
    # traffic_class 106 is DSCP 26, which rides the lossless priority 3.
    # dcb runs whether or not mlnx_qos does: GC-NET-005 reads the dcb APP table and PFC map.
    assert 'dcb app replace dev "$dev" dscp-prio ' in text and " 26:3 " in text and " 25:3 " in text
    assert text.index('dcb app replace') > text.index("mlnx_qos -i") and "else\n    dcb" not in text
    assert " 16:2 " in text and " 48:6 " in text
    assert 'dcb pfc set dev "$dev" prio-pfc 0:off 1:off 2:off 3:on 4:off 5:off 6:off 7:off' in text
    assert 'mlnx_qos -i "$dev" --trust dscp --pfc 0,0,0,1,0,0,0,0' in text
    subprocess.run(["sh", "-n"], input=text, text=True, check=True)


def test_roce_qos_configures_every_rail() -> None:
    found = _roce_script()
    # Every compute RoCE rail device of the platform (dgx-h100-roce), never a guess by link layer.
    assert "for dev in $rails; do" in found and "link_layer" not in found and "\ndev=" not in found
    assert "for ibdev in mlx5_0 mlx5_3 mlx5_4 mlx5_5 mlx5_6 mlx5_9 mlx5_10 mlx5_11; do" in found
    listed = _roce_script(rdma_fabric_roce_interfaces=["ens1f0np0", "ens2f0np0"])
    assert 'rails="ens1f0np0 ens2f0np0"' in listed


def test_the_tool_that_verifies_roce_qos_is_installed() -> None:
    v = role_vars("rdma_fabric", _ctx("roce"))
    assert "iproute2" in v["rdma_fabric_packages"]  # dcb, for GC-NET-005 with the inbox stack


# --- 3. persistence mode on ---------------------------------------------------------------------


@pytest.mark.parametrize(("method", "user"), [("distro", "nvpd"), ("cuda_repo", "nvidia-persistenced")])
def test_persistenced_drop_in_turns_persistence_mode_on(method: str, user: str) -> None:
    v = role_vars("nvidia_driver", _ctx("roce"), {"nvidia_driver_install_method": method})
    text = render_template("nvidia_driver", "nvidia-persistenced-override.conf.j2", v)
    lines = text.splitlines()
    start = lines.index("ExecStart=")
    assert lines[start + 1] == f"ExecStart=/usr/bin/nvidia-persistenced --user {user} --persistence-mode --verbose"
    assert "--no-persistence-mode" not in lines[start + 1]
    service = _tasks("nvidia_driver", "tasks/service.yml")
    dropin = next(t for t in service
                  if t.get("ansible.builtin.template", {}).get("src") == "nvidia-persistenced-override.conf.j2")
    dest = dropin["ansible.builtin.template"]["dest"]
    assert dest.startswith("/etc/systemd/system/nvidia-persistenced.service.d/")
    assert dropin["notify"] == "Restart the persistence daemon"


# --- 4. chrony per target -----------------------------------------------------------------------


def _chrony(fabric: str, **extra: Any) -> str:
    ctx = _ctx(fabric, **extra)
    return render_template("common", "chrony.conf.j2", role_vars("common", ctx))


def test_chrony_on_aws_uses_the_amazon_time_sync_service() -> None:
    text = _chrony("efa")  # Pulumi.aws-h100.yaml: gpucluster_target aws
    # https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/configure-ec2-ntp.html
    assert "server 169.254.169.123 prefer iburst minpoll 4 maxpoll 4" in text
    assert "server fd00:ec2::123 iburst minpoll 4 maxpoll 4" in text
    assert "\npool " not in text


def test_chrony_on_azure_uses_the_hyperv_ptp_clock() -> None:
    text = _chrony("ethernet", gpucluster_target="azure")
    # https://learn.microsoft.com/en-us/azure/virtual-machines/linux/time-sync
    assert "refclock PHC /dev/ptp_hyperv poll 3 dpoll -2 offset 0 stratum 2" in text
    assert "169.254.169.123" not in text


@pytest.mark.parametrize("fabric", ["ethernet", "infiniband", "roce"])
def test_chrony_elsewhere_uses_the_configured_sources(fabric: str) -> None:
    text = _chrony(fabric)
    assert "pool 2.debian.pool.ntp.org iburst" in text
    assert "169.254.169.123" not in text and "ptp_hyperv" not in text


# --- 5. one owner of the container toolkit; CDI follows the driver ------------------------------


# The configure probe's answer: the toolkit's runtime, then containerd's --version line as each
# package prints it (Docker's containerd.io; Debian 12's archive, 1.6.20~ds1-1+deb12u3).
_PROBE_17 = "present\r\ncontainerd containerd.io 1.7.27 05044ec0a9a75232cad458027ca83437aae3f4da\r\n"
_PROBE_16 = "present\ncontainerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+deb12u3\n"


@pytest.mark.parametrize(("probe", "version", "cdi"), [
    (_PROBE_17, "1.7.27", True),
    (_PROBE_16, "1.6.20", False),
    ("present\ncontainerd github.com/containerd/containerd 1.7.2 1.7.2\n", "1.7.2", True),  # the floor itself
    ("absent\n\n", "", False),  # no containerd: nothing claims CDI
])
def test_config_toml_claims_cdi_only_where_containerd_takes_it(probe: str, version: str, cdi: bool) -> None:
    """containerd's CRI plugin takes CDI from 1.7.2 on (the bill of materials' floor); Debian 12's
    archive serves 1.6.20, whose config.toml must not claim it. The NVIDIA runtime stays the default
    either way, so GPUs still reach pods; the role fails where neither way is left."""
    v = role_vars("container_runtime", _ctx("roce"), {"__container_runtime_toolkit": {"stdout": probe}})
    assert v["container_runtime_containerd_floor"] == "1.7.2"
    assert v["__container_runtime_containerd_version"] == version
    assert v["__container_runtime_cdi"] is cdi
    assert v["__container_runtime_toolkit_present"] is probe.startswith("present")
    text = render_template("container_runtime", "config.toml.j2", dict(v, __container_runtime_nvidia_present=True))
    assert ("enable_cdi = true" in text) is cdi and ("cdi_spec_dirs" in text) is cdi
    assert 'default_runtime_name = "nvidia"' in text
    tasks = {t["name"]: t for t in _tasks("container_runtime", "tasks/configure.yml")}
    guard = tasks["Check that GPUs reach pods on this node"]["ansible.builtin.assert"]["that"]
    assert guard == "__container_runtime_cdi or container_runtime_nvidia_default_runtime | bool"


def test_the_role_owns_the_toolkit_because_the_operator_does_not() -> None:
    operator = gpu_operator_release(load_spec(REPO / "Pulumi.onprem-h100-roce.yaml")).values
    assert operator["toolkit"]["enabled"] is False
    gpu = role_vars("container_runtime", _ctx("roce"), {"__container_runtime_toolkit": {"stdout": _PROBE_17}})
    assert gpu["container_runtime_nvidia_toolkit_owner"] == "role"
    assert gpu["container_runtime_nvidia_toolkit_install_enabled"] is True
    assert gpu["container_runtime_nvidia_default_runtime"] is True
    text = render_template("container_runtime", "config.toml.j2", dict(gpu, __container_runtime_nvidia_present=True))
    assert 'default_runtime_name = "nvidia"' in text and "enable_cdi = true" in text
    # No GPU on a lab node and no route to NVIDIA: nothing to install there.
    lab = role_vars("container_runtime", _ctx("ethernet"))
    assert lab["container_runtime_nvidia_toolkit_install_enabled"] is False


def test_a_driver_install_regenerates_the_cdi_spec() -> None:
    for name in ("install-distro.yml", "install-cuda-repo.yml", "install-runfile.yml"):
        notified = [t.get("notify") for t in _tasks("nvidia_driver", f"tasks/{name}") if t.get("notify")]
        flat = [n for x in notified for n in ([x] if isinstance(x, str) else x)]
        assert "Regenerate the CDI spec for the new driver" in flat, name
    handler = next(h for h in _tasks("nvidia_driver", "handlers/main.yml")
                   if h["name"] == "Regenerate the CDI spec for the new driver")
    # ansible-core refuses include_role as a handler: the handler records the change, the role
    # flushes its handlers before container_runtime runs, and that role's default reads the fact.
    assert handler["ansible.builtin.set_fact"] == {"nvidia_driver_cdi_stale": True}
    assert not any("include_role" in k for h in _tasks("nvidia_driver", "handlers/main.yml") for k in h)
    main = _tasks("nvidia_driver", "tasks/main.yml")
    assert main[-1].get("ansible.builtin.meta") == "flush_handlers"
    ctx = _ctx("roce")
    assert role_vars("container_runtime", ctx)["container_runtime_cdi_regenerate"] is False
    stale = role_vars("container_runtime", dict(ctx, nvidia_driver_cdi_stale=True))
    assert stale["container_runtime_cdi_regenerate"] is True
    generate = next(t for t in _tasks("container_runtime", "tasks/cdi.yml") if "ansible.builtin.command" in t)
    assert "creates" not in generate["ansible.builtin.command"]
    assert "(container_runtime_cdi_regenerate | bool) or not __container_runtime_cdi_probe.results[2].stat.exists" \
        in generate["when"]


# --- 6. kubelet policies, GPU taint, one dcgm-exporter ------------------------------------------


def _kubelet_dropin(group: str) -> dict[str, Any]:
    v = role_vars("kubernetes_node", _ctx("roce", group))
    return yaml.safe_load(render_template("kubernetes_node", "50-gpucluster-resources.conf.j2", v))


def test_gpu_kubelet_uses_topology_and_static_cpu_manager_with_reserved_cpus() -> None:
    doc = _kubelet_dropin("gpu")
    assert doc["kind"] == "KubeletConfiguration"
    assert doc["topologyManagerPolicy"] in ("restricted", "single-numa-node")
    assert doc["topologyManagerScope"] == "pod"
    assert doc["cpuManagerPolicy"] == "static"
    assert str(doc["reservedSystemCPUs"]).strip()  # the static policy needs CPUs kept back
    assert doc["registerWithTaints"] == [{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}]
    unit = render_template("kubernetes_node", "20-gpucluster-config-dir.conf.j2",
                           role_vars("kubernetes_node", _ctx("roce")))
    assert "--config-dir=/etc/kubernetes/kubelet.conf.d" in unit


def test_control_plane_kubelet_gets_no_gpu_taint_nor_cpu_pinning() -> None:
    doc = _kubelet_dropin("control_plane")
    assert "registerWithTaints" not in doc and "cpuManagerPolicy" not in doc


def test_the_worker_role_taints_a_node_that_registered_before() -> None:
    defaults = yaml.safe_load((ROLES / "kubernetes_worker/defaults/main.yml").read_text())
    node = yaml.safe_load((ROLES / "kubernetes_node/defaults/main.yml").read_text())
    assert defaults["kubernetes_worker_taints"] == node["kubernetes_node_gpu_taints"]
    assert any("taint nodes" in str(t.get("ansible.builtin.command", ""))
               for t in _tasks("kubernetes_worker", "tasks/join.yml"))


def test_dcgm_exporter_runs_once_per_gpu_node() -> None:
    operator = gpu_operator_release(load_spec(REPO / "Pulumi.onprem-h100-roce.yaml")).values
    kube = role_vars("monitoring", _ctx("roce"))  # Kubernetes enabled in that stack, GPU Operator mode
    runs = [operator["dcgmExporter"]["enabled"], kube["monitoring_dcgm_exporter_enabled"]]
    assert runs.count(True) == 1
    no_kube = role_vars("monitoring", _ctx("roce", gpucluster_kubernetes=None, gpucluster_gpu_mode="none"))
    assert no_kube["monitoring_dcgm_exporter_owner"] == "role" and no_kube["monitoring_dcgm_exporter_enabled"] is True


# --- 7. Ceph: OSDs on stable names --------------------------------------------------------------


def _resolve_script(by_id: Path) -> str:
    task = next(t for t in _tasks("ceph_osd", "tasks/detect.yml") if t["name"].startswith("Resolve each OSD device"))
    return task["ansible.builtin.raw"].replace("/dev/disk/by-id", str(by_id))


def _rows(stdout: str) -> list[dict[str, Any]]:
    task = next(t for t in _tasks("ceph_osd", "tasks/detect.yml") if t["name"].startswith("Settle this host's OSD"))
    return NATIVE.from_string(task["vars"]["__ceph_osd_rows"]).render(
        __ceph_osd_resolved={"stdout_lines": stdout.splitlines()})


def _unstable(rows: list[dict[str, Any]], loop_allowed: bool) -> list[dict[str, Any]]:
    task = next(t for t in _tasks("ceph_osd", "tasks/preflight.yml") if t["name"].endswith("stable name"))
    return NATIVE.from_string(task["vars"]["__ceph_osd_unstable"]).render(
        __ceph_osd_resolution=rows, ceph_osd_loop_devices_allowed=loop_allowed)


def test_osd_devices_resolve_to_their_by_id_names(tmp_path: Path) -> None:
    disks = tmp_path / "dev"
    disks.mkdir()
    (disks / "nvme1n1").write_text("")
    (disks / "nvme2n1").write_text("")
    by_id = tmp_path / "by-id"
    by_id.mkdir()
    (by_id / "nvme-Samsung_PM1733_S1").symlink_to(disks / "nvme1n1")
    (by_id / "nvme-eui.0025388b01234567").symlink_to(disks / "nvme1n1")
    (by_id / "nvme-Samsung_PM1733_S1-part1").symlink_to(disks / "nvme2n1")  # a partition never names a disk
    script = _resolve_script(by_id).replace("{{ __ceph_osd_given | map('quote') | join(' ') }}",
                                            f"{disks}/nvme1n1 {disks}/nvme2n1")
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout
    rows = _rows(out)
    assert rows[0]["stable"] == f"{by_id}/nvme-eui.0025388b01234567"  # world-wide id first
    assert rows[1]["by_id"] == "" and rows[1]["stable"] == f"{disks}/nvme2n1"
    unstable = _unstable(rows, loop_allowed=False)
    assert [r["given"] for r in unstable] == [f"{disks}/nvme2n1"]


def test_loop_devices_pass_only_where_allowed() -> None:
    rows = _rows("/dev/loop3\t/dev/loop3\t\n")
    assert rows[0]["loop"] is True
    assert _unstable(rows, loop_allowed=True) == []
    assert len(_unstable(rows, loop_allowed=False)) == 1
    v = yaml.safe_load((ROLES / "ceph_osd/defaults/main.yml").read_text())
    # Allowed for the lab's disk file only, never for devices the spec names.
    assert v["ceph_osd_loop_devices_allowed"] == "{{ ceph_osd_devices | length == 0 }}"


def test_pools_without_a_pg_count_are_autoscaled() -> None:
    task = next(t for t in _tasks("ceph_pools", "tasks/pools.yml") if "ceph_pool" in t)
    # The spec's pools go to the module as they are: a pool without pg_num reaches it as null.
    assert task["ceph_pool"]["pools"] == "{{ ceph_pools_pools }}"
    source = (ROLES / "ceph_pools/library/ceph_pool.py").read_text()
    assert '"pg_num": {"type": "int", "required": False}' in source
    assert "--autoscale-mode={'off' if fixed else 'on'}" in source
