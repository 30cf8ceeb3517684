"""The MPI node script and its runner's parsing, with a stand-in for mpi4py (one process, n ranks faked)."""

from __future__ import annotations

import sys
import types

import pytest

from gpucluster.conformance import allreduce_mpi
from gpucluster.conformance.bandwidth import judge
from gpucluster.conformance.remote import CommandResult


def fake_mpi(ranks: int, corrupt: bool, seconds_per_byte: float = 0.0) -> types.ModuleType:
    """Rank 0 of a world of ``ranks`` whose peers each contribute ``r+1``: the sum is known.
    ``seconds_per_byte``: a fake clock advances that much per byte all-reduced (a slow link)."""
    mod = types.ModuleType("mpi4py")
    mpi = types.SimpleNamespace(FLOAT="f", SUM="sum", MAX="max")
    clock = [0.0]

    class Comm:
        def Get_rank(self):
            return 0

        def Get_size(self):
            return ranks

        def allgather(self, x):
            return [x] * ranks

        def Barrier(self):
            pass

        def allreduce(self, x, op):
            return x

        def bcast(self, x, root):
            return x

        def Allreduce(self, send, recv, op):
            clock[0] += seconds_per_byte * len(send[0]) * 4
            buf = recv[0]
            buf[:] = type(buf)("f", [float(ranks * (ranks + 1) // 2)]) * len(buf)
            if corrupt:
                buf[3] = 0.0

    mpi.COMM_WORLD = Comm()
    mpi.Get_processor_name = lambda: "node"
    mpi.Wtime = (lambda: clock[0]) if seconds_per_byte else __import__("time").perf_counter
    mod.MPI = mpi
    return mod


def run_script(capsys, monkeypatch, ranks=3, corrupt=False, sizes="1024,65536", deadline="",
               seconds_per_byte=0.0):
    monkeypatch.setitem(sys.modules, "mpi4py", fake_mpi(ranks, corrupt, seconds_per_byte))
    ns: dict = {"__name__": "gcar"}
    exec(compile(allreduce_mpi.NODE_SCRIPT, "node_script", "exec"), ns)
    ns["main"](["x", sizes, "3", "1", "0.5", *([deadline] if deadline else [])])
    return capsys.readouterr().out


def test_script_output_parses_into_busbw(capsys, monkeypatch):
    out = run_script(capsys, monkeypatch)
    run = allreduce_mpi.parse_output("mpirun chatter\n" + out, "inter:a,b,c", ("a", "b", "c"), (1024, 65536))
    assert run.status == "ok" and run.ranks == 3
    assert [p.size_bytes for p in run.points] == [1024, 65536]
    p = run.points[1]
    assert p.busbw_gbps == pytest.approx(p.algbw_gbps * 2 * 2 / 3)
    assert all(p.wrong == 0 for p in run.points)


def test_wrong_result_is_detected(capsys, monkeypatch):
    out = run_script(capsys, monkeypatch, corrupt=True)
    run = allreduce_mpi.parse_output(out, "x", ("a", "b", "c"), (1024, 65536))
    assert run.status == "failed" and run.points[0].wrong == 1
    assert not judge(run, 0.0, 1024).ok


def test_cut_short_or_wrong_rank_count_is_incomplete(capsys, monkeypatch):
    out = run_script(capsys, monkeypatch)
    cut = "\n".join(x for x in out.splitlines() if '"end"' not in x)
    assert allreduce_mpi.parse_output(cut, "x", ("a", "b", "c"), (1024, 65536)).status == "incomplete"
    assert allreduce_mpi.parse_output(out, "x", ("a", "b"), (1024, 65536)).status == "incomplete"
    assert allreduce_mpi.parse_output("", "x", ("a", "b"), (1024,)).status == "incomplete"


def test_mpirun_pins_the_fabric():
    argv = allreduce_mpi.mpirun_argv(["10.83.1.10", "10.83.1.11"], "10.83.1.0/24",
                                     allreduce_mpi.MpiSettings(sizes=(1024, 2048)))
    joined = " ".join(argv)
    assert "--host 10.83.1.10:1,10.83.1.11:1" in joined
    assert "btl_tcp_if_include 10.83.1.0/24" in joined and "oob_tcp_if_include 10.83.1.0/24" in joined
    assert "--mca mpi_yield_when_idle 1" in joined  # waiting ranks must not spin on shared cores
    # sizes, iterations, warmup, seconds per size, and the run's deadline: its limit less mpirun's start
    assert argv[-5:] == ["1024,2048", "10", "2", "2.0", f"{240.0 - allreduce_mpi.LAUNCH_S:.3f}"]


def test_mpirun_sends_the_data_over_the_rails_and_its_own_traffic_over_the_fabric():
    argv = allreduce_mpi.mpirun_argv(["10.83.0.10", "10.83.0.11"], "10.83.1.0/24",
                                     allreduce_mpi.MpiSettings(sizes=(1024, 2048)), "10.83.2.0/24,10.83.3.0/24")
    joined = " ".join(argv)
    assert "btl_tcp_if_include 10.83.2.0/24,10.83.3.0/24" in joined and "oob_tcp_if_include 10.83.1.0/24" in joined


class FakeLauncher:
    name = "gpu-1"

    def __init__(self, rc: int, stdout: str, stderr: str = "") -> None:
        self.result = CommandResult(rc, stdout, stderr)

    def run(self, command, *, stdin=None, timeout=120.0):
        return self.result


def test_a_slow_link_stops_before_the_size_it_cannot_finish(capsys, monkeypatch):
    # 1 us per byte (1 MB/s): 1 MiB takes ~1 s an all-reduce; 4 iterations do not fit 3 s left.
    out = run_script(capsys, monkeypatch, ranks=2, sizes="65536,262144,1048576", deadline="3",
                     seconds_per_byte=1e-6)
    run = allreduce_mpi.parse_output(out, "pair:a+b", ("a", "b"), (65536, 262144, 1048576))
    assert run.status == "cut" and [p.size_bytes for p in run.points] == [65536, 262144]
    assert "stopped before 1048576 B" in run.notes[0]
    v = judge(run, 0.05, 1048576)
    assert not v.ok and v.reached_bytes == 262144 and v.busbw_gbps == pytest.approx(0.001, rel=0.01)
    # Below the verdict size the floor is not defined there.
    assert v.floor_at_reached_gbps is None and "slow" in v.message and "262144 B" in v.message


def test_without_a_deadline_every_size_runs(capsys, monkeypatch):
    out = run_script(capsys, monkeypatch, ranks=2, sizes="65536,262144,1048576", seconds_per_byte=1e-6)
    run = allreduce_mpi.parse_output(out, "pair:a+b", ("a", "b"), (65536, 262144, 1048576))
    assert run.status == "ok" and len(run.points) == 3


def test_killed_at_its_budget_is_slow_at_the_size_reached(capsys, monkeypatch):
    out = run_script(capsys, monkeypatch, ranks=2, sizes="1048576,4194304")
    partial = "\n".join(x for x in out.splitlines() if "4194304" not in x and '"end"' not in x)
    settings = allreduce_mpi.MpiSettings(sizes=(1048576, 4194304), timeout_s=12.0)
    launcher = FakeLauncher(124, partial, "timed out after 12 s; 3 of its process(es) killed on the node: mpirun")
    run, _ = allreduce_mpi.run_allreduce(launcher, ("a", "b"), ["10.0.0.1", "10.0.0.2"], "10.0.1.0/24",
                                           settings, "pair:a+b")
    assert run.status == "cut" and run.budget_s == 12.0 and len(run.points) == 1
    assert judge(run, 0.05, 4194304).reached_bytes == 1048576
    # Any other failure of mpirun stays an incomplete run, never a slow one.
    failed, _ = allreduce_mpi.run_allreduce(FakeLauncher(1, partial, ""), ("a", "b"), ["10.0.0.1", "10.0.0.2"],
                                            "10.0.1.0/24", settings, "pair:a+b")
    assert failed.status == "incomplete" and not judge(failed, 0.05, 4194304).reached_bytes


def test_pair_sizes_ramp_up_to_the_verdict_sizes():
    assert allreduce_mpi.ramp_to(16 << 20) == (1 << 20, 4 << 20, 16 << 20, 32 << 20)
    assert allreduce_mpi.ramp_to(2048) == (2048, 4096)


def test_sizes_reach_twice_the_large_size():
    s = allreduce_mpi.sizes_up_to(16 << 20)
    assert s[-2:] == (16 << 20, 32 << 20) and s[0] == 1024
