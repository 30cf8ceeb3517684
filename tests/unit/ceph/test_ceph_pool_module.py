"""roles/ceph_pools/library/ceph_pool.py against a fake ceph CLI: the CRUSH rule a pool uses is
created with it, changed only when it differs, and left alone when no rule is asked for."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

MODULE = Path(__file__).resolve().parents[3] / "roles/ceph_pools/library/ceph_pool.py"
RULES = {"replicated_rule": 0, "replicated_rack": 1}


class Done(Exception):
    pass


class FakeModule:
    """Stands in for AnsibleModule: params in, ceph commands recorded, exit_json captured."""

    pools: dict[str, dict[str, Any]] = {}
    commands: list[list[str]] = []
    result: dict[str, Any] = {}

    def __init__(self, argument_spec: dict[str, Any], supports_check_mode: bool) -> None:
        self.params = {k: None for k in argument_spec} | PARAMS
        self.check_mode = False

    def run_command(self, argv: list[str]) -> tuple[int, str, str]:
        args = argv[3:]  # past `ceph --connect-timeout 30`
        FakeModule.commands.append(args)
        if args[:4] == ["osd", "pool", "ls", "detail"]:
            return 0, json.dumps(list(FakeModule.pools.values())), ""
        if args[:4] == ["osd", "crush", "rule", "dump"]:
            return 0, json.dumps({"rule_id": RULES[args[4]], "rule_name": args[4]}), ""
        if args[:3] == ["osd", "pool", "create"]:
            rule = args[7] if not args[7].startswith("--") else "replicated_rule"
            FakeModule.pools[args[3]] = {"pool_name": args[3], "size": 3, "min_size": 2, "pg_num": int(args[4]),
                                         "pg_autoscale_mode": "off", "crush_rule": RULES[rule],
                                         "application_metadata": {}}
        return 0, "", ""

    def exit_json(self, **result: Any) -> None:
        FakeModule.result = result
        raise Done

    def fail_json(self, **result: Any) -> None:
        raise AssertionError(result)


PARAMS: dict[str, Any] = {}


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ceph_pool_under_test", MODULE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.AnsibleModule = FakeModule  # type: ignore[attr-defined]
    return mod


def run(params: dict[str, Any], pools: dict[str, dict[str, Any]]) -> dict[str, Any]:
    PARAMS.clear()
    PARAMS.update({"application": "rbd", "size": 3, "min_size": 2, "pg_num": 16} | params)
    FakeModule.pools, FakeModule.commands, FakeModule.result = pools, [], {}
    with pytest.raises(Done):
        load().main()
    return FakeModule.result


def pool(rule_id: int) -> dict[str, dict[str, Any]]:
    return {"rbd": {"pool_name": "rbd", "size": 3, "min_size": 2, "pg_num": 16, "pg_autoscale_mode": "off",
                    "crush_rule": rule_id, "application_metadata": {"rbd": {}}}}


def test_new_pool_is_created_with_the_rule() -> None:
    result = run({"name": "rbd", "crush_rule": "replicated_rack"}, {})
    assert result["changed"] and "create" in result["actions"]
    create = next(c for c in FakeModule.commands if c[:3] == ["osd", "pool", "create"])
    assert create == ["osd", "pool", "create", "rbd", "16", "16", "replicated", "replicated_rack",
                      "--autoscale-mode=off"]
    assert not any("crush_rule" in c for c in FakeModule.commands)


def test_pool_on_its_rule_is_left_alone() -> None:
    result = run({"name": "rbd", "crush_rule": "replicated_rule"}, pool(0))
    assert result == {"changed": False, "actions": [], "pool": "rbd"}


def test_pool_on_another_rule_is_moved() -> None:
    result = run({"name": "rbd", "crush_rule": "replicated_rack"}, pool(0))
    assert result["actions"] == ["crush_rule=replicated_rack"]
    assert ["osd", "pool", "set", "rbd", "crush_rule", "replicated_rack"] in FakeModule.commands


def test_no_rule_asked_keeps_whatever_the_pool_has() -> None:
    result = run({"name": "rbd"}, pool(1))
    assert result["changed"] is False
    assert not any(c[:3] == ["osd", "crush", "rule"] for c in FakeModule.commands)
