"""scripts/find-python.sh: the controller's Python is 3.12 or newer, or one line and exit 2."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "find-python.sh"


def _run(**env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT)], capture_output=True, text=True, env=dict(os.environ, **env))


def test_prints_an_interpreter_that_is_new_enough() -> None:
    res = _run(PYTHON=sys.executable, GPUCLUSTER_MIN_PYTHON_MINOR=str(sys.version_info.minor))
    assert res.returncode == 0, res.stderr
    found = res.stdout.strip()
    code = f"import sys; print(sys.version_info[:2] >= (3, {sys.version_info.minor}))"
    out = subprocess.run([found, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert out == "True"


def test_none_new_enough_is_one_line_and_exit_2() -> None:
    res = _run(PYTHON=sys.executable, GPUCLUSTER_MIN_PYTHON_MINOR="99")
    assert res.returncode == 2 and res.stdout == ""
    assert len(res.stderr.strip().splitlines()) == 1 and "Python 3.99 or newer" in res.stderr


def test_the_venv_make_setup_builds_runs_a_current_ansible_core() -> None:
    # The controller this checkout's venv runs: 2.20 and newer need Python 3.12+.
    from ansible.release import __version__

    major, minor = (int(x) for x in __version__.split(".")[:2])
    assert (major, minor) >= (2, 20) and sys.version_info >= (3, 12)
