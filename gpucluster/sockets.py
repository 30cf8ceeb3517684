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

1. the run's own folder (``<run folder>/ssh/cm``), where the socket's path fits a Unix socket and
   is plain (no space or ``%``, which ssh_config would split or expand) and the folders above it
   are safe;
2. a folder of unpredictable name (``mkdtemp``) in ``$XDG_RUNTIME_DIR`` (the per-user folder
   systemd-logind makes, 0700), else in ``$TMPDIR``/``/tmp``; its path is recorded in the run
   folder (``ssh/control-dir``), so every process of the run (pytest's workers, the publisher,
   the cleanup) finds the same folder.

Whatever is found already in place (the run folder's ``ssh/cm``, or the recorded folder) and
fails the checks is refused with an InputError naming it, never used. :func:`release` stops the
masters and removes the folder at the end of the run.
"""

from __future__ import annotations

import hashlib
import os
import re
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


def check_private(path: Path, leaf_checked: bool = True) -> Path:
    """``path`` when it is this user's own 0700 folder, reached through folders no other user can
    change; otherwise an InputError naming the folder and what is wrong with it.
    ``leaf_checked`` False: the folders above it only (``path`` itself need not exist)."""
    euid = os.geteuid()
    path = Path(os.path.abspath(path))
    chain = [path, *path.parents]
    for i, p in enumerate(chain):
        if i == 0 and not leaf_checked:
            continue
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
    text = str(folder)
    return (len(os.fsencode(text)) + LONGEST_NAME <= UNIX_PATH_MAX
            and re.fullmatch(r"[A-Za-z0-9_./+-]+", text) is not None)


def _safe_above(folder: Path) -> bool:
    try:
        check_private(folder, leaf_checked=False)
    except InputError:
        return False
    return True


RECORD = "control-dir"


def in_use(run_ssh_dir: Path) -> Path | None:
    """The control folder the run whose SSH files are in ``run_ssh_dir`` made, if it made one
    (nothing is made or checked here)."""
    run_ssh_dir = Path(os.path.abspath(run_ssh_dir))
    if os.path.lexists(run_ssh_dir / "cm"):
        return run_ssh_dir / "cm"
    try:
        return Path((run_ssh_dir / RECORD).read_text(encoding="utf-8").strip())
    except OSError:
        return None


def control_dir(run_ssh_dir: Path) -> Path:
    """The checked folder for the control sockets of the run whose SSH files are in
    ``run_ssh_dir``: the one the run made (checked again), else a new one (module docstring)."""
    run_ssh_dir = Path(os.path.abspath(run_ssh_dir))
    found = in_use(run_ssh_dir)
    if found is not None and not os.path.lexists(found):
        # Recorded by an earlier run in this folder, and gone since: never made again at a
        # name that is known, a new one is.
        (run_ssh_dir / RECORD).unlink(missing_ok=True)
        found = None
    if found is not None:
        return check_private(found)
    run_ssh_dir.mkdir(parents=True, exist_ok=True, mode=0o700)
    inside = run_ssh_dir / "cm"
    if _fits(inside) and _safe_above(inside):
        return make_private(inside)
    runtime = os.environ.get("XDG_RUNTIME_DIR", "")
    bases = [Path(runtime)] if runtime and os.path.isabs(runtime) else []
    for base in [*bases, Path(tempfile.gettempdir())]:
        if not base.is_dir() or not _safe_above(base / "x"):
            continue
        folder = Path(tempfile.mkdtemp(prefix="gpucluster-ssh-", dir=base))
        if not _fits(folder):
            folder.rmdir()
            continue
        check_private(folder)
        try:
            fd = os.open(run_ssh_dir / RECORD, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        except FileExistsError:  # another process of the run made and recorded one first
            folder.rmdir()
            return control_dir(run_ssh_dir)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(f"{folder}\n")
        return folder
    raise InputError(f"{run_ssh_dir}: no folder for SSH control sockets: the run folder's path is too long for a "
                     "socket or not safe, and so are $XDG_RUNTIME_DIR and $TMPDIR; set TMPDIR to a short private "
                     "folder")


def release(run_ssh_dir: Path) -> list[str]:
    """Stop the SSH masters of the run whose SSH files are in ``run_ssh_dir`` and remove their
    folder (when it is still this user's own) and its record; returns what could not be done,
    one line each."""
    folder = in_use(run_ssh_dir)
    if folder is None or not os.path.lexists(folder):
        Path(run_ssh_dir, RECORD).unlink(missing_ok=True)
        return []
    try:
        check_private(folder)
    except InputError as exc:
        return [str(exc)]
    problems: list[str] = []
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
        Path(run_ssh_dir, RECORD).unlink(missing_ok=True)
    except OSError as exc:
        problems.append(f"{folder}: not removed: {exc.strerror}")
    return problems


__all__ = ["check_private", "control_dir", "in_use", "make_private", "release", "socket_name"]
