"""The shared integration-test lab: booted and converged ONCE per pytest session.

`itest_lab` (session scope) brings up the lab of ``Pulumi.itest.yaml`` (lab `itest`, 10.89.x:
three nodes, each a GPU-role node and a Ceph storage host), runs one full
``gpucluster converge`` (site.yml, Ceph included) and hands the tests an `ItestLab`. The roles,
conformance and Ceph tests all use it; the lab's own tests (tests/integration/lab) and the
Kubernetes tests (they need a control-plane node) keep labs of their own.

GPUCLUSTER_ITEST_STACK=FILE points the fixture at another lab's stack file (same shape: three
nodes node-1..3, each GPU and storage), e.g. to run the shared-lab tests on a lab of one's own
while `itest` is in use; its lab state lives under /var/lib/gpucluster/lab/<name>.

Tests marked ``lab_last`` run after every other test of the session, in their collected order
(`pytest_collection_modifyitems` below): they change the shared lab for good (grow it), so
nothing that expects the lab as the stack file describes it may follow them.

The lab is taken down at the end of the session unless GPUCLUSTER_KEEP_LAB=1. Timings (lab up,
first converge, second converge) are written to ``runs/itest-timings.json`` and to
``<lab state dir>/itest-timings.json``, and printed in pytest's terminal summary (with or
without ``-s``).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

REPO = Path(__file__).resolve().parents[2]
STACK = Path(os.environ.get("GPUCLUSTER_ITEST_STACK") or Path(__file__).resolve().with_name("Pulumi.itest.yaml"))


def _lab_name(stack: Path) -> str:
    # The lab's name is the spec's `name`; read it without validating (the fixture's `lab up` does).
    import yaml

    try:
        config = yaml.safe_load(stack.read_text(encoding="utf-8"))["config"]
        return str(config["gpucluster:name"])
    except (OSError, KeyError, TypeError, yaml.YAMLError):
        return "itest"


LAB_DIR = Path("/var/lib/gpucluster/lab") / _lab_name(STACK)
RUNS_DIR = REPO / "runs"
# Another lab's session (GPUCLUSTER_ITEST_STACK) keeps its timings apart from the shared lab's.
TIMINGS_NAME = "itest-timings.json" if LAB_DIR.name == "itest" else f"itest-{LAB_DIR.name}-timings.json"
GC = [sys.executable, "-m", "gpucluster"]

_TIMINGS: dict[str, Any] = {}


def gc(*args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
    """`gpucluster ARGS` from the repository root, output captured."""
    return subprocess.run([*GC, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False)


@dataclass
class ItestLab:
    """The shared lab after its first converge."""

    stack: Path
    inventory: Path
    lab_dir: Path
    first_converge: dict[str, Any]  # `gpucluster converge --json`'s summary
    first_converge_run_dir: Path
    timings: dict[str, float] = field(default_factory=dict)

    def gc(self, *args: str, timeout: float = 1800) -> subprocess.CompletedProcess[str]:
        return gc(*args, timeout=timeout)

    def ssh(self, node: str, command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        """Run a shell command line on a lab node (`gpucluster lab ssh`). It goes to ssh as ONE
        argument, so the node's login shell parses it (ssh joins its arguments without quoting)."""
        return gc("lab", "ssh", "--stack", str(self.stack), node, "--", command, timeout=timeout)

    def record(self, key: str, seconds: float) -> None:
        """Add a timing to the session's timings file (see the module docstring)."""
        record_timing(key, seconds)


def _record(key: str, value: Any, lab_dir: Path | None = None) -> None:
    _TIMINGS[key] = value
    _TIMINGS["updated"] = datetime.now(UTC).isoformat(timespec="seconds")
    text = json.dumps(_TIMINGS, indent=2, default=str) + "\n"
    RUNS_DIR.mkdir(parents=True, exist_ok=True)
    (RUNS_DIR / TIMINGS_NAME).write_text(text, encoding="utf-8")
    if lab_dir is not None and lab_dir.is_dir():
        (lab_dir / TIMINGS_NAME).write_text(text, encoding="utf-8")


def record_timing(key: str, seconds: float) -> None:
    """Add one timing (seconds) to the session's timings file."""
    _record(key, round(seconds, 1), LAB_DIR)


def _skip_reason() -> str | None:
    if os.geteuid() != 0:
        return "the lab needs root (systemd-nspawn nodes, bridges, network namespaces)"
    if shutil.which("systemd-nspawn") is None:
        return "systemd-nspawn is not installed"
    return None


@pytest.fixture(scope="session")
def itest_lab() -> Iterator[ItestLab]:
    why = _skip_reason()
    if why:
        pytest.skip(why)
    keep = os.environ.get("GPUCLUSTER_KEEP_LAB") == "1"
    _record("stack", str(STACK))
    t0 = time.monotonic()
    up = gc("lab", "up", "--stack", str(STACK), timeout=1200)
    record_timing("lab_up_s", time.monotonic() - t0)
    try:
        if up.returncode != 0:
            pytest.fail(f"gpucluster lab up failed (rc {up.returncode}):\n{up.stderr[-3000:]}")
        inventory = LAB_DIR / "inventory.yml"
        assert inventory.is_file(), f"lab up wrote no {inventory}"
        t0 = time.monotonic()
        conv = gc("converge", "--stack", str(STACK), "--json", timeout=2400)
        record_timing("first_converge_s", time.monotonic() - t0)
        try:
            summary = json.loads(conv.stdout)
        except json.JSONDecodeError:
            summary = {}
        _record("first_converge", {k: summary.get(k) for k in ("run_dir", "status", "rc", "seconds",
                                                               "changed_total", "failed_hosts")}, LAB_DIR)
        if conv.returncode != 0:
            pytest.fail(f"first converge failed (rc {conv.returncode}): {summary.get('failures')} "
                        f"({summary.get('run_dir')})\n{conv.stderr[-3000:]}")
        yield ItestLab(stack=STACK, inventory=inventory, lab_dir=LAB_DIR, first_converge=summary,
                       first_converge_run_dir=Path(summary["run_dir"]), timings=_TIMINGS)
    finally:
        if not keep:
            t0 = time.monotonic()
            down = gc("lab", "down", "--stack", str(STACK), timeout=900)
            record_timing("lab_down_s", time.monotonic() - t0)
            if down.returncode != 0:
                _record("lab_down_error", down.stderr[-2000:])


@dataclass
class ConvergeRun:
    result: Any  # gpucluster.converge.ConvergeResult
    seconds: float


@pytest.fixture(scope="session")
def itest_second_converge(itest_lab: ItestLab, tmp_path_factory: pytest.TempPathFactory) -> ConvergeRun:
    """A second full converge (site.yml, Ceph included) of the shared lab, run once and shared by
    the roles test and the Ceph test: both require changed=0 on every host."""
    import io

    from gpucluster.converge import ConvergeOptions, converge

    t0 = time.monotonic()
    result = converge(ConvergeOptions(inventory=itest_lab.inventory, runs_dir=tmp_path_factory.mktemp("converge2")),
                      progress_out=io.StringIO())
    seconds = time.monotonic() - t0
    record_timing("second_converge_s", seconds)
    return ConvergeRun(result=result, seconds=seconds)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Move the tests marked lab_last to the end, keeping the order within each part."""
    last = [item for item in items if item.get_closest_marker("lab_last") is not None]
    if last:
        items[:] = [item for item in items if item.get_closest_marker("lab_last") is None] + last


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _TIMINGS:
        return
    shown = {k: v for k, v in _TIMINGS.items() if k.endswith("_s")}
    terminalreporter.section("itest lab timings")
    for key, value in shown.items():
        terminalreporter.write_line(f"{key:>22}: {value} s")
    terminalreporter.write_line(f"(also in {RUNS_DIR / TIMINGS_NAME})")
