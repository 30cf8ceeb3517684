"""The `gpucluster.cluster.apt` action's bounds in time: what it gives apt and the node's watchdog.

What they do against a hung apt, run by ansible-playbook: test_apt_action.py (process tier).
"""

from __future__ import annotations

import shlex
from pathlib import Path

import pytest
import yaml

from tests.unit.loading import load_file

REPO = Path(__file__).resolve().parents[3]
PLUGIN = REPO / "collections/ansible_collections/gpucluster/cluster/plugins/action/apt.py"

apt = load_file(PLUGIN, "gpucluster_apt_action_bounds")


def test_defaults_are_the_cluster_wide_ones() -> None:
    group_vars = yaml.safe_load((REPO / "playbooks/group_vars/all.yml").read_text())
    assert apt.bounds({}) == (1800, 120)
    assert (group_vars[apt.TIMEOUT_VAR], group_vars[apt.STALL_VAR]) == apt.bounds({})


@pytest.mark.parametrize(("task_vars", "expected"), [
    ({"gpucluster_apt_timeout_s": 3600}, (3600, 120)),
    ({"gpucluster_apt_timeout_s": "600", "gpucluster_apt_stall_timeout_s": " 30 "}, (600, 30)),
    ({"gpucluster_apt_timeout_s": 0}, "gpucluster_apt_timeout_s must be a whole number of seconds above 0, not 0"),
    ({"gpucluster_apt_stall_timeout_s": "2m"},
     "gpucluster_apt_stall_timeout_s must be a whole number of seconds above 0, not '2m'"),
    ({"gpucluster_apt_timeout_s": 1.5}, "gpucluster_apt_timeout_s must be a whole number of seconds above 0, not 1.5"),
])
def test_bounds_from_the_task_variables(task_vars: dict[str, object], expected: object) -> None:
    assert apt.bounds(task_vars) == expected


def test_apt_is_given_its_stall_timeout_for_http_and_https() -> None:
    assert apt.apt_config(90).splitlines() == [
        'Acquire::http::Timeout "90";', 'Acquire::https::Timeout "90";', 'Acquire::Retries "2";']


def test_the_watchdog_is_given_the_limit_the_marker_and_apts_configuration() -> None:
    argv = shlex.split(apt.watchdog_command(1800, "GPUCLUSTER_APT_TASK=abc123", 120))
    assert argv[:3] == ["sh", "-c", apt.START]
    assert argv[3:] == ["gpucluster-apt-start", "1800", str(apt.KILL_GRACE_S), "GPUCLUSTER_APT_TASK=abc123",
                        apt.apt_config(120), apt.WATCHDOG, "/tmp", "/var/tmp", "/run"]


def test_the_watchdogs_folder_falls_back_from_tmpdir_through_root_writable_places() -> None:
    """$TMPDIR first (the node's own choice), then /tmp, /var/tmp and /run: what START is given to try
    (what it does with them on a real shell: test_apt_action.py)."""
    assert apt.WATCHDOG_PLACES == ("/tmp", "/var/tmp", "/run")
    assert 'for p in ${TMPDIR:+"$TMPDIR"} "$@"; do' in apt.START
    argv = shlex.split(apt.watchdog_command(60, "GPUCLUSTER_APT_TASK=abc123", 120, ("/srv/a", "/srv/b")))
    assert argv[-3:] == [apt.WATCHDOG, "/srv/a", "/srv/b"]


def test_the_answer_is_printed_in_the_foreground_and_only_the_watchdog_is_left_behind() -> None:
    """Under a terminal (ssh -tt, sudo's use_pty) the session ends with its shell: what the action
    reads must come from that shell, never from the process it leaves running (a review's finding)."""
    lines = apt.START.strip().splitlines()
    assert lines[-1] == 'echo "$! $d"'
    background = [line for line in lines if line.rstrip().endswith("&")]
    assert len(background) == 1 and background[0].startswith("setsid ")
    assert "</dev/null >/dev/null 2>&1 &" in background[0]


def test_after_apt_the_nodes_watchdog_says_whether_it_fired() -> None:
    """The node's clock decides, not the controller's: 'fired' where the watchdog marked its folder
    (or had already removed it), else the watchdog is ended."""
    cmd = apt.end_command(4242, "/tmp/gpucluster-apt.Ab3dEf9h")
    assert cmd == ("if [ -e /tmp/gpucluster-apt.Ab3dEf9h/fired ] || [ ! -d /tmp/gpucluster-apt.Ab3dEf9h ]; "
                   "then echo fired; else kill -TERM 4242 2>/dev/null; fi")


@pytest.mark.parametrize(("stdout", "expected"), [
    ("4242 /tmp/gpucluster-apt.Ab3dEf9h\n", (4242, "/tmp/gpucluster-apt.Ab3dEf9h")),
    ("4242 /var/tmp/gpucluster-apt.Ab3dEf9h\n", (4242, "/var/tmp/gpucluster-apt.Ab3dEf9h")),
    ("4242 /run/gpucluster-apt.Ab3dEf9h\n", (4242, "/run/gpucluster-apt.Ab3dEf9h")),
    ("4242 /scratch/node tmp/gpucluster-apt.Ab3dEf9h\n", None),
    ("", None),
    ("4242\n", None),
    ("x /tmp/gpucluster-apt.Ab3dEf9h", None),
    ("4242 /tmp/elsewhere", None),
    ("4242 relative/gpucluster-apt.Ab3dEf9h", None),
])
def test_what_the_watchdog_printed(stdout: str, expected: object) -> None:
    assert apt.parse_watchdog(stdout) == expected


def test_the_timeout_names_host_task_limit_and_the_setting_to_raise() -> None:
    msg = apt.timeout_message("gpu-1", "Install DOCA-OFED", 1800, 120)
    assert msg.startswith("gpu-1: task 'Install DOCA-OFED' did not finish within gpucluster_apt_timeout_s=1800 s")
    assert "gpucluster converge -e gpucluster_apt_timeout_s=SECONDS" in msg
    assert "gpucluster_apt_stall_timeout_s=120 s" in msg


def test_a_watchdog_that_found_no_place_fails_the_task_with_starts_own_line() -> None:
    said = ("no place for the watchdog's folder: /tmp: Read-only file system; /var/tmp: No space left on device; "
            "/run: Permission denied\n")
    assert apt.watchdog_failure(1800, said) == (
        "could not start the watchdog that bounds apt to gpucluster_apt_timeout_s=1800 s (setsid, mktemp and /proc "
        "on the node): no place for the watchdog's folder: /tmp: Read-only file system; /var/tmp: No space left on "
        "device; /run: Permission denied")
