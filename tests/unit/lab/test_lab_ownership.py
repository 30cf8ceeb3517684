"""`lab down` removes only a folder the lab made; `state_dir` cannot point at a system folder."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpucluster.cli import main
from gpucluster.errors import InputError
from gpucluster.lab import lab
from gpucluster.lab.layout import layout_lab
from gpucluster.lab.state import MARKER, check_owned, claim, owned, write_state
from gpucluster.spec import load_spec

StackFile = Callable[[str, Callable[[dict[str, Any]], None]], Path]


def _stack(stack_file: StackFile, state_dir: str, name: str = "etc") -> Path:
    def mutate(config: dict[str, Any]) -> None:
        config["gpucluster:name"] = name
        config["gpucluster:target"]["state_dir"] = state_dir

    return stack_file("Pulumi.lab.yaml", mutate)


def _decoy(root: Path, name: str) -> Path:
    folder = root / name
    (folder / "sub").mkdir(parents=True)
    (folder / "passwd").write_text("root:x:0:0::/root:/bin/bash\n")
    (folder / "sub" / "keep").write_text("data\n")
    return folder


def test_lab_down_leaves_a_decoy_folder_alone(stack_file: StackFile, tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    root = tmp_path / "state"
    decoy = _decoy(root, "etc")
    code = main(["lab", "down", "--stack", str(_stack(stack_file, str(root)))])
    err = capsys.readouterr().err
    assert code == 2
    assert len(err.strip().splitlines()) == 1, err
    assert str(decoy) in err and MARKER in err
    assert (decoy / "passwd").read_text().startswith("root:") and (decoy / "sub" / "keep").exists()
    assert sorted(p.name for p in decoy.iterdir()) == ["passwd", "sub"], "down must not even add a lock file"


def test_library_down_refuses_a_decoy_and_a_symlink(tmp_path: Path) -> None:
    decoy = _decoy(tmp_path, "etc")
    with pytest.raises(InputError, match="not lab 'etc'"):
        lab.down(tmp_path, "etc")
    assert (decoy / "passwd").exists()
    (tmp_path / "link").symlink_to(decoy)
    with pytest.raises(InputError, match="symbolic link"):
        lab.down(tmp_path, "link")
    assert (decoy / "sub" / "keep").exists()


def test_a_marker_of_another_lab_is_not_ours(tmp_path: Path) -> None:
    claim(tmp_path / "a", "a")
    (tmp_path / "a").rename(tmp_path / "b")
    assert not owned(tmp_path / "b", "b")
    with pytest.raises(InputError):
        check_owned(tmp_path / "b", "b")


def test_claim_makes_an_owned_folder_and_refuses_a_full_one(tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    claim(fresh, "fresh")
    assert owned(fresh, "fresh") and oct(fresh.stat().st_mode & 0o777) == "0o700"
    claim(fresh, "fresh")  # idempotent
    # A folder that was there before, even empty, is not the lab's to fill and later remove.
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="not lab 'empty'"):
        claim(empty, "empty")
    assert list(empty.iterdir()) == []
    full = _decoy(tmp_path, "full")
    with pytest.raises(InputError, match="not lab 'full'"):
        claim(full, "full")
    assert not (full / MARKER).exists()


def test_a_lab_from_before_the_marker_is_recognised_by_its_state(stack_file: StackFile, tmp_path: Path) -> None:
    plan = layout_lab(load_spec(_stack(stack_file, str(tmp_path), name="old")))
    plan.lab_dir.mkdir(parents=True)
    write_state(plan)
    assert owned(plan.lab_dir, "old")
    # A state file copied to another name is not that lab's.
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "state.json").write_text((plan.lab_dir / "state.json").read_text())
    assert not owned(tmp_path / "other", "other")
    doc = json.loads((plan.lab_dir / "state.json").read_text())
    assert doc["plan"]["name"] == "old"


@pytest.mark.parametrize(
    "state_dir",
    ["/", "/etc", "/var", "/var/lib", "/usr", "/home", "/tmp", "/etc/gpucluster", "/usr/share/lab",
     "/proc/self", "/var/lib/../../etc", "/var/lib/gpucluster/", "/var//lib/gpucluster", "/var/./lib/x",
     "relative/dir", "/var/lib/gc lab", "/var/lib/{{x}}", "/var/lib/$(id)"],
)
def test_state_dir_refuses_system_and_odd_paths(stack_file: StackFile, state_dir: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["spec", "validate", str(_stack(stack_file, state_dir, name="lab"))])
    err = capsys.readouterr().err
    assert code == 2
    assert "gpucluster.target.state_dir" in err, err


@pytest.mark.parametrize("state_dir", ["/var/lib/gpucluster/lab", "/srv/gpucluster", "/tmp/gc-lab", "/opt/gc/state"])
def test_state_dir_accepts_a_folder_of_its_own(stack_file: StackFile, state_dir: str) -> None:
    assert layout_lab(load_spec(_stack(stack_file, state_dir, name="lab"))).state_root == state_dir


def test_the_lab_name_cache_is_reserved(stack_file: StackFile, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["spec", "validate", str(_stack(stack_file, "/var/lib/gpucluster/lab", name="cache"))]) == 2
    assert "gpucluster.name: 'cache' is reserved" in capsys.readouterr().err


def test_a_planted_plan_cannot_make_down_remove_anything_outside_the_lab(stack_file: StackFile,
                                                                        tmp_path: Path) -> None:
    victim = _decoy(tmp_path, "victim")
    root = tmp_path / "state"
    plan = layout_lab(load_spec(_stack(stack_file, str(root), name="lab")))
    claim(plan.lab_dir, "lab")
    (plan.lab_dir / "nodes").mkdir()
    doc = {"version": 1, "plan": plan.to_dict()}
    doc["plan"]["nodes"][0]["name"] = "../../../victim"
    (plan.lab_dir / "state.json").write_text(json.dumps(doc))
    with pytest.raises(InputError, match="not a node name"):
        lab.down(root, "lab")
    assert (victim / "passwd").exists()
    doc = {"version": 1, "plan": plan.to_dict()}
    doc["plan"]["management_bridge"] = "eth0"
    (plan.lab_dir / "state.json").write_text(json.dumps(doc))
    with pytest.raises(InputError, match="not a lab bridge name"):
        lab.down(root, "lab")


def test_a_folder_others_can_write_is_refused(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    shared.mkdir()
    shared.chmod(0o777)
    with pytest.raises(InputError, match="writable by others"):
        claim(shared / "lab", "lab")
    assert not (shared / "lab").exists()
