"""Action `gpucluster.cluster.files`: the files module, with a fast path for a role already converged.

Takes exactly the module's arguments (plugins/modules/files.py). Before the module runs (a Python
start on the node and Ansible's module code: about 0.15 CPU-s on the node and as much again on the
controller, per host and task), one shell command over the existing connection reads what the node
has: each folder's and file's type, mode, owner and group (``stat``) and each file's SHA-256
(``sha256sum``), and the names of each ``exclusive`` folder. The contents were rendered on the
controller, so their SHA-256 is known here. When every entry is already as asked, the task is ok
and unchanged, with the module's own return keys (``changed_paths`` empty, ``skipped_paths`` as the
module would give them); in every other case, including any doubt (a link, a symbolic mode, an
output this reader does not recognise), the module runs with the same arguments and its result is
the task's. Check mode behaves the same way. GPUCLUSTER_FILES_FAST_PATH=0 turns the fast path off
(the benchmark measures what it buys).

The node needs only a POSIX shell, GNU ``stat`` and ``sha256sum`` (coreutils) for the fast path;
without them the output is not recognised and the module runs.

Measured in `make bench` (bench/bench_converge.py): see docs/roles.md, "Converge speed".
"""

from __future__ import annotations

import fnmatch
import hashlib
import os
import posixpath
import re
import shlex
from typing import Any

from ansible.module_utils.common.text.converters import to_bytes
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase

MODULE = "gpucluster.cluster.files"
FAST_PATH_VAR = "GPUCLUSTER_FILES_FAST_PATH"
_ATTRS = ("owner", "group", "mode")
_DIR_KEYS = frozenset({"path", "enabled", *_ATTRS})
_FILE_KEYS = frozenset({"dest", "content", "state", "validate", "skip_without_parent", "enabled", *_ATTRS})
_EXCLUSIVE_KEYS = frozenset({"path", "pattern"})
_OCTAL = re.compile(r"0?[0-7]{3,4}")

# One line per entry, in order: "<n> <kind> ...". stat's fields: mode in octal, uid, user, gid, group.
# A name stat cannot resolve prints as UNKNOWN, which matches no wanted name, so the module decides.
PROBE = r"""q() {
  if [ -L "$2" ]; then echo "$1 link"
  elif [ -d "$2" ]; then echo "$1 dir $(stat -c '%a %u %U %g %G' -- "$2")"
  elif [ -f "$2" ]; then echo "$1 file $(stat -c '%a %u %U %g %G' -- "$2") $(sha256sum -- "$2" | cut -d' ' -f1)"
  elif [ -e "$2" ]; then echo "$1 other"
  else echo "$1 absent"; fi
}
d() { if [ -d "$2" ]; then echo "$1 dir"; else echo "$1 none"; fi; }
l() { echo "$1 list"; if [ -d "$2" ]; then ls -A1 -- "$2" | sed "s/^/$1 name /"; fi; }
"""


def _entries(args: dict[str, Any], key: str, path_key: str, allowed: frozenset[str]) -> list[dict[str, Any]] | None:
    """The enabled entries of a list argument, paths normalised as the module does; None: not for the fast path."""
    items = args.get(key) or []
    if not isinstance(items, list):
        return None
    out = []
    for item in items:
        if not isinstance(item, dict) or not set(item) <= allowed or not isinstance(item.get(path_key), str):
            return None
        if boolean(item.get("enabled", True), strict=False):
            out.append(dict(item, **{path_key: posixpath.normpath(item[path_key])}))
    return out


def wanted_mode(mode: Any) -> int | bool | None:
    """The mode as a number, None when the entry leaves it alone, False when only the module can read it."""
    if mode is None:
        return None
    if isinstance(mode, int) and not isinstance(mode, bool):
        return mode & 0o7777
    if isinstance(mode, str) and _OCTAL.fullmatch(mode):
        return int(mode, 8)
    return False  # symbolic ("u=rw,g=r"), "preserve" and the like


def attrs_match(item: dict[str, Any], fields: list[str]) -> bool:
    """fields: mode (octal), uid, user, gid, group, as stat printed them."""
    if len(fields) < 5:
        return False
    mode, uid, user, gid, group = fields[:5]
    want = wanted_mode(item.get("mode"))
    if want is False or (want is not None and int(mode, 8) != want):
        return False
    for wanted, number, name in ((item.get("owner"), uid, user), (item.get("group"), gid, group)):
        if wanted is not None and str(wanted) not in (name, number):
            return False
    return True


def plan(args: dict[str, Any]) -> tuple[str, list[Any]] | None:
    """The probe's command and, per line number, what it checks; None when only the module can decide."""
    if not set(args) <= {"directories", "files", "exclusive"}:
        return None
    dirs = _entries(args, "directories", "path", _DIR_KEYS)
    files = _entries(args, "files", "dest", _FILE_KEYS)
    exclusive = _entries(args, "exclusive", "path", _EXCLUSIVE_KEYS)
    if dirs is None or files is None or exclusive is None:
        return None
    calls: list[str] = []
    checks: list[Any] = []

    def probe(fn: str, path: str, check: Any) -> None:
        calls.append(f"{fn} {len(checks)} {shlex.quote(path)}")
        checks.append(check)

    for item in dirs:
        if wanted_mode(item.get("mode")) is False:
            return None
        probe("q", item["path"], ("dir", item))
    for item in files:
        state = item.get("state", "present")
        if state == "absent":
            probe("q", item["dest"], ("absent", item))
            continue
        if state != "present" or not isinstance(item.get("content"), str) or wanted_mode(item.get("mode")) is False:
            return None
        if boolean(item.get("skip_without_parent", False), strict=False):
            probe("d", posixpath.dirname(item["dest"]), ("parent", item))
        digest = hashlib.sha256(to_bytes(item["content"], errors="surrogate_or_strict")).hexdigest()
        probe("q", item["dest"], ("file", item, digest))
    wanted = {f["dest"] for f in files if f.get("state", "present") == "present"}
    for item in exclusive:
        probe("l", item["path"], ("exclusive", item, wanted))
    return PROBE + "\n".join(calls) + "\n", checks


def converged(checks: list[Any], stdout: str) -> list[str] | None:
    """The files the module would leave alone for want of their folder when everything is as asked, else None."""
    lines: dict[int, list[list[str]]] = {}
    for line in stdout.splitlines():
        fields = line.split(" ")
        if not fields[0].isdigit() or len(fields) < 2:
            return None
        lines.setdefault(int(fields[0]), []).append(fields[1:])
    skipped: list[str] = []
    no_parent: set[str] = set()
    for n, check in enumerate(checks):
        got = lines.get(n)
        if not got:
            return None
        head = got[0]
        kind = check[0]
        if kind == "parent":
            if head == ["none"]:
                no_parent.add(check[1]["dest"])
            elif head != ["dir"]:
                return None
        elif kind == "dir":
            if head[0] != "dir" or not attrs_match(check[1], head[1:]):
                return None
        elif kind == "absent":
            if head != ["absent"]:
                return None
        elif kind == "file":
            dest = check[1]["dest"]
            if dest in no_parent:
                skipped.append(dest)
                continue
            if head[0] != "file" or len(head) != 7 or head[6] != check[2] or not attrs_match(check[1], head[1:6]):
                return None
        elif kind == "exclusive":
            folder, pattern = check[1]["path"], check[1]["pattern"]
            for entry in got[1:]:
                if entry[0] != "name":
                    return None
                name = " ".join(entry[1:])
                if fnmatch.fnmatchcase(name, pattern) and posixpath.join(folder, name) not in check[2]:
                    return None
    return skipped


class ActionModule(ActionBase):  # type: ignore[misc]
    """See the module docstring."""

    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        args = dict(self._task.args)
        probe = plan(args) if os.environ.get(FAST_PATH_VAR, "1") != "0" else None
        if probe is not None:
            command, checks = probe
            answer = self._low_level_execute_command(command, sudoable=True)
            skipped = converged(checks, answer.get("stdout", "")) if answer.get("rc") == 0 else None
            if skipped is not None:
                result.update(changed=False, changed_paths=[], skipped_paths=skipped, gpucluster_fast_path=True,
                              msg=f"{len(checks)} entries already as asked")
                return result
        result.update(self._execute_module(module_name=MODULE, module_args=args, task_vars=task_vars))
        return result
