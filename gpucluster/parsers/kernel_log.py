"""NVIDIA Xid and NVSwitch SXid events in a kernel log (``journalctl -k -b`` or ``dmesg``).

The GPU driver logs ``NVRM: Xid (PCI:0000:01:00): 79, pid=..., GPU has fallen off the bus.``: the
GPU's PCI address, the Xid number, then free text. The NVSwitch driver logs each SXid event as a
first line that says whether it is fatal, then detail lines carrying the same code:

    nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Non-fatal, Link 32 egress non-posted PRIV error (First)
    nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Severity 0 Engine instance 32 Sub-engine instance 00
    nvidia-nvswitch0: SXid (PCI:0000:05:00.0): 12028, Data {0x00000000, 0x00000000, ...}

(the driver's ``NVSWITCH_PRINT_SXID``: ``"nvidia-%s: SXid (PCI:%04x:%02x:%02x.%x): %05d, " fmt``, in
NVIDIA/open-gpu-kernel-modules ``src/common/nvswitch``; the Fabric Manager user guide,
https://docs.nvidia.com/datacenter/tesla/fabric-manager-user-guide/index.html, names SXids the
NVSwitch errors and splits them into fatal and non-fatal). A journalctl or dmesg prefix (time,
host, ``kernel:``, ``[  12.345]``) may come first; each event is read from its marker on.

A log without any Xid line is a log without events, so the event readers never raise
NotToolOutput; whether the log could be read at all is :func:`read_kernel_log`'s question.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from gpucluster.parsers.common import clean_lines

_MARK = "NVRM: Xid ("
_XID = re.compile(
    r"NVRM: Xid \(PCI:([0-9A-Fa-f]{1,8}(?::[0-9A-Fa-f]{1,4}){1,2}(?:\.[0-9A-Fa-f])?)\): (\d{1,6})\b,?[ \t]*(.{0,300})"
)
_SXID_MARK = "SXid ("
_SXID = re.compile(
    r"SXid \(PCI:([0-9A-Fa-f]{1,8}(?::[0-9A-Fa-f]{1,4}){1,2}(?:\.[0-9A-Fa-f])?)\): (\d{1,6}),[ \t]*(.{0,300})"
)
_SWITCH = re.compile(r"nvidia-([\w-]{1,40}):[ \t]*$")
# Detail lines of an SXid event: the driver's error-entry dump after the Fatal/Non-fatal line.
_SXID_DETAIL = ("Severity ", "Data {", "Data{")
MAX_EVENTS = 1000


@dataclass(frozen=True)
class XidEvent:
    pci: str
    xid: int
    text: str


@dataclass(frozen=True)
class SxidEvent:
    switch: str | None  # "nvswitch0", the driver's device name; None without the ``nvidia-...:`` prefix
    pci: str
    sxid: int
    fatal: bool | None  # None: the first line says neither Fatal nor Non-fatal
    text: str


def _marked(text: str, mark: str, pattern: re.Pattern[str]) -> Iterator[tuple[str, int, re.Match[str] | None]]:
    """(line, where ``mark`` starts, ``pattern`` matched from there or None) for each line with ``mark``."""
    for line in clean_lines(text):
        at = line.find(mark)
        if at >= 0:
            yield line, at, pattern.match(line, at)


def xid_events(text: str) -> tuple[list[XidEvent], int]:
    """(events, lines that carry the Xid marker but could not be read)."""
    events: list[XidEvent] = []
    unreadable = 0
    for _line, _at, m in _marked(text, _MARK, _XID):
        if m is None:
            unreadable += 1
        elif len(events) < MAX_EVENTS:
            events.append(XidEvent(pci=m.group(1).lower(), xid=int(m.group(2)), text=m.group(3).strip()))
    return events, unreadable


def sxid_events(text: str) -> tuple[list[SxidEvent], int]:
    """(SXid events, lines that carry the SXid marker but could not be read).

    One event per first line (``Fatal, ...`` / ``Non-fatal, ...``); the ``Severity`` and ``Data``
    lines that follow it with the same code are its details, not events. A first line that
    names neither severity is an event whose fatality is unknown (``fatal`` None).
    """
    events: list[SxidEvent] = []
    unreadable = 0
    for line, at, m in _marked(text, _SXID_MARK, _SXID):
        if m is None:
            unreadable += 1
            continue
        tail = m.group(3).strip()
        if tail.startswith(_SXID_DETAIL):
            continue
        word, _, rest = tail.partition(",")
        fatal = {"fatal": True, "non-fatal": False}.get(word.strip().lower())
        sw = _SWITCH.search(line, max(0, at - 60), at)
        if len(events) < MAX_EVENTS:
            events.append(SxidEvent(switch=sw.group(1) if sw else None, pci=m.group(1).lower(),
                                    sxid=int(m.group(2)), fatal=fatal,
                                    text=(rest if fatal is not None else tail).strip()))
    return events, unreadable


# The sources GC-GPU-007 reads, in order: journald's kernel messages since boot, else the kernel
# ring buffer. stderr is kept so that a refusal reads as what it is.
LOG_SOURCES: tuple[tuple[str, str], ...] = (
    ("journalctl", "journalctl -k -b --no-pager 2>&1"),
    ("dmesg", "dmesg 2>&1"),
)
# journalctl exits 0 when it may not read the system journal: it prints "-- No entries --" with
# this hint (systemd's "Hint: You are currently not seeing messages from other users and the
# system."), or that no journal file was opened.
_JOURNAL_REFUSALS = ("You are currently not seeing messages from other users and the system",
                     "No journal files were opened due to insufficient permissions",
                     "No journal files were found")


@dataclass
class KernelLog:
    """The kernel log a check read: ``source`` None when no source could be read, with ``reasons``."""

    source: str | None
    text: str
    reasons: list[str] = field(default_factory=list)

    @property
    def readable(self) -> bool:
        return self.source is not None


def unreadable_reason(source: str, rc: int, output: str) -> str | None:
    """Why ``output`` (and exit status ``rc``) of a log source is not a log; None when it is one.

    Neither is an empty output, nor journalctl's ``-- No entries --`` for ``-k -b``: a booted
    kernel has always logged something, so a journal without kernel messages (journald told not to
    keep them) says nothing about Xids, and the next source (dmesg) is read instead.
    """
    first = next((line.strip() for line in output.splitlines() if line.strip()), "")
    if rc != 0:
        return f"{source} exited with status {rc}" + (f": {first[:200]}" if first else "")
    if not first:
        return f"{source} printed nothing"
    if source == "journalctl":
        refusal = next((r for r in _JOURNAL_REFUSALS if r in output), None)
        if refusal is not None:
            return f"journalctl could not read the system journal: {refusal}"
        if all(line.strip() in ("", "-- No entries --") for line in output.splitlines()):
            return "journalctl holds no kernel message since boot (journald does not keep them here)"
    return None


def read_kernel_log(run: Callable[[str], tuple[int, str]]) -> KernelLog:
    """Read the first source in LOG_SOURCES that yields a log; ``run`` returns (exit status, output)."""
    reasons: list[str] = []
    for source, command in LOG_SOURCES:
        rc, output = run(command)
        why = unreadable_reason(source, rc, output)
        if why is None:
            return KernelLog(source=source, text=output, reasons=reasons)
        reasons.append(why)
    return KernelLog(source=None, text="", reasons=reasons)

