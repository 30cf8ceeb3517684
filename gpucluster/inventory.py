"""The one hand-off from provisioning to configuration: stack outputs -> Ansible inventory.

Groups: one per role (gpucluster.spec.facts.ROLES: ``gpu``, ``storage``, ``control_plane``), one per pool
(``pool_<name>``) and, with a storage section, one per Ceph daemon kind (``ceph_mon``,
``ceph_mgr``, ``ceph_mds``, ``ceph_osd``). Host variables: the addresses and identity of the node, built as
the contract's model (gpucluster.inventory_model.InventoryHost). Cluster-wide variables: the resolved spec,
the bill of materials, the hardware profiles and platforms in use and what the target's nodes can do
(``gpucluster_capabilities``, from the outputs), so roles and the conformance suite read expectations from
the inventory alone and never ask which target they run on.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml

from gpucluster.errors import InputError
from gpucluster.inventory_model import (
    SCHEMA_VERSION,
    UNSAFE_TAG,
    InventoryHost,
    InventoryNode,
    spec_vars,
)

# Re-exported beside dump_inventory: the contract's reader of what it writes.
from gpucluster.inventory_model import parse_inventory_text as parse_inventory_text
from gpucluster.outputs import OutputAccess, StackOutputs, access_outputs, egress_outputs, load_outputs
from gpucluster.render.proxy import proxy_env
from gpucluster.render.sources import resolved_sources
from gpucluster.spec import load_spec
from gpucluster.spec.cluster import Cluster
from gpucluster.spec.contract import NodeContract
from gpucluster.spec.facts import ROLES
from gpucluster.spec.loader import capped
from gpucluster.spec.os import ceph_source, pool_os


def pool_group(pool: str) -> str:
    # Ansible group names may not contain dashes.
    return "pool_" + pool.replace("-", "_")


def _consistency(cluster: Cluster, outputs: StackOutputs, source: str) -> None:
    problems: list[str] = []
    if outputs.cluster_name != cluster.name:
        problems.append(
            f"outputs.cluster_name: {outputs.cluster_name!r} but the stack file names {cluster.name!r}"
        )
    if outputs.target != cluster.spec.target.kind:
        problems.append(
            f"outputs.target: {outputs.target!r} but the stack file's target is {cluster.spec.target.kind!r}"
        )
    caps = outputs.capabilities
    if cluster.spec.target.kind != "lab" and cluster.spec.twin is None:
        # What lab nodes cannot have makes their checks skip: a real machine's outputs never say so.
        lab_only = [name for name, value in (("gpu_devices", caps.gpu_devices is False),
                                             ("rdma_devices", caps.rdma_devices is False),
                                             ("runs_os", caps.runs_os is not None),
                                             ("link_floors", caps.link_floors is not None)) if value]
        if lab_only:
            problems.append(f"outputs.capabilities: {', '.join(lab_only)} are the lab's and a twin's to state; "
                            f"the {cluster.spec.target.kind} target's nodes are real machines (regenerate the outputs)")
    seen: dict[str, int] = {}
    addresses: dict[str, str] = {}
    for i, node in enumerate(outputs.nodes):
        where = f"outputs.nodes[{i}]"
        if node.name in seen:
            problems.append(f"{where}.name: duplicate node {node.name!r} (also nodes[{seen[node.name]}])")
            continue
        seen[node.name] = i
        if node.management_ip in addresses:
            problems.append(
                f"{where}.management_ip: {node.management_ip} is also {addresses[node.management_ip]!r}'s address"
            )
        addresses[node.management_ip] = node.name
        try:
            planned = cluster.node(node.name)
        except KeyError:
            problems.append(f"{where}.name: node {node.name!r} is not in the stack file's node pools")
            continue
        if node.pool != planned.pool:
            problems.append(f"{where}.pool: {node.pool!r} but the stack file puts it in {planned.pool!r}")
        if tuple(node.roles) != planned.roles:
            problems.append(f"{where}.roles: {node.roles} but the stack file says {list(planned.roles)}")
        if node.profile != planned.profile:
            problems.append(f"{where}.profile: {node.profile!r} but the stack file says {planned.profile!r}")
        if planned.rails and [r.model_dump() for r in node.rails] != [r.as_dict() for r in planned.rails]:
            # The stack file plans these rails (subnet_per_rail: the lab's target.rails, a DGX H100's
            # RoCE ports): outputs of an older plan would configure and check rails the nodes do not have.
            have = ", ".join(r.interface for r in node.rails) or "none"
            problems.append(f"{where}.rails: {have}, but the stack file plans "
                            f"{', '.join(r.interface for r in planned.rails)} (bring the target up again)")
    problems += _reach_consistency(cluster, outputs)
    missing = [n.name for n in cluster.nodes if n.name not in seen]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5} more" if len(missing) > 5 else "")
        problems.append(f"outputs.nodes: missing node(s) the stack file declares: {shown}")
    if problems:
        raise InputError(capped(problems), source=source)


def _reach_consistency(cluster: Cluster, outputs: StackOutputs) -> list[str]:
    """The access path and egress the outputs carry are the stack file's: outputs of an older spec
    would send converge through a bastion, or a proxy, that is no longer the cluster's."""
    problems = []
    want = access_outputs(cluster, outputs.nodes[0].ssh_user if outputs.nodes else "", None)
    have = outputs.access
    if have.mode != want["mode"] or have.created != want["created"]:
        said = f"{have.mode!r}" + (" (a bastion the stack made)" if have.created else "")
        meant = f"{want['mode']!r}" + (" (a bastion the stack makes)" if want["created"] else "")
        problems.append(f"outputs.access.mode: {said} but the stack file's access is {meant} "
                        "(bring the target up again)")
    elif want["bastion"] is not None and have.bastion is not None:
        # An existing bastion is the spec's; a created one's address is the target's to say.
        for key in ("host", "user", "port", "source_cidr"):
            if getattr(have.bastion, key) != want["bastion"][key]:
                problems.append(f"outputs.access.bastion.{key}: {getattr(have.bastion, key)!r} but the stack file "
                                f"says {want['bastion'][key]!r} (bring the target up again)")
    if outputs.egress.model_dump() != egress_outputs(cluster):
        problems.append(f"outputs.egress: {outputs.egress.mode} with other settings than the stack file's "
                        f"{egress_outputs(cluster)['mode']} (bring the target up again)")
    return problems


def jump_args(access: OutputAccess) -> str | None:
    """Ansible's standard form of the way in: ``-o ProxyJump=user@host:port`` (ansible_ssh_common_args,
    which ssh, sftp and scp all take), or None when the nodes are reached directly."""
    jump = access.jump()
    return f"-o ProxyJump={jump}" if jump is not None else None


def build_inventory(cluster: Cluster, outputs: StackOutputs, *, source: str = "outputs") -> dict[str, Any]:
    """The inventory as data; raises InputError when outputs and spec disagree."""
    _consistency(cluster, outputs, source)
    hosts: dict[str, dict[str, Any]] = {}
    built: list[InventoryHost] = []
    osd_by_pool = {p.name: list(p.osd_devices) for p in cluster.spec.node_pools if p.osd_devices}
    groups: dict[str, dict[str, Any]] = {role: {"hosts": {}} for role in ROLES}
    jump = jump_args(outputs.access)
    for node in outputs.nodes:
        host = InventoryHost(
            ansible_host=node.management_ip,
            ansible_user=node.ssh_user,
            ansible_port=node.ssh_port,
            ansible_ssh_private_key_file=outputs.ssh_private_key_file or None,
            ansible_ssh_common_args=jump,
            gpucluster_node_name=node.name,
            gpucluster_pool=node.pool,
            gpucluster_roles=list(node.roles),
            gpucluster_profile=node.profile,
            gpucluster_platform=cluster.node(node.name).platform,
            gpucluster_os=pool_os(cluster.spec, cluster.pool(node.pool)),
            gpucluster_preinstalled=cluster.pool(node.pool).preinstalled,
            gpucluster_management_ip=node.management_ip,
            gpucluster_fabric_ip=node.fabric_ip,
            gpucluster_fabric_interface=node.fabric_interface,
            gpucluster_rails=list(node.rails),
            gpucluster_failure_domain=node.failure_domain or None,
            gpucluster_osd_devices=osd_by_pool.get(node.pool) or None,
        )
        built.append(host)
        hosts[node.name] = host.host_vars()
        for role in node.roles:
            groups[role]["hosts"][node.name] = None
        groups.setdefault(pool_group(node.pool), {"hosts": {}})["hosts"][node.name] = None
    storage = cluster.spec.storage
    if storage is not None:
        # Ceph daemons by kind, so playbooks target them by group (`hosts: ceph_mon`):
        # inventory variables are not visible where Ansible resolves a play's hosts.
        # Managers default to the monitors, as Ceph runs them side by side.
        for group, members in (
            ("ceph_mon", storage.monitors),
            ("ceph_mgr", storage.managers or storage.monitors),
            ("ceph_mds", storage.mds),
            ("ceph_osd", [n.name for n in cluster.nodes_with_role("storage")]),
        ):
            groups[group] = {"hosts": dict.fromkeys(members)}
    resolved = cluster.as_dict()
    spec = resolved["spec"]
    all_vars = {
        # The contract's version (gpucluster/inventory_model.py): readers refuse another.
        "gpucluster_inventory_schema": SCHEMA_VERSION,
        "gpucluster_cluster_name": cluster.name,
        "gpucluster_stack": cluster.stack,
        "gpucluster_target": cluster.spec.target.kind,
        # The spec's own models, which the contract reads back through the same models.
        **spec_vars(cluster.spec.fabric, cluster.spec.storage, cluster.spec.kubernetes, cluster.bom, cluster.profiles),
        "gpucluster_platforms": resolved["platforms"],
        "gpucluster_conformance": spec["conformance"],
        # Where the stack admits SSH from (a controller, a CI runner): the node firewall admits it too.
        "gpucluster_admin_cidrs": list(getattr(cluster.spec.target, "admin_cidrs", [])),
        # The way in (the nodes' firewall admits a bastion's source) and out: the proxy as every
        # process the roles run takes it (the playbooks' environment), and each download's URL.
        "gpucluster_access": outputs.access.model_dump(),
        "gpucluster_egress": outputs.egress.model_dump(),
        "gpucluster_proxy_env": proxy_env(outputs.egress, cluster.spec.fabric, cluster.spec.kubernetes),
        "gpucluster_sources": resolved_sources({str(k): v for k, v in outputs.egress.mirrors.items()}, cluster.bom),
        "gpucluster_capabilities": outputs.capabilities.model_dump(),
        # fabric.ofed: the RDMA stack rdma_fabric installs and nvidia_driver's peermem follows.
        "gpucluster_ofed_flavour": cluster.spec.fabric.ofed,
        # dcgm-exporter's one owner follows it: the GPU Operator in `operator` mode, the monitoring
        # role otherwise (`device_plugin`, or `none` where Kubernetes is off).
        "gpucluster_gpu_mode": (cluster.spec.kubernetes.gpu_mode
                                if cluster.spec.kubernetes is not None and cluster.spec.kubernetes.enabled else "none"),
        "gpucluster_ceph_source": ceph_source(cluster.spec),
        "gpucluster_nodes": [InventoryNode.of(host).model_dump() for host in built],
        # What the roles make where, and the suite looks for there (gpucluster.spec.contract).
        "gpucluster_contract": NodeContract.for_capabilities(outputs.capabilities.nvidia_repo).model_dump(),
    }
    return {
        "all": {
            "vars": all_vars,
            "hosts": hosts,
            "children": {name: group for name, group in groups.items()},
        }
    }


def inventory_from_files(stack: str | Path, outputs_file: str | Path) -> dict[str, Any]:
    """The hand-off as every target takes it: a stack file and the outputs file of that stack."""
    return build_inventory(load_spec(stack), load_outputs(outputs_file), source=str(outputs_file))


class _Unsafe(str):
    """A string value the dumper writes as ``!unsafe`` (mapping keys stay plain)."""

    __slots__ = ()


def _templatable(value: str) -> bool:
    """Whether Ansible could template ``value``: every default Jinja delimiter starts with ``{``, and
    a ``#jinja2:`` header line sets other delimiters (ansible-core 2.21 honours it in any string)."""
    return "{" in value or "#jinja2:" in value or "\n" in value


def _mark(value: Any) -> Any:
    if isinstance(value, str):
        return _Unsafe(value) if _templatable(value) else value
    if isinstance(value, dict):
        return {k: _mark(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_mark(v) for v in value]
    return value


class _UnsafeDumper(getattr(yaml, "CSafeDumper", yaml.SafeDumper)):  # type: ignore[misc]
    """Writes every string value that holds a ``{`` as ``!unsafe``: Ansible then never templates it
    on the controller. Other strings are quoted where YAML would read them otherwise."""


def _represent_unsafe(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    return dumper.represent_scalar(UNSAFE_TAG, str(value), style="'" if "\n" not in value else '"')


_UnsafeDumper.add_representer(_Unsafe, _represent_unsafe)


def _flow(value: Any) -> str:
    """One value as a YAML flow node (JSON syntax, which YAML reads), strings tagged ``!unsafe``."""
    if isinstance(value, str):
        text = json.dumps(value, ensure_ascii=False)
        return f"{UNSAFE_TAG} {text}" if _templatable(value) else text
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(str(k))}: {_flow(v)}" for k, v in value.items()) + "}"
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_flow(v) for v in value) + "]"
    return json.dumps(value)


def dump_inventory(inventory: dict[str, Any]) -> str:
    """YAML text of the inventory, every string value that could hold a template tagged ``!unsafe``.

    Strings come from the spec and from stack outputs, and Ansible templates the
    inventory's strings on the controller: a value such as ``{{ lookup('pipe', ...) }}``
    would run there. The spec and outputs models refuse such values already; the tag is
    the second wall, so a field added later cannot reopen the hole. Every default Jinja delimiter
    starts with ``{`` and other delimiters need a ``#jinja2:`` header, so a string with neither (nor
    a newline) is written as a plain quoted string: Ansible
    (ansible-core 2.21) resolves a tagged scalar's type again, reading ``!unsafe '0x7fff'`` (an
    InfiniBand partition key) as the int 32767 and ``!unsafe 'yes'`` as true.

    Cluster-wide vars are dumped as block YAML for people to read. Hosts and group
    members, which grow with the cluster, are written one line each as flow mappings:
    a 10,000-node inventory then takes a fraction of a second instead of several
    seconds through PyYAML's representer.
    """
    root = inventory["all"]
    vars_text = yaml.dump({"vars": _mark(root["vars"])}, Dumper=_UnsafeDumper, sort_keys=False, width=120)
    out = ["# Written by `gpucluster inventory` from stack outputs. Do not edit: re-run it.\n", "all:\n"]
    out += ["  " + line + "\n" for line in vars_text.splitlines()]
    out.append("  hosts:\n")
    out += [f"    {json.dumps(name)}: {_flow(hv)}\n" for name, hv in root["hosts"].items()]
    out.append("  children:\n")
    for group, body in root["children"].items():
        members = body["hosts"]
        if not members:
            out.append(f"    {group}: {{hosts: {{}}}}\n")
            continue
        out.append(f"    {group}:\n      hosts:\n")
        out += [f"        {json.dumps(name)}: null\n" for name in members]
    return "".join(out)


def write_inventory(inventory: dict[str, Any], path: Path) -> None:
    """Write atomically: a reader never sees half an inventory."""
    text = dump_inventory(inventory)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text, encoding="utf-8")
    tmp.replace(path)
