"""The stack outputs every target exports: the contract between provisioning and configuration.

``pulumi stack output --json`` prints a mapping of output names to values; every target
(lab, aws, azure, oci, baremetal) exports the names below with the same shapes, and
:mod:`gpucluster.inventory` turns them into the Ansible inventory without knowing the target.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from gpucluster.errors import InputError
from gpucluster.spec.cluster import Cluster
from gpucluster.spec.loader import validation_problems
from gpucluster.spec.models import AbsPath, Cidr, CrushBucketName, FabricType, IfName, IPv4, Name, Role

SCHEMA_VERSION = 1


class _Out(BaseModel):
    # Outputs come from machines, not people: unknown keys are tolerated so a newer
    # target may export more, but every key we read is typed.
    model_config = ConfigDict(extra="ignore", frozen=True)


class OutputNode(_Out):
    name: Name
    roles: list[Role] = Field(min_length=1)
    pool: Name
    profile: Name
    management_ip: IPv4
    fabric_ip: IPv4 | None
    ssh_user: str = Field(pattern=r"^[a-z_][a-z0-9_-]{0,31}$")
    ssh_port: int = Field(22, ge=1, le=65535)
    fabric_interface: IfName | None = None
    # EC2 i-..., an Azure resource ID, an OCI OCID, a lab or bare-metal name.
    instance_id: str | None = Field(None, pattern=r"^[A-Za-z0-9/][A-Za-z0-9_.:/-]{0,511}$")
    failure_domain: CrushBucketName | None = None


class OutputFabric(_Out):
    type: FabricType
    mtu: int
    management_cidr: Cidr
    fabric_cidr: Cidr


class OutputStorage(_Out):
    monitors: list[Name]
    osd_hosts: list[Name]
    cephfs_mount_path: AbsPath | None = None


class StackOutputs(_Out):
    schema_version: Literal[1] = 1
    cluster_name: Name
    target: Literal["aws", "azure", "oci", "baremetal", "lab"]
    nodes: list[OutputNode] = Field(min_length=1)
    fabric: OutputFabric
    storage: OutputStorage | None = None
    # A key file path as Ansible reads it: absolute, or relative, or under ~; no Jinja or shell syntax.
    ssh_private_key_file: str | None = Field(None, pattern=r"^~?[A-Za-z0-9_./+@-]{1,4096}$")


def build_outputs(
    cluster: Cluster,
    *,
    ssh_user: str,
    addresses: dict[str, tuple[str, str | None]] | None = None,
    fabric_interface: str | None = None,
    fabric_interfaces: dict[str, str | None] | None = None,
    instance_ids: dict[str, str] | None = None,
    failure_domains: dict[str, str] | None = None,
    ssh_private_key_file: str | None = None,
) -> dict[str, Any]:
    """The outputs mapping a target exports, from the spec plus what the target assigned.

    ``addresses`` maps node name to (management, fabric) address where the target
    assigned its own; by default the spec's planned addresses are used.
    ``fabric_interfaces`` names a node's fabric interface where it differs from the
    cluster-wide ``fabric_interface`` (storage VMs without the GPU nodes' HCAs, say).
    """
    nodes = []
    for node in cluster.nodes:
        mgmt, fab = (addresses or {}).get(node.name, (node.management_ip, node.fabric_ip))
        nodes.append(
            {
                "name": node.name,
                "roles": list(node.roles),
                "pool": node.pool,
                "profile": node.profile,
                "management_ip": mgmt,
                "fabric_ip": fab,
                "ssh_user": ssh_user,
                "ssh_port": 22,
                "fabric_interface": (fabric_interfaces or {}).get(node.name, fabric_interface),
                "instance_id": (instance_ids or {}).get(node.name),
                "failure_domain": (failure_domains or {}).get(node.name),
            }
        )
    fabric = cluster.spec.fabric
    storage = cluster.spec.storage
    return {
        "schema_version": SCHEMA_VERSION,
        "cluster_name": cluster.name,
        "target": cluster.spec.target.kind,
        "nodes": nodes,
        "fabric": {
            "type": fabric.type,
            "mtu": fabric.mtu,
            "management_cidr": fabric.management_cidr,
            "fabric_cidr": fabric.fabric_cidr,
        },
        "storage": None
        if storage is None
        else {
            "monitors": list(storage.monitors),
            "osd_hosts": [n.name for n in cluster.nodes_with_role("storage")],
            "cephfs_mount_path": storage.cephfs.mount_path if storage.cephfs else None,
        },
        "ssh_private_key_file": ssh_private_key_file,
    }


def parse_outputs(raw: Any, source: str) -> StackOutputs:
    try:
        return StackOutputs.model_validate(raw)
    except ValidationError as exc:
        raise InputError(validation_problems(exc, StackOutputs, "outputs"), source=source) from None


def load_outputs(path: str | Path) -> StackOutputs:
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InputError("stack outputs file not found", source=str(file)) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise InputError(f"cannot read stack outputs: {exc}", source=str(file)) from None
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(
            f"line {exc.lineno}, column {exc.colno}: not JSON ({exc.msg}); "
            "expected what `pulumi stack output --json` prints",
            source=str(file),
        ) from None
    return parse_outputs(raw, str(file))
