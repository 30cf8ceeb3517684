"""Host prerequisites and the one way the lab runs a command on the host."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from gpucluster.errors import InputError

# command -> Debian package that provides it
PREREQUISITES: dict[str, str] = {
    "debootstrap": "debootstrap",
    "systemd-nspawn": "systemd-container",
    "apt-cacher-ng": "apt-cacher-ng",
    "ip": "iproute2",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
    "losetup": "mount",
    "mount": "mount",
    "nsenter": "util-linux",
    # The host's table that keeps the controller off the cluster's networks behind a bastion.
    "nft": "nftables",
}

_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

Progress = Callable[[str], None]


class LabError(InputError):
    """The host or a host command stopped the lab: one line saying what and why."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem, source="lab")


def stderr_progress(line: str) -> None:
    print(f"lab: {line}", file=sys.stderr, flush=True)


def quiet(line: str) -> None:
    del line


def which(command: str) -> str | None:
    return shutil.which(command, path=_PATH)


def _last_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    return lines[-1] if lines else "no output"


def run(
    cmd: Sequence[str],
    what: str,
    *,
    check: bool = True,
    timeout: float = 120.0,
    env: dict[str, str] | None = None,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run a host command; on failure raise LabError naming ``what`` and the tool's last line."""
    full_env = {**os.environ, "PATH": _PATH, "LC_ALL": "C", **(env or {})}
    try:
        proc = subprocess.run(
            list(cmd),
            capture_output=True,
            text=True,
            timeout=timeout,
            env=full_env,
            input=input_text,
            stdin=None if input_text is not None else subprocess.DEVNULL,
            check=False,
        )
    except FileNotFoundError:
        raise LabError(f"{what}: command {cmd[0]!r} not found") from None
    except subprocess.TimeoutExpired:
        raise LabError(f"{what}: `{cmd[0]}` did not finish within {timeout:.0f} s") from None
    if check and proc.returncode != 0:
        tool = " ".join(cmd[:3])
        raise LabError(f"{what}: `{tool}` exited {proc.returncode}: {_last_line(proc.stderr or proc.stdout)}")
    return proc


def os_release(path: Path = Path("/etc/os-release")) -> dict[str, str]:
    values: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return values
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip('"')
    return values


def host_problem(euid: int, release: dict[str, str]) -> str | None:
    """Why this host cannot run the lab, or None. Pure, so it is tested without root."""
    missing = []
    if release.get("ID") != "debian":
        name = release.get("PRETTY_NAME") or release.get("ID") or "an unknown OS"
        missing.append(f"a Debian host (this is {name})")
    if euid != 0:
        missing.append("root (run it with sudo)")
    if missing:
        return "the lab needs " + " and ".join(missing)
    return None


# Disk a lab takes on the state folder's file system: a node's overlay once converged with Ceph
# (about 1.3 GiB measured on a lab node of Pulumi.itest.yaml), and the shared rootfs and apt caches
# (about 0.6 GiB). A full disk shows up late and obscurely (an apt install that fails mid-converge),
# so `lab up` refuses at once, naming the figures.
NODE_DISK_GIB = 1.5
CACHE_DISK_GIB = 0.7


def disk_problem(path: Path, free_bytes: int, new_nodes: int, caches_exist: bool) -> str | None:
    """Why ``path`` lacks room for ``new_nodes`` more nodes (and the caches, unless built), or None."""
    need = new_nodes * NODE_DISK_GIB + (0 if caches_exist else CACHE_DISK_GIB)
    free = free_bytes / 2**30
    if need and free < need:
        return (f"{path} has {free:.1f} GiB free; {new_nodes} new node(s) need about {need:.1f} GiB "
                f"({NODE_DISK_GIB} GiB each once converged" + ("" if caches_exist else
                f", {CACHE_DISK_GIB} GiB for the rootfs and apt caches") + "): free some space or set "
                "the spec's target.state_dir to a larger file system")
    return None


def free_bytes(path: Path) -> int:
    """Free bytes (for root) on the file system that holds ``path`` or its nearest existing parent."""
    probe = path
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return shutil.disk_usage(probe).free


# Each booted node's systemd takes several inotify instances; Linux allows 128 per user by
# default, which runs out at about nine nodes ("Failed to allocate manager object").
SYSCTL_FLOORS: dict[str, int] = {
    "fs.inotify.max_user_instances": 8192,
    "fs.inotify.max_user_watches": 524288,
}


def ensure_sysctls(progress: Progress) -> None:
    """Raise kernel limits the lab needs to at least their floors (never lowers them)."""
    for key, floor in SYSCTL_FLOORS.items():
        path = Path("/proc/sys") / key.replace(".", "/")
        try:
            current = int(path.read_text().split()[0])
        except (OSError, ValueError, IndexError):
            continue
        if current < floor:
            try:
                path.write_text(str(floor))
            except OSError as exc:
                raise LabError(f"cannot raise {key} from {current} to {floor}: {exc}") from None
            progress(f"raised {key} from {current} to {floor} (many nodes need it)")


def missing_packages() -> list[str]:
    return sorted({pkg for cmd, pkg in PREREQUISITES.items() if which(cmd) is None})


def ensure_host(progress: Progress) -> None:
    """Check root and Debian, then install whatever prerequisite is missing (once)."""
    problem = host_problem(os.geteuid(), os_release())
    if problem:
        raise LabError(problem)
    ensure_sysctls(progress)
    packages = missing_packages()
    if not packages:
        quiet_system_proxy(progress, installed=False)
        return
    progress(f"installing host prerequisites: {' '.join(packages)}")
    env = {"DEBIAN_FRONTEND": "noninteractive"}
    # Debian starts a daemon on install; the lab runs its own apt-cacher-ng per lab on the
    # bridge address, so a system-wide one listening on every address must not start.
    policy = Path("/usr/sbin/policy-rc.d")
    made_policy = False
    if not policy.exists():
        policy.write_text("#!/bin/sh\n# written by gpucluster lab during its install; removed after\nexit 101\n")
        policy.chmod(0o755)
        made_policy = True
    try:
        install = ["apt-get", "install", "-y", "-q", "--no-install-recommends", *packages]
        if run(install, "installing host prerequisites", check=False, timeout=900, env=env).returncode != 0:
            run(["apt-get", "update", "-q"], "apt-get update", timeout=600, env=env)
            run(install, "installing host prerequisites", timeout=900, env=env)
    finally:
        if made_policy:
            policy.unlink(missing_ok=True)
    still = missing_packages()
    if still:
        raise LabError(f"host prerequisites still missing after install: {' '.join(still)}")
    quiet_system_proxy(progress, installed=PREREQUISITES["apt-cacher-ng"] in packages)


# Debian's apt-cacher-ng package enables a system-wide service that, once started (at the next
# boot), listens on port 3142 on every address and proxies for anyone who reaches it. The lab
# runs its own per lab, bound to its bridge address (gpucluster/lab/proxy.py), and needs no other.
SYSTEM_PROXY_UNIT = "apt-cacher-ng.service"


def quiet_system_proxy(progress: Progress, *, installed: bool) -> None:
    """Disable the system-wide apt-cacher-ng service where the lab ``installed`` the package;
    where it was there before, say that it is enabled and that the lab does not need it."""
    systemctl = which("systemctl")
    if systemctl is None:
        return
    state = run([systemctl, "is-enabled", SYSTEM_PROXY_UNIT], "systemctl is-enabled", check=False).stdout.strip()
    if state != "enabled":
        return
    if not installed:
        progress(f"warning: {SYSTEM_PROXY_UNIT} is enabled: at the next boot it listens on every address. "
                 f"The lab runs its own proxy and does not need it: `systemctl disable --now {SYSTEM_PROXY_UNIT}` "
                 "unless something else does")
        return
    if run([systemctl, "disable", SYSTEM_PROXY_UNIT], "systemctl disable", check=False).returncode != 0:
        progress(f"warning: could not disable {SYSTEM_PROXY_UNIT}, which listens on every address once started")
        return
    # Stopped too where one runs (policy-rc.d kept the install from starting it; an older lab did not).
    run([systemctl, "stop", SYSTEM_PROXY_UNIT], "systemctl stop", check=False)
    progress(f"disabled Debian's system-wide {SYSTEM_PROXY_UNIT} (the lab runs its own on its bridge address)")
