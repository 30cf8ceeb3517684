"""Azure components: the network (VNet, management subnet, NSG), ND H100 v5 GPU pools as one
scale set in a single placement group (InfiniBand reaches only within it), storage VMs over zones."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import pulumi
import pulumi_azure as azure

from gpucluster.spec import Cluster, Node

from .common import IMAGE_IGNORE_CHANGES, TAG_DISK_ENCRYPTION, storage_facts

# A scale set with single_placement_group holds at most 100 VMs; InfiniBand connects only
# the VMs of one placement group.
MAX_PLACEMENT_GROUP = 100


@dataclass(frozen=True)
class FabricArgs:
    cluster_name: str
    location: str
    resource_group: str
    management_cidr: str
    fabric_cidr: str
    admin_cidrs: tuple[str, ...]
    admin_ports: tuple[int, ...]
    tags: Mapping[str, str] = field(default_factory=dict)


class Fabric(pulumi.ComponentResource):
    """Resource group, VNet with the management subnet and its NSG. The InfiniBand fabric has no
    Azure resource: its IPoIB network (fabric_cidr) is declared in the props for the policy rules."""

    def __init__(self, name: str, args: FabricArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(
            "gpucluster:azure:Fabric",
            name,
            {
                "networks": [
                    {"name": "management", "cidr": args.management_cidr, "purpose": "management,storage"},
                    {"name": "infiniband", "cidr": args.fabric_cidr, "purpose": "gpu"},
                ]
            },
            opts,
        )
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        self.resource_group = azure.core.ResourceGroup(
            f"{name}-rg", name=args.resource_group, location=args.location, tags=tags, opts=child
        )
        rg = self.resource_group.name
        self.vnet = azure.network.VirtualNetwork(
            f"{name}-vnet",
            resource_group_name=rg,
            location=args.location,
            address_spaces=[args.management_cidr],
            tags=tags,
            opts=child,
        )
        self.subnet = azure.network.Subnet(
            f"{name}-mgmt",
            resource_group_name=rg,
            virtual_network_name=self.vnet.name,
            address_prefixes=[args.management_cidr],
            opts=child,
        )
        rules = [
            {
                "name": f"admin-{port}",
                "priority": 100 + i,
                "direction": "Inbound",
                "access": "Allow",
                "protocol": "Tcp",
                "source_port_range": "*",
                "destination_port_range": str(port),
                "source_address_prefixes": list(args.admin_cidrs),
                "destination_address_prefix": "*",
            }
            for i, port in enumerate(args.admin_ports)
            if args.admin_cidrs
        ]
        rules.append(
            {
                "name": "within-vnet",
                "priority": 200,
                "direction": "Inbound",
                "access": "Allow",
                "protocol": "*",
                "source_port_range": "*",
                "destination_port_range": "*",
                "source_address_prefix": "VirtualNetwork",
                "destination_address_prefix": "VirtualNetwork",
            }
        )
        self.nsg = azure.network.NetworkSecurityGroup(
            f"{name}-nsg",
            resource_group_name=rg,
            location=args.location,
            security_rules=rules,
            tags=tags,
            opts=child,
        )
        azure.network.SubnetNetworkSecurityGroupAssociation(
            f"{name}-mgmt-nsg", subnet_id=self.subnet.id, network_security_group_id=self.nsg.id, opts=child
        )
        self.register_outputs({"subnetId": self.subnet.id})


@dataclass(frozen=True)
class PoolArgs:
    cluster: Cluster
    nodes: Sequence[Node]
    size: str
    image: str  # publisher:offer:sku:version
    location: str
    resource_group: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    root_volume_gb: int
    admin_username: str
    ssh_public_key: str
    user_data: Mapping[str, str]
    tags: Mapping[str, Mapping[str, str]]
    zones: tuple[str, ...] = ()


# Disk encryption: every managed disk is encrypted at rest with platform-managed keys by default
# ("By default, managed disks use platform-managed encryption keys. All managed disks ... are
# automatically encrypted-at-rest": https://docs.microsoft.com/en-us/azure/virtual-machines/linux/
# disk-encryption). The VMs say they rely on that (policy rule disks-encrypted). Encryption at
# host would cover the temp disk and caches too, but needs the subscription's EncryptionAtHost
# feature and a VM size that supports it, which the spec cannot promise for every pool.
_DISK_ENCRYPTION_TAG = {TAG_DISK_ENCRYPTION: "platform-managed-key"}


def _image(image: str) -> dict[str, str]:
    publisher, offer, sku, version = image.split(":")
    return {"publisher": publisher, "offer": offer, "sku": sku, "version": version}


def _vms(
    owner: pulumi.ComponentResource,
    name: str,
    args: PoolArgs,
    *,
    scale_set_id: pulumi.Input[str] | None,
    zone_of: Mapping[str, str | None],
) -> dict[str, tuple[azure.compute.LinuxVirtualMachine, azure.network.NetworkInterface]]:
    child = pulumi.ResourceOptions(parent=owner)
    out = {}
    for node in args.nodes:
        nic = azure.network.NetworkInterface(
            f"{name}-{node.name}-nic",
            resource_group_name=args.resource_group,
            location=args.location,
            accelerated_networking_enabled=True,
            ip_configurations=[
                {
                    "name": "primary",
                    "subnet_id": args.subnet_id,
                    "private_ip_address_allocation": "Static",
                    "private_ip_address": node.management_ip,
                }
            ],
            tags=dict(args.tags[node.name]),
            opts=child,
        )
        vm = azure.compute.LinuxVirtualMachine(
            f"{name}-{node.name}",
            resource_group_name=args.resource_group,
            location=args.location,
            size=args.size,
            computer_name=node.name,
            admin_username=args.admin_username,
            admin_ssh_keys=[{"username": args.admin_username, "public_key": args.ssh_public_key}],
            disable_password_authentication=True,
            network_interface_ids=[nic.id],
            os_disk={
                "caching": "ReadWrite",
                "storage_account_type": "Premium_LRS",
                "disk_size_gb": args.root_volume_gb,
            },
            source_image_reference=_image(args.image),
            custom_data=base64.b64encode(args.user_data[node.name].encode()).decode(),
            virtual_machine_scale_set_id=scale_set_id,
            platform_fault_domain=0 if scale_set_id else None,
            zone=zone_of.get(node.name),
            tags={**args.tags[node.name], **_DISK_ENCRYPTION_TAG},
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(ignore_changes=IMAGE_IGNORE_CHANGES["azure"])),
        )
        out[node.name] = (vm, nic)
    return out


class GpuNodePool(pulumi.ComponentResource):
    """ND-series VMs in one flexible scale set with a single placement group (one InfiniBand fabric)."""

    def __init__(self, name: str, args: PoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:azure:GpuNodePool", name, {"size": args.size, "count": len(args.nodes)}, opts)
        zones = list(args.zones[:1])  # one placement group never spans zones
        self.scale_set = azure.compute.OrchestratedVirtualMachineScaleSet(
            f"{name}-vmss",
            resource_group_name=args.resource_group,
            location=args.location,
            platform_fault_domain_count=1,
            single_placement_group=True,
            zones=zones or None,
            tags={"gpucluster-pool": name},
            opts=pulumi.ResourceOptions(parent=self),
        )
        zone = zones[0] if zones else None
        self.vms = _vms(self, name, args, scale_set_id=self.scale_set.id, zone_of={n.name: zone for n in args.nodes})
        self.register_outputs({"scaleSetId": self.scale_set.id})


class StorageNodes(pulumi.ComponentResource):
    """Ceph VMs spread round-robin over the target's availability zones (its failure domains)."""

    def __init__(self, name: str, args: PoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(
            "gpucluster:azure:StorageNodes",
            name,
            {**storage_facts(args.cluster), "failureDomainCount": len(args.zones)},
            opts,
        )
        self.failure_domains = (
            {n.name: args.zones[i % len(args.zones)] for i, n in enumerate(args.nodes)} if args.zones else {}
        )
        zone_of: dict[str, str | None] = dict(self.failure_domains)
        self.vms = _vms(self, name, args, scale_set_id=None, zone_of=zone_of)
        self.register_outputs({})


class ServiceNodes(pulumi.ComponentResource):
    def __init__(self, name: str, args: PoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:azure:ServiceNodes", name, {"count": len(args.nodes)}, opts)
        self.vms = _vms(self, name, args, scale_set_id=None, zone_of={})
        self.register_outputs({})
