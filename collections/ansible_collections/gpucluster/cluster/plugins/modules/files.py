#!/usr/bin/python
"""gpucluster.cluster.files: a role's folders and configuration files, in one module run."""

from __future__ import annotations

DOCUMENTATION = r"""
module: files
short_description: Converge a role's folders and configuration files in one module run
description:
  - Each module run on a node costs a Python start and a compile of Ansible's module code
    (about 0.15 s of CPU); M(ansible.builtin.template) costs two when nothing changed (a checksum,
    then the attributes). This module takes every folder and file of a role at once, with the
    contents rendered on the controller (the template lookup), and changes only what differs.
  - Files are written to a temporary file beside the destination, validated when asked, and moved
    into place atomically. Folders are made before files.
  - Supports check mode and diff mode.
options:
  directories:
    description: Folders to make, in order, with their owner, group and mode.
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        type: path
        required: true
        description: The folder.
      owner:
        type: str
        description: Owner.
      group:
        type: str
        description: Group.
      mode:
        type: raw
        description: Mode, as for M(ansible.builtin.file).
      enabled:
        type: bool
        default: true
        description: When false the entry is left out (a section of the role that is off, or not selected by tags).
  files:
    description: Files to write or remove, in order.
    type: list
    elements: dict
    default: []
    suboptions:
      dest:
        type: path
        required: true
        description: The file.
      content:
        type: str
        description: The whole content (required when O(files[].state=present)).
      state:
        type: str
        choices: [present, absent]
        default: present
        description: Write or remove the file.
      owner:
        type: str
        description: Owner.
      group:
        type: str
        description: Group.
      mode:
        type: raw
        description: Mode, as for M(ansible.builtin.file).
      validate:
        type: str
        description:
          - A command run on the temporary file before it replaces O(files[].dest), without a shell;
            the word C(%s) is the temporary file's path. Not run when the content is unchanged.
      enabled:
        type: bool
        default: true
        description: When false the entry is left out (a section of the role that is off, or not selected by tags).
      skip_without_parent:
        type: bool
        default: false
        description:
          - Leave the file alone when its folder does not exist (a tool's drop-in folder on hosts without it).
  exclusive:
    description:
      - Name patterns the role owns in a folder; files of the folder that match and are not among
        O(files) with O(files[].state=present) are removed (a rail's network file after the rail is gone).
    type: list
    elements: dict
    default: []
    suboptions:
      path:
        type: path
        required: true
        description: The folder.
      pattern:
        type: str
        required: true
        description: A shell pattern of file names (fnmatch).
notes:
  - The contents are module arguments: they reach the node's journal and the registered result.
    The module is not for secrets (keyrings, tokens): write those with a no_log task.
author: gpucluster
"""

RETURN = r"""
changed_paths:
  description: Every folder and file this run made, changed (content or attributes) or removed, in order.
  returned: always
  type: list
  elements: str
skipped_paths:
  description: Files left alone because their folder does not exist (O(files[].skip_without_parent)).
  returned: always
  type: list
  elements: str
"""

import fnmatch
import os
import shlex
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.common.text.converters import to_bytes, to_native


class Run:
    """One module run: what it changed so far, so that a failure still reports it."""

    def __init__(self, module):
        self.module = module
        self.changed_paths = []
        self.skipped_paths = []
        self.diffs = []
        self.planned = set()  # check mode: folders this run would make

    def fail(self, msg):
        self.module.fail_json(msg=msg, changed=bool(self.changed_paths), changed_paths=self.changed_paths,
                              skipped_paths=self.skipped_paths)

    def note(self, path, before, after):
        self.diffs.append({"before_header": path, "after_header": path, "before": before, "after": after})

    def attributes(self, path, item, changed):
        args = self.module.load_file_common_arguments({k: item.get(k) for k in ("owner", "group", "mode")}, path=path)
        return self.module.set_fs_attributes_if_different(args, changed)


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _validate(run, command, tmp, dest):
    words = shlex.split(command)
    if not any("%s" in w for w in words):
        run.fail(f"{dest}: validate must name the file as %s: {command!r}")
    rc, out, err = run.module.run_command([w.replace("%s", tmp) for w in words])
    if rc != 0:
        run.fail(f"{dest}: the new content fails `{command}` (exit {rc}): {(err or out).strip()[-2000:]}")


def _write(run, item, data):
    dest = item["dest"]
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(dest), prefix=".gpucluster-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if item.get("validate"):
            _validate(run, item["validate"], tmp, dest)
        run.module.atomic_move(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def converge_directory(run, item):
    path = item["path"]
    changed = False
    if not os.path.isdir(path):
        if os.path.lexists(path):
            run.fail(f"{path}: exists and is not a folder")
        run.note(path, "absent\n", "directory\n")
        if run.module.check_mode:
            run.planned.add(path)
            return True
        os.makedirs(path)
        changed = True
    return run.attributes(path, item, changed)


def converge_file(run, item):
    """True when the file changed, False when not, None when skipped (no folder)."""
    dest = item["dest"]
    if os.path.isdir(dest):
        run.fail(f"{dest}: is a folder, not a file")
    if item["state"] == "absent":
        if not os.path.lexists(dest):
            return False
        run.note(dest, "present\n", "absent\n")
        if not run.module.check_mode:
            os.unlink(dest)
        return True
    if item.get("content") is None:
        run.fail(f"{dest}: content is required when the file is present")
    folder = os.path.dirname(dest)
    if folder in run.planned:
        return True  # check mode: a folder this run would make, so a new file
    if not os.path.isdir(folder):
        if item["skip_without_parent"]:
            return None
        run.fail(f"{dest}: its folder {folder} does not exist")
    data = to_bytes(item["content"], errors="surrogate_or_strict")
    current = _read(dest)
    changed = current != data
    if changed:
        if run.module._diff:
            before = "" if current is None else to_native(current, errors="surrogate_or_replace")
            run.note(dest, before, item["content"])
        if run.module.check_mode:
            return True
        _write(run, item, data)
    return run.attributes(dest, item, changed)


def remove_unlisted(run, item, wanted):
    """Files of the folder matching the pattern that this run does not write: removed, in name order."""
    folder = item["path"]
    if not os.path.isdir(folder):
        return
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if fnmatch.fnmatchcase(name, item["pattern"]) and path not in wanted and os.path.isfile(path):
            run.note(path, "present\n", "absent\n")
            if not run.module.check_mode:
                os.unlink(path)
            run.changed_paths.append(path)


def _entries(module, key, path_key):
    """The enabled entries of a list option, each path normalised (a trailing slash, `//`, `/.`)."""
    out = []
    for item in module.params[key]:
        if item.get("enabled", True):
            out.append(dict(item, **{path_key: os.path.normpath(item[path_key])}))
    return out


def main():
    attrs = {"owner": {"type": "str"}, "group": {"type": "str"}, "mode": {"type": "raw"},
             "enabled": {"type": "bool", "default": True}}
    module = AnsibleModule(
        argument_spec={
            "directories": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "path", "required": True}, **attrs}},
            "files": {"type": "list", "elements": "dict", "default": [], "options": {
                "dest": {"type": "path", "required": True},
                "content": {"type": "str"},
                "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
                "validate": {"type": "str"},
                "skip_without_parent": {"type": "bool", "default": False}, **attrs}},
            "exclusive": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "path", "required": True}, "pattern": {"type": "str", "required": True}}},
        },
        supports_check_mode=True,
    )
    run = Run(module)
    for item in _entries(module, "directories", "path"):
        if converge_directory(run, item):
            run.changed_paths.append(item["path"])
    files = _entries(module, "files", "dest")
    for item in files:
        result = converge_file(run, item)
        if result is None:
            run.skipped_paths.append(item["dest"])
        elif result:
            run.changed_paths.append(item["dest"])
    wanted = {f["dest"] for f in files if f["state"] == "present"}
    for item in _entries(module, "exclusive", "path"):
        remove_unlisted(run, item, wanted)
    out = {"changed": bool(run.changed_paths), "changed_paths": run.changed_paths, "skipped_paths": run.skipped_paths}
    if module._diff and run.diffs:
        out["diff"] = run.diffs
    module.exit_json(**out)


if __name__ == "__main__":
    main()
