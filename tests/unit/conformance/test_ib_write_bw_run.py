"""run_pair judges a perftest run by its exit status as well as its rows (real output formats)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from gpucluster.conformance import run_ib_write_bw
from gpucluster.conformance.remote import CommandResult
from gpucluster.spec.models import Fabric, Platform

SAMPLE = (Path(__file__).resolve().parents[2] / "data" / "samples" / "ib_write_bw_01.txt").read_text()


class FakeRemote:
    def __init__(self, result: CommandResult) -> None:
        self.result = result
        self.commands: list[str] = []

    def run(self, command: str, *, stdin: str | None = None, timeout: float = 120.0) -> CommandResult:
        self.commands.append(command)
        return self.result


def _pair(client_result: CommandResult) -> dict:
    server = FakeRemote(CommandResult(0, "", ""))
    return run_ib_write_bw.run_pair(server, FakeRemote(client_result), "10.0.0.2", "mlx5_0", "mlx5_0", seconds=1)


def test_a_clean_run_is_ok_with_its_peak() -> None:
    r = _pair(CommandResult(0, SAMPLE, ""))
    assert r["status"] == "ok" and r["peak_gbps"] > 100 and r["device"] == "mlx5_0"


def test_good_rows_then_a_non_zero_exit_is_failed() -> None:
    # perftest prints its rows, then a completion error, and exits 1.
    tail = "\n Completion with error at client\n Failed status 12: wr_id 0 syndrom 0x81\n"
    r = _pair(CommandResult(1, SAMPLE + tail, ""))
    assert r["status"] == "failed" and any("exited with status 1" in n for n in r["notes"])


def test_no_output_at_all_says_so() -> None:
    r = _pair(CommandResult(127, "bash: ib_write_bw: command not found\n", ""))
    assert r["status"] == "failed" and r["rows"] == [] and any("command not found" in n for n in r["notes"])


def _fabric(data: dict[str, Any]) -> Fabric:
    return Fabric.model_validate({"management_cidr": "10.0.0.0/24", "fabric_cidr": "10.1.0.0/24", **data})


def _platform(kind: str) -> Platform:
    """A platform of one compute port, mlx5_0, of ``kind``."""
    return Platform.model_validate({
        "name": "test", "description": "", "targets": ["baremetal"],
        "floors": {"rdma_write_bw_gbps": None, "allreduce_inter_busbw_gbps": None,
                   "allreduce_inter_verdict_bytes": None},
        "rails": [{"name": "compute", "kind": kind, "role": "compute", "count": 1, "rate_gbps": 400,
                   "devices": ["mlx5_0"], "addressing": "shared_subnet"}]})


def test_perftest_takes_the_gid_index_nccl_is_set_to_use() -> None:
    """One judge: the GID index in /etc/nccl.conf (NCCL_IB_GID_INDEX) is the one ib_write_bw and
    the GPUDirect run pass (-x), so the figure is the GID NCCL's traffic takes."""
    from gpucluster.conformance.rdma_checks import gdr_args
    from gpucluster.render.nccl import gid_index, nccl_settings

    roce = _fabric({"type": "roce", "mtu": 9000, "gid_index": 3, "ib_timeout": 22,
                    "roce_qos": {"traffic_class": 41}})
    platform = _platform("roce")
    nccl = nccl_settings(roce, platform, "enp24s0np0")["NCCL_IB_GID_INDEX"]
    for argv in (run_ib_write_bw.args("mlx5_0", 5, gid_index=gid_index(roce)),
                 gdr_args("mlx5_0", 0, False, 5, gid_index=gid_index(roce))):
        assert argv[argv.index("-x") + 1] == nccl == "3"
    unset = roce.model_copy(update={"gid_index": None})
    assert "NCCL_IB_GID_INDEX" not in nccl_settings(unset, platform, "enp24s0np0")
    assert "-x" not in run_ib_write_bw.args("mlx5_0", 5, gid_index=gid_index(unset))


def test_no_gid_index_on_infiniband() -> None:
    """NCCL reads NCCL_IB_GID_INDEX in RoCE mode only; on InfiniBand perftest's -x would take a
    GRH path NCCL never uses (an empty index fails a healthy fabric)."""
    from gpucluster.render.nccl import gid_index, nccl_settings

    ib = _fabric({"type": "infiniband", "mtu": 4092, "gid_index": 3, "ib_timeout": 20})
    platform = _platform("infiniband")
    assert gid_index(ib, platform) is None
    assert "-x" not in run_ib_write_bw.args("mlx5_0", 5, gid_index=gid_index(ib, platform))
    assert "NCCL_IB_GID_INDEX" not in nccl_settings(ib, platform, "ibp24s0")


class _Node:
    """A node of the fabric's ib_write_bw run: lists its HCAs, prints a real run as the client."""

    def __init__(self, name: str, hcas: list[str]) -> None:
        self.name, self.hcas = name, hcas
        self.commands: list[str] = []

    def run(self, command: str, *, stdin: str | None = None, timeout: float = 120.0) -> CommandResult:
        self.commands.append(command)
        if command == run_ib_write_bw.LIST_HCAS:
            return CommandResult(0, "\n".join(self.hcas) + "\n", "")
        if "ib_write_bw -d" in command and "&)" not in command:
            return CommandResult(0, SAMPLE, "")
        return CommandResult(0, "", "")


def test_gc_rdma_001_passes_the_gid_index_nccl_conf_names_on_both_ends(tmp_path: Path) -> None:
    """Issue 24: the fabric's ib_write_bw (GC-RDMA-001) measured another GID than NCCL's. Fabric.rdma,
    run over the RoCE example's inventory, hands every server and client the NCCL_IB_GID_INDEX that
    /etc/nccl.conf carries for the node (gpucluster.render.nccl, the one judge)."""
    from gpucluster import hostkeys
    from gpucluster.conformance.fabric import Fabric
    from gpucluster.conformance.nodes import load_inventory
    from gpucluster.render.nccl import nccl_settings
    from gpucluster.render.platform import platform_devices

    repo = Path(__file__).resolve().parents[3]
    inv = load_inventory(repo / "tests" / "golden" / "inventory" / "onprem-h100-roce.yml")
    nodes = [n for n in inv.in_groups(("gpu",)) if n.hca_count > 0]
    assert len(nodes) >= 2 and inv.fabric.type == "roce"
    nccl = {nccl_settings(inv.fabric, n.platform, n.fabric_interface).get("NCCL_IB_GID_INDEX")
            for n in nodes}
    assert len(nccl) == 1 and None not in nccl
    fabric = Fabric(inv, tmp_path, tmp_path / "ssh_config", hostkeys.policy_for(inv.target, inv.cluster_name), "")
    remotes = {n.name: _Node(n.name, platform_devices(n.platform)) for n in inv.nodes}
    fabric.remote = lambda name: remotes[name]  # type: ignore[method-assign]
    fabric.rdma()
    servers = [c for r in remotes.values() for c in r.commands if "ib_write_bw -d" in c and "&)" in c]
    clients = [c for r in remotes.values() for c in r.commands if "ib_write_bw -d" in c and "&)" not in c]
    assert servers and len(servers) == len(clients)
    assert {c.split(" -x ", 1)[1].split()[0] if " -x " in c else None for c in servers + clients} == nccl
