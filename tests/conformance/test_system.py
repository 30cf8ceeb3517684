"""Time, firewall, required services, node_exporter (GC-SYS)."""

from __future__ import annotations

import ipaddress
import re

import pytest

from gpucluster.parsers.nft import set_networks
from gpucluster.render.firewall import ssh_sources
from gpucluster.render.proxy import proxy_settings

# Every service any node may need; each node checks those its groups and profile require, from
# gpucluster.render.services (the roles' filter gpucluster.cluster.required_services).
from gpucluster.render.services import ALL_SERVICES, required_services


@pytest.mark.check("GC-SYS-001")
def test_time_in_sync(node):
    """The system clock MUST be synchronised by chrony (leap status Normal, offset under 100 ms)."""
    res = node.run("chronyc -n tracking 2>&1")
    if res.rc != 0:
        virt = node.in_container()
        unit = node.run("systemctl show -p ConditionResult --value chrony").stdout.strip()
        if virt and unit == "no":
            pytest.skip(f"node is a {virt} container without CAP_SYS_TIME: its clock is the host's "
                        "(chrony's unit condition is not met)")
        pytest.fail(f"chronyc tracking failed (rc {res.rc}): {res.stdout.strip()}")
    leap = re.search(r"Leap status\s*:\s*(.+)", res.stdout)
    offset = re.search(r"System time\s*:\s*([\d.]+) seconds (fast|slow)", res.stdout)
    node.figure("leap_status", leap.group(1).strip() if leap else None)
    assert leap and leap.group(1).strip() == "Normal", f"chrony leap status: {leap.group(1) if leap else 'missing'}"
    assert offset, "chronyc tracking shows no system time offset"
    off = float(offset.group(1))
    node.figure("offset_s", off)
    assert off < 0.1, f"clock offset {off:g} s > limit 0.1 s"


@pytest.mark.check("GC-SYS-002")
def test_firewall_active(node):
    """An nftables ruleset MUST be loaded with an input chain that drops by default, and where the cluster's table is loaded it MUST admit SSH from exactly the networks the stack admits it from: the management network, and the target's admin_cidrs or, behind a bastion, the bastion's source."""  # noqa: E501
    node.figure("nftables_service", node.run("systemctl is-active nftables").stdout.strip())
    ruleset = node.run("nft list ruleset 2>&1").stdout
    chain = re.search(r"type filter hook input priority [^;]+; policy (\w+);", ruleset)
    assert chain, "no input filter chain in the nftables ruleset"
    assert chain.group(1) == "drop", f"input chain policy is {chain.group(1)}, not drop"
    if "table inet gpucluster" not in ruleset:
        return  # the site's own firewall (common_firewall_enabled false): its SSH sources are the site's
    try:
        admitted = set_networks(node.run("nft -j list set inet gpucluster management_v4 2>&1").stdout)
    except ValueError as exc:
        pytest.fail(f"the cluster's table has no readable SSH source set management_v4: {exc}")
    access = node.inv.access
    sources = ssh_sources(node.inv.fabric, node.inv.admin_cidrs, access)
    want = [ipaddress.IPv4Network(c) for c in sources]
    node.figure("ssh_sources", ", ".join(str(n) for n in admitted))
    way_in = "the bastion's source" if access.mode == "bastion" else "admin_cidrs"
    assert admitted == want, (f"SSH is admitted from {', '.join(map(str, admitted)) or 'nowhere'}; the stack admits it "
                              f"from {', '.join(map(str, want))} (management network and {way_in})")


@pytest.mark.check("GC-SYS-005")
def test_egress_proxy(node):
    """Where the spec's egress is a proxy, apt's configuration MUST carry it as the roles write it (gpucluster.render.proxy), and where containerd runs its unit's environment MUST carry it too."""  # noqa: E501
    egress = node.inv.egress
    want = proxy_settings(egress, node.inv.fabric, node.inv.kubernetes)
    if not want["enabled"]:
        pytest.skip(f"the cluster's egress is {egress.mode if egress is not None else 'nat'}, not a proxy")
    dump = node.run("apt-config dump 2>&1").stdout
    apt = dict(re.findall(r'^(Acquire::https?::Proxy(?:::\S+)?) "([^"]*)";$', dump, re.MULTILINE))
    node.figure("apt_http_proxy", apt.get("Acquire::http::Proxy"))
    wrong = [f"{key} is {apt.get(key, 'unset')!r}, not {value!r}" for key, value in want["apt"].items()
             if apt.get(key) != value]
    if node.run("systemctl cat containerd >/dev/null 2>&1").rc == 0:
        env = node.run("systemctl show -p Environment --value containerd").stdout.split()
        wrong += [f"containerd's environment lacks {item.split('=', 1)[0]}={item.split('=', 1)[1]}"
                  for item in want["systemd_environment"] if item not in env]
    assert not wrong, "; ".join(wrong)


@pytest.mark.check("GC-SYS-003")
@pytest.mark.parametrize("service", ALL_SERVICES)
def test_required_service(node, service):
    """Every service the node's roles require MUST be active."""
    if service not in required_services(node.info.groups, node.info.profile, node.info.capabilities):
        pytest.skip(f"{service} is not required on {node.name} (groups {', '.join(node.info.groups)}, "
                    f"profile {node.info.profile_name})")
    state = node.run(f"systemctl is-active {service} 2>&1").stdout.strip()
    if state != "active":
        virt = node.in_container()
        cond = node.run(f"systemctl show -p ConditionResult --value {service}").stdout.strip()
        if virt and cond == "no":
            pytest.skip(f"systemd does not start {service} in a {virt} container (its unit condition is not met)")
    node.figure("state", state)
    # systemctl's states are single words; anything else is systemctl's own complaint.
    said = state if re.fullmatch(r"[a-z-]+", state or "-") else f"not active (systemctl: {state})"
    assert state == "active", f"{service} is {said or 'unknown'}"


@pytest.mark.check("GC-SYS-004")
def test_node_exporter_serving(node):
    """node_exporter MUST answer on its port (the inventory's node contract, 9100 by default) with its metrics, textfile collector included."""  # noqa: E501
    port = node.info.contract.node_exporter_port
    res = node.run("python3 -c \"import urllib.request as u; "
                   f"print(u.urlopen('http://127.0.0.1:{port}/metrics', timeout=5).read().decode())\" 2>&1")
    if res.rc != 0:  # the monitoring role may bind node_exporter to the management address only
        res = node.run("python3 -c \"import urllib.request as u; "
                       f"print(u.urlopen('http://{node.info.address}:{port}/metrics', timeout=5).read().decode())"
                       "\" 2>&1")
    assert res.rc == 0, (f"nothing answers on port {port} (127.0.0.1 nor the management address): "
                         + (res.stdout.strip().splitlines() or ["no output"])[-1])
    assert "node_exporter_build_info" in res.stdout, f"port {port} answers but not with node_exporter's metrics"
    assert 'collector="textfile"' in res.stdout, "node_exporter runs without its textfile collector"
