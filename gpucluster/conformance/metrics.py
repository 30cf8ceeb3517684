"""Each node's Prometheus textfile (node_exporter's textfile collector), written with
prometheus_client.

Naming follows Prometheus' conventions: one family per quantity, its unit in the name in base
units (``_bytes_per_second``, ``_seconds``, ``_celsius``), and what varies within a quantity (the
peer, the service, the GPU, the read or write direction) in labels, never in the name. Every
family carries ``cluster`` and ``node``, so the files of many clusters can meet in one Prometheus.
A check that failed still exports what it measured: a shortfall is what a dashboard must show.

The checks record figures under keys that name their unit (``busbw_gbps``, ``offset_s``,
``min_hca_gbps_<peer>``); :data:`FIGURES` says how each key becomes a sample, and the HTML report
reads the same table for its figures and floors. Textual figures (versions, states) are listed
in :data:`TEXT_FIGURES` and stay in ``results.json``; a unit test keeps both tables in step with
the keys the suite records.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from prometheus_client import CollectorRegistry, generate_latest, write_to_textfile
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from gpucluster import runs

if TYPE_CHECKING:
    from gpucluster.conformance.report_data import Report

PREFIX = "gpucluster_conformance"
# On every family: which file a sample came from, whatever Prometheus relabels.
BASE_LABELS = ("cluster", "node")
# On every per-check family. ``service`` is the check's parameter (the service GC-SYS-003 looks at),
# empty for a check that runs once per node.
CHECK_LABELS = (*BASE_LABELS, "check", "service")

PASS = f"{PREFIX}_pass"
CHECK_OUTCOME = f"{PREFIX}_check_outcome"
CHECK_DURATION = f"{PREFIX}_check_duration_seconds"
LAST_RUN = f"{PREFIX}_last_run_timestamp_seconds"

GB = 1e9  # nccl-tests' GB/s and ib_write_bw's Gb/s are decimal
MIB = float(1 << 20)  # rados bench's "MB/sec" is MiB/s
TERA = 1e12


@dataclass(frozen=True)
class Figure:
    """How the figures whose key matches ``pattern`` become samples of one family."""

    pattern: str  # full match; named groups become labels
    family: str
    help: str
    scale: float  # from the figure's own unit to the family's base unit
    unit: str  # the figure's own unit, as the HTML report prints it
    title: str  # how the HTML report names it; {group} fields from the pattern
    # The figure key that holds this figure's floor, in the same check; {group} fields from the pattern
    # (a burn's floor is per precision: burn_floor_tflops_{precision}).
    floor: str | None = None
    fixed: tuple[tuple[str, str], ...] = ()  # labels the key implies without spelling them
    is_floor: bool = False  # a floor: the reports show it beside its figure, not as a figure of its own

    @property
    def labels(self) -> tuple[str, ...]:
        return (*re.compile(self.pattern).groupindex, *(k for k, _ in self.fixed))


def _f(name: str) -> str:
    return f"{PREFIX}_{name}"


FIGURES: tuple[Figure, ...] = (
    Figure("busbw_gbps", _f("allreduce_busbw_bytes_per_second"),
           "All-reduce bus bandwidth at large message sizes (the figure judged against the floor).",
           GB, "GB/s", "bus bandwidth", floor="floor_gbps"),
    Figure("floor_gbps", _f("allreduce_busbw_floor_bytes_per_second"),
           "The hardware profile's floor for the all-reduce bus bandwidth.", GB, "GB/s", "bus bandwidth floor",
           is_floor=True),
    Figure("pair_busbw_gbps_(?P<peer>.+)", _f("allreduce_pair_busbw_bytes_per_second"),
           "All-reduce bus bandwidth of the two-node run with the peer.", GB, "GB/s",
           "pair bus bandwidth with {peer}", floor="floor_gbps"),
    Figure("min_hca_gbps_(?P<peer>.+)", _f("rdma_write_min_hca_bytes_per_second"),
           "ib_write_bw to the peer on the node's slowest HCA.", GB / 8, "Gb/s",
           "RDMA write, slowest HCA, with {peer}", floor="rdma_floor_gbps"),
    Figure("gdr_gbps_(?P<device>[^_]+)_(?P<hca>.+)", _f("rdma_write_gpu_memory_bytes_per_second"),
           "ib_write_bw from the GPU's memory (GPUDirect RDMA) on the HCA nearest it, to the peer.", GB / 8,
           "Gb/s", "GPUDirect RDMA write, {device} on {hca}", floor="rdma_floor_gbps"),
    Figure("rdma_floor_gbps", _f("rdma_write_floor_bytes_per_second"),
           "The platform's floor for RDMA write bandwidth per HCA.", GB / 8, "Gb/s", "RDMA write floor",
           is_floor=True),
    Figure("copy_gbps_(?P<direction>[^_]+)_(?P<device>.+)", _f("host_device_copy_bytes_per_second"),
           "nvbandwidth's host-to-device (h2d) and device-to-host (d2h) copy bandwidth per GPU.", GB, "GB/s",
           "{direction} copy {device}", floor="copy_floor_gbps"),
    Figure("copy_floor_gbps", _f("host_device_copy_floor_bytes_per_second"),
           "The hardware profile's floor for host-device copies per GPU.", GB, "GB/s", "copy floor", is_floor=True),
    Figure("ranks", _f("allreduce_ranks"), "Ranks of the all-reduce run.", 1, "", "ranks"),
    Figure("offset_s", _f("clock_offset_seconds"), "chrony's system time offset.", 1, "s", "clock offset"),
    Figure("mtu", _f("link_mtu_bytes"), "MTU of the fabric link.", 1, "B", "MTU"),
    Figure("mtu_(?P<rail>.+)", _f("rail_mtu_bytes"), "MTU of a compute rail's link.", 1, "B", "MTU of {rail}"),
    Figure("rails", _f("compute_rails"), "Addressed compute rails of the node.", 1, "", "compute rails"),
    Figure("provider_ports_addressed", _f("provider_ports_addressed"),
           "Compute ports the provider addresses that carry an address in its range (GC-NET-001).", 1, "",
           "provider ports addressed"),
    Figure("hcas", _f("rdma_hcas"), "RDMA HCAs the node shows.", 1, "", "HCAs"),
    Figure("gpus", _f("gpus"), "GPUs nvidia-smi shows.", 1, "", "GPUs"),
    Figure("gpus_seen", _f("container_gpus"), "GPUs nvidia-container-cli shows.", 1, "",
           "GPUs seen by containers"),
    Figure("xid_lines", _f("xid_log_lines"), "NVRM Xid lines in the kernel log since boot (at most 5 counted).",
           1, "", "Xid log lines"),
    Figure("gpu_burn_max_temp_c", _f("burn_gpu_max_temperature_celsius"),
           "Hottest GPU temperature during the burn.", 1, "°C", "max GPU temperature (gpu-burn)",
           fixed=(("engine", "gpu-burn"),)),
    Figure("burn_torch_max_temp_c", _f("burn_gpu_max_temperature_celsius"),
           "Hottest GPU temperature during the burn.", 1, "°C", "max GPU temperature (burn_torch)",
           fixed=(("engine", "burn_torch"),)),
    # Engines may hold "_" (burn_torch); devices (gpu0, cuda:0) and precisions (fp32) do not.
    Figure("tflops_(?P<engine>.+)_(?P<device>[^_]+)_(?P<precision>[^_]+)",
           _f("burn_floating_point_operations_per_second"),
           "Sustained matrix-multiply throughput during the burn, per GPU and precision.", TERA, "TFLOP/s",
           "burn throughput {device} {precision} ({engine})", floor="burn_floor_tflops_{precision}"),
    Figure("burn_floor_tflops_(?P<precision>[^_]+)", _f("burn_floor_floating_point_operations_per_second"),
           "The hardware profile's burn floor per GPU and precision.", TERA, "TFLOP/s", "burn floor {precision}",
           is_floor=True),
    Figure("matmul_peak_tflops_(?P<device>[^_]+)_(?P<precision>[^_]+)",
           _f("matmul_peak_floating_point_operations_per_second"),
           "Peak matrix-multiply throughput, per GPU and precision.", TERA, "TFLOP/s",
           "peak matmul {device} {precision}"),
    Figure("(?P<direction>write|read)_mib_s", _f("rados_bench_bytes_per_second"),
           "rados bench throughput.", MIB, "MiB/s", "rados bench {direction}"),
    Figure("(?P<direction>write|read)_iops", _f("rados_bench_operations_per_second"),
           "rados bench operations per second.", 1, "IOPS", "rados bench {direction} IOPS"),
    Figure("(?P<direction>write|read)_latency_s", _f("rados_bench_latency_seconds"),
           "rados bench average latency.", 1, "s", "rados bench {direction} latency"),
    Figure("osds", _f("ceph_osds"), "OSDs in the Ceph OSD tree.", 1, "", "OSDs"),
    # The fleet comparison (GC-FLEET-001): the node's figure and the fleet's median as one family per
    # quantity, the statistic a label; which figure it is (burn precision and engine) is the check's
    # parameter, in ``service`` like every per-check family.
    Figure("fleet_(?P<statistic>node|median)_tflops", _f("fleet_floating_point_operations_per_second"),
           "Burn throughput of the node's slowest GPU and the fleet's median of it.", TERA, "TFLOP/s",
           "fleet {statistic} TFLOP/s"),
    Figure("fleet_(?P<statistic>node|median)_busbw_gbps", _f("fleet_allreduce_busbw_bytes_per_second"),
           "Intra-node all-reduce bus bandwidth of the node and the fleet's median of it.", GB, "GB/s",
           "fleet {statistic} bus bandwidth"),
    Figure("fleet_(?P<statistic>node|median)_hca_gbps", _f("fleet_rdma_write_bytes_per_second"),
           "RDMA write bandwidth of the node's best pair (slowest HCA) and the fleet's median of it.", GB / 8,
           "Gb/s", "fleet {statistic} RDMA write"),
    Figure("fleet_margin", _f("fleet_margin_ratio"),
           "How far below the fleet median a node's figure may fall (a fraction).", 1, "", "fleet margin"),
    Figure("fleet_nodes", _f("fleet_nodes"), "Nodes that measured the figure the fleet median is taken over.", 1,
           "", "fleet nodes"),
    Figure("osds_up_in", _f("ceph_osds_up_in"), "OSDs both up and in.", 1, "", "OSDs up and in"),
    Figure("pgs", _f("ceph_placement_groups"), "Ceph placement groups.", 1, "", "placement groups"),
    Figure("pgs_active_clean", _f("ceph_placement_groups_active_clean"), "Ceph placement groups active+clean.", 1,
           "", "placement groups active+clean"),
)

# Figures that are words, not quantities: they stay in results.json and the reports' text.
TEXT_FIGURES = frozenset({
    "os_id", "os_codename", "os_version_id", "os_declared", "kernel", "driver_version", "cuda_version",
    "nccl_version", "leap_status",
    "nftables_service", "ssh_sources", "apt_http_proxy", "state", "operstate", "health", "health_checks", "quorum",
    "fstype", "engine", "nccl_pinned", "interface", "failed_ports", "failed_rails",
    "engines", "pair_status", "rail_status", "series", "fleet_figure", "fleet_unit", "fleet_source", "fleet_members",
    "fleet_where",
})

_COMPILED = tuple((re.compile(f.pattern), f) for f in FIGURES)


@dataclass(frozen=True)
class Measured:
    """One numeric figure of one check, classified."""

    key: str
    figure: Figure
    labels: dict[str, str]  # from the key (peer, device, direction...)
    value: float  # in the figure's own unit

    @property
    def title(self) -> str:
        return self.figure.title.format(**self.labels)


def classify(key: str) -> tuple[Figure, dict[str, str]] | None:
    """The figure a key records and the labels its key spells; None for a key no family takes."""
    for pattern, fig in _COMPILED:
        m = pattern.fullmatch(key)
        if m:
            return fig, {**m.groupdict(), **dict(fig.fixed)}
    return None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    v = float(value)
    return v if math.isfinite(v) else None


def measured(figures: dict[str, Any]) -> list[Measured]:
    """The numeric figures of a check that a family takes, sorted by key."""
    out = []
    for key, value in sorted(figures.items()):
        v = _number(value)
        found = classify(key)
        if v is None or found is None:
            continue
        out.append(Measured(key, found[0], found[1], v))
    return out


def floor_of(m: Measured, figures: dict[str, Any]) -> float | None:
    """The floor the check recorded beside the figure, in the figure's own unit."""
    return _number(figures.get(m.figure.floor.format(**m.labels))) if m.figure.floor else None


class NodeCollector(Collector):
    """One node's families, built once from the report: what prometheus_client serialises."""

    def __init__(self, report: Report, node: str) -> None:
        self.report = report
        self.node = node

    def collect(self) -> Iterator[Metric]:
        base = [str(self.report.meta.get("cluster", "")), self.node]
        families: dict[str, GaugeMetricFamily] = {}

        def family(name: str, doc: str, labels: tuple[str, ...]) -> GaugeMetricFamily:
            if name not in families:
                families[name] = GaugeMetricFamily(name, doc, labels=list(labels))
            return families[name]

        verdict = next((v for v in self.report.verdicts if v.node == self.node), None)
        family(PASS, "1 when the node passed the conformance suite, 0 when it did not.", BASE_LABELS).add_metric(
            base, 1.0 if verdict is not None and verdict.verdict == "pass" else 0.0)
        mine = sorted((r for r in self.report.results if r.node == self.node), key=lambda r: r.label)
        for r in mine:
            check = [*base, r.check_id, r.param or ""]
            outcomes = family(CHECK_OUTCOME, "1 for the check's outcome (passed, failed, skipped, error), else 0.",
                              (*CHECK_LABELS, "outcome"))
            for outcome in ("passed", "failed", "skipped", "error"):
                outcomes.add_metric([*check, outcome], 1.0 if r.outcome == outcome else 0.0)
            family(CHECK_DURATION, "How long the check took.", CHECK_LABELS).add_metric(check, r.duration_s)
        for r in mine:
            check = [*base, r.check_id, r.param or ""]
            for m in measured(r.figures):
                fam = family(m.figure.family, m.figure.help, (*CHECK_LABELS, *m.figure.labels))
                fam.add_metric([*check, *(m.labels[k] for k in m.figure.labels)], m.value * m.figure.scale)
        ts = _number(self.report.meta.get("finished_unix"))
        if ts is not None:
            family(LAST_RUN, "When the conformance suite finished (Unix time).", BASE_LABELS).add_metric(
                base, float(round(ts)))
        yield from families.values()


def registry_for(report: Report, node: str) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(NodeCollector(report, node))
    return registry


def textfile(report: Report, node: str) -> str:
    """The node's textfile as text (the exposition format node_exporter reads)."""
    return generate_latest(registry_for(report, node)).decode("utf-8")


def write_textfile(report: Report, node: str, path: Path) -> None:
    """Write the node's textfile whole or not at all (prometheus_client renames a temporary file
    in the same folder over it), readable by its owner only like the rest of the run folder."""
    write_to_textfile(str(path), registry_for(report, node))
    os.chmod(path, runs.RUN_FILE_MODE)
