"""The nodes' base root filesystem: debootstrap once, cache it, key it by what it contains.

The cache directory is named by a hash of the suite, the mirror and the package list (and
the version of the customisation below), so changing any of them builds a new base and
never reuses a stale one. Builds go through the lab's apt proxy, so a rebuild downloads
nothing the proxy already holds. Nodes mount the base read-only as an overlay's lower layer.
"""

from __future__ import annotations

import hashlib
import json
import shutil
import time
from pathlib import Path

from gpucluster.lab.host import LabError, Progress, run

# What a lab node has before Ansible touches it: systemd, sshd and the Python Ansible needs.
DEFAULT_PACKAGES: tuple[str, ...] = (
    "ca-certificates",
    "dbus",
    "iproute2",
    "iputils-ping",
    "less",
    "openssh-server",
    "procps",
    "python3",
    "sudo",
    "systemd-sysv",
)
COMPONENTS = ("main", "contrib", "non-free", "non-free-firmware")
# Bump when the customisation in _customise changes: it is part of the cache key.
LAYOUT_VERSION = 1

SSHD_CONFIG = """\
# gpucluster lab: root logs in with the lab's key only.
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
HostKey /etc/ssh/ssh_host_ed25519_key
UseDNS no
"""


def rootfs_key(suite: str, mirror: str, packages: tuple[str, ...]) -> str:
    doc = {"suite": suite, "mirror": mirror, "packages": sorted(packages), "layout": LAYOUT_VERSION,
           "components": list(COMPONENTS)}
    return hashlib.sha256(json.dumps(doc, sort_keys=True).encode()).hexdigest()[:12]


def security_mirror(mirror: str) -> str | None:
    """Debian's security archive sits beside the main one only on deb.debian.org."""
    if mirror.rstrip("/") in ("http://deb.debian.org/debian", "https://deb.debian.org/debian"):
        return mirror.rstrip("/") + "-security"
    return None


def sources_list(suite: str, mirror: str) -> str:
    comps = " ".join(COMPONENTS)
    lines = [
        "# gpucluster lab: every node fetches through the lab's apt proxy (apt.conf.d/01gpucluster-proxy).",
        f"deb {mirror} {suite} {comps}",
        f"deb {mirror} {suite}-updates {comps}",
    ]
    security = security_mirror(mirror)
    if security:
        lines.append(f"deb {security} {suite}-security {comps}")
    return "\n".join(lines) + "\n"


def marker(rootfs: Path) -> Path:
    return rootfs.with_name(rootfs.name + ".json")


def is_built(rootfs: Path) -> bool:
    return marker(rootfs).is_file() and (rootfs / "usr/lib/systemd/systemd").exists()


def in_use(path: Path) -> bool:
    """Whether any mount on the host (an overlay's lowerdir) refers to ``path``."""
    try:
        text = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return False
    return str(path) in text


def _customise(root: Path, suite: str, mirror: str, proxy_url: str) -> None:
    (root / "etc/apt/sources.list").write_text(sources_list(suite, mirror))
    conf = root / "etc/ssh/sshd_config.d"
    conf.mkdir(parents=True, exist_ok=True)
    (conf / "gpucluster-lab.conf").write_text(SSHD_CONFIG)
    # Each node gets its own host key and machine id; the base must carry none.
    for key in (root / "etc/ssh").glob("ssh_host_*"):
        key.unlink()
    (root / "etc/machine-id").write_text("")
    (root / "var/lib/dbus/machine-id").unlink(missing_ok=True)
    (root / "etc/hostname").unlink(missing_ok=True)
    # Package indexes in the base, so a node can `apt-get install` at once.
    proxy_opt = f"Acquire::http::Proxy={proxy_url}"
    run(["chroot", str(root), "apt-get", "-q", "-o", proxy_opt, "update"], "rootfs: apt-get update", timeout=600)
    run(["chroot", str(root), "apt-get", "clean"], "rootfs: apt-get clean")


def build_rootfs(dest: Path, *, suite: str, mirror: str, packages: tuple[str, ...], proxy_url: str,
                 progress: Progress) -> float:
    """Build a base into ``dest`` (through the proxy); return the seconds it took."""
    started = time.monotonic()
    work = dest.with_name(dest.name + ".building")
    if work.exists():
        shutil.rmtree(work)
    work.parent.mkdir(parents=True, exist_ok=True)
    progress(f"rootfs: debootstrap {suite} into {work} (through the apt proxy {proxy_url})")
    cmd = [
        "debootstrap", "--variant=minbase", f"--include={','.join(sorted(packages))}",
        f"--components={','.join(COMPONENTS)}", suite, str(work), mirror,
    ]
    try:
        run(cmd, "rootfs: debootstrap", timeout=1800, env={"http_proxy": proxy_url, "https_proxy": ""})
        _customise(work, suite, mirror, proxy_url)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    seconds = time.monotonic() - started
    meta = {"suite": suite, "mirror": mirror, "packages": sorted(packages), "layout": LAYOUT_VERSION,
            "build_seconds": round(seconds, 1), "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    if dest.exists():
        shutil.rmtree(dest)
    work.rename(dest)
    marker(dest).write_text(json.dumps(meta, indent=2) + "\n")
    progress(f"rootfs: built in {seconds:.0f} s: {dest}")
    return seconds


def ensure_rootfs(dest: Path, *, suite: str, mirror: str, packages: tuple[str, ...], proxy_url: str,
                  rebuild: bool, progress: Progress) -> bool:
    """Build the cached base unless it is there; return whether it was built. Caller holds the cache lock."""
    if is_built(dest) and not rebuild:
        return False
    if rebuild and dest.exists() and in_use(dest):
        raise LabError(f"rootfs: cannot rebuild {dest}: running lab nodes use it; `gpucluster lab down` them first")
    marker(dest).unlink(missing_ok=True)
    build_rootfs(dest, suite=suite, mirror=mirror, packages=packages, proxy_url=proxy_url, progress=progress)
    return True
