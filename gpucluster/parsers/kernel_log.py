"""NVIDIA Xid events in a kernel log (``journalctl -k -b`` or ``dmesg``).

The driver logs ``NVRM: Xid (PCI:0000:01:00): 79, pid=..., GPU has fallen off the bus.``: the
GPU's PCI address, the Xid number, then free text. A journalctl or dmesg prefix (time, host,
``kernel:``) may come first; each event is read from the ``NVRM: Xid (`` marker on. A log without
any Xid line is a log without events, so this reader never raises NotToolOutput.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpucluster.parsers.common import clean_lines

_MARK = "NVRM: Xid ("
_XID = re.compile(
    r"NVRM: Xid \(PCI:([0-9A-Fa-f]{1,8}(?::[0-9A-Fa-f]{1,4}){1,2}(?:\.[0-9A-Fa-f])?)\): (\d{1,6})\b,?[ \t]*(.{0,300})"
)
MAX_EVENTS = 1000


@dataclass(frozen=True)
class XidEvent:
    pci: str
    xid: int
    text: str


def xid_events(text: str) -> tuple[list[XidEvent], int]:
    """(events, lines that carry the Xid marker but could not be read)."""
    events: list[XidEvent] = []
    unreadable = 0
    for line in clean_lines(text):
        at = line.find(_MARK)
        if at < 0:
            continue
        m = _XID.match(line, at)
        if m is None:
            unreadable += 1
        elif len(events) < MAX_EVENTS:
            events.append(XidEvent(pci=m.group(1).lower(), xid=int(m.group(2)), text=m.group(3).strip()))
    return events, unreadable
