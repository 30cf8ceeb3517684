"""The lab for real: three Debian nodes on this host, then down and nothing left.

Needs root on a Debian host (the lab installs its own prerequisites). The labs here have
their own names and 10.79.x networks so they never clash with a user's `make lab`.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import yaml

from gpucluster.lab import proxy
from gpucluster.lab.host import host_problem, os_release
from gpucluster.lab.layout import LabLayout, layout_lab
from gpucluster.lab.state import claim
from gpucluster.paths import resolve
from gpucluster.spec import load_spec

REPO = Path(__file__).resolve().parents[3]
_why = host_problem(os.geteuid(), os_release())
pytestmark = [pytest.mark.lab, pytest.mark.skipif(_why is not None, reason=str(_why))]

CLI = [sys.executable, "-m", "gpucluster"]


def _stack(tmp: Path, name: str, mgmt: str, fab: str, pools: list[dict[str, Any]] | None = None,
           boot_timeout_s: int = 120) -> Path:
    doc = yaml.safe_load((REPO / "Pulumi.lab.yaml").read_text())
    config = doc["config"]
    config["gpucluster:name"] = name
    config["gpucluster:fabric"]["management_cidr"] = mgmt
    config["gpucluster:fabric"]["fabric_cidr"] = fab
    config["gpucluster:target"]["boot_timeout_s"] = boot_timeout_s
    if pools is not None:
        config["gpucluster:node_pools"] = pools
        config.pop("gpucluster:storage", None)
    path = tmp / f"Pulumi.{name}.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


def lab(*args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    return subprocess.run([*CLI, "lab", *args], capture_output=True, text=True, timeout=timeout, cwd=REPO,
                          check=False)


def leftovers(plan: LabLayout) -> list[str]:
    """Everything of this lab still on the host (empty when `down` did its job)."""
    found: list[str] = []
    netns = Path("/run/netns")
    if netns.is_dir():
        found += [f"netns {p.name}" for p in netns.iterdir() if p.name.startswith(f"gcl-{plan.name}-")]
    links = [plan.management_bridge, plan.fabric_bridge, *plan.rail_bridges]
    links += [v for n in plan.nodes for v in (n.veth_management, n.veth_fabric, *(r.veth for r in n.rails))]
    for link in links:
        if subprocess.run(["ip", "link", "show", "dev", link], capture_output=True, check=False).returncode == 0:
            found.append(f"link {link}")
    marker = str(plan.lab_dir)
    found += [f"mount {ln.split()[4]}" for ln in Path("/proc/self/mountinfo").read_text().splitlines()
              if marker in ln.split()[4]]
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                cmd = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if marker + "/" in cmd and "pytest" not in cmd:
                found.append(f"process {proc.name}: {cmd[:80]}")
    loops = subprocess.run(["losetup", "-l", "-n", "-O", "NAME,BACK-FILE"], capture_output=True, text=True,
                           check=False).stdout
    found += [f"loop {ln}" for ln in loops.splitlines() if marker in ln]
    if plan.lab_dir.exists():
        found.append(f"directory {plan.lab_dir}")
    return found


class Lab:
    def __init__(self, stack: Path, up: subprocess.CompletedProcess[str]) -> None:
        self.stack = stack
        self.plan = layout_lab(load_spec(stack))
        self.up = up
        self.result: dict[str, Any] = json.loads(up.stdout) if up.stdout.strip() else {}

    def ssh(self, node: str, command: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
        return lab("ssh", "--stack", str(self.stack), node, "--", command, timeout=timeout)


@pytest.fixture(scope="module")
def lab3(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    stack = _stack(tmp_path_factory.mktemp("lab"), "labtest", "10.79.0.0/24", "10.79.1.0/24")
    lab("down", "--stack", str(stack))  # a previous run's leftovers, if any
    started = time.monotonic()
    up = lab("up", "--stack", str(stack), "--json")
    print(f"\nlab up: {time.monotonic() - started:.1f} s\n{up.stderr}")
    it = Lab(stack, up)
    try:
        yield it
    finally:
        lab("down", "--stack", str(stack))


def test_up_brings_every_node_up(lab3: Lab) -> None:
    assert lab3.up.returncode == 0, lab3.up.stderr
    assert [n["name"] for n in lab3.result["nodes"]] == ["gpu-1", "gpu-2", "stor-1"]
    assert all(n["action"] in ("created", "started") for n in lab3.result["nodes"]), lab3.result
    for line in ("gpu-1: booting", "gpu-2: booting", "stor-1: booting"):
        assert line in lab3.up.stderr  # progress per node


def test_ssh_reaches_each_node_by_its_name(lab3: Lab) -> None:
    for n in lab3.plan.nodes:
        out = lab3.ssh(n.name, "hostname; cat /etc/hostname")
        assert out.returncode == 0, out.stderr
        assert out.stdout.split() == [n.name, n.name]


def test_systemd_is_running_or_degraded_with_failed_units_named(lab3: Lab) -> None:
    for n in lab3.plan.nodes:
        out = lab3.ssh(n.name, "systemctl is-system-running; systemctl --failed --plain --no-legend")
        state, *failed = out.stdout.strip().splitlines()
        assert state in ("running", "degraded"), f"{n.name}: {state}"
        if state == "degraded":
            assert failed, f"{n.name}: degraded but no failed unit listed"
            print(f"{n.name}: degraded; failed units: {[f.split()[0] for f in failed]}")


def test_every_node_pings_every_node_on_both_networks(lab3: Lab) -> None:
    nodes = lab3.plan.nodes
    for n in nodes:
        script = " && ".join(
            [f"ping -c1 -W2 {m.name}" for m in nodes]
            + [f"ping -c1 -W2 -M do -s 8972 {m.name}-fabric" for m in nodes]
        )
        out = lab3.ssh(n.name, script)
        assert out.returncode == 0, f"{n.name}: {out.stdout[-400:]} {out.stderr}"
    # Jumbo frames really are needed: one byte more than the MTU allows must not pass.
    over = lab3.ssh(nodes[0].name, f"ping -c1 -W2 -M do -s 8973 {nodes[1].name}-fabric")
    assert over.returncode != 0


def test_interfaces_hosts_and_repositories(lab3: Lab) -> None:
    out = lab3.ssh("gpu-1", "cat /sys/class/net/eth0/mtu /sys/class/net/eth1/mtu; ip -4 route; cat /etc/hosts;"
                            " cat /etc/apt/sources.list")
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[:2] == ["1500", "9000"]
    assert not any(ln.startswith("default") for ln in lines), "a lab node must have no default route"
    for n in lab3.plan.nodes:
        assert f"{n.management_ip}\t{n.name}" in out.stdout and f"{n.fabric_ip}\t{n.name}-fabric" in out.stdout
    assert "main contrib non-free non-free-firmware" in out.stdout
    # The compute rails: present, named as the platform names them, and left to the fabric_rails
    # role (down, no address) until a converge configures them.
    rails = [r.interface for r in lab3.plan.node("gpu-1").rails]
    assert rails == ["enp16s0np0", "enp32s0np0"] and lab3.plan.node("stor-1").rails == ()
    out = lab3.ssh("gpu-1", "ip -j -4 addr show; ip -j link show")
    assert out.returncode == 0, out.stderr
    addrs, links = (json.loads(x) for x in out.stdout.strip().splitlines())
    assert {x["ifname"] for x in links} >= set(rails)
    assert not [a for a in addrs if a["ifname"] in rails and a.get("addr_info")]


def test_root_logs_in_by_key_only(lab3: Lab) -> None:
    out = lab3.ssh("gpu-2", "sshd -T | grep -Ei '^(permitrootlogin|passwordauthentication) '")
    assert sorted(out.stdout.split()) == sorted(["permitrootlogin", "without-password", "passwordauthentication",
                                                 "no"])
    assert oct(lab3.plan.key_file.stat().st_mode & 0o777) == "0o600"


def test_storage_node_has_its_data_disk(lab3: Lab) -> None:
    out = lab3.ssh("stor-1", "for d in $(python3 -c 'import json;print(*json.load(open(\"/etc/gpucluster/"
                             "data-disks.json\")))'); do test -b $d && blockdev --getsize64 $d; done")
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == [str(8 * 1024**3)]


def test_apt_installs_through_the_proxy(lab3: Lab) -> None:
    out = lab3.ssh("gpu-1", "apt-get -q update >/dev/null && DEBIAN_FRONTEND=noninteractive "
                            "apt-get install -y -q hello && hello", timeout=300)
    assert out.returncode == 0, out.stdout[-800:] + out.stderr
    assert "Hello, world!" in out.stdout
    log = (proxy.log_dir(lab3.plan) / "apt-cacher.log").read_text()
    assert "hello_" in log  # the package came through the lab's proxy
    # The proxy runs as Debian's apt-cacher-ng account, never as root, and cannot change its own
    # configuration (root's, 0644 in a 0755 folder).
    uid, _ = proxy.proxy_user()
    assert uid != 0 and {psutil.Process(pid).uids().real for pid in proxy.pids(lab3.plan)} == {uid}
    conf = proxy.conf_dir(lab3.plan)
    assert conf.stat().st_uid == 0 and (conf / "acng.conf").stat().st_uid == 0
    assert (conf / "acng.conf").stat().st_mode & 0o777 == 0o644 and conf.stat().st_mode & 0o022 == 0


def test_outputs_and_inventory(lab3: Lab) -> None:
    """`lab up` exports outputs like any target; the inventory beside them is the hand-off's."""
    where = resolve(lab3.stack)
    assert lab3.result["outputs_file"] == str(where.outputs_file) == str(lab3.plan.outputs_file)
    outputs = json.loads(where.outputs_file.read_text())
    assert outputs == lab3.result["outputs"]
    assert outputs["target"] == "lab" and outputs["ssh_private_key_file"] == str(lab3.plan.key_file)
    assert outputs["capabilities"]["heavy_packages"] is False and outputs["capabilities"]["fuse_device"] is False
    inv = subprocess.run([*CLI, "inventory", "--outputs", str(where.outputs_file), "--stack",
                          str(lab3.stack)], capture_output=True, text=True, check=False)
    assert inv.returncode == 0, inv.stderr
    assert lab3.result["inventory_file"] == str(where.inventory_file)
    assert inv.stdout == where.inventory_file.read_text()
    assert "gpucluster_capabilities:\n      heavy_packages: false" in inv.stdout


def test_status_reports_a_healthy_lab(lab3: Lab) -> None:
    st = lab("status", "--stack", str(lab3.stack), "--json")
    assert st.returncode == 0, st.stdout + st.stderr
    found = json.loads(st.stdout)
    assert found["healthy"] and found["proxy"]["running"] and all(n["ssh"] for n in found["nodes"])
    assert found["inventory_file"] == str(resolve(lab3.stack).inventory_file)


def test_second_up_changes_nothing_and_is_quick(lab3: Lab) -> None:
    started = time.monotonic()
    again = lab("up", "--stack", str(lab3.stack), "--json")
    seconds = time.monotonic() - started
    assert again.returncode == 0, again.stderr
    result = json.loads(again.stdout)
    assert result["changed"] is False and {n["action"] for n in result["nodes"]} == {"unchanged"}
    assert seconds < 15, f"second up took {seconds:.1f} s"


def test_zz_down_leaves_nothing(lab3: Lab) -> None:
    cache = lab3.plan.rootfs_dir
    out = lab("down", "--stack", str(lab3.stack))
    assert out.returncode == 0, out.stderr
    assert leftovers(lab3.plan) == []
    assert cache.is_dir(), "the rootfs cache is shared and must survive down"
    assert lab("down", "--stack", str(lab3.stack)).returncode == 0  # down twice is fine


FAIL_POOLS = [
    {"name": "good", "count": 1, "roles": ["gpu"], "profile": "cpu-lab"},
    {"name": "bad", "count": 1, "roles": ["gpu"], "profile": "cpu-lab"},
]


def test_a_node_that_fails_to_boot_is_named_and_the_others_work(tmp_path: Path) -> None:
    stack = _stack(tmp_path, "labfail", "10.79.10.0/24", "10.79.11.0/24", FAIL_POOLS, boot_timeout_s=30)
    plan = layout_lab(load_spec(stack))
    lab("down", "--stack", str(stack))
    # A broken init in bad-1's own layer: its container starts and dies at once. The folder is
    # claimed as the lab's first, as `up` would: `up` never adopts a folder it did not make.
    claim(plan.lab_dir, plan.name)
    init = plan.node_dir("bad-1") / "upper/usr/lib/systemd/systemd"
    init.parent.mkdir(parents=True)
    init.write_text("#!/bin/sh\necho 'init: sabotaged by the test' >&2\nexit 1\n")
    init.chmod(0o755)
    try:
        up = lab("up", "--stack", str(stack))
        assert up.returncode == 1, up.stderr
        assert "error: lab: node bad-1 did not come up" in up.stderr
        assert "bad-1 | " in up.stderr and "sabotaged" in up.stderr  # the tail of its boot log
        assert "good-1 did not" not in up.stderr
        out = lab("ssh", "--stack", str(stack), "good-1", "--", "systemctl is-system-running")
        assert out.stdout.strip() in ("running", "degraded")
        st = json.loads(lab("status", "--stack", str(stack), "--json").stdout)
        assert {n["name"]: n["ssh"] for n in st["nodes"]} == {"good-1": True, "bad-1": False}
    finally:
        assert lab("down", "--stack", str(stack)).returncode == 0
    assert leftovers(plan) == []


def test_ctrl_c_during_up_leaves_nothing_down_cannot_remove(tmp_path: Path) -> None:
    stack = _stack(tmp_path, "labint", "10.79.20.0/24", "10.79.21.0/24", FAIL_POOLS[:1])
    plan = layout_lab(load_spec(stack))
    # SIGINT as on a terminal: a shell's background job (nohup CMD &) starts with SIGINT ignored,
    # and Python keeps an ignored SIGINT so Ctrl-C would never reach `lab up`.
    proc = subprocess.Popen([*CLI, "lab", "up", "--stack", str(stack)], cwd=REPO, stderr=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, text=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    assert proc.stderr is not None
    try:
        for line in proc.stderr:
            if "booting" in line:
                break
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=60)
        assert proc.returncode == 130
    finally:
        if proc.poll() is None:
            proc.kill()
        down = lab("down", "--stack", str(stack))
    assert down.returncode == 0, down.stderr
    assert leftovers(plan) == []
