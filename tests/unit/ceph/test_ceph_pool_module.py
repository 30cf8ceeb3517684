"""roles/ceph_pools/library/ceph_pool.py against a fake ceph CLI: one run converges every pool,
reading the CRUSH rule and the pool table once (again only after a create); the rule a pool uses
is created with it, changed only when it differs, and left alone when no rule is asked for."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

MODULE = Path(__file__).resolve().parents[3] / "roles/ceph_pools/library/ceph_pool.py"
RULES = {"replicated_rule": 0, "replicated_rack": 1}
LS = ["osd", "pool", "ls", "detail", "-f", "json"]


class Done(Exception):
    pass


class FakeModule:
    """Stands in for AnsibleModule: params in, ceph commands recorded, exit_json captured."""

    pools: dict[str, dict[str, Any]] = {}
    commands: list[list[str]] = []
    result: dict[str, Any] = {}
    check_mode_next = False

    def __init__(self, argument_spec: dict[str, Any], supports_check_mode: bool) -> None:
        assert supports_check_mode
        # What AnsibleModule does with the suboptions: every option present, None when not given.
        options = argument_spec["pools"]["options"]
        params = {k: None for k in argument_spec} | PARAMS
        params["pools"] = [{k: None for k in options} | p for p in params["pools"]]
        self.params = params
        self.check_mode = FakeModule.check_mode_next

    def run_command(self, argv: list[str]) -> tuple[int, str, str]:
        assert argv[:3] == ["ceph", "--connect-timeout", "30"]
        args = argv[3:]
        FakeModule.commands.append(args)
        if args == LS:
            return 0, json.dumps(list(FakeModule.pools.values())), ""
        if args[:4] == ["osd", "crush", "rule", "dump"]:
            if args[4] not in RULES:
                return 2, "", f"Error ENOENT: unknown crush rule '{args[4]}'"
            return 0, json.dumps({"rule_id": RULES[args[4]], "rule_name": args[4]}), ""
        if args[:3] == ["osd", "pool", "create"]:
            name, rest = args[3], args[4:]
            at = rest.index("replicated")
            pgs, after = rest[:at], rest[at + 1:]
            rule = after[0] if after and not after[0].startswith("--") else "replicated_rule"
            FakeModule.pools[name] = {"pool_name": name, "size": 3, "min_size": 2,
                                      "pg_num": int(pgs[0]) if pgs else 32,
                                      "pg_autoscale_mode": after[-1].split("=")[1], "crush_rule": RULES[rule],
                                      "application_metadata": {}}
        return 0, "", ""

    def exit_json(self, **result: Any) -> None:
        FakeModule.result = result
        raise Done

    def fail_json(self, **result: Any) -> None:
        FakeModule.result = result
        raise Failed(result["msg"])


class Failed(Exception):
    pass


PARAMS: dict[str, Any] = {}


def load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ceph_pool_under_test", MODULE)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    mod.AnsibleModule = FakeModule  # type: ignore[attr-defined]
    return mod


def want(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "application": "rbd", "size": 3, "min_size": 2, "pg_num": 16} | fields


def run(pools: list[dict[str, Any]], existing: dict[str, dict[str, Any]], crush_rule: str | None = None,
        check_mode: bool = False) -> dict[str, Any]:
    PARAMS.clear()
    PARAMS.update({"pools": pools, "crush_rule": crush_rule})
    FakeModule.pools, FakeModule.commands, FakeModule.result = existing, [], {}
    FakeModule.check_mode_next = check_mode
    with pytest.raises(Done):
        load().main()
    return FakeModule.result


def have(name: str, rule_id: int = 0, application: str = "rbd", **fields: Any) -> dict[str, Any]:
    return {"pool_name": name, "size": 3, "min_size": 2, "pg_num": 16, "pg_autoscale_mode": "off",
            "crush_rule": rule_id, "application_metadata": {application: {}}} | fields


def changes() -> list[list[str]]:
    """The commands that change the cluster (every other one is a read)."""
    return [c for c in FakeModule.commands if c != LS and c[:4] != ["osd", "crush", "rule", "dump"]]


def test_new_pool_is_created_with_the_rule() -> None:
    result = run([want("rbd")], {}, crush_rule="replicated_rack")
    assert result["changed"] and result["actions"]["rbd"][0] == "create"
    create = next(c for c in FakeModule.commands if c[:3] == ["osd", "pool", "create"])
    assert create == ["osd", "pool", "create", "rbd", "16", "16", "replicated", "replicated_rack",
                      "--autoscale-mode=off"]
    assert not any("crush_rule" in c for c in FakeModule.commands)


def test_pool_on_its_rule_is_left_alone() -> None:
    result = run([want("rbd")], {"rbd": have("rbd", 0)}, crush_rule="replicated_rule")
    assert result == {"changed": False, "actions": {"rbd": []}, "changed_pools": [],
                      "pools": {"rbd": "size 3, min_size 2, pg_num 16, rule replicated_rule, application rbd"}}


def test_pool_on_another_rule_is_moved() -> None:
    result = run([want("rbd")], {"rbd": have("rbd", 0)}, crush_rule="replicated_rack")
    assert result["actions"] == {"rbd": ["crush_rule=replicated_rack"]}
    assert changes() == [["osd", "pool", "set", "rbd", "crush_rule", "replicated_rack"]]


def test_no_rule_asked_keeps_whatever_the_pool_has() -> None:
    result = run([want("rbd")], {"rbd": have("rbd", 1)})
    assert result["changed"] is False
    assert not any(c[:3] == ["osd", "crush", "rule"] for c in FakeModule.commands)


def test_several_pools_read_the_rule_and_the_table_once() -> None:
    existing = {"rbd": have("rbd"), "meta": have("meta", application="cephfs"),
                "data": have("data", application="cephfs", pg_num=64)}
    pools = [want("rbd"), want("meta", application="cephfs"), want("data", application="cephfs", pg_num=64)]
    result = run(pools, existing, crush_rule="replicated_rule")
    assert result["changed"] is False and result["changed_pools"] == []
    assert result["actions"] == {"rbd": [], "meta": [], "data": []}
    assert FakeModule.commands == [["osd", "crush", "rule", "dump", "replicated_rule", "-f", "json"], LS]
    assert list(result["pools"]) == ["rbd", "meta", "data"]  # the order given
    assert result["pools"]["data"] == "size 3, min_size 2, pg_num 64, rule replicated_rule, application cephfs"


def test_one_create_among_existing_pools_reads_the_table_again_once() -> None:
    existing = {"rbd": have("rbd"), "data": have("data", application="cephfs", size=2, min_size=1)}
    pools = [want("rbd"), want("meta", application="cephfs"), want("data", application="cephfs")]
    result = run(pools, existing, crush_rule="replicated_rule")
    assert result["changed"] is True and result["changed_pools"] == ["meta", "data"]
    assert result["actions"] == {"rbd": [], "meta": ["create", "application=cephfs"],
                                 "data": ["size=3", "min_size=2"]}
    assert FakeModule.commands.count(LS) == 2
    # The second read comes right after the create, before the new pool's settings are compared.
    create = FakeModule.commands.index(["osd", "pool", "create", "meta", "16", "16", "replicated", "replicated_rule",
                                        "--autoscale-mode=off"])
    assert FakeModule.commands[create + 1] == LS
    assert changes()[1:] == [["osd", "pool", "application", "enable", "meta", "cephfs"],
                             ["osd", "pool", "set", "data", "size", "3"],
                             ["osd", "pool", "set", "data", "min_size", "2"]]


def test_check_mode_reports_every_pool_and_changes_nothing() -> None:
    existing = {"rbd": have("rbd", 0, size=2), "data": have("data", 0, application="cephfs")}
    pools = [want("rbd"), want("meta", application="cephfs"), want("data", application="cephfs")]
    result = run(pools, existing, crush_rule="replicated_rack", check_mode=True)
    assert result["changed"] is True and result["changed_pools"] == ["rbd", "meta", "data"]
    assert result["actions"] == {
        "rbd": ["size=3", "crush_rule=replicated_rack"],
        # A pool that does not exist yet: everything it would get once created.
        "meta": ["create", "pg_autoscale_mode=off", "size=3", "min_size=2", "pg_num=16", "application=cephfs"],
        "data": ["crush_rule=replicated_rack"]}
    assert changes() == []
    assert FakeModule.commands.count(LS) == 1


def test_pools_without_a_pg_count_are_left_to_the_autoscaler() -> None:
    existing = {"rbd": have("rbd", pg_autoscale_mode="off")}
    result = run([want("rbd", pg_num=None), want("new", pg_num=None, min_size=None, size=1)], existing)
    assert result["actions"] == {"rbd": ["pg_autoscale_mode=on"], "new": ["create", "size=1", "min_size=1",
                                                                         "application=rbd"]}
    assert ["osd", "pool", "create", "new", "replicated", "--autoscale-mode=on"] in FakeModule.commands
    assert result["pools"]["new"] == ("size 1, min_size 1, pg_num autoscaled, rule as the cluster chooses, "
                                      "application rbd")


def test_pg_num_is_compared_with_its_target() -> None:
    # pg_num moves towards pg_num_target gradually: a pool on its way is not asked again.
    result = run([want("rbd", pg_num=32)], {"rbd": have("rbd", pg_num=16, pg_num_target=32)})
    assert result["changed"] is False


def test_a_pool_listed_twice_fails_before_any_command() -> None:
    PARAMS.clear()
    PARAMS.update({"pools": [want("rbd"), want("rbd", size=2)], "crush_rule": None})
    FakeModule.pools, FakeModule.commands = {}, []
    FakeModule.check_mode_next = False
    with pytest.raises(Failed, match=r"\['rbd'\] are listed more than once"):
        load().main()
    assert FakeModule.commands == []


def test_a_failing_ceph_command_names_itself() -> None:
    PARAMS.clear()
    PARAMS.update({"pools": [want("rbd")], "crush_rule": "replicated_row"})
    FakeModule.pools, FakeModule.commands = {}, []
    with pytest.raises(Failed) as failed:
        load().main()
    assert str(failed.value) == ("ceph osd crush rule dump replicated_row -f json failed (rc 2): "
                                 "Error ENOENT: unknown crush rule 'replicated_row'")
