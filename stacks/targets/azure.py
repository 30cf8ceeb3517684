"""Azure: ND H100 v5 scale sets with InfiniBand in one placement group, storage VMs over zones."""

from __future__ import annotations

from typing import Any

from gpucluster.errors import InputError
from gpucluster.render.platform import fabric_netdev
from gpucluster.spec import Cluster
from gpucluster.spec.models import AzureTarget

from ..components import azure as comp
from ..components.common import TAG_IMAGE, node_reach, node_tags, pools, ssh_keys, stack_outputs
from ..components.userdata import Interface, NodeData, render_cloud_init, with_prefix

SSH_USER = "azureuser"
# A created bastion's default size: it only relays SSH (1 vCPU, 1 GiB).
BASTION_SIZE = "Standard_B1s"


def ipoib_interface(cluster: Cluster, node: str) -> str | None:
    """The node's IPoIB interface as its platform names it (ib0 on ND H100 v5), or None."""
    return fabric_netdev(cluster.platform_of(cluster.node(node)))


def deploy(cluster: Cluster) -> dict[str, Any]:
    target = cluster.spec.target
    assert isinstance(target, AzureTarget)
    problems = []
    if not target.ssh_public_key:
        problems.append("gpucluster.target.ssh_public_key: Azure VMs need an SSH key (password login is off)")
    for i, pool in enumerate(cluster.spec.node_pools):
        if "gpu" in pool.roles and pool.count > comp.MAX_PLACEMENT_GROUP:
            problems.append(
                f"gpucluster.node_pools[{i}].count: {pool.count} GPU VMs exceed one placement group "
                f"({comp.MAX_PLACEMENT_GROUP}); split the pool (VMs of different scale sets share no InfiniBand)"
            )
    if problems:
        raise InputError(problems, source=str(cluster.source))
    assert target.ssh_public_key is not None
    name = cluster.name
    base_tags = {**target.tags, "gpucluster-cluster": name}
    fabric_spec = cluster.spec.fabric
    infiniband = fabric_spec.type == "infiniband"
    reach = node_reach(target)
    fabric = comp.Fabric(
        name,
        comp.FabricArgs(
            cluster_name=name,
            location=target.location,
            resource_group=target.resource_group,
            management_cidr=fabric_spec.management_cidr,
            fabric_cidr=fabric_spec.fabric_cidr,
            admin_cidrs=tuple(target.admin_cidrs),
            admin_ports=reach.admin_ports(cluster),
            tags=base_tags,
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
    addresses: dict[str, tuple[Any, Any]] = {}
    ids: dict[str, Any] = {}
    domains: dict[str, str] = {}
    for plan in pools(cluster, "azure"):
        if not plan.nodes:
            continue
        assert plan.instance_type is not None
        gpu = plan.kind == "gpu"
        user_data = {}
        for n in plan.nodes:
            ipoib = ipoib_interface(cluster, n.name)
            ib = (
                (
                    Interface(
                        ipoib,
                        with_prefix(n.fabric_ip, fabric_spec.fabric_cidr),
                        fabric_spec.mtu,
                        match_name=ipoib,
                        infiniband=True,
                    ),
                )
                if gpu and infiniband and ipoib
                else ()
            )
            user_data[n.name] = render_cloud_init(
                NodeData(hostname=n.name, ssh_user=SSH_USER, ssh_keys=keys, fabric=ib, apt_mirror=apt_mirror)
            )
        args = comp.PoolArgs(
            cluster=cluster,
            nodes=plan.nodes,
            size=plan.instance_type,
            image=target.image,
            location=target.location,
            resource_group=fabric.resource_group.name,
            subnet_id=fabric.subnet_id,
            root_volume_gb=plan.pool.root_volume_gb,
            admin_username=SSH_USER,
            ssh_public_key=target.ssh_public_key,
            user_data=user_data,
            # The model refuses an image without an explicit version: every Azure node boots a pin.
            tags={n.name: node_tags(cluster, n, {**base_tags, TAG_IMAGE: "pinned"}) for n in plan.nodes},
            zones=tuple(target.zones),
            nsg_id=fabric.nic_nsg_id,
        )
        component: comp.GpuNodePool | comp.StorageNodes | comp.ServiceNodes
        if gpu:
            component = comp.GpuNodePool(plan.pool.name, args)
        elif plan.kind == "storage":
            component = comp.StorageNodes(plan.pool.name, args)
            domains.update(component.failure_domains)
        else:
            component = comp.ServiceNodes(plan.pool.name, args)
        for node in plan.nodes:
            vm, nic = component.vms[node.name]
            fab = node.fabric_ip if gpu and infiniband else None
            addresses[node.name] = (nic.private_ip_address, fab)
            ids[node.name] = vm.id
    bastion: tuple[Any, Any] | None = None
    if reach.create_bastion:
        assert fabric.public_subnet_id is not None  # the spec rules require a public subnet for it
        made = comp.Bastion(
            f"{name}-bastion",
            comp.BastionArgs(
                cluster_name=name,
                location=target.location,
                resource_group=fabric.resource_group.name,
                subnet_id=fabric.public_subnet_id,
                admin_cidrs=tuple(target.admin_cidrs),
                size=reach.bastion_instance_type(BASTION_SIZE),
                image=target.image,
                admin_username=SSH_USER,
                ssh_public_key=target.ssh_public_key,
                user_data=cloud_init(f"{name}-bastion"),
                tags={**base_tags, TAG_IMAGE: "pinned"},
            ),
        )
        bastion = (made.public_ip.ip_address, made.nic.private_ip_address)
    return stack_outputs(
        cluster,
        ssh_user=SSH_USER,
        addresses=addresses,
        instance_ids=ids,
        failure_domains=domains,
        bastion=bastion,
        ssh_private_key_file=target.ssh_private_key_file,
        # The IPoIB interface, as the node's platform names it (ib0 on ND H100 v5), only where the
        # node carries a fabric address (the GPU VMs): a storage VM has no InfiniBand port, and
        # GC-NET-001 skips it with that reason.
        fabric_interfaces={name: ipoib_interface(cluster, name) if fab else None
                           for name, (_, fab) in addresses.items()},
    )
