"""AWS: p5/p4d GPU pools with EFA in cluster placement groups, Ceph on NVMe instance storage."""

from __future__ import annotations

import ipaddress
from typing import Any

import pulumi
import pulumi_aws as aws

from gpucluster.errors import InputError
from gpucluster.spec import Cluster
from gpucluster.spec.cluster import aws_vpc_cidr
from gpucluster.spec.models import AwsTarget

from ..components import aws as comp
from ..components.common import (
    MANAGEMENT_PORTS,
    TAG_IMAGE,
    node_reach,
    node_tags,
    pools,
    ssh_keys,
    stack_outputs,
)
from ..components.userdata import NodeData, render_cloud_init

SSH_USER = "ubuntu"  # the Deep Learning Base AMI (Ubuntu) and Canonical's Ubuntu AMIs
# A created bastion's default size: it only relays SSH (2 vCPUs, 1 GiB).
BASTION_INSTANCE_TYPE = "t3.micro"
UBUNTU_FILTER = "ubuntu/images/hvm-ssd-gp3/ubuntu-jammy-22.04-amd64-server-*"
CANONICAL = "099720109477"


def vpc_cidr(cluster: Cluster) -> str:
    """target.vpc_cidr, or the smallest network holding the management, fabric and public CIDRs."""
    net = ipaddress.IPv4Network(aws_vpc_cidr(cluster.spec))
    if net.prefixlen < 16:
        raise InputError(
            f"gpucluster.target.vpc_cidr: management and fabric CIDRs only fit in {net}, wider than the "
            "/16 an AWS VPC allows; set vpc_cidr or move the CIDRs closer"
        )
    return str(net)


def _ami_lookup(name_filter: str, owner: str) -> pulumi.Output[str]:
    # Only with `ami_lookup: true`: the newest AMI by name, reported by the image-pinned rule.
    return aws.ec2.get_ami_output(
        most_recent=True,
        owners=[owner],
        filters=[{"name": "name", "values": [name_filter]}, {"name": "architecture", "values": ["x86_64"]}],
    ).id


def deploy(cluster: Cluster) -> dict[str, Any]:
    target = cluster.spec.target
    assert isinstance(target, AwsTarget)
    name = cluster.name
    base_tags = {**target.tags, "gpucluster-cluster": name}
    reach = node_reach(target)
    admin_ports = reach.admin_ports(cluster)
    assert set(admin_ports) <= set(MANAGEMENT_PORTS)
    fabric = comp.Fabric(
        name,
        comp.FabricArgs(
            cluster_name=name,
            vpc_cidr=vpc_cidr(cluster) if target.network is None else "",
            availability_zone=target.availability_zone,
            management_cidr=cluster.spec.fabric.management_cidr,
            fabric_cidr=cluster.spec.fabric.fabric_cidr,
            admin_cidrs=tuple(target.admin_cidrs),
            admin_ports=admin_ports,
            tags=base_tags,
            public_cidr=target.public_cidr,
            nat=target.egress.mode == "nat",
            network=target.network,
            ssh_cidrs=reach.ssh_cidrs,
        ),
    )
    key_name: pulumi.Output[str] | None = None
    if target.ssh_public_key:
        key = aws.ec2.KeyPair(f"{name}-key", key_name=f"{name}-admin", public_key=target.ssh_public_key, tags=base_tags)
        key_name = key.key_name
    keys = ssh_keys(target.ssh_public_key)
    apt_mirror = target.egress.mirrors.get("os_archive")

    def cloud_init(hostname: str) -> str:
        return render_cloud_init(NodeData(hostname=hostname, ssh_user=SSH_USER, ssh_keys=keys, apt_mirror=apt_mirror))
    gpu_ami: pulumi.Input[str]
    plain_ami: pulumi.Input[str] | None
    if target.ami_lookup:
        gpu_ami, plain_ami = _ami_lookup(target.ami_name_filter, target.ami_owner), target.service_ami_id
    else:
        pinned = target.pinned_ami()
        assert pinned is not None  # AwsTarget refuses a target with neither a pin nor ami_lookup
        gpu_ami, plain_ami = pinned, target.service_ami_id or pinned
    node_base_tags = {**base_tags, TAG_IMAGE: "lookup" if target.ami_lookup else "pinned"}

    instances: dict[str, aws.ec2.Instance] = {}
    failure_domains: dict[str, str] = {}
    for plan in pools(cluster, "aws"):
        if not plan.nodes:
            continue
        assert plan.instance_type is not None  # the spec checks require one per cloud pool
        user_data = {
            n.name: cloud_init(n.name) for n in plan.nodes
        }
        tags = {n.name: node_tags(cluster, n, node_base_tags) for n in plan.nodes}
        if plan.kind == "gpu":
            platform = cluster.platform_of_pool(plan.pool.name)
            efa_rails = [r for r in platform.rails if r.kind == "efa"]
            gpu = comp.GpuNodePool(
                plan.pool.name,
                comp.GpuPoolArgs(
                    cluster=cluster,
                    nodes=plan.nodes,
                    instance_type=plan.instance_type,
                    ami_id=gpu_ami,
                    root_volume_gb=plan.pool.root_volume_gb,
                    management_subnet_id=fabric.management_subnet_id,
                    security_group_id=fabric.security_group.id,
                    user_data=user_data,
                    tags=tags,
                    key_name=key_name,
                    availability_zone=target.availability_zone,
                    fabric_subnet_id=fabric.fabric_subnet_id,
                    efa_interfaces=platform.efa_interfaces,
                    efa_only=all(r.addressing == "none" for r in efa_rails),
                    capacity_reservation_id=target.capacity_reservation_id,
                    capacity_block=target.capacity_block,
                    placement_group_name=target.placement_group,
                ),
            )
            instances.update(gpu.instances)
            continue
        if plain_ami is None:
            plain_ami = _ami_lookup(UBUNTU_FILTER, CANONICAL)
        args = dict(
            cluster=cluster,
            nodes=plan.nodes,
            instance_type=plan.instance_type,
            ami_id=plain_ami,
            root_volume_gb=plan.pool.root_volume_gb,
            management_subnet_id=fabric.management_subnet_id,
            security_group_id=fabric.security_group.id,
            user_data=user_data,
            tags=tags,
            key_name=key_name,
            availability_zone=target.availability_zone,
        )
        if plan.kind == "storage":
            storage = comp.StorageNodes(
                plan.pool.name,
                comp.StorageArgs(**args, osd_devices=tuple(plan.pool.osd_devices)),  # type: ignore[arg-type]
            )
            instances.update(storage.instances)
            failure_domains.update(storage.failure_domains)
        else:
            service = comp.ServiceNodes(plan.pool.name, comp.PoolArgs(**args))  # type: ignore[arg-type]
            instances.update(service.instances)

    bastion: tuple[pulumi.Input[str], pulumi.Input[str]] | None = None
    if reach.create_bastion:
        assert fabric.public_subnet_id is not None  # the spec rules require a public subnet for it
        if plain_ami is None:
            plain_ami = _ami_lookup(UBUNTU_FILTER, CANONICAL)
        made = comp.Bastion(
            f"{name}-bastion",
            comp.BastionArgs(
                cluster_name=name,
                vpc_id=fabric.vpc_id,
                subnet_id=fabric.public_subnet_id,
                node_security_group_id=fabric.security_group.id,
                admin_cidrs=tuple(target.admin_cidrs),
                management_cidr=cluster.spec.fabric.management_cidr,
                instance_type=reach.bastion_instance_type(BASTION_INSTANCE_TYPE),
                ami_id=plain_ami,
                user_data=cloud_init(f"{name}-bastion"),
                tags=node_base_tags,
                key_name=key_name,
                availability_zone=target.availability_zone,
            ),
        )
        bastion = (made.instance.public_ip, made.instance.private_ip)

    # EFA carries no IP traffic: fabric_ip is None on AWS and NCCL finds the EFA devices itself.
    return stack_outputs(
        cluster,
        ssh_user=SSH_USER,
        addresses={n: (inst.private_ip, None) for n, inst in instances.items()},
        instance_ids={n: inst.id for n, inst in instances.items()},
        failure_domains=failure_domains,
        fabric_interface=None,
        bastion=bastion,
        ssh_private_key_file=target.ssh_private_key_file,
    )
