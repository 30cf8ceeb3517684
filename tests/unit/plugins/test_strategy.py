"""Stock Ansible: the stock linear strategy by default, Mitogen only when asked, no private internals.

The equivalence test runs a real ansible-playbook (local connection, three hosts) over a play with
every kind of condition (tests/unit/plugins/data/strategy/play.yml) with the stock strategy and
with Mitogen's, and requires every task result and the recap to be the same.
"""

from __future__ import annotations

import ast
import configparser
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpucluster import mitogen
from gpucluster.errors import InputError

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
COLLECTION = REPO / "collections/ansible_collections/gpucluster/cluster"
DATA = Path(__file__).resolve().parent / "data/strategy"
PLAYBOOK = Path(sys.executable).parent / "ansible-playbook"


def test_ansible_cfg_names_the_stock_linear_strategy() -> None:
    cfg = configparser.ConfigParser(interpolation=None)
    cfg.read(REPO / "ansible.cfg")
    assert cfg["defaults"]["strategy"] == "linear"
    assert "inventory" not in cfg["defaults"], "no default inventory: every run names its cluster"


def test_no_plugin_of_ours_imports_ansible_internals() -> None:
    plugins = sorted(COLLECTION.glob("plugins/**/*.py")) + sorted(REPO.glob("roles/*/library/*.py"))
    assert plugins
    offenders = []
    for path in plugins:
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("ansible"):
                offenders += [f"{path.relative_to(REPO)}: {node.module}.{a.name}" for a in node.names
                              if a.name.startswith("_")]
                offenders += [f"{path.relative_to(REPO)}: {node.module}" for _ in [0]
                              if any(part.startswith("_") for part in (node.module or "").split("."))]
    assert offenders == []


def test_mitogen_is_off_unless_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(mitogen.ENV_SWITCH, raising=False)
    assert not mitogen.wanted()
    assert mitogen.wanted(True)
    monkeypatch.setenv(mitogen.ENV_SWITCH, "1")
    assert mitogen.wanted()
    env = mitogen.strategy_env()
    assert env["ANSIBLE_STRATEGY"] == "mitogen_linear"
    assert (Path(env["ANSIBLE_STRATEGY_PLUGINS"]) / "mitogen_linear.py").is_file()


def test_mitogen_missing_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(mitogen.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(InputError, match="Mitogen is not installed"):
        mitogen.strategy_env()


def _play(tmp_path: Path, label: str, extra_env: dict[str, str], check: bool = False) -> tuple[list[str], str]:
    record = tmp_path / f"record-{label}-{check}.jsonl"
    env = {**os.environ, "ANSIBLE_CONFIG": str(REPO / "ansible.cfg"), "RECORD_FILE": str(record),
           "ANSIBLE_CALLBACK_PLUGINS": str(DATA / "callback"), "ANSIBLE_CALLBACKS_ENABLED": "record",
           "ANSIBLE_LOCAL_TEMP": str(tmp_path / "tmp"), "ANSIBLE_NOCOLOR": "1", **extra_env}
    lookups = tmp_path / f"lookups-{label}-{check}.log"
    cmd = [str(PLAYBOOK), "-i", str(DATA / "inventory.ini"), str(DATA / "play.yml"), "-e", f"lookup_log={lookups}"]
    res = subprocess.run(cmd + (["--check"] if check else []), capture_output=True, text=True, env=env,
                         cwd=REPO, timeout=300)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    recap = res.stdout[res.stdout.index("PLAY RECAP"):]
    # A lookup in a conditional task's arguments runs once per host that runs the task (two of three).
    assert lookups.read_text() == "x\nx\n"
    return sorted(record.read_text().splitlines()), recap


@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_over_mitogen_every_result_is_that_of_stock_linear(tmp_path: Path, check: bool) -> None:
    stock, recap_stock = _play(tmp_path, "stock", {}, check)
    fast, recap_fast = _play(tmp_path, "mitogen", mitogen.strategy_env(), check)
    strip = re.compile(r', "discovered_interpreter_python": "[^"]*"')
    assert [strip.sub("", x) for x in fast] == [strip.sub("", x) for x in stock]
    assert recap_fast == recap_stock
    assert sum('"status": "skipped"' in line for line in stock) >= 10
