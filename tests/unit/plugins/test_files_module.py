"""gpucluster.cluster.files, run as Ansible runs a module (its JSON arguments, a real folder)."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

REPO = Path(__file__).resolve().parents[3]
MODULE = REPO / "collections/ansible_collections/gpucluster/cluster/plugins/modules/files.py"


def run(tmp_path: Path, args: dict[str, Any], check_mode: bool = False, diff: bool = False) -> dict[str, Any]:
    argfile = tmp_path / "args.json"
    argfile.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {**args, "_ansible_check_mode": check_mode,
                                                           "_ansible_diff": diff}}))
    out = subprocess.run([sys.executable, str(MODULE), str(argfile)], capture_output=True, text=True,
                         check=False, cwd=tmp_path)
    result: dict[str, Any] = json.loads(out.stdout)
    return result


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_writes_folders_and_files_then_changes_nothing(tmp_path: Path) -> None:
    d = tmp_path / "etc" / "tool.d"
    args = {"directories": [{"path": str(d), "mode": "0750"}],
            "files": [{"dest": str(d / "a.conf"), "content": "a = 1\n", "mode": "0640"},
                      {"dest": str(tmp_path / "b.conf"), "content": "b\n", "mode": "0644"}]}
    first = run(tmp_path, args)
    assert first["changed"] is True
    assert first["changed_paths"] == [str(d), str(d / "a.conf"), str(tmp_path / "b.conf")]
    assert (d / "a.conf").read_text() == "a = 1\n" and mode(d / "a.conf") == 0o640 and mode(d) == 0o750
    second = run(tmp_path, args)
    assert second["changed"] is False and second["changed_paths"] == []


def test_only_the_file_that_differs_is_rewritten(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    run(tmp_path, {"files": [{"dest": str(a), "content": "1\n"}, {"dest": str(b), "content": "2\n", "mode": "0644"}]})
    b.chmod(0o600)
    res = run(tmp_path, {"files": [{"dest": str(a), "content": "one\n"},
                                   {"dest": str(b), "content": "2\n", "mode": "0644"}]})
    assert res["changed_paths"] == [str(a), str(b)]  # a's content, b's mode
    assert a.read_text() == "one\n" and mode(b) == 0o644
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "args.json", "b"]  # no temporary file left


def test_absent_removes_and_is_quiet_when_already_gone(tmp_path: Path) -> None:
    f = tmp_path / "drop-in.conf"
    f.write_text("x")
    assert run(tmp_path, {"files": [{"dest": str(f), "state": "absent"}]})["changed_paths"] == [str(f)]
    assert not f.exists()
    assert run(tmp_path, {"files": [{"dest": str(f), "state": "absent"}]})["changed"] is False


def test_a_missing_folder_fails_unless_the_file_is_skipped_there(tmp_path: Path) -> None:
    missing = tmp_path / "cloud" / "cloud.cfg.d" / "zz.cfg"
    res = run(tmp_path, {"files": [{"dest": str(missing), "content": "x", "skip_without_parent": True}]})
    assert res["changed"] is False and res["skipped_paths"] == [str(missing)]
    res = run(tmp_path, {"files": [{"dest": str(missing), "content": "x"}]})
    assert res["failed"] is True and str(missing) in res["msg"] and "does not exist" in res["msg"]


def test_a_file_that_fails_validation_is_not_written(tmp_path: Path) -> None:
    f, first = tmp_path / "sshd.conf", tmp_path / "first.conf"
    f.write_text("good\n")
    # No shell: the command is split into words and %s is the temporary file; another % is kept.
    check = "sh -c 'date +%Y >/dev/null; grep -q good \"$1\" || { echo \"bad line 1\" >&2; exit 3; }' sh %s"
    res = run(tmp_path, {"files": [{"dest": str(first), "content": "1\n"},
                                   {"dest": str(f), "content": "bad\n", "validate": check}]})
    assert res["failed"] is True
    assert str(f) in res["msg"] and "exit 3" in res["msg"] and "bad line 1" in res["msg"]
    # What the run changed before the failure is still reported (handlers can be forced).
    assert res["changed"] is True and res["changed_paths"] == [str(first)]
    assert f.read_text() == "good\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["args.json", "first.conf", "sshd.conf"]
    ok = run(tmp_path, {"files": [{"dest": str(f), "content": "good too\n", "validate": check}]})
    assert ok["changed"] is True and f.read_text() == "good too\n"


def test_disabled_entries_are_left_out(tmp_path: Path) -> None:
    f = tmp_path / "f"
    f.write_text("keep\n")
    res = run(tmp_path, {"directories": [{"path": str(tmp_path / "d"), "enabled": False}],
                         "files": [{"dest": str(f), "content": "new\n", "enabled": False},
                                   {"dest": str(f), "state": "absent", "enabled": False}]})
    assert res["changed"] is False and f.read_text() == "keep\n" and not (tmp_path / "d").exists()


def test_a_folder_as_destination_fails_with_its_name(tmp_path: Path) -> None:
    (tmp_path / "x").mkdir()
    res = run(tmp_path, {"files": [{"dest": str(tmp_path / "x"), "content": "y"}]})
    assert res["failed"] is True and res["msg"] == f"{tmp_path / 'x'}: is a folder, not a file"


def test_paths_are_normalised(tmp_path: Path) -> None:
    d = tmp_path / "new.d"
    res = run(tmp_path, {"directories": [{"path": f"{d}/"}], "files": [{"dest": f"{d}//f", "content": "x"}]},
              check_mode=True)
    assert res["changed_paths"] == [str(d), str(d / "f")]
    net = tmp_path / "net"
    net.mkdir()
    res = run(tmp_path, {"files": [{"dest": str(net / "60-a.network"), "content": "a"}],
                         "exclusive": [{"path": f"{net}/./", "pattern": "60-*.network"}]})
    assert res["changed_paths"] == [str(net / "60-a.network")] and (net / "60-a.network").exists()


def test_check_mode_reports_and_writes_nothing(tmp_path: Path) -> None:
    d = tmp_path / "new.d"
    old = tmp_path / "old"
    old.write_text("old\n")
    res = run(tmp_path, {"directories": [{"path": str(d)}],
                         "files": [{"dest": str(d / "f"), "content": "x"}, {"dest": str(old), "content": "new\n"}]},
              check_mode=True, diff=True)
    assert res["changed_paths"] == [str(d), str(d / "f"), str(old)]
    assert not d.exists() and old.read_text() == "old\n"
    assert {"before_header": str(old), "after_header": str(old), "before": "old\n", "after": "new\n"} in res["diff"]


def test_exclusive_removes_the_owned_files_no_longer_listed(tmp_path: Path) -> None:
    net = tmp_path / "network"
    net.mkdir()
    for name in ("60-gc-eth1.network", "60-gc-eth2.network", "10-other.network", "60-gc-notes.txt"):
        (net / name).write_text("x")
    res = run(tmp_path, {"files": [{"dest": str(net / "60-gc-eth1.network"), "content": "x"}],
                         "exclusive": [{"path": str(net), "pattern": "60-gc-*.network"}]})
    assert res["changed_paths"] == [str(net / "60-gc-eth2.network")]
    assert sorted(p.name for p in net.iterdir()) == ["10-other.network", "60-gc-eth1.network", "60-gc-notes.txt"]
