"""bench/gccli.py: the one copy of the lab benchmarks' CLI runner, and the benchmarks use it."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

from tests.unit.loading import load_file

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

BENCH = Path(__file__).resolve().parents[3] / "bench"
USERS = ("lab_fault.py", "bench_verify.py")


@pytest.fixture(scope="module")
def gccli() -> ModuleType:
    return load_file(BENCH / "gccli.py", "gccli")


def test_gc_runs_from_the_checkout_and_keeps_a_failure(gccli: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    script = "import os, sys; print(os.getcwd()); print(sys.argv[1:]); sys.exit(3)"
    monkeypatch.setattr(gccli, "GC", [sys.executable, "-c", script])
    proc = gccli.gc("lab", "up", timeout=60)
    assert proc.returncode == 3  # recorded, not raised
    assert proc.stdout.splitlines() == [str(BENCH.parent), "['lab', 'up']"]


def test_gc_is_python_dash_m_gpucluster(gccli: ModuleType) -> None:
    assert gccli.GC == [sys.executable, "-m", "gpucluster"]
    assert gccli.REPO == BENCH.parent


def test_gc_stops_a_command_past_its_timeout(gccli: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gccli, "GC", [sys.executable, "-c", "import time; time.sleep(30)"])
    with pytest.raises(subprocess.TimeoutExpired):
        gccli.gc(timeout=1)


def test_tail_prefers_stderr_and_falls_back_to_stdout(gccli: ModuleType) -> None:
    both = subprocess.CompletedProcess([], 1, stdout="out\n", stderr="a\nb\nc\n")
    assert gccli.tail(both, 2) == ["b", "c"]
    only_out = subprocess.CompletedProcess([], 1, stdout="\n".join(str(i) for i in range(20)) + "\n", stderr="")
    assert gccli.tail(only_out) == [str(i) for i in range(12, 20)]
    assert gccli.tail(subprocess.CompletedProcess([], 0, stdout=None, stderr=None)) == []


@pytest.mark.parametrize("name", USERS)
def test_benchmarks_import_the_shared_runner_instead_of_a_copy(name: str) -> None:
    tree = ast.parse((BENCH / name).read_text())
    defined = {node.name for node in ast.walk(tree) if isinstance(node, ast.FunctionDef)}
    assert not defined & {"_gc", "_tail", "gc", "tail"}, f"{name} defines its own runner"
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module == "gccli"
                for alias in node.names}
    assert {"gc", "tail"} <= imported


@pytest.mark.parametrize("name", ["bench_verify.py"])
def test_benchmarks_load_the_way_run_py_loads_them(name: str) -> None:
    module = load_file(BENCH / name, f"bench_under_test_{Path(name).stem}")
    shared = sys.modules["gccli"]
    assert module.gc is shared.gc and module.tail is shared.tail


@pytest.mark.parametrize("name", ["bench_slow_fabric.py", "bench_rail_fault.py"])
def test_fault_benchmarks_share_one_measurement(name: str) -> None:
    module = load_file(BENCH / name, f"bench_under_test_{Path(name).stem}")
    shared = sys.modules["lab_fault"]
    assert module.measure is shared.measure and isinstance(module.FAULT, shared.Fault)
    assert shared.gc is sys.modules["gccli"].gc and shared.tail is sys.modules["gccli"].tail
    # Each its own lab and networks, so the two can never collide on one host.
    assert module.FAULT.name in ("benchslow", "benchrail")
    assert set(module.FAULT.devices) <= set(shared.RAILS)
