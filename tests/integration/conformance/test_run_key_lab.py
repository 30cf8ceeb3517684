"""The run key's line under a real sshd (the shared lab's Debian nodes): usable from the launcher
alone, for Open MPI's daemon alone, until its expiry-time, and gone after the revoke.

The full path (mpirun's ssh through the gate, on every all-reduce) runs in every verify of the
lab (test_verify_lab.py): its all-reduce passes only when the gate started orted on the peer.
"""

from __future__ import annotations

import shlex
import time
from pathlib import Path

import pytest

from gpucluster import hostkeys, runs
from gpucluster.conformance.nodes import load_inventory
from gpucluster.conformance.remote import RunKey, SshRemote, write_ssh_config

pytestmark = pytest.mark.lab


def _login(launcher: SshRemote, key_path: str, peer_ip: str, command: str) -> tuple[int, str]:
    """From ``launcher``, ssh to ``peer_ip`` with the run key (as mpirun's ssh does), asking for ``command``."""
    argv = ["ssh", "-i", key_path, "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
            "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
            peer_ip, command]
    res = launcher.run(" ".join(shlex.quote(a) for a in argv) + " 2>&1", timeout=60)
    return res.rc, res.stdout


def test_the_run_keys_line_holds_under_a_real_sshd(itest_lab, tmp_path: Path) -> None:
    inv = load_inventory(itest_lab.inventory)
    cfg = write_ssh_config(tmp_path / "ssh" / "t" / "ssh_config", list(inv.nodes), shared=tmp_path / "ssh",
                           host_keys=hostkeys.policy_for(inv.target, inv.cluster_name))
    node = {n.name: n for n in inv.nodes}
    remote = {name: SshRemote(name, cfg, run_id="") for name in node}
    run_id = runs.new_run_id()
    key = RunKey.ensure(tmp_path / "key", run_id, "aaaa1111")
    launcher, peer, other = "node-1", "node-2", "node-3"
    placed: dict[str, str | None] = {}
    try:
        assert key.grant(remote[peer], node[launcher].management_ip, 120) is None
        for name in (launcher, other):
            placed[name] = key.place(remote[name], "")
            assert placed[name], f"the key could not be placed on {name}"
        peer_ip = node[peer].management_ip

        rc, out = _login(remote[launcher], placed[launcher] or "", peer_ip, "orted --help")
        assert rc not in (126, 255) and "Start an Open RTE Daemon" in out, out  # orted's --help exits 1

        rc, out = _login(remote[launcher], placed[launcher] or "", peer_ip, "id; cat /etc/shadow")
        assert rc == 126 and "refused" in out and "uid=" not in out, out

        rc, out = _login(remote[other], placed[other] or "", peer_ip, "orted --help")
        assert rc == 255 and "Permission denied" in out, f"a login from {other}, not the launcher: {out}"

        # A grant whose budget has ended: sshd refuses the key itself.
        assert key.grant(remote[peer], node[launcher].management_ip, 1) is None
        time.sleep(3)
        rc, out = _login(remote[launcher], placed[launcher] or "", peer_ip, "orted --help")
        assert rc == 255 and "Permission denied" in out, f"an expired grant still let a login in: {out}"
    finally:
        for name, path in placed.items():
            key.remove(remote[name], path)
        assert key.revoke(remote[peer]) is None
    left = itest_lab.ssh(peer, "grep -c gpucluster-verify-run: ~/.ssh/authorized_keys; ls ~/.ssh")
    assert left.stdout.splitlines()[0] == "0" and "gpucluster-verify-" not in left.stdout, left.stdout
