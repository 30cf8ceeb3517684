"""Bare-metal components: no cloud API, so every resource is a component carrying what the
site's provisioning (PXE, BMC) needs: BMC address, MACs, disks, rendered user data; and the
fabric described for the roles (subnet-manager nodes, partitions, RoCE QoS)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import pulumi

from gpucluster.spec import Cluster, Node
from gpucluster.spec.models import BareMetalNode

from .common import storage_facts


@dataclass(frozen=True)
class FabricArgs:
    cluster: Cluster
    members: tuple[str, ...]


class Fabric(pulumi.ComponentResource):
    def __init__(self, name: str, args: FabricArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        spec = args.cluster.spec.fabric
        props: dict[str, Any] = {
            "type": spec.type,
            "mtu": spec.mtu,
            "networks": [
                {"name": "management", "cidr": spec.management_cidr, "purpose": "management,storage"},
                {"name": "fabric", "cidr": spec.fabric_cidr, "purpose": "gpu"},
            ],
            "members": list(args.members),
            "subnetManagers": list(spec.subnet_managers),
            "partitions": [
                {"name": p.name, "pkey": p.pkey, "ipoib": p.ipoib, "members": list(args.members)}
                for p in spec.partitions
            ],
            "roceQos": spec.roce_qos.model_dump() if spec.roce_qos else None,
        }
        super().__init__("gpucluster:baremetal:Fabric", name, props, opts)
        self.register_outputs({})


@dataclass(frozen=True)
class MachineArgs:
    node: Node
    declared: BareMetalNode
    fabric: str
    provisioning: str
    user_data: str
    network_config: str | None


class Machine(pulumi.ComponentResource):
    def __init__(self, name: str, args: MachineArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        d = args.declared
        super().__init__(
            "gpucluster:baremetal:Machine",
            name,
            {
                "hostname": args.node.name,
                "roles": list(args.node.roles),
                "pool": args.node.pool,
                "bmcAddress": d.bmc_address,
                "managementMac": d.management_mac,
                "fabricMacs": list(d.fabric_macs),
                "disks": list(d.disks),
                "rack": d.rack,
                "fabric": args.fabric,
                "provisioning": args.provisioning,
                "userData": args.user_data,
                "networkConfig": args.network_config,
            },
            opts,
        )
        self.user_data = args.user_data
        self.register_outputs({})


@dataclass(frozen=True)
class PoolArgs:
    cluster: Cluster
    machines: Sequence[MachineArgs]


class _Pool(pulumi.ComponentResource):
    token = ""

    def __init__(
        self, name: str, args: PoolArgs, props: Mapping[str, Any], opts: pulumi.ResourceOptions | None
    ) -> None:
        super().__init__(self.token, name, dict(props), opts)
        self.machines = {
            m.node.name: Machine(f"{name}-{m.node.name}", m, pulumi.ResourceOptions(parent=self)) for m in args.machines
        }
        self.register_outputs({})


class GpuNodePool(_Pool):
    token = "gpucluster:baremetal:GpuNodePool"

    def __init__(self, name: str, args: PoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(name, args, {"count": len(args.machines)}, opts)


class StorageNodes(_Pool):
    """Ceph hosts; racks are the failure domains where the spec names them."""

    token = "gpucluster:baremetal:StorageNodes"

    def __init__(self, name: str, args: PoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        racks = {m.declared.rack for m in args.machines if m.declared.rack}
        all_racks = {n.rack for n in getattr(args.cluster.spec.target, "nodes", []) if n.rack}
        super().__init__(
            name, args, {**storage_facts(args.cluster), "failureDomainCount": len(all_racks | racks)}, opts
        )


class ServiceNodes(_Pool):
    token = "gpucluster:baremetal:ServiceNodes"

    def __init__(self, name: str, args: PoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(name, args, {"count": len(args.machines)}, opts)
