"""Acceptance checks vendors run before a GPU node takes jobs: pure verdicts over parsed output.

Each function takes what a parser returned (``gpucluster.parsers``) and the expected figures
(``gpucluster.conformance.expect``) and returns one problem line per fault, naming the GPU, link,
HCA or port; an empty list passes. Nothing here runs a command.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from gpucluster.conformance.expect import Rail
from gpucluster.conformance.gpu_checks import verdict_problems
from gpucluster.parsers.kernel_log import SxidEvent, XidEvent
from gpucluster.parsers.libfabric import NcclNet
from gpucluster.parsers.sysfs import IbPort, is_mlx5_vf, pcie_gen

# Clocks event reasons that mean the GPU is slowed by heat or power, not by idling or settings
# (nvidia-smi -q "Clocks Event Reasons"; "Clocks Throttle Reasons" before driver 530).
SLOWDOWN_REASONS = ("SW Power Cap", "HW Slowdown", "HW Thermal Slowdown", "HW Power Brake Slowdown",
                    "SW Thermal Slowdown")
NVLINK_COUNTERS = ("Replay Errors", "Recovery Errors", "CRC Errors")


def dcgm_problems(parsed: dict[str, Any]) -> list[str]:
    """Every failed or warning DCGM test, with the GPUs it names and DCGM's first warning or error, then
    the parser's verdict where the run is not ``ok`` for another reason (a GPU nothing diagnosed)."""
    out = []
    for t in parsed.get("tests", []):
        if t.get("result") in ("fail", "warn"):
            gpus = t.get("failed_gpus") or []
            where = f" on GPU {', '.join(map(str, gpus))}" if gpus else f" ({t.get('raw')})"
            why = next((d.get("text") for d in t.get("details", []) if d.get("kind") in ("warning", "error")), None)
            out.append(f"DCGM {t.get('name')}: {t.get('result')}{where}" + (f": {str(why)[:200]}" if why else ""))
    out += [f"DCGM error: {e}" for e in parsed.get("errors", [])[:5]]
    # An incomplete run's notes say what was not diagnosed (a GPU every hardware test skipped):
    # a warning elsewhere must not stand in for that reason.
    if not out or parsed.get("status") == "incomplete":
        out += verdict_problems(parsed, "dcgmi diag")
    return out


def fabric_problems(gpus: list[dict[str, Any]]) -> list[str]:
    """nvidia-smi -q Fabric: State Completed and Status Success on every GPU."""
    out = []
    for g in gpus:
        state, status = g.get("fabric_state"), g.get("fabric_status")
        if state != "Completed" or status != "Success":
            out.append(f"GPU {g.get('index')} ({g.get('bus_id')}): fabric state {state}, status {status}")
    return out


PCIE_QUERY = ("index", "pcie.link.gen.current", "pcie.link.width.current", "pcie.link.gen.max", "pcie.link.width.max")


def gpu_pcie_link_problems(rows: list[dict[str, Any]], gpus: int, generation: int, width: int,
                           loaded: bool) -> list[str]:
    """``nvidia-smi --query-gpu=<PCIE_QUERY> --format=csv`` rows (one or many per GPU) against the profile.

    An idle GPU drops its link to a lower generation to save power, so the current generation
    means something only under traffic. ``loaded``: the rows were sampled while copies ran to and
    from every GPU, and each GPU's best current generation and width over its samples is judged.
    Not loaded: ``pcie.link.gen.max`` (the highest generation the GPU and its slot can train to)
    stands for the generation, with the current width (the width does not drop at idle). Each
    problem says which of the two was measured.
    """
    seen: dict[str, list[dict[str, Any]]] = {}
    for row in rows:
        seen.setdefault(str(row.get("index")), []).append(row)
    how = "under load" if loaded else "idle, judged on pcie.link.gen.max"
    out = []
    for i in range(gpus):
        samples = seen.get(str(i), [])
        gen_key = "pcie.link.gen.current" if loaded else "pcie.link.gen.max"
        gens = [r[gen_key] for r in samples if isinstance(r.get(gen_key), int)]
        widths = [r["pcie.link.width.current"] for r in samples if isinstance(r.get("pcie.link.width.current"), int)]
        if not gens or not widths:
            out.append(f"GPU {i}: no PCIe link reading ({how})")
            continue
        gen, lanes = max(gens), max(widths)
        if gen < generation or lanes < width:
            cap = max((r["pcie.link.gen.max"] for r in samples if isinstance(r.get("pcie.link.gen.max"), int)),
                      default=None)
            slot = f"; its slot trains to Gen{cap} at most" if loaded and cap is not None and cap < generation else ""
            n = f" over {len(samples)} samples" if loaded else ""
            out.append(f"GPU {i}: PCIe Gen{gen} x{lanes} ({how}{n}), the profile says Gen{generation} "
                       f"x{width}{slot}")
    return out


def hca_pcie_verdict(speeds: dict[str, str], widths: dict[str, str], rails: list[Rail],
                     device_ids: dict[str, str]) -> tuple[list[str], list[str]]:
    """(problems, unjudged) over each HCA a rail lists, judged on what its sysfs link files read.

    An SR-IOV VF (``device_ids``: ``device/device`` per HCA, an mlx5 VF ID) has no PCIe link of its
    own and reads ``Unknown`` and width 0 (Azure ND H100 v5 passes its IB HCAs to the VM as VFs):
    what reads so is unjudged, with the reason, and the readable half is still judged. On a
    physical function the same reading is a problem.
    """
    out: list[str] = []
    unjudged: list[str] = []
    for rail in rails:
        for hca in rail.device_names():
            if rail.pcie_generation is None and rail.pcie_width is None:
                continue
            who = f"{hca} (rail {rail.name})"
            if hca not in speeds and hca not in widths:
                out.append(f"{who}: no PCIe link reading")
                continue
            speed, width = speeds.get(hca), (widths.get(hca) or "").strip().lstrip("x")
            gen = pcie_gen(speed)
            vf = is_mlx5_vf(device_ids.get(hca))
            blank = []
            if rail.pcie_generation is not None:
                if gen is None and vf:
                    blank.append(f"current_link_speed {speed!r}")
                elif gen != rail.pcie_generation:
                    out.append(f"{who}: {speed} (Gen{gen}), the rail says Gen{rail.pcie_generation}")
            if rail.pcie_width is not None:
                if width in ("", "0") and vf:
                    blank.append(f"current_link_width {width or 'unreadable'}")
                elif width != str(rail.pcie_width):
                    out.append(f"{who}: x{width}, the rail says x{rail.pcie_width}")
            if blank:
                unjudged.append(f"{who}: SR-IOV VF {device_ids.get(hca)} reads {', '.join(blank)}: "
                                "a VF has no PCIe link of its own")
    return out, unjudged


def nvlink_speed_problems(gpus: list[dict[str, Any]], gbytes_per_link: float) -> list[str]:
    """Every NVLink up at the profile's speed (GB/s per link, as nvidia-smi nvlink -s prints it)."""
    out = []
    for g in gpus:
        if g.get("all_inactive"):
            out.append(f"GPU {g.get('index')}: all NVLinks inactive")
            continue
        slow = [f"{x.get('link')}: {x.get('speed_gbytes_per_s') or x.get('state')}" for x in g.get("links", [])
                if x.get("state") != "active" or abs((x.get("speed_gbytes_per_s") or 0) - gbytes_per_link) > 0.01]
        if slow:
            out.append(f"GPU {g.get('index')}: links not at {gbytes_per_link} GB/s ({'; '.join(slow[:8])})")
    return out


def nvlink_error_problems(gpus: list[dict[str, Any]], limit: int = 0) -> list[str]:
    """Replay, recovery and CRC counters of every link at most ``limit``; unreadable ones fail."""
    out = []
    read = 0
    for g in gpus:
        for link in g.get("links", []):
            counters = link.get("counters", {})
            for name in NVLINK_COUNTERS:
                if name not in counters:
                    continue
                read += 1
                value = counters[name]
                if value is None or value > limit:
                    out.append(f"GPU {g.get('index')} link {link.get('link')}: {name} {value}")
    if not read:
        # Output without any of the counters (another nvidia-smi's names, or none at all) shows nothing.
        out.append(f"no NVLink error counter read ({', '.join(NVLINK_COUNTERS)}) in nvidia-smi nvlink -e")
    return out


# The Xids NVIDIA's Xid catalog attributes to user applications, not to the GPU, the driver or
# the node: https://docs.nvidia.com/deploy/xid-errors/analyzing-xid-catalog.html (Trigger
# Conditions and Resolution Bucket columns). Each one is a figure of GC-GPU-007, never its failure;
# every other Xid fails the node.
APPLICATION_XIDS: dict[int, str] = {
    # ROBUST_CHANNEL_GR_EXCEPTION, "logged for general user application faults" (out-of-bounds
    # access, illegal instruction); immediate action RESTART_APP.
    13: "Graphics Engine Exception",
    # ROBUST_CHANNEL_FIFO_ERROR_MMU_ERR_FLT, an illegal address access: "Typically these are
    # application-level bugs"; immediate action RESTART_APP.
    31: "GPU memory page fault",
    # ROBUST_CHANNEL_RESETCHANNEL_VERIF_ERROR: "a user application hits a software induced fault
    # and must terminate. The GPU remains in a healthy state"; immediate action IGNORE.
    43: "GPU stopped processing",
    # ROBUST_CHANNEL_PREEMPTIVE_REMOVAL: the driver tearing down an application that aborted
    # (Control-C, sigkill, GPU reset). The Xid it follows (48, 94, 95) fails on its own.
    45: "Preemptive cleanup, due to previous errors",
}


def _xid_counts(events: list[XidEvent], application: bool) -> list[str]:
    counts = Counter((e.pci, e.xid) for e in events if (e.xid in APPLICATION_XIDS) == application)
    return [f"Xid {xid} on PCI {pci} ({n}x)" for (pci, xid), n in sorted(counts.items())]


def xid_problems(events: list[XidEvent], unreadable: int) -> list[str]:
    """Every Xid the catalog does not attribute to a user application, by PCI address and number."""
    out = _xid_counts(events, application=False)
    if unreadable:
        out.append(f"{unreadable} Xid line(s) that could not be read")
    return out


def application_xids(events: list[XidEvent]) -> list[str]:
    """The Xids APPLICATION_XIDS lists, by PCI address and number: reported, not failed."""
    return _xid_counts(events, application=True)


def sxid_problems(events: list[SxidEvent], unreadable: int) -> list[str]:
    """Every fatal NVSwitch SXid, and every one whose first line states no severity."""
    counts = Counter((e.switch or "nvswitch", e.pci, e.sxid, e.fatal) for e in events if e.fatal is not False)
    out = [f"{'fatal' if fatal else 'unclassified'} SXid {sxid} on {switch} (PCI {pci}) ({n}x)"
           for (switch, pci, sxid, fatal), n in sorted(counts.items(), key=lambda kv: kv[0][:3])]
    if unreadable:
        out.append(f"{unreadable} SXid line(s) that could not be read")
    return out


def nonfatal_sxids(events: list[SxidEvent]) -> list[str]:
    """The non-fatal SXids, by NVSwitch and code: reported, not failed."""
    counts = Counter((e.switch or "nvswitch", e.pci, e.sxid) for e in events if e.fatal is False)
    return [f"non-fatal SXid {sxid} on {switch} (PCI {pci}) ({n}x)"
            for (switch, pci, sxid), n in sorted(counts.items())]


def clocks_problems(gpus: list[dict[str, Any]]) -> list[str]:
    out = []
    for g in gpus:
        active = g.get("clocks_event_reasons_active")
        if active is None:
            out.append(f"GPU {g.get('index')}: no clocks event reasons read")
            continue
        slow = [r for r in active if r in SLOWDOWN_REASONS]
        if slow:
            out.append(f"GPU {g.get('index')}: {', '.join(slow)} active")
    return out


def ib_port_problems(ports: list[IbPort], rates: dict[str, float]) -> list[str]:
    """Every port ACTIVE at its rail's rate (``rates``: HCA -> Gb/s; an HCA not listed is not judged)."""
    out = []
    for p in ports:
        want = rates.get(p.hca)
        if want is None:
            continue
        if p.state != "ACTIVE" or p.rate_gbps != want:
            out.append(f"{p.hca}/{p.port}: {p.state} at {p.rate_gbps} Gb/s, expected ACTIVE at {want:g}")
    return out


def ib_counter_problems(before: list[IbPort], after: list[IbPort]) -> list[str]:
    """symbol_error, link_downed, port_rcv_errors: zero before, and no growth while the run lasted
    (a link_downed step during the run is a link flap)."""
    old = {(p.hca, p.port): p for p in before}
    out = []
    for p in after:
        prev = old.get((p.hca, p.port))
        for name, value in sorted(p.counters.items()):
            was = prev.counters.get(name) if prev else None
            if value is None:
                out.append(f"{p.hca}/{p.port}: {name} unreadable")
            elif was is not None and value > was:
                flap = " (link flapped)" if name == "link_downed" else ""
                out.append(f"{p.hca}/{p.port}: {name} rose {was} -> {value} during the run{flap}")
            elif value > 0:
                out.append(f"{p.hca}/{p.port}: {name} {value}")
    return out


def firmware_outliers(fleet: dict[str, dict[str, str]]) -> dict[str, list[str]]:
    """{node: ["hca fw X, the fleet runs Y"]} for every HCA whose firmware differs from the most common one."""
    counts = Counter(fw for hcas in fleet.values() for fw in hcas.values())
    if len(counts) <= 1:
        return {}
    common, _ = counts.most_common(1)[0]
    out: dict[str, list[str]] = {}
    for node, hcas in sorted(fleet.items()):
        odd = [f"{hca} firmware {fw}, the fleet runs {common}" for hca, fw in sorted(hcas.items()) if fw != common]
        if odd:
            out[node] = odd
    return out


def gdr_problems(runs: list[dict[str, Any]], floor_gbps: float) -> list[str]:
    """ib_write_bw --use_cuda per GPU/HCA pair: each run ok and its bandwidth at the floor. A run
    between nodes names its peer and the peer's HCA (``peer``, ``peer_hca``)."""
    out = []
    for r in runs:
        where = f"GPU {r.get('gpu')} / {r.get('hca')}"
        if r.get("peer"):
            where += f" -> {r.get('peer')} {r.get('peer_hca')}"
        if r.get("status") != "ok":
            out.append(f"{where}: {r.get('status')} ({'; '.join(map(str, r.get('notes', [])[:3]))})")
        elif (r.get("peak_gbps") or 0) < floor_gbps:
            out.append(f"{where}: {r.get('peak_gbps')} Gb/s under the floor {floor_gbps:g}")
    return out


def efa_problems(devices: list[str], expected: int) -> list[str]:
    if len(devices) != expected:
        listed = ", ".join(devices) or "none"
        return [f"fi_info -p efa lists {len(devices)} EFA device(s) ({listed}), expected {expected}"]
    return []


def ofi_problems(net: NcclNet) -> list[str]:
    """NCCL must have loaded the OFI plugin over the efa provider (not its sockets or IB transport)."""
    out = []
    if not any("Libfabric" in n for n in net.networks):
        out.append(f"NCCL used network {', '.join(net.networks) or 'unknown'}, not the OFI plugin (AWS Libfabric)")
    if "efa" not in net.providers:
        out.append(f"the OFI plugin selected provider {', '.join(net.providers) or 'none'}, not efa")
    return out


# nvbandwidth's host-device copy tests (GC-PCIE-003) and how the figures name their direction.
COPY_TESTS = (("host_to_device_memcpy_ce", "h2d"), ("device_to_host_memcpy_ce", "d2h"))


def host_device_copies(parsed: dict[str, Any]) -> list[tuple[str, str, float]]:
    """(direction, GPU index, GB/s) of every host-device copy nvbandwidth measured: the figures."""
    tests = {t["name"]: t for t in parsed.get("tests", [])}
    return [(direction, str(gpu), float(gbps)) for name, direction in COPY_TESTS
            for gpu, gbps in sorted(tests.get(name, {}).get("per_gpu_gbps", {}).items(), key=lambda kv: int(kv[0]))
            if isinstance(gbps, int | float)]


def nvbandwidth_problems(parsed: dict[str, Any], gpus: int, floor_gbps: float) -> list[str]:
    out = verdict_problems(parsed, "nvbandwidth")
    tests = {t["name"]: t for t in parsed.get("tests", [])}
    for name, _ in COPY_TESTS:
        per_gpu = tests.get(name, {}).get("per_gpu_gbps", {})
        if not per_gpu:
            out.append(f"{name}: no result")
            continue
        for i in range(gpus):
            value = per_gpu.get(str(i))
            if value is None or value < floor_gbps:
                out.append(f"{name} GPU {i}: {value} GB/s under the floor {floor_gbps:g}")
    return out
