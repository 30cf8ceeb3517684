"""AWS components: the network fabric (VPC, subnets, EFA security group), GPU node pools with
EFA in a cluster placement group, Ceph storage nodes spread over partitions, service nodes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from gpucluster.spec import Cluster, Node

from .common import IMAGE_IGNORE_CHANGES, TAG_POOL, TAG_PURPOSE, TAG_ROLES, storage_facts

# A partition placement group has at most 7 partitions per AZ.
MAX_PARTITIONS = 7


@dataclass(frozen=True)
class FabricArgs:
    cluster_name: str
    vpc_cidr: str
    availability_zone: str
    management_cidr: str
    fabric_cidr: str
    admin_cidrs: tuple[str, ...]
    admin_ports: tuple[int, ...]
    tags: Mapping[str, str] = field(default_factory=dict)


class Fabric(pulumi.ComponentResource):
    """VPC, a management subnet (every node's primary interface, storage nodes), a GPU fabric subnet
    (EFA interfaces), and one security group admitting all traffic from itself as EFA requires."""

    def __init__(self, name: str, args: FabricArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:aws:Fabric", name, {"vpcCidr": args.vpc_cidr}, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        self.vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.vpc_cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={**tags, "Name": f"{args.cluster_name}-vpc"},
            opts=child,
        )
        self.management_subnet = aws.ec2.Subnet(
            f"{name}-mgmt",
            vpc_id=self.vpc.id,
            cidr_block=args.management_cidr,
            availability_zone=args.availability_zone,
            tags={**tags, "Name": f"{args.cluster_name}-mgmt", TAG_PURPOSE: "management,storage"},
            opts=child,
        )
        self.fabric_subnet = aws.ec2.Subnet(
            f"{name}-efa",
            vpc_id=self.vpc.id,
            cidr_block=args.fabric_cidr,
            availability_zone=args.availability_zone,
            tags={**tags, "Name": f"{args.cluster_name}-efa", TAG_PURPOSE: "gpu"},
            opts=child,
        )
        self.gateway = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=self.vpc.id, tags=tags, opts=child)
        self.route_table = aws.ec2.RouteTable(
            f"{name}-rt",
            vpc_id=self.vpc.id,
            routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": self.gateway.id}],
            tags=tags,
            opts=child,
        )
        aws.ec2.RouteTableAssociation(
            f"{name}-rt-mgmt", subnet_id=self.management_subnet.id, route_table_id=self.route_table.id, opts=child
        )
        admin = [
            {
                "protocol": "tcp",
                "from_port": port,
                "to_port": port,
                "cidr_blocks": list(args.admin_cidrs),
                "description": f"admin access to port {port}",
            }
            for port in args.admin_ports
            if args.admin_cidrs
        ]
        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=self.vpc.id,
            description="gpucluster nodes: all traffic within the group (EFA), admin ports from admin_cidrs",
            ingress=[
                {
                    "protocol": "-1",
                    "from_port": 0,
                    "to_port": 0,
                    "self": True,
                    "description": "all traffic from the group (EFA needs it)",
                },
                *admin,
            ],
            egress=[
                {
                    "protocol": "-1",
                    "from_port": 0,
                    "to_port": 0,
                    "self": True,
                    "description": "all traffic to the group (EFA needs it)",
                },
                {
                    "protocol": "-1",
                    "from_port": 0,
                    "to_port": 0,
                    "cidr_blocks": ["0.0.0.0/0"],
                    "description": "outbound",
                },
            ],
            tags={**tags, "Name": f"{args.cluster_name}-nodes"},
            opts=child,
        )
        self.register_outputs({"vpcId": self.vpc.id, "securityGroupId": self.security_group.id})


@dataclass(frozen=True)
class PoolArgs:
    cluster: Cluster
    nodes: Sequence[Node]
    instance_type: str
    ami_id: pulumi.Input[str]
    root_volume_gb: int
    management_subnet_id: pulumi.Input[str]
    security_group_id: pulumi.Input[str]
    user_data: Mapping[str, str]
    tags: Mapping[str, Mapping[str, str]]  # per node
    key_name: pulumi.Input[str] | None = None
    availability_zone: str | None = None


def _root(size_gb: int) -> dict[str, Any]:
    # encrypted: the provider's default is false (pulumi_aws InstanceRootBlockDevice.encrypted).
    return {"volume_size": size_gb, "volume_type": "gp3", "delete_on_termination": True, "encrypted": True}


# IMDSv2 only: with http_tokens "optional" IMDSv1 answers and hands out role credentials (AWS EC2
# API, InstanceMetadataOptionsRequest.HttpTokens). Stated on every instance, those launched from
# the GPU template included, so each resource carries it (policy rule imds-v2-only).
_IMDS = {"http_tokens": "required", "http_endpoint": "enabled"}
_KEEP_IMAGE = pulumi.ResourceOptions(ignore_changes=IMAGE_IGNORE_CHANGES["aws"])


@dataclass(frozen=True)
class GpuPoolArgs(PoolArgs):
    fabric_subnet_id: pulumi.Input[str] = ""
    # The platform's EFA devices, one per network card, and whether they are EFA-only (no IP).
    efa_interfaces: int = 0
    efa_only: bool = True
    capacity_reservation_id: str | None = None
    capacity_block: bool = False
    # An existing cluster placement group (the capacity reservation's); else the pool makes one.
    placement_group_name: str | None = None


def efa_network_interfaces(efa_interfaces: int, *, efa_only: bool, management_subnet_id: pulumi.Input[str],
                           fabric_subnet_id: pulumi.Input[str], security_group_id: pulumi.Input[str]
                           ) -> list[dict[str, Any]]:
    """The launch template's interfaces: one EFA per network card, placed as AWS documents it.

    "For the primary network interface (network card index 0, device index 0), create an ENA
    interface. [...] If the network card index 0 supports EFA, create an EFA-only network interface
    for network card index 0, device index 1. For each additional network interface, use the next
    unused network card index, device index 0, for EFA-only network interface"
    (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html). An EFA with ENA
    (interface type `efa`) takes an address in the fabric subnet; an EFA-only one cannot ("You can't
    assign an IP address to an EFA-only network interface",
    https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/create-efa.html).
    GPU nodes take no public address: the template's interfaces say so (the launch template
    interface field is a string, "Boolean value, can be left unset": pulumi_aws
    LaunchTemplateNetworkInterface.associate_public_ip_address).
    """
    interfaces: list[dict[str, Any]] = [
        {
            "device_index": 0,
            "network_card_index": 0,
            "interface_type": "interface",
            "subnet_id": management_subnet_id,
            "security_groups": [security_group_id],
            "associate_public_ip_address": "false",
            "delete_on_termination": "true",
        }
    ]
    interfaces += [
        {
            "device_index": 1 if card == 0 else 0,
            "network_card_index": card,
            "interface_type": "efa-only" if efa_only else "efa",
            "subnet_id": fabric_subnet_id,
            "security_groups": [security_group_id],
            "delete_on_termination": "true",
        }
        for card in range(efa_interfaces)
    ]
    return interfaces


def capacity_options(reservation_id: str | None, capacity_block: bool) -> dict[str, Any]:
    """An instance's reservation inputs: none, an On-Demand Capacity Reservation, or a Capacity Block.

    A Capacity Block is launched into with its reservation ID and the market type
    `capacity-block` ("MarketType ... Valid Values: spot | capacity-block", EC2 API
    InstanceMarketOptionsRequest, https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_InstanceMarketOptionsRequest.html;
    "To use your Capacity Block, you must specify the Capacity Block reservation ID when launching
    instances", https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-launch.html).
    """
    if not reservation_id:
        return {}
    target = {"capacity_reservation_id": reservation_id}
    out: dict[str, Any] = {"capacity_reservation_specification": {"capacity_reservation_target": target}}
    if capacity_block:
        out["instance_market_options"] = {"market_type": "capacity-block"}
    return out


class GpuNodePool(pulumi.ComponentResource):
    """GPU instances launched from one template carrying every EFA interface the type supports,
    all in one cluster placement group."""

    def __init__(self, name: str, args: GpuPoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(
            "gpucluster:aws:GpuNodePool",
            name,
            {"instanceType": args.instance_type, "count": len(args.nodes), "efaInterfaces": args.efa_interfaces},
            opts,
        )
        child = pulumi.ResourceOptions(parent=self)
        # With a capacity reservation made in a cluster placement group, the instances launch into
        # that group ("The Amazon Resource Name (ARN) of the cluster placement group in which the
        # Capacity Reservation was created", EC2 API CapacityReservation.PlacementGroupArn): a group of
        # the pool's own would not match the reservation.
        self.placement_group: aws.ec2.PlacementGroup | None = None
        placement: pulumi.Input[str]
        if args.placement_group_name:
            placement = args.placement_group_name
        else:
            self.placement_group = aws.ec2.PlacementGroup(
                f"{name}-pg", strategy="cluster", name=f"{args.cluster.name}-{name}", opts=child
            )
            placement = self.placement_group.name
        interfaces = efa_network_interfaces(
            args.efa_interfaces, efa_only=args.efa_only, management_subnet_id=args.management_subnet_id,
            fabric_subnet_id=args.fabric_subnet_id, security_group_id=args.security_group_id)
        roles = sorted({role for node in args.nodes for role in node.roles})
        self.launch_template = aws.ec2.LaunchTemplate(
            f"{name}-lt",
            name_prefix=f"{args.cluster.name}-{name}-",
            network_interfaces=interfaces,
            metadata_options=_IMDS,
            # The template's own tags: what its instances are for, for the policy rules.
            tags={TAG_POOL: name, TAG_ROLES: ",".join(roles)},
            opts=child,
        )
        capacity = capacity_options(args.capacity_reservation_id, args.capacity_block)
        self.instances: dict[str, aws.ec2.Instance] = {}
        for node in args.nodes:
            self.instances[node.name] = aws.ec2.Instance(
                f"{name}-{node.name}",
                ami=args.ami_id,
                instance_type=args.instance_type,
                launch_template={"id": self.launch_template.id, "version": "$Latest"},
                placement_group=placement,
                availability_zone=args.availability_zone,
                key_name=args.key_name,
                root_block_device=_root(args.root_volume_gb),
                metadata_options=_IMDS,
                **capacity,
                user_data=args.user_data[node.name],
                tags=dict(args.tags[node.name]),
                opts=pulumi.ResourceOptions.merge(child, _KEEP_IMAGE),
            )
        self.register_outputs({"placementGroup": placement})


@dataclass(frozen=True)
class StorageArgs(PoolArgs):
    osd_devices: tuple[str, ...] = ()


class StorageNodes(pulumi.ComponentResource):
    """Ceph hosts on NVMe instance storage, spread over the partitions of a partition placement
    group: a partition is AWS's failure domain (its own racks) inside one AZ."""

    def __init__(self, name: str, args: StorageArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        partitions = min(MAX_PARTITIONS, max(1, len(args.nodes)))
        super().__init__(
            "gpucluster:aws:StorageNodes",
            name,
            {**storage_facts(args.cluster), "failureDomainCount": partitions, "osdDevices": list(args.osd_devices)},
            opts,
        )
        child = pulumi.ResourceOptions(parent=self)
        self.placement_group = aws.ec2.PlacementGroup(
            f"{name}-pg",
            strategy="partition",
            partition_count=partitions,
            name=f"{args.cluster.name}-{name}",
            opts=child,
        )
        self.instances: dict[str, aws.ec2.Instance] = {}
        self.failure_domains: dict[str, str] = {}
        for i, node in enumerate(args.nodes):
            partition = i % partitions + 1
            self.failure_domains[node.name] = f"partition-{partition}"
            self.instances[node.name] = aws.ec2.Instance(
                f"{name}-{node.name}",
                ami=args.ami_id,
                instance_type=args.instance_type,
                subnet_id=args.management_subnet_id,
                private_ip=node.management_ip,
                vpc_security_group_ids=[args.security_group_id],
                placement_group=self.placement_group.name,
                placement_partition_number=partition,
                availability_zone=args.availability_zone,
                key_name=args.key_name,
                root_block_device=_root(args.root_volume_gb),
                metadata_options=_IMDS,
                associate_public_ip_address=False,  # storage nodes: no public address
                user_data=args.user_data[node.name],
                tags=dict(args.tags[node.name]),
                opts=pulumi.ResourceOptions.merge(child, _KEEP_IMAGE),
            )
        self.register_outputs({"placementGroup": self.placement_group.name})


class ServiceNodes(pulumi.ComponentResource):
    """Nodes with neither GPUs nor storage (the Kubernetes control plane)."""

    def __init__(self, name: str, args: PoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:aws:ServiceNodes", name, {"count": len(args.nodes)}, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.instances: dict[str, aws.ec2.Instance] = {}
        for node in args.nodes:
            self.instances[node.name] = aws.ec2.Instance(
                f"{name}-{node.name}",
                ami=args.ami_id,
                instance_type=args.instance_type,
                subnet_id=args.management_subnet_id,
                private_ip=node.management_ip,
                vpc_security_group_ids=[args.security_group_id],
                availability_zone=args.availability_zone,
                key_name=args.key_name,
                root_block_device=_root(args.root_volume_gb),
                metadata_options=_IMDS,
                user_data=args.user_data[node.name],
                tags=dict(args.tags[node.name]),
                opts=pulumi.ResourceOptions.merge(child, _KEEP_IMAGE),
            )
        self.register_outputs({})
