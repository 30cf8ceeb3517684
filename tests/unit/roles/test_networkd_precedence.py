"""rdma_fabric's networkd files must win over netplan's, and converge must fail when they do not.

systemd-networkd and udev apply only the first matching .network / .link file in lexical order of the
names across /etc, /run and /usr/lib (systemd.network(5), systemd.link(5)); netplan generates
/run/systemd/network/10-netplan-<id>.network and .link (canonical/netplan src/networkd.c). The role
checks which file systemd really applied: `networkctl status` prints "Network File: PATH" ("n/a" when
unmanaged; src/network/networkctl-status-link.c) and udev records the applied .link file as the
device property ID_NET_LINK_FILE (what networkctl shows as "Link File").
"""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tests.unit.roles.render import NATIVE, ROLES, TEXT, first_host, host_context, inventory_for, role_vars

TASKS = ROLES / "rdma_fabric" / "tasks"


def _tasks(name: str) -> list[dict[str, Any]]:
    tasks: list[dict[str, Any]] = yaml.safe_load((TASKS / name).read_text())
    return tasks


def _vars(fabric: str) -> dict[str, Any]:
    inventory = inventory_for(fabric)
    return role_vars("rdma_fabric", host_context(inventory, first_host(inventory, "gpu")))


def _render(expr: str, v: dict[str, Any]) -> Any:
    return NATIVE.from_string(expr).render(v)


def _first_match(files: list[str], iface: str, matches: dict[str, str]) -> str:
    """networkd's and udev's rule: all files sorted by name, the first whose [Match] fits wins."""
    return next(f for f in sorted(files, key=lambda p: p.rsplit("/", 1)[1]) if matches[f] == iface)


@pytest.mark.parametrize(("fabric", "suffix"), [("infiniband", ".network"), ("roce", ".link")])
def test_role_file_wins_over_netplan_and_systemd_defaults(fabric: str, suffix: str) -> None:
    v = _vars(fabric)
    iface = v["rdma_fabric_interface"]
    ours = v["__rdma_fabric_networkd_stem"] + suffix
    assert ours.startswith("/etc/systemd/network/")
    # netplan names its files after the netplan id, which need not be the interface name.
    rivals = [f"/run/systemd/network/10-netplan-{netplan_id}{suffix}" for netplan_id in (iface, "0", "a", "ens1")]
    rivals += [f"/usr/lib/systemd/network/{name}{suffix}" for name in ("73-usb-net-by-mac", "80-auto", "99-default")]
    matches = {path: iface for path in [ours, *rivals]}
    assert _first_match([*rivals, ours], iface, matches) == ours


def test_tasks_write_the_files_the_checks_expect() -> None:
    for fabric, file, suffix in (("infiniband", "infiniband.yml", ".network"), ("roce", "roce.yml", ".link")):
        v = _vars(fabric)
        dests = [_render(t["ansible.builtin.template"]["dest"], v) for t in _tasks(file)
                 if str(t.get("ansible.builtin.template", {}).get("dest", "")).endswith(suffix)]
        assert dests == [v["__rdma_fabric_networkd_stem"] + suffix]


def _check(file: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """The task that reads systemd's state and the assert that judges it, in that order."""
    tasks = _tasks(file)
    # The check of the applied file (not the one that the named interface exists at all).
    asserts = [t for t in tasks if "ansible.builtin.assert" in t and "that the role's" in t.get("name", "")]
    assert len(asserts) == 1, f"{file}: one check of the applied file"
    check = asserts[0]
    reads = [t for t in tasks[: tasks.index(check)] if "ansible.builtin.command" in t and "register" in t]
    return reads[-1], check


def _judge(file: str, v: dict[str, Any], stdout: str, rc: int = 0, stderr: str = "") -> tuple[bool, str]:
    read, check = _check(file)
    v = dict(v, **{read["register"]: {"stdout": stdout, "rc": rc, "stderr": stderr}})
    for name, expr in check["vars"].items():
        v[name] = _render(expr, v)
    ok = _render("{{ " + check["ansible.builtin.assert"]["that"] + " }}", v)
    return ok is True, " ".join(TEXT.from_string(check["ansible.builtin.assert"]["fail_msg"]).render(v).split())


def _networkctl(network_file: str) -> str:
    # The vertical table networkctl prints for one link (field names right-aligned, then ": ").
    return (
        "● 5: ib0\n"
        "                     Link File: /usr/lib/systemd/network/99-default.link\n"
        f"                  Network File: {network_file}\n"
        "                         State: routable (configured)\n"
        "                  Online state: online\n"
        "                          Type: infiniband\n"
        "                        Driver: ib_ipoib\n"
        "                           MTU: 4092 (min: 68, max: 4092)\n"
        "                       Address: 10.20.0.10\n"
    )


def test_ipoib_check_passes_only_when_the_roles_file_won() -> None:
    v = _vars("infiniband")
    iface, ours = v["rdma_fabric_interface"], v["__rdma_fabric_networkd_stem"] + ".network"
    read, _ = _check("infiniband.yml")
    assert read["ansible.builtin.command"].split()[:2] == ["networkctl", "status"]
    assert _render(read["ansible.builtin.command"], v).split()[-1] == iface

    assert _judge("infiniband.yml", v, _networkctl(ours))[0] is True

    netplan = f"/run/systemd/network/10-netplan-{iface}.network"
    ok, msg = _judge("infiniband.yml", v, _networkctl(netplan))
    assert not ok
    assert msg.startswith(f"{iface} is configured by {netplan}, not by the role's {ours}")

    ok, msg = _judge("infiniband.yml", v, _networkctl("n/a"))
    assert not ok and f"{iface} is configured by n/a" in msg

    ok, msg = _judge("infiniband.yml", v, "", rc=1, stderr="Interface \"ib0\" not found.")
    assert not ok and "networkctl failed: Interface \"ib0\" not found." in msg


def test_ipoib_check_runs_after_networkd_applied_the_files() -> None:
    """The IPoIB files are handed to the networkd role (running, told to apply them when they
    changed) before the role reads which file networkd applied."""
    tasks = _tasks("infiniband.yml")
    read, _ = _check("infiniband.yml")
    hand = [i for i, t in enumerate(tasks) if (t.get("ansible.builtin.include_role") or {}).get("name") == "networkd"]
    writes = [i for i, t in enumerate(tasks) if str(t.get("register", "")).startswith("__rdma_fabric_ipoib_net")]
    assert hand and len(writes) == 2 and max(writes) < hand[0] < tasks.index(read)
    changed = tasks[hand[0]]["vars"]["networkd_files_changed"]
    assert all(tasks[i]["register"] in changed for i in writes)


def _udev(link_file: str | None) -> str:
    # `udevadm info --query=property` prints KEY=value lines; net_setup_link adds ID_NET_LINK_FILE.
    lines = ["DEVPATH=/devices/pci0000:00/0000:00:03.0/0000:03:00.0/net/ens1f0np0", "INTERFACE=ens1f0np0",
             "IFINDEX=4", "SUBSYSTEM=net", "ID_NET_DRIVER=mlx5_core"]
    if link_file:
        lines.append(f"ID_NET_LINK_FILE={link_file}")
    return "\n".join(lines) + "\n"


def test_roce_link_check_passes_only_when_the_roles_file_won() -> None:
    v = _vars("roce")
    iface, ours = v["rdma_fabric_interface"], v["__rdma_fabric_networkd_stem"] + ".link"
    read, _ = _check("roce.yml")
    assert _render(read["ansible.builtin.command"], v) == f"udevadm info --query=property /sys/class/net/{iface}"

    assert _judge("roce.yml", v, _udev(ours))[0] is True
    for winner in (f"/run/systemd/network/10-netplan-{iface}.link", "/usr/lib/systemd/network/99-default.link"):
        ok, msg = _judge("roce.yml", v, _udev(winner))
        assert not ok and msg.startswith(f"{iface} is configured by {winner}, not by the role's {ours}")
    ok, msg = _judge("roce.yml", v, _udev(None))
    assert not ok and f"{iface} is configured by n/a" in msg


def test_roce_link_file_is_applied_when_it_changes() -> None:
    tasks = _tasks("roce.yml")
    write = next(t for t in tasks if str(t.get("ansible.builtin.template", {}).get("dest", "")).endswith(".link"))
    apply = next(t for t in tasks if "udevadm trigger" in str(t.get("ansible.builtin.command", "")))
    read, _ = _check("roce.yml")
    assert tasks.index(write) < tasks.index(apply) < tasks.index(read)
    assert f"{write['register']} is changed" in apply["when"]
    assert "--action=add" in apply["ansible.builtin.command"]
