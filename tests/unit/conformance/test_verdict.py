from __future__ import annotations

from gpucluster.conformance.verdict import CheckResult, exit_code, node_verdicts


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
