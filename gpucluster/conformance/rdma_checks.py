"""The bodies of GC-NET-003 (RDMA devices present) and GC-NET-005 (RoCE QoS), apart from the node.

Both take what the node's platform lists (gpucluster.render.platform, the reading the rdma_fabric
role's RoCE QoS script uses too) and what the node shows, and return one problem per device.

GC-NET-005 reads iproute2's ``dcb``, the tool the rdma_fabric role installs and sets QoS with.
Its JSON, from iproute2's dcb/dcb_app.c and dcb/dcb_pfc.c (https://github.com/iproute2/iproute2/tree/main/dcb):
``dcb -j app show dev DEV dscp-prio`` prints ``{"dscp_prio":[[DSCP,PRIO],...]}`` (iproute2 up to
6.4; from 6.5 each pair carries a trailing ``" "`` string: ``[DSCP,PRIO," "]``), no key at all when
the APP table holds no DSCP entry; ``dcb -j pfc show dev DEV prio-pfc`` prints
``{"prio_pfc":[false,false,false,true,false,false,false,false]}``, one boolean per priority 0-7.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from gpucluster.render.platform import RDMA_KINDS, platform_devices

__all__ = ["compute_hcas", "dscp_prio_map", "hca_problems", "pfc_priorities", "roce_qos_problems"]


def compute_hcas(platform: Mapping[str, Any], found: list[str]) -> list[str]:
    """The devices ib_write_bw measures on a node: those of ``found`` on the platform's compute rails,
    in the platform's order (so device i of one node pairs with device i of another), never its
    storage ports; all of ``found`` where the compute rails name no devices."""
    named = platform_devices(platform, kinds=RDMA_KINDS)
    return [d for d in named if d in set(found)] if named else list(found)


def hca_problems(found: list[str], platform_name: str, platform: Mapping[str, Any]) -> list[str]:
    """What is wrong with the RDMA devices a node shows (``ls /sys/class/infiniband``) against its
    platform: a compute device it lacks, by name; a device no rail of the platform names (where
    every compute rail names its devices), by name; for rails the OS numbers (EFA), the count.
    Devices of the platform's storage and frontend rails are expected and never counted."""
    rails = list(platform.get("rails") or [])
    compute = platform_devices(platform, kinds=RDMA_KINDS)
    named = {d for role in ("compute", "storage", "frontend")
             for d in platform_devices(platform, kinds=(*RDMA_KINDS, "ethernet"), role=role)}
    unnamed = sum(int(r["count"]) for r in rails
                  if r.get("role") == "compute" and r.get("kind") in RDMA_KINDS and not r.get("devices"))
    present = set(found)
    problems = []
    missing = [d for d in compute if d not in present]
    if missing:
        problems.append(f"missing compute RDMA device(s) of platform {platform_name}: {', '.join(missing)}")
    others = sorted(d for d in present if d not in named)
    if unnamed:
        if len(others) != unnamed:
            problems.append(f"{len(others)} RDMA device(s) on the compute rails the OS names "
                            f"({', '.join(others) or 'none'}), platform {platform_name} lists {unnamed}")
    elif others:
        problems.append(f"RDMA device(s) no rail of platform {platform_name} names: {', '.join(others)}")
    return problems


def _json(text: str, what: str) -> dict[str, Any]:
    try:
        data = json.loads(text or "{}")
    except json.JSONDecodeError as exc:
        raise ValueError(f"{what}: not JSON ({exc.msg})") from exc
    if not isinstance(data, dict):
        raise ValueError(f"{what}: expected a JSON object")
    return data


def dscp_prio_map(text: str) -> dict[int, int]:
    """DSCP -> priority from ``dcb -j app show dev DEV dscp-prio``; {} when the table has no DSCP entry."""
    out: dict[int, int] = {}
    for entry in _json(text, "dcb app show").get("dscp_prio") or []:
        numbers = [x for x in entry if isinstance(x, int)] if isinstance(entry, list) else []
        if len(numbers) != 2:
            raise ValueError(f"dcb app show: unreadable dscp_prio entry {entry!r}")
        out[numbers[0]] = numbers[1]
    return out


def pfc_priorities(text: str) -> list[int]:
    """The priorities PFC is on for, from ``dcb -j pfc show dev DEV prio-pfc``."""
    flags = _json(text, "dcb pfc show").get("prio_pfc")
    if not isinstance(flags, list) or len(flags) != 8 or not all(isinstance(f, bool) for f in flags):
        raise ValueError(f"dcb pfc show: expected prio_pfc as 8 booleans, got {flags!r}")
    return [i for i, on in enumerate(flags) if on]


def roce_qos_problems(dev: str, app_json: str, pfc_json: str, qos: Mapping[str, Any]) -> list[str]:
    """One netdev's RoCE QoS against the spec's ``roce_qos``: DSCP trust (the APP table maps RoCE's
    DSCP, the RDMA CM traffic class's upper six bits, to the lossless priority) and PFC on exactly
    that priority."""
    problems = []
    prio = int(qos["pfc_priority"])
    dscp = int(qos["traffic_class"]) // 4
    table = dscp_prio_map(app_json)
    if qos.get("dscp_trust"):
        if not table:
            problems.append(f"{dev}: no DSCP entry in the APP table (DSCP not trusted)")
        elif table.get(dscp) != prio:
            problems.append(f"{dev}: DSCP {dscp} maps to priority {table.get(dscp)}, the spec says {prio}")
    elif table:
        problems.append(f"{dev}: the APP table maps DSCP ({len(table)} entries) but the spec says dscp_trust false")
    on = pfc_priorities(pfc_json)
    if on != [prio]:
        problems.append(f"{dev}: PFC on priorities {on}, the spec says [{prio}]")
    return problems
