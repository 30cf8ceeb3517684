"""AWS components: the network fabric (VPC, subnets, EFA security group), GPU node pools with
EFA in a cluster placement group, Ceph storage nodes spread over partitions, service nodes."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_aws as aws

from gpucluster.spec import Cluster, Node
from gpucluster.spec.models import ExistingNetwork

from .common import IMAGE_IGNORE_CHANGES, TAG_POOL, TAG_PURPOSE, TAG_ROLES, storage_facts

# A partition placement group has at most 7 partitions per AZ.
MAX_PARTITIONS = 7


def _tcp(port: int, cidrs: Sequence[str], description: str) -> dict[str, Any]:
    """A security group rule for TCP ``port`` and ``cidrs`` (inbound from them, or outbound to them)."""
    return {"protocol": "tcp", "from_port": port, "to_port": port, "cidr_blocks": list(cidrs),
            "description": description}


@dataclass(frozen=True)
class FabricArgs:
    cluster_name: str
    vpc_cidr: str
    availability_zone: str
    management_cidr: str
    fabric_cidr: str
    # Who reaches the nodes' admin ports: admin_cidrs directly, or (a bastion) no one from outside;
    # SSH from the bastion is its own rule (Bastion), from an existing one's source (ssh_cidrs).
    admin_cidrs: tuple[str, ...]
    admin_ports: tuple[int, ...]
    tags: Mapping[str, str] = field(default_factory=dict)
    # A public subnet (and the internet gateway it routes through): for the NAT gateway and a bastion.
    public_cidr: str | None = None
    # egress nat: a NAT gateway in the public subnet, the nodes' subnets routing 0.0.0.0/0 to it.
    nat: bool = False
    # An existing VPC to join: nothing of the network is created (no VPC, subnet, gateway or route).
    network: ExistingNetwork | None = None
    # Further sources of SSH to the nodes (an existing bastion's).
    ssh_cidrs: tuple[str, ...] = ()


class Fabric(pulumi.ComponentResource):
    """VPC, a management subnet (every node's primary interface, storage nodes), a GPU fabric subnet
    (EFA interfaces), and one security group admitting all traffic from itself as EFA requires.

    Egress: with ``nat``, a public subnet holding a NAT gateway (with its Elastic IP) behind an
    internet gateway, and the nodes' subnets routing 0.0.0.0/0 to it ("To provide internet access
    to instances in a private subnet, create a NAT gateway in a public subnet, then add a route
    to the private subnet's route table that points internet-bound traffic to the NAT gateway":
    Amazon VPC User Guide, NAT gateways, https://docs.aws.amazon.com/vpc/latest/userguide/
    vpc-nat-gateway.html). Without it the nodes' route table has the VPC's local route only.
    Joining an existing VPC (``network``) creates only the security group."""

    def __init__(self, name: str, args: FabricArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:aws:Fabric", name, {"vpcCidr": None if args.network else args.vpc_cidr}, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        self.vpc: aws.ec2.Vpc | None = None
        self.public_subnet_id: pulumi.Input[str] | None = None
        self.nat_gateway: aws.ec2.NatGateway | None = None
        if args.network is not None:
            net = args.network
            self.vpc_id: pulumi.Input[str] = net.id
            self.management_subnet_id: pulumi.Input[str] = net.management_subnet_id
            self.fabric_subnet_id: pulumi.Input[str] = net.fabric_subnet_id or net.management_subnet_id
            self.public_subnet_id = net.public_subnet_id
        else:
            self._network(name, args, tags, child)
        admin = [_tcp(port, args.admin_cidrs, f"admin access to port {port}")
                 for port in args.admin_ports if args.admin_cidrs]
        if args.ssh_cidrs:
            admin.append(_tcp(22, args.ssh_cidrs, "SSH from the bastion"))
        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=self.vpc_id,
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
        self.register_outputs({"vpcId": self.vpc_id, "securityGroupId": self.security_group.id})

    def _network(self, name: str, args: FabricArgs, tags: dict[str, str], child: pulumi.ResourceOptions) -> None:
        self.vpc = aws.ec2.Vpc(
            f"{name}-vpc",
            cidr_block=args.vpc_cidr,
            enable_dns_hostnames=True,
            enable_dns_support=True,
            tags={**tags, "Name": f"{args.cluster_name}-vpc"},
            opts=child,
        )
        self.vpc_id = self.vpc.id
        self.management_subnet = aws.ec2.Subnet(
            f"{name}-mgmt",
            vpc_id=self.vpc.id,
            cidr_block=args.management_cidr,
            availability_zone=args.availability_zone,
            tags={**tags, "Name": f"{args.cluster_name}-mgmt", TAG_PURPOSE: "management,storage"},
            opts=child,
        )
        self.management_subnet_id = self.management_subnet.id
        self.fabric_subnet = aws.ec2.Subnet(
            f"{name}-efa",
            vpc_id=self.vpc.id,
            cidr_block=args.fabric_cidr,
            availability_zone=args.availability_zone,
            tags={**tags, "Name": f"{args.cluster_name}-efa", TAG_PURPOSE: "gpu"},
            opts=child,
        )
        self.fabric_subnet_id = self.fabric_subnet.id
        routes: list[dict[str, Any]] = []
        if args.public_cidr:
            self.gateway = aws.ec2.InternetGateway(f"{name}-igw", vpc_id=self.vpc.id, tags=tags, opts=child)
            self.public_subnet = aws.ec2.Subnet(
                f"{name}-public",
                vpc_id=self.vpc.id,
                cidr_block=args.public_cidr,
                availability_zone=args.availability_zone,
                # A bastion asks for its public address itself; nothing else launched here gets one.
                map_public_ip_on_launch=False,
                tags={**tags, "Name": f"{args.cluster_name}-public", TAG_PURPOSE: "public"},
                opts=child,
            )
            self.public_subnet_id = self.public_subnet.id
            public_rt = aws.ec2.RouteTable(
                f"{name}-public-rt",
                vpc_id=self.vpc.id,
                routes=[{"cidr_block": "0.0.0.0/0", "gateway_id": self.gateway.id}],
                tags={**tags, "Name": f"{args.cluster_name}-public"},
                opts=child,
            )
            aws.ec2.RouteTableAssociation(
                f"{name}-public-rt", subnet_id=self.public_subnet.id, route_table_id=public_rt.id, opts=child)
            if args.nat:
                eip = aws.ec2.Eip(f"{name}-nat-eip", domain="vpc", tags={**tags, "Name": f"{args.cluster_name}-nat"},
                                  opts=child)
                self.nat_gateway = aws.ec2.NatGateway(
                    f"{name}-nat",
                    allocation_id=eip.id,
                    subnet_id=self.public_subnet.id,
                    tags={**tags, "Name": f"{args.cluster_name}-nat"},
                    # "the NAT gateway ... must have an internet gateway attached to the VPC" first.
                    opts=pulumi.ResourceOptions.merge(child, pulumi.ResourceOptions(depends_on=[self.gateway])),
                )
                routes.append({"cidr_block": "0.0.0.0/0", "nat_gateway_id": self.nat_gateway.id})
        self.route_table = aws.ec2.RouteTable(
            f"{name}-rt",
            vpc_id=self.vpc.id,
            routes=routes,
            tags={**tags, "Name": f"{args.cluster_name}-nodes"},
            opts=child,
        )
        for suffix, subnet in (("mgmt", self.management_subnet), ("efa", self.fabric_subnet)):
            aws.ec2.RouteTableAssociation(
                f"{name}-rt-{suffix}", subnet_id=subnet.id, route_table_id=self.route_table.id, opts=child)


@dataclass(frozen=True)
class BastionArgs:
    cluster_name: str
    vpc_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    # The nodes' security group: it admits SSH from the bastion's.
    node_security_group_id: pulumi.Input[str]
    admin_cidrs: tuple[str, ...]
    management_cidr: str
    instance_type: str
    ami_id: pulumi.Input[str]
    user_data: str
    tags: Mapping[str, str]
    key_name: pulumi.Input[str] | None = None
    availability_zone: str | None = None


class Bastion(pulumi.ComponentResource):
    """The way in: a small instance with a public address in the public subnet, admitting SSH only
    from ``admin_cidrs`` and reaching only the nodes' SSH; the nodes' group admits SSH from its
    group. Its props (``adminCidrs``) let the policy rule bastion-only-entry tell its rule from a
    node's."""

    def __init__(self, name: str, args: BastionArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:aws:Bastion", name, {"adminCidrs": list(args.admin_cidrs), "port": 22}, opts)
        child = pulumi.ResourceOptions(parent=self)
        self.security_group = aws.ec2.SecurityGroup(
            f"{name}-sg",
            vpc_id=args.vpc_id,
            description="gpucluster bastion: SSH from admin_cidrs, SSH to the nodes",
            ingress=[_tcp(22, args.admin_cidrs, "SSH from admin_cidrs")],
            egress=[_tcp(22, (args.management_cidr,), "SSH to the nodes")],
            tags={**args.tags, "Name": f"{args.cluster_name}-bastion", TAG_PURPOSE: "bastion"},
            opts=child,
        )
        self.instance = aws.ec2.Instance(
            f"{name}-vm",
            ami=args.ami_id,
            instance_type=args.instance_type,
            subnet_id=args.subnet_id,
            vpc_security_group_ids=[self.security_group.id],
            associate_public_ip_address=True,
            availability_zone=args.availability_zone,
            key_name=args.key_name,
            root_block_device=_root(8),
            metadata_options=_IMDS,
            user_data=args.user_data,
            tags={**args.tags, "Name": f"{args.cluster_name}-bastion", TAG_ROLES: "bastion", TAG_PURPOSE: "bastion"},
            opts=pulumi.ResourceOptions.merge(child, _KEEP_IMAGE),
        )
        aws.vpc.SecurityGroupIngressRule(
            f"{name}-ssh",
            security_group_id=args.node_security_group_id,
            referenced_security_group_id=self.security_group.id,
            ip_protocol="tcp",
            from_port=22,
            to_port=22,
            description="SSH from the bastion",
            opts=child,
        )
        self.register_outputs({"publicIp": self.instance.public_ip, "privateIp": self.instance.private_ip})


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
