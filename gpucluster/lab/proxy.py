"""The lab's apt caching proxy: apt-cacher-ng on the management bridge address.

Every node's apt and the rootfs build go through it, so packages are fetched from the
Debian mirror once. It is the only lab process that talks to the mirror.
"""

from __future__ import annotations

import socket
import time
from pathlib import Path

from gpucluster.lab import process
from gpucluster.lab.host import LabError, which
from gpucluster.lab.layout import LabLayout
from gpucluster.lab.state import atomic_write

EXECUTABLE = "apt-cacher-ng"


def conf_dir(plan: LabLayout) -> Path:
    return plan.lab_dir / "proxy"


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
            f"PidFile: {conf_dir(plan) / 'pid'}",
            "ExThreshold: 4",
            "ReportPage: acng-report.html",
            "",
        ]
    )
    return {"acng.conf": acng, "backends_debian": plan.mirror + "/\n"}


def pids(plan: LabLayout) -> list[int]:
    return process.find(EXECUTABLE, str(conf_dir(plan)))


def _listening(plan: LabLayout) -> bool:
    try:
        with socket.create_connection((plan.management_host_ip, plan.proxy_port), timeout=1):
            return True
    except OSError:
        return False


def ensure_proxy(plan: LabLayout) -> bool:
    """Start the proxy unless it runs with this configuration; return whether it changed."""
    changed = False
    for name, text in render_config(plan).items():
        changed = atomic_write(conf_dir(plan) / name, text) or changed
    (conf_dir(plan) / "log").mkdir(parents=True, exist_ok=True)
    plan.apt_cache_dir.mkdir(parents=True, exist_ok=True)
    running = pids(plan)
    if running and not changed and _listening(plan):
        return False
    if running:
        process.stop(running, grace_s=5)
    exe = which(EXECUTABLE)
    if exe is None:
        raise LabError("apt-cacher-ng is not installed")
    process.spawn([exe, "-c", str(conf_dir(plan)), "ForeGround=1"], conf_dir(plan) / "log" / "console.log")
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if _listening(plan):
            return True
        if not pids(plan):
            break
        time.sleep(0.1)
    raise LabError(
        f"apt proxy did not start on {plan.management_host_ip}:{plan.proxy_port}; "
        f"see {conf_dir(plan) / 'log' / 'console.log'}"
    )


def stop_proxy(plan: LabLayout) -> bool:
    running = pids(plan)
    if running:
        process.stop(running, grace_s=5)
    return bool(running)
