"""The `gpucluster.cluster.files` action's fast path: the probe runs in this host's real shell, and
its verdict is held against the module's own (run as Ansible runs it, in check mode) on the same tree.
"""

from __future__ import annotations

import grp
import os
import pwd
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.unit.loading import load_file
from tests.unit.plugins.test_files_module import run as run_module

# Starts processes (the probe's shell, the module): outside `make unit-fast` (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
action = load_file(REPO / "collections/ansible_collections/gpucluster/cluster/plugins/action/files.py",
                   "gpucluster_files_action")
USER = pwd.getpwuid(os.getuid()).pw_name
GROUP = grp.getgrgid(os.getgid()).gr_name


def fast(args: dict[str, Any]) -> list[str] | None:
    """What the action's fast path decides on this host: the skipped paths, or None (the module runs)."""
    planned = action.plan(args)
    if planned is None:
        return None
    command, checks = planned
    out = subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=False)
    return action.converged(checks, out.stdout) if out.returncode == 0 else None


def agree(tmp_path: Path, args: dict[str, Any]) -> list[str] | None:
    """The fast path's verdict, after checking that the module (check mode) agrees with it."""
    verdict = fast(args)
    module = run_module(tmp_path, args, check_mode=True)
    assert "failed" not in module or verdict is None, module
    if verdict is not None:
        assert module["changed"] is False and module["skipped_paths"] == verdict, (args, module)
    return verdict


def converged_tree(tmp_path: Path) -> dict[str, Any]:
    """A folder and two files, written by the module itself, then its arguments."""
    d = tmp_path / "etc" / "tool.d"
    args = {"directories": [{"path": str(d) + "/", "owner": USER, "group": GROUP, "mode": "0750"}],
            "files": [{"dest": str(d / "a.conf"), "content": "a = 1\nü\n", "owner": USER, "group": GROUP,
                       "mode": "0640"},
                      {"dest": str(tmp_path / "b.conf"), "content": "", "mode": 0o644},
                      {"dest": str(tmp_path / "gone.conf"), "state": "absent"}],
            "exclusive": [{"path": str(d), "pattern": "*.conf"}]}
    assert run_module(tmp_path, args)["changed"] is True
    return args


def test_a_converged_role_takes_the_fast_path(tmp_path: Path) -> None:
    args = converged_tree(tmp_path)
    assert agree(tmp_path, args) == []


@pytest.mark.parametrize("change", ["content", "mode", "owner", "missing", "present", "extra", "link", "folder_mode"])
def test_any_difference_runs_the_module(tmp_path: Path, change: str) -> None:
    args = converged_tree(tmp_path)
    d = tmp_path / "etc" / "tool.d"
    if change == "content":
        (d / "a.conf").write_text("a = 2\n")
    elif change == "mode":
        (tmp_path / "b.conf").chmod(0o600)
    elif change == "owner":
        args["files"][0]["owner"] = "0" if os.getuid() != 0 else "nobody"
    elif change == "missing":
        (tmp_path / "b.conf").unlink()
    elif change == "present":
        (tmp_path / "gone.conf").write_text("x\n")
    elif change == "extra":
        (d / "stale rail.conf").write_text("x\n")  # an owned name, with a space, left from an earlier run
    elif change == "link":
        (tmp_path / "b.conf").unlink()
        (tmp_path / "b.conf").symlink_to(d / "a.conf")
    elif change == "folder_mode":
        d.chmod(0o755)
    assert agree(tmp_path, args) is None
    assert run_module(tmp_path, args, check_mode=True)["changed"] is True


def test_unowned_names_in_an_exclusive_folder_are_left_alone(tmp_path: Path) -> None:
    args = converged_tree(tmp_path)
    (tmp_path / "etc" / "tool.d" / "README").write_text("mine\n")
    assert agree(tmp_path, args) == []


def test_a_file_whose_folder_is_missing_is_skipped_as_the_module_skips_it(tmp_path: Path) -> None:
    dest = str(tmp_path / "no-such-tool.d" / "x.conf")
    args = {"files": [{"dest": dest, "content": "x\n", "skip_without_parent": True}]}
    assert agree(tmp_path, args) == [dest]
    args["files"][0]["skip_without_parent"] = False  # the module fails: its message, not the fast path's
    assert fast(args) is None


def test_numeric_owner_and_disabled_entries(tmp_path: Path) -> None:
    args = converged_tree(tmp_path)
    args["files"][0]["owner"] = str(os.getuid())
    args["files"].append({"dest": str(tmp_path / "off.conf"), "content": "x\n", "enabled": False})
    assert agree(tmp_path, args) == []


@pytest.mark.parametrize("args", [
    {"files": [{"dest": "/etc/x", "content": "x", "mode": "u=rw,g=r"}]},  # symbolic: the module reads it
    {"files": [{"dest": "/etc/x", "content": "x"}], "backup": True},  # an argument the module may grow
    {"files": [{"dest": "/etc/x", "content": "x", "attributes": "+i"}]},
    {"files": [{"dest": "/etc/x"}]},  # no content: the module's own error
    {"files": "not a list"},
])
def test_only_the_module_reads_what_the_fast_path_does_not_know(args: dict[str, Any]) -> None:
    assert action.plan(args) is None


@pytest.mark.parametrize("stdout", ["", "garbage\n", "0 file 640 0 root 0 root\n", "0 dir\n"])
def test_an_output_it_does_not_recognise_runs_the_module(tmp_path: Path, stdout: str) -> None:
    planned = action.plan({"files": [{"dest": str(tmp_path / "a"), "content": "a"}]})
    assert planned is not None
    assert action.converged(planned[1], stdout) is None


def test_the_probe_carries_no_content(tmp_path: Path) -> None:
    planned = action.plan({"files": [{"dest": str(tmp_path / "key"), "content": "SECRET-TOKEN\n"}]})
    assert planned is not None and "SECRET-TOKEN" not in planned[0]
