"""GC-PCIE-001/002/003, GC-IB-002 and GC-RDMA-002 on real output formats: links under load, SR-IOV VFs,
nvbandwidth per GPU, counters compared over the fabric measurements, GPUDirect RDMA between nodes."""

from __future__ import annotations

import importlib.util
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from gpucluster.conformance import acceptance as acc
from gpucluster.conformance import expect
from gpucluster.conformance.rdma_checks import gdr_args, gdr_pairs, gdr_peer
from gpucluster.parsers import parse, parse_run, sysfs
from gpucluster.spec.models import Fabric as FabricSpec
from gpucluster.spec.models import Platform

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
SAMPLES = REPO / "tests" / "data" / "samples"
SUITE = REPO / "tests" / "conformance" / "test_acceptance.py"


def _suite():
    spec = importlib.util.spec_from_file_location("suite_acceptance_pcie", SUITE)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _read(name: str) -> str:
    return (SAMPLES / name).read_text(encoding="utf-8")


# --- GC-PCIE-003 ---------------------------------------------------------------------------


def test_nvbandwidth_current_titles_parse_per_gpu_and_name_the_slow_gpu():
    # nvbandwidth's current source titles device-to-host "CPU(row) <- GPU(column)" (testcases_ce.cpp);
    # v0.10 printed "GPU(row) -> CPU(column)": both are one row, one column per GPU.
    text = _read("nvbandwidth_01.txt").replace("memcpy CE GPU(row) -> CPU(column)",
                                               "memcpy CE CPU(row) <- GPU(column)")
    parsed = parse("nvbandwidth", text)
    d2h = next(t for t in parsed["tests"] if t["name"] == "device_to_host_memcpy_ce")
    assert d2h["per_gpu_gbps"] == {"0": 25.97, "1": 26.0}
    assert acc.nvbandwidth_problems(parsed, 2, 25.95) == [
        "host_to_device_memcpy_ce GPU 1: 25.94 GB/s under the floor 25.95"]


def test_host_device_copies_are_the_figures_per_direction_and_gpu():
    # What GC-PCIE-003 records, each beside its floor in the reports (copy_gbps_<direction>_gpu<i>).
    parsed = parse("nvbandwidth", _read("nvbandwidth_01.txt"))
    assert acc.host_device_copies(parsed) == [("h2d", "0", 26.03), ("h2d", "1", 25.94), ("d2h", "0", 25.97),
                                              ("d2h", "1", 26.0)]
    assert acc.host_device_copies(parse_run("nvbandwidth", "", 1)) == []


def test_nvbandwidth_indented_rows_of_v0_10_0_read_the_same():
    # nvbandwidth v0.10.0 right-aligns the row index (" 0     55.20 ..."): same cells per GPU.
    text = _read("nvbandwidth_01.txt")
    indented = "\n".join(" " + line if line[:1].isdigit() else line for line in text.splitlines())
    per_gpu = [t["per_gpu_gbps"] for t in parse("nvbandwidth", indented)["tests"]]
    assert per_gpu == [t["per_gpu_gbps"] for t in parse("nvbandwidth", text)["tests"]]
    assert per_gpu[0] == {"0": 26.03, "1": 25.94}


def test_nvbandwidth_command_is_the_current_cli_and_cut_short_output_fails():
    assert "nvbandwidth -t host_to_device_memcpy_ce -t device_to_host_memcpy_ce" in _suite().COPY_RUN
    cut = _read("nvbandwidth_01.txt").split("SUM device_to_host_memcpy_ce")[0]
    problems = acc.nvbandwidth_problems(parse_run("nvbandwidth", cut, 0), 2, 20.0)
    assert problems and problems[0].startswith("nvbandwidth incomplete")


# --- GC-PCIE-001 ---------------------------------------------------------------------------

HEADER = "index, pcie.link.gen.current, pcie.link.width.current, pcie.link.gen.max, pcie.link.width.max"


def _rows(*lines: str) -> list[dict]:
    return _suite()._pcie_rows("\n".join([HEADER, *lines]) + "\n")


def test_real_h100_query_rows_judge_the_link_idle_on_gen_max():
    rows = parse("nvidia-smi", _read("nvidia_smi_02.txt"))["gpus"]
    assert acc.gpu_pcie_link_problems(rows, 1, 5, 16, loaded=False) == []
    assert acc.gpu_pcie_link_problems(rows, 1, 6, 16, loaded=False) == [
        "GPU 0: PCIe Gen5 x16 (idle, judged on pcie.link.gen.max), the profile says Gen6 x16"]


def test_link_under_load_takes_the_best_sample_and_names_the_gpu_that_never_reached_gen5():
    rows = _rows("0, 1, 16, 5, 16", "1, 1, 16, 4, 16", "0, 5, 16, 5, 16", "1, 4, 16, 4, 16")
    assert acc.gpu_pcie_link_problems(rows, 2, 5, 16, loaded=True) == [
        "GPU 1: PCIe Gen4 x16 (under load over 2 samples), the profile says Gen5 x16; "
        "its slot trains to Gen4 at most"]
    # Idle, a downshifted GPU passes on gen.max; a narrow link fails either way.
    assert acc.gpu_pcie_link_problems(_rows("0, 1, 16, 5, 16"), 1, 5, 16, loaded=False) == []
    assert acc.gpu_pcie_link_problems(_rows("0, 5, 8, 5, 16"), 1, 5, 16, loaded=True)
    assert acc.gpu_pcie_link_problems(_rows("0, [N/A], [N/A], 5, 16"), 2, 5, 16, loaded=True) == [
        "GPU 0: no PCIe link reading (under load)", "GPU 1: no PCIe link reading (under load)"]


def test_copy_run_samples_links_while_nvbandwidth_runs_and_ends_the_sampler(tmp_path: Path):
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(
        f'#!/bin/sh\necho "{HEADER}"\nwhile :; do echo "0, 5, 16, 5, 16"; sleep 0.1; done\n')
    (bin_dir / "nvbandwidth").write_text(f"#!/bin/sh\nsleep 1\ncat {SAMPLES / 'nvbandwidth_01.txt'}\n")
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    suite = _suite()
    res = subprocess.run(["sh", "-c", suite.COPY_RUN], capture_output=True, text=True, timeout=30,
                         env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    out, _mark, samples = res.stdout.partition(suite._SAMPLES_MARK)
    assert res.returncode == 0 and parse("nvbandwidth", out)["status"] == "ok"
    rows = suite._pcie_rows(samples)
    assert len(rows) >= 3 and acc.gpu_pcie_link_problems(rows, 1, 5, 16, loaded=True) == []


def test_burn_load_samples_links_while_gpu_burn_runs_and_ends_the_sampler(tmp_path: Path):
    """Without nvbandwidth, gpu-burn is the load: the samples taken while it runs are judged as loaded."""
    bin_dir, burn_dir = tmp_path / "bin", tmp_path / "gpu-burn"
    bin_dir.mkdir()
    burn_dir.mkdir()
    (bin_dir / "nvidia-smi").write_text(
        f'#!/bin/sh\necho "{HEADER}"\nwhile :; do echo "0, 5, 16, 5, 16"; sleep 0.1; done\n')
    (burn_dir / "gpu_burn").write_text("#!/bin/sh\nsleep 1\n")
    for f in (bin_dir / "nvidia-smi", burn_dir / "gpu_burn"):
        f.chmod(0o755)
    suite = _suite()
    script = suite.burn_load_run(str(burn_dir))
    script = script.replace("sleep 2", "sleep 0.3")
    res = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30,
                         env={"PATH": f"{bin_dir}:/usr/bin:/bin"})
    rows = suite._pcie_rows(res.stdout)
    assert res.returncode == 0 and len(rows) >= 5
    assert acc.gpu_pcie_link_problems(rows, 1, 5, 16, loaded=True) == []


# --- GC-PCIE-002 ---------------------------------------------------------------------------

RAIL = expect.Rail(name="compute", kind="infiniband", role="compute", count=2, rate_gbps=400,
                   devices=["mlx5_ib0", "mlx5_ib1"], pcie_generation=5, pcie_width=16, addressing="none")


def _dump(speed: str, width: str, device: str) -> dict[str, str]:
    return sysfs.readings("".join(
        f"/sys/class/infiniband/mlx5_ib{i}/device/current_link_speed={speed}\n"
        f"/sys/class/infiniband/mlx5_ib{i}/device/current_link_width={width}\n"
        f"/sys/class/infiniband/mlx5_ib{i}/device/device={device}\n" for i in range(2)))


def _verdict(values: dict[str, str]) -> tuple[list[str], list[str]]:
    return acc.hca_pcie_verdict(sysfs.hca_attr(values, "current_link_speed"),
                                sysfs.hca_attr(values, "current_link_width"), [RAIL],
                                sysfs.hca_attr(values, "device"))


def test_an_sriov_vf_reading_unknown_is_unjudged_with_the_reason_never_failed_nor_passed():
    problems, unjudged = _verdict(_dump("Unknown", "0", "0x101e"))
    assert problems == [] and len(unjudged) == 2
    assert unjudged[0] == ("mlx5_ib0 (rail compute): SR-IOV VF 0x101e reads current_link_speed 'Unknown', "
                           "current_link_width 0: a VF has no PCIe link of its own")
    # Older kernels print "Unknown speed"; what is readable is still judged.
    problems, unjudged = _verdict(_dump("Unknown speed", "8", "0x101e"))
    assert problems == ["mlx5_ib0 (rail compute): x8, the rail says x16",
                        "mlx5_ib1 (rail compute): x8, the rail says x16"]
    assert unjudged


def test_a_physical_function_reading_unknown_fails_and_a_gen5_pf_passes():
    problems, unjudged = _verdict(_dump("Unknown", "0", "0x1021"))  # ConnectX-7 PF
    assert len(problems) == 4 and unjudged == []
    assert _verdict(_dump("32.0 GT/s PCIe", "16", "0x1021")) == ([], [])
    assert _verdict(_dump("16.0 GT/s PCIe", "16", "0x1021"))[0][0] == (
        "mlx5_ib0 (rail compute): 16.0 GT/s PCIe (Gen4), the rail says Gen5")


# --- GC-IB-002 -----------------------------------------------------------------------------

COUNTERS = ("/sys/class/infiniband/mlx5_ib0/ports/1/counters/symbol_error={s}\n"
            "/sys/class/infiniband/mlx5_ib0/ports/1/counters/link_downed={d}\n"
            "/sys/class/infiniband/mlx5_ib0/ports/1/counters/port_rcv_errors={r}\n")


class _CountingRemote:
    """A node's shell as the fabric reaches it: HCA counters from ``readings`` (one per call), calls logged."""

    def __init__(self, name: str, readings: list[str], log: list[str]) -> None:
        self.name, self.readings, self.log = name, readings, log

    def run(self, command: str, timeout: float = 60, **_: object) -> SimpleNamespace:
        self.log.append(f"{self.name}: counters")
        return SimpleNamespace(stdout=self.readings.pop(0) if self.readings else "", rc=0, ok=True)


def test_the_first_measurement_between_nodes_reads_every_hca_nodes_counters_before_it_runs(tmp_path: Path):
    """GC-IB-002's "before" is taken once, for every node with HCAs, by whichever measurement between
    nodes comes first (in any worker), before it moves traffic; later ones and reruns do not retake it."""
    from gpucluster import hostkeys
    from gpucluster.conformance.fabric import Fabric
    from gpucluster.conformance.nodes import load_inventory

    inv = load_inventory(REPO / "tests" / "golden" / "inventory" / "onprem-h100-ib.yml")
    hca_nodes = sorted(n.name for n in inv.nodes if n.hca_count > 0)
    assert len(hca_nodes) >= 2
    fabric = Fabric(inv, tmp_path, tmp_path / "ssh_config", hostkeys.policy_for(inv.target, inv.cluster_name), "")
    log: list[str] = []
    remotes = {n.name: _CountingRemote(n.name, [COUNTERS.format(s=0, d=0, r=0)], log) for n in inv.nodes}
    fabric.remote = lambda name: remotes[name]  # type: ignore[method-assign]
    assert fabric.counter_baseline(hca_nodes[0]) is None  # nothing between nodes ran yet

    def measure() -> dict:
        log.append("pair search")
        return {}

    fabric.cached("pair_search", measure)
    fabric.cached("rdma", measure)
    assert sorted(log[:-2]) == sorted(f"{n}: counters" for n in hca_nodes) and log[-2:] == ["pair search"] * 2
    before = sysfs.ib_ports(sysfs.readings(fabric.counter_baseline(hca_nodes[0]) or ""))
    after = sysfs.ib_ports(sysfs.readings(COUNTERS.format(s=0, d=1, r=12)))
    assert acc.ib_counter_problems(before, after) == [
        "mlx5_ib0/1: link_downed rose 0 -> 1 during the run (link flapped)",
        "mlx5_ib0/1: port_rcv_errors rose 0 -> 12 during the run"]


def test_gc_ib_002_runs_after_the_fabric_measurements():
    # Each node's checks run in one worker in file order: the check sits after GC-RDMA-001 and in a
    # file after the all-reduce checks; its baseline is the fabric's, from before any of them.
    rdma = (REPO / "tests" / "conformance" / "test_rdma.py").read_text()
    assert rdma.index('check("GC-RDMA-001")') < rdma.index('check("GC-IB-002")')
    files = sorted(p.name for p in (REPO / "tests" / "conformance").glob("test_*.py"))
    assert files.index("test_allreduce.py") < files.index("test_rdma.py")
    assert "fabric.counter_baseline(node.name)" in rdma


# --- GC-RDMA-002 ---------------------------------------------------------------------------


def test_gdr_peer_is_the_rdma_ring_partner_and_gpus_pair_with_their_hcas():
    assert gdr_peer(["a", "b", "c"], "a") == "b" and gdr_peer(["a", "b", "c"], "c") == "a"
    assert gdr_peer(["a", "b"], "b") == "a" and gdr_peer(["a"], "a") is None
    assert gdr_pairs(8, ["mlx5_0", "mlx5_1"], ["mlx5_0", "mlx5_1", "mlx5_2"]) == [
        (0, "mlx5_0", "mlx5_0"), (1, "mlx5_1", "mlx5_1")]
    args = gdr_args("mlx5_3", 3, True, 5)
    assert "--use_cuda=3" in args and "--use_cuda_dmabuf" in args and args[args.index("-D") + 1] == "5"
    assert "--use_cuda_dmabuf" not in gdr_args("mlx5_3", 3, False, 5)


class _Remote:
    """A node answering the suite's commands: ib_write_bw's client prints ``client_out``."""

    def __init__(self, name: str, client_out: str = "", rc: int = 0, peermem: bool = False) -> None:
        self.name, self.client_out, self.rc, self.peermem = name, client_out, rc, peermem
        self.ran: list[str] = []

    def run(self, command: str, *, stdin: str | None = None, timeout: float = 120.0):
        self.ran.append(command)
        out, rc = "", 0
        if "ls /sys/class/infiniband" in command:
            out = "mlx5_0\nmlx5_1\n"
        elif "command -v ib_write_bw" in command:
            out = "cuda\n" + ("peermem\n" if self.peermem else "")
        elif "ib_write_bw -d" in command and "&)" not in command and "killed" not in command:
            out, rc = self.client_out, self.rc
        elif "GPUCLUSTER_MEASUREMENT" in command and "export" not in command:
            out = "killed 0\n"
        return SimpleNamespace(rc=rc, stdout=out, stderr="", ok=rc == 0)


def test_gpudirect_rdma_runs_between_the_node_and_its_peer_per_gpu_and_names_a_slow_pair():
    import importlib.util as iu

    spec = iu.spec_from_file_location("suite_rdma", REPO / "tests" / "conformance" / "test_rdma.py")
    assert spec and spec.loader
    suite = iu.module_from_spec(spec)
    spec.loader.exec_module(suite)
    platform = Platform.model_validate({
        "name": "p", "description": "", "targets": ["baremetal"],
        "rails": [{"name": "compute", "kind": "infiniband", "role": "compute", "count": 2, "rate_gbps": 200,
                   "devices": ["mlx5_0", "mlx5_1"], "addressing": "none"}],
        "floors": {"rdma_write_bw_gbps": 180.0, "allreduce_inter_busbw_gbps": None,
                   "allreduce_inter_verdict_bytes": None}})

    floors = {"rdma_write_bw_gbps": 180.0}  # NodeInfo.floor's answers, raised below

    def info(name: str) -> SimpleNamespace:
        return SimpleNamespace(name=name, gpu_count=2, hca_count=2, platform=platform, platform_name="p",
                               fabric_ip=f"10.0.0.{name[-1]}", address=name,
                               floor=lambda key: floors.get(key))

    nodes = [info("gpu-1"), info("gpu-2")]
    here = _Remote("gpu-1", _read("ib_write_bw_02.txt"))  # the client: 181.46 Gb/s from GPU memory
    there = _Remote("gpu-2", peermem=True)
    remotes = {"gpu-1": here, "gpu-2": there}
    held: list[list[str]] = []
    fabric = SimpleNamespace(remote=lambda n: remotes[n], inv=SimpleNamespace(in_groups=lambda g: nodes),
                             cached=lambda key, compute, hold=(): held.append(list(hold)) or compute())
    recorded: dict = {}
    node = SimpleNamespace(name="gpu-1", info=nodes[0], inv=SimpleNamespace(in_groups=lambda g: nodes,
                                                                             fabric=FabricSpec(
                               type="roce", mtu=4200, management_cidr="10.1.0.0/24", fabric_cidr="10.0.0.0/24",
                               gid_index=3)),
                           require_gpus=lambda: None, require_hcas=lambda: None, figure=recorded.__setitem__)
    suite.test_gpudirect_rdma(node, fabric)  # 181.46 >= 180: passes
    # Each GPU/HCA pair's figure beside the floor it was judged against, for the reports.
    assert recorded["rdma_floor_gbps"] == 180.0 and recorded["gdr_gbps_gpu0_mlx5_0"] == 181.46
    assert held == [["gpu-1", "gpu-2"]]  # both nodes' GPUs held for the measurement
    clients = [c for c in here.ran if "ib_write_bw -d" in c and "&)" not in c]
    servers = [c for c in there.ran if "ib_write_bw -d" in c and "&)" in c]
    assert len(clients) == 2 and len(servers) == 2
    assert all("timeout " in c for c in clients + servers)
    # The GID NCCL is set to use (the spec's gid_index), on both ends.
    assert all(" -x 3" in c for c in clients + servers)
    # The client waits for the server's port (GPU i's), not a fixed sleep.
    assert "sport = :18620" in servers[0] and "sport = :18621" in servers[1] and "sleep 2" not in clients[0]
    assert "--use_cuda=1" in clients[1] and clients[1].endswith(" 10.0.0.2 2>&1")
    # The client has no nvidia-peermem (DMA-BUF), the peer has it.
    assert "--use_cuda_dmabuf" in clients[0] and "--use_cuda_dmabuf" not in servers[0]
    # The server's log lies in a private folder made for it (never a fixed name in /var/tmp), removed after.
    made = [c for c in there.ran if "mkdir -m 700 -- /var/tmp/gpucluster-" in c]
    assert len(made) == 2 and "/var/tmp/gpucluster-gdr" not in " ".join(there.ran)
    folder = made[0].split("mkdir -m 700 -- ", 1)[1].split()[0]
    assert f"> {folder}/gdr-server.log" in servers[0] and any(f"rm -rf -- {folder}" in c for c in there.ran)
    floors["rdma_write_bw_gbps"] = 380.0
    with pytest.raises(AssertionError, match=r"GPU 0 / mlx5_0 -> gpu-2 mlx5_0: 181.46 Gb/s under the floor 380"):
        suite.test_gpudirect_rdma(node, fabric)
    here.rc = 1  # a run that printed good rows and then failed is failed
    with pytest.raises(AssertionError, match=r"GPU 0 / mlx5_0 -> gpu-2 mlx5_0: failed"):
        suite.test_gpudirect_rdma(node, fabric)


def test_gpudirect_rdma_skips_with_a_reason_alone_or_without_cuda_perftest():
    import importlib.util as iu

    spec = iu.spec_from_file_location("suite_rdma2", REPO / "tests" / "conformance" / "test_rdma.py")
    assert spec and spec.loader
    suite = iu.module_from_spec(spec)
    spec.loader.exec_module(suite)
    lone = SimpleNamespace(name="gpu-1", gpu_count=8, hca_count=8, platform={}, platform_name="p",
                           floor=lambda key: 380.0)
    node = SimpleNamespace(name="gpu-1", info=lone, inv=SimpleNamespace(in_groups=lambda g: [lone]),
                           require_gpus=lambda: None, require_hcas=lambda: None)
    with pytest.raises(pytest.skip.Exception, match="needs a peer"):
        suite.test_gpudirect_rdma(node, SimpleNamespace(inv=node.inv))
    no_cuda = _Remote("gpu-2")
    no_cuda.run = lambda command, **kw: SimpleNamespace(rc=0, stdout="", stderr="")  # type: ignore[method-assign]
    assert "without CUDA" in (suite._gdr_ready(no_cuda)[0] or "")
    gone = _Remote("gpu-3")
    gone.run = lambda command, **kw: SimpleNamespace(rc=255, stdout="", stderr="ssh: connect: No route")  # type: ignore[method-assign]
    assert "could not be asked" in (suite._gdr_ready(gone)[0] or "")


# `nvidia-smi topo -m` on a node whose NIC numbering does not follow the GPUs' (the shape of an 8x
# H100 node: GPU3's PIX NIC is NIC4, NIC3 being a storage port on the same switch), in the format of
# tests/data/samples/nvidia_smi_08.txt (TABs, the header underlined with ANSI escapes, the Legend)
# plus the NIC Legend drivers print after it. Cut to 4 GPUs and 5 NICs.
TOPO_4GPU = (
    "\t\x1b[4mGPU0\tGPU1\tGPU2\tGPU3\tNIC0\tNIC1\tNIC2\tNIC3\tNIC4\tCPU Affinity\tNUMA Affinity\tGPU NUMA ID\x1b[0m\n"
    "GPU0\t X \tNV18\tNV18\tNV18\tPIX\tNODE\tNODE\tSYS\tSYS\t0-23,96-119\t0\t\tN/A\n"
    "GPU1\tNV18\t X \tNV18\tNV18\tNODE\tPIX\tNODE\tSYS\tSYS\t0-23,96-119\t0\t\tN/A\n"
    "GPU2\tNV18\tNV18\t X \tNV18\tNODE\tNODE\tPIX\tSYS\tSYS\t0-23,96-119\t0\t\tN/A\n"
    "GPU3\tNV18\tNV18\tNV18\t X \tSYS\tSYS\tSYS\tNODE\tPIX\t24-47,120-143\t1\t\tN/A\n"
    "NIC0\tPIX\tNODE\tNODE\tSYS\t X \tNODE\tNODE\tSYS\tSYS\t\t\t\t\n"
    "\nLegend:\n\n  X    = Self\n  SYS  = Connection traversing PCIe as well as the SMP interconnect\n"
    "  PIX  = Connection traversing at most a single PCIe bridge\n"
    "  NV#  = Connection traversing a bonded set of # NVLinks\n"
    "\nNIC Legend:\n\n  NIC0: mlx5_0\n  NIC1: mlx5_1\n  NIC2: mlx5_2\n  NIC3: mlx5_3\n  NIC4: mlx5_4\n")


def test_topology_names_each_nic_and_pairs_each_gpu_with_its_nearest_compute_hca():
    from gpucluster.conformance.rdma_checks import gpu_hca_affinity

    topo = parse("nvidia-smi", TOPO_4GPU)
    assert topo["kind"] == "topo" and topo["status"] == "ok"
    assert topo["nics"] == {f"NIC{i}": f"mlx5_{i}" for i in range(5)}
    compute = ["mlx5_0", "mlx5_1", "mlx5_2", "mlx5_4"]  # mlx5_3: the storage port, not a compute rail
    assert gpu_hca_affinity(topo, compute) == {0: "mlx5_0", 1: "mlx5_1", 2: "mlx5_2", 3: "mlx5_4"}
    # Where the platform lists its compute HCAs in another order than the PCIe tree, the tree wins
    # (index order would have sent GPU 0 through mlx5_4, across the SMP interconnect).
    reordered = ["mlx5_4", "mlx5_2", "mlx5_1", "mlx5_0"]
    assert gdr_pairs(4, reordered, reordered, topo, topo) == [
        (0, "mlx5_0", "mlx5_0"), (1, "mlx5_1", "mlx5_1"), (2, "mlx5_2", "mlx5_2"), (3, "mlx5_4", "mlx5_4")]
    # Without a readable matrix (or one naming no NICs), the platform's order stands in.
    no_nics = parse("nvidia-smi", (SAMPLES / "nvidia_smi_08.txt").read_text())
    assert gdr_pairs(2, reordered, reordered, None, no_nics) == [(0, "mlx5_4", "mlx5_4"), (1, "mlx5_2", "mlx5_2")]
