"""Operating system and kernel (GC-OS)."""

from __future__ import annotations

import re

import pytest


@pytest.mark.check("GC-OS-001")
def test_os_release(node):
    """The node MUST run Debian with the codename the BOM pins (debian.suite)."""
    want = node.bom["debian"]["suite"]
    text = node.host.file("/etc/os-release").content_string
    fields = dict(line.split("=", 1) for line in text.splitlines() if "=" in line)
    distro = fields.get("ID", "").strip('"')
    codename = fields.get("VERSION_CODENAME", "").strip('"')
    node.figure("os_id", distro)
    node.figure("os_codename", codename)
    assert distro == "debian" and codename == want, f"OS is {distro} {codename}, the BOM pins debian {want}"


@pytest.mark.check("GC-OS-002")
def test_kernel(node):
    """The running kernel MUST be Linux 6.1 or newer with its modules installed under /lib/modules/<release>."""
    release = node.run("uname -r").stdout.strip()
    node.figure("kernel", release)
    m = re.match(r"(\d+)\.(\d+)", release)
    assert m, f"cannot read the kernel release from uname -r: {release!r}"
    assert (int(m.group(1)), int(m.group(2))) >= (6, 1), f"kernel {release} is older than 6.1"
    virt = node.in_container()
    if virt:
        pytest.skip(f"node is a {virt} container: kernel {release} and its modules are the host's")
    assert node.host.file(f"/lib/modules/{release}").is_directory, f"/lib/modules/{release} is missing"
