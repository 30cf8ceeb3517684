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
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

from gpucluster.parsers.common import NotToolOutput, ParseResult, clean_lines, parse_int, parse_number

_RANK = re.compile(r"^#\s+Rank\s+\d+\b")
_VERSION = re.compile(r"^#\s*nccl-tests version (\S+)(?:.*nccl-library=(\d+))?")
_COLLECTIVE = re.compile(r"^#\s*Collective test starting:\s*(\S+)")
_BINARY = re.compile(r"\b([a-z_]+_perf)(?:_mpi)?\b")
_NCCL_VERSION = re.compile(r"NCCL version (\d+\.\d+\.\d+\S*)")
_OOB = re.compile(r"^#\s*Out of bounds values\s*:\s*(\d+)")
_AVG = re.compile(r"^#\s*Avg bus bandwidth\s*:\s*(\S+)")
_CONCLUDED = re.compile(r"^#\s*Collective test concluded")

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


def _wrong(token: str, legacy: bool) -> tuple[int | None, float | None]:
    """Return (wrong count, max delta) for one wrong-data cell."""
    if token == "N/A":
        return None, None
    if legacy:
        return None, parse_number(token)
    return parse_int(token), None


def _row(tokens: list[str], lay: _Layout) -> NcclRow | None:
    # Data rows have the header's column count; a timestamp column (-Z) may add more.
    if len(tokens) < lay.ncols or parse_int(tokens[0]) is None or parse_int(tokens[1]) is None:
        return None
    if not all(parse_number(tokens[i]) is not None for i in (lay.oop, lay.oop + 2, lay.ip, lay.ip + 2)):
        return None
    wrong_oop, delta_oop = _wrong(tokens[lay.oop + 3], lay.legacy)
    wrong_ip, delta_ip = _wrong(tokens[lay.ip + 3], lay.legacy)
    size, count = parse_int(tokens[0]), parse_int(tokens[1])
    assert size is not None and count is not None
    return NcclRow(
        size_bytes=size,
        count=count,
        type=tokens[2],
        redop=tokens[3],
        root=parse_int(tokens[lay.root]) if lay.root is not None else None,
        time_oop_us=parse_number(tokens[lay.oop]),
        algbw_oop_gbps=parse_number(tokens[lay.oop + 1]),
        busbw_oop_gbps=parse_number(tokens[lay.oop + 2]),
        wrong_oop=wrong_oop,
        time_ip_us=parse_number(tokens[lay.ip]),
        algbw_ip_gbps=parse_number(tokens[lay.ip + 1]),
        busbw_ip_gbps=parse_number(tokens[lay.ip + 2]),
        wrong_ip=wrong_ip,
        max_delta_oop=delta_oop,
        max_delta_ip=delta_ip,
    )


def _nccl_version_from_code(code: int) -> str:
    # NCCL_VERSION(X,Y,Z) is X*10000+Y*100+Z from 2.9 on, X*1000+Y*100+Z before.
    if code >= 10000:
        return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"
    return f"{code // 1000}.{code % 1000 // 100}.{code % 100}"


def _format_for(version: str | None, legacy: bool) -> str:
    if legacy:
        return "legacy"
    if version:
        parts = re.findall(r"\d+", version)
        if len(parts) >= 2 and (int(parts[0]), int(parts[1])) >= (2, 18):
            return "v2.18+"
    return "v2.13-2.17"


def _finish(result: NcclResult, footer_seen: bool) -> NcclResult:
    busbws = [bw for r in result.rows for bw in (r.busbw_oop_gbps, r.busbw_ip_gbps) if bw is not None]
    result.peak_busbw_gbps = max(busbws) if busbws else None
    wrong = [w for r in result.rows for w in (r.wrong_oop, r.wrong_ip) if w is not None]
    if any(w > 0 for w in wrong):
        result.notes.append(f"wrong data: up to {max(wrong)} wrong elements in one row")
    if result.out_of_bounds:
        result.notes.append(f"out of bounds values: {result.out_of_bounds}")
    if any(w > 0 for w in wrong) or (result.out_of_bounds or 0) > 0:
        result.status = "failed"
    elif not result.rows:
        result.notes.append("no result rows")
        result.status = "incomplete"
    elif not footer_seen:
        result.notes.append("no footer (no 'Out of bounds values'/'Avg bus bandwidth' lines): run cut short?")
        result.status = "incomplete"
    else:
        result.status = "ok"
    return result


def parse(text: str) -> NcclResult:
    """Parse nccl-tests text output (or its ``-J`` JSON file)."""
    if text.lstrip().startswith("{"):
        return parse_json(text)
    result = NcclResult()
    lay: _Layout | None = None
    ranks = 0
    footer_seen = False
    binary: str | None = None
    for line in clean_lines(text):
        if not line:
            continue
        if _RANK.match(line):
            ranks += 1
            continue
        if m := _VERSION.match(line):
            result.nccl_tests_version = m.group(1)
            if m.group(2) and result.nccl_version is None:
                result.nccl_version = _nccl_version_from_code(int(m.group(2)))
            continue
        if m := _COLLECTIVE.match(line):
            result.collective = m.group(1)
            continue
        if m := _OOB.match(line):
            result.out_of_bounds = int(m.group(1))
            footer_seen = True
            continue
        if m := _AVG.match(line):
            result.avg_busbw_gbps = parse_number(m.group(1))
            footer_seen = True
            continue
        if _CONCLUDED.match(line):
            continue
        if line in ("...", "[...]", "\u2026"):
            if not any(n.startswith("elided") for n in result.notes):
                result.notes.append("elided lines ('...'): rows are missing from this log")
            continue
        if line.startswith("#"):
            new = _layout(line)
            if new is not None:
                lay = new
            continue
        if m := _NCCL_VERSION.search(line):
            # "NCCL version 2.27.3+cuda12.9" (rank 0's banner) is more exact than the header code.
            result.nccl_version = m.group(1)
            continue
        if lay is not None:
            row = _row(line.split(), lay)
            if row is not None:
                result.rows.append(row)
                continue
        if binary is None and (m := _BINARY.search(line)):
            binary = m.group(1)
    if lay is None:
        raise NotToolOutput("not nccl-tests output (no '#  Rank'/size table found)")
    result.ranks = ranks or None
    if not ranks:
        result.notes.append("no '#  Rank' device lines: rank count unknown")
    result.collective = result.collective or binary
    result.format = _format_for(result.nccl_tests_version, lay.legacy)
    return _finish(result, footer_seen)


def _side(obj: Any) -> tuple[float | None, float | None, float | None, int | None]:
    if not isinstance(obj, dict):
        return None, None, None, None

    def num(key: str) -> float | None:
        value = obj.get(key)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    time = num("time") if "time" in obj else num("cpu_time")
    wrong = num("nwrong")
    return time, num("alg_bw"), num("bus_bw"), int(wrong) if wrong is not None else None


def _find_key(obj: Any, key: str) -> Any:
    """Depth-first search for ``key``: the nesting of -J files is not documented."""
    if isinstance(obj, dict):
        if key in obj:
            return obj[key]
        for value in obj.values():
            found = _find_key(value, key)
            if found is not None:
                return found
    elif isinstance(obj, list):
        for value in obj:
            found = _find_key(value, key)
            if found is not None:
                return found
    return None


def parse_json(text: str) -> NcclResult:
    """Parse the JSON file nccl-tests writes with ``-J FILE``.

    The schema is read from nccl-tests' ``src/util.cu`` (``jsonOutputInit``,
    ``writeBenchmarkLine*``, ``writeResultFooter``), not from a published specification or a
    real file: a top-level object with ``nccl_version`` (an NCCL_VERSION code), ``config``
    (with ``devices``), a ``results`` list of ``{size, count, type, redop, root,
    out_of_place: {time|cpu_time, alg_bw, bus_bw, nwrong}, in_place: {...}}`` and the footer
    objects ``out_of_bounds: {count, okay}`` and ``average_bus_bandwidth: {bandwidth, okay}``.
    Keys are searched for wherever they sit, and missing ones read as null.
    """
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise NotToolOutput(f"not nccl-tests JSON output ({exc.msg} at line {exc.lineno})") from exc
    results = _find_key(doc, "results")
    if not isinstance(doc, dict) or not isinstance(results, list):
        raise NotToolOutput("not nccl-tests JSON output (no 'results' list)")
    result = NcclResult(format="json")
    code = doc.get("nccl_version")
    if isinstance(code, int):
        result.nccl_version = _nccl_version_from_code(code)
    devices = _find_key(doc, "devices")
    result.ranks = len(devices) if isinstance(devices, list) and devices else None
    for entry in results:
        if not isinstance(entry, dict):
            continue
        size, count = entry.get("size"), entry.get("count")
        if not isinstance(size, int) or not isinstance(count, int):
            continue
        t_o, a_o, b_o, w_o = _side(entry.get("out_of_place"))
        t_i, a_i, b_i, w_i = _side(entry.get("in_place"))
        root = parse_int(str(entry.get("root", "")))
        result.rows.append(
            NcclRow(
                size,
                count,
                str(entry.get("type", "")),
                str(entry.get("redop", "")),
                root,
                t_o,
                a_o,
                b_o,
                w_o,
                t_i,
                a_i,
                b_i,
                w_i,
            )
        )
    oob = _find_key(doc, "out_of_bounds")
    avg = _find_key(doc, "average_bus_bandwidth")
    footer_seen = isinstance(oob, dict) or isinstance(avg, dict)
    if isinstance(oob, dict) and isinstance(oob.get("count"), int):
        result.out_of_bounds = oob["count"]
    if isinstance(avg, dict) and isinstance(avg.get("bandwidth"), int | float):
        result.avg_busbw_gbps = float(avg["bandwidth"])
    args = doc.get("args")
    if isinstance(args, list) and args and isinstance(args[0], str) and (m := _BINARY.search(args[0])):
        result.collective = m.group(1)
    return _finish(result, footer_seen)
