"""One lab node: an overlay on the cached base, its own files, data disks and the nspawn process."""

from __future__ import annotations

import json
import os
import re
import shlex
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from gpucluster.files import write_whole
from gpucluster.lab import confined, process
from gpucluster.lab.host import LabError, run, which
from gpucluster.lab.layout import LabLayout, NodeLayout
from gpucluster.lab.network import NETNS_DIR
from gpucluster.lab.ssh import ssh_run

EXECUTABLE = "systemd-nspawn"
_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\r")


def root_dir(plan: LabLayout, node: NodeLayout) -> Path:
    return plan.node_dir(node.name) / "root"


def boot_log(plan: LabLayout, node: NodeLayout) -> Path:
    return plan.node_dir(node.name) / "boot.log"


def disk_files(plan: LabLayout, node: NodeLayout) -> list[Path]:
    return [plan.node_dir(node.name) / f"disk-{i}.img" for i in range(node.data_disks)]


def mounts_under(path: Path) -> list[str]:
    """Mount points at or below ``path``, deepest first (the order to unmount them)."""
    points = []
    prefix = str(path)
    for line in Path("/proc/self/mountinfo").read_text().splitlines():
        point = line.split()[4].replace("\\040", " ")
        if point == prefix or point.startswith(prefix + "/"):
            points.append(point)
    return sorted(points, key=len, reverse=True)


def is_mounted(path: Path) -> bool:
    return str(path) in mounts_under(path)


def ensure_overlay(plan: LabLayout, node: NodeLayout) -> bool:
    root = root_dir(plan, node)
    if is_mounted(root):
        return False
    base = plan.node_dir(node.name)
    for sub in ("upper", "work", "root"):
        (base / sub).mkdir(parents=True, exist_ok=True)
    opts = f"lowerdir={plan.rootfs_dir},upperdir={base / 'upper'},workdir={base / 'work'}"
    run(["mount", "-t", "overlay", "overlay", "-o", opts, str(root)], f"{node.name}: overlay mount")
    return True


def hosts_text(plan: LabLayout) -> str:
    lines = ["# gpucluster lab: every node on the management and the fabric network.",
             "127.0.0.1\tlocalhost", "::1\tlocalhost ip6-localhost ip6-loopback", ""]
    lines += [f"{n.management_ip}\t{n.name}" for n in plan.nodes]
    lines += [f"{n.fabric_ip}\t{n.name}-fabric" for n in plan.nodes]
    return "\n".join(lines) + "\n"


def _write(root: Path, rel: str, text: str, mode: int = 0o644) -> bool:
    """Make ``rel`` inside the node's ``root`` hold ``text`` with ``mode``; False when it did.
    Inside the root whatever links the node planted (:mod:`gpucluster.lab.confined`)."""
    return confined.write(root, rel, text.encode("utf-8"), mode)


# What a converge manages carries this (playbooks/group_vars/all.yml's ansible_managed).
_CONVERGE_MARK = "Managed by gpucluster (Ansible)"
# ... or, in a file the roles edit a block of, the block's opening marker (the common role's
# /etc/hosts block: roles/common/tasks/hosts.yml, "# {mark} gpucluster <cluster>").
_CONVERGE_BLOCK_MARK = "# BEGIN gpucluster "


def _seed(root: Path, rel: str, text: str, mode: int = 0o644) -> bool:
    """Write a file the node's converge takes over later: once it carries the converge's
    mark, the lab leaves it alone, so `lab up` and `gpucluster converge` never undo each
    other and a rerun of either changes nothing."""
    current = confined.read_text(root, rel)
    if current is not None and (_CONVERGE_MARK in current or _CONVERGE_BLOCK_MARK in current):
        return False
    return _write(root, rel, text, mode)


def ensure_files(plan: LabLayout, node: NodeLayout, authorized_key: str, disks: list[str],
                 kept_host_key: Path | None = None) -> tuple[bool, str]:
    """Write the node's identity and configuration into its overlay; return (changed, host public key).
    Every path is resolved inside the node's root: a link the node planted never leads out of it.
    ``kept_host_key``: a folder the machine's host key outlives the lab in (a site's bastion)."""
    root = root_dir(plan, node)
    changed = False
    changed |= _write(root, "etc/hostname", node.name + "\n")
    changed |= _seed(root, "etc/hosts", hosts_text(plan))
    if not (confined.read_text(root, "etc/machine-id") or "").strip():
        changed |= _write(root, "etc/machine-id", uuid.uuid4().hex + "\n", 0o444)
    confined.make_dir(root, "root/.ssh", 0o700)
    changed |= _write(root, "root/.ssh/authorized_keys", authorized_key + "\n", 0o600)
    host_key = "etc/ssh/ssh_host_ed25519_key"
    if not confined.exists(root, host_key) or not confined.exists(root, host_key + ".pub"):
        if kept_host_key is not None and (kept_host_key / "key").is_file() and (kept_host_key / "key.pub").is_file():
            confined.write(root, host_key, (kept_host_key / "key").read_bytes(), 0o600)
            confined.write(root, host_key + ".pub", (kept_host_key / "key.pub").read_bytes(), 0o644)
        else:
            _new_host_key(root, host_key, node.name)
        changed = True
    if kept_host_key is not None and not (kept_host_key / "key").is_file():
        _keep_host_key(root, host_key, kept_host_key)
    apt_proxy = (f'// gpucluster lab: apt goes through the proxy on the management bridge.\n'
                 f'Acquire::http::Proxy "{plan.proxy_url}";\n'
                 # A fetch the proxy could not complete (a mirror's hiccup on a cold cache) is tried again.
                 'Acquire::Retries "3";\n')
    if plan.node_apt_proxy:
        changed |= _write(root, "etc/apt/apt.conf.d/01gpucluster-proxy", apt_proxy)
    else:
        changed |= confined.remove(root, "etc/apt/apt.conf.d/01gpucluster-proxy")
    # No DNS server is reachable from a node: names come from /etc/hosts, apt goes through the proxy.
    changed |= _write(root, "etc/resolv.conf", "# gpucluster lab: no DNS; names are in /etc/hosts.\n")
    changed |= _write(root, "etc/gpucluster/data-disks.json", json.dumps(disks) + "\n")
    for f in node.files:
        changed |= _write(root, f.path.lstrip("/"), f.content, f.mode)
    public = confined.read_text(root, host_key + ".pub")
    if public is None:
        raise LabError(f"{node.name}: {host_key}.pub is not a file")
    return changed, public.strip()


def _keep_host_key(root: Path, rel: str, folder: Path) -> None:
    """A copy of the machine's host key pair in ``folder`` (root's alone), which `down` leaves."""
    private, public = confined.read_text(root, rel), confined.read_text(root, rel + ".pub")
    if private is None or public is None:
        raise LabError(f"{rel} is not a file")
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    os.chmod(folder, 0o700)
    write_whole(folder / "key.pub", public, mode=0o644)
    write_whole(folder / "key", private, mode=0o600)


def _new_host_key(root: Path, rel: str, name: str) -> None:
    """An ed25519 host key made on the host, in a folder of its own, then put inside the node."""
    with tempfile.TemporaryDirectory(prefix="gpucluster-hostkey-") as tmp:
        key = Path(tmp) / "key"
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"root@{name}", "-f", str(key)],
            f"{name}: ssh host key")
        confined.write(root, rel, key.read_bytes(), 0o600)
        confined.write(root, rel + ".pub", key.with_suffix(".pub").read_bytes(), 0o644)


def _loops_for(file: Path) -> list[str]:
    out = run(["losetup", "-j", str(file)], "losetup", check=False).stdout
    return [line.split(":", 1)[0] for line in out.splitlines() if line.strip()]


def ensure_disks(plan: LabLayout, node: NodeLayout) -> tuple[bool, list[str]]:
    """Sparse files of the spec's size, each on a loop device; return (changed, devices)."""
    changed = False
    devices = []
    for file in disk_files(plan, node):
        size = node.data_disk_gb * 1024**3
        if not file.exists():
            file.parent.mkdir(parents=True, exist_ok=True)
            with open(file, "wb") as fh:
                fh.truncate(size)
            changed = True
        loops = _loops_for(file)
        if not loops:
            loops = [run(["losetup", "--find", "--show", str(file)], f"{node.name}: loop device").stdout.strip()]
            changed = True
        devices.append(loops[0])
    return changed, devices


def pids(plan: LabLayout, node: NodeLayout) -> list[int]:
    return process.find(EXECUTABLE, str(root_dir(plan, node)))


def start(plan: LabLayout, node: NodeLayout, disks: list[str]) -> int:
    exe = which(EXECUTABLE)
    if exe is None:
        raise LabError("systemd-nspawn is not installed (Debian package systemd-container)")
    # nsenter as well as --network-namespace-path: nspawn mounts the node's /sys while still in
    # the namespace it started in, so without it /sys/class/net would list the host's links.
    # (Not `ip netns exec`: it remounts /sys without the cgroup mounts nspawn needs.)
    nsenter = which("nsenter") or "nsenter"
    netns_path = NETNS_DIR / node.netns
    cmd = [
        nsenter, f"--net={netns_path}", "--",
        exe, "--boot", f"--directory={root_dir(plan, node)}", f"--machine={node.name}",
        f"--hostname={node.name}", f"--network-namespace-path={netns_path}",
        "--register=no", "--keep-unit", "--resolv-conf=off", "--timezone=off", "--link-journal=no",
        "--console=read-only",
        # The node owns its network namespace, as a real node owns its NICs: with
        # CAP_NET_ADMIN it loads its nftables firewall, sets MTUs and tc qdiscs itself.
        "--capability=CAP_NET_ADMIN",
        *[f"--bind={dev}" for dev in disks],
    ]
    log = boot_log(plan, node)
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "a") as fh:
        fh.write(f"\n--- gpucluster lab: booting {node.name} at {time.strftime('%Y-%m-%d %H:%M:%S')} ---\n")
    # The node's /proc/sys/net is its own network namespace's: writable, as on a real node, so that
    # its roles set per-interface settings (the rails' ARP and reverse-path filters). The rest of
    # /proc/sys stays read-only. nspawn reads this variable ("network": only /proc/sys/net writable;
    # systemd's docs/ENVIRONMENT.md, $SYSTEMD_NSPAWN_API_VFS_WRITABLE).
    return process.spawn(cmd, log, env={"SYSTEMD_NSPAWN_API_VFS_WRITABLE": "network"})


def log_tail(plan: LabLayout, node: NodeLayout, lines: int = 15) -> str:
    try:
        text = boot_log(plan, node).read_text(errors="replace")
    except OSError:
        return "(no boot log)"
    kept = [_ANSI.sub("", ln).rstrip() for ln in text.splitlines()]
    kept = [ln for ln in kept if ln.strip()]
    return "\n".join(kept[-lines:])


@dataclass(frozen=True)
class Readiness:
    ok: bool
    system_state: str  # running, degraded, ... or why it is not up
    failed_units: tuple[str, ...] = ()
    # Units started again because systemd could not spawn their process (see _PROBE_SCRIPT).
    respawned: tuple[str, ...] = ()


# This host's cgroup v1 emulation now and then refuses a container's systemd the cgroup of a unit it
# starts ("Failed at step CGROUP spawning ...", status 219/CGROUP): at boot a oneshot unit (the
# firewall's, a twin's image boot service) then fails without having run at all, which a real
# node's kernel never does. A unit whose last run ended with status 219 is started once more, and
# said so; every other failed unit is left as it is and reported. `systemctl show` prints an Exec*
# command's last run as `{ path=... ; pid=280 ; code=exited ; status=219 }` (a /NAME follows the
# number only for a signal), the main process's as ExecMainStatus=219.
_PROBE_SCRIPT = (
    "state=$(systemctl is-system-running --wait); "
    "if [ \"$1\" = respawn ]; then "
    "for u in $(systemctl list-units --state=failed --plain --no-legend | awk '{print $1}'); do "
    "if systemctl show -p ExecMainStatus -p ExecStartPre -p ExecStart -p ExecStartPost \"$u\" "
    "| grep -Eq '(^ExecMainStatus=219$|code=exited ; status=219 )'; then "
    "systemctl reset-failed \"$u\"; systemctl restart \"$u\" && echo \"respawned $u\"; fi; done; "
    "state=$(systemctl is-system-running); fi; "
    "echo \"state $state\"; "
    "systemctl list-units --state=failed --plain --no-legend | awk '{print \"failed \" $1}'"
)


def parse_probe(stdout: str) -> Readiness:
    """The probe's answer: ``state S``, then ``respawned U`` and ``failed U`` lines."""
    state, failed, respawned = "unknown", [], []
    for line in stdout.splitlines():
        tag, _, value = line.strip().partition(" ")
        if tag == "state" and value:
            state = value.strip()
        elif tag == "failed" and value:
            failed.append(value.strip())
        elif tag == "respawned" and value:
            respawned.append(value.strip())
    return Readiness(state in ("running", "degraded"), state, tuple(failed), tuple(respawned))


def probe(plan: LabLayout, node: NodeLayout, *, timeout: float = 10, respawn: bool = False) -> Readiness:
    """Ask the node over SSH whether it booted: is-system-running plus any failed units. With
    ``respawn``, units systemd could not spawn (status 219/CGROUP, a fault of this host) are
    started once more first."""
    script = f"sh -c {shlex.quote(_PROBE_SCRIPT)} probe {'respawn' if respawn else 'look'}"
    proc = ssh_run(plan, node, [script], timeout=timeout, connect_timeout=2)
    if proc.returncode == 255:
        return Readiness(False, "unreachable: " + (proc.stderr.strip().splitlines() or ["ssh failed"])[-1])
    return parse_probe(proc.stdout)


def wait_ready(plan: LabLayout, node: NodeLayout, pid: int, deadline: float, cancel: threading.Event) -> Readiness:
    """Wait until the node started as ``pid`` answers over SSH.

    Liveness is read from the PID ``start`` returned, not by matching command lines: the
    process is nsenter until it executes systemd-nspawn, and on a loaded host that takes long
    enough for a name search to find nothing and call a booting node dead.
    """
    last = Readiness(False, "not answering yet")
    while not cancel.is_set():
        if not process.alive(pid):
            process.wait_reaped(pid, timeout=2)
            return Readiness(False, "its container exited during boot (the boot log ends with how)")
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return Readiness(False, f"not up within {plan.boot_timeout_s} s ({last.system_state})")
        last = probe(plan, node, timeout=max(1.0, remaining), respawn=True)
        if last.ok:
            return last
        if last.system_state.startswith("unreachable"):
            time.sleep(0.3)
        else:
            # systemd answered but not running/degraded (e.g. stopping, maintenance): that is final.
            return last
    return Readiness(False, "interrupted")


def stop(plan: LabLayout, node: NodeLayout) -> bool:
    running = pids(plan, node)
    if running:
        # SIGTERM asks nspawn to power the container off cleanly.
        process.stop(running, grace_s=20)
    return bool(running)


def teardown(plan: LabLayout, node: NodeLayout) -> bool:
    """Stop the node and remove its mounts and loop devices (its files go with the lab directory)."""
    changed = stop(plan, node)
    for point in mounts_under(plan.node_dir(node.name)):
        if run(["umount", point], f"{node.name}: umount", check=False).returncode != 0:
            run(["umount", "-l", point], f"{node.name}: umount {point}")
        changed = True
    for file in disk_files(plan, node):
        for loop in _loops_for(file):
            run(["losetup", "-d", loop], f"{node.name}: detach {loop}")
            changed = True
    return changed


def loops_under(path: Path) -> list[str]:
    """Loop devices backed by files below ``path`` (a safety net for down)."""
    proc = run(["losetup", "-J", "-l"], "losetup", check=False)
    if proc.returncode != 0 or not proc.stdout.strip():
        return []
    devices = json.loads(proc.stdout).get("loopdevices", [])
    prefix = str(path) + "/"
    return [d["name"] for d in devices if str(d.get("back-file") or "").startswith(prefix)]

