"""The fleet rule (GC-FLEET-001) on synthetic fleets, and what every report shows of it."""

from __future__ import annotations

import json
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from gpucluster.conformance import fleet, html_report, metrics
from gpucluster.conformance.report_data import Report, figure_text, findings
from gpucluster.conformance.reports import finish_junit, markdown
from gpucluster.conformance.verdict import CheckResult, exit_code, node_verdicts
from gpucluster.spec.models import Conformance

PEAK = 100.0  # TFLOP/s of a healthy GPU in these fleets
GPUS = 8


def _burn(node: str, slow_gpu: int | None = None, factor: float = 1.0, outcome: str = "passed") -> CheckResult:
    figures = {f"tflops_gpu-burn_gpu{i}_fp32": PEAK * (factor if i == slow_gpu else 1.0) for i in range(GPUS)}
    figures["engines"] = "gpu-burn"
    return CheckResult(node, "GC-BURN-001", outcome, figures=figures)  # type: ignore[arg-type]


def _fleet(results: list[CheckResult], margin: float = fleet.DEFAULT_MARGIN) -> dict[str, CheckResult]:
    return {r.node: r for r in fleet.fleet_results(results, margin)}


# --- the rule itself ----------------------------------------------------------------------------


def test_a_throttled_gpu_at_60_percent_fails_though_the_floor_would_pass_it():
    j = fleet.judge({"n1": 100.0, "n2": 101.0, "n3": 99.0, "n4": 60.0})
    assert j.median == pytest.approx(99.5)
    assert j.threshold == pytest.approx(89.55)
    assert j.failing == ["n4"] and not j.below("n3")


def test_a_node_5_percent_below_passes_and_one_11_percent_below_fails():
    assert fleet.judge({"n1": 100.0, "n2": 100.0, "n3": 95.0}).failing == []
    assert fleet.judge({"n1": 100.0, "n2": 100.0, "n3": 89.0}).failing == ["n3"]
    # The margin is the operator's: 20 % lets the 11 % shortfall through.
    assert fleet.judge({"n1": 100.0, "n2": 100.0, "n3": 89.0}, 0.20).failing == []


def test_two_nodes_give_no_fleet_verdict_whatever_their_figures():
    j = fleet.judge({"n1": 100.0, "n2": 10.0})
    assert not j.judged and j.median is None and j.threshold is None and j.failing == []


def test_the_median_of_an_even_fleet_is_the_mean_of_the_middle_two():
    assert fleet.judge({"a": 1.0, "b": 2.0, "c": 3.0, "d": 10.0}).median == 2.5


# --- per-node figures from a run's results ----------------------------------------------------------


def test_the_throttled_gpu_fails_its_node_as_a_failing_item_of_its_own():
    results = [_burn("gpu-1"), _burn("gpu-2"), _burn("gpu-3", slow_gpu=5, factor=0.6), _burn("gpu-4")]
    derived = _fleet(results)
    slow = derived["gpu-3"]
    assert slow.check_id == fleet.FLEET_CHECK and slow.outcome == "failed"
    assert slow.param == "burn-fp32-gpu-burn" and slow.label == "GC-FLEET-001[burn-fp32-gpu-burn]"
    assert slow.message == ("burn fp32 TFLOP/s (gpu-burn, slowest GPU) 60 TFLOP/s on gpu5 is 40 % below the fleet "
                            "median 100 TFLOP/s of 4 nodes; margin 10 %: at least 90 TFLOP/s")
    assert slow.figures["fleet_node_tflops"] == 60.0 and slow.figures["fleet_median_tflops"] == 100.0
    assert slow.figures["fleet_members"] == "gpu-1,gpu-2,gpu-3,gpu-4"
    assert [derived[n].outcome for n in ("gpu-1", "gpu-2", "gpu-4")] == ["passed"] * 3
    # It counts: the node fails on the fleet item alone, its burn above the floor having passed.
    verdicts = {v.node: v for v in node_verdicts([*results, *derived.values()], ["gpu-1", "gpu-2", "gpu-3", "gpu-4"])}
    assert verdicts["gpu-3"].verdict == "fail" and [r.label for r in verdicts["gpu-3"].failed] == [slow.label]
    assert exit_code(list(verdicts.values())) == 1
    assert all(verdicts[n].verdict == "pass" for n in ("gpu-1", "gpu-2", "gpu-4"))


def test_a_node_5_percent_below_the_fleet_passes():
    results = [_burn("gpu-1"), _burn("gpu-2"), _burn("gpu-3", slow_gpu=0, factor=0.95)]
    assert {r.outcome for r in fleet.fleet_results(results)} == {"passed"}


def test_two_nodes_are_reported_as_no_fleet_verdict_never_failed():
    derived = fleet.fleet_results([_burn("gpu-1"), _burn("gpu-2", slow_gpu=0, factor=0.5)])
    assert [r.outcome for r in derived] == ["skipped", "skipped"]
    assert derived[1].message == ("burn fp32 TFLOP/s (gpu-burn, slowest GPU) measured on 2 node(s), at least 3 "
                                  "needed for a fleet median: no fleet verdict")
    verdicts = node_verdicts([_burn("gpu-1"), _burn("gpu-2"), *derived], ["gpu-1", "gpu-2"])
    assert exit_code(verdicts) == 0


def test_each_precision_and_engine_is_its_own_fleet():
    results = []
    for n in ("a", "b", "c"):
        slow = 0.5 if n == "c" else 1.0
        results.append(CheckResult(n, "GC-BURN-001", "passed", figures={
            "tflops_gpu-burn_gpu0_fp32": 100.0, "tflops_burn_torch_cuda:0_bf16": 700.0 * slow}))
    derived = fleet.fleet_results(results)
    failed = [(r.node, r.param) for r in derived if r.outcome == "failed"]
    assert failed == [("c", "burn-bf16-burn_torch")]
    assert len(derived) == 6


def test_intra_node_allreduce_and_rdma_are_compared_too():
    results = []
    for n, busbw, hca in (("a", 480.0, 390.0), ("b", 470.0, 392.0), ("c", 300.0, 391.0), ("d", 475.0, 200.0)):
        results.append(CheckResult(n, "GC-AR-001", "passed", figures={"busbw_gbps": busbw, "floor_gbps": 250.0}))
        # d's HCA is slow with both its peers; a's one slow pair is the link's, not a's.
        peers = {"a": {"b": hca, "d": 200.0}, "b": {"a": hca, "c": hca}, "c": {"b": hca, "d": 200.0},
                 "d": {"a": hca, "c": hca}}[n]
        results.append(CheckResult(n, "GC-RDMA-001", "passed",
                                   figures={f"min_hca_gbps_{p}": v for p, v in peers.items()}))
    derived = {(r.node, r.param): r for r in fleet.fleet_results(results)}
    assert {k for k, r in derived.items() if r.outcome == "failed"} == {("c", "allreduce-intra"), ("d", "rdma-write")}
    assert "with " in derived[("d", "rdma-write")].message
    assert derived[("a", "rdma-write")].figures["fleet_where"] == "with b"


def test_a_failure_joins_the_finding_its_source_check_named():
    results = [CheckResult(n, "GC-RDMA-001", "failed" if n == "c" else "passed",
                           "ib_write_bw under the floor" if n == "c" else "",
                           figures={"min_hca_gbps_x": 50.0 if n == "c" else 390.0},
                           cause="fabric-slow-node:c" if n == "c" else "")
               for n in ("a", "b", "c")]
    derived = _fleet(results)
    assert derived["c"].cause == "fabric-slow-node:c"
    report = Report(meta={}, nodes=["a", "b", "c"], results=[*results, *derived.values()])
    found = findings(report)
    assert len(found) == 1 and {c for c, _ in found[0].checks} == {"GC-RDMA-001", "GC-FLEET-001[rdma-write]"}


def test_a_node_short_on_two_figures_is_one_finding():
    results = [_burn(n, slow_gpu=1 if n == "c" else None, factor=0.5) for n in ("a", "b", "c")]
    results += [CheckResult(n, "GC-AR-001", "passed", figures={"busbw_gbps": 200.0 if n == "c" else 480.0})
                for n in ("a", "b", "c")]
    report = Report(meta={}, nodes=["a", "b", "c"], results=[*results, *fleet.fleet_results(results)])
    found = findings(report)
    assert len(found) == 1 and found[0].nodes == ["c"] and len(found[0].checks) == 2
    assert found[0].cause.startswith("c is more than the margin below the fleet median: ")
    assert found[0].remedy_check == "GC-FLEET-001"


def test_figures_of_failed_and_cluster_level_checks():
    results = [_burn("a"), _burn("b"), _burn("c", slow_gpu=2, factor=0.3, outcome="failed"),
               CheckResult("(cluster)", "GC-AR-001", "passed", figures={"busbw_gbps": 1.0})]
    derived = _fleet(results)
    # A node under the absolute floor is still in the fleet; the cluster row never is.
    assert set(derived) == {"a", "b", "c"} and derived["c"].outcome == "failed"


# --- the margin's sources -------------------------------------------------------------------


def test_the_options_margin_is_a_fraction_below_one():
    # The inventory's margin is the spec's Conformance model's to hold to its range
    # (tests/unit/spec/test_platform_rules.py); the command line's is checked here.
    assert fleet.DEFAULT_MARGIN == Conformance().fleet_margin == 0.10
    assert fleet.check_margin("0.25", "--fleet-margin") == 0.25
    for bad in ("lots", 1.0, -0.1, True, float("nan"), [0.1]):
        with pytest.raises(ValueError, match=r"^--fleet-margin: must be a fraction"):
            fleet.check_margin(bad, "--fleet-margin")


# --- what the reports show --------------------------------------------------------------------


def _report() -> Report:
    results = [_burn("gpu-1"), _burn("gpu-2"), _burn("gpu-3", slow_gpu=5, factor=0.6)]
    return Report(meta={"cluster": "c", "fleet_margin": 0.1}, nodes=["gpu-1", "gpu-2", "gpu-3"],
                  results=[*results, *fleet.fleet_results(results, 0.1)])


def test_results_json_summary_and_html_show_the_figure_beside_median_and_margin():
    report = _report()
    data = report.to_json()
    assert data["exit_code"] == 1
    rows = {c["node"]: c for c in data["fleet"]["comparisons"]}
    assert rows["gpu-3"] | {"threshold": pytest.approx(90.0)} == {
        "node": "gpu-3", "figure": "burn fp32 TFLOP/s (gpu-burn, slowest GPU)", "param": "burn-fp32-gpu-burn",
        "unit": "TFLOP/s", "where": "on gpu5", "value": 60.0, "median": 100.0, "margin": 0.1, "threshold": 90.0,
        "nodes": 3, "outcome": "failed"}
    assert data["fleet"]["margin"] == 0.1 and data["fleet"]["min_nodes"] == 3
    again = Report.from_json(json.loads(json.dumps(data)))
    assert again.exit_code == 1 and len(fleet.comparisons(again.results)) == 3

    md = markdown(report)
    assert "## Fleet comparison" in md
    assert ("| burn fp32 TFLOP/s (gpu-burn, slowest GPU) | gpu-3 | 60 TFLOP/s (on gpu5) | 100 TFLOP/s | 10 % | "
            "90 TFLOP/s | 3 | failed |") in md
    fig = figure_text(next(r for r in report.results if r.node == "gpu-3" and r.check_id == fleet.FLEET_CHECK))
    assert fig == "60 TFLOP/s on gpu5 vs fleet median 100 TFLOP/s of 3 nodes (margin 10 %: at least 90 TFLOP/s)"

    page = html_report.render(report)
    table = page[page.index('<table id="fleet">'):]
    table = table[:table.index("</table>")]
    assert "<td>gpu-3</td><td class=\"num\">60 TFLOP/s (on gpu5)</td><td class=\"num\">100 TFLOP/s</td>" in table
    assert '<td class="num">10 %</td><td class="num">90 TFLOP/s</td>' in table
    assert table.count('class="failed">failed<') == 1 and table.count('class="passed">passed<') == 2


def test_two_nodes_say_no_fleet_verdict_in_the_summary():
    results = [_burn("gpu-1"), _burn("gpu-2")]
    report = Report(meta={}, nodes=["gpu-1", "gpu-2"], results=[*results, *fleet.fleet_results(results)])
    assert report.exit_code == 0
    md = markdown(report)
    assert "| gpu-2 | 100 TFLOP/s (on gpu0) | - | 10 % | - | 2 | no fleet verdict |" in md
    assert "no fleet verdict" in html_report.render(report)


def test_junit_gets_a_case_per_fleet_result_with_the_failure_and_its_figures(tmp_path: Path):
    junit = tmp_path / "junit.xml"
    junit.write_text('<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="s" tests="1" failures="0" '
                     'errors="0" skipped="0" time="1.0"><testcase classname="t" name="test_burn[gpu-1]" time="1.0">'
                     '<properties><property name="check_id" value="GC-BURN-001"/><property name="node" '
                     'value="gpu-1"/></properties></testcase></testsuite></testsuites>')
    report = _report()
    finish_junit(junit, report.results, {}, tmp_path)
    finish_junit(junit, report.results, {}, tmp_path)  # a second pass adds nothing
    root = ET.parse(junit).getroot()
    cases = [c for c in root.iter("testcase") if c.get("classname") == "gpucluster.conformance.fleet"]
    assert len(cases) == 3
    slow = next(c for c in cases if c.get("name") == "GC-FLEET-001 fleet_comparison[gpu-3-burn-fp32-gpu-burn]")
    failure = slow.find("failure")
    assert failure is not None and failure.get("message", "").startswith("burn fp32 TFLOP/s (gpu-burn, slowest GPU) 60")
    out = slow.findtext("system-out") or ""
    assert "figure: 60 TFLOP/s on gpu5 vs fleet median 100 TFLOP/s of 3 nodes (margin 10 %" in out
    assert "next step: " in out
    props = {p.get("name"): p.get("value") for p in slow.iter("property")}
    assert props["check_id"] == "GC-FLEET-001" and props["node"] == "gpu-3"
    assert json.loads(props["figures"])["fleet_median_tflops"] == 100.0
    assert root.get("tests") == "4" and root.get("failures") == "1"


def test_prometheus_carries_the_node_figure_median_and_margin(tmp_path: Path):
    report = _report()
    text = metrics.textfile(report, "gpu-3")
    assert ('gpucluster_conformance_fleet_floating_point_operations_per_second{check="GC-FLEET-001",'
            'cluster="c",node="gpu-3",service="burn-fp32-gpu-burn",statistic="median"} 1e+14') in text
    assert 'statistic="node"} 6e+13' in text
    assert "gpucluster_conformance_fleet_margin_ratio{" in text
    # Every key the rule records is a family or a word.
    keys = {k for r in report.results if r.check_id == fleet.FLEET_CHECK for k in r.figures}
    keys |= {"fleet_node_busbw_gbps", "fleet_median_busbw_gbps", "fleet_node_hca_gbps", "fleet_median_hca_gbps"}
    assert all((metrics.classify(k) is None) != (k not in metrics.TEXT_FIGURES) for k in keys), keys
