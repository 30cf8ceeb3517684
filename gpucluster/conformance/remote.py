"""Running commands on nodes over SSH for the engines (the checks use testinfra's host).

One OpenSSH client configuration per run folder, with a control master per node so the many
short commands of a run do not pay a handshake each. Host keys follow the cluster's
:class:`~gpucluster.hostkeys.HostKeyPolicy`: recorded on first contact and then checked on real
targets; the lab, whose nodes get new keys with every build, is exempt.

Every command a run starts on a node carries the run's tag in its environment
(``GPUCLUSTER_RUN=<run id>``, plus ``GPUCLUSTER_CMD=<command id>``), so what a run left behind
(mpirun and its ranks, all_reduce_perf, ib_write_bw, gpu-burn and its sampler) can be found and
killed on every node when the run is interrupted, or when one command outlives its timeout.
One measurement between nodes (an all-reduce, an ib_write_bw pair) carries a tag of its own,
``GPUCLUSTER_MEASUREMENT=<tag>``, on every node it reaches: on the launcher through
:class:`TaggedRemote`, on the nodes mpirun logs in to through the run key's forced command
(:meth:`RunKey.grant`). When its budget ends, :func:`kill_measurement` kills exactly its
processes (mpirun's remote daemons and ranks, ib_write_bw's server and client) on every node,
and nothing else the run has going there.

Nodes reach each other (mpirun's launcher starting the other ranks) with a key made for the run
(:class:`RunKey`), authorised on the nodes for the run only and removed at its end; the
inventory's private key never leaves the controller and no SSH agent is forwarded. Behind a
bastion every command of a run, the run key's grant and its placement on the launcher included,
takes the same path: each node's ``ProxyJump`` in the run's ssh_config.
"""

from __future__ import annotations

import contextlib
import functools
import ipaddress
import os
import re
import secrets
import shlex
import shutil
import subprocess
import uuid
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from gpucluster import sockets
from gpucluster.conformance import node_keys
from gpucluster.conformance.nodes import NodeInfo
from gpucluster.hostkeys import HostKeyPolicy

RUN_ID_ENV = "GPUCLUSTER_RUN_ID"  # on the controller: the run's id, handed to the suite's processes
RUN_TAG = "GPUCLUSTER_RUN"  # on the nodes: in the environment of everything the run started
CMD_TAG = "GPUCLUSTER_CMD"
MEASURE_TAG = "GPUCLUSTER_MEASUREMENT"
RUN_KEY_MARKER = node_keys.MARKER
KILL_TIMEOUT_S = 30.0


@dataclass(frozen=True)
class CommandResult:
    rc: int
    stdout: str
    stderr: str

    @property
    def ok(self) -> bool:
        return self.rc == 0


class Remote(Protocol):
    name: str

    def run(self, command: str, *, stdin: str | None = None, timeout: float = 120.0) -> CommandResult: ...


def write_ssh_config(path: Path, nodes: list[NodeInfo], shared: Path | None = None,
                     host_keys: HostKeyPolicy | None = None) -> Path:
    """An ssh_config naming every node by its inventory name.

    Configurations written with the same ``shared`` folder (a run's ``ssh/``: every xdist
    worker's, the fabric's, the textfile publisher's) share their control masters, so a
    node's connection opened by one is reused by the others instead of a handshake each. The
    masters' sockets are in a folder the run made and checked (:func:`gpucluster.sockets.control_dir`);
    InputError, naming it, when what is found there is not this user's private folder.
    ``host_keys``: the cluster's policy; None leaves keys unchecked (the lab).
    """
    policy = host_keys or HostKeyPolicy(None)
    lines = ["# Written by gpucluster verify for this run.", "Host *"]
    lines += [f"  {key} {value}" for key, value in policy.ssh_options()]
    lines += [
        "  LogLevel ERROR",
        "  BatchMode yes",
        # The nodes' sshd refuses agent forwarding (the common role); the client never asks.
        "  ForwardAgent no",
        "  ConnectTimeout 10",
        "  ServerAliveInterval 15",
        "  ControlMaster auto",
        "  ControlPersist 120",
    ]
    control = sockets.control_dir(shared or path.parent)
    # Through a bastion: each node's ProxyJump names it, and ssh hands this file on to the jump
    # connection, which takes the host key policy above and the bastion's login block.
    bastions = {n.jump.host: n.jump for n in nodes if n.jump is not None}
    for jump in bastions.values():
        lines += jump.config_lines()
    for i, n in enumerate(nodes):
        lines += [f"Host {n.name}", f"  HostName {n.address}", f"  Port {n.port}", f"  User {n.user}",
                  f"  ControlPath {control}/{sockets.socket_name(i, n.name)}"]
        if n.jump is not None:
            lines.append(f"  ProxyJump {n.jump.spec}")
        if n.key_file:
            lines += [f"  IdentityFile {n.key_file}", "  IdentitiesOnly yes"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def tag_command(command: str, run_id: str, cmd_id: str) -> str:
    """``command`` in a shell whose initial environment (``/proc/PID/environ``) carries the tags,
    as does every process it starts: what the run started can be found by tag, and only that."""
    return (f"exec env {RUN_TAG}={run_id} {CMD_TAG}={cmd_id} \"${{SHELL:-/bin/sh}}\" -c "
            f"{shlex.quote(command)}")


def kill_script(tag: str, grace_s: int = 5) -> str:
    """POSIX sh: TERM, then KILL after ``grace_s``, every process whose environment holds ``tag``
    (``NAME=VALUE``); prints ``killed N``. Processes started meanwhile by a tagged one are tagged too."""
    t = shlex.quote(tag)
    return (
        f"tag={t}; "
        'found() { for d in /proc/[0-9]*; do p=${d#/proc/}; [ "$p" = "$$" ] && continue; '
        'grep -qzxF -- "$tag" "$d/environ" 2>/dev/null && echo "$p"; done; }; '
        "n=0; i=0; "
        f"while [ $i -le {grace_s * 2} ]; do pids=$(found); [ -z \"$pids\" ] && break; "
        '[ $i -eq 0 ] && n=$(echo $pids | wc -w); '
        f'if [ $i -lt {grace_s * 2} ]; then kill -TERM $pids 2>/dev/null; else kill -KILL $pids 2>/dev/null; fi; '
        "sleep 0.5; i=$((i+1)); done; "
        'echo "killed $n"'
    )


def _untagged(remote: Remote) -> Remote:
    if isinstance(remote, SshRemote):
        return SshRemote(remote.name, remote.ssh_config, run_id="")
    return remote


@dataclass
class SshRemote:
    """One node over the run's ssh_config. Commands carry the run's tag (``run_id``, by default
    ``$GPUCLUSTER_RUN_ID``; "" for none); a command past its timeout is killed on the node too.
    No agent is ever forwarded: the run's ssh_config says ``ForwardAgent no``.
    """

    name: str
    ssh_config: Path
    run_id: str = field(default_factory=lambda: os.environ.get(RUN_ID_ENV, ""))

    def argv(self, command: str, cmd_id: str | None = None) -> list[str]:
        if self.run_id:
            command = tag_command(command, self.run_id, cmd_id or uuid.uuid4().hex[:12])
        return ["ssh", "-F", str(self.ssh_config), self.name, command]

    def run(self, command: str, *, stdin: str | None = None, timeout: float = 120.0) -> CommandResult:
        cmd_id = uuid.uuid4().hex[:12]
        try:
            proc = subprocess.run(self.argv(command, cmd_id), input=stdin, capture_output=True, text=True,
                                  timeout=timeout, check=False)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            note = ""
            if self.run_id:
                # The ssh client is gone; what it started on the node is not, unless killed there.
                res = _untagged(self).run(kill_script(f"{CMD_TAG}={cmd_id}"), timeout=KILL_TIMEOUT_S)
                killed = res.stdout.strip().removeprefix("killed ")
                note = (f"; {killed} of its process(es) killed on the node" if res.ok and killed.isdigit()
                        else f"; it may still run on the node: {res.stderr.strip()[:100]}")
            return CommandResult(124, out, f"timed out after {timeout:.0f} s{note}: {command}")
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)


def quote(args: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in args)


# --- one measurement's processes on every node -------------------------------------------------


def new_measurement_tag() -> str:
    return uuid.uuid4().hex[:16]


@dataclass
class TaggedRemote:
    """``inner`` whose commands, and everything they start, carry ``GPUCLUSTER_MEASUREMENT=<tag>``.

    An exported variable reaches the environment of every process the command starts (the
    shell's own initial environment keeps the run's tags). ``timed_out`` says whether a command
    ran past its timeout: the measurement was cut by its budget, not refused.
    """

    inner: Remote
    tag: str
    timed_out: bool = False
    name: str = field(init=False)

    def __post_init__(self) -> None:
        self.name = self.inner.name

    def run(self, command: str, *, stdin: str | None = None, timeout: float = 120.0) -> CommandResult:
        res = self.inner.run(f"export {MEASURE_TAG}={shlex.quote(self.tag)}; {command}", stdin=stdin,
                             timeout=timeout)
        if res.rc == 124 and res.stderr.startswith("timed out after"):
            self.timed_out = True
        return res


def _bare(remote: Remote) -> Remote:
    """The remote without any tag: a kill script must not carry the tag it looks for."""
    while isinstance(remote, TaggedRemote):
        remote = remote.inner
    return _untagged(remote)


def kill_measurement(remotes: Sequence[Remote], tag: str, grace_s: int = 2,
                     extra: str = "") -> dict[str, int | str]:
    """Kill every process carrying the measurement's ``tag`` on every node at once (``extra``: a
    shell command run after, on each node); node -> processes killed, or why the kill did not run."""

    def one(remote: Remote) -> tuple[str, int | str]:
        script = kill_script(f"{MEASURE_TAG}={tag}", grace_s) + (f"; {extra}" if extra else "")
        try:
            res = _bare(remote).run(script, timeout=KILL_TIMEOUT_S)
        except OSError as exc:
            return remote.name, f"kill not run: {exc}"
        found = next((x for x in res.stdout.splitlines() if x.startswith("killed ")), "")
        count = found.removeprefix("killed ").strip()
        if not count.isdigit():
            return remote.name, f"kill failed (exit {res.rc}): {res.stderr.strip()[:200]}"
        return remote.name, int(count)

    if not remotes:
        return {}
    with ThreadPoolExecutor(max_workers=min(32, len(remotes))) as pool:
        return dict(pool.map(one, remotes))


# --- the run's private folders on the nodes ----------------------------------------------------
#
# A file at a fixed name in /var/tmp (the MPI all-reduce script, the burn script, a tool's log or
# output) is a name any local user of the node can take first: a link, or a file of theirs that
# they rewrite between our write and root running it. Each use gets a folder of its own instead,
# ``/var/tmp/gpucluster-<run id>.<64 random bits>``, made by ``mkdir -m 700`` and then checked to
# be this user's folder, mode 0700, no link (anything another user put at the name first, a file,
# a folder or a link, is refused by name): ``mktemp -d`` with the random part drawn by the
# controller, so that the nodes of one measurement share the path (mpirun starts the script by one
# path on every rank). /var/tmp is sticky: once made, no other user can move it away. The use
# removes it when it ends; what a run killed outright left, the session's cleanup removes on every
# node by the run's id (:func:`cleanup_script`).

NODE_FOLDER_PARENT = "/var/tmp"
NODE_FOLDER_PREFIX = "gpucluster-"
_HEX_ID = re.compile(r"^[0-9a-f]{6,32}$")


class NodeFolderError(Exception):
    """A node on which the run's private folder could not be made: one line per node."""


def node_folder_path(run_id: str = "") -> str:
    """A new private folder's path for the run ``run_id`` (default: this process's run)."""
    run = run_id or os.environ.get(RUN_ID_ENV, "")
    run = run if _HEX_ID.match(run) else "norun"
    return f"{NODE_FOLDER_PARENT}/{NODE_FOLDER_PREFIX}{run}.{secrets.token_hex(8)}"


def make_folder_script(path: str) -> str:
    """POSIX sh: make ``path`` this user's private folder, or fail naming what is in its place.
    Only a folder of this user's, mode 0700 and no link, is taken as made: another node of the
    measurement made it where nodes share /var/tmp (test nodes on one host)."""
    q = shlex.quote(path)
    return (f"umask 077; mkdir -m 700 -- {q} 2>/dev/null; "
            f'if test -d {q} && test ! -h {q} && test -O {q} && test "$(stat -c %a -- {q})" = 700; then :; '
            f'else echo "cannot make the private folder {path}: $(ls -ld -- {q} 2>&1)" >&2; exit 1; fi')


def remove_folder_script(path: str) -> str:
    """POSIX sh: remove ``path`` if it is this user's folder and no link (never what another put there)."""
    q = shlex.quote(path)
    return f"if test -d {q} && test ! -h {q} && test -O {q}; then rm -rf -- {q}; fi"


def remove_run_folders_script(run_id: str) -> str:
    """POSIX sh: remove every private folder of the run ``run_id`` on the node (what a run killed
    before its own cleanup left); prints ``folders N``."""
    if not _HEX_ID.match(run_id):
        return "echo 'folders 0'"
    pattern = f"{NODE_FOLDER_PARENT}/{NODE_FOLDER_PREFIX}{run_id}.*"
    return (f'n=0; for d in {pattern}; do if test -d "$d" && test ! -h "$d" && test -O "$d"; then '
            'rm -rf -- "$d" && n=$((n+1)); fi; done; echo "folders $n"')


def make_folders(remotes: Sequence[Remote], path: str) -> list[str]:
    """``path`` made on every node at once; one problem line per node where it could not be."""

    def one(remote: Remote) -> str | None:
        res = remote.run(make_folder_script(path), timeout=30)
        return None if res.ok else f"{remote.name}: {_last_words(res)}"

    if not remotes:
        return []
    with ThreadPoolExecutor(max_workers=min(16, len(remotes))) as pool:
        return [p for p in pool.map(one, remotes) if p is not None]


def remove_folders(remotes: Sequence[Remote], path: str) -> None:
    def one(remote: Remote) -> None:
        with contextlib.suppress(OSError):
            remote.run(remove_folder_script(path), timeout=30)

    if remotes:
        with ThreadPoolExecutor(max_workers=min(16, len(remotes))) as pool:
            list(pool.map(one, remotes))


@contextlib.contextmanager
def node_folder(remotes: Sequence[Remote], run_id: str = "") -> Iterator[str]:
    """A private folder of the run, at one path on every one of ``remotes``, for the files one
    use puts there; removed from every node when the block ends. NodeFolderError (one line per
    node) when a node cannot make it: something already holds the name there."""
    path = node_folder_path(run_id)
    problems = make_folders(remotes, path)
    try:
        if problems:
            raise NodeFolderError("; ".join(problems))
        yield path
    finally:
        remove_folders(remotes, path)


# --- the run's own key for node-to-node logins -------------------------------------------------


@functools.cache
def _node_keys_source() -> str:
    return Path(node_keys.__file__).read_text(encoding="utf-8")


def node_keys_command(*args: str) -> str:
    """:mod:`node_keys` run on a node as it is (``python3 -I -c``), with ``args``."""
    return f"python3 -I -c {shlex.quote(_node_keys_source())} {quote(list(args))}"


def revoke_script(run_id: str, measurement: str = "") -> str:
    """Remove the run's authorized_keys lines and its files (key, known_hosts; with no
    ``measurement``, every one of the run's and its gate too) from the login user's ~/.ssh; the
    file is rewritten whole or not at all (:func:`node_keys.rewrite_keys`)."""
    return node_keys_command("revoke", run_id, *([measurement] if measurement else []))


def sweep_script() -> str:
    """Remove every run key line past its expiry-time (or without one) and the files of runs with
    no line left: what a run killed before its own cleanup (SIGKILL, power loss) left behind."""
    return node_keys_command("sweep")


@dataclass(frozen=True)
class RunKey:
    """An ed25519 key pair made for one measurement of a run (in the run folder, 0600), for
    mpirun's launcher to log in to the measurement's other nodes.

    Its grant (:func:`node_keys.authorized_line`) is usable only from the launcher's management
    address, until the end of the measurement's budget, for Open MPI's daemon alone (the gate,
    tagged with the run and the measurement), with nothing forwarded; the line ends with
    ``gpucluster-verify-run:<run id>:<measurement>``, by which it is removed or swept. A key per
    measurement: an earlier launcher holds no key a later grant accepts.
    """

    run_id: str
    measurement: str
    private_key: Path

    @staticmethod
    def ensure(folder: Path, run_id: str, measurement: str) -> RunKey:
        if not measurement.isalnum():
            raise ValueError(f"measurement tag must be alphanumeric: {measurement!r}")
        key = folder / f"run-key-{run_id}-{measurement}"
        if not (key.exists() and key.with_suffix(".pub").exists()):
            folder.mkdir(parents=True, exist_ok=True, mode=0o700)
            key.unlink(missing_ok=True)
            key.with_suffix(".pub").unlink(missing_ok=True)
            subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", node_keys.marker(run_id, measurement),
                            "-f", str(key)], capture_output=True, text=True, check=True, stdin=subprocess.DEVNULL)
        os.chmod(key, 0o600)
        return RunKey(run_id, measurement, key)

    @property
    def remote_key_name(self) -> str:
        return f"{node_keys.KEY_PREFIX}{self.run_id}.{self.measurement}"

    def public(self) -> tuple[str, str]:
        kind, blob = self.private_key.with_suffix(".pub").read_text(encoding="utf-8").split()[:2]
        return kind, blob

    def authorized_line(self, source: str, expiry: str) -> str:
        """The line a node gets (``expiry``: the node's own stamp, made there)."""
        return node_keys.authorized_line(*self.public(), self.run_id, self.measurement, source, expiry)

    def grant(self, remote: Remote, source: str, valid_s: float) -> str | None:
        """Authorise the key on one node for logins from ``source`` (the launcher's management
        address), for ``valid_s`` seconds by the node's clock; returns a problem, or None."""
        ipaddress.ip_address(source)
        command = node_keys_command("grant", self.run_id, self.measurement, source, str(max(1, round(valid_s))),
                                    *self.public())
        res = _untagged(remote).run(command, stdin=_node_keys_source(), timeout=30)
        return None if res.ok else f"{remote.name}: cannot authorise the run's key: {_last_words(res)}"

    def revoke(self, remote: Remote) -> str | None:
        res = _untagged(remote).run(revoke_script(self.run_id, self.measurement), timeout=30)
        return None if res.ok else f"{remote.name}: cannot remove the run's key: {_last_words(res)}"

    def place(self, remote: Remote, known_hosts: str) -> str | None:
        """The private key (and the host keys the launcher may trust) on the launcher; returns
        the key's path there, or None when it could not be written."""
        r = _untagged(remote)
        base = f'"$HOME/.ssh/{self.remote_key_name}"'
        res = r.run(f'umask 077; mkdir -p "$HOME/.ssh"; cat > {base} && printf %s {base}',
                    stdin=self.private_key.read_text(encoding="utf-8"), timeout=30)
        path = res.stdout.strip()
        if not res.ok or not path:
            return None
        if not r.run(f"umask 077; cat > {shlex.quote(path + '.known_hosts')}", stdin=known_hosts, timeout=30).ok:
            r.run(f"rm -f {shlex.quote(path)}", timeout=30)
            return None
        return path

    def remove(self, remote: Remote, path: str | None) -> None:
        if path:
            _untagged(remote).run(f"rm -f {shlex.quote(path)} {shlex.quote(path + '.known_hosts')}", timeout=30)

    def delete_local(self) -> None:
        self.private_key.unlink(missing_ok=True)
        self.private_key.with_suffix(".pub").unlink(missing_ok=True)


def delete_local_keys(folder: Path) -> None:
    """Every key of the run the controller still holds (``folder``: the run folder's ``ssh/run-key``)."""
    shutil.rmtree(folder, ignore_errors=True)


# --- at every session's end, and after one that never got there -----------------------------


def cleanup_script(*run_ids: str) -> str:
    """Kill everything the runs started on the node, then take back their keys and remove their
    private folders; one ``killed N``, one ``revoked ...`` and one ``folders N`` line per run."""
    return "; ".join(f"{kill_script(f'{RUN_TAG}={r}')}; {revoke_script(r)}; {remove_run_folders_script(r)}"
                     for r in run_ids)


def _last_words(res: CommandResult) -> str:
    return (res.stderr.strip() or res.stdout.strip() or f"exit {res.rc}").splitlines()[-1][:200]


def _every_node(remotes: Sequence[Remote], script: str, what: str, read: Callable[[str], str],
                timeout: float) -> dict[str, str]:
    """``script`` on every node at once; node -> what happened (one line)."""

    def one(remote: Remote) -> tuple[str, str]:
        try:
            res = _untagged(remote).run(script, timeout=timeout)
        except OSError as exc:
            return remote.name, f"{what} not run: {exc}"
        if not res.ok:
            return remote.name, f"{what} failed (exit {res.rc}): {_last_words(res)}"
        return remote.name, read(res.stdout)

    if not remotes:
        return {}
    with ThreadPoolExecutor(max_workers=min(32, len(remotes))) as pool:
        return dict(pool.map(one, remotes))


def node_done(what: str) -> bool:
    """Whether a node's line from :func:`_every_node` (cleanup, sweep) says the script ran there and succeeded."""
    return " failed (exit " not in what and " not run: " not in what


def _said(out: str, word: str) -> str:
    return next((x.split(None, 1)[1] for x in out.splitlines() if x.startswith(word + " ")), "?")


def _cleaned(out: str) -> str:
    killed = [x.split()[1] for x in out.splitlines() if x.startswith("killed ")]
    total = str(sum(int(k) for k in killed)) if killed and all(k.isdigit() for k in killed) else "?"
    folders = [x.split()[1] for x in out.splitlines() if x.startswith("folders ")]
    removed = str(sum(int(f) for f in folders)) if folders and all(f.isdigit() for f in folders) else "?"
    return (f"{total} process(es) of the run killed; run key removed ({_said(out, 'revoked')}); "
            f"{removed} private folder(s) removed")


def cleanup_nodes(remotes: Sequence[Remote], run_id: str | Sequence[str],
                  timeout: float = KILL_TIMEOUT_S) -> dict[str, str]:
    """:func:`cleanup_script` on every node at once, one command per node for every run given: at
    the end of every session, whatever ended it, and after runs that never got there; node ->
    what happened (one line)."""
    ids = [run_id] if isinstance(run_id, str) else list(run_id)
    if not any(ids):
        return {}
    return _every_node(remotes, cleanup_script(*ids), "cleanup", _cleaned, timeout * len(ids))


def sweep_nodes(remotes: Sequence[Remote], timeout: float = KILL_TIMEOUT_S) -> dict[str, str]:
    """:func:`sweep_script` on every node at once, at the start of a session: the expired lines of
    runs that ended without their cleanup (a controller killed with SIGKILL); node -> what was removed."""
    return _every_node(remotes, sweep_script(), "run key sweep", lambda out: _said(out, "swept"), timeout)
