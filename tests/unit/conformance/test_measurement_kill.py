"""A measurement's processes carry its tag and are killed by it on every node, exactly.

The "nodes" here are local shells (no root, no network): the tag travels through the real
environment of real processes, and the kill script is the one run on the nodes.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest

from gpucluster import hostkeys
from gpucluster.conformance import allreduce_mpi
from gpucluster.conformance import fabric as fabric_mod
from gpucluster.conformance.bandwidth import AllReduceRun
from gpucluster.conformance.fabric import Fabric, FabricOptions
from gpucluster.conformance.nodes import ClusterInventory, NodeInfo
from gpucluster.conformance.remote import (
    MEASURE_TAG,
    CommandResult,
    RunKey,
    TaggedRemote,
    kill_measurement,
    new_measurement_tag,
)
from gpucluster.spec.loader import load_bom, load_platforms, load_profiles
from gpucluster.spec.models import Fabric as FabricSpec

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process



def _inventory() -> ClusterInventory:
    """Two lab nodes: the cpu-lab profile on the lab platform (the floors the lab is held to)."""
    profile = load_profiles()["cpu-lab"]
    platform = load_platforms()["lab"]
    nodes = tuple(NodeInfo(name=f"gpu-{i}", address=f"10.77.0.{9 + i}", port=22, user="root", key_file=None,
                           groups=("gpu",), profile_name="cpu-lab", profile=profile, platform_name="lab",
                           platform=platform, fabric_ip=f"10.77.1.{9 + i}", fabric_interface="eth1")
                  for i in (1, 2))
    fabric = FabricSpec(type="ethernet", mtu=1500, management_cidr="10.77.0.0/24", fabric_cidr="10.77.1.0/24")
    return ClusterInventory("inv.yml", "lab", "lab", fabric, load_bom(), nodes, {"gpu": ("gpu-1", "gpu-2")})


class LocalRemote:
    """A node that is this machine: commands run in /bin/sh, as sshd would run them."""

    def __init__(self, name: str, home: Path | None = None) -> None:
        self.name = name
        self.home = home

    def run(self, command: str, *, stdin: str | None = None, timeout: float = 120.0) -> CommandResult:
        env = dict(os.environ, HOME=str(self.home)) if self.home else None
        proc = subprocess.run(["/bin/sh", "-c", command], input=stdin, capture_output=True, text=True,
                              timeout=timeout, check=False, env=env)
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)


def _tagged_pids(tag: str) -> list[int]:
    found = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if f"{MEASURE_TAG}={tag}".encode() in (d / "environ").read_bytes().split(b"\0"):
                    found.append(int(d.name))
            except OSError:
                continue
    return found


def test_tagged_commands_and_their_children_are_killed_and_nothing_else():
    tag, other = new_measurement_tag(), new_measurement_tag()
    node = TaggedRemote(LocalRemote("gpu-1"), tag)
    bystander = TaggedRemote(LocalRemote("gpu-1"), other)
    # A background grandchild, as ib_write_bw's server or an orted is: it outlives its command.
    quiet = ">/dev/null 2>&1"
    assert node.run(f"(sh -c 'sleep 60' {quiet} &) ; (sleep 60 {quiet} &)", timeout=10).ok
    assert bystander.run(f"(sleep 60 {quiet} &)", timeout=10).ok
    try:
        deadline = time.monotonic() + 5
        while len(_tagged_pids(tag)) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_tagged_pids(tag)) >= 2
        kills = kill_measurement([LocalRemote("gpu-1")], tag, grace_s=1)
        assert isinstance(kills["gpu-1"], int) and kills["gpu-1"] >= 2
        assert _tagged_pids(tag) == []
        assert _tagged_pids(other), "a process of another measurement was killed"
    finally:
        kill_measurement([LocalRemote("gpu-1")], other, grace_s=1)
    assert _tagged_pids(other) == []


def test_a_command_past_its_timeout_marks_the_measurement_cut():
    class Slow:
        name = "gpu-1"

        def run(self, command: str, *, stdin: str | None = None, timeout: float = 120.0) -> CommandResult:
            return CommandResult(124, "", f"timed out after {timeout:.0f} s: {command}")

    r = TaggedRemote(Slow(), "abc")
    assert not r.timed_out
    r.run("mpirun ...", timeout=3)
    assert r.timed_out and r.name == "gpu-1"


def test_a_grant_keeps_the_operators_last_line_whole_and_tags_the_measurement(tmp_path: Path):
    key = RunKey.ensure(tmp_path / "keys", "0a0b0c0d0e0f", "bbbb2222")
    home = tmp_path / "home"
    node = LocalRemote("gpu-2", home)
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "authorized_keys").write_text("ssh-ed25519 AAAAoperator operator@host")
    assert key.grant(node, "10.77.0.10", 30) is None
    assert key.grant(node, "10.77.0.10", 30) is None
    lines = (home / ".ssh" / "authorized_keys").read_text().splitlines()
    # The operator's last line had no newline: it is kept whole, not joined to the grant.
    assert lines[0] == "ssh-ed25519 AAAAoperator operator@host" and len(lines) == 2
    # The gate starts the daemon with the run's and the measurement's tags (test_node_keys.py).
    assert "gate 0a0b0c0d0e0f bbbb2222" in lines[1]


def test_an_allreduce_ends_by_killing_its_tag_on_every_node(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    inv = _inventory()
    fab = Fabric(inv, tmp_path, tmp_path / "ssh_config", hostkeys.policy_for(inv.target, inv.cluster_name), "",
                 FabricOptions(budget_s=7.0))
    nodes = list(inv.nodes)
    seen: dict[str, Any] = {}

    def fake_run(launcher, names, ips, cidr, settings, label, data_ports=None):
        seen["tag"] = launcher.tag
        seen["timeout"] = settings.timeout_s
        launcher.timed_out = True  # as when ssh ran past the budget
        return AllReduceRun("mpi-cpu", label, names, 2, status="incomplete"), ""

    def fake_kill(remotes, tag, grace_s=2, extra=""):
        seen["killed"] = (sorted(r.name for r in remotes), tag, "revoked" in extra)
        return {"gpu-1": 1, "gpu-2": 3}

    monkeypatch.setattr(allreduce_mpi, "ship_script", lambda remotes, folder: [])
    monkeypatch.setattr(allreduce_mpi, "run_allreduce", fake_run)
    monkeypatch.setattr(fabric_mod, "kill_measurement", fake_kill)
    monkeypatch.setattr(fab, "_grant",
                        lambda nodes, key, budget: seen.setdefault("granted", (key.measurement, budget)) and [])
    monkeypatch.setattr(fab, "_place_key", lambda launcher, key: None)
    monkeypatch.setattr(fab, "_remove_key", lambda launcher, key, path: None)
    run = fab._allreduce(nodes, "pair:gpu-1+gpu-2", sweep=False)
    assert seen["timeout"] == 7.0 and seen["granted"] == (seen["tag"], 7.0)
    assert seen["killed"] == (["gpu-1", "gpu-2"], seen["tag"], True)
    assert run.status == "cut" and run.budget_s == 7.0
    assert "killed on its nodes: gpu-1 1, gpu-2 3" in run.notes[-1]


def test_the_budget_comes_from_the_floor_unless_given():
    inv = _inventory()
    policy = hostkeys.policy_for(inv.target, inv.cluster_name)
    nodes = list(inv.nodes)
    sizes = allreduce_mpi.ramp_to(Fabric(inv, Path("/x"), Path("/x"), policy, "").verdict_bytes(nodes))
    assert sizes == (1 << 20, 4 << 20, 16 << 20, 32 << 20)
    # cpu-lab: floor 0.05 GB/s; 4 iterations (2 warmup, the probe, one timed) of 53 MiB take 4.45 s there.
    got = Fabric(inv, Path("/x"), Path("/x"), policy, "").budget(nodes, sizes)
    assert got == pytest.approx(allreduce_mpi.LAUNCH_S + 2 * 4 * sum(sizes) / 0.05e9)
    assert Fabric(inv, Path("/x"), Path("/x"), policy, "", FabricOptions(budget_s=1.5)).budget(nodes, sizes) == 1.5
