"""`gpucluster verify --no-burn` on 3 lab GPU nodes with two compute rails each, one rail of one
node throttled with tc tbf to ~20 Mbit/s: the wall time (target: under 60 s) and whom the verdict
names (the throttled node, on that rail, and nothing else).

Needs root (it boots lab `benchrail`, CIDRs 10.87.x, state under /tmp). Run it under the lab lock:
``flock /tmp/gpucluster-lab.lock python bench/run.py rail_fault``.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

# run.py loads each benchmark by its path: the shared helpers are imported from the folder beside it.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from lab_fault import RAILS, THROTTLED, Fault, measure

FAULT = Fault(name="benchrail", octet=87, devices=(RAILS[1],), rate="20mbit", target_s=60.0)


def run() -> dict[str, Any]:
    target = (f"verify --no-burn < {FAULT.target_s:.0f} s on 3 lab nodes with {THROTTLED}'s rail {RAILS[1]} "
              f"at {FAULT.rate}, naming that node and rail only")
    out = measure(FAULT, target)
    if "named_slow_per_rail" in out:
        out["met"] = out["met"] and out["named_slow_per_rail"] == {RAILS[0]: [], RAILS[1]: [THROTTLED]}
    return out
