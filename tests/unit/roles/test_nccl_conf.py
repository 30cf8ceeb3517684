"""The nccl role's /etc/nccl.conf and conformance check GC-NET-006 agree on every example stack.

For each GPU node of every ``Pulumi.*.yaml`` at the repository root, the role's template is
rendered the way Ansible renders it (the role's defaults resolved against the node's inventory
variables, the collection's filter called by its fully qualified name), and the check's own body
(tests/conformance/test_fabric.py::test_nccl_conf) is run against a node whose /etc/nccl.conf
is that rendering: the check must pass. The inventory is built by the project's hand-off
(build_outputs -> build_inventory -> the inventory file's text), as tests/unit/inventory does.
"""

from __future__ import annotations

import json
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import jinja2
import pytest
import yaml

from gpucluster.conformance import run_nccl_tests
from gpucluster.conformance.nodes import ClusterInventory, NodeInfo, parse_inventory
from gpucluster.inventory import build_inventory, dump_inventory, parse_inventory_text
from gpucluster.outputs import StackOutputs
from gpucluster.render import nccl as render_nccl
from gpucluster.spec import load_spec
from gpucluster.spec.facts import FABRIC_TYPES
from gpucluster.spec.models import Fabric, Platform
from tests.unit.example_outputs import example_outputs
from tests.unit.loading import load_file
from tests.unit.roles.render import ANSIBLE_MANAGED, REPO, ROLES, TEXT, file_entries, host_context, role_vars

FILTERS = REPO / "collections" / "ansible_collections" / "gpucluster" / "cluster" / "plugins" / "filter"
STACKS = sorted(REPO.glob("Pulumi.*.yaml"))
# The fabric interface each target exports for its GPU nodes (stacks/targets/*.py: the lab's
# fab0, ib0 on Azure's and bare metal's InfiniBand, none on AWS and OCI), and a named one for
# the fabrics whose target exports none, so both branches of NCCL_SOCKET_IFNAME are rendered.
INTERFACES = {"ethernet": ("fab0",), "infiniband": ("ib0",), "roce": (None, "ens1f0np0"), "efa": (None, "ens32")}


def _env() -> jinja2.Environment:
    env = TEXT.overlay()
    plugin = load_file(FILTERS / "render.py", "gpucluster_cluster_render_filters")
    env.filters = {**TEXT.filters, **{f"gpucluster.cluster.{k}": v for k, v in plugin.FilterModule().filters().items()}}
    return env


ENV = _env()
with warnings.catch_warnings():
    # The suite's markers (check, gpu) are registered by its own conftest, not loaded here.
    warnings.simplefilter("ignore", pytest.PytestUnknownMarkWarning)
    CHECK = load_file(REPO / "tests" / "conformance" / "test_fabric.py", "gpucluster_conformance_test_fabric")


@dataclass
class _Result:
    rc: int
    stdout: str
    stderr: str = ""


def ip_addr_show(names: Sequence[str]) -> str:
    """``ip -j addr show`` of a node with these links, in iproute2's JSON shape (one object per link;
    tests/unit/render/test_nccl.py holds a real one)."""
    return json.dumps([{"ifindex": i, "ifname": name, "flags": ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"],
                        "mtu": 1500, "qdisc": "noqueue", "operstate": "UP", "group": "default", "txqlen": 1000,
                        "link_type": "ether", "addr_info": []} for i, name in enumerate(names, 1)])


def declared_links(info: NodeInfo) -> list[str]:
    """The links the inventory and the node's platform say it has: its fabric interface, every
    rail's netdevs (the Ethernet rails' devices are netdevs) and the provider's socket interface."""
    platform = info.platform
    names = ["lo", *([info.fabric_interface] if info.fabric_interface else [])]
    for rail in platform.rails:
        names += rail.netdev_names()
        if rail.kind == "ethernet":
            names += rail.device_names()
    if platform.nccl_socket_interface:
        names.append(platform.nccl_socket_interface)
    return list(dict.fromkeys(names))


@dataclass
class _Node:
    """The part of the conformance suite's ``node`` fixture GC-NET-006 uses, with one file on it and
    the links its platform and inventory name."""

    info: NodeInfo
    inv: ClusterInventory
    files: dict[str, str]

    def run(self, command: str) -> _Result:
        if command == "ip -j addr show":
            return _Result(0, ip_addr_show(declared_links(self.info)))
        path = command.removeprefix("cat ")
        if path in self.files:
            return _Result(0, self.files[path])
        return _Result(1, "", f"cat: {path}: No such file or directory")


def _inventory(stack: Path, interface: str | None) -> dict[str, Any]:
    cluster = load_spec(stack)
    outputs = StackOutputs.model_validate(example_outputs(cluster, ssh_user="root", fabric_interface=interface))
    data: dict[str, Any] = parse_inventory_text(dump_inventory(build_inventory(cluster, outputs)))
    return data


def _cases() -> list[Any]:
    out = []
    for stack in STACKS:
        kind = yaml.safe_load(stack.read_text())["config"]["gpucluster:fabric"]["type"]
        for interface in INTERFACES[kind]:
            out.append(pytest.param(stack, interface, id=f"{stack.stem.removeprefix('Pulumi.')}-{interface}"))
    return out


def render_nccl_conf(data: dict[str, Any], host: str) -> str:
    variables = role_vars("nccl", host_context(data, host))
    source = (ROLES / "nccl" / "templates" / "nccl.conf.j2").read_text()
    return ENV.from_string(source).render(variables)


def test_every_stack_is_covered() -> None:
    kinds = {yaml.safe_load(s.read_text())["config"]["gpucluster:fabric"]["type"] for s in STACKS}
    assert kinds == set(FABRIC_TYPES), kinds


@pytest.mark.parametrize(("stack", "interface"), _cases())
def test_the_check_expects_what_the_role_writes(stack: Path, interface: str | None) -> None:
    data = _inventory(stack, interface)
    inv = parse_inventory(data, str(stack))
    gpu_nodes = inv.in_groups(("gpu",))
    assert gpu_nodes
    for info in gpu_nodes:
        text = render_nccl_conf(data, info.name)
        assert text.startswith(f"#\n# {ANSIBLE_MANAGED}\n#\n")
        assert "{{" not in text and "{%" not in text
        settings = [line for line in text.splitlines() if line and not line.startswith("#")]
        want = render_nccl.nccl_settings(inv.fabric, info.platform, info.fabric_interface)
        assert settings == [f"{k}={v}" for k, v in want.items()], info.name
        CHECK.test_nccl_conf(_Node(info, inv, {render_nccl.NCCL_CONF_PATH: text}))


def test_the_check_fails_on_the_settings_the_role_used_to_write() -> None:
    """A node keeping the old file (prefix-matched HCAs, NCCL_NET_GDR_LEVEL on EFA) fails GC-NET-006."""
    for stack, old in (
        ("Pulumi.onprem-h100-ib.yaml", "NCCL_SOCKET_IFNAME=ib0\nNCCL_IB_HCA=mlx5_0,mlx5_1\nNCCL_IB_TIMEOUT=20\n"),
        ("Pulumi.aws-h100.yaml", "NCCL_NET_GDR_LEVEL=PHB\n"),
    ):
        data = _inventory(REPO / stack, None)
        inv = parse_inventory(data, stack)
        info = inv.in_groups(("gpu",))[0]
        with pytest.raises(AssertionError, match="expected"):
            CHECK.test_nccl_conf(_Node(info, inv, {render_nccl.NCCL_CONF_PATH: old}))


def test_a_missing_file_fails_the_check() -> None:
    data = _inventory(REPO / "Pulumi.lab.yaml", "fab0")
    inv = parse_inventory(data, "lab")
    with pytest.raises(AssertionError, match="missing"):
        CHECK.test_nccl_conf(_Node(inv.node("gpu-1"), inv, {}))


def test_the_lab_gets_the_socket_transport_on_its_compute_rails() -> None:
    """Every rail by its exact name, rings kept on one rail (the lab's rails do not reach each other);
    the storage interface (eth1, here fab0) carries none of NCCL's traffic."""
    data = _inventory(REPO / "Pulumi.lab.yaml", "fab0")
    for host in ("gpu-1", "gpu-2"):
        conf = render_nccl.parse_nccl_conf(render_nccl_conf(data, host))
        assert conf == {"NCCL_SOCKET_IFNAME": "=enp16s0np0,enp32s0np0", "NCCL_IB_DISABLE": "1", "NCCL_CROSS_NIC": "0"}


def test_one_lab_rail_is_named_alone_and_rings_may_cross_nothing(tmp_path: Path) -> None:
    text = (REPO / "Pulumi.lab.yaml").read_text().replace("    kind: lab\n", "    kind: lab\n    rails: 1\n", 1)
    assert "rails: 1" in text
    stack = tmp_path / "Pulumi.onerail.yaml"
    stack.write_text(text)
    conf = render_nccl.parse_nccl_conf(render_nccl_conf(_inventory(stack, "fab0"), "gpu-1"))
    assert conf == {"NCCL_SOCKET_IFNAME": "=enp16s0np0", "NCCL_IB_DISABLE": "1"}


def test_ib_and_roce_name_the_compute_rails_exactly() -> None:
    """The platform's compute rails, by their exact names: never a storage or frontend port."""
    dgx = "=" + ",".join(f"mlx5_{i}:1" for i in (0, 3, 4, 5, 6, 9, 10, 11))
    oci = "=" + ",".join(f"mlx5_{i}:1" for i in (*range(0, 2), *range(3, 11), *range(12, 18)))
    azure = "=" + ",".join(f"mlx5_ib{i}:1" for i in range(8))
    for stack, rails in (("Pulumi.onprem-h100-ib.yaml", dgx), ("Pulumi.onprem-h100-roce.yaml", dgx),
                         ("Pulumi.azure-h100.yaml", azure), ("Pulumi.oci-h100.yaml", oci)):
        data = _inventory(REPO / stack, None)
        host = next(iter(data["all"]["children"]["gpu"]["hosts"]))
        assert render_nccl.parse_nccl_conf(render_nccl_conf(data, host))["NCCL_IB_HCA"] == rails, stack


def test_efa_writes_the_provider_and_device_rdma() -> None:
    data = _inventory(REPO / "Pulumi.aws-h100.yaml", None)
    conf = render_nccl.parse_nccl_conf(render_nccl_conf(data, "gpu-1"))
    assert conf == {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1"}


def test_the_role_writes_where_nccl_reads() -> None:
    internal = yaml.safe_load((ROLES / "nccl" / "vars" / "main.yml").read_text())
    assert internal["__nccl_conf_path"] == render_nccl.NCCL_CONF_PATH
    entry, saved, drop_in = file_entries(yaml.safe_load((ROLES / "nccl" / "tasks" / "configure.yml").read_text()))
    assert entry["src"] == "nccl.conf.j2" and entry["dest"] == "{{ __nccl_conf_path }}" and "enabled" not in entry
    # The copy a boot-time rewrite is undone from is the same rendering.
    assert saved["src"] == "nccl.conf.j2" and saved["dest"] == "{{ __nccl_saved_conf }}"
    assert drop_in["src"] == "nccl-restore.conf.j2"


def test_the_filter_is_the_renderer() -> None:
    """The filter validates what the role hands it into the spec's models and calls the renderer."""
    plugin = load_file(FILTERS / "render.py", "gpucluster_cluster_render_filters_identity")
    assert plugin.nccl_settings is render_nccl.nccl_settings
    data = _inventory(REPO / "Pulumi.oci-h100.yaml", None)["all"]["vars"]
    fabric, platform = data["gpucluster_fabric"], data["gpucluster_platforms"]["oci-bm-gpu-h100-8"]
    assert plugin.FilterModule().filters()["nccl_settings"](fabric, platform, "eth0") == render_nccl.nccl_settings(
        Fabric.model_validate(fabric), Platform.model_validate(platform), "eth0")


def test_oci_nodes_take_ocis_published_rdma_settings() -> None:
    """OCI owns the cluster network's QoS: /etc/nccl.conf carries its published TC 41, SL 0, timeout
    22 and GID index 3 (oracle-quickstart/oci-hpc-oke, BM.GPU.H100.8 nccl-tests manifest), where
    the spec's own QoS (TC 106) used to contradict them."""
    data = _inventory(REPO / "Pulumi.oci-h100.yaml", None)
    host = next(iter(data["all"]["children"]["gpu"]["hosts"]))
    conf = render_nccl.parse_nccl_conf(render_nccl_conf(data, host))
    assert {k: conf[k] for k in ("NCCL_IB_TC", "NCCL_IB_SL", "NCCL_IB_TIMEOUT", "NCCL_IB_GID_INDEX")} == {
        "NCCL_IB_TC": "41", "NCCL_IB_SL": "0", "NCCL_IB_TIMEOUT": "22", "NCCL_IB_GID_INDEX": "3"}
    platform = Platform.model_validate(data["all"]["vars"]["gpucluster_platforms"]["oci-bm-gpu-h100-8"])
    assert render_nccl.gid_index(Fabric.model_validate(data["all"]["vars"]["gpucluster_fabric"]), platform) == 3


def test_oci_nodes_bootstrap_nccl_over_the_primary_vnic() -> None:
    """OCI addresses the RDMA ports itself and the target exports no fabric interface: NCCL's sockets
    go over eth0, as OCI's nccl.conf for the shape pins them (oci-hpc nccl-conf/templates/h100), not
    over whichever port NCCL would pick. A spec's own socket_ifname still wins."""
    data = _inventory(REPO / "Pulumi.oci-h100.yaml", None)
    host = next(iter(data["all"]["children"]["gpu"]["hosts"]))
    assert render_nccl.parse_nccl_conf(render_nccl_conf(data, host))["NCCL_SOCKET_IFNAME"] == "=eth0"
    platform = Platform.model_validate(data["all"]["vars"]["gpucluster_platforms"]["oci-bm-gpu-h100-8"])
    fabric = Fabric.model_validate({**data["all"]["vars"]["gpucluster_fabric"], "socket_ifname": "ens300"})
    assert render_nccl.nccl_settings(fabric, platform, None)["NCCL_SOCKET_IFNAME"] == "=ens300"


def test_azures_boot_rewrite_is_undone_and_its_keys_are_kept() -> None:
    """Azure's HPC image rewrites /etc/nccl.conf at every boot (sku-customizations.service, ndv5.sh):
    the file keeps the image's keys beside the spec's, and a drop-in for that unit restores it."""
    from tests.unit.roles.render import host_context, render_template, role_vars

    data = _inventory(REPO / "Pulumi.azure-h100.yaml", None)
    host = next(iter(data["all"]["children"]["gpu"]["hosts"]))
    conf = render_nccl.parse_nccl_conf(render_nccl_conf(data, host))
    assert {k: conf[k] for k in ("NCCL_TOPO_FILE", "NCCL_IB_PCI_RELAXED_ORDERING", "NCCL_IGNORE_CPU_AFFINITY")} == {
        "NCCL_TOPO_FILE": "/opt/microsoft/ndv5/topo.xml", "NCCL_IB_PCI_RELAXED_ORDERING": "1",
        "NCCL_IGNORE_CPU_AFFINITY": "1"}
    assert "NCCL_IB_HCA" in conf  # the spec's own settings stay too
    v = role_vars("nccl", host_context(data, host))
    assert v["__nccl_rewriter"] == "sku-customizations.service"
    assert v["__nccl_rewriter_drop_in"] == "/etc/systemd/system/sku-customizations.service.d/50-gpucluster-nccl.conf"
    drop_in = render_template("nccl", "nccl-restore.conf.j2", v)
    restore = "/usr/bin/install -m 0644 -o root -g root /etc/gpucluster/nccl.conf /etc/nccl.conf"
    # Once the unit's command succeeded, and where it failed part way or was stopped (ExecStopPost).
    assert f"[Service]\nExecStartPost={restore}\nExecStopPost={restore}\n" in drop_in
    lab = _inventory(REPO / "Pulumi.lab.yaml", "fab0")
    assert role_vars("nccl", host_context(lab, "gpu-1"))["__nccl_rewriter"] == ""


@pytest.mark.parametrize(("stack", "interface"), _cases())
def test_no_measurement_sets_a_key_the_deployed_nccl_conf_sets_otherwise(stack: Path, interface: str | None) -> None:
    """What is measured is what is deployed: NCCL takes a key from /etc/nccl.conf only where its
    environment lacks it, so no measurement may set a key the rendered file sets to another value."""
    data = _inventory(stack, interface)
    inv = parse_inventory(data, str(stack))
    for info in inv.in_groups(("gpu",)):
        conf = render_nccl.parse_nccl_conf(render_nccl_conf(data, info.name))
        for checks, env in run_nccl_tests.MEASUREMENT_ENVS.items():
            assert run_nccl_tests.env_conflicts(env, conf) == [], (info.name, checks)


def test_the_measurements_set_only_their_declared_environment() -> None:
    """mpirun passes NCCL exactly INTER_ENV (never the socket interface, which nccl.conf sets), and
    a key nccl.conf sets otherwise is named as a conflict."""
    argv = run_nccl_tests.mpirun_argv(["10.0.0.1", "10.0.0.2"], 8, "10.1.0.0/24", 1 << 30, "/opt/nccl-tests", None)
    passed = dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "-x")
    assert passed == run_nccl_tests.INTER_ENV
    assert "NCCL_SOCKET_IFNAME" not in " ".join(argv)
    assert set(run_nccl_tests.INTER_PINNED) <= set(run_nccl_tests.INTER_ENV)
    assert set(run_nccl_tests.OFI_PROBE_PINNED) <= set(run_nccl_tests.OFI_PROBE_ENV)
    # The old measurement, which named the fabric interface itself, measured another configuration.
    lab = render_nccl.parse_nccl_conf(render_nccl_conf(_inventory(REPO / "Pulumi.lab.yaml", "fab0"), "gpu-1"))
    assert run_nccl_tests.env_conflicts({"NCCL_SOCKET_IFNAME": "fab0"}, lab) == [
        "NCCL_SOCKET_IFNAME=fab0 where /etc/nccl.conf sets NCCL_SOCKET_IFNAME==enp16s0np0,enp32s0np0"]


def test_the_pins_are_named_in_the_checks_must_lines() -> None:
    """A setting a measurement pins is named in its check's MUST line."""
    from gpucluster.conformance.checks import CHECKS

    text = {name: c.must for name, c in CHECKS.items()}
    for check in ("GC-AR-002", "GC-AR-003"):
        for key in run_nccl_tests.INTER_PINNED:
            assert f"{key}={run_nccl_tests.INTER_ENV[key]}" in text[check], check
    for key in run_nccl_tests.OFI_PROBE_PINNED:
        assert f"{key}={run_nccl_tests.OFI_PROBE_ENV[key]}" in text["GC-EFA-002"]
