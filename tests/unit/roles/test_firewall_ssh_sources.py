"""The node firewall admits SSH from the networks the stack admits it from (the management network,
and the target's admin_cidrs or a bastion's source), and GC-SYS-002 holds the loaded set to the same renderer
(gpucluster.render.firewall.ssh_sources): a controller in admin_cidrs, which the cloud's rules let
in, is no longer dropped by the node in the middle of a run."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from gpucluster.conformance.nodes import parse_inventory
from gpucluster.inventory import build_inventory
from gpucluster.outputs import StackOutputs
from gpucluster.spec import load_spec
from tests.unit.example_outputs import example_outputs
from tests.unit.roles.render import REPO, host_context, render_template, role_vars

SAMPLES = REPO / "tests" / "data" / "samples"


def _inventory(stack: str) -> dict[str, Any]:
    cluster = load_spec(REPO / stack)
    return build_inventory(cluster, StackOutputs.model_validate(example_outputs(cluster, ssh_user="ubuntu")))


def _set_listing(cidrs: list[str]) -> str:
    """nft's JSON for an interval set holding ``cidrs``, in the shape of the captured sample."""
    doc = json.loads((SAMPLES / "nft_set_01.json").read_text())
    doc["nftables"][1]["set"]["elem"] = [{"prefix": {"addr": c.split("/")[0], "len": int(c.split("/")[1])}}
                                         for c in cidrs]
    return json.dumps(doc)


def _suite() -> Any:
    spec = importlib.util.spec_from_file_location("suite_system", REPO / "tests" / "conformance" / "test_system.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _node(inventory: dict[str, Any], loaded: list[str]) -> Any:
    ruleset = "table inet gpucluster {\n chain input {\n type filter hook input priority filter; policy drop;\n"
    outputs = {"nft list ruleset 2>&1": ruleset, "nft -j list set inet gpucluster management_v4 2>&1":
               _set_listing(loaded)}
    figures: dict[str, Any] = {}
    return SimpleNamespace(
        run=lambda cmd: SimpleNamespace(stdout=outputs.get(cmd, "active\n"), rc=0),
        figure=lambda k, v: figures.__setitem__(k, v),
        inv=parse_inventory(inventory, "inventory.yml"))


def test_the_role_admits_ssh_from_admin_cidrs_and_the_check_agrees() -> None:
    inventory = _inventory("Pulumi.oci-h100.yaml")  # reached directly
    host = next(iter(inventory["all"]["hosts"]))
    v = role_vars("common", host_context(inventory, host))
    assert v["common_firewall_management_cidrs"] == ["10.60.0.0/20", "203.0.113.0/24"]
    text = render_template("common", "gpucluster.nft.j2", v)
    assert "elements = { 10.60.0.0/20, 203.0.113.0/24 }" in text
    # What the role wrote, loaded, passes the check; a set without admin_cidrs fails, naming both.
    _suite().test_firewall_active(_node(inventory, v["common_firewall_management_cidrs"]))
    with pytest.raises(AssertionError, match=r"admitted from 10\.60\.0\.0/20; the stack admits it from "
                                             r"10\.60\.0\.0/20, 203\.0\.113\.0/24 \(management network and "
                                             r"admin_cidrs\)"):
        _suite().test_firewall_active(_node(inventory, ["10.60.0.0/20"]))


@pytest.mark.parametrize(("stack", "bastion"), [("Pulumi.aws-h100.yaml", "10.40.32.10/32"),  # the stack makes it
                                                ("Pulumi.azure-h100.yaml", "10.60.0.0/28")])  # an existing one
def test_behind_a_bastion_the_role_admits_ssh_from_the_bastion_alone_and_the_check_agrees(
        stack: str, bastion: str) -> None:
    inventory = _inventory(stack)
    assert inventory["all"]["vars"]["gpucluster_access"]["bastion"]["source_cidr"] == bastion
    host = next(iter(inventory["all"]["hosts"]))
    v = role_vars("common", host_context(inventory, host))
    management = inventory["all"]["vars"]["gpucluster_fabric"]["management_cidr"]
    # Not admin_cidrs: the stack admits nobody but the bastion, and neither does the node.
    assert v["common_firewall_management_cidrs"] == [management, bastion]
    _suite().test_firewall_active(_node(inventory, v["common_firewall_management_cidrs"]))
    with pytest.raises(AssertionError, match=r"\(management network and the bastion's source\)"):
        _suite().test_firewall_active(_node(inventory, [management, "203.0.113.0/24"]))


def test_a_target_without_admin_cidrs_admits_the_management_network_alone() -> None:
    inventory = _inventory("Pulumi.lab.yaml")
    host = next(iter(inventory["all"]["hosts"]))
    assert role_vars("common", host_context(inventory, host))["common_firewall_management_cidrs"] == ["10.77.0.0/24"]
    assert inventory["all"]["vars"]["gpucluster_admin_cidrs"] == []


def test_the_captured_set_of_a_lab_node_passes(tmp_path: Path) -> None:
    inventory = _inventory("Pulumi.lab.yaml")
    node = _node(inventory, [])
    real = (SAMPLES / "nft_set_01.json").read_text()
    inner = node.run
    node.run = lambda cmd: SimpleNamespace(stdout=real, rc=0) if "-j list set" in cmd else inner(cmd)
    _suite().test_firewall_active(node)


def test_a_bastion_inside_the_management_network_is_admitted_once() -> None:
    """nftables refuses an interval set whose elements overlap ("conflicting intervals specified"):
    the AWS twin's bastion, whose leg is on the management network, stopped every node's converge at
    the firewall's `nft -c` until the sources were collapsed. The check reads the same list."""
    from gpucluster.outputs import OutputAccess
    from gpucluster.render.firewall import ssh_sources
    from gpucluster.spec.models import Fabric

    def fabric(management: str) -> Fabric:
        return Fabric(type="ethernet", mtu=1500, management_cidr=management, fabric_cidr="10.99.0.0/24")

    def bastion(source: str) -> OutputAccess:
        return OutputAccess.model_validate({"mode": "bastion", "bastion": {"host": "198.18.84.2", "user": "root",
                                                                           "source_cidr": source}})

    assert ssh_sources(fabric("10.84.0.0/24"), None, bastion("10.84.0.254/32")) == ["10.84.0.0/24"]
    # Outside it, both, in address order; two adjacent halves are one network.
    assert ssh_sources(fabric("10.50.0.0/20"), None, bastion("10.60.0.0/28")) == ["10.50.0.0/20", "10.60.0.0/28"]
    assert ssh_sources(fabric("10.0.1.0/24"), ["10.0.0.0/24"]) == ["10.0.0.0/23"]


def test_every_start_or_reload_of_nftables_tries_again_after_a_transient_failure() -> None:
    """nftables.service is a oneshot: on a loaded host systemd can fail to spawn its ExecStart into
    the unit's cgroup (status=219/CGROUP; the lab's boot probe names it, gpucluster/lab), and the
    play then stopped on one node (itest's node-2 in CI, 2026-11-29). Every task or handler that
    starts or reloads it retries until it succeeds, a few times, and nothing else hides the failure."""
    import yaml

    from tests.unit.roles.tasks import every_task

    common = REPO / "roles" / "common"
    touching = []
    for path in [*common.joinpath("tasks").glob("*.yml"), common / "handlers" / "main.yml"]:
        for task in every_task(yaml.safe_load(path.read_text())):
            module = next((task[k] for k in ("gpucluster.cluster.service", "ansible.builtin.systemd_service",
                                             "ansible.builtin.service") if k in task), None)
            if isinstance(module, dict) and module.get("name") == "nftables":
                touching.append((path.name, task))
    assert {(name, t["name"]) for name, t in touching} >= {
        ("firewall.yml", "Start nftables and enable it at boot"), ("main.yml", "Reload nftables")}
    for name, task in touching:
        assert task.get("register") and task.get("until") == f"{task['register']} is succeeded", (name, task["name"])
        assert 2 <= int(task.get("retries", 0)) <= 5 and int(task.get("delay", 0)) >= 1, (name, task["name"])
        assert "ignore_errors" not in task and "failed_when" not in task, (name, task["name"])


def test_the_providers_ranges_are_admitted_on_the_ports_it_addresses_alone() -> None:
    """OCI's image addresses the 16 RDMA ports from OCI's own ranges (gpucluster/data/platforms/
    oci-bm-gpu-h100-8.yaml): the node admits traffic from them on those ports, so TCP over them (an
    MPI job's data, a benchmark's exchange) is not dropped (the OCI twin's all-reduce hung on it),
    and on no other interface: eth0's VCN, or a network peered with it, may use 192.168/16 too.
    SSH stays the management set's. Where the cluster addresses the fabric, no such rule."""
    inventory = _inventory("Pulumi.oci-h100.yaml")
    hosts = inventory["all"]["hosts"]
    gpu = next(h for h, hv in hosts.items() if hv["gpucluster_platform"] == "oci-bm-gpu-h100-8")
    v = role_vars("common", host_context(inventory, gpu))
    assert v["common_firewall_provider_ports"] == [f"rdma{i}" for i in range(16)]
    assert v["common_firewall_provider_cidrs"] == ["192.168.0.0/16", "10.224.0.0/12"]
    assert not {"192.168.0.0/16", "10.224.0.0/12"} & set(v["common_firewall_cluster_cidrs"])
    text = render_template("common", "gpucluster.nft.j2", v)
    provider_set = text.split("set provider_v4 {", 1)[1].split("}", 2)
    assert "elements = { 192.168.0.0/16, 10.224.0.0/12 " in provider_set[0] + "}" + provider_set[1]
    ports = ", ".join(f'"rdma{i}"' for i in range(16))
    rule = f"iifname {{ {ports} }} ip saddr @provider_v4 accept"
    lines = [ln.strip() for ln in text.splitlines()]
    assert rule in lines and lines.index(rule) > lines.index("tcp dport 22 drop"), text
    # A node of another platform in the same inventory (the storage pool): no set, no rule.
    other = next(h for h, hv in hosts.items() if hv["gpucluster_platform"] != "oci-bm-gpu-h100-8")
    ov = role_vars("common", host_context(inventory, other))
    assert ov["common_firewall_provider_ports"] == [] and "provider_v4" not in render_template(
        "common", "gpucluster.nft.j2", ov)
    # The DGX platform: its fabric is the cluster's to address.
    dgx = _inventory("Pulumi.onprem-h100-ib.yaml")
    dv = role_vars("common", host_context(dgx, next(iter(dgx["all"]["hosts"]))))
    assert dv["common_firewall_provider_ports"] == [] and "provider_v4" not in render_template(
        "common", "gpucluster.nft.j2", dv)
