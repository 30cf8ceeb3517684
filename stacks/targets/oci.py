"""OCI: BM.GPU.H100.8 in a compute cluster (RDMA over RoCE), Ceph instances over fault domains."""

from __future__ import annotations

from typing import Any

import pulumi
import pulumi_oci as oci

from gpucluster.render.platform import platform_rdma_addressed
from gpucluster.spec import Cluster
from gpucluster.spec.models import OciTarget

from ..components import oci as comp
from ..components.common import TAG_IMAGE, node_reach, node_tags, pools, ssh_keys, stack_outputs
from ..components.userdata import NodeData, render_cloud_init

SSH_USER = "ubuntu"
# A created bastion's default shape: it only relays SSH (sized to 1 OCPU, 4 GB).
BASTION_SHAPE = "VM.Standard.E4.Flex"


def _image(target: OciTarget, shape: str) -> pulumi.Input[str]:
    if target.image_id:
        return target.image_id
    # Only with `image_lookup: true`: the newest platform image, reported by the image-pinned rule.
    images = oci.core.get_images_output(
        compartment_id=target.compartment_id,
        operating_system="Canonical Ubuntu",
        operating_system_version=target.os.removeprefix("ubuntu-"),
        shape=shape,
        sort_by="TIMECREATED",
        sort_order="DESC",
    )
    return images.images.apply(lambda found: found[0].id)


def deploy(cluster: Cluster) -> dict[str, Any]:
    target = cluster.spec.target
    assert isinstance(target, OciTarget)
    name = cluster.name
    tags = {"gpucluster-cluster": name}
    image_source = "lookup" if target.image_lookup else "pinned"
    reach = node_reach(target)
    fabric = comp.Fabric(
        name,
        comp.FabricArgs(
            cluster_name=name,
            compartment_id=target.compartment_id,
            management_cidr=cluster.spec.fabric.management_cidr,
            fabric_cidr=cluster.spec.fabric.fabric_cidr,
            admin_cidrs=tuple(target.admin_cidrs),
            admin_ports=reach.admin_ports(cluster),
            tags=tags,
            public_cidr=target.public_cidr,
            nat=target.egress.mode == "nat" and target.network is None,
            network=target.network,
            ssh_cidrs=reach.ssh_cidrs,
        ),
    )
    keys = ssh_keys(target.ssh_public_key)
    apt_mirror = target.egress.mirrors.get("os_archive")

    def cloud_init(hostname: str) -> str:
        return render_cloud_init(NodeData(hostname=hostname, ssh_user=SSH_USER, ssh_keys=keys, apt_mirror=apt_mirror))
    roce = cluster.spec.fabric.type == "roce"
    addresses: dict[str, tuple[Any, Any]] = {}
    ids: dict[str, Any] = {}
    domains: dict[str, str] = {}
    for plan in pools(cluster, "oci"):
        if not plan.nodes:
            continue
        assert plan.instance_type is not None
        args = comp.PoolArgs(
            cluster=cluster,
            nodes=plan.nodes,
            shape=plan.instance_type,
            image_id=_image(target, plan.instance_type),
            compartment_id=target.compartment_id,
            availability_domain=target.availability_domain,
            subnet_id=fabric.subnet_id,
            nsg_id=fabric.nsg.id,
            root_volume_gb=plan.pool.root_volume_gb,
            ssh_keys=keys,
            user_data={
                n.name: cloud_init(n.name)
                for n in plan.nodes
            },
            tags={n.name: node_tags(cluster, n, {**tags, TAG_IMAGE: image_source}) for n in plan.nodes},
        )
        component: comp.GpuNodePool | comp.StorageNodes | comp.ServiceNodes
        if plan.kind == "gpu":
            component = comp.GpuNodePool(plan.pool.name, args)
        elif plan.kind == "storage":
            component = comp.StorageNodes(plan.pool.name, args, target.fault_domains)
            domains.update(component.failure_domains)
        else:
            component = comp.ServiceNodes(plan.pool.name, args)
        for node in plan.nodes:
            inst = component.instances[node.name]
            # OCI's image addresses the RDMA ports itself (the platform's rail: addressing provider,
            # from its own range), not the VCN and not the roles: the node adopts what they carry,
            # so no spec address is exported for a port nobody would put it on. A platform whose
            # RDMA rail the cluster addresses gets the spec's planned address.
            addressed = platform_rdma_addressed(cluster.platform_of(node))
            fab = node.fabric_ip if plan.kind == "gpu" and roce and addressed else None
            addresses[node.name] = (inst.private_ip, fab)
            ids[node.name] = inst.id
    bastion: tuple[Any, Any] | None = None
    if reach.create_bastion:
        assert fabric.public_subnet_id is not None  # the spec rules require a public subnet for it
        shape = reach.bastion_instance_type(BASTION_SHAPE)
        made = comp.Bastion(
            f"{name}-bastion",
            comp.BastionArgs(
                cluster_name=name,
                compartment_id=target.compartment_id,
                availability_domain=target.availability_domain,
                vcn_id=fabric.vcn_id,
                subnet_id=fabric.public_subnet_id,
                node_nsg_id=fabric.nsg.id,
                admin_cidrs=tuple(target.admin_cidrs),
                management_cidr=cluster.spec.fabric.management_cidr,
                shape=shape,
                image_id=_image(target, shape),
                ssh_keys=keys,
                user_data=cloud_init(f"{name}-bastion"),
                tags={**tags, TAG_IMAGE: image_source},
            ),
        )
        bastion = (made.instance.public_ip, made.instance.private_ip)
    return stack_outputs(cluster, ssh_user=SSH_USER, addresses=addresses, instance_ids=ids, failure_domains=domains,
                         bastion=bastion, ssh_private_key_file=target.ssh_private_key_file)
