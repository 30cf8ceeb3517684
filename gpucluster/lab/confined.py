"""Files inside a lab node's root, read and written by the host (as root), never outside it.

Root inside a node, or any process there, can turn a path of its root into a link: ``etc`` ->
``/etc``, ``root/.ssh`` -> ``/root/.ssh``. Opened by the host as the host sees it, such a path
leads to the host's own files, so `lab up` would rewrite them. Here every path is walked one
component at a time from a descriptor of the node's root (``openat`` with ``O_NOFOLLOW``): a link
met on the way is resolved as the node itself would resolve it (an absolute target from the node's
root, ``..`` never above it), so whatever the node plants, what is read and written lies inside
its root. The last component is never followed: a file is written beside it and renamed over it,
so a link there is replaced, not written through, and a FIFO or a device there is never opened.
"""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from collections.abc import Iterator
from pathlib import Path

from gpucluster.lab.host import LabError

# As the kernel's own limit on links followed in one lookup (MAXSYMLINKS).
MAX_LINKS = 40
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class NotConfined(LabError):
    """A path of a node's root that cannot be used as a folder or a file (too many links, a
    file where a folder should be)."""


def _parts(path: str) -> list[str]:
    return [p for p in path.split("/") if p not in ("", ".")]


def open_dir(root: Path, rel: str, *, create: bool = False, mode: int = 0o755) -> int:
    """A descriptor of the folder ``rel`` inside ``root``, links resolved within ``root``;
    missing folders are made (``mode``) when ``create``. FileNotFoundError when one is missing."""
    stack = [os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)]
    todo = _parts(rel)
    links = 0
    try:
        while todo:
            name = todo.pop(0)
            if name == "..":
                if len(stack) > 1:
                    os.close(stack.pop())
                continue
            try:
                stack.append(os.open(name, _DIR_FLAGS, dir_fd=stack[-1]))
                continue
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, mode, dir_fd=stack[-1])
                except FileExistsError:
                    pass  # a link (followed on the next turn), or made meanwhile
                todo.insert(0, name)
                continue
            except OSError as exc:
                if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
                    raise
            try:
                target = os.readlink(name, dir_fd=stack[-1])
            except OSError:
                raise NotConfined(f"{root}: {rel}: {name} is not a folder") from None
            links += 1
            if links > MAX_LINKS:
                raise NotConfined(f"{root}: {rel}: more than {MAX_LINKS} links")
            if target.startswith("/"):
                while len(stack) > 1:
                    os.close(stack.pop())
            todo = _parts(target) + todo
        return stack.pop()
    finally:
        for fd in stack:
            os.close(fd)


def _split(rel: str) -> tuple[str, str]:
    parts = _parts(rel)
    if not parts or parts[-1] == "..":
        raise NotConfined(f"{rel}: not a file's path")
    return "/".join(parts[:-1]), parts[-1]


@contextlib.contextmanager
def _in_folder(root: Path, rel: str) -> Iterator[tuple[int, str] | None]:
    """(descriptor of ``rel``'s folder inside ``root``, ``rel``'s own name), or None when the folder
    is missing; the descriptor is closed after."""
    folder, name = _split(rel)
    try:
        dir_fd = open_dir(root, folder)
    except FileNotFoundError:
        yield None
        return
    try:
        yield dir_fd, name
    finally:
        os.close(dir_fd)


def read(root: Path, rel: str) -> tuple[bytes, int] | None:
    """(content, permission bits) of the regular file ``rel`` inside ``root``; None when there
    is none: missing, or a link, a folder, a FIFO or a device in its place."""
    with _in_folder(root, rel) as found:
        if found is None:
            return None
        dir_fd, name = found
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.ELOOP, errno.EISDIR, errno.ENXIO):
                return None
            raise
        with os.fdopen(fd, "rb") as fh:
            st = os.fstat(fh.fileno())
            if not stat.S_ISREG(st.st_mode):
                return None
            return fh.read(), stat.S_IMODE(st.st_mode)


def read_text(root: Path, rel: str) -> str | None:
    found = read(root, rel)
    if found is None:
        return None
    try:
        return found[0].decode("utf-8")
    except UnicodeDecodeError:
        return None


def exists(root: Path, rel: str) -> bool:
    return read(root, rel) is not None


def write(root: Path, rel: str, data: bytes, mode: int = 0o644) -> bool:
    """Make ``rel`` inside ``root`` a regular file holding ``data`` with ``mode``; False when it
    already is one. Written beside it and renamed over it, whatever is there (a link is replaced)."""
    if read(root, rel) == (data, mode):
        return False
    folder, name = _split(rel)
    dir_fd = open_dir(root, folder, create=True)
    tmp = f".gpucluster-{secrets.token_hex(6)}"
    try:
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
        try:
            with os.fdopen(fd, "wb") as fh:
                fh.write(data)
                os.fchmod(fh.fileno(), mode)
            os.rename(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(tmp, dir_fd=dir_fd)
            except OSError:
                pass
            raise
    except IsADirectoryError:
        raise NotConfined(f"{root}: {rel} is a folder") from None
    finally:
        os.close(dir_fd)
    return True


def remove(root: Path, rel: str) -> bool:
    """Remove the file (or link) ``rel`` inside ``root``; False when there was none."""
    with _in_folder(root, rel) as found:
        if found is None:
            return False
        try:
            os.unlink(found[1], dir_fd=found[0])
        except FileNotFoundError:
            return False
    return True


def make_dir(root: Path, rel: str, mode: int) -> None:
    """The folder ``rel`` inside ``root``; what is missing of it is made ``mode``."""
    os.close(open_dir(root, rel, create=True, mode=mode))
