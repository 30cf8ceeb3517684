"""The run key on a node: what its line allows, the one command it starts, and taking it back.

The "node" is this machine: the very commands the controller sends run in /bin/sh with a home
folder of the test's own, as sshd would run them; the forced command runs through the shell as
sshd runs it, with SSH_ORIGINAL_COMMAND set to what Open MPI's rsh launcher sends.
"""

from __future__ import annotations

import calendar
import os
import re
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from gpucluster.conformance import node_keys
from gpucluster.conformance.remote import (
    CommandResult,
    RunKey,
    cleanup_script,
    node_keys_command,
    revoke_script,
    sweep_script,
)

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

RUN = "0a0b0c0d0e0f"
OPERATOR = [f"ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI{i:02d}OperatorKeyOperatorKey op{i}@desk" for i in range(20)]

# What Open MPI 4's rsh launcher sends (orte/mca/plm/rsh/plm_rsh_module.c, setup_launch): the
# daemon and its arguments in double quotes; with --prefix (or OPAL_PREFIX) PATH and the library
# paths are set first, in sh syntax; for a remote sh or ksh, ~/.profile is sourced in a subshell.
ORTED_ARGS = ('-mca ess "env" -mca ess_base_jobid "3135242240" -mca ess_base_vpid 1 -mca ess_base_num_procs "2" '
              '-mca orte_node_regex "node-[1:1-2]@0(2)" -mca orte_hnp_uri "3135242240.0;tcp://10.89.0.10:39877" '
              '--mca plm_rsh_no_tree_spawn "1" -mca plm "rsh" --tree-spawn')
PLAIN = f"     orted {ORTED_ARGS}"
PREFIXED = ("OPAL_PREFIX={p} ; export OPAL_PREFIX; PATH={p}/bin:$PATH ; export PATH ; "
            "LD_LIBRARY_PATH={p}/lib:$LD_LIBRARY_PATH ; export LD_LIBRARY_PATH ; "
            "DYLD_LIBRARY_PATH={p}/lib:$DYLD_LIBRARY_PATH ; export DYLD_LIBRARY_PATH ;   {p}/bin/orted --daemonize "
            + ORTED_ARGS)
PROFILE = f"( test ! -r ./.profile || . ./.profile; orted {ORTED_ARGS} )"
# Captured on a lab node (Debian 12, Open MPI 4.1.4): what the run's own mpirun (the all-reduce's
# argv, tests/unit/conformance/test_verify_runs.py's shape) hands its ssh for the peer, read
# from a stand-in ssh first on PATH; ssh joins these words with spaces into SSH_ORIGINAL_COMMAND.
CAPTURED = (' orted --daemonize -mca ess "env" -mca ess_base_jobid "2291400704" -mca ess_base_vpid 1 '
            '-mca ess_base_num_procs "2" -mca orte_node_regex "gpu-[1:1],[2:10].77.0.11@0(2)" '
            '-mca orte_hnp_uri "2291400704.0;tcp://10.77.1.10:50773" --mca plm_rsh_no_tree_spawn "1" '
            '--mca pml "ob1" --mca btl "tcp,self" --mca btl_tcp_if_include "10.77.2.0/24,10.77.3.0/24" '
            '--mca oob_tcp_if_include "10.77.1.0/24" --mca mpi_yield_when_idle "1" -mca plm "rsh" '
            '-mca plm_rsh_args "-o BatchMode=yes -o LogLevel=ERROR -o ForwardAgent=no '
            '-i /root/.ssh/gpucluster-verify-573b039cf727 -o IdentitiesOnly=yes '
            '-o StrictHostKeyChecking=accept-new '
            '-o UserKnownHostsFile=/root/.ssh/gpucluster-verify-573b039cf727.known_hosts '
            '-o GlobalKnownHostsFile=/dev/null" -mca pmix "^s1,s2,cray,isolated"')
# Open MPI 4.1's prefix form as later 4.1 releases write it (${VAR:-}, as HPC-X's mpirun sends),
# and PRRTE's (Open MPI 5): steps joined by ';' without spaces, PRTE_PREFIX set, prted.
PREFIXED_41 = ("OPAL_PREFIX={p} ; export OPAL_PREFIX; PATH={p}/bin:$PATH ; export PATH ; "
               "LD_LIBRARY_PATH={p}/lib:${{LD_LIBRARY_PATH:-}} ; export LD_LIBRARY_PATH ; "
               "DYLD_LIBRARY_PATH={p}/lib:${{DYLD_LIBRARY_PATH:-}} ; export DYLD_LIBRARY_PATH ;   "
               "{p}/bin/orted --daemonize " + ORTED_ARGS)
PRRTE = ("PRTE_PREFIX={p};export PRTE_PREFIX;LD_LIBRARY_PATH={p}/lib:${{LD_LIBRARY_PATH:-}};"
         "export LD_LIBRARY_PATH;DYLD_LIBRARY_PATH={p}/lib:${{DYLD_LIBRARY_PATH:-}};export DYLD_LIBRARY_PATH;"
         '{p}/bin/prted --prtemca ess "env" --prtemca ess_base_nspace "prte-node-1-1234@0" '
         '--prtemca ess_base_vpid 1 --prtemca ess_base_num_procs "2" --prtemca prte_hnp_uri '
         '"prte-node-1-1234@0.0;tcp://10.89.0.10:45123" --prtemca plm "ssh"')


def sh(command: str, home: Path, stdin: str | None = None, **env: str) -> CommandResult:
    proc = subprocess.run(["/bin/sh", "-c", command], input=stdin, capture_output=True, text=True, check=False,
                          timeout=60, env=dict(os.environ, HOME=str(home), SHELL="/bin/sh", **env))
    return CommandResult(proc.returncode, proc.stdout, proc.stderr)


class Node:
    """One home folder on this machine, reached the way SshRemote reaches a node."""

    name = "node-2"

    def __init__(self, home: Path) -> None:
        self.home = home

    def run(self, command: str, *, stdin: str | None = None, timeout: float = 120.0) -> CommandResult:
        return sh(command, self.home, stdin)


@pytest.fixture
def home(tmp_path: Path) -> Path:
    h = tmp_path / "home"
    (h / ".ssh").mkdir(parents=True, mode=0o700)
    (h / ".ssh" / "authorized_keys").write_text("\n".join(OPERATOR) + "\n")
    (h / ".ssh" / "authorized_keys").chmod(0o600)
    return h


@pytest.fixture
def key(tmp_path: Path) -> RunKey:
    return RunKey.ensure(tmp_path / "keys", RUN, "aaaa1111")


@pytest.fixture
def orted_dir(tmp_path: Path) -> Path:
    """A stand-in for Open MPI's daemon in a folder only its owner may write to: it prints its
    arguments, one a line, and the tags it was started with."""
    folder = tmp_path / "openmpi" / "bin"
    folder.mkdir(parents=True)
    for p in (tmp_path / "openmpi", folder):
        p.chmod(0o755)
    for daemon in ("orted", "prted"):
        (folder / daemon).write_text('#!/bin/sh\nprintf "arg:%s\\n" "$@"\n'
                                     'echo "tags:$GPUCLUSTER_RUN/$GPUCLUSTER_MEASUREMENT"\necho "path:$PATH"\n')
        (folder / daemon).chmod(0o755)
    return folder


def keys_of(home: Path) -> list[str]:
    return (home / ".ssh" / "authorized_keys").read_text().splitlines()


# --- the line ---------------------------------------------------------------------------------


def test_the_line_allows_one_launcher_until_the_budget_ends_and_starts_only_the_gate(key: RunKey, home: Path):
    line = key.authorized_line("10.89.0.10", "20261127183000")
    assert line.startswith('restrict,from="10.89.0.10",expiry-time="20261127183000",command="exec python3 -I ')
    assert line.endswith(f" gpucluster-verify-run:{RUN}:aaaa1111")
    # OpenSSH itself reads the line, options included.
    (home / ".ssh" / "authorized_keys").write_text(line + "\n")
    check = subprocess.run(["ssh-keygen", "-l", "-f", str(home / ".ssh" / "authorized_keys")], capture_output=True,
                           text=True, check=False)
    assert check.returncode == 0, check.stderr
    with pytest.raises(ValueError):
        RunKey.ensure(home / "k", RUN, "x; rm -rf /")
    with pytest.raises(ValueError):
        key.authorized_line('10.0.0.1" ,command="sh', "20261127183000")


def test_a_grant_writes_the_line_and_the_gate_and_a_new_one_replaces_it(key: RunKey, home: Path):
    node = Node(home)
    assert key.grant(node, "10.89.0.10", 60) is None
    before = time.time()
    assert key.grant(node, "10.89.0.11", 60) is None
    lines = keys_of(home)
    assert lines[:20] == OPERATOR and len(lines) == 21
    assert f"gate {RUN} aaaa1111" in lines[20] and 'from="10.89.0.11"' in lines[20]
    stamp = re.search(r'expiry-time="(\d{14})"', lines[20]).group(1)
    assert before + 59 <= sshd_reads(stamp) <= time.time() + 62, "valid for the budget given, by the node's clock"
    gate = home / ".ssh" / f"gpucluster-verify-{RUN}.gate"
    assert gate.read_text() == Path(node_keys.__file__).read_text()
    with pytest.raises(ValueError):
        key.grant(node, "not-an-address", 60)


def sshd_reads(stamp: str) -> float:
    """The instant sshd takes an expiry-time for: OpenSSH's parse_absolute_time() fills a zeroed
    struct tm (tm_isdst 0) and calls mktime(), so the stamp is read as local *standard* time."""
    return calendar.timegm(time.strptime(stamp, "%Y%m%d%H%M%S")) + time.timezone


def test_the_expiry_holds_in_a_daylight_saving_summer() -> None:
    """Berlin in July is UTC+2, but sshd reads the stamp as UTC+1: a stamp written in summer time
    would hold an hour longer than the budget."""
    code = ("import calendar, time; from gpucluster.conformance import node_keys as k; "
            "t = calendar.timegm((2026, 7, 1, 12, 0, 0, 0, 0, 0)); s = k.expiry_stamp(t, 60); "
            "print(s, calendar.timegm(time.strptime(s, '%Y%m%d%H%M%S')) + time.timezone - t)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env=dict(os.environ, TZ="Europe/Berlin")).stdout.split()
    assert out == ["20260701130101", "61"], out


def test_revoke_of_a_measurement_leaves_the_operators_keys_and_other_measurements(tmp_path: Path, home: Path):
    node = Node(home)
    first, second = (RunKey.ensure(tmp_path / "keys", RUN, tag) for tag in ("aaaa1111", "bbbb2222"))
    for k in (first, second):
        assert k.grant(node, "10.89.0.10", 60) is None
        (home / ".ssh" / k.remote_key_name).write_text("private")
        (home / ".ssh" / f"{k.remote_key_name}.known_hosts").write_text("hosts")
    (home / ".ssh" / "gpucluster-verify-ffffffffffff.gate").write_text("another run's")
    res = sh(revoke_script(RUN, "aaaa1111"), home)
    assert res.ok and "revoked 1 line(s), 2 file(s)" in res.stdout, res
    assert keys_of(home)[:20] == OPERATOR and [x.split()[-1] for x in keys_of(home)[20:]] == [
        f"gpucluster-verify-run:{RUN}:bbbb2222"]
    res = sh(revoke_script(RUN), home)
    assert res.ok and "revoked 1 line(s), 3 file(s)" in res.stdout, res
    assert keys_of(home) == OPERATOR
    assert oct((home / ".ssh" / "authorized_keys").stat().st_mode & 0o777) == "0o600"
    assert sorted(p.name for p in (home / ".ssh").iterdir()) == [
        ".gpucluster-authorized_keys.lock", "authorized_keys", "gpucluster-verify-ffffffffffff.gate"]


def test_two_measurements_in_parallel_on_one_home_keep_each_others_grants(tmp_path: Path, home: Path):
    """A home shared over NFS: pairs (A,B) and (C,D) of one round grant and revoke at once."""
    keys = [RunKey.ensure(tmp_path / "keys", RUN, f"m{i:07d}") for i in range(8)]
    with ThreadPoolExecutor(max_workers=8) as pool:
        assert list(pool.map(lambda k: k.grant(Node(home), "10.89.0.10", 60), keys)) == [None] * 8
    assert sorted(x.split()[-1] for x in keys_of(home)[20:]) == sorted(node_keys.marker(RUN, k.measurement)
                                                                       for k in keys)
    with ThreadPoolExecutor(max_workers=4) as pool:
        assert list(pool.map(lambda k: k.revoke(Node(home)), keys[:4])) == [None] * 4
    assert sorted(x.split()[-1] for x in keys_of(home)[20:]) == sorted(node_keys.marker(RUN, k.measurement)
                                                                       for k in keys[4:])
    assert (home / ".ssh" / f"gpucluster-verify-{RUN}.gate").exists(), "the gate the others still need"


def test_a_sweep_removes_expired_and_unbounded_run_lines_only(key: RunKey, home: Path):
    blob = key.public()
    expired = node_keys.authorized_line(*blob, "111111111111", "aaaa", "10.0.0.1", "20200101000000")
    live = node_keys.authorized_line(*blob, "222222222222", "bbbb", "10.0.0.1", "29991231235959")
    legacy = f'command="exec sh",no-pty {blob[0]} {blob[1]} gpucluster-verify-run:333333333333'
    (home / ".ssh" / "authorized_keys").write_text("\n".join([*OPERATOR[:3], expired, live, legacy, *OPERATOR[3:]]))
    old = time.time() - node_keys.FILE_GRACE_S - 60
    for run in ("111111111111", "222222222222", "333333333333", "444444444444"):
        gate = home / ".ssh" / f"gpucluster-verify-{run}.gate"
        gate.write_text("gate")
        if run != "444444444444":  # a run of another inventory that has just placed its files
            os.utime(gate, (old, old))
    stale = home / ".ssh" / f"{node_keys.TEMP_PREFIX}x1y2z3"
    stale.write_text("half a rewrite a killed process left")
    os.utime(stale, (old, old))
    res = sh(sweep_script(), home)
    assert res.ok and "swept 2 line(s), 3 file(s)" in res.stdout, res
    assert keys_of(home) == [*OPERATOR[:3], live, *OPERATOR[3:]]
    assert sorted(p.name for p in (home / ".ssh").glob("gpucluster-verify-*")) == [
        "gpucluster-verify-222222222222.gate", "gpucluster-verify-444444444444.gate"]
    assert sh(sweep_script(), home).stdout.strip() == "swept 0 line(s), 0 file(s)"


def test_operator_lines_are_kept_byte_for_byte(key: RunKey, home: Path):
    odd = ["ssh-ed25519 AAAAodd comment\u2028with a line separator", "ssh-rsa AAAAcrlf crlf@host\r",
           "ssh-ed25519 AAAAff form\x0cfeed", "# a comment \x1c"]
    path = home / ".ssh" / "authorized_keys"
    path.write_bytes(("\n".join(odd) + "\n").encode())
    assert key.grant(Node(home), "10.89.0.10", 60) is None
    assert sh(revoke_script(RUN), home).ok
    assert path.read_bytes() == ("\n".join(odd) + "\n").encode()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_full_disk_leaves_authorized_keys_whole_and_says_so(key: RunKey, tmp_path: Path):
    home = tmp_path / "full"
    home.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(home)], check=True)
    try:
        (home / ".ssh").mkdir(mode=0o700)
        node = Node(home)
        (home / ".ssh" / "authorized_keys").write_text("\n".join(OPERATOR) + "\n")
        assert key.grant(node, "10.89.0.10", 60) is None
        with_grant = keys_of(home)
        # Fill the file system: nothing more can be written.
        subprocess.run(["dd", "if=/dev/zero", f"of={home}/fill", "bs=4k"], capture_output=True, check=False)
        res = sh(revoke_script(RUN), home)
        assert not res.ok and "No space left on device" in res.stderr and "the file is as it was" in res.stderr
        assert keys_of(home) == with_grant, "a full disk emptied or cut authorized_keys"
        assert not list((home / ".ssh").glob(f"{node_keys.TEMP_PREFIX}*")), "a temporary file was left behind"
        problem = key.revoke(node)
        assert problem is not None and "No space left on device" in problem
        (home / "fill").unlink()
        assert sh(revoke_script(RUN), home).ok and keys_of(home) == OPERATOR
    finally:
        subprocess.run(["umount", str(home)], check=False)


# --- the gate: Open MPI's daemon, and nothing else ---------------------------------------------


def forced(home: Path, asked: str, **env: str) -> CommandResult:
    """Log in with the key as sshd would: the line's forced command through the login shell."""
    line = next(x for x in keys_of(home) if f"gpucluster-verify-run:{RUN}:" in x)
    command = re.match(r'.*command="((?:[^"\\]|\\.)*)"', line).group(1).replace('\\"', '"')
    return sh(command, home, SSH_ORIGINAL_COMMAND=asked, **env)


def _as_a_shell_reads(asked: str, daemon: str) -> list[str]:
    tail = asked.split(daemon, 1)[1].rstrip(" )")
    return subprocess.run(["/bin/sh", "-c", 'printf "%s\\n" ' + tail], capture_output=True, text=True,
                          check=True).stdout.splitlines()


@pytest.mark.parametrize("shape", ["plain", "prefixed", "prefixed-4.1", "profile", "captured", "prrte"])
def test_the_gate_starts_open_mpis_daemon_as_the_launcher_asked_tagged(key: RunKey, home: Path, orted_dir: Path,
                                                                       shape: str):
    assert key.grant(Node(home), "10.89.0.10", 60) is None
    prefix = orted_dir.parent
    asked = {"plain": PLAIN, "prefixed": PREFIXED.format(p=prefix), "prefixed-4.1": PREFIXED_41.format(p=prefix),
             "profile": PROFILE, "captured": CAPTURED, "prrte": PRRTE.format(p=prefix)}[shape]
    prefixed = shape.startswith("prefixed") or shape == "prrte"
    path = os.environ["PATH"] if prefixed else f"{orted_dir}:{os.environ['PATH']}"
    res = forced(home, asked, PATH=path, LD_LIBRARY_PATH="/usr/lib")
    assert res.ok, res
    args = [x.removeprefix("arg:") for x in res.stdout.splitlines() if x.startswith("arg:")]
    assert args == _as_a_shell_reads(asked, "prted" if shape == "prrte" else "orted"), \
        "the daemon's arguments as a shell would have given them"
    assert "tags:" + RUN + "/aaaa1111" in res.stdout
    if shape.startswith("prefixed"):
        assert args[0] == "--daemonize" and f"path:{prefix}/bin:" in res.stdout


@pytest.mark.parametrize(("asked", "why"), [
    ("id", "id is not Open MPI's daemon"),
    ("", "no command"),
    ("orted; id", "a command before the daemon"),
    ("orted ; id", "a command before the daemon: orted"),
    ("bash -c orted", "bash is not Open MPI's daemon"),
    ("LD_PRELOAD=/tmp/x.so orted", "it sets LD_PRELOAD"),
    ("PATH=$HOME/bin:$PATH ; orted", "$HOME in an assignment"),
    ("PATH=`id`:$PATH ; orted", "shell syntax in an assignment"),
    ("( id )", "( is not Open MPI's daemon"),
    ("OPAL_PREFIX=/nonexistent ; export OPAL_PREFIX; orted", "OPAL_PREFIX names /nonexistent"),
    ('orted -mca mca_base_component_path "/tmp/evil"', "the daemon setting mca_base_component_path"),
    ('orted --mca orte_fork_agent "/tmp/x"', "the daemon setting orte_fork_agent"),
    ('prted --prtemca mca_base_param_files "/tmp/p.conf"', "the daemon setting mca_base_param_files"),
])
def test_the_gate_refuses_anything_else_and_says_why(key: RunKey, home: Path, orted_dir: Path, asked: str, why: str):
    assert key.grant(Node(home), "10.89.0.10", 60) is None
    res = forced(home, asked, PATH=f"{orted_dir}:{os.environ['PATH']}")
    assert res.rc == 126 and "arg:" not in res.stdout, res
    assert f"gpucluster run key {RUN}: refused ({why}" in res.stderr, res.stderr


def test_the_gate_runs_no_shell_so_arguments_stay_arguments(key: RunKey, home: Path, orted_dir: Path,
                                                            tmp_path: Path):
    assert key.grant(Node(home), "10.89.0.10", 60) is None
    res = forced(home, f'orted "$(touch {tmp_path}/pwned)" `touch {tmp_path}/pwned` | id',
                 PATH=f"{orted_dir}:{os.environ['PATH']}")
    assert res.ok and not (tmp_path / "pwned").exists()
    assert f"arg:$(touch {tmp_path}/pwned)" in res.stdout and "arg:|" in res.stdout


def test_the_gate_refuses_a_daemon_or_a_path_others_may_write_to(key: RunKey, home: Path, tmp_path: Path):
    assert key.grant(Node(home), "10.89.0.10", 60) is None
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "orted").write_text("#!/bin/sh\necho ran\n")
    (shared / "orted").chmod(0o755)
    shared.chmod(0o777)
    res = forced(home, f"PATH={shared}:$PATH ; export PATH ; orted")
    assert res.rc == 126 and "ran" not in res.stdout and f"PATH names {shared}, which others may write to" in res.stderr
    res = forced(home, f"{shared}/orted")
    assert res.rc == 126 and "ran" not in res.stdout and "may be written by others" in res.stderr


def test_cleanup_kills_the_runs_processes_then_takes_the_key_back(key: RunKey, home: Path):
    assert key.grant(Node(home), "10.89.0.10", 60) is None
    res = sh(cleanup_script(RUN), home)
    assert res.ok and "killed 0" in res.stdout and "revoked 1 line(s), 1 file(s)" in res.stdout
    assert keys_of(home) == OPERATOR


def test_the_node_program_names_a_bad_call() -> None:
    res = sh(node_keys_command("grant", RUN), Path("/nonexistent"))
    assert res.rc == 2 and "usage: node_keys" in res.stderr
