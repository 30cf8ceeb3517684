"""Parser for perftest ``ib_write_bw`` output (server side, client side, or both in one log).

perftest labels bandwidth ``MB/sec`` but computes it with 2^20-byte megabytes (MiB/s);
``--report_gbits`` switches the columns to ``Gb/sec`` (10^9 bits). Both are reported here in
Gb/s: ``MB/sec x 2^20 x 8 / 1e9``. In duration mode (``-D``) perftest does not measure the
peak and prints ``0.00``; that peak is reported as null.

Logs that hold both ends, one after the other or interleaved line by line, repeat the
final row on each side; identical rows are kept once.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpucluster.parsers.common import NotToolOutput, ParseResult, clean_lines

_BANNER = re.compile(r"^(\S.*?) BW Test$")
_HEADER = re.compile(
    r"^#bytes\s+#iterations\s+BW peak\[([A-Za-z]+/sec)\]\s+BW average\[([A-Za-z]+/sec)\]\s+MsgRate\[Mpps\]"
)
_ROW = re.compile(r"^(\d+)\s+(\d+)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)$")
_DEVICE = re.compile(r"\bDevice\s*:\s*(\S+)")
_LINK = re.compile(r"^Link type\s*:\s*(\S+)")
_QPS = re.compile(r"^Number of qps\s*:\s*(\d+)")
_MTU = re.compile(r"^Mtu\s*:\s*(\d+)\[B\]")
_WAITING = "Waiting for client to connect"
_NO_PEAK = "BW peak won't be measured"
_DURATION_FLAG = re.compile(r"\bib_\w+_bw\b.*\s(?:-D\s*\d+|--duration[= ]\d+)")

_MIB_TO_GBIT = 2**20 * 8 / 1e9


@dataclass
class IbRow:
    size_bytes: int
    iterations: int
    bw_peak_gbps: float | None
    bw_avg_gbps: float
    msg_rate_mpps: float


@dataclass
class IbWriteBwResult(ParseResult):
    test: str | None = None
    role: str | None = None  # "server" | "client" | "both"
    device: str | None = None
    link_type: str | None = None
    qps: int | None = None
    mtu_bytes: int | None = None
    units_in_log: str | None = None  # "MB/sec" (really MiB/s) or "Gb/sec"
    duration_mode: bool = False
    rows: list[IbRow] = field(default_factory=list)
    peak_gbps: float | None = None


def _to_gbps(value: float, unit: str) -> float:
    if unit.startswith("Gb"):
        return value
    # "MB/sec" and "MiB/sec" are both 2^20 bytes per second in perftest.
    return value * _MIB_TO_GBIT


def parse(text: str) -> IbWriteBwResult:
    result = IbWriteBwResult()
    banners = 0
    waiting = False
    unit: str | None = None
    raw_rows: list[tuple[int, int, float, float, float]] = []
    for line in clean_lines(text):
        if not line:
            continue
        if m := _BANNER.match(line):
            banners += 1
            result.test = result.test or m.group(1)
        elif m := _HEADER.match(line):
            if unit is not None and m.group(2) != unit:
                result.notes.append(f"mixed units in log: {unit} and {m.group(2)}; rows kept in their own")
            unit = unit or m.group(2)
        elif unit is not None and (m := _ROW.match(line)):
            raw_rows.append(
                (int(m.group(1)), int(m.group(2)), float(m.group(3)), float(m.group(4)), float(m.group(5)))
            )
        elif _WAITING in line:
            waiting = True
        elif _NO_PEAK in line or _DURATION_FLAG.search(line):
            result.duration_mode = True
        elif m := _LINK.match(line):
            result.link_type = result.link_type or m.group(1)
        elif m := _QPS.match(line):
            result.qps = result.qps or int(m.group(1))
        elif m := _MTU.match(line):
            result.mtu_bytes = result.mtu_bytes or int(m.group(1))
        if result.device is None and (m := _DEVICE.search(line)):
            result.device = m.group(1)
    if banners == 0 and unit is None:
        raise NotToolOutput("not ib_write_bw output (no 'BW Test' banner or '#bytes #iterations' header)")
    result.units_in_log = unit
    result.role = "both" if banners > 1 else ("server" if waiting else "client")
    unique = list(dict.fromkeys(raw_rows))
    if len(unique) < len(raw_rows):
        result.notes.append(f"{len(raw_rows) - len(unique)} repeated row(s) dropped (both ends print them)")
    for size, iters, peak, avg, rate in unique:
        assert unit is not None
        result.rows.append(
            IbRow(
                size_bytes=size,
                iterations=iters,
                bw_peak_gbps=None if result.duration_mode and peak == 0 else _to_gbps(peak, unit),
                bw_avg_gbps=_to_gbps(avg, unit),
                msg_rate_mpps=rate,
            )
        )
    if result.rows:
        result.peak_gbps = max(r.bw_avg_gbps for r in result.rows)
        result.status = "ok"
    else:
        result.notes.append("no result rows: the test did not finish (or did not connect)")
        result.status = "incomplete"
    return result
