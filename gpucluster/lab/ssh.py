"""The lab's SSH identity: one key pair per lab, host keys known in advance; and the lab's own way
into a node (boot probes, `lab ssh`, a twin check's fault and reboot steps).

A lab reached directly: over the management network, from the host's address there. A twin reached
through a bastion, whose host's own connections to the cluster's networks are refused
(gpucluster.lab.firewall) as a cloud's security groups refuse a controller outside them: the
bastion from the host over the outside network, and a node from the bastion's network namespace
(its leg, its routes), so a boot probe proves the path the controller's ProxyJump takes."""

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
    prefix: list[str] = []
    address = node.management_ip
    if node.outside is not None:
        address = node.outside.address.split("/")[0]
    elif plan.bastion is not None:
        prefix = [which("nsenter") or "nsenter", f"--net={NETNS_DIR / plan.bastion.netns}", "--"]
    return [
        *prefix, "ssh", "-i", str(plan.key_file),
        "-o", "IdentitiesOnly=yes", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
        "-o", f"UserKnownHostsFile={plan.known_hosts}", "-o", "GlobalKnownHostsFile=/dev/null",
        "-o", f"ConnectTimeout={connect_timeout}", "-o", "LogLevel=ERROR",
        "-t" if tty else "-T",
        f"{SSH_USER}@{address}", "--", *command,
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
