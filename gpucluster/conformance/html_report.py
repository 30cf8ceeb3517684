"""The run folder's ``summary.html``, rendered from Jinja2 templates shipped in the package
(``templates/report.html.j2``, the plot in ``templates/plot.svg.j2``).

Python works out what to show (the verdicts, the figures beside their floors, the skipped checks
by reason, the plot's coordinates and ticks); the templates only lay it out, autoescaped. The page
needs no script and no network: an inline SVG, inline CSS, nothing fetched.
"""

from __future__ import annotations

import math
import re
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from jinja2 import Environment, PackageLoader, StrictUndefined
from markupsafe import Markup, escape

from gpucluster.conformance import checks, fleet, metrics
from gpucluster.conformance.report_data import (
    Report,
    Series,
    banner,
    findings,
    provenance,
    publish_outcome,
    verdict_table,
)
from gpucluster.conformance.verdict import CheckResult

REPORT_TEMPLATE = "report.html.j2"
PLOT_TEMPLATE = "plot.svg.j2"

# Plots by the floor their runs are judged against: a node's NVLink all-reduce and the fabric's
# differ by an order of magnitude, and one axis for both would flatten the slower.
PLOT_GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Intra-node all-reduce bus bandwidth", ("GC-AR-001",)),
    ("Inter-node all-reduce bus bandwidth (all nodes and node pairs)", ("GC-AR-002", "GC-AR-003")),
)
FLOOR_KEY = "floor_gbps"

# A run's colour follows its verdict: runs at or above their floor in the healthy colours (no red or
# orange among them), runs under it (or never measured at the size the verdict reads) in reds.
HEALTHY_COLOURS = ("#1f77b4", "#2ca02c", "#9467bd", "#17becf", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22")
SLOW_COLOURS = ("#d62728", "#ff7f0e", "#a50f15", "#e6550d")


def code_spans(text: str) -> Markup:
    """Markdown's `code` spans (the remediation table writes commands so) as <code>, the rest escaped."""
    parts = str(escape(text)).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: leave the text as it is
        return Markup("`".join(parts))
    return Markup("".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(parts)))


def _environment() -> Environment:
    env = Environment(loader=PackageLoader("gpucluster.conformance", "templates"), autoescape=True,
                      undefined=StrictUndefined, trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)
    env.filters["code"] = code_spans
    return env


_ENV = _environment()


# --- formatting ----------------------------------------------------------------------------


def number(v: float) -> str:
    """A figure as a person reads it: integers whole, others to 3 significant digits, no exponent."""
    if float(v).is_integer() and abs(v) < 1e15:
        return f"{int(v):,}".replace(",", "\u2009")
    if v == 0:
        return "0"
    digits = max(0, 2 - math.floor(math.log10(abs(v))))
    return f"{v:.{digits}f}"


def size_label(n: int) -> str:
    """Bytes in binary units: 8 B, 4 KiB, 1.5 MiB, 2 GiB."""
    value = float(n)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if value < 1024 or unit == "TiB":
            text = f"{value:.3g}" if not value.is_integer() else str(int(value))
            return f"{text} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def nice_ticks(top: float, most: int = 6) -> list[float]:
    """0 to at least ``top`` in steps of 1, 2 or 5 times a power of ten, at most ``most`` + 1 ticks."""
    if top <= 0:
        return [0.0, 1.0]
    raw = top / most
    power = 10 ** math.floor(math.log10(raw))
    step = next(m * power for m in (1, 2, 5, 10) if m * power >= raw)
    count = math.ceil(top / step - 1e-9)
    return [round(i * step, 12) for i in range(count + 1)]


# --- the plot ------------------------------------------------------------------------------


@dataclass(frozen=True)
class Tick:
    pos: float
    text: str


@dataclass(frozen=True)
class PlotPoint:
    x: float
    y: float
    size: int
    busbw: float

    @property
    def title(self) -> str:
        return f"{size_label(self.size)}: {number(self.busbw)} GB/s"


@dataclass(frozen=True)
class PlotSeries:
    label: str
    colour: str
    points: tuple[PlotPoint, ...]
    slow: bool = False  # under its floor: drawn in a red, never in a healthy colour

    @property
    def polyline(self) -> str:
        return " ".join(f"{p.x:.1f},{p.y:.1f}" for p in self.points)


@dataclass(frozen=True)
class FloorLine:
    y: float
    gbps: float

    @property
    def text(self) -> str:
        return f"floor {number(self.gbps)} GB/s"


@dataclass(frozen=True)
class Plot:
    title: str
    width: int
    height: int
    left: int
    top: int
    right: int  # x of the frame's right edge
    bottom: int  # y of the frame's bottom edge
    x_ticks: tuple[Tick, ...]
    y_ticks: tuple[Tick, ...]
    series: tuple[PlotSeries, ...]
    floors: tuple[FloorLine, ...]
    rotate_x_labels: bool


def build_plot(title: str, series: list[Series], floors: list[float] | None = None,
               width: int = 760, height: int = 400, slow: frozenset[str] = frozenset()) -> Plot | None:
    """Bus bandwidth against message size: log2 size axis labelled at every measured size,
    linear bandwidth axis from 0 that always shows the floors. None when nothing was measured.
    The runs labelled in ``slow`` are drawn in the slow colours, every other in the healthy ones."""
    drawn = [(s, sorted((size, bw) for size, bw in s.points if size > 0)) for s in series]
    drawn = [(s, pts) for s, pts in drawn if pts]  # a legend entry only where there is a line
    if not drawn:
        return None
    floors = sorted({f for f in floors or [] if f > 0 and math.isfinite(f)})
    sizes = sorted({size for _, pts in drawn for size, _ in pts})
    rotate = len(sizes) > 8
    left, top = 72, 24
    right, bottom = width - 190, height - (92 if rotate else 56)
    lo, hi = math.log2(sizes[0]), math.log2(sizes[-1])
    if hi == lo:
        lo, hi = lo - 1, hi + 1
    top_bw = max([bw for _, pts in drawn for _, bw in pts] + floors) * 1.08
    y_values = nice_ticks(top_bw)
    y_max = y_values[-1]

    def x(size: int) -> float:
        return left + (math.log2(size) - lo) / (hi - lo) * (right - left)

    def y(bw: float) -> float:
        return bottom - bw / y_max * (bottom - top)

    counts = {True: 0, False: 0}

    def colour(is_slow: bool) -> str:
        palette = SLOW_COLOURS if is_slow else HEALTHY_COLOURS
        counts[is_slow] += 1
        return palette[(counts[is_slow] - 1) % len(palette)]

    plotted = tuple(
        PlotSeries(s.label, colour(s.label in slow), tuple(PlotPoint(x(size), y(bw), size, bw) for size, bw in pts),
                   s.label in slow)
        for s, pts in drawn)
    return Plot(
        title=title, width=width, height=height, left=left, top=top, right=right, bottom=bottom,
        x_ticks=tuple(Tick(x(s), size_label(s)) for s in sizes),
        y_ticks=tuple(Tick(y(v), number(v)) for v in y_values),
        series=plotted, floors=tuple(FloorLine(y(f), f) for f in floors), rotate_x_labels=rotate,
    )


def svg_plot(series: list[Series], floors: list[float] | None = None, title: str = "All-reduce bus bandwidth",
             width: int = 760, height: int = 400) -> str:
    """One plot on its own (the report includes the same template per plot)."""
    return _ENV.get_template(PLOT_TEMPLATE).render(plot=build_plot(title, series, floors, width, height))


def plots(report: Report) -> list[Plot]:
    """One plot per group of checks that recorded all-reduce runs, each with its floors; runs
    recorded by several nodes (the all-node run, a pair) are drawn once."""
    out: list[Plot] = []
    grouped: set[str] = set()
    for title, ids in PLOT_GROUPS:
        grouped.update(ids)
        plot = _group_plot(title, [r for r in report.results if r.check_id in ids])
        if plot is not None:
            out.append(plot)
    rest = _group_plot("All-reduce bus bandwidth", [r for r in report.results if r.check_id not in grouped])
    if rest is not None:
        out.append(rest)
    if not out and report.series:  # a report whose runs were given whole, not per check
        plot = build_plot("All-reduce bus bandwidth", report.series)
        if plot is not None:
            out.append(plot)
    return out


def _number(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None


def judged_busbw(run: dict[str, Any], r: CheckResult) -> float | None:
    """The figure a run of ``r``'s series was judged by: the mean bus bandwidth at and above its
    verdict size where the series records that size (None when it never got there), else the pair
    figure ``r`` recorded for it, else ``r``'s bus bandwidth when the run is its only one, else the
    run's best point."""
    points = [(int(a), float(b)) for a, b in run.get("points") or []]
    verdict = run.get("verdict_bytes")
    if isinstance(verdict, int) and verdict > 0:
        at = [bw for size, bw in points if size >= verdict]
        return sum(at) / len(at) if at else None
    label = str(run.get("label", ""))
    if label.startswith("pair:"):
        # pair:<a>+<b>[@rail] (pair:<a>,<b> in older reports): the figure under the other node's name.
        others = [n for n in re.split(r"[+,]", label.removeprefix("pair:").split("@")[0]) if n != r.node]
        figure = _number(r.figures.get(f"pair_busbw_gbps_{others[0]}")) if len(others) == 1 else None
        if figure is not None:
            return figure
    if len(r.figures.get("series") or []) == 1 and _number(r.figures.get("busbw_gbps")) is not None:
        return _number(r.figures["busbw_gbps"])
    return max((bw for _, bw in points), default=None)


def slow_runs(results: list[CheckResult]) -> frozenset[str]:
    """The labels of the runs judged under their floor by any check that recorded them; where a
    check recorded no floor, its one run when the check failed."""
    slow = set()
    for r in results:
        runs_ = r.figures.get("series") or []
        floor = _number(r.figures.get(FLOOR_KEY))
        for run in runs_:
            if floor is None:
                if len(runs_) == 1 and r.outcome in ("failed", "error"):
                    slow.add(str(run["label"]))
                continue
            judged = judged_busbw(run, r)
            if judged is None or judged < floor:
                slow.add(str(run["label"]))
    return frozenset(slow)


def _group_plot(title: str, results: list[CheckResult]) -> Plot | None:
    seen: dict[str, Series] = {}
    floors: list[float] = []
    for r in results:
        runs_ = r.figures.get("series") or []
        if not runs_:
            continue
        for s in runs_:
            seen.setdefault(s["label"], Series(s["label"], [(int(a), float(b)) for a, b in s["points"]]))
        floor = _number(r.figures.get(FLOOR_KEY))
        if floor is not None:
            floors.append(floor)
    return build_plot(title, sorted(seen.values(), key=lambda s: s.label), floors, slow=slow_runs(results))


# --- the page ------------------------------------------------------------------------------


@dataclass(frozen=True)
class FigureRow:
    node: str
    check: str
    name: str
    value: str
    floor: str
    outcome: str
    below: bool = False  # under the floor the check recorded beside it


@dataclass(frozen=True)
class SkippedGroup:
    reason: str
    checks: tuple[tuple[str, str], ...]  # (node, check label)


@dataclass(frozen=True)
class NodeSection:
    node: str
    verdict: str
    failed: tuple[tuple[str, str, str], ...]  # (outcome, check label, message)
    passed: tuple[str, ...]
    skipped: int
    publish: tuple[bool, str] | None


def figure_rows(report: Report) -> list[FigureRow]:
    """Every measured figure of every check, with the floor the check recorded beside it (every
    judged figure has one: all-reduce and pair bandwidth, RDMA, burn TFLOP/s, host-device copies)."""
    rows = []
    for r in sorted(report.results, key=lambda r: (r.node, r.label)):
        if r.check_id == fleet.FLEET_CHECK:
            continue  # the fleet comparison has a table of its own, the median beside each figure
        for m in metrics.measured(r.figures):
            if m.figure.is_floor:
                continue  # a floor is shown beside its figure, not as a figure of its own
            floor = metrics.floor_of(m, r.figures)
            unit = f" {m.figure.unit}" if m.figure.unit else ""
            rows.append(FigureRow(r.node, r.label, m.title, number(m.value) + unit,
                                  "" if floor is None else number(floor) + unit, r.outcome,
                                  floor is not None and m.value < floor))
    return rows


@dataclass(frozen=True)
class FleetRow:
    figure: str
    node: str
    value: str
    median: str
    margin: str
    threshold: str
    nodes: int
    outcome: str  # passed, failed, or "no fleet verdict"
    css: str  # the outcome's class: passed, failed, skipped


def fleet_rows(report: Report) -> list[FleetRow]:
    """Each node's figure beside the fleet median, the margin and the lowest figure that passes."""
    rows = []
    for c in fleet.comparisons(report.results):
        unit = f" {c.unit}" if c.unit else ""
        where = f" ({c.where})" if c.where else ""
        rows.append(FleetRow(
            c.figure, c.node, number(c.value) + unit + where, "" if c.median is None else number(c.median) + unit,
            f"{number(c.margin * 100)} %", "" if c.threshold is None else number(c.threshold) + unit, c.nodes,
            "no fleet verdict" if c.outcome == "skipped" else c.outcome, c.outcome))
    return rows


def skipped_groups(report: Report) -> list[SkippedGroup]:
    """Skipped checks by their reason, the commonest reason first."""
    by: dict[str, list[tuple[str, str]]] = defaultdict(list)
    for r in report.results:
        if r.outcome == "skipped":
            by[r.message or "no reason given"].append((r.node, r.label))
    return [SkippedGroup(reason, tuple(sorted(items)))
            for reason, items in sorted(by.items(), key=lambda kv: (-len(kv[1]), kv[0]))]


def node_sections(report: Report) -> list[NodeSection]:
    return [
        NodeSection(v.node, report.verdict_label(v).upper(),
                    tuple((r.outcome.upper(), r.label, r.message) for r in v.failed),
                    tuple(r.label for r in v.passed), len(v.skipped), publish_outcome(report, v.node))
        for v in report.verdicts
    ]


def render(report: Report) -> str:
    return _ENV.get_template(REPORT_TEMPLATE).render(
        meta=report.meta,
        cluster=str(report.meta.get("cluster", "")),
        banner=banner(report),
        provenance=provenance(report).lines(),
        exit_code=report.exit_code,
        suite_errors=report.suite_errors,
        verdict_rows=verdict_table(report),
        figures=figure_rows(report),
        fleet=fleet_rows(report),
        fleet_min_nodes=fleet.MIN_NODES,
        skipped=skipped_groups(report),
        plots=plots(report),
        sections=node_sections(report),
        findings=findings(report),
        check_titles={c.id: c.title for c in checks.CHECKS.values()},
    )
