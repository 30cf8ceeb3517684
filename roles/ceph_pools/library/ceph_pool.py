#!/usr/bin/python
"""Ansible module: the replicated Ceph pools, each created or brought to the wanted settings, in one run."""

from __future__ import annotations

import json
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: ceph_pool
short_description: Replicated Ceph pools with their size, min_size, pg_num, application and CRUSH rule
description:
  - Converges every pool in one run (a module run per pool costs a Python start and the ceph CLI's
    reads again; the storage node runs this alone while the other nodes wait). Reads the CRUSH rule
    and C(ceph osd pool ls detail) once, reads the pools again only after it created one.
  - Creates a pool when it is missing, then sets only the settings that differ; reports changed
    only when it ran a command that changes the cluster. Runs the ceph CLI with the admin keyring.
options:
  pools:
    type: list
    elements: dict
    required: true
    description: The pools, converged in this order.
    suboptions:
      name: {type: str, required: true, description: Pool name.}
      application: {type: str, required: true, choices: [rbd, cephfs], description: Application tag.}
      size: {type: int, required: true, description: Replicas.}
      min_size: {type: int, description: Replicas needed for I/O (default size - 1, at least 1).}
      pg_num:
        type: int
        description: Placement groups (autoscaler off for this pool); unset, the PG autoscaler sizes the pool.
  crush_rule:
    type: str
    description: Every pool's CRUSH rule by name (default the cluster's default rule for new pools; left alone).
"""

RETURN = r"""
actions:
  description: Per pool, what this run did (or, in check mode, would do); an empty list when the pool was as asked.
  returned: always
  type: dict
  sample: {rbd: [], cephfs-data: [create, "application=cephfs"]}
changed_pools:
  description: The pools with at least one action, in the order given.
  returned: always
  type: list
  elements: str
pools:
  description: Per pool, what it was converged to (a readable label; the task runs once for every pool).
  returned: always
  type: dict
  sample: {rbd: "size 3, min_size 2, pg_num 32, rule replicated_rule, application rbd"}
"""

_POOL_OPTIONS: dict[str, dict[str, Any]] = {
    "name": {"type": "str", "required": True},
    "application": {"type": "str", "required": True, "choices": ["rbd", "cephfs"]},
    "size": {"type": "int", "required": True},
    "min_size": {"type": "int", "required": False},
    "pg_num": {"type": "int", "required": False},
}


def _ceph(module: AnsibleModule, *args: str) -> str:
    rc, out, err = module.run_command(["ceph", "--connect-timeout", "30", *args])
    if rc != 0:
        module.fail_json(msg=f"ceph {' '.join(args)} failed (rc {rc}): {err.strip()}")
    return str(out)


def _pool_detail(module: AnsibleModule) -> dict[str, dict[str, Any]]:
    return {d["pool_name"]: d for d in json.loads(_ceph(module, "osd", "pool", "ls", "detail", "-f", "json"))}


def _min_size(p: dict[str, Any]) -> int:
    return int(p["min_size"]) if p["min_size"] is not None else max(p["size"] - 1, 1)


def _label(p: dict[str, Any], rule: str | None) -> str:
    pgs = str(p["pg_num"]) if p["pg_num"] is not None else "autoscaled"
    return (f"size {p['size']}, min_size {_min_size(p)}, pg_num {pgs}, rule {rule or 'as the cluster chooses'}, "
            f"application {p['application']}")


def _converge(module: AnsibleModule, p: dict[str, Any], rule: str | None, rule_id: int | None,
              pools: dict[str, dict[str, Any]]) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """One pool's actions; returns them and the pool table (read again when this pool was created)."""
    name: str = p["name"]
    # A PG count in the spec pins the pool; without one Ceph's PG autoscaler sizes it
    # (https://docs.ceph.com/en/latest/rados/operations/placement-groups/#autoscaling-placement-groups).
    fixed = p["pg_num"] is not None
    actions: list[str] = []
    current = pools.get(name)
    if current is None:
        actions.append("create")
        if not module.check_mode:
            pgs = [str(p["pg_num"]), str(p["pg_num"])] if fixed else []
            _ceph(module, "osd", "pool", "create", name, *pgs, "replicated",
                  *([rule] if rule is not None else []), f"--autoscale-mode={'off' if fixed else 'on'}")
            pools = _pool_detail(module)
            current = pools[name]
    current = current or {}
    # pg_num moves towards pg_num_target gradually; the target is what was asked for.
    have = {
        "pg_autoscale_mode": current.get("pg_autoscale_mode"),
        "size": current.get("size"),
        "min_size": current.get("min_size"),
        "pg_num": current.get("pg_num_target", current.get("pg_num")),
    }
    want: dict[str, object] = {"pg_autoscale_mode": "off" if fixed else "on", "size": p["size"],
                               "min_size": _min_size(p)}
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
    return actions, pools


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "pools": {"type": "list", "elements": "dict", "required": True, "options": _POOL_OPTIONS},
            "crush_rule": {"type": "str", "required": False},
        },
        supports_check_mode=True,
    )
    wanted: list[dict[str, Any]] = module.params["pools"]
    names = [p["name"] for p in wanted]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        module.fail_json(msg=f"pools {twice} are listed more than once: each pool name once in storage.pools")
    rule: str | None = module.params["crush_rule"]
    rule_id: int | None = None
    if rule is not None:
        # The rule must exist (the role creates it first); its id is what a pool records.
        rule_id = int(json.loads(_ceph(module, "osd", "crush", "rule", "dump", rule, "-f", "json"))["rule_id"])
    pools = _pool_detail(module)
    actions: dict[str, list[str]] = {}
    labels: dict[str, str] = {}
    for p in wanted:
        actions[p["name"]], pools = _converge(module, p, rule, rule_id, pools)
        labels[p["name"]] = _label(p, rule)
    changed_pools = [n for n in names if actions[n]]
    module.exit_json(changed=bool(changed_pools), actions=actions, changed_pools=changed_pools, pools=labels)


if __name__ == "__main__":
    main()
