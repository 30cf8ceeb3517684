"""Azure components: the network (VNet, management subnet, NSG), ND H100 v5 GPU pools as one
scale set in a single placement group (InfiniBand reaches only within it), storage VMs over zones."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_azure as azure

from gpucluster.spec import Cluster, Node
from gpucluster.spec.models import ExistingNetwork

from .common import IMAGE_IGNORE_CHANGES, TAG_DISK_ENCRYPTION, TAG_PURPOSE, TAG_ROLES, storage_facts

# A scale set with single_placement_group holds at most 100 VMs; InfiniBand connects only
# the VMs of one placement group.
MAX_PLACEMENT_GROUP = 100


def _tcp_in(name: str, priority: int, port: int, sources: Sequence[str]) -> dict[str, Any]:
    """An NSG rule admitting TCP to ``port`` from ``sources``."""
    return {"name": name, "priority": priority, "direction": "Inbound", "access": "Allow", "protocol": "Tcp",
            "source_port_range": "*", "destination_port_range": str(port),
            "source_address_prefixes": list(sources), "destination_address_prefix": "*"}


@dataclass(frozen=True)
class FabricArgs:
    cluster_name: str
    location: str
    resource_group: str
    management_cidr: str
    fabric_cidr: str
    # The admin ports the nodes admit from admin_cidrs (none behind a bastion).
    admin_cidrs: tuple[str, ...]
    admin_ports: tuple[int, ...]
    tags: Mapping[str, str] = field(default_factory=dict)
    # A subnet of its own for a bastion the stack creates (in the VNet it creates).
    public_cidr: str | None = None
    # egress nat: a NAT gateway with a public IP on the management subnet.
    nat: bool = False
    # An existing VNet to join: no VNet, subnet or gateway is created, and the nodes' NSG sits on
    # their network interfaces rather than on a subnet the site owns.
    network: ExistingNetwork | None = None
    # Further sources of SSH to the nodes (an existing bastion's; a created one is in public_cidr).
    ssh_cidrs: tuple[str, ...] = ()


class Fabric(pulumi.ComponentResource):
    """Resource group, VNet with the management subnet and its NSG. The InfiniBand fabric has no
    Azure resource: its IPoIB network (fabric_cidr) is declared in the props for the policy rules.

    Egress: with ``nat``, a NAT gateway with a static Standard public IP, associated with the
    management subnet ("NAT gateway provides outbound connectivity for a subnet ... associate it
    with a subnet of a virtual network": Microsoft Learn, "What is Azure NAT Gateway?"). Azure's
    default outbound access for VMs without a public IP is being retired (Microsoft Learn, "Default
    outbound access in Azure"), so a private node has no way out without one."""

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
        self.public_subnet_id: pulumi.Input[str] | None = None
        if args.network is not None:
            self.subnet_id: pulumi.Input[str] = args.network.management_subnet_id
            self.public_subnet_id = args.network.public_subnet_id
        else:
            self.vnet = azure.network.VirtualNetwork(
                f"{name}-vnet",
                resource_group_name=rg,
                location=args.location,
                address_spaces=[args.management_cidr, *([args.public_cidr] if args.public_cidr else [])],
                tags=tags,
                opts=child,
            )
            vnet = self.vnet.name
            self.subnet = azure.network.Subnet(f"{name}-mgmt", resource_group_name=rg, virtual_network_name=vnet,
                                               address_prefixes=[args.management_cidr], opts=child)
            self.subnet_id = self.subnet.id
            if args.public_cidr:
                self.public_subnet = azure.network.Subnet(f"{name}-public", resource_group_name=rg,
                                                          virtual_network_name=vnet,
                                                          address_prefixes=[args.public_cidr], opts=child)
                self.public_subnet_id = self.public_subnet.id
            if args.nat:
                self._nat(name, args, rg, tags, child)
        rules = [_tcp_in(f"admin-{port}", 100 + i, port, args.admin_cidrs)
                 for i, port in enumerate(args.admin_ports) if args.admin_cidrs]
        bastion_sources = (*args.ssh_cidrs, *([args.public_cidr] if args.public_cidr else []))
        if bastion_sources:
            rules.append(_tcp_in("ssh-from-bastion", 150, 22, bastion_sources))
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
        # A joined VNet's subnet is the site's: the NSG goes on each node's interface instead
        # (PoolArgs.nsg_id).
        self.nic_nsg_id: pulumi.Input[str] | None = self.nsg.id if args.network is not None else None
        if args.network is None:
            azure.network.SubnetNetworkSecurityGroupAssociation(
                f"{name}-mgmt-nsg", subnet_id=self.subnet.id, network_security_group_id=self.nsg.id, opts=child
            )
        self.register_outputs({"subnetId": self.subnet_id})

    def _nat(self, name: str, args: FabricArgs, rg: pulumi.Input[str], tags: dict[str, str],
             child: pulumi.ResourceOptions) -> None:
        # NAT gateway takes Standard, static public IPs only.
        ip = azure.network.PublicIp(f"{name}-nat-ip", resource_group_name=rg, location=args.location,
                                    allocation_method="Static", sku="Standard", tags=tags, opts=child)
        self.nat_gateway = azure.network.NatGateway(f"{name}-nat", resource_group_name=rg, location=args.location,
                                                    sku_name="Standard", tags=tags, opts=child)
        azure.network.NatGatewayPublicIpAssociation(f"{name}-nat-ip", nat_gateway_id=self.nat_gateway.id,
                                                    public_ip_address_id=ip.id, opts=child)
        azure.network.SubnetNatGatewayAssociation(f"{name}-mgmt-nat", subnet_id=self.subnet.id,
                                                  nat_gateway_id=self.nat_gateway.id, opts=child)


@dataclass(frozen=True)
class BastionArgs:
    cluster_name: str
    location: str
    resource_group: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    admin_cidrs: tuple[str, ...]
    size: str
    image: str
    admin_username: str
    ssh_public_key: str
    user_data: str
    tags: Mapping[str, str]


class Bastion(pulumi.ComponentResource):
    """The way in: a small VM with a static public IP, its interface's NSG admitting SSH only from
    ``admin_cidrs``. The nodes admit SSH from its subnet (Fabric's ``ssh-from-bastion``) and the
    rest of the VNet. Its props (``adminCidrs``) let the policy rule bastion-only-entry tell its
    rule from a node's."""

    def __init__(self, name: str, args: BastionArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:azure:Bastion", name, {"adminCidrs": list(args.admin_cidrs), "port": 22}, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = {**args.tags, TAG_ROLES: "bastion", TAG_PURPOSE: "bastion"}
        self.nsg = azure.network.NetworkSecurityGroup(
            f"{name}-nsg",
            resource_group_name=args.resource_group,
            location=args.location,
            security_rules=[_tcp_in("ssh-from-admin", 100, 22, args.admin_cidrs)],
            tags=tags,
            opts=child,
        )
        self.public_ip = azure.network.PublicIp(f"{name}-ip", resource_group_name=args.resource_group,
                                                location=args.location, allocation_method="Static", sku="Standard",
                                                tags=tags, opts=child)
        self.nic = azure.network.NetworkInterface(
            f"{name}-nic",
            resource_group_name=args.resource_group,
            location=args.location,
            ip_configurations=[{"name": "primary", "subnet_id": args.subnet_id,
                                "private_ip_address_allocation": "Dynamic", "public_ip_address_id": self.public_ip.id}],
            tags=tags,
            opts=child,
        )
        azure.network.NetworkInterfaceSecurityGroupAssociation(
            f"{name}-nic-nsg", network_interface_id=self.nic.id, network_security_group_id=self.nsg.id, opts=child)
        self.vm = azure.compute.LinuxVirtualMachine(
            f"{name}-vm",
            resource_group_name=args.resource_group,
            location=args.location,
            size=args.size,
            computer_name=f"{args.cluster_name}-bastion"[:64],
            admin_username=args.admin_username,
            admin_ssh_keys=[{"username": args.admin_username, "public_key": args.ssh_public_key}],
            disable_password_authentication=True,
            network_interface_ids=[self.nic.id],
            os_disk={"caching": "ReadWrite", "storage_account_type": "Standard_LRS"},
            source_image_reference=_image(args.image),
            custom_data=base64.b64encode(args.user_data.encode()).decode(),
            tags={**tags, **_DISK_ENCRYPTION_TAG},
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(ignore_changes=IMAGE_IGNORE_CHANGES["azure"])),
        )
        self.register_outputs({"publicIp": self.public_ip.ip_address, "privateIp": self.nic.private_ip_address})


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
    # The nodes' NSG, set where it goes on each interface (a joined VNet's subnet is the site's).
    nsg_id: pulumi.Input[str] | None = None


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
        if args.nsg_id is not None:
            azure.network.NetworkInterfaceSecurityGroupAssociation(
                f"{name}-{node.name}-nsg", network_interface_id=nic.id, network_security_group_id=args.nsg_id,
                opts=child)
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
