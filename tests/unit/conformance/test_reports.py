from __future__ import annotations

import json
import re
from xml.etree import ElementTree as ET

from gpucluster.conformance.reports import Report, Series, prometheus_textfile, svg_plot, write_all
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
    for key in ("json", "junit", "markdown", "html", "prom:a", "prom:b"):
        assert paths[key].exists()
    data = json.loads(paths["json"].read_text())
    assert data["exit_code"] == 1
    assert [(v["node"], v["verdict"]) for v in data["verdicts"]] == [("a", "pass"), ("b", "fail")]
    assert data["series"][0]["label"] == "inter:a,b,c"
    again = Report.from_json(data)
    assert again.nodes == ["a", "b"] and len(again.results) == 6 and again.exit_code == 1


def test_junit_one_suite_per_node(tmp_path):
    root = ET.fromstring(write_all(report(), tmp_path)["junit"].read_text())
    suites = {s.get("name"): s for s in root.iter("testsuite")}
    assert suites["a"].get("skipped") == "1" and suites["a"].get("failures") == "0"
    assert suites["b"].get("failures") == "1" and suites["b"].get("errors") == "1"
    failure = next(suites["b"].iter("failure"))
    assert "MTU 1500" in failure.get("message")
    names = [c.get("name") for c in suites["b"].iter("testcase")]
    assert "GC-SYS-003[chrony] Required services" in names


def test_markdown_and_html_tables(tmp_path):
    paths = write_all(report(), tmp_path)
    md = paths["markdown"].read_text()
    assert "| a | PASS |" in md and "| b | FAIL |" in md and "GC-NET-002: eth1 MTU 1500" in md
    assert "skipped GC-GPU-001: profile cpu-lab has no GPU" in md
    html = paths["html"].read_text()
    assert "<svg" in html and "<polyline" in html and 'class="fail"' in html
    ET.fromstring(re.search(r"<svg.*</svg>", html, re.S).group(0))  # the plot is well-formed XML


def test_svg_scales_points_inside_the_frame():
    svg = svg_plot([Series("x", [(1024, 1.0), (1 << 24, 10.0)])], width=400, height=200)
    pts = re.search(r'points="([^"]+)"', svg).group(1).split()
    xs = [float(p.split(",")[0]) for p in pts]
    ys = [float(p.split(",")[1]) for p in pts]
    assert xs[0] < xs[1] and ys[0] > ys[1] and all(0 <= y <= 200 for y in ys)
    assert "No all-reduce" in svg_plot([])


def test_prometheus_textfile_format():
    text = prometheus_textfile(report(), "b")
    assert 'gpucluster_conformance_pass{cluster="conf",node="b"} 0' in text
    assert 'gpucluster_conformance_check{check="GC-NET-002",outcome="failed"} 1' in text
    assert 'gpucluster_conformance_figure{check="GC-NET-002",name="mtu"} 1500' in text
    sample = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{([a-zA-Z_]\w*="[^"]*",?)*\})? -?[0-9.e+]+$')
    for line in text.splitlines():
        assert line.startswith("# HELP ") or line.startswith("# TYPE ") or sample.match(line), line
    assert 'node="a"} 1' in prometheus_textfile(report(), "a")


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
