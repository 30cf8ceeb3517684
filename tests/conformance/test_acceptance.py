"""Acceptance checks vendors run before a GPU node takes jobs (GC-DCGM, GC-PCIE, GC-IB, GC-EFA and
more GC-GPU, GC-RDMA): expected figures from the profile and platform (gpucluster.conformance.expect),
verdicts from gpucluster.conformance.acceptance. A check whose hardware, tool or expected figure is
absent skips with the reason."""

from __future__ import annotations

import shlex

import pytest

from gpucluster.conformance import acceptance as acc
from gpucluster.conformance import expect
from gpucluster.conformance.rdma_checks import compute_hcas
from gpucluster.conformance.remote import SshRemote
from gpucluster.parsers import libfabric, parse_run, sysfs

pytestmark = pytest.mark.gpu

_IB = "/sys/class/infiniband"
SYSFS_DUMP = (f"for f in {_IB}/*/fw_ver {_IB}/*/device/current_link_speed {_IB}/*/device/current_link_width "
              f"{_IB}/*/ports/*/state {_IB}/*/ports/*/rate {_IB}/*/ports/*/counters/symbol_error "
              f"{_IB}/*/ports/*/counters/link_downed {_IB}/*/ports/*/counters/port_rcv_errors; "
              'do [ -r "$f" ] && printf "%s=%s\\n" "$f" "$(cat "$f")"; done; true')
_FW_CACHE: dict[str, dict[str, str]] = {}


def _need(node, tool: str) -> None:
    if node.run(f"command -v {shlex.quote(tool)} >/dev/null 2>&1").rc != 0:
        pytest.skip(f"{tool} is not installed on the node")


def _stated(read):
    try:
        return read()
    except expect.Unstated as exc:
        pytest.skip(str(exc))


def _query(node, sections: str = ""):
    _need(node, "nvidia-smi")
    res = node.run(f"nvidia-smi -q {sections} 2>&1")
    parsed = parse_run("nvidia-smi", res.stdout, res.rc)
    assert parsed["status"] != "failed" or parsed.get("gpus"), "; ".join(parsed["notes"])
    return parsed


def _hca_dump(node) -> dict[str, str]:
    return sysfs.readings(node.run(SYSFS_DUMP).stdout)


@pytest.mark.check("GC-GPU-013")
def test_fabric_registered(node):
    """On NVSwitch profiles every GPU MUST report the fabric State Completed and Status Success."""
    node.require_gpus()
    if not node.profile["gpu"].get("nvswitch"):
        pytest.skip(f"profile {node.info.profile_name} has no NVSwitch")
    problems = acc.fabric_problems(_query(node)["gpus"])
    assert not problems, "; ".join(problems)


@pytest.mark.check("GC-GPU-014")
def test_nvlinks_at_speed(node):
    """On NVLink profiles every NVLink of every GPU MUST be up at the profile's speed per link."""
    node.require_gpus()
    if not node.profile["gpu"].get("nvlink"):
        pytest.skip(f"profile {node.info.profile_name} has no NVLink")
    speed = _stated(lambda: expect.profile_number(node.profile, "gpu", "nvlink_gbps_per_link"))
    _need(node, "nvidia-smi")
    res = node.run("nvidia-smi nvlink -s 2>&1")
    problems = acc.nvlink_speed_problems(parse_run("nvidia-smi", res.stdout, res.rc).get("gpus", []), speed)
    assert not problems, "; ".join(problems)


@pytest.mark.check("GC-GPU-015")
def test_nvlink_errors(node):
    """Every NVLink MUST show zero replay, recovery and CRC errors."""
    node.require_gpus()
    if not node.profile["gpu"].get("nvlink"):
        pytest.skip(f"profile {node.info.profile_name} has no NVLink")
    _need(node, "nvidia-smi")
    res = node.run("nvidia-smi nvlink -e 2>&1")
    parsed = parse_run("nvidia-smi", res.stdout, res.rc)
    problems = acc.nvlink_error_problems(parsed.get("gpus", []))
    assert parsed["status"] == "ok" and not problems, "; ".join(problems + parsed["notes"])


@pytest.mark.check("GC-GPU-016")
def test_no_slowdown(node):
    """Every GPU MUST be free of thermal and power slowdown among its active clocks event reasons."""
    node.require_gpus()
    problems = acc.clocks_problems(_query(node, "-d PERFORMANCE")["gpus"])
    assert not problems, "; ".join(problems)


@pytest.mark.check("GC-DCGM-001")
def test_dcgm_diag(node):
    """dcgmi diag at the configured level MUST pass with no failed or warning test on any GPU."""
    node.require_gpus()
    _need(node, "dcgmi")
    level = expect.dcgm_level(node.info.host_vars, node.inv.all_vars)
    res = node.run(f"dcgmi diag -r {level} 2>&1", timeout=3 * 3600)
    parsed = parse_run("dcgmi", res.stdout, res.rc)
    problems = acc.dcgm_problems(parsed)
    assert parsed["status"] == "ok" and not problems, "; ".join(problems or parsed["notes"])


@pytest.mark.check("GC-PCIE-001")
def test_gpu_pcie_link(node):
    """Every GPU's PCIe link MUST reach the profile's generation and run at the profile's width."""
    node.require_gpus()
    gen = int(_stated(lambda: expect.profile_number(node.profile, "gpu", "pcie_generation")))
    width = int(_stated(lambda: expect.profile_number(node.profile, "gpu", "pcie_width")))
    gpus = _query(node, "-d PCI")["gpus"]
    problems = acc.gpu_pcie_problems(gpus, gen, width)
    assert not problems, "; ".join(problems)


@pytest.mark.check("GC-PCIE-002")
def test_hca_pcie_link(node):
    """Every HCA a platform rail lists MUST run its PCIe link at the rail's generation and width."""
    node.require_hcas()
    rails = _stated(lambda: expect.compute_rails(node.info))
    if not any(r.devices for r in rails):
        pytest.skip("the platform's rails list no HCA devices")
    values = _hca_dump(node)
    problems = acc.hca_pcie_problems(sysfs.hca_attr(values, "current_link_speed"),
                                     sysfs.hca_attr(values, "current_link_width"), rails)
    assert not problems, "; ".join(problems)


@pytest.mark.check("GC-PCIE-003")
def test_host_device_copies(node):
    """nvbandwidth host-to-device and device-to-host copies MUST reach the profile's floor on every GPU."""
    node.require_gpus()
    floor = _stated(lambda: expect.floor(node.profile, "host_device_copy_gbps"))
    _need(node, "nvbandwidth")
    res = node.run("nvbandwidth -t host_to_device_memcpy_ce -t device_to_host_memcpy_ce 2>&1", timeout=900)
    problems = acc.nvbandwidth_problems(parse_run("nvbandwidth", res.stdout, res.rc), node.info.gpu_count, floor)
    assert not problems, "; ".join(problems)


@pytest.mark.check("GC-IB-001")
def test_hca_ports_at_rail_rate(node):
    """Every port of an HCA a platform rail lists MUST be ACTIVE at the rail's rate."""
    node.require_hcas()
    rails = _stated(lambda: expect.compute_rails(node.info))
    rates = {d: r.rate_gbps for r in rails for d in r.devices if r.rate_gbps is not None}
    if not rates:
        pytest.skip("the platform's rails state no HCA devices with a rate")
    ports = sysfs.ib_ports(_hca_dump(node))
    missing = sorted(set(rates) - {p.hca for p in ports})
    problems = acc.ib_port_problems(ports, rates) + [f"{h}: no port under {_IB}" for h in missing]
    assert not problems, "; ".join(problems)


@pytest.mark.check("GC-IB-002")
def test_hca_port_counters(node):
    """Every HCA port MUST show zero symbol errors, link-downed events and receive errors, with none rising during the run."""  # noqa: E501
    node.require_hcas()
    compute = {d for r in _stated(lambda: expect.compute_rails(node.info)) for d in r.devices}
    before = [p for p in sysfs.ib_ports(_hca_dump(node)) if not compute or p.hca in compute]
    if not before:
        pytest.skip(f"no compute HCA ports under {_IB}")
    # The ports carry traffic during the suite's RDMA and all-reduce checks; a second reading now,
    # and the first against the second, catches a counter that moves while the node is in use.
    after = [p for p in sysfs.ib_ports(_hca_dump(node)) if not compute or p.hca in compute]
    problems = acc.ib_counter_problems(before, after)
    assert not problems, "; ".join(problems)


def _fleet_firmware(node) -> dict[str, dict[str, str]]:
    """{node: {hca: fw_ver}} of every GPU node with HCAs, read once per session."""
    if not _FW_CACHE:
        for other in node.inv.in_groups(("gpu",)):
            if other.hca_count == 0:
                continue
            res = SshRemote(other.name, node.ssh_config).run(f"grep -H . {_IB}/*/fw_ver", timeout=60)
            _FW_CACHE[other.name] = sysfs.hca_attr(sysfs.readings(_fw_lines(res.stdout)), "fw_ver")
    return _FW_CACHE


def _fw_lines(text: str) -> str:
    # grep -H prints "<path>:<value>"; sysfs.readings reads "<path>=<value>".
    return "\n".join(line.replace("/fw_ver:", "/fw_ver=", 1) for line in text.splitlines())


@pytest.mark.check("GC-IB-003")
def test_hca_firmware_uniform(node):
    """Every HCA MUST run the firmware version that most HCAs of the fleet run."""
    node.require_hcas()
    fleet = _fleet_firmware(node)
    if not fleet.get(node.name):
        pytest.skip(f"no fw_ver under {_IB} on the node")
    odd = acc.firmware_outliers(fleet).get(node.name, [])
    assert not odd, "; ".join(odd)


@pytest.mark.check("GC-RDMA-002")
def test_gpudirect_rdma(node):
    """ib_write_bw with GPU memory (--use_cuda) MUST reach the platform's RDMA write floor for every GPU and HCA pair."""  # noqa: E501
    node.require_gpus()
    node.require_hcas()
    floor = node.info.floor("rdma_write_bw_gbps")
    if floor is None:
        pytest.skip(f"platform {node.info.platform_name} states no rdma_write_bw_gbps floor")
    _need(node, "ib_write_bw")
    if "use_cuda" not in node.run("ib_write_bw --help 2>&1").stdout:
        pytest.skip("this ib_write_bw is built without CUDA (no --use_cuda): perftest with CUDA is needed")
    # The platform's compute HCAs only, in its order: never a storage or front-end port.
    hcas = compute_hcas(node.info.platform, sorted(node.run(f"ls {_IB} 2>/dev/null").stdout.split()))
    pairs = list(zip(range(node.info.gpu_count), hcas, strict=False))
    if not pairs:
        pytest.skip(f"no compute HCA of platform {node.info.platform_name} under {_IB}")
    # Without nvidia-peermem (inbox rdma-core with the open kernel modules) GPU memory is registered
    # through DMA-BUF; --use_cuda alone would need peermem.
    dmabuf = " --use_cuda_dmabuf" if node.run("test -d /sys/module/nvidia_peermem").rc != 0 else ""
    runs = []
    for gpu, hca in pairs:
        # Loopback on the node: the server and the client both move GPU memory through the HCA.
        # The server is bounded too: a client that never connects must not leave it holding the GPU.
        base = (f"ib_write_bw -d {shlex.quote(hca)} --use_cuda={gpu}{dmabuf} --report_gbits -F -D 5 "
                f"-p {18600 + gpu}")
        res = node.run(f"(timeout 60 {base} >/dev/null 2>&1 &); sleep 2; timeout 60 {base} localhost 2>&1",
                       timeout=120)
        run = parse_run("ib_write_bw", res.stdout, res.rc)
        runs.append({**run, "gpu": gpu, "hca": hca})
    problems = acc.gdr_problems(runs, float(floor))
    assert not problems, "; ".join(problems)


@pytest.mark.check("GC-EFA-001")
def test_efa_devices(node):
    """fi_info -p efa MUST list as many EFA devices as the platform states."""
    expected = expect.efa_count(node.info)
    if expected == 0:
        pytest.skip(f"platform {node.info.platform_name} states no EFA interfaces")
    _need(node, "fi_info")
    res = node.run("fi_info -p efa -t FI_EP_RDM 2>&1")
    devices = libfabric.fi_info(res.stdout).devices("efa")
    problems = acc.efa_problems(devices, expected)
    assert not problems, "; ".join(problems)


@pytest.mark.check("GC-EFA-002")
def test_nccl_uses_ofi(node):
    """An NCCL run on an EFA node MUST use the OFI plugin (AWS Libfabric) over the efa provider."""
    node.require_gpus()
    if not expect.efa_count(node.info):
        pytest.skip(f"platform {node.info.platform_name} states no EFA interfaces")
    binary = "/opt/nccl-tests/build/all_reduce_perf"
    if node.run(f"test -x {binary}").rc != 0:
        pytest.skip(f"{binary} is not installed on the node")
    # Without P2P and shared memory NCCL moves even intra-node traffic through its network plugin.
    res = node.run(f"NCCL_DEBUG=INFO NCCL_P2P_DISABLE=1 NCCL_SHM_DISABLE=1 FI_PROVIDER=efa "
                   f"{binary} -b 8M -e 8M -g {node.info.gpu_count} 2>&1", timeout=600)
    net = libfabric.nccl_net(res.stdout)
    problems = acc.ofi_problems(net) + ([] if res.rc == 0 else [f"all_reduce_perf exited {res.rc}"])
    assert not problems, "; ".join(problems)

