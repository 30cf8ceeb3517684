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
