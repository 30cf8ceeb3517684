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

from .common import IMAGE_IGNORE_CHANGES, TAG_PURPOSE, storage_facts

FAULT_DOMAINS = ("FAULT-DOMAIN-1", "FAULT-DOMAIN-2", "FAULT-DOMAIN-3")


@dataclass(frozen=True)
class FabricArgs:
    cluster_name: str
    compartment_id: str
    management_cidr: str
    fabric_cidr: str
    admin_cidrs: tuple[str, ...]
    admin_ports: tuple[int, ...]
    tags: Mapping[str, str] = field(default_factory=dict)


class Fabric(pulumi.ComponentResource):
    """VCN, management subnet, an NSG (admin ports from admin_cidrs, everything within the VCN).
    The RDMA network of a compute cluster has no VCN resource: fabric_cidr is declared in the props."""

    def __init__(self, name: str, args: FabricArgs, opts: pulumi.ResourceOptions | None = None) -> None:
        super().__init__(
            "gpucluster:oci:Fabric",
            name,
            {"networks": [{"name": "rdma", "cidr": args.fabric_cidr, "purpose": "gpu"}]},
            opts,
        )
        child = pulumi.ResourceOptions(parent=self)
        tags = dict(args.tags)
        self.vcn = oci.core.Vcn(
            f"{name}-vcn",
            compartment_id=args.compartment_id,
            cidr_blocks=[args.management_cidr],
            display_name=f"{args.cluster_name}-vcn",
            dns_label=args.cluster_name.replace("-", "")[:15],
            freeform_tags=tags,
            opts=child,
        )
        self.subnet = oci.core.Subnet(
            f"{name}-mgmt",
            compartment_id=args.compartment_id,
            vcn_id=self.vcn.id,
            cidr_block=args.management_cidr,
            display_name=f"{args.cluster_name}-mgmt",
            dns_label="mgmt",
            prohibit_public_ip_on_vnic=True,
            freeform_tags={**tags, TAG_PURPOSE: "management,storage"},
            opts=child,
        )
        self.nsg = oci.core.NetworkSecurityGroup(
            f"{name}-nsg",
            compartment_id=args.compartment_id,
            vcn_id=self.vcn.id,
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
        for cidr_index, cidr in enumerate(args.admin_cidrs):
            for port in args.admin_ports:
                oci.core.NetworkSecurityGroupSecurityRule(
                    f"{name}-nsg-admin-{cidr_index}-{port}",
                    network_security_group_id=self.nsg.id,
                    direction="INGRESS",
                    protocol="6",
                    source=cidr,
                    source_type="CIDR_BLOCK",
                    tcp_options={"destination_port_range": {"min": port, "max": port}},
                    description=f"admin access to port {port}",
                    opts=child,
                )
        self.register_outputs({"subnetId": self.subnet.id})


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
