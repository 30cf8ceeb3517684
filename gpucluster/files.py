"""Writing a file whole: the one writer the lab's state, the run folder, the fabric cache and the
bare-metal seeds share.

A temporary file is made in the target's own folder (O_EXCL, a name no one else holds), written,
given ``mode`` exactly (whatever the umask: a seed is served by a web server, a run file is the
operator's alone), then renamed over the target: a reader finds the old file or the whole new one,
never half of it, even when the disk fills mid-write; on any failure the temporary file is removed.
The target itself is never followed: a link planted at its path is replaced, not written through.
"""

from __future__ import annotations

import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path


def holds(path: Path, text: str, mode: int | None = None) -> bool:
    """Whether ``path`` is a regular file (not a link) of ours whose text is ``text`` (and whose
    permission bits are ``mode``, when given)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        return False
    if mode is not None and stat.S_IMODE(st.st_mode) != mode:
        return False
    try:
        return path.read_text(encoding="utf-8") == text
    except (UnicodeDecodeError, OSError):
        return False


def _open_new(path: Path) -> int:
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)


def write_whole(path: Path, text: str, *, mode: int, skip_unchanged: bool = False,
                opener: Callable[[Path], int] = _open_new) -> bool:
    """Write ``text`` to ``path`` whole, with ``mode``; return whether the file changed. With
    ``skip_unchanged``, a regular file that already holds ``text`` is left as it is. ``opener``
    opens the temporary file (the run folder's opens every file of a run in one place)."""
    if skip_unchanged and holds(path, text, mode):
        return False
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        with os.fdopen(opener(tmp), "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
            os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    return True
