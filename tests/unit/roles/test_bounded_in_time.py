"""Every task of the roles and playbooks that installs packages or downloads is bounded in time.

A lab node's apt once hung for many minutes in CLOSE-WAIT against the lab's apt proxy, and
converge waited with it: a CI run would have hung until the job's limit. The bounds, one setting
each (playbooks/group_vars/all.yml; docs/roles.md, "Bounded in time"):

- apt through `gpucluster.cluster.apt` only: its watchdog ends apt on the node at
  ``gpucluster_apt_timeout_s`` and apt's own stall timeout is ``gpucluster_apt_stall_timeout_s``
  (tests/unit/plugins/test_apt_bounds.py, test_apt_action.py). Such a task carries no ``timeout:``
  keyword: Ansible's would stop the controller's side first and leave apt running on the node.
- ``get_url`` with ``timeout: "{{ gpucluster_download_timeout_s }}"`` (its default is 10 s, unnamed).
- ``apt_repository`` without its own index refresh (which nothing bounds): the install after it
  refreshes through the action.
- dnf and ``package`` (no action of ours) with the task keyword ``timeout`` at ``gpucluster_apt_timeout_s``.
- no shell, command or raw task fetches or installs (apt-get, curl, wget, pip, dnf, yum).

A new task of these modules without its bound fails here, naming its file and task.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.unit.roles.tasks import every_task

REPO = Path(__file__).resolve().parents[3]
GROUP_VARS = REPO / "playbooks" / "group_vars" / "all.yml"
TASK_FILES = sorted([*REPO.glob("roles/*/tasks/*.yml"), *REPO.glob("roles/*/handlers/*.yml"),
                     *REPO.glob("playbooks/*.yml")])

APT_ACTION = "gpucluster.cluster.apt"
UNWRAPPED_APT = ("ansible.builtin.apt", "ansible.legacy.apt", "apt")
DOWNLOAD = ("ansible.builtin.get_url", "get_url")
APT_REPOSITORY = ("ansible.builtin.apt_repository", "apt_repository")
NO_ACTION_OF_OURS = ("ansible.builtin.dnf", "dnf", "ansible.builtin.yum", "yum", "ansible.builtin.package", "package")
SHELLS = ("ansible.builtin.shell", "ansible.builtin.command", "ansible.builtin.raw", "shell", "command", "raw")
FETCHES = re.compile(r"\b(apt-get|apt|curl|wget|pip3?|dnf|yum)\s+(install|update|upgrade|download|-)")


def _all_tasks() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for path in TASK_FILES:
        for task in every_task(yaml.safe_load(path.read_text())):
            found.append((f"{path.relative_to(REPO)}: {task.get('name', '?')}", task))
    return found


TASKS = _all_tasks()


def _using(modules: tuple[str, ...]) -> list[tuple[str, dict[str, Any]]]:
    return [(where, task) for where, task in TASKS if any(m in task for m in modules)]


def _module_args(task: dict[str, Any], modules: tuple[str, ...]) -> Any:
    return next(task[m] for m in modules if m in task)


def test_the_walk_finds_the_tasks_it_checks() -> None:
    """A walk that finds nothing would pass every test below."""
    assert len(_using((APT_ACTION,))) >= 20
    assert len(_using(DOWNLOAD)) >= 9
    assert _using(NO_ACTION_OF_OURS) and _using(APT_REPOSITORY)


def test_apt_runs_only_through_the_bounded_action() -> None:
    assert [where for where, _ in _using(UNWRAPPED_APT)] == []


def test_the_apt_action_is_left_to_its_own_bound() -> None:
    assert [where for where, task in _using((APT_ACTION,)) if "timeout" in task] == []


def test_every_download_has_a_stall_timeout() -> None:
    unbounded = [where for where, task in _using(DOWNLOAD)
                 if str(_module_args(task, DOWNLOAD).get("timeout")) != "{{ gpucluster_download_timeout_s }}"]
    assert unbounded == []


def test_apt_repository_leaves_the_index_refresh_to_the_action() -> None:
    refreshing = [where for where, task in _using(APT_REPOSITORY)
                  if _module_args(task, APT_REPOSITORY).get("update_cache") is not False]
    assert refreshing == []


def test_package_tasks_without_our_action_carry_a_task_timeout() -> None:
    unbounded = [where for where, task in _using(NO_ACTION_OF_OURS)
                 if str(task.get("timeout")) != "{{ gpucluster_apt_timeout_s }}"]
    assert unbounded == []


def test_no_shell_command_fetches_or_installs() -> None:
    fetching = []
    for where, task in _using(SHELLS):
        args = _module_args(task, SHELLS)
        if isinstance(args, dict):
            argv = args.get("argv", "")
            text = (" ".join(map(str, argv)) if isinstance(argv, list) else str(argv)) + " " + str(args.get("cmd", ""))
        else:
            text = str(args)
        if FETCHES.search(text):
            fetching.append(where)
    assert fetching == []


@pytest.mark.parametrize(("var", "default"), [
    ("gpucluster_apt_timeout_s", 1800), ("gpucluster_apt_stall_timeout_s", 120), ("gpucluster_download_timeout_s", 60)])
def test_every_bound_has_its_cluster_wide_default(var: str, default: int) -> None:
    assert yaml.safe_load(GROUP_VARS.read_text())[var] == default
