"""nvidia-peermem with DOCA-OFED: the driver's DKMS modules are rebuilt when DOCA-OFED's ib_core is
newer than their nvidia-peermem, peermem is not loaded against the distribution's ib_core, and the
DOCA apt key comes from where NVIDIA's DOCA-Host guide fetches it.

The role's own shell steps run here against stand-in `modinfo` and `dkms` commands (both dkms
status formats) and stand-in sysfs/procfs paths."""

from __future__ import annotations

import os
import stat
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.render.os_packages import os_packages
from gpucluster.spec import load_bom
from tests.unit.roles.render import NATIVE, ROLES, TEXT, first_host, host_context, inventory_for, role_vars

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

KERNEL = "6.8.0-45-generic"
# NVIDIA's DOCA-Host guide, "Upgrading Software on Host" (deb-based, DOCA online repo):
# curl https://linux.mellanox.com/public/repo/doca/GPG-KEY-Mellanox.pub | gpg --dearmor ...
# (https://docs.nvidia.com/doca/sdk/DOCA-Host+Installation+and+Upgrade).
DOCA_KEY = "https://linux.mellanox.com/public/repo/doca/GPG-KEY-Mellanox.pub"


def _tasks(role: str, name: str) -> list[dict[str, Any]]:
    return yaml.safe_load((ROLES / role / name).read_text())


def _task(role: str, name: str, title: str) -> dict[str, Any]:
    return next(t for t in _tasks(role, name) if t["name"] == title)


def _exe(path: Path, body: str) -> None:
    path.write_text("#!/bin/bash\n" + body)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)


def _run(script: str, bin_dir: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    return subprocess.run(["/bin/bash", "-c", script], env=env, capture_output=True, text=True, timeout=30, check=False)


# --- the DOCA repository key ----------------------------------------------------------------------


def test_the_doca_key_comes_from_the_repository_root_as_nvidia_documents() -> None:
    repo = next(t for t in _tasks("rdma_fabric", "tasks/doca.yml") if "ansible.builtin.deb822_repository" in t)
    assert repo["ansible.builtin.deb822_repository"]["signed_by"] == "{{ __rdma_fabric_doca_key }}"
    inventory = inventory_for("roce")
    v = role_vars("rdma_fabric", host_context(inventory, first_host(inventory, "gpu")))
    online = dict(v, rdma_fabric_doca_local_dir="")
    assert NATIVE.from_string(repo["vars"]["__rdma_fabric_doca_key"]).render(online) == DOCA_KEY
    mirror = dict(online, rdma_fabric_doca_repo_url="https://mirror.example/doca//")
    assert NATIVE.from_string(repo["vars"]["__rdma_fabric_doca_key"]).render(mirror) == (
        "https://mirror.example/doca/GPG-KEY-Mellanox.pub")
    local = dict(v, rdma_fabric_doca_local_dir="/srv/doca")
    assert NATIVE.from_string(repo["vars"]["__rdma_fabric_doca_key"]).render(local) == (
        f"file://{v['__rdma_fabric_doca_repo_dir']}/GPG-KEY-Mellanox.pub")
    # The OS table says the same.
    table = os_packages("ubuntu-22.04", "rdma_fabric", load_bom())
    assert table["doca_repositories"][0]["signed_by"] == DOCA_KEY


# --- the rebuild after DOCA-OFED --------------------------------------------------------------------

DKMS3 = (f"mlnx-ofed-kernel/25.10.OFED.25.10.1.2.0.1, {KERNEL}, x86_64: installed\n"
         f"nvidia/570.172.08, {KERNEL}, x86_64: installed\n"
         f"nvidia-fs/2.26.6, {KERNEL}, x86_64: installed\n")
DKMS2 = (f"mlnx-ofed-kernel, 25.10.OFED.25.10.1.2.0.1, {KERNEL}, x86_64: installed\n"
         f"nvidia, 570.172.08, {KERNEL}, x86_64: installed (WARNING! Diff between built and installed module!)\n")


def _probe(tmp_path: Path, dkms_status: str, peermem_age: int | None) -> str:
    """Run the role's probe with ib_core.ko at time 2000 and nvidia-peermem.ko at ``peermem_age``."""
    mods, src, bin_dir = tmp_path / "modules", tmp_path / "src", tmp_path / "bin"
    for d in (mods, src / "nvidia-570.172.08" / "nvidia-peermem", src / "mlnx-ofed-kernel-25.10.OFED.25.10.1.2.0.1",
              src / "nvidia-fs-2.26.6", bin_dir):
        d.mkdir(parents=True, exist_ok=True)
    ib_core = mods / "ib_core.ko"
    ib_core.write_text("")
    os.utime(ib_core, (2000, 2000))
    peermem = mods / "nvidia-peermem.ko"
    if peermem_age is not None:
        peermem.write_text("")
        os.utime(peermem, (peermem_age, peermem_age))
    _exe(bin_dir / "modinfo", f"""[ "$2" = {KERNEL} ] && [ "$3" = -n ] || exit 2
case "$4" in
  ib_core) echo {ib_core} ;;
  nvidia-peermem) [ -e {peermem} ] && echo {peermem} || exit 1 ;;
  *) exit 1 ;;
esac
""")
    (tmp_path / "status").write_text(dkms_status)
    _exe(bin_dir / "dkms", f'[ "$1 $2 $3" = "status -k {KERNEL}" ] || exit 2\ncat {tmp_path / "status"}\n')
    task = _task("rdma_fabric", "tasks/doca.yml", "Find NVIDIA driver modules built before DOCA-OFED's ib_core")
    assert task["check_mode"] is False and task["changed_when"] is False
    script = TEXT.from_string(task["ansible.builtin.shell"]).render(ansible_facts={"kernel": KERNEL})
    assert script.count('"/usr/src/') == 1
    proc = _run(script.replace('"/usr/src/', f'"{src}/'), bin_dir)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


@pytest.mark.parametrize("status", [DKMS3, DKMS2], ids=["dkms3", "dkms2"])
def test_a_peermem_older_than_docas_ib_core_is_rebuilt_and_only_the_drivers_module(tmp_path: Path,
                                                                                  status: str) -> None:
    assert _probe(tmp_path, status, peermem_age=1000).split() == ["nvidia/570.172.08"]


def test_a_driver_built_after_doca_is_left_alone(tmp_path: Path) -> None:
    assert _probe(tmp_path, DKMS3, peermem_age=3000) == ""


def test_a_node_without_peermem_has_nothing_to_rebuild(tmp_path: Path) -> None:
    assert _probe(tmp_path, DKMS3, peermem_age=None) == ""


@pytest.mark.parametrize(("still_added", "calls"), [
    (True, ["remove nvidia/570.172.08 -k K", "status nvidia/570.172.08", "install nvidia/570.172.08 -k K"]),
    (False, ["remove nvidia/570.172.08 -k K", "status nvidia/570.172.08", "add nvidia/570.172.08",
             "install nvidia/570.172.08 -k K"]),
])
def test_the_rebuild_removes_adds_back_if_needed_and_installs(tmp_path: Path, still_added: bool,
                                                               calls: list[str]) -> None:
    task = _task("rdma_fabric", "tasks/doca.yml", "Rebuild the NVIDIA driver's modules against DOCA-OFED's ib_core")
    assert task["loop"] == "{{ __rdma_fabric_peermem_stale.stdout_lines }}"
    assert task["notify"] == "Report that DOCA-OFED's kernel modules load after a reboot"
    log = tmp_path / "calls"
    status = "nvidia/570.172.08: added" if still_added else ""
    _exe(tmp_path / "dkms", f'echo "$*" >> {log}\n[ "$1" = status ] && echo "{status}"\nexit 0\n')
    script = TEXT.from_string(task["ansible.builtin.shell"]).render(item="nvidia/570.172.08",
                                                                     ansible_facts={"kernel": "K"})
    proc = _run(script, tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert log.read_text().splitlines() == calls


def test_the_probe_and_the_rebuild_follow_the_doca_install() -> None:
    names = [t["name"] for t in _tasks("rdma_fabric", "tasks/doca.yml")]
    install = names.index("Install DOCA-OFED")
    assert names.index("Find NVIDIA driver modules built before DOCA-OFED's ib_core") == install + 1
    assert names.index("Rebuild the NVIDIA driver's modules against DOCA-OFED's ib_core") == install + 2
    handlers = [h["name"] for h in _tasks("rdma_fabric", "handlers/main.yml")]
    assert "Report that DOCA-OFED's kernel modules load after a reboot" in handlers


# --- loading peermem now ----------------------------------------------------------------------------


@pytest.mark.parametrize(("ib_core_loaded", "symbol", "want"), [
    (True, False, "inbox"),        # DOCA-OFED installed in this run, the distribution's ib_core still loaded
    (True, True, "peer-memory"),   # DOCA-OFED's ib_core loaded
    (False, False, "peer-memory"),  # modprobe loads ib_core from disk: DOCA-OFED's
])
def test_peermem_is_not_loaded_against_an_ib_core_without_the_peer_api(tmp_path: Path, ib_core_loaded: bool,
                                                                       symbol: bool, want: str) -> None:
    probe = _task("nvidia_driver", "tasks/service.yml", "Check whether the running ib_core offers the peer-memory API")
    assert probe["check_mode"] is False and probe["changed_when"] is False
    sys_module = tmp_path / "sys" / "module"
    sys_module.mkdir(parents=True)
    if ib_core_loaded:
        (sys_module / "ib_core").mkdir()
    kallsyms = tmp_path / "kallsyms"
    kallsyms.write_text("0000000000000000 T ib_register_client\t[ib_core]\n"
                        + ("0000000000000000 T ib_register_peer_memory_client\t[ib_core]\n" if symbol else ""))
    script = probe["ansible.builtin.shell"].replace("/sys/module/", f"{sys_module}/").replace(
        "/proc/kallsyms", str(kallsyms))
    proc = _run(script, tmp_path)
    assert proc.stdout.strip() == want, proc.stderr

    load = _task("nvidia_driver", "tasks/service.yml", "Load nvidia-peermem now")
    assert "__nvidia_driver_peer_api.stdout == 'peer-memory'" in load["when"]
    report = _task("nvidia_driver", "tasks/service.yml",
                   "Report that nvidia-peermem loads after the reboot DOCA-OFED needs")
    assert "__nvidia_driver_peer_api.stdout == 'inbox'" in report["when"]
