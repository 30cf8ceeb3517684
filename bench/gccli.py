"""The `gpucluster` CLI as the lab benchmarks call it: one child process per command, run from the
checkout, its output captured, never raising on a non-zero exit (the benchmark records it)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
GC = [sys.executable, "-m", "gpucluster"]


def gc(*args: str, timeout: int = 3600) -> subprocess.CompletedProcess[str]:
    """`python -m gpucluster ARGS...` in the checkout; a run past `timeout` raises TimeoutExpired."""
    return subprocess.run([*GC, *args], capture_output=True, text=True, timeout=timeout, cwd=REPO, check=False)


def tail(proc: subprocess.CompletedProcess[str], n: int = 8) -> list[str]:
    """The last `n` lines of what the command said: stderr, or stdout when stderr is empty."""
    return (proc.stderr or proc.stdout or "").strip().splitlines()[-n:]
