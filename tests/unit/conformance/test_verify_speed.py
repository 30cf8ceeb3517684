"""What keeps `gpucluster verify` quick on many nodes: pair runs at the verdict's sizes only, one
set of SSH control masters per run, no bytecode recompiled in every worker, no placeholder node
for a check whose inventory groups are empty."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from gpucluster import hostkeys, verify
from gpucluster.conformance import allreduce_mpi, run_nccl_tests
from gpucluster.conformance.bandwidth import AllReduceRun
from gpucluster.conformance.fabric import Fabric
from gpucluster.conformance.nodes import load_inventory
from gpucluster.conformance.remote import write_ssh_config
from gpucluster.inventory import parse_inventory_text

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "golden" / "inventory" / "lab.yml"


def _control_path(config: Path) -> str:
    return next(line.split()[1] for line in config.read_text().splitlines() if "ControlPath" in line)


def test_configs_of_one_run_share_their_control_masters(tmp_path):
    nodes = list(load_inventory(GOLDEN).nodes)
    shared = tmp_path / "run" / "ssh"
    a = write_ssh_config(shared / "gw0" / "ssh_config", nodes, shared=shared)
    b = write_ssh_config(shared / "publish" / "ssh_config", nodes, shared=shared)
    alone = write_ssh_config(tmp_path / "other" / "ssh_config", nodes)
    assert _control_path(a) == _control_path(b) != _control_path(alone)


def test_pair_runs_ramp_to_the_verdict_sizes_only(tmp_path, monkeypatch):
    inv = load_inventory(GOLDEN)
    seen: list[tuple[int, ...]] = []

    def fake_run(launcher, names, ips, cidr, settings, label, data_ports=None):
        seen.append(settings.sizes)
        return AllReduceRun("mpi-cpu", label, names, len(names)), ""

    monkeypatch.setattr(allreduce_mpi, "ship_script", lambda remotes, folder: [])
    monkeypatch.setattr(allreduce_mpi, "run_allreduce", fake_run)
    fabric = Fabric(inv, tmp_path, tmp_path / "ssh_config", hostkeys.policy_for(inv.target, inv.cluster_name), "")
    nodes = [n for n in inv.nodes if n.name in ("gpu-1", "gpu-2")]
    monkeypatch.setattr(fabric, "_place_key", lambda launcher, key: None)
    monkeypatch.setattr(fabric, "_remove_key", lambda launcher, key, path: None)
    large = fabric.verdict_bytes(nodes)
    fabric._allreduce(nodes, "inter", sweep=True)
    fabric._allreduce(nodes, "pair", sweep=False)
    assert seen[0] == allreduce_mpi.sizes_up_to(large) and seen[1] == allreduce_mpi.ramp_to(large)


def test_nccl_tests_pairs_start_at_the_large_size():
    args = run_nccl_tests.perf_args(1 << 25, 1, None, min_bytes=1 << 24)
    assert args[args.index("-b") + 1] == str(1 << 24) and args[args.index("-e") + 1] == str(1 << 25)
    assert run_nccl_tests.perf_args(1 << 25, 1, None)[1] == "8"


def test_bytecode_goes_to_a_cache_when_writing_is_off(tmp_path):
    assert verify.bytecode_env({}) == {}
    env = verify.bytecode_env({"PYTHONDONTWRITEBYTECODE": "1", "XDG_CACHE_HOME": str(tmp_path)})
    assert env == {"PYTHONDONTWRITEBYTECODE": "", "PYTHONPYCACHEPREFIX": str(tmp_path / "gpucluster" / "pycache")}
    mine = verify.bytecode_env({"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": "/srv/pyc"})
    assert mine["PYTHONPYCACHEPREFIX"] == "/srv/pyc"


def test_the_suite_runs_without_the_hypothesis_plugin(tmp_path):
    argv = verify.pytest_argv(verify.VerifyOptions(GOLDEN, tmp_path), load_inventory(GOLDEN))
    assert "no:hypothesispytest" in argv


def test_checks_of_an_empty_group_concern_no_node(tmp_path):
    """A cluster without storage nodes: the storage checks are deselected, never a node of their own."""
    data = parse_inventory_text(GOLDEN.read_text())
    data["all"]["hosts"].pop("stor-1")
    for group in data["all"]["children"].values():
        (group.get("hosts") or {}).pop("stor-1", None)
    inv = tmp_path / "inv.yml"
    inv.write_text(yaml.safe_dump(data))
    out = subprocess.run([sys.executable, "-m", "pytest", str(REPO / "tests" / "conformance"), "--inventory", str(inv),
                          "--run-dir", str(tmp_path / "run"), "-p", "no:cacheprovider", "-p", "no:hypothesispytest",
                          "--collect-only", "-q"], capture_output=True, text=True, cwd=REPO, timeout=120, check=False)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    ids = [line for line in out.stdout.splitlines() if "::" in line]
    assert ids and all("[gpu-1" in i or "[gpu-2" in i or "[" not in i for i in ids), ids
    assert not any("NOTSET" in i or "NotSet" in i or "stor-1" in i for i in ids)
    assert "deselected" in out.stdout
