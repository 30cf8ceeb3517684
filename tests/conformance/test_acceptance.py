"""Acceptance checks vendors run before a GPU node takes jobs (GC-DCGM, GC-PCIE, GC-IB, GC-EFA and
more GC-GPU): expected figures from the profile and platform (gpucluster.conformance.expect),
verdicts from gpucluster.conformance.acceptance. A check whose hardware, tool or expected figure is
absent skips with the reason. GPUDirect RDMA (GC-RDMA-002) and the HCA port counters (GC-IB-002)
live in test_rdma.py, among the fabric measurements (GC-IB-002's first reading is the fabric's,
taken before the session's first measurement between nodes)."""

from __future__ import annotations

import shlex

import pytest

from gpucluster.conformance import acceptance as acc
from gpucluster.conformance import expect, run_nccl_tests
from gpucluster.conformance.gpu_checks import verdict_problems
from gpucluster.conformance.remote import SshRemote, quote
from gpucluster.parsers import libfabric, parse_run, sysfs
from gpucluster.render.services import required_services

pytestmark = pytest.mark.gpu

_IB = "/sys/class/infiniband"
SYSFS_DUMP = (f"for f in {_IB}/*/fw_ver {_IB}/*/device/current_link_speed {_IB}/*/device/current_link_width "
              f"{_IB}/*/device/device "
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


_SAMPLES_MARK = "@@gpucluster-pcie-samples@@"
_COPY_RUNS: dict[str, tuple[str, str, int]] = {}


def _links_sampled_during(load: str, sampler_s: int, every_ms: int) -> str:
    """A shell line: nvidia-smi samples the GPUs' PCIe links (PCIE_QUERY) every ``every_ms`` while
    ``load`` runs, bounded by ``sampler_s`` and killed when the load ends; prints the load's output,
    _SAMPLES_MARK, then the samples, and exits with the load's status."""
    return ("s=$(mktemp) && { timeout " + str(sampler_s) + " nvidia-smi --query-gpu=" + ",".join(acc.PCIE_QUERY)
            + f" --format=csv -lms {every_ms} >\"$s\" 2>&1 & p=$!; {load}; rc=$?; "
            f"kill $p 2>/dev/null; wait $p 2>/dev/null; echo {_SAMPLES_MARK}; cat \"$s\"; rm -f \"$s\"; exit $rc; }}")


# nvbandwidth's current CLI (-t <testcase>, https://github.com/NVIDIA/nvbandwidth); the links sampled
# every 250 ms meanwhile. Both bounded: nvbandwidth by 600 s, the sampler by 660 s.
COPY_RUN = _links_sampled_during(
    "timeout 600 nvbandwidth -t host_to_device_memcpy_ce -t device_to_host_memcpy_ce 2>&1", 660, 250)
# Without nvbandwidth, gpu-burn (the gpu_validation role builds it) is the load: a GPU in its
# highest performance state runs its link at the generation it trained to. About 10 s, bounded.
def burn_load_run(burn_dir: str) -> str:
    """The shell line that samples the links while gpu_burn (in ``burn_dir``, the node's contract) loads the GPUs."""
    return f"cd {quote([burn_dir])} && " + _links_sampled_during(
        "sleep 2; timeout -k 5 20 ./gpu_burn 8 >/dev/null 2>&1", 30, 500)


def _copy_run(node, fabric) -> tuple[str, str, int]:
    """(nvbandwidth output, PCIe link samples taken during it, exit status), run once per node and
    shared by GC-PCIE-001 (the links under load) and GC-PCIE-003 (the bandwidth)."""
    if node.name not in _COPY_RUNS:
        with fabric.gpus_held([node.name]):
            res = node.run(COPY_RUN, timeout=720)
        out, _mark, samples = res.stdout.partition(_SAMPLES_MARK)
        _COPY_RUNS[node.name] = (out, samples, res.rc)
    return _COPY_RUNS[node.name]


def _pcie_rows(text: str) -> list[dict]:
    """Every row of ``--query-gpu --format=csv`` output, a -lms log included: each row is parsed on
    its own (the parser keeps one row per GPU, the latest; GC-PCIE-001 wants every sample)."""
    lines = [line for line in text.splitlines() if line.strip()]
    header = next((line for line in lines if line.startswith("index")), None)
    if header is None:
        return []
    rows = []
    for line in lines:
        if line != header and line[:1].isdigit():
            rows += parse_run("nvidia-smi", f"{header}\n{line}\n", 0).get("gpus", [])
    return rows


@pytest.mark.check("GC-GPU-013")
def test_fabric_registered(node):
    """On NVSwitch profiles every GPU MUST report the fabric State Completed and Status Success."""
    node.require_gpus()
    if not node.profile.gpu.nvswitch:
        pytest.skip(f"profile {node.info.profile_name} has no NVSwitch")
    problems = acc.fabric_problems(_query(node)["gpus"])
    assert not problems, "; ".join(problems)


@pytest.mark.check("GC-GPU-014")
def test_nvlinks_at_speed(node):
    """On NVLink profiles every NVLink of every GPU MUST be up at the profile's speed per link."""
    node.require_gpus()
    if not node.profile.gpu.nvlink:
        pytest.skip(f"profile {node.info.profile_name} has no NVLink")
    speed = _stated(lambda: expect.stated(node.profile.gpu.nvlink_gbps_per_link, "gpu.nvlink_gbps_per_link"))
    _need(node, "nvidia-smi")
    res = node.run("nvidia-smi nvlink -s 2>&1")
    parsed = parse_run("nvidia-smi", res.stdout, res.rc)
    problems = acc.nvlink_speed_problems(parsed.get("gpus", []), speed)
    problems += verdict_problems(parsed, "nvidia-smi nvlink -s")
    assert not problems, "; ".join(problems)


@pytest.mark.check("GC-GPU-015")
def test_nvlink_errors(node):
    """Every NVLink MUST show zero replay, recovery and CRC errors."""
    node.require_gpus()
    if not node.profile.gpu.nvlink:
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
def test_dcgm_diag(node, fabric, pytestconfig):
    """Where the inventory expects DCGM, dcgmi MUST be installed, and dcgmi diag at the configured level MUST pass with no failed or warning test on any GPU."""  # noqa: E501
    node.require_gpus()
    # DCGM is expected where the roles install and start it: nvidia-dcgm among the node's required
    # services (gpucluster.render.services, from the inventory's gpucluster_capabilities).
    expected = "nvidia-dcgm" in required_services(node.info.groups, node.info.profile, node.info.capabilities)
    if node.run("command -v dcgmi >/dev/null 2>&1").rc != 0:
        assert not expected, ("dcgmi is not installed, but the inventory's capabilities (nvidia_repo and "
                              "heavy_packages) make the roles install DCGM on this node")
        pytest.skip("dcgmi is not installed and the inventory does not expect DCGM on this node "
                    "(gpucluster_capabilities lacks nvidia_repo or heavy_packages)")
    # A burn-in asks for more than acceptance (`gpucluster verify --dcgm-level 3`); else the node's level:
    # the spec's, or the host's own gpucluster_conformance in the inventory.
    asked = pytestconfig.getoption("--dcgm-level")
    level = asked or node.info.conformance.dcgm_diag_level
    # -j: per-GPU JSON results; stderr apart, so that a warning printed before the JSON cannot split it.
    with fabric.gpus_held([node.name]):
        res = node.run(f"dcgmi diag -r {level} -j", timeout=3 * 3600)
    parsed = parse_run("dcgmi", res.stdout, res.rc)
    problems = acc.dcgm_problems(parsed)
    stderr = f" (stderr: {res.stderr.strip()[:300]})" if res.stderr.strip() and parsed["status"] != "ok" else ""
    assert parsed["status"] == "ok" and not problems, "; ".join(problems or parsed["notes"]) + stderr


@pytest.mark.check("GC-PCIE-001")
def test_gpu_pcie_link(node, fabric):
    """Every GPU's PCIe link MUST reach the profile's generation and run at the profile's width."""
    node.require_gpus()
    gen = int(_stated(lambda: expect.stated(node.profile.gpu.pcie_generation, "gpu.pcie_generation")))
    width = int(_stated(lambda: expect.stated(node.profile.gpu.pcie_width, "gpu.pcie_width")))
    _need(node, "nvidia-smi")
    loaded = False
    if node.run("command -v nvbandwidth >/dev/null 2>&1").rc == 0:
        # An idle link runs below its generation: read it while nvbandwidth copies to and from each GPU.
        _out, samples, rc = _copy_run(node, fabric)
        rows, loaded = _pcie_rows(samples), rc == 0
    burn_dir = node.info.contract.gpu_burn_dir
    if not loaded and node.run(f"test -x {quote([burn_dir + '/gpu_burn'])}").rc == 0:
        with fabric.gpus_held([node.name]):
            res = node.run(burn_load_run(burn_dir), timeout=60)
        rows, loaded = _pcie_rows(res.stdout.partition(_SAMPLES_MARK)[2]), res.rc == 0
    if not loaded:
        res = node.run(f"timeout 30 nvidia-smi --query-gpu={','.join(acc.PCIE_QUERY)} --format=csv 2>&1", timeout=60)
        rows = _pcie_rows(res.stdout)
    problems = acc.gpu_pcie_link_problems(rows, node.info.gpu_count, gen, width, loaded)
    assert not problems, "; ".join(problems)
    if not loaded:
        # pcie.link.gen.max is what the GPU and its slot allow, not what the link trained to: a link
        # that trained lower (a riser, a bad seat) shows only under load.
        pytest.skip(f"widths x{width} and the slots' Gen{gen} are right, but the trained generation is read only "
                    f"under load: neither nvbandwidth nor {burn_dir}/gpu_burn ran on the node")


@pytest.mark.check("GC-PCIE-002")
def test_hca_pcie_link(node):
    """Every HCA a platform rail lists MUST run its PCIe link at the rail's generation and width."""
    node.require_hcas()
    rails = _stated(lambda: expect.compute_rails(node.info))
    if not any(r.device_names() for r in rails):
        pytest.skip("the platform's rails list no HCA devices")
    values = _hca_dump(node)
    problems, unjudged = acc.hca_pcie_verdict(sysfs.hca_attr(values, "current_link_speed"),
                                              sysfs.hca_attr(values, "current_link_width"), rails,
                                              sysfs.hca_attr(values, "device"))
    assert not problems, "; ".join(problems + unjudged)
    if unjudged:
        # Azure ND H100 v5 hands its IB HCAs to the VM as SR-IOV VFs: their links cannot be read there.
        pytest.skip("; ".join(unjudged))


@pytest.mark.check("GC-PCIE-003")
def test_host_device_copies(node, fabric):
    """nvbandwidth host-to-device and device-to-host copies MUST reach the profile's floor on every GPU."""
    node.require_gpus()
    floor = _stated(lambda: expect.stated(node.profile.floors.host_device_copy_gbps, "floor host_device_copy_gbps"))
    _need(node, "nvbandwidth")
    out, _samples, rc = _copy_run(node, fabric)
    parsed = parse_run("nvbandwidth", out, rc)
    node.figure("copy_floor_gbps", floor)
    for direction, gpu, gbps in acc.host_device_copies(parsed):
        node.figure(f"copy_gbps_{direction}_gpu{gpu}", gbps)
    problems = acc.nvbandwidth_problems(parsed, node.info.gpu_count, floor)
    assert not problems, "; ".join(problems)


@pytest.mark.check("GC-IB-001")
def test_hca_ports_at_rail_rate(node):
    """Every port of an HCA a platform rail lists MUST be ACTIVE at the rail's rate."""
    node.require_hcas()
    rails = _stated(lambda: expect.compute_rails(node.info))
    rates = {d: float(r.rate_gbps) for r in rails for d in r.device_names()}
    if not rates:
        pytest.skip("the platform's rails state no HCA devices with a rate")
    ports = sysfs.ib_ports(_hca_dump(node))
    missing = sorted(set(rates) - {p.hca for p in ports})
    problems = acc.ib_port_problems(ports, rates) + [f"{h}: no port under {_IB}" for h in missing]
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
def test_nccl_uses_ofi(node, fabric):
    """An NCCL run on an EFA node, under its /etc/nccl.conf with NCCL_P2P_DISABLE=1 and NCCL_SHM_DISABLE=1 pinned (intra-node traffic through the network plugin), MUST use the OFI plugin (AWS Libfabric) over the efa provider."""  # noqa: E501
    node.require_gpus()
    if not expect.efa_count(node.info):
        pytest.skip(f"platform {node.info.platform_name} states no EFA interfaces")
    binary = run_nccl_tests.binary(node.info.contract.nccl_tests_bin_dir)
    if node.run(f"test -x {quote([binary])}").rc != 0:
        pytest.skip(f"{binary} is not installed on the node")
    # Without P2P and shared memory NCCL moves even intra-node traffic through its network plugin; the
    # provider (FI_PROVIDER) and the rest are the node's /etc/nccl.conf, never set here.
    node.figure("nccl_pinned", run_nccl_tests.pinned_text(run_nccl_tests.OFI_PROBE_ENV,
                                                          run_nccl_tests.OFI_PROBE_PINNED))
    with fabric.gpus_held([node.name]):
        res = node.run(f"{run_nccl_tests.env_prefix(run_nccl_tests.OFI_PROBE_ENV)}"
                       f"{quote([binary])} -b 8M -e 8M -g {node.info.gpu_count} 2>&1", timeout=600)
    net = libfabric.nccl_net(res.stdout)
    problems = acc.ofi_problems(net) + ([] if res.rc == 0 else [f"all_reduce_perf exited {res.rc}"])
    assert not problems, "; ".join(problems)

