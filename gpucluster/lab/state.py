"""The lab's state file and locks.

``<state_root>/<lab>/state.json`` holds the plan the lab was brought up with. It is
written before anything is created, so a crash or Ctrl-C at any later point leaves a
record from which ``down`` finds everything (every host object is named by the plan).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpucluster.lab.host import LabError
from gpucluster.lab.plan import LabPlan

STATE_VERSION = 1


def atomic_write(path: Path, text: str, mode: int = 0o644) -> bool:
    """Write ``text`` unless the file already holds it; return whether it changed."""
    try:
        if path.read_text(encoding="utf-8") == text:
            return False
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)
    os.replace(tmp, path)
    return True


def state_file(lab_dir: Path) -> Path:
    return lab_dir / "state.json"


def write_state(plan: LabPlan) -> None:
    doc = {"version": STATE_VERSION, "plan": plan.to_dict()}
    atomic_write(state_file(plan.lab_dir), json.dumps(doc, indent=2, sort_keys=True) + "\n", 0o600)


def read_state(lab_dir: Path) -> LabPlan | None:
    path = state_file(lab_dir)
    try:
        doc: Any = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise LabError(f"{path}: unreadable lab state ({exc}); remove the lab's objects by hand") from None
    if not isinstance(doc, dict) or doc.get("version") != STATE_VERSION or not isinstance(doc.get("plan"), dict):
        raise LabError(f"{path}: not a lab state file of version {STATE_VERSION}")
    try:
        return LabPlan.from_dict(doc["plan"])
    except (TypeError, KeyError) as exc:
        raise LabError(f"{path}: malformed lab state ({exc})") from None


def other_labs(state_root: Path, name: str) -> list[LabPlan]:
    labs: list[LabPlan] = []
    if not state_root.is_dir():
        return labs
    for child in sorted(state_root.iterdir()):
        if child.name in ("cache", name) or not child.is_dir():
            continue
        plan = read_state(child)
        if plan is not None:
            labs.append(plan)
    return labs


@contextlib.contextmanager
def locked(path: Path, what: str, *, wait: bool = False) -> Iterator[None]:
    """An exclusive flock; without ``wait``, a held lock is an immediate one-line error."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
        except BlockingIOError:
            raise LabError(f"{what} is busy: another gpucluster lab command holds {path}") from None
        yield
    finally:
        os.close(fd)
