"""Long-running lab processes (nspawn, apt-cacher-ng) without a service manager.

This host's PID 1 may not be systemd, so the lab starts its daemons as background
processes in their own session and finds them again by their command line (each carries
a path unique to its lab and node), never by a remembered PID that may have been reused.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

import psutil

from gpucluster.lab.host import LabError

# A zombie has ended (it waits for its parent to reap it); a dead one is on its way out.
_ENDED = (psutil.STATUS_ZOMBIE, psutil.STATUS_DEAD)


def alive(pid: int) -> bool:
    if pid <= 0:  # psutil would answer for the kernel's PID 0; no process of ours has it
        return False
    try:
        return psutil.Process(pid).status() not in _ENDED
    except psutil.NoSuchProcess:  # ZombieProcess included
        return False
    except psutil.AccessDenied:  # there, but not ours to inspect
        return True


def find(executable: str, marker: str) -> list[int]:
    """Live processes whose program is ``executable`` and whose arguments mention ``marker``."""
    pids = []
    for proc in psutil.process_iter(["cmdline", "status"]):
        argv = proc.info["cmdline"] or []  # None where denied, [] for kernel threads and zombies
        if argv and os.path.basename(argv[0]) == executable and any(marker in a for a in argv[1:]):
            if proc.info["status"] not in _ENDED:
                pids.append(proc.pid)
    return sorted(pids)


def spawn(cmd: Sequence[str], log: Path, env: Mapping[str, str] | None = None,
          user: tuple[int, int] | None = None) -> int:
    """Start ``cmd`` detached (own session: Ctrl-C on the terminal does not reach it), with
    ``env`` added to this process's environment; as ``user`` (uid, gid; no supplementary groups)
    where given."""
    log.parent.mkdir(parents=True, exist_ok=True)
    uid, gid = user if user is not None else (None, None)
    with open(log, "ab") as out:
        try:
            proc = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                                    start_new_session=True, close_fds=True,
                                    env={**os.environ, **env} if env else None,
                                    user=uid, group=gid, extra_groups=None if user is None else [])
        except OSError as exc:
            raise LabError(f"cannot start {cmd[0]}: {exc}") from None
    # Reap it when it exits while we still run, so a dead node is not left a zombie, and say in
    # its log how it ended: a process that dies before printing anything still leaves a reason.
    reaper = threading.Thread(target=_reap, args=(proc, os.path.basename(cmd[0]), log), daemon=True)
    _reapers[proc.pid] = reaper
    reaper.start()
    return proc.pid


_reapers: dict[int, threading.Thread] = {}


def wait_reaped(pid: int, timeout: float) -> None:
    """Wait until a process ``spawn`` started has been reaped and its end written to its log."""
    reaper = _reapers.get(pid)
    if reaper is not None:
        reaper.join(timeout)


def _reap(proc: subprocess.Popen[bytes], program: str, log: Path) -> None:
    code = proc.wait()
    how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
    try:
        with open(log, "a") as out:
            out.write(f"--- gpucluster lab: {program} (pid {proc.pid}) ended, {how} ---\n")
    except OSError:
        pass
    # Reaped and logged: nothing is left to wait for (and its PID may be reused).
    _reapers.pop(proc.pid, None)


def stop(pids: Sequence[int], *, grace_s: float, sig: int = signal.SIGTERM) -> None:
    """Signal, wait up to ``grace_s`` for them to go, then SIGKILL the rest."""
    for pid in pids:
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    for pid in pids:
        if alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    left = [p for p in pids if alive(p)]
    if left:
        raise LabError(f"processes {left} did not exit after SIGKILL")
