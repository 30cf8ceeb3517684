"""Fleet-relative verdicts (GC-FLEET-001): a node more than a margin below the fleet's median fails,
even above the hardware profile's absolute floor.

A floor is set low enough for every healthy machine of a type, so a GPU throttled to 60 % of its
peers, or a node whose NVLink all-reduce runs at 70 % of the others', still clears it. Nodes of
one profile in one run are the better yardstick: each figure below is taken per node, and a node
more than ``margin`` (a fraction, default :data:`DEFAULT_MARGIN`; the inventory's
``gpucluster_conformance.fleet_margin``, ``gpucluster verify --fleet-margin``) below the median of
the nodes that measured it fails. The median needs at least :data:`MIN_NODES` nodes: with two,
neither can be told from the other, so the rule gives no verdict and says so (a skipped result).

The figures, per node, from the checks that measure them:

- GPU burn throughput (GC-BURN-001), per engine and precision: the node's slowest GPU, so one
  throttled GPU is not averaged away by the others;
- intra-node all-reduce bus bandwidth (GC-AR-001);
- RDMA write bandwidth (GC-RDMA-001): the node's best pair, whose figure is its slowest HCA
  with that peer. A slow node is slow with every peer; a slow link only with one, and that is the
  pair search's to name, not a mark against both ends.

The node-pair all-reduce (GC-AR-003) is left to the pair search, which already compares each node
with its peers: a node's best pair on a three-node ring is the second-best pair of the run for one
of them, and the CPU all-reduce of the lab spreads 0.20-0.33 GB/s between runs (cpu-lab profile),
more than any margin worth setting. The ring all-reduce (GC-AR-002) is one figure for all nodes.

Everything here is pure: :func:`judge` over one figure's per-node values, :func:`fleet_results`
over a run's results. The suite's controller adds what the latter returns to the run's results,
so the fleet's verdicts are in every report and count toward the exit code.
"""

from __future__ import annotations

import math
import re
import statistics
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from gpucluster.conformance.verdict import CLUSTER, CheckResult, Outcome
from gpucluster.spec.facts import FLEET_MARGIN_DEFAULT

FLEET_CHECK = "GC-FLEET-001"
# The spec's default (conformance.fleet_margin), for a run whose inventory and command line give none.
DEFAULT_MARGIN = FLEET_MARGIN_DEFAULT
MIN_NODES = 3


def check_margin(value: Any, field: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | str):
        raise ValueError(f"{field}: must be a fraction from 0 to below 1 (0.10 for 10 %), got {value!r}")
    try:
        margin = float(value)
    except ValueError:
        raise ValueError(f"{field}: must be a fraction from 0 to below 1 (0.10 for 10 %), got {value!r}") from None
    if not (math.isfinite(margin) and 0 <= margin < 1):
        raise ValueError(f"{field}: must be a fraction from 0 to below 1 (0.10 for 10 %), got {value!r}")
    return margin


# --- the rule over one figure ----------------------------------------------------------------


@dataclass(frozen=True)
class Judgement:
    """One figure across the fleet: each node's value, the median and the margin."""

    values: dict[str, float]  # node -> its figure
    margin: float

    @property
    def judged(self) -> bool:
        """Whether the fleet is large enough for a median to mean anything."""
        return len(self.values) >= MIN_NODES

    @property
    def median(self) -> float | None:
        return statistics.median(self.values.values()) if self.judged else None

    @property
    def threshold(self) -> float | None:
        """The lowest figure that passes: the median less the margin."""
        m = self.median
        return None if m is None else m * (1 - self.margin)

    def below(self, node: str) -> bool:
        """The node is more than the margin below the median (never, without a median)."""
        t = self.threshold
        return t is not None and self.values[node] < t

    def ratio(self, node: str) -> float | None:
        m = self.median
        return None if not m else self.values[node] / m

    @property
    def failing(self) -> list[str]:
        return sorted(n for n in self.values if self.below(n))


def judge(values: Mapping[str, float], margin: float = DEFAULT_MARGIN) -> Judgement:
    """The fleet rule over one figure's per-node values (non-finite values are left out)."""
    return Judgement({n: float(v) for n, v in values.items() if math.isfinite(float(v))}, margin)


# --- the figures, from a run's results ---------------------------------------------------------


@dataclass(frozen=True)
class Quantity:
    """One figure the rule compares across nodes."""

    param: str  # the fleet result's parameter: burn-fp32-gpu-burn, allreduce-intra, rdma-write
    source: str  # the check that measures it
    title: str  # the figure in words
    unit: str
    stem: str  # figure keys of the fleet result: fleet_node_<stem>, fleet_median_<stem>


@dataclass(frozen=True)
class NodeFigure:
    value: float
    where: str = ""  # which part of the node: "on gpu3", "with gpu-2" ("" for the node as a whole)


_BURN = re.compile(r"tflops_(?P<engine>.+)_(?P<device>[^_]+)_(?P<precision>[^_]+)")
_RDMA = re.compile(r"min_hca_gbps_(?P<peer>.+)")
INTRA = Quantity("allreduce-intra", "GC-AR-001", "intra-node all-reduce busbw", "GB/s", "busbw_gbps")
RDMA = Quantity("rdma-write", "GC-RDMA-001", "RDMA write bandwidth (best pair, slowest HCA)", "Gb/s", "hca_gbps")
SOURCES = ("GC-BURN-001", INTRA.source, RDMA.source)


def _num(v: Any) -> float | None:
    if isinstance(v, bool) or not isinstance(v, int | float):
        return None
    return float(v) if math.isfinite(v) else None


def _burn(engine: str, precision: str) -> Quantity:
    return Quantity(f"burn-{precision}-{engine}", "GC-BURN-001", f"burn {precision} TFLOP/s ({engine}, slowest GPU)",
                    "TFLOP/s", "tflops")


def node_figures(results: list[CheckResult]) -> dict[str, tuple[Quantity, dict[str, NodeFigure]]]:
    """param -> (the quantity, node -> its figure), from every check that measured one, failed
    or not: a node under the floor is still part of the fleet."""
    out: dict[str, tuple[Quantity, dict[str, NodeFigure]]] = {}

    def put(q: Quantity, node: str, fig: NodeFigure) -> None:
        out.setdefault(q.param, (q, {}))[1][node] = fig

    for r in results:
        if r.node == CLUSTER:
            continue
        f = r.figures
        if r.check_id == "GC-BURN-001":
            slowest: dict[tuple[str, str], NodeFigure] = {}
            for key, value in f.items():
                m, v = _BURN.fullmatch(key), _num(value)
                if m is None or v is None:
                    continue
                k = (m["engine"], m["precision"])
                if k not in slowest or v < slowest[k].value:
                    slowest[k] = NodeFigure(v, f"on {m['device']}")
            for (engine, precision), fig in slowest.items():
                put(_burn(engine, precision), r.node, fig)
        elif r.check_id == INTRA.source:
            v = _num(f.get("busbw_gbps"))
            if v is not None:
                put(INTRA, r.node, NodeFigure(v))
        elif r.check_id == RDMA.source:
            best: NodeFigure | None = None
            for key, value in f.items():
                m, v = _RDMA.fullmatch(key), _num(value)
                if m is not None and v is not None and (best is None or v > best.value):
                    best = NodeFigure(v, f"with {m['peer']}")
            if best is not None:
                put(RDMA, r.node, best)
    return dict(sorted(out.items()))


def short(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def _pct(fraction: float) -> str:
    return f"{fraction * 100:.3g} %"


def sentence(q: Quantity, node: str, fig: NodeFigure, j: Judgement) -> str:
    """The node's figure against the fleet's, in one sentence."""
    where = f" {fig.where}" if fig.where else ""
    n = len(j.values)
    if not j.judged:
        return (f"{q.title} measured on {n} node(s), at least {MIN_NODES} needed for a fleet median: "
                "no fleet verdict")
    median, threshold, ratio = j.median, j.threshold, j.ratio(node)
    assert median is not None and threshold is not None and ratio is not None
    how = f"{_pct(1 - ratio)} below" if ratio < 1 else f"{_pct(ratio - 1)} above" if ratio > 1 else "at"
    return (f"{q.title} {short(fig.value)} {q.unit}{where} is {how} the fleet median {short(median)} {q.unit} of {n} "
            f"nodes; margin {_pct(j.margin)}: at least {short(threshold)} {q.unit}")


def fleet_results(results: list[CheckResult], margin: float = DEFAULT_MARGIN) -> list[CheckResult]:
    """One GC-FLEET-001 result per node and figure: failed when the node is more than ``margin``
    below the median of the nodes that measured the figure, passed when not, skipped (with the
    reason) when fewer than :data:`MIN_NODES` nodes measured it. A failure shares the cause its
    source check recorded on the node (the fabric's slow node), else the node's own fleet cause,
    so that one node's shortfalls are one finding."""
    sources = {(r.node, r.check_id): r for r in results}
    out: list[CheckResult] = []
    for q, per_node in node_figures(results).values():
        j = judge({n: fig.value for n, fig in per_node.items()}, margin)
        members = ",".join(sorted(j.values))
        for node, fig in sorted(per_node.items()):
            figures: dict[str, Any] = {
                f"fleet_node_{q.stem}": fig.value, "fleet_margin": margin, "fleet_nodes": len(j.values),
                "fleet_figure": q.title, "fleet_unit": q.unit, "fleet_source": q.source, "fleet_members": members,
            }
            if fig.where:
                figures["fleet_where"] = fig.where
            if j.median is not None:
                figures[f"fleet_median_{q.stem}"] = j.median
            failed = j.below(node)
            outcome: Outcome = "failed" if failed else "passed" if j.judged else "skipped"
            cause = ""
            if failed:
                src = sources.get((node, q.source))
                cause = src.cause if src is not None and src.cause else f"fleet:{node}"
            out.append(CheckResult(node=node, check_id=FLEET_CHECK, outcome=outcome,
                                   message="" if outcome == "passed" else sentence(q, node, fig, j),
                                   figures=figures, param=q.param, cause=cause))
    return out


# --- read back from a result, for the reports ----------------------------------------------------


@dataclass(frozen=True)
class Comparison:
    """One node's figure beside the fleet's, as a GC-FLEET-001 result recorded it."""

    node: str
    param: str
    figure: str
    unit: str
    where: str
    value: float
    median: float | None  # None: too few nodes for a median
    margin: float
    nodes: int
    outcome: str
    message: str

    @property
    def threshold(self) -> float | None:
        return None if self.median is None else self.median * (1 - self.margin)

    @property
    def ratio(self) -> float | None:
        return None if not self.median else self.value / self.median

    def text(self) -> str:
        """The figure beside the median and the margin, in a few words."""
        value = f"{short(self.value)} {self.unit}{f' {self.where}' if self.where else ''}"
        if self.median is None:
            return f"{value}; {self.nodes} node(s) measured it, no fleet median under {MIN_NODES}"
        return (f"{value} vs fleet median {short(self.median)} {self.unit} of {self.nodes} nodes "
                f"(margin {_pct(self.margin)}: at least {short(self.threshold or 0.0)} {self.unit})")

    @staticmethod
    def from_result(r: CheckResult) -> Comparison | None:
        f = r.figures
        value_key = next((k for k in f if k.startswith("fleet_node_")), None)
        value = _num(f.get(value_key)) if value_key else None
        margin = _num(f.get("fleet_margin"))
        if r.check_id != FLEET_CHECK or value_key is None or value is None or margin is None:
            return None
        stem = value_key.removeprefix("fleet_node_")
        nodes = _num(f.get("fleet_nodes"))
        return Comparison(r.node, r.param or "", str(f.get("fleet_figure", r.param or "")),
                          str(f.get("fleet_unit", "")), str(f.get("fleet_where", "")), value,
                          _num(f.get(f"fleet_median_{stem}")), margin, int(nodes) if nodes is not None else 0,
                          r.outcome, r.message)


def comparisons(results: list[CheckResult]) -> list[Comparison]:
    """Every fleet comparison of a run, by figure then node."""
    found = (Comparison.from_result(r) for r in results if r.check_id == FLEET_CHECK)
    return sorted((c for c in found if c is not None), key=lambda c: (c.param, c.node))
