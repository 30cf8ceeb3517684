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
    ``nvidia-smi nvlink -s``: per GPU, each link's speed in GB/s or ``<inactive>``. NVML's
    ``Unable to retrieve NVLink information as all links are inactive`` under a GPU is a failure.
``nvlink_errors``
    ``nvidia-smi nvlink -e``: per GPU and link, its counters (``Replay Errors``, ``Recovery
    Errors``, ``CRC Errors``; newer drivers add more) as ``counters`` {name: count}. The parser
    judges only whether they can be read: how many errors a link may show is the check's limit.
``topo``
    ``nvidia-smi topo -m``: the matrix (terminal underline escapes removed), legend skipped.
``table``
    The default table: name, persistence, bus id, ECC, temperature, power, memory, MIG mode.
``error``
    nvidia-smi's own error lines and no output of the other kinds (``Unable to determine the
    device handle for GPU0000:0B:00.0: Unknown Error``, ``...: GPU is lost``, ``NVIDIA-SMI has
    failed ...``, ``Failed to initialize NVML: ...``, ``No devices were found``), whatever else the
    capture holds beside them (a shell prompt): always ``failed``, with those lines as the reasons.

``status`` is ``failed`` when a GPU reports uncorrectable ECC errors (volatile or
aggregate), a pending page retirement or row remap, a row-remapping failure, a pending
channel/TPC repair, unrepairable memory, an exceeded SRAM error threshold, a required reset
or a recovery action; when a reading is ``ERR!`` (the table's mark for a value the driver
could not read) or a GPU is lost; when nvidia-smi says it could not reach a GPU (``Unable
to determine the device handle``); or when nvidia-smi crashed (a signal death:
:func:`~gpucluster.parsers.common.crash`). A counter that is not a plain non-negative integer
(``nan``, ``-3``, ``1e3``, ``Unknown Error`` in a health field) makes the GPU's health
unknown: ``incomplete``, never ``ok``. Output cut short is ``incomplete``: fewer ``GPU``
blocks than ``Attached GPUs``, a full ``-q`` block without its closing ``Processes`` entry, a
CSV row with too few fields, a table without its ``Processes:`` box, a topology matrix
without its ``Legend``. A log holding several snapshots (``-l``, or captures concatenated)
lists each GPU once, with its health fields merged worst-first, and is judged on every
snapshot.
"""

from __future__ import annotations

import csv
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

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

_NVSMI_LOG = "==============NVSMI LOG=============="
_GPU_BLOCK = re.compile(r"GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])")
# A key never ends in a blank, so "\S" closes it; the blanks before ":" are one run.
_KV = re.compile(r"([^:]*?\S)[ \t]+:(?:[ \t](.*))?")
_NVLINK_LINK = re.compile(r"Link (\d{1,4}): (.*)")
_NVLINK_ALL_INACTIVE = "NVML: Unable to retrieve NVLink information"
_NVLINK_SPEED = re.compile(r"(\d{1,6}(?:\.\d{1,6})?) GB/s")
_TABLE_BANNER = re.compile(r"NVIDIA-SMI (\S+)[ \t]+Driver Version: (\S+)(?:[ \t]+CUDA Version: (\S+))?")
_LEADING_NUMBER = re.compile(r"-?\d{1,20}(?:\.\d{1,20})?")
_TOPO_GPU = re.compile(r"GPU\d{1,4}\s")
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
_UNKNOWN = {"[Unknown Error]", "Unknown Error"}
_CSV_FIELD = re.compile(r"[a-z][A-Za-z0-9_.]*(?: \[[^\]]{1,40}\])?")
# What nvidia-smi prints instead of a GPU it cannot reach ("Unable to determine the device handle
# for GPU0000:0B:00.0: Unknown Error", "...: GPU is lost.  Reboot the system to recover this GPU"),
# or instead of any output at all.
_FATAL_PREFIXES = (
    "Unable to determine the device handle",
    "NVIDIA-SMI has failed",
    "NVIDIA-SMI couldn't find libnvidia-ml.so",
    "Failed to initialize NVML",
    "No devices were found",
)


@dataclass
class NvidiaSmiResult(ParseResult):
    kind: str | None = None  # "query" | "csv" | "nvlink" | "nvlink_errors" | "topo" | "table" | "error"
    driver_version: str | None = None
    cuda_version: str | None = None
    gpus: list[dict[str, Any]] = field(default_factory=list)
    matrix: dict[str, dict[str, str]] | None = None  # topo only
    nics: dict[str, str] | None = None  # topo only: the NIC Legend, "NIC0" -> "mlx5_0"


@dataclass
class _Health:
    """What one GPU snapshot says about the GPU's health, before it is merged with others."""

    who: str
    failed: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)

    def _value(self, what: str, raw: str | None) -> str | None:
        """The stripped value, or None when absent, null or unknown (unknown is recorded)."""
        if raw is None:
            return None
        raw = raw.strip()
        if raw in _UNKNOWN:
            self.unreadable.append(f"{what} reads {raw!r}")
            return None
        return None if raw in _NULLS else raw

    def counter(self, what: str, raw: str | None) -> int | None:
        """Read a counter (``%llu``): None when null; unreadable values are recorded."""
        raw = self._value(what, raw)
        if raw is None:
            return None
        count = parse_count(raw)
        if count is None:
            if raw.strip("[]") == "ERR!":
                self.failed.append(f"{what} reads ERR!")
            else:
                self.unreadable.append(f"{what} reads {raw[:40]!r}, not a count")
        return count

    def flag(self, what: str, raw: str | None) -> bool | None:
        """Read a Yes/No flag; "Yes" is a failure."""
        raw = self._value(what, raw)
        if raw is None:
            return None
        low = raw.lower()
        if low in ("yes", "true", "active", "enabled"):
            self.failed.append(what)
            return True
        if low in ("no", "false", "inactive", "disabled", "none"):
            return False
        if raw.strip("[]") == "ERR!":
            self.failed.append(f"{what} reads ERR!")
        else:
            self.unreadable.append(f"{what} reads {raw[:40]!r}")
        return None


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
    m = _LEADING_NUMBER.match(value)
    return parse_number(m.group(0)) if m else None


def _int(value: str | None) -> int | None:
    n = _num(value)
    return int(n) if n is not None else None


def _is_fatal(line: str) -> bool:
    return line.startswith(_FATAL_PREFIXES)


# ---- -q ---------------------------------------------------------------------------------


Tree = dict[str, Any]


def _key_value(text: str) -> tuple[str, str] | None:
    """``Key   : value`` (or ``Key   :``) as (key, value); None for a section header."""
    left, sep, rest = text.partition(" :")
    if not sep:
        if "\t:" not in text:
            return None
        m = _KV.fullmatch(text)  # a tab before the colon: rare enough for the regex
        return (m.group(1), (m.group(2) or "").strip()) if m else None
    key = left.rstrip(" \t")
    if not key or (rest and rest[0] not in " \t"):
        return None
    return key, rest.strip()


def _tree(lines: list[str]) -> Tree:
    """Nest ``Key : value`` lines by indentation; a line without a value opens a section."""
    root: Tree = {}
    stack: list[tuple[int, Tree]] = [(-1, root)]
    seen: dict[tuple[int, str], int] = {}  # (id of parent, key) -> copies so far
    for line in lines:
        if not line.strip() or line.startswith("=====") or _is_fatal(line.lstrip()):
            continue
        indent = len(line) - len(line.lstrip(" "))
        while stack[-1][0] >= indent:
            stack.pop()
        parent = stack[-1][1]
        text = line.strip()
        kv = _key_value(text)
        key = kv[0] if kv else text
        unique = key
        if not kv and isinstance(parent.get(key), dict) and not parent[key]:
            stack.append((indent, parent[key]))  # a section header printed twice: one section
            continue
        if key in parent:  # repeated keys (per-process blocks, -l snapshots) stay apart
            n = seen.get((id(parent), key), 1) + 1
            seen[(id(parent), key)] = n
            unique = f"{key} #{n}"
        if kv:
            parent[unique] = kv[1]
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


def _leaves(tree: Any, prefix: str = "") -> Iterable[tuple[str, str]]:
    if isinstance(tree, dict):
        for key, value in tree.items():
            if isinstance(value, dict):
                yield from _leaves(value, f"{prefix}{key} > ")
            else:
                yield f"{prefix}{key}", value


_ECC_FLAGS = ("Pending", "Threshold Exceeded", "Unrepairable")
_HEALTH_SECTIONS = {"ECC Errors", "Retired Pages", "Remapped Rows", "GPU Reset Status", "GPU Recovery Action"}
_COPY = re.compile(r" #\d{1,9}$")


def _norm(key: str) -> str:
    """A key without the " #2" that _tree gives a repeated one."""
    return _COPY.sub("", key) if " #" in key else key


@dataclass
class _QueryHealth:
    """Health fields of one -q GPU block, read from every leaf (every copy of every section)."""

    totals: dict[str, int | None] = field(default_factory=dict)  # "<block path>" -> total, None if unknown
    counters: dict[str, list[int | None]] = field(default_factory=dict)
    flags: dict[str, list[bool | None]] = field(default_factory=dict)

    def total(self, which: str) -> int | None:
        values = [v for k, v in self.totals.items() if k.split(" > ")[-1] == which]
        if not values or any(v is None for v in values):
            return None
        return max(v for v in values if v is not None)

    def counter(self, name: str) -> int | None:
        values = self.counters.get(name, [])
        return None if not values or None in values else max(v for v in values if v is not None)

    def flag(self, name: str) -> bool | None:
        values = self.flags.get(name, [])
        return True if True in values else (False if False in values else None)


def _query_health(g: Tree, health: _Health) -> _QueryHealth:
    out = _QueryHealth()
    sections = {k: v for k, v in g.items() if _norm(k) in _HEALTH_SECTIONS}
    for key, raw in _leaves(sections):
        parts = key.split(" > ")
        path = [_norm(p) for p in parts]
        top, last = path[0], path[-1]
        if top == "ECC Errors":
            what = f"ECC {' > '.join(path[1:])}"
            if any(word in last for word in _ECC_FLAGS):
                health.flag(what, raw)
                continue
            before = len(health.unreadable) + len(health.failed)
            count = health.counter(what, raw)
            block = " > ".join(parts[:2])  # "ECC Errors > Volatile", "ECC Errors #2 > Aggregate"
            old_layout = " > ".join(path[2:]) == "Double Bit > Total"
            if len(path) >= 3 and path[1] in ("Volatile", "Aggregate") and (
                old_layout or ("Uncorrectable" in last and "Bit" not in path[2])
            ):
                if block not in out.totals or out.totals[block] is not None:
                    if count is not None:
                        out.totals[block] = (out.totals.get(block) or 0) + count
                    elif len(health.unreadable) + len(health.failed) > before:
                        out.totals[block] = None
        elif top == "Retired Pages" and len(path) == 2:
            if last.startswith("Pending"):
                out.flags.setdefault("retired_pages_pending", []).append(health.flag("page retirement pending", raw))
            elif last in ("Single Bit ECC", "Double Bit ECC"):
                name = "retired_pages_single_bit" if last.startswith("Single") else "retired_pages_double_bit"
                out.counters.setdefault(name, []).append(health.counter(f"retired pages ({last})", raw))
        elif top == "Remapped Rows" and len(path) == 2:
            if last == "Pending":
                out.flags.setdefault("remapped_rows_pending", []).append(health.flag("row remapping pending", raw))
            elif last == "Remapping Failure Occurred":
                out.flags.setdefault("remapped_rows_failure", []).append(health.flag("row remapping failure", raw))
            elif last in ("Correctable Error", "Uncorrectable Error"):
                name = "remapped_rows_correctable" if last.startswith("Correctable") else "remapped_rows_uncorrectable"
                out.counters.setdefault(name, []).append(health.counter(f"remapped rows ({last})", raw))
        elif top == "GPU Reset Status" and last in ("Reset Required", "Drain and Reset Recommended"):
            health.flag(last.lower(), raw)
        elif top == "GPU Recovery Action":
            action = _null(raw)
            if action is not None and action.lower() != "none":
                health.failed.append(f"recovery action requested: {action[:40]}")
    for block, total in out.totals.items():
        if total:
            health.failed.append(f"{total} {block.split(' > ')[-1].lower()} uncorrectable ECC errors")
    return out


def _active_reasons(block: Any, prefix: str = "") -> list[str]:
    reasons: list[str] = []
    if isinstance(block, dict):
        for key, value in block.items():
            if isinstance(value, str) and value == "Active":
                reasons.append(prefix + key)
            elif isinstance(value, dict):
                reasons += _active_reasons(value, prefix)
    return reasons


def _query_gpu(index: int, bus_id: str, g: Tree, health: _Health) -> dict[str, Any]:
    reasons = _get(g, "Clocks Event Reasons")
    if reasons is None:
        reasons = _get(g, "Clocks Throttle Reasons")  # drivers before 530
    power = _get(g, "GPU Power Readings") or _get(g, "Power Readings")
    link = _get(g, "PCI", "GPU Link Info")
    h = _query_health(g, health)
    return {
        "index": index,
        "bus_id": _first(g, ("PCI", "Bus Id")) or bus_id,
        "product_name": _null(_first(g, ("Product Name",))),
        "uuid": _null(_first(g, ("GPU UUID",))),
        "memory_total_mib": _int(_first(g, ("FB Memory Usage", "Total"))),
        "persistence_mode": _null(_first(g, ("Persistence Mode",))),
        "mig_mode_current": _null(_first(g, ("MIG Mode", "Current"))),
        "ecc_mode_current": _null(_first(g, ("ECC Mode", "Current"))),
        "ecc_volatile_uncorrectable": h.total("Volatile"),
        "ecc_aggregate_uncorrectable": h.total("Aggregate"),
        "retired_pages_single_bit": h.counter("retired_pages_single_bit"),
        "retired_pages_double_bit": h.counter("retired_pages_double_bit"),
        "retired_pages_pending": h.flag("retired_pages_pending"),
        "remapped_rows_correctable": h.counter("remapped_rows_correctable"),
        "remapped_rows_uncorrectable": h.counter("remapped_rows_uncorrectable"),
        "remapped_rows_pending": h.flag("remapped_rows_pending"),
        "remapped_rows_failure": h.flag("remapped_rows_failure"),
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


def _snapshots(lines: list[str]) -> Iterable[list[str]]:
    """Each ``-q`` capture in the log (``-l`` repeats them), so a long log is read one at a time."""
    start = 0
    for i, line in enumerate(lines):
        if line.strip() == _NVSMI_LOG and i > start:
            yield lines[start:i]
            start = i
    yield lines[start:]


def _parse_query(lines: list[str], result: NvidiaSmiResult, merger: _Merger) -> list[_Health]:
    healths: list[_Health] = []
    for snapshot in _snapshots(lines):
        tree = _tree(snapshot)
        result.driver_version = result.driver_version or _null(_first(tree, ("Driver Version",)))
        result.cuda_version = result.cuda_version or _null(_first(tree, ("CUDA Version",)))
        attached = [parse_count(v) for k, v in tree.items() if _norm(k) == "Attached GPUs" and isinstance(v, str)]
        cut: list[str] = []
        buses: set[str] = set()
        for key, value in tree.items():
            m = _GPU_BLOCK.fullmatch(_norm(key))
            if not (m and isinstance(value, dict)):
                continue
            health = _Health(who=f"GPU {m.group(1)}")
            gpu = _query_gpu(merger.count(), m.group(1), value, health)
            merger.add(gpu)
            buses.add(gpu["bus_id"])
            if "Product Name" in value and not any(_norm(k) == "Processes" for k in value):
                cut.append(m.group(1))
            if health.failed or health.unreadable:
                healths.append(health)
        expected = max((a for a in attached if a is not None), default=None)
        if expected is not None and len(buses) < expected:
            result.note(f"'Attached GPUs : {expected}' but {len(buses)} GPU block(s): output cut short?")
            result.status = worst("incomplete", result.status)
        if cut:
            result.note(f"GPU block without its closing 'Processes' entry (cut short?): {', '.join(cut[:8])}")
            result.status = worst("incomplete", result.status)
    return healths


# ---- --query-gpu CSV --------------------------------------------------------------------


def _csv_value(value: str, unit: str | None) -> Any:
    value = value.strip()
    if value in _NULLS:
        return None
    if unit and value.endswith(" " + unit):
        value = value[: -len(unit) - 1]
    if value.isascii() and value.isdigit():
        return int(value) if len(value) <= 40 else value
    n = parse_number(value)
    if n is None:
        return value
    count = parse_count(value.lstrip("-"))
    return (-count if value.startswith("-") else count) if count is not None else n


def _csv_role(key: str) -> str:
    """What a --query-gpu field says about health: "", "flag", "counter", "uncorrected" or "recovery"."""
    if key == "gpu_recovery_action":
        return "recovery"
    if not key.startswith(("ecc.errors.", "retired_pages.", "remapped_rows.", "reset_status.")):
        return ""
    if key.endswith(("pending", "failure", "thresholdExceeded", "reset_required", "drain_and_reset_recommended")):
        return "flag"
    if key.startswith("remapped_rows.histogram"):
        return ""
    return "uncorrected" if key.startswith("ecc.errors.uncorrected.") else "counter"


def _csv_health(key: str, role: str, raw: str, health: _Health) -> None:
    if role == "recovery":
        action = _null(raw)
        if action is not None and action.lower() != "none":
            health.failed.append(f"recovery action requested: {action[:40]}")
    elif role == "flag":
        health.flag(key, raw)
    elif role:
        count = health.counter(key, raw)
        if count and role == "uncorrected":
            health.failed.append(f"{count} uncorrectable ECC errors ({key})")


def _csv_row(line: str) -> list[str] | None:
    """One line's fields (a line never continues on the next); None when the csv module rejects it."""
    try:
        return next(csv.reader([line], skipinitialspace=True), [])
    except csv.Error:  # e.g. a field over the module's 128 KiB limit
        return None


def _parse_csv(lines: list[str], result: NvidiaSmiResult, merger: _Merger) -> list[_Health]:
    body = [line for line in lines if line.strip() and not _is_fatal(line.lstrip())]
    header = [h.strip() for h in (_csv_row(body[0]) or [])] if body else []
    keys: list[tuple[str, str | None]] = []
    for h in header:
        name, bracket, unit = h.partition(" [")
        keys.append((name, unit[:-1]) if bracket and unit.endswith("]") else (h, None))
    names = [key for key, _unit in keys]
    roles = [(i, key, role) for i, (key, _unit) in enumerate(keys) if (role := _csv_role(key))]
    health_columns = [i for i, key in enumerate(names) if _is_health_key(key)]
    id_column = next((names.index(k) for k in ("pci.bus_id", "uuid", "gpu_uuid", "gpu_bus_id", "index") if k in names),
                     None)  # fmt: skip
    # Per GPU: its latest row (raw) and its health fields merged worst-first. Only the health
    # fields are converted row by row; the rest once, at the end (a -l log repeats every row).
    latest: dict[object, tuple[list[str], dict[str, Any]]] = {}
    healths: list[_Health] = []
    short = rows = 0
    for n, line in enumerate(body[1:], start=1):
        row = _csv_row(line)
        if row is not None and len(row) == len(header) and [f.strip() for f in row] == header:
            continue  # the header again: a second capture concatenated
        if row is None or len(row) != len(keys):
            short += 1
            continue
        rows += 1
        health = _Health(who=f"GPU {row[names.index('index')].strip() if 'index' in names else n - 1}")
        for i, key, role in roles:
            _csv_health(key, role, row[i], health)
        if health.failed or health.unreadable:
            healths.append(health)
        merged = {names[i]: _csv_value(row[i], keys[i][1]) for i in health_columns}
        ident: object = row[id_column].strip() if id_column is not None else ("row", n)
        if ident in latest:
            old = latest[ident][1]
            merged = {k: _worse(old.get(k), v) for k, v in merged.items()}
        latest[ident] = (row, merged)
    for row, merged in latest.values():
        gpu = {key: _csv_value(v, unit) for (key, unit), v in zip(keys, row, strict=True)}
        gpu.update(merged)
        merger.add(gpu)
    merger.snapshots = rows
    if short:
        result.note(f"{short} row(s) with the wrong number of fields for {len(keys)} header fields: cut short?")
        result.status = worst("incomplete", result.status)
    first = merger.gpus()[:1]
    version = first[0].get("driver_version") if first else None
    result.driver_version = version if isinstance(version, str) else None
    return healths


# ---- nvlink -s / topo -m / default table ------------------------------------------------


def _nvlink_gpu(line: str) -> dict[str, Any] | None:
    """``GPU %d: NAME (UUID: GPU-...)``, without a regex (a lazy name backtracks on long lines)."""
    if not line.startswith("GPU ") or not line.endswith(")"):
        return None
    colon = line.find(": ", 4)
    tag = line.rfind(" (UUID: ")
    index = parse_count(line[4:colon]) if colon > 0 else None
    if index is None or tag <= colon:
        return None
    return {
        "index": index,
        "name": line[colon + 2 : tag],
        "uuid": line[tag + 8 : -1],
        "links": [],
        "active_links": 0,
        "inactive_links": 0,
    }


def _parse_nvlink(lines: list[str], result: NvidiaSmiResult) -> list[_Health]:
    gpu: dict[str, Any] | None = None
    healths: list[_Health] = []
    for line in lines:
        if (new := _nvlink_gpu(line)) is not None:
            gpu = new
            result.gpus.append(gpu)
            healths.append(_Health(who=f"GPU {gpu['index']}"))
        elif gpu is not None and line.startswith(_NVLINK_ALL_INACTIVE):
            # NVML prints this instead of the links when none is up: the GPU has no NVLink at all.
            gpu["all_inactive"] = True
            healths[-1].failed.append("all NVLinks inactive (NVML could not read any link)")
        elif gpu is not None and (m := _NVLINK_LINK.fullmatch(line)):
            state_text = m.group(2).strip()
            sm = _NVLINK_SPEED.fullmatch(state_text)
            state = "active" if sm else ("inactive" if state_text == "<inactive>" else state_text.lower())
            gpu["links"].append(
                {
                    "link": int(m.group(1)),
                    "state": state,
                    "speed_gbytes_per_s": float(sm.group(1)) if sm else None,
                }
            )
            gpu["active_links" if state == "active" else "inactive_links"] += 1
    return healths


def _parse_nvlink_errors(lines: list[str], result: NvidiaSmiResult) -> list[_Health]:
    gpu: dict[str, Any] | None = None
    healths: list[_Health] = []
    links: dict[int, dict[str, Any]] = {}
    for line in lines:
        if (new := _nvlink_gpu(line)) is not None:
            gpu, links = new, {}
            del gpu["active_links"], gpu["inactive_links"]
            result.gpus.append(gpu)
            healths.append(_Health(who=f"GPU {gpu['index']}"))
        elif line in ("...", "[...]", "\u2026"):
            result.note("elided lines ('[...]'): links are missing from this log")
            result.status = worst("incomplete", result.status)
        elif gpu is not None and (m := _NVLINK_LINK.fullmatch(line)):
            name, _, raw = m.group(2).rpartition(": ")
            index = int(m.group(1))
            if index not in links:
                links[index] = {"link": index, "counters": {}}
                gpu["links"].append(links[index])
            links[index]["counters"][name.strip()[:60]] = healths[-1].counter(
                f"NVLink {index} {name.strip()[:60]}", raw)
    return healths


def _parse_topo(text: str, result: NvidiaSmiResult) -> list[_Health]:
    header: list[str] | None = None
    matrix: dict[str, dict[str, str]] = {}
    legend = done = False
    for line in clean_lines(text, keep_indent=True):
        if not line.strip():
            done = header is not None and bool(matrix)
            continue
        if line.startswith("Legend"):
            legend = True
            continue
        if legend:
            # After the legend of link kinds, newer drivers name each NIC column: "  NIC0: mlx5_0".
            nic = _NIC_NAME.match(line)
            if nic:
                result.nics = {**(result.nics or {}), nic.group(1): nic.group(2)}
            continue
        if done or _is_fatal(line.lstrip()):
            continue
        cells = [c.strip() for c in line.split("\t")]
        if header is None:
            header = [c for c in cells if c]
            continue
        name, values = cells[0], [c for c in cells[1:] if c]
        matrix[name] = dict(zip(header, values, strict=False))
    result.matrix = matrix
    if not legend:
        result.note("no 'Legend:' after the matrix: output cut short?")
        result.status = worst("incomplete", result.status)
    healths: list[_Health] = []
    for name, row in matrix.items():
        index = parse_count(name[3:]) if name.startswith("GPU") else None
        if index is not None:
            result.gpus.append(
                {
                    "index": index,
                    "links": {k: v for k, v in row.items() if _is_topo_peer(k)},
                    "cpu_affinity": _null(row.get("CPU Affinity")),
                    "numa_affinity": _null(row.get("NUMA Affinity")),
                    "gpu_numa_id": _null(row.get("GPU NUMA ID")),
                }
            )
            healths.append(_Health(who=f"GPU {index}"))
    return healths


_NIC_NAME = re.compile(r"^\s*(NIC\d{1,3}):\s*(\S{1,64})\s*$")


def _is_topo_peer(name: str) -> bool:
    return name[:3] in ("GPU", "NIC") and parse_count(name[3:]) is not None


def _table_cells(line: str) -> list[str] | None:
    """The three inner cells of ``| a | b | c |``, or None."""
    if not (line.startswith("|") and line.endswith("|")):
        return None
    cells = line[1:-1].split("|")
    return [c.strip() for c in cells] if len(cells) == 3 else None


def _table_gpu(cells: list[str], health: _Health) -> dict[str, Any] | None:
    """``|   0  NVIDIA H200     On  |   00000000:83:00.0 Off |     0 |``."""
    first, second = cells[0].split(), cells[1].split()
    if len(first) < 3 or parse_count(first[0]) is None or len(second) != 2 or ":" not in second[0]:
        return None
    name = cells[0][len(first[0]) :].strip()
    name = name[: name.rfind(first[-1])].strip()
    ecc_cell = cells[2]
    ecc = None if ecc_cell in ("Off", "On") else health.counter("volatile uncorrectable ECC", ecc_cell)
    if ecc:
        health.failed.append(f"{ecc} volatile uncorrectable ECC errors")
    return {
        "index": int(first[0]),
        "name": name,
        "persistence_mode": first[-1],
        "bus_id": second[0],
        "display_active": second[1],
        "ecc_volatile_uncorrectable": ecc,
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


def _table_stats(cells: list[str], gpu: dict[str, Any]) -> bool:
    """``| N/A   28C    P0     77W /  700W |  0MiB / 143771MiB |   0%   Default |``."""
    first: list[str] = []
    for token in cells[0].split():  # "77W/700W" has no blanks around its slash; "N/A" is one value
        if "/" in token and token != "N/A":
            left, _, right = token.partition("/")
            first += [t for t in (left, "/", right) if t]
        else:
            first.append(token)
    used, slash, total = cells[1].partition("/")
    third = cells[2].split(None, 1)
    if len(first) < 3 or not slash or not third:
        return False
    draw = limit = None
    if "/" in first:
        at = first.index("/")
        draw = first[at - 1] if at > 3 else None
        limit = first[at + 1] if at + 1 < len(first) else None
    gpu.update(
        {
            "fan_pct": _int(first[0]),
            "temperature_c": _int(first[1]),
            "perf_state": _null(first[2]),
            "power_draw_w": _num(draw),
            "power_limit_w": _num(limit),
            "memory_used_mib": _int(used),
            "memory_total_mib": _int(total),
            "utilization_pct": _int(third[0]),
            "compute_mode": third[1].strip() if len(third) > 1 else None,
        }
    )
    return True


def _parse_table(lines: list[str], result: NvidiaSmiResult, merger: _Merger) -> list[_Health]:
    gpu: dict[str, Any] | None = None
    stage = 0  # lines of the current GPU's block read so far
    healths: list[_Health] = []
    processes = False
    for line in lines:
        if "NVIDIA-SMI " in line and (m := _TABLE_BANNER.search(line)):
            result.driver_version, result.cuda_version = m.group(2), m.group(3)
            processes = False  # a new snapshot starts
            continue
        if "Processes:" in line:
            processes = True
            if gpu is not None:
                merger.add(gpu)
            gpu = None
            continue
        cells = _table_cells(line)
        if cells is None or processes:
            continue
        health = _Health(who="GPU ?")
        if (new := _table_gpu(cells, health)) is not None:
            if gpu is not None:
                merger.add(gpu)
            gpu, stage = new, 1
            health.who = f"GPU {new['index']}"
            if health.failed or health.unreadable:
                healths.append(health)
        elif gpu is not None and stage == 1 and _table_stats(cells, gpu):
            stage = 2
        elif gpu is not None and stage == 2 and not cells[0] and not cells[1] and cells[2]:
            gpu["mig_mode_current"] = _null(cells[2])
            stage = 3
    if gpu is not None:
        merger.add(gpu)
    if not processes:
        result.note("no 'Processes:' box after the GPU table: output cut short?")
        result.status = worst("incomplete", result.status)
    return healths


# ---- detection, merging and verdict -----------------------------------------------------


def _kind(lines: list[str]) -> str | None:
    nonblank = [line.strip() for line in lines if line.strip()]
    useful = [line for line in nonblank if not _is_fatal(line)]
    if not useful:
        return "error" if nonblank else None
    kind = _output_kind(useful)
    # nvidia-smi's error lines beside no output it could make (a shell prompt, the "NVML library
    # version" line a driver/library mismatch adds): the failed run of nvidia-smi.
    return "error" if kind is None and len(useful) < len(nonblank) else kind


def _output_kind(useful: list[str]) -> str | None:
    if _NVSMI_LOG in useful:
        return "query"
    if any("NVIDIA-SMI " in line and _TABLE_BANNER.search(line) for line in useful):
        return "table"
    first = useful[0]
    fields = [f.strip() for f in first.split(",")]
    if len(fields) >= 2 and all(len(f) <= 200 and _CSV_FIELD.fullmatch(f) for f in fields):
        return "csv"
    if _nvlink_gpu(first) is not None:
        links = [m.group(2) for line in useful[1:] if (m := _NVLINK_LINK.fullmatch(line))]
        # "Link 0: Replay Errors: 0" (-e) against "Link 0: 26.562 GB/s" (-s): a counter has a name.
        if links and all(": " in text for text in links):
            return "nvlink_errors"
        if links or any(line.startswith(_NVLINK_ALL_INACTIVE) for line in useful[1:]):
            return "nvlink"
    if "CPU Affinity" in first and any(_TOPO_GPU.match(line) for line in useful[1:]):
        return "topo"
    return None


def _identity(kind: str, gpu: dict[str, Any]) -> Any:
    if kind in ("query", "table"):
        return gpu.get("bus_id")
    if kind == "csv":
        for key in ("pci.bus_id", "uuid", "gpu_uuid", "gpu_bus_id", "index"):
            if gpu.get(key) is not None:
                return gpu[key]
        return None
    return gpu.get("index")


def _is_health_key(key: str) -> bool:
    return key.startswith(("ecc_", "ecc.errors.", "retired_pages", "remapped_rows"))


def _worse(old: Any, new: Any) -> Any:
    """The worse of two readings of one health field (True, "Yes", the larger count)."""
    if old is None:
        return new
    if new is None:
        return old
    if isinstance(old, bool) or isinstance(new, bool):
        return old if old is True else new
    if isinstance(old, int | float) and isinstance(new, int | float):
        return max(old, new)
    if isinstance(old, str) and old.lower() == "yes":
        return old
    return new


class _Merger:
    """One entry per GPU as snapshots arrive: the latest readings, each health field at its worst.

    Merging as the log is read keeps a ``-l`` log of 10^4 snapshots at the memory of one.
    """

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.by_id: dict[Any, dict[str, Any]] = {}
        self.order: list[dict[str, Any]] = []
        self.snapshots = 0
        self.health_key: dict[str, bool] = {}

    def count(self) -> int:
        return len(self.order)

    def add(self, gpu: dict[str, Any]) -> None:
        self.snapshots += 1
        ident = _identity(self.kind, gpu)
        old = self.by_id.get(ident) if ident is not None else None
        if old is None:
            if ident is not None:
                self.by_id[ident] = gpu
            self.order.append(gpu)
            return
        for key, value in gpu.items():
            if key == "index" and self.kind == "query":
                continue
            health = self.health_key.get(key)
            if health is None:
                health = self.health_key[key] = _is_health_key(key)
            old[key] = _worse(old.get(key), value) if health else value

    def gpus(self) -> list[dict[str, Any]]:
        return self.order


def _verdict(result: NvidiaSmiResult, healths: list[_Health], fatal: list[str], errs: tuple[int, str]) -> None:
    status: Status = result.status if result.status != "ok" else "ok"
    for line in fatal[:10]:
        result.note(f"nvidia-smi could not reach a GPU: {line[:200]}")
        status = "failed"
    if errs[0]:
        result.note(f"ERR!, a GPU lost or needing a reset, or a crash, on {errs[0]} line(s), first: {errs[1][:120]}")
        status = "failed"
    for health in healths:
        for what in dict.fromkeys(health.failed):
            result.note(f"{health.who}: {what}")
            status = "failed"
        for what in dict.fromkeys(health.unreadable):
            result.note(f"{health.who}: health unknown, {what}")
            status = worst("incomplete", status)
    if not result.gpus:
        result.note("no GPUs parsed")
        status = worst("incomplete", status)
    result.status = status


def parse(text: str) -> NvidiaSmiResult:
    lines = clean_lines(text, keep_indent=True)
    kind = _kind(lines)
    if kind is None:
        raise NotToolOutput(
            "not nvidia-smi output (no -q log, --query-gpu CSV header, nvlink, topo or table)"
        )
    result = NvidiaSmiResult(kind=kind, status="ok")
    fatal = [line.strip() for line in lines if _is_fatal(line.lstrip())]
    # ERR! (a reading the driver could not take) and a lost GPU are failures wherever they appear.
    err_lines = [line for line in lines
                 if "ERR!" in line or "GPU is lost" in line or "requires reset" in line or crash(line)]
    errs = (len(err_lines), err_lines[0].strip() if err_lines else "")
    merger = _Merger(kind)
    healths: list[_Health] = []
    if kind == "query":
        healths = _parse_query(lines, result, merger)
    elif kind == "csv":
        healths = _parse_csv(lines, result, merger)
    elif kind == "table":
        healths = _parse_table([line.strip() for line in lines], result, merger)
    elif kind == "nvlink":
        healths = _parse_nvlink([line.strip() for line in lines], result)
    elif kind == "nvlink_errors":
        healths = _parse_nvlink_errors([line.strip() for line in lines], result)
    elif kind == "topo":
        healths = _parse_topo(text, result)
    if kind in ("query", "csv", "table"):
        result.gpus = merger.gpus()
        if merger.snapshots > len(result.gpus):
            result.note(
                f"{merger.snapshots} GPU snapshots of {len(result.gpus)} GPU(s) merged; the worst reading kept"
            )
    _verdict(result, healths, fatal, errs)
    return result
