"""The MPI node script and its runner's parsing, with a stand-in for mpi4py (one process, n ranks faked)."""

from __future__ import annotations

import sys
import types

import pytest

from gpucluster.conformance import allreduce_mpi
from gpucluster.conformance.bandwidth import judge


def fake_mpi(ranks: int, corrupt: bool) -> types.ModuleType:
    """Rank 0 of a world of ``ranks`` whose peers each contribute ``r+1``: the sum is known."""
    mod = types.ModuleType("mpi4py")
    mpi = types.SimpleNamespace(FLOAT="f", SUM="sum", MAX="max")

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

        def Allreduce(self, send, recv, op):
            buf = recv[0]
            buf[:] = type(buf)("f", [float(ranks * (ranks + 1) // 2)]) * len(buf)
            if corrupt:
                buf[3] = 0.0

    mpi.COMM_WORLD = Comm()
    mpi.Get_processor_name = lambda: "node"
    mpi.Wtime = __import__("time").perf_counter
    mod.MPI = mpi
    return mod


def run_script(capsys, monkeypatch, ranks=3, corrupt=False, sizes="1024,65536"):
    monkeypatch.setitem(sys.modules, "mpi4py", fake_mpi(ranks, corrupt))
    ns: dict = {"__name__": "gcar"}
    exec(compile(allreduce_mpi.NODE_SCRIPT, "node_script", "exec"), ns)
    ns["main"](["x", sizes, "3", "1", "0.5"])
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
    assert argv[-4:] == ["1024,2048", "10", "2", "2.0"]


def test_sizes_reach_twice_the_large_size():
    s = allreduce_mpi.sizes_up_to(16 << 20)
    assert s[-2:] == (16 << 20, 32 << 20) and s[0] == 1024
