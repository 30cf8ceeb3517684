"""`gpucluster verify` under SSH trust, unreachable nodes, Ctrl-C and full disks.

The SSH client is a stand-in (tests/unit/cli/fakessh.py) that runs each "remote" command on this
machine as a real process in a session of its own and a home folder per node, so the suite itself
runs for real: what it authorises, copies and starts on a node can be looked at and killed.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster import hostkeys, runs, sockets
from gpucluster.conformance import allreduce_mpi, node_keys, run_nccl_tests
from gpucluster.conformance import fabric as fabric_module
from gpucluster.conformance.bandwidth import AllReduceRun
from gpucluster.conformance.fabric import Fabric
from gpucluster.conformance.nodes import load_inventory
from gpucluster.conformance.remote import (
    RUN_ID_ENV,
    RunKey,
    SshRemote,
    cleanup_nodes,
    cleanup_script,
    write_ssh_config,
)
from gpucluster.inventory import parse_inventory_text
from tests.unit.cli import fakessh

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
GOLDEN = REPO / "tests" / "golden" / "inventory" / "lab.yml"




def _inventory(tmp_path: Path, target: str = "lab", key: Path | None = None) -> Path:
    data = parse_inventory_text(GOLDEN.read_text())
    data["all"]["vars"]["gpucluster_target"] = target
    if key is not None:
        for host in data["all"]["hosts"].values():
            host["ansible_ssh_private_key_file"] = str(key)
    path = tmp_path / f"inventory-{target}.yml"
    path.write_text(yaml.safe_dump(data))
    return path


def _wait_for(predicate: Any, seconds: float, what: str) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.1)


def _unique_seconds() -> str:
    return f"{2000 + os.getpid() % 997}.{time.time_ns() % 100000:05d}"


# --- SSH trust -----------------------------------------------------------------------------


def _config_options(path: Path) -> list[str]:
    return [line.strip() for line in path.read_text().splitlines()]


def test_real_targets_check_host_keys_against_the_clusters_known_hosts(tmp_path: Path, _state_dir: Path) -> None:
    inv = load_inventory(_inventory(tmp_path, target="baremetal"))
    policy = hostkeys.policy_for(inv.target, inv.cluster_name)
    lines = _config_options(write_ssh_config(tmp_path / "ssh_config", list(inv.nodes), host_keys=policy))
    known_hosts = _state_dir / "clusters" / "lab" / "known_hosts"
    assert "StrictHostKeyChecking accept-new" in lines and f"UserKnownHostsFile {known_hosts}" in lines
    assert "StrictHostKeyChecking no" not in lines and "UserKnownHostsFile /dev/null" not in lines
    assert "ForwardAgent no" in lines
    assert known_hosts.exists() and oct(known_hosts.stat().st_mode & 0o777) == "0o600"


def test_the_lab_stays_exempt(tmp_path: Path) -> None:
    inv = load_inventory(GOLDEN)
    policy = hostkeys.policy_for(inv.target, inv.cluster_name)
    lines = _config_options(write_ssh_config(tmp_path / "ssh_config", list(inv.nodes), host_keys=policy))
    assert "StrictHostKeyChecking no" in lines and "ForwardAgent no" in lines


def test_no_agent_is_ever_forwarded() -> None:
    argv = SshRemote("gpu-1", Path("cfg"), run_id="").argv("true")
    assert "-A" not in argv and not any("ForwardAgent=yes" in a for a in argv)
    launcher = run_nccl_tests.mpirun_argv(["10.0.0.1", "10.0.0.2"], 8, "10.1.0.0/24", 1 << 30, "/opt/nccl-tests",
                                          None, ssh_key="/root/.ssh/gpucluster-verify-abc")
    rsh = launcher[launcher.index("plm_rsh_args") + 1]
    assert "ForwardAgent=no" in rsh and "-i /root/.ssh/gpucluster-verify-abc" in rsh
    assert "StrictHostKeyChecking=accept-new" in rsh and "StrictHostKeyChecking=no" not in rsh
    assert launcher[launcher.index("plm_rsh_no_tree_spawn") + 1] == "1"


def test_mpirun_logs_in_with_the_run_key_and_checks_host_keys() -> None:
    settings = allreduce_mpi.MpiSettings(sizes=(1024,), ssh_key="/root/.ssh/gpucluster-verify-abc")
    argv = allreduce_mpi.mpirun_argv(["10.0.0.1", "10.0.0.2"], "10.1.0.0/24", settings)
    rsh = argv[argv.index("plm_rsh_args") + 1]
    assert "-i /root/.ssh/gpucluster-verify-abc" in rsh and "StrictHostKeyChecking=accept-new" in rsh
    assert "UserKnownHostsFile=/root/.ssh/gpucluster-verify-abc.known_hosts" in rsh
    assert "StrictHostKeyChecking=no" not in rsh and "ForwardAgent=no" in rsh
    # Only the launcher (which holds the key) starts daemons on the others.
    assert argv[argv.index("plm_rsh_no_tree_spawn") + 1] == "1"


def _forced_command(line: str) -> str:
    m = re.search(r'command="((?:[^"\\]|\\.)*)"', line)
    assert m, line
    return m.group(1).replace('\\"', '"')


class _Home:
    name = "gpu-2"

    def __init__(self, home: Path) -> None:
        self.home = home

    def run(self, command: str, *, stdin: str | None = None, timeout: float = 120.0) -> Any:
        from gpucluster.conformance.remote import CommandResult

        proc = subprocess.run(["/bin/sh", "-c", command], input=stdin, capture_output=True, text=True,
                              check=False, env=dict(os.environ, HOME=str(self.home)))
        return CommandResult(proc.returncode, proc.stdout, proc.stderr)


def test_the_run_keys_line_restricts_it_and_tags_what_it_starts(tmp_path: Path) -> None:
    run_id = runs.new_run_id()
    key = RunKey.ensure(tmp_path / "keys", run_id, "aaaa1111")
    authorized = tmp_path / ".ssh" / "authorized_keys"
    authorized.parent.mkdir()
    operator = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOperatorKeyOperatorKeyOperatorKeyOper op@desk"
    authorized.write_text(f"{operator}\n")
    assert key.grant(_Home(tmp_path), "10.77.0.10", 60) is None
    line = authorized.read_text().splitlines()[1]
    assert line.startswith('restrict,from="10.77.0.10",expiry-time="')
    assert line.endswith(f" gpucluster-verify-run:{run_id}:aaaa1111")
    # What sshd runs for a login with the key (mpirun starting its daemon): Open MPI's daemon
    # (here a stand-in that lives on), tagged with the run and the measurement.
    seconds = _unique_seconds()
    bin_dir = tmp_path / "ompi"
    bin_dir.mkdir(mode=0o755)
    (bin_dir / "orted").write_text(f"#!/bin/sh\nexec sleep {seconds}\n")
    (bin_dir / "orted").chmod(0o755)
    env = dict(os.environ, SSH_ORIGINAL_COMMAND='orted -mca ess "env"', SHELL="/bin/sh", HOME=str(tmp_path),
               PATH=f"{bin_dir}:{os.environ['PATH']}")
    proc = subprocess.Popen(["/bin/sh", "-c", _forced_command(line)], env=env, start_new_session=True)
    try:
        _wait_for(lambda: len(fakessh.pids_running(f"sleep {seconds}")) == 1, 10, "the daemon")
        tagged = runs.tagged_pids(f"GPUCLUSTER_RUN={run_id}")
        assert proc.pid in tagged and set(tagged) == set(fakessh.pids_running(f"sleep {seconds}"))
        assert runs.tagged_pids("GPUCLUSTER_MEASUREMENT=aaaa1111") == tagged
        out = subprocess.run(["/bin/sh", "-c", cleanup_script(run_id)], capture_output=True, text=True,
                             check=False, env=dict(os.environ, HOME=str(tmp_path)))
        assert f"killed {len(tagged)}" in out.stdout
        proc.wait(timeout=10)
        assert fakessh.pids_running(f"sleep {seconds}") == []
        assert authorized.read_text().splitlines() == [operator]
    finally:
        runs.kill_tagged_local(f"GPUCLUSTER_RUN={run_id}", grace_s=1)
        proc.wait()


def test_fabric_never_copies_the_inventory_key_and_takes_the_run_key_back(
        tmp_path: Path, ssh_stub: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    inventory_key = tmp_path / "inventory_key"
    inventory_key.write_text("-----BEGIN OPENSSH PRIVATE KEY-----\nINVENTORY-KEY-MATERIAL\n")
    inv = load_inventory(_inventory(tmp_path, key=inventory_key))
    run_dir = tmp_path / "run"
    monkeypatch.setenv(RUN_ID_ENV, "feedfacecafe")
    homes = ssh_stub / "nodes"
    cfg = write_ssh_config(run_dir / "ssh" / "gw0" / "ssh_config", list(inv.nodes), shared=run_dir / "ssh")
    seen: dict[str, Any] = {}

    def fake_run(launcher, names, ips, cidr, settings, label, data_ports=None):
        # While mpirun would run: the launcher holds the run's key, the others accept it.
        seen["ssh_key"] = settings.ssh_key
        seen["launcher_key"] = Path(settings.ssh_key).read_text()
        seen["run_key"] = [p.read_text() for p in (run_dir / "ssh" / "run-key").glob("run-key-feedfacecafe-*")
                           if p.suffix != ".pub"]
        seen["authorized"] = {n: (homes / n / ".ssh" / "authorized_keys").read_text()
                              if (homes / n / ".ssh" / "authorized_keys").exists() else "" for n in names}
        return AllReduceRun("mpi-cpu", label, names, len(names), status="ok"), ""

    monkeypatch.setattr(allreduce_mpi, "ship_script", lambda remotes, folder: [])
    monkeypatch.setattr(allreduce_mpi, "run_allreduce", fake_run)
    fabric = Fabric(inv, run_dir, cfg, hostkeys.policy_for(inv.target, inv.cluster_name), "feedfacecafe")
    fabric.inter_node()

    assert seen["run_key"] == [seen["launcher_key"]] and "INVENTORY-KEY-MATERIAL" not in seen["launcher_key"]
    assert re.fullmatch(rf"{homes / 'gpu-1' / '.ssh'}/gpucluster-verify-feedfacecafe\.[0-9a-f]{{16}}", seen["ssh_key"])
    # The peer accepts the measurement's key; the launcher, which starts its own daemon, needs none.
    assert "gpucluster-verify-run:feedfacecafe:" in seen["authorized"]["gpu-2"]
    assert "gpucluster-verify-run" not in seen["authorized"]["gpu-1"]
    assert not list((run_dir / "ssh" / "run-key").glob("run-key-*")), "the controller kept the measurement's key"
    # Afterwards: no trace of the run's key on any node, and the inventory key was never there.
    for path in homes.rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert "gpucluster-verify-run" not in text and "INVENTORY-KEY-MATERIAL" not in text, path
    assert not list(homes.rglob("gpucluster-verify-*"))
    assert not any("-A" in call for call in fakessh.calls(ssh_stub))


def test_a_changed_host_key_is_named_with_its_remedy(tmp_path: Path, _state_dir: Path) -> None:
    policy = hostkeys.policy_for("onprem", "prod")
    stderr = ("@@@@@@@@\r\n@    WARNING: REMOTE HOST IDENTIFICATION HAS CHANGED!     @\r\n"
              "Host key for 10.0.0.5 has changed and you have requested strict checking.\r\n"
              "Host key verification failed.\r\n")
    r = hostkeys.classify("gpu-1", "10.0.0.5", 255, stderr, 0.2, policy, 15)
    assert r.status == "host_key_changed"
    assert f"ssh-keygen -R 10.0.0.5 -f {_state_dir / 'clusters' / 'prod' / 'known_hosts'}" in r.message
    down = hostkeys.classify("gpu-2", "10.0.0.6", 255, "ssh: connect to host 10.0.0.6 port 22: No route to host\r\n",
                             3.0, policy, 15)
    assert down.status == "unreachable" and down.message.endswith("No route to host")
    assert hostkeys.classify("gpu-3", "10.0.0.7", None, "", 15.0, policy, 15).message == "no SSH answer within 15 s"
    # Through a bastion whose key changed (the jump connection's words): the bastion is named, not the node.
    jump = hostkeys.classify("gpu-1", "10.0.0.5", 255, stderr.replace("10.0.0.5", "198.18.83.2"), 0.2, policy, 15)
    assert jump.status == "host_key_changed"
    assert "host key of 198.18.83.2 is not" in jump.message and "the bastion 198.18.83.2 on the way to 10.0.0.5" \
        in jump.message and "ssh-keygen -R 198.18.83.2 " in jump.message and "-R 10.0.0.5" not in jump.message


# --- what a run starts on the nodes, and stopping it ----------------------------------------------


def test_cleanup_kills_what_the_run_started_on_every_node(tmp_path: Path, ssh_stub: Path) -> None:
    cfg = write_ssh_config(tmp_path / "ssh_config", list(load_inventory(GOLDEN).nodes))
    seconds = {n: _unique_seconds() + str(i) for i, n in enumerate(("gpu-1", "gpu-2"))}
    other = _unique_seconds() + "9"
    threads = [threading.Thread(target=SshRemote(n, cfg, run_id="aaaa1111bbbb").run, args=(f"sleep {s}",),
                                kwargs={"timeout": 120}) for n, s in seconds.items()]
    threads.append(threading.Thread(target=SshRemote("gpu-1", cfg, run_id="ccccdddd0000").run,
                                    args=(f"sleep {other}",), kwargs={"timeout": 120}))
    for t in threads:
        t.start()
    try:
        for s in [*seconds.values(), other]:
            _wait_for(lambda s=s: fakessh.pids_running(f"sleep {s}"), 20, f"sleep {s}")
        done = cleanup_nodes([SshRemote(n, cfg) for n in seconds], "aaaa1111bbbb")
        assert set(done) == {"gpu-1", "gpu-2"} and all("process(es) of the run killed" in v for v in done.values())
        for s in seconds.values():
            assert fakessh.pids_running(f"sleep {s}") == []
        assert fakessh.pids_running(f"sleep {other}"), "another run's process was killed"
    finally:
        for pid in fakessh.pids_running(f"sleep {other}"):
            os.kill(pid, signal.SIGKILL)
        for t in threads:
            t.join(timeout=30)


def test_a_command_past_its_timeout_is_killed_on_the_node(tmp_path: Path, ssh_stub: Path) -> None:
    cfg = write_ssh_config(tmp_path / "ssh_config", list(load_inventory(GOLDEN).nodes))
    seconds = _unique_seconds()
    res = SshRemote("gpu-1", cfg, run_id="abcdef012345").run(f"sleep {seconds}", timeout=2)
    try:
        assert res.rc == 124 and re.search(r"; [12] of its process\(es\) killed on the node", res.stderr), res.stderr
        assert fakessh.pids_running(f"sleep {seconds}") == []
    finally:
        for pid in fakessh.pids_running(f"sleep {seconds}"):
            os.kill(pid, signal.SIGKILL)


# --- the whole suite, for real, over the stand-in ssh -------------------------------------------


def _gc(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    full = {**os.environ, "PYTHONPATH": str(REPO), **(env or {})}
    return subprocess.Popen([sys.executable, "-m", "gpucluster", *args], cwd=tmp_path, env=full, text=True,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)


def _verify(tmp_path: Path, inventory: Path, *extra: str) -> list[str]:
    return ["verify", "--inventory", str(inventory), "--run-dir", str(tmp_path / "run"), "--no-burn", "--no-publish",
            *extra]


def test_an_unreachable_node_is_found_up_front(tmp_path: Path, ssh_stub: Path, monkeypatch: pytest.MonkeyPatch,
                                                _state_dir: Path) -> None:
    """gpu-2 does not answer (each ssh waits out its ConnectTimeout) and stor-1 presents another
    host key: both get the verdict unreachable, with the reason, in seconds rather than one SSH
    timeout per check; the others are checked as usual."""
    inventory = _inventory(tmp_path, target="baremetal")
    t0 = time.monotonic()
    proc = _gc(tmp_path, *_verify(tmp_path, inventory), env={"FAKE_SSH_DOWN": "gpu-2", "FAKE_SSH_CHANGED": "stor-1"})
    try:
        out, err = proc.communicate(timeout=150)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    took = time.monotonic() - t0
    assert proc.returncode == 1, err[-3000:]
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    verdicts = {v["node"]: v for v in data["verdicts"]}
    assert verdicts["gpu-2"]["verdict"] == "unreachable" and "Connection timed out" in verdicts["gpu-2"]["reason"]
    assert verdicts["stor-1"]["verdict"] == "unreachable" and "ssh-keygen -R" in verdicts["stor-1"]["reason"]
    assert verdicts["gpu-1"]["verdict"] == "fail"  # checked (this machine is no GPU node)
    # Every check of gpu-2 that got as far as the node (the Kubernetes ones skip first without a
    # kubeconfig) errs at once, naming why.
    mine = [r for r in data["results"] if r["node"] == "gpu-2" and r["outcome"] != "skipped"]
    assert len(mine) > 20 and all(r["outcome"] == "error" and r["message"].startswith("node unreachable")
                                  and r["duration_s"] < 1 for r in mine)
    assert re.search(r"^gpu-2\s+UNREACHABLE", out, re.M)
    assert took < 90, f"verify took {took:.0f} s"
    probe = (tmp_path / "run" / "ssh" / "probe" / "ssh_config").read_text()
    assert f"UserKnownHostsFile {_state_dir / 'clusters' / 'lab' / 'known_hosts'}" in probe


FAKE_MPIRUN = """#!/bin/sh
# mpirun on the launcher, busy for a long time (the measurement Ctrl-C stops)
exec sleep {seconds}
"""


def test_ctrl_c_stops_the_measurements_on_the_nodes_and_keeps_the_report(tmp_path: Path, ssh_stub: Path) -> None:
    seconds = _unique_seconds()
    bin_dir = tmp_path / "mpi-bin"
    bin_dir.mkdir()
    (bin_dir / "mpirun").write_text(FAKE_MPIRUN.format(seconds=seconds))
    (bin_dir / "mpirun").chmod(0o755)
    env = {"PATH": f"{ssh_stub / 'bin'}{os.pathsep}{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    proc = _gc(tmp_path, *_verify(tmp_path, _inventory(tmp_path), "--workers", "3"), env=env)
    try:
        _wait_for(lambda: fakessh.pids_running(f"sleep {seconds}") or proc.poll() is not None, 120,
                  "mpirun on the launcher")
        assert proc.poll() is None, proc.communicate()
        homes = ssh_stub / "nodes"
        assert any("gpucluster-verify-run:" in p.read_text() for p in homes.glob("*/.ssh/authorized_keys"))
        time.sleep(3)  # let checks on the other nodes finish: the report must hold them
        os.kill(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for pid in fakessh.pids_running(f"sleep {seconds}"):
            os.kill(pid, signal.SIGKILL)
    assert proc.returncode == 130, err[-3000:]
    assert fakessh.pids_running(f"sleep {seconds}") == [], "mpirun survived on the launcher"
    data = json.loads((tmp_path / "run" / "results.json").read_text())
    assert data["meta"]["interrupted"] is True and data["exit_code"] == 130
    assert data["results"], "the checks that finished are in the report"
    assert "interrupted" in (tmp_path / "run" / "summary.md").read_text().lower()
    # The run's key is gone from every node and from the controller.
    for path in (ssh_stub / "nodes").rglob("*"):
        if path.is_file():
            assert "gpucluster-verify-run" not in path.read_text(), path
    assert not list((ssh_stub / "nodes").rglob("gpucluster-verify-*"))
    assert not list((tmp_path / "run" / "ssh").rglob("run-key-*"))
    assert "INTERNALERROR" not in err and "error: verify: interrupted" in err


FIRST_MPIRUN = """#!/bin/sh
# mpirun on the launcher: the first one stays busy (the measurement a crash or a SIGKILL cuts
# short); any later one fails at once, as a launch that found no peer.
[ -e {mark} ] && exit 1
: > {mark}
exec sleep {seconds}
"""


def _first_mpirun(tmp_path: Path, ssh_stub: Path) -> tuple[str, dict[str, str]]:
    seconds = _unique_seconds()
    bin_dir = tmp_path / "mpi-bin"
    bin_dir.mkdir()
    (bin_dir / "mpirun").write_text(FIRST_MPIRUN.format(mark=tmp_path / "mpirun-ran", seconds=seconds))
    (bin_dir / "mpirun").chmod(0o755)
    return seconds, {"PATH": f"{ssh_stub / 'bin'}{os.pathsep}{bin_dir}{os.pathsep}{os.environ['PATH']}"}


def _granted(ssh_stub: Path) -> list[str]:
    """The run key lines on the stand-in nodes."""
    return [line for p in (ssh_stub / "nodes").glob("*/.ssh/authorized_keys")
            for line in p.read_text().splitlines() if "gpucluster-verify-run:" in line]


def _assert_nothing_left(ssh_stub: Path, seconds: str) -> None:
    assert fakessh.pids_running(f"sleep {seconds}") == [], "mpirun survived on the launcher"
    assert _granted(ssh_stub) == [], "a grant of the run key survived"
    assert not list((ssh_stub / "nodes").rglob("gpucluster-verify-*")), "the run key's files survived"


def _stop(proc: subprocess.Popen[str], seconds: str) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    for pid in fakessh.pids_running(f"sleep {seconds}"):
        os.kill(pid, signal.SIGKILL)


def _verify_until_mpirun(tmp_path: Path, ssh_stub: Path) -> tuple[str, dict[str, str], Path, subprocess.Popen[str]]:
    """A verify (two workers) whose first mpirun stays busy, returned once that mpirun runs."""
    seconds, env = _first_mpirun(tmp_path, ssh_stub)
    inventory = _inventory(tmp_path)
    proc = _gc(tmp_path, *_verify(tmp_path, inventory, "--workers", "2"), env=env)
    try:
        _wait_for(lambda: fakessh.pids_running(f"sleep {seconds}") or proc.poll() is not None, 120, "mpirun")
        assert proc.poll() is None, proc.communicate()
    except BaseException:
        _stop(proc, seconds)
        raise
    return seconds, env, inventory, proc


def test_a_crashed_worker_leaves_no_grant_and_no_process(tmp_path: Path, ssh_stub: Path) -> None:
    """The xdist worker running the all-reduce dies (SIGKILL) while mpirun runs: the session's
    end (whatever ended it) kills what the run started and takes its key back on every node."""
    import psutil

    seconds, _env, inventory, proc = _verify_until_mpirun(tmp_path, ssh_stub)
    try:
        assert _granted(ssh_stub), "the measurement holds no grant"
        mpirun = psutil.Process(fakessh.pids_running(f"sleep {seconds}")[0])
        worker = next(p for p in mpirun.parents()
                      if "python" in p.name() and not any("fakessh" in c for c in p.cmdline()))
        # execnet's bootstrap: the xdist worker, not the controller (their parent).
        assert "exec(eval(" in " ".join(worker.cmdline()), worker.cmdline()
        worker.kill()
        _out, err = proc.communicate(timeout=150)
    finally:
        _stop(proc, seconds)
    assert proc.returncode == 1, err[-3000:]
    _assert_nothing_left(ssh_stub, seconds)
    assert sockets.in_use(tmp_path / "run" / "ssh") is None, "the run's SSH control folder outlived it"
    cleanup = json.loads((tmp_path / "run" / "results.json").read_text())["meta"]["session_cleanup"]
    assert set(cleanup) == {"gpu-1", "gpu-2", "stor-1"} and all("run key removed" in v for v in cleanup.values())
    assert runs.unfinished_runs(inventory) == {}


def test_after_a_sigkilled_controller_the_next_verify_cleans_up(tmp_path: Path, ssh_stub: Path) -> None:
    """The controller and all of the suite die at once (SIGKILL): their grant and mpirun stay on
    the nodes, and the run stays recorded as unfinished; the next verify, under the cluster's
    lock, kills that run's processes and removes its grants on every node before it starts."""
    import psutil

    seconds, env, inventory, proc = _verify_until_mpirun(tmp_path, ssh_stub)
    try:
        session = os.getsid(proc.pid)
        controller = psutil.Process(proc.pid)
        for p in [controller, *controller.children(recursive=True)]:
            with contextlib.suppress(psutil.NoSuchProcess):
                if os.getsid(p.pid) == session:  # not the stand-in nodes' processes (sessions of their own)
                    p.kill()
        proc.wait(timeout=30)
        assert fakessh.pids_running(f"sleep {seconds}") and _granted(ssh_stub), "the SIGKILL left nothing to clean"
        assert list(runs.unfinished_runs(inventory)) != []
        # A grant past its expiry that no record names (a run of a lost controller): the sweep's.
        stale = node_keys.authorized_line("ssh-ed25519", "AAAAC3NzaC1lZDI1NTE5AAAAIStaleStaleStaleStale",
                                          "0123456789ab", "aaaa", "10.77.0.10", "20200101000000")
        (ssh_stub / "nodes" / "stor-1" / ".ssh").mkdir(parents=True, exist_ok=True, mode=0o700)
        with (ssh_stub / "nodes" / "stor-1" / ".ssh" / "authorized_keys").open("a") as fh:
            fh.write(stale + "\n")
        again = _gc(tmp_path, *_verify(tmp_path, inventory, "--workers", "2"), env=env)
        _out, err = again.communicate(timeout=150)
    finally:
        _stop(proc, seconds)
    assert again.returncode == 1, err[-3000:]
    assert "ended without their cleanup; cleaning up after them" in err
    assert re.search(r"^stor-1: run keys of earlier runs swept: 1 line", err, re.M), err[-3000:]
    # The stand-in nodes share this machine: whichever node's kill runs first ends the run's mpirun.
    killed = {m[0]: int(m[1]) for m in re.findall(r"^(\S+): (\d+) process\(es\) of the run killed", err, re.M)}
    assert set(killed) == {"gpu-1", "gpu-2", "stor-1"} and sum(killed.values()) >= 1, err[-3000:]
    assert re.search(r"^gpu-2: \d+ process\(es\) of the run killed; run key removed \(1 line", err, re.M), \
        err[-3000:]
    _assert_nothing_left(ssh_stub, seconds)
    assert runs.unfinished_runs(inventory) == {}


ENOSPC_PLUGIN = textwrap.dedent("""
    # Loaded by every process of the suite (PYTEST_PLUGINS): files of the run folder named in
    # ENOSPC_NAMES (all of them when empty) are /dev/full, whose writes fail with ENOSPC.
    import os
    from gpucluster import runs

    _real = runs.open_for_write
    _names = [n for n in os.environ.get("ENOSPC_NAMES", "").split(",") if n]

    def _opener(path):
        if str(path).startswith(os.environ["ENOSPC_UNDER"]) and (
                not _names or any(n in path.name for n in _names)):
            return os.open("/dev/full", os.O_WRONLY)
        return _real(path)

    runs.open_for_write = _opener
""")


def _full_disk_env(tmp_path: Path, names: str) -> dict[str, str]:
    plugins = tmp_path / "plugins"
    plugins.mkdir(exist_ok=True)
    (plugins / "enospc_plugin.py").write_text(ENOSPC_PLUGIN)
    return {"PYTEST_PLUGINS": "enospc_plugin", "PYTHONPATH": f"{REPO}{os.pathsep}{plugins}",
            "ENOSPC_UNDER": str(tmp_path / "run"), "ENOSPC_NAMES": names}


@pytest.mark.parametrize(("names", "summary"), [
    ("", False),  # full from the start: nothing can be written, not even the probe's record
    ("results.json,junit.xml,summary.md,summary.html,.prom", True),  # full by the time the reports are written
])
def test_a_full_disk_is_one_line_never_a_traceback(tmp_path: Path, ssh_stub: Path, names: str, summary: bool) -> None:
    env = _full_disk_env(tmp_path, names)
    env["PATH"] = os.environ["PATH"]
    proc = _gc(tmp_path, *_verify(tmp_path, _inventory(tmp_path)), env=env)
    out, err = proc.communicate(timeout=150)
    assert proc.returncode == 2, err[-3000:]
    # (The checks themselves fail on this machine, which is no node: their own failures are no concern here.)
    assert "INTERNALERROR" not in out + err and "[Errno 28]" not in out + err, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "cannot write the run folder" in errors[0], errors
    assert "No space left on device (ENOSPC)" in errors[0]
    if summary:
        # The verdicts reached the terminal even though no report could be written.
        assert re.search(r"^gpu-1\s+FAIL", err, re.M), err[-3000:]


def test_verify_report_files_are_private(tmp_path: Path) -> None:
    from gpucluster.conformance.report_data import Report
    from gpucluster.conformance.reports import write_all

    written = write_all(Report(meta={"cluster": "lab"}, nodes=["gpu-1"], results=[]), tmp_path / "run")
    assert all(oct(p.stat().st_mode & 0o777) == "0o600" for p in written.values())


def test_shell_quoting_of_a_tagged_command_keeps_its_meaning() -> None:
    from gpucluster.conformance.remote import tag_command

    cmd = "printf '%s\\n' \"$GPUCLUSTER_RUN\" 'a b' | cat"
    out = subprocess.run(["/bin/sh", "-c", tag_command(cmd, "0a0b0c0d0e0f", "x1")], capture_output=True, text=True,
                         check=True, env=dict(os.environ, SHELL="/bin/sh"))
    assert out.stdout.splitlines() == ["0a0b0c0d0e0f", "a b"]
    assert shlex.quote(cmd) in tag_command(cmd, "0a0b0c0d0e0f", "x1")


def test_two_verifies_in_the_same_second_get_two_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from datetime import UTC, datetime

    from gpucluster import verify

    class Frozen(datetime):
        @classmethod
        def now(cls, tz: Any = None) -> Any:
            return datetime(2025, 1, 1, tzinfo=tz or UTC)

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(verify, "datetime", Frozen, raising=False)
    monkeypatch.setattr(runs, "utc_stamp", lambda: "20250101T000000Z")
    first, second = verify.default_run_dir(), verify.default_run_dir()
    assert first != second and first.is_dir() and second.is_dir()
    assert oct(first.stat().st_mode & 0o777) == "0o700"


def test_nccl_tests_launcher_gets_the_run_key_and_gives_it_back(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    inv = load_inventory(GOLDEN)
    fabric = Fabric(inv, tmp_path, tmp_path / "ssh_config", hostkeys.policy_for(inv.target, inv.cluster_name), "")
    placed: list[str] = []
    monkeypatch.setattr(fabric, "engine", lambda nodes: "nccl-tests")
    monkeypatch.setattr(fabric, "_place_key", lambda launcher, key: placed.append("put") or "/root/.ssh/run-key")
    monkeypatch.setattr(fabric, "_remove_key", lambda launcher, key, path: placed.append(f"removed {path}"))
    made: list[str] = []
    monkeypatch.setattr(fabric_module, "make_folders", lambda remotes, folder: made.append(folder) or [])
    seen: dict[str, Any] = {}

    def fake_inter(launcher: Any, names: tuple[str, ...], *args: Any, ssh_key: str | None = None,
                   folder: str | None = None, **kwargs: Any) -> tuple[AllReduceRun, str]:
        seen["ssh_key"], seen["folder"] = ssh_key, folder
        return AllReduceRun("nccl-tests", "x", names, 16, status="ok"), ""

    monkeypatch.setattr(run_nccl_tests, "run_inter", fake_inter)
    fabric._allreduce([n for n in inv.nodes if n.name in ("gpu-1", "gpu-2")], "inter")
    assert seen["ssh_key"] == "/root/.ssh/run-key"
    # nccl-tests' JSON goes to the measurement's private folder on its nodes, never a fixed name.
    assert made == [seen["folder"]] and str(seen["folder"]).startswith("/var/tmp/gpucluster-")
    assert placed == ["put", "removed /root/.ssh/run-key"]
