"""The Ceph roles' contracts: argument specs in step with defaults, house-style rules on tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.roles.no_log import NO_LOG

ROOT = Path(__file__).resolve().parents[3]
ROLES = ["ceph_common", "ceph_mon", "ceph_mgr", "ceph_osd", "ceph_mds", "ceph_pools", "ceph_client"]
# Words that mark a task as handling a secret: it must carry no_log.
SECRET_WORDS = ("keyring", "ceph-authtool", "auth get", "ceph_client_key", "secret")
# Modules whose arguments or results can carry a key's text.
SECRET_MODULES = ("ansible.builtin.command", "ansible.builtin.shell", "ansible.builtin.copy",
                  "ansible.builtin.slurp", "ceph_client_key", "gpucluster.cluster.files")


def load(path: Path) -> Any:
    return yaml.safe_load(path.read_text())


def tasks_of(role: str) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for path in sorted((ROOT / "roles" / role).glob("*/*.yml")):
        if path.parent.name not in ("tasks", "handlers"):
            continue
        for task in load(path) or []:
            out.append((f"{path.parent.name}/{path.name}", task))
    return out


@pytest.mark.parametrize("role", ROLES)
def test_argument_specs_match_defaults(role: str) -> None:
    defaults = load(ROOT / "roles" / role / "defaults/main.yml") or {}
    spec = load(ROOT / "roles" / role / "meta/argument_specs.yml")["argument_specs"]["main"]["options"]
    assert set(spec) == set(defaults)
    assert all(name.startswith(role + "_") for name in defaults)


@pytest.mark.parametrize("role", ROLES)
def test_role_has_preflight_and_readme(role: str) -> None:
    base = ROOT / "roles" / role
    assert (base / "tasks/preflight.yml").is_file()
    readme = (base / "README.md").read_text()
    for name in load(base / "defaults/main.yml") or {}:
        assert f"`{name}`" in readme


@pytest.mark.parametrize("role", ROLES)
def test_tasks_follow_house_style(role: str) -> None:
    for where, task in tasks_of(role):
        name = task.get("name", "")
        assert name, f"{role}/{where}: unnamed task"
        module = next((k for k in task if "." in k or k in ("ceph_pool", "ceph_client_key")), None)
        assert module, f"{role}/{where}: {name}: no module"
        own = ("ceph_pool", "ceph_client_key")
        assert module.startswith(("ansible.builtin.", "gpucluster.cluster.")) or module in own, module
        if module in ("ansible.builtin.command", "ansible.builtin.shell"):
            assert "changed_when" in task or "creates" in (task.get("args") or {}), f"{name}: no changed_when"
        if module == "ansible.builtin.file":
            assert "state" in task[module], f"{name}: no state"
        body = yaml.safe_dump(task)
        if any(word in body for word in SECRET_WORDS) and module in SECRET_MODULES:
            assert task.get("no_log") == NO_LOG, f"{role}/{where}: {name}: touches a key without no_log"


@pytest.mark.parametrize("role", ROLES)
def test_internal_vars_are_prefixed(role: str) -> None:
    path = ROOT / "roles" / role / "vars/main.yml"
    if path.exists():
        assert all(k.startswith(f"__{role}_") for k in load(path) or {})


def test_templates_start_with_ansible_managed() -> None:
    for path in (ROOT / "roles").glob("ceph_*/templates/*.j2"):
        assert path.read_text().startswith("{{ ansible_managed | comment }}"), path


def test_fsid_derivations_agree() -> None:
    roles = ("ceph_common", "ceph_mon", "ceph_osd")
    exprs = {load(ROOT / "roles" / r / "defaults/main.yml")[f"{r}_fsid"] for r in roles}
    assert len(exprs) == 1


def test_playbook_runs_every_role() -> None:
    plays = load(ROOT / "playbooks/deploy-ceph.yml")
    used = [r["role"] for p in plays for r in p.get("roles", [])]
    assert sorted(used) == sorted(ROLES)
