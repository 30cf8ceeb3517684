"""SSH control sockets live in a folder the run made and checked: a folder another local user made
first (the attack: a fake mux master at the socket's name answering every command, and reading
the keys and secrets sent through it) is refused with its name, never used."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import tempfile
from pathlib import Path

import pytest

from gpucluster import sockets
from gpucluster.conformance.nodes import load_inventory
from gpucluster.conformance.remote import write_ssh_config
from gpucluster.errors import InputError

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[2]
GOLDEN = REPO / "tests" / "golden" / "inventory" / "lab.yml"
NOBODY = 65534
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="planting a folder as another user (chown) needs root")


@pytest.fixture
def short(request: pytest.FixtureRequest) -> Path:
    """A folder at a short path (pytest's own, under xdist, can be too deep for a socket path)."""
    folder = Path(tempfile.mkdtemp(prefix="gc-"))
    request.addfinalizer(lambda: shutil.rmtree(folder, ignore_errors=True))
    return folder


def _long_run(tmp_path: Path) -> Path:
    """A run's ssh folder too deep for a Unix socket path (CI checkouts can be)."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    return deep / "run" / "ssh"


def _control_path(config: Path) -> str:
    return next(line.split()[1] for line in config.read_text().splitlines() if "ControlPath" in line)


def test_the_sockets_live_in_the_runs_own_folder_when_the_path_fits(short: Path) -> None:
    folder = sockets.control_dir(short / "run" / "ssh")
    assert folder == short / "run" / "ssh" / "cm"
    st = folder.lstat()
    assert stat.S_ISDIR(st.st_mode) and stat.S_IMODE(st.st_mode) == 0o700 and st.st_uid == os.geteuid()
    cfg = write_ssh_config(short / "run" / "ssh" / "gw0" / "ssh_config", list(load_inventory(GOLDEN).nodes),
                           shared=short / "run" / "ssh")
    assert _control_path(cfg) == f"{folder}/{sockets.socket_name(0, 'gpu-1')}"
    assert len(_control_path(cfg)) + 17 <= sockets.UNIX_PATH_MAX


def test_a_deep_run_folder_gets_an_unpredictable_folder_in_the_runtime_folder_then_tmp(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest) -> None:
    run_ssh = _long_run(tmp_path)
    runtime = request.getfixturevalue("short")  # at a short path, as /run/user/<uid> is
    runtime.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    first = sockets.control_dir(run_ssh)
    assert first.parent == runtime and first.name.startswith("gpucluster-ssh-") and len(first.name) > 20
    assert stat.S_IMODE(first.stat().st_mode) == 0o700
    assert sockets.control_dir(run_ssh) == first, "every process of one run finds the same folder"
    assert (run_ssh / "control-dir").read_text().strip() == str(first)
    other = sockets.control_dir(_long_run(tmp_path / "other"))
    assert other != first
    assert sockets.release(run_ssh) == [] and not first.exists() and not (run_ssh / "control-dir").exists()
    monkeypatch.delenv("XDG_RUNTIME_DIR")
    tmp = request.getfixturevalue("shared_tmp")
    second = sockets.control_dir(run_ssh)
    assert second.parent == tmp and second != first
    sockets.release(run_ssh)


def test_a_run_folder_with_a_space_or_percent_gets_another_folder(short: Path) -> None:
    """ssh_config would split the path at the space, and expand %d to the home folder."""
    for odd in ("with space", "per%dcent"):
        run_ssh = short / odd / "ssh"
        folder = sockets.control_dir(run_ssh)
        assert folder.parent == Path(tempfile.gettempdir()) and " " not in str(folder) and "%" not in str(folder)
        sockets.release(run_ssh)


def test_a_run_folder_under_a_folder_others_may_write_to_gets_another_folder(short: Path) -> None:
    shared = short / "s"
    shared.mkdir()
    shared.chmod(0o777)  # world-writable, not sticky: anyone may rename what is in it
    run_ssh = shared / "run" / "ssh"
    folder = sockets.control_dir(run_ssh)
    assert folder.parent == Path(tempfile.gettempdir())
    sockets.release(run_ssh)


@needs_root
def test_a_folder_another_user_made_first_is_refused_by_name(short: Path) -> None:
    """The reproduction: uid 65534 makes the folder the run would use (and a fake master in it),
    here in a run folder the operator named in a shared place."""
    run_ssh = short / "run" / "ssh"
    (run_ssh / "cm").mkdir(parents=True, mode=0o700)
    os.chown(run_ssh / "cm", NOBODY, NOBODY)
    fake_master = socket.socket(socket.AF_UNIX)
    try:
        fake_master.bind(str(run_ssh / "cm" / sockets.socket_name(0, "gpu-1")))
        with pytest.raises(InputError) as caught:
            write_ssh_config(run_ssh / "gw0" / "ssh_config", list(load_inventory(GOLDEN).nodes), shared=run_ssh)
        assert str(caught.value).startswith(f"{run_ssh / 'cm'} is owned by uid {NOBODY}")
        assert not (run_ssh / "gw0" / "ssh_config").exists(), "no configuration pointing into it was written"
    finally:
        fake_master.close()


@needs_root
def test_a_recorded_folder_another_user_took_over_is_refused(tmp_path: Path, shared_tmp: Path) -> None:
    run_ssh = _long_run(tmp_path)
    folder = sockets.control_dir(run_ssh)
    folder.rmdir()  # /tmp cleaned at a reboot ...
    folder.mkdir(mode=0o700)  # ... and the name taken by another user
    os.chown(folder, NOBODY, NOBODY)
    with pytest.raises(InputError, match=rf"^{folder} is owned by uid {NOBODY}"):
        sockets.control_dir(run_ssh)


def test_a_recorded_folder_that_is_gone_is_never_made_again_at_its_known_name(tmp_path: Path,
                                                                                shared_tmp: Path) -> None:
    run_ssh = _long_run(tmp_path)
    folder = sockets.control_dir(run_ssh)
    folder.rmdir()
    again = sockets.control_dir(run_ssh)
    assert again != folder and again.is_dir() and not folder.exists()
    sockets.release(run_ssh)


def test_a_link_or_an_open_folder_is_refused(short: Path) -> None:
    run_ssh = short / "run" / "ssh"
    run_ssh.mkdir(parents=True)
    elsewhere = short / "elsewhere"
    elsewhere.mkdir(mode=0o700)
    (run_ssh / "cm").symlink_to(elsewhere)
    with pytest.raises(InputError, match="is a symbolic link"):
        sockets.control_dir(run_ssh)
    (run_ssh / "cm").unlink()
    (run_ssh / "cm").mkdir()
    (run_ssh / "cm").chmod(0o755)
    with pytest.raises(InputError, match=r"has mode 0755, not 0700"):
        sockets.control_dir(run_ssh)


def test_release_stops_the_masters_and_removes_the_folder(short: Path) -> None:
    folder = sockets.control_dir(short / "run" / "ssh")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(folder / "0-0123abcd"))
    try:
        assert sockets.release(short / "run" / "ssh") == []
    finally:
        listener.close()
    assert not folder.exists()
    assert sockets.release(short / "run" / "ssh") == [], "releasing twice is no error"


@needs_root
def test_release_leaves_a_folder_that_is_not_the_runs_own(short: Path) -> None:
    (short / "ssh" / "cm").mkdir(parents=True, mode=0o700)
    os.chown(short / "ssh" / "cm", NOBODY, NOBODY)
    problems = sockets.release(short / "ssh")
    assert (short / "ssh" / "cm").exists() and len(problems) == 1 and f"owned by uid {NOBODY}" in problems[0]


@needs_root
def test_verify_refuses_a_planted_control_folder_before_any_ssh(short: Path, monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from gpucluster.cli import main

    monkeypatch.setenv("PATH", str(short / "no-ssh-here"))  # any ssh client started would fail loudly
    run_dir = short / "run"
    planted = run_dir / "ssh" / "cm"
    planted.mkdir(parents=True, mode=0o755)
    os.chown(planted, NOBODY, NOBODY)
    rc = main(["verify", "--inventory", str(GOLDEN), "--run-dir", str(run_dir), "--no-burn", "--no-publish"])
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(planted) in lines[0], err
    assert not (run_dir / "ssh" / "probe").exists(), "the suite started"
