"""The suite's pytest plugin run for real: every check that runs is counted, cluster-level ones
included, and junit.xml is pytest's own with each check's ID, node and figures as properties.

The SSH client is the stand-in of tests/unit/cli/fakessh.py (every node answers, on this machine);
kubectl is a stand-in too, for a cluster whose nodes never became Ready.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path
from xml.etree import ElementTree as ET

import pytest
import yaml

from gpucluster.conformance.verdict import CLUSTER

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
SUITE = REPO / "tests" / "conformance"
GOLDEN = REPO / "tests" / "golden" / "inventory" / "lab.yml"

SYNTHETIC_CONFTEST = 'pytest_plugins = ["gpucluster.conformance.plugin"]\n'
SYNTHETIC_CHECKS = '''
import pytest


@pytest.mark.check("GC-OS-001")
def test_every_node_passes(node):
    """Every node MUST pass."""
    node.figure("mtu", 9000)


@pytest.mark.check("GC-K8S-001")
def test_the_cluster_fails(inventory):
    """The cluster MUST pass."""
    assert len(inventory.nodes) == 0, "not Ready or not registered: every node"


@pytest.mark.check("GC-K8S-003")
def test_a_cluster_check_that_skips():
    """Skipped: nothing to check."""
    pytest.skip("no GPU node")
'''

# kubectl for a cluster whose API answers but none of whose nodes registered.
FAKE_KUBECTL = """#!/bin/sh
case "$*" in
  *" get nodes "*) echo '{"items": []}' ;;
  *" get node "*) echo '{"status": {"allocatable": {}}}' ;;
esac
exit 0
"""


def _pytest(args: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest", *args, "-p", "no:cacheprovider",
                           "-p", "no:hypothesispytest"], capture_output=True, text=True, cwd=cwd, timeout=180,
                          check=False, env={**os.environ, "PYTHONPATH": str(REPO)})


def _synthetic_suite(tmp_path: Path) -> Path:
    suite = tmp_path / "suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(SYNTHETIC_CONFTEST)
    (suite / "test_synthetic.py").write_text(textwrap.dedent(SYNTHETIC_CHECKS))
    return suite


def _testcases(junit: Path) -> list[ET.Element]:
    return list(ET.parse(junit).getroot().iter("testcase"))


def _props(case: ET.Element) -> dict[str, str]:
    return {p.get("name", ""): p.get("value", "") for p in case.iter("property")}


def test_a_failed_cluster_level_check_fails_the_run_beside_passing_nodes(tmp_path: Path, ssh_stub: Path) -> None:
    suite = _synthetic_suite(tmp_path)
    run = tmp_path / "run"
    out = _pytest([str(suite), "--rootdir", str(suite), "--inventory", str(GOLDEN), "--run-dir", str(run)], tmp_path)
    data = json.loads((run / "results.json").read_text())
    verdicts = {v["node"]: v for v in data["verdicts"]}
    nodes = [n for n in verdicts if n != CLUSTER]
    # Every node passed its own check; the cluster row alone fails the run.
    assert nodes and all(verdicts[n]["verdict"] == "pass" for n in nodes), out.stdout[-3000:]
    assert verdicts[CLUSTER]["verdict"] == "fail"
    assert [f["check"] for f in verdicts[CLUSTER]["failed"]] == ["GC-K8S-001"]
    assert [s["check"] for s in verdicts[CLUSTER]["skipped"]] == ["GC-K8S-003"]
    assert data["exit_code"] == 1
    # Every test pytest ran is in every report: one per node for the node check, one per cluster check.
    assert len(data["results"]) == len(nodes) + 2
    assert len(_testcases(run / "junit.xml")) == len(data["results"])
    assert re.search(rf"^\| {re.escape(CLUSTER)} \| FAIL \|", (run / "summary.md").read_text(), re.M)
    assert re.search(rf"^{re.escape(CLUSTER)}\s+FAIL\s+0 passed, 1 failed, 1 skipped", out.stdout, re.M)
    # The failure is one line above the table: check, node, cause, and where its log is.
    assert re.search(rf"^FAIL GC-K8S-001 on {re.escape(CLUSTER)}: not Ready or not registered: every node; "
                     r"log logs/checks/cluster/GC-K8S-001\.log$", out.stdout, re.M)


def test_the_real_kubernetes_checks_are_counted_as_the_clusters(tmp_path: Path, ssh_stub: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    kubectl = ssh_stub / "bin" / "kubectl"
    kubectl.write_text(FAKE_KUBECTL)
    kubectl.chmod(0o755)
    kubeconfig = tmp_path / "admin.conf"
    kubeconfig.write_text("apiVersion: v1\nkind: Config\n")
    monkeypatch.setenv("GPUCLUSTER_KUBECONFIG", str(kubeconfig))
    run = tmp_path / "run"
    out = _pytest([str(SUITE / "kubernetes"), "-c", str(SUITE / "pytest.ini"), "--rootdir", str(SUITE),
                   "--inventory", str(GOLDEN), "--run-dir", str(run)], tmp_path)
    data = json.loads((run / "results.json").read_text())
    mine = {r["check_id"]: r for r in data["results"] if r["node"] == CLUSTER}
    assert set(mine) == {"GC-K8S-001", "GC-K8S-003", "GC-K8S-004"}
    assert mine["GC-K8S-001"]["outcome"] == "failed"
    assert mine["GC-K8S-001"]["message"] == ("0 of 2 nodes Ready, expected 2: gpu-1 not registered; "
                                             "gpu-2 not registered")
    assert data["exit_code"] == 1 and CLUSTER in {v["node"] for v in data["verdicts"]}
    # pytest's summary line counts what ran; results.json and junit.xml hold as many.
    counts = {word: int(n) for n, word in re.findall(r"(\d+) (passed|failed|skipped|error)", out.stdout)}
    assert counts.get("failed") and sum(counts.values()) == len(data["results"]) == len(_testcases(run / "junit.xml"))

    # junit.xml is pytest's: a suite with timestamp and hostname, cases with the check's properties.
    root = ET.parse(run / "junit.xml").getroot()
    suite = next(root.iter("testsuite"))
    assert suite.get("name") == "gpucluster-conformance" and suite.get("timestamp") and suite.get("hostname")
    cases = {c.get("name"): c for c in _testcases(run / "junit.xml")}
    ready = cases["GC-K8S-001 test_every_node_ready"]
    assert _props(ready)["check_id"] == "GC-K8S-001" and _props(ready)["node"] == CLUSTER
    failure = ready.find("failure")
    assert failure is not None and failure.get("type") == "AssertionError"
    assert failure.get("message", "").startswith("0 of 2 nodes Ready, expected 2: ")
    per_node = [c for name, c in cases.items() if name.startswith("GC-K8S-002 test_allocatable_gpus_equal_profile[")]
    assert per_node and all(_props(c)["node"] in c.get("name", "") for c in per_node)


def test_junit_names_carry_the_check_id_and_no_xdist_group(tmp_path: Path, ssh_stub: Path) -> None:
    # What GitHub's and GitLab's test views show is the name: the check ID leads it, and the @<node>
    # pytest-xdist's loadgroup appends to a node's tests is gone.
    suite = _synthetic_suite(tmp_path)
    run = tmp_path / "run"
    _pytest([str(suite), "--rootdir", str(suite), "--inventory", str(GOLDEN), "--run-dir", str(run),
             "-n", "2", "--dist", "loadgroup", "-o", "junit_family=xunit1"], tmp_path)
    names = sorted(c.get("name", "") for c in _testcases(run / "junit.xml"))
    nodes = sorted(_props(c)["node"] for c in _testcases(run / "junit.xml") if _props(c)["check_id"] == "GC-OS-001")
    assert len(nodes) >= 2 and CLUSTER not in nodes
    assert names == sorted(["GC-K8S-001 test_the_cluster_fails", "GC-K8S-003 test_a_cluster_check_that_skips",
                            *(f"GC-OS-001 test_every_node_passes[{n}]" for n in nodes)])


def test_a_cluster_row_whose_every_check_skipped_reads_skipped_and_fails_only_when_asked(
        tmp_path: Path, ssh_stub: Path) -> None:
    suite = _synthetic_suite(tmp_path)
    codes = {}
    for name, extra in (("default", []), ("strict", ["--fail-on-skipped-cluster"])):
        run = tmp_path / name
        out = _pytest([str(suite), "--rootdir", str(suite), "--inventory", str(GOLDEN), "--run-dir", str(run),
                       "--checks", "GC-OS-001,GC-K8S-003", *extra], tmp_path)
        data = json.loads((run / "results.json").read_text())
        verdicts = {v["node"]: v["verdict"] for v in data["verdicts"]}
        assert verdicts.pop(CLUSTER) == "skipped" and set(verdicts.values()) == {"pass"}, out.stdout[-2000:]
        assert re.search(rf"^{re.escape(CLUSTER)}\s+SKIPPED\s+0 passed, 0 failed, 1 skipped", out.stdout, re.M)
        codes[name] = (out.returncode, data["exit_code"], data["summary"]["failing"])
    assert codes == {"default": (0, 0, []), "strict": (1, 1, [CLUSTER])}
    # The second run's header names what it ran with and the first, its previous run of the inventory.
    from gpucluster import __version__

    given = data["meta"]["provenance"]
    assert given["gpucluster_version"] == __version__ and (given["stack"], given["target"]) == ("lab", "lab")
    assert given["bom"]["nvidia_driver"] and given["bom"]["nccl"]
    assert given["previous"]["run_dir"] == str(tmp_path / "default") and given["previous"]["exit_code"] == 0
    assert "- previous run: PASS, " in (tmp_path / "strict" / "summary.md").read_text()


def test_node_figures_reach_junit_as_json(tmp_path: Path, ssh_stub: Path) -> None:
    suite = _synthetic_suite(tmp_path)
    run = tmp_path / "run"
    _pytest([str(suite), "--rootdir", str(suite), "--inventory", str(GOLDEN), "--run-dir", str(run),
             "-k", "every_node", "-o", "junit_family=xunit1"], tmp_path)
    cases = _testcases(run / "junit.xml")
    assert cases and all(json.loads(_props(c)["figures"]) == {"mtu": 9000} for c in cases)
    data = json.loads((run / "results.json").read_text())
    assert all(r["figures"] == {"mtu": 9000} for r in data["results"])


def test_checks_selects_by_id_or_pattern_and_refuses_a_pattern_matching_nothing(
        tmp_path: Path, ssh_stub: Path) -> None:
    suite = _synthetic_suite(tmp_path)
    run = tmp_path / "run"
    _pytest([str(suite), "--rootdir", str(suite), "--inventory", str(GOLDEN), "--run-dir", str(run),
             "--checks", "GC-K8S-*"], tmp_path)
    ran = {r["check_id"] for r in json.loads((run / "results.json").read_text())["results"]}
    assert ran == {"GC-K8S-001", "GC-K8S-003"}
    # Refused before the nodes are probed (once an INTERNALERROR from the collection hook, after the
    # probe had reached every node): pytest's usage error, the pattern and every check ID on one line.
    bad = _pytest([str(suite), "--rootdir", str(suite), "--inventory", str(GOLDEN), "--run-dir",
                   str(tmp_path / "run2"), "--checks", "GC-NOPE-*"], tmp_path)
    assert bad.returncode == pytest.ExitCode.USAGE_ERROR, bad.stdout[-2000:] + bad.stderr[-2000:]
    assert "INTERNALERROR" not in bad.stdout + bad.stderr
    assert "ERROR: --checks: GC-NOPE-* matches no check; the check IDs: GC-AR-001, " in bad.stderr
    assert not (tmp_path / "run2" / "probe.json").exists()


def test_nodes_an_inter_node_run_cannot_measure_are_refused_before_the_probe(tmp_path: Path) -> None:
    """The suite run by itself (pytest --inventory) refuses what verify refuses: nccl-tests in
    different folders on the nodes of one mpirun (tests/unit/conformance/test_inter_node_folders.py)."""
    from tests.unit.conformance.test_inter_node_folders import SPLIT, _data

    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump(_data(**{"gpu-2": {"nccl_tests_install_dir": "/srv/nccl"}})))
    suite = _synthetic_suite(tmp_path)
    bad = _pytest([str(suite), "--rootdir", str(suite), "--inventory", str(inventory), "--run-dir",
                   str(tmp_path / "run"), "--checks", "GC-AR-*"], tmp_path)
    assert bad.returncode == pytest.ExitCode.USAGE_ERROR, bad.stdout[-2000:] + bad.stderr[-2000:]
    assert f"ERROR: error: {inventory}: {SPLIT}" in bad.stderr
    assert not (tmp_path / "run" / "probe.json").exists()


FLEET_CHECKS = '''
import pytest


@pytest.mark.check("GC-AR-001")
def test_intra(node, inventory):
    """Intra-node all-reduce."""
    first = sorted(n.name for n in inventory.nodes)[0]
    node.figure("busbw_gbps", 300.0 if node.name == first else 480.0)
    node.figure("floor_gbps", 250.0)
'''


def _with_fleet_margin(inventory: Path, value: str) -> Path:
    """The golden inventory with ``gpucluster_conformance.fleet_margin`` set to ``value`` (as YAML)."""
    text = GOLDEN.read_text()
    if re.search(r"^      fleet_margin: ", text, re.M):
        text = re.sub(r"^(      fleet_margin: ).*$", lambda m: m.group(1) + value, text, count=1, flags=re.M)
    else:
        text = text.replace("  vars:\n", f"  vars:\n    gpucluster_conformance: {{fleet_margin: {value}}}\n", 1)
    inventory.write_text(text)
    return inventory


def _fleet_suite(tmp_path: Path) -> Path:
    suite = tmp_path / "fleet-suite"
    suite.mkdir()
    (suite / "conftest.py").write_text(SYNTHETIC_CONFTEST)
    (suite / "test_fleet_synthetic.py").write_text(textwrap.dedent(FLEET_CHECKS))
    return suite


def test_a_node_well_below_the_fleet_fails_above_the_floor_and_the_margin_is_the_operators(
        tmp_path: Path, ssh_stub: Path) -> None:
    suite = _fleet_suite(tmp_path)
    run = tmp_path / "run"
    _pytest([str(suite), "--rootdir", str(suite), "--inventory", str(GOLDEN), "--run-dir", str(run)], tmp_path)
    data = json.loads((run / "results.json").read_text())
    fleet = [r for r in data["results"] if r["check_id"] == "GC-FLEET-001"]
    assert sorted((r["node"], r["outcome"]) for r in fleet) == [("gpu-1", "failed"), ("gpu-2", "passed"),
                                                                ("stor-1", "passed")]
    assert data["exit_code"] == 1 and data["meta"]["fleet_margin"] == 0.1
    slow = next(r for r in fleet if r["outcome"] == "failed")
    assert slow["log"] == "logs/checks/gpu-1/GC-FLEET-001_allreduce-intra.log"
    log = (run / slow["log"]).read_text()
    assert "message: intra-node all-reduce busbw 300 GB/s is 37.5 % below the fleet median 480 GB/s" in log
    assert "next steps:" in log
    cases = [c for c in _testcases(run / "junit.xml") if _props(c).get("check_id") == "GC-FLEET-001"]
    assert len(cases) == 3 and sum(c.find("failure") is not None for c in cases) == 1
    assert "Fleet comparison" in (run / "summary.md").read_text()
    assert 'id="fleet"' in (run / "summary.html").read_text()

    # 40 % of margin lets the same figures pass, from the command line or from the inventory.
    wide = tmp_path / "wide"
    _pytest([str(suite), "--rootdir", str(suite), "--inventory", str(GOLDEN), "--run-dir", str(wide),
             "--fleet-margin", "0.4"], tmp_path)
    data = json.loads((wide / "results.json").read_text())
    assert data["exit_code"] == 0 and data["meta"]["fleet_margin"] == 0.4
    inventory = _with_fleet_margin(tmp_path / "inventory.yml", "0.4")
    _pytest([str(suite), "--rootdir", str(suite), "--inventory", str(inventory), "--run-dir",
             str(tmp_path / "inv")], tmp_path)
    assert json.loads((tmp_path / "inv" / "results.json").read_text())["exit_code"] == 0


def test_a_bad_fleet_margin_is_bad_input_naming_the_field(tmp_path: Path, ssh_stub: Path) -> None:
    suite = _fleet_suite(tmp_path)
    bad = _pytest([str(suite), "--rootdir", str(suite), "--inventory", str(GOLDEN), "--run-dir",
                   str(tmp_path / "run"), "--fleet-margin", "1.5"], tmp_path)
    assert bad.returncode == 4 and "--fleet-margin: must be a fraction from 0 to below 1" in bad.stderr
    inventory = _with_fleet_margin(tmp_path / "inventory.yml", "lots")
    bad = _pytest([str(suite), "--rootdir", str(suite), "--inventory", str(inventory), "--run-dir",
                   str(tmp_path / "run2")], tmp_path)
    # The inventory's model or the suite's own reading: either way one line naming the file and field.
    assert bad.returncode == 4 and str(inventory) in bad.stderr and "gpucluster_conformance.fleet_margin" in bad.stderr


def test_checks_naming_the_fleet_comparison_run_the_checks_it_compares(tmp_path: Path, ssh_stub: Path) -> None:
    suite = _fleet_suite(tmp_path)
    run = tmp_path / "run"
    _pytest([str(suite), "--rootdir", str(suite), "--inventory", str(GOLDEN), "--run-dir", str(run),
             "--checks", "GC-FLEET-*"], tmp_path)
    ran = {r["check_id"] for r in json.loads((run / "results.json").read_text())["results"]}
    assert ran == {"GC-AR-001", "GC-FLEET-001"}


def test_rerun_failed_takes_the_checks_and_nodes_that_failed_last(tmp_path: Path) -> None:
    from gpucluster import verify
    from gpucluster.errors import InputError

    runs_dir = tmp_path / "runs"
    with pytest.raises(InputError, match="no earlier verify run"):
        verify.last_failures(runs_dir)
    older = runs_dir / "20261101T000000Z-aaaaaa-verify"
    newer = runs_dir / "20261102T000000Z-bbbbbb-verify"
    for folder, results in (
        (older, [{"node": "gpu-9", "check_id": "GC-OS-001", "outcome": "failed"}]),
        (newer, [{"node": "gpu-1", "check_id": "GC-AR-002", "outcome": "failed"},
                 {"node": "gpu-2", "check_id": "GC-AR-002", "outcome": "passed"},
                 {"node": "gpu-2", "check_id": "GC-GPU-005", "outcome": "error"},
                 {"node": CLUSTER, "check_id": "GC-K8S-001", "outcome": "failed"}]),
    ):
        folder.mkdir(parents=True)
        (folder / "results.json").write_text(json.dumps({"results": results}))
    assert verify.last_failures(runs_dir) == (("GC-AR-002", "GC-GPU-005", "GC-K8S-001"), ("gpu-1", "gpu-2"))
    (newer / "results.json").write_text(json.dumps({"results": [{"node": "gpu-1", "check_id": "GC-OS-001",
                                                                 "outcome": "passed"}]}))
    with pytest.raises(InputError, match="nothing failed"):
        verify.last_failures(runs_dir)
    for broken in ("[]", '{"meta": {}}', '{"results": [{"node": "gpu-1"}]}',
                   '{"results": [{"node": "gpu-1", "check_id": "GC-OS-001", "outcome": "maybe"}]}'):
        (newer / "results.json").write_text(broken)
        with pytest.raises(InputError, match="is not a verify report"):
            verify.last_failures(runs_dir)


def test_rerun_failed_reads_results_json_through_the_report_and_reruns_a_fleet_with_its_fleet(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from gpucluster import verify
    from gpucluster.conformance import fleet
    from gpucluster.conformance.report_data import Report
    from gpucluster.conformance.verdict import CheckResult

    burn = [CheckResult(n, "GC-BURN-001", "passed", figures={"tflops_gpu-burn_gpu0_fp32": 50.0 if n == "c" else 99.0})
            for n in ("a", "b", "c", "d")]
    report = Report(meta={}, nodes=["a", "b", "c", "d"],
                    results=[*burn, *fleet.fleet_results(burn), CheckResult("b", "GC-SYS-003", "failed", "down",
                                                                            param="chrony")])
    folder = tmp_path / "runs" / "20261102T000000Z-bbbbbb-verify"
    folder.mkdir(parents=True)
    (folder / "results.json").write_text(json.dumps(report.to_json()))
    read: list[dict] = []
    real = Report.from_json
    monkeypatch.setattr(Report, "from_json", staticmethod(lambda d: read.append(d) or real(d)))
    # The burn that measured the figure, on the whole fleet: on c alone there is no median.
    assert verify.last_failures(tmp_path / "runs") == (("GC-BURN-001", "GC-SYS-003"), ("a", "b", "c", "d"))
    assert len(read) == 1
