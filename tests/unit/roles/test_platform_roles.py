"""The roles read the node's platform (its rails), the per-OS package table and the inventory's GPU
mode: each test renders the role's own defaults, vars and templates (tests/unit/roles/render.py)
against inventories built from the example stacks, and fails if a role went back to the removed
profile keys or to guessing."""

from __future__ import annotations

import copy
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.inventory import build_inventory
from gpucluster.kube.manifests import gpu_operator_release
from gpucluster.outputs import StackOutputs
from gpucluster.render.os_packages import os_packages
from gpucluster.spec import load_spec
from gpucluster.spec.cluster import platform_data
from gpucluster.spec.loader import load_platforms
from gpucluster.spec.models import Bom
from tests.unit.example_outputs import example_outputs
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

REMOVED_PROFILE_KEYS = ("hca", "efa_interfaces", "large_message_bytes", "ib_write_bw_gbps")


def _inventory(stack: str, interface: str = "eth1") -> dict[str, Any]:
    cluster = load_spec(REPO / stack)
    outputs = StackOutputs.model_validate(example_outputs(cluster, ssh_user="root", fabric_interface=interface))
    return build_inventory(cluster, outputs)


def _ctx(inventory: dict[str, Any], group: str = "gpu", **extra: Any) -> dict[str, Any]:
    ctx = host_context(inventory, first_host(inventory, group))
    ctx.update(extra)
    return ctx


def _preflight(role: str) -> list[str]:
    task = yaml.safe_load((ROLES / role / "tasks" / "preflight.yml").read_text())[0]
    that: list[str] = task["ansible.builtin.assert"]["that"]
    return that


def _failing(role: str, v: dict[str, Any]) -> list[str]:
    """The preflight assertions that do not hold for these variables."""
    return [cond for cond in _preflight(role) if NATIVE.from_string("{{ " + cond + " }}").render(v) is not True]


# --- no role reads the removed profile keys -----------------------------------------------------


def test_no_role_reads_the_removed_profile_keys() -> None:
    offenders = []
    for path in sorted([*ROLES.rglob("*.yml"), *ROLES.rglob("*.j2"), *(REPO / "templates").rglob("*")]):
        if not path.is_file():
            continue
        text = path.read_text()
        for key in REMOVED_PROFILE_KEYS:
            if f".{key}" in text or f"'{key}'" in text or f'"{key}"' in text:
                offenders.append(f"{path.relative_to(REPO)}: {key}")
    assert offenders == []


# --- 1. nvidia-peermem follows the node's platform ----------------------------------------------


@pytest.mark.parametrize(("fabric", "want"), [("infiniband", True), ("roce", True), ("efa", False),
                                              ("ethernet", False)])
def test_peermem_follows_the_platforms_compute_rails_with_doca(fabric: str, want: bool) -> None:
    inv = inventory_for(fabric)
    v = role_vars("nvidia_driver", _ctx(inv, gpucluster_ofed_flavour="doca"))
    assert v["nvidia_driver_peermem_enabled"] is want
    inbox = role_vars("nvidia_driver", _ctx(inv, gpucluster_ofed_flavour="inbox"))
    assert inbox["nvidia_driver_peermem_enabled"] is False


def test_peermem_reads_the_node_platform_not_the_cluster_fabric_type() -> None:
    inv = inventory_for("infiniband")
    ctx = _ctx(inv, gpucluster_ofed_flavour="doca")
    # The same InfiniBand cluster, this node on a platform whose only RDMA rails are EFA or storage.
    efa_platform = platform_data(load_platforms()["aws-p5-48xlarge"])  # 32 EFA compute ports, nothing else
    assert {r["kind"] for r in efa_platform["rails"] if r["role"] == "compute"} == {"efa"}
    efa = dict(ctx, gpucluster_platforms={**ctx["gpucluster_platforms"], "x": efa_platform}, gpucluster_platform="x")
    assert role_vars("nvidia_driver", efa)["nvidia_driver_peermem_enabled"] is False
    storage = dict(ctx, gpucluster_platform="server-ib-storage")
    assert role_vars("nvidia_driver", storage)["nvidia_driver_peermem_enabled"] is False


# --- 2. rdma_fabric preflight and RoCE rails from the platform ----------------------------------


def test_azure_ib_needs_no_subnet_manager_and_storage_vms_no_fabric_address() -> None:
    inv = _inventory("Pulumi.azure-h100.yaml", "ib0")
    gpu = role_vars("rdma_fabric", _ctx(inv, "gpu"))
    assert gpu["rdma_fabric_subnet_managers"] == [] and gpu["__rdma_fabric_sm_by_provider"] is True
    assert gpu["__rdma_fabric_sm_required"] is False
    assert _failing("rdma_fabric", gpu) == []
    # A storage VM (cloud-ethernet platform) has no RDMA rail and needs no fabric address.
    storage = role_vars("rdma_fabric", _ctx(inv, "storage", gpucluster_fabric_ip=None), {"rdma_fabric_address": ""})
    assert storage["__rdma_fabric_address_required"] is False
    assert _failing("rdma_fabric", storage) == []


def test_a_cluster_run_ib_fabric_still_needs_subnet_managers_and_addresses() -> None:
    inv = inventory_for("infiniband")
    v = role_vars("rdma_fabric", _ctx(inv), {"rdma_fabric_subnet_managers": []})
    assert v["__rdma_fabric_sm_by_provider"] is False and v["__rdma_fabric_sm_required"] is True
    assert any("subnet_managers" in c for c in _failing("rdma_fabric", v))
    no_ip = role_vars("rdma_fabric", _ctx(inv), {"rdma_fabric_address": ""})
    assert no_ip["__rdma_fabric_address_required"] is True
    assert any("rdma_fabric_address" in c for c in _failing("rdma_fabric", no_ip))
    assert _failing("rdma_fabric", role_vars("rdma_fabric", _ctx(inv))) == []


def test_efa_nodes_need_no_fabric_address() -> None:
    v = role_vars("rdma_fabric", _ctx(inventory_for("efa")), {"rdma_fabric_address": ""})
    assert v["__rdma_fabric_address_required"] is False


def _roce_script(**extra: Any) -> str:
    v = role_vars("rdma_fabric", _ctx(inventory_for("roce")), extra)
    return render_template("rdma_fabric", "roce-qos.sh.j2", v)


def test_roce_qos_script_covers_exactly_the_platforms_compute_roce_devices(tmp_path: Path) -> None:
    text = _roce_script()
    # dgx-h100-roce: compute mlx5_0, 3-6, 9-11; the storage ports 1, 2, 7, 8 are left alone.
    assert "for ibdev in mlx5_0 mlx5_3 mlx5_4 mlx5_5 mlx5_6 mlx5_9 mlx5_10 mlx5_11; do" in text
    assert "link_layer" not in text
    subprocess.run(["sh", "-n"], input=text, text=True, check=True)
    # Run the device-to-netdev part on a fake /sys: each device's netdev, in order; a missing one stops it.
    head = text.split("if [ -z \"$rails\" ]", 1)[0].replace("/sys/class/infiniband", str(tmp_path))
    head = head.replace("set -eu", "set -eu\n") + 'echo "RAILS:$rails"\n'
    for i, dev in enumerate(["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]):
        (tmp_path / dev / "device" / "net" / f"ens{i}np0").mkdir(parents=True)
    (tmp_path / "mlx5_1" / "device" / "net" / "storage0").mkdir(parents=True)
    done = subprocess.run(["sh", "-c", head], text=True, capture_output=True, check=True)
    assert done.stdout.strip() == "RAILS: " + " ".join(f"ens{i}np0" for i in range(8))
    (tmp_path / "mlx5_11" / "device" / "net" / "ens7np0").rmdir()
    failed = subprocess.run(["sh", "-c", head], text=True, capture_output=True)
    assert failed.returncode == 1 and "mlx5_11" in failed.stderr


def test_roce_qos_script_takes_listed_netdevs_when_given() -> None:
    assert 'rails="ens1f0np0 ens2f0np0"' in _roce_script(rdma_fabric_roce_interfaces=["ens1f0np0", "ens2f0np0"])


# --- 5. dcgm-exporter has one owner -------------------------------------------------------------


@pytest.mark.parametrize(("kubernetes", "gpu_mode", "owner"), [
    (True, "operator", "operator"),
    (True, "device_plugin", "role"),
    (False, "operator", "role"),
])
def test_dcgm_exporter_owner_follows_the_gpu_mode(kubernetes: bool, gpu_mode: str, owner: str) -> None:
    raw = yaml.safe_load((REPO / "Pulumi.onprem-h100-roce.yaml").read_text())
    raw["config"]["gpucluster:kubernetes"] = dict(raw["config"]["gpucluster:kubernetes"], enabled=kubernetes,
                                                 gpu_mode=gpu_mode)
    stack = REPO / "tests" / "unit" / "roles" / f".tmp-gpu-mode-{kubernetes}-{gpu_mode}.yaml"
    try:
        stack.write_text(yaml.safe_dump(raw))
        cluster = load_spec(stack)
        outputs = StackOutputs.model_validate(example_outputs(cluster, ssh_user="root", fabric_interface="eth1"))
        inv = build_inventory(cluster, outputs)
    finally:
        stack.unlink(missing_ok=True)
    assert inv["all"]["vars"]["gpucluster_gpu_mode"] == (gpu_mode if kubernetes else "none")
    v = role_vars("monitoring", _ctx(inv))
    assert v["monitoring_dcgm_exporter_owner"] == owner
    assert v["monitoring_dcgm_exporter_enabled"] is (owner == "role")
    if kubernetes and gpu_mode == "operator":
        # The Operator's chart runs it, so exactly one of the two does.
        assert gpu_operator_release(cluster).values["dcgmExporter"]["enabled"] is True


# --- 6. nvidia-persistenced unit for runfile installs -------------------------------------------


def _service_tasks() -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = yaml.safe_load((ROLES / "nvidia_driver" / "tasks" / "service.yml").read_text())
    return tasks


def test_a_runfile_install_gets_a_persistenced_unit_and_user() -> None:
    tasks = _service_tasks()
    unit = next(t for t in tasks if t.get("ansible.builtin.template", {}).get("dest")
                == "/etc/systemd/system/nvidia-persistenced.service")
    assert "nvidia_driver_install_method == 'runfile'" in unit["when"]
    user = next(t for t in tasks if "ansible.builtin.user" in t)
    assert "nvidia_driver_install_method == 'runfile'" in user["when"]
    names = [t["name"] for t in tasks]
    # Unit and user exist before the daemon is started.
    start = names.index("Start the persistence daemon and enable it at boot")
    assert names.index(unit["name"]) < start and names.index(user["name"]) < start
    v = role_vars("nvidia_driver", _ctx(inventory_for("roce")), {"nvidia_driver_install_method": "runfile"})
    assert user["ansible.builtin.user"]["name"] == "{{ nvidia_driver_persistenced_user }}"
    assert v["nvidia_driver_persistenced_user"] == "nvidia-persistenced"
    text = render_template("nvidia_driver", "nvidia-persistenced.service.j2", v)
    assert "ExecStart=/usr/bin/nvidia-persistenced --user nvidia-persistenced --persistence-mode" in text
    assert "Type=forking" in text and "WantedBy=multi-user.target" in text
    assert "--no-persistence-mode" not in text


# --- 7. package names from the per-OS table -----------------------------------------------------


@pytest.mark.parametrize("os_id", ["debian-12", "ubuntu-22.04", "ubuntu-24.04"])
def test_rdma_and_monitoring_packages_come_from_the_os_table(os_id: str) -> None:
    inv = inventory_for("roce")
    ctx = _ctx(inv, gpucluster_os=os_id)
    bom = Bom.model_validate(ctx["gpucluster_bom"])
    rdma = role_vars("rdma_fabric", ctx)
    want = os_packages(os_id, "rdma_fabric", bom)
    assert rdma["rdma_fabric_packages"] == want["packages"] and "iproute2" in want["packages"]
    assert rdma["rdma_fabric_doca_distro"] == (want["doca_dist"] or "")
    mon = role_vars("monitoring", ctx)
    assert mon["monitoring_node_exporter_packages"] == os_packages(os_id, "monitoring", bom)["packages"]


def test_doca_on_an_os_nvidia_does_not_publish_it_for_fails_preflight() -> None:
    ctx = _ctx(inventory_for("roce"), gpucluster_os="debian-12", gpucluster_ofed_flavour="doca")
    v = role_vars("rdma_fabric", copy.deepcopy(ctx))
    assert v["rdma_fabric_doca_distro"] == ""
    assert "rdma_fabric_ofed_flavour == 'inbox' or rdma_fabric_doca_distro | length > 0" in _failing("rdma_fabric", v)
    ok = role_vars("rdma_fabric", dict(ctx, gpucluster_os="ubuntu-22.04"))
    assert ok["rdma_fabric_doca_distro"] == "ubuntu22.04"
    assert _failing("rdma_fabric", ok) == []


# --- rdma_fabric asks for an interface only where it sets the node's fabric address ----------


def _as_exported(stack: str, addresses: dict[str, tuple[str, str | None]] | None = None,
                 interfaces: dict[str, str | None] | None = None) -> dict[str, Any]:
    cluster = load_spec(REPO / stack)
    outputs = StackOutputs.model_validate(example_outputs(cluster, ssh_user="ubuntu", addresses=addresses,
                                                        fabric_interfaces=interfaces))
    return build_inventory(cluster, outputs)


def test_a_node_without_a_fabric_address_needs_no_interface() -> None:
    """Where the target exports no fabric address for a node, the role sets none and needs no
    interface (an EFA node: the AWS target exports none, EFA-only interfaces carry no IP)."""
    cluster = load_spec(REPO / "Pulumi.aws-h100.yaml")
    inv = _as_exported("Pulumi.aws-h100.yaml", {n.name: (n.management_ip, None) for n in cluster.nodes})
    v = role_vars("rdma_fabric", _ctx(inv))
    assert v["rdma_fabric_interface"] == "" and v["rdma_fabric_address"] == ""
    assert _failing("rdma_fabric", v) == []


def test_a_node_with_a_fabric_address_but_no_interface_fails_preflight() -> None:
    cluster = load_spec(REPO / "Pulumi.onprem-h100-ib.yaml")
    inv = _as_exported("Pulumi.onprem-h100-ib.yaml", interfaces={n.name: None for n in cluster.nodes})
    v = role_vars("rdma_fabric", _ctx(inv))
    assert v["rdma_fabric_address"] and v["rdma_fabric_interface"] == ""
    assert _failing("rdma_fabric", v) == [
        "rdma_fabric_address | length == 0 or rdma_fabric_type not in ['infiniband', 'roce'] "
        "or rdma_fabric_interface | length > 0"]
