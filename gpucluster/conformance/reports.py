"""The run folder's reports: JUnit XML, JSON, Markdown, HTML (with an inline SVG plot of bus
bandwidth against message size) and one Prometheus textfile per node.

All of them are written from the same :class:`Report`, itself written back from the JSON file,
so a report can be re-rendered from ``results.json`` alone. Each file is written whole or not
at all (a temporary file renamed over it), readable by its owner only.

Beyond pass and fail, a node the run could not reach is ``unreachable`` (``meta.unreachable``:
node -> why), and a run stopped by Ctrl-C says so (``meta.interrupted``) and exits 130.
"""

from __future__ import annotations

import html
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from xml.etree import ElementTree as ET

from gpucluster import runs
from gpucluster.conformance import checks
from gpucluster.conformance.verdict import CheckResult, NodeVerdict, exit_code, node_verdicts
from gpucluster.errors import EXIT_BAD_INPUT

RESULTS_JSON = "results.json"
JUNIT_XML = "junit.xml"
SUMMARY_MD = "summary.md"
SUMMARY_HTML = "summary.html"
PROM_DIR = "prometheus"
PROM_FILE = "gpucluster_conformance.prom"


@dataclass
class Series:
    """One all-reduce run for the plot: (size bytes, bus bandwidth GB/s) points."""

    label: str
    points: list[tuple[int, float]]


@dataclass
class Report:
    meta: dict[str, Any]
    nodes: list[str]
    results: list[CheckResult]
    series: list[Series] = field(default_factory=list)

    @property
    def verdicts(self) -> list[NodeVerdict]:
        return node_verdicts(self.results, self.nodes)

    @property
    def suite_errors(self) -> list[str]:
        """Parts of the suite that could not load: their checks ran on no node."""
        return list(self.meta.get("suite_errors") or [])

    @property
    def unreachable(self) -> dict[str, str]:
        """Nodes the run could not reach (node -> why): their verdict is ``unreachable``."""
        return {str(k): str(v) for k, v in (self.meta.get("unreachable") or {}).items()}

    def verdict_label(self, v: NodeVerdict) -> str:
        return "unreachable" if v.node in self.unreachable else v.verdict

    @property
    def exit_code(self) -> int:
        if self.meta.get("interrupted"):
            return runs.EXIT_INTERRUPTED
        # A module of checks that did not load leaves every node unverified on those
        # checks: never a pass, whatever the checks that did run say.
        code = 1 if self.suite_errors else exit_code(self.verdicts)
        # A pass whose record could not be written is no pass to show anyone.
        if code == 0 and self.meta.get("run_folder_error"):
            return EXIT_BAD_INPUT
        return code

    def to_json(self) -> dict[str, Any]:
        vs = self.verdicts
        verdicts = []
        for v in vs:
            d = v.to_json()
            if v.node in self.unreachable:
                d["verdict"] = "unreachable"
                d["reason"] = self.unreachable[v.node]
            verdicts.append(d)
        return {
            "schema": 1,
            "meta": self.meta,
            "exit_code": self.exit_code,
            "verdicts": verdicts,
            "results": [r.to_json() for r in sorted(self.results, key=lambda r: (r.node, r.check_id, r.param or ""))],
            "series": [{"label": s.label, "points": [list(p) for p in s.points]} for s in self.series],
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> Report:
        return Report(
            meta=dict(d.get("meta", {})),
            nodes=[v["node"] for v in d.get("verdicts", [])],
            results=[CheckResult.from_json(r) for r in d.get("results", [])],
            series=[Series(s["label"], [(int(a), float(b)) for a, b in s["points"]]) for s in d.get("series", [])],
        )


def series_from_results(results: list[CheckResult]) -> list[Series]:
    """Every distinct all-reduce run any check recorded (figures key ``series``)."""
    seen: dict[str, Series] = {}
    for r in results:
        for s in r.figures.get("series", []) or []:
            if s["label"] not in seen:
                seen[s["label"]] = Series(s["label"], [(int(a), float(b)) for a, b in s["points"]])
    return sorted(seen.values(), key=lambda s: s.label)


# --- JUnit ---------------------------------------------------------------------------------


def junit_xml(report: Report) -> str:
    """One <testsuite> per node, one <testcase> per check (classname = node, name = check label)."""
    suites = ET.Element("testsuites", name=f"gpucluster conformance {report.meta.get('cluster', '')}".strip())
    by_node: dict[str, list[CheckResult]] = {n: [] for n in report.nodes}
    for r in report.results:
        by_node.setdefault(r.node, []).append(r)
    for node, rs in by_node.items():
        suite = ET.SubElement(
            suites, "testsuite", name=node, tests=str(len(rs)),
            failures=str(sum(r.outcome == "failed" for r in rs)),
            errors=str(sum(r.outcome == "error" for r in rs)),
            skipped=str(sum(r.outcome == "skipped" for r in rs)),
            time=f"{sum(r.duration_s for r in rs):.3f}",
        )
        for r in sorted(rs, key=lambda r: r.label):
            title = checks.CHECKS[r.check_id].title if r.check_id in checks.CHECKS else r.check_id
            case = ET.SubElement(suite, "testcase", classname=f"{node}", name=f"{r.label} {title}",
                                 time=f"{r.duration_s:.3f}")
            if r.outcome == "failed":
                ET.SubElement(case, "failure", message=r.message[:500]).text = r.message
            elif r.outcome == "error":
                ET.SubElement(case, "error", message=r.message[:500]).text = r.message
            elif r.outcome == "skipped":
                ET.SubElement(case, "skipped", message=r.message[:500])
            if r.figures:
                props = ET.SubElement(case, "properties")
                ET.SubElement(props, "property", name="figures",
                              value=json.dumps({k: v for k, v in r.figures.items() if k != "series"}))
    ET.indent(suites)
    return '<?xml version="1.0" encoding="utf-8"?>\n' + ET.tostring(suites, encoding="unicode") + "\n"


# --- Markdown / HTML -------------------------------------------------------------------------


def _counts(v: NodeVerdict) -> str:
    return f"{len(v.passed)} passed, {len(v.failed)} failed, {len(v.skipped)} skipped"


def publish_outcome(report: Report, node: str) -> tuple[bool, str] | None:
    """How copying the node's textfile onto it went (`gpucluster verify`); None when not tried."""
    done = (report.meta.get("textfile_publish") or {}).get(node)
    if not isinstance(done, dict):
        return None
    return bool(done.get("ok")), str(done.get("message", ""))


def publish_problems(report: Report) -> list[tuple[str, str]]:
    """(node, message) for each node whose textfile could not be published."""
    out = []
    for node in report.nodes:
        done = publish_outcome(report, node)
        if done is not None and not done[0]:
            out.append((node, done[1]))
    return out


def verdict_table(report: Report) -> list[list[str]]:
    rows = [["node", "verdict", "checks", "failing checks"]]
    down = report.unreachable
    for v in report.verdicts:
        if v.node in down:
            rows.append([v.node, "UNREACHABLE", _counts(v), down[v.node]])
            continue
        failing = "; ".join(f"{r.label}: {r.message}" for r in v.failed) or v.reason
        rows.append([v.node, v.verdict.upper(), _counts(v), failing])
    return rows


def markdown(report: Report) -> str:
    m = report.meta
    out = [f"# Conformance: {m.get('cluster', '?')}", ""]
    out.append(f"Inventory `{m.get('inventory', '?')}`, started {m.get('started', '?')}, "
               f"{m.get('duration_s', '?')} s. Exit code {report.exit_code}.")
    if m.get("interrupted"):
        out += ["", "**INTERRUPTED**: the verdicts cover the checks that finished before Ctrl-C."]
    for err in report.suite_errors:
        out += ["", f"**SUITE ERROR** (these checks ran on no node): {err}"]
    out += ["", "| node | verdict | checks | failing checks |", "|---|---|---|---|"]
    for row in verdict_table(report)[1:]:
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    for v in report.verdicts:
        out += ["", f"## {v.node}: {report.verdict_label(v).upper()}", ""]
        for r in v.failed:
            out.append(f"- **{r.outcome.upper()}** {r.label}: {r.message}")
        for r in v.skipped:
            out.append(f"- skipped {r.label}: {r.message}")
        if v.passed:
            out.append(f"- passed: {', '.join(r.label for r in v.passed)}")
        done = publish_outcome(report, v.node)
        if done is not None:
            out.append(f"- Prometheus textfile: {done[1]}" if done[0] else
                       f"- **Prometheus textfile not published** (the verdict stands): {done[1]}")
    if report.series:
        out += ["", "## All-reduce bus bandwidth (GB/s)", ""]
        sizes = sorted({s for ser in report.series for s, _ in ser.points})
        out.append("| size (B) | " + " | ".join(s.label for s in report.series) + " |")
        out.append("|---" * (len(report.series) + 1) + "|")
        for size in sizes:
            cells = []
            for ser in report.series:
                d = dict(ser.points)
                cells.append(f"{d[size]:.3f}" if size in d else "")
            out.append(f"| {size} | " + " | ".join(cells) + " |")
    return "\n".join(out) + "\n"


_COLOURS = ("#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f")


def svg_plot(series: list[Series], width: int = 720, height: int = 360) -> str:
    """Bus bandwidth against message size, log2 x axis, linear y axis."""
    pts = [(s, b) for ser in series for s, b in ser.points if s > 0]
    if not pts:
        return "<p>No all-reduce figures.</p>"
    left, right, top, bottom = 60, 180, 20, 40
    xs = [math.log2(s) for s, _ in pts]
    xmin, xmax = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    ymax = max(b for _, b in pts) * 1.1 or 1.0

    def x(size: int) -> float:
        return left + (math.log2(size) - xmin) / (xmax - xmin) * (width - left - right)

    def y(bw: float) -> float:
        return height - bottom - bw / ymax * (height - top - bottom)

    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width}" height="{height}" '
             f'font-family="sans-serif" font-size="11">',
             f'<line x1="{left}" y1="{height - bottom}" x2="{width - right}" y2="{height - bottom}" stroke="#000"/>',
             f'<line x1="{left}" y1="{top}" x2="{left}" y2="{height - bottom}" stroke="#000"/>',
             f'<text x="{(width - right + left) / 2}" y="{height - 5}" text-anchor="middle">'
             "message size (bytes)</text>",
             f'<text x="12" y="{top + 10}" >GB/s</text>']
    for i in range(5):
        v = ymax * i / 4
        parts.append(f'<text x="{left - 5}" y="{y(v) + 4:.1f}" text-anchor="end">{v:.3g}</text>')
    for e in range(math.ceil(xmin), math.floor(xmax) + 1, max(1, round((xmax - xmin) / 6))):
        parts.append(f'<text x="{x(2**e):.1f}" y="{height - bottom + 14}" text-anchor="middle">{_human(2**e)}</text>')
    for i, ser in enumerate(series):
        colour = _COLOURS[i % len(_COLOURS)]
        coords = " ".join(f"{x(s):.1f},{y(b):.1f}" for s, b in sorted(ser.points) if s > 0)
        parts.append(f'<polyline fill="none" stroke="{colour}" stroke-width="1.5" points="{coords}"/>')
        ly = top + 14 * i + 10
        parts.append(f'<rect x="{width - right + 10}" y="{ly - 8}" width="10" height="3" fill="{colour}"/>')
        parts.append(f'<text x="{width - right + 24}" y="{ly}">{html.escape(ser.label[:26])}</text>')
    parts.append("</svg>")
    return "\n".join(parts)


def _human(n: int) -> str:
    for unit in ("", "K", "M", "G"):
        if n < 1024:
            return f"{n}{unit}"
        n //= 1024
    return f"{n}T"


def html_report(report: Report) -> str:
    m = report.meta
    esc = html.escape
    rows = verdict_table(report)
    table = ["<table><tr>" + "".join(f"<th>{esc(c)}</th>" for c in rows[0]) + "</tr>"]
    for row in rows[1:]:
        cls = "pass" if row[1] == "PASS" else "fail"
        table.append(f'<tr class="{cls}">' + "".join(f"<td>{esc(c)}</td>" for c in row) + "</tr>")
    table.append("</table>")
    detail = []
    for v in report.verdicts:
        detail.append(f"<h2>{esc(v.node)}: {report.verdict_label(v).upper()}</h2><ul>")
        for r in v.failed:
            detail.append(f"<li><b>{r.outcome.upper()}</b> {esc(r.label)}: {esc(r.message)}</li>")
        for r in v.skipped:
            detail.append(f"<li>skipped {esc(r.label)}: {esc(r.message)}</li>")
        if v.passed:
            detail.append(f"<li>passed: {esc(', '.join(r.label for r in v.passed))}</li>")
        done = publish_outcome(report, v.node)
        if done is not None:
            detail.append(f"<li>Prometheus textfile: {esc(done[1])}</li>" if done[0] else
                          f"<li><b>Prometheus textfile not published</b> (the verdict stands): {esc(done[1])}</li>")
        detail.append("</ul>")
    return (
        "<!DOCTYPE html>\n<html><head><meta charset=\"utf-8\">"
        f"<title>Conformance: {esc(str(m.get('cluster', '')))}</title>"
        "<style>body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #999;padding:4px 8px;text-align:left}"
        "tr.pass td:nth-child(2){color:#080;font-weight:bold}tr.fail td:nth-child(2){color:#c00;font-weight:bold}"
        "</style></head><body>"
        f"<h1>Conformance: {esc(str(m.get('cluster', '')))}</h1>"
        f"<p>Inventory <code>{esc(str(m.get('inventory', '')))}</code>, started {esc(str(m.get('started', '')))}, "
        f"{esc(str(m.get('duration_s', '')))} s. Exit code {report.exit_code}.</p>"
        + ("<p><b>INTERRUPTED</b>: the verdicts cover the checks that finished before Ctrl-C.</p>"
           if m.get("interrupted") else "")
        + "\n".join(table)
        + "<h2>All-reduce bus bandwidth</h2>" + svg_plot(report.series)
        + "\n".join(detail) + "</body></html>\n"
    )


# --- Prometheus textfile ---------------------------------------------------------------------


def _label(v: str) -> str:
    return v.replace("\\", "\\\\").replace('"', '\\"').replace("\n", " ")


_METRIC_SAFE = re.compile(r"[^a-zA-Z0-9_]")


def prometheus_textfile(report: Report, node: str) -> str:
    """For node_exporter's textfile collector: the node's verdict, each check's state and figures."""
    verdict = next((v for v in report.verdicts if v.node == node), None)
    cluster = _label(str(report.meta.get("cluster", "")))
    lines = [
        "# HELP gpucluster_conformance_pass 1 when the node passed the conformance suite, 0 when it failed.",
        "# TYPE gpucluster_conformance_pass gauge",
        f'gpucluster_conformance_pass{{cluster="{cluster}",node="{_label(node)}"}} '
        f"{1 if verdict and verdict.verdict == 'pass' else 0}",
        "# HELP gpucluster_conformance_check 1 for the check's outcome (passed, failed, skipped, error).",
        "# TYPE gpucluster_conformance_check gauge",
    ]
    mine = sorted((r for r in report.results if r.node == node), key=lambda r: r.label)
    for r in mine:
        for outcome in ("passed", "failed", "skipped", "error"):
            lines.append(f'gpucluster_conformance_check{{check="{_label(r.label)}",outcome="{outcome}"}} '
                         f"{1 if r.outcome == outcome else 0}")
    lines += ["# HELP gpucluster_conformance_figure A measured figure of a check (name says its unit).",
              "# TYPE gpucluster_conformance_figure gauge"]
    for r in mine:
        for key, value in sorted(r.figures.items()):
            if isinstance(value, bool) or not isinstance(value, int | float):
                continue
            lines.append(f'gpucluster_conformance_figure{{check="{_label(r.label)}",'
                         f'name="{_METRIC_SAFE.sub("_", key)}"}} {float(value):g}')
    ts = report.meta.get("finished_unix")
    if isinstance(ts, int | float):
        lines += ["# HELP gpucluster_conformance_last_run_timestamp_seconds When the suite finished.",
                  "# TYPE gpucluster_conformance_last_run_timestamp_seconds gauge",
                  f"gpucluster_conformance_last_run_timestamp_seconds {float(ts):.0f}"]
    return "\n".join(lines) + "\n"


def write_all(report: Report, run_dir: Path) -> dict[str, Path]:
    """Every report into the run folder; raises OSError (a full disk, say) with nothing half written."""
    run_dir.mkdir(parents=True, exist_ok=True, mode=runs.RUN_DIR_MODE)
    if not report.series:
        report.series = series_from_results(report.results)
    out = {
        "json": run_dir / RESULTS_JSON,
        "junit": run_dir / JUNIT_XML,
        "markdown": run_dir / SUMMARY_MD,
        "html": run_dir / SUMMARY_HTML,
    }
    # results.json last: the one file `gpucluster verify` reads back means the set is complete.
    runs.write_private(out["junit"], junit_xml(report))
    runs.write_private(out["markdown"], markdown(report))
    runs.write_private(out["html"], html_report(report))
    for node in report.nodes:
        p = run_dir / PROM_DIR / node / PROM_FILE
        p.parent.mkdir(parents=True, exist_ok=True, mode=runs.RUN_DIR_MODE)
        runs.write_private(p, prometheus_textfile(report, node))
        out[f"prom:{node}"] = p
    runs.write_private(out["json"], json.dumps(report.to_json(), indent=2) + "\n")
    return out
