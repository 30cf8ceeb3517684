"""NVIDIA's CUDA repository is added by one internal role, nvidia_cuda_repo (issue 26).

nvidia_driver, cuda_toolkit, nccl and gpu_validation (DCGM) each added it before, with a URL
default of their own, to one file (gpucluster-cuda): a URL set for one role made the roles rewrite
each other's entry on every converge. These tests fail if another role names the repository's URL
or writes its entry again, and check that the one role writes what the four wrote, so a node
converged before keeps its file byte for byte (the module writes the file from these arguments).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from gpucluster.render.os_packages import OS_TRAITS, os_packages
from gpucluster.spec.models import Bom
from tests.unit.roles.render import (
    FABRICS,
    FACTS,
    NATIVE,
    ROLES,
    first_host,
    host_context,
    inventory_for,
    role_vars,
)
from tests.unit.roles.tasks import every_task

ROLE = "nvidia_cuda_repo"
BOM = yaml.safe_load((ROLES.parent / "gpucluster" / "data" / "bom.yaml").read_text())
# The roles that install from the repository: the task file that includes the role, and the
# condition (besides the once-a-converge guard) under which it does.
CALLERS = {
    "nvidia_driver": ("tasks/install-cuda-repo.yml", None),
    "cuda_toolkit": ("tasks/install.yml", "cuda_toolkit_install_method == 'cuda_repo'"),
    "nccl": ("tasks/install.yml", "nccl_install_method == 'cuda_repo'"),
    "gpu_validation": ("tasks/dcgm.yml", None),
}
GUARD = "nvidia_cuda_repo_result is not defined"
REPO_MODULES = ("deb822_repository", "apt_repository", "yum_repository", "apt_key", "rpm_key")

# What names the repository: its URL (upstream, or the inventory's source for it), its signing
# keys, and the files its entry and key live in.
NAMES_IT = [
    re.compile(r"developer\.download\.nvidia\.com/compute/cuda"),
    re.compile(r"gpucluster_sources\b[^\n]*?(\.nvidia\b|\[\s*['\"]nvidia['\"]\s*\]|get\(\s*['\"]nvidia['\"])"),
    re.compile(r"3bf863cc|d42d0685", re.IGNORECASE),
    re.compile(r"(sources\.list\.d|yum\.repos\.d|keyrings)/gpucluster-cuda"),
]


def _tasks(path: Path) -> list[dict[str, Any]]:
    """Every task of a task file, those nested in blocks too (the shared walker)."""
    return every_task(yaml.safe_load(path.read_text()))


def _module(task: dict[str, Any]) -> str:
    return next((k for k in task if k.split(".")[-1] in REPO_MODULES), "")


def _writes_the_cuda_entry(task: dict[str, Any]) -> bool:
    """A repository task whose arguments are NVIDIA's CUDA repository (its entry's name, or its URL)."""
    module = _module(task)
    if not module:
        return False
    args = task[module]
    text = str(args)
    named = re.search(r"gpucluster-cuda\b|cuda_?repo", text, re.IGNORECASE)
    return bool(named) or any(p.search(text) for p in NAMES_IT)


def _offences(role_dir: Path) -> list[str]:
    found = []
    for path in sorted(p for p in role_dir.rglob("*") if p.is_file()):
        text = path.read_text(errors="replace")
        found += [f"{path.relative_to(role_dir.parent)}: {p.pattern}" for p in NAMES_IT if p.search(text)]
        if path.suffix == ".yml" and ("tasks" in path.parts or "handlers" in path.parts):
            found += [f"{path.relative_to(role_dir.parent)}: task {t.get('name')!r} writes the entry"
                      for t in _tasks(path) if isinstance(t, dict) and _writes_the_cuda_entry(t)]
    return found


def test_no_other_role_names_the_cuda_repository_or_writes_its_entry() -> None:
    others = [d for d in sorted(ROLES.iterdir()) if d.is_dir() and d.name != ROLE]
    assert len(others) > 10
    offences = [o for d in others for o in _offences(d)]
    assert offences == [], f"only roles/{ROLE} adds NVIDIA's CUDA repository: include it instead ({offences})"


def test_the_check_finds_the_tasks_it_replaced(tmp_path: Path) -> None:
    """The check above, on what nccl wrote before and on a sources file written by hand."""
    tasks = tmp_path / "r" / "tasks"
    tasks.mkdir(parents=True)
    (tasks / "install.yml").write_text(yaml.safe_dump([{"name": "Add NVIDIA's CUDA repository",
        "ansible.builtin.deb822_repository": {
            "name": "gpucluster-cuda", "types": ["deb"], "suites": ["/"], "state": "present",
            "uris": ["{{ nccl_cuda_repo_url }}/{{ __nccl_repo_dist }}/{{ __nccl_arch }}/"],
            "signed_by": "{{ nccl_cuda_repo_url }}/{{ __nccl_repo_dist }}/{{ __nccl_arch }}/{{ key }}.pub"}}]))
    (tmp_path / "r" / "defaults").mkdir()
    (tmp_path / "r" / "defaults" / "main.yml").write_text(
        "x_url: \"{{ (gpucluster_sources | default({})).get('nvidia', '') }}\"\n")
    (tasks / "copy.yml").write_text(yaml.safe_dump([{"name": "x", "ansible.builtin.copy": {
        "dest": "/etc/apt/sources.list.d/gpucluster-cuda.sources", "content": "Types: deb\n"}}]))
    found = _offences(tmp_path / "r")
    assert any("writes the entry" in f for f in found), found
    assert any("get" in f and "install.yml" not in f for f in found), found
    assert any("copy.yml" in f for f in found), found
    # Other NVIDIA repositories stay with their roles.
    assert _offences(ROLES / "container_runtime") == [] and _offences(ROLES / "rdma_fabric") == []


@pytest.mark.parametrize("caller", CALLERS)
def test_each_role_that_installs_from_it_includes_the_role_first_once_a_converge(caller: str) -> None:
    name, condition = CALLERS[caller]
    tasks = _tasks(ROLES / caller / name)
    include = tasks[0]
    assert include.get("ansible.builtin.include_role") == {"name": ROLE}, f"{caller}/{name}: first task"
    when = include["when"] if isinstance(include["when"], list) else [include["when"]]
    assert when == ([condition] if condition else []) + [GUARD]
    # The role refreshes apt's index when the entry changed: no caller refreshes it for the entry again.
    for task in tasks:
        apt = task.get("gpucluster.cluster.apt") or {}
        assert "repo" not in str(apt.get("update_cache", "")), f"{caller}: {task['name']}"
    # Roles of the same play (converge-nodes.yml) that come after the first skip one include.
    defaults = yaml.safe_load((ROLES / caller / "defaults" / "main.yml").read_text())
    assert not [k for k in defaults if "repo_url" in k or "repo_key" in k]


def _repo_task(module: str) -> dict[str, Any]:
    tasks = _tasks(ROLES / ROLE / "tasks" / "main.yml")
    return next(t for t in tasks if module in t)


def _render(args: dict[str, Any], v: dict[str, Any]) -> dict[str, Any]:
    return {k: NATIVE.from_string(val).render(v) if isinstance(val, str) and "{{" in val
            else [NATIVE.from_string(x).render(v) for x in val] if isinstance(val, list) else val
            for k, val in args.items()}


def _vars(fabric: str, os_id: str, arch: str = "x86_64", **extra: Any) -> dict[str, Any]:
    inventory = inventory_for(fabric)
    ctx = host_context(inventory, first_host(inventory, "gpu"))
    ctx.update(gpucluster_os=os_id, ansible_facts=dict(FACTS, architecture=arch))
    return role_vars(ROLE, ctx, extra)


def _old_entry(url: str, dist: str, arch: str) -> dict[str, Any]:
    """The arguments nvidia_driver, cuda_toolkit, nccl and gpu_validation passed before (HEAD 5edd088)."""
    folder = f"{url}/{dist}/{'sbsa' if arch == 'aarch64' else 'x86_64'}/"
    return {"name": "gpucluster-cuda", "types": ["deb"], "uris": [folder], "suites": ["/"],
            "signed_by": f"{folder}3bf863cc.pub", "state": "present"}


@pytest.mark.parametrize("fabric", FABRICS)
@pytest.mark.parametrize("os_id", sorted(OS_TRAITS))
@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_the_entry_is_the_one_the_roles_wrote_before(fabric: str, os_id: str, arch: str) -> None:
    v = _vars(fabric, os_id, arch)
    got = _render(_repo_task("ansible.builtin.deb822_repository")["ansible.builtin.deb822_repository"], v)
    url = v["gpucluster_sources"]["nvidia"]
    assert got == _old_entry(url, OS_TRAITS[os_id].nvidia_repo_dist, arch)
    # The OS table's entry for the role (upstream) is the same one.
    if arch == "x86_64" and url == "https://developer.download.nvidia.com/compute/cuda/repos":
        (table,) = os_packages(os_id, ROLE, Bom.model_validate(BOM))["repositories"]
        assert table.pop("components") == []
        assert {k: got[k] for k in ("name", "uris", "suites", "signed_by")} == table


def test_a_mirror_a_url_as_written_and_a_local_folder() -> None:
    # The URL is used as written, a trailing slash too, as before: the file stays what it was.
    for url in ("http://mirror.example/cuda", "http://mirror.example/cuda/"):
        v = _vars("roce", "ubuntu-24.04", nvidia_cuda_repo_url=url)
        got = _render(_repo_task("ansible.builtin.deb822_repository")["ansible.builtin.deb822_repository"], v)
        assert got == _old_entry(url, "ubuntu2404", "x86_64")
    v = _vars("roce", "ubuntu-24.04", nvidia_cuda_repo_local_dir="/srv/cuda-copy/")
    assert v["__nvidia_cuda_repo_uri"] == "file:///srv/cuda-copy/ubuntu2404/x86_64/"
    dnf = _render(_repo_task("ansible.builtin.yum_repository")["ansible.builtin.yum_repository"],
                  _vars("roce", "ubuntu-24.04"))
    assert dnf["baseurl"] == "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/x86_64/"
    assert dnf["gpgkey"] == dnf["baseurl"] + "D42D0685.pub" and dnf["name"] == "gpucluster-cuda"


def _failing(v: dict[str, Any]) -> list[str]:
    task = yaml.safe_load((ROLES / ROLE / "tasks" / "preflight.yml").read_text())[0]["ansible.builtin.assert"]
    # Ansible's `vars`: every variable of the host, by name.
    return [c for c in task["that"] if NATIVE.from_string("{{ " + c + " }}").render({**v, "vars": v}) is not True]


def test_preflight_refuses_a_source_that_is_not_a_url_or_a_relative_folder() -> None:
    assert _failing(_vars("infiniband", "ubuntu-22.04")) == []
    assert _failing(_vars("infiniband", "ubuntu-22.04", nvidia_cuda_repo_local_dir="/srv/cuda")) == []
    assert len(_failing(_vars("infiniband", "ubuntu-22.04", nvidia_cuda_repo_url="mirror.example/cuda"))) == 1
    assert len(_failing(_vars("infiniband", "ubuntu-22.04", nvidia_cuda_repo_local_dir="srv/cuda"))) == 1


def test_preflight_refuses_a_removed_repository_input_that_is_still_set() -> None:
    """A site's group_vars that still name a role's old repository URL would be ignored, its nodes
    going to NVIDIA's servers instead of its mirror: refused, naming the variable."""
    failing = _failing(_vars("infiniband", "ubuntu-22.04", nccl_cuda_repo_url="http://mirror.example/cuda"))
    assert len(failing) == 1 and "__nvidia_cuda_repo_removed_inputs" in failing[0]
    removed = yaml.safe_load((ROLES / ROLE / "vars" / "main.yml").read_text())["__nvidia_cuda_repo_removed_inputs"]
    assert "nccl_cuda_repo_url" in removed and "gpu_validation_dcgm_repo_url" in removed


def test_the_refresh_follows_the_entry_and_the_result_is_the_callers_guard() -> None:
    tasks = _tasks(ROLES / ROLE / "tasks" / "main.yml")
    apt = _repo_task("ansible.builtin.deb822_repository")
    assert apt["register"] == "nvidia_cuda_repo_result"
    refresh = next(t for t in tasks if "gpucluster.cluster.apt" in t)
    assert refresh["gpucluster.cluster.apt"] == {"update_cache": True}
    assert refresh["when"] == ["ansible_facts.os_family == 'Debian'", "nvidia_cuda_repo_result is changed"]
    assert tasks.index(apt) < tasks.index(refresh)
    assert "`nvidia_cuda_repo_result`" in (ROLES / ROLE / "README.md").read_text()
