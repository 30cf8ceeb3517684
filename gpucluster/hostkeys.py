"""SSH trust for converge and verify: which host keys a cluster's nodes may present, and a quick
probe of every node before a run.

Real targets: one known_hosts file per cluster on the controller
(``<state>/clusters/<name>/known_hosts``, see :mod:`gpucluster.runs`). The first contact records
a node's key (``StrictHostKeyChecking accept-new``); from then on a different key is refused,
and the run says which node, which file and how to accept a rebuilt node's new key.

The lab is exempt: its nodes' keys are made anew with the nodes, and `gpucluster lab` checks
them with a known_hosts of its own; converge and verify neither record nor check them there.

:func:`probe` connects to every node in parallel with a short timeout, so an unreachable node is
known in seconds (instead of each check waiting out its own SSH timeout) and a changed host key
is reported once, with its remedy.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gpucluster import runs
from gpucluster.errors import InputError
from gpucluster.inventory_model import Inventory

KNOWN_HOSTS = "known_hosts"
PROBE_CONNECT_TIMEOUT_S = 5
PROBE_TIMEOUT_S = 15.0

_CHANGED = ("REMOTE HOST IDENTIFICATION HAS CHANGED", "has changed and you have requested strict checking",
            "Host key verification failed")


@dataclass(frozen=True)
class HostKeyPolicy:
    """How a run's SSH clients treat host keys. ``known_hosts`` None: not checked (the lab)."""

    known_hosts: Path | None

    @property
    def checked(self) -> bool:
        return self.known_hosts is not None

    def ssh_options(self) -> list[tuple[str, str]]:
        """(option, value) pairs for ssh_config or ``-o`` flags."""
        if self.known_hosts is None:
            return [("StrictHostKeyChecking", "no"), ("UserKnownHostsFile", "/dev/null"),
                    ("GlobalKnownHostsFile", "/dev/null")]
        return [("StrictHostKeyChecking", "accept-new"), ("UserKnownHostsFile", str(self.known_hosts)),
                ("GlobalKnownHostsFile", "/dev/null"), ("HashKnownHosts", "no")]

    def ssh_flags(self) -> list[str]:
        return [arg for key, value in self.ssh_options() for arg in ("-o", f"{key}={value}")]

    def trusted_lines(self) -> str:
        """The recorded keys (for a launcher node's own ssh to the others); "" when none."""
        if self.known_hosts is None:
            return ""
        try:
            return self.known_hosts.read_text(encoding="utf-8")
        except OSError:
            return ""


def policy_for(target: str, cluster_name: str) -> HostKeyPolicy:
    """The lab: unchecked. Any other target: the cluster's own known_hosts (InputError when it
    cannot be made, since running unchecked instead is no option)."""
    if target == "lab":
        return HostKeyPolicy(None)
    try:
        path = runs.cluster_state_dir(cluster_name) / KNOWN_HOSTS
        if not path.exists():
            path.touch(mode=runs.RUN_FILE_MODE)
    except OSError as exc:
        raise InputError(f"cannot keep the cluster's host keys under {runs.state_root()}: "
                         f"{runs.describe_os_error(exc)} (set {runs.STATE_DIR_ENV} to a writable folder)") from None
    return HostKeyPolicy(path)


def policy_for_inventory(inventory: Inventory) -> HostKeyPolicy:
    """The policy for an inventory (its target and the cluster's name)."""
    return policy_for(inventory.vars.gpucluster_target, inventory.vars.gpucluster_cluster_name)


# --- through a bastion -----------------------------------------------------------------------

JUMP_CONFIG = "jump_ssh_config"


@dataclass(frozen=True)
class Jump:
    """The bastion every connection to the nodes goes through (the inventory's gpucluster_access),
    and the key the controller logs in to it with (the nodes' key; None: the SSH agent's keys).

    ssh reaches it as ssh's ProxyJump does: a second ``ssh -W`` to the bastion, which reads the
    same ``-F`` file as the first ("the configuration file specified with -F is passed to the
    jump host": ssh(1), -J; OpenSSH's ssh.c builds its ProxyCommand with ``-F <file>``). Its host
    key is held to the cluster's policy like a node's, and its login to :meth:`config_lines`.
    """

    host: str
    user: str
    port: int = 22
    key_file: str | None = None

    @property
    def spec(self) -> str:
        """``user@host:port``: ProxyJump's and ``-J``'s form."""
        return f"{self.user}@{self.host}:{self.port}"

    def config_lines(self) -> list[str]:
        """The bastion's ``Host`` block (after a ``Host *`` block holding the host key policy)."""
        lines = [f"Host {self.host}", f"  User {self.user}", f"  Port {self.port}"]
        if self.key_file:
            lines += [f"  IdentityFile {self.key_file}", "  IdentitiesOnly yes"]
        return lines


def jump_of(inventory: Inventory) -> Jump | None:
    """The bastion of an inventory (``all.vars.gpucluster_access``), with the key its hosts log in
    with; None when the nodes are reached directly."""
    access = inventory.vars.gpucluster_access
    bastion = access.bastion if access.mode == "bastion" else None
    if bastion is None:
        return None
    keys = {hv.ansible_ssh_private_key_file for hv in inventory.hosts.values()}
    key = next(iter(keys)) if len(keys) == 1 else None
    return Jump(bastion.host, bastion.user, bastion.port, key)


def write_jump_config(path: Path, jump: Jump, policy: HostKeyPolicy) -> Path:
    """An ssh_config for reaching the nodes through ``jump``: the host key policy for every host
    (the bastion's key recorded and checked like a node's) and the bastion's login. Given to ssh
    with ``-F`` beside ``-o ProxyJump=<jump.spec>``, the jump connection reads it too."""
    lines = ["# Written by gpucluster: how ssh reaches the cluster's bastion.", "Host *"]
    lines += [f"  {key} {value}" for key, value in policy.ssh_options()]
    lines += ["  BatchMode yes", "  ForwardAgent no", "  ServerAliveInterval 15", *jump.config_lines()]
    path.parent.mkdir(parents=True, exist_ok=True, mode=runs.RUN_DIR_MODE)
    runs.write_private(path, "\n".join(lines) + "\n")
    return path


def jump_config_for(cluster_name: str, jump: Jump, policy: HostKeyPolicy) -> Path:
    """:func:`write_jump_config` in the cluster's own state folder (beside its known_hosts)."""
    return write_jump_config(runs.cluster_state_dir(cluster_name) / JUMP_CONFIG, jump, policy)


# --- probing ---------------------------------------------------------------------------------

Status = Literal["ok", "unreachable", "host_key_changed"]


@dataclass(frozen=True)
class ProbeResult:
    node: str
    status: Status
    message: str
    seconds: float

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def to_json(self) -> dict[str, Any]:
        return {"status": self.status, "message": self.message, "seconds": self.seconds}

    @staticmethod
    def from_json(node: str, d: dict[str, Any]) -> ProbeResult:
        return ProbeResult(node, d["status"], str(d.get("message", "")), float(d.get("seconds", 0.0)))


def _last_line(text: str) -> str:
    lines = [x.strip() for x in text.strip().splitlines() if x.strip() and not set(x.strip()) <= {"@"}]
    return lines[-1][:300] if lines else ""


def classify(node: str, address: str, rc: int | None, stderr: str, seconds: float,
             policy: HostKeyPolicy, timeout: float) -> ProbeResult:
    """What one probe's exit status and ssh's messages say about the node."""
    secs = round(seconds, 2)
    if rc is None:
        return ProbeResult(node, "unreachable", f"no SSH answer within {timeout:.0f} s", secs)
    if any(m in stderr for m in _CHANGED) and policy.known_hosts is not None:
        kh = shlex.quote(str(policy.known_hosts))
        # ssh names the host whose key changed: the node's, or the bastion's on the way to it.
        named = re.search(r"Host key for (\S+) has changed", stderr)
        host = named.group(1) if named else address
        what = "the node" if host in (address, f"[{address}]") else f"the bastion {host} on the way to {address}"
        return ProbeResult(node, "host_key_changed",
                           f"host key of {host} is not the one recorded in {policy.known_hosts} (a rebuilt machine, "
                           f"or someone in between): if {what} was rebuilt, forget the old key with "
                           f"`ssh-keygen -R {shlex.quote(host)} -f {kh}` and run again", secs)
    if rc == 255:
        return ProbeResult(node, "unreachable", _last_line(stderr) or "ssh exit 255", secs)
    return ProbeResult(node, "ok", "", secs)


def probe(nodes: Sequence[tuple[str, str]], argv_for: Callable[[str], list[str]], policy: HostKeyPolicy,
          *, timeout: float = PROBE_TIMEOUT_S, workers: int = 32) -> dict[str, ProbeResult]:
    """``true`` on every (name, address) at once; ``argv_for(name)`` is the ssh command line."""

    def one(node: tuple[str, str]) -> ProbeResult:
        name, address = node
        t0 = time.monotonic()
        try:
            proc = subprocess.run(argv_for(name), capture_output=True, text=True, timeout=timeout,
                                  stdin=subprocess.DEVNULL, check=False)
        except subprocess.TimeoutExpired:
            return classify(name, address, None, "", time.monotonic() - t0, policy, timeout)
        except OSError as exc:
            return ProbeResult(name, "unreachable", f"cannot run ssh: {exc}", 0.0)
        return classify(name, address, proc.returncode, proc.stderr, time.monotonic() - t0, policy, timeout)

    if not nodes:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(nodes)))) as pool:
        return {r.node: r for r in pool.map(one, nodes)}


def direct_argv(address: str, port: int, user: str | None, key_file: str | None, policy: HostKeyPolicy,
                command: str = "true", jump: tuple[Jump, Path] | None = None) -> list[str]:
    """An ssh command line for converge's probe, before Ansible connects: no config file, or
    through ``jump`` (the bastion and its :func:`write_jump_config` file)."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", f"ConnectTimeout={PROBE_CONNECT_TIMEOUT_S}",
            "-o", "ConnectionAttempts=1", "-o", "LogLevel=ERROR", *policy.ssh_flags(), "-p", str(port)]
    if jump is not None:
        argv += ["-F", str(jump[1]), "-o", f"ProxyJump={jump[0].spec}"]
    if user:
        argv += ["-l", user]
    if key_file:
        argv += ["-i", key_file, "-o", "IdentitiesOnly=yes"]
    return [*argv, address, command]


def forget(known_hosts: Path, hosts: Sequence[str]) -> list[str]:
    """Drop the recorded keys of ``hosts`` (``addr`` or ``[addr]:port``, as ssh names them) from
    ``known_hosts``, which stays with its other entries: the nodes were destroyed, and a node built
    anew at the same address has a new key (``gpucluster down`` and ``up --fresh``). Returns the
    hosts whose keys were dropped; a missing file drops nothing."""
    try:
        lines = known_hosts.read_text(encoding="utf-8").splitlines(keepends=True)
    except FileNotFoundError:
        return []
    wanted = set(hosts)
    kept: list[str] = []
    dropped: set[str] = set()
    for line in lines:
        fields = line.split()
        # Marker lines (@cert-authority, @revoked) and comments are trust the operator wrote: kept.
        names = set(fields[0].split(",")) if fields and not fields[0].startswith(("#", "@")) else set()
        if names & wanted:
            dropped |= names & wanted
            continue
        kept.append(line)
    if dropped:
        runs.write_private(known_hosts, "".join(kept))
    return sorted(dropped)
