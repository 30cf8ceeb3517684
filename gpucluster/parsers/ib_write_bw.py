"""Parser for perftest ``ib_write_bw`` output (server side, client side, or both in one log).

perftest labels bandwidth ``MB/sec`` but computes it with 2^20-byte megabytes (MiB/s);
``--report_gbits`` switches the columns to ``Gb/sec`` (10^9 bits). Both are reported here in
Gb/s: ``MB/sec x 2^20 x 8 / 1e9``. In duration mode (``-D``) perftest does not measure the
peak and prints ``0.00``; that peak is reported as null.

Logs that hold both ends, one after the other or interleaved line by line, repeat the
final row on each side; identical rows are kept once. Extra columns (``--cpu_util``'s
``CPU_Util[%]``, ``--report-per-port``'s per-port figures) are accepted and ignored.

Verdict. ``failed`` when perftest reports an error anywhere in the log (``Completion with
error``, ``Failed to complete run_iter_bw function successfully``, ``Couldn't ...``,
``Unable to ...``, ``Error ...``, ``Bad wc status``, ``Problems with warm up``, the
``--bw_limit`` check's ``Error: BW result is below bw limit``...), whatever rows came before:
perftest prints a row per message size as it goes, so good rows may precede the failure.
``incomplete`` when there are no rows, a row-shaped line cannot be read, or the last row is
not followed by the dashed line perftest prints to close the table (the log was cut short).
A crash (:func:`~gpucluster.parsers.common.crash`) is ``failed``.

A run that failed before its banner (the client could not connect: ``Couldn't connect to
host:18515`` then ``Unable to init the socket connection``; the option parser refused the
command) is still perftest's when it holds a line only perftest prints (``_PERFTEST``):
``failed`` with perftest's error lines as the reasons, ``incomplete`` without one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from gpucluster.parsers.common import (
    NotToolOutput,
    ParseResult,
    Status,
    clean_lines,
    crash,
    parse_count,
    parse_number,
    worst,
)

_BANNER_END = " BW Test"
_HEADER = re.compile(
    r"#bytes[ \t]+#iterations[ \t]+BW peak\[([A-Za-z]{1,8}/sec)\][ \t]+BW average\[([A-Za-z]{1,8}/sec)\]"
    r"[ \t]+MsgRate\[Mpps\]"
)
_DEVICE = re.compile(r"(?<!\w)Device\s*:\s*(\S+)")
_LINK = re.compile(r"Link type\s*:\s*(\S+)")
_QPS = re.compile(r"Number of qps\s*:\s*(\d{1,9})")
_MTU = re.compile(r"Mtu\s*:\s*(\d{1,9})\[B\]")
_WAITING = "Waiting for client to connect"
_NO_PEAK = "BW peak won't be measured"
_DURATION_FLAG = re.compile(r"(?:^|\s)(?:-D\s*\d|--duration[= ]\d)")
# perftest's own error messages (fprintf(stderr, ...) in src/*.c), matched at the start of a
# line. Its warnings ("WARNING: ...", "Requested mtu is higher than active mtu", "Perftest
# doesn't supports CUDA tests with inline messages") are not errors and do not match.
_ERROR = re.compile(
    r"(?:A )?[Cc]ompletion with (?:[Ee]rror|wc_flags mismatch|flags mismatch)"
    r"|Failed\b|[Ff]ail(?:ed)? to\b|Couldn't\b|Could not\b|Unable to\b|Cannot\b|Can't\b|Can not\b"
    r"|Error\b|ERROR\b|Bad wc status|Problems? (?:with|in)\b|Poll (?:Receive|send) CQ (?:failed|error)"
    r"|poll CQ failed|Function \w{1,40} failed|rdma_\w{1,40} failed|IB device \S+ not found"
    r"|No IB devices found|Did not detect devices|Did not get Message|Internal error|Invalid\b"
    r"|Test exited|Parser function exited|No such device|\w{1,40}(?:\(\))? error=-?\d"
)
# Lines only perftest prints, from its socket and completion code (src/perftest_communication.c,
# src/perftest_resources.c, src/perftest_parameters.c): a run that failed before its banner (the
# client never connected, the parser refused an option) is still perftest's.
_PERFTEST = re.compile(
    r"Couldn't connect to \S{1,300}:\d|Unable to init the socket connection|Unable to open file descriptor for socket"
    r"|Completion with error at (?:client|server)|Failed status \d|Failed to complete run_iter_\w"
    r"|scnt=\d{1,20}, ccnt=\d|Parser function exited with Error|ethernet_\w{1,40}: Couldn't"
    r"|Couldn't (?:read|write) remote address|Unable to (?:read|write) to socket"
    r"|Failed to (?:exchange data|close connection) between server and client"
    r"|(?<!\w)ib_(?:write|read|send|atomic)_(?:bw|lat)\b"
)
_CLOSE_MIN_DASHES = 20  # RESULT_LINE is 87 dashes, RESULT_LINE_PER_PORT longer

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


def _row(tokens: list[str]) -> tuple[int, int, float, float, float] | None:
    """``%lu %lu %.2f %.2f %.6f`` (then any extra columns): size, iterations, peak, average, rate."""
    if len(tokens) < 5:
        return None
    size, iters = parse_count(tokens[0]), parse_count(tokens[1])
    numbers = [parse_number(t) for t in tokens[2:]]
    if size is None or iters is None or any(n is None or n < 0 for n in numbers):
        return None
    peak, avg, rate = numbers[0], numbers[1], numbers[2]
    assert peak is not None and avg is not None and rate is not None
    return size, iters, peak, avg, rate


def parse(text: str) -> IbWriteBwResult:
    result = IbWriteBwResult()
    banners = 0
    waiting = False
    unit: str | None = None
    verdict: Status = "ok"
    closed = True  # the last row is followed by perftest's closing dashed line
    raw_rows: list[tuple[int, int, float, float, float]] = []
    seen = False  # a line only perftest prints (see _PERFTEST)
    for line in clean_lines(text):
        if not line:
            continue
        if not seen and banners == 0 and unit is None and _PERFTEST.search(line[:2000]):
            seen = True
        if line.endswith(_BANNER_END) and len(line) > len(_BANNER_END):
            banners += 1
            result.test = result.test or line[: -len(_BANNER_END)].strip()
        elif line[0] == "-" and len(line) >= _CLOSE_MIN_DASHES and not line.strip("-"):
            closed = True
        elif line[0] == "#" and (m := _HEADER.match(line)):
            if unit is not None and m.group(2) != unit:
                result.note(f"mixed units in log: {unit} and {m.group(2)}; rows kept in their own")
            unit = unit or m.group(2)
        elif unit is not None and line[0].isdigit() and (row := _row(line.split())) is not None:
            raw_rows.append(row)
            closed = False
        elif unit is not None and line[0].isdigit() and parse_count(line.split()[0]) is not None:
            result.note(f"unreadable result row: {line[:120]}")
            verdict = worst("incomplete", verdict)
            closed = False
        elif _ERROR.match(line):
            result.note(f"perftest reported an error: {line[:200]}")
            verdict = "failed"
        elif crash(line):
            result.note(f"perftest crashed: {line[:200]}")
            verdict = "failed"
        elif _WAITING in line:
            waiting = True
        elif _NO_PEAK in line or ("_bw" in line and "ib_" in line and _DURATION_FLAG.search(line)):
            result.duration_mode = True
        elif m := _LINK.match(line):
            result.link_type = result.link_type or m.group(1)
        elif m := _QPS.match(line):
            result.qps = result.qps or int(m.group(1))
        elif m := _MTU.match(line):
            result.mtu_bytes = result.mtu_bytes or int(m.group(1))
        if result.device is None and "Device" in line and (m := _DEVICE.search(line)):
            result.device = m.group(1)
    if banners == 0 and unit is None and not seen:
        raise NotToolOutput("not ib_write_bw output (no 'BW Test' banner or '#bytes #iterations' header)")
    result.units_in_log = unit
    result.role = "both" if banners > 1 else ("server" if waiting else "client")
    unique = list(dict.fromkeys(raw_rows))
    if len(unique) < len(raw_rows):
        result.note(f"{len(raw_rows) - len(unique)} repeated row(s) dropped (both ends print them)")
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
        if not closed:
            result.note("the last row is not followed by perftest's closing dashed line: run cut short?")
            verdict = worst("incomplete", verdict)
    else:
        result.note("no result rows: the test did not finish (or did not connect)")
        verdict = worst("incomplete", verdict)
    result.status = verdict
    return result
