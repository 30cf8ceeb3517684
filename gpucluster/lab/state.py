"""The lab's state file and locks.

``<state_root>/<lab>/state.json`` holds the plan the lab was brought up with. It is
written before anything is created, so a crash or Ctrl-C at any later point leaves a
record from which ``down`` finds everything (every host object is named by the plan).

``<state_root>/<lab>/.gpucluster-lab`` marks the folder as the lab's own: ``up`` writes it
when it creates the folder (or finds it empty), and ``down`` removes a folder only when it
carries the marker of the lab being removed. A folder the lab did not make is never touched,
whatever the spec's ``state_dir`` and ``name`` point at.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gpucluster.errors import InputError
from gpucluster.files import write_whole
from gpucluster.lab.host import LabError
from gpucluster.lab.layout import LabLayout
from gpucluster.spec.models import _NAME

STATE_VERSION = 1
MARKER = ".gpucluster-lab"
_MARKER_KIND = "gpucluster-lab"


def atomic_write(path: Path, text: str, mode: int = 0o644) -> bool:
    """Write ``text`` whole unless the file already holds it (gpucluster.files); return whether it changed."""
    path.parent.mkdir(parents=True, exist_ok=True)
    return write_whole(path, text, mode=mode, skip_unchanged=True)


def state_file(lab_dir: Path) -> Path:
    return lab_dir / "state.json"


def write_state(plan: LabLayout) -> None:
    doc = {"version": STATE_VERSION, "plan": plan.to_dict()}
    atomic_write(state_file(plan.lab_dir), json.dumps(doc, indent=2, sort_keys=True) + "\n", 0o600)


def read_state(lab_dir: Path) -> LabLayout | None:
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
        plan = LabLayout.from_dict(doc["plan"])
    except (TypeError, KeyError, ValueError) as exc:
        raise LabError(f"{path}: malformed lab state ({exc})") from None
    problem = _plan_problem(plan, lab_dir)
    if problem:
        # `down` removes what the plan names: a plan that names anything outside this lab is refused.
        raise LabError(f"{path}: {problem}; not a state file this lab wrote, so nothing is removed")
    return plan


def _plan_problem(plan: LabLayout, lab_dir: Path) -> str | None:
    """Why a stored plan is not this lab's own, or None: every name in it must be one the lab makes."""
    if Path(plan.state_root) / plan.name != lab_dir or not re.fullmatch(_NAME, plan.name):
        return f"its plan is for lab {plan.name!r} under {plan.state_root!r}, not {lab_dir}"
    for bridge in plan.bridges:
        if not re.fullmatch(r"gc[0-9a-f]{8}([mfo]|r[0-9]{1,2})", bridge):
            return f"bridge {bridge!r} is not a lab bridge name"
    for n in plan.machines:
        if not re.fullmatch(_NAME, n.name):
            return f"node {n.name!r} is not a node name"
        if n.netns != f"gcl-{plan.name}-{n.name}":
            return f"node {n.name!r} names the namespace {n.netns!r}"
        if not all(re.fullmatch(r"gv[0-9a-f]{8}[mf]", v) for v in (n.veth_management, n.veth_fabric)):
            return f"node {n.name!r} names links {n.veth_management!r}, {n.veth_fabric!r}"
        for rail in n.rails:
            if not re.fullmatch(r"gv[0-9a-f]{8}r[0-9]{1,2}", rail.veth) or rail.bridge not in plan.rail_bridges:
                return f"node {n.name!r} names the rail link {rail.veth!r} on {rail.bridge!r}"
        if n.outside is not None and not re.fullmatch(r"gv[0-9a-f]{8}o", n.outside.veth):
            return f"node {n.name!r} names the outside link {n.outside.veth!r}"
        for f in n.files:
            # Written into the node's overlay: only a plain path under the node's /etc.
            if not re.fullmatch(r"/etc(/[A-Za-z0-9_][A-Za-z0-9_.+-]*)+", f.path) or "/../" in f.path:
                return f"node {n.name!r} names the file {f.path!r}"
    return None


def _trusted_folder(path: Path) -> str | None:
    """Why ``path`` cannot hold a lab (another user could plant or swap what `down` removes), or None."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        return f"{path} is a symbolic link"
    if st.st_uid != os.geteuid():
        return f"{path} belongs to uid {st.st_uid}, not to this user"
    if st.st_mode & 0o022:
        return f"{path} is writable by others (mode {stat.S_IMODE(st.st_mode):o})"
    return None


def _marker_text(name: str) -> str:
    return json.dumps({"kind": _MARKER_KIND, "name": name}, sort_keys=True) + "\n"


def owned(lab_dir: Path, name: str) -> bool:
    """Whether ``lab_dir`` is lab ``name``'s own folder: its marker, or (labs made before the
    marker existed) a state file of that lab."""
    try:
        if json.loads((lab_dir / MARKER).read_text(encoding="utf-8")) == {"kind": _MARKER_KIND, "name": name}:
            return True
    except (OSError, ValueError):
        pass
    try:
        doc = json.loads(state_file(lab_dir).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return False
    plan = doc.get("plan") if isinstance(doc, dict) else None
    return (
        isinstance(plan, dict)
        and doc.get("version") == STATE_VERSION
        and plan.get("name") == name
        and Path(str(plan.get("state_root", ""))) / name == lab_dir
    )


def _refuse(lab_dir: Path, name: str, verb: str, why: str | None = None) -> InputError:
    reason = why or f"it exists but is not lab {name!r}'s folder (no {MARKER} marker)"
    return InputError(
        f"{lab_dir}: {reason}; lab {verb} leaves it untouched: choose another target.state_dir or lab name",
        source="lab",
    )


def claim(lab_dir: Path, name: str) -> None:
    """Make ``lab_dir`` lab ``name``'s folder, or refuse: never adopt a folder the lab did not make.

    The state folder and the lab folder must belong to this user and be writable by nobody else:
    another user could otherwise plant a marker and a plan, or swap the folder for a link.
    """
    lab_dir.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    for folder in (lab_dir.parent, lab_dir):
        why = _trusted_folder(folder)
        if why:
            raise _refuse(lab_dir, name, "up", why)
    if lab_dir.is_dir() and owned(lab_dir, name):
        if not (lab_dir / MARKER).exists():
            atomic_write(lab_dir / MARKER, _marker_text(name), 0o600)
        return
    try:
        lab_dir.mkdir(mode=0o700)
    except FileExistsError:
        raise _refuse(lab_dir, name, "up") from None
    atomic_write(lab_dir / MARKER, _marker_text(name), 0o600)


def check_owned(lab_dir: Path, name: str) -> None:
    """Raise a one-line InputError unless ``lab_dir`` is lab ``name``'s own folder."""
    for folder in (lab_dir.parent, lab_dir):
        why = _trusted_folder(folder)
        if why:
            raise _refuse(lab_dir, name, "down", why)
    if not owned(lab_dir, name):
        raise _refuse(lab_dir, name, "down")


def other_labs(state_root: Path, name: str) -> list[LabLayout]:
    labs: list[LabLayout] = []
    if not state_root.is_dir():
        return labs
    for child in sorted(state_root.iterdir()):
        if child.name in ("cache", name) or not child.is_dir() or not owned(child, child.name):
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
