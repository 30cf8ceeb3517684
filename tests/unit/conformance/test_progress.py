"""Progress of long measurements: what the suite notes reaches the operator's stderr, with a heartbeat."""

from __future__ import annotations

import io
import threading
import time
from pathlib import Path

import pytest

from gpucluster.conformance import progress


def test_notes_from_concurrent_writers_arrive_whole_and_in_the_follower(tmp_path: Path) -> None:
    def write(i: int) -> None:
        for j in range(50):
            progress.note(f"all-reduce pair gpu-{i}/gpu-{j} (mpi-cpu)", budget_s=240, run_dir=tmp_path)

    threads = [threading.Thread(target=write, args=(i,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    out = io.StringIO()
    follower = progress.Follower(tmp_path, out, heartbeat_s=3600)
    follower.poll()
    lines = out.getvalue().splitlines()
    assert len(lines) == 200
    assert all(line.startswith("verify: all-reduce pair gpu-") and line.endswith("(budget 240 s)") for line in lines)


def test_a_quiet_measurement_gets_a_heartbeat_naming_it_and_its_time(tmp_path: Path) -> None:
    out = io.StringIO()
    follower = progress.Follower(tmp_path, out, heartbeat_s=0.2)
    progress.note("ib_write_bw gpu-1/gpu-2 on mlx5_0", budget_s=65, run_dir=tmp_path)
    follower.poll()
    assert out.getvalue() == "verify: ib_write_bw gpu-1/gpu-2 on mlx5_0 (budget 65 s)\n"
    time.sleep(0.3)
    follower.poll()
    last = out.getvalue().splitlines()[-1]
    assert last.startswith("verify: still: ib_write_bw gpu-1/gpu-2 on mlx5_0 (budget 65 s), ")
    assert last.endswith(" s in")


def test_the_follower_thread_prints_without_being_asked_and_stops(tmp_path: Path) -> None:
    out = io.StringIO()
    follower = progress.Follower(tmp_path, out, heartbeat_s=3600, poll_s=0.05).start()
    progress.note("gpu-burn on gpu-1 for 60 s", run_dir=tmp_path)
    deadline = time.monotonic() + 5
    while "gpu-burn" not in out.getvalue() and time.monotonic() < deadline:
        time.sleep(0.05)
    follower.stop()
    assert out.getvalue() == "verify: gpu-burn on gpu-1 for 60 s\n"


def test_without_a_run_folder_a_note_is_dropped(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv(progress.RUN_DIR_ENV, raising=False)
    monkeypatch.chdir(tmp_path)
    progress.note("nothing to say")
    assert list(tmp_path.iterdir()) == []
