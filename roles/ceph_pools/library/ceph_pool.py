#!/usr/bin/python
"""Ansible module: one replicated Ceph pool, created or brought to the wanted settings."""

from __future__ import annotations

import json

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: ceph_pool
short_description: A replicated Ceph pool with its size, min_size, pg_num and application
description:
  - Creates the pool when it is missing, then sets only the settings that differ; reports changed
    only when it ran a command that changes the cluster. Runs the ceph CLI with the admin keyring.
options:
  name: {type: str, required: true, description: Pool name.}
  application: {type: str, required: true, choices: [rbd, cephfs], description: Application tag.}
  size: {type: int, required: true, description: Replicas.}
  min_size: {type: int, description: Replicas needed for I/O (default size - 1, at least 1).}
  pg_num:
    type: int
    description: Placement groups (autoscaler off for this pool); unset, the PG autoscaler sizes the pool.
  crush_rule: {type: str, description: CRUSH rule by name (default the cluster's default rule for new pools; left alone).}
"""


def _ceph(module: AnsibleModule, *args: str) -> str:
    rc, out, err = module.run_command(["ceph", "--connect-timeout", "30", *args])
    if rc != 0:
        module.fail_json(msg=f"ceph {' '.join(args)} failed (rc {rc}): {err.strip()}")
    return out


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "application": {"type": "str", "required": True, "choices": ["rbd", "cephfs"]},
            "size": {"type": "int", "required": True},
            "min_size": {"type": "int", "required": False},
            "pg_num": {"type": "int", "required": False},
            "crush_rule": {"type": "str", "required": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    name: str = p["name"]
    min_size = p["min_size"] if p["min_size"] is not None else max(p["size"] - 1, 1)
    rule: str | None = p["crush_rule"]
    # A PG count in the spec pins the pool; without one Ceph's PG autoscaler sizes it
    # (https://docs.ceph.com/en/latest/rados/operations/placement-groups/#autoscaling-placement-groups).
    fixed = p["pg_num"] is not None
    rule_id: int | None = None
    if rule is not None:
        # The rule must exist (the role creates it first); its id is what a pool records.
        rule_id = int(json.loads(_ceph(module, "osd", "crush", "rule", "dump", rule, "-f", "json"))["rule_id"])
    pools = {d["pool_name"]: d for d in json.loads(_ceph(module, "osd", "pool", "ls", "detail", "-f", "json"))}
    actions: list[str] = []
    current = pools.get(name)
    if current is None:
        actions.append("create")
        if not module.check_mode:
            pgs = [str(p["pg_num"]), str(p["pg_num"])] if fixed else []
            _ceph(module, "osd", "pool", "create", name, *pgs, "replicated",
                  *([rule] if rule is not None else []), f"--autoscale-mode={'off' if fixed else 'on'}")
            pools = {d["pool_name"]: d for d in json.loads(_ceph(module, "osd", "pool", "ls", "detail", "-f", "json"))}
            current = pools[name]
    current = current or {}
    # pg_num moves towards pg_num_target gradually; the target is what was asked for.
    have = {
        "pg_autoscale_mode": current.get("pg_autoscale_mode"),
        "size": current.get("size"),
        "min_size": current.get("min_size"),
        "pg_num": current.get("pg_num_target", current.get("pg_num")),
    }
    want: dict[str, object] = {"pg_autoscale_mode": "off" if fixed else "on", "size": p["size"], "min_size": min_size}
    if fixed:
        want["pg_num"] = p["pg_num"]
    for key in want:
        if str(have[key]) != str(want[key]):
            actions.append(f"{key}={want[key]}")
            if not module.check_mode:
                _ceph(module, "osd", "pool", "set", name, key, str(want[key]))
    if rule is not None and current.get("crush_rule") is not None and int(current["crush_rule"]) != rule_id:
        actions.append(f"crush_rule={rule}")
        if not module.check_mode:
            _ceph(module, "osd", "pool", "set", name, "crush_rule", rule)
    if p["application"] not in current.get("application_metadata", {}):
        actions.append(f"application={p['application']}")
        if not module.check_mode:
            _ceph(module, "osd", "pool", "application", "enable", name, p["application"])
    module.exit_json(changed=bool(actions), actions=actions, pool=name)


if __name__ == "__main__":
    main()
