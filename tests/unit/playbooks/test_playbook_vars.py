"""The playbooks' own group_vars/ and host_vars/ set no node contract override: Ansible reads them for
every inventory, so one there would move the roles on every cluster while the conformance suite, which
reads the inventory file alone, went on looking where the contract says (gpucluster.spec.contract)."""

from __future__ import annotations

from pathlib import Path

import pytest

from gpucluster.converge import DEFAULT_PLAYBOOK, refuse_vars_folder_overrides, variables_set
from gpucluster.inventory_model import read_inventory
from gpucluster.spec.contract import OVERRIDE_VARS

REPO = Path(__file__).resolve().parents[3]
PLAYBOOKS = REPO / "playbooks"


def _vars_files() -> list[Path]:
    # Every file, whatever group or host it is named for: a group no inventory has yet may come.
    return sorted(p for kind in ("group_vars", "host_vars") if (PLAYBOOKS / kind).is_dir()
                  for p in (PLAYBOOKS / kind).rglob("*") if p.is_file())


def test_the_playbooks_vars_folders_set_no_contract_override() -> None:
    files = _vars_files()
    # Not vacuous: the playbooks' group_vars/all.yml is there and read.
    assert PLAYBOOKS / "group_vars" / "all.yml" in files
    assert "ansible_managed" in variables_set(PLAYBOOKS / "group_vars" / "all.yml")
    found = {str(p.relative_to(REPO)): sorted(OVERRIDE_VARS & set(variables_set(p))) for p in files}
    assert not {path: names for path, names in found.items() if names}


@pytest.mark.parametrize("golden", sorted((REPO / "tests" / "golden" / "inventory").glob("*.yml")),
                         ids=lambda p: p.name)
def test_converge_finds_nothing_to_refuse_beside_its_own_playbooks(golden: Path) -> None:
    assert DEFAULT_PLAYBOOK.parent == PLAYBOOKS
    inventory, _ = read_inventory(golden)
    refuse_vars_folder_overrides([PLAYBOOKS], inventory)
