"""Playbooks and roles pass ansible-lint's production profile and a syntax check."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


def _tool(name: str) -> str:
    found = BIN / name
    if found.is_file():
        return str(found)
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (pip install -r requirements.txt)")
    return path


def _env() -> dict[str, str]:
    return {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "PATH": f"{BIN}:{os.environ['PATH']}",
            "ANSIBLE_DEPRECATION_WARNINGS": "0", "NO_COLOR": "1"}


def test_site_syntax_check() -> None:
    proc = subprocess.run(
        [_tool("ansible-playbook"), "--syntax-check", "-i", "localhost,", "playbooks/site.yml"],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_ansible_lint_production_profile() -> None:
    # Every playbook and every role, in one run (ansible-lint walks the whole project whatever it is
    # given, so one run costs what each of two did), under the production profile plus the two
    # rules that no profile holds and a run without a profile applies (the Kubernetes roles' own
    # lint ran without one).
    paths = ["playbooks", "roles"]
    proc = subprocess.run(
        [_tool("ansible-lint"), "--offline", "--profile", "production", "--enable-list", "loop-var-prefix,run-once",
         "--nocolor", "-q", *paths],
        cwd=REPO, env=_env(), capture_output=True, text=True, timeout=900,
    )
    assert proc.returncode == 0, proc.stdout[-6000:] + proc.stderr[-3000:]

