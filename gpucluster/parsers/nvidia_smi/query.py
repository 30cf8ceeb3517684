"""``nvidia-smi -q`` (also with ``-d SECTION``), kind ``query``: indented ``Key : value`` blocks
per ``GPU <bus id>``.

GPUs get ``index`` in the order printed, which is nvidia-smi's index order. ECC uncorrectable
totals sum every numeric ``... Uncorrectable ...`` counter of the Volatile/Aggregate block
(driver 535+: ``SRAM Uncorrectable``, ``DRAM Uncorrectable``; 590+: ``SRAM Uncorrectable
Parity``/``SEC-DED``), or the ``Double Bit > Total`` of older drivers. Cut short: fewer ``GPU``
blocks than ``Attached GPUs``, or a full block without its closing ``Processes`` entry.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpucluster.parsers.common import parse_count, worst
from gpucluster.parsers.nvidia_smi.shared import Health, Merger, NvidiaSmiResult, integer, is_fatal, null, num

_NVSMI_LOG = "==============NVSMI LOG=============="
_GPU_BLOCK = re.compile(r"GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-9A-Fa-f])")
# A key never ends in a blank, so "\S" closes it; the blanks before ":" are one run.
_KV = re.compile(r"([^:]*?\S)[ \t]+:(?:[ \t](.*))?")


def recognises(useful: list[str]) -> bool:
    """Whether these lines (nvidia-smi's error lines and blank lines left out) are a ``-q`` log."""
    return _NVSMI_LOG in useful


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
        if not line.strip() or line.startswith("=====") or is_fatal(line.lstrip()):
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


def _query_health(g: Tree, health: Health) -> _QueryHealth:
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
            health.recovery_action(raw)
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


def _query_gpu(index: int, bus_id: str, g: Tree, health: Health) -> dict[str, Any]:
    reasons = _get(g, "Clocks Event Reasons")
    if reasons is None:
        reasons = _get(g, "Clocks Throttle Reasons")  # drivers before 530
    power = _get(g, "GPU Power Readings") or _get(g, "Power Readings")
    link = _get(g, "PCI", "GPU Link Info")
    h = _query_health(g, health)
    return {
        "index": index,
        "bus_id": _first(g, ("PCI", "Bus Id")) or bus_id,
        "product_name": null(_first(g, ("Product Name",))),
        "uuid": null(_first(g, ("GPU UUID",))),
        "memory_total_mib": integer(_first(g, ("FB Memory Usage", "Total"))),
        "persistence_mode": null(_first(g, ("Persistence Mode",))),
        "mig_mode_current": null(_first(g, ("MIG Mode", "Current"))),
        "ecc_mode_current": null(_first(g, ("ECC Mode", "Current"))),
        "ecc_volatile_uncorrectable": h.total("Volatile"),
        "ecc_aggregate_uncorrectable": h.total("Aggregate"),
        "retired_pages_single_bit": h.counter("retired_pages_single_bit"),
        "retired_pages_double_bit": h.counter("retired_pages_double_bit"),
        "retired_pages_pending": h.flag("retired_pages_pending"),
        "remapped_rows_correctable": h.counter("remapped_rows_correctable"),
        "remapped_rows_uncorrectable": h.counter("remapped_rows_uncorrectable"),
        "remapped_rows_pending": h.flag("remapped_rows_pending"),
        "remapped_rows_failure": h.flag("remapped_rows_failure"),
        "pcie_gen_current": integer(_first(link, ("PCIe Generation", "Current"))),
        "pcie_gen_max": integer(_first(link, ("PCIe Generation", "Max"))),
        "pcie_width_current": integer(_first(link, ("Link Width", "Current"))),
        "pcie_width_max": integer(_first(link, ("Link Width", "Max"))),
        "clocks_event_reasons_active": _active_reasons(reasons) if isinstance(reasons, dict) else None,
        "temperature_c": integer(_first(g, ("Temperature", "GPU Current Temp"))),
        "power_draw_w": num(
            _first(power, ("Power Draw",), ("Instantaneous Power Draw",), ("Average Power Draw",))
        ),
        "power_limit_w": num(
            _first(power, ("Current Power Limit",), ("Power Limit",), ("Enforced Power Limit",))
        ),
        "fabric_state": null(_first(g, ("Fabric", "State"))),
        "fabric_status": null(_first(g, ("Fabric", "Status"))),
    }


def _snapshots(lines: list[str]) -> Iterable[list[str]]:
    """Each ``-q`` capture in the log (``-l`` repeats them), so a long log is read one at a time."""
    start = 0
    for i, line in enumerate(lines):
        if line.strip() == _NVSMI_LOG and i > start:
            yield lines[start:i]
            start = i
    yield lines[start:]


def read(lines: list[str], result: NvidiaSmiResult, merger: Merger) -> list[Health]:
    """Each snapshot's GPUs into ``merger``, its versions and cut-short notes into ``result``."""
    healths: list[Health] = []
    for snapshot in _snapshots(lines):
        tree = _tree(snapshot)
        result.driver_version = result.driver_version or null(_first(tree, ("Driver Version",)))
        result.cuda_version = result.cuda_version or null(_first(tree, ("CUDA Version",)))
        attached = [parse_count(v) for k, v in tree.items() if _norm(k) == "Attached GPUs" and isinstance(v, str)]
        cut: list[str] = []
        buses: set[str] = set()
        for key, value in tree.items():
            m = _GPU_BLOCK.fullmatch(_norm(key))
            if not (m and isinstance(value, dict)):
                continue
            health = Health(who=f"GPU {m.group(1)}")
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
