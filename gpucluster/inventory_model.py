"""The inventory as a typed, versioned contract: what `gpucluster inventory` writes and every
reader (converge, verify, the conformance suite) reads, validated in this one place.

Ansible itself reads the same file; this model is what the project's Python holds it to. A host
or cluster variable the model does not name is kept (roles may read more), but every one it names
is typed, and an inventory written by another version of the writer is refused with the remedy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpucluster.errors import InputError
from gpucluster.inventory import parse_inventory_text
from gpucluster.spec.loader import validation_problems

SCHEMA_VERSION = 1
SCHEMA_VAR = "gpucluster_inventory_schema"
_REGENERATE = "write the inventory again with `gpucluster inventory` (or `gpucluster lab up`)"


class _Open(BaseModel):
    # Roles read variables this model does not name: they are kept, the named ones typed.
    model_config = ConfigDict(extra="allow", frozen=True, strict=True)


class InventoryHost(_Open):
    ansible_host: str = Field(min_length=1)
    ansible_user: str = "root"
    ansible_port: int = Field(22, ge=1, le=65535)
    ansible_ssh_private_key_file: str | None = None
    gpucluster_node_name: str
    gpucluster_pool: str
    gpucluster_roles: list[str] = Field(min_length=1)
    gpucluster_profile: str
    gpucluster_management_ip: str
    gpucluster_fabric_ip: str | None
    gpucluster_fabric_interface: str | None = None


class InventoryVars(_Open):
    gpucluster_inventory_schema: Literal[1]
    gpucluster_cluster_name: str
    gpucluster_stack: str
    gpucluster_target: Literal["aws", "azure", "oci", "baremetal", "lab"]
    gpucluster_fabric: dict[str, Any]
    gpucluster_storage: dict[str, Any] | None
    gpucluster_kubernetes: dict[str, Any] | None
    gpucluster_bom: dict[str, Any]
    gpucluster_profiles: dict[str, dict[str, Any]]
    gpucluster_nodes: list[dict[str, Any]]


class InventoryGroup(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    hosts: dict[str, None] = Field(default_factory=dict)


class Inventory(BaseModel):
    """The ``all`` group of the inventory file."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    vars: InventoryVars
    hosts: dict[str, InventoryHost] = Field(min_length=1)
    children: dict[str, InventoryGroup] = Field(default_factory=dict)

    def groups(self) -> dict[str, tuple[str, ...]]:
        return {name: tuple(body.hosts) for name, body in self.children.items()}


def validate_inventory(data: Any, source: str) -> Inventory:
    """The inventory data as the typed model, or one InputError naming every problem."""
    root = data.get("all") if isinstance(data, dict) else None
    if not isinstance(root, dict):
        raise InputError(f"not a gpucluster inventory: no top-level 'all' mapping; {_REGENERATE}", source=source)
    found = (root.get("vars") or {}).get(SCHEMA_VAR) if isinstance(root.get("vars"), dict) else None
    if found != SCHEMA_VERSION:
        raise InputError(f"all.vars.{SCHEMA_VAR}: {found!r}, but this gpucluster reads version {SCHEMA_VERSION}; "
                         f"{_REGENERATE}", source=source)
    problems = _reference_problems(root)
    try:
        inventory = Inventory.model_validate(root)
    except ValidationError as exc:
        problems = validation_problems(exc, Inventory, "all") + problems
    if problems:
        raise InputError(problems, source=source)
    return inventory


def _reference_problems(root: dict[str, Any]) -> list[str]:
    """Hosts whose profile the inventory does not carry, group members that are no host: checked
    on the raw data, so they are reported beside any type problem, all at once."""
    hosts = _mapping(root.get("hosts"))
    profiles = _mapping(root.get("vars")).get("gpucluster_profiles")
    problems = []
    for name, hv in hosts.items():
        profile = hv.get("gpucluster_profile") if isinstance(hv, dict) else None
        if isinstance(profile, str) and isinstance(profiles, dict) and profile not in profiles:
            problems.append(f"all.hosts.{name}.gpucluster_profile: {profile!r} is not in all.vars.gpucluster_profiles")
    children = _mapping(root.get("children"))
    for group, body in children.items():
        members = body.get("hosts") if isinstance(body, dict) else None
        unknown = sorted(set(members or {}) - set(hosts)) if isinstance(members, dict) else []
        if unknown:
            problems.append(f"all.children.{group}.hosts: {', '.join(map(str, unknown[:5]))} not in all.hosts")
    return problems


def read_inventory(path: str | Path) -> tuple[Inventory, dict[str, Any]]:
    """Read an inventory file: the typed model and the data as read (roles' extra variables included)."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("no such inventory file", source=str(p)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read inventory: {exc}", source=str(p)) from None
    try:
        data = parse_inventory_text(text)
    except yaml.YAMLError as exc:
        raise InputError(f"not YAML: {str(exc).splitlines()[0]}", source=str(p)) from None
    return validate_inventory(data, str(p)), data


def _mapping(value: Any) -> dict[Any, Any]:
    return value if isinstance(value, dict) else {}
