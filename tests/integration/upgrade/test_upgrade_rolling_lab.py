"""playbooks/upgrade-rolling.yml for real on the shared lab (`itest_lab`: node-1..3, each a GPU-role
node with no GPU, already converged with site.yml), upgrading the driver only:

- the nodes are done one at a time, in inventory order, and each one is gated by a real
  `gpucluster verify --inventory INVENTORY --limit NODE` run on the controller;
- node-2 is broken before the run (prometheus-node-exporter stopped, which GC-SYS-003 requires):
  its gate fails, the play stops with a message naming node-2, and node-3 is never touched;
- the lab has no control_plane group, so the drain / wait-for-Ready / uncordon steps are skipped,
  with a message giving the reason.

The shared lab, not one of its own: booting and converging another lab would cost more than the
whole test budget (see docs/kubernetes.md). The fault is undone in `finally`, as in the
conformance tests, and the driver role's rerun on node-1 and node-2 changes nothing that a
later test reads.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.lab

REPO = Path(__file__).resolve().parents[3]
PLAYBOOK = REPO / "playbooks" / "upgrade-rolling.yml"
GATE_TASK = "Run the conformance suite for this node"
STOP_TASK = "Stop the rollout unless the node passed"
KUBE_TASKS = ("Cordon and drain the node", "Wait until the node reports Ready", "Uncordon the node")
HOST_EVENTS = ("runner_on_ok", "runner_on_failed", "runner_on_skipped", "runner_on_unreachable")


def _events(run_dir: Path) -> list[dict[str, Any]]:
    lines = (run_dir / "events.jsonl").read_text(encoding="utf-8").splitlines()
    return [e for e in map(json.loads, lines) if e.get("event") in HOST_EVENTS]


def _one(events: list[dict[str, Any]], host: str, task: str) -> dict[str, Any]:
    found = [e for e in events if e["event_data"].get("host") == host and e["event_data"].get("task") == task]
    assert len(found) == 1, f"{host}: {len(found)} events for task {task!r}"
    return found[0]


def test_rolling_driver_upgrade_stops_at_the_node_that_fails_its_gate(itest_lab, tmp_path: Path) -> None:
    assert itest_lab.ssh("node-2", "systemctl stop prometheus-node-exporter").returncode == 0
    try:
        t0 = time.monotonic()
        res = itest_lab.gc("converge", "--inventory", str(itest_lab.inventory), "--playbook", str(PLAYBOOK),
                           "-e", "upgrade_rolling_components=[driver]", "--runs-dir", str(tmp_path), "--json",
                           timeout=1200)
        itest_lab.record("upgrade_rolling_s", time.monotonic() - t0)
    finally:
        itest_lab.ssh("node-2", "systemctl start prometheus-node-exporter")
    summary = json.loads(res.stdout)
    run_dir = Path(summary["run_dir"])
    assert res.returncode == 1, f"rc {res.returncode}: {summary.get('failures')} ({run_dir})\n{res.stderr[-3000:]}"

    # The play stopped at node-2, naming it; node-3 has no event at all: never gathered, never touched.
    assert summary["failed_hosts"] == ["node-2"], summary["hosts"]
    assert summary["failures"]["node-2"].startswith(f"{STOP_TASK}: node-2 did not pass the conformance suite (exit 1")
    assert "node-3" not in summary["hosts"]
    events = _events(run_dir)
    hosts = [e["event_data"]["host"] for e in events]
    assert "node-3" not in hosts
    assert f"error: converge: host node-2 failed: {STOP_TASK}: node-2 did not pass" in res.stderr

    # One node at a time, in order: every event of node-1 (its gate included) comes before node-2's first.
    order = list(dict.fromkeys(hosts))
    assert order == ["node-1", "node-2"], order
    assert max(i for i, h in enumerate(hosts) if h == "node-1") < hosts.index("node-2")

    # Each gate was a real `gpucluster verify --limit NODE` on the controller: node-1 passed, node-2 did not.
    for node, rc in (("node-1", 0), ("node-2", 1)):
        gate = _one(events, node, GATE_TASK)
        result = gate["event_data"]["res"]
        cmd = " ".join(result["cmd"]) if isinstance(result["cmd"], list) else result["cmd"]
        assert re.search(rf"/gpucluster verify --inventory {re.escape(str(itest_lab.inventory))} --limit {node}$",
                         cmd), cmd
        assert result["rc"] == rc, result.get("stdout", "")[-2000:]
        verify_dir = re.search(r"^run folder: (\S+)", result["stdout"], re.M)
        assert verify_dir, result["stdout"][-2000:]
        everything = json.loads((REPO / verify_dir.group(1) / "results.json").read_text())["verdicts"]
        # The cluster-level (Kubernetes) checks have their own row; without a kubeconfig they skip, and
        # the row reads skipped (never pass), failing nothing.
        cluster = [v for v in everything if v["node"] == "(cluster)"]
        assert [v["verdict"] for v in cluster] == ["skipped"] and not cluster[0]["failed"], cluster
        verdicts = [v for v in everything if v["node"] != "(cluster)"]
        assert [v["node"] for v in verdicts] == [node]
        failed = [f["check"] for f in verdicts[0]["failed"]]
        assert failed == ([] if rc == 0 else ["GC-SYS-003[prometheus-node-exporter]", "GC-SYS-004"]), failed
    assert _one(events, "node-1", STOP_TASK)["event"] == "runner_on_ok"
    assert _one(events, "node-2", STOP_TASK)["event"] == "runner_on_failed"

    # The driver role ran on node-1 and node-2 between the pre-tasks and the gate.
    for node in ("node-1", "node-2"):
        roles = {e["event_data"].get("role") for e in events if e["event_data"]["host"] == node}
        assert "nvidia_driver" in roles, f"{node}: the driver role did not run"

    # No control plane in this inventory: the Kubernetes steps are skipped, and a message says why.
    for node in ("node-1", "node-2"):
        why = _one(events, node, "Say why the Kubernetes steps are skipped")["event_data"]["res"]["msg"]
        assert why.endswith("the inventory has no control_plane group."), why
        for task in KUBE_TASKS[: 3 if node == "node-1" else 1]:
            assert _one(events, node, task)["event"] == "runner_on_skipped", task
