#!/usr/bin/python
"""Ansible module: cephx client keys with exactly the given capabilities."""

from __future__ import annotations

import json
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: ceph_client_key
short_description: cephx client entities with exactly the wanted caps; returns their keyrings
description:
  - Creates each entity when missing, replaces its caps when they differ, otherwise changes nothing.
    One `ceph auth ls` reads every entity at once, so a cluster's worth of clients costs one call
    when nothing changes. The returned keyrings hold the secrets; callers set no_log.
options:
  clients:
    type: list
    elements: dict
    description: "Each {name: client.x, caps: {service: cap string or list of grants}}."
  name: {type: str, description: "One entity, e.g. client.gpu.node-1 (instead of clients)."}
  caps: {type: dict, description: "Its caps (with name)."}
"""

_CEPH = ["ceph", "--connect-timeout", "30"]


def wanted_caps(caps: dict[str, Any]) -> dict[str, str]:
    """A service's grants may come as a list; Ceph joins grants with ", ". No grants: no cap."""
    want = {}
    for svc, cap in caps.items():
        text = ", ".join(str(c) for c in cap) if isinstance(cap, list) else str(cap)
        if text:
            want[svc] = text
    return want


def auth_entities(out: str) -> dict[str, dict[str, Any]]:
    """entity name -> {key, caps} from `ceph auth ls -f json` (Pacific and later: {"auth_dump": [...]})."""
    doc = json.loads(out)
    rows = doc.get("auth_dump", []) if isinstance(doc, dict) else doc
    return {r["entity"]: r for r in rows if "entity" in r}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "clients": {"type": "list", "elements": "dict"},
            "name": {"type": "str"},
            "caps": {"type": "dict"},
        },
        required_one_of=[("clients", "name")],
        mutually_exclusive=[("clients", "name")],
        required_together=[("name", "caps")],
        supports_check_mode=True,
    )
    clients = module.params["clients"] or [{"name": module.params["name"], "caps": module.params["caps"]}]
    for k, c in enumerate(clients):
        if not isinstance(c.get("name"), str) or not c["name"] or not isinstance(c.get("caps"), dict):
            module.fail_json(msg=f"clients[{k}]: needs a name and a caps mapping")

    def ceph(*args: str) -> str:
        rc, out, err = module.run_command([*_CEPH, *args])
        if rc != 0:
            module.fail_json(msg=f"ceph {' '.join(args[:3])} failed (rc {rc}): {err.strip()}")
        return str(out)

    entities = auth_entities(ceph("auth", "ls", "-f", "json"))
    changed: list[str] = []
    keyrings: dict[str, str] = {}
    for client in clients:
        name, want = client["name"], wanted_caps(client["caps"])
        cap_args = [a for svc, cap in sorted(want.items()) for a in (svc, cap)]
        entity = entities.get(name)
        if entity is None:
            changed.append(name)
            if module.check_mode:
                keyrings[name] = ""
                continue
            ceph("auth", "get-or-create", name, *cap_args)
            entity = json.loads(ceph("auth", "get", name, "-f", "json"))[0]
        elif entity.get("caps", {}) != want:
            changed.append(name)
            if not module.check_mode:
                ceph("auth", "caps", name, *cap_args)
        keyrings[name] = f"[{name}]\n\tkey = {entity['key']}\n"
    result: dict[str, Any] = {"changed": bool(changed), "changed_entities": changed, "keyrings": keyrings}
    if module.params["name"]:
        result["keyring"] = keyrings[module.params["name"]]
    module.exit_json(**result)


if __name__ == "__main__":
    main()
