"""Operating system and kernel (GC-OS)."""

from __future__ import annotations

import re

import pytest

# The kernel series each OS release ships (its GA kernel; HWE and cloud kernels are newer):
# Ubuntu 22.04 5.15 (https://ubuntu.com/about/release-cycle#ubuntu-kernel-release-cycle),
# Ubuntu 24.04 6.8 (same page), Debian 12 6.1 (https://www.debian.org/releases/bookworm/releasenotes).
KERNEL_FLOORS = {"ubuntu-22.04": (5, 15), "ubuntu-24.04": (6, 8), "debian-12": (6, 1)}


@pytest.mark.check("GC-OS-001")
def test_os_release(node):
    """The node MUST run the OS release the spec declares for it (gpucluster_os, as the BOM's os table names it)."""
    declared = node.info.os
    if not declared:
        pytest.fail("the inventory gives this node no gpucluster_os: regenerate it with `gpucluster inventory`")
    runs = node.info.capabilities.runs_os
    if runs and runs != declared:
        pytest.skip(f"the target states its nodes run {runs} where the spec declares {declared} "
                    "(capabilities.runs_os: a platform twin on the lab's Debian): the spec's OS is not modelled")
    want = node.bom.os[declared]
    text = node.host.file("/etc/os-release").content_string
    fields = {k: v.strip().strip('"') for k, v in (line.split("=", 1) for line in text.splitlines() if "=" in line)}
    found = (fields.get("ID", ""), fields.get("VERSION_ID", ""), fields.get("VERSION_CODENAME", ""))
    node.figure("os_id", found[0])
    node.figure("os_version_id", found[1])
    node.figure("os_codename", found[2])
    node.figure("os_declared", declared)
    expected = (want.id, want.version_id, want.codename)
    assert found == expected, (f"OS is {' '.join(found)}, the spec declares {declared} "
                               f"({' '.join(expected)})")


@pytest.mark.check("GC-OS-002")
def test_kernel(node):
    """The kernel MUST be the declared OS's series or newer, with its modules under /lib/modules/<release>."""
    declared = node.info.os
    if declared not in KERNEL_FLOORS:
        pytest.fail(f"the inventory's gpucluster_os {declared!r} is not one of {sorted(KERNEL_FLOORS)}")
    floor = KERNEL_FLOORS[declared]
    release = node.run("uname -r").stdout.strip()
    node.figure("kernel", release)
    m = re.match(r"(\d+)\.(\d+)", release)
    assert m, f"cannot read the kernel release from uname -r: {release!r}"
    assert (int(m.group(1)), int(m.group(2))) >= floor, (
        f"kernel {release} is older than {floor[0]}.{floor[1]}, the series {declared} ships")
    virt = node.in_container()
    if virt:
        pytest.skip(f"node is a {virt} container: kernel {release} and its modules are the host's")
    assert node.host.file(f"/lib/modules/{release}").is_directory, f"/lib/modules/{release} is missing"
