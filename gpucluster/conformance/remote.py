"""Running commands on nodes over SSH for the engines (the checks use testinfra's host).

One OpenSSH client configuration per run folder: host keys of lab nodes change with every
boot, so the run does not trust or record them, and a control master per node keeps the
many short commands of a run from paying a handshake each.
"""

from __future__ import annotations

import hashlib
import os
import shlex
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from gpucluster.conformance.nodes import NodeInfo


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


def _control_dir(config_dir: Path) -> Path:
    """A short folder for SSH control sockets: a Unix socket path may not exceed 108 bytes,
    and run folders (and CI checkouts) can sit deep in the file system."""
    digest = hashlib.sha1(str(config_dir.resolve()).encode()).hexdigest()[:12]
    folder = Path(tempfile.gettempdir()) / f"gc-ssh-{digest}"
    folder.mkdir(mode=0o700, exist_ok=True)
    return folder


def write_ssh_config(path: Path, nodes: list[NodeInfo], shared: Path | None = None) -> Path:
    """An ssh_config naming every node by its inventory name.

    Configurations written with the same ``shared`` folder (a run's ``ssh/``: every xdist
    worker's, the fabric's, the textfile publisher's) share their control masters, so a
    node's connection opened by one is reused by the others instead of a handshake each.
    """
    lines = [
        "# Written by gpucluster verify for this run.",
        "Host *",
        "  StrictHostKeyChecking no",
        "  UserKnownHostsFile /dev/null",
        "  LogLevel ERROR",
        "  BatchMode yes",
        "  ConnectTimeout 10",
        "  ServerAliveInterval 15",
        "  ControlMaster auto",
        f"  ControlPath {_control_dir(shared or path.parent)}/cm-%C",
        "  ControlPersist 120",
    ]
    for n in nodes:
        lines += [f"Host {n.name}", f"  HostName {n.address}", f"  Port {n.port}", f"  User {n.user}"]
        if n.key_file:
            lines += [f"  IdentityFile {n.key_file}", "  IdentitiesOnly yes"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


@dataclass
class SshRemote:
    name: str
    ssh_config: Path
    forward_agent: bool = False
    agent_socket: str | None = None

    def argv(self, command: str) -> list[str]:
        args = ["ssh", "-F", str(self.ssh_config)]
        if self.forward_agent:
            # A separate connection: a control master's forwarding choice is fixed at its start.
            args += ["-A", "-o", "ControlMaster=no", "-o", "ControlPath=none"]
        return [*args, self.name, command]

    def run(self, command: str, *, stdin: str | None = None, timeout: float = 120.0) -> CommandResult:
        env = dict(os.environ)
        if self.agent_socket:
            env["SSH_AUTH_SOCK"] = self.agent_socket
        try:
            proc = subprocess.run(self.argv(command), input=stdin, capture_output=True, text=True,
                                  timeout=timeout, env=env, check=False)
        except subprocess.TimeoutExpired as exc:
            out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
            return CommandResult(124, out, f"timed out after {timeout:.0f} s: {command}")
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)


class SshAgent:
    """An ssh-agent for this run holding the inventory's keys, so mpirun on one node can
    reach the others through agent forwarding without a private key copied to any node."""

    def __init__(self, run_dir: Path, keys: list[str]) -> None:
        self.socket = str(run_dir / "ssh-agent.sock")
        if os.path.exists(self.socket):
            os.unlink(self.socket)
        proc = subprocess.run(["ssh-agent", "-a", self.socket, "-s"], capture_output=True, text=True, check=True)
        self.pid: int | None = None
        for part in proc.stdout.replace(";", "\n").splitlines():
            if part.strip().startswith("SSH_AGENT_PID="):
                self.pid = int(part.strip().split("=", 1)[1])
        env = dict(os.environ, SSH_AUTH_SOCK=self.socket)
        for key in sorted(set(keys)):
            subprocess.run(["ssh-add", "-q", key], env=env, capture_output=True, check=True)

    def close(self) -> None:
        if self.pid:
            try:
                os.kill(self.pid, 15)
            except ProcessLookupError:
                pass
            self.pid = None


def quote(args: list[str]) -> str:
    return " ".join(shlex.quote(a) for a in args)
