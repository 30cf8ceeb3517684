"""Platform twins (gpucluster/twin.py): the lab shaped by the platform's data, the outputs of the
target's own program, and the twin's fault. The twins themselves run in tests/integration/twins."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from gpucluster import twin
from gpucluster.errors import InputError
from gpucluster.lab import firewall
from gpucluster.lab.layout import LabLayout, NodeFile
from gpucluster.lab.state import _plan_problem
from gpucluster.plan import import_program, plan_cluster
from gpucluster.spec import load_spec
from gpucluster.spec.loader import load_platforms, load_twins

REPO = Path(__file__).resolve().parents[2]
TWIN_STACKS = sorted(REPO.glob("Pulumi.twin-*.yaml"))


def test_every_twin_file_names_a_platform_of_its_target_and_says_what_it_cannot_model() -> None:
    twins, platforms = load_twins(), load_platforms()
    assert twins
    for t in twins.values():
        assert t.target in platforms[t.platform].targets, t.name
        assert {c.what for c in t.cannot_model} >= {"GPUs", "RDMA devices", "the image's OS"}, t.name


@pytest.mark.parametrize("stack", TWIN_STACKS, ids=lambda p: p.name)
def test_each_twin_stack_is_the_real_target_with_a_twin_block(stack: Path) -> None:
    cluster = load_spec(stack)
    t = twin.twin_of(cluster)
    assert t is not None and cluster.spec.target.kind == t.target
    assert len(cluster.nodes_with_role("gpu")) >= 3
    assert {cluster.platform_of(n).name for n in cluster.nodes_with_role("gpu")} == {t.platform}


def test_a_bare_metal_twin_names_management_as_the_targets_network_config_does() -> None:
    baremetal = import_program("targets.baremetal")
    for t in load_twins().values():
        if t.target == "baremetal" and t.image.network == "netplan":
            assert t.management_interface.name == baremetal.MANAGEMENT_INTERFACE, t.name


@pytest.mark.parametrize("stack", TWIN_STACKS, ids=lambda p: p.name)
def test_the_lab_takes_the_platforms_links(stack: Path) -> None:
    cluster = load_spec(stack)
    t = twin.twin_of(cluster)
    assert t is not None
    plan = twin.inputs(cluster).plan
    assert plan.twin == t.name
    for node in plan.nodes:
        platform = cluster.platform_of(cluster.node(node.name))
        assert [r.interface for r in node.rails] == [d for rail in platform.rails for d in rail.netdev_names()]
        assert node.management_interface == t.management_interface.name
        assert node.fabric_interface is None  # the fabric address is the roles' and the image's to put
    # Each port position is one bridge that joins that port across the nodes.
    by_bridge: dict[str, set[str]] = {}
    for node in plan.nodes:
        for rail in node.rails:
            by_bridge.setdefault(rail.bridge, set()).add(rail.interface)
    assert all(len(names) == 1 for names in by_bridge.values())
    assert set(by_bridge) == set(plan.rail_bridges)
    assert _plan_problem(plan, plan.lab_dir) is None


def test_a_netplan_image_gets_the_targets_own_network_config_and_its_macs() -> None:
    cluster = load_spec(REPO / "Pulumi.twin-dgx-h100-roce.yaml")
    plan = twin.inputs(cluster).plan
    baremetal = import_program("targets.baremetal")
    render = import_program("components.userdata").render_network_config
    declared = {n.name: n for n in cluster.spec.target.nodes}
    assert "netplan.io" in plan.packages
    for node in plan.nodes:
        (netplan,) = node.files
        assert netplan.path == "/etc/netplan/50-cloud-init.yaml" and netplan.mode == 0o600
        want = yaml.safe_load(render(baremetal.node_data(cluster, cluster.node(node.name), declared[node.name])))
        assert yaml.safe_load(netplan.content) == {"network": want}
        assert node.management_mac == declared[node.name].management_mac
        assert want["ethernets"]["mgmt0"]["match"]["macaddress"] == node.management_mac


@pytest.mark.parametrize("stack", TWIN_STACKS, ids=lambda p: p.name)
def test_the_outputs_are_the_targets_with_only_what_the_lab_knows_filled_in(stack: Path) -> None:
    cluster = load_spec(stack)
    t = twin.twin_of(cluster)
    assert t is not None
    inputs = twin.inputs(cluster)
    real = plan_cluster(cluster).outputs
    got = inputs.outputs
    assert set(got) == set(real)
    assert {k for k in got if got[k] != real[k]} <= {"nodes", "ssh_private_key_file", "capabilities", "access"}
    if real["access"]["mode"] == "bastion" and real["access"]["created"]:
        # A bastion the stack creates: only its addresses (as the lab gave them) and login are the lab's.
        b = inputs.plan.bastion
        assert b is not None and b.outside is not None
        assert {k for k in got["access"] if got["access"][k] != real["access"][k]} <= {"bastion"}
        assert got["access"]["bastion"] == {"host": b.outside.address.split("/")[0], "user": "root", "port": 22,
                                            "source_cidr": f"{b.management_ip}/32"}
    elif real["access"]["mode"] == "bastion":
        assert got["access"] == real["access"] and inputs.plan.bastion is not None  # the site's: as the stack says
    else:
        assert got["access"] == real["access"] and inputs.plan.bastion is None
    lab = {n.name: n for n in inputs.plan.nodes}
    for mine, theirs in zip(got["nodes"], real["nodes"], strict=True):
        assert {k for k in mine if mine[k] != theirs[k]} <= {"management_ip", "ssh_user"}
        assert mine["management_ip"] == lab[mine["name"]].management_ip
        assert mine["fabric_interface"] == theirs["fabric_interface"]
    caps = got["capabilities"]
    assert caps["gpu_devices"] is False and caps["rdma_devices"] is False and caps["nvidia_repo"] is False
    assert caps["runs_os"] == "debian-12"
    assert caps["link_floors"]["allreduce_inter_busbw_gbps"] == t.link_floors.allreduce_inter_busbw_gbps


def _stack(tmp_path: Path, changes: dict[str, str], stack: str = "Pulumi.twin-dgx-h100-ib.yaml") -> Path:
    """A copy of the twin stack ``stack`` in ``tmp_path`` with each text of ``changes`` replaced
    (each must be there), and the bill-of-materials overlay it names copied beside it."""
    text = (REPO / stack).read_text()
    for old, new in changes.items():
        assert old in text, old
        text = text.replace(old, new)
    path = tmp_path / "Pulumi.twin-x.yaml"
    path.write_text(text)
    overlay = re.search(r"^  gpucluster:bom: (\S+)$", text, re.M)
    if overlay:
        (tmp_path / overlay[1]).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / overlay[1]).write_text((REPO / overlay[1]).read_text())
    return path


def test_a_twin_file_that_does_not_exist_or_fit_the_stack_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"gpucluster.twin.file: unknown twin 'nope' \(known: .*dgx-h100-ib"):
        load_spec(_stack(tmp_path, {"file: dgx-h100-ib": "file: nope"}))
    with pytest.raises(InputError, match=r"twin 'dgx-h100-roce' models platform 'dgx-h100-roce'"):
        load_spec(_stack(tmp_path, {"file: dgx-h100-ib": "file: dgx-h100-roce"}))
    with pytest.raises(InputError, match=r"runs ubuntu-24.04; twin 'dgx-h100-ib' models the image's ubuntu-22.04"):
        load_spec(_stack(tmp_path, {"    ssh_user: ubuntu": "    ssh_user: ubuntu\n    os: ubuntu-24.04"}))


def test_the_fault_is_the_first_gpu_nodes_fabric_address() -> None:
    cluster = load_spec(REPO / "Pulumi.twin-dgx-h100-ib.yaml")
    t = twin.twin_of(cluster)
    assert t is not None
    outputs = twin.inputs(cluster).outputs
    assert twin.fault_command(cluster, t, outputs) == ["ip", "addr", "del", "10.81.1.10/24", "dev", "ibp24s0"]
    boot = t.model_copy(update={"fault": t.fault.model_copy(update={"kind": "boot_service"})})
    with pytest.raises(InputError, match="the twin lists no boot service"):
        twin.fault_command(cluster, boot, outputs)


def test_verify_failures_are_read_from_the_run_folder(tmp_path: Path) -> None:
    (tmp_path / "results.json").write_text(json.dumps({"results": [
        {"node": "dgx-01", "check_id": "GC-NET-001", "outcome": "failed"},
        {"node": "dgx-02", "check_id": "GC-NET-001", "outcome": "passed"},
        {"node": "dgx-01", "check_id": "GC-GPU-001", "outcome": "skipped"}]}))
    assert twin.verify_failures(tmp_path) == {("dgx-01", "GC-NET-001")}


def test_a_stored_plan_may_write_node_files_only_under_etc() -> None:
    cluster = load_spec(REPO / "Pulumi.twin-dgx-h100-roce.yaml")
    plan = twin.inputs(cluster).plan
    for bad in ("/root/.ssh/authorized_keys", "/etc/../root/x", "etc/netplan/x.yaml"):
        node = plan.nodes[0].__class__(**{**plan.nodes[0].__dict__, "files": (NodeFile(bad, "x"),)})
        tampered = plan.__class__(**{**plan.__dict__, "nodes": (node, *plan.nodes[1:])})
        assert "names the file" in str(_plan_problem(tampered, plan.lab_dir)), bad


def test_the_images_boot_service_writes_the_platforms_nccl_keys_at_every_boot() -> None:
    cluster = load_spec(REPO / "Pulumi.twin-azure-nd-h100-v5.yaml")
    t = twin.twin_of(cluster)
    assert t is not None
    platform = cluster.platform_of(cluster.nodes[0])
    assert [s.unit for s in t.boot_services] == [platform.nccl_conf_rewritten_by]
    files = {f.path: f for f in twin.inputs(cluster).plan.nodes[0].files}
    script = files["/etc/gpucluster-twin/sku-customizations.sh"]
    unit = files["/etc/systemd/system/sku-customizations.service"].content
    assert script.mode == 0o755
    written = script.content.split("printf '%s' '", 1)[1].rsplit("' > /etc/nccl.conf", 1)[0]
    assert written == "".join(f"{k}={v}\n" for k, v in platform.image_nccl.items())
    assert "ExecStart=/bin/sh /etc/gpucluster-twin/sku-customizations.sh" in unit
    assert "ExecStop=/bin/sh -c ': > /etc/nccl.conf'" in unit  # the image empties it at shutdown
    assert files["/etc/systemd/system/multi-user.target.d/50-sku-customizations.conf"].content == (
        "[Unit]\nWants=sku-customizations.service\n")
    assert twin.fault_command(cluster, t, twin.inputs(cluster).outputs) == [
        "/bin/sh", "/etc/gpucluster-twin/sku-customizations.sh"]


@pytest.mark.parametrize(("stack", "node", "borrowed", "message"), [
    ("Pulumi.twin-dgx-h100-ib.yaml", "dgx-01", "azure-nd-h100-v5",
     r"boot service sku-customizations\.service rewrites /etc/nccl\.conf, but platform 'dgx-h100' names None"),
    ("Pulumi.twin-dgx-h100-roce.yaml", "dgx-01", "oci-h100",
     r"boot service oci-rdma-configure\.service addresses the provider's ports, but platform 'dgx-h100-roce' "
     r"has no rail with addressing: provider"),
])
def test_a_boot_service_the_platform_does_not_state_is_refused(stack: str, node: str, borrowed: str,
                                                                message: str) -> None:
    cluster = load_spec(REPO / stack)
    t = twin.twin_of(cluster)
    other = load_twins()[borrowed]
    assert t is not None
    with pytest.raises(InputError, match=message):
        twin.boot_service_files(cluster, t.model_copy(update={"boot_services": other.boot_services}), node)


def test_the_readme_table_is_the_twins_own() -> None:
    text = (REPO / "README.md").read_text()
    start = text.index("<!-- twins table:")
    start = text.index("\n", start) + 1
    end = text.index("<!-- end twins table -->")
    assert text[start:end] == twin.markdown_table(TWIN_STACKS)


def test_a_real_targets_outputs_cannot_say_its_nodes_lack_gpus() -> None:
    """The capabilities that make GPU and HCA checks skip are refused on a real target's outputs."""
    from gpucluster.inventory import build_inventory
    from gpucluster.outputs import parse_outputs

    twin_stack = load_spec(REPO / "Pulumi.twin-dgx-h100-ib.yaml")
    outputs = twin.inputs(twin_stack).outputs
    real = twin_stack.__class__(**{**{f: getattr(twin_stack, f) for f in
                                      ("bom", "profiles", "platforms", "nodes", "source")},
                                   "spec": twin_stack.spec.model_copy(update={"twin": None})})
    with pytest.raises(InputError, match=r"outputs.capabilities: gpu_devices, rdma_devices, runs_os, link_floors "
                                         r"are the lab's and a twin's to state"):
        build_inventory(real, parse_outputs(outputs, "outputs.json"))
    assert build_inventory(twin_stack, parse_outputs(outputs, "outputs.json"))["all"]["hosts"]


def test_a_twin_is_named_apart_from_real_clusters(tmp_path: Path) -> None:
    with pytest.raises(InputError, match=r"gpucluster.name: 'onprem-ib'; a twin's name starts with 'twin-'"):
        load_spec(_stack(tmp_path, {"gpucluster:name: twin-dgx-ib": "gpucluster:name: onprem-ib"}))


def test_a_check_the_twin_must_pass_that_skipped_is_no_proof(tmp_path: Path) -> None:
    cluster = load_spec(REPO / "Pulumi.twin-dgx-h100-ib.yaml")
    t = twin.twin_of(cluster)
    assert t is not None and "GC-NET-001" in t.must_pass
    results = [{"node": n.name, "check_id": c, "outcome": "passed"}
               for n in cluster.nodes_with_role("gpu") for c in t.must_pass]
    (tmp_path / "results.json").write_text(json.dumps({"results": results}))
    assert twin.missing_passes(tmp_path, cluster, t) == []
    results[0]["outcome"] = "skipped"
    (tmp_path / "results.json").write_text(json.dumps({"results": results}))
    assert twin.missing_passes(tmp_path, cluster, t) == [f"dgx-01 {t.must_pass[0]}"]


def test_the_aws_p5_twin_has_no_link_for_efa_and_throttles_the_port_its_all_reduce_runs_on() -> None:
    """EFA-only cards carry no netdev and no IP: the twin boots no link for them, the AWS target's
    outputs give no fabric address or interface, so the all-reduce's TCP data runs on the management
    network, and the fault throttles exactly that port (the image's name for it) on one node."""
    cluster = load_spec(REPO / "Pulumi.twin-aws-p5.yaml")
    t = twin.twin_of(cluster)
    assert t is not None and t.fault.kind == "throttle_management_link"
    inputs = twin.inputs(cluster)
    assert all(n.rails == () and n.management_interface == "enp71s0" for n in inputs.plan.nodes)
    assert all(n["fabric_ip"] is None and n["fabric_interface"] is None for n in inputs.outputs["nodes"])
    assert not {"GC-NET-001", "GC-NET-002"} & set(t.must_pass)  # they skip, with the platform's reason
    assert twin.fault_command(cluster, t, inputs.outputs) == [
        "tc", "qdisc", "replace", "dev", "enp71s0", "root", "tbf", "rate", twin.THROTTLE_RATE,
        "burst", "64kb", "latency", "50ms"]


def test_the_oci_twin_boots_rdma0_to_rdma15_and_the_images_addressing_of_them() -> None:
    """OCI's image names the 16 RDMA ports rdma0..rdma15 and addresses them itself at every boot
    (192.168.<port>.<host>, MTU 4220; a /24 per port on the twin): the twin's unit does that, the
    OCI target's outputs give the GPU nodes no fabric address, and the fault takes OCI's address off
    the first node's rdma0."""
    cluster = load_spec(REPO / "Pulumi.twin-oci-h100.yaml")
    t = twin.twin_of(cluster)
    assert t is not None and [s.action for s in t.boot_services] == ["address_provider_ports"]
    inputs = twin.inputs(cluster)
    for node in inputs.plan.nodes:
        assert node.management_interface == "eth0"
        assert [r.interface for r in node.rails] == [f"rdma{i}" for i in range(16)]
        files = {f.path: f for f in node.files}
        script = files["/etc/gpucluster-twin/oci-rdma-configure.sh"]
        host = node.management_ip.rsplit(".", 1)[1]
        assert script.mode == 0o755
        assert [line for line in script.content.splitlines() if line.startswith("ip ")] == [
            x for i in range(16) for x in (f"ip link set dev rdma{i} mtu 4220 up",
                                           f"ip addr replace 192.168.{i}.{host}/24 dev rdma{i}")]
        assert "ExecStart=/bin/sh /etc/gpucluster-twin/oci-rdma-configure.sh" in (
            files["/etc/systemd/system/oci-rdma-configure.service"].content)
    assert all(n["fabric_ip"] is None and n["fabric_interface"] is None for n in inputs.outputs["nodes"])
    assert twin.fault_command(cluster, t, inputs.outputs) == ["ip", "-4", "addr", "flush", "dev", "rdma0"]
    assert cluster.spec.fabric.mtu == t.boot_services[0].mtu  # what GC-NET-002 reads back


def test_the_roce_twin_throttles_its_fifth_compute_port_and_a_throttled_rail_names_its_port() -> None:
    """throttle_rail shapes the node's compute port the fault names (the target's outputs' rails),
    and a twin file that names no port, or one the node has not, is refused."""
    cluster = load_spec(REPO / "Pulumi.twin-dgx-h100-roce.yaml")
    t = twin.twin_of(cluster)
    assert t is not None and (t.fault.kind, t.fault.port) == ("throttle_rail", 4)
    outputs = twin.inputs(cluster).outputs
    assert twin.fault_command(cluster, t, outputs) == [
        "tc", "qdisc", "replace", "dev", "enp154s0np0", "root", "tbf", "rate", twin.THROTTLE_RATE, "burst", "64kb",
        "latency", "50ms"]
    with pytest.raises(InputError, match="fault port 8, but dgx-01 has 8 addressed compute port"):
        twin.fault_command(cluster, t.model_copy(update={"fault": t.fault.model_copy(update={"port": 8})}), outputs)
    from pydantic import ValidationError

    from gpucluster.spec.models import TwinFault

    with pytest.raises(ValidationError, match="names the compute port it throttles"):
        TwinFault(kind="throttle_rail", description="x", expect=["GC-AR-002"])


def test_a_declared_proxy_egress_is_the_nodes_only_way_to_packages() -> None:
    """The Azure twin's stack declares a proxy egress, the lab's proxy: the lab writes no apt proxy
    of its own into the nodes (converge configures the declared one); a NAT egress keeps the lab's."""
    azure = twin.inputs(load_spec(REPO / "Pulumi.twin-azure-nd-h100-v5.yaml")).plan
    assert azure.node_apt_proxy is False and azure.proxy_url == "http://10.83.0.1:3142"
    assert twin.inputs(load_spec(REPO / "Pulumi.twin-aws-p5.yaml")).plan.node_apt_proxy is True
    assert "GC-SYS-005" in load_twins()["azure-nd-h100-v5"].must_pass


def test_a_declared_proxy_the_twins_nodes_cannot_reach_is_refused(tmp_path: Path) -> None:
    path = _stack(tmp_path, {"      https_proxy: http://10.83.0.1:3142\n": "      https_proxy: http://proxy.example.com:3128\n"},
                  "Pulumi.twin-azure-nd-h100-v5.yaml")
    with pytest.raises(InputError, match=r"gpucluster.target.egress.https_proxy: http://proxy.example.com:3128, "
                                         r"but the twin's nodes reach only the lab's proxy, http://10.83.0.1:3142"):
        twin.inputs(load_spec(path))


# --- the access path: a twin reached through a bastion ------------------------------------------


def test_the_aws_twin_is_reached_through_the_bastion_its_stack_creates() -> None:
    """The AWS twin's stack creates its bastion (as Pulumi.aws-h100.yaml does): the lab boots a
    bastion with its public address on the outside network, after the controller's, and a leg on
    the management network; the outputs' ProxyJump names it, and the nodes admit SSH from its leg."""
    cluster = load_spec(REPO / "Pulumi.twin-aws-p5.yaml")
    inputs = twin.inputs(cluster)
    plan = inputs.plan
    b = plan.bastion
    assert b is not None and b.outside is not None
    assert plan.outside_cidr == "198.18.84.0/24" and plan.outside_host_ip == "198.18.84.1"
    # Its leg is in the stack's public subnet, apart from the management network, as on AWS: the
    # nodes' firewall admits it by the access path (a source outside their own network), and the
    # nodes and it route each other's subnet on the management link, where the VPC's router would.
    assert b.outside.address == "198.18.84.2/24" and b.management_ip == "10.84.32.1"
    assert b.management_subnet == "10.84.32.0/24" and b.onlink == ("10.84.0.0/24",)
    assert {n.onlink for n in plan.nodes} == {("10.84.32.0/24",)} and plan.site_bastion is False
    assert b.name not in {n.name for n in cluster.nodes} and plan.machines == (*plan.nodes, b)
    assert inputs.outputs["access"] == {"mode": "bastion", "created": True, "bastion": {
        "host": "198.18.84.2", "user": "root", "port": 22, "source_cidr": "10.84.32.1/32"}}
    from gpucluster.inventory import build_inventory
    from gpucluster.outputs import OutputAccess, StackOutputs
    from gpucluster.render.firewall import ssh_sources
    from gpucluster.spec.models import Fabric

    all_vars = build_inventory(cluster, StackOutputs.model_validate(inputs.outputs))["all"]["vars"]
    sources = ssh_sources(Fabric.model_validate(all_vars["gpucluster_fabric"]), all_vars["gpucluster_admin_cidrs"],
                          OutputAccess.model_validate(all_vars["gpucluster_access"]))
    assert sources == ["10.84.0.0/24", "10.84.32.1/32"]  # the nodes admit the bastion by the access path
    # The stored plan names only what the lab makes, the bastion's links too, and round-trips.
    assert _plan_problem(plan, plan.lab_dir) is None
    assert LabLayout.from_dict(json.loads(json.dumps(plan.to_dict()))) == plan
    assert plan.outside_bridge in plan.bridges
    # A twin reached directly has no bastion (nor its outside bridge).
    direct = twin.inputs(load_spec(REPO / "Pulumi.twin-dgx-h100-ib.yaml")).plan
    assert direct.bastion is None and direct.outside_bridge is None and direct.machines == direct.nodes


def test_the_hosts_table_refuses_what_it_opens_to_the_clusters_networks_alone() -> None:
    plan = twin.inputs(load_spec(REPO / "Pulumi.twin-aws-p5.yaml")).plan
    text = firewall.rules(plan)
    rule = next(line.strip() for line in text.splitlines() if "reject" in line)
    # New connections only (the nodes' own to the proxy are answered), out of the cluster's bridges
    # only (the host's own addresses there are reached over lo), of any family (a node's IPv6
    # link-local address is no way around the bastion).
    assert rule == (f'oifname {{ "{plan.management_bridge}", "{plan.fabric_bridge}" }} '
                    "ct state new reject with icmpx type admin-prohibited")
    assert plan.outside_bridge not in rule and "daddr" not in rule
    # Replaced whole: declared, deleted, declared again, so `nft -f` applies it to a host with or without it.
    name = firewall.table_name(plan.name)
    assert text.startswith(f"table inet {name}\ndelete table inet {name}\ntable inet {name} {{\n")


@pytest.mark.parametrize("change, message", [
    ("    outside_cidr: 198.18.84.0/24\n", r"gpucluster.twin.outside_cidr: the stack is reached through a bastion"),
    ("    outside_cidr: 10.84.0.0/25\n", r"gpucluster.twin.outside_cidr: 10.84.0.0/25 overlaps fabric.management_cidr"),
    ("    outside_cidr: 198.18.84.0/31\n", r"gpucluster.twin.outside_cidr: 198.18.84.0/31: the controller's network "
                                        r"is a /16 to a /30"),
    ("    outside_cidr: 198.0.0.0/8\n", r"gpucluster.twin.outside_cidr: 198.0.0.0/8: the controller's network is"),
    ("    outside_cidr: 198.18.85.0/24\n", r"the controller's address 198.18.85.1 is in none of target.admin_cidrs"),
])
def test_a_bastion_twins_outside_network_is_checked(tmp_path: Path, change: str, message: str) -> None:
    old = "    outside_cidr: 198.18.84.0/24\n"
    path = _stack(tmp_path, {old: "" if change == old else change}, "Pulumi.twin-aws-p5.yaml")
    with pytest.raises(InputError, match=message):
        load_spec(path)


def test_a_direct_twin_reaches_its_nodes_from_its_controllers_network(tmp_path: Path,
                                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    """The OCI twin is reached directly, as its stack says, but from outside the cluster's network:
    the host's connections come from 198.18.88.1 (in admin_cidrs, which the nodes' firewall admits)
    alone, the nodes route that network back on their management link, and twin check proves each
    node saw the controller come from there."""
    cluster = load_spec(REPO / "Pulumi.twin-oci-h100.yaml")
    plan = twin.inputs(cluster).plan
    assert plan.bastion is None and plan.outside_bridge is None and plan.outside_host_ip == "198.18.88.1"
    assert {n.onlink for n in plan.nodes} == {("198.18.88.0/24",)}
    rules = [line.strip() for line in firewall.rules(plan).splitlines() if "reject" in line]
    assert [r.split("} ", 1)[1] for r in rules] == [
        "ct state new ip saddr != 198.18.88.1 reject with icmpx type admin-prohibited",
        "ct state new meta nfproto ipv6 reject with icmpx type admin-prohibited"]
    seen = {n.name: "198.18.88.1" for n in plan.nodes}
    monkeypatch.setattr(twin, "_ssh_client", lambda p, n: seen[n.name])
    assert twin.reach_problems(plan) == []
    seen["gpu-2"] = "10.88.0.1"
    assert twin.reach_problems(plan) == [
        "gpu-2: sees the controller's SSH come from 10.88.0.1, not from its outside address 198.18.88.1"]
    # The controller must be one the nodes' firewall admits.
    path = _stack(tmp_path, {"    admin_cidrs: [198.18.88.0/24]\n": "    admin_cidrs: [203.0.113.0/24]\n"},
                  "Pulumi.twin-oci-h100.yaml")
    with pytest.raises(InputError, match=r"twin.outside_cidr: the controller's address 198.18.88.1 is in none of "
                                         r"target.admin_cidrs, the only sources the nodes' firewall admits"):
        load_spec(path)


def test_the_bastion_step_fails_when_the_controller_reaches_a_node_around_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """twin check's proof of the access path: the bastion answers, no node does. Each way it can be
    wrong is named."""
    plan = twin.inputs(load_spec(REPO / "Pulumi.twin-aws-p5.yaml")).plan
    answering: set[str] = set()
    monkeypatch.setattr(twin, "_connects", lambda address, port, timeout=3.0:
                        None if address in answering else "No route to host")
    assert twin.reach_problems(plan) == [
        "the bastion's SSH at 198.18.84.2:22 does not answer the controller: No route to host"]
    answering |= {"198.18.84.2"}
    assert twin.reach_problems(plan) == []
    answering |= {"10.84.0.11"}
    assert twin.reach_problems(plan) == [
        "gpu-2: the controller reaches its SSH at 10.84.0.11:22 directly, around the bastion"]
    # A node's fabric address is a way in too.
    answering -= {"10.84.0.11"}
    answering |= {"10.84.16.12"}
    assert twin.reach_problems(plan) == [
        "gpu-3: the controller reaches its SSH at 10.84.16.12:22 directly, around the bastion"]


def test_the_azure_twin_boots_the_sites_bastion_where_its_stack_names_it(tmp_path: Path) -> None:
    """An existing bastion (as Pulumi.azure-h100.yaml): the lab boots it at the host and with the
    source the stack names, and the outputs are the target's own; a stack naming it elsewhere is
    refused, naming the field and where the twin can boot it."""
    inputs = twin.inputs(load_spec(REPO / "Pulumi.twin-azure-nd-h100-v5.yaml"))
    real = plan_cluster(load_spec(REPO / "Pulumi.twin-azure-nd-h100-v5.yaml")).outputs["access"]
    assert real == {"mode": "bastion", "created": False, "bastion": {
        "host": "198.18.83.2", "user": "root", "port": 22, "source_cidr": "10.83.240.0/28"}}
    assert inputs.outputs["access"] == real
    b = inputs.plan.bastion
    assert b is not None and b.management_ip == "10.83.240.1" and b.management_subnet == "10.83.240.0/28"
    # The site's bastion outlives the stack: its host key is kept across `down`.
    assert inputs.plan.site_bastion is True
    for old, new, message in [
        ("host: 198.18.83.2,", "host: 198.18.83.9,",
         r"access.bastion.host: 198.18.83.9; the twin's lab boots the site's bastion at 198.18.83.2, the second "
         r"address of twin.outside_cidr"),
        ("source_cidr: 10.83.240.0/28", "source_cidr: 10.83.0.0/28",
         r"access.bastion.source_cidr: 10.83.0.0/28 overlaps fabric.management_cidr 10.83.0.0/24"),
        ("user: root, port: 22,", "user: jump, port: 2222,",
         r"access.bastion: jump@...:2222; the twin's bastion is a lab machine answering root on port 22"),
    ]:
        with pytest.raises(InputError, match=message):
            load_spec(_stack(tmp_path, {old: new}, "Pulumi.twin-azure-nd-h100-v5.yaml"))
