"""Parser for nccl-tests output (``all_reduce_perf`` and the other ``*_perf`` binaries).

Text formats, told apart by the table header (``format`` in the result):

``legacy``
    nccl-tests before about 2.11: the wrong-data column is called ``error`` and holds the
    float *max delta* of a validated run (``1e-07``), or ``N/A`` with ``-c 0``. It is not a
    count, so it goes to ``max_delta_oop``/``max_delta_ip`` and ``wrong_*`` stay null.
``v2.13-2.17``
    The ``#wrong`` count column and a ``root`` column, ``#  Rank .. Group ..`` device lines.
    A table without a ``# nccl-tests version`` line lands here; 2.11-2.12 print the same
    columns and cannot be told apart from the table alone.
``v2.18+``
    Chosen only from the ``# nccl-tests version X.Y.Z`` header line (2.17.9 already prints
    it, so a version line below 2.18 keeps ``v2.13-2.17``). The table itself did not change.
``json``
    The file ``-J`` writes (see :func:`parse_json`).

Wrong counts are printed with ``%g``, so large ones read ``1.04858e+06``.

Verdict. ``failed`` when any row has wrong elements (or a wrong-data cell that is not a
count: ``nan``, ``inf``, negative, not a number; a legacy max delta likewise), when an
``Out of bounds values`` line is non-zero or says ``FAILED``, when ``Avg bus bandwidth`` says
``FAILED`` (``NCCL_TESTS_MIN_BW``), or when the test or its launcher reports a failure
(``Test NCCL failure``, ``Test CUDA failure``, `` .. Test failure``, ``Test timeout``,
``MPI_ABORT``, a rank killed by a signal): whatever good rows came before. ``incomplete`` when
there are no rows, a row-shaped line cannot be read, or a run's closing lines are missing.
A run closes with ``# Out of bounds values``, ``# Avg bus bandwidth`` and, from 2.17 on
(whose header says ``# Collective test starting``), ``# Collective test concluded``. Published
excerpts that hold only the table (no footer) are therefore ``incomplete``, with a note that
the footer is missing: a table without its footer cannot show that the run finished.
A log holding several runs (each starting at a ``# nThread``/version/starting line, or at a
new table header after rows) is judged run by run and the worst verdict is kept; rows of
every run are listed, ``out_of_bounds`` is the largest count, ``avg_busbw_gbps`` the lowest.
``NCCL WARN`` lines and the ``# error:`` line (NCCL's last warning) are noted, not judged:
healthy runs print them too (``Missing "iommu=pt"``, a plugin not found). A warning that names
a transport or device fault (``Got completion from peer ... with error``, ``Cuda failure``,
``unhandled system error``, ``remote process exited``, ``Call to ibv_... failed``, an abort,
a timeout) is ``failed``, as is an ``NCCL ABORT``/``NCCL ERROR`` line: NCCL may still print
good-looking rows for sizes that ran before the fault. A crash (a signal death, a failed
assertion, Open MPI's or UCX's crash handler: :func:`~gpucluster.parsers.common.crash`) is
``failed`` too.

A run that failed before printing its table (NCCL could not initialise, a rank died at start-up)
is still nccl-tests output when it holds a line only nccl-tests or NCCL prints (its header,
``#  Rank`` lines, ``NCCL INFO``/``NCCL WARN`` lines, ``Test NCCL failure``, the ``*_perf``
binary's name): ``failed`` with its error lines as the reasons, else ``incomplete``; only text
with none of them is not nccl-tests output. NCCL reports its network plugin at INFO level and
falls back to its own transports, so healthy runs print "Failed to find ncclNetPlugin_v8
symbol" and "No plugin found" (NVIDIA/nccl#1292: "not indicative of a failure"): plugin lines
never fail a run that printed its table. In a run that stopped before it, a plugin NCCL found
and could not use (``NET/Plugin: Failed to find ncclNetPlugin symbol``, ``Failed to open
libnccl-net...``, a load that failed for another reason than a missing file) is noted beside the
failure, or is the failure when the run reported nothing else.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any

from gpucluster.parsers.common import (
    NotToolOutput,
    ParseResult,
    Status,
    clean_lines,
    crash,
    parse_count,
    parse_int,
    parse_number,
    worst,
)

_RANK = re.compile(r"#\s+Rank\s+\d+\b")
_VERSION = re.compile(r"#\s*nccl-tests version (\S+)(?:.*nccl-library=(\d{1,9}))?")
_COLLECTIVE = re.compile(r"#\s*Collective test starting:\s*(\S+)")
_CONCLUDED = re.compile(r"#\s*Collective test concluded")
_NTHREAD = re.compile(r"#\s*nThread\s")
# The look-behind keeps an unanchored search from re-scanning a run of word characters.
_BINARY = re.compile(r"(?<![a-z_])([a-z_]+_perf)(?:_mpi)?\b")
_NCCL_VERSION = re.compile(r"NCCL version (\d{1,4}\.\d{1,4}\.\d{1,4}\S*)")
_OOB = re.compile(r"#\s*Out of bounds values\s*:\s*(\S*)\s*(\S*)")
_AVG = re.compile(r"#\s*Avg bus bandwidth\s*:\s*(\S*)\s*(\S*)")
_NCCL_ERROR = re.compile(r"#\s*error:\s*(.*)")
# nccl-tests' CUDACHECK/NCCLCHECK/TESTCHECK macros and its timeout, then launcher aborts.
_TEST_FAILURE = r"Test (?:NCCL |CUDA )?failure\b|\bTest timeout\b"
_FAILURE = re.compile(
    _TEST_FAILURE + r"|MPI_ABORT was invoked|exited on signal \d"
    # Open MPI splits "1 process returned / a non-zero exit code" over two lines; its other wordings.
    r"|returned a non-zero exit code|\b\d{1,9} process(?:es)? returned\b|exited with non-zero status"
    r"|task \d{1,9}: (?:Exited with exit code [1-9]|Killed|Aborted|Segmentation)"
)


# NCCL WARN messages that report a fault, not a preference (nccl src: transport/net_ib.cc,
# include/checks.h, misc/socket.cc, proxy.cc). Matched after "NCCL WARN"; bounded, no nesting.
_NCCL_WARN_FAULT = re.compile(
    r"Got completion (?:from peer|with error)|Cuda failure|CUDA failure|unhandled (?:cuda|system|internal) error"
    r"|remote process exited|network error|Call to \w{1,60} failed|[Aa]bort|[Tt]imed? ?out"
    r"|Connection (?:closed|reset|refused)"
    r"|[Ff]ailed with error|IB (?:async )?event|Error(?: :|:| while)"
)
_NCCL_FATAL = re.compile(r"\bNCCL (?:ABORT|ERROR)\b")
# A network plugin NCCL found and could not use, or could not open (nccl src/plugin/net.cc and
# plugin_open.cc, INFO level). "Failed to find ncclNetPlugin_v8 symbol." is a probe that the next
# version answers, and "No plugin found"/"Could not find: libnccl-net.so" the ordinary case of no
# plugin installed: neither matches.
_PLUGIN_FAILED = re.compile(
    r"NET/Plugin ?: ?(?:Failed to find ncclNetPlugin symbol|Failed to open|Failed to load)|Failed to open libnccl-net"
    # aws-ofi-nccl's own warnings when it cannot start (aws/aws-ofi-nccl#1020: "NET/OFI OFI fi_getinfo() call
    # failed: No data available"): NCCL then falls back to its sockets.
    r"|NET/OFI\b.{0,300}?(?:\bfailed\b|Couldn't|\bERROR\b)"
)
_PLUGIN_LOAD = re.compile(r"NET/Plugin ?: ?Plugin load (?:\(\S{1,200}\) )?returned \d{1,9} ?: ?(.*)")


def _maybe_failure(line: str) -> bool:
    # Substring tests first: _FAILURE.search costs ten times more and runs on every row otherwise.
    return (
        "failure" in line or "timeout" in line or "MPI_ABORT" in line or "signal" in line
        or "non-zero" in line or "task " in line or "returned" in line
    )  # fmt: skip

# (n-1)/n for collectives where each rank's share crosses the bus once, 2(n-1)/n for
# all-reduce (reduce-scatter then all-gather), 1 for rooted and point-to-point operations.
_FACTOR_KIND = {
    "all_reduce": "twice",
    "reduce_scatter": "once",
    "all_gather": "once",
    "alltoall": "once",
    "broadcast": "one",
    "reduce": "one",
    "sendrecv": "one",
}


def busbw_factor(collective: str, nranks: int) -> float:
    """Bus bandwidth = algorithm bandwidth x this factor, as nccl-tests computes it.

    ``collective`` may be ``all_reduce``, ``all_reduce_perf`` or ``allreduce``.
    """
    if nranks < 1:
        raise ValueError(f"nranks must be >= 1, got {nranks}")
    key = collective.removesuffix("_mpi").removesuffix("_perf").lower()
    aliases = {
        "allreduce": "all_reduce",
        "reducescatter": "reduce_scatter",
        "allgather": "all_gather",
        "all_to_all": "alltoall",
        "send_recv": "sendrecv",
    }
    key = aliases.get(key, key)
    kind = _FACTOR_KIND.get(key)
    if kind is None:
        raise ValueError(f"unknown collective {collective!r}; known: {', '.join(sorted(_FACTOR_KIND))}")
    if kind == "one":
        return 1.0
    share = (nranks - 1) / nranks
    return 2.0 * share if kind == "twice" else share


@dataclass
class NcclRow:
    size_bytes: int
    count: int
    type: str
    redop: str
    root: int | None
    time_oop_us: float | None
    algbw_oop_gbps: float | None
    busbw_oop_gbps: float | None
    wrong_oop: int | None
    time_ip_us: float | None
    algbw_ip_gbps: float | None
    busbw_ip_gbps: float | None
    wrong_ip: int | None
    max_delta_oop: float | None = None
    max_delta_ip: float | None = None


@dataclass
class NcclResult(ParseResult):
    format: str | None = None
    collective: str | None = None
    nccl_version: str | None = None
    nccl_tests_version: str | None = None
    ranks: int | None = None
    rows: list[NcclRow] = field(default_factory=list)
    peak_busbw_gbps: float | None = None
    avg_busbw_gbps: float | None = None
    out_of_bounds: int | None = None


@dataclass
class _Layout:
    """Column positions of one header: indices into a data row's whitespace tokens."""

    ncols: int
    root: int | None
    oop: int  # index of the out-of-place time column
    ip: int
    legacy: bool

    @property
    def cells(self) -> tuple[int, ...]:
        """Token indices of time, algbw, busbw out-of-place then in-place."""
        return (self.oop, self.oop + 1, self.oop + 2, self.ip, self.ip + 1, self.ip + 2)


def _layout(header: str) -> _Layout | None:
    tokens = header.lstrip("#").split()
    if len(tokens) < 4 or tokens[0] != "size" or tokens[1] != "count":
        return None
    times = [i for i, t in enumerate(tokens) if t in ("time", "cputime")]
    if len(times) != 2:
        return None
    oop, ip = times
    wrong_names = {
        tokens[oop + 3] if oop + 3 < len(tokens) else "",
        tokens[ip + 3] if ip + 3 < len(tokens) else "",
    }
    if not wrong_names <= {"#wrong", "error"}:
        return None
    return _Layout(
        ncols=len(tokens),
        root=tokens.index("root") if "root" in tokens else None,
        oop=oop,
        ip=ip,
        legacy="error" in wrong_names,
    )


def _wrong(token: str, legacy: bool) -> tuple[int | None, float | None, bool]:
    """Return (wrong count, max delta, readable) for one wrong-data cell.

    ``N/A`` (validation off) is readable and says nothing. A count is ``%g`` of a non-negative
    integer; a legacy max delta a non-negative finite float. Anything else (``nan``, ``inf``,
    ``-3``, ``x``) is unreadable: the check itself went wrong.
    """
    if token == "N/A":
        return None, None, True
    if token == "0":  # by far the most common cell
        return (None, 0.0, True) if legacy else (0, None, True)
    value = parse_number(token)
    if value is None or value < 0:
        return None, None, False
    if legacy:
        return None, value, True
    count = parse_count(token)
    if count is not None:
        return count, None, True
    # `%g` of a large count (1.04858e+06) is whole; a fraction (0.4, 1e-09) is no count at all.
    return (int(value), None, True) if value.is_integer() else (None, None, False)


def _row(tokens: list[str], lay: _Layout) -> tuple[NcclRow | None, bool]:
    """(row, wrong cells readable); (None, _) when ``tokens`` is not a complete data row."""
    # Data rows have the header's column count; a timestamp column (-Z) may add more.
    if len(tokens) < lay.ncols:
        return None, True
    size, count = parse_count(tokens[0]), parse_count(tokens[1])
    if size is None or count is None:
        return None, True
    cells = [parse_number(tokens[i]) for i in lay.cells]
    numbers = [n for n in cells if n is not None and n >= 0]
    if len(numbers) != len(cells):
        return None, True
    wrong_oop, delta_oop, ok_oop = _wrong(tokens[lay.oop + 3], lay.legacy)
    wrong_ip, delta_ip, ok_ip = _wrong(tokens[lay.ip + 3], lay.legacy)
    row = NcclRow(
        size_bytes=size,
        count=count,
        type=tokens[2],
        redop=tokens[3],
        root=parse_int(tokens[lay.root]) if lay.root is not None and lay.root < len(tokens) else None,
        time_oop_us=numbers[0],
        algbw_oop_gbps=numbers[1],
        busbw_oop_gbps=numbers[2],
        wrong_oop=wrong_oop,
        time_ip_us=numbers[3],
        algbw_ip_gbps=numbers[4],
        busbw_ip_gbps=numbers[5],
        wrong_ip=wrong_ip,
        max_delta_oop=delta_oop,
        max_delta_ip=delta_ip,
    )
    return row, ok_oop and ok_ip


def _nccl_version_from_code(code: int) -> str:
    # NCCL_VERSION(X,Y,Z) is X*10000+Y*100+Z from 2.9 on, X*1000+Y*100+Z before.
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def _format_for(version: str | None, legacy: bool) -> str:
    if legacy:
        return "legacy"
    if version:
        parts = re.findall(r"\d{1,9}", version[:40])
        if len(parts) >= 2 and (int(parts[0]), int(parts[1])) >= (2, 18):
            return "v2.18+"
    return "v2.13-2.17"


@dataclass
class _Run:
    """What one run of the log has shown so far: a log may hold several, one after the other."""

    rows: int = 0
    ranks: int = 0
    started: bool = False  # a run header was seen: a run that then prints no rows was cut short
    starting: bool = False  # "# Collective test starting" (2.17+): then "concluded" must close it
    concluded: bool = False
    oob_seen: bool = False
    avg_seen: bool = False

    def closed(self) -> bool:
        return self.oob_seen and self.avg_seen and (self.concluded or not self.starting)

    def missing(self) -> str:
        if not (self.oob_seen or self.avg_seen):
            return "no footer ('# Out of bounds values'/'# Avg bus bandwidth' lines): run cut short?"
        if not self.avg_seen:
            return "footer cut short: no '# Avg bus bandwidth' line"
        if not self.oob_seen:
            return "footer cut short: no '# Out of bounds values' line"
        return "no '# Collective test concluded' line after the footer: run cut short?"


def _finish(result: NcclResult, verdict: Status) -> NcclResult:
    busbws = [bw for r in result.rows for bw in (r.busbw_oop_gbps, r.busbw_ip_gbps) if bw is not None]
    result.peak_busbw_gbps = max(busbws) if busbws else None
    wrong = [w for r in result.rows for w in (r.wrong_oop, r.wrong_ip) if w is not None]
    status: Status = "failed" if verdict == "failed" else "ok"
    if any(w > 0 for w in wrong):
        result.note(f"wrong data: up to {max(wrong)} wrong elements in one row")
        status = "failed"
    if result.out_of_bounds:
        result.note(f"out of bounds values: {result.out_of_bounds}")
        status = "failed"
    if not result.rows:
        result.note("no result rows")
        status = worst("incomplete", status)
    elif verdict == "incomplete":
        status = worst("incomplete", status)
    result.status = status
    return result


def _before_table(result: NcclResult, verdict: Status, ranks: int, binary: str | None,
                  plugin: list[str]) -> NcclResult:
    """The verdict on a run that stopped before its result table: ``failed`` with the tool's own error
    lines as the reasons (already noted, in the log's order), else ``incomplete``."""
    result.ranks = ranks or None
    result.collective = result.collective or binary
    if plugin and verdict == "failed":
        result.note(f"NCCL could not use its network plugin (noted beside the failure): {plugin[0]}")
    elif plugin:
        # Nothing else went wrong, and the run went no further: the plugin is the reason it gives.
        result.note(f"NCCL could not use its network plugin: {plugin[0]}")
        verdict = "failed"
    result.note("no result table: the run stopped before its first size")
    result.status = "failed" if verdict == "failed" else "incomplete"
    return result


def _plugin_failure(line: str) -> str | None:
    """The message of a line saying NCCL could not use a network plugin it found; None otherwise."""
    if "Plugin" not in line and "NET/OFI" not in line:
        return None
    if m := _PLUGIN_FAILED.search(line[:1000]):
        return line[m.start() :][:200]
    if (m := _PLUGIN_LOAD.search(line[:1000])) and "No such file or directory" not in m.group(1):
        return line[m.start() :][:200]  # the library is there but does not load (a missing symbol, the wrong ABI)
    return None


def parse(text: str) -> NcclResult:
    """Parse nccl-tests text output (or its ``-J`` JSON file)."""
    if text.lstrip()[:1] == "{":
        return parse_json(text)
    result = NcclResult()
    lay: _Layout | None = None
    run = _Run()
    verdict: Status = "ok"  # worst of what the lines themselves say; the rows are judged in _finish
    ranks = 0
    binary: str | None = None
    avgs: list[float] = []
    seen = False  # a line only nccl-tests or NCCL prints: a run that stopped before its table is still one
    plugin: list[str] = []

    def close_run() -> None:
        nonlocal run, verdict, ranks
        if (run.rows or run.started) and not run.closed():
            result.note(run.missing())
            verdict = worst("incomplete", verdict)
        ranks = max(ranks, run.ranks)
        run = _Run()

    def failed(note: str) -> None:
        nonlocal verdict
        result.note(note)
        verdict = "failed"

    for line in clean_lines(text):
        if not line:
            continue
        if _maybe_failure(line) and (fm := _FAILURE.search(line)):
            failed(f"the test reported a failure: {line[max(0, fm.start() - 60) : fm.end() + 120].strip()}")
            seen = seen or fm.group(0).startswith("Test")
            continue
        if line[0] == "#":
            if _RANK.match(line):
                run.ranks += 1
                seen = True
            elif m := _VERSION.match(line):
                if run.rows:
                    close_run()
                result.nccl_tests_version = m.group(1)
                if m.group(2) and result.nccl_version is None:
                    result.nccl_version = _nccl_version_from_code(int(m.group(2)))
            elif m := _COLLECTIVE.match(line):
                if run.rows:
                    close_run()
                run.starting = True
                result.collective = m.group(1)
                seen = True
            elif _NTHREAD.match(line):
                if run.rows:
                    close_run()
                run.started = True
                seen = True
            elif m := _OOB.match(line):
                run.oob_seen = True
                count = parse_count(m.group(1))
                if count is None:
                    failed(f"out-of-bounds count is not a count: {m.group(1)[:40]!r}")
                else:
                    result.out_of_bounds = max(result.out_of_bounds or 0, count)
                if m.group(2).upper() == "FAILED":
                    failed("'Out of bounds values' says FAILED")
            elif m := _AVG.match(line):
                run.avg_seen = True
                avg = parse_number(m.group(1))
                if avg is None or avg < 0:
                    result.note(f"average bus bandwidth is not a number: {m.group(1)[:40]!r}")
                    if run.rows:
                        verdict = worst("incomplete", verdict)
                else:
                    avgs.append(avg)
                if m.group(2).upper() == "FAILED":
                    failed("'Avg bus bandwidth' says FAILED (below NCCL_TESTS_MIN_BW)")
            elif _CONCLUDED.match(line):
                run.concluded = True
            elif m := _NCCL_ERROR.match(line):
                result.note(f"NCCL's last error (noted, not judged): {m.group(1)[:200]}")
            elif (new := _layout(line)) is not None:
                if run.rows:
                    close_run()
                lay = new
            continue
        if line in ("...", "[...]", "\u2026"):
            result.note("elided lines ('...'): rows are missing from this log")
            continue
        if "WARN" in line and (at := line.find("NCCL WARN")) >= 0:
            seen = True
            message = line[at + 9 :]
            if _NCCL_WARN_FAULT.search(message[:500]):
                failed(f"NCCL reported a fault: {message.strip()[:200]}")
            else:
                if (problem := _plugin_failure(line)) is not None:
                    plugin.append(problem)
                result.note("NCCL WARN lines in the log (noted, not judged)")
            continue
        if ("ABORT" in line or "ERROR" in line) and _NCCL_FATAL.search(line[:2000]):
            failed(f"NCCL reported a fatal error: {line.strip()[:200]}")
            seen = True
            continue
        if "NCCL INFO" in line:
            seen = True
            if (found := _plugin_failure(line)) is not None:
                plugin.append(found)
        if "NCCL version" in line and (m := _NCCL_VERSION.search(line)):
            # "NCCL version 2.27.3+cuda12.9" (rank 0's banner) is more exact than the header code.
            result.nccl_version = m.group(1)
            seen = True
            continue
        if lay is not None:
            tokens = line.split()
            row, readable = _row(tokens, lay)
            if row is not None:
                result.rows.append(row)
                run.rows += 1
                if not readable:
                    failed(f"wrong-data cell that is not a count in the {row.size_bytes} B row")
                continue
            if len(tokens) >= 3 and parse_count(tokens[0]) is not None and parse_count(tokens[1]) is not None \
                    and tokens[2].isalpha():
                result.note(f"unreadable result row: {line[:120]}")
                run.rows += 1
                verdict = worst("incomplete", verdict)
                continue
        if crash(line):
            failed(f"the test crashed: {line[:200]}")
        if binary is None and "_perf" in line and (m := _BINARY.search(line)):
            binary = m.group(1)
    if lay is None:
        if not seen and binary is None:
            raise NotToolOutput("not nccl-tests output (no '#  Rank'/size table found)")
        return _before_table(result, verdict, max(ranks, run.ranks), binary, plugin)
    close_run()
    result.ranks = ranks or None
    if not ranks:
        result.note("no '#  Rank' device lines: rank count unknown")
    result.avg_busbw_gbps = min(avgs) if avgs else None
    result.collective = result.collective or binary
    result.format = _format_for(result.nccl_tests_version, lay.legacy)
    return _finish(result, verdict)


def _side(obj: Any) -> tuple[float | None, float | None, float | None, int | None, bool]:
    """(time, algbw, busbw, wrong count, readable) of one side of a -J result entry."""
    if not isinstance(obj, dict):
        return None, None, None, None, True

    def num(key: str) -> float | None:
        return _finite(obj.get(key))

    time = num("time") if "time" in obj else num("cpu_time")
    # nwrong is null with validation off; the writer prints "nan" (a string) for NaN.
    nwrong = obj.get("nwrong")
    wrong = num("nwrong")
    readable = nwrong is None or (wrong is not None and wrong >= 0)
    return time, num("alg_bw"), num("bus_bw"), round(wrong) if wrong is not None and readable else None, readable


def _finite(value: Any) -> float | None:
    """A JSON number as a finite float; None for anything else (NaN, Infinity, 10**400, text)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def _find_key(obj: Any, key: str) -> Any:
    """Breadth-first search for ``key`` (without recursion): the nesting of -J files is not documented."""
    queue: list[Any] = [obj]
    while queue:
        nxt: list[Any] = []
        for item in queue:
            if isinstance(item, dict):
                if item.get(key) is not None:
                    return item[key]
                nxt.extend(v for v in item.values() if isinstance(v, dict | list))
            elif isinstance(item, list):
                nxt.extend(v for v in item if isinstance(v, dict | list))
        queue = nxt
    return None


def parse_json(text: str) -> NcclResult:
    """Parse the JSON file nccl-tests writes with ``-J FILE``.

    The schema is read from nccl-tests' ``src/util.cu`` (``jsonOutputInit``,
    ``writeBenchmarkLine*``, ``writeResultFooter``), not from a published specification or a
    real file: a top-level object with ``nccl_version`` (an NCCL_VERSION code), ``config``
    (with ``devices``), a ``results`` list of ``{size, count, type, redop, root,
    out_of_place: {time|cpu_time, alg_bw, bus_bw, nwrong}, in_place: {...}}`` and the footer
    objects ``out_of_bounds: {count, okay}`` and ``average_bus_bandwidth: {bandwidth, okay}``.
    Keys are searched for wherever they sit, and missing ones read as null. A file without
    the footer objects (the run did not finish) is ``incomplete``; ``okay: false`` in either
    footer object, or an ``nwrong`` that is not a non-negative number, is ``failed``.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotToolOutput(f"not nccl-tests JSON output ({exc.msg} at line {exc.lineno})") from exc
    except (RecursionError, ValueError) as exc:
        raise NotToolOutput(f"not nccl-tests JSON output ({type(exc).__name__})") from exc
    results = _find_key(doc, "results") if isinstance(doc, dict) else None
    if not isinstance(results, list):
        raise NotToolOutput("not nccl-tests JSON output (no 'results' list)")
    result = NcclResult(format="json")
    verdict: Status = "ok"
    code = doc.get("nccl_version")
    if isinstance(code, int) and not isinstance(code, bool) and 0 < code < 10**7:
        result.nccl_version = _nccl_version_from_code(code)
    devices = _find_key(doc, "devices")
    result.ranks = len(devices) if isinstance(devices, list) and devices else None
    for entry in results:
        if not isinstance(entry, dict):
            continue
        size, count = entry.get("size"), entry.get("count")
        if not isinstance(size, int) or not isinstance(count, int) or size < 0 or count < 0:
            result.note("result entry without a size/count skipped")
            verdict = worst("incomplete", verdict)
            continue
        t_o, a_o, b_o, w_o, ok_o = _side(entry.get("out_of_place"))
        t_i, a_i, b_i, w_i, ok_i = _side(entry.get("in_place"))
        if not (ok_o and ok_i):
            result.note(f"wrong-data count that is not a count in the {size} B entry")
            verdict = "failed"
        root = parse_int(str(entry.get("root", ""))[:40])
        result.rows.append(
            NcclRow(size, count, str(entry.get("type", "")), str(entry.get("redop", "")), root,
                    t_o, a_o, b_o, w_o, t_i, a_i, b_i, w_i)
        )  # fmt: skip
    oob = _find_key(doc, "out_of_bounds")
    avg = _find_key(doc, "average_bus_bandwidth")
    if not (isinstance(oob, dict) and isinstance(avg, dict)):
        result.note("no footer ('out_of_bounds'/'average_bus_bandwidth' objects): run cut short?")
        verdict = worst("incomplete", verdict)
    if isinstance(oob, dict):
        n = oob.get("count")
        if isinstance(n, int) and not isinstance(n, bool) and n >= 0:
            result.out_of_bounds = n
        else:
            result.note(f"out-of-bounds count is not a count: {str(n)[:40]!r}")
            verdict = "failed"
        if oob.get("okay") is False:
            result.note("'out_of_bounds' says not okay")
            verdict = "failed"
    if isinstance(avg, dict):
        result.avg_busbw_gbps = _finite(avg.get("bandwidth"))
        if avg.get("okay") is False:
            result.note("'average_bus_bandwidth' says not okay (below NCCL_TESTS_MIN_BW)")
            verdict = "failed"
    errors = doc.get("errors")
    if isinstance(errors, list) and any(isinstance(e, str) and e for e in errors):
        result.note(f"NCCL's last error (noted, not judged): {str(errors[0])[:200]}")
    args = doc.get("args")
    if isinstance(args, list) and args and isinstance(args[0], str) and (m := _BINARY.search(args[0][:1000])):
        result.collective = m.group(1)
    return _finish(result, verdict)
