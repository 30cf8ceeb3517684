"""A stand-in for the ``ssh`` client in unit tests: it runs the remote command on this machine, as
a real process in a session of its own (as sshd would), in a home folder of the node's own
(``$FAKE_SSH_HOMES/<node>``), so what a run does on a node (authorized_keys lines, key files,
processes that outlive their client) can be looked at and killed for real.

Nodes named in ``FAKE_SSH_DOWN`` do not answer (ssh's ConnectTimeout, then exit 255 as ssh
does); nodes in ``FAKE_SSH_CHANGED`` present another host key (OpenSSH's own messages). Every
command line is appended to ``FAKE_SSH_LOG``, one JSON list a line.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

SCRIPT = r'''#!/usr/bin/env python3
import json, os, sys, time
args = sys.argv[1:]
with open(os.environ.get("FAKE_SSH_LOG", os.devnull), "a") as log:
    log.write(json.dumps(args) + "\n")
timeout = 10.0
with_value = {"-F", "-i", "-l", "-p", "-E", "-S", "-O", "-c", "-m", "-b", "-L", "-R", "-D", "-J", "-W", "-w", "-Q",
              "-B", "-e"}
i = 0
while i < len(args):
    a = args[i]
    if a == "-o":
        key, _, value = args[i + 1].replace(" ", "=", 1).partition("=")
        if key.lower() == "connecttimeout":
            timeout = float(value)
        i += 2
    elif a in with_value:
        i += 2
    elif a.startswith("-"):
        i += 1
    else:
        break
host, command = args[i], " ".join(args[i + 1:])
if host in os.environ.get("FAKE_SSH_DOWN", "").split():
    time.sleep(timeout)
    sys.stderr.write(f"ssh: connect to host {host} port 22: Connection timed out\r\n")
    sys.exit(255)
if host in os.environ.get("FAKE_SSH_CHANGED", "").split():
    sys.stderr.write(
        "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\r\n"
        "@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\r\n"
        "@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@@\r\n"
        "IT IS POSSIBLE THAT SOMEONE IS DOING SOMETHING NASTY!\r\n"
        f"Host key for {host} has changed and you have requested strict checking.\r\n"
        "Host key verification failed.\r\n")
    sys.exit(255)
home = os.path.join(os.environ["FAKE_SSH_HOMES"], host)
os.makedirs(home, exist_ok=True)
env = dict(os.environ, HOME=home, SHELL="/bin/sh")
# The "remote" side in a session of its own, as under a real sshd: killing this client (Ctrl-C
# on the controller) leaves it running, as it would on a node.
pid = os.fork()
if pid == 0:
    os.setsid()
    os.chdir(home)
    os.execve("/bin/sh", ["sh", "-c", command], env)
while True:
    try:
        _, status = os.waitpid(pid, 0)
        break
    except InterruptedError:
        continue
code = os.waitstatus_to_exitcode(status)
sys.exit(code if code >= 0 else 255)
'''


def install(folder: Path) -> dict[str, str]:
    """Write the fake ``ssh`` into ``folder/bin``; returns the environment that puts it first on PATH."""
    bin_dir = folder / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    ssh = bin_dir / "ssh"
    ssh.write_text(SCRIPT.replace("#!/usr/bin/env python3", f"#!{sys.executable}", 1), encoding="utf-8")
    ssh.chmod(0o755)
    homes = folder / "nodes"
    homes.mkdir(exist_ok=True)
    return {"PATH": f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}", "FAKE_SSH_HOMES": str(homes),
            "FAKE_SSH_LOG": str(folder / "ssh.log")}


def calls(folder: Path) -> list[list[str]]:
    """Every command line the fake ssh was given, in order."""
    log = folder / "ssh.log"
    if not log.exists():
        return []
    return [json.loads(line) for line in log.read_text(encoding="utf-8").splitlines() if line.strip()]


def pids_running(argv_tail: str) -> list[int]:
    """Live (not zombie) processes on this machine whose command line ends with ``argv_tail``."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as fh:
                cmdline = fh.read().replace(b"\0", b" ").decode().strip()
            with open(f"/proc/{entry.name}/stat") as fh:
                state = fh.read().split(") ")[1][0]
        except OSError:
            continue
        if cmdline.endswith(argv_tail) and state != "Z":
            found.append(int(entry.name))
    return found
