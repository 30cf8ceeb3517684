"""The inventory as a typed, versioned contract: what `gpucluster inventory` writes and every
reader (converge, verify, the conformance suite) reads, validated in this one place.

Ansible itself reads the same file; this model is what the project's Python holds it to. A host
or cluster variable the model does not name is kept (roles may read more), but every one it names
is typed, and an inventory written by another version of the writer is refused with the remedy.

This is the one inventory validator. What it cannot see lives elsewhere, each in one place:
- the spec's rules (CIDR overlaps, Ceph quorum, fabric per target): gpucluster/spec/rules.py, when
  the inventory is written;
- outputs against the spec (names, pools, roles, addresses): gpucluster/inventory.py, the hand-off;
- what only Ansible resolves (the controller's ansible-core, variables from other inventory sources,
  group_vars, host_vars or extra vars): playbooks/validate-inventory.yml; a node contract override
  among them, which the conformance suite would not see: gpucluster/converge.py, before anything runs;
- each role's own inputs: its meta/argument_specs.yml and tasks/preflight.yml.
"""

from __future__ import annotations

import collections.abc
import types
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    ValidatorFunctionWrapHandler,
    WrapValidator,
    model_validator,
)
from pydantic_core import InitErrorDetails

from gpucluster.errors import InputError
from gpucluster.outputs import Capabilities, OutputAccess, OutputEgress, OutputRail
from gpucluster.spec.contract import NodeContract
from gpucluster.spec.facts import Role
from gpucluster.spec.loader import validation_problems
from gpucluster.spec.models import (
    Bom,
    Cidr,
    Conformance,
    CrushBucketName,
    DcgmDiagLevel,
    DevPath,
    Fabric,
    HardwareProfile,
    IfName,
    IPv4,
    Kubernetes,
    Name,
    OsId,
    Platform,
    PreinstalledPolicy,
    Storage,
)

# The inventory contract's version: the writer (gpucluster/inventory.py) writes it, readers refuse another.
# 2: cluster-wide gpucluster_capabilities, which the roles read instead of the target's kind.
# 3: the profile holds the GPU part only; the network part is the platform (gpucluster_platforms,
#    host variable gpucluster_platform); gpucluster_conformance carries how verify judges.
# 4: gpucluster_capabilities.kubernetes_nodes (whether site.yml deploys Kubernetes on the nodes).
# 5: gpucluster_contract (gpucluster.spec.contract.NodeContract): what the roles' defaults and the
#    suite's checks once each wrote down (the driver's install method, node_exporter's textfile
#    folder and port, the tools' folders).
# 6: gpucluster_contract.kubeconfig_name: the fetched cluster-admin kubeconfig's name in the
#    inventory's folder, which the control plane's role, converge and up all read; and
#    gpucluster_contract.cuda_toolkit_install_method, which the cuda_toolkit role and GC-GPU-010 read.
SCHEMA_VERSION = 6
SCHEMA_VAR = "gpucluster_inventory_schema"
# The tag the writer puts on a string Ansible must never template (gpucluster.inventory.dump_inventory).
UNSAFE_TAG = "!unsafe"
_REGENERATE = "write the inventory again with `gpucluster inventory` (or `gpucluster lab up`)"

__all__ = ["HAND_SET_HOST_VARS", "SCHEMA_VAR", "SCHEMA_VERSION", "Inventory", "InventoryConformance",
           "InventoryGroup", "InventoryHost", "InventoryHostConformance", "InventoryNode", "InventoryVars",
           "parse_inventory_text", "read_inventory", "spec_vars", "validate_inventory"]


class _Open(BaseModel):
    # Roles read variables this model does not name: they are kept, the named ones typed.
    model_config = ConfigDict(extra="allow", frozen=True, strict=True)


def _as_written(model: type[BaseModel], may_omit: Collection[str] = ()) -> WrapValidator:
    """A stack outputs' model (gpucluster/outputs.py) read back from the inventory as the writer
    dumped it: every field present (but ``may_omit``, at the top), no other, and each value of its
    type, not coerced.

    The outputs' models default what older outputs lack and ignore what newer targets add; the
    inventory the writer wrote has every field, and a field a hand edit dropped or added is one
    the roles, which read the file itself, would miss or never honour.
    """
    def validate(value: Any, handler: ValidatorFunctionWrapHandler) -> Any:
        if not isinstance(value, Mapping):
            return handler(value)
        problems = _unwritten(model, value, (), frozenset(may_omit))
        try:
            # strict at run time: the nested models too (a model's own strict config holds only its own fields).
            validated = model.model_validate(value, strict=True)
        except ValidationError as exc:
            seen = {(p["type"], p.get("loc")) for p in problems}
            for e in exc.errors(include_url=False):
                if (e["type"], e["loc"]) not in seen:
                    found = InitErrorDetails(type=e["type"], loc=e["loc"], input=e["input"])
                    if "ctx" in e:
                        found["ctx"] = e["ctx"]
                    problems.append(found)
        if problems:
            raise ValidationError.from_exception_data(model.__name__, problems)
        return validated
    return WrapValidator(validate)


def _unwritten(model: type[BaseModel], data: Mapping[Any, Any], loc: tuple[str | int, ...],
               may_omit: frozenset[str]) -> list[InitErrorDetails]:
    """The fields of ``model`` missing from ``data`` and the keys it has that are no field, nested
    models' too: a field's model, and each model in a field's list, tuple or dict of them."""
    problems: list[InitErrorDetails] = []
    keys = set()
    for name, field in model.model_fields.items():
        key = field.alias or name
        keys.add(key)
        if key not in data:
            if key not in may_omit:
                problems.append(InitErrorDetails(type="missing", loc=(*loc, key), input=dict(data)))
        else:
            problems += _unwritten_in(field.annotation, data[key], (*loc, key))
    problems += [InitErrorDetails(type="extra_forbidden", loc=(*loc, str(k)), input=v)
                 for k, v in data.items() if k not in keys]
    return problems


def _unwritten_in(annotation: Any, value: Any, loc: tuple[str | int, ...]) -> list[InitErrorDetails]:
    """:func:`_unwritten` of each model ``value`` holds as a value of ``annotation``: the model itself,
    or the items of a list or tuple, or the values of a dict, of models (nested, and through Optional,
    Union and Annotated), each at its own location (``[1]``, ``.key``). A value not of the shape the
    annotation holds models in is left to the model's strict validation, which names it."""
    shape = _shape_of(annotation, value)
    if shape is None:
        return []
    if isinstance(shape, type) and issubclass(shape, BaseModel):
        return _unwritten(shape, value, loc, frozenset())
    origin, args = get_origin(shape), get_args(shape)
    problems: list[InitErrorDetails] = []
    if origin in _MAPPINGS:
        for key, item in value.items():
            where = key if isinstance(key, (str, int)) and not isinstance(key, bool) else str(key)
            problems += _unwritten_in(args[1] if len(args) == 2 else Any, item, (*loc, where))
    else:
        for i, item in enumerate(value):
            if origin is tuple and not (len(args) == 2 and args[1] is Ellipsis):
                # A tuple of fixed positions: an item past them is the strict validation's to refuse.
                item_type = args[i] if i < len(args) else Any
            else:
                item_type = args[0] if args else Any
            problems += _unwritten_in(item_type, item, (*loc, i))
    return problems


# The containers a model may be held in, by their origin (list[X], typing.List[X], Sequence[X], ...).
_MAPPINGS = (dict, collections.abc.Mapping, collections.abc.MutableMapping)
_SEQUENCES = (list, tuple, collections.abc.Sequence, collections.abc.MutableSequence)


def _shape_of(annotation: Any, value: Any) -> Any:
    """The one alternative of ``annotation`` (through Annotated, Optional and Union) that holds models
    and matches ``value``'s kind (a mapping: a model or a dict; a list or tuple: a sequence), or None:
    none does, or more than one (a union of two models; pydantic's own choice between them is the
    strict validation's)."""
    if isinstance(value, Mapping):
        fits: tuple[Any, ...] = _MAPPINGS
    elif isinstance(value, (list, tuple)):
        fits = _SEQUENCES
    else:
        return None
    found = [a for a in _alternatives(annotation) if _model_in(a) is not None and (
        (isinstance(a, type) and issubclass(a, BaseModel) and fits is _MAPPINGS) or get_origin(a) in fits)]
    return found[0] if len(found) == 1 else None


def _alternatives(annotation: Any) -> list[Any]:
    """The types ``annotation`` may be: a Union's (``X | None``) members, Annotated's type, each flattened."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _alternatives(get_args(annotation)[0])
    if origin in (Union, types.UnionType):
        return [a for arg in get_args(annotation) for a in _alternatives(arg)]
    return [annotation]


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """A model a field holds (``X``, ``X | None``, ``list[X]``, ``dict[str, X]``, ...), or None."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return next((m for a in get_args(annotation) if (m := _model_in(a)) is not None), None)


# What reaches the SSH client (verify's ssh_config, ssh's and Ansible's command lines): the shapes
# the stack outputs already have (gpucluster/outputs.py), so that a hand-edited inventory cannot
# put a space, a newline or a leading '-' there and with it an option of its own (ProxyCommand).
SshHost = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9.:-]{0,252}$",
                               description="a host name, an IPv4 or an IPv6 address")]
SshLogin = Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_-]{0,31}$", description="a login name")]
KeyFile = Annotated[str, Field(pattern=r"^~?[A-Za-z0-9_./+@-]{1,4096}$", description="a private key's path")]


# Host variables the writer leaves out where the node has none (no key file, no bastion, no failure
# domain, no OSDs, no conformance of its own), so that the roles' defaults and Ansible's own apply.
_ABSENT_WHEN_NONE = ("ansible_ssh_private_key_file", "ansible_ssh_common_args", "gpucluster_failure_domain",
                     "gpucluster_osd_devices", "gpucluster_conformance")
# Host variables the model types but the writer never writes: a person adds them by hand.
HAND_SET_HOST_VARS = frozenset({"gpucluster_conformance"})


class InventoryHostConformance(BaseModel):
    """A host's own ``gpucluster_conformance``, added by hand: the DCGM diagnostic level to run on that
    node (a burn-in of one node), over the cluster's. The fleet margin compares the nodes with each
    other, so it is the cluster's alone (all.vars): a host's is refused rather than ignored."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    # The range the spec's Conformance model holds the cluster's level to (gpucluster/spec/facts.py).
    dcgm_diag_level: DcgmDiagLevel | None = None

    @model_validator(mode="before")
    @classmethod
    def _no_fleet_margin(cls, data: Any) -> Any:
        if isinstance(data, Mapping) and "fleet_margin" in data:
            raise ValueError("fleet_margin compares the nodes with each other, so a host cannot have its own: "
                             "set it in all.vars.gpucluster_conformance")
        return data

    def over(self, cluster: Conformance) -> Conformance:
        """The cluster's conformance with this host's own values over it."""
        return cluster if self.dcgm_diag_level is None else cluster.model_copy(
            update={"dcgm_diag_level": self.dcgm_diag_level})


class InventoryHost(_Open):
    """A node's host variables: the writer (gpucluster.inventory.build_inventory) builds this model and
    writes its :meth:`host_vars`, and every reader validates the file against it, so the host's
    shape is written here once. Variables the roles add by hand are kept as extras."""

    ansible_host: SshHost
    ansible_user: SshLogin = "root"
    ansible_port: int = Field(22, ge=1, le=65535)
    ansible_ssh_private_key_file: KeyFile | None = None
    # The way in, as Ansible takes it: "-o ProxyJump=user@host:port" behind a bastion, and nothing else.
    ansible_ssh_common_args: Annotated[str, Field(
        pattern=r"^-o ProxyJump=[a-z_][a-z0-9_-]{0,31}@[A-Za-z0-9][A-Za-z0-9.-]{0,252}:[0-9]{1,5}$")] | None = None
    gpucluster_node_name: Name
    gpucluster_pool: Name
    gpucluster_roles: list[Role] = Field(min_length=1)
    gpucluster_profile: Name
    gpucluster_platform: Name
    # The OS the spec declares for the node (its pool's, else the target's): the roles resolve
    # packages from it and GC-OS-001 compares /etc/os-release with it.
    gpucluster_os: OsId
    gpucluster_preinstalled: PreinstalledPolicy
    gpucluster_management_ip: IPv4
    gpucluster_fabric_ip: IPv4 | None
    gpucluster_fabric_interface: IfName | None = None
    # The compute rails whose addresses the target planned: the fabric_rails role configures each,
    # the GC-RAIL checks and the per-rail pair runs read them. Inventories written before rails
    # were exported have none.
    gpucluster_rails: list[Annotated[OutputRail, _as_written(OutputRail)]] = Field(default_factory=list)
    gpucluster_failure_domain: CrushBucketName | None = None
    # The node's pool's OSD disks (the ceph roles').
    gpucluster_osd_devices: list[DevPath] | None = None
    # How verify judges this node where it differs from the cluster (HAND_SET_HOST_VARS).
    gpucluster_conformance: InventoryHostConformance | None = None

    def host_vars(self) -> dict[str, Any]:
        """The variables as the inventory file holds them: an optional one that is None is left out."""
        return self.model_dump(exclude={k for k in _ABSENT_WHEN_NONE if getattr(self, k) is None})


class InventoryNode(BaseModel):
    """One node of ``gpucluster_nodes``, the list every host reads the others from (common's
    /etc/hosts, the Kubernetes roles' node list, ceph_client's monitors): its host variables'
    values, taken from them (:meth:`of`)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    name: Name
    management_ip: IPv4
    fabric_ip: IPv4 | None
    roles: list[Role] = Field(min_length=1)

    @classmethod
    def of(cls, host: InventoryHost) -> InventoryNode:
        return cls(name=host.gpucluster_node_name, management_ip=host.gpucluster_management_ip,
                   fabric_ip=host.gpucluster_fabric_ip, roles=host.gpucluster_roles)


# How the conformance suite judges the nodes: the spec's ``conformance:`` as the writer dumped it,
# read back through the spec's own model (its ranges and defaults are defined there once).
InventoryConformance = Conformance


class InventoryVars(_Open):
    gpucluster_inventory_schema: Literal[6]
    gpucluster_cluster_name: str
    gpucluster_stack: str
    gpucluster_target: Literal["aws", "azure", "oci", "baremetal", "lab"]
    # The spec's fabric, storage and Kubernetes sections, the bill of materials and the hardware
    # profiles in use, as the writer dumped the spec's own models (gpucluster.spec.models): read back
    # through the same models, so a reader holds their validators and defaults, defined there once.
    gpucluster_fabric: Fabric
    gpucluster_storage: Storage | None
    gpucluster_kubernetes: Kubernetes | None
    gpucluster_bom: Bom
    gpucluster_profiles: dict[Name, HardwareProfile]
    # The platforms in use as the writer resolved them (gpucluster.spec.cluster.platform_data: each
    # rail's device and netdev ranges expanded to exact names, which the spec's own model takes as
    # they are), read back through that model: its rails, floors and rules, defined there once.
    gpucluster_platforms: dict[Name, Platform]
    gpucluster_conformance: InventoryConformance
    # Inventories written before it was exported admit SSH from the management network alone.
    gpucluster_admin_cidrs: list[Cidr] = Field(default_factory=list)
    # The target's capabilities, access path and egress: the stack outputs' own models
    # (gpucluster/outputs.py), which the writer dumped, read back as written (_as_written).
    gpucluster_capabilities: Annotated[Capabilities, _as_written(Capabilities)]
    # Inventories written before they were exported: reached directly, routing out on their own.
    gpucluster_access: Annotated[OutputAccess, _as_written(OutputAccess, may_omit={"created"})] = OutputAccess()
    gpucluster_egress: Annotated[OutputEgress, _as_written(OutputEgress)] | None = None
    gpucluster_proxy_env: dict[str, str] = Field(default_factory=dict)
    gpucluster_sources: dict[str, str] = Field(default_factory=dict)
    gpucluster_nodes: list[InventoryNode]
    gpucluster_ofed_flavour: Literal["inbox", "doca"]
    gpucluster_gpu_mode: Literal["operator", "device_plugin", "none"]
    gpucluster_ceph_source: Literal["upstream", "distro"]
    # What the roles make where on a node and the suite looks for there, written once
    # (gpucluster.spec.contract): the roles' defaults read it, a role variable set in the inventory
    # still overrides it (NodeContract.overridden).
    gpucluster_contract: NodeContract


def spec_vars(fabric: Fabric, storage: Storage | None, kubernetes: Kubernetes | None, bom: Bom,
              profiles: Mapping[str, HardwareProfile]) -> dict[str, Any]:
    """The inventory variables that carry the spec's own models: the writer (gpucluster.inventory)
    writes these dumps, and InventoryVars reads each back through its model."""
    def dump(model: BaseModel | None) -> Any:
        # JSON mode: what YAML holds; by alias: the BOM's ``schema``, as bom.yaml spells it.
        return model.model_dump(mode="json", by_alias=True) if model is not None else None

    return {"gpucluster_fabric": dump(fabric), "gpucluster_storage": dump(storage),
            "gpucluster_kubernetes": dump(kubernetes), "gpucluster_bom": dump(bom),
            "gpucluster_profiles": {name: dump(profile) for name, profile in profiles.items()}}


class InventoryGroup(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    hosts: dict[Name, None] = Field(default_factory=dict)


class Inventory(BaseModel):
    """The ``all`` group of the inventory file."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
    vars: InventoryVars
    hosts: dict[Name, InventoryHost] = Field(min_length=1)
    children: dict[str, InventoryGroup] = Field(default_factory=dict)

    def groups(self) -> dict[str, tuple[str, ...]]:
        return {name: tuple(body.hosts) for name, body in self.children.items()}

    def kubeconfig_file(self, inventory_file: Path) -> Path:
        """Where the kubernetes_control_plane role fetches the cluster-admin kubeconfig for the inventory
        at ``inventory_file`` (:meth:`NodeContract.kubeconfig_file`): its first control-plane node
        fetches it (the role's ``__kubernetes_control_plane_first``: the first of ``gpucluster_nodes``
        with that role), so that host's variable, then all.vars', moves it."""
        first = next((n.name for n in self.vars.gpucluster_nodes if "control_plane" in n.roles), None)
        host = next((h for h in self.hosts.values() if h.gpucluster_node_name == first), None)
        sources = [] if host is None else [host.model_extra or {}]
        return self.vars.gpucluster_contract.kubeconfig_file(Path(inventory_file).resolve().parent, *sources,
                                                             self.vars.model_extra or {})


def validate_inventory(data: Any, source: str) -> Inventory:
    """The inventory data as the typed model, or one InputError naming every problem."""
    root = data.get("all") if isinstance(data, dict) else None
    if not isinstance(root, dict):
        raise InputError(f"not a gpucluster inventory: no top-level 'all' mapping; {_REGENERATE}", source=source)
    found = (root.get("vars") or {}).get(SCHEMA_VAR) if isinstance(root.get("vars"), dict) else None
    if found != SCHEMA_VERSION:
        raise InputError(f"all.vars.{SCHEMA_VAR}: {found!r}, but this gpucluster reads version {SCHEMA_VERSION}; "
                         f"{_REGENERATE}", source=source)
    problems = _reference_problems(root) + _rule_problems(root)
    try:
        inventory = Inventory.model_validate(root)
    except ValidationError as exc:
        problems = validation_problems(exc, Inventory, "all") + problems
    if problems:
        raise InputError(problems, source=source)
    return inventory


def _reference_problems(root: dict[str, Any]) -> list[str]:
    """Hosts whose profile or platform the inventory does not carry, group members that are no host: checked
    on the raw data, so they are reported beside any type problem, all at once."""
    hosts = _mapping(root.get("hosts"))
    problems = []
    for var, table in (("gpucluster_profile", "gpucluster_profiles"), ("gpucluster_platform", "gpucluster_platforms")):
        known = _mapping(root.get("vars")).get(table)
        for name, hv in hosts.items():
            value = hv.get(var) if isinstance(hv, dict) else None
            if isinstance(value, str) and isinstance(known, dict) and value not in known:
                problems.append(f"all.hosts.{name}.{var}: {value!r} is not in all.vars.{table}")
    children = _mapping(root.get("children"))
    for group, body in children.items():
        members = body.get("hosts") if isinstance(body, dict) else None
        unknown = sorted(set(members or {}) - set(hosts)) if isinstance(members, dict) else []
        if unknown:
            problems.append(f"all.children.{group}.hosts: {', '.join(map(str, unknown[:5]))} not in all.hosts")
    return problems


def _rule_problems(root: dict[str, Any]) -> list[str]:
    """What spans fields no one model holds: subnet managers that are hosts of this inventory, a RoCE
    fabric's QoS where no platform's provider sets it, one management address per host.

    Each value on its own (the BOM's entries, the fabric's type, MTU and networks) is the spec's
    models' to judge (InventoryVars types them); these rules relate a value to another section (the
    fabric to the hosts, the fabric to the platforms, host to host), which no field's model sees.
    The spec's rules (gpucluster/spec/rules.py) held when the inventory was written; these hold the
    file to them again, because a reader cannot know who edited it since. Values of the wrong type
    are left to the model's type problems, reported beside these.
    """
    all_vars = _mapping(root.get("vars"))
    hosts = _mapping(root.get("hosts"))
    problems = []
    fabric = all_vars.get("gpucluster_fabric")
    if isinstance(fabric, dict):
        where = "all.vars.gpucluster_fabric"
        managers = fabric.get("subnet_managers")
        if isinstance(managers, list):
            # Whether a fabric needs subnet managers of its own depends on the target (a cloud runs
            # them): a spec rule (gpucluster/spec/rules.py), checked when the inventory is written.
            strangers = [str(m) for m in managers if m not in hosts]
            if strangers:
                problems.append(f"{where}.subnet_managers: {', '.join(strangers[:5])} not in all.hosts")
        provider = any(isinstance(p, dict) and p.get("provider_qos")
                       for p in _mapping(all_vars.get("gpucluster_platforms")).values())
        if fabric.get("type") == "roce" and not isinstance(fabric.get("roce_qos"), dict) and not provider:
            problems.append(f"{where}.roce_qos: a RoCE fabric needs its QoS settings (a mapping), unless its "
                            "platform's provider sets them (provider_qos)")
    owners: dict[str, str] = {}
    for name, hv in hosts.items():
        address = hv.get("gpucluster_management_ip") if isinstance(hv, dict) else None
        if not isinstance(address, str):
            continue
        if address in owners:
            problems.append(f"all.hosts.{name}.gpucluster_management_ip: {address} is also {owners[address]}'s")
        else:
            owners[address] = str(name)
    return problems


class _InventoryLoader(getattr(yaml, "CSafeLoader", yaml.SafeLoader)):  # type: ignore[misc]
    """Reads an inventory gpucluster.inventory wrote: ``!unsafe`` strings come back as plain strings."""


def _construct_unsafe(loader: yaml.SafeLoader, node: yaml.Node) -> Any:
    if isinstance(node, yaml.ScalarNode):
        return loader.construct_scalar(node)
    if isinstance(node, yaml.SequenceNode):
        return loader.construct_sequence(node, deep=True)
    return loader.construct_mapping(node, deep=True)  # type: ignore[arg-type]


_InventoryLoader.add_constructor(UNSAFE_TAG, _construct_unsafe)


def parse_inventory_text(text: str) -> Any:
    """The data of an inventory file's text (``!unsafe`` tags read as plain strings)."""
    return yaml.load(text, Loader=_InventoryLoader)


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
