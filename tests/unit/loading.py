"""Load a Python file that is not in a package (Ansible plugins and role modules) as a module; run a
play on localhost through the repository's Ansible settings."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

REPO = Path(__file__).resolve().parents[2]


def load_file(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader, path
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_local_play(play: Path, cwd: Path, extra_vars: dict[str, Any] | None = None) -> None:
    """Run ``play`` with the repository's ansible.cfg on localhost (local connection, this Python,
    ``extra_vars`` as -e); fails the test with the end of its output when it does not pass."""
    env = dict(os.environ, ANSIBLE_CONFIG=str(REPO / "ansible.cfg"), ANSIBLE_STDOUT_CALLBACK="default")
    extra = json.dumps({**(extra_vars or {}), "ansible_python_interpreter": sys.executable})
    res = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", "-c", "local",
                          "-e", extra, str(play)],
                         capture_output=True, text=True, env=env, cwd=cwd, check=False, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]
