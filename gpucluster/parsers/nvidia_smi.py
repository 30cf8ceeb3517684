"""Parser for nvidia-smi output in its five common shapes (``kind`` in the result):

``query``
    ``nvidia-smi -q`` (also with ``-d SECTION``): indented ``Key : value`` blocks per
    ``GPU <bus id>``. GPUs get ``index`` in the order printed, which is nvidia-smi's index
    order. ECC uncorrectable totals sum every numeric ``... Uncorrectable ...`` counter of
    the Volatile/Aggregate block (driver 535+: ``SRAM Uncorrectable``, ``DRAM
    Uncorrectable``; 590+: ``SRAM Uncorrectable Parity``/``SEC-DED``), or the ``Double
    Bit > Total`` of older drivers.
``csv``
    ``--query-gpu=... --format=csv``: one dict per row keyed by the header's field names
    with the unit dropped (``memory.total [MiB]`` -> ``memory.total``); the unit is also
    dropped from the value, numbers become numbers (hex bitmasks stay strings) and
    ``[N/A]``, ``N/A``, ``[Not Supported]`` and ``[Requested functionality has been
    deprecated]`` become null.
``nvlink``
    ``nvidia-smi nvlink -s``: per GPU, each link's speed in GB/s or ``<inactive>``.
``topo``
    ``nvidia-smi topo -m``: the matrix (terminal underline escapes removed), legend skipped.
``table``
    The default table: name, persistence, bus id, ECC, temperature, power, memory, MIG mode.

``status`` is ``failed`` when a GPU reports uncorrectable ECC errors (volatile or
aggregate), a pending page retirement or row remap, or a row-remapping failure.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from typing import Any

from gpucluster.parsers.common import NotToolOutput, ParseResult, clean_lines, parse_number

_NVSMI_LOG = "==============NVSMI LOG=============="
_GPU_BLOCK = re.compile(r"^GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])$")
_KV = re.compile(r"^(.*?\S)\s+:(?:\s(.*))?$")
_NVLINK_GPU = re.compile(r"^GPU (\d+): (.+?) \(UUID: ([^)]+)\)$")
_NVLINK_LINK = re.compile(r"^Link (\d+): (.*)$")
_TABLE_BANNER = re.compile(r"NVIDIA-SMI (\S+)\s+Driver Version: (\S+)(?:\s+CUDA Version: (\S+))?")
_NULLS = {
    "[N/A]",
    "N/A",
    "[Not Supported]",
    "Not Supported",
    "[Requested functionality has been deprecated]",
    "Requested functionality has been deprecated",
    "[Unknown Error]",
    "",
}
_CSV_FIELD = re.compile(r"^[a-z][A-Za-z0-9_.]*(?: \[[^\]]+\])?$")


@dataclass
class NvidiaSmiResult(ParseResult):
    kind: str | None = None  # "query" | "csv" | "nvlink" | "topo" | "table"
    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)
    matrix: dict[str, dict[str, str]] | None = None  # topo only


def _null(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return None if value in _NULLS else value


def _num(value: str | None) -> float | None:
    """First number in ``value`` ("81559 MiB" -> 81559.0, "16x" -> 16.0)."""
    value = _null(value)
    if value is None:
        return None
    m = re.match(r"^-?\d+(?:\.\d+)?", value)
    return float(m.group(0)) if m else None


def _int(value: str | None) -> int | None:
    n = _num(value)
    return int(n) if n is not None else None


def _yes(value: str | None) -> bool | None:
    value = _null(value)
    if value is None:
        return None
    return value.lower() in ("yes", "true", "active", "enabled")


# ---- -q ---------------------------------------------------------------------------------


Tree = dict[str, Any]


def _tree(lines: list[str]) -> Tree:
    """Nest ``Key : value`` lines by indentation; a line without a value opens a section."""
    root: Tree = {}
    stack: list[tuple[int, Tree]] = [(-1, root)]
    for line in lines:
        if not line.strip() or line.startswith("====="):
            continue
        indent = len(line) - len(line.lstrip(" "))
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        m = _KV.match(line.strip())
        key = m.group(1) if m else line.strip()
        unique, n = key, 2
        while unique in parent:  # repeated keys (per-process blocks) stay apart
            unique, n = f"{key} #{n}", n + 1
        if m:
            parent[unique] = (m.group(2) or "").strip()
        else:
            child: Tree = {}
            parent[unique] = child
            stack.append((indent, child))
    return root


def _get(tree: Any, *path: str) -> Any:
    for key in path:
        if not isinstance(tree, dict) or key not in tree:
            return None
        tree = tree[key]
    return tree


def _first(tree: Any, *paths: tuple[str, ...]) -> str | None:
    for path in paths:
        value = _get(tree, *path)
        if isinstance(value, str):
            return value
    return None


def _uncorrectable(block: Any) -> int | None:
    if not isinstance(block, dict):
        return None
    total = _get(block, "Double Bit", "Total")
    if isinstance(total, str):
        return _int(total)
    counts = [_int(v) for k, v in block.items() if isinstance(v, str) and "Uncorrectable" in k]
    numbers = [c for c in counts if c is not None]
    return sum(numbers) if numbers else None


def _active_reasons(block: Any, prefix: str = "") -> list[str]:
    reasons: list[str] = []
    if isinstance(block, dict):
        for key, value in block.items():
            if isinstance(value, str) and value == "Active":
                reasons.append(prefix + key)
            elif isinstance(value, dict):
                reasons += _active_reasons(value, prefix)
    return reasons


def _query_gpu(index: int, bus_id: str, g: Tree) -> dict[str, Any]:
    reasons = _get(g, "Clocks Event Reasons")
    if reasons is None:
        reasons = _get(g, "Clocks Throttle Reasons")  # drivers before 530
    retired = _get(g, "Retired Pages")
    pending_page = None
    if isinstance(retired, dict):
        pending_page = next(
            (v for k, v in retired.items() if k.startswith("Pending") and isinstance(v, str)), None
        )
    power = _get(g, "GPU Power Readings") or _get(g, "Power Readings")
    link = _get(g, "PCI", "GPU Link Info")
    return {
        "index": index,
        "bus_id": _first(g, ("PCI", "Bus Id")) or bus_id,
        "product_name": _null(_first(g, ("Product Name",))),
        "uuid": _null(_first(g, ("GPU UUID",))),
        "memory_total_mib": _int(_first(g, ("FB Memory Usage", "Total"))),
        "persistence_mode": _null(_first(g, ("Persistence Mode",))),
        "mig_mode_current": _null(_first(g, ("MIG Mode", "Current"))),
        "ecc_mode_current": _null(_first(g, ("ECC Mode", "Current"))),
        "ecc_volatile_uncorrectable": _uncorrectable(_get(g, "ECC Errors", "Volatile")),
        "ecc_aggregate_uncorrectable": _uncorrectable(_get(g, "ECC Errors", "Aggregate")),
        "retired_pages_single_bit": _int(_get(retired, "Single Bit ECC"))
        if isinstance(_get(retired, "Single Bit ECC"), str)
        else None,
        "retired_pages_double_bit": _int(_get(retired, "Double Bit ECC"))
        if isinstance(_get(retired, "Double Bit ECC"), str)
        else None,
        "retired_pages_pending": _yes(pending_page),
        "remapped_rows_correctable": _int(_first(g, ("Remapped Rows", "Correctable Error"))),
        "remapped_rows_uncorrectable": _int(_first(g, ("Remapped Rows", "Uncorrectable Error"))),
        "remapped_rows_pending": _yes(_first(g, ("Remapped Rows", "Pending"))),
        "remapped_rows_failure": _yes(_first(g, ("Remapped Rows", "Remapping Failure Occurred"))),
        "pcie_gen_current": _int(_first(link, ("PCIe Generation", "Current"))),
        "pcie_gen_max": _int(_first(link, ("PCIe Generation", "Max"))),
        "pcie_width_current": _int(_first(link, ("Link Width", "Current"))),
        "pcie_width_max": _int(_first(link, ("Link Width", "Max"))),
        "clocks_event_reasons_active": _active_reasons(reasons) if isinstance(reasons, dict) else None,
        "temperature_c": _int(_first(g, ("Temperature", "GPU Current Temp"))),
        "power_draw_w": _num(
            _first(power, ("Power Draw",), ("Instantaneous Power Draw",), ("Average Power Draw",))
        ),
        "power_limit_w": _num(
            _first(power, ("Current Power Limit",), ("Power Limit",), ("Enforced Power Limit",))
        ),
        "fabric_state": _null(_first(g, ("Fabric", "State"))),
        "fabric_status": _null(_first(g, ("Fabric", "Status"))),
    }


def _parse_query(lines: list[str], result: NvidiaSmiResult) -> None:
    tree = _tree(lines)
    result.driver_version = _null(_first(tree, ("Driver Version",)))
    result.cuda_version = _null(_first(tree, ("CUDA Version",)))
    index = 0
    for key, value in tree.items():
        m = _GPU_BLOCK.match(key.split(" #")[0])
        if m and isinstance(value, dict):
            result.gpus.append(_query_gpu(index, m.group(1), value))
            index += 1


# ---- --query-gpu CSV --------------------------------------------------------------------


def _csv_value(value: str, unit: str | None) -> Any:
    value = value.strip()
    if value in _NULLS:
        return None
    if unit and value.endswith(" " + unit):
        value = value[: -len(unit) - 1]
    n = parse_number(value)
    if n is None:
        return value
    return int(n) if re.match(r"^-?\d+$", value) else n


def _parse_csv(lines: list[str], result: NvidiaSmiResult) -> None:
    rows = [r for r in csv.reader([line for line in lines if line], skipinitialspace=True)]
    header = [h.strip() for h in rows[0]]
    keys: list[tuple[str, str | None]] = []
    for h in header:
        m = re.match(r"^(.*?) \[([^\]]+)\]$", h)
        keys.append((m.group(1), m.group(2)) if m else (h, None))
    for row in rows[1:]:
        if len(row) != len(keys):
            result.notes.append(f"row with {len(row)} fields for {len(keys)} header fields skipped")
            continue
        result.gpus.append({key: _csv_value(v, unit) for (key, unit), v in zip(keys, row, strict=True)})
    if result.gpus:
        result.driver_version = result.gpus[0].get("driver_version")


# ---- nvlink -s / topo -m / default table ------------------------------------------------


def _parse_nvlink(lines: list[str], result: NvidiaSmiResult) -> None:
    gpu: dict[str, Any] | None = None
    for line in lines:
        if m := _NVLINK_GPU.match(line):
            gpu = {
                "index": int(m.group(1)),
                "name": m.group(2),
                "uuid": m.group(3),
                "links": [],
                "active_links": 0,
                "inactive_links": 0,
            }
            result.gpus.append(gpu)
        elif gpu is not None and (m := _NVLINK_LINK.match(line)):
            state_text = m.group(2).strip()
            sm = re.match(r"^(\d+(?:\.\d+)?) GB/s$", state_text)
            state = "active" if sm else ("inactive" if state_text == "<inactive>" else state_text.lower())
            gpu["links"].append(
                {
                    "link": int(m.group(1)),
                    "state": state,
                    "speed_gbytes_per_s": float(sm.group(1)) if sm else None,
                }
            )
            gpu["active_links" if state == "active" else "inactive_links"] += 1


def _parse_topo(text: str, result: NvidiaSmiResult) -> None:
    header: list[str] | None = None
    matrix: dict[str, dict[str, str]] = {}
    for line in clean_lines(text, keep_indent=True):
        if not line.strip():
            if header is not None and matrix:
                break
            continue
        if line.startswith("Legend"):
            break
        cells = [c.strip() for c in re.split(r"\t+", line)]
        if header is None:
            header = [c for c in cells if c]
            continue
        name, values = cells[0], [c for c in cells[1:] if c]
        matrix[name] = dict(zip(header, values, strict=False))
    result.matrix = matrix
    for name, row in matrix.items():
        if m := re.match(r"^GPU(\d+)$", name):
            result.gpus.append(
                {
                    "index": int(m.group(1)),
                    "links": {k: v for k, v in row.items() if re.match(r"^(GPU|NIC)\d+$", k)},
                    "cpu_affinity": _null(row.get("CPU Affinity")),
                    "numa_affinity": _null(row.get("NUMA Affinity")),
                    "gpu_numa_id": _null(row.get("GPU NUMA ID")),
                }
            )


_TABLE_GPU = re.compile(r"^\|\s+(\d+)\s+(.+?)\s+(On|Off)\s+\|\s+(\S+)\s+(\S+)\s+\|\s+(\S+)\s+\|$")
_TABLE_STATS = re.compile(
    r"^\|\s*(\S+)\s+(\S+)\s+(P\d+|N/A)\s+(?:(\S+)\s*/\s*(\S+)|N/A)\s+\|\s+(\S+)\s*/\s*(\S+)\s+\|\s+(\S+)\s+(.+?)\s*\|$"
)
_TABLE_MIG = re.compile(r"^\|\s+\|\s+\|\s+(\S+)\s+\|$")


def _parse_table(lines: list[str], result: NvidiaSmiResult) -> None:
    gpu: dict[str, Any] | None = None
    for line in lines:
        if m := _TABLE_BANNER.search(line):
            result.driver_version, result.cuda_version = m.group(2), m.group(3)
        elif "Processes:" in line:
            break
        elif m := _TABLE_GPU.match(line):
            gpu = {
                "index": int(m.group(1)),
                "name": m.group(2),
                "persistence_mode": m.group(3),
                "bus_id": m.group(4),
                "display_active": m.group(5),
                "ecc_volatile_uncorrectable": _int(m.group(6)),
                "fan_pct": None,
                "temperature_c": None,
                "perf_state": None,
                "power_draw_w": None,
                "power_limit_w": None,
                "memory_used_mib": None,
                "memory_total_mib": None,
                "utilization_pct": None,
                "compute_mode": None,
                "mig_mode_current": None,
            }
            result.gpus.append(gpu)
        elif gpu is not None and (m := _TABLE_STATS.match(line)):
            gpu.update(
                {
                    "fan_pct": _int(m.group(1)),
                    "temperature_c": _int(m.group(2)),
                    "perf_state": _null(m.group(3)),
                    "power_draw_w": _num(m.group(4)),
                    "power_limit_w": _num(m.group(5)),
                    "memory_used_mib": _int(m.group(6)),
                    "memory_total_mib": _int(m.group(7)),
                    "utilization_pct": _int(m.group(8)),
                    "compute_mode": m.group(9),
                }
            )
        elif gpu is not None and (m := _TABLE_MIG.match(line)):
            gpu["mig_mode_current"] = _null(m.group(1))
        elif line.startswith("+"):
            gpu = None if gpu is not None and gpu["mig_mode_current"] is not None else gpu


# ---- detection and verdict --------------------------------------------------------------


def _kind(lines: list[str]) -> str | None:
    nonblank = [line.strip() for line in lines if line.strip()]
    if not nonblank:
        return None
    if any(line == _NVSMI_LOG for line in nonblank):
        return "query"
    if any(_TABLE_BANNER.search(line) for line in nonblank):
        return "table"
    first = nonblank[0]
    fields = [f.strip() for f in first.split(",")]
    if len(fields) >= 2 and all(_CSV_FIELD.match(f) for f in fields):
        return "csv"
    if _NVLINK_GPU.match(first) and any(_NVLINK_LINK.match(line) for line in nonblank[1:]):
        return "nvlink"
    if "CPU Affinity" in first and any(re.match(r"^GPU\d+\s", line) for line in nonblank[1:]):
        return "topo"
    return None


def _verdict(result: NvidiaSmiResult) -> NvidiaSmiResult:
    if not result.gpus:
        result.notes.append("no GPUs parsed")
        result.status = "incomplete"
        return result
    for g in result.gpus:
        who = f"GPU {g.get('index', '?')}"
        checks = (
            (
                g.get("ecc_volatile_uncorrectable", g.get("ecc.errors.uncorrected.volatile.total")),
                "volatile uncorrectable ECC errors",
            ),
            (
                g.get("ecc_aggregate_uncorrectable", g.get("ecc.errors.uncorrected.aggregate.total")),
                "aggregate uncorrectable ECC errors",
            ),
        )
        for value, what in checks:
            if isinstance(value, int | float) and not isinstance(value, bool) and value > 0:
                result.notes.append(f"{who}: {value:g} {what}")
        flags = (
            (g.get("retired_pages_pending", g.get("retired_pages.pending")), "page retirement pending"),
            (g.get("remapped_rows_pending", g.get("remapped_rows.pending")), "row remapping pending"),
            (g.get("remapped_rows_failure", g.get("remapped_rows.failure")), "row remapping failure"),
        )
        for flag, what in flags:
            if flag is True or (isinstance(flag, str) and flag.lower() == "yes"):
                result.notes.append(f"{who}: {what}")
    result.status = "failed" if result.notes else "ok"
    return result


def parse(text: str) -> NvidiaSmiResult:
    lines = clean_lines(text, keep_indent=True)
    kind = _kind(lines)
    if kind is None:
        raise NotToolOutput(
            "not nvidia-smi output (no -q log, --query-gpu CSV header, nvlink, topo or table)"
        )
    result = NvidiaSmiResult(kind=kind)
    if kind == "query":
        _parse_query(lines, result)
    elif kind == "csv":
        _parse_csv(lines, result)
    elif kind == "nvlink":
        _parse_nvlink([line.strip() for line in lines], result)
    elif kind == "topo":
        _parse_topo(text, result)
    else:
        _parse_table([line.strip() for line in lines], result)
    return _verdict(result)
