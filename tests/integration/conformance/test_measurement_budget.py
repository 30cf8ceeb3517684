"""A measurement whose budget ends is killed on every node, not only on its launcher.

On the shared `itest` lab (tests/integration/conftest.py; its first converge put MPI and the
node script on every GPU node): an MPI all-reduce between two GPU nodes is started with a budget
far shorter than it needs (the second node's rails throttled so the ranks are mid-transfer when it
ends). Afterwards no process of it may be left on either node, found both by its tag and by what
it runs (orted, the node script). The throttle is removed in `finally`, so the tests after it find
the lab as it was. (It had a two-node lab of its own, converged from nothing: three minutes of the
integration tier, the critical path of `make test`, for nothing the shared lab lacks.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from gpucluster import hostkeys
from gpucluster.conformance import allreduce_mpi
from gpucluster.conformance import fabric as fabric_mod
from gpucluster.conformance.fabric import Fabric, FabricOptions
from gpucluster.conformance.nodes import load_inventory
from gpucluster.conformance.remote import MEASURE_TAG, RUN_ID_ENV, write_ssh_config
from gpucluster.lab.host import host_problem, os_release
from gpucluster.paths import resolve

REPO = Path(__file__).resolve().parents[3]
_why = host_problem(os.geteuid(), os_release())
pytestmark = [pytest.mark.lab, pytest.mark.skipif(_why is not None, reason=str(_why))]


def gc(*args: str, timeout: float = 2400) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpucluster", *args], capture_output=True, text=True,
                          timeout=timeout, cwd=REPO, check=False)


@pytest.fixture(scope="module")
def lab(itest_lab: Any) -> Path:
    """The shared lab's stack: its nodes are converged (MPI, the node script) once for the session."""
    return itest_lab.stack


def ssh(stack: Path, node: str, command: str) -> subprocess.CompletedProcess[str]:
    return gc("lab", "ssh", "--stack", str(stack), node, "--", command, timeout=120)


def left_on(stack: Path, node: str, tag: str) -> list[str]:
    """Processes on the node carrying the measurement's tag, or running what it ran."""
    script = (f"for d in /proc/[0-9]*; do grep -qzx -- '{MEASURE_TAG}={tag}' $d/environ 2>/dev/null && "
              "echo tagged $(tr '\\0' ' ' < $d/cmdline | cut -c1-80); done; "
              f"pgrep -a -f 'orted|{allreduce_mpi.SCRIPT_NAME}' | grep -v pgrep || true")
    res = ssh(stack, node, script)
    assert res.returncode == 0, res.stderr[-1000:]
    return [x for x in res.stdout.splitlines() if x.strip()]


def test_a_measurement_past_its_budget_leaves_nothing_on_any_node(lab: Path, tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    inventory = resolve(lab).inventory_file
    inv = load_inventory(inventory)
    nodes = [n for n in inv.nodes if "gpu" in n.groups][:2]
    assert len(nodes) == 2, "the shared lab has two GPU nodes or more"
    run_id = "b0d9e7a1c2f3"
    monkeypatch.setenv(RUN_ID_ENV, run_id)
    cfg = write_ssh_config(tmp_path / "ssh" / "gw0" / "ssh_config", list(inv.nodes), shared=tmp_path / "ssh",
                           host_keys=hostkeys.policy_for(inv.target, inv.cluster_name))
    # 1 Mbit/s on every compute rail (where the all-reduce's data goes): one all-reduce of the first
    # pair size (1 MiB) takes ~8 s, far past the budget.
    links = [r.interface for r in nodes[1].rails]
    assert links, "the lab's GPU nodes have compute rails"
    shape = "; ".join(f"tc qdisc replace dev {d} root tbf rate 1mbit burst 32kb latency 400ms" for d in links)
    assert ssh(lab, nodes[1].name, shape).returncode == 0
    seen: dict[str, str] = {}
    real_kill = fabric_mod.kill_measurement

    def recording_kill(remotes, tag, grace_s=2, extra=""):  # type: ignore[no-untyped-def]
        # The real kill runs; what each node ran just before it is recorded (the peer's orted and rank).
        seen["tag"] = tag
        seen.update({r.name: "\n".join(left_on(lab, r.name, tag)) for r in remotes})
        result = real_kill(remotes, tag, grace_s, extra)
        seen["killed"] = repr(result)
        return result

    monkeypatch.setattr(fabric_mod, "kill_measurement", recording_kill)
    try:
        fabric = Fabric(inv, tmp_path, cfg, hostkeys.policy_for(inv.target, inv.cluster_name), run_id,
                        FabricOptions(budget_s=6.0))
        run = fabric._allreduce(nodes, f"pair:{nodes[0].name}+{nodes[1].name}", sweep=False)
    finally:
        ssh(lab, nodes[1].name, "; ".join(f"tc qdisc del dev {d} root" for d in links))
    assert run.status == "cut", (run.status, run.notes)
    tag = seen["tag"]
    # Whatever still ran when the budget ended (the node script also stops itself at its deadline,
    # so there may be nothing), nothing of the measurement is left on either node.
    for n in nodes:
        assert left_on(lab, n.name, tag) == [], f"{n.name} still runs the measurement"
    # The run key went with it.
    for n in nodes:
        keys = ssh(lab, n.name, "grep -c gpucluster-verify-run ~/.ssh/authorized_keys || true").stdout.strip()
        assert keys in ("0", ""), f"{n.name}: run key left: {keys}"


def test_an_orphan_of_a_measurement_is_killed_on_every_node_and_nothing_else(lab: Path, tmp_path: Path,
                                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """What happens when a launcher dies mid-run: its ranks on the peers lose their parent and run
    on. They carry the measurement's tag, so the kill at the budget's end finds them; a process of
    another measurement is left alone."""
    from gpucluster.conformance.remote import SshRemote, TaggedRemote, kill_measurement, new_measurement_tag

    inv = load_inventory(resolve(lab).inventory_file)
    nodes = [n for n in inv.nodes if "gpu" in n.groups][:2]
    run_id = "c1d2e3f4a5b6"
    monkeypatch.setenv(RUN_ID_ENV, run_id)
    cfg = write_ssh_config(tmp_path / "ssh" / "gw0" / "ssh_config", list(inv.nodes), shared=tmp_path / "ssh",
                           host_keys=hostkeys.policy_for(inv.target, inv.cluster_name))
    doomed, other = new_measurement_tag(), new_measurement_tag()
    remotes = [SshRemote(n.name, cfg) for n in nodes]
    # Detached from the ssh session, as an orphaned orted and its rank are.
    start = "setsid nohup sleep 600 >/dev/null 2>&1 < /dev/null &"
    try:
        for r in remotes:
            assert TaggedRemote(r, doomed).run(start).rc == 0
            assert TaggedRemote(r, other).run(start).rc == 0
        for n in nodes:
            assert len(left_on(lab, n.name, doomed)) >= 1, f"{n.name}: the orphan did not start"
        killed = kill_measurement(remotes, doomed)
        assert all(isinstance(killed[n.name], int) and int(killed[n.name]) >= 1 for n in nodes), killed
        for n in nodes:
            assert [x for x in left_on(lab, n.name, doomed) if x.startswith("tagged")] == []
            assert any(x.startswith("tagged") for x in left_on(lab, n.name, other)), \
                f"{n.name}: another measurement's process was killed too"
    finally:
        kill_measurement(remotes, other)
        kill_measurement(remotes, doomed)
