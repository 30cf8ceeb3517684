"""The run key on a node: what its line allows, the one command it starts, and taking it back.

The "node" is this machine: the very commands the controller sends run in /bin/sh with a home
folder of the test's own, as sshd would run them; the forced command runs through the shell as
sshd runs it, with SSH_ORIGINAL_COMMAND set to what Open MPI's rsh launcher sends.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
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
# Captured on a lab node (Debian 12, Open MPI 4.1.4): `mpirun --mca plm_rsh_agent /bin/echo
# --mca plm_rsh_no_tree_spawn 1 -np 2 --host 10.77.0.10:1,10.77.0.11:1 true` prints what it
# would have sent to the peer.
CAPTURED = ('orted --daemonize -mca ess "env" -mca ess_base_jobid "2527264768" -mca ess_base_vpid 1 '
            '-mca ess_base_num_procs "2" -mca orte_node_regex "gpu-[1:1],[2:10].77.0.11@0(2)" '
            '-mca orte_hnp_uri "2527264768.0;tcp://10.77.0.10,10.77.1.10,10.77.2.10,10.77.3.10:53333" '
            '--mca plm_rsh_agent "/bin/echo" --mca plm_rsh_no_tree_spawn "1" -mca plm "rsh" '
            '-mca pmix "^s1,s2,cray,isolated"')


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
    return RunKey.ensure(tmp_path / "keys", RUN)


@pytest.fixture
def orted_dir(tmp_path: Path) -> Path:
    """A stand-in for Open MPI's daemon in a folder only its owner may write to: it prints its
    arguments, one a line, and the tags it was started with."""
    folder = tmp_path / "openmpi" / "bin"
    folder.mkdir(parents=True)
    for p in (tmp_path / "openmpi", folder):
        p.chmod(0o755)
    orted = folder / "orted"
    orted.write_text('#!/bin/sh\nprintf "arg:%s\\n" "$@"\n'
                     'echo "tags:$GPUCLUSTER_RUN/$GPUCLUSTER_MEASUREMENT"\necho "path:$PATH"\n')
    orted.chmod(0o755)
    return folder


def keys_of(home: Path) -> list[str]:
    return (home / ".ssh" / "authorized_keys").read_text().splitlines()


# --- the line ---------------------------------------------------------------------------------


def test_the_line_allows_one_launcher_until_the_budget_ends_and_starts_only_the_gate(key: RunKey, home: Path):
    line = key.authorized_line("aaaa1111", "10.89.0.10", "20261127183000")
    assert line.startswith('restrict,from="10.89.0.10",expiry-time="20261127183000",command="exec python3 -I ')
    assert line.endswith(f" gpucluster-verify-run:{RUN}")
    # OpenSSH itself reads the line, options included.
    (home / ".ssh" / "authorized_keys").write_text(line + "\n")
    check = subprocess.run(["ssh-keygen", "-l", "-f", str(home / ".ssh" / "authorized_keys")], capture_output=True,
                           text=True, check=False)
    assert check.returncode == 0, check.stderr
    with pytest.raises(ValueError):
        key.authorized_line("x; rm -rf /", "10.89.0.10", "20261127183000")
    with pytest.raises(ValueError):
        key.authorized_line("aaaa1111", '10.0.0.1" ,command="sh', "20261127183000")


def test_a_grant_writes_the_line_and_the_gate_and_a_new_one_replaces_it(key: RunKey, home: Path):
    node = Node(home)
    assert key.grant(node, "aaaa1111", "10.89.0.10", 60) is None
    before = time.time()
    assert key.grant(node, "bbbb2222", "10.89.0.11", 60) is None
    lines = keys_of(home)
    assert lines[:20] == OPERATOR and len(lines) == 21
    assert "gate " + RUN + " bbbb2222" in lines[20] and "aaaa1111" not in lines[20]
    assert 'from="10.89.0.11"' in lines[20]
    stamp = re.search(r'expiry-time="(\d{14})"', lines[20]).group(1)
    expiry = time.mktime(time.strptime(stamp, "%Y%m%d%H%M%S"))
    assert before + 59 <= expiry <= time.time() + 62, "valid for the budget given, by the node's clock"
    gate = home / ".ssh" / f"gpucluster-verify-{RUN}.gate"
    assert gate.read_text() == Path(node_keys.__file__).read_text()
    with pytest.raises(ValueError):
        key.grant(node, "aaaa1111", "not-an-address", 60)


def test_revoke_leaves_the_operators_keys_and_removes_the_runs_files(key: RunKey, home: Path):
    node = Node(home)
    assert key.grant(node, "aaaa1111", "10.89.0.10", 60) is None
    (home / ".ssh" / f"gpucluster-verify-{RUN}").write_text("private")
    (home / ".ssh" / f"gpucluster-verify-{RUN}.known_hosts").write_text("hosts")
    (home / ".ssh" / "gpucluster-verify-ffffffffffff.gate").write_text("another run's")
    res = sh(revoke_script(RUN), home)
    assert res.ok and "revoked 1 line(s), 3 file(s)" in res.stdout, res
    assert keys_of(home) == OPERATOR
    assert oct((home / ".ssh" / "authorized_keys").stat().st_mode & 0o777) == "0o600"
    assert sorted(p.name for p in (home / ".ssh").iterdir()) == ["authorized_keys",
                                                                  "gpucluster-verify-ffffffffffff.gate"]


def test_a_sweep_removes_expired_and_unbounded_run_lines_only(key: RunKey, home: Path):
    blob = key.public()
    expired = node_keys.authorized_line(*blob, "111111111111", "aaaa", "10.0.0.1", "20200101000000")
    live = node_keys.authorized_line(*blob, "222222222222", "bbbb", "10.0.0.1", "29991231235959")
    legacy = f'command="exec sh",no-pty {blob[0]} {blob[1]} gpucluster-verify-run:333333333333'
    (home / ".ssh" / "authorized_keys").write_text("\n".join([*OPERATOR[:3], expired, live, legacy, *OPERATOR[3:]]))
    for run in ("111111111111", "222222222222", "333333333333"):
        (home / ".ssh" / f"gpucluster-verify-{run}.gate").write_text("gate")
    res = sh(sweep_script(), home)
    assert res.ok and "swept 2 line(s), 2 file(s)" in res.stdout, res
    assert keys_of(home) == [*OPERATOR[:3], live, *OPERATOR[3:]]
    assert [p.name for p in (home / ".ssh").glob("gpucluster-verify-*")] == ["gpucluster-verify-222222222222.gate"]
    assert sh(sweep_script(), home).stdout.strip() == "swept 0 line(s), 0 file(s)"


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting a small tmpfs needs root")
def test_a_full_disk_leaves_authorized_keys_whole_and_says_so(key: RunKey, tmp_path: Path):
    home = tmp_path / "full"
    home.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(home)], check=True)
    try:
        (home / ".ssh").mkdir(mode=0o700)
        node = Node(home)
        (home / ".ssh" / "authorized_keys").write_text("\n".join(OPERATOR) + "\n")
        assert key.grant(node, "aaaa1111", "10.89.0.10", 60) is None
        with_grant = keys_of(home)
        # Fill the file system: nothing more can be written.
        subprocess.run(["dd", "if=/dev/zero", f"of={home}/fill", "bs=4k"], capture_output=True, check=False)
        res = sh(revoke_script(RUN), home)
        assert not res.ok and "No space left on device" in res.stderr and "the file is as it was" in res.stderr
        assert keys_of(home) == with_grant, "a full disk emptied or cut authorized_keys"
        assert not list((home / ".ssh").glob(".authorized_keys.*")), "a temporary file was left behind"
        problem = RunKey(RUN, key.private_key).revoke(node)
        assert problem is not None and "No space left on device" in problem
        (home / "fill").unlink()
        assert sh(revoke_script(RUN), home).ok and keys_of(home) == OPERATOR
    finally:
        subprocess.run(["umount", str(home)], check=False)


# --- the gate: Open MPI's daemon, and nothing else ---------------------------------------------


def forced(home: Path, key: RunKey, asked: str, **env: str) -> CommandResult:
    """Log in with the key as sshd would: the line's forced command through the login shell."""
    line = next(x for x in keys_of(home) if x.endswith(f"gpucluster-verify-run:{RUN}"))
    command = re.match(r'.*command="((?:[^"\\]|\\.)*)"', line).group(1).replace('\\"', '"')
    return sh(command, home, SSH_ORIGINAL_COMMAND=asked, **env)


@pytest.mark.parametrize("shape", ["plain", "prefixed", "profile", "captured"])
def test_the_gate_starts_open_mpis_daemon_as_the_launcher_asked_tagged(key: RunKey, home: Path, orted_dir: Path,
                                                                       shape: str):
    assert key.grant(Node(home), "aaaa1111", "10.89.0.10", 60) is None
    prefix = orted_dir.parent
    asked = {"plain": PLAIN, "prefixed": PREFIXED.format(p=prefix), "profile": PROFILE, "captured": CAPTURED}[shape]
    path = os.environ["PATH"] if shape == "prefixed" else f"{orted_dir}:{os.environ['PATH']}"
    res = forced(home, key, asked, PATH=path)
    assert res.ok, res
    args = [x.removeprefix("arg:") for x in res.stdout.splitlines() if x.startswith("arg:")]
    shell = subprocess.run(["/bin/sh", "-c", 'printf "%s\\n" ' + asked.split("orted", 1)[1].rstrip(" )")],
                           capture_output=True, text=True, check=True).stdout.splitlines()
    assert args == shell, "the daemon's arguments as a shell would have given them"
    assert "tags:" + RUN + "/aaaa1111" in res.stdout
    if shape == "prefixed":
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
])
def test_the_gate_refuses_anything_else_and_says_why(key: RunKey, home: Path, orted_dir: Path, asked: str, why: str):
    assert key.grant(Node(home), "aaaa1111", "10.89.0.10", 60) is None
    res = forced(home, key, asked, PATH=f"{orted_dir}:{os.environ['PATH']}")
    assert res.rc == 126 and "arg:" not in res.stdout, res
    assert f"gpucluster run key {RUN}: refused ({why}" in res.stderr, res.stderr


def test_the_gate_runs_no_shell_so_arguments_stay_arguments(key: RunKey, home: Path, orted_dir: Path,
                                                            tmp_path: Path):
    assert key.grant(Node(home), "aaaa1111", "10.89.0.10", 60) is None
    res = forced(home, key, f'orted "$(touch {tmp_path}/pwned)" `touch {tmp_path}/pwned` | id',
                 PATH=f"{orted_dir}:{os.environ['PATH']}")
    assert res.ok and not (tmp_path / "pwned").exists()
    assert f"arg:$(touch {tmp_path}/pwned)" in res.stdout and "arg:|" in res.stdout


def test_the_gate_refuses_a_daemon_or_a_path_others_may_write_to(key: RunKey, home: Path, tmp_path: Path):
    assert key.grant(Node(home), "aaaa1111", "10.89.0.10", 60) is None
    shared = tmp_path / "shared"
    shared.mkdir()
    (shared / "orted").write_text("#!/bin/sh\necho ran\n")
    (shared / "orted").chmod(0o755)
    shared.chmod(0o777)
    res = forced(home, key, f"PATH={shared}:$PATH ; export PATH ; orted")
    assert res.rc == 126 and "ran" not in res.stdout and f"PATH names {shared}, which others may write to" in res.stderr
    res = forced(home, key, f"{shared}/orted")
    assert res.rc == 126 and "ran" not in res.stdout and "may be written by others" in res.stderr


def test_cleanup_kills_the_runs_processes_then_takes_the_key_back(key: RunKey, home: Path):
    assert key.grant(Node(home), "aaaa1111", "10.89.0.10", 60) is None
    res = sh(cleanup_script(RUN), home)
    assert res.ok and "killed 0" in res.stdout and "revoked 1 line(s), 1 file(s)" in res.stdout
    assert keys_of(home) == OPERATOR


def test_the_node_program_names_a_bad_call() -> None:
    res = sh(node_keys_command("grant", RUN), Path("/nonexistent"))
    assert res.rc == 2 and "usage: node_keys" in res.stderr
