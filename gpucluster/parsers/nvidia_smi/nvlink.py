"""``nvidia-smi nvlink -s`` (kind ``nvlink``) and ``nvidia-smi nvlink -e`` (kind ``nvlink_errors``):
both print ``GPU %d: NAME (UUID: GPU-...)`` and then one ``Link %d: ...`` line per link.

``-s``: each link's speed in GB/s or ``<inactive>``. NVML's ``Unable to retrieve NVLink
information as all links are inactive`` under a GPU is a failure.

``-e``: per GPU and link, its counters (``Replay Errors``, ``Recovery Errors``, ``CRC Errors``;
newer drivers add more) as ``counters`` {name: count}. The parser judges only whether they can be
read: how many errors a link may show is the check's limit. Elided lines (``[...]``) are output
cut short.
"""

from __future__ import annotations

import re
from typing import Any

from gpucluster.parsers.common import parse_count, worst
from gpucluster.parsers.nvidia_smi.shared import Health, NvidiaSmiResult

_NVLINK_LINK = re.compile(r"Link (\d{1,4}): (.*)")
_NVLINK_ALL_INACTIVE = "NVML: Unable to retrieve NVLink information"
_NVLINK_SPEED = re.compile(r"(\d{1,6}(?:\.\d{1,6})?) GB/s")


def kind(useful: list[str]) -> str | None:
    """``nvlink`` or ``nvlink_errors`` for these lines (nvidia-smi's error lines and blank lines
    left out), or None when they are neither."""
    if _nvlink_gpu(useful[0]) is None:
        return None
    links = [m.group(2) for line in useful[1:] if (m := _NVLINK_LINK.fullmatch(line))]
    # "Link 0: Replay Errors: 0" (-e) against "Link 0: 26.562 GB/s" (-s): a counter has a name.
    if links and all(": " in text for text in links):
        return "nvlink_errors"
    if links or any(line.startswith(_NVLINK_ALL_INACTIVE) for line in useful[1:]):
        return "nvlink"
    return None


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


def read_status(lines: list[str], result: NvidiaSmiResult) -> list[Health]:
    """``nvlink -s``: each GPU and its links into ``result.gpus``."""
    gpu: dict[str, Any] | None = None
    healths: list[Health] = []
    for line in lines:
        if (new := _nvlink_gpu(line)) is not None:
            gpu = new
            result.gpus.append(gpu)
            healths.append(Health(who=f"GPU {gpu['index']}"))
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


def read_errors(lines: list[str], result: NvidiaSmiResult) -> list[Health]:
    """``nvlink -e``: each GPU and its links' counters into ``result.gpus``."""
    gpu: dict[str, Any] | None = None
    healths: list[Health] = []
    links: dict[int, dict[str, Any]] = {}
    for line in lines:
        if (new := _nvlink_gpu(line)) is not None:
            gpu, links = new, {}
            del gpu["active_links"], gpu["inactive_links"]
            result.gpus.append(gpu)
            healths.append(Health(who=f"GPU {gpu['index']}"))
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
