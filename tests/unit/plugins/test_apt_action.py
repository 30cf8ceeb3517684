"""The `gpucluster.cluster.apt` action's fast path: which package specs dpkg already satisfies.

The dpkg output comes from this host's real dpkg-query (the format the action asks nodes for).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.loading import load_file

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
PLUGIN = REPO / "collections/ansible_collections/gpucluster/cluster/plugins/action/apt.py"
PLAYBOOK_BIN = Path(sys.executable).parent / "ansible-playbook"


apt = load_file(PLUGIN, "gpucluster_apt_action")


@pytest.mark.parametrize(("args", "expected"), [
    ({"name": ["chrony", "nftables"], "state": "present", "cache_valid_time": 3600},
     [("chrony", None), ("nftables", None)]),
    ({"name": "chrony,nftables"}, [("chrony", None), ("nftables", None)]),
    ({"name": ["ceph-common=16.2.15*"], "install_recommends": False}, [("ceph-common", "16.2.15*")]),
    ({"name": ["libnccl2:amd64=2.21.5-1+cuda12.4"]}, [("libnccl2", "2.21.5-1+cuda12.4")]),
    ({"name": ["x"], "update_cache": False}, [("x", None)]),
    ({"name": ["x"], "update_cache": "no"}, [("x", None)]),
])
def test_wanted_packages_for_plain_installs(args: dict[str, object], expected: list[tuple[str, str | None]]) -> None:
    assert apt.wanted_packages(args) == expected


@pytest.mark.parametrize("args", [
    {"name": ["x"], "state": "latest"},
    {"name": ["x"], "update_cache": True},
    {"deb": "/var/cache/gpucluster/x.deb"},
    {"name": ["/tmp/x.deb"]},
    {"name": ["x>=1.0"]},
    {"upgrade": "dist"},
    {"name": []},
    {"name": ["x"], "purge": True},
])
def test_anything_but_a_plain_install_goes_to_apt(args: dict[str, object]) -> None:
    assert apt.wanted_packages(args) is None


@pytest.fixture(scope="module")
def dpkg_output() -> str:
    if shutil.which("dpkg-query") is None:
        pytest.skip("no dpkg-query on this host")
    res = subprocess.run(["dpkg-query", "-W", "-f=" + apt._QUERY_FORMAT, "bash", "coreutils",
                          "gpucluster-no-such-package"], capture_output=True, text=True, check=False)
    assert res.returncode == 1, res  # one unknown name: dpkg-query's exit code the action accepts
    return res.stdout


def test_real_dpkg_output_is_parsed(dpkg_output: str) -> None:
    installed = apt.parse_dpkg_query(dpkg_output)
    assert set(installed) == {"bash", "coreutils"}
    assert all(v and v[0].isdigit() for v in installed.values())


def test_satisfied_only_when_installed_at_a_matching_version(dpkg_output: str) -> None:
    installed = apt.parse_dpkg_query(dpkg_output)
    bash = installed["bash"]
    assert apt.unsatisfied([("bash", None), ("coreutils", None)], installed) == []
    assert apt.unsatisfied([("bash", bash.split("-")[0] + "*")], installed) == []
    assert apt.unsatisfied([("bash", "0.1*")], installed) == ["bash=0.1*"]
    assert apt.unsatisfied([("gpucluster-no-such-package", None)], installed) == ["gpucluster-no-such-package"]


def test_removed_but_configured_packages_are_not_installed() -> None:
    out = "chrony\tconfig-files\t4.3-2\nnftables\tinstalled\t1.0.6-2\nntp\tnot-installed\t\n"
    assert apt.unsatisfied([("chrony", None), ("nftables", None), ("ntp", None)],
                           apt.parse_dpkg_query(out)) == ["chrony", "ntp"]


# The action against stand-ins on this host (connection local): dpkg-query, which says whether
# python3-apt is there, apt-get, which logs the proxy it is given, and the apt module itself,
# which only says it ran (ansible.legacy.apt takes a library path's module before the builtin).
_DPKG_QUERY = """#!/bin/sh
printf 'chrony\\tinstalled\\t4.3-2\\n'
[ -n "$BINDINGS" ] && printf 'python3-apt\\tinstalled\\t2.6.0\\n'
exit 1
"""
_APT_MODULE = """#!/usr/bin/python
from ansible.module_utils.basic import AnsibleModule

module = AnsibleModule(argument_spec={"name": {"type": "list", "elements": "str"}}, supports_check_mode=True)
module.exit_json(changed=False, stand_in_apt=module.params["name"])
"""


def _node_tmp(tmp_path: Path) -> Path:
    """The play's TMPDIR, short: ansible-playbook's controller makes its RPC socket under TMPDIR, and
    a Unix socket's path holds at most 107 bytes (under pytest-xdist, tmp_path alone is ~80)."""
    return Path("/tmp") / f"gcapt-{hashlib.sha256(str(tmp_path).encode()).hexdigest()[:12]}"


@pytest.fixture(autouse=True)
def _remove_node_tmp(tmp_path: Path) -> Iterator[None]:
    yield
    shutil.rmtree(_node_tmp(tmp_path), ignore_errors=True)


def _converge(tmp_path: Path, apt_get: str, bindings: bool = False, module: str = _APT_MODULE,
              extra_vars: dict[str, Any] | None = None) -> tuple[subprocess.CompletedProcess[str], Path]:
    """One ``gpucluster.cluster.apt`` task for a package dpkg lacks, in a play whose environment is
    the egress proxy, as ``ansible-playbook`` runs it: its output and apt-get's log."""
    bin_dir, library = tmp_path / "bin", tmp_path / "library"
    bin_dir.mkdir()
    library.mkdir()
    log = tmp_path / "apt-get.log"
    (bin_dir / "dpkg-query").write_text(_DPKG_QUERY)
    (bin_dir / "apt-get").write_text(
        f'#!/bin/sh\necho "$* via ${{http_proxy:-none}} ${{https_proxy:-none}} ${{DEBIAN_FRONTEND:-}}" >> {log}\n'
        + apt_get)
    for f in bin_dir.iterdir():
        f.chmod(0o755)
    (library / "apt.py").write_text(module)
    proxy = {"http_proxy": "http://10.83.0.1:3142", "https_proxy": "http://10.83.0.1:3142", "no_proxy": "a b,'c'"}
    play = [{"hosts": "localhost", "gather_facts": False, "environment": proxy, "tasks": [
        {"name": "Install the package", "gpucluster.cluster.apt": {"name": ["nvidia-dcgm"]}, "register": "installed",
         "ignore_errors": True},
        {"name": "Keep the task's result", "ansible.builtin.copy": {
            "content": "{{ installed | to_json }}", "dest": str(tmp_path / "result.json"), "mode": "0600"}}]}]
    playbook = tmp_path / "apt.yml"
    playbook.write_text(yaml.safe_dump(play))
    env = {k: v for k, v in os.environ.items() if not k.lower().endswith("_proxy") and not k.startswith("ANSIBLE_")}
    # Where the node's watchdog keeps its folder (the apt configuration), to see it go.
    _node_tmp(tmp_path).mkdir()
    env.update(PATH=f"{bin_dir}:{os.environ['PATH']}", BINDINGS="1" if bindings else "",
               TMPDIR=str(_node_tmp(tmp_path)),
               ANSIBLE_COLLECTIONS_PATH=str(REPO / "collections"), ANSIBLE_LIBRARY=str(library),
               ANSIBLE_LOCALHOST_WARNING="false", ANSIBLE_INVENTORY_UNPARSED_WARNING="false")
    extra = ["-e", json.dumps(extra_vars)] if extra_vars else []
    proc = subprocess.run([str(PLAYBOOK_BIN), str(playbook), *extra], text=True, capture_output=True, timeout=180,
                          env=env, cwd=tmp_path)
    return proc, log


def _task_result(tmp_path: Path) -> dict[str, Any]:
    result: dict[str, Any] = json.loads((tmp_path / "result.json").read_text())
    return result


@pytest.mark.parametrize("first_try", [0, 1])
def test_the_bindings_are_fetched_through_the_tasks_proxy(tmp_path: Path, first_try: int) -> None:
    """A node whose only way out is the egress proxy gets python3-apt through it: apt-get runs under
    the play's environment, on the first try and after apt-get update (the Azure twin with a proxy
    egress found a bare command resolving deb.debian.org itself), then the apt module runs."""
    proc, log = _converge(tmp_path, f'case "$1" in install) [ -e {tmp_path}/updated ] || exit {first_try} ;; '
                                    f'update) : > {tmp_path}/updated ;; esac\n')
    assert proc.returncode == 0, proc.stdout + proc.stderr
    calls = log.read_text().splitlines()
    assert calls and all(c.endswith("via http://10.83.0.1:3142 http://10.83.0.1:3142 noninteractive")
                         for c in calls), calls
    assert [c.split()[0] for c in calls] == (["install"] if first_try == 0 else ["install", "update", "install"])
    assert _task_result(tmp_path)["stand_in_apt"] == ["nvidia-dcgm"]


def test_a_node_with_the_bindings_goes_straight_to_apt(tmp_path: Path) -> None:
    proc, log = _converge(tmp_path, "exit 100\n", bindings=True)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert not log.exists()
    assert _task_result(tmp_path)["stand_in_apt"] == ["nvidia-dcgm"]


def test_bindings_that_cannot_be_installed_fail_the_task_saying_why(tmp_path: Path) -> None:
    proc, _ = _converge(tmp_path, 'echo "E: Unable to locate package python3-apt" >&2\nexit 100\n')
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the play ignores it, to keep the result
    result = _task_result(tmp_path)
    assert result["failed"] is True and "stand_in_apt" not in result
    # apt-get's own error, of the install and of the update tried after it.
    assert result["msg"] == ("could not install python3-apt, which the apt module needs: "
                             "E: Unable to locate package python3-apt\nE: Unable to locate package python3-apt")


# The bounds (apt's stall timeout through APT_CONFIG, the whole task through the node's watchdog).
_APT_MODULE_READING_ITS_CONFIG = """#!/usr/bin/python
import os
from ansible.module_utils.basic import AnsibleModule

module = AnsibleModule(argument_spec={"name": {"type": "list", "elements": "str"}}, supports_check_mode=True)
with open(os.environ["APT_CONFIG"]) as f:
    module.exit_json(changed=False, stand_in_apt=module.params["name"], apt_config=f.read(),
                     marked=bool(os.environ.get("GPUCLUSTER_APT_TASK")))
"""
# A stand-in apt that hangs the way the lab's did: its download never ends. It leaves its pid and
# the pid of the apt-get it waits on, so the test can say whether either outlived the bound.
_APT_MODULE_THAT_HANGS = """#!/usr/bin/python
import os, subprocess
from ansible.module_utils.basic import AnsibleModule

module = AnsibleModule(argument_spec={"name": {"type": "list", "elements": "str"}}, supports_check_mode=True)
child = subprocess.Popen(["apt-get", "install"] + module.params["name"])
with open(os.environ["PIDS_FILE"], "w") as f:
    f.write(f"{os.getpid()} {child.pid}")
child.wait()
module.exit_json(changed=True, stand_in_apt=module.params["name"])
"""


def test_apt_runs_with_its_stall_timeout_and_marked_for_the_watchdog(tmp_path: Path) -> None:
    proc, _ = _converge(tmp_path, "exit 0\n", bindings=True, module=_APT_MODULE_READING_ITS_CONFIG,
                        extra_vars={"gpucluster_apt_stall_timeout_s": 75})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = _task_result(tmp_path)
    assert result["stand_in_apt"] == ["nvidia-dcgm"] and result["marked"] is True
    assert result["apt_config"].splitlines() == [
        'Acquire::http::Timeout "75";', 'Acquire::https::Timeout "75";', 'Acquire::Retries "2";']
    # apt done first: the watchdog was ended and took its folder with it.
    deadline = time.monotonic() + 10
    while list(_node_tmp(tmp_path).iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not list(_node_tmp(tmp_path).iterdir())


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie is ended: only its parent's wait is missing.
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"


def test_a_hung_apt_is_ended_at_the_limit_and_the_failure_says_what_to_raise(tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    pids = tmp_path / "pids"
    monkeypatch.setenv("PIDS_FILE", str(pids))
    began = time.monotonic()
    proc, _ = _converge(tmp_path, "sleep 600\n", bindings=True, module=_APT_MODULE_THAT_HANGS,
                        extra_vars={"gpucluster_apt_timeout_s": 3})
    took = time.monotonic() - began
    assert proc.returncode == 0, proc.stdout + proc.stderr  # the play ignores it, to keep the result
    assert took < 60, took
    result = _task_result(tmp_path)
    assert result["failed"] is True and result["gpucluster_apt_timed_out"] is True, result
    assert result["msg"].startswith(
        "localhost: task 'Install the package' did not finish within gpucluster_apt_timeout_s=3 s"), result["msg"]
    assert "gpucluster converge -e gpucluster_apt_timeout_s=SECONDS" in result["msg"]
    module_pid, apt_get_pid = (int(p) for p in pids.read_text().split())
    deadline = time.monotonic() + 20
    while (_alive(module_pid) or _alive(apt_get_pid)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not _alive(module_pid) and not _alive(apt_get_pid), "apt outlived its bound"
    # The watchdog ends too, after its grace for what ignored SIGTERM, and removes its folder.
    # (The module's own AnsiballZ payload folder stays: SIGTERM ends Python before its cleanup.)
    deadline = time.monotonic() + apt.KILL_GRACE_S + 10
    while list(_node_tmp(tmp_path).glob("gpucluster-apt.*")) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not list(_node_tmp(tmp_path).glob("gpucluster-apt.*"))


@pytest.mark.parametrize("value", [0, -5, "soon"])
def test_a_limit_that_is_not_a_number_of_seconds_fails_the_task_saying_so(tmp_path: Path, value: object) -> None:
    proc, _ = _converge(tmp_path, "exit 0\n", bindings=True, extra_vars={"gpucluster_apt_timeout_s": value})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    result = _task_result(tmp_path)
    assert result["failed"] is True and "stand_in_apt" not in result
    assert result["msg"] == f"gpucluster_apt_timeout_s must be a whole number of seconds above 0, not {value!r}"


def _under_a_terminal(command: str) -> str:
    """``command`` run by sh as the session leader of a pseudo-terminal (util-linux's script), the way
    ssh -tt or sudo's use_pty runs it: the session ends when that shell does."""
    done = subprocess.run(["script", "-qec", command, "/dev/null"], capture_output=True, text=True, timeout=30)
    return done.stdout.replace("\r", "")


@pytest.mark.skipif(shutil.which("script") is None, reason="util-linux's script (a pseudo-terminal) is not installed")
@pytest.mark.parametrize("limit_s", [30, 1])
def test_the_watchdog_outlives_a_terminal_session_and_says_whether_it_fired(limit_s: int) -> None:
    """Under a terminal the session's end sends SIGHUP to its foreground process group, which the
    watchdog is in until setsid runs: it must survive that, answer in the foreground, and after apt
    say 'fired' exactly when its limit was reached (a review's finding: over ssh -tt the watchdog's
    answer was lost and the watchdog killed)."""
    started = apt.parse_watchdog(_under_a_terminal(apt.watchdog_command(limit_s, "GPUCLUSTER_APT_TASK=pty", 120)))
    assert started is not None
    pid, folder = started
    time.sleep(2.5 if limit_s == 1 else 0.5)
    with open(f"/proc/{pid}/stat") as stat:
        assert stat.read().split()[2] in "RS", "the watchdog did not survive the session's end"
    ended = _under_a_terminal(apt.end_command(pid, folder)).strip()
    if limit_s == 1:
        assert ended == "fired"
        deadline = time.monotonic() + apt.KILL_GRACE_S + 5
        while Path(folder).exists() and time.monotonic() < deadline:
            time.sleep(0.2)
    else:
        assert ended == ""
        deadline = time.monotonic() + 5
        while Path(folder).exists() and time.monotonic() < deadline:
            time.sleep(0.1)
    assert not Path(folder).exists(), "the watchdog left its folder"


# Where the watchdog's folder goes: $TMPDIR, then each place START is given, on this host's sh. A
# regular file or a missing folder as a place fails mktemp even for root (the tests may run as root,
# for whom a chmod 0555 folder is writable).
def _start(places: tuple[str, ...], tmpdir: str, wrapper: str = 'exec sh -c "$0"') -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TMPDIR": tmpdir}
    return subprocess.run(["sh", "-c", wrapper, apt.watchdog_command(30, "GPUCLUSTER_APT_TASK=fallback", 120, places)],
                          env=env, capture_output=True, text=True, timeout=30)


def _catches_sigterm(pid: int) -> bool:
    caught = next(line for line in Path(f"/proc/{pid}/status").read_text().splitlines() if line.startswith("SigCgt:"))
    return bool(int(caught.split()[1], 16) & (1 << (15 - 1)))


@pytest.mark.parametrize("which", ["the defaults", "given places"])
def test_a_tmpdir_that_cannot_hold_the_folder_falls_back_and_the_folder_goes_with_the_watchdog(
        tmp_path: Path, which: str) -> None:
    """A node whose $TMPDIR (or /tmp) is read-only or full still gets its bound: the folder goes in the
    next place that takes it, and the watchdog ended after apt removes it there."""
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    if which == "the defaults":
        places, expected = apt.WATCHDOG_PLACES, "/tmp"
    else:
        (tmp_path / "second").mkdir()
        (tmp_path / "third").mkdir()
        places = (str(not_a_folder), str(tmp_path / "missing"), str(tmp_path / "second"), str(tmp_path / "third"))
        expected = str(tmp_path / "second")
    started = _start(places, str(not_a_folder))
    assert started.returncode == 0 and started.stderr == "", started
    watchdog = apt.parse_watchdog(started.stdout)
    assert watchdog is not None, started.stdout
    pid, folder = watchdog
    try:
        # As after apt: the watchdog is in its wait, its SIGTERM trap set (ended earlier, before its
        # shell has run that far, it dies of the signal and leaves the folder; apt takes far longer).
        deadline = time.monotonic() + 10
        while not _catches_sigterm(pid) and time.monotonic() < deadline:
            time.sleep(0.02)
        assert str(Path(folder).parent) == expected
        assert (Path(folder) / "apt.conf").read_text() == apt.apt_config(120) + "\n"
        if which == "given places":
            assert not list((tmp_path / "third").iterdir())
    finally:
        ended = subprocess.run(["sh", "-c", apt.end_command(pid, folder)], capture_output=True, text=True, timeout=30)
    assert ended.stdout == ""  # not fired: the watchdog was ended, and removes its folder
    deadline = time.monotonic() + 5
    while Path(folder).exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not Path(folder).exists(), "the watchdog left its folder"
    assert not_a_folder.read_text() == ""


def test_with_no_place_for_the_folder_the_task_fails_naming_each_place_and_why(tmp_path: Path) -> None:
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    places = (str(tmp_path / "missing"), str(not_a_folder), "relative/tmp", "/with space", str(not_a_folder / "x"))
    started = _start(places, str(not_a_folder))
    assert started.returncode == 1 and started.stdout == "", started
    assert started.stderr == (
        f"no place for the watchdog's folder: {not_a_folder}: Not a directory; {tmp_path}/missing: No such file or "
        f"directory; relative/tmp: not an absolute path; /with space: a space in the path; {not_a_folder}/x: Not a "
        f"directory\n")
    assert apt.parse_watchdog(started.stdout) is None
    assert apt.watchdog_failure(30, started.stderr).endswith(started.stderr.strip())


def test_a_place_that_takes_the_folder_but_not_apts_configuration_is_left_clean(tmp_path: Path) -> None:
    """A full disk: mktemp's folder is made, the apt configuration in it is not (here a file size limit
    of 0, its signal ignored so that the write fails instead). The folder is removed, the next place tried."""
    places = (str(tmp_path / "first"), str(tmp_path / "second"))
    for place in places:
        Path(place).mkdir()
    started = _start(places, places[0], wrapper='trap "" XFSZ; ulimit -f 0; exec sh -c "$0"')
    assert started.returncode == 1 and started.stdout == "", started
    said = started.stderr.strip().removeprefix("no place for the watchdog's folder: ").split("; ")
    assert [s.split(": ", 1)[0] for s in said] == list(places) and all(s.split(": ", 1)[1] for s in said), said
    assert not list(Path(places[0]).iterdir()) and not list(Path(places[1]).iterdir())
