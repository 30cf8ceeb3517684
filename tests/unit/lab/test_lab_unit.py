"""The lab without root: plan, names, addresses, rendering, state, provider diff, CLI errors."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpucluster.cli import main
from gpucluster.errors import InputError
from gpucluster.lab.host import LabError, host_problem
from gpucluster.lab.lab import lab_inputs
from gpucluster.lab.layout import LabLayout, layout_lab, overlap_problems, route_problems
from gpucluster.lab.node import hosts_text
from gpucluster.lab.provider import lab_diff, props_from_inputs
from gpucluster.lab.proxy import render_config
from gpucluster.lab.rootfs import DEFAULT_PACKAGES, rootfs_key, sources_list
from gpucluster.lab.ssh import known_hosts_text, ssh_argv
from gpucluster.lab.state import atomic_write, locked, other_labs, read_state, write_state
from gpucluster.outputs import LAB_CAPABILITIES, parse_outputs
from gpucluster.spec import load_spec

REPO = Path(__file__).resolve().parents[3]
StackFile = Callable[[str, Callable[[dict[str, Any]], None]], Path]


def _lab(stack_file: StackFile, name: str = "lab", mgmt: str = "10.77.0.0/24", fab: str = "10.77.1.0/24",
         state_dir: str | None = None) -> LabLayout:
    def mutate(config: dict[str, Any]) -> None:
        config["gpucluster:name"] = name
        config["gpucluster:fabric"]["management_cidr"] = mgmt
        config["gpucluster:fabric"]["fabric_cidr"] = fab
        if state_dir:
            config["gpucluster:target"]["state_dir"] = state_dir

    return layout_lab(load_spec(stack_file("Pulumi.lab.yaml", mutate)))


@pytest.fixture
def plan() -> LabLayout:
    return layout_lab(load_spec(REPO / "Pulumi.lab.yaml"))


def test_plan_names_addresses_and_disks(plan: LabLayout) -> None:
    assert [n.name for n in plan.nodes] == ["gpu-1", "gpu-2", "stor-1"]
    assert [n.management_ip for n in plan.nodes] == ["10.77.0.10", "10.77.0.11", "10.77.0.12"]
    assert [n.fabric_ip for n in plan.nodes] == ["10.77.1.10", "10.77.1.11", "10.77.1.12"]
    assert plan.management_host_ip == "10.77.0.1" and plan.proxy_url == "http://10.77.0.1:3142"
    assert plan.mtu == 9000
    assert [(n.data_disks, n.data_disk_gb) for n in plan.nodes] == [(0, 0), (0, 0), (1, 8)]
    assert plan.lab_dir == Path("/var/lib/gpucluster/lab/lab")
    assert plan.rootfs_dir.parent == Path("/var/lib/gpucluster/lab/cache/rootfs")
    # Linux interface names: at most 15 bytes, and unique per lab and node.
    links = [plan.management_bridge, plan.fabric_bridge]
    links += [v for n in plan.nodes for v in (n.veth_management, n.veth_fabric)]
    assert all(len(x) <= 15 for x in links) and len(set(links)) == len(links)


def test_plan_round_trips_through_json_and_pulumi_floats(plan: LabLayout) -> None:
    data = json.loads(json.dumps(plan.to_dict()))
    assert LabLayout.from_dict(data) == plan
    data["mtu"] = 9000.0
    data["nodes"][2]["data_disk_gb"] = 8.0
    assert LabLayout.from_dict(data) == plan


def test_two_labs_get_distinct_host_objects(stack_file: StackFile) -> None:
    a = _lab(stack_file, "lab")
    b = _lab(stack_file, "other", "10.79.0.0/24", "10.79.1.0/24")
    assert a.management_bridge != b.management_bridge
    assert {n.veth_management for n in a.nodes}.isdisjoint({n.veth_management for n in b.nodes})
    assert {n.netns for n in a.nodes}.isdisjoint({n.netns for n in b.nodes})


def test_overlapping_labs_are_rejected(stack_file: StackFile) -> None:
    a = _lab(stack_file, "lab")
    clash = _lab(stack_file, "clash", "10.77.0.0/16", "10.90.1.0/24")
    apart = _lab(stack_file, "apart", "10.79.0.0/24", "10.79.1.0/24")
    problems = overlap_problems(clash, [a])
    # Its management network covers the other lab's management, fabric and both rail subnets.
    assert len(problems) == 4 and "lab 'lab'" in problems[0]
    assert sum("10.77.2.0/24" in p or "10.77.3.0/24" in p for p in problems) == 2
    assert overlap_problems(apart, [a]) == []
    assert overlap_problems(a, [a]) == []  # itself, on a second `up`


def test_host_routes_that_overlap_are_rejected(plan: LabLayout) -> None:
    routes = [
        {"dst": "default", "dev": "eth0"},
        {"dst": "10.77.0.0/24", "dev": plan.management_bridge},  # its own
        {"dst": "10.0.0.0/8", "dev": "wg0"},
        {"dst": "192.0.2.0/24", "dev": "eth0"},
    ]
    problems = route_problems(plan, routes)
    # management, fabric and the two rails' subnets all lie inside 10.0.0.0/8
    assert len(problems) == 4 and all("wg0" in p for p in problems)


def test_a_non_lab_target_is_bad_input() -> None:
    with pytest.raises(InputError, match="needs kind: lab"):
        layout_lab(load_spec(REPO / "Pulumi.aws-h100.yaml"))


def test_host_problems_name_what_is_missing() -> None:
    assert host_problem(0, {"ID": "debian"}) is None
    assert "root" in str(host_problem(1000, {"ID": "debian"}))
    msg = host_problem(0, {"ID": "fedora", "PRETTY_NAME": "Fedora Linux 41"})
    assert msg is not None and "Debian host (this is Fedora Linux 41)" in msg
    assert "\n" not in str(host_problem(1000, {}))


def test_rootfs_key_follows_the_package_list() -> None:
    base = rootfs_key("bookworm", "http://deb.debian.org/debian", DEFAULT_PACKAGES)
    assert base == rootfs_key("bookworm", "http://deb.debian.org/debian", tuple(reversed(DEFAULT_PACKAGES)))
    assert base != rootfs_key("bookworm", "http://deb.debian.org/debian", (*DEFAULT_PACKAGES, "vim"))
    assert base != rootfs_key("trixie", "http://deb.debian.org/debian", DEFAULT_PACKAGES)


def test_sources_enable_contrib_and_non_free() -> None:
    text = sources_list("bookworm", "http://deb.debian.org/debian")
    lines = [ln for ln in text.splitlines() if ln.startswith("deb ")]
    assert len(lines) == 3 and lines[2].startswith("deb http://deb.debian.org/debian-security bookworm-security")
    assert all(ln.endswith("main contrib non-free non-free-firmware") for ln in lines)
    # A private mirror carries no security suite we could guess.
    assert len(sources_list("bookworm", "http://mirror.example/debian").splitlines()) == 3


def test_proxy_binds_the_bridge_and_names_the_mirror(plan: LabLayout) -> None:
    files = render_config(plan)
    conf = files["acng.conf"]
    assert "BindAddress: 10.77.0.1\n" in conf and "Port: 3142\n" in conf
    assert f"CacheDir: {plan.cache_dir}/apt/lab\n" in conf
    assert "file:backends_debian" in conf
    assert files["backends_debian"] == "http://deb.debian.org/debian/\n"


def test_hosts_lists_every_node_on_both_networks(plan: LabLayout) -> None:
    text = hosts_text(plan)
    for n in plan.nodes:
        assert f"{n.management_ip}\t{n.name}\n" in text
        assert f"{n.fabric_ip}\t{n.name}-fabric\n" in text


def test_ssh_is_strict_and_key_only(plan: LabLayout) -> None:
    argv = ssh_argv(plan, plan.nodes[0], ["hostname"])
    assert "StrictHostKeyChecking=yes" in argv and "BatchMode=yes" in argv and "IdentitiesOnly=yes" in argv
    assert argv[-3:] == ["root@10.77.0.10", "--", "hostname"]
    # A lab reached directly: over the management network, from the host.
    assert argv[0] == "ssh"
    kh = known_hosts_text(plan, {"gpu-1": "ssh-ed25519 AAAAkey root@gpu-1"})
    assert kh == "gpu-1,10.77.0.10,10.77.1.10 ssh-ed25519 AAAAkey\n"


def test_a_bastion_twins_own_way_in_is_the_controllers() -> None:
    """Behind a bastion the host reaches no node (its table refuses it): the lab's probes reach the
    bastion over the outside network, and a node from the bastion's namespace, the path ProxyJump takes."""
    from gpucluster import twin

    plan = twin.inputs(load_spec(REPO / "Pulumi.twin-aws-p5.yaml")).plan
    assert plan.bastion is not None
    to_node = ssh_argv(plan, plan.nodes[0], ["true"])
    assert to_node[0].endswith("nsenter") and to_node[1:4] == ["--net=/run/netns/gcl-twin-aws-p5-bastion", "--", "ssh"]
    assert to_node[-3] == "root@10.84.0.10"
    to_bastion = ssh_argv(plan, plan.bastion, ["true"])
    assert to_bastion[0] == "ssh" and to_bastion[-3] == "root@198.18.84.2"


def test_outputs_have_the_shape_of_every_target(plan: LabLayout) -> None:
    inputs = lab_inputs(load_spec(REPO / "Pulumi.lab.yaml"))
    outputs = parse_outputs(inputs.outputs, "lab")
    assert outputs.target == "lab" and outputs.ssh_private_key_file == str(plan.key_file)
    assert {n.fabric_interface for n in outputs.nodes} == {"eth1"}
    assert {n.ssh_user for n in outputs.nodes} == {"root"}
    # What a lab node cannot do travels with the outputs, for the inventory to state.
    assert outputs.capabilities == LAB_CAPABILITIES
    assert not outputs.capabilities.heavy_packages and not outputs.capabilities.nvidia_repo


def test_state_round_trip_and_other_labs(stack_file: StackFile, tmp_path: Path) -> None:
    a = _lab(stack_file, "lab", state_dir=str(tmp_path))
    b = _lab(stack_file, "other", "10.79.0.0/24", "10.79.1.0/24", state_dir=str(tmp_path))
    assert read_state(a.lab_dir) is None
    write_state(a)
    write_state(b)
    assert read_state(a.lab_dir) == a
    assert [p.name for p in other_labs(tmp_path, "lab")] == ["other"]
    (a.lab_dir / "state.json").write_text("{not json")
    with pytest.raises(LabError, match="unreadable lab state"):
        read_state(a.lab_dir)


def test_atomic_write_reports_change_only_when_content_changes(tmp_path: Path) -> None:
    f = tmp_path / "x" / "outputs.json"
    assert atomic_write(f, "one\n") is True
    assert atomic_write(f, "one\n") is False
    assert atomic_write(f, "two\n") is True and f.read_text() == "two\n"
    assert [p.name for p in f.parent.iterdir()] == ["outputs.json"]


def test_a_held_lock_is_a_one_line_error(tmp_path: Path) -> None:
    with locked(tmp_path / "lock", "lab 'x'"), pytest.raises(LabError, match="busy"):
        with locked(tmp_path / "lock", "lab 'x'"):
            pass


def test_provider_diff(stack_file: StackFile) -> None:
    def props(**kw: Any) -> dict[str, Any]:
        plan_kw = {k: kw[k] for k in ("name", "mgmt", "fab") if k in kw}
        cluster_plan = _lab(stack_file, **plan_kw)
        inputs = lab_inputs(load_spec(REPO / "Pulumi.lab.yaml"))
        p = props_from_inputs(inputs)
        p["plan"] = cluster_plan.to_dict()
        return json.loads(json.dumps(p))

    same = lab_diff(props(), props())
    assert same.changes is False
    floats = props()
    floats["plan"]["mtu"] = 9000.0
    floats["outputs"]["fabric"]["mtu"] = 9000.0
    assert lab_diff(props(), floats).changes is False
    fewer = props()
    fewer["plan"]["nodes"] = fewer["plan"]["nodes"][:2]
    upd = lab_diff(props(), fewer)
    assert upd.changes is True and not upd.replaces
    moved = lab_diff(props(), props(mgmt="10.79.0.0/24", fab="10.79.1.0/24"))
    assert moved.changes is True and moved.replaces == ["plan"] and moved.delete_before_replace is True


def test_cli_errors_are_one_line_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["lab", "status", "--stack", str(tmp_path / "missing.yaml")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "missing.yaml" in err[0]
    assert main(["lab", "down", "--stack", str(REPO / "Pulumi.aws-h100.yaml")]) == 2
    assert "needs kind: lab" in capsys.readouterr().err


def test_cli_status_of_a_lab_that_is_not_up(stack_file: StackFile, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    def mutate(config: dict[str, Any]) -> None:
        config["gpucluster:target"]["state_dir"] = str(tmp_path / "state")

    stack = stack_file("Pulumi.lab.yaml", mutate)
    assert main(["lab", "status", "--stack", str(stack), "--json"]) == 1
    assert json.loads(capsys.readouterr().out) == {"name": "lab", "up": False}


def test_a_disk_too_small_for_the_new_nodes_is_refused_with_the_figures(tmp_path: Path) -> None:
    from gpucluster.lab.host import CACHE_DISK_GIB, NODE_DISK_GIB, disk_problem, free_bytes

    gib = 2**30
    need = 3 * NODE_DISK_GIB + CACHE_DISK_GIB
    said = disk_problem(Path("/var/lib/gpucluster/lab"), int(2.0 * gib), 3, caches_exist=False)
    assert said == (f"/var/lib/gpucluster/lab has 2.0 GiB free; 3 new node(s) need about {need:.1f} GiB "
                    f"({NODE_DISK_GIB} GiB each once converged, {CACHE_DISK_GIB} GiB for the rootfs and apt "
                    "caches): free some space or set the spec's target.state_dir to a larger file system")
    assert disk_problem(Path("/x"), int(need * gib) + 1, 3, caches_exist=False) is None
    # Nodes that exist already and built caches need nothing more.
    assert disk_problem(Path("/x"), 0, 0, caches_exist=True) is None
    # The state folder need not exist yet: its nearest parent's file system answers.
    assert free_bytes(tmp_path / "not" / "yet") > 0


def test_the_debian_mirror_inside_a_lab_network_is_refused(plan: LabLayout) -> None:
    """This host resolves deb.debian.org into a documentation range: a lab network holding the
    mirror's address takes the host's route to it, and the proxy then fetches nothing ("503 No
    route to host"), as a first AWS twin with its outside network in 203.0.113.0/24 did."""
    from dataclasses import replace

    from gpucluster.lab.layout import mirror_problems

    assert mirror_problems(plan, ["203.0.113.80", "2001:db8::1"]) == []
    outside = replace(plan, outside_cidr="203.0.113.0/24", outside_bridge="gc00000000o")
    assert mirror_problems(outside, ["203.0.113.80"]) == [
        "gpucluster.twin.outside_cidr: 203.0.113.0/24 holds 203.0.113.80, the address of the Debian mirror "
        f"{plan.mirror} on this host; choose lab CIDRs that leave it outside"]
    assert mirror_problems(plan, ["10.77.1.3"])[0].startswith(
        "gpucluster.fabric.fabric_cidr: 10.77.1.0/24 holds 10.77.1.3")


def test_the_bastions_host_key_is_known_by_its_outside_address_too() -> None:
    from gpucluster import twin

    plan = twin.inputs(load_spec(REPO / "Pulumi.twin-aws-p5.yaml")).plan
    text = known_hosts_text(plan, {"bastion": "ssh-ed25519 AAAAb root@bastion", "gpu-1": "ssh-ed25519 AAAAg x"})
    assert text == ("gpu-1,10.84.0.10,10.84.16.10 ssh-ed25519 AAAAg\n"
                    "bastion,10.84.32.1,198.18.84.2 ssh-ed25519 AAAAb\n")

