"""The run folder's reports: JUnit XML, JSON, Markdown, HTML (with an inline SVG plot of bus
bandwidth against message size) and one Prometheus textfile per node.

All of them are written from the same :class:`Report`, itself written back from the JSON file,
so a report can be re-rendered from ``results.json`` alone. Each file is written whole or not
at all (a temporary file renamed over it), readable by its owner only.

Beyond pass and fail, a node the run could not reach is ``unreachable`` (``meta.unreachable``:
node -> why), and a run stopped by Ctrl-C says so (``meta.interrupted``) and exits 130.
"""

from __future__ import annotations

import json
import os
import platform
import re
from datetime import UTC, datetime
from pathlib import Path
from xml.etree import ElementTree as ET

from gpucluster import runs
from gpucluster.conformance import checks, fleet, html_report, metrics, remedies
from gpucluster.conformance.report_data import (
    Finding,
    Report,
    banner,
    figure_text,
    findings,
    provenance,
    publish_outcome,
    publish_problems,
    series_from_results,
    verdict_table,
)
from gpucluster.conformance.verdict import CheckResult

RESULTS_JSON = "results.json"
JUNIT_XML = "junit.xml"
SUMMARY_MD = "summary.md"
SUMMARY_HTML = "summary.html"
PROM_DIR = "prometheus"
PROM_FILE = "gpucluster_conformance.prom"


# --- JUnit ---------------------------------------------------------------------------------
# junit.xml is pytest's own (--junitxml, written by the suite's controller); its test cases carry
# the check ID, node and figures as properties (gpucluster.conformance.plugin). pytest gives a
# <failure> or <error> no type; JUnit readers group and filter on it, so the suite adds one. The
# name is what GitHub's and GitLab's test views show, and they show no property: the suite puts
# the check ID in front of it (GC-NET-001 test_mtu_end_to_end[gpu-1]).

_EXCEPTION_PREFIX = re.compile(r"^([A-Za-z_][\w.]*): ")
_PYTEST_WRAPPED = re.compile(r'^failed on (?:setup|teardown) with "(.*)"$', re.S)


def failure_type(message: str, tag: str) -> str:
    """The exception type a pytest failure message starts with (``AssertionError: ...``);
    ``pytest.fail`` for a check's own :func:`pytest.fail`; an assertion when there is none
    (pytest drops the prefix from a rewritten ``assert``)."""
    wrapped = _PYTEST_WRAPPED.match(message)
    text = wrapped.group(1) if wrapped else message
    m = _EXCEPTION_PREFIX.match(text)
    if m:
        return "pytest.fail" if m.group(1) == "Failed" else m.group(1)
    return "AssertionError" if tag == "failure" and text.startswith("assert") else tag


def add_failure_types(path: Path) -> None:
    """Give every <failure> and <error> of pytest's JUnit file a ``type``; a missing file is left missing."""
    finish_junit(path, [], {}, None)


LOG_TAIL_LINES = 30


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    """The last lines of a log in the run folder (the check's log, mpirun's), or why not."""
    try:
        return "\n".join(path.read_text(encoding="utf-8", errors="replace").rstrip("\n").splitlines()[-lines:])
    except OSError as exc:
        return f"(cannot read it: {exc.strerror or exc})"


def _system_out(r: CheckResult, logs: list[str], run_dir: Path | None) -> str:
    out = [f"check: {r.label} on {r.node}", f"message: {r.message}"]
    figure = figure_text(r)
    if figure:
        out.append(f"figure: {figure}")
    shown = {k: v for k, v in r.figures.items() if k != "series"}
    if shown:
        out.append("figures: " + json.dumps(shown, default=str, sort_keys=True))
    if r.log:
        out.append(f"log: {r.log} (in the run folder{f' {run_dir}' if run_dir else ''})")
    for log in logs:
        out.append(f"raw log: {log}")
    if r.check_id in remedies.REMEDIES:
        out.append(f"next step: {remedies.steps_for(r, run_dir=str(run_dir or ''))[0]}")
    source = logs[-1] if logs else r.log
    if source and run_dir is not None:
        out += [f"--- last {LOG_TAIL_LINES} lines of {source} ---", log_tail(run_dir / source)]
    return "\n".join(out) + "\n"


def case_name(name: str, check_id: str, node: str) -> str:
    """A test case's name as JUnit readers show it: the check ID, then pytest's test name without
    pytest-xdist's ``@<group>`` (the suite groups a node's checks by the node's name)."""
    if name.startswith(f"{check_id} "):
        return name
    if node and name.endswith(f"]@{node}"):
        name = name[: -len(node) - 1]
    return f"{check_id} {name}" if check_id else name


DERIVED_CLASSNAME = "gpucluster.conformance.fleet"
DERIVED_TEST = "fleet_comparison"
DERIVED = frozenset(c.id for c in checks.DERIVED_CHECKS)


def _add_derived_cases(suite: ET.Element, results: list[CheckResult], run_dir: Path | None) -> None:
    """A test case per result no pytest test produced (the fleet comparison, derived once every node
    ran), with the properties, failure or skip and <system-out> a pytest case of the suite has."""
    have = {tuple(p.get("value", "") for p in case.iter("property") if p.get("name") in ("check_id", "node", "param"))
            for case in suite.iter("testcase")}
    added = {"tests": 0, "failures": 0, "skipped": 0}
    for r in results:
        if r.check_id not in DERIVED or (r.check_id, r.node, *((r.param,) if r.param else ())) in have:
            continue
        name = f"{DERIVED_TEST}[{r.node}-{r.param}]" if r.param else f"{DERIVED_TEST}[{r.node}]"
        case = ET.SubElement(suite, "testcase", classname=DERIVED_CLASSNAME, name=case_name(name, r.check_id, r.node),
                             time=f"{r.duration_s:.3f}")
        props = ET.SubElement(case, "properties")
        for name, value in (("check_id", r.check_id), ("node", r.node), ("param", r.param),
                            ("figures", json.dumps(r.figures, default=str, sort_keys=True)), ("cause", r.cause)):
            if value:
                ET.SubElement(props, "property", name=name, value=str(value))
        added["tests"] += 1
        if r.outcome in ("failed", "error"):
            tag = "failure" if r.outcome == "failed" else "error"
            ET.SubElement(case, tag, type=r.check_id, message=r.message).text = r.message
            ET.SubElement(case, "system-out").text = _system_out(r, [], run_dir)
            key = "failures" if tag == "failure" else "errors"
            added[key] = added.get(key, 0) + 1
        elif r.outcome == "skipped":
            ET.SubElement(case, "skipped", type="pytest.skip", message=r.message).text = r.message
            added["skipped"] += 1
    for attr, n in added.items():
        if n:
            suite.set(attr, str(int(suite.get(attr) or 0) + n))


def finish_junit(path: Path, results: list[CheckResult], logs: dict[str, list[str]], run_dir: Path | None) -> None:
    """pytest's JUnit file made whole for JUnit readers; a missing file is left missing.

    Each test case's name starts with its check ID (:func:`case_name`), the name CI systems show.
    Every <failure> and <error> gets a ``type`` and, for a check of ``results``, the check's own
    one-line message; its <system-out> holds the figures, the path of the check's log in the run
    folder and that log's tail (``logs``: test id -> the raw logs the check named). Each test
    case's <properties> come first; each suite carries timestamp and hostname, and <testsuites>
    the totals (tests, failures, errors, skipped, time) of its suites.
    """
    try:
        tree = ET.parse(path)
    except FileNotFoundError:
        return
    except ET.ParseError:
        return  # not pytest's (it writes whole files): leave it as it is
    root = tree.getroot()
    by_case = {(r.check_id, r.node, r.param or ""): r for r in results}
    for case in root.iter("testcase"):
        props = {p.get("name", ""): p.get("value", "") for p in case.iter("property")}
        r = by_case.get((props.get("check_id", ""), props.get("node", ""), props.get("param", "")))
        case.set("name", case_name(case.get("name", ""), props.get("check_id", ""), props.get("node", "")))
        properties = case.find("properties")
        if properties is not None and list(case).index(properties) != 0:
            case.remove(properties)
            case.insert(0, properties)
        for tag in ("failure", "error"):
            for element in case.findall(tag):
                if not element.get("type"):
                    element.set("type", failure_type(element.get("message", ""), tag))
                if r is not None and r.message:
                    element.set("message", r.message)
        if r is not None and r.outcome in ("failed", "error"):
            ours = _system_out(r, logs.get(r.test, []), run_dir)
            existing = case.find("system-out")
            if existing is None:
                ET.SubElement(case, "system-out").text = ours
            else:
                existing.text = ours + (existing.text or "")
    suites = list(root.iter("testsuite")) if root.tag == "testsuites" else []
    if suites:
        _add_derived_cases(suites[0], results, run_dir)
    for suite in suites:
        suite.set("timestamp", suite.get("timestamp") or datetime.now(UTC).isoformat(timespec="seconds"))
        suite.set("hostname", suite.get("hostname") or platform.node())
    if suites:
        for attr in ("tests", "failures", "errors", "skipped"):
            root.set(attr, str(sum(int(x.get(attr) or 0) for x in suites)))
        root.set("time", f"{sum(float(x.get('time') or 0) for x in suites):.3f}")
    runs.write_private(path, '<?xml version="1.0" encoding="utf-8"?>' + ET.tostring(root, encoding="unicode"))


# --- Markdown / HTML -------------------------------------------------------------------------


def console_lines(report: Report) -> list[str]:
    """What an operator reads at the end of a run: one line per finding, the verdict table, then the
    banner's line (the details, next steps and logs are in the run folder)."""
    out = [f.line() for f in findings(report)]
    if out:
        out.append("")
    rows = verdict_table(report)
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    out += ["  ".join(r[i].ljust(widths[i]) for i in range(3)) + "  " + r[3] for r in rows]
    for node, message in publish_problems(report):
        if node not in report.unreachable:
            out.append(f"textfile not published on {node}: {message} (the verdict stands)")
    b = banner(report)
    out.append(f"{b.verdict}: {b.text}")
    return out


def _finding_markdown(i: int, f: Finding) -> list[str]:
    where = "" if f.remedy_check == "unreachable" else (
        f" ({f.remedy_check}; all of them in `docs/troubleshooting.md#{remedies.anchor(f.remedy_check)}`)")
    out = [f"### {i}. {f.cause}", ""]
    if f.figure:
        out.append(f"- Figure: {f.figure}")
    out.append("- Checks: " + ", ".join(f"{c} on {n}" for c, n in f.checks))
    if f.log:
        out.append(f"- Log: `{f.log}`")
    out.append(f"- Next steps{where}:")
    out += [f"  {j}. {step}" for j, step in enumerate(f.remedy, 1)]
    return out


def fleet_markdown(report: Report) -> list[str]:
    """Each node's figure beside the fleet median and the margin (GC-FLEET-001), one table."""
    rows = fleet.comparisons(report.results)
    if not rows:
        return []
    out = ["", "## Fleet comparison", "",
           f"A node more than the margin below the median of the nodes that measured a figure fails "
           f"(GC-FLEET-001); under {fleet.MIN_NODES} nodes there is no median and no fleet verdict.", "",
           "| figure | node | measured | fleet median | margin | at least | nodes | outcome |",
           "|---|---|---|---|---|---|---|---|"]
    for c in rows:
        g = fleet.short
        where = f" ({c.where})" if c.where else ""
        median = "-" if c.median is None else f"{g(c.median)} {c.unit}"
        least = "-" if c.threshold is None else f"{g(c.threshold)} {c.unit}"
        outcome = "no fleet verdict" if c.outcome == "skipped" else c.outcome
        out.append(f"| {c.figure} | {c.node} | {g(c.value)} {c.unit}{where} | {median} | {c.margin * 100:g} % | "
                   f"{least} | {c.nodes} | {outcome} |")
    return out


def markdown(report: Report) -> str:
    m = report.meta
    b = banner(report)
    out = [f"# Conformance: {m.get('cluster', '?')}", "", f"**{b.verdict}**: {b.text}.", ""]
    out.append(f"Inventory `{m.get('inventory', '?')}`, started {m.get('started', '?')}, "
               f"{m.get('duration_s', '?')} s. Exit code {report.exit_code}.")
    if m.get("interrupted"):
        out += ["", "**INTERRUPTED**: the verdicts cover the checks that finished before Ctrl-C."]
    for err in report.suite_errors:
        out += ["", f"**SUITE ERROR** (these checks ran on no node): {err}"]
    out += ["", "## Provenance", ""]
    out += [f"- {what}: {text}" for what, text in provenance(report).lines()]
    found = findings(report)
    if found:
        out += ["", f"## Findings ({len(found)})", ""]
        out.append("Failures that share a root cause are one finding; every check's own result follows below.")
        for i, f in enumerate(found, 1):
            out += ["", *_finding_markdown(i, f)]
    figures = html_report.figure_rows(report)
    if figures:
        out += ["", "## Measured figures", "", "Each figure beside the floor its check judged it against; "
                "**bold**: under the floor.", "", "| node | check | figure | measured | floor | outcome |",
                "|---|---|---|---|---|---|"]
        out += [f"| {f.node} | {f.check} | {f.name} | {f'**{f.value}**' if f.below else f.value} | {f.floor or '-'} | "
                f"{f.outcome} |" for f in figures]
    out += fleet_markdown(report)
    out += ["", "## Verdicts", "", "| node | verdict | checks | failing checks |", "|---|---|---|---|"]
    for row in verdict_table(report)[1:]:
        out.append("| " + " | ".join(c.replace("|", "\\|") for c in row) + " |")
    for v in report.verdicts:
        out += ["", f"## {v.node}: {report.verdict_label(v).upper()}", ""]
        for r in v.failed:
            log = f" (log `{r.log}`)" if r.log else ""
            out.append(f"- **{r.outcome.upper()}** {r.label}: {r.message}{log}")
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


def write_all(report: Report, run_dir: Path) -> dict[str, Path]:
    """Every report into the run folder; raises OSError (a full disk, say) with nothing half written."""
    run_dir.mkdir(parents=True, exist_ok=True, mode=runs.RUN_DIR_MODE)
    # The next steps name the run folder (the unreachable node's ssh_config under it).
    report.meta.setdefault("run_dir", os.path.abspath(run_dir))
    if not report.series:
        report.series = series_from_results(report.results)
    out = {
        "json": run_dir / RESULTS_JSON,
        "markdown": run_dir / SUMMARY_MD,
        "html": run_dir / SUMMARY_HTML,
    }
    # results.json last: the one file `gpucluster verify` reads back means the set is complete.
    runs.write_private(out["markdown"], markdown(report))
    runs.write_private(out["html"], html_report.render(report))
    for node in report.nodes:
        p = run_dir / PROM_DIR / node / PROM_FILE
        p.parent.mkdir(parents=True, exist_ok=True, mode=runs.RUN_DIR_MODE)
        metrics.write_textfile(report, node, p)
        out[f"prom:{node}"] = p
    runs.write_private(out["json"], json.dumps(report.to_json(), indent=2) + "\n")
    return out
