"""``nvidia-smi --query-gpu=... --format=csv``, kind ``csv``.

One dict per row keyed by the header's field names with the unit dropped (``memory.total [MiB]``
-> ``memory.total``); the unit is also dropped from the value, numbers become numbers (hex
bitmasks stay strings) and ``[N/A]``, ``N/A``, ``[Not Supported]`` and ``[Requested
functionality has been deprecated]`` become null. A row with too few fields is output cut short.
A header repeated in the log starts another capture (``-l``, or captures concatenated).
"""

from __future__ import annotations

import csv
import re
from typing import Any

from gpucluster.parsers.common import parse_count, parse_number, worst
from gpucluster.parsers.nvidia_smi.shared import (
    CSV_ID_FIELDS,
    NULLS,
    Health,
    Merger,
    NvidiaSmiResult,
    is_fatal,
    is_health_key,
    worse,
)

_CSV_FIELD = re.compile(r"[a-z][A-Za-z0-9_.]*(?: \[[^\]]{1,40}\])?")


def recognises(useful: list[str]) -> bool:
    """Whether the first line (nvidia-smi's error lines and blank lines left out) is a CSV header."""
    fields = [f.strip() for f in useful[0].split(",")]
    return len(fields) >= 2 and all(len(f) <= 200 and _CSV_FIELD.fullmatch(f) for f in fields)


def _csv_value(value: str, unit: str | None) -> Any:
    value = value.strip()
    if value in NULLS:
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


def _csv_health(key: str, role: str, raw: str, health: Health) -> None:
    if role == "recovery":
        health.recovery_action(raw)
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


def read(lines: list[str], result: NvidiaSmiResult, merger: Merger) -> list[Health]:
    """Each GPU's row into ``merger`` (its latest, health fields at their worst), the driver
    version and cut-short rows into ``result``."""
    body = [line for line in lines if line.strip() and not is_fatal(line.lstrip())]
    header = [h.strip() for h in (_csv_row(body[0]) or [])] if body else []
    keys: list[tuple[str, str | None]] = []
    for h in header:
        name, bracket, unit = h.partition(" [")
        keys.append((name, unit[:-1]) if bracket and unit.endswith("]") else (h, None))
    names = [key for key, _unit in keys]
    roles = [(i, key, role) for i, (key, _unit) in enumerate(keys) if (role := _csv_role(key))]
    health_columns = [i for i, key in enumerate(names) if is_health_key(key)]
    id_column = next((names.index(k) for k in CSV_ID_FIELDS if k in names), None)
    # Per GPU: its latest row (raw) and its health fields merged worst-first. Only the health
    # fields are converted row by row; the rest once, at the end (a -l log repeats every row).
    latest: dict[object, tuple[list[str], dict[str, Any]]] = {}
    healths: list[Health] = []
    short = rows = 0
    for n, line in enumerate(body[1:], start=1):
        row = _csv_row(line)
        if row is not None and len(row) == len(header) and [f.strip() for f in row] == header:
            continue  # the header again: a second capture concatenated
        if row is None or len(row) != len(keys):
            short += 1
            continue
        rows += 1
        health = Health(who=f"GPU {row[names.index('index')].strip() if 'index' in names else n - 1}")
        for i, key, role in roles:
            _csv_health(key, role, row[i], health)
        if health.failed or health.unreadable:
            healths.append(health)
        merged = {names[i]: _csv_value(row[i], keys[i][1]) for i in health_columns}
        ident: object = row[id_column].strip() if id_column is not None else ("row", n)
        if ident in latest:
            old = latest[ident][1]
            merged = {k: worse(old.get(k), v) for k, v in merged.items()}
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
