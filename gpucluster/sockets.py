"""Where a run keeps its SSH control sockets, so that no other local user can sit in the middle.

An OpenSSH client with ``ControlMaster auto`` talks to whatever listens at its ``ControlPath``:
it does not ask who owns the socket. A folder at a name another user can guess (a fixed name in
``/tmp``, or one derived from a path ``ps`` shows) lets that user make the folder first and bind a
fake master there, which then sees every command, every key sent to a node and every secret a
converge task carries, and answers with whatever output it likes.

So a run's sockets live in a folder the run makes itself and checks before any client uses it:
a real folder, not a link, owned by this user, mode 0700, in a path no other user can rename
(every ancestor owned by root or this user and not writable by others unless sticky, as
OpenSSH's own StrictModes wants of ``~/.ssh``). In order of preference:

1. the run's own folder (``<run folder>/ssh/cm``), where the socket's path fits a Unix socket;
2. ``$XDG_RUNTIME_DIR/gpucluster/<digest>`` (the per-user folder systemd-logind makes, 0700);
3. ``<tmp>/gpucluster-<uid>/<digest>``.

The digest names the run folder, so every process of one run (pytest's workers, the publisher,
the cleanup) finds the same folder; anything found there that fails the checks is refused with
an InputError naming the folder, never used. :func:`release` stops the masters and removes the
folder at the end of the run.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

from gpucluster.errors import InputError

# sun_path holds 108 bytes with its NUL. The longest socket name a run uses: verify's
# ``<index>-<8 hex>`` per node (:func:`socket_name`; Ansible's own are 10 hex), and OpenSSH first
# binds ``<path>.<16 random chars>`` and then renames it.
UNIX_PATH_MAX = 107
LONGEST_NAME = len("/ffff-") + 8 + 17


def socket_name(index: int, node: str) -> str:
    """A node's control socket's name in the folder: short, so that a run folder's own ``ssh/cm``
    fits a socket path more often than ssh's 40-hex ``%C`` would; the index keeps it unique in
    the run, the digest of the name keeps two runs' different node lists from sharing one."""
    return f"{index:x}-{hashlib.sha1(node.encode()).hexdigest()[:8]}"


def _problem(path: Path, st: os.stat_result, euid: int, leaf: bool) -> str | None:
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link"
    if not stat.S_ISDIR(st.st_mode):
        return "is not a folder"
    if leaf:
        if st.st_uid != euid:
            return f"is owned by uid {st.st_uid}, not by this user (uid {euid})"
        if st.st_mode & 0o077:
            return f"has mode {stat.S_IMODE(st.st_mode):04o}, not 0700"
        return None
    if st.st_uid not in (0, euid):
        return f"(a folder above it) is owned by uid {st.st_uid}, who could replace what lies in it"
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        return (f"(a folder above it) has mode {stat.S_IMODE(st.st_mode):04o}: others may write to it "
                "and it is not sticky")
    return None


def check_private(path: Path) -> Path:
    """``path`` when it is this user's own 0700 folder, reached through folders no other user can
    change; otherwise an InputError naming the folder and what is wrong with it."""
    euid = os.geteuid()
    path = Path(os.path.abspath(path))
    chain = [path, *path.parents]
    for i, p in enumerate(chain):
        try:
            st = os.lstat(p) if i == 0 else os.stat(p)
        except OSError as exc:
            raise InputError(f"{p}: cannot check it for SSH control sockets: {exc.strerror}") from None
        why = _problem(p, st, euid, leaf=i == 0)
        if why is not None:
            shown = p if i == 0 else f"{path}: {p}"
            raise InputError(f"{shown} {why}; refusing it as the folder for SSH control sockets (another local "
                             "user may have made it first): remove it, or run with another $XDG_RUNTIME_DIR "
                             "or $TMPDIR")
    return path


def make_private(path: Path) -> Path:
    """Make ``path`` (0700; its parent must exist) unless it is there already, then check it."""
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError as exc:
        raise InputError(f"{path}: cannot make the folder for SSH control sockets: {exc.strerror}") from None
    return check_private(path)


def _fits(folder: Path) -> bool:
    return len(os.fsencode(str(folder))) + LONGEST_NAME <= UNIX_PATH_MAX


def locate(run_ssh_dir: Path) -> list[Path]:
    """Where the control sockets of the run whose SSH files are in ``run_ssh_dir`` go: the folder
    last, after the private folders above it that the run makes too. The same for every process
    of the run; nothing is made or checked here."""
    run_ssh_dir = Path(os.path.abspath(run_ssh_dir))
    inside = run_ssh_dir / "cm"
    if _fits(inside):
        return [inside]
    digest = hashlib.sha256(str(run_ssh_dir).encode()).hexdigest()[:16]
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    if runtime and os.path.isabs(runtime) and _fits(Path(runtime) / "gpucluster" / digest):
        return [Path(runtime) / "gpucluster", Path(runtime) / "gpucluster" / digest]
    parent = Path(tempfile.gettempdir()) / f"gpucluster-{os.geteuid()}"
    return [parent, parent / digest]


def control_dir(run_ssh_dir: Path) -> Path:
    """The checked folder for the run's control sockets (:func:`locate`), made when absent."""
    chain = locate(run_ssh_dir)
    if len(chain) == 1:
        Path(os.path.abspath(run_ssh_dir)).mkdir(parents=True, exist_ok=True, mode=0o700)
    for folder in chain:
        make_private(folder)
    return chain[-1]


def release(folder: Path) -> list[str]:
    """Stop the SSH masters whose sockets are in ``folder`` and remove it (when it is still this
    user's own folder); returns what could not be done, one line each."""
    problems: list[str] = []
    try:
        check_private(folder)
    except InputError as exc:
        return [] if not os.path.lexists(folder) else [str(exc)]
    for entry in sorted(folder.iterdir()):
        if not entry.is_socket():
            continue
        try:
            subprocess.run(["ssh", "-o", f"ControlPath={entry}", "-O", "exit", "gpucluster-control"],
                           capture_output=True, timeout=10, check=False, stdin=subprocess.DEVNULL)
        except (OSError, subprocess.TimeoutExpired) as exc:
            problems.append(f"{entry}: its SSH master did not stop: {exc}")
    try:
        shutil.rmtree(folder)
    except OSError as exc:
        problems.append(f"{folder}: not removed: {exc.strerror}")
    return problems


__all__ = ["check_private", "control_dir", "locate", "make_private", "release", "socket_name"]
