"""A failure says why, how far off and what next: findings grouped by root cause, readable
messages, and the same in results.json, summary.md, summary.html, junit.xml and the console."""

from __future__ import annotations

import json
import re
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest

from gpucluster.cli import main
from gpucluster.conformance import allreduce_mpi, remedies
from gpucluster.conformance.bandwidth import AllReduceRun, SizePoint, judge
from gpucluster.conformance.fabric import fault_key, verdict_sentence
from gpucluster.conformance.pairs import PairResult, find_slow
from gpucluster.conformance.report_data import Report, figure_text, findings
from gpucluster.conformance.reports import finish_junit, markdown, write_all
from gpucluster.conformance.verdict import CLUSTER, CheckResult, shorten

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

NODES = ["gpu-1", "gpu-2", "gpu-3", "gpu-4"]
FLOOR = 0.05
SLOW = 0.0024


def throttled_search():
    """gpu-3's fabric link throttled: both its ring pairs are slow, the others pass."""
    return find_slow(NODES, [
        PairResult("gpu-1", "gpu-2", True, 1.9), PairResult("gpu-2", "gpu-3", False, SLOW),
        PairResult("gpu-3", "gpu-4", False, 0.0026), PairResult("gpu-4", "gpu-1", True, 1.8),
    ])


def throttled_report() -> Report:
    search = throttled_search()
    results = []
    for n in NODES:
        mine = search.nodes[n]
        pair_figures = {"floor_gbps": FLOOR, **{f"pair_busbw_gbps_{p['peer']}": p["busbw_gbps"] for p in mine.pairs}}
        ring = {"busbw_gbps": SLOW, "floor_gbps": FLOOR, "engine": "mpi-cpu", "ranks": 4}
        if n == "gpu-3":
            key = fault_key(search, n)
            results += [
                CheckResult(n, "GC-AR-002", "failed", "the ring all-reduce across 4 nodes (mpi-cpu, 4 ranks): busbw "
                            f"{SLOW} GB/s at >= 4 KiB < floor {FLOOR} GB/s", ring, cause=key,
                            log="logs/checks/gpu-3/GC-AR-002.log"),
                CheckResult(n, "GC-AR-003", "failed", f"pair all-reduce: {mine.message} (floor {FLOOR} GB/s)",
                            pair_figures, cause=key, log="logs/checks/gpu-3/GC-AR-003.log"),
            ]
        else:
            results += [CheckResult(n, "GC-AR-002", "skipped", "attributed to the slow node(s) gpu-3", ring),
                        CheckResult(n, "GC-AR-003", "passed", figures=pair_figures)]
        results.append(CheckResult(n, "GC-OS-001", "passed"))
    return Report(meta={"cluster": "lab"}, nodes=NODES, results=results)


# --- grouping ------------------------------------------------------------------------------------


def test_a_throttled_link_is_one_finding_with_the_checks_it_failed():
    report = throttled_report()
    found = findings(report)
    assert len(found) == 1
    f = found[0]
    assert f.checks == (("GC-AR-002", "gpu-3"), ("GC-AR-003", "gpu-3"))
    assert f.cause.startswith("gpu-3 is the slow node on the fabric")
    assert f.figure == f"busbw with gpu-2 {SLOW} GB/s, busbw with gpu-4 0.0026 GB/s < floor {FLOOR} GB/s"
    # The steps name the slow node and the peer of its first slow pair.
    assert f.remedy_check == "GC-AR-003"
    assert f.remedy == remedies.REMEDIES["GC-AR-003"].filled(remedies.Subject(node="gpu-3", peer="gpu-2"))
    assert f.log == "logs/checks/gpu-3/GC-AR-003.log"
    # The per-check results stay as they were.
    assert len([r for r in report.to_json()["results"] if r["outcome"] == "failed"]) == 2


def test_the_same_message_is_one_finding_and_different_ones_are_not():
    report = Report(meta={}, nodes=["a", "b", "c"], results=[
        CheckResult("a", "GC-NET-002", "failed", "fab0 MTU 1500, the spec says 9000", {"mtu": 1500}),
        CheckResult("b", "GC-NET-002", "failed", "fab0 MTU 1500, the spec says 9000", {"mtu": 1500}),
        CheckResult("c", "GC-NET-002", "failed", "fab0 MTU 9216, the spec says 9000", {"mtu": 9216}),
        # The node's own name in the message does not keep two nodes apart ...
        CheckResult("a", "GC-SYS-003", "failed", "chrony is inactive on a", param="chrony"),
        CheckResult("b", "GC-SYS-003", "failed", "chrony is inactive on b", param="chrony"),
        CheckResult("c", "GC-SYS-003", "failed", "chrony is inactive on b", param="chrony"),
        # ... and the same words from several checks are one fact: a keyring every Ceph check needs.
        CheckResult("c", "GC-CEPH-001", "failed", "c is a monitor without /etc/ceph/ceph.client.admin.keyring"),
        CheckResult("c", "GC-CEPH-002", "failed", "c is a monitor without /etc/ceph/ceph.client.admin.keyring"),
    ])
    found = {(tuple(f.labels), tuple(f.nodes)): f for f in findings(report)}
    assert set(found) == {(("GC-NET-002",), ("a", "b")), (("GC-NET-002",), ("c",)),
                          (("GC-SYS-003[chrony]",), ("a", "b")), (("GC-SYS-003[chrony]",), ("c",)),
                          (("GC-CEPH-001", "GC-CEPH-002"), ("c",))}
    assert found[(("GC-NET-002",), ("a", "b"))].remedy == remedies.REMEDIES["GC-NET-002"].filled(
        remedies.Subject(node="a,b"))
    assert found[(("GC-CEPH-001", "GC-CEPH-002"), ("c",))].remedy_check == "GC-CEPH-001"


def test_an_unreachable_node_is_one_finding_not_one_per_check():
    results = [CheckResult("b", cid, "error", "node unreachable: ssh: connect to host 10.0.0.2 port 22: "
                           "Connection timed out") for cid in ("GC-OS-001", "GC-OS-002", "GC-SYS-001")]
    report = Report(meta={"unreachable": {"b": "Connection timed out"}}, nodes=["a", "b"],
                    results=[CheckResult("a", "GC-OS-001", "passed"), *results])
    (f,) = findings(report)
    assert f.nodes == ["b"] and len(f.checks) == 3 and f.remedy_check == "unreachable"
    assert f.cause == "b is unreachable, so none of its checks ran: Connection timed out"
    assert f.line().startswith("FAIL GC-OS-001, GC-OS-002, GC-SYS-001 on b: b is unreachable")
    many = Report(meta={"unreachable": {"b": "timed out"}}, nodes=["b"], results=[
        CheckResult("b", f"GC-GPU-00{i}", "error", "node unreachable: timed out") for i in range(1, 10)])
    assert findings(many)[0].line() == "FAIL 9 checks on b: b is unreachable, so none of its checks ran: timed out"


def test_fault_keys_name_the_slow_node_the_slow_link_or_the_ring():
    search = throttled_search()
    assert fault_key(search, "gpu-3") == "fabric-slow-node:gpu-3"
    # gpu-2 and gpu-3 each pass with another node, their pair alone is slow: the link between them.
    link = find_slow(NODES, [
        PairResult("gpu-1", "gpu-2", True, 1.9), PairResult("gpu-2", "gpu-3", False, SLOW),
        PairResult("gpu-3", "gpu-4", True, 1.9), PairResult("gpu-4", "gpu-1", True, 1.8),
    ])
    assert fault_key(link, "gpu-2") == fault_key(link, "gpu-3") == "fabric-link:gpu-2+gpu-3"
    assert fault_key(link, "gpu-1") == "fabric-link:gpu-2+gpu-3"  # its ring failure is that link's
    two = find_slow(["gpu-1", "gpu-2"], [PairResult("gpu-1", "gpu-2", False, SLOW)])
    # Two nodes: the pair is the finding, no node is blamed.
    assert fault_key(two, "gpu-1") == fault_key(two, "gpu-2") == "fabric-pair:gpu-1+gpu-2"


def test_a_slow_pair_of_two_nodes_is_one_finding_across_both_nodes_and_checks():
    two = find_slow(["gpu-1", "gpu-2"], [PairResult("gpu-1", "gpu-2", False, SLOW)])
    results = []
    for n in ("gpu-1", "gpu-2"):
        key = fault_key(two, n)
        results += [CheckResult(n, "GC-AR-002", "failed", f"ring: busbw {SLOW} GB/s < floor {FLOOR} GB/s",
                                {"busbw_gbps": SLOW, "floor_gbps": FLOOR}, cause=key),
                    CheckResult(n, "GC-AR-003", "failed", two.nodes[n].message, cause=key)]
    (f,) = findings(Report(meta={}, nodes=["gpu-1", "gpu-2"], results=results))
    assert len(f.checks) == 4 and f.nodes == ["gpu-1", "gpu-2"]
    assert f.figure == f"busbw {SLOW} GB/s < floor {FLOOR} GB/s"
    assert any("third node" in step for step in f.remedy)


def test_figures_against_what_was_expected():
    assert figure_text(CheckResult("a", "GC-AR-001", "failed", figures={"busbw_gbps": 120.25, "floor_gbps": 150})) \
        == "busbw 120 GB/s < floor 150 GB/s"
    assert figure_text(CheckResult("a", "GC-AR-002", "failed", figures={"busbw_gbps": None, "floor_gbps": 40})) \
        == "no busbw measured at large sizes; floor 40 GB/s"
    assert figure_text(CheckResult("a", "GC-RDMA-001", "failed", figures={"min_hca_gbps_b": 12.5})) \
        == "slowest HCA with b 12.5 Gb/s"
    assert figure_text(CheckResult("a", "GC-SYS-001", "failed", figures={"offset_s": 0.25})) \
        == "clock offset 0.25 s, limit 0.1 s"
    assert figure_text(CheckResult("a", "GC-NET-002", "failed", figures={"mtu": 1500})) == ""


# --- readable messages ---------------------------------------------------------------------------

MPIRUN_ECHO = ("mpirun --allow-run-as-root -np 4 --host 10.77.1.10:1,10.77.1.11:1,10.77.1.12:1,10.77.1.13:1 "
               "--mca plm_rsh_no_tree_spawn 1 --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include "
               "10.77.1.0/24 --mca oob_tcp_if_include 10.77.1.0/24 --mca plm_rsh_args '-o BatchMode=yes'")


def test_a_shortened_message_is_cut_between_words_and_says_where_the_rest_is():
    text = f"mpirun exited 1: {MPIRUN_ECHO}"
    short = shorten(text, 80, "logs/checks/gpu-3/GC-AR-002.log")
    assert len(short) < 140 and short.endswith("… (the rest in logs/checks/gpu-3/GC-AR-002.log)")
    kept = short.split(" … ")[0]
    assert text.startswith(kept) and text[len(kept)] == " "  # no token cut in two
    assert shorten("short enough", 80) == "short enough"
    assert shorten("x" * 100, 80) == "… (100 more characters)"


def test_mpiruns_reason_is_its_error_never_its_command_line():
    output = (f"$ {MPIRUN_ECHO}\n{MPIRUN_ECHO}\n"
              "--------------------------------------------------------------------------\n"
              "ORTE was unable to reliably start one or more daemons.\n"
              "--------------------------------------------------------------------------\n")
    assert allreduce_mpi.last_error_line(output) == "ORTE was unable to reliably start one or more daemons."
    assert allreduce_mpi.last_error_line(f"{MPIRUN_ECHO}\n") == "no output"


def test_an_all_reduce_message_is_a_sentence_with_the_figure():
    pts = [SizePoint(4096, 1e6, SLOW, SLOW, 0), SizePoint(8192, 2e6, SLOW, SLOW, 0)]
    run = AllReduceRun("mpi-cpu", "inter:gpu-1,gpu-2", ("gpu-1", "gpu-2"), 2, pts, status="ok")
    v = judge(run, FLOOR, 4096)
    assert verdict_sentence("the ring all-reduce", run, v, 4096) == (
        f"the ring all-reduce: busbw {SLOW} GB/s at >= 4 KiB < floor {FLOOR} GB/s")
    broken = AllReduceRun("mpi-cpu", "inter:x", ("a", "b"), 0, notes=["mpirun exited 1: No route to host"])
    assert verdict_sentence("the ring all-reduce", broken, judge(broken, FLOOR, 4096), 4096) == (
        "the ring all-reduce did not complete (mpirun exited 1: No route to host)")


# --- every format --------------------------------------------------------------------------------


def test_results_json_summary_and_html_show_the_findings_first(tmp_path: Path):
    paths = write_all(throttled_report(), tmp_path)
    data = json.loads(paths["json"].read_text())
    (f,) = data["findings"]
    assert f["checks"] == [{"check": "GC-AR-002", "node": "gpu-3"}, {"check": "GC-AR-003", "node": "gpu-3"}]
    assert set(f) >= {"cause", "checks", "figure", "remedy", "log"} and f["remedy"]["check"] == "GC-AR-003"
    assert len(data["results"]) == 12  # every check's own result is still there
    md = paths["markdown"].read_text()
    assert md.index("## Findings (1)") < md.index("## Verdicts") < md.index("## gpu-3: FAIL")
    assert "- Checks: GC-AR-002 on gpu-3, GC-AR-003 on gpu-3" in md
    assert "- Log: `logs/checks/gpu-3/GC-AR-003.log`" in md and "iperf3" in md
    # The verdict table names the failing checks; their words are in the finding, once.
    assert re.search(r"^\| gpu-3 \| FAIL \| 1 passed, 2 failed, 0 skipped \| GC-AR-002, GC-AR-003 \|$", md, re.M)
    html = paths["html"].read_text()
    assert html.index('id="findings"') < html.index('id="verdicts"')
    assert "gpu-3 is the slow node on the fabric" in html and "tc qdisc" in html


def test_the_console_is_one_line_per_finding_then_the_table():
    from gpucluster import verify

    lines = verify.table(throttled_report()).splitlines()
    assert lines[0] == (f"FAIL GC-AR-002, GC-AR-003 on gpu-3: gpu-3 is the slow node on the fabric: every pair run "
                        f"with it is under the floor while its peers pass with other nodes (busbw with gpu-2 {SLOW} "
                        f"GB/s, busbw with gpu-4 0.0026 GB/s < floor {FLOOR} GB/s); log "
                        "logs/checks/gpu-3/GC-AR-003.log")
    assert lines[1] == "" and lines[2].startswith("node ")
    assert sum(1 for x in lines if x.startswith("gpu-3 ")) == 1


def test_the_cli_prints_the_findings_the_table_and_the_run_folder_once(tmp_path: Path, capsys,
                                                                        monkeypatch: pytest.MonkeyPatch):
    from gpucluster import verify

    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all: {}\n")
    monkeypatch.setattr(verify, "run", lambda opts: throttled_report())
    code = main(["verify", "--inventory", str(inventory), "--run-dir", str(tmp_path / "run")])
    out = capsys.readouterr().out
    assert code == 1
    assert out.count("run folder: ") == 1 and out.count("FAIL GC-AR-002, GC-AR-003 on gpu-3") == 1
    assert len(re.findall(r"^node\s+verdict", out, re.M)) == 1 and "Traceback" not in out


# What pytest's --junitxml writes (properties after the failure here, as an older pytest did), and
# a suite without timestamp or hostname.
JUNIT = """<?xml version="1.0" encoding="utf-8"?><testsuites name="pytest tests"><testsuite
name="gpucluster-conformance" errors="0" failures="1" skipped="0" tests="2" time="3.5"><testcase
classname="test_allreduce" name="test_allreduce_pairs[gpu-3]" time="1.0"><failure message="AssertionError: pair
all-reduce: slow node&#10;assert False">Traceback...</failure><properties><property name="check_id"
value="GC-AR-003"/><property name="node" value="gpu-3"/></properties></testcase><testcase classname="test_os"
name="test_os_release[gpu-3]" time="0.1"><properties><property name="check_id" value="GC-OS-001"/><property
name="node" value="gpu-3"/></properties></testcase></testsuite></testsuites>"""


def test_junit_carries_the_figures_log_and_tail_of_a_failure(tmp_path: Path):
    run_dir = tmp_path / "run"
    raw = run_dir / "logs" / "allreduce-pair_gpu-2_gpu-3.log"
    raw.parent.mkdir(parents=True)
    raw.write_text(f"$ {MPIRUN_ECHO}\n" + "".join(f"line {i}\n" for i in range(100)))
    path = run_dir / "junit.xml"
    path.write_text(JUNIT)
    r = next(x for x in throttled_report().results if x.check_id == "GC-AR-003" and x.node == "gpu-3")
    r = CheckResult(**{**r.to_json(), "test": "t::pairs[gpu-3]"})
    finish_junit(path, [r], {"t::pairs[gpu-3]": ["logs/allreduce-pair_gpu-2_gpu-3.log"]}, run_dir)
    root = ET.parse(path).getroot()
    case = next(root.iter("testcase"))
    assert [c.tag for c in case] == ["properties", "failure", "system-out"]
    failure = case.find("failure")
    assert failure.get("type") == "AssertionError" and failure.get("message") == r.message
    out = case.find("system-out").text
    assert f"figure: busbw with gpu-2 {SLOW} GB/s" in out and "log: logs/checks/gpu-3/GC-AR-003.log" in out
    assert "raw log: logs/allreduce-pair_gpu-2_gpu-3.log" in out and "next step: Measure the two fabric" in out
    assert out.rstrip().endswith("line 99") and "line 69" not in out  # the tail: its last 30 lines
    suite = next(root.iter("testsuite"))
    assert suite.get("timestamp") and suite.get("hostname")
    assert (root.get("tests"), root.get("failures"), root.get("errors"), root.get("skipped")) == ("2", "1", "0", "0")
    passed = list(root.iter("testcase"))[1]
    assert passed.find("system-out") is None


def test_markdown_of_a_passing_run_has_no_findings():
    report = Report(meta={}, nodes=["a"], results=[CheckResult("a", "GC-OS-001", "passed")])
    assert findings(report) == [] and "## Findings" not in markdown(report)
    assert report.to_json()["findings"] == []


def test_a_cluster_level_failure_is_a_finding_of_its_own():
    report = Report(meta={}, nodes=["a"], results=[
        CheckResult("a", "GC-OS-001", "passed"),
        CheckResult(CLUSTER, "GC-K8S-001", "failed", "not Ready or not registered: ['a']")])
    (f,) = findings(report)
    assert f.checks == (("GC-K8S-001", CLUSTER),) and "kubectl describe node" in " ".join(f.remedy)


# --- through the real plugin -----------------------------------------------------------------------

THROTTLED_SUITE = '''
import pytest

from gpucluster.conformance.fabric import fault_key
from gpucluster.conformance.pairs import PairResult, find_slow

# stor-1's fabric link throttled: both its pairs crawl, gpu-1 with gpu-2 passes.
SEARCH = find_slow(["gpu-1", "gpu-2", "stor-1"], [
    PairResult("gpu-1", "gpu-2", True, 1.9), PairResult("gpu-2", "stor-1", False, 0.0024),
    PairResult("stor-1", "gpu-1", False, 0.0025)])
MPIRUN = ("mpirun --allow-run-as-root -np 3 --host 10.77.1.10:1,10.77.1.11:1,10.77.1.12:1 --mca pml ob1 "
          "--mca btl tcp,self --mca btl_tcp_if_include 10.77.1.0/24 --mca oob_tcp_if_include 10.77.1.0/24 ")


@pytest.mark.check("GC-AR-002")
def test_ring(node, run_dir):
    """The ring MUST be fast."""
    log = run_dir / "logs" / "allreduce-inter.log"
    log.parent.mkdir(exist_ok=True)
    log.write_text(f"$ {MPIRUN}\\nGCAR {{}}\\nthe ring crawled at 0.0024 GB/s\\n")
    node.attach("logs/allreduce-inter.log")
    node.figure("busbw_gbps", 0.0024)
    node.figure("floor_gbps", 0.05)
    if node.name not in SEARCH.slow:
        pytest.skip("attributed to the slow node(s) stor-1")
    node.cause(fault_key(SEARCH, node.name))
    assert 0.0024 >= 0.05, "the ring all-reduce across 3 nodes: busbw 0.0024 GB/s at >= 4 KiB < floor 0.05 GB/s"


@pytest.mark.check("GC-AR-003")
def test_pairs(node):
    """Pairs MUST be fast."""
    mine = SEARCH.nodes[node.name]
    node.figure("floor_gbps", 0.05)
    for p in mine.pairs:
        node.figure(f"pair_busbw_gbps_{p['peer']}", p["busbw_gbps"])
    if mine.status != "ok":
        node.cause(fault_key(SEARCH, node.name))
    assert mine.status == "ok", f"pair all-reduce: {mine.message} (floor 0.05 GB/s)"


@pytest.mark.check("GC-SYS-004")
def test_long(node):
    """A long message MUST be shortened between words."""
    if node.name == "gpu-1":
        pytest.fail("mpirun exited 1: " + MPIRUN * 6)
'''


def _run_suite(tmp_path: Path, *extra: str):
    from tests.unit.conformance.test_plugin import GOLDEN, SYNTHETIC_CONFTEST, _pytest

    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(SYNTHETIC_CONFTEST)
    (suite / "test_throttled.py").write_text(THROTTLED_SUITE)
    run = tmp_path / "run"
    out = _pytest([str(suite), "--rootdir", str(suite), "--inventory", str(GOLDEN), "--run-dir", str(run),
                   "-o", "junit_family=xunit1", *extra], tmp_path)
    return run, out


def test_a_throttled_link_through_the_plugin_is_one_finding_in_every_format(tmp_path: Path, ssh_stub: Path):
    run, out = _run_suite(tmp_path)
    data = json.loads((run / "results.json").read_text())
    assert data["exit_code"] == 1, out.stdout[-3000:]
    by_cause = {f["cause"].split(":")[0]: f for f in data["findings"]}
    slow = by_cause["stor-1 is the slow node on the fabric"]
    assert [(c["check"], c["node"]) for c in slow["checks"]] == [("GC-AR-002", "stor-1"), ("GC-AR-003", "stor-1")]
    assert slow["figure"] == "busbw with gpu-1 0.0025 GB/s, busbw with gpu-2 0.0024 GB/s < floor 0.05 GB/s"
    assert slow["log"] == "logs/checks/stor-1/GC-AR-003.log" and slow["remedy"]["check"] == "GC-AR-003"
    assert len(data["findings"]) == 2

    # The long message: cut between words, naming the check's log, which holds all of it.
    long = next(r for r in data["results"] if r["check_id"] == "GC-SYS-004" and r["node"] == "gpu-1")
    assert long["message"].endswith("… (the rest in logs/checks/gpu-1/GC-SYS-004.log)")
    assert ("mpirun exited 1: " + "mpirun --allow-run-as-root -np 3 --host 10.77.1.10:1,10.77.1.11:1,10.77.1.12:1 "
            "--mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include 10.77.1.0/24 --mca oob_tcp_if_include "
            "10.77.1.0/24 " * 6).startswith(long["message"].split(" … ")[0] + " ")
    check_log = (run / long["log"]).read_text()
    line = next(x for x in out.stdout.splitlines() if x.startswith("FAIL GC-SYS-004 on gpu-1: "))
    assert len(line) < 300 and line.endswith("… (the rest in logs/checks/gpu-1/GC-SYS-004.log)")
    message_line = next(x for x in check_log.splitlines() if x.startswith("message: "))
    assert message_line.count("--mca pml ob1") == 6 and "--- pytest's report ---" in check_log

    # The check's log: message, figures, next steps, the tail of mpirun's log, pytest's traceback.
    ring_log = (run / "logs" / "checks" / "stor-1" / "GC-AR-002.log").read_text()
    assert "the ring crawled at 0.0024 GB/s" in ring_log and "next steps:" in ring_log
    assert "cause: fabric-slow-node:stor-1" in ring_log and "assert 0.0024 >= 0.05" in ring_log

    # junit.xml: properties first, a typed failure with the readable message, figures, log and tail.
    cases = {c.get("name"): c for c in ET.parse(run / "junit.xml").getroot().iter("testcase")}
    ring = cases["GC-AR-002 test_ring[stor-1]"]
    assert [c.tag for c in ring][:2] == ["properties", "failure"]
    assert ring.find("failure").get("type") == "AssertionError"
    assert ring.find("failure").get("message").startswith("the ring all-reduce across 3 nodes: busbw 0.0024")
    sysout = ring.find("system-out").text
    assert "log: logs/checks/stor-1/GC-AR-002.log" in sysout and sysout.rstrip().endswith("crawled at 0.0024 GB/s")
    root = ET.parse(run / "junit.xml").getroot()
    assert root.get("failures") == "3" and root.get("tests") == str(len(data["results"]))

    # The terminal: the finding on one line, before the table; summary.md the same order.
    assert re.search(r"^FAIL GC-AR-002, GC-AR-003 on stor-1: stor-1 is the slow node on the fabric.*"
                     r"\(busbw with gpu-1 0\.0025 GB/s, busbw with gpu-2 0\.0024 GB/s < floor 0\.05 GB/s\); "
                     r"log logs/checks/stor-1/GC-AR-003\.log$", out.stdout, re.M)
    md = (run / "summary.md").read_text()
    assert md.index("## Findings (2)") < md.index("## Verdicts")


def test_under_verify_the_console_gets_no_traceback_and_no_second_table(tmp_path: Path, ssh_stub: Path):
    from gpucluster import verify
    from gpucluster.conformance.nodes import load_inventory
    from tests.unit.conformance.test_plugin import GOLDEN

    argv = verify.pytest_argv(verify.VerifyOptions(GOLDEN, tmp_path), load_inventory(GOLDEN))
    assert {"--tb=no", "-rN", "--verdicts-by-caller"} <= set(argv)
    run, out = _run_suite(tmp_path, "--tb=no", "-rN", "--verdicts-by-caller")
    assert json.loads((run / "results.json").read_text())["exit_code"] == 1
    text = out.stdout + out.stderr
    assert "Traceback" not in text and "def test_" not in text and "assert 0.0024" not in text
    assert "run folder:" not in text and not re.search(r"^stor-1\s+FAIL", text, re.M)  # the CLI prints them
    assert re.search(r"3 failed", text)


def test_the_clis_json_carries_the_findings(tmp_path: Path, capsys, monkeypatch: pytest.MonkeyPatch):
    from gpucluster import verify

    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all: {}\n")
    monkeypatch.setattr(verify, "run", lambda opts: throttled_report())
    assert main(["verify", "--inventory", str(inventory), "--run-dir", str(tmp_path / "run"), "--json"]) == 1
    out = json.loads(capsys.readouterr().out)
    assert [f["checks"] for f in out["findings"]] == [[{"check": "GC-AR-002", "node": "gpu-3"},
                                                       {"check": "GC-AR-003", "node": "gpu-3"}]]


def test_the_html_findings_show_commands_as_code_and_the_example_as_one_finding():
    from gpucluster.conformance import html_report
    from tests.unit.conformance.report_example import example_report

    report = example_report()
    assert [f.labels for f in findings(report)] == [["GC-AR-002", "GC-AR-003"], ["GC-SYS-003[nvidia-persistenced]"]]
    page = html_report.render(report)
    section = page[page.index('id="findings"'):page.index('id="verdicts"')]
    assert "<code>iperf3 -s</code>" in section and "`" not in section
    assert "<b class=\"cause\">gpu-3 is the slow node on the fabric" in section
    assert str(html_report.code_spans("a `<b>` b")) == "a <code>&lt;b&gt;</code> b"
    assert str(html_report.code_spans("one ` left")) == "one ` left"
