"""perftest ib_write_bw parser on published logs (tests/data/samples/SOURCES.md)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from gpucluster.parsers import NotToolOutput
from gpucluster.parsers.ib_write_bw import parse

Sample = Callable[[str], str]


def test_loopback_concatenated_server_and_client(sample: Sample) -> None:
    r = parse(sample("ib_write_bw_01.txt"))
    assert r.role == "both"
    assert r.units_in_log == "MB/sec"
    assert r.device == "ib0" and r.link_type == "IB"
    assert len(r.rows) == 1  # both ends print the same row
    row = r.rows[0]
    assert (row.size_bytes, row.iterations, row.msg_rate_mpps) == (8388608, 20000, 0.003007)
    # MB/sec in perftest is MiB/s: 24056.72 * 2^20 * 8 / 1e9
    assert row.bw_avg_gbps == pytest.approx(201.80, abs=0.01)
    assert r.peak_gbps == row.bw_avg_gbps
    assert r.duration_mode is False
    assert r.status == "ok"


def test_client_roce_cuda_duration_mode(sample: Sample) -> None:
    r = parse(sample("ib_write_bw_02.txt"))
    assert r.role == "client"
    assert r.units_in_log == "Gb/sec"
    assert r.link_type == "Ethernet" and r.device == "mlx5_1" and r.qps == 16
    assert r.duration_mode is True
    assert r.rows[0].bw_peak_gbps is None  # printed 0.00: not measured with -D
    assert r.rows[0].bw_avg_gbps == 181.46
    assert r.rows[0].iterations == 10384867
    assert r.peak_gbps == 181.46
    assert r.status == "ok"


def test_server_side(sample: Sample) -> None:
    r = parse(sample("ib_write_bw_03.txt"))
    assert r.role == "server"
    assert r.peak_gbps == 181.46
    assert r.status == "ok"


def test_interleaved_server_and_client(sample: Sample) -> None:
    r = parse(sample("ib_write_bw_04.txt"))
    assert r.role == "both"
    assert [row.size_bytes for row in r.rows] == [2**k for k in range(1, 24)]
    assert r.rows[0].bw_peak_gbps == pytest.approx(5.32 * 2**20 * 8 / 1e9)
    best = max(r.rows, key=lambda row: row.bw_avg_gbps)
    assert best.size_bytes == 4194304  # 23277.91 MB/sec
    assert r.peak_gbps == pytest.approx(23277.91 * 2**20 * 8 / 1e9)
    assert r.status == "ok"


def test_no_rows_is_incomplete(sample: Sample) -> None:
    text = sample("ib_write_bw_03.txt").split(" #bytes")[0]
    r = parse(text)
    assert r.rows == [] and r.peak_gbps is None
    assert r.status == "incomplete"


def test_not_perftest() -> None:
    with pytest.raises(NotToolOutput):
        parse("Tested 8 GPUs:\n\tGPU 0: OK\n")


# perftest's own error lines (fprintf(stderr, ...) in linux-rdma/perftest src/write_bw.c and
# src/perftest_resources.c), as a 2>&1 capture holds them after the rows already printed.
@pytest.mark.parametrize(
    "error",
    [
        " Completion with error at client\n Failed status 12: wr_id 0 syndrom 0x81\nscnt=128, ccnt=0\n",
        " Failed to complete run_iter_bw function successfully\n",
        " Couldn't post send: qp 0 scnt=0 \n",
        " Unable to init the socket connection\n",
        "Problems with warm up\n",
        " Error: BW result is below bw limit\n",
        "Poll send CQ error status=12 qp 0 credit=0 scredit=0\n",
    ],
)
def test_error_after_good_rows_fails(sample: Sample, error: str) -> None:
    text = sample("ib_write_bw_04.txt")
    cut = text.index("\n2097152    2000") + 1  # rows 2 B .. 1 MiB printed, then the error
    r = parse(text[:cut] + error)
    assert r.rows and r.status == "failed"
    assert any("perftest reported an error" in n for n in r.notes)


def test_error_after_a_complete_client_run_fails(sample: Sample) -> None:
    text = sample("ib_write_bw_02.txt") + " Completion with error at client\n"
    assert parse(text).status == "failed"


def test_warnings_are_not_errors(sample: Sample) -> None:
    # ib_write_bw_02 holds "WARNING: BW peak won't be measured", "Requested mtu is higher than
    # active mtu" and "Perftest doesn't supports CUDA tests with inline messages": all benign.
    assert parse(sample("ib_write_bw_02.txt")).status == "ok"


def test_cut_before_the_closing_line_is_incomplete(sample: Sample) -> None:
    text = sample("ib_write_bw_04.txt")
    r = parse(text[: text.index("\n2097152    2000") + 1])  # -a run cut after the 1 MiB row
    assert r.rows and r.status == "incomplete"
    assert any("closing dashed line" in n for n in r.notes)


def test_unreadable_row_is_not_ok(sample: Sample) -> None:
    text = sample("ib_write_bw_02.txt").replace("181.46 \t\t     0.346100", "nan \t\t     0.346100")
    r = parse(text)
    assert r.status == "incomplete" and any("unreadable result row" in n for n in r.notes)


@pytest.mark.parametrize("failing_first", [True, False])
def test_a_passing_run_does_not_hide_a_failed_one(sample: Sample, failing_first: bool) -> None:
    bad = sample("ib_write_bw_02.txt") + " Completion with error at client\n"
    good = sample("ib_write_bw_03.txt")
    r = parse(bad + good if failing_first else good + bad)
    assert r.status == "failed"


def test_cpu_util_column_is_accepted() -> None:
    # --cpu_util adds a CPU_Util[%] column (RESULT_EXT_CPU_UTIL / REPORT_EXT_CPU_UTIL).
    text = (
        "                    RDMA_Write BW Test\n"
        "---------------------------------------------------------------------------------------\n"
        " #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]    CPU_Util[%]\n"
        " 65536      5000             97.51              97.48  \t\t     0.185923\t    12.50\n"
        "---------------------------------------------------------------------------------------\n"
    )
    r = parse(text)
    assert r.status == "ok" and r.rows[0].bw_avg_gbps == 97.48
