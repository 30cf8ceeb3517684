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


def test_cluster_level_checks_that_all_skipped_fail_nothing():
    vs = node_verdicts([r("a", "GC-OS-001", "passed"), r(CLUSTER, "GC-K8S-001", "skipped", "no kubeconfig")], ["a"])
    assert [(v.node, v.verdict) for v in vs] == [("a", "pass"), (CLUSTER, "pass")]
    assert vs[1].skipped and exit_code(vs) == 0
    assert [v.node for v in node_verdicts([r("a", "GC-OS-001", "passed")], ["a"])] == ["a"]  # no row when none ran
