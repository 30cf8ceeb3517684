"""The fabric_rails role writes what GC-RAIL-001 expects: its templates rendered for the lab's GPU
nodes carry exactly gpucluster.render.rails' values, and nodes without rails get nothing."""

from __future__ import annotations

import configparser
from pathlib import Path

import yaml

from gpucluster.outputs import OutputRail
from gpucluster.render.rails import rail_settings, rail_sysctl_lines
from tests.unit.roles.render import REPO, ROLES, host_context, render_template, role_vars
from tests.unit.roles.test_nccl_conf import _inventory


def _network(text: str) -> dict[str, dict[str, str]]:
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string("\n".join(line for line in text.splitlines() if not line.startswith("#")))
    return {s: dict(parser[s]) for s in parser.sections()}


def test_every_rail_file_holds_the_renderers_values() -> None:
    inventory = _inventory(REPO / "Pulumi.lab.yaml", "eth1")
    for host in ("gpu-1", "gpu-2"):
        ctx = role_vars("fabric_rails", host_context(inventory, host))
        rails = [OutputRail.model_validate(r) for r in inventory["all"]["hosts"][host]["gpucluster_rails"]]
        want = rail_settings(rails, 9000)
        assert len(want) == 2
        for item in want:
            got = _network(render_template("fabric_rails", "rail.network.j2", {**ctx, "item": item}))
            assert got["Match"] == {"Name": item["interface"]}
            assert got["Link"]["MTUBytes"] == "9000"
            assert got["Network"]["Address"] == f"{item['address']}/{item['prefixlen']}"
            assert got["Route"] == {"Destination": item["cidr"], "Scope": "link", "PreferredSource": item["address"],
                                    "Table": str(item["table"])}
            assert got["RoutingPolicyRule"] == {"From": f"{item['address']}/32", "Table": str(item["table"]),
                                                "Priority": str(item["priority"])}
        sysctl = render_template("fabric_rails", "sysctl-rails.conf.j2", ctx)
        lines = [x for x in sysctl.splitlines() if x and not x.startswith("#")]
        assert lines == rail_sysctl_lines(rails, 9000)


def test_the_storage_node_has_no_rails_and_the_playbook_skips_it() -> None:
    inventory = _inventory(REPO / "Pulumi.lab.yaml", "eth1")
    assert inventory["all"]["hosts"]["stor-1"]["gpucluster_rails"] == []
    play = yaml.safe_load((REPO / "playbooks" / "converge-nodes.yml").read_text())[0]
    task = next(t for t in play["tasks"] if t.get("ansible.builtin.include_role", {}).get("name") == "fabric_rails")
    assert task["when"] == "gpucluster_rails | default([]) | length > 0"


def test_its_files_sort_before_netplans() -> None:
    """networkd applies the first matching file in lexical order (systemd.network(5)); netplan
    writes 10-netplan-<interface>.network."""
    defaults = yaml.safe_load((ROLES / "fabric_rails" / "defaults" / "main.yml").read_text())
    prefix = defaults["fabric_rails_network_prefix"]
    assert f"{prefix}-enp16s0np0.network" < "10-netplan-enp16s0np0.network"
    tasks = (ROLES / "fabric_rails" / "tasks" / "rails.yml").read_text()
    assert "Network File" in tasks and "networkctl status" in tasks


def test_the_firewall_admits_the_rails(tmp_path: Path) -> None:
    inventory = _inventory(REPO / "Pulumi.lab.yaml", "eth1")
    ctx = role_vars("common", host_context(inventory, "gpu-1"))
    assert {"10.77.2.0/24", "10.77.3.0/24"} <= set(ctx["common_firewall_cluster_cidrs"])
