"""`gpucluster verify --no-burn` on 3 lab GPU nodes, one of them throttled on its whole fabric (every
compute rail, where the all-reduce runs) with tc tbf to ~20 Mbit/s: the wall time (target: under
90 s, every measurement bounded by its budget) and the verdict it gave (it must name the throttled
node slow, and only it).

Needs root (it boots lab `benchslow`, CIDRs 10.86.x, state under /tmp). Run it under the lab lock:
``flock /tmp/gpucluster-lab.lock python bench/run.py slow_fabric``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# run.py loads each benchmark by its path: the shared helpers are imported from the folder beside it.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lab_fault import RAILS, THROTTLED, Fault, measure

FAULT = Fault(name="benchslow", octet=86, devices=RAILS, rate="20mbit", target_s=90.0)


def run() -> dict[str, Any]:
    target = (f"verify --no-burn < {FAULT.target_s:.0f} s on 3 lab nodes with {THROTTLED}'s fabric "
              f"(every rail) at {FAULT.rate}, naming it")
    return measure(FAULT, target)
