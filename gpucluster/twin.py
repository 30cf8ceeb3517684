"""Platform twins: a lab on this host shaped like a real platform, run through the real path.

A twin stack is a real target's stack file (``kind: baremetal``, ``aws``...) plus a
``gpucluster:twin`` block naming a twin file (``gpucluster/data/twins/<name>.yaml``). The twin
file states what a machine of the platform looks like from inside a node, each fact with its
source, and what this host cannot be (``cannot_model``). From them:

- the lab boots one node per node of the stack, its links named as the platform's image names
  them: the management port, and one link per netdev of every rail of the node's platform
  (``gpucluster/data/platforms/``), each rail index on a bridge of its own. No link is addressed
  by the lab but management: the fabric address is the roles' to put where the real node has it;
- the stack's outputs are those of the target's own program (:func:`gpucluster.plan.plan_cluster`,
  under Pulumi's mocks), with what only the lab knows filled in: the nodes' addresses, the SSH
  user and key, and what the nodes can do (:data:`gpucluster.outputs.LAB_CAPABILITIES`).

Everything after that (inventory, converge, verify) is the target's path, unchanged: no role
or check asks whether it runs on a twin.
"""

from __future__ import annotations

import dataclasses
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TextIO

import yaml

from gpucluster.errors import InputError
from gpucluster.lab.lab import LabInputs, lab_inputs
from gpucluster.lab.layout import (
    SSH_USER,
    LabLayout,
    NodeFile,
    NodeLayout,
    OutsideLink,
    RailLink,
    _short_hash,
    layout_lab,
)
from gpucluster.lab.rootfs import rootfs_key
from gpucluster.outputs import LAB_CAPABILITIES, Capabilities, LinkFloors
from gpucluster.render.platform import provider_ports
from gpucluster.spec.cluster import Cluster
from gpucluster.spec.loader import load_twins
from gpucluster.spec.models import BaremetalTarget, LabTarget, TwinBootService, TwinFile
from gpucluster.spec.rules import twin_bastion_address

# The OS a lab node runs (LabTarget.os): the only archive the lab reaches is Debian's.
LAB_OS = LabTarget.model_fields["os"].default


def twin_of(cluster: Cluster) -> TwinFile | None:
    """The stack's twin file, or None when the stack is not booted as a twin."""
    ref = cluster.spec.twin
    if ref is None:
        return None
    twins = load_twins()
    if ref.file not in twins:  # the spec's rules refuse this first; kept for callers with a bare Cluster
        raise InputError(f"gpucluster.twin.file: unknown twin {ref.file!r}", source=str(cluster.source))
    return twins[ref.file]


def rail_links(cluster: Cluster, node_name: str) -> list[tuple[str, str]]:
    """(rail key, netdev) of every link the node's platform names, in the platform's order; the key
    (rail name and index) names the bridge that joins that port across nodes."""
    node = cluster.node(node_name)
    platform = cluster.platform_of(node)
    return [(f"{rail.name}{i}", netdev) for rail in platform.rails for i, netdev in enumerate(rail.netdev_names())]


# cloud-init hands the network-config to netplan here (cloud-init docs, "Network configuration
# outputs": netplan, /etc/netplan/50-cloud-init.yaml), under netplan's top-level `network:` key.
NETPLAN_FILE = "/etc/netplan/50-cloud-init.yaml"
NETPLAN_PACKAGES = ("netplan.io",)


def netplan_files(cluster: Cluster, node_name: str) -> tuple[NodeFile, ...]:
    """The target's own network-config for the node as cloud-init writes it for netplan (bare metal:
    the machine's seed, gpucluster/seeds.py, which stacks/targets/baremetal.py renders; no second copy)."""
    from gpucluster.seeds import node_seed

    target = cluster.spec.target
    if not isinstance(target, BaremetalTarget):
        raise InputError(f"gpucluster.twin: a twin of image network 'netplan' models the bare-metal target's "
                         f"network-config; target {target.kind!r} renders none", source=str(cluster.source))
    network_config = node_seed(cluster, node_name).files.get("network-config")
    if network_config is None:
        raise InputError(f"gpucluster.twin: target.provisioning {target.provisioning!r} gives the node no "
                         "network-config for netplan", source=str(cluster.source))
    config = yaml.safe_load(network_config)
    # netplan refuses a world-readable file (netplan 0.106: "Permissions ... are too open").
    return (NodeFile(NETPLAN_FILE, yaml.safe_dump({"network": config}, sort_keys=False), 0o600),)


TWIN_SCRIPTS = "/etc/gpucluster-twin"


def boot_service_script(twin: TwinFile, service: str) -> str:
    """Where the twin keeps the script of the image's boot service ``service`` (the unit runs it)."""
    return f"{TWIN_SCRIPTS}/{service.removesuffix('.service')}.sh"


def provider_port_addresses(cluster: Cluster, node_name: str, management_ip: str,
                            prefixlen: int | None = None) -> list[tuple[str, str]]:
    """(netdev, address/prefix) the provider's image gives each port of the node's provider-addressed
    rail: port i, host h (the management address's last octet) takes the first range's address
    i*256 + h, 192.168.<i>.<h> for OCI's 192.168.0.0/16, the pattern an OCI GPU node shows; its
    prefix length ``prefixlen``, else the range's."""
    platform = cluster.platform_of(cluster.node(node_name))
    host = int(ipaddress.IPv4Address(management_ip)) & 0xFF
    out = []
    for i, (netdev, cidrs) in enumerate(provider_ports(platform)):
        net = ipaddress.IPv4Network(cidrs[0])
        out.append((netdev, f"{net[i * 256 + host]}/{prefixlen or net.prefixlen}"))
    return out


def _address_ports_script(cluster: Cluster, twin: TwinFile, service: TwinBootService, node_name: str,
                          management_ip: str) -> str:
    ports = provider_port_addresses(cluster, node_name, management_ip, service.prefixlen)
    if not ports or service.mtu is None:
        platform = cluster.platform_of(cluster.node(node_name)).name
        raise InputError(f"twin {twin.name!r}: boot service {service.unit} addresses the provider's ports, but "
                         f"platform {platform!r} has no rail with addressing: provider or the service names no mtu")
    lines = "".join(f"ip link set dev {dev} mtu {service.mtu} up\nip addr replace {addr} dev {dev}\n"
                    for dev, addr in ports)
    return f"#!/bin/sh\n# The image's {service.unit} ({service.source}): each RDMA port addressed.\nset -e\n{lines}"


def _nccl_conf_script(cluster: Cluster, twin: TwinFile, service: TwinBootService, node_name: str) -> str:
    platform = cluster.platform_of(cluster.node(node_name))
    if platform.nccl_conf_rewritten_by != service.unit or not platform.image_nccl:
        raise InputError(f"twin {twin.name!r}: boot service {service.unit} rewrites /etc/nccl.conf, but platform "
                         f"{platform.name!r} names {platform.nccl_conf_rewritten_by!r} with "
                         f"{len(platform.image_nccl)} image NCCL key(s)")
    lines = "".join(f"{k}={v}\n" for k, v in platform.image_nccl.items())
    return (f"#!/bin/sh\n# The image's {service.unit} ({service.source}): /etc/nccl.conf "
            f"written whole.\nprintf '%s' '{lines}' > /etc/nccl.conf\n")


def boot_service_files(cluster: Cluster, twin: TwinFile, node_name: str,
                       management_ip: str | None = None) -> tuple[NodeFile, ...]:
    """The image's boot services, as units the node runs at every boot. ``rewrite_nccl_conf``: the
    unit writes /etc/nccl.conf whole with the platform's image_nccl keys (and empties it at
    shutdown), as Azure's sku-customizations.service does; the keys are the platform file's, the
    one place that states them. ``address_provider_ports``: the unit gives every port of the
    platform's provider-addressed rail its address and MTU and brings it up, as OCI's RDMA
    network configuration does (the ranges are the platform file's; ``management_ip``, the lab's,
    gives the host part)."""
    files: list[NodeFile] = []
    for service in twin.boot_services:
        script = boot_service_script(twin, service.unit)
        if service.action == "address_provider_ports":
            text = _address_ports_script(cluster, twin, service, node_name,
                                         management_ip or cluster.node(node_name).management_ip)
            # After networkd, which leaves these unmatched ports and their addresses alone.
            order, stop = "After=systemd-networkd.service\n", ""
        else:
            text = _nccl_conf_script(cluster, twin, service, node_name)
            order, stop = "After=local-fs.target\n", "ExecStop=/bin/sh -c ': > /etc/nccl.conf'\n"
        files += [
            NodeFile(script, text, 0o755),
            NodeFile(f"/etc/systemd/system/{service.unit}",
                     f"[Unit]\nDescription=the image's {service.unit} (platform twin {twin.name})\n{order}"
                     "\n[Service]\nType=oneshot\nRemainAfterExit=yes\n"
                     f"ExecStart=/bin/sh {script}\n{stop}"),
            # Enabled as the image enables it (a drop-in: the lab writes files, not links).
            NodeFile(f"/etc/systemd/system/multi-user.target.d/50-{service.unit.removesuffix('.service')}.conf",
                     f"[Unit]\nWants={service.unit}\n"),
        ]
    return tuple(files)


def shape(plan: LabLayout, cluster: Cluster, twin: TwinFile) -> LabLayout:
    """The lab's plan with the platform's links: management named as the image names it, no lab
    fabric link, and one link per rail netdev, each rail index on its own bridge; where the image
    applies the target's network-config with netplan, that file, netplan, and the MACs it matches."""
    keys = list(dict.fromkeys(key for n in cluster.nodes for key, _ in rail_links(cluster, n.name)))
    lab_hash = _short_hash(cluster.name)
    bridges = {key: f"gc{lab_hash}r{i}" for i, key in enumerate(keys)}
    nodes = []
    for n in plan.nodes:
        node_hash = _short_hash(f"{cluster.name}/{n.name}")
        links = tuple(RailLink(netdev, f"gv{node_hash}r{i}", bridges[key])
                      for i, (key, netdev) in enumerate(rail_links(cluster, n.name)))
        netplan = twin.image.network == "netplan"
        nodes.append(dataclasses.replace(
            n, rails=links, management_interface=twin.management_interface.name, fabric_interface=None,
            management_mac=management_mac(cluster, n.name) if netplan else None,
            files=(netplan_files(cluster, n.name) if netplan else ())
            + boot_service_files(cluster, twin, n.name, n.management_ip)))
    packages = plan.packages + (NETPLAN_PACKAGES if twin.image.network == "netplan" else ())
    outside = cluster.spec.twin.outside_cidr if cluster.spec.twin is not None else None
    b = bastion(cluster, plan) if outside and bastion_subnet(cluster) is not None else None
    if b is not None and b.management_subnet:
        # The nodes reach the bastion's subnet on their management link, where the platform routes it.
        nodes = [dataclasses.replace(n, onlink=(b.management_subnet,)) for n in nodes]
    elif outside:
        # Reached directly from outside: the nodes answer the controller's network on that link.
        nodes = [dataclasses.replace(n, onlink=(outside,)) for n in nodes]
    access = getattr(cluster.spec.target, "access", None)
    site = bool(b is not None and access is not None and access.bastion is not None and not access.bastion.create)
    return dataclasses.replace(plan, nodes=tuple(nodes), rail_bridges=tuple(bridges.values()), rail_cidrs=(),
                               twin=twin.name, packages=packages, node_apt_proxy=not declares_proxy(cluster, plan),
                               rootfs_key=rootfs_key(plan.suite, plan.mirror, packages),
                               outside_cidr=outside, outside_bridge=f"gc{lab_hash}o" if b is not None else None,
                               bastion=b, site_bastion=site)


# The lab machine a twin reached through a bastion boots as its bastion: its interfaces.
BASTION_NAME = "bastion"
BASTION_OUTSIDE_INTERFACE = "eth0"
BASTION_MANAGEMENT_INTERFACE = "eth1"


def bastion_subnet(cluster: Cluster) -> ipaddress.IPv4Network | None:
    """The subnet the twin's bastion reaches the nodes from, as on the platform: the public subnet for
    a bastion the stack creates (target.public_cidr), the site's bastion's source_cidr otherwise; None
    without a bastion. It is apart from the management network, so the nodes' firewall admits the
    bastion by the stack's access path, not as one more address of their own network."""
    access = getattr(cluster.spec.target, "access", None)
    b = access.bastion if access is not None and access.mode == "bastion" else None
    if b is None:
        return None
    cidr = getattr(cluster.spec.target, "public_cidr", None) if b.create else b.source_cidr
    return ipaddress.IPv4Network(cidr) if cidr else None


def bastion(cluster: Cluster, plan: LabLayout) -> NodeLayout:
    """The twin's bastion: a lab machine with its public address on the outside network (the
    second of twin.outside_cidr: the host, as the controller, holds the first) and a leg on the
    management bridge with the first address of :func:`bastion_subnet`, routed on that link to the
    management network (and the nodes to it), where the platform's router carries it (cannot_model
    says so). The spec's rules hold a site's bastion to that place, port and login."""
    ref = cluster.spec.twin
    subnet = bastion_subnet(cluster)
    assert ref is not None and ref.outside_cidr is not None and subnet is not None
    if any(n.name == BASTION_NAME for n in plan.nodes):
        raise InputError(f"gpucluster.node_pools: a node is named {BASTION_NAME!r}, the name of the twin's bastion; "
                         "rename it", source=str(cluster.source))
    outside = ipaddress.IPv4Network(ref.outside_cidr)
    leg = next(iter(subnet.hosts()), subnet.network_address)
    node_hash = _short_hash(f"{cluster.name}/{BASTION_NAME}")
    return NodeLayout(
        name=BASTION_NAME, management_ip=str(leg), fabric_ip="", netns=f"gcl-{cluster.name}-{BASTION_NAME}",
        veth_management=f"gv{node_hash}m", veth_fabric=f"gv{node_hash}f", data_disks=0, data_disk_gb=0,
        management_interface=BASTION_MANAGEMENT_INTERFACE, fabric_interface=None,
        outside=OutsideLink(BASTION_OUTSIDE_INTERFACE, f"gv{node_hash}o",
                            f"{twin_bastion_address(outside)}/{outside.prefixlen}"),
        management_subnet=str(subnet), onlink=(plan.management_cidr,))


def declares_proxy(cluster: Cluster, plan: LabLayout) -> bool:
    """Whether the stack's egress is a proxy. On a twin that proxy is the lab's own (the only way
    out of this host's nodes): the lab then writes no apt proxy of its own into the nodes, and they
    reach packages only once converge has configured the egress the stack declares, as on the
    platform. A declared proxy anywhere else is refused: no node of the twin could reach it."""
    egress = getattr(cluster.spec.target, "egress", None)
    if egress is None or egress.mode != "proxy":
        return False
    for key in ("http_proxy", "https_proxy"):
        url = str(getattr(egress, key) or "").rstrip("/")
        if url != plan.proxy_url:
            raise InputError(f"gpucluster.target.egress.{key}: {url or 'unset'}, but the twin's nodes reach only "
                             f"the lab's proxy, {plan.proxy_url}: name it (it is the platform's proxy on the twin)",
                             source=str(cluster.source))
    return True


def management_mac(cluster: Cluster, node_name: str) -> str | None:
    """The management MAC the bare-metal target declares for the node (its network-config matches it)."""
    target = cluster.spec.target
    if not isinstance(target, BaremetalTarget):
        return None
    return next(n.management_mac for n in target.nodes if n.name == node_name)


def capabilities(twin: TwinFile) -> Capabilities:
    """What the twin's nodes can do: a lab node's, on Debian, with the twin's own link floors."""
    floors = LinkFloors(allreduce_inter_busbw_gbps=twin.link_floors.allreduce_inter_busbw_gbps,
                        allreduce_inter_verdict_bytes=twin.link_floors.allreduce_inter_verdict_bytes)
    return LAB_CAPABILITIES.model_copy(update={"runs_os": LAB_OS, "link_floors": floors})


def fill_outputs(outputs: dict[str, Any], plan: LabLayout, twin: TwinFile) -> dict[str, Any]:
    """The target's outputs with what only the lab knows: each node's addresses as the lab gave
    them, the lab's SSH user and key, and what the twin's nodes can do. Nothing else changes."""
    by_name: dict[str, NodeLayout] = {n.name: n for n in plan.nodes}
    nodes = []
    for node in outputs["nodes"]:
        lab = by_name.get(node["name"])
        if lab is None:
            raise InputError(f"the target's outputs name node {node['name']!r}, which the twin's lab has not")
        # The fabric address stays the target's: the roles put it on the platform's port.
        nodes.append({**node, "management_ip": lab.management_ip, "ssh_user": SSH_USER})
    filled = {**outputs, "nodes": nodes, "ssh_private_key_file": str(plan.key_file),
              "capabilities": capabilities(twin).model_dump()}
    access = outputs.get("access") or {}
    if access.get("mode") == "bastion":
        b = plan.bastion
        if b is None or b.outside is None:
            raise InputError("the target's outputs reach the nodes through a bastion, but the twin's lab has none "
                             "(gpucluster.twin.outside_cidr)")
        if access.get("created"):
            # The bastion the stack creates: its addresses as the lab gave them, and the lab's login.
            filled["access"] = {**access, "bastion": {"host": b.outside.address.split("/")[0], "user": SSH_USER,
                                                      "port": 22, "source_cidr": f"{b.management_ip}/32"}}
        # else the site's bastion, which the lab booted where the stack names it: the target's outputs as
        # they are (the inventory holds them to the stack's access path).
    return filled


def inputs(cluster: Cluster) -> LabInputs:
    """What `gpucluster lab up` boots for the stack: a twin's nodes shaped like its platform, with
    the outputs of the stack's own target program; the lab target's inputs otherwise."""
    t = twin_of(cluster)
    if t is None:
        return lab_inputs(cluster)
    plan = shape(layout_lab(cluster), cluster, t)
    return LabInputs(plan, fill_outputs(target_outputs(cluster), plan, t))


def target_outputs(cluster: Cluster) -> dict[str, Any]:
    """What the stack's target program exports, run under Pulumi's mocks (no cloud is reached)."""
    from gpucluster.plan import plan_cluster

    plan = plan_cluster(cluster)
    if plan.failed:
        rules = "; ".join(f"{r.rule}: {r.message}" for r in plan.failed)
        raise InputError(f"the stack's policy refuses it, as `pulumi up` would: {rules}", source=str(cluster.source))
    return plan.outputs


# --- what a twin must show, run by `gpucluster twin check` (make twins) ---------------------------


@dataclass
class Step:
    name: str
    ok: bool
    seconds: float
    detail: str = ""
    run_dir: str | None = None


@dataclass
class TwinReport:
    stack: str
    twin: str
    platform: str
    cannot_model: list[str]
    steps: list[Step] = field(default_factory=list)
    up: dict[str, Any] | None = None  # `gpucluster up --json`'s summary

    @property
    def ok(self) -> bool:
        return bool(self.steps) and all(s.ok for s in self.steps)

    def as_dict(self) -> dict[str, Any]:
        return {"stack": self.stack, "twin": self.twin, "platform": self.platform, "ok": self.ok,
                "cannot_model": self.cannot_model, "steps": [asdict(s) for s in self.steps], "up": self.up}


def first_gpu_node(cluster: Cluster) -> str:
    nodes = cluster.nodes_with_role("gpu")
    if not nodes:
        raise InputError("a twin needs GPU nodes: the stack has none", source=str(cluster.source))
    return nodes[0].name


# The throttled management link's rate, 2.5 MB/s: ten times below the lowest twin all-reduce floor
# (link_floors, 0.025 GB/s), far above what SSH needs to run every other check over it.
THROTTLE_RATE = "20mbit"


def _throttle(interface: str) -> list[str]:
    return ["tc", "qdisc", "replace", "dev", interface, "root", "tbf", "rate", THROTTLE_RATE, "burst", "64kb",
            "latency", "50ms"]


def fault_command(cluster: Cluster, twin: TwinFile, outputs: dict[str, Any]) -> list[str]:
    """The command, run on the twin's first GPU node, that injects the twin's fault."""
    name = first_gpu_node(cluster)
    node = next(n for n in outputs["nodes"] if n["name"] == name)
    if twin.fault.kind == "remove_fabric_address":
        provided = provider_ports(cluster.platform_of(cluster.node(name)))
        if provided and not node.get("fabric_ip"):
            # The provider addresses the ports (OCI): its address taken off the node's first one.
            return ["ip", "-4", "addr", "flush", "dev", provided[0][0]]
        rails = node.get("rails") or []
        if twin.fault.port is not None:
            # One compute port the spec addresses loses its address (the others keep theirs).
            if twin.fault.port >= len(rails):
                raise InputError(f"twin {twin.name!r}: fault port {twin.fault.port}, but {name} has {len(rails)} "
                                 "addressed compute port(s) in the target's outputs")
            rail = rails[twin.fault.port]
            prefix = ipaddress.IPv4Network(rail["cidr"]).prefixlen
            return ["ip", "addr", "del", f"{rail['address']}/{prefix}", "dev", rail["interface"]]
        if not node.get("fabric_ip") or not node.get("fabric_interface"):
            raise InputError(f"twin {twin.name!r}: fault remove_fabric_address, but {name} has no fabric address "
                             "on an interface in the target's outputs")
        # The fabric address at its rail's prefix where a compute port carries it (subnet_per_rail).
        cidr = next((r["cidr"] for r in rails if r["address"] == node["fabric_ip"]), outputs["fabric"]["fabric_cidr"])
        prefix = ipaddress.IPv4Network(cidr).prefixlen
        return ["ip", "addr", "del", f"{node['fabric_ip']}/{prefix}", "dev", node["fabric_interface"]]
    if twin.fault.kind == "throttle_management_link":
        # A token bucket on the management port's egress, as the lab's slow-link tests shape a
        # rail (tbf's burst above the largest frame, else it drops them): the node's own sends
        # crawl, so every all-reduce it takes part in does, and the pair search singles it out.
        return _throttle(twin.management_interface.name)
    if twin.fault.kind == "throttle_rail":
        # One compute port of the node shaped the same way: its rail's own all-reduce crawls on it.
        rails = node.get("rails") or []
        port = twin.fault.port if twin.fault.port is not None else 0
        if port >= len(rails):
            raise InputError(f"twin {twin.name!r}: fault port {port}, but {name} has {len(rails)} addressed "
                             "compute port(s) in the target's outputs")
        return _throttle(str(rails[port]["interface"]))
    if not twin.boot_services:
        raise InputError(f"twin {twin.name!r}: fault boot_service, but the twin lists no boot service")
    # The image's script run again outside its unit (an image update, an operator), so no drop-in
    # of the unit's puts the role's file back: what the image writes is what verify finds.
    return ["/bin/sh", boot_service_script(twin, twin.boot_services[0].unit)]


def _boot_id(plan: LabLayout, node: NodeLayout) -> str:
    """The node's kernel boot_id as systemd sees it (a new one after every boot), or '' unreachable."""
    from gpucluster.lab.ssh import ssh_run

    res = ssh_run(plan, node, ["cat", "/proc/sys/kernel/random/boot_id"])
    return res.stdout.strip() if res.returncode == 0 else ""


def missing_passes(run_dir: Path, cluster: Cluster, twin: TwinFile) -> list[str]:
    """``node check`` of every check the twin file says must pass on every GPU node and did not:
    a twin proves only what runs on it, and a skip is no proof."""
    data = json.loads((run_dir / "results.json").read_text())
    passed = {(str(r["node"]), str(r["check_id"])) for r in data["results"] if r.get("outcome") == "passed"}
    return [f"{n.name} {check}" for n in cluster.nodes_with_role("gpu") for check in twin.must_pass
            if (n.name, check) not in passed]


def verify_failures(run_dir: Path) -> set[tuple[str, str]]:
    """(node, check) of every failed check in a verify run folder's results.json."""
    data = json.loads((run_dir / "results.json").read_text())
    return {(str(r["node"]), str(r["check_id"])) for r in data["results"] if r.get("outcome") == "failed"}


def _cli(argv: list[str], out: TextIO) -> tuple[int, str | None]:
    """One gpucluster command as a child, its output to ``out``; (exit code, its run folder)."""
    print(f"twin: $ gpucluster {' '.join(argv)}", file=out, flush=True)
    proc = subprocess.Popen([sys.executable, "-m", "gpucluster", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, process_group=0)
    run_dir = None
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            out.write(line)
            if line.startswith("run folder: "):
                run_dir = line.removeprefix("run folder: ").split()[0]
        return proc.wait(), run_dir
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)
        raise


def _cli_json(argv: list[str], out: TextIO) -> tuple[int, dict[str, Any] | None]:
    """A gpucluster command whose stdout is one JSON document (its progress on stderr, to ``out``)."""
    print(f"twin: $ gpucluster {' '.join(argv)}", file=out, flush=True)
    proc = subprocess.Popen([sys.executable, "-m", "gpucluster", *argv], stdout=subprocess.PIPE, stderr=out,
                            text=True, process_group=0)
    try:
        stdout, _ = proc.communicate()
    except KeyboardInterrupt:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=120)
        raise
    try:
        doc = json.loads(stdout)
    except ValueError:
        doc = None
    return proc.returncode, doc if isinstance(doc, dict) else None


def _connects(address: str, port: int, timeout: float = 3.0) -> str | None:
    """None when a TCP connection from this host opens, else why it did not."""
    try:
        with socket.create_connection((address, port), timeout=timeout):
            return None
    except TimeoutError:
        return f"no answer within {timeout:.0f} s"
    except OSError as exc:
        return exc.strerror or str(exc)


def reach_problems(plan: LabLayout) -> list[str]:
    """Where the stack is reached through a bastion: the host (the controller) must reach the
    bastion's SSH on its outside address, and no node's SSH on any of its addresses, the
    management network's or the fabric's."""
    b = plan.bastion
    if b is None or b.outside is None:
        return _direct_reach_problems(plan)
    problems = []
    public = b.outside.address.split("/")[0]
    why = _connects(public, 22)
    if why is not None:
        problems.append(f"the bastion's SSH at {public}:22 does not answer the controller: {why}")
    for n in plan.nodes:
        for address in dict.fromkeys(a for a in (n.management_ip, n.fabric_ip) if a):
            if _connects(address, 22) is None:
                problems.append(f"{n.name}: the controller reaches its SSH at {address}:22 directly, around the "
                                "bastion")
    return problems


def _ssh_client(plan: LabLayout, node: NodeLayout) -> str:
    """The address a node sees the controller's SSH connection come from (its $SSH_CLIENT)."""
    from gpucluster.lab.ssh import ssh_run

    res = ssh_run(plan, node, ["echo", "$SSH_CLIENT"])
    return res.stdout.split()[0] if res.returncode == 0 and res.stdout.split() else f"no answer ({res.returncode})"


def _direct_reach_problems(plan: LabLayout) -> list[str]:
    """A twin reached directly from outside (twin.outside_cidr): each node sees the controller come
    from its outside address, which the nodes' firewall admits as one of the admin_cidrs."""
    if plan.outside_cidr is None:
        return []
    problems = []
    for n in plan.nodes:
        seen = _ssh_client(plan, n)
        if seen != plan.outside_host_ip:
            problems.append(f"{n.name}: sees the controller's SSH come from {seen}, not from its outside address "
                            f"{plan.outside_host_ip}")
    return problems


def _step(report: TwinReport, name: str, started: float, ok: bool, detail: str = "",
          run_dir: str | None = None) -> bool:
    report.steps.append(Step(name, ok, round(time.monotonic() - started, 1), detail, run_dir))
    return ok


def _converge_changes_nothing(report: TwinReport, name: str, started: float, stack: str, out: TextIO) -> bool:
    """A converge of the twin, recorded as step ``name``: it holds when it passed and changed nothing."""
    rc, run_dir = _cli(["converge", "--stack", stack], out)
    changed = _changed_hosts(run_dir) if rc == 0 and run_dir else {}
    return _step(report, name, started, rc == 0 and not changed,
                 f"exit {rc}" + (f", changed: {changed}" if changed else ", nothing changed"), run_dir)


def _changed_hosts(run_dir: str) -> dict[str, int]:
    summary = json.loads((Path(run_dir) / "summary.json").read_text())
    return {host: int(stats["changed"]) for host, stats in summary["hosts"].items() if stats["changed"]}


def run_check(stack_file: Path, out: TextIO, *, keep: bool = False) -> TwinReport:
    """A twin from nothing to its verdicts: up, every node rebooted, converge again (it changes
    nothing: idempotent roles, and no boot service undid their work), verify with no FAIL, the
    twin's fault injected and named (and nothing else), then the lab removed (unless ``keep``).
    Each step is the user's own command."""
    from gpucluster.lab import node as node_mod
    from gpucluster.lab.ssh import ssh_run
    from gpucluster.paths import stack_paths
    from gpucluster.spec import load_spec

    cluster = load_spec(stack_file)
    twin = twin_of(cluster)
    if twin is None:
        raise InputError("not a twin stack: it has no gpucluster:twin block", source=str(stack_file))
    report = TwinReport(str(stack_file), twin.name, twin.platform, [f"{c.what}: {c.reason}" for c in twin.cannot_model])
    stack = str(stack_file)
    paths = stack_paths(cluster)
    try:
        t = time.monotonic()
        rc, summary = _cli_json(["up", "--stack", stack, "--fresh", "--no-burn", "--json"], out)
        report.up = summary
        stages = ", ".join(f"{st.get('name')} {st.get('status')}" for st in (summary or {}).get("stages", []))
        if not _step(report, "up", t, rc == 0, f"exit {rc}: {stages}"):
            return report
        plan = inputs(cluster).plan
        if plan.bastion is not None:
            # Converge and verify passed through it: proven the only way, by the way around refused.
            t = time.monotonic()
            problems = reach_problems(plan)
            if not _step(report, "the bastion is the only way in", t, not problems,
                         "; ".join(problems) or "the host's connections to every node's SSH refused, the "
                         "bastion's answered"):
                return report
        elif plan.outside_cidr is not None:
            t = time.monotonic()
            problems = reach_problems(plan)
            if not _step(report, "the controller reaches the nodes from outside their network", t, not problems,
                         "; ".join(problems) or f"every node saw it come from {plan.outside_host_ip}"):
                return report
        # One converge after `up`'s, run after every node has rebooted: it must change nothing, which
        # holds only when the roles are idempotent and no boot service (netplan, cloud-init, the
        # image's own units) undid what they set. A converge before the reboot as well proved nothing
        # this one does not, and cost each twin a minute of CI.
        t = time.monotonic()
        before = {n.name: _boot_id(plan, n) for n in plan.nodes}
        for n in plan.nodes:
            node_mod.stop(plan, n)
        rc, _ = _cli(["lab", "up", "--stack", stack], out)
        after = {n.name: _boot_id(plan, n) for n in plan.nodes}
        same = sorted(name for name in before if not after[name] or after[name] == before[name])
        if not _step(report, "reboot every node", t, rc == 0 and not same,
                     f"exit {rc}" + (f", not rebooted: {same}" if same else ", a new boot_id on every node")):
            return report
        t = time.monotonic()
        if not _converge_changes_nothing(report, "converge again, after the reboot", t, stack, out):
            return report
        t = time.monotonic()
        rc, run_dir = _cli(["verify", "--stack", stack, "--no-burn"], out)
        failed = verify_failures(Path(run_dir)) if run_dir else set()
        unproven = missing_passes(Path(run_dir), cluster, twin) if run_dir else []
        detail = f"exit {rc}" + (f", failed: {sorted(failed)}" if failed else "") + (
            f", did not pass (twin file must_pass): {unproven}" if unproven else "")
        if not _step(report, "verify after the reboot", t, rc == 0 and not failed and not unproven, detail, run_dir):
            return report
        t = time.monotonic()
        outputs = json.loads(paths.outputs_file.read_text())
        victim = first_gpu_node(cluster)
        command = fault_command(cluster, twin, outputs)
        res = ssh_run(plan, plan.node(victim), command)
        if not _step(report, f"inject: {twin.fault.description}", t, res.returncode == 0,
                     f"{' '.join(command)} on {victim}: exit {res.returncode} {res.stderr.strip()}"):
            return report
        t = time.monotonic()
        rc, run_dir = _cli(["verify", "--stack", stack, "--no-burn"], out)
        failed = verify_failures(Path(run_dir)) if run_dir else set()
        expected = {(victim, check) for check in twin.fault.expect}
        ok = rc == 1 and failed == expected
        _step(report, "verify names the fault and nothing else", t, ok,
              f"exit {rc}; failed {sorted(failed)}; expected {sorted(expected)}", run_dir)
        return report
    finally:
        if not keep:
            t = time.monotonic()
            rc, _ = _cli(["down", "--stack", stack], out)
            _step(report, "down", t, rc == 0, f"exit {rc}")


def markdown_table(stacks: list[Path]) -> str:
    """The README's table of the twins: platform, what the twin models, what it cannot."""
    from gpucluster.spec import load_spec

    rows = ["| Twin stack | Platform (target) | What the twin models | What it cannot model |", "|---|---|---|---|"]
    for stack in stacks:
        cluster = load_spec(stack)
        t = twin_of(cluster)
        if t is None:
            continue
        platform = cluster.platforms[t.platform]
        links = [t.management_interface.name] + [d for rail in platform.rails for d in rail.netdev_names()]
        models = [f"links {', '.join(links)}" if len(links) > 1 else f"management {links[0]} (no rail netdevs)",
                  f"{t.image.name} ({t.image.os}) as the OS every choice resolves for"]
        if t.image.network:
            models.append(f"the target's network-config applied by {t.image.network} at every boot")
        models += [f"{s.unit} at every boot" for s in t.boot_services]
        if cluster.spec.twin is not None and cluster.spec.twin.outside_cidr and bastion_subnet(cluster) is not None:
            models.append(f"the stack's bastion as the only way in, from {cluster.spec.twin.outside_cidr} "
                          "(the host's own connections to the cluster's networks refused)")
        elif cluster.spec.twin is not None and cluster.spec.twin.outside_cidr:
            models.append(f"the controller outside the cluster's network, in admin_cidrs "
                          f"({cluster.spec.twin.outside_cidr})")
        models.append(f"the {t.target} target's own outputs; fault: {t.fault.description}")
        cannot = [c.what for c in t.cannot_model]
        rows.append(f"| `{stack.name}` | {platform.name} ({t.target}) | {'; '.join(models)} | {'; '.join(cannot)} |")
    return "\n".join(rows) + "\n"
