"""GC-NET-003 and GC-NET-005 judge against the node's platform, and the all-reduce verdict size comes
from the profile or platform with no fallback."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest
import yaml

from gpucluster.conformance.fabric import verdict_size
from gpucluster.conformance.nodes import NodeInfo
from gpucluster.conformance.rdma_checks import (
    compute_hcas,
    dscp_prio_map,
    hca_problems,
    pfc_priorities,
    roce_qos_problems,
)
from gpucluster.render.platform import fabric_netdev, platform_devices, platform_rdma_addressed, provider_ports
from gpucluster.spec.loader import load_platforms, load_profiles
from gpucluster.spec.models import HardwareProfile, Platform, RoceQos

REPO = Path(__file__).resolve().parents[3]
PLATFORMS = REPO / "gpucluster" / "data" / "platforms"
PROFILES = REPO / "gpucluster" / "data" / "profiles"


def _platform(name: str) -> Platform:
    """The platform file as the renderers take it (gpucluster.render.platform takes the spec's model)."""
    return Platform.model_validate(yaml.safe_load((PLATFORMS / f"{name}.yaml").read_text()))


def _model(name: str) -> Platform:
    """The platform as the suite holds it (the spec's model)."""
    return load_platforms()[name]


DGX_COMPUTE = ["mlx5_0", "mlx5_3", "mlx5_4", "mlx5_5", "mlx5_6", "mlx5_9", "mlx5_10", "mlx5_11"]
DGX_ALL = [f"mlx5_{i}" for i in range(12)]


# --- the platform reading the role and the checks share -----------------------------------------


def test_platform_devices_are_the_exact_compute_names() -> None:
    assert platform_devices(_platform("dgx-h100")) == DGX_COMPUTE
    # The storage cards: port 2s Ethernet, port 1s InfiniBand (NVIDIA's reference deployment).
    assert platform_devices(_platform("dgx-h100"), role="storage") == ["mlx5_1", "mlx5_7"]
    assert platform_devices(_platform("dgx-h100"), kinds=("ethernet",), role="storage") == ["mlx5_2", "mlx5_8"]
    assert platform_devices(_platform("dgx-h100-roce"), kinds=("roce",)) == DGX_COMPUTE
    assert platform_devices(_platform("dgx-h100"), kinds=("roce",)) == []
    assert platform_devices(_platform("aws-p5-48xlarge")) == []


@pytest.mark.parametrize(("name", "want"), [("dgx-h100", True), ("azure-nd96isr-h100-v5", True),
                                            ("aws-p5-48xlarge", False), ("cloud-ethernet", False), ("lab", False),
                                            ("oci-bm-gpu-h100-8", False)])
def test_which_platforms_carry_a_fabric_address(name: str, want: bool) -> None:
    """OCI's RDMA ports carry OCI's addresses, not the cluster's: nothing plans or puts one there."""
    assert platform_rdma_addressed(_platform(name)) is want


def test_ocis_ports_are_the_providers_to_address() -> None:
    ports = provider_ports(_platform("oci-bm-gpu-h100-8"))
    assert [p for p, _ in ports] == [f"rdma{i}" for i in range(16)]
    assert {tuple(c) for _, c in ports} == {("192.168.0.0/16", "10.224.0.0/12")}
    assert fabric_netdev(_platform("oci-bm-gpu-h100-8")) is None  # no port carries a spec address
    assert provider_ports(_platform("dgx-h100-roce")) == []


# --- GC-NET-003 ---------------------------------------------------------------------------------


def test_a_dgx_with_its_storage_ports_passes() -> None:
    assert hca_problems(DGX_ALL, "dgx-h100", _model("dgx-h100")) == []


def test_a_missing_compute_device_is_named() -> None:
    found = [d for d in DGX_ALL if d != "mlx5_9"]
    assert hca_problems(found, "dgx-h100", _model("dgx-h100")) == [
        "missing compute RDMA device(s) of platform dgx-h100: mlx5_9"]
    # Twelve devices but a compute one absent: a count would have passed this.
    renamed = [*found, "mlx5_12"]
    problems = hca_problems(renamed, "dgx-h100", _model("dgx-h100"))
    assert "missing compute RDMA device(s) of platform dgx-h100: mlx5_9" in problems
    assert "RDMA device(s) no rail of platform dgx-h100 names: mlx5_12" in problems


def test_ib_write_bw_measures_the_compute_devices_only() -> None:
    assert compute_hcas(_model("dgx-h100"), sorted(DGX_ALL)) == DGX_COMPUTE
    assert compute_hcas(_model("dgx-h100"), ["mlx5_1", "mlx5_0"]) == ["mlx5_0"]
    assert compute_hcas(_model("aws-p5-48xlarge"), ["rdmap0s0", "rdmap1s0"]) == ["rdmap0s0", "rdmap1s0"]


def test_azure_frontend_port_is_expected() -> None:
    found = [f"mlx5_ib{i}" for i in range(8)] + ["mlx5_an0"]
    assert hca_problems(found, "azure-nd96isr-h100-v5", _model("azure-nd96isr-h100-v5")) == []


def test_efa_devices_are_counted() -> None:
    p5 = _model("aws-p5-48xlarge")
    assert hca_problems([f"rdmap{i}s0" for i in range(32)], "aws-p5-48xlarge", p5) == []
    short = hca_problems([f"rdmap{i}s0" for i in range(31)], "aws-p5-48xlarge", p5)
    assert len(short) == 1 and "31 RDMA device(s)" in short[0] and "lists 32" in short[0]


# --- GC-NET-005: iproute2 dcb's JSON ----------------------------------------------------------
# Shapes from iproute2's source (dcb/dcb_app.c dcb_app_print_filtered, dcb/dcb_pfc.c
# dcb_pfc_print_prio_pfc with dcb.c dcb_print_array_on_off; https://github.com/iproute2/iproute2):
# no real captured output was found, so these follow the printing code of v6.1 (Debian 12: pairs)
# and of v6.5 and later (each pair followed by a " " string).

QOS = RoceQos(pfc_priority=3, dscp_trust=True, ecn=True, traffic_class=106)


def _app(entries: list[tuple[int, int]], trailing_space: bool) -> str:
    rows = [[d, p, " "] if trailing_space else [d, p] for d, p in entries]
    return json.dumps({"dscp_prio": rows}, separators=(",", ":"))


def _pfc(on: list[int]) -> str:
    return json.dumps({"prio_pfc": [i in on for i in range(8)]}, separators=(",", ":"))


# The role's map (roles/rdma_fabric/vars/main.yml): DSCP // 8, RoCE's DSCP 26 on priority 3.
ROLE_MAP = [(d, 3 if d == 26 else d // 8) for d in range(64)]


@pytest.mark.parametrize("trailing_space", [False, True])
def test_the_roles_qos_passes(trailing_space: bool) -> None:
    app = _app(ROLE_MAP, trailing_space)
    assert dscp_prio_map(app)[26] == 3 and len(dscp_prio_map(app)) == 64
    assert pfc_priorities(_pfc([3])) == [3]
    assert roce_qos_problems("ens1np0", app, _pfc([3]), QOS) == []


def test_untrusted_dscp_and_wrong_pfc_fail_by_name() -> None:
    # An empty APP table: dcb prints the object without the dscp_prio key.
    problems = roce_qos_problems("ens1np0", "{}", _pfc([3, 4]), QOS)
    assert problems == ["ens1np0: no DSCP entry in the APP table (DSCP not trusted)",
                        "ens1np0: PFC on priorities [3, 4], the spec says [3]"]
    # Traffic class 160 is DSCP 40; a table that leaves it on its default priority 5 is wrong.
    default_map = _app([(d, d // 8) for d in range(64)], False)
    assert roce_qos_problems("x", default_map, _pfc([3]), QOS.model_copy(update={"traffic_class": 160})) == [
        "x: DSCP 40 maps to priority 5, the spec says 3"]


def test_unreadable_dcb_output_is_an_error_not_a_pass() -> None:
    with pytest.raises(ValueError, match="prio_pfc"):
        pfc_priorities('{"prio_pfc":[true]}')
    with pytest.raises(ValueError, match="not JSON"):
        dscp_prio_map("Error: Interface not found")


# --- all-reduce verdict sizes -------------------------------------------------------------------


def _node(profile: HardwareProfile, platform: Platform) -> NodeInfo:
    return NodeInfo(name="n1", address="10.0.0.1", port=22, user="root", key_file=None, groups=("gpu",),
                    profile_name="p", profile=profile, platform_name="q", platform=platform,
                    fabric_ip=None, fabric_interface=None)


def test_verdict_sizes_come_from_profile_and_platform() -> None:
    profile = load_profiles()["h100-sxm-8"]
    platform = _model("dgx-h100")
    node = _node(profile, platform)
    assert verdict_size(node, "intra") == profile.floors.allreduce_intra_verdict_bytes
    assert verdict_size(node, "inter") == platform.floors.allreduce_inter_verdict_bytes == 8589934592


@pytest.mark.parametrize(("scope", "where"), [("intra", "gpucluster/data/profiles/p.yaml"),
                                              ("inter", "gpucluster/data/platforms/q.yaml")])
def test_a_floor_without_its_verdict_size_names_the_file(scope: str, where: str) -> None:
    # The profile's model refuses a floor without its size when it reads a file; one built past it
    # (model_copy validates nothing) still gets the error naming the file.
    profile = load_profiles()["h100-sxm-8"]
    profile = profile.model_copy(update={"floors": profile.floors.model_copy(
        update={"allreduce_intra_busbw_gbps": 100.0, "allreduce_intra_verdict_bytes": None})})
    platform = _model("dgx-h100")
    platform = platform.model_copy(update={"floors": platform.floors.model_copy(
        update={"allreduce_inter_busbw_gbps": 50.0, "allreduce_inter_verdict_bytes": None})})
    node = _node(profile, platform)
    with pytest.raises(ValueError) as err:
        verdict_size(node, scope)
    message = str(err.value)
    assert message.startswith(f"{where}: floors.allreduce_{scope}_verdict_bytes is not set") and "\n" not in message


def test_every_shipped_floor_has_its_verdict_size() -> None:
    for path in sorted(PROFILES.glob("*.yaml")):
        floors = yaml.safe_load(path.read_text())["floors"]
        if floors.get("allreduce_intra_busbw_gbps") is not None:
            assert floors.get("allreduce_intra_verdict_bytes"), path.name
    for path in sorted(PLATFORMS.glob("*.yaml")):
        floors = yaml.safe_load(path.read_text())["floors"]
        if floors.get("allreduce_inter_busbw_gbps") is not None:
            assert floors.get("allreduce_inter_verdict_bytes"), path.name


@pytest.mark.parametrize(("folder", "key"), [("profiles", "allreduce_intra"), ("platforms", "allreduce_inter")])
def test_loading_a_floor_without_its_verdict_size_is_one_line_naming_the_file(
        tmp_path: Path, folder: str, key: str) -> None:
    from gpucluster.errors import InputError
    from gpucluster.spec.loader import load_platforms, load_profiles

    source = PROFILES / "h100-sxm-8.yaml" if folder == "profiles" else PLATFORMS / "dgx-h100.yaml"
    raw = yaml.safe_load(source.read_text())
    raw["floors"][f"{key}_verdict_bytes"] = None
    (tmp_path / source.name).write_text(yaml.safe_dump(raw))
    load = load_profiles if folder == "profiles" else load_platforms
    with pytest.raises(InputError) as err:
        load(tmp_path)
    lines = [p for p in err.value.problems if source.name in p]
    assert len(lines) == 1 and f"{key}_verdict_bytes" in lines[0] and "\n" not in lines[0]


def test_mpi_never_waits_for_an_address_efa_does_not_have(tmp_path) -> None:
    """AWS's EFA-only interfaces carry no IP (fabric_ip None): mpirun's own traffic goes over the
    management network there; the lab's nodes have fabric addresses and keep the fabric, and their
    data goes over the compute rails (each alone, or all of them)."""
    from gpucluster import hostkeys
    from gpucluster.conformance.fabric import Fabric
    from gpucluster.conformance.nodes import load_inventory, parse_inventory
    from gpucluster.inventory import parse_inventory_text

    golden = Path(__file__).resolve().parents[2] / "golden" / "inventory"
    data = parse_inventory_text((golden / "aws-h100.yml").read_text())
    for host in data["all"]["hosts"].values():
        host["gpucluster_fabric_ip"] = None  # what stacks/targets/aws.py exports: EFA has no address
    aws = parse_inventory(data, "aws-h100.yml")
    gpus = aws.in_groups(("gpu",))
    assert gpus and all(n.fabric_ip is None for n in gpus)
    fabric = Fabric(aws, tmp_path, tmp_path / "ssh_config", hostkeys.policy_for(aws.target, aws.cluster_name), "")
    assert fabric.control_cidr(gpus) == aws.fabric.management_cidr and fabric.data_cidrs(gpus) is None
    lab = load_inventory(golden / "lab.yml")
    gpus = lab.in_groups(("gpu",))
    fabric = Fabric(lab, tmp_path, tmp_path / "ssh_config", hostkeys.policy_for(lab.target, lab.cluster_name), "")
    assert fabric.control_cidr(gpus) == lab.fabric.fabric_cidr
    assert fabric.data_cidrs(gpus) == "10.77.2.0/24,10.77.3.0/24" and fabric.data_cidrs(gpus, 1) == "10.77.3.0/24"
    assert fabric.data_ports(gpus) == "10.77.2.0/24,10.77.3.0/24" and fabric.data_ports(gpus, 1) == "10.77.3.0/24"
    assert fabric.data_networks(gpus) == "10.77.2.0/24,10.77.3.0/24"
    # OCI: no fabric address of the spec's (the image's own are on the ports): mpirun's own traffic goes
    # over the management network (OCI's NCCL bootstraps over eth0); off GPUs, the TCP data goes over
    # the 16 RDMA ports the image addresses, named (one range for all of them would pin Open MPI to the
    # first port it matches), and the report looks the node's port up by the provider's ranges.
    oci = [replace(n, fabric_ip=None, rails=(), platform=_model("oci-bm-gpu-h100-8")) for n in gpus]
    assert fabric.control_cidr(oci) == lab.fabric.management_cidr and fabric.data_cidrs(oci) is None
    assert fabric.data_ports(oci) == ",".join(f"rdma{i}" for i in range(16))
    assert fabric.data_networks(oci) == "192.168.0.0/16,10.224.0.0/12"
    # No rail of theirs to run one alone on: asked for one, it is refused, never the management network.
    with pytest.raises(ValueError, match="rail 0: not a compute rail every one of"):
        fabric.data_ports(oci, 0)
    # A node of another platform among them: no port all of them name, so the management network.
    mixed = [*oci[:-1], replace(oci[-1], platform=_model("dgx-h100"))]
    assert fabric.data_ports(mixed) is None and fabric.data_networks(mixed) == lab.fabric.management_cidr


def test_the_all_reduce_off_gpus_is_pinned_to_the_ports_the_provider_addresses(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What reaches mpirun: on OCI-shaped nodes, Open MPI's data over rdma0..rdma15 by name, its own
    traffic over the management network; the pair search says it ran over those ports (GC-AR-003
    reads them). On the lab's nodes, the rails' subnets, and no ports."""
    from gpucluster import hostkeys
    from gpucluster.conformance import allreduce_mpi
    from gpucluster.conformance.bandwidth import AllReduceRun
    from gpucluster.conformance.fabric import Fabric
    from gpucluster.conformance.nodes import load_inventory

    lab = load_inventory(Path(__file__).resolve().parents[2] / "golden" / "inventory" / "lab.yml")
    seen: list[tuple[str, str | None]] = []

    def fake_run(launcher, names, ips, cidr, settings, label, data_ports=None):
        seen.append((cidr, data_ports))
        return AllReduceRun("mpi-cpu", label, names, len(names), status="ok"), ""

    monkeypatch.setattr(allreduce_mpi, "ship_script", lambda remotes, folder: [])
    monkeypatch.setattr(allreduce_mpi, "run_allreduce", fake_run)
    # No key, grant or kill: what runs on the nodes is tests/unit/conformance/test_verify_runs.py's.
    monkeypatch.setattr(Fabric, "run_key", lambda self, tag: None)
    monkeypatch.setattr(Fabric, "_grant", lambda self, nodes, key, budget: [])
    monkeypatch.setattr(Fabric, "_place_key", lambda self, launcher, key: None)
    monkeypatch.setattr(Fabric, "_remove_key", lambda self, launcher, key, path: None)
    monkeypatch.setattr(Fabric, "_end", lambda self, nodes, tag, folder=None: ({}, []))
    fabric = Fabric(lab, tmp_path, tmp_path / "ssh_config", hostkeys.policy_for(lab.target, lab.cluster_name), "")
    gpus = lab.in_groups(("gpu",))
    oci = [replace(n, fabric_ip=None, rails=(), platform=_model("oci-bm-gpu-h100-8")) for n in gpus]
    fabric._allreduce(oci, "inter:oci")
    assert seen == [(lab.fabric.management_cidr, ",".join(f"rdma{i}" for i in range(16)))]
    seen.clear()
    fabric._allreduce(gpus, "inter:lab")
    assert seen == [(lab.fabric.fabric_cidr, "10.77.2.0/24,10.77.3.0/24")]


def test_a_nodes_gpus_are_held_by_one_check_at_a_time(tmp_path: Path) -> None:
    """GPUDirect RDMA holds its peer's GPUs as a burn on that peer does: the second waits for the first."""
    import threading
    import time

    from gpucluster import hostkeys
    from gpucluster.conformance.fabric import Fabric
    from gpucluster.conformance.nodes import load_inventory

    lab = load_inventory(Path(__file__).resolve().parents[2] / "golden" / "inventory" / "lab.yml")
    fabric = Fabric(lab, tmp_path, tmp_path / "ssh_config", hostkeys.policy_for(lab.target, lab.cluster_name), "")
    order: list[str] = []
    held = threading.Event()

    def burn() -> None:
        with fabric.gpus_held(["gpu-2"]):
            held.set()
            time.sleep(0.3)
            order.append("burn done")

    worker = threading.Thread(target=burn)
    worker.start()
    held.wait(5)
    with fabric.gpus_held(["gpu-2", "gpu-1", "gpu-2"]):  # any order, names repeated: taken once, sorted
        order.append("gdr start")
    worker.join()
    assert order == ["burn done", "gdr start"]
    assert sorted(p.name for p in (tmp_path / "fabric").glob("gpus-*.lock")) == ["gpus-gpu-1.lock", "gpus-gpu-2.lock"]
