"""What `gpucluster converge` and `gpucluster verify` share about a run on the controller.

- **Run folders** never collide: ``<UTC time>-<random>-<label>``, made with an exclusive
  ``mkdir`` (two runs in the same second get two folders), mode 0700. A run works under umask
  077 (:func:`private_umask`): everything it and its children write is 0600, logs and fetched
  secrets (a kubeconfig) included.
- **One writer per cluster**: :func:`cluster_lock` takes an exclusive flock keyed by the
  inventory's resolved path and records who holds it; a second run fails at once with one
  line naming the holder.
- **Interruption**: :class:`Interrupts` turns SIGINT and SIGTERM into a flag (and callbacks)
  instead of an exception, so a run can stop what it started, on the hosts too, and still
  write the report of what finished. What a run starts carries a tag in its environment;
  :func:`kill_tagged_local` ends whatever of it left the process group (Mitogen's multiplexer
  starts a session of its own).
- **Full disks**: :class:`RunFile` and :func:`write_private` record the first write error
  (ENOSPC, EDQUOT, EROFS...) as one line instead of raising from deep inside a run.

Per-cluster state (locks, the known_hosts of real targets) lives under
``$GPUCLUSTER_STATE_DIR``, else ``$XDG_STATE_HOME/gpucluster``, else ``~/.local/state/gpucluster``.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import getpass
import hashlib
import json
import os
import secrets
import signal
import socket
import stat
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from types import FrameType
from typing import Any, TextIO

import psutil

from gpucluster.errors import InputError
from gpucluster.files import write_whole

STATE_DIR_ENV = "GPUCLUSTER_STATE_DIR"
# The shell's convention for a run stopped by SIGINT (the CLI returns it on Ctrl-C as well).
EXIT_INTERRUPTED = 130
RUN_DIR_MODE = 0o700
RUN_FILE_MODE = 0o600


def state_root() -> Path:
    explicit = os.environ.get(STATE_DIR_ENV)
    if explicit:
        return Path(explicit)
    xdg = os.environ.get("XDG_STATE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".local" / "state") / "gpucluster"


def cluster_state_dir(cluster_name: str) -> Path:
    """The controller's folder for one cluster (its known_hosts), made 0700."""
    safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in cluster_name) or "cluster"
    path = state_root() / "clusters" / safe
    path.mkdir(parents=True, exist_ok=True, mode=RUN_DIR_MODE)
    return path


# --- runs on the nodes that never got to their own cleanup ---------------------------------

# A record older than this is dropped: its grants expired long ago (sshd refuses them and every
# verify's sweep removes them), and a node that stayed unreachable this long is another matter.
UNFINISHED_MAX_AGE_S = 7 * 86400


def _unfinished_file(inventory: Path) -> Path:
    """Beside the cluster's lock: keyed, like the lock, by the inventory's resolved path."""
    return lock_path(inventory).with_suffix(".unfinished.json")


def unfinished_runs(inventory: Path) -> dict[str, dict[str, Any]]:
    """Run id -> {"started": ISO time, "pid": the suite's process on this machine} of the verify
    runs of this inventory not yet cleaned up on every node they reached: a run killed with
    SIGKILL leaves its id here for the next run to clean up after (its processes on the nodes,
    its keys' grants). Read and written under the cluster's lock."""
    try:
        data = json.loads(_unfinished_file(inventory).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {str(k): dict(v) for k, v in data.items() if isinstance(v, dict)}


def mark_unfinished(inventory: Path, run_ids: list[str] | str, *, pid: int | None = None,
                    done: bool = False) -> None:
    """Record a run as started on the nodes (``pid``: its suite's process, once started), or runs
    (``done``) as cleaned up. A record that cannot be written (a full disk) is skipped: the nodes'
    own sweep of expired grants (gpucluster.conformance.node_keys) still removes what such a run
    leaves."""
    ids = [run_ids] if isinstance(run_ids, str) else run_ids
    runs = unfinished_runs(inventory)
    before = json.dumps(runs, sort_keys=True)
    for run_id in ids:
        if done:
            runs.pop(run_id, None)
        else:
            record = runs.setdefault(run_id, {"started": datetime.now(UTC).isoformat(timespec="seconds")})
            if pid is not None:
                record["pid"] = pid
    if json.dumps(runs, sort_keys=True) == before:
        return
    with contextlib.suppress(OSError):
        path = _unfinished_file(inventory)
        path.parent.mkdir(parents=True, exist_ok=True, mode=RUN_DIR_MODE)
        write_private(path, json.dumps(runs, indent=2) + "\n")


def has_tag(pid: int, tag: str) -> bool:
    """Whether process ``pid`` lives and its initial environment holds ``tag`` (``NAME=VALUE``):
    the same run's process, not another that took its pid since."""
    name, _, value = tag.partition("=")
    try:
        return bool(psutil.Process(pid).environ().get(name) == value)
    except (psutil.Error, OSError):
        return False


# --- run folders -------------------------------------------------------------------------


def utc_stamp() -> str:
    return datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")


def new_run_id() -> str:
    """A run's identity on the nodes (process tags, key names, authorized_keys markers): hex only."""
    return secrets.token_hex(6)


def new_run_dir(runs_dir: Path, label: str) -> Path:
    """``runs_dir/<UTC time>-<random>-<label>``, created by this call and no other (mode 0700).

    InputError (one line) when it cannot be made: a full disk, a read-only file system."""
    stamp = utc_stamp()
    try:
        runs_dir.mkdir(parents=True, exist_ok=True)
        for _ in range(100):
            path = runs_dir / f"{stamp}-{secrets.token_hex(3)}-{label}"
            try:
                os.mkdir(path, RUN_DIR_MODE)
            except FileExistsError:
                continue
            os.chmod(path, RUN_DIR_MODE)
            return path
    except OSError as exc:
        raise InputError(write_error_line(runs_dir, exc)) from None
    raise InputError(f"{runs_dir}: cannot create a new run folder (100 names taken)")


def ensure_private_dir(path: Path) -> Path:
    """A run folder the operator named (``--run-dir``): made 0700 when absent. One that exists
    keeps its mode (it may be a folder of the operator's own); what the run writes into it is
    0600 all the same (:func:`private_umask`)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.mkdir(path, RUN_DIR_MODE)
    except FileExistsError:
        return path
    os.chmod(path, RUN_DIR_MODE)
    return path


@contextlib.contextmanager
def private_umask() -> Iterator[None]:
    """umask 077 for the run: files its children write (ansible-runner's artifacts, a fetched
    admin.conf, the suite's reports) are readable by their owner alone."""
    old = os.umask(0o077)
    try:
        yield
    finally:
        os.umask(old)


def _chmod_nofollow(path: Path, mode: int, kind: int) -> bool:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return False  # missing, or a link
    try:
        if stat.S_IFMT(os.fstat(fd).st_mode) != kind:
            return False
        os.fchmod(fd, mode)
        return True
    finally:
        os.close(fd)


def chmod_file_private(path: Path) -> bool:
    """An existing regular file 0600, never through a link; False when there is none."""
    return _chmod_nofollow(path, RUN_FILE_MODE, stat.S_IFREG)


def chmod_dir_private(path: Path) -> bool:
    """An existing folder 0700, never through a link; False when there is none."""
    return _chmod_nofollow(path, RUN_DIR_MODE, stat.S_IFDIR)


# --- writing under a full disk ------------------------------------------------------------


def describe_os_error(exc: OSError) -> str:
    """``No space left on device (ENOSPC)``: the reason as a person reads it, and its name."""
    name = errno.errorcode.get(exc.errno or 0, "")
    reason = exc.strerror or str(exc)
    return f"{reason} ({name})" if name else reason


def write_error_line(folder: Path, exc: OSError, what: str = "") -> str:
    target = f" {what}" if what else ""
    return f"cannot write the run folder {folder}{target}: {describe_os_error(exc)}"


def open_for_write(path: Path) -> int:
    """The one place a run opens its files for writing (0600, truncated)."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC, RUN_FILE_MODE)


def write_private(path: Path, text: str) -> None:
    """Write ``text`` whole or not at all, 0600 (gpucluster.files): a reader never finds half a
    file, even when the disk fills mid-write."""
    write_whole(path, text, mode=RUN_FILE_MODE, opener=open_for_write)


class RunFile:
    """A log of the run folder that never raises: the first write error is kept as :attr:`error`
    and later writes are dropped, so a full disk costs the log, not the run."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.error: OSError | None = None
        self._fh: TextIO | None = None
        try:
            self._fh = os.fdopen(open_for_write(path), "w", encoding="utf-8")
        except OSError as exc:
            self.error = exc

    def write(self, text: str) -> None:
        if self._fh is None or self.error is not None:
            return
        try:
            self._fh.write(text)
        except OSError as exc:
            self.error = exc

    def flush(self) -> None:
        if self._fh is None or self.error is not None:
            return
        try:
            self._fh.flush()
        except OSError as exc:
            self.error = exc

    def close(self) -> None:
        if self._fh is None:
            return
        fh, self._fh = self._fh, None
        try:
            fh.close()
        except OSError as exc:
            # The buffered tail could not be written; close the descriptor regardless.
            self.error = self.error or exc
            with contextlib.suppress(OSError):
                os.close(fh.fileno())

    def __enter__(self) -> RunFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


# --- one writer per cluster -------------------------------------------------------------


def lock_path(inventory: Path) -> Path:
    """The lock of the cluster an inventory describes, keyed by the inventory's resolved path."""
    resolved = str(inventory.resolve())
    digest = hashlib.sha256(resolved.encode()).hexdigest()[:16]
    return state_root() / "locks" / f"{digest}.lock"


def _holder(path: Path) -> str:
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return "another gpucluster run"
    if not isinstance(info, dict):
        return "another gpucluster run"
    return (f"`{info.get('command', 'gpucluster')}` (pid {info.get('pid', '?')}, user {info.get('user', '?')} "
            f"on {info.get('host', '?')}, since {info.get('since', '?')})")


@contextlib.contextmanager
def cluster_lock(inventory: Path, command: str) -> Iterator[Path]:
    """Hold the cluster's lock for the run, or fail at once (InputError, exit 2) naming the holder.

    A run started by the run that holds the lock (the rolling upgrade's verify gate, which a
    converge of the same inventory runs) works under its parent's lock: the parent names the lock
    and its pid in ``GPUCLUSTER_LOCK_HELD`` (:func:`held_env`), and the pid must be an ancestor of
    this process, so a stray copy of the variable lets nothing else in.
    """
    path = lock_path(inventory)
    if _held_by_ancestor(path):
        yield path
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True, mode=RUN_DIR_MODE)
        fd = os.open(path, os.O_RDWR | os.O_CREAT, RUN_FILE_MODE)
    except OSError as exc:
        raise InputError(f"cannot take the cluster's lock {path}: {describe_os_error(exc)} "
                         f"(set {STATE_DIR_ENV} to a writable folder)", source=str(inventory)) from None
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise InputError(f"cluster busy: {_holder(path)} is running on this inventory; wait for it to finish "
                             f"(lock {path})", source=str(inventory)) from None
        try:
            user = getpass.getuser()
        except (KeyError, OSError):
            user = str(os.getuid())
        info = {"command": command, "pid": os.getpid(), "user": user, "host": socket.gethostname(),
                "since": datetime.now(UTC).isoformat(timespec="seconds"), "inventory": str(inventory.resolve())}
        # Who holds it is a courtesy for the next run's message: a full disk must not stop this one.
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
            os.pwrite(fd, (json.dumps(info) + "\n").encode(), 0)
        yield path
    finally:
        os.close(fd)


LOCK_HELD_ENV = "GPUCLUSTER_LOCK_HELD"


def held_env(lock: Path) -> dict[str, str]:
    """What a run holding ``lock`` passes to the commands it starts (see :func:`cluster_lock`)."""
    return {LOCK_HELD_ENV: f"{os.getpid()}:{lock}"}


def _ancestors() -> Iterator[int]:
    pid = os.getppid()
    for _ in range(64):
        if pid <= 1:
            return
        yield pid
        try:
            pid = psutil.Process(pid).ppid()
        except psutil.Error:  # gone, or not ours to see
            return


def _held_by_ancestor(path: Path) -> bool:
    pid, sep, held = os.environ.get(LOCK_HELD_ENV, "").partition(":")
    if not sep or not pid.isdigit() or Path(held) != path:
        return False
    return int(pid) in set(_ancestors())


# --- interruption ---------------------------------------------------------------------------


class Interrupts:
    """SIGINT/SIGTERM as a flag while a run is under way (main thread only; elsewhere a no-op).

    Each signal sets :attr:`event`, counts in :attr:`count` and calls the callbacks with the
    count, so a caller can escalate (first Ctrl-C: stop politely; later ones: kill).
    """

    SIGNALS = (signal.SIGINT, signal.SIGTERM)

    def __init__(self) -> None:
        self.event = threading.Event()
        self.count = 0
        self.signum: int | None = None
        self._callbacks: list[Callable[[int], None]] = []
        self._old: dict[int, object] = {}

    def on_signal(self, callback: Callable[[int], None]) -> None:
        self._callbacks.append(callback)

    @property
    def interrupted(self) -> bool:
        return self.event.is_set()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        self.signum = signum
        self.event.set()
        for callback in list(self._callbacks):
            try:
                callback(self.count)
            except Exception as exc:  # a handler must not raise into whatever it interrupted
                print(f"warning: while stopping: {exc}", file=sys.stderr)

    def __enter__(self) -> Interrupts:
        if threading.current_thread() is threading.main_thread():
            for sig in self.SIGNALS:
                self._old[sig] = signal.signal(sig, self._handle)
        return self

    def __exit__(self, *exc: object) -> None:
        for sig, old in self._old.items():
            signal.signal(sig, old)  # type: ignore[arg-type]
        self._old.clear()


def tagged_pids(tag: str) -> list[int]:
    """Processes (readable by us) whose initial environment holds ``tag`` (``NAME=VALUE``; a
    bare name matches nothing)."""
    name, sep, value = tag.partition("=")
    if not sep:
        return []
    me = os.getpid()
    found = []
    # environ() is what the process started with (Linux: /proc/PID/environ), which is where the
    # tag was put; a process that unsets it later still carries it there.
    for proc in psutil.process_iter(["environ"]):
        env = proc.info["environ"]  # None where psutil was denied (another user's process)
        if proc.pid != me and env is not None and env.get(name) == value:
            found.append(proc.pid)
    return sorted(found)


def kill_tagged_local(tag: str, grace_s: float = 5.0) -> int:
    """SIGTERM every process carrying ``tag``, SIGKILL what is left after ``grace_s``; returns
    how many there were."""
    pids = tagged_pids(tag)
    first = len(pids)
    deadline = time.monotonic() + grace_s
    sig = signal.SIGTERM
    while pids:
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)
        if sig == signal.SIGKILL and time.monotonic() > deadline + 2:
            break
        time.sleep(0.1)
        if time.monotonic() > deadline:
            sig = signal.SIGKILL
        pids = tagged_pids(tag)
    return first
