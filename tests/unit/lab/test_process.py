"""Lab processes without root: a booting node is tracked by its PID, and its end is logged."""

from __future__ import annotations

import dataclasses
import subprocess
import threading
import time
from pathlib import Path

import pytest

from gpucluster.lab import node, process
from gpucluster.lab.layout import LabLayout, layout_lab
from gpucluster.spec import load_spec

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def plan(tmp_path: Path) -> LabLayout:
    # Its own state folder: a lab of Pulumi.lab.yaml running on this host is not this test's node.
    return dataclasses.replace(layout_lab(load_spec(REPO / "Pulumi.lab.yaml")), state_root=str(tmp_path / "state"))


def test_a_process_that_dies_silently_leaves_how_it_ended_in_its_log(tmp_path: Path) -> None:
    log = tmp_path / "boot.log"
    pid = process.spawn(["sh", "-c", "echo 'cannot mount /sys' >&2; exit 3"], log)
    process.wait_reaped(pid, timeout=10)
    text = log.read_text()
    assert "cannot mount /sys" in text
    assert f"sh (pid {pid}) ended, exit code 3" in text
    assert not process.alive(pid)


def test_a_killed_process_is_logged_with_its_signal(tmp_path: Path) -> None:
    log = tmp_path / "boot.log"
    pid = process.spawn(["sleep", "30"], log)
    process.stop([pid], grace_s=5)
    process.wait_reaped(pid, timeout=10)
    assert f"sleep (pid {pid}) ended, killed by signal 15" in log.read_text()


def test_a_node_whose_launcher_has_not_yet_become_nspawn_is_still_booting(
        plan: LabLayout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The launcher is nsenter until it executes systemd-nspawn: a search by program name finds
    # nothing in that window, which once reported a healthy node as "exited during boot".
    pid = process.spawn(["sleep", "30"], tmp_path / "boot.log")
    probes: list[float] = []

    def probe(*_: object, **__: object) -> node.Readiness:
        probes.append(time.monotonic())
        if len(probes) < 2:
            return node.Readiness(False, "unreachable: connection refused")
        return node.Readiness(True, "running")

    monkeypatch.setattr(node, "probe", probe)
    try:
        assert node.pids(plan, plan.nodes[0]) == []
        ready = node.wait_ready(plan, plan.nodes[0], pid, time.monotonic() + 30, threading.Event())
        assert ready == node.Readiness(True, "running")
        assert len(probes) == 2
    finally:
        process.stop([pid], grace_s=5)


def test_a_node_whose_container_exits_is_reported_with_the_reason_in_its_log(
        plan: LabLayout, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    log = tmp_path / "boot.log"
    pid = process.spawn(["sh", "-c", "echo 'Failed to register machine' >&2; exit 1"], log)
    monkeypatch.setattr(node, "probe", lambda *_, **__: node.Readiness(False, "unreachable: refused"))
    monkeypatch.setattr(node, "boot_log", lambda *_: log)
    ready = node.wait_ready(plan, plan.nodes[0], pid, time.monotonic() + 30, threading.Event())
    assert not ready.ok and "exited during boot" in ready.system_state
    tail = node.log_tail(plan, plan.nodes[0])
    assert "Failed to register machine" in tail and "ended, exit code 1" in tail


def test_find_matches_the_program_and_the_marker(tmp_path: Path) -> None:
    marker = str(tmp_path / "nodes" / "gpu-1")
    # "; :" keeps sh from exec-ing sleep: the process stays sh with the marker among its arguments.
    pid = process.spawn(["sh", "-c", "sleep 60; :", marker], tmp_path / "boot.log")
    try:
        # Until the child has exec'd sh it is still a copy of this Python: wait for that, bounded.
        deadline = time.monotonic() + 10
        while process.find("sh", marker) != [pid] and time.monotonic() < deadline:
            time.sleep(0.05)
        assert process.find("sh", marker) == [pid]
        assert process.find("sh", str(tmp_path / "nodes" / "gpu-2")) == []
        assert process.find("bash", marker) == []
        assert process.alive(pid)
    finally:
        process.stop([pid], grace_s=5)
    assert process.find("sh", marker) == []


def test_a_zombie_is_not_alive(tmp_path: Path) -> None:
    marker = str(tmp_path / "zombie")
    proc = subprocess.Popen(["sh", "-c", "exit 0; :", marker])  # not reaped until wait()
    try:
        deadline = time.monotonic() + 10
        while process.alive(proc.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert Path(f"/proc/{proc.pid}").exists(), "the process was reaped: no zombie to look at"
        assert not process.alive(proc.pid)
        assert process.find("sh", marker) == []
    finally:
        proc.wait()
    assert not process.alive(proc.pid)
