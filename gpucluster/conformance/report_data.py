"""The verify report's data: the :class:`Report` every renderer reads (results.json, Markdown,
HTML, the Prometheus textfiles, the console), its findings and its verdict table.

A leaf of the report's modules: the renderers (:mod:`~gpucluster.conformance.reports`,
:mod:`~gpucluster.conformance.html_report`, :mod:`~gpucluster.conformance.metrics`) import it,
and it imports none of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any

from gpucluster import runs
from gpucluster.conformance import fleet, remedies
from gpucluster.conformance.verdict import CLUSTER, CheckResult, NodeVerdict, exit_code, node_verdicts, shorten
from gpucluster.errors import EXIT_BAD_INPUT


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

    @property
    def fail_on_skipped_cluster(self) -> bool:
        """``verify --fail-on-skipped-cluster``: a CLUSTER row whose every check skipped fails the run."""
        return bool(self.meta.get("fail_on_skipped_cluster"))

    def verdict_label(self, v: NodeVerdict) -> str:
        return "unreachable" if v.node in self.unreachable else v.verdict

    @property
    def exit_code(self) -> int:
        if self.meta.get("interrupted"):
            return runs.EXIT_INTERRUPTED
        # A module of checks that did not load leaves every node unverified on those
        # checks: never a pass, whatever the checks that did run say.
        code = 1 if self.suite_errors else exit_code(self.verdicts, self.fail_on_skipped_cluster)
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
            "summary": banner(self).to_json(),
            "provenance": provenance(self).to_json(),
            "findings": [f.to_json() for f in findings(self)],
            "verdicts": verdicts,
            "results": [r.to_json() for r in sorted(self.results, key=lambda r: (r.node, r.check_id, r.param or ""))],
            # Each node's figure beside the fleet median and the margin (GC-FLEET-001's results, in a table).
            "fleet": {"margin": self.meta.get("fleet_margin"), "min_nodes": fleet.MIN_NODES,
                      "comparisons": [fleet_json(c) for c in fleet.comparisons(self.results)]},
            "series": [{"label": s.label, "points": [list(p) for p in s.points]} for s in self.series],
        }

    @staticmethod
    def from_json(d: dict[str, Any]) -> Report:
        return Report(
            meta=dict(d.get("meta", {})),
            nodes=[v["node"] for v in d.get("verdicts", []) if v["node"] != CLUSTER],
            results=[CheckResult.from_json(r) for r in d.get("results", [])],
            series=[Series(s["label"], [(int(a), float(b)) for a, b in s["points"]]) for s in d.get("series", [])],
        )


def fleet_json(c: fleet.Comparison) -> dict[str, Any]:
    return {"node": c.node, "figure": c.figure, "param": c.param, "unit": c.unit, "where": c.where,
            "value": c.value, "median": c.median, "margin": c.margin, "threshold": c.threshold, "nodes": c.nodes,
            "outcome": c.outcome}


def series_from_results(results: list[CheckResult]) -> list[Series]:
    """Every distinct all-reduce run any check recorded (figures key ``series``)."""
    seen: dict[str, Series] = {}
    for r in results:
        for s in r.figures.get("series", []) or []:
            if s["label"] not in seen:
                seen[s["label"]] = Series(s["label"], [(int(a), float(b)) for a, b in s["points"]])
    return sorted(seen.values(), key=lambda s: s.label)


# --- findings: one per root cause ------------------------------------------------------------
# A throttled link fails the all-node all-reduce, the pair runs and the RDMA pairs, on every node
# whose runs it slowed: one cause, one finding, the checks it affected listed under it. Failures
# are grouped by, in order: the cause key a check recorded (gpucluster.conformance.fabric.fault_key:
# the same slow node, the same link, the whole ring); the node being unreachable; else the same
# message, on one node or several, from one check or several (the node's own name aside): the
# same words are the same fact observed, such as a missing keyring every Ceph check trips over.

LINE_LABELS = 6  # check labels a console line names before it gives their count
CONSOLE_CAUSE_LIMIT = 200  # characters of a cause on the console; the reports hold the whole
FABRIC_REMEDY_ORDER = ("GC-AR-003", "GC-RDMA-001", "GC-AR-002", "GC-K8S-004", "GC-AR-001")


@dataclass(frozen=True)
class Finding:
    key: str
    cause: str
    checks: tuple[tuple[str, str], ...]  # (check label, node), every result the cause failed
    figure: str  # measured against expected, where the checks recorded both
    remedy_check: str  # the remediation table's entry quoted ("unreachable" for a node not reached)
    remedy: tuple[str, ...]
    log: str  # relative to the run folder

    @property
    def nodes(self) -> list[str]:
        return sorted({n for _, n in self.checks})

    @property
    def labels(self) -> list[str]:
        return sorted({c for c, _ in self.checks})

    def to_json(self) -> dict[str, Any]:
        return {"cause": self.cause, "checks": [{"check": c, "node": n} for c, n in self.checks],
                "figure": self.figure, "remedy": {"check": self.remedy_check, "steps": list(self.remedy)},
                "log": self.log, "key": self.key}

    def line(self) -> str:
        """One line for the console: checks, nodes, cause and figure; the rest is in the run folder."""
        nodes = ", ".join(self.nodes)
        labels = self.labels
        # An unreachable node fails every check: their count says enough on one line.
        what = ", ".join(labels) if len(labels) <= LINE_LABELS else f"{len(labels)} checks"
        figure = f" ({self.figure})" if self.figure and self.figure not in self.cause else ""
        # The console line stays short: a long cause is cut between words and its log named once.
        cause = shorten(self.cause.split(" … (")[0], CONSOLE_CAUSE_LIMIT, self.log)
        log = f"; log {self.log}" if self.log and self.log not in cause else ""
        return f"FAIL {what} on {nodes}: {cause}{figure}{log}"


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _g(v: float) -> str:
    return f"{v:.3g}" if abs(v) < 1000 else f"{v:.0f}"


def figure_text(r: CheckResult) -> str:
    """The check's figure against its expected value, from what it recorded; empty when it
    recorded none of the figures that have one (its message then says it)."""
    f = r.figures
    compared = fleet.Comparison.from_result(r)
    if compared is not None:
        return compared.text()
    floor = _num(f.get("floor_gbps"))
    pairs = {k.removeprefix("pair_busbw_gbps_"): _num(v) for k, v in f.items() if k.startswith("pair_busbw_gbps_")}
    if pairs and floor is not None:
        low = [(p, v) for p, v in sorted(pairs.items()) if v is None or v < floor]
        parts = [f"busbw with {p} {'not measured' if v is None else _g(v) + ' GB/s'}" for p, v in low]
        if parts:
            return f"{', '.join(parts)} < floor {_g(floor)} GB/s"
    busbw = _num(f.get("busbw_gbps"))
    if floor is not None and "busbw_gbps" in f:
        if busbw is None:
            return f"no busbw measured at large sizes; floor {_g(floor)} GB/s"
        return f"busbw {_g(busbw)} GB/s {'<' if busbw < floor else '>='} floor {_g(floor)} GB/s"
    hcas = {k.removeprefix("min_hca_gbps_"): _num(v) for k, v in f.items() if k.startswith("min_hca_gbps_")}
    if hcas:
        return ", ".join(f"slowest HCA with {p} {'not measured' if v is None else _g(v) + ' Gb/s'}"
                         for p, v in sorted(hcas.items()))
    offset = _num(f.get("offset_s"))
    if offset is not None:
        return f"clock offset {_g(offset)} s, limit 0.1 s"
    return ""


def _normal(message: str, node: str) -> str:
    """The message with the node's own name taken out, so that nodes failing alike compare equal."""
    return re.sub(rf"(?<![\w.-]){re.escape(node)}(?![\w.-])", "NODE", message)


def _key(r: CheckResult, unreachable: dict[str, str]) -> str:
    if r.cause:
        return r.cause
    if r.node in unreachable:
        return f"unreachable:{r.node}"
    return f"message:{_normal(r.message, r.node)}" if r.message else f"check:{r.label}:{r.node}"


def _cause(key: str, results: list[CheckResult], unreachable: dict[str, str]) -> str:
    kind, _, subject = key.partition(":")
    if kind == "unreachable":
        why = unreachable.get(subject) or results[0].message.removeprefix("node unreachable: ")
        return f"{subject} is unreachable, so none of its checks ran: {why}"
    if kind == "fabric-slow-node":
        return (f"{subject} is the slow node on the fabric: every pair run with it is under the floor while its "
                "peers pass with other nodes")
    if kind == "fabric-link":
        a, _, b = subject.partition("+")
        return (f"the fabric path between {a} and {b} is slow: their pair run is under the floor while both "
                "pass with other nodes")
    if kind == "fleet":
        return (f"{subject} is more than the margin below the fleet median: "
                + "; ".join(r.message for r in results if r.message))
    if kind == "fabric-ring":
        nodes = ", ".join(sorted({r.node for r in results}))
        return (f"the fabric all-reduce among {nodes} is under the floor and the pair runs cannot single out a "
                f"node or link: {results[0].message}")
    return results[0].message or f"{results[0].label} {results[0].outcome}"


def findings(report: Report) -> list[Finding]:
    """The failures grouped by root cause, the widest first; every failed or errored result is in one."""
    down = report.unreachable
    groups: dict[str, list[CheckResult]] = {}
    for r in sorted(report.results, key=lambda r: (r.node, r.label)):
        if r.outcome in ("failed", "error"):
            groups.setdefault(_key(r, down), []).append(r)
    out = []
    # The steps name what failed: the lead result's node, service, interface..., the run's inventory.
    inventory, run_dir = str(report.meta.get("inventory") or ""), str(report.meta.get("run_dir") or "")
    for key, rs in groups.items():
        ids = [r.check_id for r in rs]
        if key.startswith("unreachable:"):
            remedy, lead = remedies.UNREACHABLE, rs[0]
        else:
            order = [c for c in FABRIC_REMEDY_ORDER if c in ids] if key.startswith("fabric-") else []
            lead = next(r for r in rs if r.check_id == (order[0] if order else ids[0]))
            remedy = remedies.REMEDIES.get(lead.check_id, remedies.Remedy(lead.check_id, ("Open the check's log.",)))
        subject = remedies.subject(lead, inventory, run_dir)
        kind, _, link = key.partition(":")
        if kind == "fabric-link" and not subject.peer:
            a, _, b = link.partition("+")
            subject = replace(subject, peer=b if lead.node == a else a)
        elif not kind.startswith("fabric-") and subject.node:
            # The same failure on several nodes: the steps name them all.
            subject = replace(subject, node=",".join(sorted({r.node for r in rs} - {CLUSTER})))
        by_figure = sorted(rs, key=lambda r: (r.check_id != lead.check_id, r.node, r.label))
        figure = next((t for t in (figure_text(r) for r in by_figure) if t), "")
        out.append(Finding(key, _cause(key, rs, down), tuple((r.label, r.node) for r in rs), figure,
                           remedy.check_id, remedy.filled(subject), lead.log))
    return sorted(out, key=lambda f: (-len(f.checks), f.cause))


# --- the banner and the verdict table ----------------------------------------------------------


@dataclass(frozen=True)
class Banner:
    """The report's headline, the same in every format: the run's verdict, how many nodes pass, the
    rows that fail it by name, and how many checks were skipped (a skip is never a pass)."""

    verdict: str  # PASS (exit code 0) or FAIL
    exit_code: int
    nodes_passing: int
    nodes_total: int
    failing: tuple[str, ...]  # the rows that fail the run: nodes, unreachable ones included, and CLUSTER
    skipped_checks: int
    cluster: str  # the CLUSTER row's verdict ("pass", "fail", "skipped"), "" when no cluster-level check ran

    @property
    def passed(self) -> bool:
        return self.exit_code == 0

    @property
    def text(self) -> str:
        parts = [f"{self.nodes_passing} of {self.nodes_total} node(s) pass"]
        if self.failing:
            parts.append("failing: " + ", ".join(self.failing))
        parts.append(f"{self.skipped_checks} check(s) skipped")
        if self.cluster == "skipped":
            parts.append(f"{CLUSTER} every cluster-level check skipped")
        parts.append(f"exit code {self.exit_code}")
        return "; ".join(parts)

    def to_json(self) -> dict[str, Any]:
        return {"verdict": self.verdict.lower(), "exit_code": self.exit_code, "nodes_passing": self.nodes_passing,
                "nodes_total": self.nodes_total, "failing": list(self.failing),
                "skipped_checks": self.skipped_checks, "cluster": self.cluster}


def banner(report: Report) -> Banner:
    hosts = set(report.nodes)
    down = report.unreachable
    vs = report.verdicts
    # Only hosts are counted as nodes: the CLUSTER row is named when it fails the run, not counted.
    passing = sum(1 for v in vs if v.node in hosts and v.verdict == "pass" and v.node not in down)
    failing = [v.node for v in vs if v.verdict == "fail" or v.node in down
               or (v.verdict == "skipped" and report.fail_on_skipped_cluster)]
    cluster = next((v.verdict for v in vs if v.node == CLUSTER), "")
    code = report.exit_code
    return Banner("PASS" if code == 0 else "FAIL", code, passing, sum(1 for v in vs if v.node in hosts),
                  tuple(failing), sum(1 for r in report.results if r.outcome == "skipped"), cluster)



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
        # The labels only: each failure's words are in its finding, once.
        failing = ", ".join(r.label for r in v.failed) or v.reason
        rows.append([v.node, v.verdict.upper(), _counts(v), failing])
    return rows


# --- provenance: what the run ran with, and the run before it ----------------------------------

# The versions the checks read on the nodes (their figures), as the reports name them.
FOUND_VERSIONS = (("driver_version", "driver"), ("cuda_version", "CUDA"), ("nccl_version", "NCCL"))


@dataclass(frozen=True)
class Provenance:
    """The report's header beside the banner: ``meta.provenance`` (written by the suite,
    :mod:`gpucluster.conformance.provenance`) and the versions the checks found on the nodes."""

    gpucluster_version: str
    stack: str
    target: str
    bom: dict[str, str]
    found: dict[str, dict[str, list[str]]]  # figure -> version -> the nodes that showed it
    previous: dict[str, Any] | None
    changed: tuple[tuple[str, str, str], ...]  # (row, previous verdict, this run's) where they differ
    recorded: bool = True  # False for a report written before the suite recorded its provenance

    def to_json(self) -> dict[str, Any]:
        return {"gpucluster_version": self.gpucluster_version, "stack": self.stack, "target": self.target,
                "bom": self.bom, "found": self.found, "previous": self.previous,
                "changed": [{"node": n, "previous": a, "now": b} for n, a, b in self.changed]}

    def lines(self) -> list[tuple[str, str]]:
        """(what, text) rows, in the order the HTML and Markdown headers show them."""
        stack = f"{self.stack} (target {self.target})" if self.target else self.stack
        unknown = "not recorded"
        out = [("gpucluster", self.gpucluster_version or unknown), ("stack", stack or unknown),
               ("BOM", ", ".join(f"{k} {v}" for k, v in self.bom.items()) or unknown)]
        for key, name in FOUND_VERSIONS:
            seen = self.found.get(key) or {}
            text = "; ".join(f"{version} on {', '.join(nodes)}" for version, nodes in seen.items())
            out.append((f"{name} found", text or "not read (no check recorded it)"))
        p = self.previous
        if p is None:
            out.append(("previous run", "none of this inventory in the runs folder" if self.recorded else unknown))
        else:
            s = p.get("summary") or {}
            verdict = str(s.get("verdict", "?")).upper()
            failing = f"; failing: {', '.join(s['failing'])}" if s.get("failing") else ""
            passing = f", {s.get('nodes_passing')} of {s.get('nodes_total')} node(s) pass" if s else ""
            changes = "; ".join(f"{n} {a.upper()} -> {b.upper()}" for n, a, b in self.changed)
            since = f"; since then: {changes}" if changes else "; every row's verdict the same"
            out.append(("previous run", f"{verdict}{passing}{failing} (exit code {p.get('exit_code')}), started "
                                        f"{p.get('started') or '?'}, {p.get('run_dir')}{since}"))
        return out


def found_versions(results: list[CheckResult]) -> dict[str, dict[str, list[str]]]:
    """figure -> version -> nodes: the driver, CUDA and NCCL versions the checks read on each node."""
    out: dict[str, dict[str, list[str]]] = {}
    for key, _ in FOUND_VERSIONS:
        by: dict[str, set[str]] = {}
        for r in results:
            value = r.figures.get(key)
            if value not in (None, ""):
                by.setdefault(str(value), set()).add(r.node)
        if by:
            out[key] = {v: sorted(nodes) for v, nodes in sorted(by.items())}
    return out


def provenance(report: Report) -> Provenance:
    given = report.meta.get("provenance") or {}
    previous = given.get("previous") if isinstance(given.get("previous"), dict) else None
    now = {v.node: report.verdict_label(v) for v in report.verdicts}
    before = (previous or {}).get("verdicts") or {}
    changed = tuple((n, str(before[n]), now[n]) for n in now if n in before and before[n] != now[n])
    return Provenance(str(given.get("gpucluster_version", "")), str(given.get("stack", "")),
                      str(given.get("target", "")), {str(k): str(v) for k, v in (given.get("bom") or {}).items()},
                      found_versions(report.results), previous, changed, "provenance" in report.meta)

