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

from gpucluster.conformance.pairs import ring_pairs
from gpucluster.conformance.remote import Remote, node_folder, quote
from gpucluster.conformance.run_ib_write_bw import gid_args
from gpucluster.parsers import parse_run
from gpucluster.render.platform import RDMA_KINDS, platform_devices
from gpucluster.spec.models import Platform, RoceQos

__all__ = [
    "IB_COUNTER_DUMP",
    "compute_hcas",
    "dscp_prio_map",
    "gdr_args",
    "gdr_pairs",
    "gdr_peer",
    "gpu_hca_affinity",
    "hca_problems",
    "pfc_priorities",
    "roce_qos_problems",
    "run_gdr_pair",
]


_IB = "/sys/class/infiniband"
# GC-IB-002's reading of a node's HCA port error counters: sysfs ``<path>=<value>`` lines.
IB_COUNTER_DUMP = (f"for f in {_IB}/*/ports/*/counters/symbol_error {_IB}/*/ports/*/counters/link_downed "
                   f"{_IB}/*/ports/*/counters/port_rcv_errors; "
                   'do [ -r "$f" ] && printf "%s=%s\\n" "$f" "$(cat "$f")"; done; true')


def compute_hcas(platform: Platform, found: list[str]) -> list[str]:
    """The devices ib_write_bw measures on a node: those of ``found`` on the platform's compute rails,
    in the platform's order (so device i of one node pairs with device i of another), never its
    storage ports; all of ``found`` where the compute rails name no devices."""
    named = platform_devices(platform, kinds=RDMA_KINDS)
    return [d for d in named if d in set(found)] if named else list(found)


def hca_problems(found: list[str], platform_name: str, platform: Platform) -> list[str]:
    """What is wrong with the RDMA devices a node shows (``ls /sys/class/infiniband``) against its
    platform: a compute device it lacks, by name; a device no rail of the platform names (where
    every compute rail names its devices), by name; for rails the OS numbers (EFA), the count.
    Devices of the platform's storage and frontend rails are expected and never counted."""
    compute = platform_devices(platform, kinds=RDMA_KINDS)
    named = {d for role in ("compute", "storage", "frontend")
             for d in platform_devices(platform, kinds=(*RDMA_KINDS, "ethernet"), role=role)}
    unnamed = sum(r.count for r in platform.compute_rails() if r.kind in RDMA_KINDS and not r.devices)
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


def roce_qos_problems(dev: str, app_json: str, pfc_json: str, qos: RoceQos) -> list[str]:
    """One netdev's RoCE QoS against the spec's ``roce_qos``: DSCP trust (the APP table maps RoCE's
    DSCP, the RDMA CM traffic class's upper six bits, to the lossless priority) and PFC on exactly
    that priority."""
    problems = []
    prio = qos.pfc_priority
    dscp = qos.traffic_class // 4
    table = dscp_prio_map(app_json)
    if qos.dscp_trust:
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


# --- GC-RDMA-002: GPUDirect RDMA between nodes ------------------------------------------------

GDR_PORT = 18620


def gdr_peer(names: list[str], me: str) -> str | None:
    """The node ``me`` measures GPUDirect RDMA with: its partner in GC-RDMA-001's ring of pairs
    (gpucluster.conformance.pairs.ring_pairs over the same nodes), None without a second node."""
    for a, b in ring_pairs(names):
        if a == me:
            return b
    return next((a for a, b in ring_pairs(names) if b == me), None)


# `nvidia-smi topo -m`'s link kinds between a GPU and a NIC, nearest first (its Legend: PIX at most
# one PCIe bridge, PXB several, PHB through the host bridge, NODE across host bridges in the NUMA
# node, SYS across the SMP interconnect).
_TOPO_NEAR = ("PIX", "PXB", "PHB", "NODE", "SYS")


def gpu_hca_affinity(topo: Mapping[str, Any] | None, hcas: list[str]) -> dict[int, str]:
    """GPU index -> its nearest HCA among ``hcas``, from ``nvidia-smi topo -m`` parsed (its matrix
    and NIC Legend), each HCA given to one GPU at most; {} where the matrix names no NICs."""
    if not topo or not topo.get("nics"):
        return {}
    column = {name: nic for nic, name in topo["nics"].items() if name in hcas}
    taken: set[str] = set()
    out: dict[int, str] = {}
    for gpu in sorted(topo.get("gpus") or [], key=lambda g: g["index"]):
        links = gpu.get("links") or {}
        ranked = sorted((_TOPO_NEAR.index(links[nic]) if links.get(nic) in _TOPO_NEAR else len(_TOPO_NEAR),
                         hcas.index(name), name) for name, nic in column.items() if name not in taken)
        if ranked and ranked[0][0] < len(_TOPO_NEAR):
            out[gpu["index"]] = ranked[0][2]
            taken.add(ranked[0][2])
    return out


def gdr_pairs(gpus: int, hcas: list[str], peer_hcas: list[str], topo: Mapping[str, Any] | None = None,
              peer_topo: Mapping[str, Any] | None = None) -> list[tuple[int, str, str]]:
    """(GPU i, this node's HCA for GPU i, the peer's HCA for GPU i). Each GPU writes through the HCA
    nearest it on the PCIe tree, as ``nvidia-smi topo -m`` shows on each node (``topo``,
    ``peer_topo``: parsed): on a DGX H100 the compute NICs' numbering does not follow the GPUs', and
    a GPU reaching a NIC across the SMP interconnect would read as a slow link. Where a node's
    matrix names no NICs, the platform's order stands in (GPU i, its i-th compute HCA)."""
    here, there = gpu_hca_affinity(topo, hcas), gpu_hca_affinity(peer_topo, peer_hcas)
    return [(i, here.get(i, hcas[i]), there.get(i, peer_hcas[i])) for i in range(min(gpus, len(hcas), len(peer_hcas)))]


# The server's log, in a private folder of the run on the server (remote.node_folder).
GDR_SERVER_LOG = "gdr-server.log"
# How long the client waits for the server's port (s).
GDR_LISTEN_WAIT_S = 20


def gdr_args(device: str, gpu: int, dmabuf: bool, seconds: int, qps: int = 4,
             gid_index: int | None = None) -> list[str]:
    """ib_write_bw with its buffers in GPU ``gpu``'s memory, as GC-RDMA-001 drives it otherwise
    (the GID index NCCL uses included). Without nvidia-peermem (inbox rdma-core with the open
    kernel modules) GPU memory is registered through DMA-BUF: ``--use_cuda_dmabuf`` beside ``--use_cuda``."""
    return ["ib_write_bw", "-d", device, f"--use_cuda={gpu}", *(["--use_cuda_dmabuf"] if dmabuf else []),
            "-F", "--report_gbits", "-D", str(seconds), "-q", str(qps), "-p", str(GDR_PORT + gpu),
            *gid_args(gid_index)]


def run_gdr_pair(server: Remote, client: Remote, server_ip: str, gpu: int, device: str, peer_device: str,
                 dmabuf: tuple[bool, bool], seconds: int = 5, gid_index: int | None = None) -> dict[str, Any]:
    """The server on the peer (``server``) in the background, the client here; both bounded by
    ``timeout`` (a client that never connects must not leave the server holding the GPU).
    ``dmabuf``: (server's, client's). The client's output, with its exit status, is the figure."""
    bound = seconds + 30
    srv = quote(gdr_args(peer_device, gpu, dmabuf[0], seconds, gid_index=gid_index))
    port = GDR_PORT + gpu
    # The client starts once the server listens (CUDA's start-up on the server can take seconds),
    # at most GDR_LISTEN_WAIT_S later; a server that never listens leaves the client to say why.
    with node_folder([server]) as folder:
        log = quote([f"{folder}/{GDR_SERVER_LOG}"])
        server.run(f"(timeout {bound} {srv} > {log} 2>&1 &); "
                   f"for i in $(seq {GDR_LISTEN_WAIT_S * 4}); do ss -Hltn 'sport = :{port}' | grep -q . && break; "
                   "sleep 0.25; done; true", timeout=GDR_LISTEN_WAIT_S + 30)
        cli = quote([*gdr_args(device, gpu, dmabuf[1], seconds, gid_index=gid_index), server_ip])
        res = client.run(f"timeout {bound} {cli} 2>&1", timeout=bound + 30)
        parsed = parse_run("ib_write_bw", res.stdout, res.rc)
        if not parsed.get("rows") or parsed.get("status") != "ok":
            said = server.run(f"tail -c 300 {log} 2>/dev/null", timeout=30).stdout.strip()
            parsed["notes"] = [*parsed.get("notes", []), f"output (rc {res.rc}): {res.stdout.strip()[-200:]}",
                               *([f"server: {said}"] if said else [])]
    return {**parsed, "gpu": gpu, "hca": device, "peer_hca": peer_device}
