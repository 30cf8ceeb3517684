"""What every target shares: pool classification, tags, and the stack outputs as pulumi Outputs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import pulumi

from gpucluster.outputs import bastion_source_cidr, build_outputs
from gpucluster.spec import Cluster, Node
from gpucluster.spec.models import Bastion, NodePool

PoolKind = Literal["gpu", "storage", "service"]

# Tag keys the policy rules read back from the recorded resources (and an operator reads in
# the cloud console): they say which cluster, pool and roles a machine or subnet belongs to.
TAG_CLUSTER = "gpucluster-cluster"
TAG_POOL = "gpucluster-pool"
TAG_ROLES = "gpucluster-roles"
TAG_PURPOSE = "gpucluster-purpose"
# Says how a VM's disks are encrypted where the cloud encrypts them without being asked
# (Azure managed disks: server-side encryption with platform-managed keys), so the
# disks-encrypted rule sees a decision rather than an omission.
TAG_DISK_ENCRYPTION = "gpucluster-disk-encryption"
# How a node's image was chosen: `pinned` (an ID the stack file names) or `lookup` (the newest
# image matching a name at `pulumi up`), for the image-pinned policy rule.
TAG_IMAGE = "gpucluster-image"
# Instances ignore later changes of their image: a new pin (or a lookup that finds a newer image)
# never replaces a running node; nodes created after the change boot the new image. Property names
# as the providers' schemas spell them.
# https://www.pulumi.com/docs/iac/concepts/options/ignorechanges/
IMAGE_IGNORE_CHANGES: dict[str, list[str]] = {
    "aws": ["ami"],
    "azure": ["sourceImageReference"],
    "oci": ["sourceDetails.sourceId"],
}

# Ports that reach a node's management plane or a service that must never face the internet:
# what the stacks open (SSH, the Kubernetes API) and what the roles run on every node. Kubernetes
# ports from kubeadm's "Ports and Protocols" table; Ceph's from the roles (ceph_common vars) and
# the manager modules' defaults (dashboard 8443, prometheus 9283).
MANAGEMENT_PORTS: dict[int, str] = {
    22: "SSH",
    623: "IPMI/RMCP (BMC)",
    2379: "etcd client",
    2380: "etcd peer",
    3300: "Ceph monitor (msgr2)",
    3389: "RDP",
    6443: "Kubernetes API",
    6789: "Ceph monitor (msgr1)",
    8443: "Ceph dashboard",
    9100: "node_exporter",
    9283: "Ceph manager metrics",
    9400: "DCGM exporter",
    10250: "kubelet",
}
# Port ranges of the same kind. Ceph's OSD, manager and MDS daemons bind in 6800-7300 (the
# ms_bind_port_min/ms_bind_port_max defaults: Ceph's "Network Configuration Reference",
# https://docs.ceph.com/en/latest/rados/configuration/network-config-ref/); Kubernetes NodePort
# services take 30000-32767 (kube-apiserver's --service-node-port-range default; kubeadm's "Ports
# and Protocols", https://kubernetes.io/docs/reference/networking/ports-and-protocols/).
MANAGEMENT_PORT_RANGES: dict[tuple[int, int], str] = {
    (6800, 7300): "Ceph OSD, manager and MDS daemons",
    (30000, 32767): "Kubernetes NodePort services",
}


def pool_kind(pool: NodePool) -> PoolKind:
    """A pool with GPUs is a GPU pool; else one with the storage role is storage; else a service pool."""
    if "gpu" in pool.roles:
        return "gpu"
    if "storage" in pool.roles:
        return "storage"
    return "service"


@dataclass(frozen=True)
class PoolLayout:
    pool: NodePool
    kind: PoolKind
    nodes: tuple[Node, ...]
    instance_type: str | None


def pools(cluster: Cluster, target: Literal["aws", "azure", "oci"] | None = None) -> list[PoolLayout]:
    out = []
    for pool in cluster.spec.node_pools:
        nodes = tuple(n for n in cluster.nodes if n.pool == pool.name)
        # Callers name their own cluster's target; the resolution lives in Cluster.
        itype = cluster.instance_type(pool.name) if target is not None else pool.instance_type
        out.append(PoolLayout(pool=pool, kind=pool_kind(pool), nodes=nodes, instance_type=itype))
    return out


def node_tags(cluster: Cluster, node: Node, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    return {
        **(extra or {}),
        "Name": node.name,
        TAG_CLUSTER: cluster.name,
        TAG_POOL: node.pool,
        TAG_ROLES: ",".join(node.roles),
    }


def ssh_keys(key: str | None) -> tuple[str, ...]:
    return (key.strip(),) if key else ()


@dataclass(frozen=True)
class NodeReach:
    """How a cloud target's nodes are reached (the spec's ``target.access``), as the stacks apply it.

    ``direct``: the nodes' security rules admit the admin ports (SSH, the Kubernetes API) from
    admin_cidrs. Through a bastion: no admin port from admin_cidrs at all; SSH from the bastion
    alone (a created one's own group, or an existing one's ``ssh_cidrs``).
    """

    mode: Literal["direct", "bastion"]
    bastion: Bastion | None

    @property
    def create_bastion(self) -> bool:
        return self.mode == "bastion" and self.bastion is not None and self.bastion.create

    @property
    def ssh_cidrs(self) -> tuple[str, ...]:
        """An existing bastion's source, which the nodes admit SSH from (none for a created one)."""
        if self.mode != "bastion" or self.bastion is None or self.bastion.create:
            return ()
        return (bastion_source_cidr(self.bastion),) if bastion_source_cidr(self.bastion) else ()

    def admin_ports(self, cluster: Cluster) -> tuple[int, ...]:
        if self.mode == "bastion":
            return ()
        return (22, 6443) if cluster.spec.kubernetes and cluster.spec.kubernetes.enabled else (22,)

    def bastion_instance_type(self, default: str) -> str:
        return (self.bastion.instance_type if self.bastion else None) or default


def node_reach(target: Any) -> NodeReach:
    access = target.access
    return NodeReach(mode=access.mode, bastion=access.bastion)


def stack_outputs(
    cluster: Cluster,
    *,
    ssh_user: str,
    addresses: Mapping[str, tuple[pulumi.Input[str], pulumi.Input[str] | None]],
    instance_ids: Mapping[str, pulumi.Input[str]] | None = None,
    failure_domains: Mapping[str, str] | None = None,
    fabric_interface: str | None = None,
    fabric_interfaces: Mapping[str, str | None] | None = None,
    ssh_private_key_file: str | None = None,
    bastion: tuple[pulumi.Input[str], pulumi.Input[str]] | None = None,
) -> dict[str, pulumi.Output[Any]]:
    """The outputs contract of :func:`gpucluster.outputs.build_outputs`, each value a pulumi Output.

    Addresses and ids a cloud assigns are Outputs; they are resolved all together once and the
    plain mapping is built by the same function every target and the inventory use. ``bastion``:
    the public and private address of a bastion the stack created.
    """
    names = [n.name for n in cluster.nodes]
    ids = instance_ids or {}
    flat: list[pulumi.Input[Any] | None] = list(bastion) if bastion else [None, None]
    for name in names:
        mgmt, fab = addresses[name]
        flat += [mgmt, fab, ids.get(name)]

    def _build(everything: list[Any]) -> dict[str, Any]:
        made = (everything[0], everything[1]) if bastion else None
        values = everything[2:]
        resolved_addr: dict[str, tuple[str, str | None]] = {}
        resolved_ids: dict[str, str] = {}
        for i, name in enumerate(names):
            mgmt, fab, iid = values[3 * i : 3 * i + 3]
            resolved_addr[name] = (mgmt, fab)
            if iid is not None:
                resolved_ids[name] = iid
        return build_outputs(
            cluster,
            ssh_user=ssh_user,
            addresses=resolved_addr,
            fabric_interface=fabric_interface,
            fabric_interfaces=dict(fabric_interfaces or {}),
            instance_ids=resolved_ids,
            failure_domains=dict(failure_domains or {}),
            ssh_private_key_file=ssh_private_key_file,
            bastion_address=made,
        )

    combined = pulumi.Output.all(*flat).apply(_build)
    keys = build_outputs(cluster, ssh_user=ssh_user).keys()
    return {key: combined.apply(lambda d, k=key: d[k]) for key in keys}


def storage_facts(cluster: Cluster) -> dict[str, Any]:
    """What the policy rules need about Ceph, carried as props of the StorageNodes component."""
    storage = cluster.spec.storage
    return {
        "cephPools": [{"name": p.name, "size": p.size} for p in storage.pools] if storage else [],
        "monitors": list(storage.monitors) if storage else [],
    }
