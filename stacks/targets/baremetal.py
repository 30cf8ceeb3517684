"""Bare metal: machines declared in the spec, provisioned by the site's PXE/BMC tooling from the
cloud-init or autoinstall data rendered here; addresses are the spec's planned ones."""

from __future__ import annotations

from typing import Any

from gpucluster.render.rails import rail_settings
from gpucluster.spec import Cluster, Node
from gpucluster.spec.cluster import MAC_FABRIC_INTERFACE, fabric_interface
from gpucluster.spec.models import BareMetalNode, BaremetalTarget

from ..components import baremetal as comp
from ..components.common import pools, ssh_keys, stack_outputs
from ..components.userdata import (
    Interface,
    NodeData,
    render_autoinstall,
    render_cloud_init,
    render_network_config,
    with_prefix,
)

MANAGEMENT_INTERFACE = "mgmt0"
FABRIC_INTERFACE = MAC_FABRIC_INTERFACE


def fabric_interface_of(cluster: Cluster, node: Node) -> str | None:
    """The interface that carries ``node``'s fabric address (gpucluster.spec.cluster.fabric_interface,
    which the spec's rules hold every gpu and storage pool to); None for a node off the fabric."""
    if not {"gpu", "storage"} & set(node.roles):
        return None
    target = cluster.spec.target
    assert isinstance(target, BaremetalTarget)
    declared = next(n for n in target.nodes if n.name == node.name)
    return fabric_interface(cluster.spec, cluster.pool(node.pool), cluster.platform_of(node),
                            bool(declared.fabric_macs))


def node_data(cluster: Cluster, node: Node, declared: BareMetalNode) -> NodeData:
    target = cluster.spec.target
    assert isinstance(target, BaremetalTarget)
    fabric = cluster.spec.fabric
    mgmt = Interface(
        MANAGEMENT_INTERFACE,
        with_prefix(node.management_ip, fabric.management_cidr),
        None,
        mac=declared.management_mac,
        gateway=target.gateway,
        dns=tuple(target.dns_servers),
    )
    ib = fabric.type == "infiniband"
    fab_ifaces: tuple[Interface, ...] = ()
    address = with_prefix(node.fabric_ip, fabric.fabric_cidr)
    name = fabric_interface_of(cluster, node)
    # Every compute port the spec addresses (RoCE: each port's IPv4 address makes its RoCEv2 GID,
    # the platform file says why), one subnet each, matched by the name the image gives it: the
    # rendering the fabric_rails role writes and GC-NET-001/GC-RAIL-001 check. Port 0 carries the
    # node's fabric address (gpucluster.spec.cluster.rail_cidrs).
    rails = tuple(Interface(r["interface"], f"{r['address']}/{r['prefixlen']}", r["mtu"], match_name=r["interface"])
                  for r in rail_settings(node.rails, fabric.mtu))
    if name == FABRIC_INTERFACE and declared.fabric_macs:
        fab_ifaces = (Interface(FABRIC_INTERFACE, address, fabric.mtu, mac=declared.fabric_macs[0]),)
    elif name and name not in {r.interface for r in node.rails}:
        # Matched by the name the platform's image gives it (an IB MAC, 20 bytes, is not portable).
        fab_ifaces = (Interface(name, address, fabric.mtu, match_name=name, infiniband=ib),)
    fab_ifaces += rails
    return NodeData(
        hostname=node.name,
        ssh_user=target.ssh_user,
        ssh_keys=ssh_keys(target.ssh_public_key),
        management=mgmt,
        fabric=fab_ifaces,
        root_disk=None,
    )


def deploy(cluster: Cluster) -> dict[str, Any]:
    target = cluster.spec.target
    assert isinstance(target, BaremetalTarget)
    declared = {n.name: n for n in target.nodes}
    fabric = comp.Fabric(cluster.name, comp.FabricArgs(cluster=cluster, members=tuple(n.name for n in cluster.nodes)))
    del fabric  # declared for the record and the policy rules; nothing refers to it
    for plan in pools(cluster):
        machines = []
        for node in plan.nodes:
            data = node_data(cluster, node, declared[node.name])
            autoinstall = target.provisioning == "autoinstall"
            machines.append(
                comp.MachineArgs(
                    node=node,
                    declared=declared[node.name],
                    fabric=cluster.name,
                    provisioning=target.provisioning,
                    user_data=render_autoinstall(data) if autoinstall else render_cloud_init(data),
                    network_config=None if autoinstall else render_network_config(data),
                )
            )
        args = comp.PoolArgs(cluster=cluster, machines=machines)
        if plan.kind == "gpu":
            comp.GpuNodePool(plan.pool.name, args)
        elif plan.kind == "storage":
            comp.StorageNodes(plan.pool.name, args)
        else:
            comp.ServiceNodes(plan.pool.name, args)
    return stack_outputs(
        cluster,
        ssh_user=target.ssh_user,
        addresses={n.name: (n.management_ip, n.fabric_ip) for n in cluster.nodes},
        failure_domains={n: d.rack for n, d in declared.items() if d.rack},
        fabric_interfaces={n.name: fabric_interface_of(cluster, n) for n in cluster.nodes},
    )
