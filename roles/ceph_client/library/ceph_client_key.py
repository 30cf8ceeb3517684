#!/usr/bin/python
"""Ansible module: a cephx client key with exactly the given capabilities."""

from __future__ import annotations

import json

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: ceph_client_key
short_description: A cephx client entity with exactly the wanted caps; returns its keyring
description:
  - Creates the entity when missing, replaces its caps when they differ, otherwise changes nothing.
    The returned keyring holds the secret; callers set no_log.
options:
  name: {type: str, required: true, description: Entity, e.g. client.gpu.node-1.}
  caps: {type: dict, required: true, description: "Service to a cap string or a list of grants."}
"""


def main() -> None:
    module = AnsibleModule(
        argument_spec={"name": {"type": "str", "required": True}, "caps": {"type": "dict", "required": True}},
        supports_check_mode=True,
    )
    name: str = module.params["name"]
    # A service's grants may come as a list; Ceph joins grants with ", ". No grants: no cap.
    want = {}
    for svc, cap in module.params["caps"].items():
        text = ", ".join(str(c) for c in cap) if isinstance(cap, list) else str(cap)
        if text:
            want[svc] = text
    cap_args = [a for svc, cap in sorted(want.items()) for a in (svc, cap)]
    rc, out, err = module.run_command(["ceph", "--connect-timeout", "30", "auth", "get", name, "-f", "json"])
    changed = False
    if rc == 2 or (rc != 0 and "ENOENT" in err):
        changed = True
        if module.check_mode:
            module.exit_json(changed=True, keyring="")
        rc, out, err = module.run_command(["ceph", "--connect-timeout", "30", "auth", "get-or-create", name,
                                           *cap_args])
        if rc != 0:
            module.fail_json(msg=f"ceph auth get-or-create {name} failed: {err.strip()}")
        rc, out, err = module.run_command(["ceph", "--connect-timeout", "30", "auth", "get", name, "-f", "json"])
    if rc != 0:
        module.fail_json(msg=f"ceph auth get {name} failed (rc {rc}): {err.strip()}")
    entity = json.loads(out)[0]
    if entity.get("caps", {}) != want:
        changed = True
        if not module.check_mode:
            rc, _, err = module.run_command(["ceph", "--connect-timeout", "30", "auth", "caps", name, *cap_args])
            if rc != 0:
                module.fail_json(msg=f"ceph auth caps {name} failed: {err.strip()}")
    keyring = f"[{name}]\n\tkey = {entity['key']}\n"
    module.exit_json(changed=changed, keyring=keyring, caps=want)


if __name__ == "__main__":
    main()
