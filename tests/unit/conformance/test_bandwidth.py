"""Bus bandwidth as nccl-tests computes it, checked against nccl-tests' own printed figures."""

from __future__ import annotations

import pytest

from gpucluster.conformance.bandwidth import AllReduceRun, SizePoint, from_nccl_result, judge, large_busbw, point
from gpucluster.parsers import parse


@pytest.mark.parametrize("name,ranks", [("nccl_allreduce_01.txt", 8), ("nccl_allreduce_08.txt", 16)])
def test_busbw_from_time_matches_nccl_tests(sample_text, name, ranks):
    parsed = parse("nccl-tests", sample_text(name))
    rows = [r for r in parsed["rows"] if r["size_bytes"] >= 1 << 20]
    assert rows
    for r in rows:
        p = point(r["size_bytes"], r["time_oop_us"], ranks)
        # nccl-tests prints 2 decimals; time is rounded too: 1 % agreement.
        assert p.algbw_gbps == pytest.approx(r["algbw_oop_gbps"], rel=0.01)
        assert p.busbw_gbps == pytest.approx(r["busbw_oop_gbps"], rel=0.01)
        assert p.busbw_gbps == pytest.approx(p.algbw_gbps * 2 * (ranks - 1) / ranks)


def test_pair_busbw_equals_algbw():
    p = point(1 << 20, 1000.0, 2)
    assert p.busbw_gbps == p.algbw_gbps == pytest.approx(1.048576)


def test_verdict_uses_large_sizes_not_average(sample_text):
    parsed = parse("nccl-tests", sample_text("nccl_allreduce_01.txt"))
    run = from_nccl_result(parsed, "nccl-tests", "intra:x", ("x",))
    assert parsed["avg_busbw_gbps"] < 100  # the all-size average drowns in small sizes
    v = judge(run, 228.0, 1 << 30)
    assert v.ok and v.busbw_gbps > 228
    assert not judge(run, 240.0, 1 << 30).ok


def test_wrong_results_fail_even_above_floor(sample_text):
    parsed = parse("nccl-tests", sample_text("nccl_allreduce_06.txt"))
    run = from_nccl_result(parsed, "nccl-tests", "inter:x", ("a", "b"))
    v = judge(run, 0.001, 1 << 20)
    assert not v.ok


def test_no_large_size_is_not_a_pass():
    run = AllReduceRun("mpi-cpu", "x", ("a", "b"), 2, [SizePoint(1024, 10.0, 0.1, 0.1, 0)], status="ok")
    v = judge(run, 0.01, 1 << 20)
    assert not v.ok and "no message size" in v.message
    assert large_busbw(run.points, 1 << 20) is None


def test_incomplete_run_fails():
    run = AllReduceRun("mpi-cpu", "x", ("a", "b"), 2, [SizePoint(1 << 24, 10.0, 9.0, 9.0, 0)], status="incomplete",
                       notes=["the run did not finish"])
    assert not judge(run, 0.1, 1 << 24).ok


def test_budget_is_what_the_sizes_take_at_the_floor_with_room():
    from gpucluster.conformance.bandwidth import budget_s, floor_seconds

    sizes = (1 << 20, 4 << 20, 16 << 20, 32 << 20)
    # Two ranks: busbw = algbw, so 4 iterations of 53 MiB at 0.05 GB/s take 4.45 s.
    assert floor_seconds(sizes, 2, 0.05, 4) == pytest.approx(4 * sum(sizes) / 0.05e9)
    # Three ranks move 4/3 of the bytes for the same busbw.
    assert floor_seconds(sizes, 3, 0.05, 4) == pytest.approx(4 * sum(sizes) * 4 / 3 / 0.05e9)
    assert budget_s(sizes, 2, 0.05, 4, launch_s=5.0) == pytest.approx(5.0 + 2 * 4 * sum(sizes) / 0.05e9)


def test_a_run_cut_by_its_budget_is_slow_never_passed():
    pts = [point(1 << 20, 400_000.0, 2), point(16 << 20, 6_000_000.0, 2)]
    cut = AllReduceRun("mpi-cpu", "pair:a+b", ("a", "b"), 2, points=pts, status="cut", budget_s=14.0)
    v = judge(cut, 0.0001, 16 << 20)
    # Even a figure above the floor at the sizes reached does not pass a run that did not finish.
    assert not v.ok and v.reached_bytes == 16 << 20 and v.busbw_gbps == pts[-1].busbw_gbps
    assert v.floor_at_reached_gbps == 0.0001 and "14 s" in v.message
    low = judge(AllReduceRun("mpi-cpu", "p", ("a", "b"), 2, points=pts[:1], status="cut"), 0.05, 16 << 20)
    assert not low.ok and low.reached_bytes == 1 << 20 and low.floor_at_reached_gbps is None
    none = judge(AllReduceRun("mpi-cpu", "p", ("a", "b"), 2, status="cut"), 0.05, 16 << 20)
    assert not none.ok and none.reached_bytes is None and none.busbw_gbps is None
    assert AllReduceRun.from_json(cut.to_json()).budget_s == 14.0
