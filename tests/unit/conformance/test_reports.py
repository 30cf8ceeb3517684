from __future__ import annotations

import json
import re
from xml.etree import ElementTree as ET

from gpucluster.conformance.report_data import Report
from gpucluster.conformance.reports import add_failure_types, write_all
from gpucluster.conformance.verdict import CheckResult

SERIES = [{"label": "inter:a,b,c", "points": [[1024, 0.01], [1 << 20, 0.8], [1 << 24, 1.9]]}]


def report() -> Report:
    return Report(
        meta={"cluster": "conf", "inventory": "inv.yml", "started": "2026-01-01T00:00:00+00:00",
              "duration_s": 12.5, "finished_unix": 1767225612},
        nodes=["a", "b"],
        results=[
            CheckResult("a", "GC-OS-001", "passed", figures={"os_codename": "bookworm"}, duration_s=0.2),
            CheckResult("a", "GC-AR-002", "passed", figures={"busbw_gbps": 1.9, "series": SERIES}),
            CheckResult("a", "GC-GPU-001", "skipped", "profile cpu-lab has no GPU"),
            CheckResult("b", "GC-OS-001", "passed"),
            CheckResult("b", "GC-NET-002", "failed", "eth1 MTU 1500, the spec says 9000", {"mtu": 1500}),
            CheckResult("b", "GC-SYS-003", "error", "ssh: connection refused", param="chrony"),
        ],
    )


def test_run_folder_has_every_report(tmp_path):
    paths = write_all(report(), tmp_path)
    for key in ("json", "markdown", "html", "prom:a", "prom:b"):
        assert paths[key].exists()
    assert "junit" not in paths  # junit.xml is pytest's own (--junitxml), written by the suite
    data = json.loads(paths["json"].read_text())
    assert data["exit_code"] == 1
    assert [(v["node"], v["verdict"]) for v in data["verdicts"]] == [("a", "pass"), ("b", "fail")]
    assert data["series"][0]["label"] == "inter:a,b,c"
    again = Report.from_json(data)
    assert again.nodes == ["a", "b"] and len(again.results) == 6 and again.exit_code == 1


# What pytest's --junitxml writes for a failed call, an error in setup and a skip (pytest gives
# <failure> and <error> no type; <skipped> has one).
PYTEST_JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite name="s" errors="1"
failures="3" skipped="1" tests="5" time="1.0" timestamp="2026-01-01T00:00:00+00:00" hostname="ctl"><testcase
classname="test_os" name="test_a[gpu-1]" time="0.1"><failure message="assert 1500 == 9000">longrepr</failure>
</testcase><testcase classname="test_os" name="test_b[gpu-1]" time="0.1"><failure
message="Failed: kubectl get nodes failed: refused">x</failure></testcase><testcase classname="test_os"
name="test_c[gpu-1]" time="0.1"><failure message="subprocess.TimeoutExpired: Command timed out">x</failure>
</testcase><testcase classname="test_os" name="test_d[gpu-2]" time="0.0"><error
message="failed on setup with &quot;Failed: node unreachable: timed out&quot;">x</error></testcase><testcase
classname="test_os" name="test_e[gpu-1]" time="0.0"><skipped type="pytest.skip" message="no GPU">x</skipped>
</testcase></testsuite></testsuites>"""


def test_failures_in_pytests_junit_get_a_type(tmp_path):
    path = tmp_path / "junit.xml"
    path.write_text(PYTEST_JUNIT)
    add_failure_types(path)
    root = ET.fromstring(path.read_text())
    types = {c.get("name"): next(iter(c)).get("type") for c in root.iter("testcase")}
    assert types == {"test_a[gpu-1]": "AssertionError", "test_b[gpu-1]": "pytest.fail",
                     "test_c[gpu-1]": "subprocess.TimeoutExpired", "test_d[gpu-2]": "pytest.fail",
                     "test_e[gpu-1]": "pytest.skip"}
    suite = next(root.iter("testsuite"))
    assert suite.get("hostname") == "ctl" and suite.get("failures") == "3"  # the rest is pytest's, untouched
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    add_failure_types(tmp_path / "absent.xml")  # no JUnit file asked for: nothing to do
    assert not (tmp_path / "absent.xml").exists()


def test_each_case_is_named_by_its_check_id_first(tmp_path):
    from gpucluster.conformance.reports import case_name, finish_junit

    # pytest-xdist's loadgroup appends @<group> to a node's tests: the group is the node's name.
    assert case_name("test_ceph_health[stor-1]@stor-1", "GC-CEPH-001", "stor-1") == \
        "GC-CEPH-001 test_ceph_health[stor-1]"
    assert case_name("test_every_node_ready", "GC-K8S-001", "(cluster)") == "GC-K8S-001 test_every_node_ready"
    assert case_name("GC-K8S-001 test_every_node_ready", "GC-K8S-001", "(cluster)") == \
        "GC-K8S-001 test_every_node_ready"  # a second pass leaves it
    assert case_name("test_x[a@b]", "", "") == "test_x[a@b]"  # no check ID: pytest's name as it is
    path = tmp_path / "junit.xml"
    path.write_text(PYTEST_JUNIT.replace('name="test_a[gpu-1]" time="0.1">', 'name="test_a[gpu-1]@gpu-1" time="0.1">'
                                         '<properties><property name="check_id" value="GC-NET-002"/><property '
                                         'name="node" value="gpu-1"/></properties>'))
    finish_junit(path, [], {}, None)
    names = [c.get("name") for c in ET.fromstring(path.read_text()).iter("testcase")]
    assert names[0] == "GC-NET-002 test_a[gpu-1]" and names[1] == "test_b[gpu-1]"


def test_markdown_and_html_tables(tmp_path):
    paths = write_all(report(), tmp_path)
    md = paths["markdown"].read_text()
    assert "| a | PASS |" in md and "| b | FAIL |" in md and "GC-NET-002: eth1 MTU 1500" in md
    assert "skipped GC-GPU-001: profile cpu-lab has no GPU" in md
    html = paths["html"].read_text()
    assert "<svg" in html and "<polyline" in html and 'class="fail"' in html
    ET.fromstring(re.search(r"<svg.*</svg>", html, re.S).group(0))  # the plot is well-formed XML


def test_a_check_module_that_did_not_load_is_never_a_pass(tmp_path):
    passing = Report(meta={"cluster": "c"}, nodes=["a"], results=[CheckResult("a", "GC-OS-001", "passed")])
    assert passing.exit_code == 0
    broken = Report(
        meta={"cluster": "c", "suite_errors": ["tests/conformance/ceph/test_ceph.py: ImportError"]},
        nodes=["a"],
        results=[CheckResult("a", "GC-OS-001", "passed")],
    )
    assert broken.exit_code == 1
    paths = write_all(broken, tmp_path)
    assert json.loads(paths["json"].read_text())["exit_code"] == 1
    assert "SUITE ERROR" in paths["markdown"].read_text()
