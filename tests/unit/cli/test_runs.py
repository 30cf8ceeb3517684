"""Runs on the controller (gpucluster.runs): folders that never collide and only their owner reads,
one writer per cluster (a real flock held by another process), logs that survive a full disk
(/dev/full gives the kernel's own ENOSPC), and ending what a run left outside its process group."""

from __future__ import annotations

import errno
import os
import signal
import stat
import subprocess
import sys
import textwrap
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from gpucluster import runs
from gpucluster.cli import main
from tests.unit.roles.render import inventory_for

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "golden" / "inventory" / "lab.yml"



def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_two_runs_in_the_same_second_get_two_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(runs, "utc_stamp", lambda: "20250101T000000Z")
    with ThreadPoolExecutor(max_workers=8) as pool:
        made = list(pool.map(lambda _: runs.new_run_dir(tmp_path / "runs", "converge"), range(32)))
    assert len(set(made)) == 32
    assert all(p.name.startswith("20250101T000000Z-") and p.name.endswith("-converge") for p in made)
    assert all(_mode(p) == 0o700 for p in made)


def test_run_folders_are_private_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o022)
    try:
        run_dir = runs.new_run_dir(tmp_path / "runs", "verify")
        with runs.private_umask():
            runs.write_private(run_dir / "results.json", "{}\n")
            (run_dir / "by-a-child.log").write_text("x")  # what a child process writes under the run's umask
    finally:
        os.umask(old)
    assert _mode(run_dir) == 0o700
    assert _mode(run_dir / "results.json") == 0o600 and _mode(run_dir / "by-a-child.log") == 0o600


# --- one writer per cluster ----------------------------------------------------------------

HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    from gpucluster import runs
    with runs.cluster_lock(Path(sys.argv[1]), "gpucluster converge"):
        print("held", flush=True)
        time.sleep(60)
""")


@pytest.fixture
def held_lock(tmp_path: Path):
    """Another process (a real one) holds the cluster's lock for ``inventory``."""
    procs: list[subprocess.Popen[str]] = []

    def hold(inventory: Path) -> subprocess.Popen[str]:
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(inventory)], stdout=subprocess.PIPE, text=True,
                                cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
        procs.append(proc)
        assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
        return proc

    yield hold
    for proc in procs:
        proc.kill()
        proc.wait()


def test_a_second_converge_names_who_holds_the_cluster(tmp_path: Path, held_lock, capsys) -> None:
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(yaml.safe_dump(inventory_for("ethernet")))
    holder = held_lock(inventory)
    assert main(["converge", "-i", str(inventory), "--runs-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1, err
    assert "cluster busy" in err[0] and f"pid {holder.pid}" in err[0] and "`gpucluster converge`" in err[0]
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())


def test_verify_waits_for_no_converge_either(tmp_path: Path, held_lock, capsys) -> None:
    holder = held_lock(GOLDEN)
    # The inventory is the same file under another name: the lock follows the resolved path.
    link = tmp_path / "same-inventory.yml"
    link.symlink_to(GOLDEN)
    assert main(["verify", "--inventory", str(link), "--run-dir", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "cluster busy" in err[0] and f"pid {holder.pid}" in err[0]


def test_the_lock_is_free_again_when_its_holder_dies(tmp_path: Path, held_lock) -> None:
    holder = held_lock(GOLDEN)
    holder.kill()
    holder.wait()
    with runs.cluster_lock(GOLDEN, "gpucluster verify") as path:
        assert '"command": "gpucluster verify"' in path.read_text()


# --- full disks --------------------------------------------------------------------------------


def _full_disk(monkeypatch: pytest.MonkeyPatch, inside: Path) -> None:
    """Files opened under ``inside`` are /dev/full: every write fails with the kernel's ENOSPC."""
    real = runs.open_for_write

    def opener(path: Path) -> int:
        if str(path).startswith(str(inside)):
            return os.open("/dev/full", os.O_WRONLY)
        return real(path)

    monkeypatch.setattr(runs, "open_for_write", opener)


def test_a_log_on_a_full_disk_keeps_its_first_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _full_disk(monkeypatch, tmp_path)
    with runs.RunFile(tmp_path / "converge.log") as log:
        for _ in range(5000):
            log.write("a line of the log\n")
    assert log.error is not None and log.error.errno == errno.ENOSPC
    assert runs.describe_os_error(log.error) == "No space left on device (ENOSPC)"
    with pytest.raises(OSError) as exc:
        runs.write_private(tmp_path / "summary.json", "{}")
    assert exc.value.errno == errno.ENOSPC
    assert not list(tmp_path.glob(".summary.json*")), "a half-written temporary file was left behind"


# --- what outlives a process group -------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().split(") ")[1][0] != "Z"
    except FileNotFoundError:
        return False


def test_tagged_processes_outside_the_group_are_ended() -> None:
    tag = f"GPUCLUSTER_CONVERGE_RUN={runs.new_run_id()}"
    mine = subprocess.Popen(["sleep", "307"], env=dict(os.environ, GPUCLUSTER_CONVERGE_RUN=tag.split("=")[1]),
                            start_new_session=True)
    other = subprocess.Popen(["sleep", "308"], env=dict(os.environ, GPUCLUSTER_CONVERGE_RUN="someone-else"),
                             start_new_session=True)
    try:
        assert runs.kill_tagged_local(tag, grace_s=2) == 1
        mine.wait(timeout=5)
        assert _alive(other.pid)
    finally:
        for p in (mine, other):
            if p.poll() is None:
                os.kill(p.pid, signal.SIGKILL)
            p.wait()


def test_interrupts_become_a_flag_not_an_exception() -> None:
    seen: list[int] = []
    # Whatever handled SIGINT before comes back (default_int_handler, or SIG_IGN where the test
    # runs in the background of a non-interactive shell, as `nohup make test &` does).
    before = signal.getsignal(signal.SIGINT)
    with runs.Interrupts() as stops:
        stops.on_signal(seen.append)
        os.kill(os.getpid(), signal.SIGINT)
        deadline = time.monotonic() + 5
        while not stops.interrupted and time.monotonic() < deadline:
            time.sleep(0.01)
    assert stops.interrupted and seen == [1]
    assert signal.getsignal(signal.SIGINT) is before


def test_a_run_folder_the_operator_names_keeps_its_mode(tmp_path: Path) -> None:
    theirs = tmp_path / "shared"
    theirs.mkdir(mode=0o755)
    os.chmod(theirs, 0o755)
    runs.ensure_private_dir(theirs)
    assert _mode(theirs) == 0o755  # never chmod a folder we did not make (--run-dir /tmp, say)
    mine = runs.ensure_private_dir(tmp_path / "new" / "run")
    assert _mode(mine) == 0o700


_TAKE_LOCK = """
import sys
from pathlib import Path
from gpucluster import runs
from gpucluster.errors import InputError
try:
    with runs.cluster_lock(Path(sys.argv[1]), "gpucluster verify"):
        print("held")
except InputError as exc:
    print(exc.problems[0])
"""


def test_a_run_started_by_the_holder_works_under_its_lock_and_no_other(tmp_path: Path) -> None:
    inventory = tmp_path / "inventory.yml"
    inventory.write_text("all: {}\n")
    with runs.cluster_lock(inventory, "gpucluster converge") as lock:
        env = {**os.environ, **runs.held_env(lock)}
        child = subprocess.run([sys.executable, "-c", _TAKE_LOCK, str(inventory)], capture_output=True, text=True,
                               env=env, cwd=REPO, timeout=60)
        assert child.stdout.strip() == "held", child.stderr
        # The same variable naming a process that is not an ancestor: the lock is not lent.
        stranger = subprocess.Popen(["sleep", "30"])
        try:
            env[runs.LOCK_HELD_ENV] = f"{stranger.pid}:{lock}"
            other = subprocess.run([sys.executable, "-c", _TAKE_LOCK, str(inventory)], capture_output=True,
                                   text=True, env=env, cwd=REPO, timeout=60)
        finally:
            stranger.kill()
            stranger.wait()
        assert other.stdout.startswith("cluster busy"), other.stdout + other.stderr


def test_a_tag_matches_its_whole_value_only() -> None:
    run_id = runs.new_run_id()
    child = subprocess.Popen(["sleep", "309"], env=dict(os.environ, GPUCLUSTER_CONVERGE_RUN=run_id),
                             start_new_session=True)
    try:
        assert runs.tagged_pids(f"GPUCLUSTER_CONVERGE_RUN={run_id}") == [child.pid]
        assert runs.tagged_pids(f"GPUCLUSTER_CONVERGE_RUN={run_id[:-1]}") == []
        assert runs.tagged_pids("GPUCLUSTER_CONVERGE_RUN") == []  # a name alone is no tag
    finally:
        os.kill(child.pid, signal.SIGKILL)
        child.wait()
