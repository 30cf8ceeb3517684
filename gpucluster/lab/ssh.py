"""The lab's SSH identity: one key pair per lab, host keys known in advance; and the lab's own way
into a node, which is a provider's console's, not the controller's.

`gpucluster lab` (boot probes, `lab ssh`, a twin check's fault and reboot steps) reaches a node from
inside the node's own network namespace, over its loopback, never over the management network:
where the stack is reached through a bastion, the host's connections to the cluster's networks are
refused (gpucluster.lab.firewall), as a cloud's security groups refuse a controller outside them,
and the controller's path (converge, verify) is the bastion alone."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Sequence

from gpucluster.lab.host import run, which
from gpucluster.lab.layout import SSH_USER, LabLayout, NodeLayout
from gpucluster.lab.network import NETNS_DIR
from gpucluster.lab.state import atomic_write


def ensure_lab_key(plan: LabLayout) -> bool:
    key = plan.key_file
    if key.exists() and key.with_suffix(".pub").exists():
        os.chmod(key, 0o600)
        return False
    key.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(key.parent, 0o700)
    key.unlink(missing_ok=True)
    key.with_suffix(".pub").unlink(missing_ok=True)
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"gpucluster-lab-{plan.name}", "-f", str(key)],
        "lab ssh key")
    os.chmod(key, 0o600)
    return True


def public_key(plan: LabLayout) -> str:
    return plan.key_file.with_suffix(".pub").read_text().strip()


def known_hosts_text(plan: LabLayout, host_keys: dict[str, str]) -> str:
    lines = []
    for node in plan.machines:
        if node.name in host_keys:
            # "ssh-ed25519 AAAA... comment" -> keep type and key
            kind, key = host_keys[node.name].split()[:2]
            names = [node.name, node.management_ip, node.fabric_ip]
            if node.outside is not None:
                names.append(node.outside.address.split("/")[0])
            lines.append(f"{','.join(n for n in names if n)} {kind} {key}")
    return "\n".join(lines) + "\n"


def write_known_hosts(plan: LabLayout, host_keys: dict[str, str]) -> bool:
    return atomic_write(plan.known_hosts, known_hosts_text(plan, host_keys))


def ssh_argv(plan: LabLayout, node: NodeLayout, command: Sequence[str], *, connect_timeout: int = 5,
             tty: bool = False) -> list[str]:
    nsenter = which("nsenter") or "nsenter"
    return [
        nsenter, f"--net={NETNS_DIR / node.netns}", "--",
        "ssh", "-i", str(plan.key_file),
        "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={plan.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", f"ConnectTimeout={connect_timeout}", "-o", "LogLevel=ERROR",
        "-t" if tty else "-T",
        f"{SSH_USER}@{node.management_ip}", "--", *command,
    ]


def ssh_run(plan: LabLayout, node: NodeLayout, command: Sequence[str], *, timeout: float = 30,
            connect_timeout: int = 5) -> subprocess.CompletedProcess[str]:
    """Run a command on a node; a timeout reads as exit status 255 (unreachable)."""
    argv = ssh_argv(plan, node, command, connect_timeout=connect_timeout)
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                              check=False)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(argv, 255, "", f"ssh: no answer within {timeout:.0f} s")
