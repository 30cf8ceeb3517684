"""The stack outputs every target exports: the contract between provisioning and configuration.

``pulumi stack output --json`` prints a mapping of output names to values; every target
(lab, aws, azure, oci, baremetal) exports the names below with the same shapes, and
:mod:`gpucluster.inventory` turns them into the Ansible inventory without knowing the target.
"""

from __future__ import annotations

import ipaddress
import json
import math
import re
from collections import Counter
from itertools import accumulate
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from gpucluster.errors import InputError
from gpucluster.spec.cluster import MAX_NODES, Cluster
from gpucluster.spec.facts import FabricType, Role
from gpucluster.spec.loader import MAX_DEPTH, MAX_INT_DIGITS, capped, read_bounded, validation_problems
from gpucluster.spec.models import (
    AbsPath,
    Bastion,
    Cidr,
    CrushBucketName,
    HostName,
    HttpUrl,
    IfName,
    IPv4,
    MirrorKey,
    Name,
    NoProxyEntry,
    OsId,
    ProxyUrl,
    SshUser,
)

SCHEMA_VERSION = 1
# 50,000 nodes (MAX_NODES) as `pulumi stack output --json` prints them come to about 20 MB.
MAX_OUTPUTS_BYTES = 32 << 20


class _Out(BaseModel):
    # Outputs come from machines, not people: unknown keys are tolerated so a newer
    # target may export more, but every key we read is typed.
    model_config = ConfigDict(extra="ignore", frozen=True)


class OutputRail(_Out):
    """An addressed compute rail of a node: the interface, its address, the rail's subnet."""

    interface: IfName
    address: IPv4
    cidr: Cidr


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
    instance_id: str | None = Field(None, pattern=r"^[A-Za-z0-9/][A-Za-z0-9_.:/()-]{0,511}$")
    failure_domain: CrushBucketName | None = None
    # Compute rails whose addresses the spec planned (subnet_per_rail: the lab's, a DGX H100's RoCE
    # ports); none where the provider or the site addresses them. At most 64, as a platform's rail has at most 64 ports.
    rails: list[OutputRail] = Field(default_factory=list, max_length=64)


class OutputFabric(_Out):
    type: FabricType
    mtu: int
    management_cidr: Cidr
    fabric_cidr: Cidr


class OutputStorage(_Out):
    monitors: list[Name]
    osd_hosts: list[Name]
    cephfs_mount_path: AbsPath | None = None


class LinkFloors(_Out):
    """What a lab's links carry (an MPI all-reduce over TCP between namespaces of one host)."""

    allreduce_inter_busbw_gbps: float = Field(gt=0)
    allreduce_inter_verdict_bytes: int = Field(ge=1)


class Capabilities(_Out):
    """What the target's nodes can do, stated by the target so that no role asks which target it runs on.

    The defaults describe a real machine (a cloud instance, a bare-metal server); a target whose
    nodes can do less says so in its outputs (the lab: :data:`LAB_CAPABILITIES`). The inventory
    carries them as ``gpucluster_capabilities`` and the roles' defaults read them.
    """

    # Room and bandwidth for the GPU software stack (driver user space, CUDA, NCCL, gpu-burn: several GB).
    heavy_packages: bool = True
    # NVIDIA's package repositories (CUDA, driver, DCGM) are reachable from the nodes.
    nvidia_repo: bool = True
    # The nodes' apt sources already list Debian's contrib, non-free and non-free-firmware components.
    debian_nonfree_sources: bool = False
    # /dev/fuse exists: the kernel or the container manager provides it.
    fuse_device: bool = True
    # The nodes' disks are small and shared with other machines (Ceph monitors warn later about free space).
    small_disks: bool = False
    # The nodes have the GPUs their hardware profile lists. False where the machines cannot (lab
    # nodes, a platform twin of a GPU server): what only a GPU needs (the container toolkit the
    # profile's GPUs require) is then not required, and the GPU checks skip, saying why.
    gpu_devices: bool = True
    # The nodes have the RDMA devices (HCAs, EFA) their platform lists on its rails. False where they
    # cannot (a twin's ports are veth pairs): the checks that need an RDMA device skip, saying why.
    rdma_devices: bool = True
    # The OS the nodes run where the target cannot give them the spec's (a platform twin boots
    # Debian 12, the only archive the lab reaches): GC-OS-001 skips, saying so; the roles still
    # resolve every OS-specific choice for the spec's OS. None: the spec's.
    runs_os: OsId | None = None
    # The fabric floors in place of the platform's, where the nodes' links are not the platform's
    # (a twin's veths on one host: the platform's floors are for GPUs over RDMA, which it has not).
    link_floors: LinkFloors | None = None
    # The nodes can run a kubelet and fetch Kubernetes' packages and images (pkgs.k8s.io, the
    # registries, or their mirrors). False for the lab's containers (systemd-nspawn without cgroup
    # delegation, no route to pkgs.k8s.io): `up` then skips its kubernetes stage, saying why.
    kubernetes_nodes: bool = True


# The lab's nodes: systemd-nspawn containers on one host, sharing its disk, with no route to NVIDIA,
# Debian's non-free components in their sources from the start and no /dev/fuse of their own.
LAB_CAPABILITIES = Capabilities(heavy_packages=False, nvidia_repo=False, debian_nonfree_sources=True,
                                fuse_device=False, small_disks=True, gpu_devices=False, rdma_devices=False,
                                kubernetes_nodes=False)


def target_capabilities(cluster: Cluster) -> Capabilities:
    """What the nodes of the spec's target can do (exported by the target with its outputs)."""
    return LAB_CAPABILITIES if cluster.spec.target.kind == "lab" else Capabilities()


class OutputBastion(_Out):
    """The jump host every SSH connection to the nodes goes through."""

    host: HostName
    user: SshUser
    port: int = Field(22, ge=1, le=65535)
    # Where the nodes see its connections come from: their firewall admits SSH from here.
    source_cidr: Cidr | None = None


class OutputAccess(_Out):
    """How the controller reaches the nodes: directly, or through ``bastion``."""

    mode: Literal["direct", "bastion"] = "direct"
    bastion: OutputBastion | None = None
    # The stack made the bastion (it goes with the stack: `down` forgets its host key), or it existed.
    created: bool = False

    @model_validator(mode="after")
    def _bastion_named(self) -> OutputAccess:
        if (self.mode == "bastion") != (self.bastion is not None):
            raise ValueError("a bastion is named exactly when mode is bastion")
        return self

    def jump(self) -> str | None:
        """``user@host:port`` of the bastion (ssh's ProxyJump), or None when the nodes are reached directly."""
        b = self.bastion
        return f"{b.user}@{b.host}:{b.port}" if b is not None else None


class OutputEgress(_Out):
    """How the nodes reach what they download (the spec's ``target.egress``; a target without
    one routes out through its own network: ``nat``)."""

    mode: Literal["nat", "proxy", "none"] = "nat"
    http_proxy: ProxyUrl | None = None
    https_proxy: ProxyUrl | None = None
    no_proxy: list[NoProxyEntry] = Field(default_factory=list)
    mirrors: dict[MirrorKey, HttpUrl] = Field(default_factory=dict)


def bastion_source_cidr(bastion: Bastion) -> str | None:
    """Where an existing bastion's connections to the nodes come from: its ``source_cidr``, else
    its host where that is an IPv4 address (the spec rules require one of them)."""
    if bastion.source_cidr:
        return bastion.source_cidr
    try:
        return f"{ipaddress.IPv4Address(bastion.host or '')}/32"
    except ValueError:
        return None


def access_outputs(cluster: Cluster, ssh_user: str, bastion_address: tuple[str, str | None] | None) -> dict[str, Any]:
    """The access path as the outputs carry it: from the spec, with a created bastion's public and
    private addresses (``bastion_address``) as the target assigned them."""
    access = getattr(cluster.spec.target, "access", None)
    if access is None or access.mode == "direct" or access.bastion is None:
        return {"mode": "direct", "bastion": None, "created": False}
    bastion = access.bastion
    if bastion.create:
        if bastion_address is None:
            return {"mode": "bastion", "bastion": None, "created": True}
        public, private = bastion_address
        return {"mode": "bastion", "bastion": {"host": public, "user": ssh_user, "port": 22,
                                               "source_cidr": f"{private}/32" if private else None},
                "created": True}
    return {"mode": "bastion", "bastion": {"host": bastion.host, "user": bastion.user, "port": bastion.port,
                                           "source_cidr": bastion_source_cidr(bastion)}, "created": False}


def egress_outputs(cluster: Cluster) -> dict[str, Any]:
    egress = getattr(cluster.spec.target, "egress", None)
    return (egress.model_dump() if egress is not None else OutputEgress().model_dump())


class StackOutputs(_Out):
    schema_version: Literal[1] = 1
    cluster_name: Name
    target: Literal["aws", "azure", "oci", "baremetal", "lab"]
    nodes: list[OutputNode] = Field(min_length=1)
    fabric: OutputFabric
    storage: OutputStorage | None = None
    # Outputs written before targets exported capabilities describe real machines.
    capabilities: Capabilities = Capabilities()
    # A key file path as Ansible reads it: absolute, or relative, or under ~; no Jinja or shell syntax.
    ssh_private_key_file: str | None = Field(None, pattern=r"^~?[A-Za-z0-9_./+@-]{1,4096}$")
    # Outputs written before targets exported them: reached directly, routing out on their own.
    access: OutputAccess = OutputAccess()
    egress: OutputEgress = OutputEgress()


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
    capabilities: Capabilities | None = None,
    bastion_address: tuple[str, str | None] | None = None,
) -> dict[str, Any]:
    """The outputs mapping a target exports, from the spec plus what the target assigned.

    ``addresses`` maps node name to (management, fabric) address where the target
    assigned its own; by default the spec's planned addresses are used.
    ``fabric_interfaces`` names a node's fabric interface where it differs from the
    cluster-wide ``fabric_interface`` (storage VMs without the GPU nodes' HCAs, say).
    ``capabilities`` defaults to what the spec's target's nodes can do (:func:`target_capabilities`).
    ``bastion_address``: the public and private address of a bastion the target created.
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
                "rails": [r.as_dict() for r in node.rails],
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
        "capabilities": (capabilities or target_capabilities(cluster)).model_dump(),
        "access": access_outputs(cluster, ssh_user, bastion_address),
        "egress": egress_outputs(cluster),
    }


def parse_outputs(raw: Any, source: str) -> StackOutputs:
    nodes = raw.get("nodes") if isinstance(raw, dict) else None
    if isinstance(nodes, list) and len(nodes) > MAX_NODES:
        raise InputError(f"outputs.nodes: {len(nodes):,} nodes; a cluster has at most {MAX_NODES:,}", source=source)
    try:
        # strict: outputs come from our own targets; a "22" or 9000.0 there is a bug to surface, not coerce.
        return StackOutputs.model_validate(raw, strict=True)
    except ValidationError as exc:
        raise InputError(capped(validation_problems(exc, StackOutputs, "outputs")), source=source) from None


# --- reading JSON strictly ------------------------------------------------------------------------

# A JSON string, escapes included; the closing quote is optional so that an unterminated
# string still matches once (to the end) and the scan stays linear.
_JSON_STRING = re.compile(r'"[^"\\]*(?:\\.[^"\\]*)*"?', re.DOTALL)
_NOT_BRACKET = re.compile(r"[^\[\]{}]+")
_STEP = {"[": 1, "{": 1, "]": -1, "}": -1}


def json_depth(text: str) -> int:
    """How deep a JSON text nests, read without parsing it (json.loads recurses per level)."""
    brackets = _NOT_BRACKET.sub("", _JSON_STRING.sub("", text))
    return max(accumulate(map(_STEP.__getitem__, brackets)), default=0)


class _Bad:
    """What json.loads could not take as a value; reported with its path after the parse."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


def _parse_constant(name: str) -> _Bad:
    return _Bad(f"{name} is not a JSON number")


def _parse_float(text: str) -> float | _Bad:
    value = float(text)
    if math.isfinite(value):
        return value
    shown = text if len(text) <= 32 else text[:24] + "..."
    return _Bad(f"the number {shown} is out of range")


def _parse_int(text: str) -> int | _Bad:
    digits = len(text.lstrip("-"))
    if digits > MAX_INT_DIGITS:
        return _Bad(f"an integer of {digits:,} digits; at most {MAX_INT_DIGITS} digits are read")
    return int(text)


def _json_path(path: tuple[str | int, ...]) -> str:
    out = "outputs"
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif re.fullmatch(r"[A-Za-z0-9_-]{1,64}", part):
            out += f".{part}"
        else:
            out += f"[{json.dumps(part[:48] + ('...' if len(part) > 48 else ''))}]"
    return out


def parse_json(text: str, source: str) -> Any:
    """JSON data, refusing what json.loads lets through: repeated keys, NaN, Infinity,
    numbers out of range, integers too long to convert, and nesting past MAX_DEPTH.
    Each problem is one line naming its path in the document.
    """
    depth = json_depth(text)
    if depth > MAX_DEPTH:
        raise InputError(f"nested {depth:,} levels deep; at most {MAX_DEPTH} levels are read", source=source)
    repeated: dict[int, tuple[dict[str, Any], list[str]]] = {}
    odd = False

    def pairs_hook(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
        nonlocal odd
        obj = dict(pairs)
        if len(obj) != len(pairs):
            # Kept with the object: its id is only unique while the object lives.
            counts = Counter(key for key, _ in pairs)
            repeated[id(obj)] = (obj, [key for key, n in counts.items() if n > 1])
            odd = True
        return obj

    def flagged(value: _Bad) -> _Bad:
        nonlocal odd
        odd = True
        return value

    try:
        raw = json.loads(
            text,
            object_pairs_hook=pairs_hook,
            parse_constant=lambda name: flagged(_parse_constant(name)),
            parse_float=lambda s: v if not isinstance(v := _parse_float(s), _Bad) else flagged(v),
            parse_int=lambda s: v if not isinstance(v := _parse_int(s), _Bad) else flagged(v),
        )
    except json.JSONDecodeError as exc:
        raise InputError(
            f"line {exc.lineno}, column {exc.colno}: not JSON ({exc.msg}); "
            "expected what `pulumi stack output --json` prints",
            source=source,
        ) from None
    except RecursionError:  # bounded by json_depth above; kept so no traceback can escape
        raise InputError(f"nested too deep; at most {MAX_DEPTH} levels are read", source=source) from None
    if odd:
        raise InputError(capped(_json_problems(raw, repeated)), source=source)
    return raw


def _json_problems(raw: Any, repeated: dict[int, tuple[dict[str, Any], list[str]]]) -> list[str]:
    problems: list[str] = []
    todo: list[tuple[tuple[str | int, ...], Any]] = [((), raw)]
    while todo:
        path, value = todo.pop()
        if isinstance(value, _Bad):
            problems.append(f"{_json_path(path)}: {value.reason}")
        elif isinstance(value, dict):
            if id(value) in repeated:
                for key in repeated[id(value)][1]:
                    shown = repr(key if len(key) <= 48 else key[:48] + "...")
                    problems.append(f"{_json_path(path)}: duplicate key {shown}; a key may appear once in an object")
            todo += [((*path, k), v) for k, v in reversed(value.items())]
        elif isinstance(value, list):
            todo += [((*path, i), v) for i, v in reversed(list(enumerate(value)))]
    return problems


def load_outputs(path: str | Path) -> StackOutputs:
    file = Path(path)
    text = read_bounded(file, "stack outputs file", MAX_OUTPUTS_BYTES)
    return parse_outputs(parse_json(text, str(file)), str(file))
