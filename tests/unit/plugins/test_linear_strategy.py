"""`gpucluster.cluster.linear` is Ansible's linear strategy, over Mitogen unless told otherwise."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
PLUGIN = REPO / "collections/ansible_collections/gpucluster/cluster/plugins/strategy/linear.py"

_PROBE = f"""
import importlib.util
from ansible.plugins.strategy.linear import StrategyModule as Linear
spec = importlib.util.spec_from_file_location("gc_linear", {str(PLUGIN)!r})
m = importlib.util.module_from_spec(spec); spec.loader.exec_module(m)
assert issubclass(m.StrategyModule, Linear)
print(m.StrategyModule is Linear, any("mitogen" in c.__module__ for c in m.StrategyModule.__mro__))
"""


def _probe(**env: str) -> list[str]:
    res = subprocess.run([sys.executable, "-c", _PROBE], capture_output=True, text=True, check=True,
                         env={**os.environ, **env})
    return res.stdout.split()


def test_runs_over_mitogen_by_default() -> None:
    assert _probe() == ["False", "True"]


def test_plain_linear_when_mitogen_is_turned_off() -> None:
    assert _probe(GPUCLUSTER_MITOGEN="0") == ["True", "False"]
