from __future__ import annotations

from gpucluster.conformance.report_data import Report
from gpucluster.conformance.verdict import CLUSTER, CheckResult, exit_code, node_verdicts


def r(node, cid, outcome, msg=""):
    return CheckResult(node=node, check_id=cid, outcome=outcome, message=msg)


def test_a_failed_check_fails_only_its_node():
    vs = node_verdicts([r("a", "GC-OS-001", "passed"), r("b", "GC-OS-001", "passed"),
                        r("b", "GC-NET-002", "failed", "MTU 1500"), r("a", "GC-GPU-001", "skipped", "no GPU")],
                       ["a", "b"])
    assert [(v.node, v.verdict) for v in vs] == [("a", "pass"), ("b", "fail")]
    assert vs[1].failed[0].message == "MTU 1500"
    assert vs[0].skipped[0].message == "no GPU"
    assert exit_code(vs) == 1


def test_errors_fail_and_skips_alone_never_pass():
    vs = node_verdicts([r("a", "GC-OS-001", "error", "ssh refused"), r("b", "GC-GPU-001", "skipped", "no GPU")],
                       ["a", "b", "c"])
    assert [v.verdict for v in vs] == ["fail", "fail", "fail"]
    assert "nothing was verified" in vs[1].reason and "nothing was verified" in vs[2].reason


def test_all_pass_exit_zero_and_empty_is_not_success():
    vs = node_verdicts([r("a", "GC-OS-001", "passed")], ["a"])
    assert exit_code(vs) == 0
    assert exit_code([]) == 1


def test_json_round_trip():
    x = CheckResult("a", "GC-SYS-003", "failed", "chrony is inactive", {"state": "inactive"}, 0.5, "t", "chrony")
    assert CheckResult.from_json(x.to_json()) == x
    assert x.label == "GC-SYS-003[chrony]"


def test_a_failed_cluster_level_check_fails_the_run_in_a_row_of_its_own():
    results = [r("a", "GC-OS-001", "passed"), r(CLUSTER, "GC-K8S-001", "failed", "not Ready: ['a']"),
               r(CLUSTER, "GC-K8S-003", "skipped", "no GPU")]
    vs = node_verdicts(results, ["a"])
    assert [(v.node, v.verdict) for v in vs] == [("a", "pass"), (CLUSTER, "fail")]
    assert vs[1].failed[0].check_id == "GC-K8S-001" and exit_code(vs) == 1
    report = Report(meta={"cluster": "c"}, nodes=["a"], results=results)
    assert report.exit_code == 1
    data = report.to_json()
    assert [v["node"] for v in data["verdicts"]] == ["a", CLUSTER] and len(data["results"]) == 3
    again = Report.from_json(data)
    assert again.nodes == ["a"] and again.exit_code == 1  # the row is no host: nothing is published to it


def test_cluster_level_checks_that_all_skipped_read_skipped_and_fail_only_when_asked():
    vs = node_verdicts([r("a", "GC-OS-001", "passed"), r(CLUSTER, "GC-K8S-001", "skipped", "no kubeconfig")], ["a"])
    # Nothing was verified: SKIPPED, never PASS; the run passes unless CI asks to fail on it.
    assert [(v.node, v.verdict) for v in vs] == [("a", "pass"), (CLUSTER, "skipped")]
    assert vs[1].reason == "every cluster-level check skipped: no kubeconfig"
    assert vs[1].skipped and exit_code(vs) == 0 and exit_code(vs, fail_on_skipped_cluster=True) == 1
    assert [v.node for v in node_verdicts([r("a", "GC-OS-001", "passed")], ["a"])] == ["a"]  # no row when none ran
    # One cluster-level check that passed makes the row a pass, the flag or not.
    mixed = node_verdicts([r("a", "GC-OS-001", "passed"), r(CLUSTER, "GC-K8S-001", "passed"),
                           r(CLUSTER, "GC-K8S-003", "skipped", "no GPU node")], ["a"])
    assert mixed[1].verdict == "pass" and exit_code(mixed, fail_on_skipped_cluster=True) == 0


def test_the_banner_counts_skips_and_names_the_failing_rows_in_every_format():
    from gpucluster.conformance import html_report
    from gpucluster.conformance.reports import console_lines, markdown

    results = [r("a", "GC-OS-001", "passed"), r("a", "GC-GPU-001", "skipped", "no GPU"),
               r("b", "GC-OS-001", "failed", "not Debian"), r("c", "GC-OS-001", "passed"),
               r(CLUSTER, "GC-K8S-001", "skipped", "no kubeconfig"),
               r(CLUSTER, "GC-K8S-003", "skipped", "no kubeconfig")]
    report = Report(meta={"cluster": "x", "unreachable": {"c": "timed out"}}, nodes=["a", "b", "c"], results=results)
    text = ("1 of 3 node(s) pass; failing: b, c; 3 check(s) skipped; (cluster) every cluster-level check skipped; "
            "exit code 1")
    summary = report.to_json()["summary"]
    assert summary == {"verdict": "fail", "exit_code": 1, "nodes_passing": 1, "nodes_total": 3, "failing": ["b", "c"],
                       "skipped_checks": 3, "cluster": "skipped"}
    assert f"**FAIL**: {text}." in markdown(report)
    row = "| (cluster) | SKIPPED | 0 passed, 0 failed, 2 skipped | every cluster-level check skipped: no kubeconfig |"
    assert row in markdown(report)
    assert console_lines(report)[-1] == f"FAIL: {text}"
    page = html_report.render(report)
    assert f"FAIL<small>{text}</small>" in page and '<tr class="skipped"><td>(cluster)</td><td>SKIPPED</td>' in page

    # CI asks to fail on it: the row still reads SKIPPED, and the banner names it among the failing rows.
    mine = results[:2] + results[4:]
    strict = Report(meta={"cluster": "x", "fail_on_skipped_cluster": True}, nodes=["a"], results=mine)
    assert strict.exit_code == 1 and strict.to_json()["summary"]["failing"] == [CLUSTER]
    assert [v["verdict"] for v in strict.to_json()["verdicts"]] == ["pass", "skipped"]
    assert Report(meta={"cluster": "x"}, nodes=["a"], results=mine).exit_code == 0
