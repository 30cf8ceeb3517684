"""No-op converges of one lab, alternating two controller environments (A/B at equal load).

    python bench/compare_ansible_core.py OLD_VENV_PYTHON NEW_VENV_PYTHON [ROUNDS]

Brings up the 3-node converge bench lab (`benchconv3`), converges it once with the second
environment, then runs ROUNDS no-op converges with each environment in turn, and prints one JSON
line: each environment's ansible-core and its no-op times. Both environments run this checkout
(PYTHONPATH), so only the controller (Python, ansible-core) differs. Needs root; takes the lab down.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
sys.path.insert(0, str(HERE))

from bench_converge import _stack  # noqa: E402


def _gc(python: str, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), PATH=f"{Path(python).parent}{os.pathsep}{os.environ['PATH']}")
    res = subprocess.run([python, "-m", "gpucluster", *args], capture_output=True, text=True, env=env)
    if check and res.returncode != 0:
        raise SystemExit(f"gpucluster {' '.join(args)} ({python}): rc {res.returncode}: {res.stderr[-800:]}")
    return res


def _version(python: str) -> str:
    code = "import ansible.release as r, sys; print(r.__version__, sys.version.split()[0])"
    return subprocess.run([python, "-c", code], capture_output=True, text=True, check=True).stdout.strip()


def main(argv: list[str]) -> int:
    old, new = argv[0], argv[1]
    rounds = int(argv[2]) if len(argv) > 2 else 2
    with tempfile.TemporaryDirectory(prefix="bench-ab-") as tmp:
        stack = Path(tmp) / "Pulumi.benchconv3.yaml"
        _stack(3, stack)
        runs = str(Path(tmp) / "runs")
        _gc(new, "lab", "down", "--stack", str(stack), check=False)
        _gc(new, "lab", "up", "--stack", str(stack))
        try:
            _gc(new, "converge", "--stack", str(stack), "--runs-dir", runs)
            times: dict[str, list[float]] = {old: [], new: []}
            loads: list[float] = []
            for _ in range(rounds):
                for python in (old, new):
                    loads.append(round(os.getloadavg()[0], 2))
                    started = time.monotonic()
                    res = _gc(python, "converge", "--stack", str(stack), "--runs-dir", runs, check=False)
                    if res.returncode != 0:
                        print(res.stderr[-1500:], file=sys.stderr)
                    times[python].append(round(time.monotonic() - started, 1))
        finally:
            _gc(new, "lab", "down", "--stack", str(stack), check=False)
    print(json.dumps({"nodes": 3, "rounds": rounds, "load_avg_1m_before_each": loads,
                      "old": {"controller": _version(old), "noop_s": times[old]},
                      "new": {"controller": _version(new), "noop_s": times[new]}}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
