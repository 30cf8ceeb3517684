"""The lab's apt caching proxy: apt-cacher-ng on the management bridge address.

Every node's apt and the rootfs build go through it, so packages are fetched from the
Debian mirror once. It is the only lab process that talks to the mirror.

It runs as Debian's ``apt-cacher-ng`` system user (the package makes it), never as root: it
parses what the mirror and the nodes send. Its configuration is root's (0644, in a 0755 folder
outside the lab's 0700 folder, so the user can read it and not change it); its cache, log and
pid folders are the user's.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import time
from pathlib import Path

from gpucluster.lab import process
from gpucluster.lab.host import LabError, which
from gpucluster.lab.layout import LabLayout
from gpucluster.lab.state import atomic_write

EXECUTABLE = "apt-cacher-ng"
USER = "apt-cacher-ng"


def conf_dir(plan: LabLayout) -> Path:
    return plan.cache_dir / "acng" / plan.name


def log_dir(plan: LabLayout) -> Path:
    return conf_dir(plan) / "log"


def _legacy_conf_dir(plan: LabLayout) -> Path:
    # Where a proxy started by an earlier gpucluster (as root) keeps its configuration.
    return plan.lab_dir / "proxy"


def proxy_user() -> tuple[int, int]:
    """(uid, gid) of the account the proxy runs as."""
    try:
        entry = pwd.getpwnam(USER)
    except KeyError:
        raise LabError(f"no {USER!r} user on this host: the lab's apt proxy runs as it (Debian's apt-cacher-ng "
                       "package makes it; scripts/setup-host.sh installs the package)") from None
    return entry.pw_uid, entry.pw_gid


def _own(path: Path, uid: int, gid: int) -> None:
    """``path`` and everything under it owned by the proxy's account (a cache an earlier root proxy
    filled included); never through a link."""
    path.mkdir(parents=True, exist_ok=True)
    st = path.lstat()
    if st.st_uid == uid and st.st_gid == gid:
        return
    os.chown(path, uid, gid, follow_symlinks=False)
    for root, dirs, files in os.walk(path):
        for name in dirs + files:
            os.chown(os.path.join(root, name), uid, gid, follow_symlinks=False)


def render_config(plan: LabLayout) -> dict[str, str]:
    """The files of the proxy's configuration directory, by name."""
    log_dir = conf_dir(plan) / "log"
    acng = "\n".join(
        [
            f"# gpucluster lab {plan.name!r}: written by `gpucluster lab up`; do not edit.",
            f"CacheDir: {plan.apt_cache_dir}",
            f"LogDir: {log_dir}",
            "SupportDir: /usr/lib/apt-cacher-ng",
            f"Port: {plan.proxy_port}",
            f"BindAddress: {plan.management_host_ip}",
            # Requests for any known Debian mirror are served from the one this lab names
            # (without a backend, apt-cacher-ng answers 503).
            "Remap-debrep: file:deb_mirror*.gz /debian ; file:backends_debian",
            "Remap-secdeb: security.debian.org security.debian.org/debian-security "
            "deb.debian.org/debian-security /debian-security ; deb.debian.org/debian-security",
            f"PidFile: {conf_dir(plan) / 'run' / 'pid'}",
            "ExThreshold: 4",
            "ReportPage: acng-report.html",
            "",
        ]
    )
    return {"acng.conf": acng, "backends_debian": plan.mirror + "/\n"}


def pids(plan: LabLayout) -> list[int]:
    return sorted(set(process.find(EXECUTABLE, str(conf_dir(plan))))
                  | set(process.find(EXECUTABLE, str(_legacy_conf_dir(plan)))))


def _listening(plan: LabLayout) -> bool:
    try:
        with socket.create_connection((plan.management_host_ip, plan.proxy_port), timeout=1):
            return True
    except OSError:
        return False


def ensure_proxy(plan: LabLayout) -> bool:
    """Start the proxy unless it runs with this configuration; return whether it changed."""
    uid, gid = proxy_user()
    conf_dir(plan).mkdir(parents=True, exist_ok=True, mode=0o755)
    changed = False
    for name, text in render_config(plan).items():
        changed = atomic_write(conf_dir(plan) / name, text) or changed
    for writable in (log_dir(plan), conf_dir(plan) / "run", plan.apt_cache_dir):
        _own(writable, uid, gid)
    running = pids(plan)
    # A proxy an earlier gpucluster started as root, from the lab's own folder: replaced.
    changed = changed or bool(process.find(EXECUTABLE, str(_legacy_conf_dir(plan))))
    if running and not changed and _listening(plan):
        return False
    if running:
        process.stop(running, grace_s=5)
    exe = which(EXECUTABLE)
    if exe is None:
        raise LabError("apt-cacher-ng is not installed")
    process.spawn([exe, "-c", str(conf_dir(plan)), "ForeGround=1"], log_dir(plan) / "console.log", user=(uid, gid))
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if _listening(plan):
            return True
        if not pids(plan):
            break
        time.sleep(0.1)
    raise LabError(
        f"apt proxy did not start on {plan.management_host_ip}:{plan.proxy_port}; "
        f"see {log_dir(plan) / 'console.log'}"
    )


def stop_proxy(plan: LabLayout) -> bool:
    """Stop the lab's proxy and remove its configuration and logs (its cache stays, for the next build)."""
    running = pids(plan)
    if running:
        process.stop(running, grace_s=5)
    shutil.rmtree(conf_dir(plan), ignore_errors=True)
    return bool(running)
