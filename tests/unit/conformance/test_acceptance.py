"""The acceptance checks' verdicts on real tool output, the expectations they read, and their skip path."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpucluster.conformance import acceptance as acc
from gpucluster.conformance import expect
from gpucluster.parsers import kernel_log, libfabric, parse, parse_run, sysfs
from gpucluster.spec.loader import load_platforms, load_profiles
from gpucluster.spec.models import Conformance, Platform

REPO = Path(__file__).resolve().parents[3]
SAMPLES = REPO / "tests" / "data" / "samples"
SUITE = REPO / "tests" / "conformance" / "test_acceptance.py"


def _read(name: str) -> str:
    return (SAMPLES / name).read_text(encoding="utf-8")


def test_fabric_completed_on_real_h100_and_named_when_not():
    gpus = parse("nvidia-smi", _read("nvidia_smi_01.txt"))["gpus"]
    assert acc.fabric_problems(gpus) == []
    gpus[0]["fabric_state"] = "In Progress"
    assert acc.fabric_problems(gpus) == [f"GPU 0 ({gpus[0]['bus_id']}): fabric state In Progress, status Success"]


def test_clocks_idle_is_not_a_slowdown_but_thermal_is():
    text = _read("nvidia_smi_01.txt")
    assert acc.clocks_problems(parse("nvidia-smi", text)["gpus"]) == []
    hot = text.replace("HW Thermal Slowdown                        : Not Active",
                       "HW Thermal Slowdown                        : Active", 1)
    assert acc.clocks_problems(parse("nvidia-smi", hot)["gpus"]) == ["GPU 0: HW Thermal Slowdown active"]


def test_nvlink_speed_and_all_inactive():
    gpus = parse("nvidia-smi", _read("nvidia_smi_06.txt"))["gpus"]
    assert acc.nvlink_speed_problems(gpus, 26.562) == []
    assert acc.nvlink_speed_problems(gpus, 50.0)
    dead = parse("nvidia-smi", _read("nvidia_smi_11.txt"))
    assert dead["status"] == "failed"
    assert acc.nvlink_speed_problems(dead["gpus"], 25.0) == ["GPU 6: all NVLinks inactive"]


def test_nvlink_error_counters_from_real_output():
    parsed = parse("nvidia-smi", _read("nvidia_smi_12.txt"))
    assert parsed["kind"] == "nvlink_errors" and parsed["status"] == "incomplete"  # the excerpt elides links
    assert acc.nvlink_error_problems(parsed["gpus"]) == []
    bad = parse("nvidia-smi", _read("nvidia_smi_12.txt").replace("Link 1: CRC Errors: 0", "Link 1: CRC Errors: 891"))
    assert acc.nvlink_error_problems(bad["gpus"]) == ["GPU 0 link 1: CRC Errors 891"]


def test_xid_events_named_with_pci_and_number():
    events, unreadable = kernel_log.xid_events(_read("kernel_xid_01.txt"))
    assert acc.xid_problems(events, unreadable) == ["Xid 62 on PCI 0000:01:00 (1x)", "Xid 154 on PCI 0000:01:00 (1x)"]
    assert kernel_log.xid_events("[ 1.0] usb 1-1: new device\n") == ([], 0)


def test_dcgm_failure_names_the_gpu():
    ok = parse("dcgmi", _read("dcgmi_diag_01.txt"))
    assert acc.dcgm_problems(ok) == []
    bad = parse("dcgmi", _read("dcgmi_diag_01.txt").replace(
        "| GPU Memory                | Pass - All                                     |",
        "| GPU Memory                | Fail - GPU: 3                                  |"))
    assert acc.dcgm_problems(bad) == ["DCGM GPU Memory: fail on GPU 3"]


def test_efa_devices_and_ofi_plugin_from_real_output():
    devices = libfabric.fi_info(_read("fi_info_01.txt")).devices("efa")
    assert acc.efa_problems(devices, 4) == [] and acc.efa_problems(devices, 32)
    assert acc.ofi_problems(libfabric.nccl_net(_read("nccl_allreduce_14.txt"))) == []
    assert acc.ofi_problems(libfabric.nccl_net(_read("nccl_allreduce_08.txt")))  # sockets, no OFI


def test_nvbandwidth_per_gpu_floor():
    parsed = parse("nvbandwidth", _read("nvbandwidth_01.txt"))
    assert parsed["status"] == "ok" and acc.nvbandwidth_problems(parsed, 2, 25.0) == []
    assert acc.nvbandwidth_problems(parsed, 2, 26.0) == [
        "host_to_device_memcpy_ce GPU 1: 25.94 GB/s under the floor 26",
        "device_to_host_memcpy_ce GPU 0: 25.97 GB/s under the floor 26"]
    assert acc.nvbandwidth_problems(parsed, 4, 1.0)  # a GPU without a figure fails


def test_ib_sysfs_ports_counters_and_pcie():
    dump = ("/sys/class/infiniband/mlx5_0/fw_ver=28.39.1002\n"
            "/sys/class/infiniband/mlx5_0/device/current_link_speed=32.0 GT/s PCIe\n"
            "/sys/class/infiniband/mlx5_0/device/current_link_width=16\n"
            "/sys/class/infiniband/mlx5_0/ports/1/state=4: ACTIVE\n"
            "/sys/class/infiniband/mlx5_0/ports/1/rate=400 Gb/sec (4X NDR)\n"
            "/sys/class/infiniband/mlx5_0/ports/1/counters/symbol_error=0\n"
            "/sys/class/infiniband/mlx5_0/ports/1/counters/link_downed=0\n")
    values = sysfs.readings(dump)
    ports = sysfs.ib_ports(values)
    assert acc.ib_port_problems(ports, {"mlx5_0": 400.0}) == []
    assert acc.ib_port_problems(ports, {"mlx5_0": 200.0})
    flapped = sysfs.ib_ports(sysfs.readings(dump.replace("link_downed=0", "link_downed=2")))
    assert acc.ib_counter_problems(ports, flapped) == [
        "mlx5_0/1: link_downed rose 0 -> 2 during the run (link flapped)"]
    rail = expect.Rail(name="r0", kind="infiniband", role="compute", count=1, rate_gbps=400, devices=["mlx5_0"],
                       pcie_generation=5, pcie_width=16, addressing="none")
    speeds, widths = sysfs.hca_attr(values, "current_link_speed"), sysfs.hca_attr(values, "current_link_width")
    assert acc.hca_pcie_verdict(speeds, widths, [rail], {}) == ([], [])
    assert acc.hca_pcie_verdict({"mlx5_0": "16.0 GT/s PCIe"}, widths, [rail], {})[0]


def test_firmware_outliers_named():
    fleet = {"a": {"mlx5_0": "28.39.1002", "mlx5_1": "28.39.1002"}, "b": {"mlx5_0": "28.36.1010"},
             "c": {"mlx5_0": "28.39.1002"}}
    assert acc.firmware_outliers(fleet) == {"b": ["mlx5_0 firmware 28.36.1010, the fleet runs 28.39.1002"]}
    assert acc.firmware_outliers({"a": {"mlx5_0": "1"}, "b": {"mlx5_0": "1"}}) == {}


def test_a_perftest_run_that_exits_non_zero_is_failed_whatever_it_printed():
    good = _read("ib_write_bw_02.txt")
    assert parse_run("ib_write_bw", good, 0)["status"] == "ok"
    assert parse_run("ib_write_bw", good, 1)["status"] == "failed"
    assert acc.gdr_problems([{**parse_run("ib_write_bw", good, 0), "gpu": 0, "hca": "mlx5_0"}], 380.0)


def test_expectations_missing_mean_unstated_never_a_value():
    with pytest.raises(expect.Unstated, match=r"the profile states no gpu\.pcie_generation"):
        expect.stated(load_profiles()["cpu-lab"].gpu.pcie_generation, "gpu.pcie_generation")
    assert expect.stated(5, "gpu.pcie_generation") == 5.0
    with pytest.raises(expect.Unstated, match="rails"):
        expect.rails(SimpleNamespace())


class _NoGpuNode:
    """A lab node: no GPU, no HCA, no NVIDIA tool; any command it is asked to run is recorded."""

    def __init__(self) -> None:
        self.info = SimpleNamespace(gpu_count=0, hca_count=0, profile_name="cpu-lab", platform_name="lab",
                                    platform=load_platforms()["lab"], conformance=Conformance())
        self.profile = load_profiles()["cpu-lab"]
        self.ran: list[str] = []

    def require_gpus(self) -> None:
        pytest.skip("profile cpu-lab has no GPU")

    def require_hcas(self) -> None:
        pytest.skip("profile cpu-lab has no HCA")

    def run(self, command: str, timeout: float = 120):
        self.ran.append(command)
        return SimpleNamespace(rc=127, stdout="", stderr="not found")


def test_every_acceptance_check_skips_with_a_reason_on_a_node_without_gpu_or_hca():
    import importlib.util

    spec = importlib.util.spec_from_file_location("suite_acceptance", SUITE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    names = [n.name for n in ast.parse(SUITE.read_text()).body if isinstance(n, ast.FunctionDef)
             and n.name.startswith("test_")]
    assert len(names) == 12  # GC-RDMA-002 and GC-IB-002 live in test_rdma.py, among the fabric measurements
    for name in names:
        node = _NoGpuNode()
        test = getattr(module, name)
        # Checks that load the GPUs hold them through the fabric (Fabric.gpus_held); none is reached here.
        params = test.__code__.co_varnames[:test.__code__.co_argcount]
        extra = [SimpleNamespace(gpus_held=None, getoption=None)] * (len(params) - 1)
        with pytest.raises(pytest.skip.Exception) as skipped:
            test(node, *extra)
        assert str(skipped.value.msg), name
        assert node.ran == [], f"{name} ran {node.ran} on a node without GPU or HCA"


def test_nvlink_errors_with_no_counter_read_is_not_a_pass():
    gpus = [{"index": 0, "links": [{"link": 0, "counters": {}}]}]
    assert acc.nvlink_error_problems(gpus) and "no NVLink error counter read" in acc.nvlink_error_problems(gpus)[0]


def _platform(*rails: dict) -> Platform:
    return Platform.model_validate({"name": "p", "description": "", "targets": ["baremetal"], "rails": list(rails),
                                    "floors": {"rdma_write_bw_gbps": None, "allreduce_inter_busbw_gbps": None,
                                               "allreduce_inter_verdict_bytes": None}})


def test_only_compute_rails_are_judged_and_efa_is_counted_from_the_platform():
    rails = [{"name": "compute", "kind": "infiniband", "role": "compute", "count": 2, "rate_gbps": 400,
              "devices": ["mlx5_0", "mlx5_1"], "addressing": "none"},
             {"name": "storage", "kind": "infiniband", "role": "storage", "count": 1, "rate_gbps": 400,
              "devices": ["mlx5_8"], "addressing": "none"},
             {"name": "efa", "kind": "efa", "role": "compute", "count": 32, "rate_gbps": 100, "addressing": "none"}]
    info = SimpleNamespace(platform=_platform(*rails))
    assert [r.name for r in expect.compute_rails(info)] == ["compute", "efa"]
    assert expect.efa_count(info) == 32
    assert expect.efa_count(SimpleNamespace(platform=_platform())) == 0
    with pytest.raises(expect.Unstated, match="no compute rails"):
        expect.compute_rails(SimpleNamespace(platform=_platform(rails[1])))
    with pytest.raises(expect.Unstated, match="no rails"):
        expect.rails(SimpleNamespace(platform=_platform()))
