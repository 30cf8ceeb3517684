"""nccl-tests parser on published logs (see tests/data/samples/SOURCES.md) and constructed failures."""

from __future__ import annotations

import json
from collections.abc import Callable

import pytest

from gpucluster.parsers import NotToolOutput, busbw_factor
from gpucluster.parsers.nccl_tests import parse

Sample = Callable[[str], str]


def test_legacy_8x_a100(sample: Sample) -> None:
    r = parse(sample("nccl_allreduce_01.txt"))
    assert r.format == "legacy"
    assert r.ranks == 8
    assert len(r.rows) == 34  # the stray "NCCL INFO Launch mode Parallel" line is not a row
    assert r.peak_busbw_gbps == 235.26
    assert r.rows[-1].busbw_oop_gbps == 235.26 and r.rows[-1].busbw_ip_gbps == 235.03
    assert r.avg_busbw_gbps == 68.4048
    assert r.out_of_bounds == 0
    assert r.collective is None
    assert r.rows[-1].size_bytes == 8589934592 and r.rows[-1].root is None
    # validation off: the wrong column says N/A, which is neither a count nor a delta
    assert all(row.wrong_oop is None and row.max_delta_oop is None for row in r.rows)
    assert r.status == "ok"


def test_legacy_error_column_is_a_max_delta_not_a_count(sample: Sample) -> None:
    r = parse(sample("nccl_allreduce_02.txt"))  # reST-indented
    assert r.format == "legacy"
    assert r.ranks == 4
    assert r.rows[0].max_delta_oop == pytest.approx(1e-07)
    assert r.rows[0].max_delta_ip == 0.0
    assert all(row.wrong_oop is None and row.wrong_ip is None for row in r.rows)
    assert r.peak_busbw_gbps == 10.52
    assert r.avg_busbw_gbps == 4.22207
    assert r.status == "ok"


def test_data_corruption_without_footer_fails(sample: Sample) -> None:
    r = parse(sample("nccl_allreduce_06.txt"))
    assert r.nccl_tests_version == "2.17.9"
    assert r.nccl_version == "2.29.2"  # from nccl-library=22902
    assert r.format == "v2.13-2.17"
    assert r.collective == "all_reduce_perf"
    assert r.ranks == 16
    assert len(r.rows) == 28
    assert r.rows[0].root == -1 and r.rows[0].type == "int8"
    assert max(row.wrong_oop or 0 for row in r.rows) == 951005
    assert r.rows[21].size_bytes == 2097152 and r.rows[21].wrong_oop == 18134 and r.rows[21].wrong_ip == 9609
    assert r.avg_busbw_gbps is None and r.out_of_bounds is None
    assert r.status == "failed"


def test_openshift_16_ranks_with_banner_and_command(sample: Sample) -> None:
    r = parse(sample("nccl_allreduce_08.txt"))
    assert r.ranks == 16
    assert r.nccl_version == "2.27.3+cuda12.9"
    assert r.collective == "all_reduce_perf"  # from the mpirun command line
    assert r.avg_busbw_gbps == 36.2205
    assert r.peak_busbw_gbps == 92.35
    assert r.status == "ok"


def test_srun_prefixed_table_without_footer_is_incomplete(sample: Sample) -> None:
    r = parse(sample("nccl_allreduce_10.txt"))
    assert len(r.rows) == 32
    assert r.peak_busbw_gbps == 487.26
    assert r.avg_busbw_gbps is None
    assert r.ranks is None
    assert r.status == "incomplete"
    assert any("footer" in n for n in r.notes)


def test_mpi_tagged_elided_log(sample: Sample) -> None:
    r = parse(sample("nccl_allreduce_11.txt"))
    assert r.peak_busbw_gbps == 437.89
    assert r.avg_busbw_gbps == 52.9753
    assert len(r.rows) == 7
    assert any("elided" in n for n in r.notes)
    assert r.status == "ok"


def test_l40s_pair(sample: Sample) -> None:
    r = parse(sample("nccl_allreduce_12.txt"))
    assert r.ranks == 2
    assert r.avg_busbw_gbps == 3.98762
    assert r.peak_busbw_gbps == 8.14
    assert r.status == "ok"


def test_p4de_table_only(sample: Sample) -> None:
    r = parse(sample("nccl_allreduce_13.txt"))
    assert r.peak_busbw_gbps == 78.33
    assert r.status == "incomplete"


# Constructed from nccl-tests' printf formats (src/util.cu writeResultHeader/
# writeBenchmarkLineBody/writeResultFooter): "%6g" prints large wrong counts in exponent form.
FAILED_V218 = """\
# nccl-tests version 2.18.0 nccl-headers=22703 nccl-library=22703
# Collective test starting: reduce_scatter_perf
# nThread 1 nGpus 1 minBytes 1048576 maxBytes 2097152 step: 2(factor) warmup iters: 5 iters: 20 agg iters: 1 validation: 1 graph: 0
#
# Using devices
#  Rank  0 Group  0 Pid   1001 on     node-a device  0 [0000:1b:00] NVIDIA H100 80GB HBM3
#  Rank  1 Group  0 Pid   1002 on     node-a device  1 [0000:43:00] NVIDIA H100 80GB HBM3
#
#                                                              out-of-place                       in-place
#       size         count      type   redop    root     time   algbw   busbw  #wrong     time   algbw   busbw  #wrong
#        (B)    (elements)                               (us)  (GB/s)  (GB/s)             (us)  (GB/s)  (GB/s)
     1048576        131072     float     sum      -1    20.11   52.14   26.07       0    19.98   52.48   26.24       0
     2097152        262144     float     sum      -1    35.02   59.88   29.94  1.04858e+06    34.90   60.09   30.04       0
# Out of bounds values : 1 FAILED
# Avg bus bandwidth    : 28.0725
#
# Collective test concluded: reduce_scatter_perf
"""  # noqa: E501


def test_wrong_count_in_g_format_fails() -> None:
    r = parse(FAILED_V218)
    assert r.format == "v2.18+"
    assert r.collective == "reduce_scatter_perf"
    assert r.rows[1].wrong_oop == 1048580
    assert r.out_of_bounds == 1
    assert r.status == "failed"


def test_out_of_bounds_alone_fails() -> None:
    text = FAILED_V218.replace("1.04858e+06", "      0")
    r = parse(text)
    assert all(row.wrong_oop == 0 for row in r.rows)
    assert r.status == "failed"


def test_header_only_is_incomplete() -> None:
    head = FAILED_V218.split("     1048576")[0]
    r = parse(head)
    assert r.rows == [] and r.status == "incomplete"


# Shaped after nccl-tests' -J writer (src/util.cu); see parse_json's docstring.
JSON_RUN = {
    "version": 1,
    "start_time": "2025-01-01 00:00:00",
    "args": ["./build/all_reduce_perf", "-b", "8", "-e", "16", "-J", "out.json"],
    "env": [],
    "nccl_version": 22703,
    "config": {"nthreads": 1, "ngpus": 2, "devices": [{"rank": 0}, {"rank": 1}]},
    "results": [
        {
            "size": 8,
            "count": 2,
            "type": "float",
            "redop": "sum",
            "root": "    -1",
            "out_of_place": {"time": 10.5, "alg_bw": 0.0, "bus_bw": 0.0, "nwrong": 0.0},
            "in_place": {"time": 10.1, "alg_bw": 0.0, "bus_bw": 0.0, "nwrong": 0.0},
            "actual_iterations": 20,
            "experiment_name": "",
        },
        {
            "size": 16,
            "count": 4,
            "type": "float",
            "redop": "sum",
            "root": "    -1",
            "out_of_place": {"time": 10.7, "alg_bw": 0.0, "bus_bw": 0.01, "nwrong": 0.0},
            "in_place": {"time": 10.2, "alg_bw": 0.0, "bus_bw": 0.02, "nwrong": None},
            "actual_iterations": 20,
            "experiment_name": "",
        },
    ],
    "out_of_bounds": {"count": 0, "okay": True},
    "average_bus_bandwidth": {"bandwidth": 0.015, "okay": "unchecked"},
    "errors": [],
}


def test_json_output() -> None:
    r = parse(json.dumps(JSON_RUN))
    assert r.format == "json"
    assert r.nccl_version == "2.27.3"
    assert r.ranks == 2
    assert r.collective == "all_reduce_perf"
    assert [row.size_bytes for row in r.rows] == [8, 16]
    assert r.rows[1].root == -1 and r.rows[1].wrong_ip is None
    assert r.peak_busbw_gbps == 0.02
    assert r.status == "ok"


def test_json_with_wrong_elements_fails() -> None:
    doc = json.loads(json.dumps(JSON_RUN))
    doc["results"][1]["out_of_place"]["nwrong"] = 7.0
    assert parse(json.dumps(doc)).status == "failed"


def test_not_nccl_output() -> None:
    with pytest.raises(NotToolOutput, match="no '#  Rank'/size table found"):
        parse("hello\nworld\n")
    with pytest.raises(NotToolOutput):
        parse('{"foo": 1}')


@pytest.mark.parametrize(
    ("collective", "n", "factor"),
    [
        ("all_reduce", 8, 1.75),
        ("all_reduce_perf", 2, 1.0),
        ("reduce_scatter", 4, 0.75),
        ("all_gather", 16, 15 / 16),
        ("alltoall", 8, 7 / 8),
        ("broadcast", 8, 1.0),
        ("reduce", 8, 1.0),
        ("sendrecv", 2, 1.0),
        ("all_reduce", 1, 0.0),
    ],
)
def test_busbw_factor(collective: str, n: int, factor: float) -> None:
    assert busbw_factor(collective, n) == pytest.approx(factor)


def test_busbw_factor_matches_the_sample() -> None:
    # nccl_allreduce_01, 8 GiB row: algbw 134.44 x 2*7/8 = 235.27, printed 235.26 (rounding).
    assert 134.44 * busbw_factor("all_reduce", 8) == pytest.approx(235.26, abs=0.02)


def test_busbw_factor_rejects_unknown() -> None:
    with pytest.raises(ValueError):
        busbw_factor("gather_all", 4)
    with pytest.raises(ValueError):
        busbw_factor("all_reduce", 0)


# A passing v2.18 run: FAILED_V218 with its wrong count and out-of-bounds line made good.
PASSED_V218 = FAILED_V218.replace("1.04858e+06", "      0").replace("1 FAILED", "0 OK")


def test_passed_v218_is_ok() -> None:
    assert parse(PASSED_V218).status == "ok"


# nccl-tests' CUDACHECK/NCCLCHECK/TESTCHECK macros (src/common.h) and its timeout (src/common.cu).
@pytest.mark.parametrize(
    "failure",
    [
        "node-a: Test NCCL failure common.cu:1012 'unhandled system error (run with NCCL_DEBUG=INFO for details) / '",
        "node-a: Test CUDA failure common.cu:892 'an illegal memory access was encountered'",
        " .. node-a pid 1001: Test failure common.cu:401",
        "node-a: Test timeout (1800s) common.cu:523",
    ],
)
def test_failure_line_with_a_footer_fails(failure: str) -> None:
    at = PASSED_V218.index("     2097152")
    r = parse(PASSED_V218[:at] + failure + "\n" + PASSED_V218[at:])
    assert r.status == "failed"
    assert any("reported a failure" in n for n in r.notes)


@pytest.mark.parametrize("cell", ["nan", "-nan", "inf", "-3", "x", "1e999", "-1.5e+02"])
def test_wrong_count_that_is_not_a_count_fails(cell: str) -> None:
    r = parse(PASSED_V218.replace("30.04       0", f"30.04  {cell}"))
    assert len(r.rows) == 2
    assert r.status == "failed"


@pytest.mark.parametrize("cell", ["nan", "inf", "-1e-07", "?"])
def test_legacy_max_delta_that_is_not_a_delta_fails(sample: Sample, cell: str) -> None:
    text = sample("nccl_allreduce_02.txt").replace("9.42  2e-07   2671.4", f"9.42  {cell}   2671.4")
    assert parse(text).status == "failed"


def test_avg_bus_bandwidth_failed_fails() -> None:
    # NCCL_TESTS_MIN_BW set: writeResultFooter prints "FAILED" after the average.
    r = parse(PASSED_V218.replace("# Avg bus bandwidth    : 28.0725", "# Avg bus bandwidth    : 28.0725 FAILED"))
    assert r.status == "failed"


@pytest.mark.parametrize("cut", ["# Avg bus bandwidth", "#\n# Collective test concluded"])
def test_cut_before_the_closing_lines_is_incomplete(cut: str) -> None:
    r = parse(PASSED_V218[: PASSED_V218.index(cut)])
    assert r.status == "incomplete"
    assert any("footer" in n or "concluded" in n for n in r.notes)


def test_older_format_without_concluded_line_is_ok(sample: Sample) -> None:
    # Before 2.17 there is no "Collective test starting/concluded": the Avg line closes the run.
    assert parse(sample("nccl_allreduce_08.txt")).status == "ok"


def test_unreadable_row_is_incomplete() -> None:
    r = parse(PASSED_V218.replace("35.02   59.88   29.94", "35.02     nan   29.94"))
    assert r.status == "incomplete"
    assert any("unreadable result row" in n for n in r.notes)


def test_out_of_bounds_of_an_earlier_run_is_kept() -> None:
    first = PASSED_V218.replace("0 OK", "1 FAILED")
    for text in (first + PASSED_V218, PASSED_V218 + first):
        r = parse(text)
        assert r.out_of_bounds == 1 and r.status == "failed"
        assert len(r.rows) == 4


def test_earlier_run_without_footer_is_incomplete(sample: Sample) -> None:
    cut = sample("nccl_allreduce_08.txt").split("# Out of bounds")[0]
    r = parse(cut + sample("nccl_allreduce_08.txt"))
    assert r.status == "incomplete"
    assert r.ranks == 16  # the device list of each run is counted once


def test_corrupt_run_then_clean_run_still_fails(sample: Sample) -> None:
    for text in (
        sample("nccl_allreduce_06.txt") + sample("nccl_allreduce_08.txt"),
        sample("nccl_allreduce_08.txt") + sample("nccl_allreduce_06.txt"),
    ):
        assert parse(text).status == "failed"


def test_huge_numbers_are_not_infinite() -> None:
    r = parse(PASSED_V218.replace("26.24", "1e999"))
    assert r.status != "ok"
    assert all(bw is None or bw < 1e300 for row in r.rows for bw in (row.busbw_oop_gbps, row.busbw_ip_gbps))


def test_json_without_footer_is_incomplete() -> None:
    doc = json.loads(json.dumps(JSON_RUN))
    del doc["out_of_bounds"], doc["average_bus_bandwidth"]
    assert parse(json.dumps(doc)).status == "incomplete"


@pytest.mark.parametrize("nwrong", ["nan", -1.0, "x"])
def test_json_wrong_count_that_is_not_a_count_fails(nwrong: object) -> None:
    doc = json.loads(json.dumps(JSON_RUN))
    doc["results"][0]["in_place"]["nwrong"] = nwrong
    assert parse(json.dumps(doc)).status == "failed"


def test_json_nan_literal_does_not_crash() -> None:
    text = json.dumps(JSON_RUN).replace('"nwrong": 0.0', '"nwrong": NaN', 1)
    assert parse(text).status == "failed"


ROW_08 = ("    8388608       2097152     float     sum      -1    255.7   32.80   61.50      0"
          "    254.8   32.92   61.72      0")


@pytest.mark.parametrize("cell", ["0.4", "0.5", "1e-09"])
def test_a_fractional_wrong_count_is_no_count(sample: Sample, cell: str) -> None:
    text = sample("nccl_allreduce_08.txt")
    assert ROW_08 in text
    bad = ROW_08[: ROW_08.rindex("0")] + cell
    assert parse(text.replace(ROW_08, bad)).status != "ok"


def test_a_later_run_that_dies_before_its_rows_is_not_ok(sample: Sample) -> None:
    text = sample("nccl_allreduce_08.txt")
    died = "\n# nThread 1 nGpus 1 minBytes 8 maxBytes 8589934592 step: 2(factor) warmup iters: 5 iters: 20\n" \
           "#  Rank  0 Group  0 Pid   1 on host device  0 [0000:1b:00] NVIDIA H200\nKilled\n"
    assert parse(text).status == "ok"
    assert parse(text + died).status != "ok"


@pytest.mark.parametrize("tail", [
    "Primary job  terminated normally, but 1 process returned\na non-zero exit code. Per user-direction, the job has "
    "been aborted.\n",
    "mpirun detected that one or more processes exited with non-zero status, thus causing\nthe job to be terminated."
    "\n",
])
def test_open_mpi_non_zero_exit_fails(sample: Sample, tail: str) -> None:
    assert parse(sample("nccl_allreduce_08.txt") + tail).status == "failed"
