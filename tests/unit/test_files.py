"""gpucluster.files: the one whole-file writer (lab state, run folder, seeds)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpucluster import files


def test_the_mode_is_the_one_asked_for_whatever_the_umask(tmp_path: Path) -> None:
    old = os.umask(0o077)
    try:
        assert files.write_whole(tmp_path / "seed", "a\n", mode=0o644)
    finally:
        os.umask(old)
    assert (tmp_path / "seed").stat().st_mode & 0o777 == 0o644
    assert files.write_whole(tmp_path / "run", "b\n", mode=0o600)
    assert (tmp_path / "run").stat().st_mode & 0o777 == 0o600


def test_an_unchanged_file_is_left_alone_and_a_changed_one_replaced(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    assert files.write_whole(path, "one\n", mode=0o600, skip_unchanged=True)
    inode = path.stat().st_ino
    assert not files.write_whole(path, "one\n", mode=0o600, skip_unchanged=True)
    assert path.stat().st_ino == inode
    assert files.write_whole(path, "two\n", mode=0o600, skip_unchanged=True)
    assert path.read_text() == "two\n"
    # Without skip_unchanged the file is written again (a run file's writer always writes).
    assert files.write_whole(path, "two\n", mode=0o600)


def test_a_link_at_the_path_is_replaced_never_written_through(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text("same\n")
    link = tmp_path / "seed"
    link.symlink_to(elsewhere)
    # Even holding the same text, a link is not the file: it is replaced.
    assert files.write_whole(link, "same\n", mode=0o644, skip_unchanged=True)
    assert not link.is_symlink() and link.read_text() == "same\n"
    assert elsewhere.read_text() == "same\n"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "results.json"
    path.write_text("old\n")

    def full_disk(*_: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(files.os, "replace", full_disk)
    with pytest.raises(OSError, match="No space"):
        files.write_whole(path, "new\n", mode=0o600)
    assert path.read_text() == "old\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.json"]


def test_a_file_that_is_not_text_is_rewritten(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_bytes(b"\xff\xfe")
    assert files.write_whole(path, "ok\n", mode=0o600, skip_unchanged=True)
    assert path.read_text() == "ok\n"


def test_an_unchanged_text_at_another_mode_is_given_the_mode(tmp_path: Path) -> None:
    path = tmp_path / "state.json"
    path.write_text("one\n")
    path.chmod(0o644)
    assert files.write_whole(path, "one\n", mode=0o600, skip_unchanged=True)
    assert path.stat().st_mode & 0o777 == 0o600
    assert not files.write_whole(path, "one\n", mode=0o600, skip_unchanged=True)
