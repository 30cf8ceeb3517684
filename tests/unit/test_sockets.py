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


def test_a_deep_run_folder_uses_the_users_runtime_folder_then_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                  request: pytest.FixtureRequest) -> None:
    run_ssh = _long_run(tmp_path)
    runtime = request.getfixturevalue("short")  # at a short path, as /run/user/<uid> is
    runtime.chmod(0o700)
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(runtime))
    first = sockets.control_dir(run_ssh)
    assert first.parent == runtime / "gpucluster" and stat.S_IMODE(first.stat().st_mode) == 0o700
    assert sockets.control_dir(run_ssh) == first, "every process of one run finds the same folder"
    assert sockets.control_dir(_long_run(tmp_path / "other")) != first
    tmp = request.getfixturevalue("shared_tmp")
    second = sockets.control_dir(run_ssh)
    assert second.parent == tmp / f"gpucluster-{os.geteuid()}"
    assert stat.S_IMODE(second.parent.stat().st_mode) == 0o700


@needs_root
def test_a_folder_another_user_made_first_is_refused_by_name(tmp_path: Path, shared_tmp: Path) -> None:
    """The reproduction: uid 65534 makes the folder the run would use (and a fake master in it)."""
    run_ssh = _long_run(tmp_path)
    planted = sockets.locate(run_ssh)[0]
    planted.mkdir(mode=0o700)
    os.chown(planted, NOBODY, NOBODY)
    fake_master = socket.socket(socket.AF_UNIX)
    try:
        with pytest.raises(InputError) as caught:
            write_ssh_config(run_ssh / "gw0" / "ssh_config", list(load_inventory(GOLDEN).nodes), shared=run_ssh)
        assert str(planted) in str(caught.value) and f"owned by uid {NOBODY}" in str(caught.value)
        assert not (run_ssh / "gw0" / "ssh_config").exists(), "no configuration pointing into it was written"
    finally:
        fake_master.close()


@needs_root
def test_the_run_folders_own_socket_folder_planted_by_another_user_is_refused(short: Path) -> None:
    run_ssh = short / "run" / "ssh"
    (run_ssh / "cm").mkdir(parents=True, mode=0o700)
    os.chown(run_ssh / "cm", NOBODY, NOBODY)
    with pytest.raises(InputError, match=rf"^{run_ssh / 'cm'} is owned by uid {NOBODY}"):
        sockets.control_dir(run_ssh)


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


def test_a_folder_above_it_that_others_may_write_to_is_refused(short: Path) -> None:
    shared = short / "s"
    shared.mkdir()
    shared.chmod(0o777)  # world-writable, not sticky: anyone may rename what is in it
    with pytest.raises(InputError, match=rf"{shared} \(a folder above it\) has mode 0777"):
        sockets.control_dir(shared / "run" / "ssh")


def test_release_stops_the_masters_and_removes_the_folder(short: Path) -> None:
    folder = sockets.control_dir(short / "run" / "ssh")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(folder / "cm-0123"))
    try:
        assert sockets.release(folder) == []
    finally:
        listener.close()
    assert not folder.exists()
    assert sockets.release(folder) == [], "releasing twice is no error"


@needs_root
def test_release_leaves_a_folder_that_is_not_the_runs_own(tmp_path: Path) -> None:
    folder = tmp_path / "cm"
    folder.mkdir(mode=0o700)
    os.chown(folder, NOBODY, NOBODY)
    problems = sockets.release(folder)
    assert folder.exists() and len(problems) == 1 and f"owned by uid {NOBODY}" in problems[0]


@needs_root
def test_verify_refuses_a_planted_control_folder_before_any_ssh(tmp_path: Path, shared_tmp: Path,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                capsys: pytest.CaptureFixture[str]) -> None:
    from gpucluster.cli import main

    monkeypatch.setenv("PATH", str(tmp_path / "no-ssh-here"))  # any ssh client started would fail loudly
    run_dir = _long_run(tmp_path).parent
    planted = sockets.locate(run_dir / "ssh")[0]
    planted.mkdir(mode=0o755)
    os.chown(planted, NOBODY, NOBODY)
    rc = main(["verify", "--inventory", str(GOLDEN), "--run-dir", str(run_dir), "--no-burn", "--no-publish"])
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and str(planted) in lines[0], err
    assert not (run_dir / "ssh" / "probe").exists(), "the suite started"
