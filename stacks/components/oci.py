"""OCI components: VCN, management subnet and NSG; BM.GPU.H100.8 instances in a compute cluster
(the RDMA cluster network, RoCE); storage instances over fault domains."""

from __future__ import annotations

import base64
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import pulumi
import pulumi_oci as oci

from gpucluster.spec import Cluster, Node
from gpucluster.spec.models import ExistingNetwork

from .common import IMAGE_IGNORE_CHANGES, TAG_PURPOSE, TAG_ROLES, storage_facts

FAULT_DOMAINS = ("FAULT-DOMAIN-1", "FAULT-DOMAIN-2", "FAULT-DOMAIN-3")


@dataclass(frozen=True)
class FabricArgs:
    cluster_name: str
    compartment_id: str
    management_cidr: str
    fabric_cidr: str
    # The admin ports the nodes admit from admin_cidrs (none behind a bastion).
    admin_cidrs: tuple[str, ...]
    admin_ports: tuple[int, ...]
    tags: Mapping[str, str] = field(default_factory=dict)
    # A public subnet (behind an internet gateway) for a bastion the stack creates.
    public_cidr: str | None = None
    # egress nat: NAT and service gateways, the management subnet routing to both.
    nat: bool = False
    # An existing VCN to join: no VCN, subnet, gateway or route table is created.
    network: ExistingNetwork | None = None
    # Further sources of SSH to the nodes (an existing bastion's).
    ssh_cidrs: tuple[str, ...] = ()


# The service gateway's target: every Oracle service of the region ("All <region> Services In Oracle
# Services Network"), as Oracle's own HPC stacks route a private subnet (oracle-quickstart/oci-hpc,
# network.tf: 0.0.0.0/0 to the NAT gateway, the services' CIDR label to the service gateway).
ALL_SERVICES = "All .* Services In Oracle Services Network"


class Fabric(pulumi.ComponentResource):
    """VCN, management subnet, an NSG (admin ports from admin_cidrs, everything within the VCN).
    The RDMA network of a compute cluster has no VCN resource: fabric_cidr is declared in the props.

    Egress: with ``nat``, a NAT gateway (the internet, outbound only) and a service gateway (Oracle's
    services, Object Storage among them, without the internet), the management subnet's route
    table sending 0.0.0.0/0 to the first and the services' CIDR label to the second ("A NAT gateway
    gives cloud resources without public IP addresses access to the internet without exposing
    those resources to incoming internet connections": OCI documentation, NAT Gateway; "Access to
    Oracle Services: Service Gateway"). A VCN has no gateway of its own: without one the nodes reach
    nothing outside it."""

    def __init__(self, name: str, args: FabricArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(
            "gpucluster:oci:Fabric",
            name,
            {"networks": [{"name": "rdma", "cidr": args.fabric_cidr, "purpose": "gpu"}]},
            opts,
        )
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        self.public_subnet_id: pulumi.Input[str] | None = None
        if args.network is not None:
            self.vcn_id: pulumi.Input[str] = args.network.id
            self.subnet_id: pulumi.Input[str] = args.network.management_subnet_id
            self.public_subnet_id = args.network.public_subnet_id
        else:
            self._network(name, args, tags, child)
        self.nsg = oci.core.NetworkSecurityGroup(
            f"{name}-nsg",
            compartment_id=args.compartment_id,
            vcn_id=self.vcn_id,
            display_name=f"{args.cluster_name}-nodes",
            freeform_tags=tags,
            opts=child,
        )
        oci.core.NetworkSecurityGroupSecurityRule(
            f"{name}-nsg-vcn",
            network_security_group_id=self.nsg.id,
            direction="INGRESS",
            protocol="all",
            source=args.management_cidr,
            source_type="CIDR_BLOCK",
            description="all traffic within the VCN",
            opts=child,
        )
        # TCP from outside the VCN: the admin ports from admin_cidrs (reached directly), SSH from an
        # existing bastion's source (behind one).
        tcp = [(f"admin-{i}-{port}", cidr, port, f"admin access to port {port}")
               for i, cidr in enumerate(args.admin_cidrs) for port in args.admin_ports]
        tcp += [(f"bastion-{i}", cidr, 22, "SSH from the bastion") for i, cidr in enumerate(args.ssh_cidrs)]
        for suffix, cidr, port, description in tcp:
            oci.core.NetworkSecurityGroupSecurityRule(
                f"{name}-nsg-{suffix}",
                network_security_group_id=self.nsg.id,
                direction="INGRESS",
                protocol="6",
                source=cidr,
                source_type="CIDR_BLOCK",
                tcp_options={"destination_port_range": {"min": port, "max": port}},
                description=description,
                opts=child,
            )
        self.register_outputs({"subnetId": self.subnet_id})

    def _network(self, name: str, args: FabricArgs, tags: dict[str, str], child: pulumi.ResourceOptions) -> None:
        self.vcn = oci.core.Vcn(
            f"{name}-vcn",
            compartment_id=args.compartment_id,
            cidr_blocks=[args.management_cidr, *([args.public_cidr] if args.public_cidr else [])],
            display_name=f"{args.cluster_name}-vcn",
            dns_label=args.cluster_name.replace("-", "")[:15],
            freeform_tags=tags,
            opts=child,
        )
        self.vcn_id = self.vcn.id
        # Every subnet here takes the VCN's default security list (none names a list of its own), and
        # OCI fills that list with SSH from 0.0.0.0/0, which CIS OCI Foundations 1.2.0 recommendation
        # 2.1 forbids ("Ensure no security lists allow ingress from 0.0.0.0/0 to port 22"). Security
        # lists and NSGs add up, so that rule would open every node and a created bastion to the
        # world past the NSG's admin_cidrs. The stack manages the list (Pulumi's DefaultSecurityList,
        # manage_default_resource_id) with no ingress rule: the NSG is the nodes' only admission.
        oci.core.DefaultSecurityList(
            f"{name}-default-sl",
            manage_default_resource_id=self.vcn.default_security_list_id,
            compartment_id=args.compartment_id,
            display_name=f"{args.cluster_name}-default-no-ingress",
            ingress_security_rules=[],
            egress_security_rules=[{"destination": "0.0.0.0/0", "destination_type": "CIDR_BLOCK", "protocol": "all"}],
            freeform_tags=tags,
            opts=child,
        )
        route_table: oci.core.RouteTable | None = None
        if args.nat:
            nat = oci.core.NatGateway(f"{name}-nat", compartment_id=args.compartment_id, vcn_id=self.vcn.id,
                                      display_name=f"{args.cluster_name}-nat", freeform_tags=tags, opts=child)
            services = oci.core.get_services_output(
                filters=[{"name": "name", "values": [ALL_SERVICES], "regex": True}]).services
            service = services.apply(lambda found: found[0])
            sgw = oci.core.ServiceGateway(
                f"{name}-sgw", compartment_id=args.compartment_id, vcn_id=self.vcn.id,
                services=[{"service_id": service.apply(lambda s: s.id)}],
                display_name=f"{args.cluster_name}-services", freeform_tags=tags, opts=child)
            route_table = oci.core.RouteTable(
                f"{name}-rt",
                compartment_id=args.compartment_id,
                vcn_id=self.vcn.id,
                display_name=f"{args.cluster_name}-nodes",
                route_rules=[
                    {"destination": "0.0.0.0/0", "destination_type": "CIDR_BLOCK", "network_entity_id": nat.id},
                    {"destination": service.apply(lambda s: s.cidr_block), "destination_type": "SERVICE_CIDR_BLOCK",
                     "network_entity_id": sgw.id},
                ],
                freeform_tags=tags,
                opts=child,
            )
        def subnet(suffix: str, cidr: str, public: bool, routes: oci.core.RouteTable | None,
                   purpose: str) -> oci.core.Subnet:
            return oci.core.Subnet(
                f"{name}-{suffix}",
                compartment_id=args.compartment_id,
                vcn_id=self.vcn.id,
                cidr_block=cidr,
                display_name=f"{args.cluster_name}-{suffix}",
                dns_label=suffix,
                prohibit_public_ip_on_vnic=not public,
                route_table_id=routes.id if routes is not None else None,
                freeform_tags={**tags, TAG_PURPOSE: purpose},
                opts=child,
            )

        self.subnet = subnet("mgmt", args.management_cidr, False, route_table, "management,storage")
        self.subnet_id = self.subnet.id
        if args.public_cidr:
            igw = oci.core.InternetGateway(f"{name}-igw", compartment_id=args.compartment_id, vcn_id=self.vcn.id,
                                           display_name=f"{args.cluster_name}-igw", freeform_tags=tags, opts=child)
            public_rt = oci.core.RouteTable(
                f"{name}-public-rt",
                compartment_id=args.compartment_id,
                vcn_id=self.vcn.id,
                display_name=f"{args.cluster_name}-public",
                route_rules=[{"destination": "0.0.0.0/0", "destination_type": "CIDR_BLOCK",
                              "network_entity_id": igw.id}],
                freeform_tags=tags,
                opts=child,
            )
            self.public_subnet = subnet("public", args.public_cidr, True, public_rt, "public")
            self.public_subnet_id = self.public_subnet.id


@dataclass(frozen=True)
class BastionArgs:
    cluster_name: str
    compartment_id: str
    availability_domain: str
    vcn_id: pulumi.Input[str]
    subnet_id: pulumi.Input[str]
    # The nodes' NSG: it admits SSH from the bastion's.
    node_nsg_id: pulumi.Input[str]
    admin_cidrs: tuple[str, ...]
    management_cidr: str
    shape: str
    image_id: pulumi.Input[str]
    ssh_keys: tuple[str, ...]
    user_data: str
    tags: Mapping[str, str]


class Bastion(pulumi.ComponentResource):
    """The way in: a small VM with a public address in the public subnet, its NSG admitting SSH only
    from ``admin_cidrs`` and letting out only SSH to the nodes; the nodes' NSG admits SSH from its
    NSG. Its props (``adminCidrs``) let the policy rule bastion-only-entry tell its rule from a
    node's."""

    def __init__(self, name: str, args: BastionArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:oci:Bastion", name, {"adminCidrs": list(args.admin_cidrs), "port": 22}, opts)
        child = pulumi.ResourceOptions(parent=self)
        tags = {**args.tags, TAG_ROLES: "bastion", TAG_PURPOSE: "bastion"}
        self.nsg = oci.core.NetworkSecurityGroup(f"{name}-nsg", compartment_id=args.compartment_id,
                                                 vcn_id=args.vcn_id, display_name=f"{args.cluster_name}-bastion",
                                                 freeform_tags=tags, opts=child)
        for i, cidr in enumerate(args.admin_cidrs):
            oci.core.NetworkSecurityGroupSecurityRule(
                f"{name}-nsg-admin-{i}", network_security_group_id=self.nsg.id, direction="INGRESS", protocol="6",
                source=cidr, source_type="CIDR_BLOCK", tcp_options={"destination_port_range": {"min": 22, "max": 22}},
                description="SSH from admin_cidrs", opts=child)
        oci.core.NetworkSecurityGroupSecurityRule(
            f"{name}-nsg-out", network_security_group_id=self.nsg.id, direction="EGRESS", protocol="6",
            destination=args.management_cidr, destination_type="CIDR_BLOCK",
            tcp_options={"destination_port_range": {"min": 22, "max": 22}}, description="SSH to the nodes",
            opts=child)
        metadata: dict[str, Any] = {"user_data": base64.b64encode(args.user_data.encode()).decode()}
        if args.ssh_keys:
            metadata["ssh_authorized_keys"] = "\n".join(args.ssh_keys)
        flex = args.shape.endswith(".Flex")
        self.instance = oci.core.Instance(
            f"{name}-vm",
            compartment_id=args.compartment_id,
            availability_domain=args.availability_domain,
            shape=args.shape,
            # A flexible shape is sized at launch: the least it offers is plenty to relay SSH.
            shape_config={"ocpus": 1, "memory_in_gbs": 4} if flex else None,
            display_name=f"{args.cluster_name}-bastion",
            create_vnic_details={"subnet_id": args.subnet_id, "assign_public_ip": "true", "nsg_ids": [self.nsg.id],
                                 "hostname_label": "bastion"},
            instance_options={"are_legacy_imds_endpoints_disabled": True},
            is_pv_encryption_in_transit_enabled=True if _paravirtualized(args.shape) else None,
            source_details={"source_type": "image", "source_id": args.image_id},
            metadata=metadata,
            freeform_tags=tags,
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(ignore_changes=IMAGE_IGNORE_CHANGES["oci"])),
        )
        oci.core.NetworkSecurityGroupSecurityRule(
            f"{name}-ssh", network_security_group_id=args.node_nsg_id, direction="INGRESS", protocol="6",
            source=self.nsg.id, source_type="NETWORK_SECURITY_GROUP",
            tcp_options={"destination_port_range": {"min": 22, "max": 22}}, description="SSH from the bastion",
            opts=child)
        self.register_outputs({"publicIp": self.instance.public_ip, "privateIp": self.instance.private_ip})


@dataclass(frozen=True)
class PoolArgs:
    cluster: Cluster
    nodes: Sequence[Node]
    shape: str
    image_id: pulumi.Input[str]
    compartment_id: str
    availability_domain: str
    subnet_id: pulumi.Input[str]
    nsg_id: pulumi.Input[str]
    root_volume_gb: int
    ssh_keys: tuple[str, ...]
    user_data: Mapping[str, str]
    tags: Mapping[str, Mapping[str, str]]


def _paravirtualized(shape: str) -> bool:
    """Whether the instance API's paravirtualized-attachment options apply: launch_options are
    "Options for tuning the compatibility and performance of VM shapes" (pulumi_oci Instance), so
    the stacks ask for PV in-transit encryption on VM shapes only."""
    return shape.startswith("VM.")


def _instances(
    owner: pulumi.ComponentResource,
    name: str,
    args: PoolArgs,
    *,
    cluster_id: pulumi.Input[str] | None,
    fault_domain: Mapping[str, str],
) -> dict[str, oci.core.Instance]:
    child = pulumi.ResourceOptions(parent=owner)
    out = {}
    for node in args.nodes:
        metadata: dict[str, Any] = {"user_data": base64.b64encode(args.user_data[node.name].encode()).decode()}
        if args.ssh_keys:
            metadata["ssh_authorized_keys"] = "\n".join(args.ssh_keys)
        out[node.name] = oci.core.Instance(
            f"{name}-{node.name}",
            compartment_id=args.compartment_id,
            availability_domain=args.availability_domain,
            shape=args.shape,
            display_name=node.name,
            compute_cluster_id=cluster_id,
            fault_domain=fault_domain.get(node.name),
            create_vnic_details={
                "subnet_id": args.subnet_id,
                "private_ip": node.management_ip,
                "hostname_label": node.name,
                # Unset, OCI assigns a public IP whenever the subnet allows one (CreateVnicDetails:
                # "Defaults to whether the subnet is public or private"); say no.
                "assign_public_ip": "false",
                "nsg_ids": [args.nsg_id],
            },
            # The legacy /v1 metadata endpoints answer without the v2 header; "Default is false"
            # (OCI API, InstanceOptions.are_legacy_imds_endpoints_disabled). cloud-init speaks v2
            # since 20.3 ("Support Oracle IMDSv2 API", release notes: github.com/canonical/
            # cloud-init/issues/3774); Ubuntu 22.04 ships a later one.
            instance_options={"are_legacy_imds_endpoints_disabled": True},
            # Volumes are always encrypted at rest ("No option exists for unencrypted volumes
            # at-rest": OCI Block Volume Encryption); in transit, OCI encrypts a paravirtualized
            # attachment only when asked ("The default value is false"). Set at create;
            # launch_options carries it for later updates.
            is_pv_encryption_in_transit_enabled=True if _paravirtualized(args.shape) else None,
            source_details={
                "source_type": "image",
                "source_id": args.image_id,
                "boot_volume_size_in_gbs": str(args.root_volume_gb),
            },
            metadata=metadata,
            freeform_tags=dict(args.tags[node.name]),
            opts=pulumi.ResourceOptions.merge(
                child, pulumi.ResourceOptions(ignore_changes=IMAGE_IGNORE_CHANGES["oci"])),
        )
    return out


class GpuNodePool(pulumi.ComponentResource):
    """Bare-metal GPU shapes launched into one compute cluster: the RDMA (RoCE) cluster network."""

    def __init__(self, name: str, args: PoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:oci:GpuNodePool", name, {"shape": args.shape, "count": len(args.nodes)}, opts)
        self.compute_cluster = oci.core.ComputeCluster(
            f"{name}-cluster",
            compartment_id=args.compartment_id,
            availability_domain=args.availability_domain,
            display_name=f"{args.cluster.name}-{name}",
            opts=pulumi.ResourceOptions(parent=self),
        )
        self.instances = _instances(self, name, args, cluster_id=self.compute_cluster.id, fault_domain={})
        self.register_outputs({"computeClusterId": self.compute_cluster.id})


class StorageNodes(pulumi.ComponentResource):
    """Ceph instances spread round-robin over the availability domain's fault domains."""

    def __init__(
        self, name: str, args: PoolArgs, fault_domains: Sequence[str], opts: pulumi.ResourceOptions | None = None
    ) -> None:
        domains = tuple(fault_domains) or FAULT_DOMAINS
        super().__init__(
            "gpucluster:oci:StorageNodes",
            name,
            {**storage_facts(args.cluster), "failureDomainCount": len(domains)},
            opts,
        )
        self.failure_domains = {n.name: domains[i % len(domains)] for i, n in enumerate(args.nodes)}
        self.instances = _instances(self, name, args, cluster_id=None, fault_domain=self.failure_domains)
        self.register_outputs({})


class ServiceNodes(pulumi.ComponentResource):
    def __init__(self, name: str, args: PoolArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__("gpucluster:oci:ServiceNodes", name, {"count": len(args.nodes)}, opts)
        self.instances = _instances(self, name, args, cluster_id=None, fault_domain={})
        self.register_outputs({})
