"""`lab up` writes into a node's root; links the node planted there never lead it outside."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import stat
from pathlib import Path

import pytest

from gpucluster.lab import confined, node
from gpucluster.lab.layout import LabLayout, NodeFile, layout_lab
from gpucluster.spec import load_spec

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]


def _tree(path: Path) -> dict[str, str]:
    """Every entry under ``path`` with what it holds: what a test checks stays untouched."""
    out = {}
    for p in sorted(path.rglob("*")):
        if p.is_symlink():
            out[str(p)] = "-> " + os.readlink(p)
        elif p.is_file():
            out[str(p)] = f"{stat.S_IMODE(p.stat().st_mode):o} " + hashlib.sha256(p.read_bytes()).hexdigest()
        else:
            out[str(p)] = "dir"
    return out


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """Files of "the host" a node's links point at."""
    outside = tmp_path / "host"
    (outside / "etc" / "apt" / "apt.conf.d").mkdir(parents=True)
    (outside / "etc" / "hosts").write_text("127.0.0.1 the-host\n")
    (outside / "etc" / "hostname").write_text("the-host\n")
    (outside / "dot-ssh").mkdir(mode=0o700)
    (outside / "dot-ssh" / "authorized_keys").write_text("ssh-ed25519 AAAA operator@host\n")
    return outside


def test_a_link_on_the_way_is_resolved_inside_the_root(tmp_path: Path, host: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "etc").symlink_to(host / "etc")  # absolute: the node's own /<...>/host/etc
    before = _tree(host)
    assert confined.write(root, "etc/hosts", b"10.0.0.10 gpu-1\n") is True
    assert _tree(host) == before
    inside = root / str(host / "etc" / "hosts").lstrip("/")
    assert inside.read_text() == "10.0.0.10 gpu-1\n" and not inside.is_symlink()
    assert confined.read(root, "etc/hosts") == (b"10.0.0.10 gpu-1\n", 0o644)


def test_dot_dot_never_climbs_above_the_root(tmp_path: Path, host: Path) -> None:
    root = tmp_path / "a" / "b" / "root"
    (root / "root").mkdir(parents=True)
    depth = "../" * 12
    (root / "root" / ".ssh").symlink_to(f"{depth}{str(host / 'dot-ssh').lstrip('/')}")
    before = _tree(host)
    confined.write(root, "root/.ssh/authorized_keys", b"ssh-ed25519 BBBB lab\n", 0o600)
    assert _tree(host) == before
    assert confined.read(root, "root/.ssh/authorized_keys") == (b"ssh-ed25519 BBBB lab\n", 0o600)


def test_a_link_in_the_files_place_is_replaced_not_written_through(tmp_path: Path, host: Path) -> None:
    root = tmp_path / "root"
    (root / "etc").mkdir(parents=True)
    (root / "etc" / "hostname").symlink_to(host / "etc" / "hostname")
    os.mkfifo(root / "etc" / "resolv.conf")
    before = _tree(host)
    assert confined.read(root, "etc/hostname") is None and confined.read(root, "etc/resolv.conf") is None
    confined.write(root, "etc/hostname", b"gpu-1\n")
    confined.write(root, "etc/resolv.conf", b"# none\n")  # a FIFO is never opened (it would block)
    assert _tree(host) == before
    assert not (root / "etc" / "hostname").is_symlink() and (root / "etc" / "hostname").read_text() == "gpu-1\n"
    assert (root / "etc" / "resolv.conf").read_text() == "# none\n"


def test_a_link_loop_and_a_file_for_a_folder_are_refused(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (root / "etc").symlink_to("etc")
    with pytest.raises(confined.NotConfined, match="links"):
        confined.write(root, "etc/hosts", b"x\n")
    (root / "var").write_text("a file\n")
    with pytest.raises(confined.NotConfined, match="not a folder"):
        confined.write(root, "var/lib/x", b"x\n")


@pytest.fixture
def lab() -> LabLayout:
    return layout_lab(load_spec(REPO / "Pulumi.lab.yaml"))


def test_lab_up_writes_nothing_outside_a_node_that_planted_links_everywhere(
        tmp_path: Path, host: Path, lab: LabLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    """Root inside a node made every path `lab up` writes a link to the host's own files (the
    issue's case: /etc/hosts, resolv.conf, hostname, the apt proxy file, root's authorized_keys),
    and the twin's extra file's folder too. The host's files stay as they were; the node gets its
    files, with their modes; a second pass changes nothing."""
    root = tmp_path / "node-root"
    (root / "etc" / "ssh").mkdir(parents=True)
    (root / "etc" / "machine-id").write_text("")
    (root / "root").mkdir(mode=0o700)
    (root / "etc" / "hosts").symlink_to(host / "etc" / "hosts")
    (root / "etc" / "hostname").symlink_to(host / "etc" / "hostname")
    (root / "etc" / "resolv.conf").symlink_to(host / "etc" / "resolv.conf")
    (root / "etc" / "apt").symlink_to(host / "etc" / "apt")
    (root / "etc" / "netplan").symlink_to(host / "etc")
    (root / "root" / ".ssh").symlink_to(host / "dot-ssh")
    gpu1 = dataclasses.replace(lab.nodes[0], files=(NodeFile("/etc/netplan/50-cloud-init.yaml", "network: {}\n",
                                                             0o600),))
    monkeypatch.setattr(node, "root_dir", lambda plan, n: root)
    before = _tree(host)
    changed, host_key = node.ensure_files(lab, gpu1, "ssh-ed25519 AAAA lab-key", [])
    assert changed and host_key.startswith("ssh-ed25519 ")
    assert _tree(host) == before, "a host file was written through a link the node planted"
    assert confined.read(root, "etc/netplan/50-cloud-init.yaml") == (b"network: {}\n", 0o600)
    assert confined.read(root, "root/.ssh/authorized_keys") == (b"ssh-ed25519 AAAA lab-key\n", 0o600)
    assert confined.read_text(root, "etc/hostname") == f"{gpu1.name}\n"
    assert "Acquire::http::Proxy" in (confined.read_text(root, "etc/apt/apt.conf.d/01gpucluster-proxy") or "")
    assert confined.read(root, "etc/ssh/ssh_host_ed25519_key")[1] == 0o600  # type: ignore[index]
    assert node.ensure_files(lab, gpu1, "ssh-ed25519 AAAA lab-key", []) == (False, host_key)


def test_a_lab_whose_stack_declares_the_proxy_leaves_it_to_converge(
        tmp_path: Path, lab: LabLayout, monkeypatch: pytest.MonkeyPatch) -> None:
    """With node_apt_proxy off (a twin whose stack's egress is a proxy), the lab writes no apt proxy
    of its own and takes back one it wrote before; anything else at another path stays."""
    root = tmp_path / "node-root"
    (root / "etc" / "ssh").mkdir(parents=True)
    (root / "etc" / "machine-id").write_text("")
    (root / "root").mkdir(mode=0o700)
    monkeypatch.setattr(node, "root_dir", lambda plan, n: root)
    node.ensure_files(lab, lab.nodes[0], "ssh-ed25519 AAAA lab-key", [])
    assert confined.exists(root, "etc/apt/apt.conf.d/01gpucluster-proxy")
    converge_file = root / "etc" / "apt" / "apt.conf.d" / "90gpucluster-proxy"
    converge_file.write_text('Acquire::http::Proxy "http://10.77.0.1:3142";\n')
    no_proxy = dataclasses.replace(lab, node_apt_proxy=False)
    changed, _ = node.ensure_files(no_proxy, lab.nodes[0], "ssh-ed25519 AAAA lab-key", [])
    assert changed and not confined.exists(root, "etc/apt/apt.conf.d/01gpucluster-proxy")
    assert converge_file.exists()
    assert node.ensure_files(no_proxy, lab.nodes[0], "ssh-ed25519 AAAA lab-key", [])[0] is False
