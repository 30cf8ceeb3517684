"""Shared fixtures for unit tests: the repo root and stack-file builders."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def repo() -> Path:
    return REPO


def read_stack(name: str) -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((REPO / name).read_text())
    return data


@pytest.fixture
def stack_file(tmp_path: Path) -> Callable[[str, Callable[[dict[str, Any]], None]], Path]:
    """Copy an example stack, apply ``mutate`` to its ``config`` mapping, write it to tmp."""

    def make(example: str, mutate: Callable[[dict[str, Any]], None]) -> Path:
        doc = copy.deepcopy(read_stack(example))
        mutate(doc["config"])
        path = tmp_path / example
        path.write_text(yaml.safe_dump(doc, sort_keys=False))
        return path

    return make


@pytest.fixture(autouse=True)
def _state_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Locks and known_hosts go to the test's own folder, never the user's."""
    from gpucluster import runs

    state = tmp_path / "state"
    monkeypatch.setenv(runs.STATE_DIR_ENV, str(state))
    return state


@pytest.fixture(autouse=True)
def _own_tmp(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest,
             tmp_path_factory: pytest.TempPathFactory) -> None:
    """$TMPDIR of the test's own, removed after it: what a run makes there (the SSH control
    folder of a run folder too deep for a socket path) leaves nothing in /tmp."""
    import shutil
    import tempfile

    tmp_path_factory.getbasetemp()  # pytest's own base folder is chosen before $TMPDIR changes
    tmp = Path(tempfile.mkdtemp(prefix="gc-t-"))
    request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)


@pytest.fixture
def ssh_stub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A stand-in `ssh` on PATH: each node's commands run here, as real processes (tests/unit/cli/fakessh.py)."""
    from tests.unit.cli import fakessh

    folder = tmp_path / "fakessh"
    for key, value in fakessh.install(folder).items():
        monkeypatch.setenv(key, value)
    return folder


@pytest.fixture
def shared_tmp(monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> Path:
    """A /tmp of the test's own (sticky, anyone may write; at a short path, as /tmp is) as
    $TMPDIR, and no $XDG_RUNTIME_DIR: where a run's SSH control sockets go when its own folder
    is too deep for a socket path (gpucluster.sockets)."""
    import shutil
    import tempfile

    tmp = Path(tempfile.mkdtemp(prefix="gc-tmp-"))
    request.addfinalizer(lambda: shutil.rmtree(tmp, ignore_errors=True))
    tmp.chmod(0o1777)
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp))
    monkeypatch.setattr(tempfile, "tempdir", None)
    return tmp


@pytest.fixture(autouse=True)
def _in_process_unless_marked(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> None:
    """A test not marked ``process`` starts no process: `make unit-fast` runs exactly those, so
    the tier stays in-process (and fast) only while this holds. Such a test fails here, naming
    the mark it needs."""
    if request.node.get_closest_marker("process") is not None:
        return
    import os
    import subprocess

    def refuse(*_args: Any, **_kwargs: Any) -> Any:
        raise AssertionError(f"{request.node.nodeid} starts a process: mark its module or the test "
                             "pytest.mark.process (it then runs outside `make unit-fast`)")

    monkeypatch.setattr(subprocess.Popen, "__init__", refuse)
    monkeypatch.setattr(os, "fork", refuse)
    if hasattr(os, "posix_spawn"):
        monkeypatch.setattr(os, "posix_spawn", refuse)
