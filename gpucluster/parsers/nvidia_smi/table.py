"""``nvidia-smi`` without options, kind ``table``: the default table's name, persistence, bus id,
ECC, temperature, power, memory and MIG mode per GPU. ``ERR!`` in a cell is a value the driver
could not read. A table without its ``Processes:`` box is output cut short; a log of several
tables (``-l``) is one snapshot after the other."""

from __future__ import annotations

import re
from typing import Any

from gpucluster.parsers.common import parse_count, worst
from gpucluster.parsers.nvidia_smi.shared import Health, Merger, NvidiaSmiResult, integer, null, num

_TABLE_BANNER = re.compile(r"NVIDIA-SMI (\S+)[ \t]+Driver Version: (\S+)(?:[ \t]+CUDA Version: (\S+))?")


def recognises(useful: list[str]) -> bool:
    """Whether these lines (nvidia-smi's error lines and blank lines left out) hold the table's banner."""
    return any("NVIDIA-SMI " in line and _TABLE_BANNER.search(line) for line in useful)


def _table_cells(line: str) -> list[str] | None:
    """The three inner cells of ``| a | b | c |``, or None."""
    if not (line.startswith("|") and line.endswith("|")):
        return None
    cells = line[1:-1].split("|")
    return [c.strip() for c in cells] if len(cells) == 3 else None


def _table_gpu(cells: list[str], health: Health) -> dict[str, Any] | None:
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
            "fan_pct": integer(first[0]),
            "temperature_c": integer(first[1]),
            "perf_state": null(first[2]),
            "power_draw_w": num(draw),
            "power_limit_w": num(limit),
            "memory_used_mib": integer(used),
            "memory_total_mib": integer(total),
            "utilization_pct": integer(third[0]),
            "compute_mode": third[1].strip() if len(third) > 1 else None,
        }
    )
    return True


def read(lines: list[str], result: NvidiaSmiResult, merger: Merger) -> list[Health]:
    """Each GPU of each table into ``merger``, the versions and a missing Processes box into
    ``result``; ``lines`` are stripped."""
    gpu: dict[str, Any] | None = None
    stage = 0  # lines of the current GPU's block read so far
    healths: list[Health] = []
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
        health = Health(who="GPU ?")
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
            gpu["mig_mode_current"] = null(cells[2])
            stage = 3
    if gpu is not None:
        merger.add(gpu)
    if not processes:
        result.note("no 'Processes:' box after the GPU table: output cut short?")
        result.status = worst("incomplete", result.status)
    return healths
