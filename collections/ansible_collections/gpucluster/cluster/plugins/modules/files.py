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
        description: A command run on the temporary file before it replaces O(files[].dest); C(%s) is its path.
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


def _file_args(module, path, item):
    return module.load_file_common_arguments({k: item.get(k) for k in ("owner", "group", "mode")}, path=path)


def _read(path):
    try:
        with open(path, "rb") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _validate(module, command, tmp, dest):
    if "%s" not in command:
        module.fail_json(msg=f"{dest}: validate must name the file as %s: {command!r}")
    rc, out, err = module.run_command(command % shlex.quote(tmp), use_unsafe_shell=True)
    if rc != 0:
        module.fail_json(msg=f"{dest}: the new content fails `{command}` (exit {rc}): {(err or out).strip()[-2000:]}")


def _write(module, item, data):
    dest = item["dest"]
    folder = os.path.dirname(dest) or "."
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".gpucluster-")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        if item.get("validate"):
            _validate(module, item["validate"], tmp, dest)
        module.atomic_move(tmp, dest)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def converge_directory(module, item, diffs, planned):
    path = item["path"]
    changed = False
    if not os.path.isdir(path):
        if os.path.lexists(path):
            module.fail_json(msg=f"{path}: exists and is not a folder")
        diffs.append({"before_header": path, "after_header": path, "before": "absent\n", "after": "directory\n"})
        if module.check_mode:
            planned.add(path)
            return True
        os.makedirs(path)
        changed = True
    return module.set_fs_attributes_if_different(_file_args(module, path, item), changed)


def converge_file(module, item, diffs, planned):
    dest = item["dest"]
    if item["state"] == "absent":
        if not os.path.lexists(dest):
            return False
        diffs.append({"before_header": dest, "after_header": dest, "before": "present\n", "after": "absent\n"})
        if not module.check_mode:
            os.unlink(dest)
        return True
    if item.get("content") is None:
        module.fail_json(msg=f"{dest}: content is required when the file is present")
    folder = os.path.dirname(dest) or "."
    if folder in planned:
        # Check mode: the folder this run would make, so the file would be new.
        return True
    if not os.path.isdir(folder):
        if item["skip_without_parent"]:
            return None
        module.fail_json(msg=f"{dest}: its folder {folder} does not exist")
    data = to_bytes(item["content"], errors="surrogate_or_strict")
    current = _read(dest)
    changed = current != data
    if changed:
        if module._diff:
            diffs.append({"before_header": dest, "after_header": dest,
                          "before": "" if current is None else to_native(current, errors="surrogate_or_replace"),
                          "after": item["content"]})
        if module.check_mode:
            return True
        _write(module, item, data)
    if module.check_mode and current is None:
        return True
    return module.set_fs_attributes_if_different(_file_args(module, dest, item), changed)


def remove_unlisted(module, item, wanted, diffs):
    """Files of the folder matching the pattern that this run does not write: removed, in name order."""
    folder = item["path"]
    if not os.path.isdir(folder):
        return []
    removed = []
    for name in sorted(os.listdir(folder)):
        path = os.path.join(folder, name)
        if fnmatch.fnmatchcase(name, item["pattern"]) and path not in wanted and os.path.isfile(path):
            diffs.append({"before_header": path, "after_header": path, "before": "present\n", "after": "absent\n"})
            if not module.check_mode:
                os.unlink(path)
            removed.append(path)
    return removed


def main():
    module = AnsibleModule(
        argument_spec={
            "directories": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "path", "required": True},
                "owner": {"type": "str"}, "group": {"type": "str"}, "mode": {"type": "raw"}}},
            "files": {"type": "list", "elements": "dict", "default": [], "options": {
                "dest": {"type": "path", "required": True},
                "content": {"type": "str"},
                "state": {"type": "str", "choices": ["present", "absent"], "default": "present"},
                "owner": {"type": "str"}, "group": {"type": "str"}, "mode": {"type": "raw"},
                "validate": {"type": "str"},
                "skip_without_parent": {"type": "bool", "default": False}}},
            "exclusive": {"type": "list", "elements": "dict", "default": [], "options": {
                "path": {"type": "path", "required": True}, "pattern": {"type": "str", "required": True}}},
        },
        supports_check_mode=True,
    )
    changed_paths, skipped, diffs, planned = [], [], [], set()
    for item in module.params["directories"]:
        if converge_directory(module, item, diffs, planned):
            changed_paths.append(item["path"])
    for item in module.params["files"]:
        result = converge_file(module, item, diffs, planned)
        if result is None:
            skipped.append(item["dest"])
        elif result:
            changed_paths.append(item["dest"])
    wanted = {os.path.normpath(f["dest"]) for f in module.params["files"] if f["state"] == "present"}
    for item in module.params["exclusive"]:
        changed_paths += remove_unlisted(module, item, wanted, diffs)
    out = {"changed": bool(changed_paths), "changed_paths": changed_paths, "skipped_paths": skipped}
    if module._diff and diffs:
        out["diff"] = diffs
    module.exit_json(**out)


if __name__ == "__main__":
    main()
