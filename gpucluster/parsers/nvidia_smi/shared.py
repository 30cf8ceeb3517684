"""What every nvidia-smi output format shares: the result, the reading of one GPU's health
fields, the placeholders nvidia-smi prints for a value it has not got, its own error lines, and
the merging of a log's snapshots (``-l``, or captures concatenated) into one entry per GPU."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from gpucluster.parsers.common import ParseResult, parse_count, parse_number

_LEADING_NUMBER = re.compile(r"-?\d{1,20}(?:\.\d{1,20})?")
NULLS = {
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
class Health:
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
        return None if raw in NULLS else raw

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

    def recovery_action(self, raw: str | None) -> None:
        """``GPU Recovery Action`` (``-q``) or ``gpu_recovery_action`` (CSV): any action but None fails."""
        action = null(raw)
        if action is not None and action.lower() != "none":
            self.failed.append(f"recovery action requested: {action[:40]}")


def null(value: str | None) -> str | None:
    if value is None:
        return None
    value = value.strip()
    return None if value in NULLS else value


def num(value: str | None) -> float | None:
    """First number in ``value`` ("81559 MiB" -> 81559.0, "16x" -> 16.0)."""
    value = null(value)
    if value is None:
        return None
    m = _LEADING_NUMBER.match(value)
    return parse_number(m.group(0)) if m else None


def integer(value: str | None) -> int | None:
    n = num(value)
    return int(n) if n is not None else None


def is_fatal(line: str) -> bool:
    return line.startswith(_FATAL_PREFIXES)


# ---- merging snapshots ------------------------------------------------------------------


# The CSV fields that name a GPU, most specific first.
CSV_ID_FIELDS = ("pci.bus_id", "uuid", "gpu_uuid", "gpu_bus_id", "index")


def _identity(kind: str, gpu: dict[str, Any]) -> Any:
    if kind in ("query", "table"):
        return gpu.get("bus_id")
    if kind == "csv":
        for key in CSV_ID_FIELDS:
            if gpu.get(key) is not None:
                return gpu[key]
        return None
    return gpu.get("index")


def is_health_key(key: str) -> bool:
    return key.startswith(("ecc_", "ecc.errors.", "retired_pages", "remapped_rows"))


def worse(old: Any, new: Any) -> Any:
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


class Merger:
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
                health = self.health_key[key] = is_health_key(key)
            old[key] = worse(old.get(key), value) if health else value

    def gpus(self) -> list[dict[str, Any]]:
        return self.order
