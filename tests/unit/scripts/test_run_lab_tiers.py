"""scripts/run-lab-tiers.sh: `make test`'s lab tiers side by side, each line prefixed with its tier,
each tier's whole log kept, the first failing tier's status returned, Ctrl-C passed on to both."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

# Starts processes (subprocess, fork): outside `make unit-fast`, the in-process tier (tests/unit/conftest.py).
pytestmark = pytest.mark.process

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "run-lab-tiers.sh"

# A stand-in for make: `fake-make --no-print-directory TIER`. Each tier says two lines; "bad<N>" exits N
# after them; "slow" says its first line, then waits, noting a SIGINT in marks/<tier> and exiting 130.
FAKE_MAKE = r"""#!/usr/bin/env bash
tier=$2
echo "$tier: first"
case $tier in
  bad*) echo "$tier: last"; exit "${tier#bad}" ;;
  slow*) trap 'echo interrupted > "marks/$tier"; exit 130' INT
         for _ in $(seq 200); do sleep 0.1; done
         echo "$tier: last"; exit 0 ;;
  late) sleep 1; echo "$tier: last"; exit 0 ;;
  *) echo "$tier: last"; exit 0 ;;
esac
"""


def _fake_make(tmp_path: Path) -> Path:
    make = tmp_path / "fake-make"
    make.write_text(FAKE_MAKE)
    make.chmod(0o755)
    (tmp_path / "marks").mkdir()
    return make


def _run(tmp_path: Path, *tiers: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["bash", str(SCRIPT), str(_fake_make(tmp_path)), *tiers], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)


def test_both_tiers_pass_each_line_prefixed_and_each_log_whole(tmp_path: Path) -> None:
    res = _run(tmp_path, "integration", "twins")
    assert res.returncode == 0, res.stdout + res.stderr
    for tier in ("integration", "twins"):
        assert f"[{tier}] {tier}: first" in res.stdout and f"[{tier}] {tier}: last" in res.stdout
        assert (tmp_path / "runs" / f"{tier}.log").read_text() == f"{tier}: first\n{tier}: last\n"
        assert f"lab tiers: {tier} exited 0" in res.stdout


def test_a_failing_tier_fails_the_run_and_the_other_still_runs_to_its_end(tmp_path: Path) -> None:
    res = _run(tmp_path, "bad3", "late")
    assert res.returncode == 3, res.stdout + res.stderr
    assert "[late] late: last" in res.stdout and "lab tiers: late exited 0" in res.stdout
    assert "lab tiers: bad3 exited 3" in res.stdout


def test_the_first_tiers_failure_is_the_status_when_both_fail(tmp_path: Path) -> None:
    res = _run(tmp_path, "bad5", "bad7")
    assert res.returncode == 5, res.stdout + res.stderr


def test_no_tier_named_is_a_usage_error(tmp_path: Path) -> None:
    res = _run(tmp_path)
    assert res.returncode == 2 and res.stderr.strip() == "usage: run-lab-tiers.sh MAKE TIER..."


def test_ctrl_c_reaches_both_tiers_and_nothing_is_left_running(tmp_path: Path) -> None:
    proc = subprocess.Popen(["bash", str(SCRIPT), str(_fake_make(tmp_path)), "slow1", "slow2"], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    try:
        deadline = time.monotonic() + 30
        logs = [tmp_path / "runs" / f"slow{i}.log" for i in (1, 2)]
        while not all(p.exists() and p.read_text() for p in logs):
            assert time.monotonic() < deadline, "the tiers never started"
            time.sleep(0.05)
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 130, out + err
    assert "passing SIGINT" in err
    for tier in ("slow1", "slow2"):
        assert (tmp_path / "marks" / tier).read_text() == "interrupted\n"
        assert f"lab tiers: {tier} exited 130" in out
    # Nothing of the session is left: the tiers' sleeps ended with them.
    left = subprocess.run(["pgrep", "-s", str(proc.pid)], capture_output=True, text=True)
    assert left.stdout.strip() == ""
